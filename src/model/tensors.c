/* tensors.c - tensor tables: names, shapes, the bind-and-check of one entry, and the Muse-Glimmer
 * table (tensors.h). */
#include "model/tensors.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"
#include "model/weights.h"

int muse_tensor_name(const struct muse_tensor_desc *d, uint32_t il, char *buf, size_t size) {
    if (d->per_layer) return snprintf(buf, size, d->name, il);
    return snprintf(buf, size, "%s", d->name);
}

int muse_tensor_shape(const struct muse_tensor_desc *d, const int64_t *dims, int64_t *ne) {
    int n = 0;
    while (n < MUSE_TENSOR_MAX_DIMS && d->dims[n]) n++;
    for (int i = 0; i < MUSE_TENSOR_MAX_DIMS; i++) ne[i] = i < n ? dims[d->dims[i]] : 1;
    return n;
}

static int fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n; i++) len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? ", " : "", (long long)ne[i]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

/* " = {n_embd, n_ff}": the symbolic shape of d, for a table with dimension names. */
static int fmt_dims(char *buf, size_t size, const char *const *names, const struct muse_tensor_desc *d, int n) {
    int len = snprintf(buf, size, " = {");
    for (int i = 0; i < n; i++) len += snprintf(buf + len, size - (size_t)len, "%s%s", i ? ", " : "", names[d->dims[i]]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

/* The type check of d->kind for tensor t (shape already checked), worded as `wording`. */
static muse_status check_type(const struct muse_gguf_tensor *t, const struct muse_tensor_desc *d, const char *name,
                              enum muse_tensor_wording wording, struct muse_error *err) {
    const struct muse_type_layout *lay = muse_type_layout_get(t->type);
    const char *tname = lay ? lay->name : "?";
    const long long ne0 = (long long)t->ne[0];
    switch (d->kind) {
    case MUSE_TENSOR_VECTOR:
    case MUSE_TENSOR_SCALE:
        if (t->type != MUSE_TYPE_F32)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32", name, tname);
        return MUSE_OK;
    case MUSE_TENSOR_FLOAT:
        if (t->type != MUSE_TYPE_F32 && t->type != MUSE_TYPE_F16 && t->type != MUSE_TYPE_BF16)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32, f16 or bf16", name, tname);
        return MUSE_OK;
    case MUSE_TENSOR_MATRIX: {
        if (!lay || !muse_backend_type_supported((enum muse_type)t->type))
            return muse_error_set(err, wording == MUSE_TENSOR_WORDING_VISION ? MUSE_ERR_SHAPE : MUSE_ERR_UNSUPPORTED,
                                  "tensor '%s' has type %s, which has no matmul kernel", name, tname);
        const struct muse_type_layout *vl = &muse_type_layouts[muse_type_traits[t->type].vec_dot_type];
        if (!(t->ne[0] % lay->block_size) && !(t->ne[0] % vl->block_size)) return MUSE_OK;
        if (wording == MUSE_TENSOR_WORDING_DFLASH)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s block size",
                                  name, ne0, tname);
        if (wording == MUSE_TENSOR_WORDING_VISION)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s/%s block size (%lld)",
                                  name, ne0, tname, vl->name,
                                  (long long)(lay->block_size > vl->block_size ? lay->block_size : vl->block_size));
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s/%s block size",
                              name, ne0, tname, vl->name);
    }
    case MUSE_TENSOR_ROWS:
        if (wording == MUSE_TENSOR_WORDING_DFLASH && (!lay || !muse_type_traits[t->type].to_float || t->ne[0] % lay->block_size))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which cannot be dequantized row by row",
                                  name, tname);
        if (!lay || !muse_type_traits[t->type].to_float)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which cannot be dequantized", name, tname);
        if (t->ne[0] % lay->block_size)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s block size",
                                  name, ne0, tname);
        return MUSE_OK;
    default:
        return muse_error_set(err, MUSE_ERR_INTERNAL, "tensor '%s': bad table entry kind %d", name, (int)d->kind);
    }
}

/*
 * The binder of one tensor: find `name`, mark it in used, check its shape against ne (with
 * tab->bind_dims, a 0 in ne takes the file's size, which is then written to dims) and its type,
 * fill *w. tab NULL: the text loader's wording, no bound dimensions.
 */
static muse_status bind_one(const struct muse_gguf *g, const struct muse_tensor_table *tab, const struct muse_tensor_desc *d,
                            const char *name, int n_dims, const int64_t *ne, int64_t *dims, bool *used,
                            struct muse_weight *w, struct muse_error *err) {
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
    if (!t) {
        if (d->optional) return MUSE_OK;
        return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", name);
    }
    if (used) used[t - g->tensors] = true;
    const bool free_dims = tab && tab->bind_dims;
    int64_t want[MUSE_GGUF_MAX_DIMS];
    bool ok = true;
    for (int i = 0; i < MUSE_GGUF_MAX_DIMS; i++) {
        want[i] = i >= n_dims ? 1 : free_dims && !ne[i] ? t->ne[i] : ne[i];
        ok = ok && t->ne[i] == want[i];
    }
    if (!ok) {
        char a[128], b[128], c[160] = "";
        fmt_shape(a, sizeof a, want, n_dims);
        fmt_shape(b, sizeof b, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        if (tab && tab->dim_names) fmt_dims(c, sizeof c, tab->dim_names, d, n_dims);
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has wrong shape: expected %s%s, found %s", name, a, c, b);
    }
    muse_status st = check_type(t, d, name, tab ? tab->wording : MUSE_TENSOR_WORDING_TEXT, err);
    if (st) return st;
    if (free_dims)
        for (int i = 0; i < n_dims; i++) dims[d->dims[i]] = t->ne[i];
    w->data = t->data;
    w->type = (enum muse_type)t->type;
    w->ne0 = t->ne[0];
    w->ne1 = t->ne[1] * t->ne[2] * t->ne[3]; /* a 4-D tensor (the patch kernel) is a matrix of rows of ne0 */
    w->row_size = muse_type_row_size(w->type, w->ne0);
    w->name = t->name;
    return MUSE_OK;
}

muse_status muse_tensor_bind(const struct muse_gguf *g, const struct muse_tensor_desc *d, const char *name,
                             int n_dims, const int64_t *ne, struct muse_weight *w, struct muse_error *err) {
    return bind_one(g, NULL, d, name, n_dims, ne, NULL, NULL, w, err);
}

struct muse_weight *muse_tensor_view(const struct muse_tensor_visit *v) {
    if (!v->base || v->desc->kind == MUSE_TENSOR_SCALE) return NULL;
    return (struct muse_weight *)(void *)(v->base + v->desc->offset);
}

/* Visit entry id for layer il, unless its `when` rules it out. */
static muse_status visit(struct muse_tensor_net *net, int id, uint32_t il, muse_tensor_visit_fn fn, void *user) {
    const struct muse_tensor_table *tab = net->table;
    const struct muse_tensor_desc *d = &tab->desc[id];
    char *base = NULL;
    if (net->weights) base = d->per_layer ? (char *)net->layers + (size_t)il * tab->layer_size : (char *)net->weights;
    if (d->when != MUSE_TENSOR_ALWAYS) {
        const bool dep_present = base && ((const struct muse_weight *)(void *)(base + tab->desc[d->dep].offset))->data;
        if (dep_present != (d->when == MUSE_TENSOR_IF_PRESENT)) return MUSE_OK;
    }
    if (net->layer_dims) net->layer_dims(net->dims, d->per_layer ? il : 0, net->dims_ctx);
    char name[MUSE_GGUF_MAX_NAME + 16];
    muse_tensor_name(d, il, name, sizeof name);
    struct muse_tensor_visit v = {.id = id, .desc = d, .il = d->per_layer ? il : 0, .name = name, .base = base};
    v.n_dims = muse_tensor_shape(d, net->dims, v.ne);
    return fn(net, &v, user);
}

muse_status muse_tensors_walk(struct muse_tensor_net *net, enum muse_tensor_order order, muse_tensor_visit_fn fn,
                              void *user) {
    const struct muse_tensor_table *tab = net->table;
    const int n = tab->n_desc;
    muse_status st;
    if (order == MUSE_TENSOR_ORDER_ENTRIES) {
        for (int id = 0; id < n; id++)
            for (uint32_t il = 0; il < (tab->desc[id].per_layer ? net->n_layer : 1); il++)
                if ((st = visit(net, id, il, fn, user))) return st;
        return MUSE_OK;
    }
    int run0 = 0, run1; /* the per-layer run: entries run0 .. run1 - 1 */
    while (run0 < n && !tab->desc[run0].per_layer) run0++;
    for (run1 = run0; run1 < n && tab->desc[run1].per_layer; run1++) {}
    const int globals_end = order == MUSE_TENSOR_ORDER_GLOBALS_FIRST ? n : run0;
    for (int id = 0; id < globals_end; id++)
        if (!tab->desc[id].per_layer && (st = visit(net, id, 0, fn, user))) return st;
    for (uint32_t il = 0; il < net->n_layer; il++)
        for (int id = run0; id < run1; id++)
            if ((st = visit(net, id, il, fn, user))) return st;
    if (order == MUSE_TENSOR_ORDER_FILE)
        for (int id = run1; id < n; id++)
            if ((st = visit(net, id, 0, fn, user))) return st;
    return MUSE_OK;
}

struct bind_state {
    const struct muse_gguf *g;
    bool *used;
    struct muse_error *err;
};

static muse_status bind_visit(struct muse_tensor_net *net, const struct muse_tensor_visit *v, void *user) {
    const struct bind_state *b = user;
    const struct muse_tensor_desc *d = v->desc;
    struct muse_weight scale, *w = d->kind == MUSE_TENSOR_SCALE ? &scale : muse_tensor_view(v);
    muse_status st = bind_one(b->g, net->table, d, v->name, v->n_dims, v->ne, net->dims, b->used, w, b->err);
    if (d->kind != MUSE_TENSOR_SCALE) return st;
    /* a scale: its value, or 1.0 when absent */
    float *value = (float *)(void *)(v->base + d->offset);
    bool *found = (bool *)(v->base + d->found);
    *value = 1.0f;
    *found = st == MUSE_OK && scale.data;
    if (*found) memcpy(value, scale.data, sizeof(float));
    return st;
}

muse_status muse_tensors_bind(struct muse_tensor_net *net, const struct muse_gguf *g, bool *used, struct muse_error *err) {
    struct bind_state b = {g, used, err};
    return muse_tensors_walk(net, net->table->bind_order, bind_visit, &b);
}

/* ---- Muse-Glimmer ------------------------------------------------------------------------------ */

/* Short spellings for the table below (undefined after it). */
#define VEC .kind = MUSE_TENSOR_VECTOR
#define SCALE .kind = MUSE_TENSOR_SCALE
#define MAT .kind = MUSE_TENSOR_MATRIX
#define ROWS .kind = MUSE_TENSOR_ROWS
#define LAYER .per_layer = true
#define OPT .optional = true
#define SHAPE1(a) .dims = {MUSE_GLIMMER_DIM_##a}
#define SHAPE2(a, b) .dims = {MUSE_GLIMMER_DIM_##a, MUSE_GLIMMER_DIM_##b}
/* the separate Q/K/V (with their biases and scales) are looked at only without a fused QKV, the
 * fused QKV's bias and scale only with it */
#define SPLIT .when = MUSE_TENSOR_IF_ABSENT, .dep = MUSE_GLIMMER_ATTN_QKV
#define FUSED .when = MUSE_TENSOR_IF_PRESENT, .dep = MUSE_GLIMMER_ATTN_QKV
/* where an entry binds: a view in struct muse_weights / muse_layer_weights, or a scale's value and flag */
#define G(f) .offset = offsetof(struct muse_weights, f)
#define L(f) .offset = offsetof(struct muse_layer_weights, f)
#define GSCALE(v, f) .offset = offsetof(struct muse_weights, v), .found = offsetof(struct muse_weights, f)
#define LSCALE(v, f) .offset = offsetof(struct muse_layer_weights, v), .found = offsetof(struct muse_layer_weights, f)

const struct muse_tensor_desc muse_glimmer_tensors[MUSE_GLIMMER_TENSOR_COUNT] = {
    [MUSE_GLIMMER_TOKEN_EMBD] = {.name = "token_embd.weight", ROWS, SHAPE2(EMBD, VOCAB),
                                 .role = "token embedding, a row per token", G(token_embd)},
    [MUSE_GLIMMER_ATTN_NORM] = {.name = "blk.%u.attn_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                .role = "pre-attention RMSNorm weight (+1 folded)", L(attn_norm)},
    [MUSE_GLIMMER_ATTN_QKV] = {.name = "blk.%u.attn_qkv.weight", MAT, SHAPE2(EMBD, QKV), LAYER, OPT,
                               .role = "fused Q|K|V projection (rows: Q, then K, then V)", L(wqkv)},
    [MUSE_GLIMMER_ATTN_QKV_BIAS] = {.name = "blk.%u.attn_qkv.bias", VEC, SHAPE1(QKV), LAYER, OPT, FUSED,
                                    .role = "fused Q|K|V bias", L(bqkv)},
    [MUSE_GLIMMER_ATTN_QKV_SCALE] = {.name = "blk.%u.attn_qkv.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, FUSED,
                                     .role = "fused Q|K|V product scale", LSCALE(wqkv_scale, has_wqkv_scale)},
    [MUSE_GLIMMER_ATTN_Q] = {.name = "blk.%u.attn_q.weight", MAT, SHAPE2(EMBD, Q), LAYER, SPLIT,
                             .role = "Q projection (rows in NORM-rope order)", L(wq)},
    [MUSE_GLIMMER_ATTN_K] = {.name = "blk.%u.attn_k.weight", MAT, SHAPE2(EMBD, K), LAYER, SPLIT,
                             .role = "K projection (rows in NORM-rope order)", L(wk)},
    [MUSE_GLIMMER_ATTN_V] = {.name = "blk.%u.attn_v.weight", MAT, SHAPE2(EMBD, V), LAYER, SPLIT,
                             .role = "V projection", L(wv)},
    [MUSE_GLIMMER_ATTN_Q_BIAS] = {.name = "blk.%u.attn_q.bias", VEC, SHAPE1(Q), LAYER, OPT, SPLIT,
                                  .role = "Q bias", L(bq)},
    [MUSE_GLIMMER_ATTN_K_BIAS] = {.name = "blk.%u.attn_k.bias", VEC, SHAPE1(K), LAYER, OPT, SPLIT,
                                  .role = "K bias", L(bk)},
    [MUSE_GLIMMER_ATTN_V_BIAS] = {.name = "blk.%u.attn_v.bias", VEC, SHAPE1(V), LAYER, OPT, SPLIT,
                                  .role = "V bias", L(bv)},
    [MUSE_GLIMMER_ATTN_Q_SCALE] = {.name = "blk.%u.attn_q.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "Q product scale", LSCALE(wq_scale, has_wq_scale)},
    [MUSE_GLIMMER_ATTN_K_SCALE] = {.name = "blk.%u.attn_k.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "K product scale", LSCALE(wk_scale, has_wk_scale)},
    [MUSE_GLIMMER_ATTN_V_SCALE] = {.name = "blk.%u.attn_v.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "V product scale", LSCALE(wv_scale, has_wv_scale)},
    [MUSE_GLIMMER_ATTN_Q_NORM] = {.name = "blk.%u.attn_q_norm.weight", VEC, SHAPE1(HEAD_K), LAYER,
                                  .role = "per-head Q RMSNorm weight (all 3.87, qk_scale_factor)", L(attn_q_norm)},
    [MUSE_GLIMMER_ATTN_K_NORM] = {.name = "blk.%u.attn_k_norm.weight", VEC, SHAPE1(HEAD_K), LAYER,
                                  .role = "per-head K RMSNorm weight (all 1)", L(attn_k_norm)},
    [MUSE_GLIMMER_ATTN_GATE] = {.name = "blk.%u.attn_gate.weight", MAT, SHAPE2(EMBD, Q), LAYER,
                                .role = "attention output gate (sigmoid, per channel)", L(attn_gate)},
    [MUSE_GLIMMER_ATTN_OUTPUT] = {.name = "blk.%u.attn_output.weight", MAT, SHAPE2(Q, EMBD), LAYER,
                                  .role = "attention output projection", L(wo)},
    [MUSE_GLIMMER_ATTN_OUTPUT_SCALE] = {.name = "blk.%u.attn_output.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT,
                                        .role = "attention output product scale", LSCALE(wo_scale, has_wo_scale)},
    [MUSE_GLIMMER_POST_ATTENTION_NORM] = {.name = "blk.%u.post_attention_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                          .role = "post-attention RMSNorm weight (eps 1e-8, +1 folded)",
                                          L(post_attention_norm)},
    [MUSE_GLIMMER_FFN_NORM] = {.name = "blk.%u.ffn_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                               .role = "pre-FFN RMSNorm weight (+1 folded)", L(ffn_norm)},
    [MUSE_GLIMMER_FFN_GATE] = {.name = "blk.%u.ffn_gate.weight", MAT, SHAPE2(EMBD, FF), LAYER,
                               .role = "FFN gate projection (SiLU branch)", L(ffn_gate)},
    [MUSE_GLIMMER_FFN_UP] = {.name = "blk.%u.ffn_up.weight", MAT, SHAPE2(EMBD, FF), LAYER,
                             .role = "FFN up projection (linear branch)", L(ffn_up)},
    [MUSE_GLIMMER_FFN_DOWN] = {.name = "blk.%u.ffn_down.weight", MAT, SHAPE2(FF, EMBD), LAYER,
                               .role = "FFN down projection", L(ffn_down)},
    [MUSE_GLIMMER_POST_FFW_NORM] = {.name = "blk.%u.post_ffw_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                    .role = "post-FFN RMSNorm weight (eps 1e-8, +1 folded)", L(post_ffw_norm)},
    [MUSE_GLIMMER_OUTPUT_NORM] = {.name = "output_norm.weight", VEC, SHAPE1(EMBD),
                                  .role = "final RMSNorm weight (no +1)", G(output_norm)},
    [MUSE_GLIMMER_OUTPUT] = {.name = "output.weight", MAT, SHAPE2(EMBD, VOCAB),
                             .role = "output projection to the logits (untied: no fallback to token_embd)", G(output)},
    [MUSE_GLIMMER_OUTPUT_SCALE] = {.name = "output.weight.scale", SCALE, SHAPE1(ONE), OPT,
                                   .role = "output product scale", GSCALE(output_scale, has_output_scale)},
};

#undef VEC
#undef SCALE
#undef MAT
#undef ROWS
#undef LAYER
#undef OPT
#undef SHAPE1
#undef SHAPE2
#undef SPLIT
#undef FUSED
#undef G
#undef L
#undef GSCALE
#undef LSCALE

const struct muse_tensor_table muse_glimmer_table = {
    .desc = muse_glimmer_tensors,
    .n_desc = MUSE_GLIMMER_TENSOR_COUNT,
    .n_dim_ids = MUSE_GLIMMER_DIM_COUNT,
    .bind_order = MUSE_TENSOR_ORDER_GLOBALS_FIRST,
    .wording = MUSE_TENSOR_WORDING_TEXT,
    .layer_size = sizeof(struct muse_layer_weights),
};

void muse_glimmer_dims_uniform(int64_t *dims, int64_t n_embd, int64_t n_vocab, int64_t n_head, int64_t n_head_kv,
                               int64_t head_dim, int64_t n_ff) {
    dims[MUSE_GLIMMER_DIM_NONE] = 0;
    dims[MUSE_GLIMMER_DIM_ONE] = 1;
    dims[MUSE_GLIMMER_DIM_EMBD] = n_embd;
    dims[MUSE_GLIMMER_DIM_VOCAB] = n_vocab;
    dims[MUSE_GLIMMER_DIM_HEAD_K] = head_dim;
    dims[MUSE_GLIMMER_DIM_Q] = n_head * head_dim;
    dims[MUSE_GLIMMER_DIM_K] = n_head_kv * head_dim;
    dims[MUSE_GLIMMER_DIM_V] = n_head_kv * head_dim;
    dims[MUSE_GLIMMER_DIM_QKV] = (n_head + 2 * n_head_kv) * head_dim;
    dims[MUSE_GLIMMER_DIM_FF] = n_ff;
}

void muse_glimmer_dims(int64_t *dims, const struct muse_hparams *hp, uint32_t il, int64_t n_vocab) {
    muse_glimmer_dims_uniform(dims, hp->n_embd, n_vocab, hp->n_head[il], hp->n_head_kv[il],
                              muse_hparams_head_dim_k(hp, il), hp->n_ff[il]);
    /* V rows follow value_length (muse_hparams_load makes it equal to key_length; kept apart as llama.cpp does) */
    dims[MUSE_GLIMMER_DIM_V] = muse_hparams_n_embd_v_gqa(hp, il);
    dims[MUSE_GLIMMER_DIM_QKV] = dims[MUSE_GLIMMER_DIM_Q] + dims[MUSE_GLIMMER_DIM_K] + dims[MUSE_GLIMMER_DIM_V];
}
