/*
 * attn_avx2.c - AVX2 attention helpers over an F16 KV cache (kernels.h muse_attn_kq_fn /
 * muse_attn_pv_fn). They reproduce the reference attention bit for bit: every product of two
 * F16-representable values is exact in f32 and is added to a double accumulator in the
 * reference's order (over d for K.q, over keys for V.p); the SIMD lanes run across query heads
 * (K.q) or across head dimensions (V.p) instead.
 *
 * GQA: the nq query heads that share one KV head are processed together, so each K/V row is
 * loaded and widened once for all of them.
 */
#include "kernels/kernels_isa.h"

#include "kernels/simd_avx2.h"

#define PV_KEYS 16   /* keys per widened V block */

/* Widen hd F16 values (hd % 8 == 0) to f32. */
MUSE_AVX2_INLINE void widen_f16(const uint16_t *src, float *dst, int32_t hd) {
    for (int32_t d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + d))));
}

void muse_attn_kq_f16_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qt, int32_t nq,
                           float *scores, int64_t s_stride) {
    const int32_t nq4 = (nq + 3) & ~3;
    float kf[512];
    for (int32_t j = 0; j < n_keys; j++) {
        widen_f16((const uint16_t *)((const char *)k + (size_t)j * k_stride), kf, hd);
        for (int32_t h0 = 0; h0 < nq4; h0 += 8) {
            const bool two = h0 + 4 < nq4;
            __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
            for (int32_t d = 0; d < hd; d++) {
                const __m128 kd = _mm_broadcast_ss(kf + d);
                const float *qd = qt + (size_t)d * nq4 + h0;
                s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm_mul_ps(kd, _mm_loadu_ps(qd))));
                if (two) s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm_mul_ps(kd, _mm_loadu_ps(qd + 4))));
            }
            double l[8];
            _mm256_storeu_pd(l, s0);
            _mm256_storeu_pd(l + 4, s1);
            for (int32_t h = h0; h < nq && h < h0 + 8; h++) scores[(int64_t)h * s_stride + j] = (float)l[h - h0];
        }
    }
}

void muse_attn_pv_f16_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                           int64_t p_stride, int32_t nq, double *acc) {
    float vf[PV_KEYS * 512];
    for (int32_t j0 = 0; j0 < n_keys; j0 += PV_KEYS) {
        const int32_t nk = n_keys - j0 < PV_KEYS ? n_keys - j0 : PV_KEYS;
        for (int32_t j = 0; j < nk; j++)
            widen_f16((const uint16_t *)((const char *)v + (size_t)(j0 + j) * v_stride), vf + j * hd, hd);
        for (int32_t h = 0; h < nq; h++) {
            const float *ph = p + (int64_t)h * p_stride + j0;
            double *ah = acc + (size_t)h * hd;
            for (int32_t d = 0; d < hd; d += 16) {
                __m256d a0 = _mm256_loadu_pd(ah + d), a1 = _mm256_loadu_pd(ah + d + 4);
                __m256d a2 = _mm256_loadu_pd(ah + d + 8), a3 = _mm256_loadu_pd(ah + d + 12);
                for (int32_t j = 0; j < nk; j++) {
                    const __m256 pj = _mm256_broadcast_ss(ph + j);
                    const __m256 x0 = _mm256_mul_ps(pj, _mm256_loadu_ps(vf + j * hd + d));
                    const __m256 x1 = _mm256_mul_ps(pj, _mm256_loadu_ps(vf + j * hd + d + 8));
                    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x0)));
                    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x0, 1)));
                    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(x1)));
                    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(x1, 1)));
                }
                _mm256_storeu_pd(ah + d, a0);
                _mm256_storeu_pd(ah + d + 4, a1);
                _mm256_storeu_pd(ah + d + 8, a2);
                _mm256_storeu_pd(ah + d + 12, a3);
            }
        }
    }
}
