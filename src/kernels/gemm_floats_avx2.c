/*
 * gemm_floats_avx2.c - AVX2 matrix kernels for float weights: F32 (F32 activations), F16 (F16
 * activations) and BF16 (BF16 activations), in ggml's x86 order (llamafile tinyBLAS, see
 * muse_x86_vec_dot in x86_numerics.h): both operands widened to f32 (exact), one 8-lane
 * accumulator per output, lane l = fma(w[i + l], a[i + l], lane) for i = 0, 8, 16, ... in order,
 * then the horizontal sum ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) (avx2_hsum_ps).
 * That is bit for bit muse_x86_vec_dot. Rows whose length is not a multiple of 8 are declined
 * (ggml then uses other orders; the driver runs the scalar dot).
 *
 * Shape: tiles of WR weight rows x NY activation rows (4 x 1 for decode, 2 x 4 for prefill),
 * WR * NY independent accumulator chains; each weight vector is widened once per tile.
 */
#include "kernels/kernels_isa.h"

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 4   /* activation rows per pass over a weight row */

enum float_kind { KIND_F32, KIND_F16, KIND_BF16 };

MUSE_AVX2_INLINE __m256 load8(const void *p, int64_t i, const int kind) {
    if (kind == KIND_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (kind == KIND_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* WR weight rows x NY activation rows, n a multiple of 8. */
MUSE_AVX2_INLINE void float_tile(int64_t n, const char *w, size_t w_stride, const char *act, size_t act_stride,
                                 const int kind, const int WR, const int NY, float *out, int64_t out_stride) {
    __m256 acc[4][NY_MAX];
    MUSE_UNROLL
    for (int k = 0; k < WR; k++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) acc[k][r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 y[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) y[r] = load8(act + r * act_stride, i, kind);
        MUSE_UNROLL
        for (int k = 0; k < WR; k++) {
            const __m256 x = load8(w + k * w_stride, i, kind);
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) acc[k][r] = _mm256_fmadd_ps(x, y[r], acc[k][r]);
        }
    }
    MUSE_UNROLL
    for (int k = 0; k < WR; k++)
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) out[r * out_stride + k] = avx2_hsum_ps(acc[k][r]);
}

MUSE_AVX2_INLINE void float_rows(int64_t n, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                 size_t act_stride, const int kind, const int ny, float *out, int64_t out_stride) {
    int64_t i = 0;
    if (ny == 1)
        for (; i + 4 <= n_rows; i += 4) float_tile(n, w + i * w_stride, w_stride, act, act_stride, kind, 4, 1, out + i, out_stride);
    else
        for (; i + 2 <= n_rows; i += 2) float_tile(n, w + i * w_stride, w_stride, act, act_stride, kind, 2, ny, out + i, out_stride);
    for (; i < n_rows; i++) float_tile(n, w + i * w_stride, w_stride, act, act_stride, kind, 1, ny, out + i, out_stride);
}

#define FLOAT_GEMM(NAME, KIND)                                                                              \
    bool NAME(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, size_t act_stride, \
              int n_act, float *out, int64_t out_stride) {                                                  \
        if (n % 8 != 0) return false;                                                                       \
        MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL_##KIND)                                                          \
        return true;                                                                                        \
    }

#define CALL_KIND_F32(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_F32, NY, o, out_stride)
#define CALL_KIND_F16(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_F16, NY, o, out_stride)
#define CALL_KIND_BF16(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_BF16, NY, o, out_stride)

FLOAT_GEMM(MUSE_ISA_NAME(muse_gemm_f32), KIND_F32)
FLOAT_GEMM(MUSE_ISA_NAME(muse_gemm_f16), KIND_F16)
FLOAT_GEMM(MUSE_ISA_NAME(muse_gemm_bf16), KIND_BF16)
