/*
 * test_gemm_r8.c - the decode of Q4_0 / IQ4_NL / Q8_0 / IQ4_XS / Q4_K rows interleaved by 8 (kernels/repack.h,
 * kernels.h muse_gemm_r8_fn) at every level this machine (or the emu512 build's emulation) runs:
 *   - the interleaved copy holds every block of every row (scales and code bytes where repack.h
 *     puts them) and has the rows' size;
 *   - muse_unpack_r8 gives the rows back byte for byte;
 *   - every output against the scalar dot of the order in force (muse_x86_vec_dot) within
 *     muse_r8_bound (docs/cpu-backend.md), for 1..5, 7, 8, 9 activation rows (4 per pass, 8 in the AVX-512 build), rows of 1 to 288 blocks (past
 *     the kernel's 256-block pass), 1 to 4 groups (the AVX-512 build: pairs of groups, a last odd one);
 *     with extreme rows where the int16 sums are
 *     largest (Q4_0: every code 15 against +-127; IQ4_NL: -127, Q8_0: -128 against +-127; IQ4_XS:
 *     -127 with every sub-block scale -32, the largest integer of a super-block; Q4_K: codes 15 with
 *     every scale and min 63) and a zero row;
 *     poisoned bytes around the outputs (a write outside shows as a changed value);
 *   - the AVX-512 build (vpdpbusd) gives the AVX2 build's bits (the same integers, the same float
 *     steps);
 *   - the exact tables have none (MUSE_CPU=exact keeps ggml's order).
 * Levels the machine lacks are reported as skipped, never as passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "kernels/x86_numerics.h"
#include "test.h"

#include "kernels/kernel_random.h"
#include "kernels/r8_bound.h"

#define CHECK(c) TEST_COND(#c, c)

static bool is_ff(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff) return false;
    return true;
}

/* Where byte j of row r's block (bb bytes) goes in its group's block (repack.h, blocks.h): the
 * scale d, for IQ4_XS also scales_h and scales_l, each field of the 8 rows side by side; then the
 * code bytes as dwords, dword c of row r at 32 c + 4 r after the header. */
static size_t group_pos(enum muse_type type, size_t j, int r) {
    if (type == MUSE_TYPE_Q4_K) {
        if (j < 4) return 16 * (j / 2) + 2 * (size_t)r + j % 2;
        if (j < 16) return 32 + 32 * ((j - 4) / 4) + 4 * (size_t)r + (j - 4) % 4;
        return 128 + 32 * ((j - 16) / 4) + 4 * (size_t)r + (j - 16) % 4;
    }
    if (type == MUSE_TYPE_IQ4_XS) {
        if (j < 2) return 2 * (size_t)r + j;
        if (j < 4) return 16 + 2 * (size_t)r + (j - 2);
        if (j < 8) return 32 + 4 * (size_t)r + (j - 4);
        return 64 + 32 * ((j - 8) / 4) + 4 * (size_t)r + (j - 8) % 4;
    }
    if (j < 2) return 2 * (size_t)r + j;
    return 16 + 32 * ((j - 2) / 4) + 4 * (size_t)r + (j - 2) % 4;
}

static void test_repack(enum muse_type type) {
    const int64_t ne0 = muse_type_layout_get(type)->block_size == 256 ? 768 : 96, groups = 2, nb = ne0 / muse_type_layout_get(type)->block_size;
    const size_t rs = muse_type_row_size(type, ne0);
    uint8_t *w = malloc(rs * 8 * groups), *p = malloc(rs * 8 * groups);
    for (int64_t i = 0; i < 8 * groups; i++) CHECK(kr_weight_row(type, ne0, w + i * rs));
    muse_repack_r8(type, w, rs, groups, p);
    int bad = 0;
    const size_t bb = rs / (size_t)nb; /* a row's block */
    for (int64_t i = 0; i < 8 * groups; i++)
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *b = w + i * rs + (size_t)ib * bb, *g = p + (i / 8) * 8 * rs + (size_t)ib * 8 * bb;
            for (size_t j = 0; j < bb; j++) bad += g[group_pos(type, j, (int)(i % 8))] != b[j];
        }
    TEST_CONDF(bad == 0, "%s: %d bytes of the interleaved copy misplaced", muse_type_layout_get(type)->name, bad);
    uint8_t *back = malloc(rs * 8 * groups);
    muse_unpack_r8(type, p, rs, groups, back);
    TEST_CONDF(!memcmp(back, w, rs * 8 * groups), "%s: unpacking the copy does not give the rows back",
               muse_type_layout_get(type)->name);
    free(back);
    free(w);
    free(p);
}

/* x: 0 random, 1 all +1, 2 all -1 (codes +-127), 3 zero */
static void check_case(const struct muse_kernels *k, enum muse_type type, int64_t ne0, int64_t groups, int n_act,
                       bool extreme, double *worst) {
    const char *lv = muse_cpu_level_name(k->level), *tn = muse_type_layout_get(type)->name;
    const size_t rs = muse_type_row_size(type, ne0), qs = muse_type_row_size(muse_type_traits[type].vec_dot_type, ne0) + 16;
    const int64_t n_rows = 8 * groups, os = n_rows + 5;
    uint8_t *w = malloc(rs * (size_t)n_rows), *p = malloc(rs * (size_t)n_rows), *q = malloc(qs * (size_t)n_act);
    float *out = malloc(sizeof(float) * ((size_t)n_act * os + 16)), *x = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t i = 0; i < n_rows; i++) {
        CHECK(kr_weight_row(type, ne0, w + i * rs));
        /* Q4_0: every code 15; IQ4_NL: every code 0 (value -127); Q8_0: -128; IQ4_XS: value -127 and
         * every sub-block scale -32 (scales_h and scales_l 0); Q4_K: every code 15, scale and min 63 */
        const int64_t nb = ne0 / muse_type_layout_get(type)->block_size;
        if (extreme && i % 2 == 0)
            for (int64_t ib = 0; ib < nb; ib++) {
                const size_t bb = rs / (size_t)nb;
                const size_t h = type == MUSE_TYPE_Q4_K ? 4 : 2; /* the fp16 scales kept */
                memset(w + i * rs + (size_t)ib * bb + h,
                       type == MUSE_TYPE_Q4_0 || type == MUSE_TYPE_Q4_K ? 0xff : type == MUSE_TYPE_Q8_0 ? 0x80 : 0x00, bb - h);
            }
    }
    muse_repack_r8(type, w, rs, groups, p);
    for (int r = 0; r < n_act; r++) {
        const int kind = extreme ? (r % 4) : r == 3 ? 3 : 0;
        for (int64_t j = 0; j < ne0; j++) x[j] = kind == 1 ? 1.0f : kind == 2 ? -1.0f : kind == 3 ? 0.0f : kr_float() * (r + 1);
        muse_matmul_quantize(NULL, type, ne0, x, 0, 1, q + r * qs, qs, 0, 1);
    }
    memset(out, 0xff, sizeof(float) * ((size_t)n_act * os + 16));
    k->gemm_r8[type](ne0, p, groups, q, qs, n_act, out, os);
    int bad = 0;
    for (int r = 0; r < n_act; r++) {
        for (int64_t i = 0; i < n_rows; i++) {
            float want;
            muse_x86_vec_dot(type)(ne0, &want, w + i * rs, q + r * qs);
            const double got = out[(int64_t)r * os + i], tol = r8_bound(type, ne0, w + i * rs, q + r * qs);
            const double err = fabs(got - (double)want);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    TEST_CONDF(false, "%s %s %lld x %lld rows x %d: out[%d][%lld] = %.9g, reference %.9g, bound %.3g", lv, tn,
                               (long long)ne0, (long long)n_rows, n_act, r, (long long)i, got, (double)want, tol);
            } else if (tol > 0 && err / tol > *worst) {
                *worst = err / tol;
            }
        }
        TEST_CONDF(is_ff(out + (int64_t)r * os + n_rows, sizeof(float) * (size_t)(os - n_rows)), "%s %s: wrote outside row %d",
                   lv, tn, r);
    }
    TEST_CONDF(is_ff(out + (int64_t)n_act * os, sizeof(float) * 16), "%s %s: wrote past the output", lv, tn);
    const struct muse_kernels *k2 = muse_kernels_for(MUSE_CPU_LEVEL_AVX2);
    if (k2 && k2 != k) {
        float *o2 = malloc(sizeof(float) * (size_t)n_act * os);
        memcpy(o2, out, sizeof(float) * (size_t)n_act * os);
        k2->gemm_r8[type](ne0, p, groups, q, qs, n_act, o2, os);
        TEST_CONDF(!memcmp(o2, out, sizeof(float) * (size_t)n_act * os), "%s %s %lld: not the AVX2 build's bits", lv, tn,
                   (long long)ne0);
        free(o2);
    }
    free(w);
    free(p);
    free(q);
    free(out);
    free(x);
}

static void test_level(enum muse_cpu_level level) {
    const struct muse_kernels *k = muse_kernels_for(level), *ke = muse_kernels_exact_for(level);
    if (!k) {
        printf("SKIP: %s level not available on this machine\n", muse_cpu_level_name(level));
        return;
    }
    for (int t = 0; t < MUSE_TYPE_COUNT; t++) {
        TEST_CONDF(!ke->gemm_r8[t], "exact table has an interleaved decode (type %d)", t);
        TEST_CONDF(!k->gemm_r8[t] || muse_repack_r8_type((enum muse_type)t), "type %d: a kernel without a layout", t);
    }
    static const enum muse_type types[] = {MUSE_TYPE_Q4_0, MUSE_TYPE_IQ4_NL, MUSE_TYPE_Q8_0, MUSE_TYPE_IQ4_XS, MUSE_TYPE_Q4_K};
    static const int64_t ne0s_32[] = {32, 64, 96, 2048, 9216}, ne0s_256[] = {256, 512, 768, 2048, 9216};
    int n = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        TEST_CONDF(k->gemm_r8[types[ti]] != NULL, "%s: no interleaved decode for type %d", muse_cpu_level_name(level), types[ti]);
        if (!k->gemm_r8[types[ti]]) continue;
        const int64_t *ne0s = muse_type_layout_get(types[ti])->block_size == 256 ? ne0s_256 : ne0s_32;
        double worst = 0;
        for (size_t e = 0; e < sizeof ne0s_32 / sizeof ne0s_32[0]; e++)
            for (int a = 1; a <= 9; a += 1 + (a == 5))
                for (int x = 0; x < 2; x++, n++) check_case(k, types[ti], ne0s[e], 1 + (e + a + x) % 4, a, x, &worst);
        printf("  %s %-7s worst error / bound %.3f\n", muse_cpu_level_name(level), muse_type_layout_get(types[ti])->name,
               worst);
    }
    printf("%s: %d interleaved decode cases\n", muse_cpu_level_name(level), n);
}

int main(void) {
    test_repack(MUSE_TYPE_Q4_0);
    test_repack(MUSE_TYPE_IQ4_NL);
    test_repack(MUSE_TYPE_Q8_0);
    test_repack(MUSE_TYPE_IQ4_XS);
    test_repack(MUSE_TYPE_Q4_K);
    if (muse_cpu_level_max() < MUSE_CPU_LEVEL_AVX2) printf("SKIP: no AVX2 on this machine\n");
    for (int l = MUSE_CPU_LEVEL_AVX2; l < MUSE_CPU_LEVEL_COUNT; l++) test_level((enum muse_cpu_level)l);
    return TEST_REPORT();
}
