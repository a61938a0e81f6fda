/*
 * synth.h - the recipe for synthetic Muse-Glimmer GGUF files (`muse synth`): presets, per-tensor
 * type rules, the tensor list (the required entries of the tensor table model/tensors.h, spec
 * ../shared/spec/text-model.md §4) with the config's shapes, the value-scale recipe of
 * ../shared/golden/text/README.md, a working byte-level BPE vocabulary and the streaming write. Everything is deterministic: the vocabulary depends only on n_vocab, the weights only on
 * the config (seed included).
 *
 * A file is written in one pass through the GGUF streaming writer: the metadata (vocabulary
 * included) is held in memory, tensor data is generated row by row into a small buffer, so
 * memory stays bounded for files of any size (the 30b preset at IQ2_XXS is ~10 GB).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/tensor_type.h"
#include "model/tensors.h"
#include "muse.h"

#define MUSE_SYNTH_MAX_RULES 32
#define MUSE_SYNTH_MAX_PATTERN 64   /* a pattern period (or per-layer list) is at most 64 layers */
#define MUSE_SYNTH_MAX_LAYERS 1024
#define MUSE_SYNTH_MIN_VOCAB 268     /* 256 byte tokens + the 12 named special tokens */

/* The two value recipes of golden/text/README.md "Value scales". */
enum muse_synth_values {
    MUSE_SYNTH_VALUES_CONDITIONED = 0, /* post-norms x0.15, ffn_norm x0.25, token_embd std 0.05 */
    MUSE_SYNTH_VALUES_PLAIN = 1,       /* token_embd std 1, norms 1 + N(0, 0.1) */
    MUSE_SYNTH_VALUES_COUNT
};

/* A type rule: tensors whose short name ("ffn_gate", "output") or full name ("blk.3.ffn_gate.weight")
 * matches the glob (`*`, `?`) get `type`. Rules apply to matrices only: 1-D tensors are always F32. */
struct muse_synth_type_rule {
    char pattern[64];
    enum muse_type type;
};

/* Everything a synthetic file depends on. Passive data: fill it with muse_synth_preset() and
 * adjust fields; muse_synth_validate() checks it. */
struct muse_synth_config {
    char preset[16];      /* informative: goes into general.name */
    int32_t n_layer;      /* block_count */
    int32_t n_embd;       /* embedding_length */
    int32_t n_head;       /* attention.head_count */
    int32_t n_head_kv;    /* attention.head_count_kv (divides n_head) */
    int32_t head_dim;     /* attention.key_length = value_length (even) */
    int32_t n_ff;         /* feed_forward_length */
    int32_t n_vocab;      /* tokens in the vocabulary = token_embd/output ne[1] */
    int32_t n_ctx;        /* context_length */
    int32_t n_swa;        /* attention.sliding_window (>= 1) */
    /* SWA layer pattern: 'S' = sliding-window layer (RoPE), 'F' = full attention (NoPE); layer il
     * is pattern[il % strlen(pattern)] (a string as long as the model is a per-layer list). */
    char pattern[MUSE_SYNTH_MAX_PATTERN + 1];
    bool pattern_scalar;  /* write the pattern as a u32 period (needs the form S..SF), else bool[n_layer] */
    uint64_t seed;
    enum muse_synth_values values;
    int n_rules;          /* tried in order, first match wins; no match -> F32 */
    struct muse_synth_type_rule rules[MUSE_SYNTH_MAX_RULES];
};

/*
 * Fill *cfg with the preset `name` ("tiny", "small", "demo", "30b"; see docs/synth.md for the
 * dimensions). Returns MUSE_ERR_INVALID_ARG (message lists the presets) for an unknown name.
 */
muse_status muse_synth_preset(const char *name, struct muse_synth_config *cfg, struct muse_error *err);

/* The preset names, NULL-terminated (a constant table). */
extern const char *const muse_synth_preset_names[];

/*
 * Parse "GLOB=TYPE,GLOB=TYPE,..." (TYPE a ggml type name such as q4_k or iq2_xxs) and put these
 * rules in front of the rules already in cfg (so they override a preset's). Rejects unknown types,
 * activation-only types (q8_1, q8_k), integer types, empty globs and more than
 * MUSE_SYNTH_MAX_RULES rules in all with MUSE_ERR_INVALID_ARG; cfg is unchanged on error.
 */
muse_status muse_synth_parse_types(const char *spec, struct muse_synth_config *cfg, struct muse_error *err);

/*
 * Parse a layer pattern into cfg->pattern: a number P (period P, the last layer of each period
 * full: 4 -> "SSSF"; 0 -> every layer SWA; 1 -> every layer full) or a string of S/F letters.
 * MUSE_ERR_INVALID_ARG on anything else.
 */
muse_status muse_synth_parse_pattern(const char *spec, struct muse_synth_config *cfg, struct muse_error *err);

/* Whether layer il is a sliding-window layer under cfg's pattern. */
bool muse_synth_layer_is_swa(const struct muse_synth_config *cfg, int32_t il);

/*
 * Check every dimension, the pattern and that every matrix's row length is a multiple of its
 * type's block size. MUSE_ERR_INVALID_ARG with a message naming the option or tensor.
 */
muse_status muse_synth_validate(const struct muse_synth_config *cfg, struct muse_error *err);

/* What a tensor's values are drawn from (golden/text/README.md "Value scales"). */
struct muse_synth_tensor {
    char name[64];        /* GGUF name, e.g. "blk.0.attn_q.weight" */
    enum muse_type type;
    uint32_t n_dims;      /* 1 (norms) or 2 */
    int64_t ne[2];        /* ne[0] = row length (input dim), ne[1] = rows */
    float mean;           /* values ~ mean + std * N(0, 1) before encoding */
    float std;
};

/*
 * The tensor list of a validated config in file order (token_embd, blk.0.* ... blk.N.*,
 * output_norm, output). On success *out is a malloc'd array of *n_out entries (caller frees).
 */
muse_status muse_synth_plan(const struct muse_synth_config *cfg, struct muse_synth_tensor **out, size_t *n_out,
                            struct muse_error *err);

/* Fills elem (zeroed, of the caller's element type) for one tensor a converter writes. */
typedef void (*muse_synth_fill_fn)(const struct muse_tensor_visit *v, void *elem, const void *ctx);

/*
 * The plan of a synthetic file: the required entries of net's table (model/tensors.h) in file
 * order with net's dimensions (net->weights NULL), one element of elem_size bytes each, filled by
 * fill(visit, element, ctx). What the three writers (text model, mmproj, drafter) write. On success
 * *out is a malloc'd array of *n_out elements (caller frees).
 */
muse_status muse_synth_entries(struct muse_tensor_net *net, size_t elem_size, muse_synth_fill_fn fill, const void *ctx,
                               void **out, size_t *n_out, struct muse_error *err);

/* The general.file_type (llama_ftype) label for a plan: the type holding most matrix elements. */
uint32_t muse_synth_file_type(const struct muse_synth_tensor *tensors, size_t n);

/* Data bytes of all tensors of a plan (without alignment padding). */
uint64_t muse_synth_data_bytes(const struct muse_synth_tensor *tensors, size_t n);

/*
 * Write the synthetic GGUF for `cfg` to `path` (created or truncated). Validates cfg first.
 * progress (may be NULL) is called after each chunk of tensor data with the bytes written so far
 * and the total; nonzero from it cancels the write (MUSE_ERR_CANCELLED, the file removed). Memory use is the metadata plus a buffer of a few MB whatever the file
 * size. On error the partial file is removed. Thread-safe (no shared state).
 */
muse_status muse_synth_write(const struct muse_synth_config *cfg, const char *path, muse_progress_fn progress,
                             void *user, struct muse_error *err);

/* ---- vocabulary ------------------------------------------------------------------------ */

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum muse_synth_token_type {
    MUSE_SYNTH_TOKEN_NORMAL = 1,
    MUSE_SYNTH_TOKEN_CONTROL = 3,
    MUSE_SYNTH_TOKEN_UNUSED = 5,
};

/* The real Muse-Glimmer special-token block starts here (spec tokenizer-and-chat.md 2.2). */
#define MUSE_SYNTH_REAL_SPECIAL_BASE 200000
#define MUSE_SYNTH_REAL_VOCAB 202048

/*
 * A byte-level BPE vocabulary in GPT-2 byte-to-unicode form:
 *   ids 0..255        the single bytes, id = byte value;
 *   then              tokens made by the merges (learned from a built-in English word list, then
 *                     deterministic filler words built from pairs of learned tokens), each merge
 *                     result a token and each merge side an earlier token;
 *   special tokens    CONTROL; at their real ids 200000.. (block 200000..202047, unnamed slots
 *                     <|reserved_special_token_K|>) when n_vocab >= 202048, otherwise the 12
 *                     named ones as the last 12 ids in real-id order.
 */
struct muse_synth_vocab {
    int32_t n_tokens;
    char **tokens;        /* [n_tokens] NUL-terminated, byte-to-unicode form */
    int32_t *types;       /* [n_tokens] enum muse_synth_token_type */
    int32_t n_merges;
    char **merges;        /* [n_merges] "LEFT RIGHT" in rank order */
    int32_t n_learned;    /* merges[0..n_learned) learned by BPE on the word list, the rest filler */
    int32_t bos, eos, eom, eot, start, message, image_start, image_end, video, patch, pad, mask;
};

/*
 * Build the vocabulary of n_vocab tokens (>= MUSE_SYNTH_MIN_VOCAB). Depends only on n_vocab.
 * On success *out owns a new vocabulary (free with muse_synth_vocab_free).
 */
muse_status muse_synth_vocab_build(int32_t n_vocab, struct muse_synth_vocab **out, struct muse_error *err);
void muse_synth_vocab_free(struct muse_synth_vocab *vocab);

/* The built-in English word list the BPE merges are learned from (most frequent first). */
extern const char *const muse_synth_words[];
extern const size_t muse_synth_n_words;
