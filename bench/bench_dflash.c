/* bench_dflash.c - the DFlash drafter's costs next to the target's, measured alternately (a shared
 * machine: every round times each part once, the medians are printed):
 *   build/bench/bench_dflash -m TARGET -d DRAFTER [-t THREADS] [-r ROUNDS] [-p PROMPT] [--rows N]
 * Parts: a plain target decode step; the same with feature capture + injection (muse_draft_eval);
 * the injection of one feature row alone; a draft block; a target batch of block rows with capture
 * + injection (what a verify costs). Everything is rolled back after each timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "muse.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    const char *mp = NULL, *dp = NULL;
    int threads = 0, rounds = 15, prompt = 64, rows = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) mp = argv[++i];
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) dp = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s -m TARGET -d DRAFTER [-t THREADS] [-r ROUNDS] [-p PROMPT] [--rows N]\n", argv[0]);
            return 2;
        }
    }
    if (!mp || !dp || rounds < 1 || rounds > 1000 || prompt < 1 || prompt > 4000) {
        fprintf(stderr, "bench_dflash: -m TARGET and -d DRAFTER are required\n");
        return 2;
    }
    struct muse_error err;
    struct muse_model *m;
    struct muse_context *ctx;
    struct muse_drafter *d;
    struct muse_draft_ctx *dc;
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = (uint32_t)prompt + 64;
    cp.n_threads = (uint32_t)threads;
    if (muse_model_load(mp, muse_model_default_params(), &m, &err) || muse_context_create(m, cp, &ctx, &err) ||
        muse_drafter_load(dp, m, muse_drafter_default_params(), &d, &err) ||
        muse_draft_ctx_create(d, ctx, muse_draft_ctx_default_params(), &dc, &err)) {
        fprintf(stderr, "bench_dflash: %s\n", err.msg);
        return 1;
    }
    const int32_t V = muse_model_n_vocab(m), F = muse_drafter_n_features(d);
    if (!rows) rows = muse_drafter_block_size(d);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(prompt + rows));
    float *feat = calloc((size_t)F * (size_t)prompt, sizeof(float));
    double *t = malloc(sizeof(double) * 5 * (size_t)rounds);
    for (int i = 0; i < prompt + rows; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    if (muse_draft_eval(dc, toks, prompt, NULL, 0, feat, &err)) { /* feat: the captured rows (row 0 is reused) */
        fprintf(stderr, "bench_dflash: %s\n", err.msg);
        return 1;
    }
    struct muse_draft_block b;
    muse_draft_block(dc, toks[prompt], rows, &b, &err); /* warm-up */
    const int32_t P = prompt;
    for (int r = 0; r < rounds; r++) {
        int64_t t0 = muse_time_us();
        muse_eval(ctx, toks + P, 1, NULL, 0, &err);
        t[0 * rounds + r] = (double)(muse_time_us() - t0);
        muse_kv_truncate(ctx, P, &err);
        t0 = muse_time_us();
        muse_draft_eval(dc, toks + P, 1, NULL, 0, NULL, &err);
        t[1 * rounds + r] = (double)(muse_time_us() - t0);
        muse_kv_truncate(ctx, P, &err);
        muse_draft_truncate(dc, P, &err);
        t0 = muse_time_us();
        muse_draft_inject(dc, feat, 1, &err);
        t[2 * rounds + r] = (double)(muse_time_us() - t0);
        muse_draft_truncate(dc, P, &err);
        t0 = muse_time_us();
        muse_draft_block(dc, toks[P], rows, &b, &err);
        t[3 * rounds + r] = (double)(muse_time_us() - t0);
        t0 = muse_time_us();
        muse_draft_eval(dc, toks + P, rows, NULL, 0, NULL, &err);
        t[4 * rounds + r] = (double)(muse_time_us() - t0);
        muse_kv_truncate(ctx, P, &err);
        muse_draft_truncate(dc, P, &err);
    }
    const double plain = median(t, rounds), step = median(t + rounds, rounds), inj = median(t + 2 * rounds, rounds);
    const double blk = median(t + 3 * rounds, rounds), ver = median(t + 4 * rounds, rounds);
    char desc[512];
    muse_drafter_desc(d, desc, sizeof desc);
    printf("%s\n%u threads, %s backend, P = %d, medians of %d alternating rounds (ms):\n", desc, muse_context_n_threads(ctx),
           muse_context_backend(ctx), P, rounds);
    printf("  plain target decode step          %8.3f\n", plain / 1e3);
    printf("  decode step + capture + inject    %8.3f  (%+.1f%%)\n", step / 1e3, 100.0 * (step - plain) / plain);
    printf("  inject one row alone              %8.3f\n", inj / 1e3);
    printf("  draft block of %2d rows            %8.3f  (%.2f decode steps)\n", rows, blk / 1e3, blk / plain);
    printf("  target %2d-row batch + inject      %8.3f  (block / batch = %.2f)\n", rows, ver / 1e3, blk / ver);
    free(toks);
    free(feat);
    free(t);
    muse_draft_ctx_free(dc);
    muse_drafter_free(d);
    muse_context_free(ctx);
    muse_model_free(m);
    return 0;
}
