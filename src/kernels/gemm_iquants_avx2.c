/*
 * gemm_iquants_avx2.c - AVX2 matrix kernels for the I-quants with Q8_K activations (IQ2_XXS).
 * The order is ggml's AVX2 one (ggml_vec_dot_iq2_xxs_q8_K; muse_x86_vec_dot in x86_numerics.h):
 * per super-block, int32 lane l (0..7) = the exact sum over the 8 sub-blocks of (2 * ls + 1) *
 * (products of elements 4l..4l+3); acc[l] = fma(d_w * d_a, (float)lane, acc[l]); the result is
 * 0.125f * hsum(acc) (avx2_hsum_ps): bit for bit muse_x86_vec_dot. Only the integer lane sums
 * are formed differently, and they are exact.
 *
 * Per super-block the sign bytes (7-bit field | parity << 7) and the scales of all 8 groups are
 * computed with a few vector ops (iq2_xxs_side); per group the signs are a byte shuffle + test,
 * the scale an in-register shuffle, the grid magnitudes 4 table loads.
 * Decode: 2 weight rows side by side (the per-group work is a latency chain of loads and
 * shuffles; two independent rows fill the pipeline), the signs applied to the activation bytes.
 * Prefill: each weight super-block is decoded once per call chunk into signed int8 weights (stack
 * buffer) and reused by every group of 8 activation rows; the activation bytes are offset by 128
 * once per super-block and group of rows (unsigned), so each (group, row) pair costs maddubs +
 * madd + add (see iq2_xxs_rows_d). Decoding per group of 8 activation rows instead (the weight
 * unpacking then costs ~2 vector ops per pair): 198 vs 121 us at 2048 x 64 x 64.
 *
 * Measured alternatives (kernel lab / a direct timing loop, 1 core, CPU time, best of many):
 * AVX2 gathers (vpgatherdq) for the grid and sign entries were ~2x slower than scalar-indexed
 * loads; sign bytes from a 128-entry table (4 lookups per group) instead of the vector
 * side data: 44.4 vs 35.6 us (2048 x 256 rows, 1 activation row; with 2 rows per tile); grid
 * entries as 64-bit broadcasts merged by blends instead of inserts: no better (36.9 us); the
 * group scales from a 16-entry table: slower (44.9 us); grid indices from one 32-bit load and
 * shifts instead of 4 byte loads: 39.0 vs 35.5 us; 4 or 6 activation rows per prefill pass
 * instead of 8: 330 / 285 vs 241 us (2048 x 64 x 64).
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row (prefill) */

// ---- IQ2_XXS ---------------------------------------------------------------------------

/*
 * The side data of a super-block, for all 8 groups at once with a few vector ops, so that
 * each group costs only in-register shuffles besides its 4 grid loads:
 *   s03/s47: 32-bit unit g (g < 4 / g >= 4; both 128-bit halves hold the same 4 units) = the 4
 *            sign bytes of group g, byte k = ksigns of the 7-bit field k of B:
 *            field | parity(field) << 7 (element 8k + j negative when bit j is set);
 *   l03/l47: the same for 2 * ls + 1 in both int16 halves of the unit.
 */
struct iq2_xxs_side { __m256i s03, s47, l03, l47; };

MUSE_AVX2_INLINE struct iq2_xxs_side iq2_xxs_side(const struct muse_block_iq2_xxs *b) {
    const __m256 q0 = _mm256_castsi256_ps(avx2_load(b->qs));       /* A0 B0 A1 B1 | A2 B2 A3 B3 */
    const __m256 q1 = _mm256_castsi256_ps(avx2_load(b->qs + 16));  /* A4 B4 A5 B5 | A6 B6 A7 B7 */
    /* B0 B1 B4 B5 | B2 B3 B6 B7 -> B0 .. B7 */
    const __m256i B = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(q0, q1, 0xdd)), 0xd8);
    const __m256i m7 = _mm256_set1_epi32(0x7f);
    __m256i s = _mm256_and_si256(B, m7);
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 1), _mm256_slli_epi32(m7, 8)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 2), _mm256_slli_epi32(m7, 16)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 3), _mm256_slli_epi32(m7, 24)));
    /* bit 0 of each byte of p = parity of that byte (bit 7 is clear) */
    __m256i p = _mm256_xor_si256(s, _mm256_srli_epi32(s, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    s = _mm256_or_si256(s, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
    __m256i ls = _mm256_srli_epi32(B, 28);
    ls = _mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1));
    ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
    struct iq2_xxs_side d = {_mm256_permute4x64_epi64(s, 0x44), _mm256_permute4x64_epi64(s, 0xee),
                             _mm256_permute4x64_epi64(ls, 0x44), _mm256_permute4x64_epi64(ls, 0xee)};
    return d;
}

/* The grid magnitudes (unsigned) of group g, from byte indices. */
MUSE_AVX2_INLINE __m256i iq2_xxs_grid(const struct muse_block_iq2_xxs *b, int g) {
    const uint8_t *ai = (const uint8_t *)(b->qs + 4 * g);
    return _mm256_set_epi64x((long long)muse_iq2xxs_grid[ai[3]], (long long)muse_iq2xxs_grid[ai[2]],
                             (long long)muse_iq2xxs_grid[ai[1]], (long long)muse_iq2xxs_grid[ai[0]]);
}

/* The signs of group g as bytes 0xff (negative) / 0x00 (g: a constant after unrolling). */
MUSE_AVX2_INLINE __m256i iq2_xxs_negmask(const struct iq2_xxs_side *sd, const int g) {
    const int h = g & 3;
    /* byte j <- sign byte j / 8 of unit h, then test bit j % 8 */
    const __m256i ctl = _mm256_setr_epi8(4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h + 1, 4 * h + 1,
                                         4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 2,
                                         4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2,
                                         4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3,
                                         4 * h + 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i sb = _mm256_shuffle_epi8(g < 4 ? sd->s03 : sd->s47, ctl);
    return _mm256_cmpeq_epi8(_mm256_and_si256(sb, sel), sel);
}

/* 2 * ls + 1 of group g in every int16 lane */
MUSE_AVX2_INLINE __m256i iq2_xxs_ls(const struct iq2_xxs_side *sd, const int g) {
    const __m256i v = g < 4 ? sd->l03 : sd->l47;
    switch (g & 3) {
    case 0: return _mm256_shuffle_epi32(v, 0x00);
    case 1: return _mm256_shuffle_epi32(v, 0x55);
    case 2: return _mm256_shuffle_epi32(v, 0xaa);
    default: return _mm256_shuffle_epi32(v, 0xff);
    }
}

/* Decode: WR weight rows x 1 activation row (independent chains side by side: the per-group
 * work is a chain of loads and shuffles, so interleaving rows hides its latency). */
MUSE_AVX2_INLINE void iq2_xxs_gemv_tile(int64_t nb, const char *w, size_t w_stride, const struct muse_block_q8_K *a,
                                        const int WR, float *out) {
    __m256 acc[4];
    MUSE_UNROLL
    for (int k = 0; k < WR; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq2_xxs *b[4];
        struct iq2_xxs_side sd[4];
        __m256i sumi[4];
        MUSE_UNROLL
        for (int k = 0; k < WR; k++) {
            b[k] = (const struct muse_block_iq2_xxs *)(w + k * w_stride) + ib;
            sd[k] = iq2_xxs_side(b[k]);
            sumi[k] = _mm256_setzero_si256();
        }
        MUSE_UNROLL
        for (int g = 0; g < 8; g++) {
            const __m256i q8 = avx2_load(a[ib].qs + 32 * g);
            MUSE_UNROLL
            for (int k = 0; k < WR; k++) {
                const __m256i signs = _mm256_or_si256(iq2_xxs_negmask(&sd[k], g), _mm256_set1_epi8(1));
                const __m256i p = _mm256_maddubs_epi16(iq2_xxs_grid(b[k], g), _mm256_sign_epi8(q8, signs));
                sumi[k] = avx2_madd_acc(sumi[k], p, iq2_xxs_ls(&sd[k], g));
            }
        }
        MUSE_UNROLL
        for (int k = 0; k < WR; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(avx2_h2f(b[k]->d) * a[ib].d), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
    }
    MUSE_UNROLL
    for (int k = 0; k < WR; k++) out[k] = 0.125f * avx2_hsum_ps(acc[k]);
}

#define IQ_GEMV_WR 2 /* weight rows per decode tile (1: 36.8 us, 2: 35.6, 3-4: 37-38 in the loop above) */
MUSE_AVX2_INLINE void iq2_xxs_gemv(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const void *act,
                                   float *out) {
    int64_t i = 0;
    for (; i + IQ_GEMV_WR <= n_rows; i += IQ_GEMV_WR) iq2_xxs_gemv_tile(nb, w + i * w_stride, w_stride, act, IQ_GEMV_WR, out + i);
    for (; i < n_rows; i++) iq2_xxs_gemv_tile(nb, w + i * w_stride, w_stride, act, 1, out + i);
}

/*
 * Prefill. Each weight super-block is decoded ONCE per call chunk (iq2_xxs_decode: signed
 * weights, group scales, offset correction, d) into a stack buffer and then reused by every
 * group of NY activation rows; the activation bytes of a super-block are offset by 128
 * (unsigned: au = a + 128) once per group of rows, so each (group, activation row) pair costs
 * maddubs(au, w) + madd(., ls) + add. The offset is removed per super-block with the weight
 * row's own sum_g ls_g * 128 * (w sums of 4):
 *     sum_g ls_g * sum4((a + 128) * w) - sum_g ls_g * 128 * sum4(w) = sum_g ls_g * sum4(a * w)
 * exactly (int16 pairs: 255 * 43 * 2 < 32768; int32 lanes < 2^24). The float steps are those of
 * the decode path, super-block after super-block.
 */
struct iq2_xxs_dec {
    __m256i corr;       /* sum_g ls_g * 128 * (w sums of 4), int32 lanes */
    int8_t q[256];      /* the signed weights +-{8, 25, 43} */
    uint32_t ls[8];     /* 2 * ls + 1 of each group in both int16 halves */
    float d;
};
#define IQ_RC 16                /* most weight rows per call chunk */
/* Stack budget for the decoded super-blocks of a chunk (352 bytes each): 192 KiB holds 16 rows
 * of 6656 and 7 rows of 19968 elements (the 30B FFN); with 48 KiB (5 and 1 rows) the per-chunk
 * activation offsetting dominated: kernel_lab -m 19968x6656 -P 256 -p 64, 1 core, CPU time,
 * 55 -> 78-87 GOP/s, -m 6656x19968 75-81 -> 97-102; 30B 2-layer slice pp128 74 -> 101 t/s. */
#define IQ_DEC_BYTES (192 * 1024)
#define IQ_DEC_MAX (IQ_DEC_BYTES / (int)sizeof(struct iq2_xxs_dec))

MUSE_AVX2_INLINE void iq2_xxs_decode(const struct muse_block_iq2_xxs *b, struct iq2_xxs_dec *o) {
    const struct iq2_xxs_side sd = iq2_xxs_side(b);
    const __m256i off = _mm256_set1_epi8((char)0x80);
    __m256i corr = _mm256_setzero_si256();
    MUSE_UNROLL
    for (int g = 0; g < 8; g++) {
        const __m256i q = _mm256_sign_epi8(iq2_xxs_grid(b, g), _mm256_or_si256(iq2_xxs_negmask(&sd, g), _mm256_set1_epi8(1)));
        _mm256_storeu_si256((__m256i *)(o->q + 32 * g), q);
        corr = avx2_madd_acc(corr, _mm256_maddubs_epi16(off, q), iq2_xxs_ls(&sd, g));
    }
    _mm_storeu_si128((__m128i *)o->ls, _mm256_castsi256_si128(sd.l03));
    _mm_storeu_si128((__m128i *)(o->ls + 4), _mm256_castsi256_si128(sd.l47));
    o->corr = corr;
    o->d = avx2_h2f(b->d);
}

/* n_rows <= IQ_RC decoded weight rows (dec: [n_rows][nb]) x NY activation rows */
MUSE_AVX2_INLINE void iq2_xxs_rows_d(int64_t nb, const struct iq2_xxs_dec *dec, int64_t n_rows, const char *act,
                                     size_t act_stride, const int NY, float *out, int64_t out_stride) {
    __m256 acc[IQ_RC][NY_MAX];
    _Alignas(32) uint8_t au[NY_MAX][256];
    float da[NY_MAX];
    for (int64_t i = 0; i < n_rows; i++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) acc[i][r] = _mm256_setzero_ps();
    const __m256i off = _mm256_set1_epi8((char)0x80);
    for (int64_t j = 0; j < nb; j++) {
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) {
            const struct muse_block_q8_K *a = (const struct muse_block_q8_K *)(act + r * act_stride) + j;
            da[r] = a->d;
            MUSE_UNROLL
            for (int c = 0; c < 8; c++)
                _mm256_store_si256((__m256i *)&au[r][32 * c], _mm256_xor_si256(avx2_load(a->qs + 32 * c), off));
        }
        for (int64_t i = 0; i < n_rows; i++) {
            const struct iq2_xxs_dec *dj = &dec[i * nb + j];
            __m256i sumi[NY_MAX];
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) sumi[r] = _mm256_setzero_si256();
            MUSE_UNROLL
            for (int g = 0; g < 8; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(dj->q + 32 * g));
                const __m256i ls = _mm256_set1_epi32((int)dj->ls[g]);
                MUSE_UNROLL
                for (int r = 0; r < NY; r++) {
                    const __m256i p = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)&au[r][32 * g]), q);
                    sumi[r] = avx2_madd_acc(sumi[r], p, ls);
                    /* keep the sum in a register here: otherwise GCC hoists the products of
                     * all 8 groups and spills them */
                    __asm__("" : "+x"(sumi[r]));
                }
            }
            MUSE_UNROLL
            for (int r = 0; r < NY; r++)
                acc[i][r] = _mm256_fmadd_ps(_mm256_set1_ps(dj->d * da[r]),
                                            _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], dj->corr)), acc[i][r]);
        }
    }
    for (int64_t i = 0; i < n_rows; i++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) out[r * out_stride + i] = 0.125f * avx2_hsum_ps(acc[i][r]);
}

bool MUSE_ISA_NAME(muse_gemm_iq2_xxs)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                            size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
    const int64_t nb = n / 256;
    if (n_act == 1) {
        iq2_xxs_gemv(nb, w, w_stride, n_rows, act, out);
        return true;
    }
    /* weight rows per chunk: as many as the decode buffer holds (at least 1, at most IQ_RC);
     * a row longer than the buffer falls back to the decode kernel per activation row */
    const int64_t rc = IQ_DEC_MAX / nb < IQ_RC ? IQ_DEC_MAX / nb : IQ_RC;
    if (rc < 1) {
        for (int r = 0; r < n_act; r++)
            iq2_xxs_gemv(nb, w, w_stride, n_rows, (const char *)act + (size_t)r * act_stride, out + (int64_t)r * out_stride);
        return true;
    }
    struct iq2_xxs_dec dec[IQ_DEC_MAX];
    for (int64_t c0 = 0; c0 < n_rows; c0 += rc) {
        const int64_t cn = n_rows - c0 < rc ? n_rows - c0 : rc;
        for (int64_t i = 0; i < cn; i++) {
            const struct muse_block_iq2_xxs *wb = (const void *)((const char *)w + (c0 + i) * w_stride);
            for (int64_t j = 0; j < nb; j++) iq2_xxs_decode(&wb[j], &dec[i * nb + j]);
        }
#define CALL(NY) iq2_xxs_rows_d(nb, dec, cn, a, act_stride, NY, o + c0, out_stride)
        MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    }
    return true;
}
