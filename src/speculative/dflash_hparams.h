/*
 * dflash_hparams.h - the hyperparameters of a DFlash drafter GGUF (`general.architecture =
 * dflash`, spec dflash.md section 2.2), read and validated in two steps: the file on its own
 * (muse_dflash_hparams_load), then against the target model it will draft for
 * (muse_dflash_hparams_check_target).
 *
 * Plain, immutable after loading, no pointers into the file: safe to copy and share.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "muse.h"

#define MUSE_ARCH_DFLASH "dflash"
#define MUSE_DFLASH_MAX_LAYERS 64         /* drafter layers (the shipped one has 5) */
#define MUSE_DFLASH_MAX_TARGET_LAYERS 64  /* entries of dflash.target_layers (the shipped one has 5) */
#define MUSE_DFLASH_MAX_BLOCK 256         /* dflash.block_size (the shipped one has 16) */

struct muse_dflash_hparams {
    char name[128];            /* general.name, "" when absent (informative) */
    uint32_t n_layer;          /* dflash.block_count, 1..MUSE_DFLASH_MAX_LAYERS */
    uint32_t n_ctx_train;      /* dflash.context_length (informative: unused by the math) */
    uint32_t n_embd;           /* dflash.embedding_length: must equal the target's */
    uint32_t n_ff;             /* dflash.feed_forward_length (the same for every layer) */
    uint32_t n_head;           /* dflash.attention.head_count */
    uint32_t n_head_kv;        /* dflash.attention.head_count_kv (default n_head), divides n_head */
    uint32_t head_dim;         /* attention.key_length = value_length (default n_embd / n_head), even */
    uint32_t n_rot;            /* rope.dimension_count (default head_dim): NeoX RoPE on the first n_rot dims */
    float eps;                 /* attention.layer_norm_rms_epsilon: every drafter RMSNorm */
    float rope_freq_base;      /* rope.freq_base (default 10000) */
    float rope_freq_scale;     /* 1 / rope.scaling.factor (linear; absent or 0 -> 1) */
    uint32_t block_size;       /* dflash.block_size (default 16): rows of a block incl. the anchor, >= 2 */
    uint32_t n_swa;            /* attention.sliding_window (> 0): every layer is sliding-window */
    uint32_t n_target_layers;  /* entries of dflash.target_layers */
    int32_t target_layers[MUSE_DFLASH_MAX_TARGET_LAYERS]; /* id L = the residual ENTERING target layer L */
    int32_t mask_token_id;     /* tokenizer.ggml.mask_token_id (required) */
    uint32_t n_vocab;          /* entries of tokenizer.ggml.tokens; 0 when the file has none */
};

/*
 * Fill *hp from a parsed drafter file. Errors (hp is then unspecified), each one line naming the key:
 *   MUSE_ERR_UNSUPPORTED  general.architecture is not dflash, or a variant muse does not run
 *                         (DFlash2 conv/selector, DSpark, a causal block, non-silu FFN, M-RoPE,
 *                         an embedding/attention/value scale, non-linear rope scaling);
 *   MUSE_ERR_MISSING      a required key (block_count, embedding_length, the rms epsilon,
 *                         target_layers, sliding_window, tokenizer.ggml.mask_token_id);
 *   MUSE_ERR_FORMAT       a wrong type or array length, inconsistent or out-of-range values
 *                         (heads not dividing, odd head size, block_size < 2, a layer that is not
 *                         sliding-window, per-layer sizes that differ).
 */
muse_status muse_dflash_hparams_load(struct muse_dflash_hparams *hp, const struct muse_gguf *gguf,
                                     struct muse_error *err);

/*
 * Check that the drafter fits the target: embedding_length == the target's n_embd, every target
 * layer id in 0..n_layer-1, the mask token and the tokenizer size inside the target's vocabulary
 * (n_vocab = rows of the target's token_embd). MUSE_ERR_SHAPE with a one-line message otherwise.
 */
muse_status muse_dflash_hparams_check_target(const struct muse_dflash_hparams *hp, const struct muse_hparams *target,
                                             int64_t target_n_vocab, struct muse_error *err);

/* Derived sizes. */
uint32_t muse_dflash_n_features(const struct muse_dflash_hparams *hp); /* n_target_layers * n_embd */
uint32_t muse_dflash_n_q(const struct muse_dflash_hparams *hp);        /* n_head * head_dim */
uint32_t muse_dflash_n_kv(const struct muse_dflash_hparams *hp);       /* n_head_kv * head_dim */
/* The default ring: pad32(window + block_size + 1), TensorSharp's sizing (spec 2.2). */
uint32_t muse_dflash_default_ring(uint32_t window, uint32_t block_size);
