/* hparams.c - Muse-Glimmer hyperparameters from GGUF metadata (text-model.md section 3). */
#include "model/hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

// ---- key helpers -------------------------------------------------------------------------

/* "<arch>.<suffix>" into buf. */
static const char *arch_key(char *buf, size_t size, const char *suffix) {
    return muse_gguf_arch_key(buf, size, MUSE_ARCH_MUSE_GLIMMER, suffix);
}

/* Element i of an integer or bool array, widened. */
static int64_t arr_elem(const struct muse_gguf_value *v, uint64_t i) {
    if (v->v.arr.elem_type == MUSE_GGUF_TYPE_BOOL) return v->v.arr.data[i] != 0;
    return muse_gguf_arr_i64(v, i);
}

/*
 * llama.cpp's get_key_or_arr: a scalar u32 is broadcast to every layer; an array must have
 * exactly n_layer integer elements, each fitting in u32. Absent: untouched, *found = false.
 */
static muse_status opt_u32_or_arr(const struct muse_gguf *g, const char *key, uint32_t n_layer, uint32_t *out,
                                  bool *found, struct muse_error *err) {
    bool per_layer;
    muse_status st = muse_gguf_get_u32_per_layer(g, key, n_layer, out, &per_layer, err);
    *found = st != MUSE_ERR_MISSING;
    return st == MUSE_ERR_MISSING ? MUSE_OK : st;
}

static int32_t opt_token_id(const struct muse_gguf *g, const char *key, muse_status *st, struct muse_error *err) {
    uint32_t id = 0;
    muse_status s = muse_gguf_get_u32(g, key, &id, err);
    if (s == MUSE_ERR_MISSING) {
        muse_error_clear(err);
        return -1;
    }
    if (s == MUSE_OK && id > INT32_MAX) s = muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' = %u is out of range", key, id);
    if (s != MUSE_OK) *st = s;
    return (int32_t)id;
}

// ---- the sliding-window pattern (spec 3.2) ------------------------------------------------

static muse_status load_swa_pattern(struct muse_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    arch_key(key, sizeof key, "attention.sliding_window_pattern");
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return muse_gguf_key_missing(err, key); /* the array read is required: no period-4 default */
    if (kv->value.type != MUSE_GGUF_TYPE_ARRAY) {
        uint32_t p;
        muse_status st = muse_gguf_get_u32(g, key, &p, err);
        if (st != MUSE_OK) return st;
        hp->swa_pattern_form = MUSE_SWA_PATTERN_FORM_PERIOD;
        hp->swa_period = p;
        /* set_swa_pattern(P, dense_first = false): the last layer of every period is full */
        for (uint32_t il = 0; il < hp->n_layer; il++) hp->is_swa[il] = p == 0 || il % p < p - 1;
        return MUSE_OK;
    }
    const struct muse_gguf_value *v = &kv->value;
    if (v->v.arr.elem_type != MUSE_GGUF_TYPE_BOOL && !muse_gguf_type_is_int(v->v.arr.elem_type))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is an array of %s, expected bool or integers", key,
                              muse_gguf_type_name(v->v.arr.elem_type));
    if (v->v.arr.count != hp->n_layer)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has wrong array length: expected %u (block_count), got %llu",
                              key, hp->n_layer, (unsigned long long)v->v.arr.count);
    hp->swa_pattern_form = MUSE_SWA_PATTERN_FORM_ARRAY;
    hp->swa_period = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) hp->is_swa[il] = arr_elem(v, il) != 0;
    return MUSE_OK;
}

// ---- architecture check -------------------------------------------------------------------

static muse_status check_arch(struct muse_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char arch[64];
    muse_status st = muse_gguf_get_str(g, "general.architecture", arch, sizeof arch, err);
    if (st == MUSE_ERR_MISSING) return muse_gguf_key_missing(err, "general.architecture");
    if (st != MUSE_OK) return st;
    if (!strcmp(arch, MUSE_ARCH_MUSE_GLIMMER)) {
        memcpy(hp->arch, MUSE_ARCH_MUSE_GLIMMER, sizeof MUSE_ARCH_MUSE_GLIMMER);
        return MUSE_OK;
    }
    if (!strcmp(arch, "clip"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "this is a vision projector (mmproj) file (general.architecture = 'clip'), "
                              "not a text model: use the Muse-Glimmer text GGUF as the model; this file goes to --mmproj "
                              "(e.g. muse image --mmproj FILE --image IMAGE)");
    if (!strcmp(arch, "dflash"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "this is a DFlash speculative drafter (general.architecture = 'dflash'), "
                              "not a text model: pass the Muse-Glimmer text GGUF as the model (`muse draft --draft-model` takes this file)");
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "unsupported architecture '%s' (general.architecture): muse runs '%s' models only", arch,
                          MUSE_ARCH_MUSE_GLIMMER);
}

// ---- the loader ----------------------------------------------------------------------------

muse_status muse_hparams_load(struct muse_hparams *hp, const struct muse_gguf *g, struct muse_error *err) {
    char key[128];
    muse_status st;
    bool found;
    memset(hp, 0, sizeof *hp);
    muse_error_clear(err);

    if ((st = check_arch(hp, g, err))) return st;
    st = muse_gguf_get_str(g, "general.name", hp->name, sizeof hp->name, err);
    if (st != MUSE_OK) { /* informative only: absent, too long or mistyped is fine */
        hp->name[0] = 0;
        muse_error_clear(err);
    }

    /* generic keys (llama_model_base::load_hparams) */
    if ((st = muse_gguf_req_u32(g, arch_key(key, sizeof key, "context_length"), &hp->n_ctx_train, err))) return st;
    if ((st = muse_gguf_req_u32(g, arch_key(key, sizeof key, "embedding_length"), &hp->n_embd, err))) return st;
    if ((st = muse_gguf_req_u32(g, arch_key(key, sizeof key, "block_count"), &hp->n_layer, err))) return st;
    if (hp->n_layer == 0 || hp->n_layer > MUSE_HPARAMS_MAX_LAYERS)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' = %u is out of range (1..%d)", key, hp->n_layer,
                              MUSE_HPARAMS_MAX_LAYERS);
    if (hp->n_embd == 0) return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s.embedding_length' is 0", MUSE_ARCH_MUSE_GLIMMER);

    if ((st = opt_u32_or_arr(g, arch_key(key, sizeof key, "feed_forward_length"), hp->n_layer, hp->n_ff, &found, err)))
        return st;
    if ((st = opt_u32_or_arr(g, arch_key(key, sizeof key, "attention.head_count"), hp->n_layer, hp->n_head, &found,
                             err)))
        return st;
    memcpy(hp->n_head_kv, hp->n_head, sizeof hp->n_head_kv); /* default: no GQA */
    if ((st = opt_u32_or_arr(g, arch_key(key, sizeof key, "attention.head_count_kv"), hp->n_layer, hp->n_head_kv,
                             &found, err)))
        return st;

    /* head sizes: llama.cpp defaults to n_embd / n_head (208 for the 30B, wrong: the file must say 128) */
    uint32_t def_head = hp->n_head[0] ? hp->n_embd / hp->n_head[0] : 0;
    hp->n_embd_head_k = def_head;
    hp->n_embd_head_v = def_head;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "attention.key_length"), &hp->n_embd_head_k, err))) return st;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "attention.value_length"), &hp->n_embd_head_v, err))) return st;
    hp->n_rot = hp->n_embd_head_k;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "rope.dimension_count"), &hp->n_rot, err))) return st;
    hp->n_embd_head_k_swa = hp->n_embd_head_k;
    hp->n_embd_head_v_swa = hp->n_embd_head_v;
    hp->n_rot_swa = hp->n_rot;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "attention.key_length_swa"), &hp->n_embd_head_k_swa, err))) return st;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "attention.value_length_swa"), &hp->n_embd_head_v_swa, err)))
        return st;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "rope.dimension_count_swa"), &hp->n_rot_swa, err))) return st;

    /* rope */
    hp->rope_freq_base = 10000.0f;
    if ((st = muse_gguf_opt_f32(g, arch_key(key, sizeof key, "rope.freq_base"), &hp->rope_freq_base, NULL, err))) return st;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    if ((st = muse_gguf_opt_f32(g, arch_key(key, sizeof key, "rope.freq_base_swa"), &hp->rope_freq_base_swa, NULL, err)))
        return st;
    char scaling[32] = "linear";
    st = muse_gguf_get_str(g, arch_key(key, sizeof key, "rope.scaling.type"), scaling, sizeof scaling, err);
    if (st == MUSE_ERR_MISSING) muse_error_clear(err);
    else if (st != MUSE_OK) return st;
    if (!strcmp(scaling, "linear")) hp->rope_scaling = MUSE_ROPE_SCALING_LINEAR;
    else if (!strcmp(scaling, "none")) hp->rope_scaling = MUSE_ROPE_SCALING_NONE;
    else
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = '%s': only 'none' and 'linear' rope scaling are supported",
                              key, scaling);
    float factor = 0.0f;
    if ((st = muse_gguf_opt_f32(g, arch_key(key, sizeof key, "rope.scaling.factor"), &factor, &found, err))) return st;
    if (!found && (st = muse_gguf_opt_f32(g, arch_key(key, sizeof key, "rope.scale_linear"), &factor, NULL, err))) return st;
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    hp->n_ctx_orig_yarn = hp->n_ctx_train;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "rope.scaling.original_context_length"), &hp->n_ctx_orig_yarn, err)))
        return st;
    hp->causal_attn = true;
    st = muse_gguf_get_bool(g, arch_key(key, sizeof key, "attention.causal"), &hp->causal_attn, err);
    if (st == MUSE_ERR_MISSING) muse_error_clear(err);
    else if (st != MUSE_OK) return st;
    if (!hp->causal_attn)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "key '%s' = false: non-causal attention is not supported", key);

    /* arch-specific keys (llama_model_muse_glimmer::load_arch_hparams) */
    if ((st = muse_gguf_req_f32(g, arch_key(key, sizeof key, "attention.layer_norm_rms_epsilon"), &hp->f_norm_rms_eps, err)))
        return st;
    hp->f_post_norm_eps = 1e-8f;
    if ((st = muse_gguf_opt_u32(g, arch_key(key, sizeof key, "attention.sliding_window"), &hp->n_swa, err))) return st;
    hp->f_final_logit_softcapping = 30.0f; /* absent means 30, not "off" */
    if ((st = muse_gguf_opt_f32(g, arch_key(key, sizeof key, "final_logit_softcapping"), &hp->f_final_logit_softcapping, NULL,
                      err)))
        return st;
    if ((st = muse_gguf_req_f32(g, arch_key(key, sizeof key, "logit_scale"), &hp->f_logit_scale, err))) return st;
    if ((st = load_swa_pattern(hp, g, err))) return st;

    /* vocabulary size and special tokens */
    const struct muse_gguf_kv *tok = muse_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tok) {
        if (tok->value.type != MUSE_GGUF_TYPE_ARRAY || tok->value.v.arr.elem_type != MUSE_GGUF_TYPE_STRING)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key 'tokenizer.ggml.tokens' is not an array of strings");
        if (tok->value.v.arr.count > INT32_MAX)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key 'tokenizer.ggml.tokens' has too many entries");
        hp->n_vocab = (uint32_t)tok->value.v.arr.count;
    }
    st = MUSE_OK;
    hp->bos_token_id = opt_token_id(g, "tokenizer.ggml.bos_token_id", &st, err);
    hp->eos_token_id = opt_token_id(g, "tokenizer.ggml.eos_token_id", &st, err);
    hp->eot_token_id = opt_token_id(g, "tokenizer.ggml.eot_token_id", &st, err);
    hp->eom_token_id = opt_token_id(g, "tokenizer.ggml.eom_token_id", &st, err);
    if (st != MUSE_OK) return st;

    /* consistency: what the graph would assert on, reported as a malformed file */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->n_head[il] == 0)
            return muse_error_set(err, MUSE_ERR_FORMAT, "layer %u: attention.head_count is 0 or missing (key '%s.attention.head_count')",
                                  il, MUSE_ARCH_MUSE_GLIMMER);
        if (hp->n_head_kv[il] == 0 || hp->n_head[il] % hp->n_head_kv[il] != 0)
            return muse_error_set(err, MUSE_ERR_FORMAT, "layer %u: head_count %u is not a multiple of head_count_kv %u", il,
                                  hp->n_head[il], hp->n_head_kv[il]);
        /* keep every derived width well inside int32 (hostile files must not wrap a product) */
        uint64_t hd_max = hp->n_embd_head_k > hp->n_embd_head_k_swa ? hp->n_embd_head_k : hp->n_embd_head_k_swa;
        if ((uint64_t)hp->n_head[il] * hd_max > (1u << 24) || hp->n_ff[il] > (1u << 24) || hp->n_embd > (1u << 20))
            return muse_error_set(err, MUSE_ERR_FORMAT, "layer %u: sizes out of range (n_embd %u, n_head %u x head %llu, n_ff %u)",
                                  il, hp->n_embd, hp->n_head[il], (unsigned long long)hd_max, hp->n_ff[il]);
        if (hp->n_ff[il] == 0)
            return muse_error_set(err, MUSE_ERR_FORMAT, "layer %u: feed_forward_length is 0 or missing (key '%s.feed_forward_length')",
                                  il, MUSE_ARCH_MUSE_GLIMMER);
    }
    if (hp->n_embd_head_k == 0 || hp->n_embd_head_k != hp->n_embd_head_v)
        return muse_error_set(err, MUSE_ERR_FORMAT, "attention.key_length %u and value_length %u must be equal and nonzero",
                              hp->n_embd_head_k, hp->n_embd_head_v);
    if (hp->n_embd_head_k_swa == 0 || hp->n_embd_head_k_swa != hp->n_embd_head_v_swa)
        return muse_error_set(err, MUSE_ERR_FORMAT,
                              "attention.key_length_swa %u and value_length_swa %u must be equal and nonzero",
                              hp->n_embd_head_k_swa, hp->n_embd_head_v_swa);
    if (hp->n_rot_swa % 2 || hp->n_rot_swa > hp->n_embd_head_k_swa || hp->n_rot % 2 || hp->n_rot > hp->n_embd_head_k)
        return muse_error_set(err, MUSE_ERR_FORMAT, "rope.dimension_count %u / %u must be even and at most the head size",
                              hp->n_rot, hp->n_rot_swa);
    if (muse_hparams_n_swa_layers(hp) > 0 && hp->n_swa == 0)
        return muse_error_set(err, MUSE_ERR_FORMAT,
                              "key '%s.attention.sliding_window' is missing or 0 but the pattern has sliding-window layers "
                              "(llama.cpp would mask every key on them)",
                              MUSE_ARCH_MUSE_GLIMMER);
    if (!(hp->f_norm_rms_eps >= 0.0f) || !isfinite(hp->f_logit_scale) || !isfinite(hp->f_final_logit_softcapping) ||
        !(hp->rope_freq_base > 0.0f) || !(hp->rope_freq_base_swa > 0.0f) || !isfinite(hp->rope_freq_scale))
        return muse_error_set(err, MUSE_ERR_FORMAT, "a float hyperparameter is out of range (eps, logit_scale, softcap or rope base)");
    return MUSE_OK;
}

// ---- derived values -------------------------------------------------------------------------

uint32_t muse_hparams_head_dim_k(const struct muse_hparams *hp, uint32_t il) {
    return hp->is_swa[il] ? hp->n_embd_head_k_swa : hp->n_embd_head_k;
}

uint32_t muse_hparams_head_dim_v(const struct muse_hparams *hp, uint32_t il) {
    return hp->is_swa[il] ? hp->n_embd_head_v_swa : hp->n_embd_head_v;
}

uint32_t muse_hparams_n_embd_q(const struct muse_hparams *hp, uint32_t il) {
    return hp->n_head[il] * muse_hparams_head_dim_k(hp, il);
}

uint32_t muse_hparams_n_embd_k_gqa(const struct muse_hparams *hp, uint32_t il) {
    return hp->n_head_kv[il] * muse_hparams_head_dim_k(hp, il);
}

uint32_t muse_hparams_n_embd_v_gqa(const struct muse_hparams *hp, uint32_t il) {
    return hp->n_head_kv[il] * muse_hparams_head_dim_v(hp, il);
}

uint32_t muse_hparams_n_rot(const struct muse_hparams *hp, uint32_t il) {
    return hp->is_swa[il] ? hp->n_rot_swa : hp->n_rot;
}

uint32_t muse_hparams_n_swa_layers(const struct muse_hparams *hp) {
    uint32_t n = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) n += hp->is_swa[il];
    return n;
}
