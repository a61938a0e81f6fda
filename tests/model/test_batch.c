/*
 * test_batch.c - a batch of rows from several sequences (muse_decode) against each sequence run
 * alone: every row's logits bit for bit with the exact kernels (MUSE_CPU=exact: set before any
 * device exists) and the ref backend, 1 and 2 threads. The prompts' rows are interleaved across
 * the sequences (attention runs per run of one sequence's rows, KV stores per row), their lengths
 * differ (the SWA ring of window 8 wraps for the longest), then decode steps take one row of each
 * sequence in a shuffled order. Also: a bad sequence id, a wrong position and an oversized batch
 * are refused and evaluate nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "synth/synth.h"
#include "test.h"

#define N_SEQ 3
#define N_STEPS 4

static const int32_t prompt_len[N_SEQ] = {7, 19, 3};

static int32_t tok(int32_t s, int32_t i, int32_t n_vocab) { return (int32_t)((s * 101 + i * 37 + 5) % (n_vocab - 3)); }

/* Logits of every prompt row, then of each decode step, of sequence s run alone. [rows][n_vocab] */
static float *solo(struct muse_model *m, struct muse_context_params cp, int32_t s, int32_t n_vocab) {
    struct muse_context *ctx = NULL;
    struct muse_error err;
    cp.n_seq_max = 1;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "solo context: %s", err.msg);
        return NULL;
    }
    const int32_t n = prompt_len[s];
    float *out = malloc(sizeof(float) * (size_t)n_vocab * (size_t)(n + N_STEPS));
    int32_t t[64];
    for (int32_t i = 0; i < n + N_STEPS; i++) t[i] = tok(s, i, n_vocab);
    TEST_COND("solo prompt", muse_eval(ctx, t, n, out, 1, &err) == MUSE_OK);
    for (int32_t k = 0; k < N_STEPS; k++)
        TEST_COND("solo step", muse_eval(ctx, t + n + k, 1, out + (size_t)(n + k) * n_vocab, 0, &err) == MUSE_OK);
    muse_context_free(ctx);
    return out;
}

static void run(struct muse_model *m, const char *backend, uint32_t threads) {
    const int32_t n_vocab = muse_model_n_vocab(m);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = threads;
    cp.backend = backend;
    float *ref[N_SEQ];
    for (int32_t s = 0; s < N_SEQ; s++) ref[s] = solo(m, cp, s, n_vocab);
    struct muse_context *ctx = NULL;
    struct muse_error err;
    cp.n_seq_max = N_SEQ;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "batch context: %s", err.msg);
        return;
    }
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
    free(lg);
    for (int32_t s = 0; s < N_SEQ; s++) free(ref[s]);
    muse_context_free(ctx);
}

int main(void) {
    const char *e = getenv("MUSE_CPU");
    char mode[96];
    snprintf(mode, sizeof mode, "%s%sexact", e ? e : "", e && *e ? "," : "");
    setenv("MUSE_CPU", mode, 1);
    char path[128];
    snprintf(path, sizeof path, "/tmp/muse-test-batch-%d.gguf", (int)getpid());
    struct muse_error err;
    struct muse_synth_config cfg;
    TEST_COND("preset", muse_synth_preset("tiny", &cfg, &err) == MUSE_OK);
    cfg.n_layer = 4;
    cfg.n_swa = 8;
    cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
    cfg.n_rules = 0;
    struct muse_model *m = NULL;
    if (muse_synth_parse_types("*=q8_0", &cfg, &err) != MUSE_OK || muse_synth_write(&cfg, path, NULL, NULL, &err) != MUSE_OK ||
        muse_model_load(path, muse_model_default_params(), &m, &err) != MUSE_OK) {
        TEST_CONDF(false, "model: %s", err.msg);
        unlink(path);
        return TEST_REPORT();
    }
    run(m, "ref", 1);
    run(m, "cpu", 1);
    run(m, "cpu", 2);
    muse_model_free(m);
    unlink(path);
    return TEST_REPORT();
}
