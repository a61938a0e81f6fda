/*
 * muse.h - public API of libmuse, a C11 inference engine for Muse-Glimmer GGUF models.
 *
 * Conventions (see docs/architecture.md and ../shared/STYLE.md):
 *   - Every function that can fail returns a muse_status (0 = ok, negative = error) or NULL;
 *     a human-readable message is available through the object or error record it names.
 *   - The library never prints and never exits; only the tools in tools/ do.
 *   - Objects with invariants are opaque; options travel in params structs by value.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSE_VERSION_MAJOR 0
#define MUSE_VERSION_MINOR 1
#define MUSE_VERSION_PATCH 0

/* Status codes. 0 is success; every error is negative. */
enum muse_status {
    MUSE_OK              =  0,
    MUSE_ERR_INVALID_ARG = -1,  /* a caller passed a bad argument or option */
    MUSE_ERR_IO          = -2,  /* open/read/write/mmap failed */
    MUSE_ERR_FORMAT      = -3,  /* a file or request is malformed (truncated, hostile, inconsistent) */
    MUSE_ERR_UNSUPPORTED = -4,  /* well-formed but not supported (unknown type, architecture) */
    MUSE_ERR_NOMEM       = -5,  /* allocation failed */
    MUSE_ERR_MISSING     = -6,  /* a required key, tensor or token is absent */
    MUSE_ERR_SHAPE       = -7,  /* a tensor has the wrong shape or type */
    MUSE_ERR_CONTEXT     = -8,  /* input longer than the context */
    MUSE_ERR_CANCELLED   = -9,  /* the caller cancelled the operation */
    MUSE_ERR_TEMPLATE    = -10, /* a chat template failed to parse or raised an error */
    MUSE_ERR_INTERNAL    = -11, /* a bug in muse */
    MUSE_STATUS_COUNT    = 12
};
typedef enum muse_status muse_status;

/* A short constant description of a status ("ok", "i/o error", ...). Never NULL. */
const char *muse_status_str(muse_status status);

/* "MAJOR.MINOR.PATCH"; a constant string. */
const char *muse_version(void);

/*
 * An error record: a status plus a one-line message. Functions that take a
 * `struct muse_error *err` fill it on failure (err may be NULL when the caller
 * does not want the message). The message never ends in a newline.
 */
struct muse_error {
    muse_status status;
    char msg[512];
};


/* ---- models and contexts (the text forward) ------------------------------------------------
 * A muse_model is the read-only part (hyperparameters + weights as views into the mmap'd GGUF);
 * it may be shared by any number of contexts and threads. A muse_context is one sequence: its
 * KV cache, its run state (planned once at creation) and its backend; use one context from one
 * thread at a time.
 */
struct muse_model;
struct muse_context;

struct muse_model_params {
    int32_t reserved;             /* no options yet; keep the struct for ABI stability */
};

/* Defaults for muse_model_load. */
struct muse_model_params muse_model_default_params(void);

/*
 * mmap and load a Muse-Glimmer text GGUF. On success *out owns a new model (free with
 * muse_model_free). Errors: MUSE_ERR_IO (open/mmap), MUSE_ERR_FORMAT (malformed file or
 * metadata), MUSE_ERR_UNSUPPORTED (another architecture: a vision projector or a DFlash
 * drafter is named as such), MUSE_ERR_MISSING (a required key or tensor, named),
 * MUSE_ERR_SHAPE (a tensor with the wrong shape or type: names the tensor, the expected and the
 * found shape), MUSE_ERR_NOMEM. err may be NULL.
 */
muse_status muse_model_load(const char *path, struct muse_model_params params, struct muse_model **out,
                            struct muse_error *err);

/* Free a model (NULL is fine). Every context made from it must be freed first. */
void muse_model_free(struct muse_model *model);

/* Model facts (thread-safe, never fail): vocabulary size (rows of token_embd), training context
 * length, layer count, embedding width. */
int32_t muse_model_n_vocab(const struct muse_model *model);
int32_t muse_model_n_ctx_train(const struct muse_model *model);
int32_t muse_model_n_layer(const struct muse_model *model);
int32_t muse_model_n_embd(const struct muse_model *model);
/* Special token ids from the file; -1 when absent. */
int32_t muse_model_token_bos(const struct muse_model *model);
int32_t muse_model_token_eos(const struct muse_model *model);
int32_t muse_model_token_eot(const struct muse_model *model);
/* Whether generation stops at `token`: EOS and EOT do, EOM (<|eom|>) does not. */
int muse_model_token_is_stop(const struct muse_model *model, int32_t token);
/* A one-line description ("muse-glimmer 30B, 52 layers, ..."), written into buf (always NUL-terminated). */
void muse_model_desc(const struct muse_model *model, char *buf, size_t size);

enum muse_kv_type {
    MUSE_KV_TYPE_F16  = 0,        /* llama.cpp's default */
    MUSE_KV_TYPE_F32  = 1,        /* for exact checks */
    MUSE_KV_TYPE_Q8_0 = 2,        /* half the memory of f16 (approximates llama.cpp's flash-attention path) */
    MUSE_KV_TYPE_COUNT
};

/* "f16", "f32", "q8_0" <-> enum muse_kv_type; from_name returns -1 when unknown. */
int muse_kv_type_from_name(const char *name);
const char *muse_kv_type_name(enum muse_kv_type type);

/*
 * Per-layer trace hook: called for every layer il (0..n_layer-1) with the residual entering it,
 * and once with il = n_layer for the residual entering the output norm, for every token whose
 * position is < trace_n_pos. sum and sumsq are accumulated in double; first holds x[0..3].
 */
typedef void (*muse_layer_trace_fn)(void *user, int32_t pos, int32_t il, double sum, double sumsq,
                                    const float first[4]);

/*
 * Layer-input capture hook (DFlash feature capture, debugging): called at the top of every layer
 * il (0..n_layer-1) of every micro-batch with the residual entering it (`t_layer_inp`; for
 * layer 0 the normed embedding), x = [n_tokens][n_embd] f32 for positions pos[0..n_tokens).
 * The pointers are valid only during the call.
 */
typedef void (*muse_layer_capture_fn)(void *user, int32_t il, const int32_t *pos, int32_t n_tokens,
                                      const float *x);

struct muse_context_params {
    uint32_t n_ctx;               /* positions; 0 = min(4096, the model's context_length) */
    uint32_t n_batch;             /* most tokens per forward (prompt chunk); default 512 */
    uint32_t n_threads;           /* 0 = the backend's choice; the ref backend uses 1 */
    enum muse_kv_type kv_type;    /* default MUSE_KV_TYPE_F16 */
    const char *backend;          /* "ref", "cpu", ...; NULL = the default backend */
    int swa_full;                 /* nonzero: sliding-window layers keep the whole context */
    muse_layer_trace_fn trace;    /* NULL = no trace */
    void *trace_user;
    int32_t trace_n_pos;          /* trace positions 0..trace_n_pos-1 */
    muse_layer_capture_fn capture; /* NULL = none */
    void *capture_user;
};

/* Defaults for muse_context_create. */
struct muse_context_params muse_context_default_params(void);

/*
 * Create a context (KV cache, run state, backend scratch: all allocated here, nothing later).
 * The model must outlive it. Errors: MUSE_ERR_INVALID_ARG (unknown backend, n_ctx larger than
 * the model's context_length, bad KV type), MUSE_ERR_NOMEM.
 */
muse_status muse_context_create(struct muse_model *model, struct muse_context_params params, struct muse_context **out,
                                struct muse_error *err);

void muse_context_free(struct muse_context *ctx);

/* Context size in positions (as resolved at creation). */
uint32_t muse_context_n_ctx(const struct muse_context *ctx);
/* Most tokens per forward chunk (as resolved at creation); also how far muse_kv_truncate can
 * always roll back. */
uint32_t muse_context_n_batch(const struct muse_context *ctx);
/* Threads the backend uses (as resolved at creation). */
uint32_t muse_context_n_threads(const struct muse_context *ctx);
/* Tokens stored in the KV cache (the position the next token gets). */
int32_t muse_context_n_past(const struct muse_context *ctx);
/* Name of the backend in use ("ref", ...). */
const char *muse_context_backend(const struct muse_context *ctx);

/*
 * Evaluate n_tokens tokens at positions n_past, n_past+1, ... (chunked by n_batch; every chunk
 * goes through the same code, so a prompt and single-token decoding are the same path).
 * logits: NULL for none; else, with logits_all, [n_tokens][n_vocab] (a row per token), without
 * it [n_vocab] for the last token only. Values are the model's final outputs (after the logit
 * scale and the tanh softcap). Errors: MUSE_ERR_INVALID_ARG (a token id out of range, n_tokens
 * < 1), MUSE_ERR_CONTEXT (n_past + n_tokens > n_ctx; nothing is evaluated: never a truncation).
 */
muse_status muse_eval(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, float *logits, int logits_all,
                      struct muse_error *err);

/*
 * Like muse_eval, with embedding rows instead of token ids (image rows from a vision projector):
 * embd = [n_tokens][n_embd] f32, used in place of token_embd rows; the weightless embedding
 * RMSNorm is still applied, as llama.cpp does. n_embd = muse_model_n_embd(model).
 */
muse_status muse_eval_embd(struct muse_context *ctx, const float *embd, int32_t n_tokens, float *logits,
                           int logits_all, struct muse_error *err);

/* Forget every token (n_past = 0). Cannot fail. */
void muse_kv_clear(struct muse_context *ctx);

/*
 * Roll back to the first n_keep tokens (moves n_past; copies nothing). Errors (nothing changed):
 * MUSE_ERR_INVALID_ARG when n_keep < 0, n_keep > n_past, or a sliding-window layer no longer holds
 * what position n_keep needs (muse_kv_can_truncate is false: restore a checkpoint, or clear and
 * re-prefill). A rollback of at most n_batch positions always succeeds, also after the rings
 * wrapped: evaluate up to n_batch tokens, then keep any prefix of them (speculative decoding).
 */
muse_status muse_kv_truncate(struct muse_context *ctx, int32_t n_keep, struct muse_error *err);

/*
 * Whether a context holding n_past positions could roll back to n_keep (nonzero = yes). Pure: it
 * asks about any n_past, not only the current one (e.g. "from a checkpoint at P, could I then
 * truncate to n_keep?"). Full-attention layers always can; a sliding-window layer keeps a ring of
 * n_swa + n_batch cells, so once n_past exceeds the ring it can drop at most n_batch + 1
 * positions; n_keep = 0 is always possible. Never fails (out-of-range values give 0).
 */
int muse_kv_can_truncate(const struct muse_context *ctx, int32_t n_past, int32_t n_keep);

/*
 * ---- KV checkpoints: rollbacks deeper than the sliding-window rings allow -----------------------
 * A checkpoint is a copy of a context's sliding-window rings taken at one n_past, its position P.
 * Restoring it sets n_past back to P with the rings as they were then: the full-attention layers
 * need no copy, since their rows below P are not rewritten while n_past stays at or above P.
 * Cost, made explicit: creating one allocates muse_kv_checkpoint_size() bytes (every ring's k and
 * v; 0 without rings: no sliding-window layer, swa_full, or rings that cover n_ctx), and save and
 * restore each copy that many bytes. Nothing else is allocated or copied.
 *
 * A checkpoint belongs to the context it was made from and goes stale (position -1) as soon as
 * that context's n_past drops below P (muse_kv_truncate or muse_kv_clear below P, restoring a
 * checkpoint with a smaller position): the rows between may then be rewritten. So a checkpoint
 * that muse_kv_checkpoint_pos reports is always safe to restore. Use it from the context's
 * thread. Typical use: save where a prompt ends; when a later prompt diverges further back than
 * muse_kv_truncate allows, restore (then truncate further down if still needed).
 */
struct muse_kv_checkpoint;

/* An empty checkpoint (position -1) of ctx, owned by the caller: free with muse_kv_checkpoint_free,
 * before or after the context (freeing the context first detaches it: save and restore then
 * fail). Errors: MUSE_ERR_NOMEM. */
muse_status muse_kv_checkpoint_create(struct muse_context *ctx, struct muse_kv_checkpoint **out,
                                      struct muse_error *err);
void muse_kv_checkpoint_free(struct muse_kv_checkpoint *ck); /* NULL is fine */
/* Copy the rings now; the position becomes the context's n_past (overwrites what it held).
 * Errors: MUSE_ERR_INVALID_ARG when the context was freed. */
muse_status muse_kv_checkpoint_save(struct muse_kv_checkpoint *ck, struct muse_error *err);
/* Copy the rings back and set n_past to the checkpoint's position; checkpoints above that go
 * stale. Errors (nothing changed): MUSE_ERR_INVALID_ARG when empty, stale, or the context freed. */
muse_status muse_kv_checkpoint_restore(struct muse_kv_checkpoint *ck, struct muse_error *err);
/* The position the checkpoint restores to; -1 when empty or stale. */
int32_t muse_kv_checkpoint_pos(const struct muse_kv_checkpoint *ck);
/* Bytes a save or restore copies (also what the checkpoint holds allocated). */
size_t muse_kv_checkpoint_size(const struct muse_kv_checkpoint *ck);

#ifdef __cplusplus
}
#endif
