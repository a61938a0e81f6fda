/* dflash_hparams.c - DFlash drafter hyperparameters from GGUF metadata (dflash.md section 2.2). */
#include "speculative/dflash_hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

// ---- key helpers -------------------------------------------------------------------------

/* "dflash.<suffix>" into buf. */
static const char *key_of(char *buf, size_t size, const char *suffix) {
    return muse_gguf_arch_key(buf, size, MUSE_ARCH_DFLASH, suffix);
}

/* A scalar or per-layer u32 key that must hold one value for every layer (absent: untouched). */
static muse_status uniform_u32(const struct muse_gguf *g, const char *suffix, uint32_t n_layer, uint32_t *out,
                               struct muse_error *err) {
    char key[128];
    uint32_t v[MUSE_DFLASH_MAX_LAYERS];
    bool per_layer;
    muse_status st = muse_gguf_get_u32_per_layer(g, key_of(key, sizeof key, suffix), n_layer, v, &per_layer, err);
    if (st == MUSE_ERR_MISSING) return MUSE_OK;
    if (st) return st;
    for (uint32_t il = 1; il < n_layer; il++)
        if (v[il] != v[0])
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s': per-layer values that differ (%u, %u) are not supported",
                                  key, v[0], v[il]);
    *out = v[0];
    return MUSE_OK;
}

// ---- variants muse does not run -------------------------------------------------------------

/* Keys whose presence means a drafter variant with other math (dflash.md 2.2, "absent = off"). */
static const struct {
    const char *suffix;
    const char *what;
} unsupported_keys[] = {
    {"conv_kernel_size", "a DFlash2 drafter (block convolutions)"},
    {"conv_group_size", "a DFlash2 drafter (block convolutions)"},
    {"selector_rank", "a DFlash2 drafter (the token selector)"},
    {"selector_top_k", "a DFlash2 drafter (the token selector)"},
    {"hyper_connection_count", "a DSpark DeepSeek-V4 drafter"},
    {"rope.dimension_sections", "an M-RoPE drafter"},
};

static muse_status check_variant(const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    muse_status st;
    for (size_t i = 0; i < sizeof unsupported_keys / sizeof unsupported_keys[0]; i++)
        if (muse_gguf_find_kv(g, key_of(key, sizeof key, unsupported_keys[i].suffix)))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s': this is %s, which muse does not run (plain DFlash only)",
                                  key, unsupported_keys[i].what);
    bool causal = false;
    st = muse_gguf_get_bool(g, key_of(key, sizeof key, "attention.causal"), &causal, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    muse_error_clear(err);
    if (causal)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = true: a causal block is not supported (DFlash drafts non-causally)", key);
    char act[32] = "silu";
    st = muse_gguf_get_str(g, key_of(key, sizeof key, "hidden_act"), act, sizeof act, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    muse_error_clear(err);
    if (strcmp(act, "silu"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = '%s': only silu is supported", key, act);
    static const char *const scales[] = {"embedding_scale", "attention.scale", "attention.value_scale"};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        float v = 0.0f;
        if ((st = muse_gguf_opt_f32(g, key_of(key, sizeof key, scales[i]), &v, NULL, err))) return st;
        if (v != 0.0f) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = %g is not supported", key, v);
    }
    char scaling[32] = "linear";
    st = muse_gguf_get_str(g, key_of(key, sizeof key, "rope.scaling.type"), scaling, sizeof scaling, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    muse_error_clear(err);
    if (strcmp(scaling, "linear") && strcmp(scaling, "none"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = '%s': only 'none' and 'linear' rope scaling are supported",
                              key, scaling);
    return MUSE_OK;
}

// ---- the loader ----------------------------------------------------------------------------

static muse_status load_target_layers(struct muse_dflash_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    key_of(key, sizeof key, "target_layers");
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return muse_gguf_key_missing(err, key);
    const struct muse_gguf_value *v = &kv->value;
    if (v->type != MUSE_GGUF_TYPE_ARRAY || !muse_gguf_type_is_int(v->v.arr.elem_type))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is not an array of integers", key);
    if (v->v.arr.count == 0 || v->v.arr.count > MUSE_DFLASH_MAX_TARGET_LAYERS)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has %llu entries (expected 1..%d)", key,
                              (unsigned long long)v->v.arr.count, MUSE_DFLASH_MAX_TARGET_LAYERS);
    hp->n_target_layers = (uint32_t)v->v.arr.count;
    for (uint32_t i = 0; i < hp->n_target_layers; i++) {
        int64_t id = muse_gguf_arr_i64(v, i);
        if (id < 0 || id > INT32_MAX)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s': entry %u = %lld is not a layer id", key, i, (long long)id);
        hp->target_layers[i] = (int32_t)id;
    }
    return MUSE_OK;
}

static muse_status load_pattern(struct muse_dflash_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    key_of(key, sizeof key, "attention.sliding_window_pattern");
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return MUSE_OK; /* absent: every layer uses the window (llama.cpp reads it only when present) */
    const struct muse_gguf_value *v = &kv->value;
    if (v->type != MUSE_GGUF_TYPE_ARRAY) { /* the scalar period form: only 0 (= every layer) fits */
        uint32_t p;
        muse_status st = muse_gguf_get_u32(g, key, &p, err);
        if (st) return st;
        if (p != 0)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' = %u: every drafter layer must be sliding-window", key, p);
        return MUSE_OK;
    }
    if (v->v.arr.elem_type != MUSE_GGUF_TYPE_BOOL && !muse_gguf_type_is_int(v->v.arr.elem_type))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is an array of %s, expected bool", key,
                              muse_gguf_type_name(v->v.arr.elem_type));
    if (v->v.arr.count != hp->n_layer)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has %llu entries, expected block_count = %u", key,
                              (unsigned long long)v->v.arr.count, hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        int64_t on = v->v.arr.elem_type == MUSE_GGUF_TYPE_BOOL ? v->v.arr.data[il] != 0 : muse_gguf_arr_i64(v, il);
        if (!on)
            return muse_error_set(err, MUSE_ERR_FORMAT,
                                  "key '%s': layer %u is not sliding-window (the drafter's ring cannot serve a full-attention layer)",
                                  key, il);
    }
    return MUSE_OK;
}

muse_status muse_dflash_hparams_load(struct muse_dflash_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    muse_status st;
    bool found;
    memset(hp, 0, sizeof *hp);
    muse_error_clear(err);

    char arch[64];
    st = muse_gguf_get_str(g, "general.architecture", arch, sizeof arch, err);
    if (st == MUSE_ERR_MISSING) return muse_gguf_key_missing(err, "general.architecture");
    if (st) return st;
    if (strcmp(arch, MUSE_ARCH_DFLASH))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "general.architecture is '%s', not a DFlash drafter ('%s')", arch,
                              MUSE_ARCH_DFLASH);
    if (muse_gguf_get_str(g, "general.name", hp->name, sizeof hp->name, err)) hp->name[0] = 0; /* informative */
    muse_error_clear(err);
    if ((st = check_variant(g, err))) return st;

    if ((st = muse_gguf_req_u32(g, key_of(key, sizeof key, "block_count"), &hp->n_layer, err))) return st;
    if (hp->n_layer == 0 || hp->n_layer > MUSE_DFLASH_MAX_LAYERS)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' = %u is out of range (1..%d)", key, hp->n_layer,
                              MUSE_DFLASH_MAX_LAYERS);
    if ((st = muse_gguf_opt_u32(g, key_of(key, sizeof key, "context_length"), &hp->n_ctx_train, err))) return st;
    if ((st = muse_gguf_req_u32(g, key_of(key, sizeof key, "embedding_length"), &hp->n_embd, err))) return st;
    if ((st = uniform_u32(g, "feed_forward_length", hp->n_layer, &hp->n_ff, err))) return st;
    if ((st = uniform_u32(g, "attention.head_count", hp->n_layer, &hp->n_head, err))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = uniform_u32(g, "attention.head_count_kv", hp->n_layer, &hp->n_head_kv, err))) return st;
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    uint32_t v_len = hp->head_dim;
    if ((st = muse_gguf_opt_u32(g, key_of(key, sizeof key, "attention.key_length"), &hp->head_dim, err))) return st;
    v_len = hp->head_dim;
    if ((st = muse_gguf_opt_u32(g, key_of(key, sizeof key, "attention.value_length"), &v_len, err))) return st;
    hp->n_rot = hp->head_dim;
    if ((st = muse_gguf_opt_u32(g, key_of(key, sizeof key, "rope.dimension_count"), &hp->n_rot, err))) return st;
    hp->rope_freq_base = 10000.0f;
    if ((st = muse_gguf_opt_f32(g, key_of(key, sizeof key, "rope.freq_base"), &hp->rope_freq_base, NULL, err))) return st;
    float factor = 0.0f;
    if ((st = muse_gguf_opt_f32(g, key_of(key, sizeof key, "rope.scaling.factor"), &factor, &found, err))) return st;
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    st = muse_gguf_get_f32(g, key_of(key, sizeof key, "attention.layer_norm_rms_epsilon"), &hp->eps, err);
    if (st == MUSE_ERR_MISSING) return muse_gguf_key_missing(err, key);
    if (st) return st;
    hp->block_size = 16; /* llama.cpp's default when the key is absent */
    if ((st = muse_gguf_opt_u32(g, key_of(key, sizeof key, "block_size"), &hp->block_size, err))) return st;
    if ((st = muse_gguf_req_u32(g, key_of(key, sizeof key, "attention.sliding_window"), &hp->n_swa, err))) return st;
    if ((st = load_pattern(hp, g, err))) return st;
    if ((st = load_target_layers(hp, g, err))) return st;

    uint32_t mask = 0;
    st = muse_gguf_get_u32(g, "tokenizer.ggml.mask_token_id", &mask, err);
    if (st == MUSE_ERR_MISSING)
        return muse_error_set(err, MUSE_ERR_MISSING,
                              "missing required key 'tokenizer.ggml.mask_token_id' (the drafter's MASK token; "
                              "not 'dflash.mask_token_id')");
    if (st) return st;
    if (mask > INT32_MAX) return muse_error_set(err, MUSE_ERR_FORMAT, "key 'tokenizer.ggml.mask_token_id' = %u is out of range", mask);
    hp->mask_token_id = (int32_t)mask;
    const struct muse_gguf_kv *tok = muse_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tok) {
        if (tok->value.type != MUSE_GGUF_TYPE_ARRAY || tok->value.v.arr.count > INT32_MAX)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key 'tokenizer.ggml.tokens' is not a string array");
        hp->n_vocab = (uint32_t)tok->value.v.arr.count;
    }

    /* consistency (TensorSharp's load-time checks, dflash.md 2.2) */
    if (hp->n_embd == 0 || hp->n_embd > (1u << 20))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key 'dflash.embedding_length' = %u is out of range", hp->n_embd);
    if (hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return muse_error_set(err, MUSE_ERR_FORMAT, "head_count %u is not a nonzero multiple of head_count_kv %u", hp->n_head,
                              hp->n_head_kv);
    if (hp->head_dim == 0 || hp->head_dim % 2 || hp->head_dim != v_len)
        return muse_error_set(err, MUSE_ERR_FORMAT, "attention.key_length %u and value_length %u must be equal, even and nonzero",
                              hp->head_dim, v_len);
    if (hp->n_rot == 0 || hp->n_rot % 2 || hp->n_rot > hp->head_dim)
        return muse_error_set(err, MUSE_ERR_FORMAT, "rope.dimension_count %u must be even, nonzero and at most the head size %u",
                              hp->n_rot, hp->head_dim);
    if ((uint64_t)hp->n_head * hp->head_dim > (1u << 24) || hp->n_ff == 0 || hp->n_ff > (1u << 24))
        return muse_error_set(err, MUSE_ERR_FORMAT, "sizes out of range (heads %u x %u, feed_forward_length %u)", hp->n_head,
                              hp->head_dim, hp->n_ff);
    if (hp->block_size < 2 || hp->block_size > MUSE_DFLASH_MAX_BLOCK)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key 'dflash.block_size' = %u is out of range (2..%d)", hp->block_size,
                              MUSE_DFLASH_MAX_BLOCK);
    if (hp->n_swa == 0 || hp->n_swa > (1u << 24))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key 'dflash.attention.sliding_window' = %u is out of range (1..%u)",
                              hp->n_swa, 1u << 24);
    if (!(hp->eps >= 0.0f) || !isfinite(hp->eps) || !(hp->rope_freq_base > 0.0f) || !isfinite(hp->rope_freq_base) ||
        !(hp->rope_freq_scale > 0.0f) || !isfinite(hp->rope_freq_scale))
        return muse_error_set(err, MUSE_ERR_FORMAT, "a float hyperparameter is out of range (rms epsilon, rope base or scale)");
    return MUSE_OK;
}

muse_status muse_dflash_hparams_check_target(const struct muse_dflash_hparams *hp, const struct muse_hparams *t,
                                             int64_t t_n_vocab, struct muse_error *err) {
    if (hp->n_embd != t->n_embd)
        return muse_error_set(err, MUSE_ERR_SHAPE, "the drafter's embedding_length %u does not match the target's n_embd %u",
                              hp->n_embd, t->n_embd);
    for (uint32_t i = 0; i < hp->n_target_layers; i++)
        if (hp->target_layers[i] >= (int32_t)t->n_layer)
            return muse_error_set(err, MUSE_ERR_SHAPE,
                                  "dflash.target_layers[%u] = %d is outside the target's layers 0..%u", i,
                                  hp->target_layers[i], t->n_layer - 1);
    if (hp->n_vocab && (int64_t)hp->n_vocab != t_n_vocab)
        return muse_error_set(err, MUSE_ERR_SHAPE, "the drafter's vocabulary (%u tokens) does not match the target's (%lld)",
                              hp->n_vocab, (long long)t_n_vocab);
    if (hp->mask_token_id >= t_n_vocab)
        return muse_error_set(err, MUSE_ERR_SHAPE, "tokenizer.ggml.mask_token_id %d is outside the target's vocabulary (%lld)",
                              hp->mask_token_id, (long long)t_n_vocab);
    return MUSE_OK;
}

uint32_t muse_dflash_n_features(const struct muse_dflash_hparams *hp) { return hp->n_target_layers * hp->n_embd; }
uint32_t muse_dflash_n_q(const struct muse_dflash_hparams *hp) { return hp->n_head * hp->head_dim; }
uint32_t muse_dflash_n_kv(const struct muse_dflash_hparams *hp) { return hp->n_head_kv * hp->head_dim; }

uint32_t muse_dflash_default_ring(uint32_t window, uint32_t block_size) {
    return (window + block_size + 1 + 31) & ~31u;
}
