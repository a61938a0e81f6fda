/*
 * test_embed.c - embeddings (params.embeddings, muse_context_embeddings, muse_embed): every row's
 * final hidden state equals rms(x) * output_norm of the residual entering the output norm (the
 * feature rows of layer n_layer, normed here with ggml's numerics) bit for bit; the logits are
 * the same with and without embeddings; the chunking (n_batch 3 against 64) changes no bit (the
 * exact kernels: MUSE_CPU=exact, set before any device exists); mean, cls and last pooling
 * against the unpooled rows; the four normalizations; several inputs batched (muse_embed_batch)
 * against each alone; and the errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "synth/synth.h"
#include "synth_fixture.h"
#include "test.h"

#define N_TOK 11

static int32_t tok(int32_t i, int32_t n_vocab) { return (int32_t)((i * 37 + 5) % (n_vocab - 3)); }

static struct muse_context *open_ctx(struct muse_model *m, uint32_t n_batch, int embeddings, uint32_t threads) {
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 32;
    cp.n_batch = n_batch;
    cp.n_threads = threads;
    cp.embeddings = embeddings;
    struct muse_context *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) TEST_CONDF(false, "context: %s", err.msg);
    return ctx;
}

/* rms(x) * w as ggml (the sum of squares in double, in order). */
static void rms_norm(const float *x, float *y, int64_t n, float eps, const float *w) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void test_rows(struct muse_model *m, uint32_t threads) {
    const struct muse_hparams *hp = muse_model_hparams(m);
    const int64_t E = hp->n_embd, V = muse_model_n_vocab(m);
    int32_t t[N_TOK];
    for (int i = 0; i < N_TOK; i++) t[i] = tok(i, (int32_t)V);
    struct muse_context *plain = open_ctx(m, 64, 0, threads), *ctx = open_ctx(m, 64, 1, threads);
    if (!plain || !ctx) goto out;
    struct muse_error err;
    const int32_t last_layer = (int32_t)hp->n_layer;
    TEST_COND("features", muse_context_set_features(ctx, &last_layer, 1, &err) == MUSE_OK);
    float *lg0 = malloc(sizeof(float) * (size_t)(V * N_TOK)), *lg1 = malloc(sizeof(float) * (size_t)(V * N_TOK));
    TEST_COND("eval plain", muse_eval(plain, t, N_TOK, lg0, 1, &err) == MUSE_OK);
    TEST_COND("eval embd", muse_eval(ctx, t, N_TOK, lg1, 1, &err) == MUSE_OK);
    TEST_COND("the logits do not change with embeddings", !memcmp(lg0, lg1, sizeof(float) * (size_t)(V * N_TOK)));
    int32_t n_rows = -1, n_feat = -1;
    const float *h = muse_context_embeddings(ctx, &n_rows), *x = muse_context_features(ctx, &n_feat);
    TEST_CONDF(h && n_rows == N_TOK && x && n_feat == N_TOK, "rows %d / %d", n_rows, n_feat);
    TEST_COND("none without embeddings", muse_context_embeddings(plain, &n_rows) == NULL && n_rows == 0);
    float *want = malloc(sizeof(float) * (size_t)E);
    const float *w = muse_model_weights(m)->output_norm.data;
    for (int r = 0; h && x && r < N_TOK; r++) {
        rms_norm(x + (size_t)r * E, want, E, hp->f_norm_rms_eps, w);
        TEST_CONDF(!memcmp(want, h + (size_t)r * E, sizeof(float) * (size_t)E), "t%u row %d: not rms(x) * output_norm",
                   threads, r);
    }
    free(want);
    free(lg0);
    free(lg1);
out:
    muse_context_free(plain);
    muse_context_free(ctx);
}

static double norm_p(const float *v, int64_t n, int p) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += p == 0 ? fmax(s, fabs(v[i])) - s : pow(fabs(v[i]), p);
    return p == 0 ? s : pow(s, 1.0 / p);
}

static void test_pooling(struct muse_model *m) {
    const int64_t E = muse_model_n_embd(m), V = muse_model_n_vocab(m);
    int32_t t[N_TOK];
    for (int i = 0; i < N_TOK; i++) t[i] = tok(i + 3, (int32_t)V);
    struct muse_context *big = open_ctx(m, 64, 1, 2), *small = open_ctx(m, 3, 1, 2), *plain = open_ctx(m, 64, 0, 2);
    if (!big || !small || !plain) goto out;
    struct muse_error err;
    float *rows = malloc(sizeof(float) * (size_t)(E * N_TOK)), *rows3 = malloc(sizeof(float) * (size_t)(E * N_TOK));
    float *v = malloc(sizeof(float) * (size_t)E);
    TEST_COND("none", muse_embed(big, t, N_TOK, MUSE_POOLING_NONE, -1, rows, &err) == MUSE_OK);
    TEST_COND("none, chunks of 3", muse_embed(small, t, N_TOK, MUSE_POOLING_NONE, -1, rows3, &err) == MUSE_OK);
    TEST_COND("chunking changes no bit", !memcmp(rows, rows3, sizeof(float) * (size_t)(E * N_TOK)));
    TEST_COND("the sequence holds the tokens", muse_context_n_past(small) == N_TOK);
    /* again after the first: muse_embed starts from an empty sequence */
    TEST_COND("again", muse_embed(small, t, N_TOK, MUSE_POOLING_NONE, -1, rows3, &err) == MUSE_OK &&
                           !memcmp(rows, rows3, sizeof(float) * (size_t)(E * N_TOK)));
    TEST_COND("cls", muse_embed(small, t, N_TOK, MUSE_POOLING_CLS, -1, v, &err) == MUSE_OK &&
                         !memcmp(v, rows, sizeof(float) * (size_t)E));
    TEST_COND("last", muse_embed(small, t, N_TOK, MUSE_POOLING_LAST, -1, v, &err) == MUSE_OK &&
                          !memcmp(v, rows + (size_t)(N_TOK - 1) * E, sizeof(float) * (size_t)E));
    TEST_COND("mean", muse_embed(small, t, N_TOK, MUSE_POOLING_MEAN, -1, v, &err) == MUSE_OK);
    double worst = 0;
    for (int64_t i = 0; i < E; i++) {
        double s = 0;
        for (int r = 0; r < N_TOK; r++) s += rows[(size_t)r * E + i];
        worst = fmax(worst, fabs(s / N_TOK - v[i]) / fmax(1e-3, fabs(s / N_TOK)));
    }
    TEST_CONDF(worst < 1e-6, "mean pooling off by %.3g (relative)", worst);
    /* normalizations: Euclidean 1, taxicab 1, max-absolute 32760, p = 3 */
    const int ps[4] = {2, 1, 0, 3};
    const double want[4] = {1.0, 1.0, 32760.0, 1.0};
    for (int k = 0; k < 4; k++) {
        TEST_COND("normalized", muse_embed(big, t, N_TOK, MUSE_POOLING_MEAN, ps[k], v, &err) == MUSE_OK);
        const double got = norm_p(v, E, ps[k]);
        TEST_CONDF(fabs(got - want[k]) <= 1e-5 * want[k], "--embd-normalize %d: norm %.9g, want %g", ps[k], got, want[k]);
    }
    /* errors */
    TEST_COND("no embeddings", muse_embed(plain, t, N_TOK, MUSE_POOLING_MEAN, 2, v, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("bad pooling", muse_embed(big, t, N_TOK, (enum muse_pooling)7, 2, v, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("no tokens", muse_embed(big, t, 0, MUSE_POOLING_MEAN, 2, v, &err) == MUSE_ERR_INVALID_ARG);
    int32_t many[40] = {0};
    TEST_COND("longer than n_ctx", muse_embed(big, many, 40, MUSE_POOLING_MEAN, 2, v, &err) == MUSE_ERR_CONTEXT);
    int32_t bad[2] = {1, (int32_t)V};
    TEST_COND("bad token", muse_embed(big, bad, 2, MUSE_POOLING_MEAN, 2, v, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("names", muse_pooling_from_name("last") == MUSE_POOLING_LAST && muse_pooling_from_name("max") == -1 &&
                           !strcmp(muse_pooling_name(MUSE_POOLING_CLS), "cls"));
    TEST_COND("no pooling key in a synthetic file", muse_model_pooling(m) == -1);
    free(rows);
    free(rows3);
    free(v);
out:
    muse_context_free(big);
    muse_context_free(small);
    muse_context_free(plain);
}

/* muse_embed_batch: 7 inputs of 1..20 tokens through 3 sequences, batches of 8 (inputs span
 * forwards, a freed sequence takes the next input) and of 64, 1 and 2 threads: each vector equals
 * muse_embed's of that input bit for bit, for mean, cls and last; the errors change nothing. */
static void test_batch(struct muse_model *m, uint32_t threads, uint32_t n_batch) {
    const int64_t E = muse_model_n_embd(m), V = muse_model_n_vocab(m);
    enum { N_IN = 7 };
    static const int32_t len[N_IN] = {5, 1, 20, 3, 9, 2, 14};
    int32_t toks[N_IN][20];
    const int32_t *ptr[N_IN];
    for (int i = 0; i < N_IN; i++) {
        for (int k = 0; k < len[i]; k++) toks[i][k] = tok(i * 11 + k * 3, (int32_t)V);
        ptr[i] = toks[i];
    }
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 32;
    cp.n_batch = n_batch;
    cp.n_threads = threads;
    cp.embeddings = 1;
    struct muse_context *solo = open_ctx(m, n_batch, 1, threads), *ctx = NULL;
    struct muse_error err;
    cp.n_seq_max = 3;
    if (!solo || muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "batch context: %s", err.msg);
        muse_context_free(solo);
        return;
    }
    float *got = malloc(sizeof(float) * (size_t)(E * N_IN)), *want = malloc(sizeof(float) * (size_t)E);
    const enum muse_pooling pools[3] = {MUSE_POOLING_MEAN, MUSE_POOLING_CLS, MUSE_POOLING_LAST};
    for (int k = 0; k < 3; k++) {
        TEST_COND("embed batch", muse_embed_batch(ctx, ptr, len, N_IN, pools[k], 2, got, &err) == MUSE_OK);
        for (int i = 0; i < N_IN; i++) {
            TEST_COND("solo", muse_embed(solo, toks[i], len[i], pools[k], 2, want, &err) == MUSE_OK);
            TEST_CONDF(!memcmp(want, got + (size_t)i * E, sizeof(float) * (size_t)E),
                       "t%u b%u %s: input %d of the batch differs from muse_embed", threads, n_batch,
                       muse_pooling_name(pools[k]), i);
        }
    }
    TEST_COND("none refused", muse_embed_batch(ctx, ptr, len, N_IN, MUSE_POOLING_NONE, 2, got, &err) == MUSE_ERR_INVALID_ARG);
    int32_t bad_len[N_IN];
    memcpy(bad_len, len, sizeof bad_len);
    bad_len[3] = 0;
    TEST_COND("an empty input refused", muse_embed_batch(ctx, ptr, bad_len, N_IN, MUSE_POOLING_MEAN, 2, got, &err) == MUSE_ERR_INVALID_ARG);
    int32_t many[40] = {0};
    const int32_t *mp[1] = {many}, ml[1] = {40};
    TEST_COND("longer than n_ctx", muse_embed_batch(ctx, mp, ml, 1, MUSE_POOLING_MEAN, 2, got, &err) == MUSE_ERR_CONTEXT);
    TEST_COND("no inputs", muse_embed_batch(ctx, ptr, len, 0, MUSE_POOLING_MEAN, 2, got, &err) == MUSE_OK);
    free(got);
    free(want);
    muse_context_free(solo);
    muse_context_free(ctx);
}

int main(void) {
    fixture_exact_kernels();
    char path[128];
    struct muse_model *m = fixture_synth_model("embed", 3, 0, "*=q8_0", path, sizeof path);
    if (!m) {
        unlink(path);
        return TEST_REPORT();
    }
    test_rows(m, 1);
    test_rows(m, 2);
    test_pooling(m);
    test_batch(m, 1, 8);
    test_batch(m, 2, 64);
    muse_model_free(m);
    unlink(path);
    return TEST_REPORT();
}
