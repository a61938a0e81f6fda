/*
 * gemm_kquants_avx2.c - AVX2 matrix kernels for the K-quants with Q8_K activations: Q4_K, Q5_K,
 * Q6_K, in ggml's AVX2 order (muse_x86_vec_dot, x86_numerics.h), bit for bit:
 *   lane l = exact int32 sum of scale * code * a over the elements e, (e % 32) / 4 == l
 *            (32 consecutive elements per register: maddubs + madd put elements 4l..4l+3 in l)
 *   acc    = fma(d_a * d_w, (float)lanes, acc)                 8 float lanes
 *   Q4_K:  accm = fma(-d_a * dmin_w, (float)madd(mins, pairs of bsums), accm)   4 float lanes
 *   Q5_K:  summs = fma(-d_a * dmin_w, (float)(sum of those four), summs)       one float
 *   result = hsum8(acc) [+ (accm0 + accm2) + (accm1 + accm3) | + summs]
 * The activation rows are the reference Q8_K bytes (no layout change).
 *
 * Tiles: one weight row x NY activation rows per pass. Decode (1 activation row) prefetches the
 * weight stream PF_AHEAD bytes ahead; prefill unpacks each weight block once per group of up to 8
 * activation rows.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row (prefill) */
/* Bytes of the weight stream prefetched ahead at decode: 1 KiB gave +5-10% whole-model decode
 * over none; 512 B, 2 and 4 KiB measured in between (docs/perf.md). */
#define PF_AHEAD 1024

/* Keep v in a register at this point: stops the compiler from re-associating the integer
 * accumulation across chunks into a tree of spilled partial products (GCC does, at NY = 8). */
#define K_PIN(v) __asm__("" : "+x"(v))

/* Prefetch the cache lines of the `bytes` bytes at p + PF_AHEAD (decode only). */
MUSE_AVX2_INLINE void k_prefetch(const uint8_t *p, size_t bytes, const int on) {
    if (!on) return;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_AHEAD + o, _MM_HINT_T0);
}

// ---- Q4_K / Q5_K ------------------------------------------------------------------------

/* The 8 scales and 8 mins of a Q4_K/Q5_K super-block (spec 2.5; blk = the block: d, dmin, then
 * the 12 scale bytes S) as int16 [sc0..sc7, mn0..mn7], without scalar work:
 *   sc0-3 = S0-3 & 63, sc4-7 = (S8-11 & 15) | (S0-3 >> 6) << 4,
 *   mn0-3 = S4-7 & 63, mn4-7 = (S8-11 >> 4) | (S4-7 >> 6) << 4. */
MUSE_AVX2_INLINE __m256i k4_scales_mins(const uint8_t *blk) {
    const __m128i x = _mm_loadu_si128((const __m128i *)blk);                     /* S[k] = byte 4 + k */
    const __m128i v1 = _mm_shuffle_epi8(x, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m128i lo = _mm_blend_epi16(v1, _mm_srli_epi16(v1, 4), 0xC0);          /* bytes 12-15: S8-11 >> 4 */
    const __m128i v2 = _mm_shuffle_epi8(x, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v2, 2), _mm_set1_epi8(0x30)); /* (v >> 6) << 4 */
    const __m128i m = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    return _mm256_cvtepu8_epi16(_mm_or_si128(_mm_and_si128(lo, m), hi));
}

/* Scale j (0..7) of the int16 scales in both 128-bit halves, in every int16 lane. */
MUSE_AVX2_INLINE __m256i k4_scale(__m256i sc, int j) {
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
}

/* The 8 sub-block sums of an activation block (bsums[2j] + bsums[2j+1], int16) for the mins. */
MUSE_AVX2_INLINE __m128i q8k_pair_sums(const struct muse_block_q8_K *a) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)a->bsums),
                          _mm_loadu_si128((const __m128i *)(const void *)(a->bsums + 8)));
}

/* One weight row of Q4_K (high = 0) or Q5_K (high = 1) against NY activation rows. The mins of
 * activation rows 2p and 2p+1 share one vector: Q4_K's lanes as [2p: k0 k1, 2p+1: k0 k1 | 2p: k2
 * k3, 2p+1: k2 k3], Q5_K's two scalar sums in lanes 0 and 1; one hadd, madd, convert and FMA per
 * pair of rows. */
MUSE_AVX2_INLINE void k45_row(int64_t nb, const uint8_t *w, size_t bb, const int high, const char *act,
                              size_t act_stride, const int NY, float *out, int64_t out_stride) {
    const int NP = NY / 2;
    __m256 acc[NY_MAX], accm2[NY_MAX / 2];
    __m128 accm[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < NY; r++) {
        acc[r] = _mm256_setzero_ps();
        accm[r] = _mm_setzero_ps();
    }
    MUSE_UNROLL
    for (int p = 0; p < NP; p++) accm2[p] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * bb;
        k_prefetch(b, bb, NY == 1);
        const __m256i ms = k4_scales_mins(b);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
        int32_t d_dmin;
        memcpy(&d_dmin, b, 4);
        const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(d_dmin)); /* d, dmin */
        /* both layouts: d, dmin, scales[12]; Q5_K then qh[32]; then qs[128] */
        const uint8_t *qs = b + (high ? 48 : 16);
        const __m256i hbits = high ? avx2_load(b + 16) : _mm256_setzero_si256();
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) sumi[r] = _mm256_setzero_si256();
        MUSE_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256i q = avx2_load(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (high) { /* the 5th bits of sub-blocks 2c and 2c+1 as 0/16 */
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4));
            }
            const __m256i s_lo = k4_scale(sc, 2 * c), s_hi = k4_scale(sc, 2 * c + 1);
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const int8_t *aq = a[ib].qs + 64 * c;
                sumi[r] = avx2_madd_acc(sumi[r], s_lo, _mm256_maddubs_epi16(lo, avx2_load(aq)));
                sumi[r] = avx2_madd_acc(sumi[r], s_hi, _mm256_maddubs_epi16(hi, avx2_load(aq + 32)));
                K_PIN(sumi[r]);
            }
        }
        const float dw = _mm_cvtss_f32(dd);
        MUSE_UNROLL
        for (int r = 0; r < 2 * NP; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[ib].d * dw), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
        /* mins: accm -= (d_a * dmin_w) * prod (fnmadd: the bits of fma(-d_a * dmin_w, prod, accm)) */
        if (NP) {
            const __m256i mnx = _mm256_permute4x64_epi64(ms, 0xFA); /* [mn0-3, mn0-3 | mn4-7, mn4-7] */
            const __m256 dmw = _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dd)));
            MUSE_UNROLL
            for (int p = 0; p < NP; p++) {
                const struct muse_block_q8_K *a0 = (const void *)(act + 2 * p * act_stride);
                const struct muse_block_q8_K *a1 = (const void *)(act + (2 * p + 1) * act_stride);
                const __m256i ps = _mm256_hadd_epi16(avx2_load(a0[ib].bsums), avx2_load(a1[ib].bsums));
                const __m256i prod = _mm256_madd_epi16(mnx, ps);
                if (high) { /* Q5_K: rows 2p, 2p+1 in lanes 0, 1 of one scalar sum each */
                    const __m128i t = _mm_add_epi32(_mm256_castsi256_si128(prod), _mm256_extracti128_si256(prod, 1));
                    const __m128 adv = _mm_unpacklo_ps(_mm_set_ss(a0[ib].d), _mm_set_ss(a1[ib].d));
                    const __m128 sm = _mm256_castps256_ps128(accm2[p]);
                    accm2[p] = _mm256_castps128_ps256(_mm_fnmadd_ps(_mm_mul_ps(adv, _mm256_castps256_ps128(dmw)),
                                                                    _mm_cvtepi32_ps(_mm_hadd_epi32(t, t)), sm));
                } else {
                    const __m256 adv = _mm256_blend_ps(_mm256_set1_ps(a0[ib].d), _mm256_set1_ps(a1[ib].d), 0xCC);
                    accm2[p] = _mm256_fnmadd_ps(_mm256_mul_ps(adv, dmw), _mm256_cvtepi32_ps(prod), accm2[p]);
                }
            }
        }
        if (2 * NP < NY) {
            const __m128i mn = _mm256_extracti128_si256(ms, 1);
            MUSE_UNROLL
            for (int r = 2 * NP; r < NY; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const __m128 dv = _mm_mul_ps(dd, _mm_set1_ps(a[ib].d)); /* d_a * d_w, d_a * dmin_w */
                acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                const __m128i prod = _mm_madd_epi16(mn, q8k_pair_sums(&a[ib]));
                if (high) {
                    __m128i t = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
                    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 1));
                    accm[r] = _mm_fnmadd_ss(_mm_movehdup_ps(dv), _mm_cvtepi32_ps(t), accm[r]);
                } else {
                    accm[r] = _mm_fnmadd_ps(_mm_permute_ps(dv, 0x55), _mm_cvtepi32_ps(prod), accm[r]);
                }
            }
        }
    }
    MUSE_UNROLL
    for (int p = 0; p < NP; p++) {
        if (high) {
            const __m128 sm = _mm256_castps256_ps128(accm2[p]);
            out[2 * p * out_stride] = avx2_hsum_ps(acc[2 * p]) + _mm_cvtss_f32(sm);
            out[(2 * p + 1) * out_stride] = avx2_hsum_ps(acc[2 * p + 1]) + _mm_cvtss_f32(_mm_movehdup_ps(sm));
            continue;
        }
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(accm2[p]), _mm256_extractf128_ps(accm2[p], 1));
        out[2 * p * out_stride] = avx2_hsum_ps(acc[2 * p]) + _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
        const __m128 t2 = _mm_movehl_ps(t, t);
        out[(2 * p + 1) * out_stride] = avx2_hsum_ps(acc[2 * p + 1]) + _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
    }
    MUSE_UNROLL
    for (int r = 2 * NP; r < NY; r++) {
        __m128 m = accm[r];
        if (!high) {
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
        }
        out[r * out_stride] = avx2_hsum_ps(acc[r]) + _mm_cvtss_f32(m);
    }
}

// ---- Q6_K ------------------------------------------------------------------------------

/* One weight row of Q6_K against NY activation rows. Prefill: codes (0..63) - 32 as |q| and sign
 * for maddubs, the same exact int16 pair sums as ggml's maddubs(q, a) - maddubs(32, a), which
 * decode uses (fewer ops when the weight-side work is not shared). */
MUSE_AVX2_INLINE void q6_row(int64_t nb, const uint8_t *w, const char *act, size_t act_stride, const int NY,
                             float *out, int64_t out_stride) {
    __m256 acc[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < NY; r++) acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), m32 = _mm256_set1_epi8(32);
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_q6_K *b = (const void *)(w + ib * sizeof(struct muse_block_q6_K));
        k_prefetch((const uint8_t *)b, sizeof *b, NY == 1);
        /* int16 scales s0..s15; lo4 = s0..s7 in both halves, hi4 = s8..s15 in both halves */
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m256i s_lo4 = _mm256_permute2x128_si256(s16, s16, 0x00);
        const __m256i s_hi4 = _mm256_permute2x128_si256(s16, s16, 0x11);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) sumi[r] = _mm256_setzero_si256();
        MUSE_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = avx2_load(b->ql + 64 * h), ql1 = avx2_load(b->ql + 64 * h + 32);
            const __m256i qh = avx2_load(b->qh + 32 * h);
            MUSE_UNROLL
            for (int k = 0; k < 4; k++) {
                const __m256i l4 = (k & 1) ? ql1 : ql0;
                const __m256i lo = k < 2 ? _mm256_and_si256(l4, m4) : _mm256_and_si256(_mm256_srli_epi16(l4, 4), m4);
                /* bits 2k, 2k+1 of qh moved to bits 4, 5 */
                const __m256i hs = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2)
                                 : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
                const __m256i qu = _mm256_or_si256(lo, _mm256_and_si256(hs, m30)); /* 0..63 */
                const __m256i q = _mm256_sub_epi8(qu, m32);
                const __m256i aq = _mm256_sign_epi8(q, q);
                /* chunk 4h + k: scale 8h + 2k on elements 0-15, 8h + 2k + 1 on 16-31 */
                const char j0 = (char)(4 * k), j1 = (char)(4 * k + 1), j2 = (char)(4 * k + 2), j3 = (char)(4 * k + 3);
                const __m256i sv = _mm256_shuffle_epi8(h ? s_hi4 : s_lo4,
                                                       _mm256_setr_epi8(j0, j1, j0, j1, j0, j1, j0, j1, j0, j1, j0, j1, j0, j1, j0, j1,
                                                                        j2, j3, j2, j3, j2, j3, j2, j3, j2, j3, j2, j3, j2, j3, j2, j3));
                if (NY == 1) { /* decode: ggml's form, 2 ops fewer than the sign form per chunk */
                    const __m256i a8 = avx2_load(((const struct muse_block_q8_K *)(const void *)act)[ib].qs + 128 * h + 32 * k);
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(qu, a8), _mm256_maddubs_epi16(m32, a8));
                    sumi[0] = avx2_madd_acc(sumi[0], sv, p);
                    continue;
                }
                MUSE_UNROLL
                for (int r = 0; r < NY; r++) {
                    const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                    const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(avx2_load(a[ib].qs + 128 * h + 32 * k), q));
                    sumi[r] = avx2_madd_acc(sumi[r], sv, p);
                    K_PIN(sumi[r]);
                }
            }
        }
        const float dw = avx2_h2f(b->d);
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[ib].d * dw), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < NY; r++) out[r * out_stride] = avx2_hsum_ps(acc[r]);
}

// ---- drivers ---------------------------------------------------------------------------

/* Decode: row after row (2 or 4 rows side by side streamed slower from memory). Prefill: per
 * group of up to NY_MAX activation rows (kept in L1), every weight row of the tile. */
MUSE_AVX2_INLINE void k45_gemm(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                               size_t act_stride, int n_act, float *out, int64_t out_stride, size_t bb,
                               const int high) {
    const int64_t nb = n / 256;
    const uint8_t *wb = w;
#define CALL(NY)                                                                                               \
    for (int64_t i = 0; i < n_rows; i++) k45_row(nb, wb + i * w_stride, bb, high, a, act_stride, NY, o + i, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
}

bool MUSE_ISA_NAME(muse_gemm_q4_K)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
    k45_gemm(n, w, w_stride, n_rows, act, act_stride, n_act, out, out_stride, sizeof(struct muse_block_q4_K), 0);
    return true;
}

bool MUSE_ISA_NAME(muse_gemm_q5_K)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
    k45_gemm(n, w, w_stride, n_rows, act, act_stride, n_act, out, out_stride, sizeof(struct muse_block_q5_K), 1);
    return true;
}

bool MUSE_ISA_NAME(muse_gemm_q6_K)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
    const int64_t nb = n / 256;
    const uint8_t *wb = w;
#define CALL(NY) for (int64_t i = 0; i < n_rows; i++) q6_row(nb, wb + i * w_stride, a, act_stride, NY, o + i, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    return true;
}
