/*
 * test_batch.c - a batch of rows from several sequences (muse_decode) against each sequence run
 * alone: every row's logits bit for bit with the exact kernels (MUSE_CPU=exact: set before any
 * device exists) and the ref backend, 1 and 2 threads. The prompts' rows are interleaved across
 * the sequences (attention runs per run of one sequence's rows, KV stores per row), their lengths
 * differ (the SWA ring of window 8 wraps for the longest), then decode steps take one row of each
 * sequence in a shuffled order. Also: a bad sequence id, a wrong position and an oversized batch
 * are refused and evaluate nothing. The feature rows (muse_context_set_features: layers 0, 2, the
 * final residual, 2 again) of every batch row equal its solo run's, which equal the rows the
 * capture hook sees; a bad feature layer is refused, and none set gives none.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "synth/synth.h"
#include "synth_fixture.h"
#include "test.h"

#define N_SEQ 3
#define N_STEPS 4

static const int32_t prompt_len[N_SEQ] = {7, 19, 3};

static int32_t tok(int32_t s, int32_t i, int32_t n_vocab) { return (int32_t)((s * 101 + i * 37 + 5) % (n_vocab - 3)); }

#define N_FEAT 4
static const int32_t feat_layers[N_FEAT] = {0, 2, 4, 2}; /* 4 = n_layer: the final residual */
static int64_t g_n_embd;

/* The capture hook's rows of layers 0 and 2 (slots 0 and 1 of a feature row) at their positions. */
struct seen {
    float *rows; /* [position][N_FEAT * n_embd] */
};
static void capture_cb(void *user, int32_t il, const int32_t *pos, int32_t n_tokens, const float *x) {
    struct seen *c = user;
    const size_t E = (size_t)g_n_embd;
    for (int32_t r = 0; r < n_tokens && (il == 0 || il == 2); r++)
        memcpy(c->rows + (size_t)pos[r] * N_FEAT * E + (il == 0 ? 0 : E), x + r * E, sizeof(float) * E);
}

/* The feature rows of the last forward into feat + pos0 rows; n the rows expected. */
static void take_features(struct muse_context *ctx, float *feat, int32_t pos0, int32_t n) {
    int32_t got = -1;
    const float *f = muse_context_features(ctx, &got);
    TEST_CONDF(f && got == n, "feature rows: %d for %d rows", got, n);
    if (f && got == n) memcpy(feat + (size_t)pos0 * N_FEAT * g_n_embd, f, sizeof(float) * (size_t)n * N_FEAT * g_n_embd);
}

/* Logits of every prompt row, then of each decode step, of sequence s run alone. [rows][n_vocab];
 * its feature rows into *feat ([rows][N_FEAT * n_embd]). */
static float *solo(struct muse_model *m, struct muse_context_params cp, int32_t s, int32_t n_vocab, float **feat) {
    struct muse_context *ctx = NULL;
    struct muse_error err;
    const int32_t n = prompt_len[s];
    const size_t F = N_FEAT * (size_t)g_n_embd;
    struct seen seen = {calloc((size_t)(n + N_STEPS) * F, sizeof(float))};
    *feat = calloc((size_t)(n + N_STEPS) * F, sizeof(float));
    cp.n_seq_max = 1;
    cp.capture = capture_cb;
    cp.capture_user = &seen;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK ||
        muse_context_set_features(ctx, feat_layers, N_FEAT, &err) != MUSE_OK) {
        TEST_CONDF(false, "solo context: %s", err.msg);
        muse_context_free(ctx);
        free(seen.rows);
        return NULL;
    }
    float *out = malloc(sizeof(float) * (size_t)n_vocab * (size_t)(n + N_STEPS));
    int32_t t[64];
    for (int32_t i = 0; i < n + N_STEPS; i++) t[i] = tok(s, i, n_vocab);
    TEST_COND("solo prompt", muse_eval(ctx, t, n, out, 1, &err) == MUSE_OK);
    take_features(ctx, *feat, 0, n);
    for (int32_t k = 0; k < N_STEPS; k++) {
        TEST_COND("solo step", muse_eval(ctx, t + n + k, 1, out + (size_t)(n + k) * n_vocab, 0, &err) == MUSE_OK);
        take_features(ctx, *feat, n + k, 1);
    }
    const size_t E = (size_t)g_n_embd;
    for (int32_t i = 0; i < n + N_STEPS; i++) {
        const float *f = *feat + i * F, *c = seen.rows + i * F;
        TEST_CONDF(!memcmp(f, c, sizeof(float) * 2 * E) && !memcmp(f + 3 * E, c + E, sizeof(float) * E),
                   "sequence %d position %d: the feature rows differ from the capture hook's", s, i);
    }
    free(seen.rows);
    muse_context_free(ctx);
    return out;
}

/* Batch rows i of (bs, bpos) against their solo feature rows. */
static void check_features(struct muse_context *ctx, float *const *ref_feat, const int32_t *bs, const int32_t *bpos,
                           int32_t n, const char *what) {
    const size_t F = N_FEAT * (size_t)g_n_embd;
    int32_t got = -1;
    const float *f = muse_context_features(ctx, &got);
    TEST_CONDF(f && got == n, "%s: %d feature rows for %d", what, got, n);
    for (int32_t i = 0; f && got == n && i < n; i++)
        if (ref_feat[bs[i]])
            TEST_CONDF(!memcmp(f + i * F, ref_feat[bs[i]] + (size_t)bpos[i] * F, sizeof(float) * F),
                       "%s: row %d (sequence %d, position %d): feature rows differ from the solo run", what, i, bs[i],
                       bpos[i]);
}

static void run(struct muse_model *m, const char *backend, uint32_t threads) {
    const int32_t n_vocab = muse_model_n_vocab(m);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = threads;
    cp.backend = backend;
    float *ref[N_SEQ], *ref_feat[N_SEQ];
    for (int32_t s = 0; s < N_SEQ; s++) ref[s] = solo(m, cp, s, n_vocab, &ref_feat[s]);
    struct muse_context *ctx = NULL;
    struct muse_error err;
    cp.n_seq_max = N_SEQ;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "batch context: %s", err.msg);
        return;
    }
    int32_t n_rows = -1, bad_layer[2] = {0, 5};
    TEST_COND("no features set", muse_context_features(ctx, &n_rows) == NULL && n_rows == 0);
    TEST_COND("feature layer past n_layer", muse_context_set_features(ctx, bad_layer, 2, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("still none", muse_context_features(ctx, NULL) == NULL);
    TEST_COND("features", muse_context_set_features(ctx, feat_layers, N_FEAT, &err) == MUSE_OK);
    /* the prompts, interleaved: row by row round the sequences while each has rows left */
    int32_t bt[32], bs[32], bpos[32], n = 0, next[N_SEQ] = {0};
    int8_t want[32];
    for (int32_t more = 1; more;) {
        more = 0;
        for (int32_t s = 0; s < N_SEQ; s++)
            if (next[s] < prompt_len[s]) {
                bt[n] = tok(s, next[s], n_vocab), bs[n] = s, bpos[n] = next[s]++, want[n++] = 1;
                more = 1;
            }
    }
    float *lg = malloc(sizeof(float) * (size_t)n_vocab * 32);
    struct muse_batch b = {.n_tokens = n, .token = bt, .seq_id = bs, .pos = bpos, .logits = want};
    TEST_COND("batch prompt", muse_decode(ctx, &b, lg, &err) == MUSE_OK);
    check_features(ctx, ref_feat, bs, bpos, n, "batch prompt");
    for (int32_t i = 0; i < n && ref[bs[i]]; i++)
        TEST_CONDF(!memcmp(lg + (size_t)i * n_vocab, ref[bs[i]] + (size_t)bpos[i] * n_vocab, sizeof(float) * n_vocab),
                   "%s t%u: prompt row %d (sequence %d, position %d) differs from its solo run", backend, threads, i,
                   bs[i], bpos[i]);
    for (int32_t s = 0; s < N_SEQ; s++) TEST_COND("n_past", muse_seq_n_past(ctx, s) == prompt_len[s]);
    /* refused batches change nothing */
    int32_t bad_seq[1] = {N_SEQ}, bad_pos[1] = {0}, one_tok[1] = {1};
    struct muse_batch bad = {.n_tokens = 1, .token = one_tok, .seq_id = bad_seq};
    TEST_COND("bad sequence id", muse_decode(ctx, &bad, lg, &err) == MUSE_ERR_INVALID_ARG);
    bad.seq_id = NULL, bad.pos = bad_pos;
    TEST_COND("wrong position", muse_decode(ctx, &bad, lg, &err) == MUSE_ERR_INVALID_ARG);
    bad.pos = NULL, bad.n_tokens = 33;
    TEST_COND("batch too large", muse_decode(ctx, &bad, lg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("unchanged", muse_seq_n_past(ctx, 0) == prompt_len[0]);
    /* decode steps: one row of each sequence, in a rotating order; logits of the last row of each
     * sequence (logits = NULL) */
    for (int32_t k = 0; k < N_STEPS; k++) {
        int32_t st[N_SEQ], ss[N_SEQ];
        for (int32_t i = 0; i < N_SEQ; i++) {
            ss[i] = (i + k) % N_SEQ;
            st[i] = tok(ss[i], prompt_len[ss[i]] + k, n_vocab);
        }
        struct muse_batch d = {.n_tokens = N_SEQ, .token = st, .seq_id = ss};
        TEST_COND("batch step", muse_decode(ctx, &d, lg, &err) == MUSE_OK);
        int32_t sp[N_SEQ];
        for (int32_t i = 0; i < N_SEQ; i++) sp[i] = prompt_len[ss[i]] + k;
        check_features(ctx, ref_feat, ss, sp, N_SEQ, "batch step");
        for (int32_t i = 0; i < N_SEQ; i++) {
            const int32_t s = ss[i];
            if (!ref[s]) continue;
            TEST_CONDF(!memcmp(lg + (size_t)i * n_vocab, ref[s] + (size_t)(prompt_len[s] + k) * n_vocab,
                               sizeof(float) * n_vocab),
                       "%s t%u: step %d of sequence %d differs from its solo run", backend, threads, k, s);
        }
    }
    /* sequence 1 rolled back and run again alone gives its solo logits again */
    TEST_COND("truncate", muse_seq_truncate(ctx, 1, prompt_len[1], &err) == MUSE_OK);
    int32_t again = tok(1, prompt_len[1], n_vocab), one = 1;
    struct muse_batch r = {.n_tokens = 1, .token = &again, .seq_id = &one};
    TEST_COND("after truncate", muse_decode(ctx, &r, lg, &err) == MUSE_OK);
    if (ref[1])
        TEST_COND("truncate then step",
                  !memcmp(lg, ref[1] + (size_t)prompt_len[1] * n_vocab, sizeof(float) * n_vocab));
    TEST_COND("features off", muse_context_set_features(ctx, NULL, 0, &err) == MUSE_OK && !muse_context_features(ctx, NULL));
    free(lg);
    for (int32_t s = 0; s < N_SEQ; s++) free(ref[s]), free(ref_feat[s]);
    muse_context_free(ctx);
}

/* A paged cache (params.n_ctx_pool): sequences take the pool's cells as they grow and give them
 * back when they shrink; an evaluation the pool cannot hold fails and changes nothing; logits equal
 * those of a context that is not paged, also after cells were given back and taken again. */
static void test_pool(struct muse_model *m) {
    const int32_t n_vocab = muse_model_n_vocab(m);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = 2;
    struct muse_context *plain = NULL, *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(m, cp, &plain, &err) != MUSE_OK) {
        TEST_CONDF(false, "plain context: %s", err.msg);
        return;
    }
    cp.n_seq_max = 3;
    cp.n_ctx_pool = 128; /* two full sequences */
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "paged context: %s", err.msg);
        muse_context_free(plain);
        return;
    }
    int64_t used = -1, total = -1;
    muse_context_kv_cells(ctx, &used, &total);
    TEST_CONDF(used == 0 && total == 128, "an empty pool: %lld of %lld", (long long)used, (long long)total);
    int32_t t[64], seq[32];
    for (int32_t i = 0; i < 64; i++) t[i] = tok(5, i, n_vocab);
    float *want = malloc(sizeof(float) * (size_t)n_vocab), *got = malloc(sizeof(float) * (size_t)n_vocab);
    /* sequence s takes its 64 positions in two batches of 32 */
    for (int32_t s = 0; s < 2; s++)
        for (int32_t h = 0; h < 2; h++) {
            for (int32_t i = 0; i < 32; i++) seq[i] = s;
            struct muse_batch b = {.n_tokens = 32, .token = t + 32 * h, .seq_id = seq};
            TEST_COND("fill", muse_decode(ctx, &b, got, &err) == MUSE_OK);
        }
    muse_context_kv_cells(ctx, &used, NULL);
    TEST_CONDF(used == 128, "two full sequences take the pool: %lld", (long long)used);
    int32_t two = 2;
    struct muse_batch one = {.n_tokens = 1, .token = t, .seq_id = &two};
    TEST_COND("a full pool refuses", muse_decode(ctx, &one, got, &err) == MUSE_ERR_CONTEXT && muse_seq_n_past(ctx, 2) == 0);
    TEST_COND("reserve refused too", muse_seq_reserve(ctx, 2, 1, &err) == MUSE_ERR_CONTEXT);
    TEST_COND("reserve past n_ctx", muse_seq_reserve(ctx, 0, 65, &err) == MUSE_ERR_CONTEXT);
    /* sequence 0 rolls back to 32 positions (as far as its window-8 rings allow): its cells above
     * go back; sequence 2 can start */
    TEST_COND("truncate", muse_seq_truncate(ctx, 0, 32, &err) == MUSE_OK);
    muse_context_kv_cells(ctx, &used, NULL);
    TEST_CONDF(used <= 112 && used >= 96, "cells given back: %lld in use", (long long)used);
    /* sequence 2's 20 tokens, then one: logits as in a context that is not paged */
    for (int32_t i = 0; i < 20; i++) seq[i] = 2;
    struct muse_batch b20 = {.n_tokens = 20, .token = t, .seq_id = seq};
    TEST_COND("after the give-back", muse_decode(ctx, &b20, got, &err) == MUSE_OK);
    TEST_COND("plain", muse_eval(plain, t, 20, want, 0, &err) == MUSE_OK);
    TEST_COND("paged logits == plain logits", !memcmp(want, got, sizeof(float) * (size_t)n_vocab));
    /* sequence 1 cleared: its cells go back; sequence 0 goes on from 32 over the rows it gave back
     * (zero pages again) */
    TEST_COND("clear 1", muse_seq_clear(ctx, 1, &err) == MUSE_OK);
    muse_context_kv_cells(ctx, &used, NULL);
    TEST_CONDF(used <= 64, "sequence 1's cells given back: %lld in use", (long long)used);
    int32_t zero = 0;
    struct muse_batch b0 = {.n_tokens = 1, .token = t + 32, .seq_id = &zero};
    TEST_COND("continue", muse_decode(ctx, &b0, got, &err) == MUSE_OK);
    muse_kv_truncate(plain, 0, &err);
    TEST_COND("plain 33", muse_eval(plain, t, 33, want, 0, &err) == MUSE_OK);
    TEST_COND("over given-back rows: logits == plain", !memcmp(want, got, sizeof(float) * (size_t)n_vocab));
    TEST_COND("clear", muse_seq_clear(ctx, 1, &err) == MUSE_OK && muse_seq_clear(ctx, 0, &err) == MUSE_OK &&
                           muse_seq_clear(ctx, 2, &err) == MUSE_OK);
    muse_context_kv_cells(ctx, &used, NULL);
    TEST_CONDF(used == 0, "everything given back: %lld", (long long)used);
    free(want);
    free(got);
    muse_context_free(ctx);
    muse_context_free(plain);
}

int main(void) {
    fixture_exact_kernels();
    char path[128];
    struct muse_model *m = fixture_synth_model("batch", 4, 8, "*=q8_0", path, sizeof path);
    if (!m) {
        unlink(path);
        return TEST_REPORT();
    }
    g_n_embd = muse_model_n_embd(m);
    run(m, "ref", 1);
    run(m, "cpu", 1);
    run(m, "cpu", 2);
    test_pool(m);
    muse_model_free(m);
    unlink(path);
    return TEST_REPORT();
}
