/* tensors.c - tensor tables: names, shapes, the bind-and-check of one entry, and the Muse-Glimmer
 * table (tensors.h). */
#include "model/tensors.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

int muse_tensor_name(const struct muse_tensor_desc *d, uint32_t il, char *buf, size_t size) {
    if (d->per_layer) return snprintf(buf, size, d->name, il);
    return snprintf(buf, size, "%s", d->name);
}

int muse_tensor_shape(const struct muse_tensor_desc *d, const int64_t *dims, int64_t ne[2]) {
    ne[0] = dims[d->dims[0]];
    ne[1] = d->dims[1] ? dims[d->dims[1]] : 1;
    return d->dims[1] ? 2 : 1;
}

static int fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n; i++) len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? ", " : "", (long long)ne[i]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

muse_status muse_tensor_bind(const struct muse_gguf *g, const struct muse_tensor_desc *d, const char *name,
                             int n_dims, const int64_t ne[2], struct muse_weight *w, struct muse_error *err) {
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
    if (!t) {
        if (d->optional) return MUSE_OK;
        return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", name);
    }
    int64_t want[MUSE_GGUF_MAX_DIMS] = {ne[0], n_dims > 1 ? ne[1] : 1, 1, 1};
    bool ok = true;
    for (int i = 0; i < MUSE_GGUF_MAX_DIMS; i++) ok = ok && t->ne[i] == want[i];
    if (!ok) {
        char a[96], b[96];
        fmt_shape(a, sizeof a, want, n_dims);
        fmt_shape(b, sizeof b, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has wrong shape: expected %s, found %s", name, a, b);
    }
    const struct muse_type_layout *lay = muse_type_layout_get(t->type);
    const char *tname = lay ? lay->name : "?";
    switch (d->kind) {
    case MUSE_TENSOR_VECTOR:
    case MUSE_TENSOR_SCALE:
        if (t->type != MUSE_TYPE_F32)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32", name, tname);
        break;
    case MUSE_TENSOR_MATRIX:
        if (!muse_backend_type_supported((enum muse_type)t->type))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which has no matmul kernel", name, tname);
        {
            enum muse_type vt = muse_type_traits[t->type].vec_dot_type;
            int64_t vb = muse_type_layouts[vt].block_size;
            if (ne[0] % lay->block_size || ne[0] % vb)
                return muse_error_set(err, MUSE_ERR_SHAPE,
                                      "tensor '%s': row length %lld is not a multiple of the %s/%s block size", name,
                                      (long long)ne[0], tname, muse_type_layouts[vt].name);
        }
        break;
    case MUSE_TENSOR_ROWS:
        if (!lay || !muse_type_traits[t->type].to_float)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which cannot be dequantized", name, tname);
        if (ne[0] % lay->block_size)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s block size",
                                  name, (long long)ne[0], tname);
        break;
    default:
        return muse_error_set(err, MUSE_ERR_INTERNAL, "tensor '%s': bad table entry kind %d", name, (int)d->kind);
    }
    w->data = t->data;
    w->type = (enum muse_type)t->type;
    w->ne0 = t->ne[0];
    w->ne1 = t->ne[1];
    w->row_size = muse_type_row_size(w->type, w->ne0);
    w->name = t->name;
    return MUSE_OK;
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

const struct muse_tensor_desc muse_glimmer_tensors[MUSE_GLIMMER_TENSOR_COUNT] = {
    [MUSE_GLIMMER_TOKEN_EMBD] = {.name = "token_embd.weight", ROWS, SHAPE2(EMBD, VOCAB),
                                 .role = "token embedding, a row per token"},
    [MUSE_GLIMMER_ATTN_NORM] = {.name = "blk.%u.attn_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                .role = "pre-attention RMSNorm weight (+1 folded)"},
    [MUSE_GLIMMER_ATTN_QKV] = {.name = "blk.%u.attn_qkv.weight", MAT, SHAPE2(EMBD, QKV), LAYER, OPT,
                               .role = "fused Q|K|V projection (rows: Q, then K, then V)"},
    [MUSE_GLIMMER_ATTN_QKV_BIAS] = {.name = "blk.%u.attn_qkv.bias", VEC, SHAPE1(QKV), LAYER, OPT, FUSED,
                                    .role = "fused Q|K|V bias"},
    [MUSE_GLIMMER_ATTN_QKV_SCALE] = {.name = "blk.%u.attn_qkv.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, FUSED,
                                     .role = "fused Q|K|V product scale"},
    [MUSE_GLIMMER_ATTN_Q] = {.name = "blk.%u.attn_q.weight", MAT, SHAPE2(EMBD, Q), LAYER, SPLIT,
                             .role = "Q projection (rows in NORM-rope order)"},
    [MUSE_GLIMMER_ATTN_K] = {.name = "blk.%u.attn_k.weight", MAT, SHAPE2(EMBD, K), LAYER, SPLIT,
                             .role = "K projection (rows in NORM-rope order)"},
    [MUSE_GLIMMER_ATTN_V] = {.name = "blk.%u.attn_v.weight", MAT, SHAPE2(EMBD, V), LAYER, SPLIT,
                             .role = "V projection"},
    [MUSE_GLIMMER_ATTN_Q_BIAS] = {.name = "blk.%u.attn_q.bias", VEC, SHAPE1(Q), LAYER, OPT, SPLIT, .role = "Q bias"},
    [MUSE_GLIMMER_ATTN_K_BIAS] = {.name = "blk.%u.attn_k.bias", VEC, SHAPE1(K), LAYER, OPT, SPLIT, .role = "K bias"},
    [MUSE_GLIMMER_ATTN_V_BIAS] = {.name = "blk.%u.attn_v.bias", VEC, SHAPE1(V), LAYER, OPT, SPLIT, .role = "V bias"},
    [MUSE_GLIMMER_ATTN_Q_SCALE] = {.name = "blk.%u.attn_q.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "Q product scale"},
    [MUSE_GLIMMER_ATTN_K_SCALE] = {.name = "blk.%u.attn_k.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "K product scale"},
    [MUSE_GLIMMER_ATTN_V_SCALE] = {.name = "blk.%u.attn_v.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT, SPLIT,
                                   .role = "V product scale"},
    [MUSE_GLIMMER_ATTN_Q_NORM] = {.name = "blk.%u.attn_q_norm.weight", VEC, SHAPE1(HEAD_K), LAYER,
                                  .role = "per-head Q RMSNorm weight (all 3.87, qk_scale_factor)"},
    [MUSE_GLIMMER_ATTN_K_NORM] = {.name = "blk.%u.attn_k_norm.weight", VEC, SHAPE1(HEAD_K), LAYER,
                                  .role = "per-head K RMSNorm weight (all 1)"},
    [MUSE_GLIMMER_ATTN_GATE] = {.name = "blk.%u.attn_gate.weight", MAT, SHAPE2(EMBD, Q), LAYER,
                                .role = "attention output gate (sigmoid, per channel)"},
    [MUSE_GLIMMER_ATTN_OUTPUT] = {.name = "blk.%u.attn_output.weight", MAT, SHAPE2(Q, EMBD), LAYER,
                                  .role = "attention output projection"},
    [MUSE_GLIMMER_ATTN_OUTPUT_SCALE] = {.name = "blk.%u.attn_output.weight.scale", SCALE, SHAPE1(ONE), LAYER, OPT,
                                        .role = "attention output product scale"},
    [MUSE_GLIMMER_POST_ATTENTION_NORM] = {.name = "blk.%u.post_attention_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                          .role = "post-attention RMSNorm weight (eps 1e-8, +1 folded)"},
    [MUSE_GLIMMER_FFN_NORM] = {.name = "blk.%u.ffn_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                               .role = "pre-FFN RMSNorm weight (+1 folded)"},
    [MUSE_GLIMMER_FFN_GATE] = {.name = "blk.%u.ffn_gate.weight", MAT, SHAPE2(EMBD, FF), LAYER,
                               .role = "FFN gate projection (SiLU branch)"},
    [MUSE_GLIMMER_FFN_UP] = {.name = "blk.%u.ffn_up.weight", MAT, SHAPE2(EMBD, FF), LAYER,
                             .role = "FFN up projection (linear branch)"},
    [MUSE_GLIMMER_FFN_DOWN] = {.name = "blk.%u.ffn_down.weight", MAT, SHAPE2(FF, EMBD), LAYER,
                               .role = "FFN down projection"},
    [MUSE_GLIMMER_POST_FFW_NORM] = {.name = "blk.%u.post_ffw_norm.weight", VEC, SHAPE1(EMBD), LAYER,
                                    .role = "post-FFN RMSNorm weight (eps 1e-8, +1 folded)"},
    [MUSE_GLIMMER_OUTPUT_NORM] = {.name = "output_norm.weight", VEC, SHAPE1(EMBD),
                                  .role = "final RMSNorm weight (no +1)"},
    [MUSE_GLIMMER_OUTPUT] = {.name = "output.weight", MAT, SHAPE2(EMBD, VOCAB),
                             .role = "output projection to the logits (untied: no fallback to token_embd)"},
    [MUSE_GLIMMER_OUTPUT_SCALE] = {.name = "output.weight.scale", SCALE, SHAPE1(ONE), OPT,
                                   .role = "output product scale"},
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
