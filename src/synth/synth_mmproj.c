/*
 * synth_mmproj.c - synthetic Muse-Glimmer vision projectors and the matrix-type converter
 * (synth_mmproj.h).
 *
 * Values: every tensor has its own PRNG stream seeded from (seed, name). Matrices and tables are
 * muse_quant_random_row draws (valid blocks of any type) with RMS 1/sqrt(fan-in), so that every
 * matmul keeps its input's scale; LayerNorm weights are 1 + N(0, 0.1)-ish, biases and LayerNorm
 * biases 0.02-scale noise; the patch kernel has RMS 1/sqrt(3 p^2), the position table 0.5.
 */
#include "synth/synth_mmproj.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/quant_random.h"
#include "backend/backend.h"
#include "kernels/types.h"
#include "synth/synth.h"
#include "vision/vision.h"

#define MAX_DIM (1 << 20)

muse_status muse_synth_mmproj_preset(const char *name, struct muse_synth_mmproj_config *cfg, struct muse_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->seed = 1;
    cfg->patch_size = 14;
    if (!strcmp(name, "tiny")) {
        *cfg = (struct muse_synth_mmproj_config){"tiny", 4, 64, 128, 4, 14, 4, 96, 96, 256, MUSE_TYPE_F32, MUSE_TYPE_F32, 1};
    } else if (!strcmp(name, "30b")) {
        *cfg = (struct muse_synth_mmproj_config){"30b", 50, 1536, 8960, 16, 14, 32, 4096, 4096, 6656,
                                                 MUSE_TYPE_Q8_0, MUSE_TYPE_Q8_0, 1};
    } else {
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "unknown mmproj preset '%s' (tiny or 30b)", name);
    }
    return MUSE_OK;
}

/* Whether matrices of `type` with rows of ne0 can be multiplied (and, with quantizer, also written
 * by quantizing floats: K- and I-quants have no reference quantizer in muse, only random blocks). */
static bool rows_fit_q(enum muse_type type, int64_t ne0, bool quantizer) {
    const struct muse_type_layout *l = muse_type_layout_get(type);
    if (!l || !muse_backend_type_supported(type) || (quantizer && !muse_type_traits[type].from_float)) return false;
    const enum muse_type vt = muse_type_traits[type].vec_dot_type;
    return ne0 % l->block_size == 0 && ne0 % muse_type_layouts[vt].block_size == 0;
}

static bool rows_fit(enum muse_type type, int64_t ne0) { return rows_fit_q(type, ne0, false); }

muse_status muse_synth_mmproj_validate(const struct muse_synth_mmproj_config *c, struct muse_error *err) {
    const struct {
        const char *name;
        int32_t v, lo, hi;
    } dims[] = {
        {"--layers", c->n_layer, 1, 1024}, {"--embd", c->n_embd, 4, MAX_DIM}, {"--ff", c->n_ff, 1, MAX_DIM},
        {"--heads", c->n_head, 1, MAX_DIM}, {"--patch", c->patch_size, 1, 1024}, {"--pos-side", c->pos_side, 1, 4096},
        {"--mm0", c->n_mm0, 1, MAX_DIM}, {"--mm1", c->n_mm1, 1, MAX_DIM}, {"--out", c->n_out, 1, MAX_DIM},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < dims[i].lo || dims[i].v > dims[i].hi)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s %d is out of range [%d, %d]", dims[i].name, dims[i].v,
                                  dims[i].lo, dims[i].hi);
    if (c->n_embd % c->n_head || (c->n_embd / c->n_head) % 4)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "--embd %d / --heads %d must be a whole multiple of 4", c->n_embd,
                              c->n_head);
    const struct {
        const char *what;
        enum muse_type type;
        int64_t ne0;
    } mats[] = {
        {"attn_q/k/v/out", c->type, c->n_embd}, {"ffn_up", c->type, c->n_embd}, {"ffn_down", c->type, c->n_ff},
        {"mm.0", c->mm_type, 4 * (int64_t)c->n_embd}, {"mm.1", c->mm_type, c->n_mm0}, {"mm.2", c->mm_type, c->n_mm1},
    };
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        if (!rows_fit(mats[i].type, mats[i].ne0)) {
            const struct muse_type_layout *l = muse_type_layout_get(mats[i].type);
            return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                  "%s: rows of %lld are not a whole number of %s blocks (or no matmul for the type)",
                                  mats[i].what, (long long)mats[i].ne0, l ? l->name : "?");
        }
    return MUSE_OK;
}

// ---- the tensor list -------------------------------------------------------------------------------

enum value_kind { VAL_MATRIX, VAL_NORM_W, VAL_SMALL, VAL_TABLE };

struct tensor {
    char name[64];
    enum muse_type type;
    uint32_t n_dims;
    int64_t ne[4];
    enum value_kind kind;
    float scale;
};

/* One tensor of an mmproj's plan: its name, shape, type and value scale under config ctx. */
static void fill_tensor(const struct muse_tensor_visit *v, void *elem, const void *ctx) {
    const struct muse_synth_mmproj_config *c = ctx;
    struct tensor *t = elem;
    snprintf(t->name, sizeof t->name, "%s", v->name);
    t->n_dims = (uint32_t)v->n_dims;
    memcpy(t->ne, v->ne, sizeof t->ne);
    t->type = MUSE_TYPE_F32;
    switch (v->desc->kind) {
    case MUSE_TENSOR_MATRIX: /* the tower's matrices in c->type, the adapter's (mm.*) in c->mm_type */
        t->type = v->desc->per_layer ? c->type : c->mm_type;
        t->kind = VAL_MATRIX;
        t->scale = 1.0f / sqrtf((float)t->ne[0]);
        break;
    case MUSE_TENSOR_FLOAT: /* the patch kernel (4-D) and the position table */
        t->kind = VAL_TABLE;
        t->scale = t->n_dims == 4 ? 1.0f / sqrtf((float)(t->ne[0] * t->ne[1] * t->ne[2])) : 0.5f;
        break;
    default: /* LayerNorm weights ("*.weight") and biases */
        t->kind = strstr(t->name, ".weight") ? VAL_NORM_W : VAL_SMALL;
        t->scale = t->kind == VAL_NORM_W ? 0.1f : 0.02f;
    }
}

/* The tensors of c: the required entries of the mmproj table (vision/vision.h) in file order. On
 * success *out is a malloc'd array of *n (caller frees). */
static muse_status plan(const struct muse_synth_mmproj_config *c, struct tensor **out, int *n, struct muse_error *err) {
    struct muse_tensor_net net = {.table = &muse_vision_table, .n_layer = (uint32_t)c->n_layer};
    int64_t *dims = net.dims;
    dims[MUSE_VISION_DIM_ONE] = 1;
    dims[MUSE_VISION_DIM_EMBD] = c->n_embd;
    dims[MUSE_VISION_DIM_FF] = c->n_ff;
    dims[MUSE_VISION_DIM_PATCH] = c->patch_size;
    dims[MUSE_VISION_DIM_RGB] = 3;
    dims[MUSE_VISION_DIM_MERGED] = 4 * (int64_t)c->n_embd; /* spatial_merge_size 2 */
    dims[MUSE_VISION_DIM_POS] = (int64_t)c->pos_side * c->pos_side;
    dims[MUSE_VISION_DIM_MM0] = c->n_mm0;
    dims[MUSE_VISION_DIM_MM1] = c->n_mm1;
    dims[MUSE_VISION_DIM_OUT] = c->n_out;
    void *t;
    size_t nt;
    muse_status st = muse_synth_entries(&net, sizeof(struct tensor), fill_tensor, c, &t, &nt, err);
    *out = t;
    *n = (int)nt;
    return st;
}

static uint64_t tensor_bytes(const struct tensor *t) {
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    return (uint64_t)muse_type_row_size(t->type, t->ne[0]) * (uint64_t)rows;
}

uint64_t muse_synth_mmproj_data_bytes(const struct muse_synth_mmproj_config *c) {
    struct muse_error err;
    struct tensor *t;
    int n;
    if (plan(c, &t, &n, &err)) return 0;
    uint64_t s = 0;
    for (int i = 0; i < n; i++) s += tensor_bytes(&t[i]);
    free(t);
    return s;
}

// ---- writing ------------------------------------------------------------------------------------------

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return seed ^ h;
}

/* One row of t's values into dst. */
static void fill_row(const struct tensor *t, uint64_t *rng, void *dst) {
    const int64_t n = t->ne[0];
    muse_quant_random_row(t->type, dst, n, rng, t->scale);
    if (t->kind == VAL_NORM_W)
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += 1.0f;
}

static uint32_t file_type_of(enum muse_type type) {
    struct muse_synth_tensor st = {.type = type, .n_dims = 2, .ne = {32, 1}};
    return muse_synth_file_type(&st, 1);
}

static muse_status set_keys(struct muse_gguf_writer *w, const struct muse_synth_mmproj_config *c) {
    char name[64];
    snprintf(name, sizeof name, "muse synthetic mmproj (%s)", c->preset[0] ? c->preset : "custom");
    const float half[3] = {0.5f, 0.5f, 0.5f};
    muse_status st = MUSE_OK;
    st = st ? st : muse_gguf_writer_set_str(w, "general.architecture", "clip");
    st = st ? st : muse_gguf_writer_set_str(w, "general.name", name);
    st = st ? st : muse_gguf_writer_set_str(w, "general.type", "mmproj");
    st = st ? st : muse_gguf_writer_set_u32(w, "general.file_type", file_type_of(c->type));
    st = st ? st : muse_gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    st = st ? st : muse_gguf_writer_set_str(w, "clip.projector_type", "muse-glimmer");
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)(c->pos_side * c->patch_size * 2));
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)c->patch_size);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)c->n_embd);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)c->n_ff);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)c->n_layer);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)c->n_head);
    st = st ? st : muse_gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-5f);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.projection_dim", (uint32_t)c->n_out);
    st = st ? st : muse_gguf_writer_set_arr(w, "clip.vision.image_mean", MUSE_GGUF_TYPE_FLOAT32, half, 3);
    st = st ? st : muse_gguf_writer_set_arr(w, "clip.vision.image_std", MUSE_GGUF_TYPE_FLOAT32, half, 3);
    st = st ? st : muse_gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", 2);
    return st;
}

muse_status muse_synth_mmproj_write(const struct muse_synth_mmproj_config *c, const char *path, struct muse_error *err) {
    muse_status st = muse_synth_mmproj_validate(c, err);
    if (st) return st;
    struct tensor *t;
    int n;
    struct muse_gguf_writer *w = NULL;
    void *row = NULL;
    if ((st = plan(c, &t, &n, err))) return st;
    if ((st = muse_gguf_writer_open(path, &w, err))) goto fail;
    if ((st = set_keys(w, c))) goto fail_writer;
    size_t max_row = 0;
    for (int i = 0; i < n; i++) {
        if ((st = muse_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne))) goto fail_writer;
        const size_t rs = muse_type_row_size(t[i].type, t[i].ne[0]);
        max_row = rs > max_row ? rs : max_row;
    }
    if ((st = muse_gguf_writer_begin_data(w))) goto fail_writer;
    row = malloc(max_row);
    if (!row) {
        st = MUSE_ERR_NOMEM;
        goto fail_writer;
    }
    for (int i = 0; i < n; i++) {
        uint64_t rng = name_seed(c->seed, t[i].name);
        const size_t rs = muse_type_row_size(t[i].type, t[i].ne[0]);
        for (int64_t r = 0; r < t[i].ne[1] * t[i].ne[2] * t[i].ne[3]; r++) {
            fill_row(&t[i], &rng, row);
            if ((st = muse_gguf_writer_write_data(w, row, rs))) goto fail_writer;
        }
    }
    free(row);
    free(t);
    st = muse_gguf_writer_close(w, err);
    if (st) unlink(path);
    return st;
fail_writer:
    if (st == MUSE_ERR_NOMEM) muse_error_set(err, st, "out of memory");
    else muse_error_set(err, st, "writing '%s': %s", path, muse_gguf_writer_error(w));
    muse_gguf_writer_close(w, NULL);
    unlink(path);
fail:
    free(row);
    free(t);
    return st;
}

// ---- converting an existing projector ------------------------------------------------------------------

/* The 2-D matrices of the tower and the adapter (what `type` applies to). */
static bool is_matrix(const struct muse_gguf_tensor *t) {
    if (t->n_dims != 2) return false;
    const char *n = t->name;
    if (!strncmp(n, "mm.", 3)) return true;
    return !strncmp(n, "v.blk.", 6) && (strstr(n, ".attn_") || strstr(n, ".ffn_")) && strstr(n, ".weight");
}

muse_status muse_synth_mmproj_convert(const char *src, enum muse_type type, const char *dst, struct muse_error *err) {
    struct muse_gguf *g = NULL;
    struct muse_gguf_writer *w = NULL;
    float *tmp = NULL;
    void *row = NULL;
    muse_status st = muse_gguf_open(src, &g, err);
    if (st) return st;
    if (!muse_type_layout_get(type) || !muse_type_traits[type].from_float) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "cannot write tensors of type %d", (int)type);
        goto fail;
    }
    int64_t max_ne0 = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (!is_matrix(t)) continue;
        if (!rows_fit_q(type, t->ne[0], true) || !muse_type_traits[t->type].to_float) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor '%s': rows of %lld cannot be converted to %s", t->name,
                                (long long)t->ne[0], muse_type_layouts[type].name);
            goto fail;
        }
        max_ne0 = t->ne[0] > max_ne0 ? t->ne[0] : max_ne0;
    }
    tmp = malloc(sizeof(float) * (size_t)max_ne0);
    row = malloc(muse_type_row_size(type, max_ne0) + sizeof(float) * (size_t)max_ne0);
    if (!tmp || !row) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = muse_gguf_writer_open(dst, &w, err))) goto fail;
    for (uint64_t i = 0; i < g->n_kv && !st; i++) {
        if (!strcmp(g->kv[i].key, "general.file_type")) st = muse_gguf_writer_set_u32(w, "general.file_type", file_type_of(type));
        else st = muse_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value);
    }
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        st = muse_gguf_writer_add_tensor(w, t->name, is_matrix(t) ? (uint32_t)type : t->type, t->n_dims, t->ne);
    }
    if (!st) st = muse_gguf_writer_begin_data(w);
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (!is_matrix(t)) {
            st = muse_gguf_writer_write_data(w, t->data, t->nbytes);
            continue;
        }
        const size_t in_rs = muse_type_row_size((enum muse_type)t->type, t->ne[0]), out_rs = muse_type_row_size(type, t->ne[0]);
        for (int64_t r = 0; r < t->ne[1] && !st; r++) {
            muse_type_traits[t->type].to_float((const uint8_t *)t->data + (size_t)r * in_rs, tmp, t->ne[0]);
            muse_type_traits[type].from_float(tmp, row, t->ne[0]);
            st = muse_gguf_writer_write_data(w, row, out_rs);
        }
    }
    if (st) {
        muse_error_set(err, st, "writing '%s': %s", dst, muse_gguf_writer_error(w));
        muse_gguf_writer_close(w, NULL);
        unlink(dst);
        goto fail;
    }
    st = muse_gguf_writer_close(w, err);
    if (st) unlink(dst);
fail:
    free(tmp);
    free(row);
    muse_gguf_free(g);
    return st;
}
