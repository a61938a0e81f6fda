/* dflash_tensors.c - bind the tensors of a DFlash drafter from one descriptor table (dflash_tensors.h). */
#include "speculative/dflash_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

#define G(field) offsetof(struct muse_dflash_weights, field)
#define L(field) offsetof(struct muse_dflash_layer_weights, field)

/* dflash.md 2.3, in file order; then the optional tensors llama.cpp's dflash loader also accepts. */
static const struct muse_dflash_tensor_desc table[] = {
    {"fc.weight", false, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_FEAT, MUSE_DFLASH_DIM_EMBD, true, G(fc)},
    {"enc.output_norm.weight", false, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_ONE, true, G(enc_norm)},
    {"output_norm.weight", false, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_ONE, true, G(output_norm)},
    {"blk.%u.attn_norm.weight", true, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_ONE, true, L(attn_norm)},
    {"blk.%u.attn_q.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_Q, true, L(wq)},
    {"blk.%u.attn_k.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_KV, true, L(wk)},
    {"blk.%u.attn_v.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_KV, true, L(wv)},
    {"blk.%u.attn_output.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_Q, MUSE_DFLASH_DIM_EMBD, true, L(wo)},
    {"blk.%u.attn_q_norm.weight", true, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_HEAD, MUSE_DFLASH_DIM_ONE, true, L(attn_q_norm)},
    {"blk.%u.attn_k_norm.weight", true, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_HEAD, MUSE_DFLASH_DIM_ONE, true, L(attn_k_norm)},
    {"blk.%u.ffn_norm.weight", true, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_ONE, true, L(ffn_norm)},
    {"blk.%u.ffn_gate.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_FF, true, L(ffn_gate)},
    {"blk.%u.ffn_up.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_FF, true, L(ffn_up)},
    {"blk.%u.ffn_down.weight", true, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_FF, MUSE_DFLASH_DIM_EMBD, true, L(ffn_down)},
    {"fc.scale", false, MUSE_DFLASH_KIND_VECTOR, MUSE_DFLASH_DIM_ONE, MUSE_DFLASH_DIM_ONE, false, G(fc_scale)},
    {"token_embd.weight", false, MUSE_DFLASH_KIND_TABLE, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_VOCAB, false, G(token_embd)},
    {"output.weight", false, MUSE_DFLASH_KIND_MATRIX, MUSE_DFLASH_DIM_EMBD, MUSE_DFLASH_DIM_VOCAB, false, G(output)},
};

#undef G
#undef L

const struct muse_dflash_tensor_desc *muse_dflash_tensor_table(size_t *n) {
    *n = sizeof table / sizeof table[0];
    return table;
}

/* Tensors of drafter variants muse does not run: a name containing `part` belongs to `what`. */
static const struct {
    const char *part;
    const char *what;
} variant_tensors[] = {
    {"_conv_", "a DFlash2 drafter (block convolutions)"},
    {"selector_", "a DFlash2 drafter (the token selector)"},
    {"markov_", "a DSpark drafter (Markov head)"},
    {"conf_proj", "a DSpark drafter (confidence head)"},
    {"hc_", "a DSpark DeepSeek-V4 drafter (hyper-connections)"},
    {"d2t", "a reduced-vocabulary drafter (d2t)"},
    {"attn_sinks", "a drafter with attention sinks"},
    {"post_attention_norm", "a drafter with post-norms"},
    {"post_ffw_norm", "a drafter with post-norms"},
    {"layer_output_scale", "a drafter with layer output scales"},
    {"rope_freqs", "a drafter with rope frequency factors"},
};

static int64_t dim_value(enum muse_dflash_dim d, const struct muse_dflash_hparams *hp, int64_t n_vocab) {
    switch (d) {
    case MUSE_DFLASH_DIM_ONE: return 1;
    case MUSE_DFLASH_DIM_EMBD: return hp->n_embd;
    case MUSE_DFLASH_DIM_FEAT: return muse_dflash_n_features(hp);
    case MUSE_DFLASH_DIM_Q: return muse_dflash_n_q(hp);
    case MUSE_DFLASH_DIM_KV: return muse_dflash_n_kv(hp);
    case MUSE_DFLASH_DIM_HEAD: return hp->head_dim;
    case MUSE_DFLASH_DIM_FF: return hp->n_ff;
    case MUSE_DFLASH_DIM_VOCAB: return n_vocab;
    default: return 0;
    }
}

static void fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n && len < (int)size; i++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (len < (int)size) snprintf(buf + len, size - (size_t)len, "}");
}

/* Check tensor t (named `name`) against {ne0, ne1} and the kind; fill *w. */
static muse_status check_tensor(const struct muse_gguf_tensor *t, const char *name, enum muse_dflash_kind kind, int64_t ne0,
                                int64_t ne1, struct muse_weight *w, struct muse_error *err) {
    const int64_t want[MUSE_GGUF_MAX_DIMS] = {ne0, ne1, 1, 1};
    bool ok = true;
    for (int i = 0; i < MUSE_GGUF_MAX_DIMS; i++) ok = ok && t->ne[i] == want[i];
    if (!ok) {
        char a[96], b[96];
        fmt_shape(a, sizeof a, want, ne1 == 1 && kind == MUSE_DFLASH_KIND_VECTOR ? 1 : 2);
        fmt_shape(b, sizeof b, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has wrong shape: expected %s, found %s", name, a, b);
    }
    const struct muse_type_layout *lay = muse_type_layout_get(t->type);
    const char *tname = lay ? lay->name : "?";
    switch (kind) {
    case MUSE_DFLASH_KIND_VECTOR:
        if (t->type != MUSE_TYPE_F32) return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32", name, tname);
        break;
    case MUSE_DFLASH_KIND_MATRIX: {
        if (!muse_backend_type_supported((enum muse_type)t->type))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which has no matmul kernel", name, tname);
        const int64_t vb = muse_type_layouts[muse_type_traits[t->type].vec_dot_type].block_size;
        if (ne0 % lay->block_size || ne0 % vb)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s': row length %lld is not a multiple of the %s block size", name,
                                  (long long)ne0, tname);
        break;
    }
    case MUSE_DFLASH_KIND_TABLE:
        if (!lay || !muse_type_traits[t->type].to_float || ne0 % lay->block_size)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s' has type %s, which cannot be dequantized row by row", name, tname);
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

/* Bind descriptor d for layer il (ignored for global tensors) into base; mark the tensor used. */
static muse_status bind_one(const struct muse_dflash_tensor_desc *d, uint32_t il, void *base, const struct muse_dflash_hparams *hp,
                            int64_t n_vocab, const struct muse_gguf *g, bool *used, struct muse_error *err) {
    char name[MUSE_GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, d->name, il);
    struct muse_weight *w = (struct muse_weight *)(void *)((uint8_t *)base + d->offset);
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
    if (!t) return d->required ? muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", name) : MUSE_OK;
    used[t - g->tensors] = true;
    return check_tensor(t, name, d->kind, dim_value(d->ne0, hp, n_vocab), dim_value(d->ne1, hp, n_vocab), w, err);
}

/* Every tensor of the file must have been bound: report the first that was not. */
static muse_status check_unused(const struct muse_gguf *g, const bool *used, uint32_t n_layer, struct muse_error *err) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (used[i]) continue;
        const char *name = g->tensors[i].name;
        for (size_t v = 0; v < sizeof variant_tensors / sizeof variant_tensors[0]; v++)
            if (strstr(name, variant_tensors[v].part))
                return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor '%s': this is %s, which muse does not run (plain DFlash only)",
                                      name, variant_tensors[v].what);
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "unexpected tensor '%s' (not part of a plain DFlash drafter of %u layers)",
                              name, n_layer);
    }
    return MUSE_OK;
}

muse_status muse_dflash_weights_bind(struct muse_dflash_weights *w, const struct muse_dflash_hparams *hp, int64_t n_vocab,
                                     const struct muse_gguf *g, struct muse_error *err) {
    muse_status st = MUSE_OK;
    memset(w, 0, sizeof *w);
    bool *used = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *used);
    w->layers = calloc(hp->n_layer, sizeof *w->layers);
    if (!used || !w->layers) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct muse_dflash_tensor_desc *d = &table[i];
        for (uint32_t il = 0; il < (d->per_layer ? hp->n_layer : 1); il++) {
            void *base = d->per_layer ? (void *)&w->layers[il] : (void *)w;
            if ((st = bind_one(d, il, base, hp, n_vocab, g, used, err))) goto fail;
        }
    }
    if ((st = check_unused(g, used, hp->n_layer, err))) goto fail;
    free(used);
    return MUSE_OK;
fail:
    free(used);
    muse_dflash_weights_free(w);
    return st;
}

void muse_dflash_weights_free(struct muse_dflash_weights *w) {
    free(w->layers);
    w->layers = NULL;
}
