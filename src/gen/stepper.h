/*
 * stepper.h - continuous batching: threads that each drive one sequence of a shared context (a
 * server's slots) hand their evaluations to the stepper, which runs them as ONE forward per step
 * (muse_decode), so every step reads the weights once for all of them.
 *
 * A step. Every waiting request contributes rows, up to n_rows_step in all: first each request
 * that has one row left (a decode step, or the last row of a prompt), then the prompt rows of the
 * others, the prompt with the fewest rows left first. While other sequences take part (a row of
 * another in the step, or another joined), prompt rows are capped at n_prefill_rows per step, so a
 * long prompt is fed in small chunks between the other users' tokens instead of freezing them for a
 * whole batch, and a short prompt that arrives meanwhile goes first (a step that finishes a prompt
 * takes no rows of a prompt it cannot finish, so the short one's step is short). A prompt alone
 * takes up to 4x n_prefill_rows per step, so that a newcomer waits for at most such a step. A
 * request whose rows do not all fit stays in the queue with the rest (its positions go on where the
 * step left them); its caller returns when all are evaluated.
 *
 * When a step runs. A thread that drives a sequence joins the stepper for as long as it keeps
 * coming back (muse_stepper_join / leave: the server joins a slot for a request). A step starts
 * when every joined sequence has a request waiting - so a step takes one token of every generating
 * slot - or when the oldest waiting request has waited wait_us (a joined thread busy elsewhere, for
 * example with the vision tower, delays the others by at most that). No request of a sequence that
 * has not joined waits for anybody. The thread that finds the step ready runs it; the others sleep.
 *
 * Numerics. Each row gets what evaluating its sequence alone gives it (muse_decode's contract):
 * bit for bit with the exact kernels; the fast kernels may pick another kernel for a batch of a
 * different size (within their tested bound).
 *
 * Threads and state. Any thread may call muse_stepper_eval for a sequence it owns; one request per
 * sequence at a time. A sequence's KV state (muse_seq_truncate, checkpoints) may be changed by its
 * owner while steps of other sequences run: muse_decode touches only the sequences of its batch.
 * The stepper borrows the context; nothing else may evaluate it while the stepper is in use.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "muse.h"

struct muse_stepper;

struct muse_stepper_params {
    int32_t n_rows_step;    /* rows per forward at most; 0 (or above n_batch): the context's n_batch */
    int32_t n_prefill_rows; /* prompt rows per step while other sequences take part; 0 = 32 */
    int32_t wait_us;        /* how long a waiting request waits for joined sequences; 0 = 20000 */
};

struct muse_stepper_params muse_stepper_default_params(void);

/* Counters since creation. */
struct muse_stepper_stats {
    uint64_t n_steps;      /* forwards run */
    uint64_t n_rows;       /* rows in them */
    uint64_t n_multi;      /* steps that held rows of two or more sequences */
    uint64_t n_timeouts;   /* steps started because a request waited wait_us */
    uint64_t n_split;      /* times a request left a step with rows still to evaluate (chunked prompts) */
    int32_t max_seqs;      /* most sequences in one step */
};

/* A stepper over ctx (borrowed; must outlive it). Errors: MUSE_ERR_INVALID_ARG (bad params),
 * MUSE_ERR_NOMEM. */
muse_status muse_stepper_create(struct muse_context *ctx, struct muse_stepper_params params, struct muse_stepper **out,
                                struct muse_error *err);
/* Free it; no request may be waiting. NULL is fine. */
void muse_stepper_free(struct muse_stepper *st);
struct muse_context *muse_stepper_context(const struct muse_stepper *st);

/* Sequence seq takes part in steps (a step waits for its request) / no longer does (returns
 * whether it had joined). Idempotent; an id outside the context's sequences is ignored. */
void muse_stepper_join(struct muse_stepper *st, int32_t seq);
bool muse_stepper_leave(struct muse_stepper *st, int32_t seq);

/*
 * Evaluate n positions at the end of sequence seq, in one or more steps, and return when all are
 * evaluated: position i is the token ids[i], or the embedding row rows[i] when rows != NULL and
 * rows[i] != NULL. logits: NULL for none, else the rows first_row..n-1 ([n - first_row][n_vocab]).
 * features: NULL, or [n][the context's feature floats per row] (muse_context_set_features): the
 * feature rows of these positions (the DFlash drafter's input), copied out of each step.
 * Errors (nothing evaluated): MUSE_ERR_INVALID_ARG (bad sequence, token or n < 1), MUSE_ERR_CONTEXT
 * (the sequence would outgrow n_ctx, or a paged cache's pool cannot hold it: its cells are taken
 * before the request waits, so only this request fails), MUSE_ERR_NOMEM; a forward that fails fails
 * every request in it.
 */
muse_status muse_stepper_eval(struct muse_stepper *st, int32_t seq, const int32_t *ids, const float *const *rows,
                              int32_t n, float *logits, int32_t first_row, float *features, struct muse_error *err);

struct muse_stepper_stats muse_stepper_stats(struct muse_stepper *st);
