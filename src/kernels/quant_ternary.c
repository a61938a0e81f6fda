/*
 * quant_ternary.c - reference numerics of the ternary types TQ1_0 and TQ2_0 (gguf-and-quants.md
 * 2.7): decode, the reference quantizers (d = amax, trit = lroundf(x/d) + 1) and the dots with
 * Q8_K (ggml's *_q8_K_generic: one integer sum per block, then sum * (d_x * d_y) resp.
 * sum * (d_y * d_x)).
 */
#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_util.h"

static const uint8_t pow3[5] = {1, 3, 9, 27, 81};

/* Trit n (0..4) of a packed byte: ((byte * 3^n) mod 256) * 3 >> 8, result 0..2. */
static inline int trit(uint8_t b, int n) {
    const uint8_t q = (uint8_t)(b * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

/* Trit code (0..2) of element e (0..255) of a TQ1_0 block, per the element order of 2.7. */
static inline int tq1_code(const struct muse_block_tq1_0 *b, int e) {
    if (e < 160) return trit(b->qs[e % 32], e / 32);
    if (e < 240) return trit(b->qs[32 + (e - 160) % 16], (e - 160) / 16);
    return trit(b->qh[(e - 240) % 4], (e - 240) / 4);
}

static inline int tq2_code(const struct muse_block_tq2_0 *b, int e) {
    return (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void muse_to_float_tq1_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_tq1_0 *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d);
        for (int e = 0; e < 256; e++) y[e] = (float)(tq1_code(&x[i], e) - 1) * d;
    }
}

void muse_to_float_tq2_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = muse_h2f(x[i].d);
        for (int e = 0; e < 256; e++) y[e] = (float)(tq2_code(&x[i], e) - 1) * d;
    }
}

/* d = amax over the block, id = 1/d, trit code lroundf(x*id) + 1 in 0..2. */
static float ternary_codes(const float *x, uint8_t q[256]) {
    float amax = 0.0f;
    for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
    for (int j = 0; j < 256; j++) q[j] = (uint8_t)(lroundf(x[j] * id) + 1);
    return amax;
}

/* Packs k trits (most significant first) into the fixed-point byte ceil(v * 256 / 243). */
static uint8_t pack_trits(const uint8_t *t, int k, int stride) {
    int v = 0;
    for (int j = 0; j < k; j++) v = v * 3 + t[j * stride];
    for (int j = k; j < 5; j++) v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

void muse_from_float_tq1_0(const float *x, void *vy, int64_t n) {
    struct muse_block_tq1_0 *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        uint8_t q[256];
        y[i].d = muse_fp32_to_fp16(ternary_codes(x, q));
        for (int m = 0; m < 32; m++) y[i].qs[m] = pack_trits(q + m, 5, 32);
        for (int m = 0; m < 16; m++) y[i].qs[32 + m] = pack_trits(q + 160 + m, 5, 16);
        for (int m = 0; m < 4; m++) y[i].qh[m] = pack_trits(q + 240 + m, 4, 4);
    }
}

void muse_from_float_tq2_0(const float *x, void *vy, int64_t n) {
    struct muse_block_tq2_0 *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        uint8_t q[256];
        y[i].d = muse_fp32_to_fp16(ternary_codes(x, q));
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < 256; e++)
            y[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * ((e % 128) / 32)));
    }
}

void muse_vec_dot_tq1_0_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_tq1_0 *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int sum = 0;
        for (int e = 0; e < 256; e++) sum += (tq1_code(&x[i], e) - 1) * y[i].qs[e];
        sumf += (float)sum * (muse_h2f(x[i].d) * y[i].d);
    }
    *s = sumf;
}

void muse_vec_dot_tq2_0_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_tq2_0 *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t sumi = 0;
        for (int e = 0; e < 256; e++) sumi += y[i].qs[e] * (tq2_code(&x[i], e) - 1);
        const float d = y[i].d * muse_h2f(x[i].d);
        sumf += (float)sumi * d;
    }
    *s = sumf;
}
