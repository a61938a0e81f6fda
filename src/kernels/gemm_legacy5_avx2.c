/*
 * gemm_legacy5_avx2.c - AVX2 matrix kernels for Q5_0 and IQ4_NL with Q8_0 activations, in ggml's
 * x86 order (llamafile tinyBLAS_Q0_AVX / ggml's AVX2 vec_dot; muse_x86_vec_dot in x86_numerics.h,
 * the order in force for these types):
 *     per block:  lane l (0..7) = exact int32 sum of the products of elements 4l..4l+3
 *                 (maddubs + madd), d = d_w * d_a (f32), acc[l] = fma(d, (float)lane, acc[l])
 *     at the end: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))   (avx2_hsum_ps)
 * maddubs cannot saturate: |w| <= 16 (Q5_0) / 127 (IQ4_NL), |a| <= 127.
 *
 * Shape: tiles of WR weight rows x NY activation rows (4 x 1 for decode, 2 x 4 for prefill); each
 * block is unpacked once per tile.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 4     /* activation rows per pass over a weight row */
#define GEMV_WR 4    /* weight rows per tile at decode (1 activation row) */

/* Q5_0: low nibbles = elements 0-15, high nibbles 16-31, bit j of qh = 5th bit of element j; -16. */
MUSE_AVX2_INLINE __m256i q5_0_unpack(const struct muse_block_q5_0 *b) {
    return _mm256_sub_epi8(avx2_q5_codes(b->qs, b->qh), _mm256_set1_epi8(16));
}

/* IQ4_NL: the codebook value of each nibble (same element order as Q4_0). */
MUSE_AVX2_INLINE __m256i iq4_nl_unpack(const struct muse_block_iq4_nl *b) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_iq4nl));
    return _mm256_shuffle_epi8(kv, avx2_nibbles_16(b->qs));
}

#define LEGACY5_ROWS(BLOCK, unpack)                                                                          \
    /* WR weight rows x NY activation rows */                                                                \
    MUSE_AVX2_INLINE void BLOCK##_tile(int64_t nb, const char *w, size_t w_stride, const char *act,          \
                                       size_t act_stride, const int WR, const int NY, float *out,            \
                                       int64_t out_stride) {                                                 \
        __m256 acc[GEMV_WR][NY_MAX];                                                                         \
        MUSE_UNROLL                                                                                          \
        for (int k = 0; k < WR; k++)                                                                         \
            MUSE_UNROLL                                                                                      \
            for (int r = 0; r < NY; r++) acc[k][r] = _mm256_setzero_ps();                                    \
        for (int64_t ib = 0; ib < nb; ib++) {                                                                \
            __m256 da[NY_MAX];                                                                               \
            MUSE_UNROLL                                                                                      \
            for (int r = 0; r < NY; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                da[r] = _mm256_set1_ps(avx2_h2f(a[ib].d));                                                   \
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
                    const __m256i p = avx2_dot_u8i8(aq, _mm256_sign_epi8(avx2_load(a[ib].qs), q));          \
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
        int64_t i = 0;                                                                                       \
        if (ny == 1)                                                                                         \
            for (; i + GEMV_WR <= n_rows; i += GEMV_WR)                                                      \
                BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, GEMV_WR, 1, out + i, out_stride); \
        else                                                                                                 \
            for (; i + 2 <= n_rows; i += 2)                                                                  \
                BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, 2, ny, out + i, out_stride);   \
        for (; i < n_rows; i++)                                                                              \
            BLOCK##_tile(nb, w + i * w_stride, w_stride, act, act_stride, 1, ny, out + i, out_stride);       \
    }

LEGACY5_ROWS(q5_0, q5_0_unpack)
LEGACY5_ROWS(iq4_nl, iq4_nl_unpack)

MUSE_AVX2_GEMM_OF_ROWS(q5_0, 32, NY_MAX)
MUSE_AVX2_GEMM_OF_ROWS(iq4_nl, 32, NY_MAX)
