/*
 * test_tile_gemm.c - the tile GEMM (kernels.h muse_tile_gemm_fn; kernels/x86/gemm_tiles_*.c), the
 * batched matmul in a reassociated float order, at every level this machine (or the emu512
 * build's emulation) runs:
 *   - the first packing stage (kernels/x86/tile_decode.h) round trip: d * s * v + m * mn equals
 *     the reference dequantizer (to_float) of every element up to its own float rounding, and
 *     every code v + o lies in [0, cmax], the range the kernels' int16 sums are sized for;
 *   - every output against the scalar dot of the order in force (muse_x86_vec_dot) within the
 *     derived bound 2 * gamma(ne0/16 + 8) * T (T: the sum of the absolute values of the
 *     integer-times-scale terms both sides sum; docs/cpu-backend.md, "The tile GEMM"; plus the
 *     half rounding of Q8_1's s for Q4_1/Q5_1; for F32/F16/BF16 (gamma(ne0) + gamma(ne0/8 + 3))
 *     sum |w a|: one FMA chain against 8 lanes and their sum; tests/kernels/tile_bound.h), for odd
 *     row counts (1..24, not multiples of the panel), 1..33 activation rows, with NaN-poisoned
 *     bytes around every activation row and output row (a read of padding shows up as NaN, a
 *     write outside the output as a changed poison value);
 *   - the AMX level (gemm_tiles_amx.c; under `make emu512` on amx_tiles.h's C model of the
 *     tile instructions) gives the AVX-512 level's bits for every type and shape;
 *   - the exact mode (muse_kernels_exact_for) has no tile GEMM, the fast table at least the
 *     three target families.
 * Levels the machine lacks are reported as skipped, never as passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/x86_numerics.h"
#include "test.h"

#include "kernels/kernel_random.h"
#include "kernels/tile_bound.h"

#define CHECK(c) TEST_COND(#c, c)

// ---- round trip of the first packing stage ------------------------------------------------------

static void test_decode(const struct tile_type *tt) {
    const int64_t ne0 = 4 * tt->cfg.fbe * tt->cfg.sub;
    const size_t rs = muse_type_row_size(tt->type, ne0);
    uint8_t *w = malloc(rs);
    float *ref = malloc(sizeof(float) * (size_t)ne0);
    int bad = 0, range = 0;
    struct tile_row big; /* a whole weight block (Q1_0: four float blocks) */
    for (int rep = 0; rep < 8; rep++) {
        CHECK(kr_weight_row(tt->type, ne0, w));
        muse_type_traits[tt->type].to_float(w, ref, ne0);
        for (int64_t fb = 0; fb < ne0 / tt->cfg.fbe; fb++) {
            struct tile_row r;
            memset(&r, 0, sizeof r);
            td_float_block(tt->cfg, tt->dec, w, fb, &big, &r);
            for (int e = 0; e < tt->cfg.fbe; e++) {
                const int c = r.v[e] + tt->cfg.o;
                range += c < 0 || c > tt->cfg.cmax || (tt->cfg.s1 && !tt->cfg.fgs && r.s[e / tt->cfg.g] != 1);
                const double sg = tt->cfg.fgs ? (double)r.dg[e / tt->cfg.g] : (double)r.s[e / tt->cfg.g];
                const double a = (double)r.d * sg * r.v[e];
                const double b = tt->cfg.mins ? (double)r.m * r.mn[e / 16] : 0.0;
                const double want = ref[fb * tt->cfg.fbe + e];
                /* to_float rounds a few times (d * s, then * v, then - m): 4 units of the parts */
                if (fabs(a + b - want) > 4 * 0x1p-24 * (fabs(a) + fabs(b)) + 1e-45) bad++;
            }
        }
    }
    TEST_CONDF(bad == 0, "%s: tile decode differs from to_float in %d elements", muse_type_layout_get(tt->type)->name, bad);
    TEST_CONDF(range == 0, "%s: %d codes outside [0, %d]", muse_type_layout_get(tt->type)->name, range, tt->cfg.cmax);
    free(w);
    free(ref);
}

// ---- the GEMM against the reference -----------------------------------------------------------

static bool is_ff(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff) return false;
    return true;
}

/* Whether table k2's tile GEMM gives exactly the n_act x os outputs `out` (its padding included)
 * for the same inputs. */
static bool same_output(const struct muse_kernels *k2, enum muse_type type, int64_t ne0, const uint8_t *w, size_t ws,
                        int64_t n_rows, const uint8_t *xp, size_t xps, int n_act, const float *out, int64_t os) {
    const size_t sb2 = muse_matmul_tile_scratch(k2, type, ne0), bytes = sizeof(float) * (size_t)n_act * (size_t)os;
    void *s2 = aligned_alloc(64, (sb2 + 63) & ~(size_t)63);
    float *o2 = malloc(bytes);
    memcpy(o2, out, bytes);
    k2->tile_gemm[type](ne0, w, ws, n_rows, xp, xps, n_act, o2, os, s2, sb2);
    const bool same = !memcmp(o2, out, bytes);
    free(s2);
    free(o2);
    return same;
}

/* One shape of weight type `type` (tt: its packing, NULL for the float types). */
static void check_case(const struct muse_kernels *k, enum muse_type type, const struct tile_type *tt, int64_t ne0,
                       int64_t n_rows, int n_act, double *worst) {
    const char *lv = muse_cpu_level_name(k->level), *tn = muse_type_layout_get(type)->name;
    const enum muse_type at = muse_type_traits[type].vec_dot_type;
    const size_t ws = muse_type_row_size(type, ne0) + 32, qs = muse_type_row_size(at, ne0);
    const size_t xps = muse_matmul_tile_act_bytes(type, ne0) + 64, pad = 64;
    const int64_t os = n_rows + 3;
    uint8_t *w = malloc((size_t)n_rows * ws);
    uint8_t *q = malloc((size_t)n_act * qs);
    uint8_t *xp = malloc(2 * pad + (size_t)n_act * xps);
    float *out = malloc(sizeof(float) * ((size_t)n_act * os + 16));
    float *x = malloc(sizeof(float) * (size_t)ne0);
    const size_t sb = muse_matmul_tile_scratch(k, type, ne0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    memset(w, 0xff, (size_t)n_rows * ws);
    memset(xp, 0xff, 2 * pad + (size_t)n_act * xps);
    memset(out, 0xff, sizeof(float) * ((size_t)n_act * os + 16));
    for (int64_t i = 0; i < n_rows; i++) CHECK(kr_weight_row(type, ne0, w + i * ws));
    for (int r = 0; r < n_act; r++) {
        const float scale = r % 3 == 2 ? 100.0f : 1.0f;
        for (int64_t j = 0; j < ne0; j++) x[j] = r == 4 ? 0.0f : kr_float() * scale; /* row 4: all zero */
        muse_matmul_quantize(NULL, type, ne0, x, 0, 1, q + r * qs, qs, 0, 1);
        muse_matmul_tile_prep(type, ne0, q + r * qs, xp + pad + r * xps);
    }
    CHECK(muse_matmul_tile_supported(k, type, ne0, n_act < k->tile_min_act ? k->tile_min_act : n_act));
    const bool ok = k->tile_gemm[type](ne0, w, ws, n_rows, xp + pad, xps, n_act, out, os, scratch, sb);
    TEST_CONDF(ok, "%s %s: tile GEMM declined %lldx%lld x %d", lv, tn, (long long)ne0, (long long)n_rows, n_act);
    int bad = 0;
    for (int r = 0; r < n_act && ok; r++) {
        for (int64_t i = 0; i < n_rows; i++) {
            float want;
            muse_x86_vec_dot(type)(ne0, &want, w + i * ws, q + r * qs);
            const double got = out[(int64_t)r * os + i];
            const double tol = tile_bound(type, tt, ne0, w + i * ws, xp + pad + r * xps);
            const double err = fabs(got - (double)want);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    TEST_CONDF(false, "%s %s %lldx%lld x %d: out[%d][%lld] = %.9g, reference %.9g, bound %.3g", lv, tn,
                               (long long)ne0, (long long)n_rows, n_act, r, (long long)i, got, (double)want, tol);
            } else if (tol > 0 && err / tol > *worst) {
                *worst = err / tol;
            }
        }
        TEST_CONDF(is_ff(out + (int64_t)r * os + n_rows, sizeof(float) * (size_t)(os - n_rows)),
                   "%s %s: wrote outside the output row %d", lv, tn, r);
    }
    TEST_CONDF(is_ff(out + (int64_t)n_act * os, sizeof(float) * 16), "%s %s: wrote past the output", lv, tn);
    /* every level applies the float factors in the same order (one FMA per float block and term):
     * the same bits as the AVX2 build, but for the AVX-512 level's float-group form of the integer
     * group-scaled types (tile_cfg_avx512: one FMA per group), checked against the bound only */
    const struct muse_kernels *k2 = muse_kernels_for(MUSE_CPU_LEVEL_AVX2);
    const struct tile_type *tq = tile_type_of(type);
    const bool same_bits = !(k->level >= MUSE_CPU_LEVEL_AVX512 && tq && tile_cfg_avx512(tq->cfg, type).fg);
    if (ok && k2 && k2 != k && same_bits)
        TEST_CONDF(same_output(k2, type, ne0, w, ws, n_rows, xp + pad, xps, n_act, out, os), "%s %s: not the AVX2 build's bits",
                   lv, tn);
    /* the AMX level: the AVX-512 level's integers on the tile unit, finished in its float order */
    const struct muse_kernels *k5 = muse_kernels_for(MUSE_CPU_LEVEL_AVX512);
    if (ok && k->level == MUSE_CPU_LEVEL_AMX && k5)
        TEST_CONDF(same_output(k5, type, ne0, w, ws, n_rows, xp + pad, xps, n_act, out, os),
                   "%s %s %lldx%lld x %d: not the AVX-512 level's bits", lv, tn, (long long)ne0, (long long)n_rows, n_act);
    free(w);
    free(q);
    free(xp);
    free(out);
    free(x);
    free(scratch);
}

static void test_level(enum muse_cpu_level level) {
    const struct muse_kernels *k = muse_kernels_for(level), *ke = muse_kernels_exact_for(level);
    if (!k) {
        printf("SKIP: %s level not available on this machine\n", muse_cpu_level_name(level));
        return;
    }
    for (int t = 0; t < MUSE_TYPE_COUNT; t++) TEST_CONDF(!ke->tile_gemm[t], "exact table has a tile GEMM (type %d)", t);
    CHECK(ke->exact_mode && !k->exact_mode);
    CHECK(k->tile_gemm[MUSE_TYPE_Q8_0] && k->tile_gemm[MUSE_TYPE_Q4_K] && k->tile_gemm[MUSE_TYPE_IQ2_XXS]);
    CHECK(k->tile_gemm[MUSE_TYPE_F32] && k->tile_gemm[MUSE_TYPE_F16] && k->tile_gemm[MUSE_TYPE_BF16]);
    static const int64_t rows[] = {1, 8, 13, 24};
    /* (AMX: blocks of 16 and tails; 8, 11, 16: the small batches of several sequences, issue 29) */
    static const int acts[] = {1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 17, 33, 40};
    int n = 0;
    for (int ti = 0; ti < N_TILE_TYPES; ti++) {
        const struct tile_type *tt = &tile_types[ti];
        if (!k->tile_gemm[tt->type]) continue;
        double worst = 0;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
                const int64_t base = tt->cfg.fbe * tt->cfg.sub > 64 ? tt->cfg.fbe * tt->cfg.sub : tt->cfg.fbe == 32 ? 64 : 256;
                const int64_t ne0 = ((ri + ai) % 3 == 0 ? 3 : 1) * base;
                check_case(k, tt->type, tt, ne0, rows[ri], acts[ai], &worst);
                n++;
            }
        /* a long row: many float blocks */
        check_case(k, tt->type, tt, tt->cfg.fbe == 32 ? 2048 : 4096, 9, 6, &worst);
        printf("  %s %-8s worst error / bound %.3f\n", muse_cpu_level_name(level), muse_type_layout_get(tt->type)->name,
               worst);
    }
    /* the float types: more rows (3 panels of 16 on AVX-512) and odd multiples of 32 elements */
#define FLOAT_TYPE(T, t) MUSE_TYPE_##T,
    static const enum muse_type floats[] = {MUSE_TILE_FLOAT_TYPES(FLOAT_TYPE)};
    static const int64_t frows[] = {1, 8, 13, 24, 47, 50};
    for (size_t fi = 0; fi < sizeof floats / sizeof floats[0]; fi++) {
        if (!k->tile_gemm[floats[fi]]) continue;
        double worst = 0;
        for (size_t ri = 0; ri < sizeof frows / sizeof frows[0]; ri++)
            for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
                check_case(k, floats[fi], NULL, 32 * (int64_t)(1 + (ri + ai) % 5), frows[ri], acts[ai], &worst);
                n++;
            }
        check_case(k, floats[fi], NULL, 4096, 9, 6, &worst);
        printf("  %s %-8s worst error / bound %.3f\n", muse_cpu_level_name(level), muse_type_layout_get(floats[fi])->name,
               worst);
    }
    printf("%s: %d tile GEMM cases\n", muse_cpu_level_name(level), n);
}

/* The small-batch thresholds (muse_kernels.tile_min_small): the tile GEMM runs for a type from
 * its threshold on (below tile_min_act), never in the exact tables, and only for types that have
 * one; the outputs at those row counts are check_case's (acts above). */
static void test_small_thresholds(enum muse_cpu_level level) {
    const struct muse_kernels *k = muse_kernels_for(level), *ke = muse_kernels_exact_for(level);
    if (!k) return;
    int n = 0;
    for (int t = 0; t < MUSE_TYPE_COUNT; t++) {
        TEST_CONDF(!ke->tile_min_small[t] || !ke->tile_gemm[t], "exact table: small-batch tile GEMM for type %d", t);
        const int m = k->tile_min_small[t];
        if (!m) continue;
        TEST_CONDF(k->tile_gemm[t] && m >= 2 && m < k->tile_min_act, "%s type %d: threshold %d without a tile GEMM "
                   "or not below tile_min_act", muse_cpu_level_name(level), t, m);
        const int64_t ne0 = 2048;
        for (int a = 1; a <= 40; a++)
            TEST_CONDF(muse_matmul_tile_supported(k, (enum muse_type)t, ne0, a) == (a >= m) &&
                           !muse_matmul_tile_supported(ke, (enum muse_type)t, ne0, a),
                       "%s type %d: tile GEMM chosen wrongly for %d rows", muse_cpu_level_name(level), t, a);
        n++;
    }
    printf("%s: %d types with a small-batch tile threshold\n", muse_cpu_level_name(level), n);
}

int main(void) {
    for (int l = MUSE_CPU_LEVEL_AVX2; l < MUSE_CPU_LEVEL_COUNT; l++) test_small_thresholds((enum muse_cpu_level)l);
    for (int ti = 0; ti < N_TILE_TYPES; ti++) test_decode(&tile_types[ti]);
    if (muse_cpu_level_max() < MUSE_CPU_LEVEL_AVX2) printf("SKIP: no AVX2 on this machine\n");
    for (int l = MUSE_CPU_LEVEL_AVX2; l < MUSE_CPU_LEVEL_COUNT; l++) test_level((enum muse_cpu_level)l);
    return TEST_REPORT();
}
