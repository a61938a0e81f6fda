/*
 * attn_avx2.c - AVX2 attention helpers over an F16 KV cache (kernels.h muse_attn_kq_fn /
 * muse_attn_pv_fn). Products of F16 values with F16-rounded queries or probabilities are exact
 * in f32; they are summed with FMA in 8 lanes (llama.cpp's F16 dot products do the same; the
 * reference sums in double).
 *
 * GQA: the nq query heads that share one KV head are processed together, so each K/V row is
 * loaded and widened once for all of them.
 */
#include "kernels/kernels_isa.h"

#include "kernels/simd_avx2.h"

#define KQ_HEADS 4   /* query heads per pass over a K row */
#define PV_HEADS 4   /* query heads per register block in V.p */
#define PV_KEYS 32   /* keys per widened V block */

void muse_attn_kq_f16_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *q, int32_t nq,
                           float *scores, int64_t s_stride) {
    for (int32_t j = 0; j < n_keys; j++) {
        const uint16_t *kr = (const uint16_t *)((const char *)k + (size_t)j * k_stride);
        int32_t h = 0;
        for (; h + KQ_HEADS <= nq; h += KQ_HEADS) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const float *q0 = q + (size_t)h * hd;
            for (int32_t d = 0; d < hd; d += 8) {
                const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + d)));
                a0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + d), a0);
                a1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + hd + d), a1);
                a2 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + 2 * hd + d), a2);
                a3 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + 3 * hd + d), a3);
            }
            scores[(int64_t)h * s_stride + j] = avx2_hsum_ps(a0);
            scores[(int64_t)(h + 1) * s_stride + j] = avx2_hsum_ps(a1);
            scores[(int64_t)(h + 2) * s_stride + j] = avx2_hsum_ps(a2);
            scores[(int64_t)(h + 3) * s_stride + j] = avx2_hsum_ps(a3);
        }
        for (; h < nq; h++) {
            __m256 a0 = _mm256_setzero_ps();
            const float *q0 = q + (size_t)h * hd;
            for (int32_t d = 0; d < hd; d += 8)
                a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + d))), _mm256_loadu_ps(q0 + d), a0);
            scores[(int64_t)h * s_stride + j] = avx2_hsum_ps(a0);
        }
    }
}

void muse_attn_pv_f16_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                           int64_t p_stride, int32_t nq, float *acc) {
    float vt[PV_KEYS * 256] __attribute__((aligned(32)));  /* widened V block; hd <= 256 here */
    if (hd > 256) {
        /* uncommon head size: one key at a time */
        for (int32_t j = 0; j < n_keys; j++) {
            const uint16_t *vr = (const uint16_t *)((const char *)v + (size_t)j * v_stride);
            for (int32_t d = 0; d < hd; d += 8) {
                const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d)));
                for (int32_t h = 0; h < nq; h++) {
                    float *ah = acc + (size_t)h * hd + d;
                    _mm256_storeu_ps(ah, _mm256_fmadd_ps(_mm256_set1_ps(p[(int64_t)h * p_stride + j]), vv, _mm256_loadu_ps(ah)));
                }
            }
        }
        return;
    }
    for (int32_t j0 = 0; j0 < n_keys; j0 += PV_KEYS) {
        const int32_t nk = n_keys - j0 < PV_KEYS ? n_keys - j0 : PV_KEYS;
        for (int32_t j = 0; j < nk; j++) {
            const uint16_t *vr = (const uint16_t *)((const char *)v + (size_t)(j0 + j) * v_stride);
            for (int32_t d = 0; d < hd; d += 8)
                _mm256_store_ps(vt + j * hd + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d))));
        }
        for (int32_t h = 0; h < nq; h += PV_HEADS) {
            const int32_t nh = nq - h < PV_HEADS ? nq - h : PV_HEADS;
            for (int32_t d = 0; d < hd; d += 8) {
                __m256 a[PV_HEADS];
                for (int32_t i = 0; i < nh; i++) a[i] = _mm256_loadu_ps(acc + (size_t)(h + i) * hd + d);
                for (int32_t j = 0; j < nk; j++) {
                    const __m256 vv = _mm256_load_ps(vt + j * hd + d);
                    for (int32_t i = 0; i < nh; i++)
                        a[i] = _mm256_fmadd_ps(_mm256_set1_ps(p[(int64_t)(h + i) * p_stride + j0 + j]), vv, a[i]);
                }
                for (int32_t i = 0; i < nh; i++) _mm256_storeu_ps(acc + (size_t)(h + i) * hd + d, a[i]);
            }
        }
    }
}
