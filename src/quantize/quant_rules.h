/*
 * quant_rules.h - which type each tensor gets when a model is quantized: llama-quantize's
 * choice (llama.cpp src/llama-quant.cpp, llama_tensor_get_type and its helpers) for the
 * file types muse writes, as plain data in and a type out. Internal to src/quantize; the
 * driver (quantize.c) walks the tensors in llama-quantize's order and calls these per tensor,
 * because some rules count the tensors of a category seen so far.
 *
 * Not covered (the driver refuses these file types before any rule runs): the IQ file types,
 * Q2_K_S (needs an importance matrix), MXFP4_MOE, and the rules llama.cpp keys on other
 * architectures (Falcon, LLaMA-70B, GLM5-next, BailingMoE3): muse quantizes muse-glimmer and
 * dflash files, where none of those apply.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/tensor_type.h"

/* llama.cpp's llama_ftype values (general.file_type), for the file types muse knows. */
enum muse_ftype {
    MUSE_FTYPE_ALL_F32 = 0,
    MUSE_FTYPE_MOSTLY_F16 = 1,
    MUSE_FTYPE_MOSTLY_Q4_0 = 2,
    MUSE_FTYPE_MOSTLY_Q4_1 = 3,
    MUSE_FTYPE_MOSTLY_Q8_0 = 7,
    MUSE_FTYPE_MOSTLY_Q5_0 = 8,
    MUSE_FTYPE_MOSTLY_Q5_1 = 9,
    MUSE_FTYPE_MOSTLY_Q2_K = 10,
    MUSE_FTYPE_MOSTLY_Q3_K_S = 11,
    MUSE_FTYPE_MOSTLY_Q3_K_M = 12,
    MUSE_FTYPE_MOSTLY_Q3_K_L = 13,
    MUSE_FTYPE_MOSTLY_Q4_K_S = 14,
    MUSE_FTYPE_MOSTLY_Q4_K_M = 15,
    MUSE_FTYPE_MOSTLY_Q5_K_S = 16,
    MUSE_FTYPE_MOSTLY_Q5_K_M = 17,
    MUSE_FTYPE_MOSTLY_Q6_K = 18,
    MUSE_FTYPE_MOSTLY_Q2_K_S = 21,
    MUSE_FTYPE_MOSTLY_BF16 = 32,
    MUSE_FTYPE_MOSTLY_TQ1_0 = 36,
    MUSE_FTYPE_MOSTLY_TQ2_0 = 37,
    MUSE_FTYPE_MOSTLY_Q1_0 = 40,
};

/* One TYPE name of llama-quantize's table (tools/quantize/quantize.cpp QUANT_OPTIONS). */
struct muse_ftype_name {
    const char *name;          /* as llama-quantize spells it: "Q4_K_M", "Q4_K" (an alias), "F16" */
    int32_t ftype;             /* llama_ftype value (aliases share their target's) */
    bool supported;            /* false: llama-quantize has it, muse refuses it (why: `note`) */
    const char *note;          /* a short description, or the reason it is refused */
};

/* llama-quantize's table in its order (aliases included), terminated by a NULL name. */
extern const struct muse_ftype_name muse_ftype_names[];

/*
 * TYPE as llama-quantize parses it: a name (case-insensitive, first match in the table) or
 * the decimal ftype value (the first name with that value). NULL when unknown.
 */
const struct muse_ftype_name *muse_ftype_lookup(const char *type);

/* The tensor type a file type quantizes to by default (llama_ftype_get_default_type). */
enum muse_type muse_ftype_default_type(int32_t ftype);

/* llama-quantize's broad tensor categories (by name, not per architecture). */
enum muse_tensor_category {
    MUSE_TCAT_TOKEN_EMBD,
    MUSE_TCAT_ATTN_Q,
    MUSE_TCAT_ATTN_V,
    MUSE_TCAT_ATTN_K,
    MUSE_TCAT_ATTN_QKV,
    MUSE_TCAT_ATTN_KV_B,
    MUSE_TCAT_ATTN_OUTPUT,
    MUSE_TCAT_FFN_UP,
    MUSE_TCAT_FFN_GATE,
    MUSE_TCAT_FFN_DOWN,
    MUSE_TCAT_OUTPUT,
    MUSE_TCAT_OTHER,
};

enum muse_tensor_category muse_quant_category(const char *name);

/* ggml_n_dims: 1 + the index of the last dimension > 1 (at least 1). */
int muse_quant_n_dims(const int64_t ne[4]);

/*
 * tensor_allows_quantization: a 2-D+ tensor whose name ends in "weight" and is none of the
 * excluded kinds (norms, expert gates, position/token-type embeddings, conv1d, ...).
 * quantize_output false = --leave-output-tensor.
 */
bool muse_quant_allows(const char *name, const int64_t ne[4], bool quantize_output);

/* What the rules need to know of the model and the run. */
struct muse_quant_model {
    uint32_t n_layer;          /* <arch>.block_count */
    uint32_t n_gqa;            /* head_count / head_count_kv of layer 0 (0 when head_count_kv is 0) */
    uint32_t n_expert;         /* <arch>.expert_count, 0 when absent or <= 1 */
};

/* The counters llama-quantize keeps while it walks the tensors (quantize_state_impl). */
struct muse_quant_state {
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down;
    int n_ffn_gate, i_ffn_gate;
    int n_ffn_up, i_ffn_up;
    int n_fallback;
    bool has_tied_embeddings;  /* no output.weight among the tensors */
};

/* Counters for a file whose tensor names are names[0..n) (init_quantize_state_counters). */
void muse_quant_state_init(struct muse_quant_state *qs, const struct muse_quant_model *model,
                           const char *const *names, int n);

/* The run's choices that the rules read. MUSE_TYPE_COUNT = not given. */
struct muse_quant_choice {
    int32_t ftype;
    enum muse_type output_type;        /* --output-tensor-type */
    enum muse_type token_embd_type;    /* --token-embedding-type */
};

/*
 * llama_tensor_get_type_impl: the rules for one tensor (its default type `new_type` on entry)
 * by category, file type and layer; advances the counters. Returns the chosen type.
 * On failure returns MUSE_TYPE_COUNT with a one-line reason in err[err_size] (an expert model
 * whose tensor name has no valid layer number, as llama-quantize refuses it).
 */
enum muse_type muse_quant_rules(struct muse_quant_state *qs, const struct muse_quant_model *model,
                                const struct muse_quant_choice *choice, enum muse_type new_type, const char *name,
                                const int64_t ne[4], enum muse_tensor_category cat, char *err, size_t err_size);

/*
 * tensor_type_fallback: when ne[0] is not a multiple of the type's block size, the
 * replacement llama-quantize uses (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
 * TQ*_0 -> Q4_0; a 32-block type or a fallback that still does not fit -> F16). Counts
 * qs->n_fallback. Returns MUSE_TYPE_COUNT for a 256/128-block type without a fallback (Q1_0),
 * which llama-quantize also refuses.
 */
enum muse_type muse_quant_fallback(struct muse_quant_state *qs, enum muse_type type, int64_t ne0, bool *fell_back);
