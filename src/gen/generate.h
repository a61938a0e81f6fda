/*
 * generate.h - the generation loop over a session: the prompt evaluated, then token by token a
 * sample, a commit, a decode step for what comes next. `muse run`, `muse chat`, `muse bench` and
 * the server generate through it. Speculative decoding (src/speculative/spec.h) plugs into it
 * (struct muse_gen_plug below): it then follows every change of the session's KV state and takes
 * the decode steps, the caller's loop unchanged.
 *
 *     muse_gen_reuse(g, prompt, n)  ...  muse_gen_eval(g, rest, n_rest)   the prompt
 *     muse_gen_begin(g, sampler)                                          a request
 *     for (;;) {
 *         muse_gen_sample(g, &tok, &row)      the next token (already accepted into the sampler)
 *         ... stop at EOS/EOT, max tokens, a stop string, cancellation: simply stop calling ...
 *         muse_gen_advance(g, tok, n_more)    commit it, compute what comes next
 *     }
 *
 * The session's KV state changes only through the loop (reuse, keep, clear, checkpoint, eval), so a
 * plug sees each change. A decode step may leave more than one token (a plug's verify step: the
 * accepted drafts are already in the cache); muse_gen_sample hands them out one by one and
 * muse_gen_advance commits them without evaluating again.
 *
 * Threads: one loop per sequence, used from one thread (the context's).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gen/sampler.h"
#include "gen/session.h"
#include "muse.h"

struct muse_gen;
struct muse_constraint;

/* A loop over session s (borrowed: must outlive it; its context's KV state must change only through
 * the loop from now on). Errors: MUSE_ERR_NOMEM. *out owned by the caller (muse_gen_free). */
muse_status muse_gen_create(struct muse_session *s, struct muse_gen **out, struct muse_error *err);
void muse_gen_free(struct muse_gen *g); /* after the plug's owner let go of it */
struct muse_session *muse_gen_session(const struct muse_gen *g);

/* The session's KV state (a plug following). As muse_session_reuse / _keep / _clear / _checkpoint.
 * After any of these, evaluate before sampling again. */
struct muse_session_keep muse_gen_reuse(struct muse_gen *g, const int32_t *prompt, int32_t n_prompt);
struct muse_session_keep muse_gen_keep(struct muse_gen *g, int32_t n_keep);
void muse_gen_clear(struct muse_gen *g);
muse_status muse_gen_checkpoint(struct muse_gen *g, struct muse_error *err);

/* Evaluate prompt tokens at the end of the cache; the last one's logits are what the next
 * muse_gen_sample samples from. Errors are muse_eval's (nothing changed on a CONTEXT or
 * INVALID_ARG error raised before evaluating). */
muse_status muse_gen_eval(struct muse_gen *g, const int32_t *tokens, int32_t n, struct muse_error *err);

/*
 * Evaluate positions without token ids (image rows): eval(user, logits, err) appends them to the
 * session and writes the last position's logits [n_vocab]. Errors: eval's.
 */
typedef muse_status (*muse_gen_rows_fn)(void *user, float *logits, struct muse_error *err);
muse_status muse_gen_eval_rows(struct muse_gen *g, muse_gen_rows_fn eval, void *user, struct muse_error *err);

/* Start a request with this sampler (borrowed until the next begin; its history and RNG as the
 * caller set them up, e.g. the prompt accepted). Drops the constraint. */
void muse_gen_begin(struct muse_gen *g, struct muse_sampler *smp);

/*
 * Constrain this request's sampling by a grammar (gen/constrain.h; borrowed until the next
 * muse_gen_begin or muse_gen_constrain, NULL drops it; call after muse_gen_begin). muse_gen_sample
 * then samples through it and accepts into it; while it is set a plug does not draft.
 */
void muse_gen_constrain(struct muse_gen *g, struct muse_constraint *c);

/*
 * The next token: sampled with the request's sampler (and accepted into it: the caller does not
 * call muse_sampler_accept), from the logits of the position it follows. *row (may be NULL)
 * receives those logits [n_vocab] (for top-k probabilities), valid until the next advance.
 * Errors: MUSE_ERR_INTERNAL when there are no logits (no eval or advance since the last change).
 */
muse_status muse_gen_sample(struct muse_gen *g, int32_t *tok, const float **row, struct muse_error *err);

/*
 * Commit tok (the token the last muse_gen_sample returned) and prepare the next: nothing to do when
 * it is already in the cache (a plug's accepted draft); else a decode step for it (the plug's when
 * one is plugged in). n_more: how many more tokens the caller may take after tok (bounds a plug's
 * drafts; INT64_MAX for no bound). Errors: MUSE_ERR_CONTEXT (no room for tok), muse_eval's,
 * MUSE_ERR_INVALID_ARG (tok is not the token just sampled).
 */
muse_status muse_gen_advance(struct muse_gen *g, int32_t tok, int64_t n_more, struct muse_error *err);

/* Positions before the token the last muse_gen_sample returned (what muse_context_n_past is in
 * plain decoding: tokens a plug's step already put in the cache are not counted until sampled). */
int32_t muse_gen_n_past(const struct muse_gen *g);

// ---- the plug (speculative decoding, src/speculative/spec.c) ------------------------------------

/* Evaluate tokens at the end of the session, writing logits (every row with logits_all, else the
 * last one's): muse_session_eval's contract. */
typedef muse_status (*muse_gen_eval_fn)(void *user, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                                        struct muse_error *err);

/*
 * What a plug does at each change of the loop's state; self is its own. The loop has already made
 * the change to the session when follow and checkpoint are called; eval and eval_rows evaluate
 * (the plug runs the session's evaluation itself, with its own work around it).
 */
struct muse_gen_plug {
    void *self;
    void (*follow)(void *self, int32_t n_past);                    /* the session rolled back to n_past */
    muse_status (*checkpoint)(void *self, struct muse_error *err); /* the session saved a checkpoint */
    muse_status (*eval)(void *self, const int32_t *tokens, int32_t n, float *logits, struct muse_error *err);
    muse_status (*eval_rows)(void *self, muse_gen_rows_fn eval, void *user, float *logits, struct muse_error *err);
    void (*begin)(void *self);                                     /* a new request */
    /* The decode step for anchor (sampled, not in the cache, at the session's n_past, room checked):
     * through muse_gen_step_plain, or its own, leaving the emitted tokens in muse_gen_queue. */
    muse_status (*step)(void *self, int32_t anchor, int64_t n_more, struct muse_error *err);
};

/* Plug p in (copied; NULL: plug out) with decode steps of up to n_rows logits rows (1 plain; a
 * verify batch more). Errors: MUSE_ERR_NOMEM (nothing changed). */
muse_status muse_gen_plug(struct muse_gen *g, const struct muse_gen_plug *p, int32_t n_rows, struct muse_error *err);

/*
 * What a decode step leaves for muse_gen_sample: tok[next..n) tokens sampled (and accepted into the
 * sampler), the first n_cached of them in the cache already (positions N - n_cached .. N - 1 with N
 * the session's n_past), tok[i] sampled from logits row row[i]; cur: logits to sample from once
 * they are handed out (after a prompt eval, a constrained step, a run a stop token ended), or NULL.
 */
struct muse_gen_queue {
    float *logits;         /* [n_rows][n_vocab] of the last eval or step */
    const float *cur;
    int32_t *tok, *row;    /* [n_rows + 1] */
    int32_t n, next, n_cached;
};
struct muse_gen_queue *muse_gen_queue(struct muse_gen *g);

/* A plain decode step for anchor, evaluated by eval(user, ...): its next token sampled into the
 * queue (or, under a constraint, its logits left in cur for muse_gen_sample). */
muse_status muse_gen_step_plain(struct muse_gen *g, int32_t anchor, muse_gen_eval_fn eval, void *user,
                                struct muse_error *err);

/* Sample row r of the queue's logits with the request's sampler and accept the token into it. */
int32_t muse_gen_sample_row(struct muse_gen *g, int32_t r);

/* Whether a step may draft: a request's sampler set, no constraint. */
bool muse_gen_may_draft(const struct muse_gen *g);
