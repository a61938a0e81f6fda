/*
 * quant_rules.c - llama-quantize's per-tensor type choice (see quant_rules.h), transcribed
 * from the behaviour of llama.cpp's src/llama-quant.cpp at the oracle commit 0c1e570
 * (docs/quantize.md). Comments name the llama.cpp function each part reproduces.
 */
#include "quantize/quant_rules.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- file types (tools/quantize/quantize.cpp QUANT_OPTIONS) ----

#define IQ_NOTE "IQ types: use llama-quantize (muse reads them)"

const struct muse_ftype_name muse_ftype_names[] = {
    {"Q1_0", MUSE_FTYPE_MOSTLY_Q1_0, true, "1.125 bpw, 128-element blocks"},
    {"Q2_0", 41, false, "Q2_0 is a type muse does not know"},
    {"Q4_0", MUSE_FTYPE_MOSTLY_Q4_0, true, "4.5 bpw"},
    {"Q4_1", MUSE_FTYPE_MOSTLY_Q4_1, true, "5.0 bpw"},
    {"MXFP4_MOE", 38, false, "MXFP4_MOE is for mixture-of-experts models"},
    {"Q5_0", MUSE_FTYPE_MOSTLY_Q5_0, true, "5.5 bpw"},
    {"Q5_1", MUSE_FTYPE_MOSTLY_Q5_1, true, "6.0 bpw"},
    {"IQ2_XXS", 19, false, IQ_NOTE},
    {"IQ2_XS", 20, false, IQ_NOTE},
    {"IQ2_S", 28, false, IQ_NOTE},
    {"IQ2_M", 29, false, IQ_NOTE},
    {"IQ1_S", 24, false, IQ_NOTE},
    {"IQ1_M", 31, false, IQ_NOTE},
    {"TQ1_0", MUSE_FTYPE_MOSTLY_TQ1_0, true, "1.69 bpw ternary"},
    {"TQ2_0", MUSE_FTYPE_MOSTLY_TQ2_0, true, "2.06 bpw ternary"},
    {"Q2_K", MUSE_FTYPE_MOSTLY_Q2_K, true, "Q2_K mix (attn_v, ffn_down, attn_output Q3_K/Q4_K)"},
    {"Q2_K_S", MUSE_FTYPE_MOSTLY_Q2_K_S, false, "Q2_K_S needs an importance matrix: use llama-quantize --imatrix"},
    {"IQ3_XXS", 23, false, IQ_NOTE},
    {"IQ3_S", 26, false, IQ_NOTE},
    {"IQ3_M", 27, false, IQ_NOTE},
    {"Q3_K", MUSE_FTYPE_MOSTLY_Q3_K_M, true, "alias for Q3_K_M"},
    {"IQ3_XS", 22, false, IQ_NOTE},
    {"Q3_K_S", MUSE_FTYPE_MOSTLY_Q3_K_S, true, "Q3_K everywhere but output"},
    {"Q3_K_M", MUSE_FTYPE_MOSTLY_Q3_K_M, true, "Q3_K mix (attn_v, ffn_down, attn_output Q4_K/Q5_K)"},
    {"Q3_K_L", MUSE_FTYPE_MOSTLY_Q3_K_L, true, "Q3_K mix (attn_v, ffn_down, attn_output Q5_K)"},
    {"IQ4_NL", 25, false, IQ_NOTE},
    {"IQ4_XS", 30, false, IQ_NOTE},
    {"Q4_K", MUSE_FTYPE_MOSTLY_Q4_K_M, true, "alias for Q4_K_M"},
    {"Q4_K_S", MUSE_FTYPE_MOSTLY_Q4_K_S, true, "Q4_K, first attn_v/ffn_down Q5_K"},
    {"Q4_K_M", MUSE_FTYPE_MOSTLY_Q4_K_M, true, "Q4_K mix (half the attn_v/ffn_down Q6_K)"},
    {"Q5_K", MUSE_FTYPE_MOSTLY_Q5_K_M, true, "alias for Q5_K_M"},
    {"Q5_K_S", MUSE_FTYPE_MOSTLY_Q5_K_S, true, "Q5_K everywhere but output"},
    {"Q5_K_M", MUSE_FTYPE_MOSTLY_Q5_K_M, true, "Q5_K mix (half the attn_v/ffn_down Q6_K)"},
    {"Q6_K", MUSE_FTYPE_MOSTLY_Q6_K, true, "6.56 bpw"},
    {"Q8_0", MUSE_FTYPE_MOSTLY_Q8_0, true, "8.5 bpw"},
    {"F16", MUSE_FTYPE_MOSTLY_F16, true, "16 bpw"},
    {"BF16", MUSE_FTYPE_MOSTLY_BF16, true, "16 bpw bfloat"},
    {"F32", MUSE_FTYPE_ALL_F32, true, "32 bpw"},
    {"COPY", MUSE_FTYPE_ALL_F32, false, "COPY (copy tensors unchanged) is not supported"},
    {NULL, 0, false, NULL},
};

static bool iequals(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

const struct muse_ftype_name *muse_ftype_lookup(const char *type) {
    if (!type) return NULL;
    for (const struct muse_ftype_name *f = muse_ftype_names; f->name; f++)
        if (iequals(f->name, type)) return f;
    /* std::stoi: leading blanks, a sign, digits, anything after them ignored */
    char *end;
    long v = strtol(type, &end, 10);
    if (end == type) return NULL;
    for (const struct muse_ftype_name *f = muse_ftype_names; f->name; f++)
        if (f->ftype == v) return f;
    return NULL;
}

enum muse_type muse_ftype_default_type(int32_t ftype) {
    switch (ftype) {
    case MUSE_FTYPE_MOSTLY_Q4_0: return MUSE_TYPE_Q4_0;
    case MUSE_FTYPE_MOSTLY_Q4_1: return MUSE_TYPE_Q4_1;
    case MUSE_FTYPE_MOSTLY_Q5_0: return MUSE_TYPE_Q5_0;
    case MUSE_FTYPE_MOSTLY_Q5_1: return MUSE_TYPE_Q5_1;
    case MUSE_FTYPE_MOSTLY_Q8_0: return MUSE_TYPE_Q8_0;
    case MUSE_FTYPE_MOSTLY_F16: return MUSE_TYPE_F16;
    case MUSE_FTYPE_MOSTLY_BF16: return MUSE_TYPE_BF16;
    case MUSE_FTYPE_ALL_F32: return MUSE_TYPE_F32;
    case MUSE_FTYPE_MOSTLY_Q1_0: return MUSE_TYPE_Q1_0;
    case MUSE_FTYPE_MOSTLY_Q2_K_S:
    case MUSE_FTYPE_MOSTLY_Q2_K: return MUSE_TYPE_Q2_K;
    case MUSE_FTYPE_MOSTLY_Q3_K_S:
    case MUSE_FTYPE_MOSTLY_Q3_K_M:
    case MUSE_FTYPE_MOSTLY_Q3_K_L: return MUSE_TYPE_Q3_K;
    case MUSE_FTYPE_MOSTLY_Q4_K_S:
    case MUSE_FTYPE_MOSTLY_Q4_K_M: return MUSE_TYPE_Q4_K;
    case MUSE_FTYPE_MOSTLY_Q5_K_S:
    case MUSE_FTYPE_MOSTLY_Q5_K_M: return MUSE_TYPE_Q5_K;
    case MUSE_FTYPE_MOSTLY_Q6_K: return MUSE_TYPE_Q6_K;
    case MUSE_FTYPE_MOSTLY_TQ1_0: return MUSE_TYPE_TQ1_0;
    case MUSE_FTYPE_MOSTLY_TQ2_0: return MUSE_TYPE_TQ2_0;
    default: return MUSE_TYPE_COUNT;
    }
}

// ---- names (tensor_get_category, tensor_allows_quantization) ----

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

enum muse_tensor_category muse_quant_category(const char *name) {
    if (!strcmp(name, "output.weight")) return MUSE_TCAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return MUSE_TCAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight")) return MUSE_TCAT_ATTN_QKV;
    if (has(name, "attn_kv_b.weight")) return MUSE_TCAT_ATTN_KV_B;
    if (has(name, "attn_v.weight")) return MUSE_TCAT_ATTN_V;
    if (has(name, "attn_k.weight")) return MUSE_TCAT_ATTN_K;
    if (has(name, "attn_q.weight")) return MUSE_TCAT_ATTN_Q;
    if (has(name, "attn_output.weight")) return MUSE_TCAT_ATTN_OUTPUT;
    if (has(name, "ffn_up")) return MUSE_TCAT_FFN_UP;
    if (has(name, "ffn_gate")) return MUSE_TCAT_FFN_GATE;
    if (has(name, "ffn_down")) return MUSE_TCAT_FFN_DOWN;
    return MUSE_TCAT_OTHER;
}

static bool is_attn_v(enum muse_tensor_category c) {
    return c == MUSE_TCAT_ATTN_V || c == MUSE_TCAT_ATTN_QKV || c == MUSE_TCAT_ATTN_KV_B;
}

int muse_quant_n_dims(const int64_t ne[4]) {
    for (int i = 3; i >= 1; i--)
        if (ne[i] > 1) return i + 1;
    return 1;
}

bool muse_quant_allows(const char *name, const int64_t ne[4], bool quantize_output) {
    if (muse_quant_n_dims(ne) < 2) return false;
    const size_t len = strlen(name);
    /* llama.cpp: name.rfind("weight") == name.size() - 6, which also holds for a 5-byte name
     * (npos == size_t(-1) == 5 - 6); reproduced as is */
    bool q = (len >= 6 && !strcmp(name + len - 6, "weight")) || len == 5;
    q = q && !has(name, "_norm.weight");
    q = q && (quantize_output || strcmp(name, "output.weight") != 0);
    static const char *const excluded[] = {
        "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
        ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; q && i < sizeof excluded / sizeof excluded[0]; i++) q = !has(name, excluded[i]);
    q = q && strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
    return q;
}

// ---- state (init_quantize_state_counters) ----

void muse_quant_state_init(struct muse_quant_state *qs, const struct muse_quant_model *model,
                           const char *const *names, int n) {
    memset(qs, 0, sizeof *qs);
    qs->has_tied_embeddings = true;
    for (int i = 0; i < n; i++) {
        const enum muse_tensor_category c = muse_quant_category(names[i]);
        if (is_attn_v(c)) qs->n_attention_wv++;
        if (c == MUSE_TCAT_OUTPUT) qs->has_tied_embeddings = false;
    }
    qs->n_ffn_down = qs->n_ffn_gate = qs->n_ffn_up = (int)model->n_layer;
}

// ---- the rules (llama_tensor_get_type_impl, for the file types muse writes) ----

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* layer_info: the running counter for dense models; for expert models the "blk.N." of the name. */
static bool layer_info(const struct muse_quant_model *model, int counter, int n_layer, const char *name, int *i_layer,
                       char *err, size_t err_size) {
    *i_layer = counter;
    if (model->n_expert > 1) {
        if (sscanf(name, "blk.%d.", i_layer) != 1) {
            snprintf(err, err_size, "failed to determine the layer of tensor %s", name);
            return false;
        }
        if (*i_layer < 0 || *i_layer >= n_layer) {
            snprintf(err, err_size, "bad layer %d for tensor %s: must be in [0, %d)", *i_layer, name, n_layer);
            return false;
        }
    }
    return true;
}

enum muse_type muse_quant_rules(struct muse_quant_state *qs, const struct muse_quant_model *model,
                                const struct muse_quant_choice *choice, enum muse_type new_type, const char *name,
                                const int64_t ne[4], enum muse_tensor_category cat, char *err, size_t err_size) {
    const int32_t ft = choice->ftype;
    if (cat == MUSE_TCAT_OUTPUT || (qs->has_tied_embeddings && cat == MUSE_TCAT_TOKEN_EMBD)) {
        /* the output matrix (and a tied token embedding, which is the same matrix) */
        if (choice->output_type < MUSE_TYPE_COUNT) {
            new_type = choice->output_type;
        } else {
            const int64_t qk = muse_type_layouts[new_type].block_size;
            if (ne[0] % qk != 0) new_type = MUSE_TYPE_Q8_0;
            else if (new_type != MUSE_TYPE_Q8_0) new_type = MUSE_TYPE_Q6_K;
        }
    } else if (cat == MUSE_TCAT_TOKEN_EMBD) {
        if (choice->token_embd_type < MUSE_TYPE_COUNT) new_type = choice->token_embd_type;
        else if (ft == MUSE_FTYPE_MOSTLY_TQ1_0 || ft == MUSE_FTYPE_MOSTLY_TQ2_0) new_type = MUSE_TYPE_Q4_K;
    } else if (is_attn_v(cat)) {
        if (ft == MUSE_FTYPE_MOSTLY_Q2_K) new_type = model->n_gqa >= 4 ? MUSE_TYPE_Q4_K : MUSE_TYPE_Q3_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q2_K_S && model->n_gqa >= 4) new_type = MUSE_TYPE_Q4_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_M) new_type = qs->i_attention_wv < 2 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_L) new_type = MUSE_TYPE_Q5_K;
        else if ((ft == MUSE_FTYPE_MOSTLY_Q4_K_M || ft == MUSE_FTYPE_MOSTLY_Q5_K_M) &&
                 use_more_bits(qs->i_attention_wv, qs->n_attention_wv))
            new_type = MUSE_TYPE_Q6_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q4_K_S && qs->i_attention_wv < 4) new_type = MUSE_TYPE_Q5_K;
        if (model->n_expert == 8) new_type = MUSE_TYPE_Q8_0;
        qs->i_attention_wv++;
    } else if (cat == MUSE_TCAT_ATTN_K) {
        if (model->n_expert == 8) new_type = MUSE_TYPE_Q8_0;
    } else if (cat == MUSE_TCAT_FFN_DOWN) {
        int il;
        const int nl = qs->n_ffn_down;
        if (!layer_info(model, qs->i_ffn_down, nl, name, &il, err, err_size)) return MUSE_TYPE_COUNT;
        if (ft == MUSE_FTYPE_MOSTLY_Q2_K) new_type = MUSE_TYPE_Q3_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q2_K_S) { if (il < nl / 8) new_type = MUSE_TYPE_Q4_K; }
        else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_M) new_type = il < nl / 16 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_L) new_type = MUSE_TYPE_Q5_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q4_K_M) { if (use_more_bits(il, nl)) new_type = MUSE_TYPE_Q6_K; }
        else if (ft == MUSE_FTYPE_MOSTLY_Q5_K_M && use_more_bits(il, nl)) new_type = MUSE_TYPE_Q6_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q4_K_S && il < nl / 8) new_type = MUSE_TYPE_Q5_K;
        qs->i_ffn_down++;
    } else if (cat == MUSE_TCAT_ATTN_OUTPUT) {
        if (model->n_expert == 8) {
            if (ft == MUSE_FTYPE_MOSTLY_Q2_K || ft == MUSE_FTYPE_MOSTLY_Q3_K_S || ft == MUSE_FTYPE_MOSTLY_Q3_K_M ||
                ft == MUSE_FTYPE_MOSTLY_Q4_K_S || ft == MUSE_FTYPE_MOSTLY_Q4_K_M)
                new_type = MUSE_TYPE_Q5_K;
        } else {
            if (ft == MUSE_FTYPE_MOSTLY_Q2_K) new_type = MUSE_TYPE_Q3_K;
            else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_M) new_type = MUSE_TYPE_Q4_K;
            else if (ft == MUSE_FTYPE_MOSTLY_Q3_K_L) new_type = MUSE_TYPE_Q5_K;
        }
    } else if (cat == MUSE_TCAT_ATTN_QKV) {
        if (ft == MUSE_FTYPE_MOSTLY_Q3_K_M || ft == MUSE_FTYPE_MOSTLY_Q3_K_L) new_type = MUSE_TYPE_Q4_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q4_K_M) new_type = MUSE_TYPE_Q5_K;
        else if (ft == MUSE_FTYPE_MOSTLY_Q5_K_M) new_type = MUSE_TYPE_Q6_K;
    } else if (cat == MUSE_TCAT_FFN_GATE || cat == MUSE_TCAT_FFN_UP) {
        /* only the IQ3_XS mix changes these; the layer lookup (and its errors) still happen */
        const bool gate = cat == MUSE_TCAT_FFN_GATE;
        int il;
        if (!layer_info(model, gate ? qs->i_ffn_gate : qs->i_ffn_up, gate ? qs->n_ffn_gate : qs->n_ffn_up, name, &il,
                        err, err_size))
            return MUSE_TYPE_COUNT;
        if (gate) qs->i_ffn_gate++;
        else qs->i_ffn_up++;
    }
    return new_type;
}

// ---- shapes (tensor_type_fallback) ----

enum muse_type muse_quant_fallback(struct muse_quant_state *qs, enum muse_type type, int64_t ne0, bool *fell_back) {
    *fell_back = false;
    const int64_t qk = muse_type_layouts[type].block_size;
    if (ne0 % qk == 0) return type;
    *fell_back = true;
    qs->n_fallback++;
    enum muse_type r;
    switch (type) {
    case MUSE_TYPE_IQ1_S: case MUSE_TYPE_IQ1_M: case MUSE_TYPE_IQ2_XXS: case MUSE_TYPE_IQ2_XS:
    case MUSE_TYPE_IQ2_S: case MUSE_TYPE_IQ3_XXS: case MUSE_TYPE_IQ3_S: case MUSE_TYPE_IQ4_XS:
        r = MUSE_TYPE_IQ4_NL;
        break;
    case MUSE_TYPE_Q2_K: case MUSE_TYPE_Q3_K: case MUSE_TYPE_TQ1_0: case MUSE_TYPE_TQ2_0:
        r = MUSE_TYPE_Q4_0;
        break;
    case MUSE_TYPE_Q4_K: r = MUSE_TYPE_Q5_0; break;
    case MUSE_TYPE_Q5_K: r = MUSE_TYPE_Q5_1; break;
    case MUSE_TYPE_Q6_K: r = MUSE_TYPE_Q8_0; break;
    default:
        if (qk > 32) return MUSE_TYPE_COUNT;   /* "no tensor type fallback is defined" */
        r = type;                              /* a 32-block type: F16 below */
        break;
    }
    if (ne0 % muse_type_layouts[r].block_size != 0) r = MUSE_TYPE_F16;
    return r;
}
