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
 * The _multi variants run several query heads (GQA: the heads that read one KV head) against
 * each K/V row at once: a row chunk is widened once and FMA'd into every head's accumulators;
 * per (key, head) the chain is the one above, so they equal one call per head bit for bit.
 *
 * The same over F32 and Q8_0 caches (muse_attn_head_ref's orders for those):
 *   K.q over F32: ggml_vec_dot_f32 (muse_x86_dot_vec, tail in f32): element d goes to
 *        accumulator (d / 8) % 4, lane d % 8, with FMA, for d below hd rounded down to 32; the
 *        accumulators are reduced as GGML_F32x8_REDUCE ((a0 + a2) + (a1 + a3), then
 *        (l0 + l4) + (l1 + l5) and (l2 + l6) + (l3 + l7) added pairwise); then the tail elements
 *        are added one by one (multiply, then add);
 *   K.q over Q8_0: vec_dot_ref of Q8_0 against the query quantized to Q8_0: per block the exact
 *        integer sum, sumf += (float)sumi * (d_k * d_q), block after block;
 *   V.p: the rows as floats (F32 as is, Q8_0 as (float)q * d, the reference dequantizer), then
 *        the lanes as for F16.
 */
#include "kernels/x86/kernels_isa.h"

#include <math.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/x86/simd_avx2.h"

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

// ---- F16 cache, several query heads of one KV head (GQA) ------------------------------------

/* K.q of keys k0 (and k0 + k_stride when NK == 2) against NH query heads (q_stride floats
 * apart): every K chunk is widened once and FMA'd into the NH accumulators of its key, each
 * (key, head) chain in the order of muse_attn_kq_f16_avx2. */
MUSE_AVX2_INLINE void kq_tile(int NK, int NH, int32_t hd, const char *k0, size_t k_stride, const float *qf,
                              size_t q_stride, float *scores, size_t s_stride) {
    __m256 acc[2][4];
    MUSE_UNROLL for (int i = 0; i < NH; i++) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) {
        const __m256 x0 = ld_f16(k0, d);
        const __m256 x1 = NK == 2 ? ld_f16(k0 + k_stride, d) : x0;
        MUSE_UNROLL for (int i = 0; i < NH; i++) {
            const __m256 q = _mm256_loadu_ps(qf + (size_t)i * q_stride + d);
            acc[0][i] = _mm256_fmadd_ps(x0, q, acc[0][i]);
            if (NK == 2) acc[1][i] = _mm256_fmadd_ps(x1, q, acc[1][i]);
        }
    }
    MUSE_UNROLL for (int i = 0; i < NH; i++) {
        scores[(size_t)i * s_stride] = avx2_hsum_ps(acc[0][i]);
        if (NK == 2) scores[(size_t)i * s_stride + 1] = avx2_hsum_ps(acc[1][i]);
    }
}

/* Heads in tiles of up to 4 for NK keys at k0. */
MUSE_AVX2_INLINE void kq_keys(int NK, int32_t hd, const char *k0, size_t k_stride, int32_t nq, const float *qf,
                              size_t q_stride, float *scores, size_t s_stride) {
    int32_t i = 0;
    for (; i + 4 <= nq; i += 4)
        kq_tile(NK, 4, hd, k0, k_stride, qf + (size_t)i * q_stride, q_stride, scores + (size_t)i * s_stride, s_stride);
    const float *q = qf + (size_t)i * q_stride;
    float *sc = scores + (size_t)i * s_stride;
    switch (nq - i) {
    case 3: kq_tile(NK, 3, hd, k0, k_stride, q, q_stride, sc, s_stride); break;
    case 2: kq_tile(NK, 2, hd, k0, k_stride, q, q_stride, sc, s_stride); break;
    case 1: kq_tile(NK, 1, hd, k0, k_stride, q, q_stride, sc, s_stride); break;
    default: break;
    }
}

void muse_attn_kq_f16_multi_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, int32_t nq,
                                 const float *qf, size_t q_stride, float *scores, size_t s_stride) {
    const char *kb = k;
    int32_t j = 0;
    for (; j + 2 <= n_keys; j += 2) kq_keys(2, hd, kb + (size_t)j * k_stride, k_stride, nq, qf, q_stride, scores + j, s_stride);
    if (j < n_keys) kq_keys(1, hd, kb + (size_t)j * k_stride, k_stride, nq, qf, q_stride, scores + j, s_stride);
}

/* V.p of one key for NH heads: the row chunk is widened once and FMA'd into each head's lane. */
MUSE_AVX2_INLINE void pv_tile(int NH, int32_t hd, const char *v0, const float *p, size_t p_stride, float *l,
                              size_t l_stride) {
    __m256 pj[4];
    MUSE_UNROLL for (int i = 0; i < NH; i++) pj[i] = _mm256_set1_ps(p[(size_t)i * p_stride]);
    for (int32_t d = 0; d < hd; d += 8) {
        const __m256 x = ld_f16(v0, d);
        MUSE_UNROLL for (int i = 0; i < NH; i++) {
            float *o = l + (size_t)i * l_stride + d;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(x, pj[i], _mm256_loadu_ps(o)));
        }
    }
}

void muse_attn_pv_f16_multi_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, int32_t nq,
                                 const float *p, size_t p_stride, int32_t lane0, float *lanes, size_t l_stride) {
    /* blocks of PV_KEYS keys (their V rows stay in L1) times tiles of 4 heads (their lanes stay
     * in L1); each head still sees the keys in increasing order */
    enum { PV_KEYS = 32 };
    const char *vb = v;
    for (int32_t j0 = 0; j0 < n_keys; j0 += PV_KEYS) {
        const int32_t j1 = j0 + PV_KEYS < n_keys ? j0 + PV_KEYS : n_keys;
        for (int32_t i = 0; i < nq; i += 4) {
            const float *pi = p + (size_t)i * p_stride;
            float *li = lanes + (size_t)i * l_stride;
            for (int32_t j = j0; j < j1; j++) {
                const char *v0 = vb + (size_t)j * v_stride;
                float *l = li + (size_t)((lane0 + j) & 7) * hd;
                switch (nq - i) {
                case 1: pv_tile(1, hd, v0, pi + j, p_stride, l, l_stride); break;
                case 2: pv_tile(2, hd, v0, pi + j, p_stride, l, l_stride); break;
                case 3: pv_tile(3, hd, v0, pi + j, p_stride, l, l_stride); break;
                default: pv_tile(4, hd, v0, pi + j, p_stride, l, l_stride); break;
                }
            }
        }
    }
}

void muse_attn_probs_f16_avx2(int32_t n, float inv, float *p) {
    const __m256 vi = _mm256_set1_ps(inv);
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p + j), vi);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) break; /* NaN: the scalar code from here */
        _mm256_storeu_ps(p + j, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
    for (; j < n; j++) p[j] = muse_fp16_to_fp32(muse_fp32_to_fp16(p[j] * inv));
}

// ---- F32 cache -------------------------------------------------------------------------------

/* GGML_F32x8_REDUCE of four 8-lane accumulators (see the file comment). */
MUSE_AVX2_INLINE float reduce_vec4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* t_l = v_l + v_l+4 */
    const __m128 h = _mm_hadd_ps(t, t);                                                   /* t0 + t1, t2 + t3 */
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

void muse_attn_kq_f32_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                           float *scores) {
    const int32_t np = hd & ~31;
    for (int32_t j = 0; j < n_keys; j++) {
        const float *kr = (const float *)(const void *)((const char *)k + (size_t)j * k_stride);
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int32_t d = 0; d < np; d += 32) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(kr + d), _mm256_loadu_ps(qf + d), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(kr + d + 8), _mm256_loadu_ps(qf + d + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(kr + d + 16), _mm256_loadu_ps(qf + d + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(kr + d + 24), _mm256_loadu_ps(qf + d + 24), a3);
        }
        float s = reduce_vec4(a0, a1, a2, a3);
        for (int32_t d = np; d < hd; d++) {
            const float prod = kr[d] * qf[d];
            s += prod;
        }
        scores[j] = s;
    }
}

/* lanes[d] = fma(row[d], p, lanes[d]) for d < hd (fmaf for the tail: one fused operation). */
MUSE_AVX2_INLINE void fma_row(float *l, const float *row, float p, int32_t hd) {
    const __m256 pj = _mm256_set1_ps(p);
    int32_t d = 0;
    for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(l + d, _mm256_fmadd_ps(_mm256_loadu_ps(row + d), pj, _mm256_loadu_ps(l + d)));
    for (; d < hd; d++) l[d] = fmaf(row[d], p, l[d]);
}

void muse_attn_pv_f32_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p, int32_t lane0,
                           float *lanes) {
    for (int32_t j = 0; j < n_keys; j++)
        fma_row(lanes + (size_t)((lane0 + j) & 7) * hd, (const float *)(const void *)((const char *)v + (size_t)j * v_stride),
                p[j], hd);
}

// ---- Q8_0 cache ------------------------------------------------------------------------------

void muse_attn_kq_q8_0_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const void *qq,
                            float *scores) {
    const struct muse_block_q8_0 *q = qq;
    const int32_t nb = hd / 32;
    for (int32_t j = 0; j < n_keys; j++) {
        const struct muse_block_q8_0 *kr = (const void *)((const char *)k + (size_t)j * k_stride);
        float sumf = 0.0f;
        for (int32_t b = 0; b < nb; b++) {
            const __m256i x = avx2_load(kr[b].qs);
            const int32_t sumi = avx2_hsum_epi32(avx2_dot_i8(x, avx2_load(q[b].qs)));
            sumf += (float)sumi * (avx2_h2f(kr[b].d) * avx2_h2f(q[b].d));
        }
        scores[j] = sumf;
    }
}

void muse_attn_pv_q8_0_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                            int32_t lane0, float *lanes) {
    const int32_t nb = hd / 32;
    for (int32_t j = 0; j < n_keys; j++) {
        const struct muse_block_q8_0 *vr = (const void *)((const char *)v + (size_t)j * v_stride);
        float *l = lanes + (size_t)((lane0 + j) & 7) * hd;
        const __m256 pj = _mm256_set1_ps(p[j]);
        for (int32_t b = 0; b < nb; b++) {
            const __m256 d = _mm256_set1_ps(avx2_h2f(vr[b].d));
            for (int i = 0; i < 32; i += 8) {
                const __m256 x = _mm256_mul_ps(
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(vr[b].qs + i)))), d);
                float *o = l + 32 * b + i;
                _mm256_storeu_ps(o, _mm256_fmadd_ps(x, pj, _mm256_loadu_ps(o)));
            }
        }
    }
}
