/*
 * test_quant_random.c - muse_quant_random_row: for every type with to_float, decoded values
 * are finite with RMS within a factor 2 of the requested scale (at two scales); the output is
 * deterministic for a seed, different for another seed, and advances the state; redundant
 * fields are consistent (Q8_1 s, Q8_K bsums); the ternary blocks are canonical (quantizing the
 * decoded values reproduces the bytes); TQ2_0 never uses code 3; integer types get bytes.
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

enum { N = 1 << 15 };   /* a multiple of every block size */

static void check_type(enum muse_type t, uint8_t *a, uint8_t *b, float *y) {
    const struct muse_type_layout *l = muse_type_layout_get((uint32_t)t);
    const size_t bytes = muse_type_row_size(t, N);
    const float scales[2] = {0.02f, 3.0f};
    for (int k = 0; k < 2; k++) {
        uint64_t s1 = 42, s2 = 42;
        memset(a, 0, bytes);
        memset(b, 0xff, bytes);
        muse_quant_random_row(t, a, N, &s1, scales[k]);
        muse_quant_random_row(t, b, N, &s2, scales[k]);
        TEST_CONDF(memcmp(a, b, bytes) == 0 && s1 == s2 && s1 != 42, "%s: not deterministic", l->name);
        uint64_t s3 = 43;
        muse_quant_random_row(t, b, N, &s3, scales[k]);
        TEST_CONDF(memcmp(a, b, bytes) != 0, "%s: seed 43 gives the same row as 42", l->name);
        if (!muse_type_traits[t].to_float) continue;
        muse_type_traits[t].to_float(a, y, N);
        double ss = 0;
        int nonfinite = 0;
        for (int i = 0; i < N; i++) {
            nonfinite += !isfinite(y[i]);
            ss += (double)y[i] * y[i];
        }
        const double rms = sqrt(ss / N);
        TEST_CONDF(nonfinite == 0, "%s: %d non-finite values", l->name, nonfinite);
        TEST_CONDF(rms > scales[k] / 2 && rms < scales[k] * 2, "%s scale %g: rms %g", l->name, scales[k], rms);
    }
}

static void check_consistency(void) {
    uint64_t s = 9;
    static struct muse_block_q8_1 q81[64];
    muse_quant_random_row(MUSE_TYPE_Q8_1, q81, 64 * 32, &s, 1.0f);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) { sum += q81[i].qs[j]; bad += q81[i].qs[j] == -128; }
        bad += q81[i].s != muse_fp32_to_fp16((float)sum * muse_fp16_to_fp32(q81[i].d));
    }
    TEST_CONDF(bad == 0, "q8_1: %d blocks with inconsistent s or code -128", bad);

    static struct muse_block_q8_K q8k[16];
    muse_quant_random_row(MUSE_TYPE_Q8_K, q8k, 16 * 256, &s, 1.0f);
    bad = 0;
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += q8k[i].qs[16 * k + j];
            bad += sum != q8k[i].bsums[k];
        }
    TEST_CONDF(bad == 0, "q8_K: %d inconsistent bsums", bad);

    static struct muse_block_tq2_0 t2[32], t2b[32];
    static struct muse_block_tq1_0 t1[32], t1b[32];
    static float y[32 * 256];
    muse_quant_random_row(MUSE_TYPE_TQ2_0, t2, 32 * 256, &s, 0.5f);
    bad = 0;
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 64; j++)
            for (int k = 0; k < 4; k++) bad += ((t2[i].qs[j] >> (2 * k)) & 3) == 3;
    TEST_CONDF(bad == 0, "tq2_0: %d codes equal to 3", bad);
    muse_type_traits[MUSE_TYPE_TQ2_0].to_float(t2, y, 32 * 256);
    muse_type_traits[MUSE_TYPE_TQ2_0].from_float(y, t2b, 32 * 256);
    TEST_COND("tq2_0 random blocks are canonical", memcmp(t2, t2b, sizeof t2) == 0);
    muse_quant_random_row(MUSE_TYPE_TQ1_0, t1, 32 * 256, &s, 0.5f);
    muse_type_traits[MUSE_TYPE_TQ1_0].to_float(t1, y, 32 * 256);
    muse_type_traits[MUSE_TYPE_TQ1_0].from_float(y, t1b, 32 * 256);
    TEST_COND("tq1_0 random blocks are canonical packings", memcmp(t1, t1b, sizeof t1) == 0);

    /* IQ1_M keeps its super-scale in the scale-word nibbles: it must decode to the scale asked */
    static struct muse_block_iq1_m m1[4];
    muse_quant_random_row(MUSE_TYPE_IQ1_M, m1, 4 * 256, &s, 1.0f);
    muse_type_traits[MUSE_TYPE_IQ1_M].to_float(m1, y, 4 * 256);
    double ss = 0;
    for (int i = 0; i < 4 * 256; i++) ss += (double)y[i] * y[i];
    TEST_CONDF(sqrt(ss / 1024) > 0.5 && sqrt(ss / 1024) < 2.0, "iq1_m rms %g", sqrt(ss / 1024));
}

int main(void) {
    uint8_t *a = malloc((size_t)N * 8), *b = malloc((size_t)N * 8);
    float *y = malloc((size_t)N * sizeof(float));
    int n = 0;
    for (int t = 0; t < MUSE_TYPE_COUNT; t++)
        if (muse_type_layout_get((uint32_t)t)) { check_type((enum muse_type)t, a, b, y); n++; }
    TEST_CONDF(n == 34, "%d types", n);
    check_consistency();
    free(a);
    free(b);
    free(y);
    return TEST_REPORT();
}
