/*
 * gemm_legacy_avx2.c - AVX2 matrix kernels for the 32-element legacy blocks with Q8_0
 * activations: Q8_0 and Q4_0. Integer block dots are exact; each block adds
 * (d_w * d_a) * sumi into a float accumulator, as ggml's generic kernel does, only in another
 * order of additions (8 lanes).
 *
 * Shape: every kernel walks the activation rows in groups of up to MUSE_GEMM_MAX_NY; for one
 * weight row it unpacks each block once and uses it against every row of the group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

/* The signed int8 weights of one block (32 lanes), unpacked. */
MUSE_AVX2_INLINE __m256i q8_0_unpack(const struct muse_block_q8_0 *b) { return avx2_load(b->qs); }

MUSE_AVX2_INLINE __m256i q4_0_unpack(const struct muse_block_q4_0 *b) {
    return _mm256_sub_epi8(avx2_nibbles_16(b->qs), _mm256_set1_epi8(8));
}

/* Body shared by both types: `unpack` turns a weight block into 32 signed int8 lanes. The
 * 1-row case runs two accumulators (even/odd blocks) to hide the FMA latency. */
#define LEGACY_ROWS(BLOCK, unpack)                                                                         \
    MUSE_AVX2_INLINE void BLOCK##_rows(int64_t nb, const char *w0, size_t w_stride, int64_t n_rows,         \
                                       const char *act, size_t act_stride, const int ny, float *out,        \
                                       int64_t out_stride) {                                                \
        for (int64_t i = 0; i < n_rows; i++) {                                                              \
            const struct muse_block_##BLOCK *w = (const void *)(w0 + i * w_stride);                         \
            if (ny == 1) {                                                                                  \
                const struct muse_block_q8_0 *a = (const void *)act;                                        \
                __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                              \
                int64_t ib = 0;                                                                             \
                for (; ib + 1 < nb; ib += 2) {                                                              \
                    __m256i q0 = unpack(&w[ib]), q1 = unpack(&w[ib + 1]);                                   \
                    __m256i p0 = avx2_dot_i8(q0, avx2_load(a[ib].qs));                                      \
                    __m256i p1 = avx2_dot_i8(q1, avx2_load(a[ib + 1].qs));                                  \
                    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(avx2_h2f(w[ib].d) * avx2_h2f(a[ib].d)),           \
                                           _mm256_cvtepi32_ps(p0), acc0);                                   \
                    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(avx2_h2f(w[ib + 1].d) * avx2_h2f(a[ib + 1].d)),   \
                                           _mm256_cvtepi32_ps(p1), acc1);                                   \
                }                                                                                           \
                if (ib < nb) {                                                                              \
                    __m256i p0 = avx2_dot_i8(unpack(&w[ib]), avx2_load(a[ib].qs));                          \
                    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(avx2_h2f(w[ib].d) * avx2_h2f(a[ib].d)),           \
                                           _mm256_cvtepi32_ps(p0), acc0);                                   \
                }                                                                                           \
                out[i] = avx2_hsum_ps(_mm256_add_ps(acc0, acc1));                                           \
                continue;                                                                                   \
            }                                                                                               \
            __m256 acc[MUSE_GEMM_MAX_NY];                                                                   \
            for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();                                      \
            for (int64_t ib = 0; ib < nb; ib++) {                                                           \
                const __m256i q = unpack(&w[ib]);                                                           \
                const __m256i aq = _mm256_sign_epi8(q, q);                                                  \
                const float dw = avx2_h2f(w[ib].d);                                                         \
                for (int r = 0; r < ny; r++) {                                                              \
                    const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                 \
                    __m256i p = avx2_sum_i16_pairs(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(avx2_load(a[ib].qs), q))); \
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * avx2_h2f(a[ib].d)), _mm256_cvtepi32_ps(p), acc[r]); \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < ny; r++) out[r * out_stride + i] = avx2_hsum_ps(acc[r]);                    \
        }                                                                                                   \
    }

LEGACY_ROWS(q8_0, q8_0_unpack)
LEGACY_ROWS(q4_0, q4_0_unpack)

/* Walk the activation rows in groups; each case inlines the body with a constant group size. */
#define LEGACY_GEMM(BLOCK)                                                                                 \
    bool muse_gemm_##BLOCK##_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, \
                                  size_t act_stride, int n_act, float *out, int64_t out_stride) {          \
        if (n % 32 != 0) return false;                                                                      \
        const int64_t nb = n / 32;                                                                          \
        for (int r0 = 0; r0 < n_act; r0 += MUSE_GEMM_MAX_NY) {                                              \
            const char *a = (const char *)act + (size_t)r0 * act_stride;                                    \
            float *o = out + (int64_t)r0 * out_stride;                                                      \
            switch (n_act - r0 < MUSE_GEMM_MAX_NY ? n_act - r0 : MUSE_GEMM_MAX_NY) {                        \
            case 1: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 1, o, out_stride); break;          \
            case 2: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 2, o, out_stride); break;          \
            case 3: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 3, o, out_stride); break;          \
            default: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 4, o, out_stride); break;         \
            }                                                                                               \
        }                                                                                                   \
        return true;                                                                                        \
    }

LEGACY_GEMM(q8_0)
LEGACY_GEMM(q4_0)
