/*
 * attn_flash_avx2.c - flash-style attention over an F16 KV cache for batches of queries
 * (kernels.h muse_attn_flash_fn; prefill and speculative verify at depth). The probabilities are
 * muse_attn_head_ref's bit for bit; only the order of the sum over the keys of O = P V differs
 * (docs/cpu-backend.md, "Flash attention").
 *
 * One call computes the rows of n_tok consecutive query tokens times nq query heads that read
 * one KV head (GQA: the K/V rows are read and widened once for all of them). The visible keys of
 * the union of the rows (kmin..kmax) are walked in tiles of KT positions that start at a multiple
 * of 8 (the groups of the softmax sum); keys before every sliding window or after the last query
 * are never read, and the per-element mask only runs on tiles some row sees partly. Two passes:
 *   1. per tile: K widened to f32 ([KT][hd]), S = Q K^T in ggml's tinyBLAS order (8 FMA lanes
 *      over the head dimension, then muse_x86_hsum8; 2 rows x 4 keys of accumulators), * scale,
 *      masked, kept in the row's slice of the score scratch; the row max.
 *      Per row: e = exp(s - max) (avx2_expf8 == muse_x86_expf), sum as muse_x86_softmax_exp
 *      (each group of 8 aligned positions summed in f32 as muse_x86_hsum8, the groups in double,
 *      in increasing position), inv = (float)(1 / sum).
 *   2. per tile: V widened ([KT][hd]); p = F16(e * inv) (round to nearest even, as the
 *      reference's fp32 -> fp16); O += P V, 4 rows x 16 dims of accumulators, one FMA chain per
 *      output in increasing position (the reference: 8 lanes by position % 8, then hsum).
 * At the end out = O. The queries are rounded to F16 first, as the reference does.
 * Scratch: the score rows take n_tok * nq * (kmax - kmin + 8 rounded up to KT) floats; the plan
 * sizes them for its largest cache (muse_attn_flash_scratch_avx2).
 */
#include "kernels/x86/kernels_isa.h"

#include <math.h>

#include "core/assert.h"
#include "kernels/kernels.h"
#include "kernels/x86/simd_avx2.h"

#define KT 32 /* keys per tile, a multiple of 8 */
#define RB 4  /* query rows per register block of O += P V */

/* The 8 sums of b[0..7], each as muse_x86_hsum8 (t_l = l_l + l_(l+4), (t0 + t2) + (t1 + t3)), in
 * the lanes [b0, b2, b4, b6 | b1, b3, b5, b7]. */
MUSE_AVX2_INLINE __m256 flash_hsum8x8(const __m256 b[8]) {
    __m256 t[4], z[2];
    MUSE_UNROLL
    for (int i = 0; i < 4; i++) /* [t(b_2i) | t(b_2i+1)] */
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(b[2 * i], b[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(b[2 * i], b[2 * i + 1], 0x31));
    MUSE_UNROLL
    for (int i = 0; i < 2; i++) /* [t0 + t2, t1 + t3 of b_4i, of b_4i+2 | of b_4i+1, of b_4i+3] */
        z[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44), _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xee));
    return _mm256_hadd_ps(z[0], z[1]);
}

/* S[i][j] = muse_x86_dot_tinyblas(hd, K[j], Q[i]) for 2 rows (s, s + ld) and the keys j0..j1-1
 * (j0, j1 multiples of 4) */
MUSE_AVX2_INLINE void flash_qk2(int32_t hd, const float *q, const float *kw, int32_t j0, int32_t j1, float *s,
                                int32_t ld) {
    for (int32_t jc = j0; jc < j1; jc += 4) {
        __m256 b[8]; /* b[2k + i]: key jc + k, row i */
        MUSE_UNROLL
        for (int i = 0; i < 8; i++) b[i] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) {
            const __m256 q0 = _mm256_loadu_ps(q + d), q1 = _mm256_loadu_ps(q + hd + d);
            MUSE_UNROLL
            for (int k = 0; k < 4; k++) {
                const __m256 kv = _mm256_loadu_ps(kw + (size_t)(jc + k) * hd + d);
                b[2 * k] = _mm256_fmadd_ps(kv, q0, b[2 * k]);
                b[2 * k + 1] = _mm256_fmadd_ps(kv, q1, b[2 * k + 1]);
            }
        }
        const __m256 h = flash_hsum8x8(b);
        _mm_storeu_ps(s + jc, _mm256_castps256_ps128(h));
        _mm_storeu_ps(s + ld + jc, _mm256_extractf128_ps(h, 1));
    }
}

/* The same for one row, keys j0..j1-1 (multiples of 8). */
MUSE_AVX2_INLINE void flash_qk1(int32_t hd, const float *q, const float *kw, int32_t j0, int32_t j1, float *s) {
    for (int32_t jc = j0; jc < j1; jc += 8) {
        __m256 b[8]; /* key jc + k in b[2k] (k < 4), b[2k - 7] (k >= 4) */
        MUSE_UNROLL
        for (int i = 0; i < 8; i++) b[i] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) {
            const __m256 q0 = _mm256_loadu_ps(q + d);
            MUSE_UNROLL
            for (int k = 0; k < 8; k++) {
                const int bi = k < 4 ? 2 * k : 2 * k - 7;
                b[bi] = _mm256_fmadd_ps(_mm256_loadu_ps(kw + (size_t)(jc + k) * hd + d), q0, b[bi]);
            }
        }
        _mm256_storeu_ps(s + jc, flash_hsum8x8(b));
    }
}

/* O[i][d] += sum_{j0 <= j < j1} P[i][j] * V[j][d] for i < NR (P rows ld apart) */
MUSE_AVX2_INLINE void flash_pv(int32_t hd, int32_t j0, int32_t j1, const float *p, int32_t ld, const float *v, float *o,
                               const int NR) {
    int32_t dc = 0;
    for (; dc + 16 <= hd; dc += 16) {
        __m256 acc[RB][2];
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) {
            acc[i][0] = _mm256_loadu_ps(o + (size_t)i * hd + dc);
            acc[i][1] = _mm256_loadu_ps(o + (size_t)i * hd + dc + 8);
        }
        for (int32_t j = j0; j < j1; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * hd + dc), v1 = _mm256_loadu_ps(v + (size_t)j * hd + dc + 8);
            MUSE_UNROLL
            for (int i = 0; i < NR; i++) {
                const __m256 pb = _mm256_broadcast_ss(p + (size_t)i * ld + j);
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
        for (int32_t j = j0; j < j1; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * hd + dc);
            MUSE_UNROLL
            for (int i = 0; i < NR; i++) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)i * ld + j), v0, acc[i]);
        }
        MUSE_UNROLL
        for (int i = 0; i < NR; i++) _mm256_storeu_ps(o + (size_t)i * hd + dc, acc[i]);
    }
}

/* Score row length for a cache of n_cells: the union of a call's visible keys fits the cache
 * (kmax - kmin < n_cells), plus up to 7 keys before kmin (the tiles start at a multiple of 8),
 * rounded up to whole tiles. */
static size_t flash_score_ld(uint32_t n_cells) { return ((size_t)n_cells + 7 + KT - 1) / KT * KT; }

size_t muse_attn_flash_scratch_avx2(int32_t hd, int32_t max_rows, uint32_t max_cells) {
    /* Q, O [rows][hd], M, inv [rows], K, V [KT][hd], S [rows][ld] */
    return sizeof(float) * ((size_t)max_rows * (2 * (size_t)hd + 2 + flash_score_ld(max_cells)) + 2 * (size_t)hd * KT) +
           64 * 4;
}

/* The F16 row of position p in a cache of n_cells rows `stride` bytes apart. */
static const uint16_t *flash_row(const void *base, size_t stride, int32_t p, uint32_t n_cells) {
    return (const uint16_t *)(const void *)((const char *)base + (size_t)((uint32_t)p % n_cells) * stride);
}

/* dst[j][0..hd) = the F16 row of position k0 + j widened for j0 <= j < j1, zero for the other j < KT */
static void flash_widen(float *dst, int32_t hd, const void *base, size_t stride, uint32_t n_cells, int32_t k0,
                        int32_t j0, int32_t j1) {
    for (int32_t j = 0; j < KT; j++) {
        float *r = dst + (size_t)j * hd;
        if (j < j0 || j >= j1) {
            memset(r, 0, sizeof(float) * (size_t)hd);
            continue;
        }
        const uint16_t *x = flash_row(base, stride, k0 + j, n_cells);
        for (int32_t d = 0; d < hd; d += 8) _mm256_storeu_ps(r + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + d))));
    }
}

/* The visible keys lo..hi of a query at position hi. */
static int32_t flash_lo(const struct muse_attn_flash *f, int32_t hi) {
    return f->n_swa > 0 && hi - f->n_swa + 1 > 0 ? hi - f->n_swa + 1 : 0;
}

void muse_attn_flash_f16_avx2(const struct muse_attn_flash *f, void *scratch) {
    const int32_t hd = f->hd, nq = f->nq, R = f->n_tok * f->nq;
    /* rows: token t, head h at row t * nq + h; their visible keys lo..hi */
    int32_t kmin = INT32_MAX, kmax = INT32_MIN, lo_max = INT32_MIN, hi_min = INT32_MAX;
    for (int32_t t = 0; t < f->n_tok; t++) {
        const int32_t hi = f->pos[t], lo = flash_lo(f, hi);
        kmin = lo < kmin ? lo : kmin;
        kmax = hi > kmax ? hi : kmax;
        lo_max = lo > lo_max ? lo : lo_max;
        hi_min = hi < hi_min ? hi : hi_min;
    }
    MUSE_ASSERT(kmin >= 0 && (int64_t)kmax - kmin < (int64_t)f->n_cells);
    const int32_t kal = kmin & ~7;                          /* the first tile's position */
    const int32_t ld = (kmax - kal + 1 + KT - 1) / KT * KT; /* <= flash_score_ld(n_cells) */
    float *Q = scratch, *O = Q + (size_t)R * hd, *M = O + (size_t)R * hd, *inv = M + R;
    float *Kw = inv + R, *V = Kw + (size_t)hd * KT, *S = V + (size_t)hd * KT; /* S: [R][ld], position kal + j */
    for (int32_t t = 0; t < f->n_tok; t++)
        for (int32_t h = 0; h < nq; h++) {
            const float *qs = f->q + (size_t)t * f->q_tstride + (size_t)h * hd;
            float *qd = Q + ((size_t)t * nq + h) * hd;
            for (int32_t d = 0; d < hd; d += 8) /* the query as the reference sees it: rounded to F16 */
                _mm256_storeu_ps(qd + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(qs + d), _MM_FROUND_TO_NEAREST_INT)));
        }
    for (int32_t i = 0; i < R; i++) M[i] = -INFINITY;
    memset(O, 0, sizeof(float) * (size_t)R * hd);
    const __m256 scale = _mm256_set1_ps(f->scale);

    /* pass 1: the scaled, masked scores and the row max */
    for (int32_t k0 = kal; k0 <= kmax; k0 += KT) {
        const int32_t j0 = k0 < kmin ? kmin - k0 : 0, j1 = kmax - k0 + 1 < KT ? kmax - k0 + 1 : KT;
        flash_widen(Kw, hd, f->k, f->k_stride, f->n_cells, k0, j0, j1);
        float *st = S + (k0 - kal);
        int32_t i = 0;
        for (; i + 2 <= R; i += 2) flash_qk2(hd, Q + (size_t)i * hd, Kw, j0 & ~3, (j1 + 3) & ~3, st + (size_t)i * ld, ld);
        if (i < R) flash_qk1(hd, Q + (size_t)i * hd, Kw, j0 & ~7, (j1 + 7) & ~7, st + (size_t)i * ld);
        /* keys outside j0..j1 (never computed) are outside every row's range: masked below */
        const bool all_visible = k0 >= lo_max && k0 + KT - 1 <= hi_min;
        for (i = 0; i < R; i++) {
            float *s = st + (size_t)i * ld;
            const int32_t hi = f->pos[i / nq], lo = flash_lo(f, hi);
            __m256 mx = _mm256_set1_ps(-INFINITY);
            for (int32_t j = 0; j < KT; j += 8) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), scale);
                if (!all_visible) {
                    const __m256i kp = _mm256_add_epi32(_mm256_set1_epi32(k0 + j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), kp),
                                                        _mm256_cmpgt_epi32(kp, _mm256_set1_epi32(hi)));
                    x = _mm256_blendv_ps(x, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(out));
                }
                _mm256_storeu_ps(s + j, x);
                mx = _mm256_max_ps(mx, x);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float mtile = _mm_cvtss_f32(m4);
            if (mtile > M[i]) M[i] = mtile;
        }
    }
    /* the exponentials and the denominator of each row, as muse_x86_softmax_exp */
    for (int32_t i = 0; i < R; i++) {
        float *s = S + (size_t)i * ld;
        const int32_t hi = f->pos[i / nq], lo = flash_lo(f, hi);
        const __m256 mv = _mm256_set1_ps(M[i]);
        double sum = 0.0;
        for (int32_t j = 0; j < ld; j += 8) {
            if (kal + j + 8 <= lo || kal + j > hi) { /* a group the row does not see */
                _mm256_storeu_ps(s + j, _mm256_setzero_ps());
                continue;
            }
            const __m256 e = avx2_expf8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
            _mm256_storeu_ps(s + j, e);
            sum += (double)avx2_hsum_ps(e);
        }
        inv[i] = (float)(1.0 / sum);
    }

    /* pass 2: p = F16(e * inv), O += P V */
    for (int32_t k0 = kal; k0 <= kmax; k0 += KT) {
        const int32_t j0 = k0 < kmin ? kmin - k0 : 0, j1 = kmax - k0 + 1 < KT ? kmax - k0 + 1 : KT;
        flash_widen(V, hd, f->v, f->v_stride, f->n_cells, k0, j0, j1);
        float *st = S + (k0 - kal);
        for (int32_t i = 0; i < R; i++) {
            float *p = st + (size_t)i * ld;
            const __m256 iv = _mm256_set1_ps(inv[i]);
            for (int32_t j = 0; j < KT; j += 8)
                _mm256_storeu_ps(p + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(p + j), iv),
                                                                        _MM_FROUND_TO_NEAREST_INT)));
        }
        int32_t i = 0;
        for (; i + RB <= R; i += RB) flash_pv(hd, j0, j1, st + (size_t)i * ld, ld, V, O + (size_t)i * hd, RB);
        for (; i < R; i++) flash_pv(hd, j0, j1, st + (size_t)i * ld, ld, V, O + (size_t)i * hd, 1);
    }
    for (int32_t i = 0; i < R; i++) {
        float *dst = f->out + (size_t)(i / nq) * f->o_tstride + (size_t)(i % nq) * hd;
        memcpy(dst, O + (size_t)i * hd, sizeof(float) * (size_t)hd);
    }
}
