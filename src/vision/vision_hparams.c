/*
 * vision_hparams.c - the clip.* keys of a Muse-Glimmer mmproj (spec 3.1) with llama.cpp's rules
 * (spec 3.2): which keys are required, the projector-type fallback, the hard-coded constants
 * (rope theta 10000, sparse factor 4, merge 2 by default), plus range checks so that hostile
 * values cannot overflow the sizes computed from them.
 */
#include "vision/vision.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

#define MAX_DIM (1u << 20) /* n_embd, n_ff: far above any real tower, small enough for int64 products */

bool muse_vision_layer_is_global(const struct muse_vision_hparams *hp, uint32_t il) {
    return il + 1 == hp->n_layer || (il + 1) % MUSE_VISION_SPARSE_FACTOR == 0;
}

uint32_t muse_vision_n_embd_merged(const struct muse_vision_hparams *hp) {
    return hp->n_embd * hp->n_merge * hp->n_merge;
}

/* A required u32 in [lo, hi]. */
static muse_status req_u32(const struct muse_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t *out,
                           struct muse_error *err) {
    muse_status st = muse_gguf_get_u32(g, key, out, err);
    if (st == MUSE_ERR_MISSING) return muse_error_set(err, MUSE_ERR_MISSING, "missing key '%s'", key);
    if (st) return st;
    if (*out < lo || *out > hi)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' = %u is out of range [%u, %u]", key, *out, lo, hi);
    return MUSE_OK;
}

/* A required float array of at least 3 entries: out[0..3). */
static muse_status req_f32x3(const struct muse_gguf *g, const char *key, float out[3], struct muse_error *err) {
    const struct muse_gguf_value *a;
    muse_status st = muse_gguf_get_arr(g, key, &a, err);
    if (st == MUSE_ERR_MISSING) return muse_error_set(err, MUSE_ERR_MISSING, "missing key '%s'", key);
    if (st) return st;
    if (a->v.arr.elem_type != MUSE_GGUF_TYPE_FLOAT32 && a->v.arr.elem_type != MUSE_GGUF_TYPE_FLOAT64)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is an array of %s, expected floats", key,
                              muse_gguf_type_name(a->v.arr.elem_type));
    if (a->v.arr.count < 3)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has %llu entries, expected 3 (R, G, B)", key,
                              (unsigned long long)a->v.arr.count);
    for (int c = 0; c < 3; c++) {
        out[c] = (float)muse_gguf_arr_f64(a, (uint64_t)c);
        if (!isfinite(out[c])) return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has a non-finite entry", key);
    }
    return MUSE_OK;
}

/* general.architecture must be 'clip'; name the files people confuse with an mmproj. */
static muse_status check_arch(const struct muse_gguf *g, struct muse_error *err) {
    char arch[64];
    muse_status st = muse_gguf_get_str(g, "general.architecture", arch, sizeof arch, err);
    if (st == MUSE_ERR_MISSING) return muse_error_set(err, MUSE_ERR_MISSING, "missing key 'general.architecture'");
    if (st) return st;
    if (!strcmp(arch, "clip")) return MUSE_OK;
    if (!strcmp(arch, "muse-glimmer"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "this is a Muse-Glimmer text model (general.architecture = 'muse-glimmer'), not a vision "
                              "projector: pass it as the model and the mmproj file (architecture 'clip') as --mmproj");
    if (!strcmp(arch, "dflash"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "this is a DFlash speculative drafter (general.architecture = 'dflash'), not a vision "
                              "projector (mmproj, architecture 'clip')");
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "unsupported architecture '%s' (general.architecture): a vision projector has 'clip'", arch);
}

/* clip.projector_type, falling back to clip.vision.projector_type when empty or absent (llama.cpp). */
static muse_status check_projector(const struct muse_gguf *g, struct muse_error *err) {
    char type[64] = "";
    muse_status st = muse_gguf_get_str(g, "clip.projector_type", type, sizeof type, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    if (!type[0]) {
        st = muse_gguf_get_str(g, "clip.vision.projector_type", type, sizeof type, err);
        if (st == MUSE_ERR_MISSING)
            return muse_error_set(err, MUSE_ERR_MISSING, "missing key 'clip.projector_type' (the projector type)");
        if (st) return st;
    }
    if (strcmp(type, MUSE_VISION_PROJECTOR))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "projector type '%s' (clip.projector_type) is not supported: muse runs '%s' projectors only",
                              type, MUSE_VISION_PROJECTOR);
    return MUSE_OK;
}

muse_status muse_vision_hparams_load(const struct muse_gguf *g, struct muse_vision_hparams *hp, struct muse_error *err) {
    muse_status st;
    memset(hp, 0, sizeof *hp);
    if ((st = check_arch(g, err))) return st;
    bool has_vision = false;
    st = muse_gguf_get_bool(g, "clip.has_vision_encoder", &has_vision, err);
    if (st == MUSE_ERR_MISSING) return muse_error_set(err, MUSE_ERR_MISSING, "missing key 'clip.has_vision_encoder'");
    if (st) return st;
    if (!has_vision)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "clip.has_vision_encoder is false: this projector has no vision encoder");
    if ((st = check_projector(g, err))) return st;

    if ((st = req_u32(g, "clip.vision.image_size", 0, UINT32_MAX, &hp->image_size, err)) ||
        (st = req_u32(g, "clip.vision.patch_size", 1, 1024, &hp->patch_size, err)) ||
        (st = req_u32(g, "clip.vision.embedding_length", 1, MAX_DIM, &hp->n_embd, err)) ||
        (st = req_u32(g, "clip.vision.feed_forward_length", 1, MAX_DIM, &hp->n_ff, err)) ||
        (st = req_u32(g, "clip.vision.block_count", 1, MUSE_VISION_MAX_LAYERS, &hp->n_layer, err)) ||
        (st = req_u32(g, "clip.vision.attention.head_count", 1, MAX_DIM, &hp->n_head, err)) ||
        (st = req_u32(g, "clip.vision.projection_dim", 0, UINT32_MAX, &hp->projection_dim, err)))
        return st;
    st = muse_gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &hp->eps, err);
    if (st == MUSE_ERR_MISSING)
        return muse_error_set(err, MUSE_ERR_MISSING, "missing key 'clip.vision.attention.layer_norm_epsilon'");
    if (st) return st;
    if (!(hp->eps >= 0.0f) || !isfinite(hp->eps))
        return muse_error_set(err, MUSE_ERR_FORMAT, "clip.vision.attention.layer_norm_epsilon must be finite and >= 0");
    if ((st = req_f32x3(g, "clip.vision.image_mean", hp->image_mean, err)) ||
        (st = req_f32x3(g, "clip.vision.image_std", hp->image_std, err)))
        return st;
    for (int c = 0; c < 3; c++)
        if (hp->image_std[c] == 0.0f)
            return muse_error_set(err, MUSE_ERR_FORMAT, "clip.vision.image_std has a zero entry");
    hp->n_merge = 2;
    st = muse_gguf_get_u32(g, "clip.vision.spatial_merge_size", &hp->n_merge, err);
    if (st && st != MUSE_ERR_MISSING) return st;
    /* llama.cpp's token count (clip_n_output_tokens) hard-codes a factor of 2; with another
     * merge its graph and its count disagree and it aborts (spec 10.4) */
    if (hp->n_merge != 2)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "clip.vision.spatial_merge_size = %u is not supported (Muse-Glimmer merges 2 x 2)",
                              hp->n_merge);
    if (hp->n_embd % hp->n_head)
        return muse_error_set(err, MUSE_ERR_FORMAT, "embedding_length %u is not a multiple of head_count %u",
                              hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (hp->head_dim % 4)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "head_dim %u is not a multiple of 4 (the 2D RoPE rotates pairs in two halves)", hp->head_dim);
    hp->rope_theta = MUSE_VISION_ROPE_THETA;
    return MUSE_OK;
}
