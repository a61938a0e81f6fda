/*
 * forward.h - the Muse-Glimmer text forward (text-model.md section 5), written as the spec
 * reads: one function per block of the layer, heavy ops through a backend (backend.h).
 *
 * State: the model (hparams + weights) is read-only; the run state holds the activations of
 * one micro-batch of at most n_batch tokens and is planned once (muse_run_state_create); the
 * KV cache is per sequence (kv_cache.h). muse_forward allocates nothing and enters the backend's
 * threads once (ops->parallel): every thread walks the same steps on its own slice, with a
 * barrier only where a step reads what other threads wrote.
 */
#pragma once

#include "backend/backend.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "muse.h"

struct muse_run_state;

/* Plan and allocate the activations for batches of up to n_batch tokens. Errors: NOMEM. */
muse_status muse_run_state_create(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                  struct muse_run_state **out, struct muse_error *err);
void muse_run_state_free(struct muse_run_state *rs);

struct muse_forward_args {
    const int32_t *tokens;   /* [n_tokens], each in 0..n_vocab-1 (checked by the caller); or NULL and: */
    const float *embd;       /* [n_tokens][n_embd] input rows used instead of token_embd rows */
    const float *const *rows; /* or NULL; else [n_tokens]: row r is rows[r] ([n_embd] f32) when non-NULL,
                                 else the token tokens[r] (a mixed batch: text and image rows) */
    const int32_t *pos;      /* [n_tokens] positions; contiguous, continuing the KV cache */
    int32_t n_tokens;        /* 1..n_batch */
    int32_t first_logit_row; /* rows first_logit_row..n_tokens-1 get logits (n_tokens: none) */
    float *logits;           /* [n_tokens - first_logit_row][n_vocab] */
    muse_layer_trace_fn trace;
    void *trace_user;
    int32_t trace_n_pos;
    muse_layer_capture_fn capture;
    void *capture_user;
    const uint8_t *capture_layers; /* NULL: capture every layer; else [n_layer], nonzero = capture it (the
                                      others skip the two barriers a capture costs) */
};

/*
 * Run one micro-batch: embed, every layer (its K/V stored into `kv` at the given positions),
 * then the head for the requested rows. The caller guarantees the positions fit the cache.
 */
void muse_forward(const struct muse_hparams *hp, const struct muse_weights *w, const struct muse_backend_ops *ops,
                  void *backend_state, struct muse_run_state *rs, struct muse_kv_cache *kv,
                  const struct muse_forward_args *args);

/* Largest matmul input dimension of the model (for backend planning). */
int64_t muse_weights_max_ne0(const struct muse_hparams *hp, const struct muse_weights *w);
