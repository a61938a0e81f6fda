/*
 * spec.h - DFlash speculative decoding (spec dflash.md sections 4-5), plugged into the generation
 * loop (src/gen/generate.h): draft a block, verify it with one target batch, accept the longest
 * matching prefix plus one token, roll back what was rejected; the cost governor and the adaptive
 * confidence floor (governor.h) decide when and how much to draft. The caller's loop is the plain
 * one (muse_gen_eval / _begin / _sample / _advance); with an engine plugged in, its decode steps
 * are this file's.
 *
 * Over the loop's session (src/gen/session.h): the loop tells the engine every change of the
 * target's KV state (prefix reuse, rollback, checkpoints: muse_gen_*), so the drafter's ring
 * follows it; the engine owns the drafter's state for that sequence (a muse_draft_ctx, its ring
 * and copies of it paired with the session's checkpoints).
 *
 * A speculative step (inside muse_gen_advance, for the anchor = the last sampled token, at position P):
 * flush the ring, draft a block for the anchor, keep k drafts by the confidence gate (llama.cpp's
 * p_min per row when asked for, else the bandit's cumulative floor), evaluate [anchor, d1..dk] as
 * one target batch, then sample the target's rows in order with the request's sampler - row i is
 * sampled with exactly the history and RNG state plain decoding would have there - and accept while
 * the sample equals the next draft: the samples are the emitted tokens (m accepted drafts, then the
 * correction or the bonus token). Greedy or not, the emitted stream is the one plain decoding
 * produces, because the target's batched logits are bit-identical to single-token ones (forward.md:
 * one order for every batch size) and the sampler consumes the same RNG draws for the same tokens.
 * A stop token (muse_model_token_is_stop) among the accepted drafts ends the run there. The target
 * then keeps P + m + 1 positions (session truncate: at most n_batch positions, always legal); the
 * drafter's ring never sees rejected rows: captured features wait in a pending buffer and are
 * injected, the accepted ones only, before the next draft (spec 4.3's pendingH, generalised: while
 * the governor parks drafting, plain steps capture their features and the ring catches up in one
 * batched injection when drafting resumes).
 *
 * Positions (asserted in the tests): the ring holds committed positions below the anchor only;
 * ring n_past + pending rows == the session's n_past after every call.
 *
 * Rollbacks of the session (reuse, keep, clear) move the ring to the kept length: in place when
 * its ring still holds what a draft there needs (its ring is sized window + block + n_batch + 1,
 * so it rolls back as far as the target's rings do), else from a ring copy saved with the
 * session's checkpoint at or above the kept length, else it restarts there with nothing below
 * (drafts see only what comes after until the window refills: lower acceptance, never a wrong
 * output). Prompt chunks go through the target and the ring together, in chunks of
 * min(n_batch, ring - block - 1) (spec 4.2: what both rings absorb).
 *
 * Image rows (muse_eval_embd) cannot be drafted over (spec 4.2: their features poison the drafter):
 * a turn with media calls muse_spec_set_drafting(sp, false), and true again for a text-only turn.
 *
 * Threads: one engine per sequence, used from one thread (the context's).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gen/generate.h"
#include "muse.h"
#include "speculative/governor.h"

/* TEST HOOK: may replace the k gated drafts (drafts[0..k)) with others, up to cap; returns the new
 * k (0..cap). Called in every speculative step after the gate. */
typedef int32_t (*muse_spec_draft_hook)(void *user, int32_t anchor_pos, int32_t anchor, int32_t *drafts, int32_t k,
                                        int32_t cap);

struct muse_spec_params {
    int32_t n_max;             /* drafts per step at most (llama.cpp's --spec-draft-n-max); the block runs
                                  n_max + 1 rows, as llama.cpp; < 0 (default): llama.cpp's default 3 (at
                                  most block_size - 1): on a CPU a verify row costs about half a decode
                                  step (docs/perf.md), so short blocks pay best; 0: never draft */
    float p_min;               /* >= 0: llama.cpp's gate, fixed (a draft row is kept while its top-10
                                  probability is >= p_min); < 0 (default): the adaptive floor (governor.h) */
    bool governor;             /* the cost governor (default on) */
    bool shadow_probe;         /* its probe rounds begin with shadow drafts (governor.h; default on) */
    bool carry;                /* a request starts from the last one's verdict (governor.h; default on) */
    bool shadow_budget;        /* a lost shadow round parks long enough to stay within its budget
                                  (governor.h; default on) */
    bool lazy_head;            /* when the last step's gate kept no draft, first draft a 2-row block (its
                                  first draft, llama.cpp's n_max 1) and run the full block only if that draft
                                  passes the gate (a rarely confident drafter then costs a 2-row block and
                                  one LM-head row per step); default on. Changes drafts, never the output */
    enum muse_kv_type ring_type; /* the drafter's ring (default F16, llama.cpp's drafter KV) */
    int32_t n_ring_copies;     /* copies of the ring saved with the session's checkpoints (default 1, the
                                  session's default); each muse_draft ring-size bytes */
    struct muse_spec_clock clock; /* the governor's and the bandit's clock (default: the process's CPU
                                  time, so time a neighbour takes the core is not charged to the step;
                                  now_ns NULL: the monotonic wall clock) */
    muse_spec_draft_hook hook; /* TEST ONLY (NULL) */
    void *hook_user;
};

struct muse_spec_params muse_spec_default_params(void);

/* Counters since muse_spec_create (muse_spec_stats_reset clears them). */
struct muse_spec_stats {
    uint64_t n_steps_spec;       /* verify steps (a block drafted and k >= 1 drafts verified) */
    uint64_t n_steps_gated;      /* steps that drafted a block but kept no draft (then a plain step) */
    uint64_t n_steps_plain;      /* plain steps (no drafter, parked, no room, drafting off) */
    uint64_t n_steps_parked;     /* of those, the ones the cost governor parked */
    uint64_t n_steps_shadow;     /* of those, the governor's shadow steps (a first draft checked, governor.h) */
    uint64_t n_drafted;          /* drafts verified */
    uint64_t n_accepted;         /* of those, accepted */
    uint64_t n_emitted_spec;     /* tokens emitted by verify steps (accepted + correction/bonus) */
    uint64_t n_ring_restored;    /* rollbacks the ring served from a copy */
    uint64_t n_ring_restarts;    /* rollbacks it could not serve: restarted at the kept position */
    uint64_t n_floor_steps[MUSE_FLOOR_ARMS]; /* verify steps per adaptive floor (muse_spec_floors order) */
};

struct muse_spec;

/*
 * An engine with drafter d (borrowed, made for the context's model) plugged into loop g (borrowed:
 * must outlive it; from now on the loop's prompt evaluation, rollbacks, checkpoints and decode
 * steps go through the engine; the ring follows the session from its current length). Allocates
 * everything here: the drafter's context and ring copies, the verify logits (the loop's, n_max + 1
 * rows of n_vocab), the pending features. Errors: MUSE_ERR_INVALID_ARG (d NULL: plain decoding
 * needs no engine), those of muse_draft_ctx_create (another model's drafter...), MUSE_ERR_NOMEM.
 * *out owned by the caller (muse_spec_free, before muse_gen_free: it unplugs the engine, the loop
 * decodes plainly again).
 *
 * Image rows (muse_gen_eval_rows) restart the ring at the session's new end (it drafts from what
 * follows alone: correct, with less context). The cost governor starts a new sequence at each
 * muse_gen_begin (spec 5.4's NewSequence; with params.carry off the model card's per-request
 * reset, spec 5.3). While the request has a grammar (muse_gen_constrain) no step drafts (a verify
 * step samples the target's rows without the grammar).
 */
muse_status muse_spec_create(struct muse_gen *g, const struct muse_drafter *d, struct muse_spec_params params,
                             struct muse_spec **out, struct muse_error *err);
void muse_spec_free(struct muse_spec *sp);

/* Drafting on or off (on by default; a turn with image rows turns it off). The ring stays in step. */
void muse_spec_set_drafting(struct muse_spec *sp, bool on);

struct muse_spec_stats muse_spec_stats(const struct muse_spec *sp);
void muse_spec_stats_reset(struct muse_spec *sp);
/* The governor and the bandit (read-only views, for reports and tests). */
const struct muse_spec_governor *muse_spec_governor(const struct muse_spec *sp);
const struct muse_spec_floor_bandit *muse_spec_bandit(const struct muse_spec *sp);
/* The drafter's context (tests: the position invariants). */
const struct muse_draft_ctx *muse_spec_draft_ctx(const struct muse_spec *sp);
/* Feature rows captured but not yet injected into the ring. */
int32_t muse_spec_n_pending(const struct muse_spec *sp);
