/*
 * test_vec_dot.c - every weight type's vec_dot_ref against a double-precision dot of the
 * dequantized operands: x = a random valid weight row, y = from_float(vec_dot_type) of random
 * activations; expected = sum_i to_float(x)_i * to_float(y)_i in double. The reference dots
 * use integer block sums and a handful of f32 multiplies per block, so they agree to a few
 * f32 ulps of sum|x_i y_i|; a wrong pairing of elements, scale or sign is off by O(1).
 * Q4_1/Q5_1 use Q8_1's fp16 field s = fp16(d * sum q) for the min term, exactly as ggml does,
 * which adds up to |m * s| * 2^-11 per block; the bound includes that.
 * Also: exact integer results for Q8_0 / Q4_0 with unit scales, and linearity over row halves.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quant_random.h"
#include "kernels/types.h"
#include "test.h"

static int64_t lcm64(int64_t a, int64_t b) {
    int64_t x = a, y = b;
    while (y) { int64_t t = x % y; x = y; y = t; }
    return a / x * b;
}

static int n_types_checked;

static void check_type(enum muse_type t) {
    const struct muse_type_traits *tr = &muse_type_traits[t];
    const struct muse_type_layout *wl = muse_type_layout_get((uint32_t)t);
    const enum muse_type at = tr->vec_dot_type;
    const struct muse_type_traits *atr = &muse_type_traits[at];
    const struct muse_type_layout *al = muse_type_layout_get((uint32_t)at);
    TEST_CONDF(atr->from_float && atr->to_float, "%s: activation %s lacks from/to_float", wl->name, al->name);
    if (!atr->from_float || !atr->to_float) return;
    const int64_t m = lcm64(wl->block_size, al->block_size);
    const int64_t lens[] = {m, 3 * m, 4096 > m ? 4096 : m * 2};
    uint64_t rng = 0x1234u + (uint64_t)t * 7919u;
    float worst = 0.0f;
    for (int li = 0; li < 3; li++) {
        const int64_t n = lens[li];
        void *x = malloc(muse_type_row_size(t, n));
        void *yq = malloc(muse_type_row_size(at, n) + 64);
        float *yf = malloc((size_t)n * sizeof(float));
        float *xd = malloc((size_t)n * sizeof(float));
        float *yd = malloc((size_t)n * sizeof(float));
        for (int rep = 0; rep < 3; rep++) {
            muse_quant_random_row(t, x, n, &rng, rep == 2 ? 1e-2f : 1.0f);
            muse_quant_random_row(MUSE_TYPE_F32, yf, n, &rng, rep == 1 ? 30.0f : 1.0f);
            atr->from_float(yf, yq, n);
            tr->to_float(x, xd, n);
            atr->to_float(yq, yd, n);
            double want = 0.0, l1 = 0.0;
            for (int64_t i = 0; i < n; i++) {
                want += (double)xd[i] * (double)yd[i];
                l1 += fabs((double)xd[i] * (double)yd[i]);
            }
            double slack = 0.0;   /* the fp16 rounding of Q8_1's s in the min term */
            if (at == MUSE_TYPE_Q8_1) {
                const struct muse_block_q8_1 *yb = yq;
                for (int64_t b = 0; b < n / 32; b++) {
                    const uint8_t *xb = (const uint8_t *)x + b * wl->type_size;
                    const float mmin = muse_fp16_to_fp32((uint16_t)(xb[2] | xb[3] << 8));
                    slack += fabs((double)mmin * muse_fp16_to_fp32(yb[b].s)) * 0x1p-10;
                }
            }
            float got = NAN;
            tr->vec_dot_ref(n, &got, x, yq);
            const double tol = 4e-6 * l1 + slack + 1e-30;
            const double err = fabs((double)got - want);
            if (err / tol > worst) worst = (float)(err / tol);
            TEST_CONDF(err <= tol, "%s . %s n=%lld rep %d: got %.9g, want %.9g (err %.3g, tol %.3g)", wl->name,
                       al->name, (long long)n, rep, got, want, err, tol);
        }
        /* linearity: dot over the whole row = dot(first half) + dot(second half), for rows of
         * >= 2 units (the halves are block-aligned) */
        if (n / m >= 2 && (n / m) % 2 == 0) {
            float a, b1, b2;
            tr->vec_dot_ref(n, &a, x, yq);
            tr->vec_dot_ref(n / 2, &b1, x, yq);
            tr->vec_dot_ref(n / 2, &b2, (const uint8_t *)x + muse_type_row_size(t, n / 2),
                            (const uint8_t *)yq + muse_type_row_size(at, n / 2));
            TEST_CONDF(fabsf(a - (b1 + b2)) <= 1e-5f * (fabsf(b1) + fabsf(b2)) + 1e-30f, "%s: halves %g + %g != %g",
                       wl->name, b1, b2, a);
        }
        free(x);
        free(yq);
        free(yf);
        free(xd);
        free(yd);
    }
    n_types_checked++;
    printf("%-8s . %-5s  worst err/tol %.3f\n", wl->name, al->name, worst);
}

/* With d = 1 everywhere the dot is an exact integer sum: catches any pairing/sign mistake. */
static void test_exact_integers(void) {
    enum { NB = 8 };
    struct muse_block_q8_0 a[NB], b[NB];
    struct muse_block_q4_0 c[NB];
    uint64_t rng = 5;
    long want_aa = 0, want_ca = 0;
    for (int i = 0; i < NB; i++) {
        a[i].d = b[i].d = c[i].d = 0x3c00;
        for (int j = 0; j < 32; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            a[i].qs[j] = (int8_t)((rng >> 33) % 255 - 127);
            b[i].qs[j] = (int8_t)((rng >> 45) % 255 - 127);
            want_aa += a[i].qs[j] * b[i].qs[j];
        }
        for (int j = 0; j < 16; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            c[i].qs[j] = (uint8_t)(rng >> 40);
            want_ca += ((c[i].qs[j] & 15) - 8) * a[i].qs[j] + ((c[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        }
    }
    float s;
    muse_type_traits[MUSE_TYPE_Q8_0].vec_dot_ref(32 * NB, &s, a, b);
    TEST_CONDF(s == (float)want_aa, "q8_0 exact: %g want %ld", s, want_aa);
    muse_type_traits[MUSE_TYPE_Q4_0].vec_dot_ref(32 * NB, &s, c, a);
    TEST_CONDF(s == (float)want_ca, "q4_0 exact: %g want %ld", s, want_ca);
}

int main(void) {
    for (int t = 0; t < MUSE_TYPE_COUNT; t++)
        if (muse_type_layout_get((uint32_t)t) && muse_type_traits[t].vec_dot_ref) check_type((enum muse_type)t);
    /* everything with an "act." entry in spec table 2.1: 27 weight types plus Q8_1 */
    TEST_CONDF(n_types_checked == 28, "%d types have vec_dot_ref, want 28", n_types_checked);
    test_exact_integers();
    return TEST_REPORT();
}
