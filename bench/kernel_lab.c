/*
 * kernel_lab.c - validates each matrix kernel of the active SIMD level against the kernel-less
 * path of muse_matmul (the scalar dot of the order in force: muse_x86_vec_dot), then times it at a decode shape (1 activation row: GB/s of weights) and a
 * prefill shape (many activation rows: GOP/s, and the per-token speed-up over decode).
 *
 *   build/bench/kernel_lab [-t THREADS] [-T type,type,...] [-m NE0xROWS] [-p N_ACT] [-P ROWS] [-r REPS] [-c]
 *
 * -c times with process CPU time divided by the threads instead of the wall clock: on a shared,
 * oversubscribed machine it leaves out the time the threads waited for a core.
 *
 * Defaults: the 30B FFN shape 6656x19968 for decode, its first 2048 rows for prefill with 512
 * activation rows, all physical cores, 3 repeats. MUSE_CPU=scalar|avx2|avx512 picks the level.
 */
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

struct lab_ctx {
    const struct muse_kernels *k;
    struct muse_matmul_weight w;
    const void *q;
    size_t q_stride;
    int n_act;
    float *out;
    int64_t out_stride;
};

static void lab_fn(int ith, int nth, void *vctx) {
    struct lab_ctx *c = vctx;
    muse_matmul(c->k, &c->w, c->q, c->q_stride, c->n_act, c->out, c->out_stride, ith, nth);
}

/* CPU seconds of the whole process (all threads): on a shared, oversubscribed machine this
 * excludes the time the threads waited for a core. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int use_cpu_time;

/* best and mean seconds of `reps` runs (wall clock, or CPU time / threads with -c) */
static void time_runs(struct muse_threadpool *pool, struct lab_ctx *c, int reps, double *best, double *mean) {
    *best = 1e30;
    *mean = 0;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = muse_time_us();
        double c0 = cpu_seconds();
        muse_threadpool_run(pool, lab_fn, c);
        double s = use_cpu_time ? (cpu_seconds() - c0) / muse_threadpool_n_threads(pool)
                                : (double)(muse_time_us() - t0) * 1e-6;
        if (s < *best) *best = s;
        *mean += s / reps;
    }
}

static double l2(const float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

int main(int argc, char **argv) {
    int n_threads = muse_cpu_features()->n_physical, reps = 3, n_act_p = 512;
    int64_t ne0 = 6656, rows = 19968, rows_p = 2048;
    const char *types = "iq2_xxs,q4_k,q6_k,q8_0,q5_k,f16,bf16,f32,q4_0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            long long a, b;
            if (sscanf(argv[++i], "%lldx%lld", &a, &b) != 2) goto usage;
            ne0 = a;
            rows = b;
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_act_p = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-P") && i + 1 < argc) rows_p = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c")) use_cpu_time = 1;
        else goto usage;
    }
    if (n_threads < 1 || reps < 1 || n_act_p < 1 || ne0 < 1 || rows < 1 || rows_p < 1) goto usage;
    if (rows_p > rows) rows_p = rows;

    const struct muse_kernels *k = muse_kernels_active();
    struct muse_threadpool *pool = NULL;
    if (muse_threadpool_create(n_threads, &pool, NULL) != MUSE_OK) return 1;
    printf("kernel lab: level %s, %d threads, decode %lldx%lld, prefill %lldx%lld with %d rows, best of %d\n\n",
           muse_cpu_level_name(k->level), n_threads, (long long)ne0, (long long)rows, (long long)ne0,
           (long long)rows_p, n_act_p, reps);
    printf("| type | check (max err / tol) | decode ms | decode GB/s | prefill ms | prefill GOP/s | per-token speed-up vs decode |\n");
    printf("|---|---|---|---|---|---|---|\n");

    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        int t = muse_type_from_name(name);
        if (t < 0 || !muse_matmul_supported((enum muse_type)t, ne0)) {
            printf("| %s | unsupported for ne0 %lld | | | | | |\n", name, (long long)ne0);
            continue;
        }
        const enum muse_type type = (enum muse_type)t;
        const size_t row_size = muse_type_row_size(type, ne0);
        uint8_t *w = malloc(row_size * (size_t)rows);
        if (!w) {
            printf("| %s | out of memory | | | | | |\n", name);
            continue;
        }
        for (int64_t i = 0; i < rows; i++) {
            if (i < 64) kr_weight_row(type, ne0, w + i * row_size);
            else memcpy(w + i * row_size, w + (i % 64) * row_size, row_size);  /* fast fill; same bytes read */
        }
        const size_t q_stride = muse_matmul_act_row_size(type, ne0);
        const int n_act_q = n_act_p > 8 ? n_act_p : 8;     /* the check reads 8 rows */
        uint8_t *q = malloc(q_stride * (size_t)n_act_q);   /* in the kernels' layout */
        uint8_t *qref = malloc(q_stride * 8);              /* the first 8 rows in the reference layout */
        float *x = malloc(sizeof(float) * (size_t)ne0);
        for (int r = 0; r < n_act_q; r++) {
            for (int64_t j = 0; j < ne0; j++) x[j] = kr_float();
            muse_kernels_quantize_row(k, muse_type_traits[type].vec_dot_type, x, q + r * q_stride, ne0);
            if (r < 8) memcpy(qref + r * q_stride, q + r * q_stride, q_stride);
            muse_kernels_prepare_act(k, type, q + r * q_stride, ne0);
        }
        /* prefill n_act_p x rows_p, decode 1 x rows, the check 8 x 64 */
        size_t n_out = (size_t)n_act_p * (size_t)rows_p;
        if (n_out < (size_t)rows) n_out = (size_t)rows;
        if (n_out < 64 * 8) n_out = 64 * 8;
        float *out = malloc(sizeof(float) * n_out);
        float *ref = malloc(sizeof(float) * 64 * 8);
        float *wf = malloc(sizeof(float) * (size_t)ne0), *af = malloc(sizeof(float) * (size_t)ne0);

        /* check: 64 rows x 8 activation rows (gemm) and x 1 row (gemv), kernels vs reference */
        double worst = 0;
        for (int pass = 0; pass < 2; pass++) {
            const int na = pass == 0 ? 1 : 8;
            struct lab_ctx c = {.k = k, .w = {type, ne0, rows < 64 ? rows : 64, w, row_size}, .q = q,
                                .q_stride = q_stride, .n_act = na, .out = out, .out_stride = 64};
            muse_threadpool_run(pool, lab_fn, &c);
            c.k = NULL;
            c.out = ref;
            c.q = qref;
            muse_threadpool_run(pool, lab_fn, &c);
            for (int64_t i = 0; i < c.w.n_rows; i++) {
                muse_type_traits[type].to_float(w + i * row_size, wf, ne0);
                double nw = l2(wf, ne0);
                for (int r = 0; r < na; r++) {
                    muse_type_traits[muse_type_traits[type].vec_dot_type].to_float(qref + r * q_stride, af, ne0);
                    double tol = 1e-5 * nw * l2(af, ne0) + 1e-30;
                    double e = fabs((double)out[r * 64 + i] - ref[r * 64 + i]) / tol;
                    if (!(e <= worst)) worst = e;
                }
            }
        }
        char check[64];
        snprintf(check, sizeof check, "%s %.3f", worst <= 1.0 ? "ok" : "FAIL", worst);
        if (!(worst <= 1.0)) {
            printf("| %s | %s | | | | | |\n", name, check);
        } else {
            double dbest, dmean, pbest, pmean;
            struct lab_ctx c = {.k = k, .w = {type, ne0, rows, w, row_size}, .q = q, .q_stride = q_stride,
                                .n_act = 1, .out = out, .out_stride = rows};
            muse_threadpool_run(pool, lab_fn, &c);  /* warm-up */
            time_runs(pool, &c, reps, &dbest, &dmean);
            c.w.n_rows = rows_p;
            c.n_act = n_act_p;
            c.out_stride = rows_p;
            time_runs(pool, &c, reps, &pbest, &pmean);
            const double bytes = (double)row_size * rows;
            const double gop = 2.0 * ne0 * rows_p * n_act_p * 1e-9;
            /* decode cost of rows_p rows for one token vs prefill cost per token */
            const double dec_tok = dbest * rows_p / rows, pre_tok = pbest / n_act_p;
            printf("| %s | %s | %.2f | %.1f | %.1f | %.1f | %.1fx |\n", name, check, dbest * 1e3, bytes / dbest * 1e-9,
                   pbest * 1e3, gop / pbest, dec_tok / pre_tok);
        }
        fflush(stdout);
        free(w);
        free(q);
        free(qref);
        free(x);
        free(out);
        free(ref);
        free(wf);
        free(af);
    }
    muse_threadpool_free(pool);
    return 0;
usage:
    fprintf(stderr, "usage: %s [-t THREADS] [-T type,...] [-m NE0xROWS] [-p N_ACT] [-P ROWS] [-r REPS] [-c]\n", argv[0]);
    return 2;
}
