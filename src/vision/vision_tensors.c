/*
 * vision_tensors.c - the tensor table of a Muse-Glimmer mmproj (spec 3.3) and its loader. Each row
 * names a tensor (per layer or global), whether it must be there, what it may be stored as, its
 * shape in dimension ids and where its view goes; the one binder of model/tensors.c walks it, so
 * every check (presence, shape, type, block alignment, consistency of the dims that only the
 * tensors tell, such as the adapter widths) has one code path and one message format. A tensor the
 * table does not know is refused, not ignored.
 */
#include "vision/vision.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

/* Short spellings for the table below (undefined after it). */
#define VEC .kind = MUSE_TENSOR_VECTOR
#define MAT .kind = MUSE_TENSOR_MATRIX
#define TAB .kind = MUSE_TENSOR_FLOAT
#define LAYER .per_layer = true
#define OPT .optional = true
#define SHAPE1(a) .dims = {MUSE_VISION_DIM_##a}
#define SHAPE2(a, b) .dims = {MUSE_VISION_DIM_##a, MUSE_VISION_DIM_##b}
#define L(f) .offset = offsetof(struct muse_vision_layer, f)
#define G(f) .offset = offsetof(struct muse_vision_weights, f)

static const struct muse_tensor_desc vision_tensors[] = {
    {.name = "v.patch_embd.weight", TAB, .dims = {MUSE_VISION_DIM_PATCH, MUSE_VISION_DIM_PATCH, MUSE_VISION_DIM_RGB,
                                                  MUSE_VISION_DIM_EMBD},
     .role = "patch embedding: a conv kernel (p x p x 3 -> n_embd), a matrix at load", G(patch)},
    {.name = "v.patch_embd.bias", VEC, SHAPE1(EMBD), OPT, .role = "patch embedding bias", G(patch_b)},
    {.name = "v.position_embd.weight", TAB, SHAPE2(EMBD, POS), .role = "learned positions, row y*side + x", G(pos)},
    {.name = "v.pre_ln.weight", VEC, SHAPE1(EMBD), .role = "pre-tower LayerNorm weight", G(pre_ln_w)},
    {.name = "v.pre_ln.bias", VEC, SHAPE1(EMBD), .role = "pre-tower LayerNorm bias", G(pre_ln_b)},
    {.name = "v.blk.%u.ln1.weight", VEC, SHAPE1(EMBD), LAYER, .role = "pre-attention LayerNorm weight", L(ln1_w)},
    {.name = "v.blk.%u.ln1.bias", VEC, SHAPE1(EMBD), LAYER, .role = "pre-attention LayerNorm bias", L(ln1_b)},
    {.name = "v.blk.%u.attn_q.weight", MAT, SHAPE2(EMBD, EMBD), LAYER, .role = "Q projection", L(q)},
    {.name = "v.blk.%u.attn_q.bias", VEC, SHAPE1(EMBD), LAYER, .role = "Q bias", L(q_b)},
    {.name = "v.blk.%u.attn_k.weight", MAT, SHAPE2(EMBD, EMBD), LAYER, .role = "K projection", L(k)},
    {.name = "v.blk.%u.attn_k.bias", VEC, SHAPE1(EMBD), LAYER, .role = "K bias", L(k_b)},
    {.name = "v.blk.%u.attn_v.weight", MAT, SHAPE2(EMBD, EMBD), LAYER, .role = "V projection", L(v)},
    {.name = "v.blk.%u.attn_v.bias", VEC, SHAPE1(EMBD), LAYER, .role = "V bias", L(v_b)},
    {.name = "v.blk.%u.attn_out.weight", MAT, SHAPE2(EMBD, EMBD), LAYER, .role = "attention output projection", L(o)},
    {.name = "v.blk.%u.attn_out.bias", VEC, SHAPE1(EMBD), LAYER, .role = "attention output bias", L(o_b)},
    {.name = "v.blk.%u.ln2.weight", VEC, SHAPE1(EMBD), LAYER, .role = "pre-FFN LayerNorm weight", L(ln2_w)},
    {.name = "v.blk.%u.ln2.bias", VEC, SHAPE1(EMBD), LAYER, .role = "pre-FFN LayerNorm bias", L(ln2_b)},
    {.name = "v.blk.%u.ffn_up.weight", MAT, SHAPE2(EMBD, FF), LAYER, .role = "FFN up projection (GELU)", L(up)},
    {.name = "v.blk.%u.ffn_up.bias", VEC, SHAPE1(FF), LAYER, .role = "FFN up bias", L(up_b)},
    {.name = "v.blk.%u.ffn_down.weight", MAT, SHAPE2(FF, EMBD), LAYER, .role = "FFN down projection", L(down)},
    {.name = "v.blk.%u.ffn_down.bias", VEC, SHAPE1(EMBD), LAYER, .role = "FFN down bias", L(down_b)},
    {.name = "v.post_ln.weight", VEC, SHAPE1(EMBD), .role = "post-tower LayerNorm weight", G(post_ln_w)},
    {.name = "v.post_ln.bias", VEC, SHAPE1(EMBD), .role = "post-tower LayerNorm bias", G(post_ln_b)},
    {.name = "mm.0.weight", MAT, SHAPE2(MERGED, MM0), .role = "adapter layer 0 (merged tokens in)", G(mm0)},
    {.name = "mm.1.weight", MAT, SHAPE2(MM0, MM1), .role = "adapter layer 1", G(mm1)},
    {.name = "mm.2.weight", MAT, SHAPE2(MM1, OUT), .role = "adapter layer 2 (the text model's n_embd out)", G(mm2)},
};

#undef VEC
#undef MAT
#undef TAB
#undef LAYER
#undef OPT
#undef SHAPE1
#undef SHAPE2
#undef L
#undef G

static const char *const dim_names[MUSE_VISION_DIM_COUNT] = {
    "?", "1", "n_embd", "n_ff", "patch_size", "3", "n_embd*merge^2", "n_pos", "mm.0 rows", "mm.1 rows", "mm.2 rows",
};

const struct muse_tensor_table muse_vision_table = {
    .desc = vision_tensors,
    .n_desc = sizeof vision_tensors / sizeof vision_tensors[0],
    .n_dim_ids = MUSE_VISION_DIM_COUNT,
    .bind_dims = true,
    .dim_names = dim_names,
    .bind_order = MUSE_TENSOR_ORDER_ENTRIES,
    .wording = MUSE_TENSOR_WORDING_VISION,
    .layer_size = sizeof(struct muse_vision_layer),
};

void muse_vision_dims(int64_t *dims, const struct muse_vision_hparams *hp) {
    memset(dims, 0, sizeof(int64_t) * MUSE_VISION_DIM_COUNT);
    dims[MUSE_VISION_DIM_ONE] = 1;
    dims[MUSE_VISION_DIM_EMBD] = hp->n_embd;
    dims[MUSE_VISION_DIM_FF] = hp->n_ff;
    dims[MUSE_VISION_DIM_PATCH] = hp->patch_size;
    dims[MUSE_VISION_DIM_RGB] = 3;
    dims[MUSE_VISION_DIM_MERGED] = muse_vision_n_embd_merged(hp);
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
    struct muse_tensor_net net = {.table = &muse_vision_table, .n_layer = hp->n_layer, .weights = w, .layers = w->layers};
    muse_vision_dims(net.dims, hp);
    if ((st = muse_tensors_bind(&net, g, claimed, err))) goto fail;
    const int64_t *dims = net.dims;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!claimed[i]) {
            st = muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                                "unexpected tensor '%s': not part of a Muse-Glimmer projector (%u tensors known per "
                                "file: spec 3.3)", g->tensors[i].name, (unsigned)muse_vision_table.n_desc);
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
