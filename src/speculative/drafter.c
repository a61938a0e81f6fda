/* drafter.c - load a DFlash drafter and bind it to its target model (muse.h, drafter.h). */
#include "speculative/drafter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

struct muse_drafter_params muse_drafter_default_params(void) {
    struct muse_drafter_params p = {0};
    return p;
}

muse_status muse_drafter_load_gguf(struct muse_gguf *gguf, const struct muse_model *target, struct muse_drafter **out,
                                   struct muse_error *err) {
    muse_status st;
    *out = NULL;
    struct muse_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        muse_gguf_free(gguf);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    d->gguf = gguf;
    d->target = target;
    const struct muse_hparams *thp = muse_model_hparams(target);
    const struct muse_weights *tw = muse_model_weights(target);
    d->n_vocab = tw->n_vocab;
    if ((st = muse_dflash_hparams_load(&d->hp, gguf, err))) goto fail;
    if ((st = muse_dflash_hparams_check_target(&d->hp, thp, d->n_vocab, err))) goto fail;
    if ((st = muse_dflash_weights_bind(&d->w, &d->hp, d->n_vocab, gguf, err))) goto fail;
    /* llama.cpp: the drafter's own token_embd / output when its file has them (output falls back
     * to its own token_embd), else the target's (ctx_other); the target's output.scale goes with
     * the target's head */
    d->token_embd = d->w.token_embd.data ? d->w.token_embd : tw->token_embd;
    if (d->w.output.data) {
        d->output = d->w.output;
    } else if (d->w.token_embd.data) {
        d->output = d->w.token_embd;
        if (!muse_backend_type_supported(d->output.type) ||
            d->output.ne0 % muse_type_layouts[muse_type_traits[d->output.type].vec_dot_type].block_size) {
            st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor 'token_embd.weight' (used as the LM head) has no matmul kernel");
            goto fail;
        }
    } else {
        d->output = tw->output;
        d->has_output_scale = tw->has_output_scale;
        d->output_scale = tw->output_scale;
    }
    if (d->w.fc_scale.data) {
        d->has_fc_scale = true;
        memcpy(&d->fc_scale, d->w.fc_scale.data, sizeof(float));
    }
    *out = d;
    return MUSE_OK;
fail:
    muse_drafter_free(d);
    return st;
}

muse_status muse_drafter_load(const char *path, const struct muse_model *target, struct muse_drafter_params params,
                              struct muse_drafter **out, struct muse_error *err) {
    (void)params;
    *out = NULL;
    if (!path || !target) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "muse_drafter_load needs a path and a target model");
    struct muse_gguf *g;
    muse_status st = muse_gguf_open(path, &g, err);
    if (st) return st; /* the parser's messages name the file */
    if ((st = muse_drafter_load_gguf(g, target, out, err))) muse_error_prefix(err, "%s: ", path);
    return st;
}

void muse_drafter_free(struct muse_drafter *d) {
    if (!d) return;
    muse_dflash_weights_free(&d->w);
    muse_gguf_free(d->gguf);
    free(d);
}

int32_t muse_drafter_block_size(const struct muse_drafter *d) { return (int32_t)d->hp.block_size; }
int32_t muse_drafter_mask_token(const struct muse_drafter *d) { return d->hp.mask_token_id; }
int32_t muse_drafter_n_features(const struct muse_drafter *d) { return (int32_t)muse_dflash_n_features(&d->hp); }
int32_t muse_drafter_n_target_layers(const struct muse_drafter *d) { return (int32_t)d->hp.n_target_layers; }
int32_t muse_drafter_n_swa(const struct muse_drafter *d) { return (int32_t)d->hp.n_swa; }

int32_t muse_drafter_target_layer(const struct muse_drafter *d, int32_t i) {
    return i >= 0 && (uint32_t)i < d->hp.n_target_layers ? d->hp.target_layers[i] : -1;
}

void muse_drafter_desc(const struct muse_drafter *d, char *buf, size_t size) {
    const struct muse_dflash_hparams *hp = &d->hp;
    int n = snprintf(buf, size,
                     "dflash: %u layers, n_embd %u, heads %u/%u x %u, n_ff %u, block %u, window %u, mask %d, target layers [",
                     hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->block_size, hp->n_swa,
                     hp->mask_token_id);
    for (uint32_t i = 0; i < hp->n_target_layers && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%d", i ? ", " : "", hp->target_layers[i]);
    if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "]%s", d->w.output.data ? ", own LM head" : "");
}
