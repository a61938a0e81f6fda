/*
 * decode_lab.c - a decode (matvec) kernel against the memory roofline, in cycles per 256 weights
 * (issue 34). For each type: the active level's kernel for N_ACT activation rows (muse_matmul,
 * as the forward calls it), checked bit for bit against the scalar dot of the order in force,
 * then timed two ways:
 *   in cache:  one thread, a matrix of ~IN_KIB KiB of weights called over and over (L2 resident);
 *              median and best call by thread CPU time;
 *   streamed:  THREADS threads, a matrix of ~MIB MiB (far past the L3) read once per call; the
 *              median call by the wall clock and by CPU time / threads (what the kernel does
 *              when its threads have the cores: on a shared machine the wall clock also counts
 *              waits for a core); GB/s of weights and their share of the read
 *              bandwidth measured by the same threads on the same buffer in the same run
 *              (muse_membw_read: the roofline's denominator, as `muse bench --roofline`).
 * Cycles come from the core clock measured at start (a chain of dependent adds, 1 cycle each,
 * timed by thread CPU time), so they stay comparable across boost states; per thread in the
 * streamed case (time x GHz x threads / blocks of 256).
 *
 *   build/bench/decode_lab [-T type,...] [-n NE0] [-t THREADS] [-p N_ACT] [-r CALLS] [-M MIB] [-K IN_KIB] [-8]
 *
 * -8: the same rows interleaved by 8 (kernels/repack.h), timed through the table's interleaved kernel
 * (the copy the cpu device decodes; the check column then compares the first, plain-row call)
 *
 * Defaults: iq2_xxs, ne0 2048, 2 threads, 1 activation row, 200 calls in cache / 15 streamed,
 * 384 MiB, 128 KiB. MUSE_CPU picks the level (MUSE_CPU=avx512,novbmi: the AVX-512 level without
 * VBMI's byte permutes).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "core/membw.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "kernels/x86_numerics.h"

static double process_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Core cycles per second: 4e7 dependent adds (one cycle each), best of 5. Register operands: newer
 * Intel cores (Golden Cove and later) fold chains of add-immediate at rename, several per cycle
 * (the Xeon VM of docs/perf.md read 20 GHz with `add $1`). */
static double core_hz(void) {
    double best = 1e30;
    unsigned long long one = 1;
    __asm__ volatile("" : "+r"(one)); /* a value the compiler cannot see */
    for (int t = 0; t < 5; t++) {
        unsigned long long x = 0;
        const double t0 = thread_seconds();
        for (int i = 0; i < 5000000; i++)
            __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0" : "+r"(x) : "r"(one));
        const double s = thread_seconds() - t0;
        if (s < best) best = s;
    }
    return 4e7 / best;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct lab_ctx {
    const struct muse_kernels *k;
    struct muse_matmul_weight w;
    const void *q;
    size_t q_stride;
    int n_act;
    float *out;
    int64_t out_stride;
    const uint8_t *w8; /* -8: the rows interleaved by 8 (repack.h), read by k->gemm_r8 instead */
};

static void lab_fn(int ith, int nth, void *vctx) {
    struct lab_ctx *c = vctx;
    if (c->w8) { /* the thread's share of the groups of 8 rows, as the cpu device splits them */
        const int64_t ng = c->w.n_rows / 8, g0 = ng * ith / nth, g1 = ng * (ith + 1) / nth;
        if (g1 > g0)
            c->k->gemm_r8[c->w.type](c->w.ne0, c->w8 + (size_t)(8 * g0) * c->w.row_stride, g1 - g0, c->q, c->q_stride,
                                     c->n_act, c->out + 8 * g0, c->out_stride);
        return;
    }
    muse_matmul(c->k, &c->w, c->q, c->q_stride, c->n_act, c->out, c->out_stride, ith, nth);
}

int main(int argc, char **argv) {
    const char *types = "iq2_xxs";
    int64_t ne0 = 2048;
    int n_threads = 2, n_act = 1, calls = 200, mib = 384, in_kib = 128;
    bool r8 = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) ne0 = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_act = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-M") && i + 1 < argc) mib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-K") && i + 1 < argc) in_kib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-8")) r8 = true;
        else goto usage;
    }
    if (ne0 < 1 || n_threads < 1 || n_act < 1 || calls < 3 || mib < 1 || in_kib < 1) goto usage;
    const struct muse_kernels *k = muse_kernels_active();
    struct muse_threadpool *pool = NULL;
    if (muse_threadpool_create(n_threads, &pool, NULL) != MUSE_OK) return 1;
    const double hz = core_hz();
    printf("decode lab: level %s%s%s, ne0 %lld, %d activation rows, core clock %.2f GHz (measured), %d threads "
           "streamed\n",
           muse_cpu_level_name(k->level), muse_cpu_exact_active() ? ",exact" : "",
           k->level >= MUSE_CPU_LEVEL_AVX512 && !muse_cpu_features()->avx512vbmi ? ",novbmi" : "", (long long)ne0,
           n_act, hz * 1e-9, n_threads);
    printf("| type | check | in cache: cycles/256 median (best) | streamed: cycles/256/thread wall / CPU | GB/s wall / CPU "
           "| read GB/s | roofline share wall / CPU |\n|---|---|---|---|---|---|---|\n");
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const int t = muse_type_from_name(name);
        if (t < 0 || !muse_matmul_supported((enum muse_type)t, ne0)) {
            printf("| %s | unsupported for ne0 %lld |\n", name, (long long)ne0);
            continue;
        }
        const enum muse_type type = (enum muse_type)t;
        if (r8 && !k->gemm_r8[type]) {
            printf("| %s | no interleaved kernel at this level |\n", name);
            continue;
        }
        const size_t row_size = muse_type_row_size(type, ne0), q_stride = muse_matmul_act_row_size(type, ne0);
        int64_t rows_c = (int64_t)in_kib * 1024 / (int64_t)row_size, rows_s = (int64_t)mib * 1048576 / (int64_t)row_size;
        if (rows_c < 16) rows_c = 16;
        if (rows_s < rows_c) rows_s = rows_c;
        if (r8) rows_c = rows_c / 8 * 8, rows_s = rows_s / 8 * 8; /* whole groups */
        uint8_t *w = malloc(row_size * (size_t)rows_s), *q = malloc(q_stride * (size_t)n_act),
                *qref = malloc(q_stride * (size_t)n_act);
        float *x = malloc(sizeof(float) * (size_t)ne0), *out = malloc(sizeof(float) * (size_t)rows_s * n_act);
        const int sc = calls / 10 < 5 ? 5 : calls / 10; /* streamed calls (more than -r below 5) */
        double *ts = malloc(sizeof(double) * (size_t)(calls > sc ? calls : sc) * 2);
        if (!w || !q || !qref || !x || !out || !ts) return 1;
        for (int64_t i = 0; i < rows_s; i++) {
            if (i < 256) kr_weight_row(type, ne0, w + i * row_size);
            else memcpy(w + i * row_size, w + (i % 256) * row_size, row_size);
        }
        for (int r = 0; r < n_act; r++) {
            for (int64_t j = 0; j < ne0; j++) x[j] = kr_float();
            muse_matmul_quantize(k, type, ne0, x, 0, 1, q + r * q_stride, q_stride, 0, 1);
            muse_matmul_quantize(NULL, type, ne0, x, 0, 1, qref + r * q_stride, q_stride, 0, 1);
        }
        struct lab_ctx c = {.k = k, .w = {type, ne0, rows_c, w, row_size}, .q = q, .q_stride = q_stride,
                            .n_act = n_act, .out = out, .out_stride = rows_c};
        lab_fn(0, 1, &c);
        int64_t bad = 0;
        for (int r = 0; r < n_act; r++)
            for (int64_t i = 0; i < rows_c; i++) {
                float want;
                muse_x86_vec_dot(type)(ne0, &want, w + i * row_size, qref + r * q_stride);
                bad += memcmp(&want, &out[r * rows_c + i], sizeof want) != 0;
            }
        uint8_t *w8 = r8 ? malloc(row_size * (size_t)rows_s) : NULL; /* the same rows interleaved by 8 */
        if (r8 && !w8) return 1;
        if (w8) muse_repack_r8(type, w, row_size, rows_s / 8, w8);
        c.w8 = w8;
        const double blocks_c = (double)rows_c * (double)ne0 / 256.0, blocks_s = (double)rows_s * (double)ne0 / 256.0;
        for (int i = 0; i < calls; i++) {
            const double t0 = thread_seconds();
            lab_fn(0, 1, &c);
            ts[i] = thread_seconds() - t0;
        }
        qsort(ts, (size_t)calls, sizeof *ts, cmp_d);
        const double cyc_med = ts[calls / 2] * hz / blocks_c, cyc_best = ts[0] * hz / blocks_c;
        /* streamed */
        c.w.n_rows = rows_s;
        c.out_stride = rows_s;
        muse_threadpool_run(pool, lab_fn, &c);
        double *tc = ts + sc; /* CPU time per call / threads */
        for (int i = 0; i < sc; i++) {
            const int64_t t0 = muse_time_us();
            const double c0 = process_seconds();
            muse_threadpool_run(pool, lab_fn, &c);
            ts[i] = (double)(muse_time_us() - t0) * 1e-6;
            tc[i] = (process_seconds() - c0) / n_threads;
        }
        qsort(ts, (size_t)sc, sizeof *ts, cmp_d);
        qsort(tc, (size_t)sc, sizeof *tc, cmp_d);
        const double bytes = (double)row_size * (double)rows_s, bw = muse_membw_read(pool, w, (size_t)bytes, 3);
        const double gbs = bytes / ts[sc / 2], gbc = bytes / tc[sc / 2];
        printf("| %s%s | %s | %.1f (%.1f) | %.1f / %.1f | %.2f / %.2f | %.2f | %.0f%% / %.0f%% |\n", name, w8 ? " r8" : "",
               bad ? "MISMATCH" : "exact", cyc_med, cyc_best, ts[sc / 2] * hz * n_threads / blocks_s,
               tc[sc / 2] * hz * n_threads / blocks_s, gbs * 1e-9, gbc * 1e-9, bw * 1e-9, 100.0 * gbs / bw,
               100.0 * gbc / bw);
        fflush(stdout);
        free(w);
        free(w8);
        free(q);
        free(qref);
        free(x);
        free(out);
        free(ts);
    }
    muse_threadpool_free(pool);
    return 0;
usage:
    fprintf(stderr, "usage: %s [-T type,...] [-n NE0] [-t THREADS] [-p N_ACT] [-r CALLS] [-M MIB] [-K IN_KIB] [-8]\n",
            argv[0]);
    return 2;
}
