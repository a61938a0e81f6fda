/*
 * libFuzzer target for model loading: arbitrary bytes -> GGUF parse -> Muse-Glimmer
 * hyperparameters -> tensor binding; when everything binds and the model is small, a context
 * is created and a few tokens go through the reference forward. Hostile metadata and shapes
 * must give error values, never a crash, an out-of-bounds read or a huge allocation.
 *
 * The forward runs only when every matrix is F32/F16/BF16: hostile values (NaN, inf, overflow)
 * reach the integer activation quantizers otherwise, whose float->int8 casts of NaN are
 * undefined (the same cast ggml does); that is the kernels' contract, not the loader's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool float_matrix(const struct muse_weight *w) {
    return !w->data || w->type == MUSE_TYPE_F32 || w->type == MUSE_TYPE_F16 || w->type == MUSE_TYPE_BF16;
}

/* Every matrix multiplies F32/F16/BF16 activations (no int8 activation quantization). */
static bool float_model(const struct muse_weights *w, uint32_t n_layer) {
    bool ok = float_matrix(&w->output);
    for (uint32_t il = 0; ok && il < n_layer; il++) {
        const struct muse_layer_weights *l = &w->layers[il];
        ok = float_matrix(&l->wq) && float_matrix(&l->wk) && float_matrix(&l->wv) && float_matrix(&l->wqkv) &&
             float_matrix(&l->attn_gate) && float_matrix(&l->wo) && float_matrix(&l->ffn_gate) &&
             float_matrix(&l->ffn_up) && float_matrix(&l->ffn_down);
    }
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct muse_model m;
    struct muse_error err;
    memset(&m, 0, sizeof m);
    if (muse_gguf_parse(data, size, "fuzz", &m.gguf, &err)) return 0;
    if (muse_hparams_load(&m.hp, m.gguf, &err) == MUSE_OK && muse_weights_bind(&m.w, &m.hp, m.gguf, &err) == MUSE_OK) {
        bool small = m.hp.n_embd <= 512 && m.hp.n_layer <= 4 && m.w.n_vocab <= 4096;
        for (uint32_t il = 0; small && il < m.hp.n_layer; il++) small = m.hp.n_ff[il] <= 2048 && m.hp.n_head[il] <= 16;
        if (small && m.hp.n_ctx_train >= 4 && float_model(&m.w, m.hp.n_layer)) {
            struct muse_context_params cp = muse_context_default_params();
            cp.backend = "ref";
            cp.n_ctx = 8;
            cp.n_batch = 2;
            struct muse_context *ctx;
            if (muse_context_create(&m, cp, &ctx, &err) == MUSE_OK) {
                int32_t toks[3] = {0, (int32_t)(m.w.n_vocab - 1), (int32_t)(m.w.n_vocab / 2)};
                float *logits = malloc(sizeof(float) * (size_t)m.w.n_vocab);
                if (logits) muse_eval(ctx, toks, 3, logits, 0, &err);
                free(logits);
                muse_context_free(ctx);
            }
        }
        muse_weights_free(&m.w);
    }
    muse_gguf_free(m.gguf);
    return 0;
}
