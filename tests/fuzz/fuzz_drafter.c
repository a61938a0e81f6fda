/*
 * libFuzzer target for the DFlash drafter loader: arbitrary bytes -> GGUF parse -> drafter
 * hyperparameters -> the checks against a target -> tensor binding (src/speculative); when the
 * drafter binds, is small and has only F32/F16/BF16 matrices, a draft context is made on the
 * target's ref backend and a few tokens are evaluated, injected and drafted, rolled back and
 * drafted again. Hostile metadata and shapes must give error values with a one-line message,
 * never a crash, an out-of-bounds read or a huge allocation.
 *
 * The target is a synthetic 4-layer Muse-Glimmer model of width 64 and vocabulary 300 written
 * once to TMPDIR (the seeds of seed_drafter.sh are drafters for the same dimensions). Float
 * matrices only, for the reason fuzz_model.c gives (NaN into the integer activation quantizers).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "speculative/drafter.h"
#include "synth/synth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct muse_model *target;
static struct muse_context *tctx;

static void init(void) {
    struct muse_synth_config c;
    struct muse_error err;
    char path[512];
    snprintf(path, sizeof path, "%s/muse-fuzz-drafter-target-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (muse_synth_preset("tiny", &c, &err)) abort();
    /* the dimensions of seed_drafter.sh's target */
    c.n_layer = 4, c.n_embd = 64, c.n_head = 2, c.n_head_kv = 1, c.head_dim = 32, c.n_ff = 64, c.n_vocab = 300, c.n_ctx = 64;
    c.n_swa = 4;
    if (muse_synth_write(&c, path, NULL, NULL, &err) || muse_model_load(path, muse_model_default_params(), &target, &err)) abort();
    unlink(path);
    struct muse_context_params cp = muse_context_default_params();
    cp.backend = "ref";
    cp.n_ctx = 16;
    cp.n_batch = 4;
    if (muse_context_create(target, cp, &tctx, &err)) abort();
}

static bool float_matrix(const struct muse_weight *w) {
    return !w->data || w->type == MUSE_TYPE_F32 || w->type == MUSE_TYPE_F16 || w->type == MUSE_TYPE_BF16;
}

static bool runnable(const struct muse_drafter *d) {
    const struct muse_dflash_hparams *hp = &d->hp;
    bool ok = hp->n_layer <= 4 && hp->n_ff <= 512 && hp->n_head <= 16 && hp->head_dim <= 128 && hp->block_size <= 16 &&
              muse_dflash_n_features(hp) <= 4096 && float_matrix(&d->w.fc) && float_matrix(&d->output);
    for (uint32_t il = 0; ok && il < hp->n_layer; il++) {
        const struct muse_dflash_layer_weights *l = &d->w.layers[il];
        ok = float_matrix(&l->wq) && float_matrix(&l->wk) && float_matrix(&l->wv) && float_matrix(&l->wo) &&
             float_matrix(&l->ffn_gate) && float_matrix(&l->ffn_up) && float_matrix(&l->ffn_down);
    }
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!target) init();
    uint8_t *copy = malloc(size ? size : 1); /* an exact-size copy so that reads past `size` are caught */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    struct muse_gguf *g;
    struct muse_error err;
    struct muse_drafter *d = NULL;
    if (muse_gguf_parse(copy, size, "fuzz", &g, &err) == MUSE_OK) {
        muse_status st = muse_drafter_load_gguf(g, target, &d, &err); /* owns g */
        if (st != MUSE_OK && (!err.msg[0] || strchr(err.msg, '\n'))) __builtin_trap(); /* one line, always */
    }
    if (d && runnable(d)) {
        struct muse_draft_ctx *dc;
        struct muse_draft_ctx_params p = muse_draft_ctx_default_params();
        p.kv_type = MUSE_KV_TYPE_F32;
        muse_kv_clear(tctx);
        if (muse_draft_ctx_create(d, tctx, p, &dc, &err) == MUSE_OK) {
            const int32_t toks[6] = {0, 299, 150, 7, 8, 9};
            struct muse_draft_block b;
            if (muse_draft_eval(dc, toks, 6, NULL, 0, NULL, &err) == MUSE_OK) {
                muse_draft_block(dc, 5, 0, &b, &err);
                if (muse_draft_truncate(dc, 4, &err) == MUSE_OK && muse_kv_truncate(tctx, 4, &err) == MUSE_OK)
                    muse_draft_block(dc, 6, muse_draft_rows(d, 2), &b, &err);
            }
            muse_draft_ctx_free(dc);
        }
    }
    muse_drafter_free(d);
    free(copy);
    return 0;
}
