/*
 * session.h - one conversation's KV state over a muse_context: the tokens its cache holds, prefix
 * reuse, rollback, and checkpoints of the sliding-window rings. The one implementation behind
 * `muse chat`, the server's slots (src/server/adapter_model.c) and, next, speculative decoding's
 * accept/rollback.
 *
 * What the session adds to the context (include/muse.h):
 *   - a mirror of the token ids in the cache, so a new prompt can be matched against it
 *     (muse_session_reuse keeps the longest common prefix, the caller evaluates only the rest);
 *     a position holding an embedding row (an image row, muse_session_eval_mixed) is mirrored by a
 *     negative id derived from the image's content hash (muse_session_image_id), so two prompts
 *     with the same image at the same place share that prefix and a different image ends it;
 *   - one policy for a rollback the rings cannot serve (a "sliding-window miss": the cache wrapped
 *     its rings and the rows the kept prefix needs are overwritten, see muse_kv_can_truncate):
 *     restore the best checkpoint the session holds, else clear and re-prefill from 0. Every
 *     rollback reports which of these happened (struct muse_session_keep) and is counted
 *     (struct muse_session_stats), so callers can show it.
 *   - a small set of checkpoints (muse_kv_checkpoint), taken where the caller says
 *     (muse_session_checkpoint; the chat and the server take one where each prompt ends).
 *
 * Why checkpoints at the prompt's end: a chat client sends the history back without the reasoning
 * the model generated, so the next prompt diverges where the last generation began - often more
 * positions back than the rings hold (n_swa + n_batch). The checkpoint there turns that miss into
 * a copy of the rings instead of a re-prefill of the whole conversation (llama.cpp's "context
 * checkpoints").
 *
 * Speculative decoding: save nothing, evaluate a verify batch of at most n_batch tokens with
 * muse_session_eval, then muse_session_truncate(P + accepted): a rollback of at most n_batch
 * positions is always legal, also after the rings wrapped (kv_cache.h explains why), and the
 * logits that follow are bit-identical to never having evaluated the rejected tokens. A deeper
 * rewind needs a checkpoint taken at or after the target (then truncate from there).
 *
 * Ownership and threads: a session borrows its context (the context must outlive it) and owns
 * its token mirror and checkpoints. While a session is attached, change the context's KV state only
 * through the session (a direct muse_eval / muse_kv_truncate would leave the mirror wrong). One
 * thread at a time, like the context. Nothing is allocated after muse_session_create.
 */
#pragma once

#include <stdint.h>

#include "muse.h"

struct muse_session;

struct muse_stepper;

struct muse_session_params {
    int32_t n_checkpoints; /* checkpoints kept, each muse_kv_checkpoint_size() bytes (the rings); 0 = none:
                              every sliding-window miss re-prefills. Default 1 */
    int32_t seq;           /* the context's sequence the session drives (muse_decode's seq_id); default 0 */
    struct muse_stepper *stepper; /* NULL: the session evaluates its context itself (sequence 0 only); else
                                     every evaluation goes through this stepper over the same context, batched
                                     with the other sessions' (muse.h, continuous batching), and the session may run on its
                                     own thread beside them */
};

/* n_checkpoints = 1: one copy of the rings, where the last prompt ended. */
struct muse_session_params muse_session_default_params(void);

/* How a rollback was served. */
enum muse_session_keep_kind {
    MUSE_SESSION_KEEP_NONE = 0,  /* nothing to drop: n_keep == n_past */
    MUSE_SESSION_KEEP_TRUNCATED, /* rolled back in place (moves n_past, copies nothing) */
    MUSE_SESSION_KEEP_RESTORED,  /* sliding-window miss: a checkpoint restored (and truncated from there) */
    MUSE_SESSION_KEEP_CLEARED,   /* sliding-window miss, no usable checkpoint: cleared, re-prefill from 0 */
};

/* The outcome of one rollback (muse_session_keep, muse_session_reuse). */
struct muse_session_keep {
    enum muse_session_keep_kind kind;
    int32_t n_asked;  /* positions asked for, clamped to 0..n_past */
    int32_t n_kept;   /* positions the cache holds now: n_asked, or fewer after a miss (RESTORED from a
                         checkpoint below n_asked, or CLEARED: 0); the caller evaluates the rest */
    int32_t ckpt_pos; /* RESTORED: the checkpoint's position; otherwise -1 */
};

/* Counters since muse_session_create (never reset). */
struct muse_session_stats {
    uint64_t n_truncated;        /* rollbacks served in place */
    uint64_t n_restored;         /* sliding-window misses served by a checkpoint */
    uint64_t n_cleared;          /* sliding-window misses that restarted from 0 (re-prefill) */
    uint64_t n_checkpoints;      /* checkpoints saved */
    uint64_t n_tokens_reused;    /* prompt tokens muse_session_reuse kept (not re-evaluated) */
    uint64_t n_tokens_evaluated; /* tokens through muse_session_eval */
};

/*
 * A session over sequence params.seq of ctx (borrowed; must outlive the session). Clears that
 * sequence's cache: a session starts empty. Allocates the token mirror (n_ctx ids) and
 * params.n_checkpoints checkpoints, nothing later. *out owned by the caller (muse_session_free).
 * Errors: MUSE_ERR_INVALID_ARG (n_checkpoints < 0, a bad sequence, a sequence other than 0 without
 * a stepper, a stepper over another context), MUSE_ERR_NOMEM.
 */
muse_status muse_session_create(struct muse_context *ctx, struct muse_session_params params, struct muse_session **out,
                                struct muse_error *err);
/* Free the session and its checkpoints (NULL is fine); the context stays as it is. */
void muse_session_free(struct muse_session *s);

/* The context the session drives, its sequence, and its stepper (NULL: none). */
struct muse_context *muse_session_context(const struct muse_session *s);
int32_t muse_session_seq(const struct muse_session *s);
struct muse_stepper *muse_session_stepper(const struct muse_session *s);
/* Positions in the cache (== muse_context_n_past of the context). */
int32_t muse_session_n_past(const struct muse_session *s);
/* The token ids in the cache, [muse_session_n_past]; valid until the next call that changes it. */
const int32_t *muse_session_tokens(const struct muse_session *s);
/* Counters so far. */
struct muse_session_stats muse_session_stats(const struct muse_session *s);

/* Length of the longest common prefix of a[0..n_a) and b[0..n_b). Pure; thread-safe. */
int32_t muse_session_common_prefix(const int32_t *a, int32_t n_a, const int32_t *b, int32_t n_b);

/*
 * How many of prompt's tokens a cache holding cached[0..n_cached) can reuse: their common prefix,
 * but at most n_prompt - 1, so the caller always evaluates at least the prompt's last token and
 * gets its logits. Pure; thread-safe (the server's slot choice calls it under its own lock).
 */
int32_t muse_session_reuse_len(const int32_t *cached, int32_t n_cached, const int32_t *prompt, int32_t n_prompt);

/*
 * Roll back to the first n_keep positions, as far as possible (clamped to 0..n_past): in place
 * when the rings allow it (muse_kv_can_truncate); else (a sliding-window miss) from the
 * checkpoint that keeps the most - one at or above n_keep that can be truncated to n_keep, else
 * the highest one below n_keep - else by clearing. Never fails; the result says what happened
 * and how many positions are kept (the mirror shrinks to match). Checkpoints above the kept
 * position go stale.
 */
struct muse_session_keep muse_session_keep(struct muse_session *s, int32_t n_keep);

/*
 * Prefix reuse: muse_session_keep(muse_session_reuse_len(cache, prompt)). Afterwards the cache
 * holds prompt[0..result.n_kept); evaluate prompt[n_kept..n_prompt) with muse_session_eval (at
 * least one token). n_prompt < 1 keeps nothing. Counts n_kept in n_tokens_reused.
 */
struct muse_session_keep muse_session_reuse(struct muse_session *s, const int32_t *prompt, int32_t n_prompt);

/*
 * Roll back to exactly n_keep positions: in place, or from a checkpoint at or above n_keep that
 * can be truncated to n_keep. Errors (nothing changed): MUSE_ERR_INVALID_ARG when n_keep is
 * outside 0..n_past, or no such checkpoint exists for a sliding-window miss. Always succeeds for
 * n_past - n_keep <= muse_context_n_batch (speculative decoding's reject step).
 */
muse_status muse_session_truncate(struct muse_session *s, int32_t n_keep, struct muse_error *err);

/*
 * Evaluate n tokens at the end of the cache (muse_eval: chunked by n_batch; logits as there) and
 * append them to the mirror. Errors are muse_eval's (MUSE_ERR_INVALID_ARG, MUSE_ERR_CONTEXT),
 * raised before anything is evaluated: the cache and the mirror are then unchanged.
 */
muse_status muse_session_eval(struct muse_session *s, const int32_t *tokens, int32_t n, float *logits, int logits_all,
                              struct muse_error *err);

/*
 * muse_session_eval that also gives the feature rows of the evaluated positions (the DFlash
 * drafter's input, muse_context_set_features on the context): features [n][feature floats per
 * row]. Without a stepper n must fit one forward (muse_context_n_batch). Errors as
 * muse_session_eval; MUSE_ERR_INVALID_ARG when the context writes no features.
 */
muse_status muse_session_eval_features(struct muse_session *s, const int32_t *tokens, int32_t n, float *logits,
                                       int logits_all, float *features, struct muse_error *err);

/*
 * The mirror id of row `row` of an image whose content key (a SHA-256 of what determines its rows:
 * pixels, size, token cap; src/gen/media.h) is key[32]: a negative int32, never a vocabulary id.
 * Successive rows cycle through the key's eight 31-bit words, so an image's whole run of ids
 * carries 248 bits of its key (a prefix match through a whole image compares them all). Pure.
 */
int32_t muse_session_image_id(const uint8_t key[32], int32_t row);

/*
 * Evaluate n positions at the end of the cache, mixing tokens and embedding rows (muse_eval_mixed):
 * position i is the row rows[i] when rows != NULL and rows[i] != NULL (its mirror id is ids[i], a
 * negative id from muse_session_image_id), else the token ids[i]. The mirror records ids[0..n).
 * Logits and errors as muse_session_eval; an embedding row whose id is not negative, or a token
 * position whose id is, is MUSE_ERR_INVALID_ARG (nothing evaluated).
 */
muse_status muse_session_eval_mixed(struct muse_session *s, const int32_t *ids, const float *const *rows, int32_t n,
                                    float *logits, int logits_all, struct muse_error *err);

/*
 * Save a checkpoint at the current position (a no-op when a valid one is already there). Reuses
 * an empty or stale checkpoint, else the least recently saved one. Copies
 * muse_kv_checkpoint_size() bytes. A session with n_checkpoints = 0 does nothing. Errors:
 * MUSE_ERR_INVALID_ARG when the context was freed.
 */
muse_status muse_session_checkpoint(struct muse_session *s, struct muse_error *err);

/* Forget every token (the cache and the mirror; checkpoints go stale). Not counted as a miss. */
void muse_session_clear(struct muse_session *s);
