/*
 * synth_dflash.h - synthetic DFlash drafter GGUF files for a given target (`muse synth --dflash`):
 * the keys and tensors of ../shared/spec/dflash.md section 2 with random weights, the target's
 * tokenizer copied (as the converter does) and tokenizer.ggml.mask_token_id set. The width is the
 * target's; everything else (layers, heads, FFN, block size, window, target layers, types) is
 * chosen by the config. Deterministic: a tensor's bytes depend only on the seed, its name, type
 * and shape. For tests, benchmarks and the parity tools; random drafts are not accepted.
 */
#pragma once

#include <stdint.h>

#include "muse.h"
#include "synth/synth.h"

#define MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS 64

struct muse_synth_dflash_config {
    int32_t n_layer;          /* dflash.block_count (default 2) */
    int32_t n_head;           /* 0 = n_embd / head_dim */
    int32_t n_head_kv;        /* 0 = n_head / 2 when even, else n_head */
    int32_t head_dim;         /* 0 = 64 (or n_embd when smaller) */
    int32_t n_ff;             /* 0 = the target's n_embd */
    int32_t block_size;       /* dflash.block_size incl. the anchor (default 16) */
    int32_t n_swa;            /* attention.sliding_window (default 32) */
    int32_t n_target_layers;  /* 0 = min(4, target layers), spread: id (2k+1) * n_layer / (2n) */
    int32_t target_layers[MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS];
    int32_t mask_token_id;    /* -1 = the target vocabulary's "<|mask|>" token */
    uint64_t seed;            /* default 1 */
    int n_rules;              /* matrix types, first match wins (synth.h's rules); no match -> F32 */
    struct muse_synth_type_rule rules[MUSE_SYNTH_MAX_RULES];
};

/* Defaults (0 / -1 fields are resolved against the target by muse_synth_dflash_write). */
void muse_synth_dflash_default(struct muse_synth_dflash_config *cfg);

/*
 * Write a drafter for the Muse-Glimmer target at target_path to `path` (created or truncated; the
 * partial file is removed on error). Errors: those of loading the target, MUSE_ERR_INVALID_ARG for
 * a config that does not fit it (target layer ids out of range, heads not dividing, no mask token
 * and none given, a row length that is not a multiple of a type's block size), MUSE_ERR_IO.
 */
muse_status muse_synth_dflash_write(const struct muse_synth_dflash_config *cfg, const char *target_path, const char *path,
                                    struct muse_error *err);
