/*
 * tile_lab.c - the tile GEMM (the batched int8 path of prefill, docs/cpu-backend.md) timed alone on
 * one thread: for each type, an ne0 x rows weight matrix against n_act activation rows, the best of
 * `reps` runs, in multiply-adds per second and per cycle of the given clock; a check against the
 * exact batched kernel (muse_matmul) on the first rows first.
 *
 *   build/bench/tile_lab [-T type,type,...] [-m NE0xROWS] [-p N_ACT] [-r REPS] [-g GHZ]
 *
 * Defaults: 2048x2048 (a Q/O projection of the issue-14 files), 512 rows, 5 repeats. One thread,
 * CPU time of the process (the kernel is single-threaded here: no pool). MUSE_CPU=avx2|avx512.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int reps = 5, n_act = 512;
    int64_t ne0 = 2048, rows = 2048;
    double ghz = 0;
    const char *types = "q8_0,q4_k,iq2_xxs,q5_k,q6_k,iq4_xs";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            long long a, b;
            if (sscanf(argv[++i], "%lldx%lld", &a, &b) != 2) goto usage;
            ne0 = a;
            rows = b;
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_act = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc) ghz = atof(argv[++i]);
        else goto usage;
    }
    if (reps < 1 || n_act < 1 || ne0 < 1 || rows < 1) goto usage;
    const struct muse_kernels *k = muse_kernels_active();
    printf("tile lab: level %s, 1 thread, %lldx%lld weights x %d activation rows, best of %d (CPU time)\n\n",
           muse_cpu_level_name(k->level), (long long)ne0, (long long)rows, n_act, reps);
    printf("| type | check (max rel err) | ms | GMAC/s |%s\n|---|---|---|---|%s\n", ghz > 0 ? " MAC/cycle |" : "",
           ghz > 0 ? "---|" : "");
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const int t = muse_type_from_name(name);
        if (t < 0 || !muse_matmul_tile_supported(k, (enum muse_type)t, ne0, n_act)) {
            printf("| %s | no tile GEMM for it here | | |\n", name);
            continue;
        }
        const enum muse_type type = (enum muse_type)t;
        const size_t row_size = muse_type_row_size(type, ne0), q_stride = muse_matmul_act_row_size(type, ne0);
        const size_t xps = muse_matmul_tile_act_bytes(type, ne0), scratch_bytes = muse_matmul_tile_scratch(k, type, ne0);
        uint8_t *w = malloc(row_size * (size_t)rows), *q = malloc(q_stride * (size_t)n_act);
        void *xp = aligned_alloc(64, xps * (size_t)n_act), *scratch = aligned_alloc(64, (scratch_bytes + 63) & ~(size_t)63);
        float *x = malloc(sizeof(float) * (size_t)ne0 * (size_t)n_act);
        float *out = malloc(sizeof(float) * (size_t)rows * (size_t)n_act), *ref = malloc(sizeof(float) * 64 * 8);
        if (!w || !q || !xp || !scratch || !x || !out || !ref) return 1;
        for (int64_t i = 0; i < rows; i++) {
            if (i < 64) kr_weight_row(type, ne0, w + i * row_size);
            else memcpy(w + i * row_size, w + (i % 64) * row_size, row_size);
        }
        for (int64_t j = 0; j < ne0 * n_act; j++) x[j] = kr_float();
        muse_matmul_tile_quantize(k, type, ne0, x, ne0, n_act, q, q_stride, xp, xps, 0, 1);
        /* the check: 64 rows x 8 activation rows against the exact kernels */
        const struct muse_matmul_weight w64 = {type, ne0, 64, w, row_size};
        for (int r = 0; r < 8; r++) muse_kernels_prepare_act(k, type, q + r * q_stride, ne0);
        muse_matmul(k, &w64, q, q_stride, 8, ref, 64, 0, 1);
        const struct muse_matmul_weight wt = {type, ne0, rows, w, row_size};
        muse_matmul_tile(k, &wt, xp, xps, n_act, out, rows, scratch, scratch_bytes);
        double worst = 0, scale = 0;
        for (int i = 0; i < 64 * 8; i++) scale = fmax(scale, fabs(ref[i]));
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(out[(size_t)r * rows + i] - ref[r * 64 + i]) / (scale + 1e-30));
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double c0 = cpu_seconds();
            muse_matmul_tile(k, &wt, xp, xps, n_act, out, rows, scratch, scratch_bytes);
            const double s = cpu_seconds() - c0;
            if (s < best) best = s;
        }
        const double gmac = (double)ne0 * (double)rows * n_act / best * 1e-9;
        printf("| %s | %.1e | %.2f | %.1f |", name, worst, best * 1e3, gmac);
        if (ghz > 0) printf(" %.1f |", gmac / ghz);
        printf("\n");
        fflush(stdout);
        free(w), free(q), free(xp), free(scratch), free(x), free(out), free(ref);
    }
    return 0;
usage:
    fprintf(stderr, "usage: %s [-T type,...] [-m NE0xROWS] [-p N_ACT] [-r REPS] [-g GHZ]\n", argv[0]);
    return 2;
}
