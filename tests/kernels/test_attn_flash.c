/*
 * test_attn_flash.c - flash attention (kernels.h muse_attn_flash_fn; kernels/x86/attn_flash.inc)
 * at every level this machine (or the emu512 build's emulation) runs:
 *   - every level gives the AVX2 level's bits (the AVX-512 build's 16-lane loops keep each 8-lane
 *     chain of S = Q K^T and each output's chain of O += P V);
 *   - every output against a double-precision softmax attention over the same F16 inputs (the
 *     probabilities are rounded to F16 as the reference rounds them: relative 2^-10 of sum |p v|,
 *     a sanity bound; the derived bound against muse_attn_head_ref is tests/model/test_tile_forward's);
 *   - F32 and Q8_0 caches (muse_attn_flash_f32 / _q8_0, head sizes 32, 128, 256): against the
 *     double attention over the cache's values (Q8_0: dequantized, and the query quantized to Q8_0
 *     as the reference does), nothing rounded to F16 (relative 2^-16 of sum |p v|);
 *   - the F32 cache's own tiles (scores by key, 8 or 16 query rows in the lanes; head sizes 32, 64,
 *     96, 128, 256: the unrolled ones and the generic loop; 7, 9, 20, 32, 34 rows: partial row
 *     blocks, pairs of them and a pair plus one; 1 to ~2500 keys; sliding windows of 40 and 300;
 *     rings that wrapped): against muse_attn_head_ref on the same cache, (1) within the bound of
 *     docs/cpu-backend.md "Flash attention", (gamma(n) + gamma(n/8 + 4)) sum_j p_j |v_j[d]| (the
 *     worst error / bound is printed: the bound is not vacuous), and (2) bit for bit equal to one
 *     FMA chain in increasing position over the reference's own probabilities p_j, which holds
 *     only if every score, the max, the exponentials, the sum and p are the reference's bits;
 *   - head sizes with and without a 64-wide chunk (32, 80, 128, 256), 1..9 query tokens x 1..4
 *     heads per KV head, full and sliding-window attention, positions deep in a ring cache that
 *     has wrapped (p % n_cells), the padding of the output rows untouched.
 * Levels the machine lacks are reported as skipped, never as passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/types.h"
#include "test.h"

#include "kernels/kernel_random.h"

#define CHECK(c) TEST_COND(#c, c)

struct flash_case {
    int32_t hd, n_tok, nq, n_swa, pos0;
    uint32_t n_cells;
    int type; /* the cache: 0 F16, 1 F32, 2 Q8_0 */
};

static const char *const type_names[] = {"f16", "f32", "q8_0"};

/* element i of a cache row */
static double cache_at(const void *row, int32_t i, int type) {
    if (type == 1) return (double)((const float *)row)[i];
    if (type == 2) {
        const struct muse_block_q8_0 *b = (const struct muse_block_q8_0 *)row + i / 32;
        return (double)b->qs[i % 32] * muse_fp16_to_fp32(b->d);
    }
    return (double)muse_fp16_to_fp32(((const uint16_t *)row)[i]);
}

/* the query element as the kernel's reference sees it */
static double query_at(const float *q, int32_t hd, int32_t i, int type) {
    if (type == 1) return (double)q[i];
    if (type == 2) {
        struct muse_block_q8_0 b[16];
        muse_type_traits[MUSE_TYPE_Q8_0].from_float(q, b, hd);
        return cache_at(b, i, 2);
    }
    return (double)muse_fp16_to_fp32(muse_fp32_to_fp16(q[i]));
}

static muse_attn_flash_fn flash_of(const struct muse_kernels *k, int type) {
    return type == 1 ? k->attn_flash_f32 : type == 2 ? k->attn_flash_q8_0 : k->attn_flash_f16;
}

/* out = the level's flash attention of the case's data; false when the level has none */
static bool run_level(const struct muse_kernels *k, const struct muse_attn_flash *f0, float *out, size_t out_floats,
                      int type) {
    if (!k || !flash_of(k, type)) return false;
    struct muse_attn_flash f = *f0;
    f.out = out;
    for (size_t i = 0; i < out_floats; i++) out[i] = -7.0f; /* padding poison */
    const size_t sb = k->attn_flash_scratch(f.hd, f.n_tok * f.nq, f.n_cells);
    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
    CHECK(scratch);
    flash_of(k, type)(&f, scratch);
    free(scratch);
    return true;
}

/* the double-precision attention of row (t, h) into want[hd]; *mag = max_d sum_j |p_j v_j[d]| */
static void attn_double(const struct muse_attn_flash *f, int32_t t, int32_t h, double *want, double *mag, int type) {
    const int32_t hd = f->hd, hi = f->pos[t], lo = f->n_swa > 0 && hi - f->n_swa + 1 > 0 ? hi - f->n_swa + 1 : 0;
    double mx = -INFINITY, sum = 0;
    double *s = malloc(sizeof(double) * (size_t)(hi - lo + 1));
    CHECK(s);
    const float *q = f->q + (size_t)t * f->q_tstride + (size_t)h * hd;
    for (int32_t p = lo; p <= hi; p++) {
        const void *kr = (const char *)f->k + (size_t)((uint32_t)p % f->n_cells) * f->k_stride;
        double d = 0;
        for (int32_t i = 0; i < hd; i++)
            d += query_at(q, hd, i, type) * cache_at(kr, i, type);
        s[p - lo] = d * f->scale;
        mx = s[p - lo] > mx ? s[p - lo] : mx;
    }
    for (int32_t p = lo; p <= hi; p++) sum += (s[p - lo] = exp(s[p - lo] - mx));
    for (int32_t d = 0; d < hd; d++) want[d] = 0;
    *mag = 0;
    for (int32_t d = 0; d < hd; d++) {
        double m = 0;
        for (int32_t p = lo; p <= hi; p++) {
            const void *vr = (const char *)f->v + (size_t)((uint32_t)p % f->n_cells) * f->v_stride;
            const double pv = s[p - lo] / sum * cache_at(vr, d, type);
            want[d] += pv;
            m += fabs(pv);
        }
        *mag = m > *mag ? m : *mag;
    }
    free(s);
}

/* The worst error / bound of the F32 cases against muse_attn_head_ref. */
static double worst_ratio;
static long n_ref_checked;

/*
 * An F32 case against the reference itself: muse_attn_head_ref on the same cache (one KV head,
 * the case's rows as query heads of one token batch) gives o_ref and leaves its probabilities p_j
 * (positions lo..hi) in its scores. Flash must (1) be within (gamma(n) + gamma(n/8 + 4)) *
 * sum_j p_j |v_j[d]| of o_ref (docs/cpu-backend.md, "The bound"; the sums over the n keys in two
 * orders: one FMA chain against 8 lanes and a hsum), and (2) equal, bit for bit, one FMA chain in
 * increasing position over those p_j (its O += P V order), which it can only if its own
 * probabilities are the reference's bits.
 */
static void check_ref_f32(const struct muse_attn_flash *f, const float *o, const char *lv) {
    const int32_t hd = f->hd, nq = f->nq, n_tok = f->n_tok;
    const struct muse_kv_layer kv = {
        .type = MUSE_TYPE_F32, .n_cells = f->n_cells, .n_embd_k = hd, .n_embd_v = hd,
        .k_row_size = f->k_stride, .v_row_size = f->v_stride, .k = (void *)(uintptr_t)f->k, .v = (void *)(uintptr_t)f->v,
    };
    float *q = malloc(sizeof(float) * (size_t)n_tok * nq * hd), *out = malloc(sizeof(float) * (size_t)n_tok * nq * hd);
    float *scores = malloc(sizeof(float) * f->n_cells), *fscratch = malloc(sizeof(float) * 10 * (size_t)hd);
    uint8_t *qc = malloc(4 * (size_t)hd + 64);
    CHECK(q && out && scores && fscratch && qc);
    for (int32_t t = 0; t < n_tok; t++) memcpy(q + (size_t)t * nq * hd, f->q + (size_t)t * f->q_tstride, sizeof(float) * (size_t)nq * hd);
    const struct muse_attn_args a = {
        .q = q, .out = out, .kv = &kv, .pos = f->pos, .n_tokens = n_tok, .n_head = nq, .n_head_kv = 1,
        .head_dim = hd, .n_swa = f->n_swa, .scale = f->scale,
    };
    int bad_bound = 0, bad_chain = 0;
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t h = 0; h < nq; h++) {
            muse_attn_head_ref(&a, t, h, scores, fscratch, qc);
            const int32_t hi = f->pos[t], lo = f->n_swa > 0 && hi - f->n_swa + 1 > 0 ? hi - f->n_swa + 1 : 0, n = hi - lo + 1;
            const double g = muse_tile_gamma(n) + muse_tile_gamma(n / 8 + 4);
            for (int32_t d = 0; d < hd; d++) {
                double mag = 0;
                float chain = 0.0f;
                for (int32_t j = 0; j < n; j++) {
                    const float v = ((const float *)(const void *)((const char *)f->v + (size_t)((uint32_t)(lo + j) % f->n_cells) * f->v_stride))[d];
                    mag += (double)scores[j] * fabs((double)v);
                    chain = fmaf(scores[j], v, chain);
                }
                const float got = o[(size_t)t * f->o_tstride + (size_t)h * hd + d], want = out[((size_t)t * nq + h) * hd + d];
                const double bound = g * mag, err = fabs((double)got - (double)want);
                bad_bound += !(err <= bound);
                if (bound > 0 && err / bound > worst_ratio) worst_ratio = err / bound;
                bad_chain += memcmp(&got, &chain, sizeof got) != 0;
                n_ref_checked++;
            }
        }
    TEST_CONDF(bad_bound == 0, "%s f32 hd %d tok %d nq %d swa %d pos %d: %d outputs outside the bound against muse_attn_head_ref",
               lv, hd, n_tok, nq, f->n_swa, f->pos[0], bad_bound);
    TEST_CONDF(bad_chain == 0, "%s f32 hd %d tok %d nq %d swa %d pos %d: %d outputs not the FMA chain over the reference's probabilities",
               lv, hd, n_tok, nq, f->n_swa, f->pos[0], bad_chain);
    free(q);
    free(out);
    free(scores);
    free(fscratch);
    free(qc);
}

static void check_case(const struct flash_case *c) {
    const int32_t hd = c->hd, R = c->n_tok * c->nq;
    const size_t row = c->type == 2 ? (size_t)hd / 32 * sizeof(struct muse_block_q8_0) : (size_t)hd * (c->type ? 4 : 2);
    const size_t k_stride = row + 16; /* padded cache rows */
    uint8_t *kc = malloc(k_stride * c->n_cells), *vc = malloc(k_stride * c->n_cells);
    const size_t q_tstride = (size_t)c->nq * hd + 5, o_tstride = (size_t)c->nq * hd + 3;
    float *q = malloc(sizeof(float) * q_tstride * (size_t)c->n_tok);
    const size_t out_floats = o_tstride * (size_t)c->n_tok;
    float *o2 = malloc(sizeof(float) * out_floats), *o = malloc(sizeof(float) * out_floats);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)c->n_tok);
    double *want = malloc(sizeof(double) * (size_t)hd);
    CHECK(kc && vc && q && o2 && o && pos && want);
    float *kx = malloc(sizeof(float) * (size_t)hd), *vx = malloc(sizeof(float) * (size_t)hd);
    CHECK(kx && vx);
    memset(kc, 0, k_stride * c->n_cells);
    memset(vc, 0, k_stride * c->n_cells);
    for (uint32_t cell = 0; cell < c->n_cells; cell++) {
        for (int32_t i = 0; i < hd; i++) kx[i] = 2.0f * kr_float(), vx[i] = kr_float();
        uint8_t *kd = kc + cell * k_stride, *vd = vc + cell * k_stride;
        if (c->type == 1) {
            memcpy(kd, kx, row);
            memcpy(vd, vx, row);
        } else if (c->type == 2) {
            muse_type_traits[MUSE_TYPE_Q8_0].from_float(kx, kd, hd);
            muse_type_traits[MUSE_TYPE_Q8_0].from_float(vx, vd, hd);
        } else {
            for (int32_t i = 0; i < hd; i++) {
                const uint16_t kh = muse_fp32_to_fp16(kx[i]), vh = muse_fp32_to_fp16(vx[i]);
                memcpy(kd + 2 * i, &kh, 2);
                memcpy(vd + 2 * i, &vh, 2);
            }
        }
    }
    free(kx);
    free(vx);
    for (size_t i = 0; i < q_tstride * (size_t)c->n_tok; i++) q[i] = 1.5f * kr_float();
    for (int32_t t = 0; t < c->n_tok; t++) pos[t] = c->pos0 + t;
    const struct muse_attn_flash f = {
        .hd = hd, .n_tok = c->n_tok, .nq = c->nq, .q = q, .q_tstride = q_tstride, .o_tstride = o_tstride, .pos = pos,
        .n_swa = c->n_swa, .k = kc, .v = vc, .k_stride = k_stride, .v_stride = k_stride, .n_cells = c->n_cells,
        .scale = 1.0f / sqrtf((float)hd),
    };
    const bool have2 = run_level(muse_kernels_for(MUSE_CPU_LEVEL_AVX2), &f, o2, out_floats, c->type);
    const double rel = c->type ? 0x1p-16 : 0x1p-10;
    for (int l = MUSE_CPU_LEVEL_AVX2; l < MUSE_CPU_LEVEL_COUNT; l++) {
        if (!run_level(muse_kernels_for((enum muse_cpu_level)l), &f, o, out_floats, c->type)) continue;
        const char *lv = muse_cpu_level_name((enum muse_cpu_level)l);
        TEST_CONDF(!have2 || !memcmp(o, o2, sizeof(float) * out_floats), "%s hd %d tok %d nq %d swa %d pos %d: not the AVX2 level's bits",
                   lv, hd, c->n_tok, c->nq, c->n_swa, c->pos0);
        int bad = 0, pad = 0;
        for (int32_t i = 0; i < R; i++) {
            const int32_t t = i / c->nq, h = i % c->nq;
            double mag;
            attn_double(&f, t, h, want, &mag, c->type);
            for (int32_t d = 0; d < hd; d++)
                bad += !(fabs(o[(size_t)t * o_tstride + (size_t)h * hd + d] - want[d]) <= rel * mag + 1e-30);
            for (size_t e = (size_t)c->nq * hd; e < o_tstride; e++) pad += o[(size_t)t * o_tstride + e] != -7.0f;
        }
        TEST_CONDF(bad == 0, "%s %s hd %d tok %d nq %d swa %d pos %d: %d outputs off the double attention", lv,
                   type_names[c->type], hd, c->n_tok, c->nq, c->n_swa, c->pos0, bad);
        TEST_CONDF(pad == 0, "%s hd %d: %d padding floats written", lv, hd, pad);
        if (c->type == 1) check_ref_f32(&f, o, lv);
    }
    free(kc);
    free(vc);
    free(q);
    free(o2);
    free(o);
    free(pos);
    free(want);
}

int main(void) {
    if (muse_cpu_level_max() < MUSE_CPU_LEVEL_AVX2) {
        printf("SKIP: no AVX2 on this machine\n");
        return TEST_REPORT();
    }
    for (int l = MUSE_CPU_LEVEL_AVX2; l < MUSE_CPU_LEVEL_COUNT; l++)
        if (!muse_kernels_for((enum muse_cpu_level)l)) printf("SKIP: %s level not available on this machine\n", muse_cpu_level_name((enum muse_cpu_level)l));
    static const int32_t hds[] = {32, 80, 128, 256};
    int n = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (int32_t n_tok = 1; n_tok <= 9; n_tok += 4)
            for (int32_t nq = 1; nq <= 4; nq += 3)
                for (int v = 0; v < 3; v++)
                    for (int type = 0; type < 3; type++) {
                        /* the F32 and Q8_0 kernels: their head sizes, 5 tokens x 4 heads (the body is the F16
                         * one, whose shapes the F16 cases cover) */
                        if (type && (hds[hi] % 32 || n_tok != 5 || nq != 4)) continue;
                        /* v 0: from position 0, full attention; 1: deep, sliding window 40, a wrapped ring of
                         * 64 cells; 2: 290 positions deep, full attention over 300 cells */
                        const struct flash_case c = {
                            .hd = hds[hi], .n_tok = n_tok, .nq = nq, .n_swa = v == 1 ? 40 : 0,
                            .pos0 = v == 0 ? 0 : v == 1 ? 1000 + 7 * n_tok : 290 - n_tok,
                            .n_cells = v == 1 ? 64 : 300, .type = type,
                        };
                        check_case(&c);
                        n++;
                    }
    /* the F32 cache's tiles: head sizes unrolled (64, 128, 256) and not (32, 96); rows in partial
     * blocks, whole ones, pairs and a pair plus one (7, 9, 20, 32, 34); v 0: from position 0, 1..17
     * keys; 1: deep, window 40, a wrapped ring of 64 cells; 2: full attention over 300 cells;
     * 3: ~2500 keys of 4096 cells; 4: window 300 in a wrapped ring of 512 cells */
    static const int32_t f32_hds[] = {32, 64, 96, 128, 256};
    static const int32_t f32_rows[][2] = {{7, 1}, {3, 3}, {5, 4}, {16, 2}, {17, 2}};
    int n32 = 0;
    for (size_t hi = 0; hi < sizeof f32_hds / sizeof f32_hds[0]; hi++)
        for (size_t ri = 0; ri < sizeof f32_rows / sizeof f32_rows[0]; ri++)
            for (int v = 0; v < 5; v++) {
                const int32_t n_tok = f32_rows[ri][0];
                const struct flash_case c = {
                    .hd = f32_hds[hi], .n_tok = n_tok, .nq = f32_rows[ri][1], .n_swa = v == 1 ? 40 : v == 4 ? 300 : 0,
                    .pos0 = v == 0 ? 0 : v == 1 ? 1000 + 7 * n_tok : v == 2 ? 290 - n_tok : v == 3 ? 2500 - n_tok : 5000 + 3 * n_tok,
                    .n_cells = v == 1 ? 64 : v == 2 ? 300 : v == 3 ? 4096 : v == 4 ? 512 : 64, .type = 1,
                };
                check_case(&c);
                n32++;
            }
    printf("%d flash attention cases, %d of them the F32 tiles; %ld outputs against muse_attn_head_ref, worst error / bound %.3f\n",
           n + n32, n32, n_ref_checked, worst_ratio);
    TEST_CONDF(worst_ratio > 0, "the F32 bound check saw no error at all (worst ratio %g)", worst_ratio);
    return TEST_REPORT();
}
