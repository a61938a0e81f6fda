/*
 * gemm_floats_avx2.c - AVX2 matrix kernels for float weights: F32 (F32 activations), F16 (F16
 * activations) and BF16 (BF16 activations). Products are exact in f32 for F16/BF16 inputs; they
 * are summed with FMA in 8 lanes (ggml's generic kernels sum in double: the results differ only
 * by summation rounding).
 *
 * Shape: activation rows in groups of up to MUSE_GEMM_MAX_NY; each 8-element weight chunk is
 * loaded and widened once per group.
 */
#include "kernels/kernels_isa.h"

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX MUSE_GEMM_MAX_NY

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

MUSE_AVX2_INLINE void float_row(int64_t n, const void *w, const char *act, size_t act_stride, const int kind,
                                const int ny, float *out, int64_t out_stride) {
    int64_t i = 0;
    float tail[NY_MAX] = {0};
    if (ny == 1) {
        /* decode: 4 independent accumulators over 32 elements */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm256_fmadd_ps(load8(w, i, kind), load8(act, i, kind), a0);
            a1 = _mm256_fmadd_ps(load8(w, i + 8, kind), load8(act, i + 8, kind), a1);
            a2 = _mm256_fmadd_ps(load8(w, i + 16, kind), load8(act, i + 16, kind), a2);
            a3 = _mm256_fmadd_ps(load8(w, i + 24, kind), load8(act, i + 24, kind), a3);
        }
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load8(w, i, kind), load8(act, i, kind), a0);
        for (; i < n; i++) tail[0] += load1(w, i, kind) * load1(act, i, kind);
        out[0] = avx2_hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + tail[0];
        return;
    }
    __m256 acc[NY_MAX];
    for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = load8(w, i, kind);
        for (int r = 0; r < ny; r++) acc[r] = _mm256_fmadd_ps(wv, load8(act + r * act_stride, i, kind), acc[r]);
    }
    for (; i < n; i++) {
        const float wv = load1(w, i, kind);
        for (int r = 0; r < ny; r++) tail[r] += wv * load1(act + r * act_stride, i, kind);
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = avx2_hsum_ps(acc[r]) + tail[r];
}

MUSE_AVX2_INLINE void float_rows(int64_t n, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                 size_t act_stride, const int kind, const int ny, float *out, int64_t out_stride) {
    for (int64_t i = 0; i < n_rows; i++) float_row(n, w + i * w_stride, act, act_stride, kind, ny, out + i, out_stride);
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
