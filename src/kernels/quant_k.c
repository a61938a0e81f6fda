/*
 * quant_k.c - reference numerics of the K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (weights) and
 * Q8_K (the activation format of every 256-element weight type).
 * Decoders: gguf-and-quants.md 2.5. Q8_K quantizer: 2.11. Dot products: ggml's *_q8_K_generic.
 *
 * Q3_K..Q6_K dots in ggml accumulate integer products into 8 lanes (lane = element index mod 8),
 * scale each lane sum by d = d_x * d_y into 8 float lane totals, and add the 8 totals at the
 * very end of the row; the mins of Q4_K/Q5_K are subtracted from the running sum per block,
 * before the lanes are added. Reproducing that order is what makes the results bit-identical.
 */
#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_util.h"

// ---- shared unpacking ----

/* 2-bit plane addressing (spec 2.5): element e of a super-block in a 64-byte packed array. */
static inline int plane2(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Q3_K signed 6-bit scale of sub-block i (0..15), range -32..31. */
static inline int q3k_scale(const uint8_t *S, int i) {
    int low4 = i < 8 ? (S[i] & 15) : (S[i - 8] >> 4);
    int high2 = (S[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low4 | high2 << 4) - 32;
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) ("get_scale_min_k4"). */
static inline void k4_scale_min(const uint8_t *S, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = S[j] & 63;
        *mn = S[j + 4] & 63;
    } else {
        *sc = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4);
        *mn = (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
    }
}

/* Q4_K low 4 bits of element e from the 128-byte nibble array. */
static inline int k4_nibble(const uint8_t *qs, int e) {
    const uint8_t b = qs[32 * (e / 64) + e % 32];
    return e % 64 < 32 ? (b & 15) : (b >> 4);
}

/* Q6_K signed 6-bit code of element e, range -32..31. */
static inline int q6k_code(const uint8_t *ql, const uint8_t *qh, int e) {
    const int nh = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t b = ql[64 * nh + l + 32 * (k & 1)];
    const int lo = k < 2 ? (b & 15) : (b >> 4);
    const int hi = (qh[32 * nh + l] >> (2 * k)) & 3;
    return (lo | hi << 4) - 32;
}

// ---- dequantization ----

void muse_to_float_q2_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d), dmin = muse_h2f(x[i].dmin);
        for (int e = 0; e < 256; e++) {
            const uint8_t s = x[i].scales[e / 16];
            const float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
            y[e] = dl * (float)plane2(x[i].qs, e) - ml;
        }
    }
}

void muse_to_float_q3_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d);
        for (int e = 0; e < 256; e++) {
            const int hb = (x[i].hmask[e % 32] >> (e / 32)) & 1;
            const int q = plane2(x[i].qs, e) - (hb ? 0 : 4);
            y[e] = (d * (float)q3k_scale(x[i].scales, e / 16)) * (float)q;
        }
    }
}

void muse_to_float_q4_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d), dmin = muse_h2f(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            k4_scale_min(x[i].scales, j, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            for (int e = 32 * j; e < 32 * j + 32; e++) y[e] = d1 * (float)k4_nibble(x[i].qs, e) - m1;
        }
    }
}

void muse_to_float_q5_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d), dmin = muse_h2f(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            k4_scale_min(x[i].scales, j, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            for (int e = 32 * j; e < 32 * j + 32; e++) {
                const int q = k4_nibble(x[i].qs, e) + 16 * ((x[i].qh[e % 32] >> (e / 32)) & 1);
                y[e] = d1 * (float)q - m1;
            }
        }
    }
}

void muse_to_float_q6_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d);
        for (int e = 0; e < 256; e++)
            y[e] = (d * (float)x[i].scales[e / 16]) * (float)q6k_code(x[i].ql, x[i].qh, e);
    }
}

void muse_to_float_q8_K(const void *vx, float *y, int64_t n) {
    const struct muse_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256)
        for (int e = 0; e < 256; e++) y[e] = x[i].d * (float)x[i].qs[e];
}

// ---- Q8_K reference quantizer (spec 2.11) ----

/* The first element of largest |x| sets iscale = -127/max, so it becomes -127; codes are
 * nearest-int (half to even) clamped above at 127; bsums are the 16-element sums; d = 1/iscale. */
void muse_from_float_q8_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            const int v = muse_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int b = 0; b < 16; b++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y[i].qs[16 * b + j];
            y[i].bsums[b] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---- dot products with Q8_K ----

void muse_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q2_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        const float dall = y[i].d * muse_h2f(x[i].d);
        const float dmin = y[i].d * muse_h2f(x[i].dmin);
        int isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int isuml = 0;
            for (int e = 16 * sb; e < 16 * sb + 16; e++) isuml += y[i].qs[e] * plane2(x[i].qs, e);
            isum += (x[i].scales[sb] & 15) * isuml;
        }
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

/* Adds the 8 lane sums of one block (aux[l] = sum over e = l mod 8) scaled by d into sums[]. */
static inline void lanes_accumulate(float sums[8], const int32_t aux[8], float d) {
    for (int l = 0; l < 8; l++) sums[l] += d * (float)aux[l];
}

static inline float lanes_total(float sumf, const float sums[8]) {
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

void muse_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q3_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sums[8] = {0};
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t aux[8] = {0};
        for (int e = 0; e < 256; e++) {
            const int hb = (x[i].hmask[e % 32] >> (e / 32)) & 1;
            const int q = plane2(x[i].qs, e) - (hb ? 0 : 4);
            aux[e % 8] += q3k_scale(x[i].scales, e / 16) * (q * y[i].qs[e]);
        }
        lanes_accumulate(sums, aux, muse_h2f(x[i].d) * y[i].d);
    }
    *s = lanes_total(0.0f, sums);
}

/* One Q4_K/Q5_K block (qh NULL for Q4_K): lanes into sums[], mins subtracted from *sumf. */
static void k45_block(uint16_t d, uint16_t dmin, const uint8_t *S, const uint8_t *qh, const uint8_t *qs,
                      const struct muse_block_q8_K *yb, float sums[8], float *sumf) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) k4_scale_min(S, j, &sc[j], &mn[j]);
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += yb->bsums[j] * mn[j / 2];
    int32_t aux[8] = {0};
    for (int e = 0; e < 256; e++) {
        int q = k4_nibble(qs, e);
        if (qh) q += 16 * ((qh[e % 32] >> (e / 32)) & 1);
        aux[e % 8] += sc[e / 32] * (q * yb->qs[e]);
    }
    lanes_accumulate(sums, aux, muse_h2f(d) * yb->d);
    const float dm = muse_h2f(dmin) * yb->d;
    *sumf -= dm * (float)sumi;
}

void muse_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f, sums[8] = {0};
    for (int64_t i = 0; i < n / 256; i++)
        k45_block(x[i].d, x[i].dmin, x[i].scales, NULL, x[i].qs, &y[i], sums, &sumf);
    *s = lanes_total(sumf, sums);
}

void muse_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q5_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f, sums[8] = {0};
    for (int64_t i = 0; i < n / 256; i++)
        k45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qh, x[i].qs, &y[i], sums, &sumf);
    *s = lanes_total(sumf, sums);
}

void muse_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q6_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sums[8] = {0};
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t aux[8] = {0};
        for (int e = 0; e < 256; e++)
            aux[e % 8] += x[i].scales[e / 16] * (q6k_code(x[i].ql, x[i].qh, e) * y[i].qs[e]);
        lanes_accumulate(sums, aux, muse_h2f(x[i].d) * y[i].d);
    }
    *s = lanes_total(0.0f, sums);
}
