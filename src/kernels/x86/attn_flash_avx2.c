/*
 * attn_flash_avx2.c - flash-style attention over an F16 KV cache for batches of queries
 * (kernels.h muse_attn_flash_fn; prefill and speculative verify at depth). Not bit-identical to
 * muse_attn_head_ref: the probabilities are never formed as a whole row; within the bound of
 * docs/cpu-backend.md ("Flash attention").
 *
 * One call computes the rows of n_tok consecutive query tokens times nq query heads that read
 * one KV head (GQA: the K/V rows are read and widened once for all of them). The visible keys of
 * the union of the rows are walked in tiles of KT positions; tiles no row can see (before the
 * sliding windows, after the last query) are never read, and the per-element mask only runs on
 * tiles some row sees partly. Per tile:
 *   S = Q Kt       the queries (rounded to F16 and back, as the reference does) against the K
 *                  tile widened to f32 and transposed ([hd][KT]): 4 rows x 16 keys of 8-lane FMA
 *                  accumulators, one broadcast query element per row and step;
 *   online softmax m' = max(m, max_j s_j * scale), p_j = exp(s_j * scale - m') (the vector form
 *                  of muse_x86_expf, ggml's v_expf), l = l * exp(m - m') + sum p, O *= exp(m - m');
 *   O += P V       V tile widened to f32 ([KT][hd]), 4 rows x 16 dims of accumulators.
 * At the end o = O * (1 / l). The probabilities are kept in f32 (the reference rounds them to
 * F16 after normalization).
 */
#include "kernels/x86/kernels_isa.h"

#include <math.h>

#include "kernels/kernels.h"
#include "kernels/x86/simd_avx2.h"

#define KT 32 /* keys per tile */
#define RB 4  /* query rows per register block */

/* 8 keys x 8 dims of F16 rows (row j at kr[j]) widened and transposed into dst[d * ld + j]. */
MUSE_AVX2_INLINE void flash_k8x8(const uint16_t *const kr[8], int32_t d0, float *dst, int32_t ld) {
    __m256 x[8], t[8];
    for (int j = 0; j < 8; j++) x[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr[j] + d0)));
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(x[2 * i], x[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        x[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        x[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        x[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        x[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + (size_t)(d0 + k) * ld, _mm256_permute2f128_ps(x[k], x[4 + k], 0x20));
        _mm256_storeu_ps(dst + (size_t)(d0 + k + 4) * ld, _mm256_permute2f128_ps(x[k], x[4 + k], 0x31));
    }
}

/* S[i][j] (i < nr <= RB, j < KT) = sum_d Q[i][d] * Kt[d][j] */
MUSE_AVX2_INLINE void flash_qk(int32_t hd, const float *q, const float *kt, float *s, const int NR) {
    for (int jc = 0; jc < KT; jc += 16) {
        __m256 acc[RB][2];
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + (size_t)d * KT + jc), k1 = _mm256_loadu_ps(kt + (size_t)d * KT + jc + 8);
            MUSE_UNROLL
            for (int i = 0; i < NR; i++) {
                const __m256 qb = _mm256_broadcast_ss(q + (size_t)i * hd + d);
                acc[i][0] = _mm256_fmadd_ps(qb, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(qb, k1, acc[i][1]);
            }
        }
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) {
            _mm256_storeu_ps(s + (size_t)i * KT + jc, acc[i][0]);
            _mm256_storeu_ps(s + (size_t)i * KT + jc + 8, acc[i][1]);
        }
    }
}

/* O[i][d] += sum_{j < nk} P[i][j] * V[j][d] for i < NR */
MUSE_AVX2_INLINE void flash_pv(int32_t hd, int32_t nk, const float *p, const float *v, float *o, const int NR) {
    int32_t dc = 0;
    for (; dc + 16 <= hd; dc += 16) {
        __m256 acc[RB][2];
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) {
            acc[i][0] = _mm256_loadu_ps(o + (size_t)i * hd + dc);
            acc[i][1] = _mm256_loadu_ps(o + (size_t)i * hd + dc + 8);
        }
        for (int32_t j = 0; j < nk; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * hd + dc), v1 = _mm256_loadu_ps(v + (size_t)j * hd + dc + 8);
            MUSE_UNROLL
            for (int i = 0; i < NR; i++) {
                const __m256 pb = _mm256_broadcast_ss(p + (size_t)i * KT + j);
                acc[i][0] = _mm256_fmadd_ps(pb, v0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(pb, v1, acc[i][1]);
            }
        }
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) {
            _mm256_storeu_ps(o + (size_t)i * hd + dc, acc[i][0]);
            _mm256_storeu_ps(o + (size_t)i * hd + dc + 8, acc[i][1]);
        }
    }
    for (; dc < hd; dc += 8) {
        __m256 acc[RB];
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) acc[i] = _mm256_loadu_ps(o + (size_t)i * hd + dc);
        for (int32_t j = 0; j < nk; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * hd + dc);
            MUSE_UNROLL
            for (int i = 0; i < NR; i++) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)i * KT + j), v0, acc[i]);
        }
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) _mm256_storeu_ps(o + (size_t)i * hd + dc, acc[i]);
    }
}

size_t muse_attn_flash_scratch_avx2(int32_t hd, int32_t max_rows) {
    /* Q, O [rows][hd], S [rows][KT], m, l [rows], Kt [hd][KT], V [KT][hd], key pointers */
    return sizeof(float) * ((size_t)max_rows * (2 * (size_t)hd + KT + 2) + 2 * (size_t)hd * KT) + 64 * 4;
}

void muse_attn_flash_f16_avx2(const struct muse_attn_flash *f, void *scratch) {
    const int32_t hd = f->hd, nq = f->nq, R = f->n_tok * f->nq;
    float *Q = scratch, *O = Q + (size_t)R * hd, *S = O + (size_t)R * hd, *M = S + (size_t)R * KT, *L = M + R;
    float *Kt = L + R, *V = Kt + (size_t)hd * KT;
    /* rows: token t, head h at row t * nq + h; their visible keys lo..hi */
    int32_t kmin = INT32_MAX, kmax = INT32_MIN, lo_max = INT32_MIN, hi_min = INT32_MAX;
    for (int32_t t = 0; t < f->n_tok; t++) {
        const int32_t hi = f->pos[t], lo = f->n_swa > 0 && hi - f->n_swa + 1 > 0 ? hi - f->n_swa + 1 : 0;
        kmin = lo < kmin ? lo : kmin;
        kmax = hi > kmax ? hi : kmax;
        lo_max = lo > lo_max ? lo : lo_max;
        hi_min = hi < hi_min ? hi : hi_min;
        for (int32_t h = 0; h < nq; h++) {
            const float *qs = f->q + (size_t)t * f->q_tstride + (size_t)h * hd;
            float *qd = Q + ((size_t)t * nq + h) * hd;
            for (int32_t d = 0; d < hd; d += 8) /* the query as the reference sees it: rounded to F16 */
                _mm256_storeu_ps(qd + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(qs + d), _MM_FROUND_TO_NEAREST_INT)));
        }
    }
    for (int32_t i = 0; i < R; i++) {
        M[i] = -INFINITY;
        L[i] = 0.0f;
    }
    memset(O, 0, sizeof(float) * (size_t)R * hd);
    const __m256 scale = _mm256_set1_ps(f->scale);
    for (int32_t k0 = kmin; k0 <= kmax; k0 += KT) {
        const int32_t nk = kmax - k0 + 1 < KT ? kmax - k0 + 1 : KT;
        /* the tile's rows widened: K transposed, V as is (missing keys: zero rows) */
        const uint16_t *kr[KT];
        for (int32_t j = 0; j < KT; j++) {
            const uint32_t cell = (uint32_t)(k0 + (j < nk ? j : 0)) % f->n_cells;
            kr[j] = (const uint16_t *)(const void *)((const char *)f->k + (size_t)cell * f->k_stride);
            float *vr = V + (size_t)j * hd;
            const uint16_t *vs = (const uint16_t *)(const void *)((const char *)f->v + (size_t)cell * f->v_stride);
            for (int32_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(vr + d, j < nk ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vs + d))) : _mm256_setzero_ps());
        }
        for (int32_t jc = 0; jc < KT; jc += 8)
            for (int32_t d = 0; d < hd; d += 8) flash_k8x8(kr + jc, d, Kt + jc, KT);
        /* S = Q K^T */
        int32_t i = 0;
        for (; i + RB <= R; i += RB) flash_qk(hd, Q + (size_t)i * hd, Kt, S + (size_t)i * KT, RB);
        for (; i < R; i++) flash_qk(hd, Q + (size_t)i * hd, Kt, S + (size_t)i * KT, 1);
        /* online softmax, row by row */
        const bool all_visible = k0 >= lo_max && k0 + nk - 1 <= hi_min && nk == KT;
        for (i = 0; i < R; i++) {
            float *s = S + (size_t)i * KT;
            const int32_t t = i / nq, hi = f->pos[t];
            const int32_t lo = f->n_swa > 0 && hi - f->n_swa + 1 > 0 ? hi - f->n_swa + 1 : 0;
            __m256 mx = _mm256_set1_ps(-INFINITY);
            for (int32_t j = 0; j < KT; j += 8) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), scale);
                if (!all_visible) {
                    const __m256i kp = _mm256_add_epi32(_mm256_set1_epi32(k0 + j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), kp),
                                                        _mm256_or_si256(_mm256_cmpgt_epi32(kp, _mm256_set1_epi32(hi)),
                                                                        _mm256_cmpgt_epi32(kp, _mm256_set1_epi32(k0 + nk - 1))));
                    x = _mm256_blendv_ps(x, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(out));
                }
                _mm256_storeu_ps(s + j, x);
                mx = _mm256_max_ps(mx, x);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float mtile = _mm_cvtss_f32(m4);
            if (mtile == -INFINITY) { /* nothing visible to this row here */
                memset(s, 0, sizeof(float) * KT);
                continue;
            }
            const float mnew = mtile > M[i] ? mtile : M[i];
            const __m256 mv = _mm256_set1_ps(mnew);
            __m256 sum = _mm256_setzero_ps();
            for (int32_t j = 0; j < KT; j += 8) {
                const __m256 p = avx2_expf8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
                _mm256_storeu_ps(s + j, p);
                sum = _mm256_add_ps(sum, p);
            }
            if (mnew != M[i]) {
                const float alpha = _mm256_cvtss_f32(avx2_expf8(_mm256_set1_ps(M[i] - mnew)));
                L[i] *= alpha;
                const __m256 av = _mm256_set1_ps(alpha);
                float *o = O + (size_t)i * hd;
                for (int32_t d = 0; d < hd; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), av));
                M[i] = mnew;
            }
            L[i] += avx2_hsum_ps(sum);
        }
        /* O += P V */
        for (i = 0; i + RB <= R; i += RB) flash_pv(hd, nk, S + (size_t)i * KT, V, O + (size_t)i * hd, RB);
        for (; i < R; i++) flash_pv(hd, nk, S + (size_t)i * KT, V, O + (size_t)i * hd, 1);
    }
    for (int32_t i = 0; i < R; i++) {
        const __m256 inv = _mm256_set1_ps((float)(1.0 / (double)L[i]));
        const float *o = O + (size_t)i * hd;
        float *dst = f->out + (size_t)(i / nq) * f->o_tstride + (size_t)(i % nq) * hd;
        for (int32_t d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), inv));
    }
}
