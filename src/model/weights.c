/* weights.c - bind the Muse-Glimmer tensors of a parsed GGUF (weights.h) by walking the tensor table
 * (tensors.h). */
#include "model/weights.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/tensors.h"

/* The file's dimensions of layer il (muse_glimmer_dims), for the walk. */
struct dims_ctx {
    const struct muse_hparams *hp;
    int64_t n_vocab;
};

static void layer_dims(int64_t *dims, uint32_t il, const void *ctx) {
    const struct dims_ctx *c = ctx;
    muse_glimmer_dims(dims, c->hp, il, c->n_vocab);
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
    w->layers = calloc(hp->n_layer, sizeof *w->layers);
    if (!w->layers) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* the global entries first (their dimensions are the same for every layer), then layer by layer */
    const struct dims_ctx ctx = {hp, n_vocab};
    struct muse_tensor_net net = {.table = &muse_glimmer_table, .n_layer = hp->n_layer, .layer_dims = layer_dims,
                                  .dims_ctx = &ctx, .weights = w, .layers = w->layers};
    if ((st = muse_tensors_bind(&net, g, NULL, err))) goto fail;
    return MUSE_OK;
fail:
    muse_weights_free(w);
    return st;
}

void muse_weights_free(struct muse_weights *w) {
    free(w->layers);
    w->layers = NULL;
}
