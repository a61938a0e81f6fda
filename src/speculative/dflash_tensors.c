/* dflash_tensors.c - the tensor table of a DFlash drafter and its loader (dflash_tensors.h), bound by the one binder
 * of model/tensors.c. */
#include "speculative/dflash_tensors.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Short spellings for the table below (undefined after it). */
#define VEC .kind = MUSE_TENSOR_VECTOR
#define MAT .kind = MUSE_TENSOR_MATRIX
#define ROWS .kind = MUSE_TENSOR_ROWS
#define LAYER .per_layer = true
#define OPT .optional = true
#define SHAPE1(a) .dims = {MUSE_DFLASH_DIM_##a}
#define SHAPE2(a, b) .dims = {MUSE_DFLASH_DIM_##a, MUSE_DFLASH_DIM_##b}
#define G(f) .offset = offsetof(struct muse_dflash_weights, f)
#define L(f) .offset = offsetof(struct muse_dflash_layer_weights, f)

/* dflash.md 2.3, in file order; then the optional tensors llama.cpp's dflash loader also accepts. */
static const struct muse_tensor_desc dflash_tensors[] = {
    {.name = "fc.weight", MAT, SHAPE2(FEAT, EMBD), .role = "feature fusion (target layers -> n_embd)", G(fc)},
    {.name = "enc.output_norm.weight", VEC, SHAPE1(EMBD), .role = "RMSNorm after fc", G(enc_norm)},
    {.name = "output_norm.weight", VEC, SHAPE1(EMBD), .role = "the decoder's final RMSNorm", G(output_norm)},
    {.name = "blk.%u.attn_norm.weight", VEC, SHAPE1(EMBD), LAYER, .role = "pre-attention RMSNorm", L(attn_norm)},
    {.name = "blk.%u.attn_q.weight", MAT, SHAPE2(EMBD, Q), LAYER, .role = "Q projection", L(wq)},
    {.name = "blk.%u.attn_k.weight", MAT, SHAPE2(EMBD, KV), LAYER, .role = "K projection", L(wk)},
    {.name = "blk.%u.attn_v.weight", MAT, SHAPE2(EMBD, KV), LAYER, .role = "V projection", L(wv)},
    {.name = "blk.%u.attn_output.weight", MAT, SHAPE2(Q, EMBD), LAYER, .role = "attention output projection", L(wo)},
    {.name = "blk.%u.attn_q_norm.weight", VEC, SHAPE1(HEAD), LAYER, .role = "per-head Q RMSNorm", L(attn_q_norm)},
    {.name = "blk.%u.attn_k_norm.weight", VEC, SHAPE1(HEAD), LAYER, .role = "per-head K RMSNorm", L(attn_k_norm)},
    {.name = "blk.%u.ffn_norm.weight", VEC, SHAPE1(EMBD), LAYER, .role = "pre-FFN RMSNorm", L(ffn_norm)},
    {.name = "blk.%u.ffn_gate.weight", MAT, SHAPE2(EMBD, FF), LAYER, .role = "FFN gate projection", L(ffn_gate)},
    {.name = "blk.%u.ffn_up.weight", MAT, SHAPE2(EMBD, FF), LAYER, .role = "FFN up projection", L(ffn_up)},
    {.name = "blk.%u.ffn_down.weight", MAT, SHAPE2(FF, EMBD), LAYER, .role = "FFN down projection", L(ffn_down)},
    {.name = "fc.scale", VEC, SHAPE1(ONE), OPT, .role = "fc output scale (llama.cpp's fc.scale)", G(fc_scale)},
    {.name = "token_embd.weight", ROWS, SHAPE2(EMBD, VOCAB), OPT, .role = "own token embedding", G(token_embd)},
    {.name = "output.weight", MAT, SHAPE2(EMBD, VOCAB), OPT, .role = "own LM head", G(output)},
};

#undef VEC
#undef MAT
#undef ROWS
#undef LAYER
#undef OPT
#undef SHAPE1
#undef SHAPE2
#undef G
#undef L

const struct muse_tensor_table muse_dflash_table = {
    .desc = dflash_tensors,
    .n_desc = sizeof dflash_tensors / sizeof dflash_tensors[0],
    .n_dim_ids = MUSE_DFLASH_DIM_COUNT,
    .bind_order = MUSE_TENSOR_ORDER_ENTRIES,
    .wording = MUSE_TENSOR_WORDING_DFLASH,
    .layer_size = sizeof(struct muse_dflash_layer_weights),
};

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

void muse_dflash_dims(int64_t *dims, const struct muse_dflash_hparams *hp, int64_t n_vocab) {
    dims[MUSE_DFLASH_DIM_NONE] = 0;
    dims[MUSE_DFLASH_DIM_ONE] = 1;
    dims[MUSE_DFLASH_DIM_EMBD] = hp->n_embd;
    dims[MUSE_DFLASH_DIM_FEAT] = muse_dflash_n_features(hp);
    dims[MUSE_DFLASH_DIM_Q] = muse_dflash_n_q(hp);
    dims[MUSE_DFLASH_DIM_KV] = muse_dflash_n_kv(hp);
    dims[MUSE_DFLASH_DIM_HEAD] = hp->head_dim;
    dims[MUSE_DFLASH_DIM_FF] = hp->n_ff;
    dims[MUSE_DFLASH_DIM_VOCAB] = n_vocab;
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
    struct muse_tensor_net net = {.table = &muse_dflash_table, .n_layer = hp->n_layer, .weights = w, .layers = w->layers};
    muse_dflash_dims(net.dims, hp, n_vocab);
    if ((st = muse_tensors_bind(&net, g, used, err))) goto fail;
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
