/*
 * info_util.c - `muse info` helpers: cleaning untrusted strings for display and the
 * Muse-Glimmer hyperparameters with llama.cpp's defaults (../shared/spec/text-model.md 3).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "info.h"
#include "model/hparams.h"

_Static_assert(INFO_MAX_LAYERS == MUSE_HPARAMS_MAX_LAYERS, "per-layer arrays of the same size");

// ---- strings ----------------------------------------------------------------------------------

/* Length of the valid UTF-8 sequence at s[0..left), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, uint64_t left) {
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (left < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

char *info_clean_str(const char *s, uint64_t len, uint64_t max, bool escape) {
    uint64_t use = len < max ? len : max;
    /* worst case: every byte becomes a 4-byte escape or a 3-byte U+FFFD */
    size_t cap = (size_t)use * 4 + 8;
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (uint64_t i = 0; i < use;) {
        size_t k = p[i] ? utf8_seq(p + i, use - i) : 0;
        if (k == 0) {
            memcpy(out + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i++;
            continue;
        }
        if (k == 1 && escape && (p[i] < 0x20 || p[i] == 0x7f || p[i] == '"' || p[i] == '\\')) {
            const char *e = NULL;
            switch (p[i]) {
            case '\n': e = "\\n"; break;
            case '\t': e = "\\t"; break;
            case '\r': e = "\\r"; break;
            case '"': e = "\\\""; break;
            case '\\': e = "\\\\"; break;
            default: break;
            }
            if (e) {
                memcpy(out + n, e, 2);
                n += 2;
            } else {
                n += (size_t)snprintf(out + n, 5, "\\x%02x", p[i]);
            }
            i++;
            continue;
        }
        memcpy(out + n, p + i, k);
        n += k;
        i += k;
    }
    if (use < len) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

// ---- hyperparameters --------------------------------------------------------------------------

static void key_of(char *buf, size_t size, const char *prefix, const char *suffix) {
    snprintf(buf, size, "%s.%s", prefix, suffix);
}

/* An optional u32 (any integer type that fits): MUSE_OK, or an error other than MISSING. */
static muse_status opt_u32(const struct muse_gguf *g, const char *key, uint32_t *out, struct muse_error *err) {
    muse_status st = muse_gguf_get_u32(g, key, out, err);
    return st == MUSE_ERR_MISSING ? MUSE_OK : st;
}

static muse_status opt_f32(const struct muse_gguf *g, const char *key, float *out, struct muse_error *err) {
    muse_status st = muse_gguf_get_f32(g, key, out, err);
    return st == MUSE_ERR_MISSING ? MUSE_OK : st;
}

muse_status info_hparams_load(const struct muse_gguf *g, const char *prefix, struct info_hparams *hp,
                              struct muse_error *err) {
    char key[160];
    muse_status st;
    bool glimmer = !strcmp(prefix, "muse-glimmer");
    memset(hp, 0, sizeof(*hp));

#define REQ_U32(suffix, field)                                                                             \
    do {                                                                                                   \
        key_of(key, sizeof(key), prefix, suffix);                                                          \
        if ((st = muse_gguf_get_u32(g, key, &hp->field, err))) return st;                                  \
    } while (0)
#define OPT_U32(suffix, field)                                                                             \
    do {                                                                                                   \
        key_of(key, sizeof(key), prefix, suffix);                                                          \
        if ((st = opt_u32(g, key, &hp->field, err))) return st;                                            \
    } while (0)
#define OPT_F32(suffix, field)                                                                             \
    do {                                                                                                   \
        key_of(key, sizeof(key), prefix, suffix);                                                          \
        if ((st = opt_f32(g, key, &hp->field, err))) return st;                                            \
    } while (0)

    REQ_U32("context_length", n_ctx_train);
    REQ_U32("embedding_length", n_embd);
    REQ_U32("block_count", n_layer);
    if (hp->n_layer == 0 || hp->n_layer > INFO_MAX_LAYERS)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s.block_count' = %u is outside 1..%d", prefix, hp->n_layer,
                              INFO_MAX_LAYERS);
    uint32_t n = hp->n_layer;

    key_of(key, sizeof(key), prefix, "feed_forward_length");
    st = muse_gguf_get_u32_per_layer(g, key, n, hp->n_ff, &hp->ff_per_layer, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    key_of(key, sizeof(key), prefix, "attention.head_count");
    st = muse_gguf_get_u32_per_layer(g, key, n, hp->n_head, &hp->head_per_layer, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    key_of(key, sizeof(key), prefix, "attention.head_count_kv");
    st = muse_gguf_get_u32_per_layer(g, key, n, hp->n_head_kv, &hp->head_kv_per_layer, err);
    if (st == MUSE_ERR_MISSING) {
        memcpy(hp->n_head_kv, hp->n_head, sizeof(hp->n_head));
        hp->head_kv_per_layer = hp->head_per_layer;
    } else if (st) {
        return st;
    }

    uint32_t def_head = hp->n_head[0] ? hp->n_embd / hp->n_head[0] : 0;
    hp->n_embd_head_k = def_head;
    hp->n_embd_head_v = def_head;
    OPT_U32("attention.key_length", n_embd_head_k);
    OPT_U32("attention.value_length", n_embd_head_v);
    hp->n_rot = hp->n_embd_head_k;
    OPT_U32("rope.dimension_count", n_rot);
    hp->n_embd_head_k_swa = hp->n_embd_head_k;
    hp->n_embd_head_v_swa = hp->n_embd_head_v;
    hp->n_rot_swa = hp->n_rot;
    OPT_U32("attention.key_length_swa", n_embd_head_k_swa);
    OPT_U32("attention.value_length_swa", n_embd_head_v_swa);
    OPT_U32("rope.dimension_count_swa", n_rot_swa);

    hp->rope_freq_base = 10000.0f;
    OPT_F32("rope.freq_base", rope_freq_base);
    hp->rope_freq_base_swa = hp->rope_freq_base;
    OPT_F32("rope.freq_base_swa", rope_freq_base_swa);
    snprintf(hp->rope_scaling_type, sizeof(hp->rope_scaling_type), "linear");
    key_of(key, sizeof(key), prefix, "rope.scaling.type");
    st = muse_gguf_get_str(g, key, hp->rope_scaling_type, sizeof(hp->rope_scaling_type), err);
    if (st && st != MUSE_ERR_MISSING) return st;
    float factor = 0.0f;
    key_of(key, sizeof(key), prefix, "rope.scaling.factor");
    if ((st = opt_f32(g, key, &factor, err))) return st;
    if (factor == 0.0f) {
        key_of(key, sizeof(key), prefix, "rope.scale_linear");
        if ((st = opt_f32(g, key, &factor, err))) return st;
    }
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    hp->n_ctx_orig_yarn = hp->n_ctx_train;
    OPT_U32("rope.scaling.original_context_length", n_ctx_orig_yarn);
    hp->causal_attn = true;
    key_of(key, sizeof(key), prefix, "attention.causal");
    st = muse_gguf_get_bool(g, key, &hp->causal_attn, err);
    if (st && st != MUSE_ERR_MISSING) return st;

    key_of(key, sizeof(key), prefix, "attention.layer_norm_rms_epsilon");
    if ((st = muse_gguf_get_f32(g, key, &hp->f_norm_rms_eps, err))) return st;
    hp->f_post_norm_eps = 1e-8f;
    OPT_U32("attention.sliding_window", n_swa);
    hp->f_final_logit_softcapping = glimmer ? 30.0f : 0.0f;
    OPT_F32("final_logit_softcapping", f_final_logit_softcapping);
    if (glimmer) {
        key_of(key, sizeof(key), prefix, "logit_scale");
        if ((st = muse_gguf_get_f32(g, key, &hp->f_logit_scale, err))) return st;
    } else {
        hp->f_logit_scale = 1.0f;
        OPT_F32("logit_scale", f_logit_scale);
    }

    /* sliding_window_pattern: scalar period P (the last layer of each period is full) or a
     * per-layer bool/int array of exactly block_count entries; llama.cpp requires one of them. */
    key_of(key, sizeof(key), prefix, "attention.sliding_window_pattern");
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return muse_error_set(err, MUSE_ERR_MISSING, "key '%s' not found (llama.cpp requires it)", key);
    if (kv->value.type == MUSE_GGUF_TYPE_ARRAY) {
        const struct muse_gguf_value *a = &kv->value;
        if (a->v.arr.elem_type != MUSE_GGUF_TYPE_BOOL && !muse_gguf_type_is_int(a->v.arr.elem_type))
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is an array of %s, expected BOOL or integers", key,
                                  muse_gguf_type_name(a->v.arr.elem_type));
        if (a->v.arr.count != n)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has %llu entries, expected block_count = %u", key,
                                  (unsigned long long)a->v.arr.count, n);
        for (uint32_t il = 0; il < n; il++) hp->is_swa[il] = muse_gguf_arr_i64(a, il) != 0;
    } else {
        uint32_t p;
        if ((st = muse_gguf_get_u32(g, key, &p, err))) return st;
        hp->swa_pattern_is_period = true;
        hp->swa_period = p;
        for (uint32_t il = 0; il < n; il++) hp->is_swa[il] = p == 0 || il % p < p - 1;
    }

    const struct muse_gguf_kv *tokens = muse_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tokens && tokens->value.type == MUSE_GGUF_TYPE_ARRAY && tokens->value.v.arr.count <= UINT32_MAX)
        hp->n_vocab = (uint32_t)tokens->value.v.arr.count;
    return MUSE_OK;
#undef REQ_U32
#undef OPT_U32
#undef OPT_F32
}

static bool stored_as_array(const struct muse_gguf *g, const char *suffix) {
    char key[160];
    key_of(key, sizeof(key), MUSE_ARCH_MUSE_GLIMMER, suffix);
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    return kv && kv->value.type == MUSE_GGUF_TYPE_ARRAY;
}

muse_status info_hparams_load_glimmer(const struct muse_gguf *g, struct info_hparams *hp, struct muse_error *err) {
    struct muse_hparams *mp = malloc(sizeof(*mp));   /* ~6 KB: kept off the stack */
    if (!mp) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_status st = muse_hparams_load(mp, g, err);
    if (st) {
        free(mp);
        return st;
    }
    const struct muse_hparams *m = mp;
    memset(hp, 0, sizeof(*hp));
    hp->n_ctx_train = m->n_ctx_train;
    hp->n_embd = m->n_embd;
    hp->n_layer = m->n_layer;
    hp->n_vocab = m->n_vocab;
    memcpy(hp->n_ff, m->n_ff, sizeof(hp->n_ff));
    memcpy(hp->n_head, m->n_head, sizeof(hp->n_head));
    memcpy(hp->n_head_kv, m->n_head_kv, sizeof(hp->n_head_kv));
    memcpy(hp->is_swa, m->is_swa, sizeof(hp->is_swa));
    hp->ff_per_layer = stored_as_array(g, "feed_forward_length");
    hp->head_per_layer = stored_as_array(g, "attention.head_count");
    hp->head_kv_per_layer = stored_as_array(g, "attention.head_count_kv");
    hp->n_embd_head_k = m->n_embd_head_k;
    hp->n_embd_head_v = m->n_embd_head_v;
    hp->n_embd_head_k_swa = m->n_embd_head_k_swa;
    hp->n_embd_head_v_swa = m->n_embd_head_v_swa;
    hp->n_rot = m->n_rot;
    hp->n_rot_swa = m->n_rot_swa;
    hp->f_norm_rms_eps = m->f_norm_rms_eps;
    hp->f_post_norm_eps = m->f_post_norm_eps;
    hp->n_swa = m->n_swa;
    hp->swa_pattern_is_period = m->swa_pattern_form == MUSE_SWA_PATTERN_FORM_PERIOD;
    hp->swa_period = m->swa_period;
    hp->f_final_logit_softcapping = m->f_final_logit_softcapping;
    hp->f_logit_scale = m->f_logit_scale;
    hp->rope_freq_base = m->rope_freq_base;
    hp->rope_freq_base_swa = m->rope_freq_base_swa;
    snprintf(hp->rope_scaling_type, sizeof(hp->rope_scaling_type), "%s",
             m->rope_scaling == MUSE_ROPE_SCALING_NONE ? "none" : "linear");
    hp->rope_freq_scale = m->rope_freq_scale;
    hp->n_ctx_orig_yarn = m->n_ctx_orig_yarn;
    hp->causal_attn = m->causal_attn;
    free(mp);
    return MUSE_OK;
}
