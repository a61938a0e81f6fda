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
 * Shape: tiles of WR weight rows x NY activation rows (4 x 1 for decode, 2 x 4 for prefill);
 * each block is unpacked once per tile and the activation scales are converted once per tile
 * of weight rows.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 4     /* activation rows per pass over a weight row */
#define GEMV_WR 4    /* weight rows per tile at decode (1 activation row) */
#define DAS_MAX 1024 /* most blocks per row whose activation scales are converted once per call */

/* The signed int8 weights of one block (32 lanes), unpacked. */
MUSE_AVX2_INLINE __m256i q8_0_unpack(const struct muse_block_q8_0 *b) { return avx2_load(b->qs); }

MUSE_AVX2_INLINE __m256i q4_0_unpack(const struct muse_block_q4_0 *b) {
    return _mm256_sub_epi8(avx2_nibbles_16(b->qs), _mm256_set1_epi8(8));
}

#define LEGACY_ROWS(BLOCK, unpack)                                                                           \
    /* WR weight rows x NY activation rows; das: [NY][nb] activation scales or NULL */                      \
    MUSE_AVX2_INLINE void BLOCK##_tile(int64_t nb, const char *w, size_t w_stride, const char *act,          \
                                       size_t act_stride, const float *das, const int WR, const int NY,      \
                                       float *out, int64_t out_stride) {                                     \
        __m256 acc[4][NY_MAX];                                                                               \
        MUSE_UNROLL                                                                                          \
        for (int k = 0; k < WR; k++)                                                                         \
            MUSE_UNROLL                                                                                      \
            for (int r = 0; r < NY; r++) acc[k][r] = _mm256_setzero_ps();                                    \
        for (int64_t ib = 0; ib < nb; ib++) {                                                                \
            __m256 da[NY_MAX];                                                                               \
            MUSE_UNROLL                                                                                      \
            for (int r = 0; r < NY; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                da[r] = _mm256_set1_ps(das ? das[r * nb + ib] : avx2_h2f(a[ib].d));                         \
            }                                                                                                \
            MUSE_UNROLL                                                                                      \
            for (int k = 0; k < WR; k++) {                                                                   \
                const struct muse_block_##BLOCK *b = (const struct muse_block_##BLOCK *)(w + k * w_stride) + ib; \
                const __m256i q = unpack(b);                                                                 \
                const __m256i aq = _mm256_sign_epi8(q, q);                                                   \
                const __m256 dw = _mm256_set1_ps(avx2_h2f(b->d));                                            \
                MUSE_UNROLL                                                                                  \
                for (int r = 0; r < NY; r++) {                                                               \
                    const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                  \
                    const __m256i p = avx2_sum_i16_pairs(                                                    \
                        _mm256_maddubs_epi16(aq, _mm256_sign_epi8(avx2_load(a[ib].qs), q)));                 \
                    acc[k][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da[r]), _mm256_cvtepi32_ps(p), acc[k][r]); \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
        MUSE_UNROLL                                                                                          \
        for (int k = 0; k < WR; k++)                                                                         \
            MUSE_UNROLL                                                                                      \
            for (int r = 0; r < NY; r++) out[r * out_stride + k] = avx2_hsum_ps(acc[k][r]);                  \
    }                                                                                                        \
    MUSE_AVX2_INLINE void BLOCK##_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows,           \
                                       const char *act, size_t act_stride, const int ny, float *out,         \
                                       int64_t out_stride) {                                                 \
        /* the activation scales as floats, once for all weight rows of the call */                        \
        float das[NY_MAX * DAS_MAX];                                                                         \
        const bool pre = nb <= DAS_MAX && n_rows > 1;                                                        \
        if (pre)                                                                                             \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                for (int64_t ib = 0; ib < nb; ib++) das[r * nb + ib] = avx2_h2f(a[ib].d);                    \
            }                                                                                                \
        const float *dp = pre ? das : NULL;                                                                  \
        int64_t i = 0;                                                                                       \
        if (ny == 1)                                                                                         \
            for (; i + GEMV_WR <= n_rows; i += GEMV_WR)                                                      \
                BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, dp, GEMV_WR, 1, out + i, out_stride); \
        else                                                                                                 \
            for (; i + 2 <= n_rows; i += 2)                                                                  \
                BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, dp, 2, ny, out + i, out_stride); \
        for (; i < n_rows; i++)                                                                              \
            BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, dp, 1, ny, out + i, out_stride);   \
    }

LEGACY_ROWS(q8_0, q8_0_unpack)
LEGACY_ROWS(q4_0, q4_0_unpack)

/* Walk the activation rows in groups (MUSE_AVX2_ROW_GROUPS): a constant group size per call. */
#define LEGACY_GEMM(BLOCK)                                                                                 \
    bool muse_gemm_##BLOCK##_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, \
                                  size_t act_stride, int n_act, float *out, int64_t out_stride) {          \
        if (n % 32 != 0) return false;                                                                      \
        const int64_t nb = n / 32;                                                                          \
        MUSE_AVX2_ROW_GROUPS(NY_MAX, BLOCK##_CALL)                                                          \
        return true;                                                                                        \
    }

#define q8_0_CALL(NY) q8_0_rows(nb, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
#define q4_0_CALL(NY) q4_0_rows(nb, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
LEGACY_GEMM(q8_0)
LEGACY_GEMM(q4_0)
