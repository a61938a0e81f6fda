/*
 * quant_legacy.c - reference numerics of the small-block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q8_1 (32 elements), IQ4_NL (32), MXFP4 (32), NVFP4 (64) and Q1_0 (128).
 * Decoders follow gguf-and-quants.md 2.4/2.6/2.8/2.9; quantizers 2.11; the dot products
 * reproduce the integer sums and the float evaluation order of ggml's *_generic kernels
 * (the exact parenthesisation is noted at each accumulation, because it differs per type).
 */
#include <float.h>
#include <math.h>

#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"

// ---- dequantization ----

void muse_to_float_q4_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void muse_to_float_q4_1(const void *vx, float *y, int64_t n) {
    const struct muse_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d), m = muse_h2f(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 15) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* 5-bit code of element j (0..31) of a Q5 block: 4 low bits from qs, the 5th from qh bit j. */
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j) {
    int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    return lo | (int)((qh >> j) & 1) << 4;
}

void muse_to_float_q5_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d);
        const uint32_t qh = muse_rd_le32(x[i].qh);
        for (int j = 0; j < 32; j++) y[j] = (float)(q5_code(x[i].qs, qh, j) - 16) * d;
    }
}

void muse_to_float_q5_1(const void *vx, float *y, int64_t n) {
    const struct muse_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d), m = muse_h2f(x[i].m);
        const uint32_t qh = muse_rd_le32(x[i].qh);
        for (int j = 0; j < 32; j++) y[j] = (float)q5_code(x[i].qs, qh, j) * d + m;
    }
}

void muse_to_float_q8_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* ggml has no Q8_1 dequantizer; the value is q * d (spec 2.4), s is ignored. */
void muse_to_float_q8_1(const void *vx, float *y, int64_t n) {
    const struct muse_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void muse_to_float_iq4_nl(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)muse_kvalues_iq4nl[x[i].qs[j] & 15];
            y[j + 16] = d * (float)muse_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void muse_to_float_mxfp4(const void *vx, float *y, int64_t n) {
    const struct muse_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = muse_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)muse_kvalues_mxfp4[x[i].qs[j] & 15] * d;
            y[j + 16] = (float)muse_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

void muse_to_float_nvfp4(const void *vx, float *y, int64_t n) {
    const struct muse_block_nvfp4 *x = vx;
    for (int64_t i = 0; i < n / 64; i++, y += 64) {
        for (int s = 0; s < 4; s++) {
            const float d = muse_ue4m3_half(x[i].d[s]);
            for (int j = 0; j < 8; j++) {
                const uint8_t c = x[i].qs[8 * s + j];
                y[16 * s + j] = (float)muse_kvalues_mxfp4[c & 15] * d;
                y[16 * s + j + 8] = (float)muse_kvalues_mxfp4[c >> 4] * d;
            }
        }
    }
}

void muse_to_float_q1_0(const void *vx, float *y, int64_t n) {
    const struct muse_block_q1_0 *x = vx;
    for (int64_t i = 0; i < n / 128; i++, y += 128) {
        const float d = muse_h2f(x[i].d), nd = -d;
        for (int j = 0; j < 128; j++) y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : nd;
    }
}

// ---- reference quantizers (spec 2.11) ----

/*
 * A rounded Q8 code as an int8. Finite inputs are already within [-127, 127]; a NaN or an
 * infinite activation (a diverged model, a fuzzed file) would make the float-to-int8 cast
 * undefined, so it maps to 0 - what x86's cvttss2si + truncation yields for ggml.
 */
static inline int8_t q8_code(float r) {
    return (r >= -128.0f && r <= 127.0f) ? (int8_t)r : 0;
}

/*
 * q8_code(roundf(v)) without the libm calls (baseline x86-64 has no rounding instruction, so
 * roundf is a call): truncate, then step away from zero when the dropped fraction is >= 1/2.
 * v - trunc(v) is exact for |v| < 2^23, so this is roundf exactly; larger or non-finite v, whose
 * roundf lies outside [-128, 127], give 0 as q8_code does.
 */
static inline int8_t q8_round_code(float v) {
    if (!(v > -129.0f && v < 128.0f)) return 0;
    int q = (int)v;
    const float frac = v - (float)q;
    q += (frac >= 0.5f) - (frac <= -0.5f);   /* branch-free: the sign of random data is unpredictable */
    return (q >= -128 && q <= 127) ? (int8_t)q : 0;
}

/* Q8_0 and Q8_1: d = amax/127 in f32, id from the UNROUNDED d, q = roundf (half away from 0). */
void muse_from_float_q8_0(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float a = fabsf(x[j]);
            amax = a > amax ? a : amax;   /* = fmaxf(amax, a): a NaN never wins */
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = q8_round_code(x[j] * id);
    }
}

void muse_from_float_q8_1(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = q8_code(roundf(x[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = muse_fp32_to_fp16((float)sum * d);
    }
}

/*
 * ggml's x86 (AVX/AVX2) quantize_row_q8_0 / _q8_1, which is what llama.cpp runs on x86 and
 * therefore what produced the x86 goldens: id = 127/amax (not 1/d, may differ by an ulp) and
 * codes rounded half to EVEN (_mm256_round_ps). d, s and the stored fp16 values as in the ref.
 */
/* Quantizes 32 values; returns the unrounded f32 d and the code sum. */
static float q8_x86_block(const float *x, uint16_t *d_out, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    *d_out = muse_fp32_to_fp16(d);
    *sum = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = q8_code(nearbyintf(x[j] * id));   /* default rounding mode: nearest even */
        *sum += qs[j];
    }
    return d;
}

void muse_from_float_q8_0_x86(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_0 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / 32; i++, x += 32) q8_x86_block(x, &y[i].d, y[i].qs, &sum);
}

void muse_from_float_q8_1_x86(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_1 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = q8_x86_block(x, &y[i].d, y[i].qs, &sum);
        y[i].s = muse_fp32_to_fp16(d * (float)sum);
    }
}

/* Signed value of the first element with the largest magnitude (0 for an all-zero block). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    return max;
}

/* Truncation toward zero as ggml's (int8_t) cast of a small positive float; clamp as MIN(hi, .). */
static inline uint8_t trunc_code(float v, int hi) {
    int q = (int8_t)v;
    return (uint8_t)(q < hi ? q : hi);
}

void muse_from_float_q4_0(const float *x, void *vy, int64_t n) {
    struct muse_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(trunc_code(x[j] * id + 8.5f, 15) | trunc_code(x[j + 16] * id + 8.5f, 15) << 4);
    }
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

void muse_from_float_q4_1(const float *x, void *vy, int64_t n) {
    struct muse_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        y[i].m = muse_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(trunc_code((x[j] - mn) * id + 0.5f, 15) |
                                   trunc_code((x[j + 16] - mn) * id + 0.5f, 15) << 4);
    }
}

/* Pack 32 five-bit codes into qs (low nibbles, element j / j+16 pairing) and qh (bit j). */
static void q5_pack(const uint8_t q[32], uint8_t qs[16], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        qh |= (uint32_t)(q[j] >> 4 & 1) << j;
        qh |= (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh_out[k] = (uint8_t)(qh >> (8 * k));
}

void muse_from_float_q5_0(const float *x, void *vy, int64_t n) {
    struct muse_block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = trunc_code(x[j] * id + 16.5f, 31);
        q5_pack(q, y[i].qs, y[i].qh);
    }
}

void muse_from_float_q5_1(const float *x, void *vy, int64_t n) {
    struct muse_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        y[i].m = muse_fp32_to_fp16(mn);
        uint8_t q[32];
        /* ggml casts to uint8_t without a clamp; the value is <= 31.5 by construction */
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        q5_pack(q, y[i].qs, y[i].qh);
    }
}

/* Code c minimizing |kvalues_mxfp4[c] * d - x|, lowest code on ties. */
static uint8_t best_fp4(float x, float d) {
    int best = 0;
    float err = fabsf((float)muse_kvalues_mxfp4[0] * d - x);
    for (int c = 1; c < 16; c++) {
        float e = fabsf((float)muse_kvalues_mxfp4[c] * d - x);
        if (e < err) { best = c; err = e; }
    }
    return (uint8_t)best;
}

void muse_from_float_mxfp4(const float *x, void *vy, int64_t n) {
    struct muse_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* ggml casts the float straight to uint8_t; clamping only changes amax < 2^-125 or
         * inf/NaN, where that cast is undefined behaviour */
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        const uint8_t e = ef >= 0.0f && ef <= 255.0f ? (uint8_t)ef : (ef > 255.0f ? 255 : 0);
        const float d = muse_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(best_fp4(x[j], d) | best_fp4(x[j + 16], d) << 4);
    }
}

/* f32 -> UE4M3 byte as ggml_fp32_to_ue4m3: 0 for v <= 0 (and NaN), clamp to 448, subnormal
 * (round(v * 512), at most 7) below 2^-6, else 3 mantissa bits rounded half up by the next bit.
 * Every value with the top exponent (v >= 256, or rounding up into it) saturates to 0x7E = 448:
 * ggml never emits 0x78..0x7D. */
static uint8_t ue4m3_encode(float v) {
    if (!(v > 0.0f)) return 0;
    if (v > 448.0f) v = 448.0f;
    const uint32_t bits = muse_f32_to_bits(v);
    int e = (int)((bits >> 23) & 0xff) - 127 + 7;
    if (e <= 0) {
        int m = (int)(v * 512.0f + 0.5f);
        if (m > 7) m = 7;
        return m < 1 ? 0 : (uint8_t)m;
    }
    if (e >= 15) return 0x7e;
    int man = (int)((bits >> 20) & 7) + (int)((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++e >= 15) return 0x7e;
    }
    return (uint8_t)(e << 3 | man);
}

void muse_from_float_nvfp4(const float *x, void *vy, int64_t n) {
    struct muse_block_nvfp4 *y = vy;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++, x += 16) {
            float amax = 0.0f;
            for (int j = 0; j < 16; j++) if (amax < fabsf(x[j])) amax = fabsf(x[j]);
            const uint8_t u = ue4m3_encode(amax / 6.0f);
            const float d = muse_ue4m3_half(u);
            y[i].d[s] = u;
            for (int j = 0; j < 8; j++)
                y[i].qs[8 * s + j] = (uint8_t)(best_fp4(x[j], d) | best_fp4(x[j + 8], d) << 4);
        }
    }
}

void muse_from_float_q1_0(const float *x, void *vy, int64_t n) {
    struct muse_block_q1_0 *y = vy;
    for (int64_t i = 0; i < n / 128; i++, x += 128) {
        float sum = 0.0f;
        for (int j = 0; j < 128; j++) sum += fabsf(x[j]);
        y[i].d = muse_fp32_to_fp16(sum / 128.0f);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 128; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

// ---- dot products (weight row x activation row) ----

void muse_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sumf += (float)sumi * muse_h2f(x[i].d) * muse_h2f(y[i].d);        /* (sumi*dx)*dy */
    }
    *s = sumf;
}

void muse_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_1 *x = vx;
    const struct muse_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (x[i].qs[j] & 15) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        sumf += (muse_h2f(x[i].d) * muse_h2f(y[i].d)) * (float)sumi + muse_h2f(x[i].m) * muse_h2f(y[i].s);
    }
    *s = sumf;
}

void muse_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q5_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = muse_rd_le32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (q5_code(x[i].qs, qh, j) - 16) * y[i].qs[j];
        sumf += (muse_h2f(x[i].d) * muse_h2f(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

void muse_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q5_1 *x = vx;
    const struct muse_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = muse_rd_le32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += q5_code(x[i].qs, qh, j) * y[i].qs[j];
        sumf += (muse_h2f(x[i].d) * muse_h2f(y[i].d)) * (float)sumi + muse_h2f(x[i].m) * muse_h2f(y[i].s);
    }
    *s = sumf;
}

void muse_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q8_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (muse_h2f(x[i].d) * muse_h2f(y[i].d));     /* sumi*(dx*dy) */
    }
    *s = sumf;
}

/* ggml has no Q8_1 x Q8_1 kernel (Q8_1 is never a weight); this one mirrors Q8_0's order. */
void muse_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q8_1 *x = vx;
    const struct muse_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (muse_h2f(x[i].d) * muse_h2f(y[i].d));
    }
    *s = sumf;
}

/* Shared by IQ4_NL and MXFP4: a 16-entry int8 codebook, 32-element blocks, scale d per block. */
static int codebook_sum32(const int8_t *kv, const uint8_t *qs, const int8_t *q8) {
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < 16; j++) {
        sumi1 += q8[j] * kv[qs[j] & 15];
        sumi2 += q8[j + 16] * kv[qs[j] >> 4];
    }
    return sumi1 + sumi2;
}

void muse_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq4_nl *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = muse_h2f(y[i].d) * muse_h2f(x[i].d);
        sumf += d * (float)codebook_sum32(muse_kvalues_iq4nl, x[i].qs, y[i].qs);
    }
    *s = sumf;
}

void muse_vec_dot_mxfp4_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_mxfp4 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = muse_h2f(y[i].d) * muse_e8m0_half(x[i].e);
        sumf += d * (float)codebook_sum32(muse_kvalues_mxfp4, x[i].qs, y[i].qs);
    }
    *s = sumf;
}

/* One NVFP4 block (64) spans two Q8_0 blocks; each 16-element sub-block adds (dy*dx)*sumi. */
void muse_vec_dot_nvfp4_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_nvfp4 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int sb = 0; sb < 4; sb++) {
            const float d = muse_ue4m3_half(x[i].d[sb]);
            const struct muse_block_q8_0 *yb = &y[2 * i + sb / 2];
            const int8_t *q8 = yb->qs + (sb % 2) * 16;
            const float dy = muse_h2f(yb->d);
            int lo = 0, hi = 0;
            for (int j = 0; j < 8; j++) {
                const uint8_t c = x[i].qs[8 * sb + j];
                lo += q8[j] * muse_kvalues_mxfp4[c & 15];
                hi += q8[j + 8] * muse_kvalues_mxfp4[c >> 4];
            }
            sumf += dy * d * (float)(lo + hi);
        }
    }
    *s = sumf;
}

/* One Q1_0 block (128) spans four Q8_0 blocks: a float partial sum of d_y*sumi, then *d_x. */
void muse_vec_dot_q1_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q1_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 128; i++) {
        const float d0 = muse_h2f(x[i].d);
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) {
            const struct muse_block_q8_0 *yb = &y[4 * i + k];
            int sb = 0;
            for (int j = 0; j < 32; j++) {
                const int bit = (x[i].qs[4 * k + j / 8] >> (j % 8)) & 1;
                sb += bit ? yb->qs[j] : -yb->qs[j];
            }
            sumi += muse_h2f(yb->d) * (float)sb;
        }
        sumf += d0 * sumi;
    }
    *s = sumf;
}
