/*
 * gemm_legacy_avx2.c - AVX2 matrix kernels for the 32-element legacy blocks with Q8_0
 * activations: Q8_0 and Q4_0, in ggml's x86 order (ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0 on
 * AVX2, llamafile tinyBLAS; muse_x86_vec_dot in x86_numerics.h):
 *     per block:  lane l (0..7) = exact int32 sum of the products of elements 4l..4l+3
 *                 (maddubs + madd), d = d_w * d_a (f32),
 *                 acc[l] = fma(d, (float)lane, acc[l])
 *     at the end: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))   (avx2_hsum_ps)
 * which equals muse_x86_vec_dot bit for bit (maddubs cannot saturate: |w| <= 128, |a| <= 127).
 *
 * Decode (1 activation row): tiles of GEMV_WR weight rows, the next tile's rows prefetched
 * PF_BYTES ahead; the scales of 8 blocks of a row are gathered and converted with one
 * vcvtph2ps and multiplied by the activation scales with one vector multiply.
 * Prefill (n activation rows): per chunk of up to CHUNK_ROWS weight rows the weight and
 * activation scales are converted to floats once; tiles of WR x NY (weight x activation rows)
 * compute the scale products d_w * d_a of 8 blocks with one vector multiply per pair and load
 * them back as broadcasts, so the per-block work per pair is sign, maddubs, madd, convert, FMA.
 * Rows longer than DAS_MAX blocks take the same tiles with the scales converted per block.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

/*
 * Measured (kernel_lab -c, 1 core, best over alternating rounds; load ~4-8):
 * prefill tiles WR x NY at 2048 x 1024 x 64 rows, q8_0 / q4_0 GOP/s: 2x4 80.5 / 68.3, 3x4 84.3 /
 * 71.3, 4x3 79.8 / 68.2, 2x6 76.4 / 71.3 (the old 2x4 with per-pair scale multiply: 64.7 / 55.5).
 * Decode at 6656 x 19968 (DRAM), q8_0 GB/s over 2-5 runs each (noisy): 4 rows 13.1-14.9, 4 rows
 * + prefetch 512/1024/2048 bytes ahead in the same rows 15.2-16.9 / 15.9-17.0 / 14.5-16.3, 8 rows
 * 16.4-19.9, 8 rows + next-tile prefetch 1 KiB ahead 15.9-21.5 (best seen); scales of 8 blocks
 * via a u16 array and one wide load (store forwarding fails) vs inserts: q4_0 10.0-10.1 vs
 * 10.4-10.7 GB/s.
 */
#define NY_MAX 4       /* activation rows per prefill tile */
#define GEMM_WR 3      /* weight rows per prefill tile */
#define GEMV_WR 8      /* weight rows per tile at decode (1 activation row) */
#define CHUNK_ROWS 16  /* weight rows whose scales are converted once per call chunk */
#define DAS_MAX 640    /* most blocks per row for the pre-converted scale path (stack: ~52 KB) */
#define PF_BYTES 1024  /* decode: prefetch distance of the next tile's rows */

enum legacy_kind { K_Q8_0, K_Q4_0 };

/* block size in bytes, and the signed int8 weights of block ib of a row, unpacked */
#define BLK(kind) ((kind) == K_Q8_0 ? (size_t)sizeof(struct muse_block_q8_0) : (size_t)sizeof(struct muse_block_q4_0))

MUSE_AVX2_INLINE __m256i legacy_unpack(const char *row, int64_t ib, const int kind) {
    if (kind == K_Q8_0) return avx2_load(((const struct muse_block_q8_0 *)row)[ib].qs);
    return _mm256_sub_epi8(avx2_nibbles_16(((const struct muse_block_q4_0 *)row)[ib].qs), _mm256_set1_epi8(8));
}

MUSE_AVX2_INLINE uint16_t legacy_d(const char *row, int64_t ib, const int kind) {
    uint16_t d;
    memcpy(&d, row + (size_t)ib * BLK(kind), 2);  /* d is the first field of both blocks */
    return d;
}

/* int32 lanes: lane l = exact sum of products of elements 4l..4l+3 (aq = |q|) */
MUSE_AVX2_INLINE __m256i legacy_dot(__m256i aq, __m256i q, __m256i a) {
    return avx2_dot_u8i8(aq, _mm256_sign_epi8(a, q));
}

/* the activation scales of block ib of row a as float */
MUSE_AVX2_INLINE float act_d(const char *a, int64_t ib) {
    return avx2_h2f(((const struct muse_block_q8_0 *)a)[ib].d);
}

/*
 * WR weight rows x NY activation rows over all nb blocks. dwf: [WR rows, dw_stride apart][nb]
 * weight scales as floats, das: [NY rows, nbp apart][nb] activation scales as floats (both
 * readable up to the next multiple of 8), or both NULL: convert per 8 blocks here.
 */
MUSE_AVX2_INLINE void legacy_tile(int64_t nb, const char *w, size_t w_stride, const char *act, size_t act_stride,
                                  const float *dwf, int64_t dw_stride, const float *das, int64_t nbp, const int WR,
                                  const int NY, const int kind, float *out, int64_t out_stride) {
    __m256 acc[GEMM_WR][NY_MAX];
    MUSE_UNROLL
    for (int k = 0; k < WR; k++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) acc[k][r] = _mm256_setzero_ps();
    for (int64_t ib0 = 0; ib0 < nb; ib0 += 8) {
        /* d_w * d_a of the 8 blocks for every pair, one vector multiply each */
        _Alignas(32) float dd[GEMM_WR][NY_MAX][8];
        __m256 da8[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) {
            if (das) {
                da8[r] = _mm256_loadu_ps(das + r * nbp + ib0);
            } else { /* rows longer than DAS_MAX blocks */
                float t[8] = {0};
                for (int j = 0; j < 8 && ib0 + j < nb; j++) t[j] = act_d(act + r * act_stride, ib0 + j);
                da8[r] = _mm256_loadu_ps(t);
            }
        }
        MUSE_UNROLL
        for (int k = 0; k < WR; k++) {
            __m256 dw8;
            if (dwf) {
                dw8 = _mm256_loadu_ps(dwf + k * dw_stride + ib0);
            } else {
                float t[8] = {0};
                for (int j = 0; j < 8 && ib0 + j < nb; j++) t[j] = avx2_h2f(legacy_d(w + k * w_stride, ib0 + j, kind));
                dw8 = _mm256_loadu_ps(t);
            }
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) _mm256_store_ps(dd[k][r], _mm256_mul_ps(dw8, da8[r]));
        }
        const int n8 = nb - ib0 < 8 ? (int)(nb - ib0) : 8;
        for (int j = 0; j < n8; j++) {
            const int64_t ib = ib0 + j;
            __m256i q[GEMM_WR], aq[GEMM_WR];
            MUSE_UNROLL
            for (int k = 0; k < WR; k++) {
                q[k] = legacy_unpack(w + k * w_stride, ib, kind);
                aq[k] = _mm256_sign_epi8(q[k], q[k]);
            }
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) {
                const __m256i a = avx2_load(((const struct muse_block_q8_0 *)(act + r * act_stride))[ib].qs);
                MUSE_UNROLL
                for (int k = 0; k < WR; k++)
                    acc[k][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[k][r][j]),
                                                _mm256_cvtepi32_ps(legacy_dot(aq[k], q[k], a)), acc[k][r]);
            }
        }
    }
    MUSE_UNROLL
    for (int k = 0; k < WR; k++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) out[r * out_stride + k] = avx2_hsum_ps(acc[k][r]);
}

/* the fp16 scales of blocks ib..ib+7 of a row as 8 floats (inserts: a store + wide load would miss
 * store forwarding) */
MUSE_AVX2_INLINE __m256 legacy_d8(const char *row, int64_t ib, const int kind) {
    __m128i h = _mm_cvtsi32_si128(legacy_d(row, ib, kind));
    h = _mm_insert_epi16(h, legacy_d(row, ib + 1, kind), 1);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 2, kind), 2);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 3, kind), 3);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 4, kind), 4);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 5, kind), 5);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 6, kind), 6);
    h = _mm_insert_epi16(h, legacy_d(row, ib + 7, kind), 7);
    return _mm256_cvtph_ps(h);
}

/* Decode: WR weight rows x 1 activation row; das: the activation scales as floats (padded to a
 * multiple of 8) or NULL; nxt: the rows to prefetch (the next tile). */
MUSE_AVX2_INLINE void legacy_gemv_tile(int64_t nb, const char *w, size_t w_stride, const char *act, const float *das,
                                       const char *nxt, const int WR, const int kind, float *out) {
    __m256 acc[8];
    MUSE_UNROLL
    for (int k = 0; k < WR; k++) acc[k] = _mm256_setzero_ps();
    int64_t ib = 0;
    if (das)
        for (; ib + 8 <= nb; ib += 8) {
            _Alignas(32) float dd[8][8];
            const __m256 da8 = _mm256_loadu_ps(das + ib);
            MUSE_UNROLL
            for (int k = 0; k < WR; k++) {
                _mm256_store_ps(dd[k], _mm256_mul_ps(legacy_d8(w + k * w_stride, ib, kind), da8));
            }
            for (int j = 0; j < 8; j++) {
                const __m256i a = avx2_load(((const struct muse_block_q8_0 *)act)[ib + j].qs);
                MUSE_UNROLL
                for (int k = 0; k < WR; k++) {
                    if ((j & 1) == 0) _mm_prefetch(nxt + k * w_stride + (size_t)(ib + j) * BLK(kind) + PF_BYTES, _MM_HINT_T0);
                    const __m256i q = legacy_unpack(w + k * w_stride, ib + j, kind);
                    acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[k][j]),
                                             _mm256_cvtepi32_ps(legacy_dot(_mm256_sign_epi8(q, q), q, a)), acc[k]);
                }
            }
        }
    for (; ib < nb; ib++) {
        const __m256i a = avx2_load(((const struct muse_block_q8_0 *)act)[ib].qs);
        const __m256 da = _mm256_set1_ps(das ? das[ib] : act_d(act, ib));
        MUSE_UNROLL
        for (int k = 0; k < WR; k++) {
            if ((ib & 1) == 0) _mm_prefetch(nxt + k * w_stride + (size_t)ib * BLK(kind) + PF_BYTES, _MM_HINT_T0);
            const __m256i q = legacy_unpack(w + k * w_stride, ib, kind);
            const __m256 dw = _mm256_set1_ps(avx2_h2f(legacy_d(w + k * w_stride, ib, kind)));
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(legacy_dot(_mm256_sign_epi8(q, q), q, a)),
                                     acc[k]);
        }
    }
    MUSE_UNROLL
    for (int k = 0; k < WR; k++) out[k] = avx2_hsum_ps(acc[k]);
}

/* Decode: every weight row against one activation row. */
MUSE_AVX2_INLINE void legacy_gemv(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                  const int kind, float *out) {
    float das[DAS_MAX + 8];
    const bool pre = nb <= DAS_MAX;
    if (pre) {
        for (int64_t ib = 0; ib < nb; ib++) das[ib] = act_d(act, ib);
        for (int j = 0; j < 8; j++) das[nb + j] = 0.0f;
    }
    const float *dp = pre ? das : NULL;
    int64_t i = 0;
    for (; i + GEMV_WR <= n_rows; i += GEMV_WR) {
        const char *nxt = w + (i + 2 * GEMV_WR <= n_rows ? i + GEMV_WR : i) * w_stride;
        legacy_gemv_tile(nb, w + i * w_stride, w_stride, act, dp, nxt, GEMV_WR, kind, out + i);
    }
    for (; i < n_rows; i++) legacy_gemv_tile(nb, w + i * w_stride, w_stride, act, dp, w + i * w_stride, 1, kind, out + i);
}

/* Prefill: n_rows <= CHUNK_ROWS weight rows against all activation rows, NY at a time. */
MUSE_AVX2_INLINE void legacy_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                  size_t act_stride, const float *dwf, int64_t nbp, const int NY, const int kind,
                                  float *out, int64_t out_stride) {
    float das[NY_MAX * (DAS_MAX + 8)];
    if (dwf)
        for (int r = 0; r < NY; r++) {
            for (int64_t ib = 0; ib < nb; ib++) das[r * nbp + ib] = act_d(act + r * act_stride, ib);
            for (int64_t ib = nb; ib < nbp; ib++) das[r * nbp + ib] = 0.0f;
        }
    const float *dp = dwf ? das : NULL;
    int64_t i = 0;
    for (; i + GEMM_WR <= n_rows; i += GEMM_WR)
        legacy_tile(nb, w + i * w_stride, w_stride, act, act_stride, dwf ? dwf + i * nbp : NULL, nbp, dp, nbp,
                    GEMM_WR, NY, kind, out + i, out_stride);
    for (; i < n_rows; i++)
        legacy_tile(nb, w + i * w_stride, w_stride, act, act_stride, dwf ? dwf + i * nbp : NULL, nbp, dp, nbp, 1, NY,
                    kind, out + i, out_stride);
}

MUSE_AVX2_INLINE bool legacy_gemm(int64_t n, const void *wv, size_t w_stride, int64_t n_rows, const void *act,
                                  size_t act_stride, int n_act, float *out, int64_t out_stride, const int kind) {
    if (n % 32 != 0) return false;
    const int64_t nb = n / 32;
    const char *w = wv;
    if (n_act == 1) {
        legacy_gemv(nb, w, w_stride, n_rows, act, kind, out);
        return true;
    }
    const bool pre = nb <= DAS_MAX;
    const int64_t nbp = (nb + 7) & ~(int64_t)7;
    /* the weight scales of a chunk; for Q4_0 rows up to ~2170 elements the same buffer also holds
     * the chunk's rows unpacked once into Q8_0 blocks (same d, codes - 8), which then run the
     * Q8_0 tiles: the nibble unpacking leaves the tiles (it was redone per group of activation
     * rows). Only whole 16-row chunks: smaller ones re-stream the activations more often, which
     * cost more than the unpacking saved (6144 wide, 256 activation rows, 6-row chunks: 847 vs
     * 690 us; 2048 wide, 64 rows, 16-row chunks: 197 vs 227 us). */
    float dwf[CHUNK_ROWS * (DAS_MAX + 8)];
    const int64_t chunk = CHUNK_ROWS;
    const size_t dwf_used = (size_t)(CHUNK_ROWS * nbp) * sizeof(float);
    const bool unpack = kind == K_Q4_0 && pre &&
                        sizeof dwf - dwf_used >= (size_t)(CHUNK_ROWS * nb) * sizeof(struct muse_block_q8_0);
    struct muse_block_q8_0 *q8buf = (struct muse_block_q8_0 *)(void *)(dwf + CHUNK_ROWS * nbp);
    for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
        const int64_t cn = n_rows - c0 < chunk ? n_rows - c0 : chunk;
        const char *wc = w + c0 * w_stride;
        if (unpack) {
            for (int64_t i = 0; i < cn; i++)
                for (int64_t ib = 0; ib < nb; ib++) {
                    struct muse_block_q8_0 *d8 = &q8buf[i * nb + ib];
                    d8->d = legacy_d(wc + i * w_stride, ib, K_Q4_0);
                    _mm256_storeu_si256((__m256i *)d8->qs, legacy_unpack(wc + i * w_stride, ib, K_Q4_0));
                }
            const size_t s8 = (size_t)nb * sizeof(struct muse_block_q8_0);
            for (int64_t i = 0; i < cn; i++) {
                for (int64_t ib = 0; ib < nb; ib++) dwf[i * nbp + ib] = avx2_h2f(q8buf[i * nb + ib].d);
                for (int64_t ib = nb; ib < nbp; ib++) dwf[i * nbp + ib] = 0.0f;
            }
#define CALL(NY) legacy_rows(nb, (const char *)q8buf, s8, cn, a, act_stride, dwf, nbp, NY, K_Q8_0, o + c0, out_stride)
            MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
            continue;
        }
        if (pre)
            for (int64_t i = 0; i < cn; i++) {
                for (int64_t ib = 0; ib < nb; ib++) dwf[i * nbp + ib] = avx2_h2f(legacy_d(wc + i * w_stride, ib, kind));
                for (int64_t ib = nb; ib < nbp; ib++) dwf[i * nbp + ib] = 0.0f;
            }
        const float *dp = pre ? dwf : NULL;
#define CALL(NY) legacy_rows(nb, wc, w_stride, cn, a, act_stride, dp, nbp, NY, kind, o + c0, out_stride)
        MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    }
    return true;
}

bool MUSE_ISA_NAME(muse_gemm_q8_0)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    return legacy_gemm(n, w, w_stride, n_rows, act, act_stride, n_act, out, out_stride, K_Q8_0);
}

bool MUSE_ISA_NAME(muse_gemm_q4_0)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    return legacy_gemm(n, w, w_stride, n_rows, act, act_stride, n_act, out, out_stride, K_Q4_0);
}
