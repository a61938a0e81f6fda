/*
 * model.h - the internals behind the public muse_model / muse_context handles (include/muse.h),
 * for other floors that need the hyperparameters or weights directly (tools, drafter, server).
 */
#pragma once

#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/forward.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "muse.h"

struct muse_model {
    struct muse_gguf *gguf;    /* owns the mapping every weight view points into */
    struct muse_hparams hp;
    struct muse_weights w;
};

struct muse_context {
    struct muse_model *model;
    struct muse_context_params params;  /* as resolved (n_ctx, n_batch, backend filled in) */
    const struct muse_backend_ops *ops;
    void *backend_state;
    struct muse_run_state *rs;
    struct muse_kv_cache *kv;
    int32_t *pos;                       /* [n_batch] positions of the current micro-batch */
    struct muse_backend_plan plan;      /* what backend_state was created for */
};

/*
 * Grow the context's backend scratch so that it also covers `need` (every size the maximum of
 * both; n_threads is the context's): for a second network that runs on the same backend state
 * and thread pool (the DFlash drafter). Re-creates the backend state only when something grows;
 * not while the context is in use. Errors: those of the backend's init (the old state is kept).
 */
muse_status muse_context_reserve(struct muse_context *ctx, const struct muse_backend_plan *need, struct muse_error *err);

/*
 * muse_eval with logits for the rows first_row..n_tokens-1 only: logits = [n_tokens - first_row]
 * [n_vocab] (NULL or first_row = n_tokens: none). The head runs only for those rows, as llama.cpp
 * computes only the outputs a batch asks for (perplexity scores the second half of a chunk).
 * Errors: those of muse_eval, MUSE_ERR_INVALID_ARG when first_row is outside 0..n_tokens.
 */
muse_status muse_eval_rows(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, int32_t first_row,
                           float *logits, struct muse_error *err);

/* Hyperparameters / weights of a loaded model. */
const struct muse_hparams *muse_model_hparams(const struct muse_model *model);
const struct muse_weights *muse_model_weights(const struct muse_model *model);
