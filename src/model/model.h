/*
 * model.h - the internals behind the public muse_model / muse_context handles (include/muse.h),
 * for other floors that need the hyperparameters or weights directly (tools, drafter, server).
 */
#pragma once

#include "gguf/gguf.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "model/forward.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/tp.h"
#include "model/weights.h"
#include "muse.h"

struct muse_model {
    struct muse_gguf *gguf;    /* owns the mapping every weight view points into */
    struct muse_hparams hp;
    struct muse_weights w;
    /* tensor parallel (model/tp.h): the group, and this rank's copies of its row-parallel
     * columns; hp and w are this rank's share. NULL: the whole model */
    struct muse_tp *tp;
    struct muse_tp_owned *tp_owned;
    struct muse_hparams *hp_full;  /* tensor parallel: the whole model's (descriptions) */
};

struct muse_context {
    struct muse_model *model;
    struct muse_context_params params;  /* as resolved (n_ctx, n_batch, n_seq_max, backend filled in) */
    struct muse_device *dev;            /* shared with every other user of the same device */
    struct muse_program prog;           /* the text forward for batches of up to n_batch rows */
    /* params.gpu_layers (-ngl): prog runs layers 0..split-1 on dev, prog_hi the rest and the head on
     * dev_hi (the cpu), split_rows [n_batch][n_embd] the residual between them; dev_hi NULL: no split */
    struct muse_device *dev_hi;
    struct muse_program prog_hi;
    uint32_t split;
    float *split_rows;
    struct muse_kv_cache **kv;          /* [n_seq_max] each sequence's cache; kv[0] is the context's own */
    struct muse_kv_pool pool;           /* params.n_ctx_pool: the full-attention cells the caches share */
    struct muse_kv_layer **kv_layers;   /* [n_seq_max] kv[s]->layers, bound to every run */
    int32_t *pos;                       /* [n_batch] positions of the current micro-batch */
    int32_t *out_rows;                  /* [n_batch] its output rows */
    /* the feature rows (muse_context_set_features): [n_batch][n_features * n_embd], host memory
     * (a device with its own memory reads them back after the run) */
    float *features;
    int32_t *feature_layers;            /* [n_features] */
    int32_t n_features;
    int32_t n_last_rows;                /* rows of the last forward (its feature and embedding rows) */
    float *embd;                        /* params.embeddings: [n_batch][n_embd] final hidden states (host) */
    /* tensor parallel: the context's id in the group's commands; tp_lead: rank 0's, which sends
     * every change of its state to the other ranks (their copies do not send) */
    int32_t tp_id;
    bool tp_lead;
    /* muse_context_set_abort: polled between the stages of a muse_decode forward (NULL: never) */
    int (*abort_fn)(void *user);
    void *abort_user;
};

/*
 * muse_eval with logits for the rows first_row..n_tokens-1 only: logits = [n_tokens - first_row]
 * [n_vocab] (NULL or first_row = n_tokens: none). The head runs only for those rows, as llama.cpp
 * computes only the outputs a batch asks for (perplexity scores the second half of a chunk).
 * Errors: those of muse_eval, MUSE_ERR_INVALID_ARG when first_row is outside 0..n_tokens.
 */
muse_status muse_eval_rows(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, int32_t first_row,
                           float *logits, struct muse_error *err);

/*
 * Copy rows first..first+n-1 of the last forward's feature rows (muse_context_features) to out:
 * [n][n_features * n_embd]. False (nothing copied) when the context writes no features or the
 * forward had fewer rows.
 */
bool muse_context_copy_features(const struct muse_context *ctx, int32_t first, int32_t n, float *out);

/* Hyperparameters / weights of a loaded model. */
const struct muse_hparams *muse_model_hparams(const struct muse_model *model);
const struct muse_weights *muse_model_weights(const struct muse_model *model);
/* The parameters: the elements of every tensor in the file (as llama.cpp's llama_model_n_params). */
uint64_t muse_model_n_params(const struct muse_model *model);
/* The parameter count as model names write it: "6M", "336M", "1.5B", "30B" (below 10 of the unit,
 * one decimal unless it is .0; from 10, whole units). Returns buf. */
const char *muse_model_size_label(uint64_t n_params, char *buf, size_t size);
