/*
 * weights.h - the Muse-Glimmer tensors as read-only views into the mapped GGUF
 * (text-model.md section 4): every tensor found by name with its shape and type checked. The
 * tensors, their shapes and which are optional are the table muse_glimmer_tensors
 * (model/tensors.h); binding walks it. Optional variants handled as llama.cpp does: fused QKV
 * (+ bias) instead of Q/K/V, Q/K/V biases, and per-tensor `.scale` scalars (applied for
 * attn_q/k/v/qkv, attn_output and output; attn_gate.scale and ffn_*.scale are ignored like
 * llama.cpp's muse-glimmer graph does).
 */
#pragma once

#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/hparams.h"

struct muse_layer_weights {
    struct muse_weight attn_norm;      /* [n_embd] f32 */
    struct muse_weight wq, wk, wv;     /* [n_embd] -> n_q, n_k_gqa, n_v_gqa; absent when wqkv */
    struct muse_weight wqkv;           /* [n_embd] -> n_q + n_k_gqa + n_v_gqa (optional) */
    struct muse_weight bq, bk, bv;     /* [n_q], [n_k_gqa], [n_v_gqa] f32 (optional) */
    struct muse_weight bqkv;           /* [n_q + n_k_gqa + n_v_gqa] f32 (optional) */
    float wq_scale, wk_scale, wv_scale, wqkv_scale, wo_scale; /* 1.0 when no .scale tensor */
    bool has_wq_scale, has_wk_scale, has_wv_scale, has_wqkv_scale, has_wo_scale;
    struct muse_weight attn_q_norm;    /* [head_dim] f32 */
    struct muse_weight attn_k_norm;    /* [head_dim] f32 */
    struct muse_weight attn_gate;      /* [n_embd] -> n_q */
    struct muse_weight wo;             /* attn_output: [n_q] -> n_embd */
    struct muse_weight post_attention_norm; /* [n_embd] f32 */
    struct muse_weight ffn_norm;       /* [n_embd] f32 */
    struct muse_weight ffn_gate;       /* [n_embd] -> n_ff */
    struct muse_weight ffn_up;         /* [n_embd] -> n_ff */
    struct muse_weight ffn_down;       /* [n_ff] -> n_embd */
    struct muse_weight post_ffw_norm;  /* [n_embd] f32 */
    /* tensor parallel (model/tp.h): this rank holds a share of the heads / the FFN units, so the
     * block's output is a partial sum to all-reduce; false: the whole block (one device, or a
     * block replicated on every rank) */
    bool split_attn, split_ffn;
};

struct muse_weights {
    struct muse_weight token_embd;     /* [n_vocab][n_embd], any type with a dequantizer */
    struct muse_weight output_norm;    /* [n_embd] f32 */
    struct muse_weight output;         /* [n_embd] -> n_vocab (required: no fallback to token_embd); data
                                          NULL on tensor-parallel ranks but 0 (no head there) */
    float output_scale;                /* 1.0 when no output.scale */
    bool has_output_scale;
    int64_t n_vocab;                   /* rows of token_embd */
    struct muse_layer_weights *layers; /* [n_layer], owned */
};

/*
 * Bind every tensor of `gguf` described by `hp`. Errors name the tensor:
 *   MUSE_ERR_MISSING  a required tensor is absent;
 *   MUSE_ERR_SHAPE    wrong shape ("expected {a, b}, found {c, d}") or a type that cannot be
 *                     used there (norms must be f32; matrices need a dot product);
 *   MUSE_ERR_FORMAT   n_vocab of the tokenizer and token_embd/output disagree;
 *   MUSE_ERR_NOMEM.
 * The views point into `gguf`, which must outlive *w. Free with muse_weights_free.
 */
muse_status muse_weights_bind(struct muse_weights *w, const struct muse_hparams *hp, const struct muse_gguf *gguf,
                              struct muse_error *err);

void muse_weights_free(struct muse_weights *w);
