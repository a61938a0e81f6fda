/*
 * spec.c - DFlash speculative decoding plugged into the generation loop (the contract: spec.h).
 *
 * State between calls: the session holds the target's KV state; `ring n_past + n_pending ==
 * session n_past` (the pending rows are the captured features of positions ring n_past .. session
 * n_past - 1); the loop's queue (gen/generate.h) holds what a step emitted.
 */
#include "speculative/spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "model/model.h"
#include "speculative/drafter.h"

struct ring_copy {
    struct muse_draft_snapshot snap; /* n_past = its position; -1 empty or stale */
    uint64_t saved;                  /* save clock of the last save (0 = never) */
};

struct muse_spec {
    struct muse_spec_params p;
    struct muse_gen *g;              /* borrowed: the loop this engine is plugged into */
    struct muse_gen_queue *q;        /* its queue */
    struct muse_session *s;          /* its session */
    struct muse_context *ctx;        /* the session's */
    const struct muse_model *model;
    int32_t n_vocab, n_ctx, n_batch;

    /* drafting */
    const struct muse_drafter *d;
    struct muse_draft_ctx *dc;
    int32_t n_rows;                  /* block rows per draft (llama.cpp: n_max + 1) */
    int32_t n_max;                   /* drafts per step at most */
    float *pend;                     /* [pend_cap][n_features] captured, not yet injected */
    int32_t n_pending, pend_cap;
    struct ring_copy *copies;
    int32_t n_copies;
    uint64_t n_saves;
    bool drafting;
    bool last_gated_out;             /* the last draft's first row did not pass the gate */
    int32_t *batch;                  /* [block_size + 1] a verify batch: the anchor, then the drafts */
    int32_t *drafts;                 /* batch + 1 */

    struct muse_spec_governor gov;
    struct muse_spec_floor_bandit bandit;
    struct muse_spec_stats stats;
};

/* The default clock of the governor and the bandit: the process's CPU time (all threads). A step
 * preempted by another process is not charged for the wait, so a neighbour on a shared machine does
 * not decide the verdict; spin-waits inside a step still count, as on an idle machine. */
static int64_t process_cpu_ns(void *user) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct muse_spec_params muse_spec_default_params(void) {
    struct muse_spec_params p = {0};
    p.n_max = -1;
    p.p_min = -1.0f;
    p.governor = true;
    p.shadow_probe = true;
    p.carry = true;
    p.shadow_budget = true;
    p.lazy_head = true;
    p.ring_type = MUSE_KV_TYPE_F16;
    p.n_ring_copies = 1;
    p.clock.now_ns = process_cpu_ns;
    return p;
}

void muse_spec_free(struct muse_spec *sp) {
    if (!sp) return;
    if (sp->q) muse_gen_plug(sp->g, NULL, 0, NULL);
    for (int32_t i = 0; sp->copies && i < sp->n_copies; i++) muse_draft_snapshot_free(&sp->copies[i].snap);
    free(sp->copies);
    muse_draft_ctx_free(sp->dc);
    free(sp->pend);
    free(sp->batch);
    free(sp);
}

#define MUSE_SPEC_DEFAULT_N_MAX 3 /* llama.cpp's default --spec-draft-n-max */

static int32_t pad32(int64_t n) { return (int32_t)((n + 31) & ~(int64_t)31); }

/* The drafter's context: a ring that rolls back as far as the target's rings (spec.h). */
static muse_status create_drafting(struct muse_spec *sp, struct muse_error *err) {
    const struct muse_dflash_hparams *hp = &sp->d->hp;
    const int32_t B = (int32_t)hp->block_size;
    sp->n_max = sp->p.n_max < 0 ? MUSE_SPEC_DEFAULT_N_MAX : sp->p.n_max;
    if (sp->n_max > B - 1) sp->n_max = B - 1;
    if (sp->n_max > sp->n_batch - 1) sp->n_max = sp->n_batch - 1; /* a verify batch is one chunk: always rollable */
    sp->n_rows = muse_draft_rows(sp->d, sp->n_max > 0 ? sp->n_max : 1);
    const int64_t window = hp->n_swa < (int64_t)sp->n_ctx + B ? (int64_t)hp->n_swa : (int64_t)sp->n_ctx + B;
    struct muse_draft_ctx_params dp = muse_draft_ctx_default_params();
    dp.kv_type = sp->p.ring_type;
    dp.n_ring = (uint32_t)pad32(window + B + sp->n_batch + 1);
    dp.n_batch = (uint32_t)sp->n_batch; /* <= ring - block - 1: each prompt chunk fits both rings (spec 4.2) */
    dp.seq = muse_session_seq(sp->s);   /* a session on a sequence of a shared context (muse.h, continuous batching) */
    muse_status st = muse_draft_ctx_create(sp->d, sp->ctx, dp, &sp->dc, err);
    if (st) return st;
    const int64_t F = muse_drafter_n_features(sp->d);
    sp->pend_cap = sp->n_batch;
    sp->pend = malloc(sizeof(float) * (size_t)F * (size_t)sp->pend_cap);
    sp->batch = malloc(sizeof(int32_t) * (size_t)(B + 1));
    sp->drafts = sp->batch + 1;
    sp->n_copies = sp->p.n_ring_copies > 0 ? sp->p.n_ring_copies : 0;
    sp->copies = calloc((size_t)sp->n_copies + 1, sizeof *sp->copies);
    if (!sp->pend || !sp->batch || !sp->copies) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for speculative decoding");
    for (int32_t i = 0; i < sp->n_copies; i++)
        if ((st = muse_draft_snapshot_init(sp->dc, &sp->copies[i].snap, err))) return st;
    sp->drafting = true;
    return MUSE_OK;
}

static muse_status plug_in(struct muse_spec *sp, struct muse_error *err);

muse_status muse_spec_create(struct muse_gen *g, const struct muse_drafter *d, struct muse_spec_params params,
                             struct muse_spec **out, struct muse_error *err) {
    *out = NULL;
    if (!d) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "speculative decoding needs a drafter");
    struct muse_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_status st = MUSE_OK;
    sp->p = params;
    sp->g = g;
    sp->s = muse_gen_session(g);
    sp->ctx = muse_session_context(sp->s);
    sp->model = sp->ctx->model;
    sp->n_vocab = muse_model_n_vocab(sp->model);
    sp->n_ctx = (int32_t)muse_context_n_ctx(sp->ctx);
    sp->n_batch = (int32_t)muse_context_n_batch(sp->ctx);
    sp->d = d;
    if ((st = create_drafting(sp, err)) || (st = plug_in(sp, err))) goto fail;
    muse_spec_governor_init(&sp->gov, params.governor, &params.clock);
    sp->gov.shadow_probe = params.shadow_probe;
    sp->gov.carry = params.carry;
    sp->gov.shadow_budget = params.shadow_budget;
    muse_spec_floor_bandit_init(&sp->bandit, &params.clock);
    /* the ring follows the session from where it is now */
    muse_draft_restart(sp->dc, muse_session_n_past(sp->s));
    *out = sp;
    return MUSE_OK;
fail:
    muse_spec_free(sp);
    return st;
}

// ---- the ring following the session ----------------------------------------------------------------

/* Inject the pending rows (the ring catches up with the target). */
static muse_status flush(struct muse_spec *sp, struct muse_error *err) {
    if (sp->n_pending == 0) return MUSE_OK;
    muse_status st = muse_draft_inject(sp->dc, sp->pend, sp->n_pending, err);
    sp->n_pending = 0;
    return st;
}

/* The session now holds n positions (a rollback): bring the ring there (spec.h). */
static void ring_follow(void *self, int32_t n) {
    struct muse_spec *sp = self;
    const int32_t rp = muse_draft_n_past(sp->dc);
    if (n >= rp) { /* within the pending rows: drop the tail */
        sp->n_pending = n - rp;
    } else {
        sp->n_pending = 0;
        if (muse_draft_truncate(sp->dc, n, NULL) != MUSE_OK) {
            /* a copy at or above n from which the ring can roll back to n: the lowest such */
            int32_t best = -1;
            for (int32_t i = 0; i < sp->n_copies; i++) {
                int32_t p = sp->copies[i].snap.n_past;
                if (p >= n && (best < 0 || p < sp->copies[best].snap.n_past)) best = i;
            }
            bool done = false;
            if (best >= 0) {
                muse_draft_snapshot_restore(sp->dc, &sp->copies[best].snap);
                done = muse_draft_truncate(sp->dc, n, NULL) == MUSE_OK;
            }
            if (done) {
                sp->stats.n_ring_restored++;
            } else {
                muse_draft_restart(sp->dc, n);
                if (n > 0) sp->stats.n_ring_restarts++;
            }
        }
    }
    /* copies above n go stale with the session's checkpoints (their rows may be rewritten now) */
    for (int32_t i = 0; i < sp->n_copies; i++)
        if (sp->copies[i].snap.n_past > n) sp->copies[i].snap.n_past = -1;
}

/* The session saved a checkpoint: a ring copy at the same place. */
static muse_status ring_checkpoint(void *self, struct muse_error *err) {
    struct muse_spec *sp = self;
    if (sp->n_copies == 0) return MUSE_OK;
    muse_status st = flush(sp, err);
    if (st) return st;
    const int32_t n = muse_draft_n_past(sp->dc);
    int32_t pick = -1;
    for (int32_t i = 0; i < sp->n_copies; i++) {
        const struct ring_copy *c = &sp->copies[i];
        if (c->snap.n_past == n) return MUSE_OK; /* already there */
        if (pick >= 0 && sp->copies[pick].snap.n_past < 0) continue;
        if (pick < 0 || c->snap.n_past < 0 || c->saved < sp->copies[pick].saved) pick = i;
    }
    muse_draft_snapshot_save(&sp->copies[pick].snap, sp->dc);
    sp->copies[pick].saved = ++sp->n_saves;
    return MUSE_OK;
}

// ---- evaluation ------------------------------------------------------------------------------------

static muse_status session_eval(void *user, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                                float *features, struct muse_error *err) {
    return muse_session_eval_features(user, tokens, n, logits, logits_all, features, err);
}

/* Evaluate tokens through the session, capturing their features into the pending rows (the ring
 * lags; a full pending buffer is injected first); n <= pend_cap. */
static muse_status eval_capture(void *self, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                                struct muse_error *err) {
    struct muse_spec *sp = self;
    muse_status st = sp->n_pending + n > sp->pend_cap ? flush(sp, err) : MUSE_OK;
    if (st) return st;
    const int64_t F = muse_drafter_n_features(sp->d);
    st = muse_draft_eval_via(sp->dc, tokens, n, logits, logits_all, sp->pend + (size_t)sp->n_pending * F, false,
                             session_eval, sp->s, err);
    if (st == MUSE_OK) sp->n_pending += n;
    return st;
}

/* Prompt tokens: target and ring together, chunk by chunk (prompt catch-up, spec 4.2). */
static muse_status spec_eval(void *self, const int32_t *tokens, int32_t n, float *logits, struct muse_error *err) {
    struct muse_spec *sp = self;
    muse_status st = flush(sp, err);
    if (st) return st;
    st = muse_draft_eval_via(sp->dc, tokens, n, logits, 0, NULL, true, session_eval, sp->s, err);
    if (st && muse_draft_n_past(sp->dc) != muse_session_n_past(sp->s)) ring_follow(sp, muse_session_n_past(sp->s));
    return st;
}

/* Rows the ring cannot follow: it restarts at the session's new end. */
static muse_status spec_eval_rows(void *self, muse_gen_rows_fn eval, void *user, float *logits,
                                  struct muse_error *err) {
    struct muse_spec *sp = self;
    muse_status st = flush(sp, err);
    if (st == MUSE_OK) st = eval(user, logits, err);
    const int32_t n = muse_session_n_past(sp->s);
    if (muse_draft_n_past(sp->dc) != n) {
        sp->n_pending = 0;
        if (n < muse_draft_n_past(sp->dc)) {
            ring_follow(sp, n); /* a failed eval that rolled back */
        } else {
            muse_draft_restart(sp->dc, n);
            sp->stats.n_ring_restarts++;
        }
    }
    return st;
}

// ---- decode steps ----------------------------------------------------------------------------------

static void spec_begin(void *self) {
    struct muse_spec *sp = self;
    muse_spec_governor_new_sequence(&sp->gov); /* the card's reset, or its later NewSequence (governor.h) */
}

/* A plain step for the anchor: evaluate it (capturing its features), sample the next token. */
static muse_status plain_step(struct muse_spec *sp, int32_t anchor, struct muse_error *err) {
    return muse_gen_step_plain(sp->g, anchor, eval_capture, sp, err);
}

/* Drafts kept by the gate among the first `have` rows of block b. */
static int32_t gate(const struct muse_spec *sp, const struct muse_draft_block *b, float floor, int32_t have) {
    struct muse_draft_block v = *b;
    v.n_drafts = have;
    return sp->p.p_min >= 0 ? muse_draft_gate_p_min(&v, sp->p.p_min) : muse_draft_gate_cumulative(&v, floor);
}

/*
 * A speculative step for the anchor at P = n_past (spec 4.3): draft, gate, verify, accept, roll
 * back. When the gate keeps no draft it ends as a plain step (still the governor's "speculated"
 * sample: the draft's cost is speculation's).
 */
static muse_status spec_step(struct muse_spec *sp, int32_t anchor, int32_t kmax, int32_t arm, struct muse_error *err) {
    struct muse_gen_queue *q = sp->q;
    q->cur = NULL;
    muse_status st = flush(sp, err);
    if (st) return st;
    const int32_t P = muse_session_n_past(sp->s);
    const float floor = muse_spec_floors[arm];
    const int32_t want = kmax < sp->n_rows - 1 ? kmax : sp->n_rows - 1;
    struct muse_draft_block b;
    int32_t have = want, k;
    if (sp->p.lazy_head && sp->last_gated_out && sp->n_rows > 2) {
        /* the last step kept nothing: ask a 2-row block (llama.cpp's n_max 1) whether its first draft
         * passes the gate before paying for the full one (a rarely confident drafter then costs a
         * 2-row block and one head row per step) */
        if ((st = muse_draft_block_lazy(sp->dc, anchor, 2, 1, &b, err))) return st;
        if (gate(sp, &b, floor, 1) == 0) {
            sp->stats.n_steps_gated++;
            return plain_step(sp, anchor, err);
        }
    }
    if ((st = muse_draft_block_lazy(sp->dc, anchor, sp->n_rows, have, &b, err))) return st;
    k = gate(sp, &b, floor, have);
    sp->last_gated_out = k == 0;
    memcpy(sp->drafts, b.tokens, sizeof(int32_t) * (size_t)k);
    if (sp->p.hook) {
        memcpy(sp->drafts, b.tokens, sizeof(int32_t) * (size_t)have);
        k = sp->p.hook(sp->p.hook_user, P, anchor, sp->drafts, k, want);
        if (k < 0) k = 0;
        if (k > want) k = want;
    }
    if (k == 0) {
        sp->stats.n_steps_gated++;
        return plain_step(sp, anchor, err);
    }
    /* verify: [anchor, d1..dk] at P..P+k in one batch, every row's logits, features pending */
    sp->batch[0] = anchor;
    if ((st = eval_capture(sp, sp->batch, k + 1, q->logits, 1, err))) return st;
    /* accept: row i's sample is emitted; it continues the run while it equals draft i+1 */
    int32_t n_emit = 0, keep = P + 1, m = 0;
    bool stopped = false;
    for (int32_t i = 0; i <= k; i++) {
        const int32_t t = muse_gen_sample_row(sp->g, i);
        q->tok[n_emit] = t;
        q->row[n_emit] = i;
        n_emit++;
        if (i == k || t != sp->drafts[i]) break; /* the bonus or the correction: the next anchor */
        m++;
        keep++;
        if (muse_model_token_is_stop(sp->model, t)) { /* the run ends at a stop token (in the cache) */
            stopped = true;
            q->cur = q->logits + (size_t)(i + 1) * sp->n_vocab;
            break;
        }
    }
    /* roll back the rejected rows: the target by a truncate, the ring by dropping pending rows */
    if ((st = muse_session_truncate(sp->s, keep, err))) return st;
    sp->n_pending -= (P + k + 1) - keep;
    q->n = n_emit;
    q->next = 0;
    q->n_cached = stopped ? n_emit : n_emit - 1;
    sp->stats.n_steps_spec++;
    sp->stats.n_drafted += (uint64_t)k;
    sp->stats.n_accepted += (uint64_t)m;
    sp->stats.n_emitted_spec += (uint64_t)n_emit;
    if (sp->p.p_min < 0) sp->stats.n_floor_steps[arm]++; /* the adaptive floor's arms only */
    return MUSE_OK;
}

/*
 * A shadow step (governor.h): a first draft for the anchor (the lazy head's 2-row block, or the
 * full block without it; the LM head for row 1 only), then a plain step; *hit when the draft is the
 * token the target emitted (what a verify row would have accepted).
 */
static muse_status shadow_step(struct muse_spec *sp, int32_t anchor, bool *hit, struct muse_error *err) {
    *hit = false;
    sp->q->cur = NULL;
    muse_status st = flush(sp, err);
    struct muse_draft_block b;
    const int32_t rows = sp->p.lazy_head && sp->n_rows > 2 ? 2 : sp->n_rows; /* the lazy head's 2-row probe */
    if (st || (st = muse_draft_block_lazy(sp->dc, anchor, rows, 1, &b, err))) return st;
    if ((st = plain_step(sp, anchor, err))) return st;
    *hit = sp->q->n == 1 && sp->q->tok[0] == b.tokens[0];
    sp->stats.n_steps_shadow++;
    return MUSE_OK;
}

/* The loop's decode step for tok, the anchor at P (generate.h): speculative, shadow or plain as the
 * drafter, the governor and the room allow. */
static muse_status spec_advance(void *self, int32_t tok, int64_t n_more, struct muse_error *err) {
    struct muse_spec *sp = self;
    const int32_t P = muse_session_n_past(sp->s);
    int64_t kmax = sp->n_max;
    if (kmax > n_more - 1) kmax = n_more - 1;
    if (kmax > sp->n_ctx - P - 1) kmax = sp->n_ctx - P - 1;
    const bool could = sp->drafting && muse_gen_may_draft(sp->g) && kmax >= 1;
    const bool spec = could && muse_spec_governor_allows(&sp->gov);
    const bool shadow = could && !spec && muse_spec_governor_wants_shadow(&sp->gov);
    if (could && !spec && !shadow) sp->stats.n_steps_parked++;
    const int32_t arm = muse_spec_floor_bandit_arm(&sp->bandit);
    const int64_t t0 = muse_spec_clock_now(&sp->p.clock);
    bool hit = false;
    muse_status st = spec     ? spec_step(sp, tok, (int32_t)kmax, arm, err)
                     : shadow ? shadow_step(sp, tok, &hit, err)
                              : plain_step(sp, tok, err);
    if (st) return st;
    if (!spec) sp->stats.n_steps_plain++;
    const int64_t ns = muse_spec_clock_now(&sp->p.clock) - t0;
    const int32_t emitted = sp->q->n;
    if (shadow) {
        muse_spec_governor_record_shadow(&sp->gov, hit, ns); /* not a sample of either side */
        return MUSE_OK;
    }
    muse_spec_governor_record(&sp->gov, spec, emitted, ns);
    /* the floor's reward: every step it chose, gated ones too (its cost is the draft) */
    if (spec && sp->p.p_min < 0) muse_spec_floor_bandit_record(&sp->bandit, emitted, ns);
    return MUSE_OK;
}

static muse_status plug_in(struct muse_spec *sp, struct muse_error *err) {
    const struct muse_gen_plug plug = {
        .self = sp, .follow = ring_follow, .checkpoint = ring_checkpoint, .eval = spec_eval,
        .eval_rows = spec_eval_rows, .begin = spec_begin, .step = spec_advance,
    };
    muse_status st = muse_gen_plug(sp->g, &plug, sp->n_rows, err);
    if (st == MUSE_OK) sp->q = muse_gen_queue(sp->g);
    return st;
}

void muse_spec_set_drafting(struct muse_spec *sp, bool on) { sp->drafting = on; }
struct muse_spec_stats muse_spec_stats(const struct muse_spec *sp) { return sp->stats; }
void muse_spec_stats_reset(struct muse_spec *sp) { memset(&sp->stats, 0, sizeof sp->stats); }
const struct muse_spec_governor *muse_spec_governor(const struct muse_spec *sp) { return &sp->gov; }
const struct muse_spec_floor_bandit *muse_spec_bandit(const struct muse_spec *sp) { return &sp->bandit; }
const struct muse_draft_ctx *muse_spec_draft_ctx(const struct muse_spec *sp) { return sp->dc; }
int32_t muse_spec_n_pending(const struct muse_spec *sp) { return sp->n_pending; }
