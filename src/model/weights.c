/* weights.c - bind the Muse-Glimmer tensors of a parsed GGUF (weights.h). */
#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

enum tensor_kind {
    KIND_VECTOR, /* a 1-D f32 tensor (norm weight, bias, scale) */
    KIND_MATRIX, /* a matmul weight: any type with a dot product */
    KIND_EMBD,   /* a row-gathered table: any type with a dequantizer */
};

static int fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n; i++) len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? ", " : "", (long long)ne[i]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

/*
 * Find `name` and check it against the expected shape {ne0} (ne1 == 0) or {ne0, ne1}; every
 * further dimension must be 1 (llama.cpp's rule). Absent and !required: w->data = NULL, OK.
 */
static muse_status get_tensor(const struct muse_gguf *g, const char *name, bool required, enum tensor_kind kind,
                              int64_t ne0, int64_t ne1, struct muse_weight *w, struct muse_error *err) {
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
    if (!t) {
        if (!required) return MUSE_OK;
        return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", name);
    }
    int64_t want[MUSE_GGUF_MAX_DIMS] = {ne0, ne1 ? ne1 : 1, 1, 1};
    int n_want = ne1 ? 2 : 1;
    bool ok = true;
    for (int i = 0; i < MUSE_GGUF_MAX_DIMS; i++) ok = ok && t->ne[i] == want[i];
    if (!ok) {
        char a[96], b[96];
        fmt_shape(a, sizeof a, want, n_want);
        fmt_shape(b, sizeof b, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has wrong shape: expected %s, found %s", name, a, b);
    }
    const struct muse_type_layout *lay = muse_type_layout_get(t->type);
    const char *tname = lay ? lay->name : "?";
    switch (kind) {
    case KIND_VECTOR:
        if (t->type != MUSE_TYPE_F32)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32", name, tname);
        break;
    case KIND_MATRIX:
        if (!muse_backend_type_supported((enum muse_type)t->type))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which has no matmul kernel", name, tname);
        {
            enum muse_type vt = muse_type_traits[t->type].vec_dot_type;
            int64_t vb = muse_type_layouts[vt].block_size;
            if (ne0 % lay->block_size || ne0 % vb)
                return muse_error_set(err, MUSE_ERR_SHAPE,
                                      "tensor '%s': row length %lld is not a multiple of the %s/%s block size", name,
                                      (long long)ne0, tname, muse_type_layouts[vt].name);
        }
        break;
    case KIND_EMBD:
        if (!lay || !muse_type_traits[t->type].to_float)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which cannot be dequantized", name, tname);
        if (ne0 % lay->block_size)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s block size",
                                  name, (long long)ne0, tname);
        break;
    }
    w->data = t->data;
    w->type = (enum muse_type)t->type;
    w->ne0 = t->ne[0];
    w->ne1 = t->ne[1];
    w->row_size = muse_type_row_size(w->type, w->ne0);
    w->name = t->name;
    return MUSE_OK;
}

/* Optional `<base>.scale` {1} f32: *value = its value, or 1.0 when absent. */
static muse_status get_scale(const struct muse_gguf *g, const char *base, float *value, bool *found,
                             struct muse_error *err) {
    char name[MUSE_GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, "%s.scale", base);
    struct muse_weight w;
    muse_status st = get_tensor(g, name, false, KIND_VECTOR, 1, 0, &w, err);
    *value = 1.0f;
    *found = st == MUSE_OK && w.data;
    if (*found) memcpy(value, w.data, sizeof(float));
    return st;
}

static muse_status bind_layer(struct muse_layer_weights *l, uint32_t il, const struct muse_hparams *hp,
                              const struct muse_gguf *g, struct muse_error *err) {
    const int64_t n_embd = hp->n_embd;
    const int64_t hd = muse_hparams_head_dim_k(hp, il);
    const int64_t n_q = muse_hparams_n_embd_q(hp, il);
    const int64_t n_k = muse_hparams_n_embd_k_gqa(hp, il);
    const int64_t n_v = muse_hparams_n_embd_v_gqa(hp, il);
    const int64_t n_ff = hp->n_ff[il];
    char name[MUSE_GGUF_MAX_NAME + 16];
    muse_status st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%u." suffix, il), name)
#define GET(suffix, req, kind, a, b, dst) \
    if ((st = get_tensor(g, NAME(suffix), req, kind, a, b, dst, err))) return st
#define SCALE(base, v, f) \
    if ((st = get_scale(g, NAME(base), v, f, err))) return st

    GET("attn_norm.weight", true, KIND_VECTOR, n_embd, 0, &l->attn_norm);
    GET("attn_qkv.weight", false, KIND_MATRIX, n_embd, n_q + n_k + n_v, &l->wqkv);
    if (l->wqkv.data) {
        GET("attn_qkv.bias", false, KIND_VECTOR, n_q + n_k + n_v, 0, &l->bqkv);
        SCALE("attn_qkv.weight", &l->wqkv_scale, &l->has_wqkv_scale);
    } else {
        GET("attn_q.weight", true, KIND_MATRIX, n_embd, n_q, &l->wq);
        GET("attn_k.weight", true, KIND_MATRIX, n_embd, n_k, &l->wk);
        GET("attn_v.weight", true, KIND_MATRIX, n_embd, n_v, &l->wv);
        GET("attn_q.bias", false, KIND_VECTOR, n_q, 0, &l->bq);
        GET("attn_k.bias", false, KIND_VECTOR, n_k, 0, &l->bk);
        GET("attn_v.bias", false, KIND_VECTOR, n_v, 0, &l->bv);
        SCALE("attn_q.weight", &l->wq_scale, &l->has_wq_scale);
        SCALE("attn_k.weight", &l->wk_scale, &l->has_wk_scale);
        SCALE("attn_v.weight", &l->wv_scale, &l->has_wv_scale);
    }
    GET("attn_q_norm.weight", true, KIND_VECTOR, hd, 0, &l->attn_q_norm);
    GET("attn_k_norm.weight", true, KIND_VECTOR, hd, 0, &l->attn_k_norm);
    GET("attn_gate.weight", true, KIND_MATRIX, n_embd, n_q, &l->attn_gate);
    GET("attn_output.weight", true, KIND_MATRIX, n_q, n_embd, &l->wo);
    SCALE("attn_output.weight", &l->wo_scale, &l->has_wo_scale);
    GET("post_attention_norm.weight", true, KIND_VECTOR, n_embd, 0, &l->post_attention_norm);
    GET("ffn_norm.weight", true, KIND_VECTOR, n_embd, 0, &l->ffn_norm);
    GET("ffn_gate.weight", true, KIND_MATRIX, n_embd, n_ff, &l->ffn_gate);
    GET("ffn_up.weight", true, KIND_MATRIX, n_embd, n_ff, &l->ffn_up);
    GET("ffn_down.weight", true, KIND_MATRIX, n_ff, n_embd, &l->ffn_down);
    GET("post_ffw_norm.weight", true, KIND_VECTOR, n_embd, 0, &l->post_ffw_norm);
    /* attn_gate.scale and ffn_{gate,up,down}.scale: ignored, as llama.cpp's graph ignores them */
#undef NAME
#undef GET
#undef SCALE
    return MUSE_OK;
}

muse_status muse_weights_bind(struct muse_weights *w, const struct muse_hparams *hp, const struct muse_gguf *g,
                              struct muse_error *err) {
    muse_status st;
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *te = muse_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor 'token_embd.weight'");
    if (hp->n_vocab && te->ne[1] != (int64_t)hp->n_vocab && te->ne[0] == (int64_t)hp->n_embd)
        return muse_error_set(err, MUSE_ERR_SHAPE,
                              "vocabulary mismatch: tokenizer.ggml.tokens has %u entries but tensor 'token_embd.weight' has %lld rows",
                              hp->n_vocab, (long long)te->ne[1]);
    int64_t n_vocab = hp->n_vocab ? (int64_t)hp->n_vocab : te->ne[1];
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return muse_error_set(err, MUSE_ERR_FORMAT, "bad vocabulary size %lld", (long long)n_vocab);
    w->n_vocab = n_vocab;
    if ((st = get_tensor(g, "token_embd.weight", true, KIND_EMBD, hp->n_embd, n_vocab, &w->token_embd, err))) goto fail;
    if ((st = get_tensor(g, "output_norm.weight", true, KIND_VECTOR, hp->n_embd, 0, &w->output_norm, err))) goto fail;
    if ((st = get_tensor(g, "output.weight", true, KIND_MATRIX, hp->n_embd, n_vocab, &w->output, err))) goto fail;
    if ((st = get_scale(g, "output.weight", &w->output_scale, &w->has_output_scale, err))) goto fail;
    w->layers = calloc(hp->n_layer, sizeof *w->layers);
    if (!w->layers) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((st = bind_layer(&w->layers[il], il, hp, g, err))) goto fail;
    return MUSE_OK;
fail:
    muse_weights_free(w);
    return st;
}

void muse_weights_free(struct muse_weights *w) {
    free(w->layers);
    w->layers = NULL;
}
