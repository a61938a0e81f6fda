/*
 * dflash_tensors.h - the tensors of a DFlash drafter GGUF (dflash.md section 2.3) as read-only
 * views into the mapped file, bound from ONE table of descriptors (model/tensors.h, the type the
 * text model and the mmproj use too): the name (with "%u" for the layer of per-layer tensors), the
 * kind (an f32 vector, a matrix that needs a dot product, a row-gathered table), the shape in terms
 * of the hyperparameters, whether it is optional and where its view goes.
 * The shipped drafter has 3 + 11 * block_count tensors (58 for 5 layers). A tensor the table does
 * not know is an error (a DFlash2/DSpark/other variant, named), as in llama.cpp's loader.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/tensors.h"
#include "speculative/dflash_hparams.h"

struct muse_dflash_layer_weights {
    struct muse_weight attn_norm;   /* [n_embd] f32: pre-attention RMSNorm (block rows only) */
    struct muse_weight wq;          /* [n_embd] -> n_head * head_dim */
    struct muse_weight wk;          /* [n_embd] -> n_head_kv * head_dim */
    struct muse_weight wv;          /* [n_embd] -> n_head_kv * head_dim */
    struct muse_weight wo;          /* attn_output: [n_head * head_dim] -> n_embd */
    struct muse_weight attn_q_norm; /* [head_dim] f32: per-head RMSNorm of q */
    struct muse_weight attn_k_norm; /* [head_dim] f32: per-head RMSNorm of k (context AND block keys) */
    struct muse_weight ffn_norm;    /* [n_embd] f32 */
    struct muse_weight ffn_gate;    /* [n_embd] -> n_ff */
    struct muse_weight ffn_up;      /* [n_embd] -> n_ff */
    struct muse_weight ffn_down;    /* [n_ff] -> n_embd */
};

struct muse_dflash_weights {
    struct muse_weight fc;          /* [n_features] -> n_embd: feature fusion, no bias */
    struct muse_weight fc_scale;    /* {1} f32, optional: fc output *= it (llama.cpp's fc.scale) */
    struct muse_weight enc_norm;    /* enc.output_norm [n_embd] f32: RMSNorm after fc */
    struct muse_weight output_norm; /* [n_embd] f32: the decoder's final norm */
    struct muse_weight token_embd;  /* optional own [n_vocab][n_embd] (absent in the shipped file: borrowed) */
    struct muse_weight output;      /* optional own LM head [n_embd] -> n_vocab (likewise) */
    struct muse_dflash_layer_weights *layers; /* [n_layer], owned */
};

/* The dimension ids of the tensor table muse_dflash_table. */
enum muse_dflash_dim {
    MUSE_DFLASH_DIM_NONE = 0,
    MUSE_DFLASH_DIM_ONE,      /* 1 (fc.scale) */
    MUSE_DFLASH_DIM_EMBD,     /* n_embd */
    MUSE_DFLASH_DIM_FEAT,     /* n_target_layers * n_embd */
    MUSE_DFLASH_DIM_Q,        /* n_head * head_dim */
    MUSE_DFLASH_DIM_KV,       /* n_head_kv * head_dim */
    MUSE_DFLASH_DIM_HEAD,     /* head_dim */
    MUSE_DFLASH_DIM_FF,       /* n_ff */
    MUSE_DFLASH_DIM_VOCAB,    /* the target's vocabulary */
    MUSE_DFLASH_DIM_COUNT
};

/* The tensors of a drafter (dflash.md 2.3) in file order, then the optional tensors llama.cpp's
 * dflash loader also accepts; binding into struct muse_dflash_weights / muse_dflash_layer_weights:
 * a table of model/tensors.h, bound in table order (each per-layer entry for every layer at once). */
extern const struct muse_tensor_table muse_dflash_table;

/* dims[MUSE_DFLASH_DIM_COUNT] of a drafter with hyperparameters hp for a target of n_vocab tokens. */
void muse_dflash_dims(int64_t *dims, const struct muse_dflash_hparams *hp, int64_t n_vocab);

/*
 * Bind every tensor of `gguf` described by `hp` (n_vocab: the target's vocabulary, the rows an
 * own token_embd/output must have). Errors name the tensor:
 *   MUSE_ERR_MISSING      a required tensor is absent;
 *   MUSE_ERR_SHAPE        a wrong shape ("expected {a, b}, found {c, d}") or a type unusable there;
 *   MUSE_ERR_UNSUPPORTED  a type without a matmul kernel, or a tensor that is not part of a plain
 *                         DFlash drafter (the message says which variant it belongs to);
 *   MUSE_ERR_NOMEM.
 * The views point into `gguf`, which must outlive *w. Free with muse_dflash_weights_free.
 */
muse_status muse_dflash_weights_bind(struct muse_dflash_weights *w, const struct muse_dflash_hparams *hp, int64_t n_vocab,
                                     const struct muse_gguf *gguf, struct muse_error *err);

void muse_dflash_weights_free(struct muse_dflash_weights *w);
