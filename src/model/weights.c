/* weights.c - bind the Muse-Glimmer tensors of a parsed GGUF (weights.h) by walking the tensor table
 * (tensors.h). */
#include "model/weights.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/tensors.h"

/*
 * Where each entry of muse_glimmer_tensors binds: the offset of its struct muse_weight in struct
 * muse_weights (global entries) or struct muse_layer_weights (per-layer entries); a scale entry
 * binds its value (1.0 when absent) and its found flag instead.
 */
struct slot {
    size_t weight;
    size_t value, found; /* scale entries */
};
#define GLOBAL(f) {.weight = offsetof(struct muse_weights, f)}
#define LAYER(f) {.weight = offsetof(struct muse_layer_weights, f)}
#define GLOBAL_SCALE(v, f) {.value = offsetof(struct muse_weights, v), .found = offsetof(struct muse_weights, f)}
#define LAYER_SCALE(v, f) {.value = offsetof(struct muse_layer_weights, v), .found = offsetof(struct muse_layer_weights, f)}
static const struct slot slots[MUSE_GLIMMER_TENSOR_COUNT] = {
    [MUSE_GLIMMER_TOKEN_EMBD] = GLOBAL(token_embd),
    [MUSE_GLIMMER_ATTN_NORM] = LAYER(attn_norm),
    [MUSE_GLIMMER_ATTN_QKV] = LAYER(wqkv),
    [MUSE_GLIMMER_ATTN_QKV_BIAS] = LAYER(bqkv),
    [MUSE_GLIMMER_ATTN_QKV_SCALE] = LAYER_SCALE(wqkv_scale, has_wqkv_scale),
    [MUSE_GLIMMER_ATTN_Q] = LAYER(wq),
    [MUSE_GLIMMER_ATTN_K] = LAYER(wk),
    [MUSE_GLIMMER_ATTN_V] = LAYER(wv),
    [MUSE_GLIMMER_ATTN_Q_BIAS] = LAYER(bq),
    [MUSE_GLIMMER_ATTN_K_BIAS] = LAYER(bk),
    [MUSE_GLIMMER_ATTN_V_BIAS] = LAYER(bv),
    [MUSE_GLIMMER_ATTN_Q_SCALE] = LAYER_SCALE(wq_scale, has_wq_scale),
    [MUSE_GLIMMER_ATTN_K_SCALE] = LAYER_SCALE(wk_scale, has_wk_scale),
    [MUSE_GLIMMER_ATTN_V_SCALE] = LAYER_SCALE(wv_scale, has_wv_scale),
    [MUSE_GLIMMER_ATTN_Q_NORM] = LAYER(attn_q_norm),
    [MUSE_GLIMMER_ATTN_K_NORM] = LAYER(attn_k_norm),
    [MUSE_GLIMMER_ATTN_GATE] = LAYER(attn_gate),
    [MUSE_GLIMMER_ATTN_OUTPUT] = LAYER(wo),
    [MUSE_GLIMMER_ATTN_OUTPUT_SCALE] = LAYER_SCALE(wo_scale, has_wo_scale),
    [MUSE_GLIMMER_POST_ATTENTION_NORM] = LAYER(post_attention_norm),
    [MUSE_GLIMMER_FFN_NORM] = LAYER(ffn_norm),
    [MUSE_GLIMMER_FFN_GATE] = LAYER(ffn_gate),
    [MUSE_GLIMMER_FFN_UP] = LAYER(ffn_up),
    [MUSE_GLIMMER_FFN_DOWN] = LAYER(ffn_down),
    [MUSE_GLIMMER_POST_FFW_NORM] = LAYER(post_ffw_norm),
    [MUSE_GLIMMER_OUTPUT_NORM] = GLOBAL(output_norm),
    [MUSE_GLIMMER_OUTPUT] = GLOBAL(output),
    [MUSE_GLIMMER_OUTPUT_SCALE] = GLOBAL_SCALE(output_scale, has_output_scale),
};
#undef GLOBAL
#undef LAYER
#undef GLOBAL_SCALE
#undef LAYER_SCALE

/*
 * Bind entry `id` of the table into `base` (a struct muse_weights, or the struct
 * muse_layer_weights of layer il), unless its `when` says it is not looked at.
 */
static muse_status bind_entry(int id, char *base, uint32_t il, const int64_t *dims, const struct muse_gguf *g,
                              struct muse_error *err) {
    const struct muse_tensor_desc *d = &muse_glimmer_tensors[id];
    const struct slot *s = &slots[id];
    if (d->when != MUSE_TENSOR_ALWAYS) {
        bool dep_present = ((const struct muse_weight *)(base + slots[d->dep].weight))->data != NULL;
        if (dep_present != (d->when == MUSE_TENSOR_IF_PRESENT)) return MUSE_OK;
    }
    char name[MUSE_GGUF_MAX_NAME + 16];
    muse_tensor_name(d, il, name, sizeof name);
    int64_t ne[2];
    int n_dims = muse_tensor_shape(d, dims, ne);
    if (d->kind != MUSE_TENSOR_SCALE)
        return muse_tensor_bind(g, d, name, n_dims, ne, (struct muse_weight *)(base + s->weight), err);
    /* a scale: its value, or 1.0 when absent */
    struct muse_weight w;
    muse_status st = muse_tensor_bind(g, d, name, n_dims, ne, &w, err);
    float *value = (float *)(base + s->value);
    bool *found = (bool *)(base + s->found);
    *value = 1.0f;
    *found = st == MUSE_OK && w.data;
    if (*found) memcpy(value, w.data, sizeof(float));
    return st;
}

muse_status muse_weights_bind(struct muse_weights *w, const struct muse_hparams *hp, const struct muse_gguf *g,
                              struct muse_error *err) {
    muse_status st;
    memset(w, 0, sizeof *w);
    const char *te_name = muse_glimmer_tensors[MUSE_GLIMMER_TOKEN_EMBD].name;
    const struct muse_gguf_tensor *te = muse_gguf_find_tensor(g, te_name);
    if (!te) return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", te_name);
    if (hp->n_vocab && te->ne[1] != (int64_t)hp->n_vocab && te->ne[0] == (int64_t)hp->n_embd)
        return muse_error_set(err, MUSE_ERR_SHAPE,
                              "vocabulary mismatch: tokenizer.ggml.tokens has %u entries but tensor '%s' has %lld rows",
                              hp->n_vocab, te_name, (long long)te->ne[1]);
    int64_t n_vocab = hp->n_vocab ? (int64_t)hp->n_vocab : te->ne[1];
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return muse_error_set(err, MUSE_ERR_FORMAT, "bad vocabulary size %lld", (long long)n_vocab);
    w->n_vocab = n_vocab;
    int64_t dims[MUSE_GLIMMER_DIM_COUNT];
    /* the global entries first (their dimensions are the same for every layer), then layer by layer */
    muse_glimmer_dims(dims, hp, 0, n_vocab);
    for (int id = 0; id < MUSE_GLIMMER_TENSOR_COUNT; id++)
        if (!muse_glimmer_tensors[id].per_layer && (st = bind_entry(id, (char *)w, 0, dims, g, err))) goto fail;
    w->layers = calloc(hp->n_layer, sizeof *w->layers);
    if (!w->layers) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        muse_glimmer_dims(dims, hp, il, n_vocab);
        for (int id = 0; id < MUSE_GLIMMER_TENSOR_COUNT; id++)
            if (muse_glimmer_tensors[id].per_layer && (st = bind_entry(id, (char *)&w->layers[il], il, dims, g, err)))
                goto fail;
    }
    return MUSE_OK;
fail:
    muse_weights_free(w);
    return st;
}

void muse_weights_free(struct muse_weights *w) {
    free(w->layers);
    w->layers = NULL;
}
