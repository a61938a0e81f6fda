/*
 * quant_random.c - muse_quant_random_row: random valid blocks of every type.
 *
 * Method: each block is first filled with random bytes, then the fields that carry scales or
 * redundant data are overwritten. What "valid" means per family:
 *   legacy Q4_0..Q5_1, IQ4_NL, Q1_0: every code pattern is valid; only the fp16 d (and m, set
 *       to -(centre code)*d so values are centred on 0) are written.
 *   Q8_0 / Q8_1 / Q8_K: codes limited to -127..127 (what the reference quantizers produce);
 *       Q8_1's s = fp16(d * sum(qs)) and Q8_K's bsums are recomputed from the codes.
 *   K-quants: random scale/min bytes are valid 6-bit (or 4-bit, int8) fields by construction;
 *       d and dmin are written (dmin chosen so the average sub-block is centred on 0).
 *   I-quants: grid indices and sign indices are masked by their bit widths, so any bytes index
 *       inside the tables; d is written (IQ1_M: into the top nibbles of the scale words).
 *   TQ1_0: bytes are real trit packings ceil(v * 256 / 243) of random trit groups; TQ2_0:
 *       codes are 0..2 only (3 is never written by the reference); d written.
 *   MXFP4: the E8M0 exponent nearest to the wanted scale; NVFP4: the UE4M3 scale nearest to
 *       it, in all four sub-blocks (never 0x00 or 0x7F).
 * The per-type constant k_rms is the RMS of the decoded values when the scale field is 1
 * (measured once by decoding 2^20 random elements per type with scale 1 and multiplying the
 * first guess by the measured RMS); the scale field is then set to scale / k_rms.
 */
#include "kernels/quant_random.h"

#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/quant_util.h"

static inline uint64_t rng_next(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_bytes(uint64_t *s, void *dst, size_t n) {
    uint8_t *p = dst;
    while (n >= 8) {
        uint64_t r = rng_next(s);
        memcpy(p, &r, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t r = rng_next(s);
        memcpy(p, &r, n);
    }
}

/* Irwin-Hall of 4 uniforms, standardised: mean 0, std 1, support +-3.46. */
static inline float normalish(uint64_t *s) {
    uint64_t r = rng_next(s);
    float sum = 0.0f;
    for (int k = 0; k < 4; k++) sum += (float)((r >> (16 * k)) & 0xffff) * (1.0f / 65536.0f);
    return (sum - 2.0f) * 1.7320508f;
}

static inline void fix_q8(int8_t *qs, int n) {
    for (int j = 0; j < n; j++) if (qs[j] == -128) qs[j] = -127;
}

static inline uint16_t h(float v) { return muse_fp32_to_fp16(v); }

/* UE4M3 byte whose value is nearest to v (v > 0), avoiding 0x00 and 0x7F. */
static uint8_t ue4m3_nearest(float v) {
    uint8_t best = 1;
    float err = INFINITY;
    for (int b = 1; b < 0x7f; b++) {
        float e = fabsf(2.0f * muse_ue4m3_half((uint8_t)b) - v);
        if (e < err) { err = e; best = (uint8_t)b; }
    }
    return best;
}

/* RMS of the decoded values with unit scale field (see the file comment). */
static float k_rms(enum muse_type t) {
    switch (t) {
    case MUSE_TYPE_Q4_0: return 4.61f;
    case MUSE_TYPE_Q4_1: return 4.61f;
    case MUSE_TYPE_Q5_0: return 9.25f;
    case MUSE_TYPE_Q5_1: return 9.25f;
    case MUSE_TYPE_Q8_0: case MUSE_TYPE_Q8_1: case MUSE_TYPE_Q8_K: return 73.6f;
    case MUSE_TYPE_Q2_K: return 13.9f;
    case MUSE_TYPE_Q3_K: return 43.4f;
    case MUSE_TYPE_Q4_K: return 258.8f;
    case MUSE_TYPE_Q5_K: return 531.0f;
    case MUSE_TYPE_Q6_K: return 1367.6f;
    case MUSE_TYPE_IQ2_XXS: return 53.2f;
    case MUSE_TYPE_IQ2_XS: return 55.9f;
    case MUSE_TYPE_IQ2_S: return 56.4f;
    case MUSE_TYPE_IQ3_XXS: return 142.5f;
    case MUSE_TYPE_IQ3_S: return 140.4f;
    case MUSE_TYPE_IQ1_S: case MUSE_TYPE_IQ1_M: return 7.3f;
    case MUSE_TYPE_IQ4_NL: return 67.0f;
    case MUSE_TYPE_IQ4_XS: return 1245.0f;
    case MUSE_TYPE_TQ1_0: case MUSE_TYPE_TQ2_0: return 0.816f;
    case MUSE_TYPE_MXFP4: case MUSE_TYPE_NVFP4: return 5.85f;
    default: return 1.0f;
    }
}

/* Per-row constants: the scale field value d and the FP4 scale bytes derived from it. */
struct gen_params {
    float d;
    uint8_t mx_e;   /* MXFP4: e8m0_half(e) = 2^(e-128) nearest to d */
    uint8_t nv_u;   /* NVFP4: ue4m3_half(u) nearest to d */
};

/* Fill one block of `type` at b. */
static void gen_block(enum muse_type type, uint8_t *b, size_t size, uint64_t *s, const struct gen_params *gp) {
    const float d = gp->d;
    fill_bytes(s, b, size);
    switch (type) {
    case MUSE_TYPE_Q4_0: ((struct muse_block_q4_0 *)b)->d = h(d); break;
    case MUSE_TYPE_Q4_1: {
        struct muse_block_q4_1 *x = (void *)b;
        x->d = h(d); x->m = h(-7.5f * d); break;
    }
    case MUSE_TYPE_Q5_0: ((struct muse_block_q5_0 *)b)->d = h(d); break;
    case MUSE_TYPE_Q5_1: {
        struct muse_block_q5_1 *x = (void *)b;
        x->d = h(d); x->m = h(-15.5f * d); break;
    }
    case MUSE_TYPE_Q8_0: {
        struct muse_block_q8_0 *x = (void *)b;
        x->d = h(d); fix_q8(x->qs, 32); break;
    }
    case MUSE_TYPE_Q8_1: {
        struct muse_block_q8_1 *x = (void *)b;
        fix_q8(x->qs, 32);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += x->qs[j];
        x->d = h(d);
        x->s = h((float)sum * muse_h2f(x->d)); break;   /* s from the stored d */
    }
    case MUSE_TYPE_Q8_K: {
        struct muse_block_q8_K *x = (void *)b;
        fix_q8(x->qs, 256);
        for (int k = 0; k < 16; k++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += x->qs[16 * k + j];
            x->bsums[k] = (int16_t)sum;
        }
        x->d = d; break;
    }
    case MUSE_TYPE_Q2_K: {   /* mean of a sub-block is d*sc*1.5 - dmin*mn, E[sc] = E[mn] */
        struct muse_block_q2_K *x = (void *)b;
        x->d = h(d); x->dmin = h(1.5f * d); break;
    }
    case MUSE_TYPE_Q3_K: ((struct muse_block_q3_K *)b)->d = h(d); break;
    case MUSE_TYPE_Q4_K: {   /* mean d*sc*7.5 - dmin*mn */
        struct muse_block_q4_K *x = (void *)b;
        x->d = h(d); x->dmin = h(7.5f * d); break;
    }
    case MUSE_TYPE_Q5_K: {
        struct muse_block_q5_K *x = (void *)b;
        x->d = h(d); x->dmin = h(15.5f * d); break;
    }
    case MUSE_TYPE_Q6_K: ((struct muse_block_q6_K *)b)->d = h(d); break;
    case MUSE_TYPE_IQ2_XXS: ((struct muse_block_iq2_xxs *)b)->d = h(d); break;
    case MUSE_TYPE_IQ2_XS: ((struct muse_block_iq2_xs *)b)->d = h(d); break;
    case MUSE_TYPE_IQ2_S: ((struct muse_block_iq2_s *)b)->d = h(d); break;
    case MUSE_TYPE_IQ3_XXS: ((struct muse_block_iq3_xxs *)b)->d = h(d); break;
    case MUSE_TYPE_IQ3_S: ((struct muse_block_iq3_s *)b)->d = h(d); break;
    case MUSE_TYPE_IQ1_S: ((struct muse_block_iq1_s *)b)->d = h(d); break;
    case MUSE_TYPE_IQ1_M: {
        struct muse_block_iq1_m *x = (void *)b;
        const uint16_t dh = h(d);
        for (int k = 0; k < 4; k++) {
            uint16_t w = muse_rd_le16(x->scales + 2 * k);
            w = (uint16_t)((w & 0x0fff) | ((dh >> (4 * k)) & 15) << 12);
            x->scales[2 * k] = (uint8_t)w;
            x->scales[2 * k + 1] = (uint8_t)(w >> 8);
        }
        break;
    }
    case MUSE_TYPE_IQ4_NL: ((struct muse_block_iq4_nl *)b)->d = h(d); break;
    case MUSE_TYPE_IQ4_XS: ((struct muse_block_iq4_xs *)b)->d = h(d); break;
    case MUSE_TYPE_TQ1_0: {
        struct muse_block_tq1_0 *x = (void *)b;
        for (int j = 0; j < 48; j++) x->qs[j] = (uint8_t)(((x->qs[j] % 243) * 256 + 242) / 243);
        for (int j = 0; j < 4; j++) x->qh[j] = (uint8_t)(((x->qh[j] % 81) * 3 * 256 + 242) / 243);
        x->d = h(d); break;
    }
    case MUSE_TYPE_TQ2_0: {
        struct muse_block_tq2_0 *x = (void *)b;
        for (int j = 0; j < 64; j++) {
            int v = x->qs[j] % 81, q = 0;
            for (int k = 0; k < 4; k++, v /= 3) q |= (v % 3) << (2 * k);
            x->qs[j] = (uint8_t)q;
        }
        x->d = h(d); break;
    }
    case MUSE_TYPE_MXFP4: ((struct muse_block_mxfp4 *)b)->e = gp->mx_e; break;
    case MUSE_TYPE_NVFP4: memset(((struct muse_block_nvfp4 *)b)->d, gp->nv_u, 4); break;
    case MUSE_TYPE_Q1_0: ((struct muse_block_q1_0 *)b)->d = h(d); break;
    default: break;
    }
}

void muse_quant_random_row(enum muse_type type, void *dst, int64_t n, uint64_t *rng_state, float scale) {
    const struct muse_type_layout *lay = muse_type_layout_get((uint32_t)type);
    if (!lay) return;
    switch (type) {
    case MUSE_TYPE_F32: {
        float *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = scale * normalish(rng_state);
        return;
    }
    case MUSE_TYPE_F16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = muse_fp32_to_fp16(scale * normalish(rng_state));
        return;
    }
    case MUSE_TYPE_BF16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = muse_fp32_to_bf16(scale * normalish(rng_state));
        return;
    }
    case MUSE_TYPE_F64: {
        double *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = (double)(scale * normalish(rng_state));
        return;
    }
    case MUSE_TYPE_I8: case MUSE_TYPE_I16: case MUSE_TYPE_I32: case MUSE_TYPE_I64:
        fill_bytes(rng_state, dst, (size_t)n * lay->type_size);
        return;
    default: break;
    }
    struct gen_params gp = {.d = scale / k_rms(type)};
    if (type == MUSE_TYPE_MXFP4) {
        const float lg = gp.d > 0.0f ? log2f(gp.d) : -200.0f;
        const int e = lg < -127.0f ? 1 : lg > 126.0f ? 254 : (int)lrintf(lg) + 128;
        gp.mx_e = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
    }
    if (type == MUSE_TYPE_NVFP4) gp.nv_u = ue4m3_nearest(2.0f * gp.d);   /* once per row */
    uint8_t *p = dst;
    for (int64_t i = 0; i < n / lay->block_size; i++, p += lay->type_size)
        gen_block(type, p, lay->type_size, rng_state, &gp);
}
