/*
 * quant_k_quantize.c - the reference weight quantizers of the K-quants: Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K. Each gives the bytes of ggml's quantize_row_<t>_ref, which is what llama-quantize runs
 * for these types when it has no importance matrix (ggml_quantize_chunk -> quantize_<t> with
 * quant_weights == NULL).
 *
 * These are searches, not formulas: a sub-block's scale (and min) come from trying a range of
 * candidate scales and keeping the one with the smallest weighted error, so one flipped rounding
 * anywhere can change every code of the block. Bit-exactness therefore rests on evaluating each
 * float expression exactly as ggml's C does: left to right, one IEEE f32 rounding per operation
 * (the Makefile's -ffp-contract=off forbids fused multiply-adds; ggml-base is built without FMA
 * flags), ints converted to float where C converts them, and the same integer truncations
 * (uint8/int8 stores of an int). The comments give the parenthesisation where it matters.
 * `nearest` is muse_nearest_int: round half to even via the 1.5*2^23 trick, like ggml's
 * nearest_int (meaningless beyond 2^22, in both).
 *
 * Searches per sub-block (ggml's helpers, reimplemented):
 *   qx_rmse  (Q6_K)  signed codes -nmax..nmax-1, weights x^2: the scale of the first guess
 *                    -nmax/max, refined by 18 more guesses -(nmax + 0.1*is)/max keeping the best
 *                    least-squares fit
 *   q3       (Q3_K)  signed codes, weights x^2, up to 5 passes of coordinate descent on the codes
 *   qkx2     (Q2_K, Q4_K, Q5_K) codes 0..nmax with a min: nstep+1 candidate scales, each solved
 *                    for the weighted least-squares (scale, min), the lowest error kept
 * The super-block then stores the sub-block scales (and mins) quantized to 4, 6 or 8 bits
 * against their maximum, and recomputes every code from the stored (rounded) scales.
 *
 * Speed: qx_rmse and qkx2 evaluate their candidate scales 4 at a time, one per lane of a 16-byte
 * vector (GCC/Clang vector extensions: SSE2 on x86-64, no -m flags; each lane does the scalar
 * computation in ggml's element order, so the lanes change nothing but the latency: the scalar
 * loops are bound by their serial sums). The candidates are then taken in ggml's order. Tested
 * byte for byte against ggml's own code (tests/kernels/test_ggml_ref.c) and llama-quantize's
 * files (tests/quantize).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_util.h"

#define GROUP_MAX_EPS 1e-15f   /* below this |max| a group is "all zero" */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Signed value of the first element of largest magnitude; *amax = its magnitude. */
static float signed_max(int n, const float *x, float *amax) {
    float max = 0.0f, am = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > am) { am = ax; max = x[i]; }
    }
    *amax = am;
    return max;
}

// ---- lanes: several candidate scales at once (GCC/Clang vector extensions) ----

#define LANES 4    /* one 16-byte vector: SSE2 on x86-64, NEON on arm64 */
#define NG 1       /* vectors in flight (2 or 3 were slower: more stale lanes after an acceptance) */
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int32_t vi __attribute__((vector_size(4 * LANES)));

/* muse_nearest_int per lane. (Vectors pass by pointer: 32-byte vector arguments would draw
 * GCC's AVX-ABI warning in this baseline-ISA file.) */
static inline void v_nearest(const vf *t, vi *out) {
    const vf magic = *t + 12582912.0f;
    vi bits;
    memcpy(&bits, &magic, sizeof bits);
    *out = (bits & 0x007fffff) - 0x00400000;
}

/* *v = mask ? a : *v, per lane (mask lanes are 0 or -1). */
static inline void v_select(const vi *mask, const vf *a, vf *v) {
    vi ia, iv;
    memcpy(&ia, a, sizeof ia);
    memcpy(&iv, v, sizeof iv);
    iv = (ia & *mask) | (iv & ~*mask);
    memcpy(v, &iv, sizeof iv);
}

/*
 * ggml's make_qx_quants with rmse_type 1 and no importance weights: codes L[i] in 0..2*nmax-1
 * (value l = L - nmax), returns the scale. The fit's sums are sumlx += (w*x)*l, suml2 += (w*l)*l
 * with w = x*x; a candidate wins when sumlx^2 > best*suml2.
 */
static float make_qx_rmse(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)(-nmax) / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, muse_nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    /* the 18 refinements is = -9..-1, 1..9 do not depend on each other: their sums run in lanes,
     * the winner is picked in order as in ggml */
    enum { NC = 18, NB = (NC + LANES - 1) / LANES };
    float cand[NB * LANES], c_sumlx[NB * LANES], c_suml2[NB * LANES];
    for (int c = 0; c < NB * LANES; c++) {
        const int is = c < 9 ? c - 9 : c - 8;   /* c >= NC: padding lanes, never read */
        cand[c] = -((float)nmax + 0.1f * (float)is) / max;
    }
    const vi lo = (vi){0} - nmax, hi = (vi){0} + (nmax - 1);
    for (int b = 0; b < NB; b++) {
        vf iscale_v, slx = {0}, sl2 = {0};
        memcpy(&iscale_v, &cand[b * LANES], sizeof iscale_v);
        for (int i = 0; i < n; i++) {
            const vf t = iscale_v * x[i];
            vi l;
            v_nearest(&t, &l);
            const vi below = l < lo, above = l > hi;
            l = (l & ~below) | (lo & below);
            l = (l & ~above) | (hi & above);
            const vf lf = __builtin_convertvector(l, vf);
            const float w = x[i] * x[i];
            slx += w * x[i] * lf;
            sl2 += w * lf * lf;
        }
        memcpy(&c_sumlx[b * LANES], &slx, sizeof slx);
        memcpy(&c_suml2[b * LANES], &sl2, sizeof sl2);
    }
    for (int c = 0; c < NC; c++) {
        sumlx = c_sumlx[c];
        suml2 = c_suml2[c];
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, muse_nearest_int(cand[c] * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * ggml's make_q3_quants with do_rmse: signed codes by the first guess -nmax/max, then up to 5
 * passes that move single codes to (x*sl2)/slx when that raises sumlx^2/suml2. L ends as
 * l + nmax (or all 0 for an all-zero group); returns sumlx/suml2 (0 when suml2 is 0).
 */
static float make_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)(-nmax) / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, muse_nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0.0f) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = imax(-nmax, imin(nmax - 1, muse_nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * ggml's make_qkx2_quants: codes L in 0..nmax for x ~ scale*L - the_min, with the weights w.
 * First guess: min = min(x, 0), scale = (max - min)/nmax, its weighted error (sum of w*|err| when
 * use_mad, else w*err^2) the best so far. Then, in order, for is = 0..nstep: candidate
 * iscale = (rmin + rdelta*is + nmax)/(max - min) gives codes l = clamp(nearest(iscale*(x - min)))
 * and the weighted least-squares (scale, min) for them (min clamped to <= 0, then
 * scale = sum_xl/sum_l2); a candidate whose error is strictly smaller replaces the best, INCLUDING
 * min, which the later candidates then use. Returns the scale; *the_min = -min (>= 0).
 *
 * Evaluation: the candidates are computed LANES at a time (GCC/Clang vector extensions, one
 * candidate per lane, each lane's sums in ggml's element order, so every lane is the scalar
 * computation), and accepted in order. An acceptance that changes min makes the following lanes
 * stale: the next batch restarts right after it. (About 2.8 of 21 candidates are accepted on
 * random data; the lanes hide the latency of the serial sums, which bounds the scalar loop.)
 * n <= 32.
 */
static float make_qkx2(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = muse_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    vi codes[32][NG];
    const vi zero = {0}, top = zero + nmax;
    const vf vzero = {0};
    int is = 0;
    while (is <= nstep) {
        vf cand_iscale[NG], sum_l[NG], sum_l2[NG], sum_xl[NG], this_scale[NG], this_min[NG], D[NG], cur_error[NG];
        for (int g = 0; g < NG; g++) {
            for (int k = 0; k < LANES; k++)
                cand_iscale[g][k] = (rmin + rdelta * (float)(is + LANES * g + k) + (float)nmax) / (max - min);
            sum_l[g] = sum_l2[g] = sum_xl[g] = cur_error[g] = vzero;
        }
        for (int i = 0; i < n; i++) {
            const float xm = x[i] - min;
            const vf w = weights[i] + vzero;
            for (int g = 0; g < NG; g++) {
                const vf t = cand_iscale[g] * xm;
                vi l;
                v_nearest(&t, &l);
                l &= ~(l < zero);                        /* max(0, l) */
                const vi over = l > top;
                l = (l & ~over) | (top & over);          /* min(nmax, l) */
                codes[i][g] = l;
                const vf lf = __builtin_convertvector(l, vf);
                sum_l[g] += w * lf;
                sum_l2[g] += w * lf * lf;
                sum_xl[g] += w * lf * x[i];
            }
        }
        for (int g = 0; g < NG; g++) {
            D[g] = sum_w * sum_l2[g] - sum_l[g] * sum_l[g];
            this_scale[g] = (sum_w * sum_xl[g] - sum_x * sum_l[g]) / D[g];
            this_min[g] = (sum_l2[g] * sum_x - sum_l[g] * sum_xl[g]) / D[g];
            const vi pos = this_min[g] > 0.0f;
            const vf alt_scale = sum_xl[g] / sum_l2[g];
            v_select(&pos, &alt_scale, &this_scale[g]);
            v_select(&pos, &vzero, &this_min[g]);
        }
        for (int i = 0; i < n; i++) {
            for (int g = 0; g < NG; g++) {
                vf diff = this_scale[g] * __builtin_convertvector(codes[i][g], vf) + this_min[g] - x[i];
                if (use_mad) {
                    vi bits;
                    memcpy(&bits, &diff, sizeof bits);
                    bits &= 0x7fffffff;
                    memcpy(&diff, &bits, sizeof diff);
                } else {
                    diff = diff * diff;
                }
                cur_error[g] += weights[i] * diff;
            }
        }
        int next = is + NG * LANES;
        for (int c = 0; c < NG * LANES && is + c <= nstep; c++) {
            const int g = c / LANES, k = c % LANES;
            if (!(D[g][k] > 0.0f) || !(cur_error[g][k] < best_error)) continue;
            for (int i = 0; i < n; i++) L[i] = (uint8_t)codes[i][g][k];
            best_error = cur_error[g][k];
            scale = this_scale[g][k];
            if (this_min[g][k] != min) {   /* the later candidates used the old min: redo them */
                min = this_min[g][k];
                next = is + c + 1;
                break;
            }
        }
        is = next;
    }
    *the_min = -min;
    return scale;
}

/* 2-bit codes L[0..255] into the Q2_K/Q3_K plane layout (spec 2.5): byte 32*h + l holds the
 * codes of elements 128h + l + 32k in bits 2k..2k+1. */
static void pack_planes2(const uint8_t *L, uint8_t qs[64]) {
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* Q4_K/Q5_K: 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). */
static void k4_get(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/*
 * Q4_K/Q5_K shared part: per 32-element sub-block weights av_x + |x| (av_x = sqrt(sum x^2 / 32)),
 * make_qkx2 with (nmax, rmin, nstep), the 6-bit scales and mins against their maxima packed
 * into S[12], d = max_scale/63, dmin = max_min/63 as fp16, then every code recomputed from the
 * stored values: nearest((x + dm)/d) clamped to 0..nmax (sub-blocks whose d is 0 keep the
 * search's codes). L receives the 256 codes.
 */
static void k45_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out, uint16_t *dmin_out,
                      uint8_t S[12], uint8_t L[256]) {
    float weights[32], mins[8], scales[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xb = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xb[l]);
        scales[j] = make_qkx2(32, nmax, xb, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)muse_nearest_int(inv_scale * scales[j]);   /* ggml stores the int in a uint8 */
        uint8_t lm = (uint8_t)muse_nearest_int(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            S[j] = ls;
            S[j + 4] = lm;
        } else {
            S[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            S[j - 4] |= (uint8_t)((ls >> 4) << 6);
            S[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = muse_fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = muse_fp32_to_fp16(max_min / 63.0f);
    const float dd = muse_h2f(*d_out), dm_all = muse_h2f(*dmin_out);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_get(j, S, &sc, &m);
        const float d = dd * (float)sc;
        if (d == 0.0f) continue;
        const float dm = dm_all * (float)m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, muse_nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

// ---- the five quantizers ----

void muse_from_float_q2_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q2_K *y = vy;
    const float q4scale = 15.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        uint8_t L[256];
        float weights[16], mins[16], scales[16];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0.0f) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)muse_nearest_int(iscale * scales[j]);
            y[i].d = muse_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
            y[i].d = muse_fp32_to_fp16(0.0f);
        }
        if (max_min > 0.0f) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] |= (uint8_t)((unsigned)muse_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = muse_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = muse_fp32_to_fp16(0.0f);
        }
        const float dd = muse_h2f(y[i].d), dmm = muse_h2f(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const float d = dd * (float)(y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = dmm * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, muse_nearest_int((x[16 * j + ii] + dm) / d)));
        }
        pack_planes2(L, y[i].qs);
    }
}

void muse_from_float_q3_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q3_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        int8_t L[256];
        float scales[16];
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t l = (int8_t)muse_nearest_int(iscale * scales[j]);   /* ggml: int8_t l = nearest_int(..) */
                l = (int8_t)(imax(-32, imin(31, l)) + 32);
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = muse_fp32_to_fp16(1.0f / iscale);
        } else {
            y[i].d = muse_fp32_to_fp16(0.0f);
        }
        const float dd = muse_h2f(y[i].d);
        for (int j = 0; j < 16; j++) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | ((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
            const float d = dd * (float)sc;
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(imax(-4, imin(3, muse_nearest_int(x[16 * j + ii] / d))) + 4);
        }
        /* high bit of element j into hmask[j % 32] bit j / 32; L keeps the low 2 bits */
        uint8_t Lu[256];
        memset(y[i].hmask, 0, 32);
        for (int j = 0; j < 256; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_planes2(Lu, y[i].qs);
    }
}

void muse_from_float_q4_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q4_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        uint8_t L[256];
        k45_block(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < 256; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void muse_from_float_q5_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q5_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        uint8_t L[256];
        k45_block(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *ql = y[i].qs;
        memset(y[i].qh, 0, 32);
        uint8_t m1 = 1, m2 = 2;
        for (int j0 = 0; j0 < 256; j0 += 64, ql += 32, m1 = (uint8_t)(m1 << 2), m2 = (uint8_t)(m2 << 2)) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[j0 + j], l2 = L[j0 + j + 32];
                if (l1 > 15) { l1 -= 16; y[i].qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; y[i].qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | l2 << 4);
            }
        }
    }
}

void muse_from_float_q6_K(const float *x, void *vy, int64_t n) {
    struct muse_block_q6_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        int8_t L[256];
        float scales[16];
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < 16; ib++) {
            const float scale = make_qx_rmse(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = muse_fp32_to_fp16(0.0f);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = muse_fp32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)imin(127, muse_nearest_int(iscale * scales[ib]));
        const float dd = muse_h2f(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float d = dd * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(imax(-32, imin(31, muse_nearest_int(x[16 * j + ii] / d))) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | q3 << 4);
                ql[l + 32] = (uint8_t)(q2 | q4 << 4);
                qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                  (L[j + l + 96] >> 4) << 6);
            }
        }
    }
}
