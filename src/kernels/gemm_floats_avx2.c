/*
 * gemm_floats_avx2.c - AVX2 matrix kernels for float weights: F32 (F32 activations), F16 (F16
 * activations) and BF16 (BF16 activations). They reproduce vec_dot_ref bit for bit: every
 * product is formed in f32 and added to a double accumulator in element order, then rounded to
 * f32. The parallelism is across weight rows instead: the 4 lanes of a double vector are 4
 * weight rows, each summed strictly in order (4x8 transposes bring element i of 4 rows into
 * one vector).
 *
 * Shape: 4 weight rows at a time against activation rows in groups of up to 4;
 * each weight chunk is widened and transposed once per group.
 */
#include "kernels/kernels_isa.h"

#include "core/fp16.h"
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

MUSE_AVX2_INLINE float load1(const void *p, int64_t i, const int kind) {
    if (kind == KIND_F32) return ((const float *)p)[i];
    if (kind == KIND_F16) return muse_fp16_to_fp32(((const uint16_t *)p)[i]);
    return muse_bf16_to_fp32(((const uint16_t *)p)[i]);
}

/* One weight row, sequentially (the reference loop). */
MUSE_AVX2_INLINE double row_tail(double sum, const void *w, const void *a, int64_t i0, int64_t n, const int kind) {
    for (int64_t i = i0; i < n; i++) sum += (double)(load1(w, i, kind) * load1(a, i, kind));
    return sum;
}

/* 4 weight rows x ny activation rows. */
MUSE_AVX2_INLINE void float_quad(int64_t n, const char *w, size_t w_stride, const char *act, size_t act_stride,
                                 const int kind, const int ny, float *out, int64_t out_stride) {
    __m256d acc[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 r0 = load8(w, i, kind), r1 = load8(w + w_stride, i, kind);
        const __m256 r2 = load8(w + 2 * w_stride, i, kind), r3 = load8(w + 3 * w_stride, i, kind);
        const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        /* u_k: low half = element k of the 4 rows, high half = element k + 4 */
        const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
        const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
        const __m128 e[8] = {_mm256_castps256_ps128(u0), _mm256_castps256_ps128(u1),
                             _mm256_castps256_ps128(u2), _mm256_castps256_ps128(u3),
                             _mm256_extractf128_ps(u0, 1), _mm256_extractf128_ps(u1, 1),
                             _mm256_extractf128_ps(u2, 1), _mm256_extractf128_ps(u3, 1)};
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const __m256 y = load8(act + r * act_stride, i, kind);
            const __m128 ylo = _mm256_castps256_ps128(y), yhi = _mm256_extractf128_ps(y, 1);
            __m256d s = acc[r];
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[0], _mm_shuffle_ps(ylo, ylo, 0x00))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[1], _mm_shuffle_ps(ylo, ylo, 0x55))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[2], _mm_shuffle_ps(ylo, ylo, 0xaa))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[3], _mm_shuffle_ps(ylo, ylo, 0xff))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[4], _mm_shuffle_ps(yhi, yhi, 0x00))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[5], _mm_shuffle_ps(yhi, yhi, 0x55))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[6], _mm_shuffle_ps(yhi, yhi, 0xaa))));
            s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_mul_ps(e[7], _mm_shuffle_ps(yhi, yhi, 0xff))));
            acc[r] = s;
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) {
        double l[4];
        _mm256_storeu_pd(l, acc[r]);
        MUSE_UNROLL
        for (int k = 0; k < 4; k++)
            out[r * out_stride + k] = (float)row_tail(l[k], w + k * w_stride, act + r * act_stride, i, n, kind);
    }
}

MUSE_AVX2_INLINE void float_rows(int64_t n, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                 size_t act_stride, const int kind, const int ny, float *out, int64_t out_stride) {
    int64_t i = 0;
    for (; i + 4 <= n_rows; i += 4) float_quad(n, w + i * w_stride, w_stride, act, act_stride, kind, ny, out + i, out_stride);
    for (; i < n_rows; i++)
        MUSE_UNROLL
        for (int r = 0; r < ny; r++)
            out[r * out_stride + i] = (float)row_tail(0.0, w + i * w_stride, act + r * act_stride, 0, n, kind);
}

#define GROUPS(CALL)                                                                        \
    for (int r0 = 0; r0 < n_act; r0 += NY_MAX) {                                            \
        const char *a = (const char *)act + (size_t)r0 * act_stride;                        \
        float *o = out + (int64_t)r0 * out_stride;                                          \
        switch (n_act - r0 < NY_MAX ? n_act - r0 : NY_MAX) {                                \
        case 1: CALL(1); break;                                                             \
        case 2: CALL(2); break;                                                             \
        case 3: CALL(3); break;                                                             \
        default: CALL(4); break;                                                            \
        }                                                                                   \
    }

#define FLOAT_GEMM(NAME, KIND)                                                                              \
    bool NAME(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, size_t act_stride, \
              int n_act, float *out, int64_t out_stride) {                                                  \
        GROUPS(CALL_##KIND)                                                                                 \
        return true;                                                                                        \
    }

#define CALL_KIND_F32(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_F32, NY, o, out_stride)
#define CALL_KIND_F16(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_F16, NY, o, out_stride)
#define CALL_KIND_BF16(NY) float_rows(n, w, w_stride, n_rows, a, act_stride, KIND_BF16, NY, o, out_stride)

FLOAT_GEMM(muse_gemm_f32_avx2, KIND_F32)
FLOAT_GEMM(muse_gemm_f16_avx2, KIND_F16)
FLOAT_GEMM(muse_gemm_bf16_avx2, KIND_BF16)
