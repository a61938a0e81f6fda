/*
 * kernel_loop.c - times one matrix kernel of the active SIMD level by itself, for A/B work on a
 * shared machine: the kernel (muse_kernels gemv/gemm, no thread pool, no driver) is called many
 * times on a small shape that stays in the caches, and the best call by this thread's CPU time
 * is reported. On a loaded 2-vCPU VM this is far steadier than kernel_lab's timings (best of
 * a few long runs): the fastest of hundreds of short calls is one that ran undisturbed.
 * Results are checked against the scalar dot of the order in force (muse_x86_vec_dot) first.
 * With more activation rows than the level's tile_min_act the tile GEMM (the fast prefill path,
 * packing included) is timed too, its outputs checked against its derived bound.
 *
 *   build/bench/kernel_loop [-T type,...] [-m NE0xROWS] [-p N_ACT] [-r CALLS]
 *
 * Defaults: q8_0,q4_0,iq2_xxs; 2048x256 (decode) with -p 1, 2048x64 with -p 64 for prefill.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/x86_numerics.h"

static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *types = "q8_0,q4_0,iq2_xxs";
    int64_t ne0 = 2048, rows = 256;
    int n_act = 1, calls = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            long long a, b;
            if (sscanf(argv[++i], "%lldx%lld", &a, &b) != 2) goto usage;
            ne0 = a;
            rows = b;
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_act = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) calls = atoi(argv[++i]);
        else goto usage;
    }
    if (ne0 < 1 || rows < 1 || n_act < 1 || calls < 1) goto usage;
    const struct muse_kernels *k = muse_kernels_active();
    printf("kernel loop: level %s, %lldx%lld, %d activation rows, best of %d calls (thread CPU time)\n",
           muse_cpu_level_name(k->level), (long long)ne0, (long long)rows, n_act, calls);
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const int t = muse_type_from_name(name);
        if (t < 0 || !muse_matmul_supported((enum muse_type)t, ne0)) {
            printf("%-8s unsupported for ne0 %lld\n", name, (long long)ne0);
            continue;
        }
        const enum muse_type type = (enum muse_type)t;
        muse_gemm_fn fn = muse_matmul_kernel(k, type, n_act);
        if (!fn) {
            printf("%-8s no kernel at this level\n", name);
            continue;
        }
        const size_t row_size = muse_type_row_size(type, ne0), q_stride = muse_matmul_act_row_size(type, ne0);
        uint8_t *w = malloc(row_size * (size_t)rows), *q = malloc(q_stride * (size_t)n_act),
                *qref = malloc(q_stride * (size_t)n_act);
        float *x = malloc(sizeof(float) * (size_t)ne0), *out = malloc(sizeof(float) * (size_t)rows * n_act);
        if (!w || !q || !qref || !x || !out) return 1;
        for (int64_t i = 0; i < rows; i++) kr_weight_row(type, ne0, w + i * row_size);
        for (int r = 0; r < n_act; r++) {
            for (int64_t j = 0; j < ne0; j++) x[j] = kr_float();
            /* the forward's quantizer, then the kernels' layout (as muse_matmul_quantize) */
            muse_matmul_quantize(k, type, ne0, x, 0, 1, q + r * q_stride, q_stride, 0, 1);
            muse_matmul_quantize(NULL, type, ne0, x, 0, 1, qref + r * q_stride, q_stride, 0, 1);
        }
        /* check every output bit for bit against the scalar dot of the order in force */
        if (!fn(ne0, w, row_size, rows, q, q_stride, n_act, out, rows)) {
            printf("%-8s declined\n", name);
            continue;
        }
        int64_t bad = 0;
        for (int r = 0; r < n_act; r++)
            for (int64_t i = 0; i < rows; i++) {
                float want;
                muse_x86_vec_dot(type)(ne0, &want, w + i * row_size, qref + r * q_stride);
                bad += memcmp(&want, &out[r * rows + i], sizeof want) != 0;
            }
        double best = 1e30;
        for (int c = 0; c < calls; c++) {
            const double t0 = thread_seconds();
            fn(ne0, w, row_size, rows, q, q_stride, n_act, out, rows);
            const double s = thread_seconds() - t0;
            if (s < best) best = s;
        }
        const double ops = 2.0 * (double)ne0 * (double)rows * n_act;
        printf("%-8s %s  best %9.1f us  %7.1f GOP/s  %6.2f GB/s of weights\n", name, bad ? "MISMATCH" : "exact",
               best * 1e6, ops / best * 1e-9, (double)row_size * (double)rows / best * 1e-9);
        if (muse_matmul_tile_supported(k, type, ne0, n_act)) {
            const size_t xps = muse_matmul_tile_act_bytes(type, ne0), sb = muse_matmul_tile_scratch(k, type, ne0);
            uint8_t *xp = malloc(xps * (size_t)n_act);
            void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
            float *tout = malloc(sizeof(float) * (size_t)rows * n_act);
            if (!xp || !scratch || !tout) return 1;
            for (int r = 0; r < n_act; r++) muse_matmul_tile_prep(type, ne0, qref + r * q_stride, xp + r * xps);
            k->tile_gemm[type](ne0, w, row_size, rows, xp, xps, n_act, tout, rows, scratch, sb);
            double maxrel = 0;
            for (int64_t i = 0; i < rows * n_act; i++) {
                float want;
                muse_x86_vec_dot(type)(ne0, &want, w + (i % rows) * row_size, qref + (i / rows) * q_stride);
                const double e = fabs((double)tout[i] - want) / (fabs(want) + 1e-30);
                if (e > maxrel) maxrel = e;
            }
            double tbest = 1e30;
            for (int c = 0; c < calls; c++) {
                const double t0 = thread_seconds();
                k->tile_gemm[type](ne0, w, row_size, rows, xp, xps, n_act, tout, rows, scratch, sb);
                const double s = thread_seconds() - t0;
                if (s < tbest) tbest = s;
            }
            printf("%-8s tile   best %9.1f us  %7.1f GOP/s  (%.2fx; max rel. diff %.2g)\n", name, tbest * 1e6,
                   ops / tbest * 1e-9, best / tbest, maxrel);
            free(xp);
            free(scratch);
            free(tout);
        }
        free(w);
        free(q);
        free(qref);
        free(x);
        free(out);
    }
    return 0;
usage:
    fprintf(stderr, "usage: %s [-T type,...] [-m NE0xROWS] [-p N_ACT] [-r CALLS]\n", argv[0]);
    return 2;
}
