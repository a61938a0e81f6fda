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

/* The git commit libmuse was built from (12 hex digits, "-dirty" appended when the tree had
 * uncommitted changes; from a `git archive` tarball, the archived commit; "unknown" when neither
 * is known). A constant string. */
const char *muse_build_commit(void);

/*
 * Progress of a long operation: `done` of `total` units (bytes while a model loads, layers while
 * the vision tower encodes). Called from the thread doing the work; return 0 to go on, nonzero to
 * cancel (the operation then fails with MUSE_ERR_CANCELLED and leaves nothing half-done behind).
 * Every progress callback of this API has this shape: user first, an int returned, 0 = go on;
 * one that needs more than two counts (muse_quantize_progress_fn) passes it after `user`.
 */
typedef int (*muse_progress_fn)(void *user, uint64_t done, uint64_t total);

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
    int use_mmap;                 /* 1 (default): map the file (pages shared with the page cache);
                                     0: read it into private memory (llama.cpp's --no-mmap) */
    int populate;                 /* 1 (default): bring every page in while loading, as llama.cpp's
                                     MAP_POPULATE does, so the first token does not wait for the disk;
                                     0: pages fault in when first used */
    int use_mlock;                /* 1: lock the weights in RAM (mlock; needs `ulimit -l` room or
                                     CAP_IPC_LOCK: failing is an error). Default 0 */
    muse_progress_fn progress;    /* NULL, or progress in bytes while the file is read or populated
                                     (every 32 MiB); nonzero from it cancels the load */
    void *progress_user;
};

/* Defaults for muse_model_load: mmap, populate, no mlock, no progress. */
struct muse_model_params muse_model_default_params(void);

/*
 * mmap (or read) and load a Muse-Glimmer text GGUF. On success *out owns a new model (free with
 * muse_model_free). Errors: MUSE_ERR_IO (open/mmap/read/mlock), MUSE_ERR_FORMAT (malformed file or
 * metadata), MUSE_ERR_UNSUPPORTED (another architecture: a vision projector or a DFlash
 * drafter is named as such), MUSE_ERR_MISSING (a required key or tensor, named),
 * MUSE_ERR_SHAPE (a tensor with the wrong shape or type: names the tensor, the expected and the
 * found shape), MUSE_ERR_NOMEM, MUSE_ERR_CANCELLED (the progress callback asked). Every message
 * names the file once. err may be NULL.
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
 * Layer-input capture hook (debugging; features for a drafter: muse_context_set_features): called
 * at the top of every layer il (0..n_layer-1) of every micro-batch with the residual entering it
 * (`t_layer_inp`; for layer 0 the normed embedding), x = [n_tokens][n_embd] f32 for positions
 * pos[0..n_tokens).
 * The pointers are valid only during the call.
 */
typedef void (*muse_layer_capture_fn)(void *user, int32_t il, const int32_t *pos, int32_t n_tokens,
                                      const float *x);

struct muse_context_params {
    uint32_t n_ctx;               /* positions; 0 = muse_context_auto_n_ctx(model, params, 1): the
                                     model's context_length, capped by the memory available */
    uint32_t n_batch;             /* most tokens per forward (prompt chunk); default 512 */
    uint32_t n_threads;           /* 0 = the backend's choice; the ref backend uses 1 */
    enum muse_kv_type kv_type;    /* default MUSE_KV_TYPE_F16 */
    const char *backend;          /* "ref", "cpu", ...; NULL = the default backend */
    int swa_full;                 /* nonzero: sliding-window layers keep the whole context */
    int no_repack;                /* nonzero: batched matmuls read the mapped weights with the exact
                                     kernels (no packed weight panels, docs/cpu-backend.md) and attention
                                     runs per head (no flash attention): every batch size gives the
                                     bits of evaluating its rows one by one */
    muse_layer_trace_fn trace;    /* NULL = no trace */
    void *trace_user;
    int32_t trace_n_pos;          /* trace positions 0..trace_n_pos-1 */
    muse_layer_capture_fn capture; /* NULL = none */
    void *capture_user;
    uint32_t n_seq_max;           /* sequences the context holds (muse_decode), each with its own KV
                                     cache of n_ctx positions; 0 = 1. The muse_eval family and muse_kv_*
                                     work on sequence 0. At most MUSE_MAX_SEQ */
    int embeddings;               /* nonzero: every forward also writes each row's final hidden state
                                     (muse_context_embeddings, muse_embed) */
    uint32_t n_ctx_pool;          /* 0: every sequence holds memory for n_ctx positions. Else the KV cache is
                                     paged: each sequence has n_ctx positions of address space, and the
                                     full-attention cells its positions use are taken as it grows, in small
                                     blocks, from a pool of n_ctx_pool cells shared by all sequences (given
                                     back when it shrinks or is cleared); an evaluation the pool cannot hold
                                     fails with MUSE_ERR_CONTEXT, nothing evaluated (muse_seq_reserve) */
    uint32_t gpu_layers;          /* a backend with memory of its own ("vulkan"): run only layers 0..gpu_layers-1
                                     there, the other layers and the output head on the "cpu" backend (n_threads
                                     threads; -ngl). 0 (the default) or >= the model's layer count: every layer on
                                     the backend. Not with trace / capture hooks or feature rows */
};

#define MUSE_MAX_SEQ 256

/* Defaults for muse_context_create. */
struct muse_context_params muse_context_default_params(void);
/* The thread count a context made with params runs on: n_threads, or the backend's default for 0
 * (every physical core; 1 for "ref"); 0 for an unknown backend. */
uint32_t muse_context_params_threads(struct muse_context_params params);

/*
 * Bytes of KV cache one more position costs a context made with params (the full-attention
 * layers' key and value rows, every layer's with swa_full; sliding-window rings have a fixed
 * size), plus the small per-position scratch.
 */
uint64_t muse_context_bytes_per_pos(const struct muse_model *model, struct muse_context_params params);

/*
 * The context size n_ctx = 0 stands for: the model's context_length (training context), capped
 * so that n_seq such contexts fit in the memory available now (MemAvailable of /proc/meminfo, or
 * the bytes in the environment variable MUSE_MEM_AVAILABLE) after the model file and a margin
 * (1/8 of it, at least 256 MiB), rounded down to a multiple of 256; never below
 * min(4096, context_length). n_seq < 1 counts as 1 (a server passes its slot count).
 */
uint32_t muse_context_auto_n_ctx(const struct muse_model *model, struct muse_context_params params, int32_t n_seq);

/*
 * Create a context (KV cache, run state, backend scratch: all allocated here, nothing later).
 * The model must outlive it. An n_ctx above the model's context_length is allowed, as llama.cpp
 * allows it (positions past the trained context are untested: callers should warn). Errors:
 * MUSE_ERR_INVALID_ARG (unknown backend, n_ctx above 2^30, bad KV type), MUSE_ERR_NOMEM.
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
/* Sequences the context holds (as resolved at creation, >= 1). */
uint32_t muse_context_n_seq_max(const struct muse_context *ctx);

/*
 * A batch of rows from one or more sequences of a context, run as ONE forward: every matmul reads
 * the weights once for all rows; each row's key and value go to its own sequence's cache, and its
 * attention reads only that sequence (like llama_batch's seq_id, one sequence per row).
 */
struct muse_batch {
    int32_t n_tokens;       /* rows: 1..n_batch */
    const int32_t *token;   /* [n_tokens] token ids */
    const int32_t *seq_id;  /* [n_tokens] 0..n_seq_max-1; NULL: every row of sequence 0 */
    const int32_t *pos;     /* [n_tokens] or NULL. A sequence's rows take its next positions in batch
                               order (its n_past, n_past + 1, ...); given positions must be exactly those */
    const int8_t *logits;   /* [n_tokens] nonzero: this row's logits are wanted; NULL: the last row of
                               each sequence in the batch */
    const float *const *embd; /* [n_tokens] or NULL: a non-NULL embd[i] is row i's input (n_embd floats, an
                                 image row of a vision projector) instead of token[i]'s embedding; token[i]
                                 is then ignored */
};

/*
 * Evaluate a batch. logits: [rows asked for][n_vocab], in batch order (NULL: none written). Gives
 * each row exactly what evaluating its sequence alone gives it with the exact kernels (MUSE_CPU=exact,
 * the ref backend); the fast kernels may pick another kernel for a batch of a different size (within
 * their tested bound). Errors: MUSE_ERR_INVALID_ARG (an empty or too large batch, a bad sequence id,
 * token or position), MUSE_ERR_CONTEXT (a sequence would outgrow n_ctx); nothing is evaluated then.
 */
muse_status muse_decode(struct muse_context *ctx, const struct muse_batch *batch, float *logits, struct muse_error *err);

/*
 * Stopping a muse_decode early (llama_set_abort_callback): fn(user) is called by one thread between
 * the stages of the forward (every few milliseconds of a long batch); nonzero stops it there and
 * muse_decode fails with MUSE_ERR_CANCELLED with no sequence advanced: the batch may be run again
 * as if the stopped one had never run (the KV rows it wrote are rewritten with the same values; the
 * sliding-window rings hold n_batch cells beyond the window for that). fn NULL: never stopped.
 * Honoured by the CPU devices; a GPU device and tensor parallelism finish the batch. The stepper
 * below sets its own on its context.
 */
void muse_context_set_abort(struct muse_context *ctx, int (*fn)(void *user), void *user);

/*
 * Feature rows (the DFlash drafter's input, spec dflash.md 2.3; also for probing a model): from now
 * on every forward of ctx also writes, for each of its rows, the residual entering each of
 * layers[0..n_layers) side by side (slot k holds layer layers[k]; layer 0's is the normed
 * embedding, layer n_layer's the residual entering the output norm; a layer may be named twice).
 * n_layers = 0 turns them off. Costs one copy of each named row per forward. Errors:
 * MUSE_ERR_INVALID_ARG (a layer outside 0..n_layer), MUSE_ERR_NOMEM (nothing changed then).
 */
muse_status muse_context_set_features(struct muse_context *ctx, const int32_t *layers, int32_t n_layers,
                                      struct muse_error *err);
/* The feature rows of the last forward: [*n_rows][n_layers * n_embd] in batch order - the rows of
 * the last muse_decode, or of the last n_batch chunk of a muse_eval call. NULL (and *n_rows 0)
 * when no features are set. Valid until the next forward of ctx. */
const float *muse_context_features(const struct muse_context *ctx, int32_t *n_rows);

/*
 * ---- embeddings (llama.cpp's --embedding) ---------------------------------------------------------
 * A context created with params.embeddings writes, in every forward, each row's final hidden
 * state: rms(x) * output_norm, the LM head's input (llama.cpp's result_norm), f32.
 */

/* The final hidden states of the last forward: [*n_rows][n_embd] in batch order (as
 * muse_context_features); NULL (and *n_rows 0) without params.embeddings. */
const float *muse_context_embeddings(const struct muse_context *ctx, int32_t *n_rows);

/* How muse_embed pools a sequence's hidden states (llama.cpp's enum llama_pooling_type). */
enum muse_pooling {
    MUSE_POOLING_NONE = 0, /* every token's state */
    MUSE_POOLING_MEAN = 1, /* their mean */
    MUSE_POOLING_CLS = 2,  /* the first token's */
    MUSE_POOLING_LAST = 3, /* the last token's */
};
/* "none", "mean", "cls", "last" <-> enum muse_pooling; from_name returns -1 when unknown. */
int muse_pooling_from_name(const char *name);
const char *muse_pooling_name(enum muse_pooling pooling);
/* The model's pooling (the GGUF key <arch>.pooling_type), or -1 when the file does not say. */
int muse_model_pooling(const struct muse_model *model);

/*
 * Embed one input: clears sequence 0, evaluates tokens[0..n_tokens) there (chunked by n_batch; no
 * logits), pools the final hidden states and normalizes each vector as llama.cpp's
 * --embd-normalize: -1 none, 0 max-absolute (to the int16 range), 1 taxicab, 2 Euclidean (the
 * default, what OpenAI returns), p > 2 the p-norm. out: [n_embd], or [n_tokens][n_embd] for
 * MUSE_POOLING_NONE. Leaves sequence 0 holding the tokens. Errors: MUSE_ERR_INVALID_ARG (a
 * context without params.embeddings, a bad pooling, no tokens, a bad token), MUSE_ERR_CONTEXT
 * (more tokens than n_ctx).
 */
muse_status muse_embed(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, enum muse_pooling pooling,
                       int normalize, float *out, struct muse_error *err);

/*
 * Embed n_inputs inputs together: input i is tokens[i][0..n_tokens[i]). Their rows share forwards
 * (muse_decode over the context's sequences, an input per sequence, a freed sequence taking the
 * next input), so the weights are read once per forward for all of them. out: [n_inputs][n_embd],
 * each vector what muse_embed gives that input (bit for bit with the exact kernels). Clears every
 * sequence it uses. Errors as muse_embed (MUSE_POOLING_NONE is refused: one vector per input);
 * nothing is written to out for an input refused up front (a bad token, no tokens, more than n_ctx).
 */
muse_status muse_embed_batch(struct muse_context *ctx, const int32_t *const *tokens, const int32_t *n_tokens,
                             int32_t n_inputs, enum muse_pooling pooling, int normalize, float *out, struct muse_error *err);

/* Positions stored for sequence seq (0 for an id out of range). */
int32_t muse_seq_n_past(const struct muse_context *ctx, int32_t seq);
/* Paged KV (params.n_ctx_pool): take now the pool's cells sequence seq needs to hold n_pos
 * positions, so that evaluating up to there cannot fail for want of cells. Errors:
 * MUSE_ERR_CONTEXT (the pool is full, or n_pos > n_ctx), MUSE_ERR_INVALID_ARG (bad id). Without a
 * pool: checks only. */
muse_status muse_seq_reserve(struct muse_context *ctx, int32_t seq, int32_t n_pos, struct muse_error *err);
/* KV cells in use and in all: with a pool, the cells taken from it and its size; without, the
 * positions the sequences hold and n_seq_max x n_ctx. */
void muse_context_kv_cells(const struct muse_context *ctx, int64_t *used, int64_t *total);
/* muse_kv_clear / muse_kv_truncate for sequence seq. Errors: MUSE_ERR_INVALID_ARG (bad id, or as
 * muse_kv_truncate). */
muse_status muse_seq_clear(struct muse_context *ctx, int32_t seq, struct muse_error *err);
muse_status muse_seq_truncate(struct muse_context *ctx, int32_t seq, int32_t n_keep, struct muse_error *err);

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

/*
 * A mixed sequence of tokens and embedding rows (a prompt with images), evaluated as one sequence
 * and chunked by n_batch like muse_eval, whatever its text/row boundaries: position i is the row
 * rows[i] ([n_embd] f32, read during the call only) when rows != NULL and rows[i] != NULL, else the
 * token tokens[i] (whose value is then ignored: callers may keep a placeholder id there). Logits
 * as muse_eval. Each row gives exactly the result muse_eval / muse_eval_embd gives it in any split.
 * Errors: those of muse_eval (an out-of-range id at a token position).
 */
muse_status muse_eval_mixed(struct muse_context *ctx, const int32_t *tokens, const float *const *rows, int32_t n_tokens,
                            float *logits, int logits_all, struct muse_error *err);

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
/* muse_kv_checkpoint_create for sequence seq: the checkpoint saves and restores that sequence's
 * rings. Errors: MUSE_ERR_INVALID_ARG (bad id), MUSE_ERR_NOMEM. */
muse_status muse_seq_checkpoint_create(struct muse_context *ctx, int32_t seq, struct muse_kv_checkpoint **out,
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

/* ---- continuous batching (the server's loop; docs/server.md "Continuous batching") -------------
 * A stepper (src/gen/stepper.c): threads that each drive one sequence of a shared context (a
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
 * takes up to 4x n_prefill_rows per step (its prefill speed). A step that holds a chunk of a prompt
 * it does not finish, or more than n_prefill_rows rows of one (a lone prompt's step, also where it
 * ends a request: a caller that sends a long prompt in parts ends one every few steps), is
 * stopped within a few milliseconds when a sequence with no rows in it joins
 * or sends a request (muse_context_set_abort: the stepper sets its own on the context): the step
 * counts as not run, the newcomer's rows go in the next, and the stopped rows run again (the CPU
 * devices; on a GPU device and under tensor parallelism the step finishes first). A
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
    uint64_t n_preempted;  /* steps stopped for a newcomer (their rows ran again later) */
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
int muse_stepper_leave(struct muse_stepper *st, int32_t seq);

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

/* ---- tensor parallelism over MPI (docs/tensor-parallel.md) -------------------------------------
 * One model split across the N processes of an MPI job (mpirun -np N ...), one rank each: every
 * rank holds its share of the heads, the FFN and the KV cache, and they compute every forward
 * together, with two all-reduces per layer. In each process call muse_tp_init(N, ...) first; from
 * then on muse_model_load gives this rank its share of the text model (one text model per job).
 * Rank 0 uses the model as usual (contexts, muse_decode, sessions, the server); ranks 1..N-1 call
 * muse_tp_worker, which does what rank 0's calls need of them until rank 0 calls muse_tp_finish.
 * Under TP, image rows, feature rows (the DFlash drafter) and the layer hooks are refused. The
 * calls that talk to the group are made by the thread running a forward or changing a context,
 * one at a time (MPI_THREAD_SERIALIZED).
 */

/* Join the MPI job as one of its n_ranks ranks (its size must be n_ranks); bf16: all-reduce
 * payloads as bf16 (half the bytes; the sums stay f32). *rank: this process's rank. Errors:
 * MUSE_ERR_UNSUPPORTED (a build without MPI), MUSE_ERR_INVALID_ARG (a job of another size). */
muse_status muse_tp_init(int32_t n_ranks, int bf16, int32_t *rank, struct muse_error *err);
/* The group's size and this process's rank (1 and 0 without a group). */
int32_t muse_tp_size(void);
int32_t muse_tp_rank(void);
/* Ranks 1..N-1: follow rank 0 until it finishes (then MUSE_OK). A rank whose state would differ
 * from rank 0's ends the job with a message (MPI_Abort). */
muse_status muse_tp_worker(struct muse_model *model, struct muse_error *err);
/* Rank 0: tell the other ranks to stop; every rank: leave the group. Safe without a group. */
void muse_tp_finish(void);
/* What this rank's collectives have done: all-reduce calls, floats reduced, bytes sent, seconds. */
struct muse_tp_stats {
    int64_t n_allreduce, floats_reduced, bytes_sent;
    double seconds;
};
void muse_tp_get_stats(struct muse_tp_stats *s);

/* ---- DFlash block drafter (speculative decoding; docs/speculative.md, spec dflash.md) -------
 * A muse_drafter is a loaded `general.architecture = dflash` GGUF bound to its target model: its
 * own weights are views into its mmap'd file; the token embedding and the LM head are BORROWED
 * from the target (pointers into the target model, never copied), so the target model must
 * outlive the drafter. Read-only after loading: any number of threads and draft contexts may
 * share one drafter.
 *
 * A muse_draft_ctx is one sequence's drafter state: the drafter's own KV ring (per layer, the
 * context keys/values of committed target positions), its activations, and the target context
 * whose backend, kernels and thread pool it runs on. The ring only ever holds committed positions
 * 0..n_past-1 (features of tokens already in the target's KV cache); a block is drafted for the
 * anchor at position P = n_past. A draft context and its target context share one backend state:
 * use both from one thread at a time.
 */
struct muse_drafter;
struct muse_draft_ctx;

struct muse_drafter_params {
    int32_t reserved;             /* no options yet; keep the struct for ABI stability */
};

/* Defaults for muse_drafter_load. */
struct muse_drafter_params muse_drafter_default_params(void);

/*
 * mmap and load a DFlash drafter GGUF for `target`. On success *out owns a new drafter (free with
 * muse_drafter_free before the target model). Errors (one line, naming the key or tensor):
 * MUSE_ERR_IO (open/mmap), MUSE_ERR_FORMAT (malformed file or metadata), MUSE_ERR_UNSUPPORTED
 * (not a dflash file, or a DFlash2/DSpark/causal/other variant muse does not run),
 * MUSE_ERR_MISSING (a required key or tensor, e.g. tokenizer.ggml.mask_token_id),
 * MUSE_ERR_SHAPE (a tensor with the wrong shape or type; a width, vocabulary or target layer id
 * that does not fit the target), MUSE_ERR_NOMEM. err may be NULL.
 */
muse_status muse_drafter_load(const char *path, const struct muse_model *target, struct muse_drafter_params params,
                              struct muse_drafter **out, struct muse_error *err);

/* Free a drafter (NULL is fine). Every draft context made from it must be freed first. */
void muse_drafter_free(struct muse_drafter *drafter);

/* Drafter facts (thread-safe, never fail). block_size: rows of a block INCLUDING the anchor (so a
 * block proposes block_size - 1 drafts); n_features: floats per captured feature row
 * (n_target_layers * n_embd); target_layer(i): the target layer whose INPUT residual is slot i of
 * a feature row (i < n_target_layers; -1 when out of range); n_swa: the drafter's sliding window. */
int32_t muse_drafter_block_size(const struct muse_drafter *drafter);
int32_t muse_drafter_mask_token(const struct muse_drafter *drafter);
int32_t muse_drafter_n_features(const struct muse_drafter *drafter);
int32_t muse_drafter_n_target_layers(const struct muse_drafter *drafter);
int32_t muse_drafter_target_layer(const struct muse_drafter *drafter, int32_t i);
int32_t muse_drafter_n_swa(const struct muse_drafter *drafter);
/* A one-line description, written into buf (always NUL-terminated). */
void muse_drafter_desc(const struct muse_drafter *drafter, char *buf, size_t size);

struct muse_draft_ctx_params {
    uint32_t n_ring;              /* ring cells per layer; 0 = pad32(window + block_size + 1) (spec 2.2);
                                     at least window + block_size - 1 (more allows deeper rollbacks) */
    uint32_t n_batch;             /* most feature rows per injection; 0 = the target context's n_batch */
    enum muse_kv_type kv_type;    /* ring storage; default MUSE_KV_TYPE_F16 (llama.cpp's drafter KV) */
    int32_t seq;                  /* the target context's sequence it drafts for (default 0) */
};

/* Defaults for muse_draft_ctx_create. */
struct muse_draft_ctx_params muse_draft_ctx_default_params(void);

/*
 * Create an empty draft context (n_past = 0) for `drafter` running on `target`'s backend. The
 * target context must belong to the drafter's target model and be empty or be cleared/kept in
 * step by the caller; it must outlive the draft context. Grows the target context's backend
 * scratch when the drafter needs more (the only time anything is reallocated; not concurrently
 * with a call on the target). Errors: MUSE_ERR_INVALID_ARG (another model's context, a ring too
 * small for the window and block, a bad KV type), MUSE_ERR_NOMEM.
 */
muse_status muse_draft_ctx_create(const struct muse_drafter *drafter, struct muse_context *target,
                                  struct muse_draft_ctx_params params, struct muse_draft_ctx **out,
                                  struct muse_error *err);

/* Free a draft context (NULL is fine). The target context is not touched. */
void muse_draft_ctx_free(struct muse_draft_ctx *dc);

/* Positions held by the ring: features of positions 0..n_past-1 have been injected. */
int32_t muse_draft_n_past(const struct muse_draft_ctx *dc);
/* Ring cells per layer (as resolved at creation). */
uint32_t muse_draft_n_ring(const struct muse_draft_ctx *dc);

/* Forget every position (n_past = 0). Cannot fail. */
void muse_draft_clear(struct muse_draft_ctx *dc);

/*
 * Copy src's ring and position into dst (an explicit O(ring) copy, e.g. for a server slot that
 * reuses another's prefix along with the target's KV cache). Both must be made for the same
 * drafter with the same ring size and type. Errors: MUSE_ERR_INVALID_ARG otherwise.
 */
muse_status muse_draft_ctx_copy(struct muse_draft_ctx *dst, const struct muse_draft_ctx *src, struct muse_error *err);

/*
 * Roll the ring back to positions 0..n_keep-1 (after the target rolled back: rejected verify
 * rows, a reused prefix). Errors: MUSE_ERR_INVALID_ARG when n_keep > n_past, or when the ring no
 * longer holds the window a draft at n_keep needs (then clear and re-inject).
 */
muse_status muse_draft_truncate(struct muse_draft_ctx *dc, int32_t n_keep, struct muse_error *err);

/*
 * Pass A + B: encode n_rows feature rows ([n_rows][n_features] f32, the target residuals of
 * positions n_past, n_past+1, ...) and write their keys/values into the ring; n_past += n_rows.
 * Only the last n_ring rows of a call are kept (older ones could never be attended). Errors:
 * MUSE_ERR_INVALID_ARG (n_rows < 1, NULL features), MUSE_ERR_CONTEXT (past the target context).
 */
muse_status muse_draft_inject(struct muse_draft_ctx *dc, const float *features, int32_t n_rows,
                              struct muse_error *err);

/*
 * muse_eval on the target context with feature capture, then inject every row: evaluates tokens
 * at positions n_past.. (the ring and the target must be in step: muse_draft_n_past(dc) ==
 * muse_context_n_past(target)), in chunks of the draft context's n_batch. logits / logits_all as
 * muse_eval. features: NULL, or [n_tokens][n_features] f32 receiving the captured rows (raw: no
 * NaN/inf clamp). Errors: those of muse_eval, MUSE_ERR_INVALID_ARG when out of step; on error the
 * chunks already evaluated stay in both (n_past tells how far).
 */
muse_status muse_draft_eval(struct muse_draft_ctx *dc, const int32_t *tokens, int32_t n_tokens, float *logits,
                            int logits_all, float *features, struct muse_error *err);

/* One drafted block. The pointers are owned by the draft context and valid until its next call. */
struct muse_draft_block {
    int32_t anchor_pos;           /* P: the anchor's position (= n_past when drafted) */
    int32_t n_rows;               /* rows run: [anchor, MASK x (n_rows - 1)] at positions P..P+n_rows-1 */
    int32_t n_drafts;             /* n_rows - 1 */
    int32_t row0_argmax;          /* argmax of the anchor row's logits (discarded by DFlash) */
    const int32_t *tokens;        /* [n_drafts] argmax of rows 1.. (ties to the lower id) */
    const float *conf;            /* [n_drafts] full-vocabulary softmax probability of each draft over
                                     the raw logits (TensorSharp's confidence, spec 3.6) */
    const float *conf_top10;      /* [n_drafts] the top probability after a softmax over the row's
                                     10 highest raw logits (what llama.cpp compares with p_min) */
    const float *logits;          /* [n_rows][n_vocab] raw logits (target LM head; no logit scale,
                                     no softcap); row 0 is the anchor's */
};

/*
 * Pass C: draft a block for `anchor` at position P = n_past over [ring window | block], non-causal
 * inside the block. n_rows: 0 = block_size, else 2..block_size (llama.cpp runs n_max + 1 rows,
 * see muse_draft_rows). The ring is unchanged (the block's keys are never committed). Errors:
 * MUSE_ERR_INVALID_ARG (anchor out of the vocabulary, bad n_rows).
 */
muse_status muse_draft_block(struct muse_draft_ctx *dc, int32_t anchor, int32_t n_rows, struct muse_draft_block *out,
                             struct muse_error *err);

/* llama.cpp's block rows for --spec-draft-n-max n_max: min(max(n_max, 1), block_size - 1) + 1. */
int32_t muse_draft_rows(const struct muse_drafter *drafter, int32_t n_max);

/* llama.cpp's --spec-draft-p-min gate: the number of leading drafts kept, stopping at the first
 * whose conf_top10 is below p_min (p_min <= 0 keeps all). */
int32_t muse_draft_gate_p_min(const struct muse_draft_block *block, float p_min);

/* TensorSharp's cumulative gate: the number of leading drafts kept while the running product of
 * conf stays >= floor (floor <= 0 keeps all). */
int32_t muse_draft_gate_cumulative(const struct muse_draft_block *block, float floor);

/* ---- quantization (`muse quantize`; docs/quantize.md) --------------------------------------
 * What llama-quantize does without an importance matrix: read an F32/F16/BF16 GGUF of a
 * muse-glimmer model (or a dflash drafter) and write the same file with its matrices
 * quantized, tensor for tensor and byte for byte what llama-quantize writes for the same input
 * and options (llama.cpp 0c1e570): its TYPE names and per-tensor rules (output / token_embd /
 * attn_v / ffn_down upgrades by layer, fallbacks when a row is not a multiple of the block
 * size, 1-D tensors and norms kept), its --tensor-type overrides, its tensor order and metadata.
 * IQ types are refused (use llama-quantize; muse reads them).
 */

/* One tensor of the plan, as the progress callback sees it (valid during the call only). */
struct muse_quantize_tensor {
    int32_t index, n_tensors;     /* 0-based position in llama-quantize's order, and the count */
    const char *name;
    const char *type_in;          /* ggml type names ("f16", "q4_K", ...) */
    const char *type_out;         /* == type_in when the tensor is copied unchanged */
    int32_t n_dims;
    int64_t ne[4];
    uint64_t bytes_in, bytes_out;
    int32_t fallback;             /* 1: ne[0] did not fit the chosen type, type_out is its fallback */
    int32_t manual;               /* 1: type_out came from tensor_types / output / token-embedding type */
};
/* Called once per tensor after it is written (or planned, for a dry run); as muse_progress_fn: 0 to
 * go on, nonzero to cancel (muse_quantize then fails with MUSE_ERR_CANCELLED, out_path removed). */
typedef int (*muse_quantize_progress_fn)(void *user, const struct muse_quantize_tensor *tensor);

struct muse_quantize_params {
    const char *type;                   /* llama-quantize's TYPE: "Q4_K_M", "q8_0", "Q4_K" (= Q4_K_M),
                                           or the llama_ftype number ("15"); required */
    int32_t n_threads;                  /* <= 0: the physical cores; the output never depends on it */
    const char *const *tensor_types;    /* NULL-terminated "PATTERN=TYPE" strings (--tensor-type): the
                                           first pattern (a regex, lower-cased, searched in the name)
                                           that matches a quantizable tensor sets its ggml type; NULL = none */
    const char *output_tensor_type;     /* ggml type of output.weight (--output-tensor-type); NULL = rules */
    const char *token_embedding_type;   /* ggml type of token_embd.weight (--token-embedding-type); NULL = rules */
    int32_t pure;                       /* 1: no mixture rules, every matrix gets TYPE's type (--pure) */
    int32_t leave_output_tensor;        /* 1: output.weight is copied unchanged (--leave-output-tensor) */
    int32_t allow_requantize;           /* 1: quantized sources are dequantized first (--allow-requantize) */
    int32_t dry_run;                    /* 1: plan and report only; out_path is not written (may be NULL) */
    muse_quantize_progress_fn progress; /* once per tensor after it is written (or planned); may be NULL */
    void *progress_user;
};

/* Totals of a run (or of the plan, for a dry run). */
struct muse_quantize_stats {
    int32_t n_tensors, n_converted, n_fallback;
    int64_t n_elements;
    uint64_t bytes_in, bytes_out;       /* tensor data, without the padding */
    int32_t ftype;                      /* the general.file_type written */
};

/* Defaults: type NULL (must be set), all threads, no overrides, nothing else. */
struct muse_quantize_params muse_quantize_default_params(void);

/*
 * Quantize in_path into out_path (created or truncated; removed again on failure). stats may be
 * NULL. Errors (one line): MUSE_ERR_INVALID_ARG (unknown TYPE or ggml type, a malformed or
 * unmatched PATTERN=TYPE, in_path == out_path, a type that does not fit a tensor's rows),
 * MUSE_ERR_UNSUPPORTED (an IQ or imatrix-only TYPE, an architecture other than muse-glimmer /
 * dflash, a quantized source tensor without allow_requantize, a source type that cannot be
 * converted), MUSE_ERR_IO / MUSE_ERR_FORMAT (reading or writing the files), MUSE_ERR_MISSING
 * (<arch>.block_count), MUSE_ERR_NOMEM, MUSE_ERR_CANCELLED (the progress callback asked). Thread-safe
 * for distinct files; runs its own thread pool.
 */
muse_status muse_quantize(const char *in_path, const char *out_path, const struct muse_quantize_params *params,
                          struct muse_quantize_stats *stats, struct muse_error *err);

/* ---- images and the vision projector (mmproj) ------------------------------------------------
 * The image path of Muse-Glimmer (docs/vision.md, ../shared/spec/vision.md), as llama.cpp's mtmd
 * computes it: decode (stb_image semantics) -> grid search -> Pillow-exact Lanczos-3 resize ->
 * normalise -> the ViT tower of the mmproj file -> pixel shuffle -> adapter. The result is
 * n_tokens rows of n_embd_out floats (the text model's n_embd), to be evaluated with
 * muse_eval_embd between the tokens <|image_start|> and <|image_end|>.
 *
 *   struct muse_image img;            muse_image_load(path, 0, &img, &err);
 *   struct muse_vision_input in;      muse_vision_preprocess(vision, &img, 0, &in, &err);
 *   float *rows = malloc(in.geom.n_tokens * n_embd_out * sizeof(float));
 *   muse_vision_encode(vision, &in, rows, &err);
 *   muse_vision_input_free(&in); muse_image_free(&img);
 *
 * Thread-safety: the image functions are pure (any thread). A muse_vision is read-only after
 * loading except for its encoder (thread pool and scratch): muse_vision_encode must not run
 * concurrently on the same object; every other muse_vision_* query may.
 */

/* A decoded image: 8-bit RGB, interleaved, row-major, top row first. Passive data; rgb is owned by
 * the struct (malloc'd by the library, released by muse_image_free). */
struct muse_image {
    int32_t width;
    int32_t height;
    int32_t channels_in_file;     /* what the file holds: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA */
    uint8_t *rgb;                 /* [height][width][3] */
};

/* The default decompression-bomb limit of muse_image_decode: 2^26 pixels (8192 x 8192, 192 MiB as
 * RGB). Images with more pixels are refused from their header, before any pixel is allocated. */
#define MUSE_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)1 << 26)

/*
 * Decode an image file held in memory: PNG (8/16-bit; 16-bit reduced as stb_image does), JPEG
 * (baseline and progressive), GIF (the first frame), BMP, with stb_image's semantics and
 * req_comp = 3 (what llama.cpp's mtmd calls): alpha is dropped, not composited; grey is
 * replicated; no EXIF orientation. WebP (static, through libwebp) too, alpha dropped likewise.
 * max_pixels: refuse images with more than this many pixels (0 = MUSE_IMAGE_MAX_PIXELS_DEFAULT);
 * the size is read from the header first and nothing is decoded past the limit; the decoder's own
 * allocations are capped to what an image of that size needs (a zlib bomb fails instead of
 * growing). On success *out owns a new pixel buffer (free with muse_image_free); on error *out is
 * zeroed. Errors: MUSE_ERR_FORMAT (empty, truncated or corrupt data, zero size),
 * MUSE_ERR_UNSUPPORTED (not one of the formats above, animated WebP, more pixels than max_pixels),
 * MUSE_ERR_INVALID_ARG, MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_image_decode(const void *data, size_t size, int64_t max_pixels, struct muse_image *out,
                              struct muse_error *err);

/* Read a file and muse_image_decode it. Adds MUSE_ERR_IO (the message names the file). */
muse_status muse_image_load(const char *path, int64_t max_pixels, struct muse_image *out, struct muse_error *err);

/* Release an image's pixels and zero the struct (NULL or a zeroed struct are fine). */
void muse_image_free(struct muse_image *img);

/*
 * Resize to width x height with Pillow's Image.resize(..., LANCZOS) arithmetic, bit for bit (Q22
 * fixed-point Lanczos-3, horizontal pass first, a pass whose size is unchanged is skipped; the same
 * size is a copy). *out owns a new buffer. Errors: MUSE_ERR_INVALID_ARG (sizes < 1),
 * MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_image_resize(const struct muse_image *src, int32_t width, int32_t height, struct muse_image *out,
                              struct muse_error *err);

/* Write an image as an 8-bit RGB PNG (stb_image_write). Errors: MUSE_ERR_IO, MUSE_ERR_INVALID_ARG. */
muse_status muse_image_save_png(const struct muse_image *img, const char *path, struct muse_error *err);

/*
 * llama.cpp's muse_glimmer_grid_size (spec 4.2): the merged-token grid cols x rows for an
 * img_w x img_h image, cells of `cell` pixels (patch_size * n_merge = 28) and at most max_tokens
 * tokens (the grid never grows to fill the cap; when no floor/ceil candidate fits, rounding may
 * exceed it). The resized image is (cols * cell) x (rows * cell). Pure; inputs must be >= 1.
 */
void muse_image_grid(int32_t img_w, int32_t img_h, int32_t cell, int32_t max_tokens, int32_t *cols, int32_t *rows);

struct muse_vision;

/* Stage hook (tests, debugging): called by muse_vision_encode with each intermediate result,
 * data = [n_rows][n_cols] f32, valid only during the call. Stages: "after_posemb" (raster order),
 * "after_pre_ln" (window order), "layer<i>_out_window_order" (the residual after block i),
 * "after_post_ln_window_order", "after_inv_perm" (raster), "pixel_shuffle", "adapter0", "adapter1"
 * (after their GELU), "projected". Called from the thread that runs muse_vision_encode. */
typedef void (*muse_vision_stage_fn)(void *user, const char *stage, const float *data, int64_t n_rows,
                                     int64_t n_cols);

struct muse_vision_params {
    const char *backend;          /* "cpu" (threads + SIMD, default) or "ref" (the plain-C oracle, 1 thread) */
    uint32_t n_threads;           /* 0 = physical cores (ref: 1) */
    muse_vision_stage_fn stage;   /* NULL = none */
    void *stage_user;
    muse_progress_fn progress;    /* NULL = none; called after each tower layer (done = 1 .. total =
                                     n_layer) from the encoding thread; nonzero cancels the encode */
    void *progress_user;
};

/* Defaults for muse_vision_load. */
struct muse_vision_params muse_vision_default_params(void);

/*
 * mmap and load a Muse-Glimmer vision projector (an mmproj GGUF: general.architecture = 'clip',
 * clip.projector_type = 'muse-glimmer'), and create its encoder (backend, thread pool). Weights stay
 * in the mapping in their stored types (quantized matrices are multiplied as they are); only the
 * small patch kernel and position table are converted to F32 when stored as F16/BF16.
 * On success *out owns a new object (muse_vision_free). Errors, one line each: MUSE_ERR_IO,
 * MUSE_ERR_FORMAT (malformed file or key), MUSE_ERR_UNSUPPORTED (a text model or another projector
 * type is named as such; an unknown tensor; spatial_merge_size != 2), MUSE_ERR_MISSING (a required
 * key or tensor, named), MUSE_ERR_SHAPE (a tensor's shape, type or block alignment: expected and
 * found), MUSE_ERR_INVALID_ARG (unknown backend), MUSE_ERR_NOMEM.
 */
muse_status muse_vision_load(const char *path, struct muse_vision_params params, struct muse_vision **out,
                             struct muse_error *err);

/* Free (NULL is fine). */
void muse_vision_free(struct muse_vision *vision);

/* The projector's hyperparameters, as used (passive data). */
struct muse_vision_info {
    int32_t n_layer, n_embd, n_ff, n_head, head_dim;
    int32_t n_global_layers;      /* layers attending over the whole image; the others attend per window */
    int32_t patch_size;           /* pixels per patch side */
    int32_t n_merge;              /* pixel-shuffle factor (2) */
    int32_t window_side;          /* patches per window side = the position table's side */
    int32_t n_embd_merged;        /* n_embd * n_merge^2: the adapter's input width */
    int32_t n_mm0, n_mm1;         /* the adapter's hidden widths */
    int32_t n_embd_out;           /* width of the output rows: the text model's n_embd */
    int32_t image_size;           /* clip.vision.image_size (nominal; preprocessing ignores it) */
    int32_t default_max_tokens;   /* 4096 */
    float eps;
    float image_mean[3], image_std[3];
    int32_t n_threads;            /* the encoder's threads */
    const char *backend;          /* "cpu" or "ref" */
};
void muse_vision_get_info(const struct muse_vision *vision, struct muse_vision_info *out);

/* The width of muse_vision_encode's rows (mm.2's rows; equals the text model's n_embd). */
int32_t muse_vision_n_embd_out(const struct muse_vision *vision);

/* What preprocessing does with an image of src_w x src_h pixels. */
struct muse_image_geometry {
    int32_t src_w, src_h;
    int32_t target_w, target_h;   /* the resized image */
    int32_t grid_tok_cols, grid_tok_rows; /* merged tokens per row / column */
    int32_t n_tokens;             /* grid_tok_cols * grid_tok_rows: the rows muse_vision_encode writes */
    int32_t patches_w, patches_h; /* target / patch_size */
    int32_t n_windows;            /* attention windows of the windowed layers */
    int32_t resampled;            /* nonzero when the size changes (else the resize is a copy) */
};

/*
 * The geometry for an image of src_w x src_h with at most max_tokens merged tokens (0 = 4096,
 * llama.cpp's default; --image-max-tokens). Errors: MUSE_ERR_INVALID_ARG (sizes < 1, max_tokens <
 * 0, a grid too large for int32). Thread-safe.
 */
muse_status muse_vision_geometry(const struct muse_vision *vision, int32_t src_w, int32_t src_h, int32_t max_tokens,
                                 struct muse_image_geometry *out, struct muse_error *err);

/* The token count of muse_vision_geometry, or -1 on bad arguments. */
int32_t muse_vision_n_tokens(const struct muse_vision *vision, int32_t src_w, int32_t src_h, int32_t max_tokens);

/* A preprocessed image: passive data owned by the struct (muse_vision_input_free). */
struct muse_vision_input {
    struct muse_image_geometry geom;
    struct muse_image resized;    /* the resized RGB, target_w x target_h */
    float *pixels;                /* [3][target_h][target_w], planar, (u/255 - mean) / std in f32 */
};

/*
 * Grid search, Lanczos resize and normalisation of img for this projector (max_tokens as in
 * muse_vision_geometry). On success *out owns its buffers; on error it is zeroed. Errors as
 * muse_vision_geometry, plus MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_vision_preprocess(const struct muse_vision *vision, const struct muse_image *img, int32_t max_tokens,
                                   struct muse_vision_input *out, struct muse_error *err);

void muse_vision_input_free(struct muse_vision_input *in);

/*
 * Run the tower and the adapter on a preprocessed image: out = [in->geom.n_tokens][n_embd_out]
 * f32 rows in raster order of merged tokens (caller-allocated). Allocates the activations for this
 * image (about (4 * n_patches * n_embd + a few chunk buffers) floats) and frees them before
 * returning. Not reentrant per object. Errors: MUSE_ERR_INVALID_ARG (an input whose geometry does
 * not fit this projector), MUSE_ERR_NOMEM, MUSE_ERR_CANCELLED (the progress hook said stop).
 */
muse_status muse_vision_encode(struct muse_vision *vision, const struct muse_vision_input *in, float *out,
                               struct muse_error *err);

#ifdef __cplusplus
}
#endif
