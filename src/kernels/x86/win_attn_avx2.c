/*
 * win_attn_avx2.c - window attention (the vision tower's) with AVX2 + FMA (kernels.h has the
 * numerics; kernels/win_attn.c is the plain-C oracle it equals bit for bit).
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

#include "kernels/x86/simd_avx2.h"
#include "kernels/x86_numerics.h"
#include "kernels/kernels.h"
#include "kernels/x86/kernels_isa.h"

#define AI static inline __attribute__((always_inline))

void muse_expf8_avx2(const float *x, float *y) { _mm256_storeu_ps(y, avx2_expf8(_mm256_loadu_ps(x))); }

/* Lane mask of the first t (0..8) lanes. */
AI __m256 first_lanes(int t) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t), idx));
}


/* For rows r = 0..5 of named accumulators a<r>0, a<r>1: a<r>0 += x<r>[i] * b0, a<r>1 += x<r>[i] * b1
 * (one broadcast per row; the scores' and the outputs' inner step alike). */
#define FMA_ROW2(x, i, r, b0, b1)                           \
    do {                                                    \
        const __m256 xb = _mm256_broadcast_ss(x##r + (i));  \
        a##r##0 = _mm256_fmadd_ps(xb, b0, a##r##0);         \
        a##r##1 = _mm256_fmadd_ps(xb, b1, a##r##1);         \
    } while (0)
/* M(0) .. M(5): a step of each of the six rows. */
#define EACH6(M) \
    do {         \
        M(0);    \
        M(1);    \
        M(2);    \
        M(3);    \
        M(4);    \
        M(5);    \
    } while (0)
#define FMA_ROWS6(x, i, b0, b1)     \
    do {                            \
        FMA_ROW2(x, i, 0, b0, b1);  \
        FMA_ROW2(x, i, 1, b0, b1);  \
        FMA_ROW2(x, i, 2, b0, b1);  \
        FMA_ROW2(x, i, 3, b0, b1);  \
        FMA_ROW2(x, i, 4, b0, b1);  \
        FMA_ROW2(x, i, 5, b0, b1);  \
    } while (0)

/* Scores of 6 rows (q[r], rows that repeat are computed twice and written twice, harmlessly)
 * against panels pb0 .. pb1 - 1, times scale, into s[r] (column 0 = key pb0 * 16). The 12
 * accumulators are named, not an array: GCC keeps arrays of __m256 indexed in a loop on the stack. */
static void qk6(const float *const q[6], const float *kp, int32_t hd, int32_t pb0, int32_t pb1, float scale,
                float *const s[6]) {
    const __m256 vs = _mm256_set1_ps(scale);
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3], *q4 = q[4], *q5 = q[5];
    for (int32_t pb = pb0; pb < pb1; pb++) {
        const float *kpan = kp + (size_t)pb * hd * MUSE_WIN_KPANEL;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
        __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
        for (int32_t d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_load_ps(kpan + (size_t)d * MUSE_WIN_KPANEL);
            const __m256 k1 = _mm256_load_ps(kpan + (size_t)d * MUSE_WIN_KPANEL + 8);
            FMA_ROWS6(q, d, k0, k1);
        }
        const size_t col = (size_t)(pb - pb0) * MUSE_WIN_KPANEL;
#define STORE(r)                                                          \
    do {                                                                  \
        _mm256_storeu_ps(s[r] + col, _mm256_mul_ps(a##r##0, vs));         \
        _mm256_storeu_ps(s[r] + col + 8, _mm256_mul_ps(a##r##1, vs));     \
    } while (0)
        EACH6(STORE);
#undef STORE
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
        const __m256 ej = avx2_expf8(_mm256_sub_ps(_mm256_loadu_ps(e + j), vmax));
        _mm256_storeu_ps(e + j, ej);
        sum = _mm256_add_ps(sum, ej);
    }
    if (t) {
        const __m256 mask = first_lanes(t);
        const __m256 ej = _mm256_and_ps(mask, avx2_expf8(_mm256_sub_ps(_mm256_loadu_ps(e + n8), vmax)));
        _mm256_storeu_ps(e + n8, ej); /* lanes past n land in the slack */
        sum = _mm256_add_ps(sum, ej);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return 1.0f / muse_x86_hsum8(lanes);
}

/* out[r][c0 .. c0 + 16) = (sum over the n keys of e[r][j] * v_j[c0 ..]) * inv[r] for 6 rows (v at
 * column c0 already); W2: two vectors of channels, else one. Named accumulators, as in qk6. */
static void pv6(const float *const e[6], const float *v, int64_t ld, int32_t n, float *const out[6],
                const float inv[6], bool W2) {
    const float *e0 = e[0], *e1 = e[1], *e2 = e[2], *e3 = e[3], *e4 = e[4], *e5 = e[5];
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    if (W2) {
        for (int32_t j = 0; j < n; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * ld), v1 = _mm256_loadu_ps(v + (size_t)j * ld + 8);
            FMA_ROWS6(e, j, v0, v1);
        }
    } else {
        for (int32_t j = 0; j < n; j++) {
            const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * ld);
            a00 = _mm256_fmadd_ps(_mm256_broadcast_ss(e0 + j), v0, a00);
            a10 = _mm256_fmadd_ps(_mm256_broadcast_ss(e1 + j), v0, a10);
            a20 = _mm256_fmadd_ps(_mm256_broadcast_ss(e2 + j), v0, a20);
            a30 = _mm256_fmadd_ps(_mm256_broadcast_ss(e3 + j), v0, a30);
            a40 = _mm256_fmadd_ps(_mm256_broadcast_ss(e4 + j), v0, a40);
            a50 = _mm256_fmadd_ps(_mm256_broadcast_ss(e5 + j), v0, a50);
        }
    }
    /* rows that repeat write the same values twice: harmless */
#define STORE(r)                                                                              \
    do {                                                                                      \
        const __m256 vi = _mm256_set1_ps(inv[r]);                                             \
        _mm256_storeu_ps(out[r], _mm256_mul_ps(a##r##0, vi));                                 \
        if (W2) _mm256_storeu_ps(out[r] + 8, _mm256_mul_ps(a##r##1, vi));                     \
    } while (0)
    EACH6(STORE);
#undef STORE
}

/* One tile of R <= 6 query rows starting at row i; a short tile repeats its last row. */
static void tile(int R, const struct muse_win_attn *a, int32_t i, float *scratch, size_t ss) {
    const int32_t hd = a->hd;
    const int32_t pb0 = a->s0 / MUSE_WIN_KPANEL, pb1 = (a->s0 + a->n + MUSE_WIN_KPANEL - 1) / MUSE_WIN_KPANEL;
    const int32_t off = a->s0 - pb0 * MUSE_WIN_KPANEL; /* the window's first key in the score rows */
    const float *q[6];
    float *s[6], *e[6], *out[6];
    float inv[6];
    for (int r = 0; r < 6; r++) {
        const int rr = r < R ? r : R - 1;
        q[r] = a->q + (size_t)(i + rr) * a->ld + (size_t)a->head * hd;
        s[r] = scratch + (size_t)rr * ss;
        e[r] = s[r] + off;
    }
    qk6(q, a->kp, hd, pb0, pb1, a->scale, s);
    for (int r = 0; r < R; r++) inv[r] = softmax_row(e[r], a->n);
    for (int r = R; r < 6; r++) inv[r] = inv[R - 1];
    const float *v0 = a->v + (size_t)a->s0 * a->v_ld;
    for (int32_t c0 = 0; c0 < hd; c0 += 16) {
        for (int r = 0; r < 6; r++) out[r] = (float *)q[r] + c0; /* q[r] is no longer read: its scores are done */
        pv6((const float *const *)e, v0 + c0, a->v_ld, a->n, out, inv, c0 + 16 <= hd);
    }
}

void muse_win_attn_rows_avx2(const struct muse_win_attn *a, int32_t i0, int32_t i1, float *scratch) {
    const size_t ss = (muse_win_attn_scratch(a->n) - 64) / MUSE_WIN_ATTN_TILE;
    for (int32_t i = i0; i < i1; i += MUSE_WIN_ATTN_TILE)
        tile(i1 - i < MUSE_WIN_ATTN_TILE ? i1 - i : MUSE_WIN_ATTN_TILE, a, i, scratch, ss);
}
