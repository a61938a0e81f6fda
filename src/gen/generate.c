/*
 * generate.c - the generation loop (the contract: generate.h).
 *
 * State between calls: the session holds the KV state; the queue (struct muse_gen_queue) holds
 * the tokens a step sampled, handed out by muse_gen_sample from tok[next]; after them the one not
 * in the cache (if any) is the anchor of the next step.
 */
#include "gen/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/constrain.h"
#include "model/model.h"

struct muse_gen {
    struct muse_session *s;          /* borrowed */
    int32_t n_vocab, n_ctx, n_rows;
    struct muse_sampler *smp;        /* borrowed per request */
    struct muse_constraint *cons;    /* a grammar on this request (muse_gen_constrain) */
    struct muse_gen_queue q;
    struct muse_gen_plug plug;       /* self NULL: none */
};

static muse_status alloc_rows(struct muse_gen *g, int32_t n_rows, struct muse_error *err) {
    float *lg = malloc(sizeof(float) * (size_t)g->n_vocab * (size_t)n_rows);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_rows + 1));
    int32_t *row = malloc(sizeof(int32_t) * (size_t)(n_rows + 1));
    if (!lg || !tok || !row) {
        free(lg), free(tok), free(row);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the generation loop's logits");
    }
    free(g->q.logits), free(g->q.tok), free(g->q.row);
    g->q = (struct muse_gen_queue){.logits = lg, .tok = tok, .row = row};
    g->n_rows = n_rows;
    return MUSE_OK;
}

muse_status muse_gen_create(struct muse_session *s, struct muse_gen **out, struct muse_error *err) {
    *out = NULL;
    struct muse_gen *g = calloc(1, sizeof *g);
    if (!g) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    g->s = s;
    const struct muse_context *ctx = muse_session_context(s);
    g->n_vocab = muse_model_n_vocab(ctx->model);
    g->n_ctx = (int32_t)muse_context_n_ctx(ctx);
    muse_status st = alloc_rows(g, 1, err);
    if (st) {
        free(g);
        return st;
    }
    *out = g;
    return MUSE_OK;
}

void muse_gen_free(struct muse_gen *g) {
    if (!g) return;
    free(g->q.logits);
    free(g->q.tok);
    free(g->q.row);
    free(g);
}

struct muse_session *muse_gen_session(const struct muse_gen *g) { return g->s; }
struct muse_gen_queue *muse_gen_queue(struct muse_gen *g) { return &g->q; }

muse_status muse_gen_plug(struct muse_gen *g, const struct muse_gen_plug *p, int32_t n_rows, struct muse_error *err) {
    if (p && n_rows > g->n_rows) {
        muse_status st = alloc_rows(g, n_rows, err);
        if (st) return st;
    }
    g->plug = p ? *p : (struct muse_gen_plug){0};
    g->q.n = g->q.next = g->q.n_cached = 0;
    g->q.cur = NULL;
    return MUSE_OK;
}

static void queue_clear(struct muse_gen *g) {
    g->q.n = g->q.next = g->q.n_cached = 0;
    g->q.cur = NULL;
}

// ---- the session's KV state --------------------------------------------------------------------------

static struct muse_session_keep followed(struct muse_gen *g, struct muse_session_keep k) {
    if (g->plug.self) g->plug.follow(g->plug.self, k.n_kept);
    queue_clear(g);
    return k;
}

struct muse_session_keep muse_gen_reuse(struct muse_gen *g, const int32_t *prompt, int32_t n_prompt) {
    return followed(g, muse_session_reuse(g->s, prompt, n_prompt));
}

struct muse_session_keep muse_gen_keep(struct muse_gen *g, int32_t n_keep) {
    return followed(g, muse_session_keep(g->s, n_keep));
}

void muse_gen_clear(struct muse_gen *g) {
    muse_session_clear(g->s);
    followed(g, (struct muse_session_keep){0});
}

muse_status muse_gen_checkpoint(struct muse_gen *g, struct muse_error *err) {
    muse_status st = muse_session_checkpoint(g->s, err);
    if (st || !g->plug.self) return st;
    return g->plug.checkpoint(g->plug.self, err);
}

// ---- evaluation ------------------------------------------------------------------------------------

muse_status muse_gen_eval(struct muse_gen *g, const int32_t *tokens, int32_t n, struct muse_error *err) {
    queue_clear(g);
    muse_status st = g->plug.self ? g->plug.eval(g->plug.self, tokens, n, g->q.logits, err)
                                  : muse_session_eval(g->s, tokens, n, g->q.logits, 0, err);
    if (st == MUSE_OK) g->q.cur = g->q.logits;
    return st;
}

muse_status muse_gen_eval_rows(struct muse_gen *g, muse_gen_rows_fn eval, void *user, struct muse_error *err) {
    queue_clear(g);
    muse_status st = g->plug.self ? g->plug.eval_rows(g->plug.self, eval, user, g->q.logits, err)
                                  : eval(user, g->q.logits, err);
    if (st == MUSE_OK) g->q.cur = g->q.logits;
    return st;
}

// ---- generation ------------------------------------------------------------------------------------

void muse_gen_begin(struct muse_gen *g, struct muse_sampler *smp) {
    g->smp = smp;
    g->cons = NULL;
    g->q.n = g->q.next = g->q.n_cached = 0; /* cur (the prompt's logits) stays */
    if (g->plug.self) g->plug.begin(g->plug.self);
}

void muse_gen_constrain(struct muse_gen *g, struct muse_constraint *c) { g->cons = c; }
bool muse_gen_may_draft(const struct muse_gen *g) { return g->smp && !g->cons; }

muse_status muse_gen_sample(struct muse_gen *g, int32_t *tok, const float **row, struct muse_error *err) {
    struct muse_gen_queue *q = &g->q;
    if (q->next < q->n) {
        *tok = q->tok[q->next];
        if (row) *row = q->logits + (size_t)q->row[q->next] * g->n_vocab;
        q->next++;
        return MUSE_OK;
    }
    if (!q->cur || !g->smp) return muse_error_set(err, MUSE_ERR_INTERNAL, "generation loop: nothing to sample from");
    if (g->cons) { /* grammar-constrained (gen/constrain.h): reads the logits, never changes them */
        muse_status st = muse_constraint_sample(g->cons, g->smp, q->cur, tok, err);
        if (st == MUSE_OK) st = muse_constraint_accept(g->cons, *tok, err);
        if (st != MUSE_OK) return st;
    } else {
        *tok = muse_sampler_sample(g->smp, q->cur);
    }
    muse_sampler_accept(g->smp, *tok);
    if (row) *row = q->cur;
    q->tok[0] = *tok;
    q->row[0] = (int32_t)((q->cur - q->logits) / g->n_vocab);
    q->n = q->next = 1;
    q->n_cached = 0;
    q->cur = NULL;
    return MUSE_OK;
}

int32_t muse_gen_n_past(const struct muse_gen *g) {
    const int32_t N = muse_session_n_past(g->s);
    if (g->q.next == 0) return N;
    return N - g->q.n_cached + (g->q.next - 1);
}

int32_t muse_gen_sample_row(struct muse_gen *g, int32_t r) {
    const int32_t t = muse_sampler_sample(g->smp, g->q.logits + (size_t)r * g->n_vocab);
    muse_sampler_accept(g->smp, t);
    return t;
}

muse_status muse_gen_step_plain(struct muse_gen *g, int32_t anchor, muse_gen_eval_fn eval, void *user,
                                struct muse_error *err) {
    struct muse_gen_queue *q = &g->q;
    q->cur = NULL;
    muse_status st = eval(user, &anchor, 1, q->logits, 0, err);
    if (st) return st;
    if (g->cons) { /* a grammar: muse_gen_sample samples from these logits through it */
        q->n = q->next = q->n_cached = 0;
        q->cur = q->logits;
        return MUSE_OK;
    }
    q->tok[0] = muse_gen_sample_row(g, 0);
    q->row[0] = 0;
    q->n = 1;
    q->next = 0;
    q->n_cached = 0;
    return MUSE_OK;
}

static muse_status session_eval(void *user, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                                struct muse_error *err) {
    return muse_session_eval(user, tokens, n, logits, logits_all, err);
}

muse_status muse_gen_advance(struct muse_gen *g, int32_t tok, int64_t n_more, struct muse_error *err) {
    struct muse_gen_queue *q = &g->q;
    if (q->next < 1 || q->tok[q->next - 1] != tok)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "generation loop: advance with token %d, which was not just sampled", tok);
    if (q->next - 1 < q->n_cached) return MUSE_OK; /* already in the cache */
    /* tok is the anchor, at the session's end */
    if (muse_session_n_past(g->s) + 1 > g->n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT, "the context is full (%d positions)", g->n_ctx);
    muse_status st = g->plug.self ? g->plug.step(g->plug.self, tok, n_more, err)
                                  : muse_gen_step_plain(g, tok, session_eval, g->s, err);
    if (st) queue_clear(g);
    return st;
}
