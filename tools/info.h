/*
 * info.h - helpers of `muse info` (tools/cmd_info.c): text cleaning for untrusted strings and
 * the Muse-Glimmer hyperparameters shown in the "derived" section.
 *
 * The hyperparameter struct mirrors the field names of src/model/hparams.h (struct
 * muse_hparams). For muse-glimmer files the values come from muse_hparams_load() (the loader
 * the engine itself uses, so `muse info` shows exactly what `muse run` will use); the DFlash
 * drafter has the same key layout under the `dflash.` prefix and is read here.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "muse.h"

#define INFO_MAX_LAYERS 512   /* llama.cpp's LLAMA_MAX_LAYERS */

/*
 * Make `len` untrusted bytes printable as one NUL-terminated, valid UTF-8 string (malloc'd;
 * NULL on out-of-memory). Invalid UTF-8 and NUL bytes become U+FFFD. With `escape`, control
 * characters, '"' and '\\' are written as C-style escapes (so the result stays on one line).
 * At most `max` input bytes are used; when more exist, "..." is appended.
 */
char *info_clean_str(const char *s, uint64_t len, uint64_t max, bool escape);

struct info_hparams {
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_vocab;                      /* entries of tokenizer.ggml.tokens (0 = none) */
    uint32_t n_ff[INFO_MAX_LAYERS];
    uint32_t n_head[INFO_MAX_LAYERS];
    uint32_t n_head_kv[INFO_MAX_LAYERS];
    bool is_swa[INFO_MAX_LAYERS];
    bool ff_per_layer, head_per_layer, head_kv_per_layer; /* the key was an array */
    uint32_t n_embd_head_k, n_embd_head_v;
    uint32_t n_embd_head_k_swa, n_embd_head_v_swa;
    uint32_t n_rot, n_rot_swa;
    float f_norm_rms_eps;
    float f_post_norm_eps;                 /* 1e-8, hard-coded in llama.cpp */
    uint32_t n_swa;
    bool swa_pattern_is_period;            /* scalar form of sliding_window_pattern */
    uint32_t swa_period;
    float f_final_logit_softcapping;
    float f_logit_scale;
    float rope_freq_base, rope_freq_base_swa;
    char rope_scaling_type[32];
    float rope_freq_scale;
    uint32_t n_ctx_orig_yarn;
    bool causal_attn;
};

/*
 * Muse-Glimmer text models: muse_hparams_load() (src/model/hparams.h), copied into *hp. The
 * `*_per_layer` flags are set where the file stores the key as an array. Errors as that loader.
 */
muse_status info_hparams_load_glimmer(const struct muse_gguf *g, struct info_hparams *hp, struct muse_error *err);

/*
 * Read the hyperparameters of an architecture that follows the Muse-Glimmer key layout
 * (`prefix` = "dflash" for drafters) with llama.cpp's defaults (text-model.md 3).
 * Returns MUSE_OK, MUSE_ERR_MISSING (required key absent) or MUSE_ERR_FORMAT (wrong type,
 * wrong array length, out of range); `err` names the key.
 */
muse_status info_hparams_load(const struct muse_gguf *g, const char *prefix, struct info_hparams *hp,
                              struct muse_error *err);
