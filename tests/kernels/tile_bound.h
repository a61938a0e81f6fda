/*
 * tile_bound.h - what the tile GEMM's tests (test_tile_gemm, tests/model/test_tile_forward) bound
 * its outputs with (docs/cpu-backend.md, "The tile GEMM"): the types of MUSE_TILE_TYPES with their
 * first packing stage, and per weight row and activation row (tile layout) the sum T of the
 * absolute values of the integer-times-scale terms both sides sum (the bound is 2 gamma(ne0/16 +
 * 8) T) plus, for the Q8_1 activations of Q4_1/Q5_1, the half roundings of the reference's s;
 * tile_bound: the whole bound, float weight types included.
 * Static functions: include from one test program each.
 */
#pragma once

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/types.h"
#include "kernels/x86/kernels_isa.h"
#include "kernels/x86/tile_decode.h"

struct tile_type {
    enum muse_type type;
    struct tile_cfg cfg;
    tile_decode_fn dec;
};

#define TT_FN(T, t, ...) static void tt_##t(const uint8_t *blk, struct tile_row *r) { td_##t(blk, r); }
MUSE_TILE_TYPES(TT_FN)
#define TT_ENTRY(T, t, FBE, G, O, CMAX, MINS, S1) \
    {MUSE_TYPE_##T, TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1), tt_##t},
static const struct tile_type tile_types[] = {MUSE_TILE_TYPES(TT_ENTRY)};
#define N_TILE_TYPES (int)(sizeof tile_types / sizeof tile_types[0])

static inline const struct tile_type *tile_type_of(enum muse_type t) {
    for (int i = 0; i < N_TILE_TYPES; i++)
        if (tile_types[i].type == t) return &tile_types[i];
    return NULL;
}

/* T of weight row w and activation row xp (the tile layout): the sum over float blocks of
 * |d d_a| sum_e |s v a| + |m d_a| sum_u |mn A_u| (s: the float group scale where tile_cfg.fgs),
 * in double. */
static inline double tile_abs_terms(const struct tile_type *tt, int64_t ne0, const uint8_t *w, const uint8_t *xp) {
    const int8_t *a = (const int8_t *)xp;
    const int16_t *gs = (const int16_t *)(const void *)(xp + ne0);
    const float *da = (const float *)(const void *)(xp + ne0 + ne0 / 8);
    double t = 0;
    struct tile_row big;
    for (int64_t fb = 0; fb < ne0 / tt->cfg.fbe; fb++) {
        struct tile_row r;
        memset(&r, 0, sizeof r);
        td_float_block(tt->cfg, tt->dec, w, fb, &big, &r);
        const int64_t e0 = fb * tt->cfg.fbe;
        double si = 0, sm = 0;
        for (int e = 0; e < tt->cfg.fbe; e++)
            si += fabs((tt->cfg.fgs ? (double)r.dg[e / tt->cfg.g] : (double)r.s[e / tt->cfg.g]) * r.v[e] * a[e0 + e]);
        for (int u = 0; u < tt->cfg.fbe / 16 && tt->cfg.mins; u++) sm += fabs((double)r.mn[u] * gs[e0 / 16 + u]);
        t += fabs((double)r.d * da[e0 / 32]) * si + fabs((double)r.m * da[e0 / 32]) * sm;
    }
    return t;
}

/* The reference's Q8_1 activations carry s = fp16(d * A) (A: the block's code sum, d the scale
 * before its own rounding to the half d_a), which its Q4_1/Q5_1 dots use for the min term; the
 * tile GEMM uses d_a * A exactly. Two half roundings (of d, of s) part them: at most
 * |m| |d_a A| 2^-10 per block (with a margin for d_a's own rounding), summed. 0 for the others. */
static inline double tile_q81_s_rounding(const struct tile_type *tt, int64_t ne0, const uint8_t *w, const uint8_t *xp) {
    if (muse_type_traits[tt->type].vec_dot_type != MUSE_TYPE_Q8_1) return 0.0;
    const int16_t *gs = (const int16_t *)(const void *)(xp + ne0);
    const float *da = (const float *)(const void *)(xp + ne0 + ne0 / 8);
    double t = 0;
    struct tile_row big;
    for (int64_t fb = 0; fb < ne0 / 32; fb++) {
        struct tile_row r;
        memset(&r, 0, sizeof r);
        td_float_block(tt->cfg, tt->dec, w, fb, &big, &r);
        t += fabs((double)r.m) * fabs((double)da[fb] * (gs[2 * fb] + gs[2 * fb + 1])) * 0x1.01p-10;
    }
    return t;
}

/* The bound of one tile GEMM output against the reference dot (muse_x86_vec_dot) of weight row w
 * and activation row xp (tile layout). Quant types (tt: their packing): 2 gamma(ne0/16 + 8) T plus
 * the Q8_1 s rounding. Float types (tt NULL): both sides sum the same exact products w_k a_k (a:
 * the vec_dot_type's values, xp's f32), the tile GEMM in one FMA chain, the reference in 8 lanes
 * and a sum of the lanes: (gamma(ne0) + gamma(ne0/8 + 3)) sum |w_k a_k|. */
static inline double tile_bound(enum muse_type type, const struct tile_type *tt, int64_t ne0, const uint8_t *w,
                                const uint8_t *xp) {
    if (tt) return 2.0 * muse_tile_gamma(ne0 / 16 + 8) * tile_abs_terms(tt, ne0, w, xp) + tile_q81_s_rounding(tt, ne0, w, xp);
    float *wf = malloc(sizeof(float) * (size_t)ne0);
    if (!wf) return 0.0;
    muse_type_traits[type].to_float(w, wf, ne0);
    const float *a = (const float *)(const void *)xp;
    double t = 0;
    for (int64_t e = 0; e < ne0; e++) t += fabs((double)wf[e] * a[e]);
    free(wf);
    return (muse_tile_gamma(ne0) + muse_tile_gamma(ne0 / 8 + 3)) * t;
}
