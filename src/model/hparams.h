/*
 * hparams.h - Muse-Glimmer hyperparameters read from a parsed GGUF with llama.cpp's rules
 * (../shared/spec/text-model.md section 3): required keys fail with a message naming the key,
 * optional keys take llama.cpp's defaults, scalar-or-per-layer keys accept both forms, and the
 * sliding-window pattern is read in both of its forms (u32 period or bool/int per layer).
 *
 * This is the "config" part of the four-way state split: plain, immutable after loading,
 * no pointers into the file, safe to copy and share between threads.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "muse.h"

#define MUSE_HPARAMS_MAX_LAYERS 512   /* llama.cpp's LLAMA_MAX_LAYERS */
#define MUSE_ARCH_MUSE_GLIMMER "muse-glimmer"

/* How the file stated `attention.sliding_window_pattern`. */
enum muse_swa_pattern_form {
    MUSE_SWA_PATTERN_FORM_PERIOD = 0, /* scalar u32 P: layer il is SWA iff P == 0 || il % P < P - 1 */
    MUSE_SWA_PATTERN_FORM_ARRAY  = 1, /* per-layer array (bool or int), nonzero = SWA */
    MUSE_SWA_PATTERN_FORM_COUNT
};

/* Rope scaling types llama.cpp knows; only NONE and LINEAR are supported by muse. */
enum muse_rope_scaling {
    MUSE_ROPE_SCALING_NONE   = 0,
    MUSE_ROPE_SCALING_LINEAR = 1,
    MUSE_ROPE_SCALING_COUNT
};

struct muse_hparams {
    char arch[32];                 /* general.architecture ("muse-glimmer") */
    char name[128];                /* general.name, "" when absent (informative) */
    uint32_t n_ctx_train;          /* context_length (required) */
    uint32_t n_embd;               /* embedding_length (required) */
    uint32_t n_layer;              /* block_count (required), 1..MUSE_HPARAMS_MAX_LAYERS */
    uint32_t n_vocab;              /* entries of tokenizer.ggml.tokens; 0 when the file has none */

    /* per-layer values (scalar keys are broadcast) */
    uint32_t n_ff[MUSE_HPARAMS_MAX_LAYERS];      /* feed_forward_length (default 0) */
    uint32_t n_head[MUSE_HPARAMS_MAX_LAYERS];    /* attention.head_count (default 0) */
    uint32_t n_head_kv[MUSE_HPARAMS_MAX_LAYERS]; /* attention.head_count_kv (default = n_head) */
    bool is_swa[MUSE_HPARAMS_MAX_LAYERS];        /* sliding-window layer (with RoPE) vs full (NoPE) */

    uint32_t n_embd_head_k;        /* attention.key_length (default n_embd / n_head[0]) */
    uint32_t n_embd_head_v;        /* attention.value_length (default n_embd / n_head[0]) */
    uint32_t n_embd_head_k_swa;    /* attention.key_length_swa (default n_embd_head_k) */
    uint32_t n_embd_head_v_swa;    /* attention.value_length_swa (default n_embd_head_v) */
    uint32_t n_rot;                /* rope.dimension_count (default n_embd_head_k) */
    uint32_t n_rot_swa;            /* rope.dimension_count_swa (default n_rot) */

    float f_norm_rms_eps;          /* attention.layer_norm_rms_epsilon (required) */
    float f_post_norm_eps;         /* 1e-8, hard-coded in llama.cpp (not in the file) */
    uint32_t n_swa;                /* attention.sliding_window (default 0 = malformed if any layer is SWA) */
    enum muse_swa_pattern_form swa_pattern_form;
    uint32_t swa_period;           /* the scalar P when swa_pattern_form == PERIOD, else 0 */
    float f_final_logit_softcapping; /* final_logit_softcapping (default 30.0; 0 = off) */
    float f_logit_scale;           /* logit_scale (required) */

    float rope_freq_base;          /* rope.freq_base (default 10000) */
    float rope_freq_base_swa;      /* rope.freq_base_swa (default rope_freq_base): used by SWA layers */
    enum muse_rope_scaling rope_scaling; /* rope.scaling.type (default linear) */
    float rope_freq_scale;         /* 1 / rope.scaling.factor (factor 0 or absent -> 1) */
    float rope_freq_scale_swa;     /* = rope_freq_scale (llama.cpp has no separate key) */
    uint32_t n_ctx_orig_yarn;      /* rope.scaling.original_context_length (default n_ctx_train) */
    bool causal_attn;              /* attention.causal (default true) */

    /* special tokens (tokenizer.ggml.*_token_id); -1 when absent */
    int32_t bos_token_id;
    int32_t eos_token_id;
    int32_t eot_token_id;
    int32_t eom_token_id;          /* informative: <|eom|> is NOT a stop token */
};

/*
 * Fill *hp from `gguf`. Errors (hp is then unspecified):
 *   MUSE_ERR_UNSUPPORTED  general.architecture is not muse-glimmer (the message says what the file
 *                         is: a vision projector "clip" file, a "dflash" drafter, another arch),
 *                         or a feature muse does not implement (YaRN/other rope scaling, non-causal);
 *   MUSE_ERR_MISSING      a required key is absent (the message names the full key);
 *   MUSE_ERR_FORMAT       a key has the wrong type/array length, or the values are inconsistent
 *                         (zero sizes, heads not dividing, k/v head sizes differing, missing window).
 * Pure function of the parsed file; thread-safe.
 */
muse_status muse_hparams_load(struct muse_hparams *hp, const struct muse_gguf *gguf, struct muse_error *err);

/* Per-layer derived sizes (il < n_layer). */
uint32_t muse_hparams_head_dim_k(const struct muse_hparams *hp, uint32_t il); /* swa ? k_swa : k */
uint32_t muse_hparams_head_dim_v(const struct muse_hparams *hp, uint32_t il);
uint32_t muse_hparams_n_embd_q(const struct muse_hparams *hp, uint32_t il);   /* n_head * head_dim_k */
uint32_t muse_hparams_n_embd_k_gqa(const struct muse_hparams *hp, uint32_t il); /* n_head_kv * head_dim_k */
uint32_t muse_hparams_n_embd_v_gqa(const struct muse_hparams *hp, uint32_t il); /* n_head_kv * head_dim_v */
uint32_t muse_hparams_n_rot(const struct muse_hparams *hp, uint32_t il);     /* swa ? n_rot_swa : n_rot */

/* Number of SWA layers. */
uint32_t muse_hparams_n_swa_layers(const struct muse_hparams *hp);
