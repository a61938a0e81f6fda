/*
 * vision_load.c - muse_vision_load / muse_vision_free and the facts about a loaded projector:
 * parse (mmap) the file, read the keys (vision_hparams.c), bind the tensors (vision_tensors.c),
 * then create the encoder's backend (thread pool and scratch, planned for the projector's widest
 * matmul and the chunk size of vision_encode.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"
#include "vision/vision.h"

/* Activation rows per matmul step of the encoder: big enough to reuse each weight tile over many
 * rows (the GEMM kernels hold 8 rows at a time), small enough that the converted rows of one step
 * stay in L2/L3 (256 rows of the 8960-wide FFN down projection in Q8_0: 2.4 MB). */
#define VISION_CHUNK_ROWS 256

struct muse_vision_params muse_vision_default_params(void) {
    struct muse_vision_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The longest matmul input row of the projector: the backend's activation scratch is sized by it. */
static int64_t max_ne0(const struct muse_vision *v) {
    int64_t m = max64(v->w.patch.ne0, v->hp.n_embd);
    m = max64(m, v->hp.n_ff);
    m = max64(m, muse_vision_n_embd_merged(&v->hp));
    m = max64(m, v->hp.n_mm0);
    return max64(m, v->hp.n_mm1);
}

muse_status muse_vision_load(const char *path, struct muse_vision_params params, struct muse_vision **out,
                             struct muse_error *err) {
    muse_status st = MUSE_ERR_NOMEM;
    *out = NULL;
    struct muse_vision *v = calloc(1, sizeof *v);
    if (!v) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = muse_device_open(params.backend ? params.backend : "cpu", (int32_t)params.n_threads, false, &v->dev, err)))
        goto fail;
    if (muse_device_own_memory(v->dev)) { /* the tower's ops have no shaders yet (docs/vulkan.md) */
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "the vision tower runs on the cpu and ref backends only for now, not on %s",
                            muse_device_name(v->dev));
        goto fail;
    }
    if ((st = muse_gguf_open(path, &v->gguf, err))) goto fail;
    if ((st = muse_vision_hparams_load(v->gguf, &v->hp, err))) goto fail_named;
    if ((st = muse_vision_weights_bind(v->gguf, &v->hp, &v->w, err))) goto fail_named;
    v->params = params;
    v->params.backend = muse_device_name(v->dev);
    v->n_threads = muse_device_n_threads(v->dev);
    v->chunk = VISION_CHUNK_ROWS;
    const struct muse_backend_plan plan = {
        .n_batch = v->chunk,
        .max_ne0 = max_ne0(v),
        .max_cells = 1,
        .max_head_dim = (int32_t)v->hp.head_dim,
    };
    if ((st = muse_device_reserve(v->dev, &plan, 0, err))) goto fail;
    *out = v;
    return MUSE_OK;
fail_named:
    muse_error_prefix(err, "%s: ", path);
fail:
    muse_vision_free(v);
    return st;
}

void muse_vision_free(struct muse_vision *v) {
    if (!v) return;
    muse_device_close(v->dev);
    muse_vision_weights_free(&v->w);
    muse_gguf_free(v->gguf);
    free(v);
}

void muse_vision_set_progress(struct muse_vision *v, muse_progress_fn fn, void *user) {
    v->params.progress = fn;
    v->params.progress_user = user;
}

void muse_vision_get_info(const struct muse_vision *v, struct muse_vision_info *out) {
    const struct muse_vision_hparams *hp = &v->hp;
    memset(out, 0, sizeof *out);
    out->n_layer = (int32_t)hp->n_layer;
    out->n_embd = (int32_t)hp->n_embd;
    out->n_ff = (int32_t)hp->n_ff;
    out->n_head = (int32_t)hp->n_head;
    out->head_dim = (int32_t)hp->head_dim;
    for (uint32_t il = 0; il < hp->n_layer; il++) out->n_global_layers += muse_vision_layer_is_global(hp, il);
    out->patch_size = (int32_t)hp->patch_size;
    out->n_merge = (int32_t)hp->n_merge;
    out->window_side = (int32_t)hp->window_side;
    out->n_embd_merged = (int32_t)muse_vision_n_embd_merged(hp);
    out->n_mm0 = (int32_t)hp->n_mm0;
    out->n_mm1 = (int32_t)hp->n_mm1;
    out->n_embd_out = (int32_t)hp->n_embd_out;
    out->image_size = (int32_t)hp->image_size;
    out->default_max_tokens = MUSE_VISION_DEFAULT_MAX_TOKENS;
    out->eps = hp->eps;
    memcpy(out->image_mean, hp->image_mean, sizeof out->image_mean);
    memcpy(out->image_std, hp->image_std, sizeof out->image_std);
    out->n_threads = v->n_threads;
    out->backend = muse_device_name(v->dev);
}

int32_t muse_vision_n_embd_out(const struct muse_vision *v) { return (int32_t)v->hp.n_embd_out; }

void muse_vision_prep_from_hparams(const struct muse_vision_hparams *hp, struct muse_vision_prep *p) {
    p->patch_size = (int32_t)hp->patch_size;
    p->n_merge = (int32_t)hp->n_merge;
    p->window_side = (int32_t)hp->window_side;
    memcpy(p->mean, hp->image_mean, sizeof p->mean);
    memcpy(p->std, hp->image_std, sizeof p->std);
}

muse_status muse_vision_geometry(const struct muse_vision *v, int32_t src_w, int32_t src_h, int32_t max_tokens,
                                 struct muse_image_geometry *out, struct muse_error *err) {
    struct muse_vision_prep p;
    muse_vision_prep_from_hparams(&v->hp, &p);
    return muse_vision_prep_geometry(&p, src_w, src_h, max_tokens, out, err);
}

int32_t muse_vision_n_tokens(const struct muse_vision *v, int32_t src_w, int32_t src_h, int32_t max_tokens) {
    struct muse_image_geometry g;
    return muse_vision_geometry(v, src_w, src_h, max_tokens, &g, NULL) ? -1 : g.n_tokens;
}

muse_status muse_vision_preprocess(const struct muse_vision *v, const struct muse_image *img, int32_t max_tokens,
                                   struct muse_vision_input *out, struct muse_error *err) {
    struct muse_vision_prep p;
    muse_vision_prep_from_hparams(&v->hp, &p);
    return muse_vision_prep_image(&p, img, max_tokens, out, err);
}
