/*
 * attn_avx2.c - AVX2 attention helpers over an F16 KV cache (kernels.h muse_attn_kq_fn /
 * muse_attn_pv_fn) in ggml's x86 order, the order of muse_attn_head_ref (llamafile tinyBLAS for
 * K.q and V.p on an AVX2 build):
 *   K.q: per key, 8 f32 lanes, lane l = fma(K[d], q[d], lane) for d = l, l + 8, ... in order,
 *        then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); four keys run side by side
 *        (independent FMA chains), each in that order;
 *   V.p: lane L = position % 8 of the key; lanes[L][d] = fma(V[d], p, lanes[L][d]) keys in
 *        increasing position, vectorized over d (each element its own chain, as in the scalar).
 * Both are bit for bit the scalar code of muse_attn_head_ref.
 */
#include "kernels/kernels_isa.h"

#include "kernels/simd_avx2.h"

MUSE_AVX2_INLINE __m256 ld_f16(const void *row, int32_t d) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
}

void muse_attn_kq_f16_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                           float *scores) {
    const char *kb = k;
    int32_t j = 0;
    for (; j + 4 <= n_keys; j += 4) {
        const char *k0 = kb + (size_t)j * k_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) {
            const __m256 q = _mm256_loadu_ps(qf + d);
            a0 = _mm256_fmadd_ps(ld_f16(k0, d), q, a0);
            a1 = _mm256_fmadd_ps(ld_f16(k0 + k_stride, d), q, a1);
            a2 = _mm256_fmadd_ps(ld_f16(k0 + 2 * k_stride, d), q, a2);
            a3 = _mm256_fmadd_ps(ld_f16(k0 + 3 * k_stride, d), q, a3);
        }
        scores[j] = avx2_hsum_ps(a0);
        scores[j + 1] = avx2_hsum_ps(a1);
        scores[j + 2] = avx2_hsum_ps(a2);
        scores[j + 3] = avx2_hsum_ps(a3);
    }
    for (; j < n_keys; j++) {
        const char *k0 = kb + (size_t)j * k_stride;
        __m256 a0 = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) a0 = _mm256_fmadd_ps(ld_f16(k0, d), _mm256_loadu_ps(qf + d), a0);
        scores[j] = avx2_hsum_ps(a0);
    }
}

void muse_attn_pv_f16_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p, int32_t lane0,
                           float *lanes) {
    const char *vb = v;
    for (int32_t j = 0; j < n_keys; j++) {
        const char *v0 = vb + (size_t)j * v_stride;
        float *l = lanes + (size_t)((lane0 + j) & 7) * hd;
        const __m256 pj = _mm256_set1_ps(p[j]);
        for (int32_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(l + d, _mm256_fmadd_ps(ld_f16(v0, d), pj, _mm256_loadu_ps(l + d)));
    }
}
