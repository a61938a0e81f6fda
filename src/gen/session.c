/*
 * session.c - one conversation's KV state: token mirror, prefix reuse, rollback, checkpoints
 * (the contract: session.h).
 *
 * Invariants between calls: s->n == muse_seq_n_past(s->ctx, s->seq) and toks[0..n) are the ids at
 * positions 0..n-1 (every change of n_past goes through this file); a checkpoint whose position
 * is >= 0 is restorable (kv_cache.c marks checkpoints stale whenever n_past drops below them), so
 * the choice below never restores one that would be refused.
 */
#include "gen/session.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

struct muse_session {
    struct muse_context *ctx;        /* borrowed */
    int32_t seq;                     /* the sequence of ctx it drives */
    struct muse_stepper *stepper;    /* borrowed; NULL: evaluates ctx itself (seq 0) */
    int32_t *toks;                   /* [n_ctx] the ids of positions 0..n-1 */
    int32_t n;                       /* == muse_seq_n_past(ctx, seq) between calls */
    struct muse_kv_checkpoint **ck;  /* [n_ck], owned; each muse_kv_checkpoint_size() bytes */
    uint64_t *ck_saved;              /* [n_ck] value of n_saves at each checkpoint's last save (0 = never) */
    int32_t n_ck;
    uint64_t n_saves;                /* saves so far: the clock that picks the least recently saved */
    struct muse_session_stats stats;
};

struct muse_session_params muse_session_default_params(void) {
    struct muse_session_params p = {.n_checkpoints = 1, .seq = 0, .stepper = NULL};
    return p;
}

void muse_session_free(struct muse_session *s) {
    if (!s) return;
    for (int32_t i = 0; s->ck && i < s->n_ck; i++) muse_kv_checkpoint_free(s->ck[i]);
    free(s->ck);
    free(s->ck_saved);
    free(s->toks);
    free(s);
}

muse_status muse_session_create(struct muse_context *ctx, struct muse_session_params params, struct muse_session **out,
                                struct muse_error *err) {
    muse_status st = MUSE_ERR_NOMEM;
    *out = NULL;
    if (params.n_checkpoints < 0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a session needs n_checkpoints >= 0 (got %d)", params.n_checkpoints);
    if (params.seq < 0 || params.seq >= (int32_t)muse_context_n_seq_max(ctx) || (params.seq != 0 && !params.stepper) ||
        (params.stepper && muse_stepper_context(params.stepper) != ctx))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "a session on sequence %d of a context of %u needs a stepper over that context", params.seq,
                              muse_context_n_seq_max(ctx));
    struct muse_session *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->ctx = ctx;
    s->seq = params.seq;
    s->stepper = params.stepper;
    s->toks = malloc(sizeof *s->toks * (muse_context_n_ctx(ctx) + 1));
    s->ck = calloc((size_t)params.n_checkpoints + 1, sizeof *s->ck);
    s->ck_saved = calloc((size_t)params.n_checkpoints + 1, sizeof *s->ck_saved);
    if (!s->toks || !s->ck || !s->ck_saved) goto nomem;
    for (; s->n_ck < params.n_checkpoints; s->n_ck++)
        if ((st = muse_seq_checkpoint_create(ctx, s->seq, &s->ck[s->n_ck], err)) != MUSE_OK) goto fail;
    muse_seq_clear(ctx, s->seq, NULL);
    *out = s;
    return MUSE_OK;
nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a session");
fail:
    muse_session_free(s);
    return st;
}

struct muse_context *muse_session_context(const struct muse_session *s) { return s->ctx; }
int32_t muse_session_seq(const struct muse_session *s) { return s->seq; }
struct muse_stepper *muse_session_stepper(const struct muse_session *s) { return s->stepper; }
int32_t muse_session_n_past(const struct muse_session *s) { return s->n; }
const int32_t *muse_session_tokens(const struct muse_session *s) { return s->toks; }
struct muse_session_stats muse_session_stats(const struct muse_session *s) { return s->stats; }

int32_t muse_session_common_prefix(const int32_t *a, int32_t n_a, const int32_t *b, int32_t n_b) {
    int32_t n = n_a < n_b ? n_a : n_b, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

int32_t muse_session_reuse_len(const int32_t *cached, int32_t n_cached, const int32_t *prompt, int32_t n_prompt) {
    if (n_prompt < 1) return 0;
    int32_t keep = muse_session_common_prefix(cached, n_cached, prompt, n_prompt);
    return keep < n_prompt ? keep : n_prompt - 1; /* re-evaluate the last token for its logits */
}

/*
 * The checkpoint a sliding-window miss at n_keep should restore, or -1 for none. Best is one at
 * or above n_keep from which the rings can then roll back to n_keep (all of n_keep kept): the
 * lowest such position, since a smaller rewind is the likelier to be legal and any higher one that
 * is legal keeps the same. Otherwise the highest one below n_keep (keeps its position).
 * exact: only the first kind.
 */
static int32_t pick_checkpoint(const struct muse_session *s, int32_t n_keep, bool exact) {
    int32_t above = -1, below = -1;
    for (int32_t i = 0; i < s->n_ck; i++) {
        int32_t p = muse_kv_checkpoint_pos(s->ck[i]);
        if (p < 0) continue;
        if (p >= n_keep) {
            if (muse_kv_can_truncate(s->ctx, p, n_keep) && (above < 0 || p < muse_kv_checkpoint_pos(s->ck[above])))
                above = i;
        } else if (below < 0 || p > muse_kv_checkpoint_pos(s->ck[below])) {
            below = i;
        }
    }
    return above >= 0 || exact ? above : below;
}

/* Restore checkpoint i, then truncate down to n_keep when it sits above; the position kept. */
static int32_t restore(struct muse_session *s, int32_t i, int32_t n_keep) {
    int32_t p = muse_kv_checkpoint_pos(s->ck[i]);
    /* both steps were checked by pick_checkpoint (valid checkpoint, legal truncate): cannot fail */
    if (muse_kv_checkpoint_restore(s->ck[i], NULL) != MUSE_OK) return -1;
    if (p > n_keep && muse_seq_truncate(s->ctx, s->seq, n_keep, NULL) != MUSE_OK) return -1;
    return p > n_keep ? n_keep : p;
}

/* In place when the rings allow; else the best checkpoint (pick_checkpoint); else clear. Never fails. */
struct muse_session_keep muse_session_keep(struct muse_session *s, int32_t n_keep) {
    if (n_keep < 0) n_keep = 0;
    if (n_keep > s->n) n_keep = s->n;
    struct muse_session_keep r = {.kind = MUSE_SESSION_KEEP_NONE, .n_asked = n_keep, .n_kept = n_keep, .ckpt_pos = -1};
    if (n_keep == s->n) return r;
    if (muse_seq_truncate(s->ctx, s->seq, n_keep, NULL) == MUSE_OK) {
        r.kind = MUSE_SESSION_KEEP_TRUNCATED;
        s->stats.n_truncated++;
    } else {
        int32_t i = pick_checkpoint(s, n_keep, false);
        int32_t p = i >= 0 ? muse_kv_checkpoint_pos(s->ck[i]) : -1;
        int32_t kept = i >= 0 ? restore(s, i, n_keep) : -1;
        if (kept >= 0) {
            r.kind = MUSE_SESSION_KEEP_RESTORED;
            r.n_kept = kept;
            r.ckpt_pos = p;
            s->stats.n_restored++;
        } else {
            muse_seq_clear(s->ctx, s->seq, NULL);
            r.kind = MUSE_SESSION_KEEP_CLEARED;
            r.n_kept = 0;
            s->stats.n_cleared++;
        }
    }
    s->n = r.n_kept;
    return r;
}

struct muse_session_keep muse_session_reuse(struct muse_session *s, const int32_t *prompt, int32_t n_prompt) {
    struct muse_session_keep r = muse_session_keep(s, muse_session_reuse_len(s->toks, s->n, prompt, n_prompt));
    s->stats.n_tokens_reused += (uint64_t)r.n_kept;
    return r;
}

muse_status muse_session_truncate(struct muse_session *s, int32_t n_keep, struct muse_error *err) {
    if (n_keep < 0 || n_keep > s->n)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "cannot keep %d positions: the session holds %d", n_keep, s->n);
    if (n_keep == s->n) return MUSE_OK;
    if (muse_seq_truncate(s->ctx, s->seq, n_keep, NULL) == MUSE_OK) {
        s->stats.n_truncated++;
    } else {
        int32_t i = pick_checkpoint(s, n_keep, true);
        if (i < 0 || restore(s, i, n_keep) != n_keep)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                  "cannot roll back from %d to %d positions: the sliding-window rings no longer hold "
                                  "them and no checkpoint at or above %d can serve it",
                                  s->n, n_keep, n_keep);
        s->stats.n_restored++;
    }
    s->n = n_keep;
    return MUSE_OK;
}

muse_status muse_session_eval(struct muse_session *s, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                              struct muse_error *err) {
    return muse_session_eval_features(s, tokens, n, logits, logits_all, NULL, err);
}

muse_status muse_session_eval_features(struct muse_session *s, const int32_t *tokens, int32_t n, float *logits,
                                       int logits_all, float *features, struct muse_error *err) {
    if (features && !s->stepper && n > (int32_t)muse_context_n_batch(s->ctx))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "feature rows of %d positions: more than one forward (%u)", n,
                              muse_context_n_batch(s->ctx));
    muse_status st = s->stepper ? muse_stepper_eval(s->stepper, s->seq, tokens, NULL, n, logits, logits_all ? 0 : n - 1,
                                                    features, err)
                                : muse_eval(s->ctx, tokens, n, logits, logits_all, err);
    if (st != MUSE_OK) return st;
    if (features && !s->stepper && !muse_context_copy_features(s->ctx, 0, n, features))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the context wrote no feature rows for these %d positions", n);
    memcpy(s->toks + s->n, tokens, sizeof *tokens * (size_t)n); /* the eval checked n_past + n <= n_ctx */
    s->n += n;
    s->stats.n_tokens_evaluated += (uint64_t)n;
    return MUSE_OK;
}

int32_t muse_session_image_id(const uint8_t key[32], int32_t row) {
    const uint8_t *w = key + 4 * (size_t)(row & 7);
    uint32_t v = ((uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24) & 0x7fffffffu;
    return -1 - (int32_t)v; /* -1 .. -2^31 */
}

muse_status muse_session_eval_mixed(struct muse_session *s, const int32_t *ids, const float *const *rows, int32_t n,
                                    float *logits, int logits_all, struct muse_error *err) {
    for (int32_t i = 0; i < n; i++) {
        const bool row = rows && rows[i];
        if (row != (ids[i] < 0))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                  row ? "an embedding row at index %d has the id %d (image rows need a negative id)"
                                      : "position %d has the image-row id %d but no row",
                                  i, ids[i]);
    }
    muse_status st = s->stepper ? muse_stepper_eval(s->stepper, s->seq, ids, rows, n, logits, logits_all ? 0 : n - 1, NULL, err)
                                : muse_eval_mixed(s->ctx, ids, rows, n, logits, logits_all, err);
    if (st != MUSE_OK) return st;
    memcpy(s->toks + s->n, ids, sizeof *ids * (size_t)n);
    s->n += n;
    s->stats.n_tokens_evaluated += (uint64_t)n;
    return MUSE_OK;
}

/* Replacement: a checkpoint already at n_past is kept (its copy is the true state there: positions
 * below it were never rewritten since); else the first empty or stale one; else the least recently
 * saved, which in a conversation is the lowest position and the least likely to serve a miss. */
muse_status muse_session_checkpoint(struct muse_session *s, struct muse_error *err) {
    int32_t pick = -1;
    for (int32_t i = 0; i < s->n_ck; i++) {
        int32_t p = muse_kv_checkpoint_pos(s->ck[i]);
        if (p == s->n) return MUSE_OK; /* already there */
        if (pick >= 0 && muse_kv_checkpoint_pos(s->ck[pick]) < 0) continue; /* an unused one is taken already */
        if (pick < 0 || p < 0 || s->ck_saved[i] < s->ck_saved[pick]) pick = i;
    }
    if (pick < 0) return MUSE_OK;
    muse_status st = muse_kv_checkpoint_save(s->ck[pick], err);
    if (st != MUSE_OK) return st;
    s->ck_saved[pick] = ++s->n_saves;
    s->stats.n_checkpoints++;
    return MUSE_OK;
}

void muse_session_clear(struct muse_session *s) {
    muse_seq_clear(s->ctx, s->seq, NULL);
    s->n = 0;
}
