/*
 * vision_attn_avx2.c - the tower's window attention with AVX2 + FMA (vision.h has the numerics;
 * vision_attn.c is the plain-C oracle it equals bit for bit).
 *
 * Per tile of up to 6 query rows: scores for one 16-key panel at a time (12 accumulators: 6 rows x
 * 2 vectors of keys, one FMA chain per score over the head's channels, the keys packed [hd][16] so
 * that a panel is two aligned loads per channel), then per row the max, ggml's vector exp and the
 * 8-lane sum, then the output 16 channels at a time (12 accumulators: 6 rows x 2 vectors of
 * channels, one FMA chain per output over the window's keys). Loads per FMA stay under 2/3 in both
 * loops, so the kernel runs near the FMA ports' rate; the exp costs about a quarter of the QK loop.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86_numerics.h"
#include "vision/vision.h"

#define AI static inline __attribute__((always_inline))

/* ggml_v_expf (AVX2 + FMA), the vector form of muse_x86_expf, op for op. */
AI __m256 exp8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b =
        _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 c = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(c)) return _mm256_fmadd_ps(j, k, k);
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 d = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    return _mm256_or_ps(_mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
                        _mm256_andnot_ps(d, _mm256_or_ps(_mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                                         _mm256_andnot_ps(c, _mm256_fmadd_ps(j, k, k)))));
}

void muse_vision_expf8_avx2(const float *x, float *y) { _mm256_storeu_ps(y, exp8(_mm256_loadu_ps(x))); }

/* Lane mask of the first t (0..8) lanes. */
AI __m256 first_lanes(int t) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t), idx));
}

/* Scores of R rows (q rows q0, stride ld) against panels pb0 .. pb1 - 1, times scale, into s rows
 * (stride ss; column 0 = key pb0 * 16). */
AI void qk_tile(const int R, const float *q0, int64_t ld, const float *kp, int32_t hd, int32_t pb0, int32_t pb1,
                float scale, float *s, size_t ss) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int32_t pb = pb0; pb < pb1; pb++) {
        const float *kpan = kp + (size_t)pb * hd * MUSE_VISION_KPANEL;
        __m256 acc[MUSE_VISION_ATTN_TILE][2];
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_load_ps(kpan + (size_t)d * MUSE_VISION_KPANEL);
            const __m256 k1 = _mm256_load_ps(kpan + (size_t)d * MUSE_VISION_KPANEL + 8);
            for (int r = 0; r < R; r++) {
                const __m256 qb = _mm256_broadcast_ss(q0 + (size_t)r * ld + d);
                acc[r][0] = _mm256_fmadd_ps(qb, k0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(qb, k1, acc[r][1]);
            }
        }
        float *col = s + (size_t)(pb - pb0) * MUSE_VISION_KPANEL;
        for (int r = 0; r < R; r++) {
            _mm256_storeu_ps(col + (size_t)r * ss, _mm256_mul_ps(acc[r][0], vs));
            _mm256_storeu_ps(col + (size_t)r * ss + 8, _mm256_mul_ps(acc[r][1], vs));
        }
    }
}

/* One row of scores e[0..n) in place: e = exp(s - max); returns 1 / (the 8-lane sum). The row has
 * at least 8 floats of slack after n. */
static float softmax_row(float *e, int32_t n) {
    const int32_t n8 = n & ~7, t = n - n8;
    __m256 mx = _mm256_set1_ps(-__builtin_inff());
    for (int32_t j = 0; j < n8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(e + j));
    float m[8];
    _mm256_storeu_ps(m, mx);
    float x = m[0];
    for (int l = 1; l < 8; l++) x = m[l] > x ? m[l] : x;
    for (int32_t j = n8; j < n; j++) x = e[j] > x ? e[j] : x;
    const __m256 vmax = _mm256_set1_ps(x);
    __m256 sum = _mm256_setzero_ps();
    for (int32_t j = 0; j < n8; j += 8) {
        const __m256 ej = exp8(_mm256_sub_ps(_mm256_loadu_ps(e + j), vmax));
        _mm256_storeu_ps(e + j, ej);
        sum = _mm256_add_ps(sum, ej);
    }
    if (t) {
        const __m256 mask = first_lanes(t);
        const __m256 ej = _mm256_and_ps(mask, exp8(_mm256_sub_ps(_mm256_loadu_ps(e + n8), vmax)));
        _mm256_storeu_ps(e + n8, ej); /* lanes past n land in the slack */
        sum = _mm256_add_ps(sum, ej);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return 1.0f / muse_x86_hsum8(lanes);
}

/* out rows (stride ld) = (sum over the n keys of e[r][j] * v_j) * inv[r], W vectors of channels
 * starting at column c0 of v / out. */
AI void pv_tile(const int R, const int W, const float *e, size_t es, const float *v, int64_t ld, int32_t n, float *out,
                const float *inv) {
    __m256 acc[MUSE_VISION_ATTN_TILE][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < W; c++) acc[r][c] = _mm256_setzero_ps();
    for (int32_t j = 0; j < n; j++) {
        const float *vj = v + (size_t)j * ld;
        __m256 vv[2];
        for (int c = 0; c < W; c++) vv[c] = _mm256_loadu_ps(vj + 8 * c);
        for (int r = 0; r < R; r++) {
            const __m256 eb = _mm256_broadcast_ss(e + (size_t)r * es + j);
            for (int c = 0; c < W; c++) acc[r][c] = _mm256_fmadd_ps(eb, vv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 vi = _mm256_set1_ps(inv[r]);
        for (int c = 0; c < W; c++) _mm256_storeu_ps(out + (size_t)r * ld + 8 * c, _mm256_mul_ps(acc[r][c], vi));
    }
}

/* One tile of R query rows starting at row i. */
AI void tile(const int R, const struct muse_vision_attn *a, int32_t i, float *s, size_t ss) {
    const int32_t hd = a->hd;
    const int32_t pb0 = a->s0 / MUSE_VISION_KPANEL, pb1 = (a->s0 + a->n + MUSE_VISION_KPANEL - 1) / MUSE_VISION_KPANEL;
    const int32_t off = a->s0 - pb0 * MUSE_VISION_KPANEL; /* the window's first key in the score rows */
    float *q0 = a->q + (size_t)i * a->ld + (size_t)a->head * hd;
    qk_tile(R, q0, a->ld, a->kp, hd, pb0, pb1, a->scale, s, ss);
    float inv[MUSE_VISION_ATTN_TILE];
    for (int r = 0; r < R; r++) inv[r] = softmax_row(s + (size_t)r * ss + off, a->n);
    const float *v0 = a->v + (size_t)a->s0 * a->ld + (size_t)a->head * hd;
    int32_t c0 = 0;
    for (; c0 + 16 <= hd; c0 += 16) pv_tile(R, 2, s + off, ss, v0 + c0, a->ld, a->n, q0 + c0, inv);
    if (c0 < hd) pv_tile(R, 1, s + off, ss, v0 + c0, a->ld, a->n, q0 + c0, inv); /* hd % 16 == 8 */
}

void muse_vision_attn_rows_avx2(const struct muse_vision_attn *a, int32_t i0, int32_t i1, float *scratch) {
    const size_t ss = (muse_vision_attn_scratch(a->n) - 64) / MUSE_VISION_ATTN_TILE;
    for (int32_t i = i0; i < i1;) {
        const int32_t R = i1 - i < MUSE_VISION_ATTN_TILE ? i1 - i : MUSE_VISION_ATTN_TILE;
        switch (R) {
        case 6: tile(6, a, i, scratch, ss); break;
        case 5: tile(5, a, i, scratch, ss); break;
        case 4: tile(4, a, i, scratch, ss); break;
        case 3: tile(3, a, i, scratch, ss); break;
        case 2: tile(2, a, i, scratch, ss); break;
        default: tile(1, a, i, scratch, ss); break;
        }
        i += R;
    }
}
