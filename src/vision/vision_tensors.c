/*
 * vision_tensors.c - the tensor table of a Muse-Glimmer mmproj (spec 3.3) and the binder that
 * checks a file against it. Each row names a tensor (per layer or global), whether it must be
 * there, what it may be stored as, and its shape in symbolic dimensions; the binder walks the
 * table once, so every check (presence, shape, type, block alignment, consistency of the dims
 * that only the tensors tell, such as the adapter widths) has one code path and one message
 * format. A tensor the table does not know is refused, not ignored.
 */
#include "vision/vision.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

#define L(field) ((uint16_t)offsetof(struct muse_vision_layer, field))
#define G(field) ((uint16_t)offsetof(struct muse_vision_weights, field))
#define VEC MUSE_VISION_TENSOR_VECTOR
#define MAT MUSE_VISION_TENSOR_MATRIX
#define TAB MUSE_VISION_TENSOR_TABLE
#define D_1 MUSE_VISION_DIM_ONE
#define D_EMBD MUSE_VISION_DIM_EMBD
#define D_FF MUSE_VISION_DIM_FF
#define D_P MUSE_VISION_DIM_PATCH
#define D_RGB MUSE_VISION_DIM_RGB
#define D_MERGED MUSE_VISION_DIM_MERGED
#define D_POS MUSE_VISION_DIM_POS
#define D_MM0 MUSE_VISION_DIM_MM0
#define D_MM1 MUSE_VISION_DIM_MM1
#define D_OUT MUSE_VISION_DIM_OUT

/* name, per_layer, required, kind, n_dims, {ne0, ne1, ne2, ne3}, offset */
const struct muse_vision_tensor_desc muse_vision_tensor_table[] = {
    {"v.patch_embd.weight", false, true, TAB, 4, {D_P, D_P, D_RGB, D_EMBD}, G(patch)},
    {"v.patch_embd.bias", false, false, VEC, 1, {D_EMBD}, G(patch_b)},
    {"v.position_embd.weight", false, true, TAB, 2, {D_EMBD, D_POS}, G(pos)},
    {"v.pre_ln.weight", false, true, VEC, 1, {D_EMBD}, G(pre_ln_w)},
    {"v.pre_ln.bias", false, true, VEC, 1, {D_EMBD}, G(pre_ln_b)},
    {"v.blk.%u.ln1.weight", true, true, VEC, 1, {D_EMBD}, L(ln1_w)},
    {"v.blk.%u.ln1.bias", true, true, VEC, 1, {D_EMBD}, L(ln1_b)},
    {"v.blk.%u.attn_q.weight", true, true, MAT, 2, {D_EMBD, D_EMBD}, L(q)},
    {"v.blk.%u.attn_q.bias", true, true, VEC, 1, {D_EMBD}, L(q_b)},
    {"v.blk.%u.attn_k.weight", true, true, MAT, 2, {D_EMBD, D_EMBD}, L(k)},
    {"v.blk.%u.attn_k.bias", true, true, VEC, 1, {D_EMBD}, L(k_b)},
    {"v.blk.%u.attn_v.weight", true, true, MAT, 2, {D_EMBD, D_EMBD}, L(v)},
    {"v.blk.%u.attn_v.bias", true, true, VEC, 1, {D_EMBD}, L(v_b)},
    {"v.blk.%u.attn_out.weight", true, true, MAT, 2, {D_EMBD, D_EMBD}, L(o)},
    {"v.blk.%u.attn_out.bias", true, true, VEC, 1, {D_EMBD}, L(o_b)},
    {"v.blk.%u.ln2.weight", true, true, VEC, 1, {D_EMBD}, L(ln2_w)},
    {"v.blk.%u.ln2.bias", true, true, VEC, 1, {D_EMBD}, L(ln2_b)},
    {"v.blk.%u.ffn_up.weight", true, true, MAT, 2, {D_EMBD, D_FF}, L(up)},
    {"v.blk.%u.ffn_up.bias", true, true, VEC, 1, {D_FF}, L(up_b)},
    {"v.blk.%u.ffn_down.weight", true, true, MAT, 2, {D_FF, D_EMBD}, L(down)},
    {"v.blk.%u.ffn_down.bias", true, true, VEC, 1, {D_EMBD}, L(down_b)},
    {"v.post_ln.weight", false, true, VEC, 1, {D_EMBD}, G(post_ln_w)},
    {"v.post_ln.bias", false, true, VEC, 1, {D_EMBD}, G(post_ln_b)},
    {"mm.0.weight", false, true, MAT, 2, {D_MERGED, D_MM0}, G(mm0)},
    {"mm.1.weight", false, true, MAT, 2, {D_MM0, D_MM1}, G(mm1)},
    {"mm.2.weight", false, true, MAT, 2, {D_MM1, D_OUT}, G(mm2)},
};
const size_t muse_vision_n_tensor_descs = sizeof muse_vision_tensor_table / sizeof muse_vision_tensor_table[0];

static const char *const dim_names[MUSE_VISION_DIM_COUNT] = {
    "1", "n_embd", "n_ff", "patch_size", "3", "n_embd*merge^2", "n_pos", "mm.0 rows", "mm.1 rows", "mm.2 rows",
};

const char *muse_vision_dim_name(enum muse_vision_dim d) {
    return (unsigned)d < MUSE_VISION_DIM_COUNT ? dim_names[d] : "?";
}

static int fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n; i++) len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? ", " : "", (long long)ne[i]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

static int fmt_dims(char *buf, size_t size, const uint8_t *ne, int n) {
    int len = snprintf(buf, size, "{");
    for (int i = 0; i < n; i++)
        len += snprintf(buf + len, size - (size_t)len, "%s%s", i ? ", " : "", dim_names[ne[i]]);
    return len + snprintf(buf + len, size - (size_t)len, "}");
}

/* The table's storage rule for kind, or an error naming the tensor. */
static muse_status check_type(const struct muse_gguf_tensor *t, enum muse_vision_tensor_kind kind,
                              struct muse_error *err) {
    const struct muse_type_layout *lay = muse_type_layout_get(t->type);
    const char *tname = lay ? lay->name : "?";
    switch (kind) {
    case MUSE_VISION_TENSOR_VECTOR:
        if (t->type != MUSE_TYPE_F32)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32", t->name, tname);
        return MUSE_OK;
    case MUSE_VISION_TENSOR_TABLE:
        if (t->type != MUSE_TYPE_F32 && t->type != MUSE_TYPE_F16 && t->type != MUSE_TYPE_BF16)
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, expected f32, f16 or bf16", t->name, tname);
        return MUSE_OK;
    case MUSE_VISION_TENSOR_MATRIX: {
        if (!lay || !muse_backend_type_supported((enum muse_type)t->type))
            return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has type %s, which has no matmul kernel", t->name, tname);
        const enum muse_type vt = muse_type_traits[t->type].vec_dot_type;
        if (t->ne[0] % lay->block_size || t->ne[0] % muse_type_layouts[vt].block_size)
            return muse_error_set(err, MUSE_ERR_SHAPE,
                                  "tensor '%s': row length %lld is not a multiple of the %s/%s block size (%lld)",
                                  t->name, (long long)t->ne[0], tname, muse_type_layouts[vt].name,
                                  (long long)(lay->block_size > muse_type_layouts[vt].block_size
                                                  ? lay->block_size
                                                  : muse_type_layouts[vt].block_size));
        return MUSE_OK;
    }
    default: return muse_error_set(err, MUSE_ERR_INTERNAL, "bad tensor kind");
    }
}

/* Check one tensor against its row (dims[] holds the known and bound values; 0 = not bound yet)
 * and fill *w. */
static muse_status bind_one(const struct muse_gguf *g, const struct muse_vision_tensor_desc *d, const char *name,
                            int64_t dims[MUSE_VISION_DIM_COUNT], bool *claimed, struct muse_weight *w,
                            struct muse_error *err) {
    memset(w, 0, sizeof *w);
    const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
    if (!t) {
        if (!d->required) return MUSE_OK;
        return muse_error_set(err, MUSE_ERR_MISSING, "missing tensor '%s'", name);
    }
    claimed[t - g->tensors] = true;
    int64_t want[MUSE_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    bool ok = true;
    for (int i = 0; i < MUSE_GGUF_MAX_DIMS; i++) {
        if (i >= d->n_dims) {
            ok = ok && t->ne[i] == 1;
            continue;
        }
        const enum muse_vision_dim dim = (enum muse_vision_dim)d->ne[i];
        want[i] = dims[dim] ? dims[dim] : t->ne[i];
        ok = ok && t->ne[i] == want[i];
    }
    if (!ok) {
        char a[128], b[128], c[160];
        fmt_shape(a, sizeof a, want, d->n_dims);
        fmt_shape(b, sizeof b, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        fmt_dims(c, sizeof c, d->ne, d->n_dims);
        return muse_error_set(err, MUSE_ERR_SHAPE, "tensor '%s' has wrong shape: expected %s = %s, found %s", name, a, c, b);
    }
    muse_status st = check_type(t, (enum muse_vision_tensor_kind)d->kind, err);
    if (st) return st;
    for (int i = 0; i < d->n_dims; i++) dims[d->ne[i]] = t->ne[i]; /* bind what was free */
    w->data = t->data;
    w->type = (enum muse_type)t->type;
    w->ne0 = t->ne[0];
    w->ne1 = t->n_elements / t->ne[0]; /* a 4-D conv kernel is a matrix of rows of ne0*ne1*ne2 ... see below */
    w->row_size = muse_type_row_size(w->type, w->ne0);
    w->name = t->name;
    return MUSE_OK;
}

/* An F32 copy of a TABLE tensor viewed as rows of `row` elements (the patch kernel: rows of
 * 3*p*p). dst [n] floats. */
static void table_to_f32(const struct muse_weight *w, int64_t n, float *dst) {
    if (w->type == MUSE_TYPE_F32) memcpy(dst, w->data, sizeof(float) * (size_t)n);
    else muse_type_traits[w->type].to_float(w->data, dst, n);
}

/* The view of a TABLE as rows of `row_len` F32 values, converted into *owned when needed. */
static void table_view(struct muse_weight *w, int64_t row_len, float **owned) {
    const int64_t n = w->ne0 * w->ne1;
    if (w->type != MUSE_TYPE_F32) {
        table_to_f32(w, n, *owned);
        w->data = *owned;
        *owned += n;
    }
    w->type = MUSE_TYPE_F32;
    w->ne0 = row_len;
    w->ne1 = n / row_len;
    w->row_size = sizeof(float) * (size_t)row_len;
}

muse_status muse_vision_weights_bind(const struct muse_gguf *g, struct muse_vision_hparams *hp,
                                     struct muse_vision_weights *w, struct muse_error *err) {
    muse_status st = MUSE_ERR_NOMEM;
    memset(w, 0, sizeof *w);
    bool *claimed = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *claimed);
    w->layers = calloc(hp->n_layer, sizeof *w->layers);
    if (!claimed || !w->layers) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the vision weights");
        goto fail;
    }
    int64_t dims[MUSE_VISION_DIM_COUNT] = {0};
    dims[MUSE_VISION_DIM_ONE] = 1;
    dims[MUSE_VISION_DIM_EMBD] = hp->n_embd;
    dims[MUSE_VISION_DIM_FF] = hp->n_ff;
    dims[MUSE_VISION_DIM_PATCH] = hp->patch_size;
    dims[MUSE_VISION_DIM_RGB] = 3;
    dims[MUSE_VISION_DIM_MERGED] = muse_vision_n_embd_merged(hp);
    char name[MUSE_GGUF_MAX_NAME + 16];
    for (size_t i = 0; i < muse_vision_n_tensor_descs; i++) {
        const struct muse_vision_tensor_desc *d = &muse_vision_tensor_table[i];
        for (uint32_t il = 0; il < (d->per_layer ? hp->n_layer : 1); il++) {
            char *base = d->per_layer ? (char *)&w->layers[il] : (char *)w;
            if (d->per_layer) snprintf(name, sizeof name, d->name, il);
            else snprintf(name, sizeof name, "%s", d->name);
            if ((st = bind_one(g, d, name, dims, claimed, (struct muse_weight *)(base + d->offset), err))) goto fail;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!claimed[i]) {
            st = muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                                "unexpected tensor '%s': not part of a Muse-Glimmer projector (%zu tensors known per "
                                "file: spec 3.3)", g->tensors[i].name, muse_vision_n_tensor_descs);
            goto fail;
        }
    /* the position table is a square grid: its side is the window side */
    const int64_t n_pos = dims[MUSE_VISION_DIM_POS];
    int64_t side = 1;
    while ((side + 1) * (side + 1) <= n_pos) side++;
    if (side * side != n_pos) {
        st = muse_error_set(err, MUSE_ERR_SHAPE, "tensor 'v.position_embd.weight' has %lld rows, not a square grid",
                            (long long)n_pos);
        goto fail;
    }
    if (dims[MUSE_VISION_DIM_MM0] > UINT32_MAX / 2 || dims[MUSE_VISION_DIM_MM1] > UINT32_MAX / 2 ||
        dims[MUSE_VISION_DIM_OUT] > UINT32_MAX / 2 || n_pos > UINT32_MAX / 2) {
        st = muse_error_set(err, MUSE_ERR_SHAPE, "adapter or position table dimensions are too large");
        goto fail;
    }
    hp->n_pos = (uint32_t)n_pos;
    hp->window_side = (uint32_t)side;
    hp->n_mm0 = (uint32_t)dims[MUSE_VISION_DIM_MM0];
    hp->n_mm1 = (uint32_t)dims[MUSE_VISION_DIM_MM1];
    hp->n_embd_out = (uint32_t)dims[MUSE_VISION_DIM_OUT];
    /* F32 views of the two tables (copies when the file stores F16/BF16) */
    const int64_t n_patch = (int64_t)hp->n_embd * 3 * hp->patch_size * hp->patch_size, n_tab = (int64_t)hp->n_embd * n_pos;
    const int64_t n_owned = (w->patch.type != MUSE_TYPE_F32 ? n_patch : 0) + (w->pos.type != MUSE_TYPE_F32 ? n_tab : 0);
    if (n_owned) {
        w->owned = malloc(sizeof(float) * (size_t)n_owned);
        if (!w->owned) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the F32 patch kernel / position table");
            goto fail;
        }
    }
    float *next = w->owned;
    table_view(&w->patch, 3 * (int64_t)hp->patch_size * hp->patch_size, &next);
    table_view(&w->pos, hp->n_embd, &next);
    free(claimed);
    return MUSE_OK;
fail:
    free(claimed);
    muse_vision_weights_free(w);
    return st;
}

void muse_vision_weights_free(struct muse_vision_weights *w) {
    if (!w) return;
    free(w->layers);
    free(w->owned);
    memset(w, 0, sizeof *w);
}
