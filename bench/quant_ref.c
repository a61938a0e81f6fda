/*
 * quant_ref.c - kernel lab for the reference numerics: for every type, validate then time
 * to_float, the activation quantizer and vec_dot_ref on one row (default 4096 elements).
 * The SIMD variants are compared against these numbers.
 *   build/bench/quant_ref [n] [type-name]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant_random.h"
#include "kernels/types.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 4096;
    const char *only = argc > 2 ? argv[2] : NULL;
    if (n <= 0 || n % 256) { fprintf(stderr, "n must be a positive multiple of 256\n"); return 2; }
    void *x = malloc((size_t)n * 8), *yq = malloc((size_t)n * 8);
    float *yf = malloc((size_t)n * sizeof(float)), *out = malloc((size_t)n * sizeof(float));
    uint64_t rng = 1;
    muse_quant_random_row(MUSE_TYPE_F32, yf, n, &rng, 1.0f);
    printf("%-8s %12s %12s %12s   (ns per element, n = %lld)\n", "type", "to_float", "act quant", "vec_dot", (long long)n);
    for (int t = 0; t < MUSE_TYPE_COUNT; t++) {
        const struct muse_type_layout *l = muse_type_layout_get((uint32_t)t);
        const struct muse_type_traits *tr = &muse_type_traits[t];
        if (!l || !tr->vec_dot_ref || (only && strcmp(only, l->name))) continue;
        const struct muse_type_traits *at = &muse_type_traits[tr->vec_dot_type];
        muse_quant_random_row((enum muse_type)t, x, n, &rng, 1.0f);
        at->from_float(yf, yq, n);
        float s = 0;
        tr->vec_dot_ref(n, &s, x, yq);
        if (!isfinite(s)) { printf("%-8s invalid dot %g\n", l->name, s); return 1; }
        const int reps = (int)(4000000 / n) + 1;
        double t0 = now_s();
        for (int r = 0; r < reps; r++) tr->to_float(x, out, n);
        double t1 = now_s();
        for (int r = 0; r < reps; r++) at->from_float(yf, yq, n);
        double t2 = now_s();
        float acc = 0;
        for (int r = 0; r < reps; r++) { tr->vec_dot_ref(n, &s, x, yq); acc += s; }
        double t3 = now_s();
        const double scale = 1e9 / ((double)reps * (double)n);
        printf("%-8s %12.2f %12.2f %12.2f   (%g)\n", l->name, (t1 - t0) * scale, (t2 - t1) * scale, (t3 - t2) * scale, acc);
    }
    free(x); free(yq); free(yf); free(out);
    return 0;
}
