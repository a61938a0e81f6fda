/* matmul.c - threaded matmul driver: row split, tiling, kernel choice, reference fallback. */
#include "kernels/matmul.h"

#include <string.h>

#include "core/assert.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/x86_numerics.h"

/* Weight rows per tile in the many-rows case: the tile (a few KB to tens of KB) stays in L1/L2
 * while every group of activation rows streams past it. */
#define ROW_TILE 16

bool muse_matmul_supported(enum muse_type type, int64_t ne0) {
    if ((unsigned)type >= MUSE_TYPE_COUNT) return false;
    const struct muse_type_traits *t = &muse_type_traits[type];
    const struct muse_type_layout *l = muse_type_layout_get(type);
    if (!l || !t->vec_dot_ref) return false;
    const struct muse_type_layout *la = muse_type_layout_get(t->vec_dot_type);
    if (!la || (t->vec_dot_type != MUSE_TYPE_F32 && !muse_type_traits[t->vec_dot_type].from_float)) return false;
    return ne0 > 0 && ne0 % l->block_size == 0 && ne0 % la->block_size == 0;
}

size_t muse_matmul_act_row_size(enum muse_type type, int64_t ne0) {
    return muse_type_row_size(muse_type_traits[type].vec_dot_type, ne0);
}

enum muse_dot_order muse_matmul_order(enum muse_type type) {
    return muse_x86_vec_dot(type) != muse_type_traits[type].vec_dot_ref ? MUSE_ORDER_X86 : MUSE_ORDER_GENERIC;
}

muse_gemm_fn muse_matmul_kernel(const struct muse_kernels *k, enum muse_type type, int n_act) {
    if (!k || (unsigned)type >= MUSE_TYPE_COUNT || k->order[type] != muse_matmul_order(type)) return NULL;
    return n_act == 1 ? k->gemv[type] : k->gemm[type];
}

enum muse_act_layout muse_matmul_act_layout(const struct muse_kernels *k, enum muse_type type) {
    if (!muse_matmul_kernel(k, type, 2) && !muse_matmul_kernel(k, type, 1)) return MUSE_ACT_REF;
    return (enum muse_act_layout)k->act_layout[type];
}

void muse_matmul_quantize(const struct muse_kernels *k, enum muse_type type, int64_t ne0, const float *x,
                          int64_t x_stride, int n_act, void *q, size_t q_stride, int ith, int nth) {
    const enum muse_type act_type = muse_type_traits[type].vec_dot_type;
    for (int r = ith; r < n_act; r += nth) {
        void *qr = (char *)q + (size_t)r * q_stride;
        if (muse_x86_act_from_float(act_type) != muse_type_traits[act_type].from_float) /* ggml's x86 quantizer */
            (k && k->quantize_x86[act_type] ? k->quantize_x86[act_type] : muse_x86_act_from_float(act_type))(
                x + (int64_t)r * x_stride, qr, ne0);
        else
            muse_kernels_quantize_row(k, act_type, x + (int64_t)r * x_stride, qr, ne0);
        /* the kernels' layout only when they run (a kernel in another order is never called) */
        if (muse_matmul_kernel(k, type, 2) || muse_matmul_kernel(k, type, 1)) muse_kernels_prepare_act(k, type, qr, ne0);
    }
}

/* Reference path for rows [i0, i1). */
static void matmul_ref(const struct muse_matmul_weight *w, const void *q, size_t q_stride, int n_act, float *out,
                       int64_t out_stride, int64_t i0, int64_t i1) {
    muse_vec_dot_fn dot = muse_x86_vec_dot(w->type);
    for (int64_t i = i0; i < i1; i++) {
        const void *wr = (const char *)w->data + (size_t)i * w->row_stride;
        for (int r = 0; r < n_act; r++)
            dot(w->ne0, &out[(int64_t)r * out_stride + i], wr, (const char *)q + (size_t)r * q_stride);
    }
}

void muse_matmul(const struct muse_kernels *k, const struct muse_matmul_weight *w, const void *q, size_t q_stride,
                 int n_act, float *out, int64_t out_stride, int ith, int nth) {
    MUSE_ASSERT(muse_matmul_supported(w->type, w->ne0));
    /* contiguous share of rows, boundaries on multiples of 8 rows (cache lines of out) */
    const int64_t n_rows = w->n_rows;
    const int64_t per = ((n_rows + nth - 1) / nth + 7) & ~(int64_t)7;
    const int64_t i0 = per * ith < n_rows ? per * ith : n_rows;
    const int64_t i1 = i0 + per < n_rows ? i0 + per : n_rows;
    if (i0 >= i1) return;
    /* a SIMD kernel only where it follows the order in force for the type (muse_matmul_order) */
    muse_gemm_fn fn = muse_matmul_kernel(k, w->type, n_act);
    if (!fn) {
        MUSE_ASSERT(!k || !k->act_layout[w->type] || !muse_matmul_kernel(k, w->type, n_act == 1 ? 2 : 1));
        matmul_ref(w, q, q_stride, n_act, out, out_stride, i0, i1);
        return;
    }
    const int64_t tile = n_act == 1 ? i1 - i0 : ROW_TILE;
    for (int64_t t0 = i0; t0 < i1; t0 += tile) {
        const int64_t t1 = t0 + tile < i1 ? t0 + tile : i1;
        const void *wt = (const char *)w->data + (size_t)t0 * w->row_stride;
        if (!fn(w->ne0, wt, w->row_stride, t1 - t0, q, q_stride, n_act, out + t0, out_stride)) {
            /* only kernels reading the reference layout may decline */
            MUSE_ASSERT(!k->act_layout[w->type]);
            matmul_ref(w, q, q_stride, n_act, out, out_stride, t0, t1);
        }
    }
}

// ---- the tile GEMM -------------------------------------------------------------------------

/* The float weight types, whose tile layout is the activation row in f32. */
static bool tile_float(enum muse_type type) {
    return type == MUSE_TYPE_F32 || type == MUSE_TYPE_F16 || type == MUSE_TYPE_BF16;
}

bool muse_matmul_tile_supported(const struct muse_kernels *k, enum muse_type type, int64_t ne0, int n_act) {
    if (!k || (unsigned)type >= MUSE_TYPE_COUNT || !k->tile_gemm[type]) return false;
    if (n_act < (k->tile_min_small[type] ? k->tile_min_small[type] : k->tile_min_act)) return false;
    const struct muse_type_layout *l = muse_type_layout_get(type);
    const enum muse_type at = muse_type_traits[type].vec_dot_type;
    return l && ne0 > 0 && ne0 % l->block_size == 0 && ne0 % 32 == 0 &&
           (at == MUSE_TYPE_Q8_0 || at == MUSE_TYPE_Q8_1 || at == MUSE_TYPE_Q8_K || tile_float(type));
}

size_t muse_matmul_tile_act_bytes(enum muse_type type, int64_t ne0) {
    if (tile_float(type)) return ((size_t)ne0 * sizeof(float) + 63) & ~(size_t)63;
    return ((size_t)ne0 + (size_t)ne0 / 8 + (size_t)ne0 / 8 + 63) & ~(size_t)63;
}

size_t muse_matmul_tile_act_bytes_max(const struct muse_kernels *k, int64_t ne0) {
    size_t b = 0;
    for (int t = 0; k && t < MUSE_TYPE_COUNT; t++)
        if (k->tile_gemm[t] && muse_matmul_tile_act_bytes((enum muse_type)t, ne0) > b)
            b = muse_matmul_tile_act_bytes((enum muse_type)t, ne0);
    return b;
}

size_t muse_matmul_tile_scratch(const struct muse_kernels *k, enum muse_type type, int64_t ne0) {
    if (!k || (unsigned)type >= MUSE_TYPE_COUNT || !k->tile_bytes[type]) return 0;
    const int64_t bs = muse_type_layout_get(type)->block_size;
    return k->tile_bytes[type]((ne0 + bs - 1) / bs * bs);
}

void muse_matmul_tile_prep(enum muse_type type, int64_t ne0, const void *q, void *xp) {
    if (tile_float(type)) { /* the vec_dot_type is the weight type */
        const uint16_t *h = q;
        float *f = xp;
        if (type == MUSE_TYPE_F32) memcpy(f, q, (size_t)ne0 * sizeof(float));
        else if (type == MUSE_TYPE_F16)
            for (int64_t i = 0; i < ne0; i++) f[i] = muse_fp16_to_fp32(h[i]);
        else
            for (int64_t i = 0; i < ne0; i++) f[i] = muse_bf16_to_fp32(h[i]);
        return;
    }
    int8_t *codes = xp;
    int16_t *gs = (int16_t *)(void *)(codes + ne0);
    float *d = (float *)(void *)((char *)gs + ne0 / 8);
    if (muse_type_traits[type].vec_dot_type == MUSE_TYPE_Q8_K) {
        const struct muse_block_q8_K *b = q;
        for (int64_t i = 0; i < ne0 / 256; i++) {
            memcpy(codes + 256 * i, b[i].qs, 256);
            memcpy(gs + 16 * i, b[i].bsums, 32);
            for (int j = 0; j < 8; j++) d[8 * i + j] = b[i].d;
        }
        return;
    }
    /* Q8_0 or Q8_1 (the same codes and d; Q8_1's s is not used: the min term is computed from
     * the exact sums) */
    const bool q81 = muse_type_traits[type].vec_dot_type == MUSE_TYPE_Q8_1;
    const size_t bs = q81 ? sizeof(struct muse_block_q8_1) : sizeof(struct muse_block_q8_0);
    for (int64_t i = 0; i < ne0 / 32; i++) {
        const uint8_t *blk = (const uint8_t *)q + (size_t)i * bs;
        const int8_t *qs = q81 ? ((const struct muse_block_q8_1 *)(const void *)blk)->qs
                               : ((const struct muse_block_q8_0 *)(const void *)blk)->qs;
        memcpy(codes + 32 * i, qs, 32);
        for (int h = 0; h < 2; h++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += qs[16 * h + j];
            gs[2 * i + h] = (int16_t)s;
        }
        uint16_t dh;
        memcpy(&dh, blk, 2); /* d leads both blocks */
        d[i] = muse_fp16_to_fp32(dh);
    }
}

void muse_matmul_tile_quantize(const struct muse_kernels *k, enum muse_type type, int64_t ne0, const float *x,
                               int64_t x_stride, int n_act, void *q, size_t q_stride, void *xp, size_t xps, int ith,
                               int nth) {
    const enum muse_type act_type = muse_type_traits[type].vec_dot_type;
    for (int r = ith; r < n_act; r += nth) {
        void *qr = (char *)q + (size_t)r * q_stride;
        if (muse_x86_act_from_float(act_type) != muse_type_traits[act_type].from_float)
            (k && k->quantize_x86[act_type] ? k->quantize_x86[act_type] : muse_x86_act_from_float(act_type))(
                x + (int64_t)r * x_stride, qr, ne0);
        else
            muse_kernels_quantize_row(k, act_type, x + (int64_t)r * x_stride, qr, ne0);
        float *xr = (float *)(void *)((char *)xp + (size_t)r * xps);
        if (k && k->widen[type]) k->widen[type](qr, xr, ne0); /* F16, BF16: the same values, vectorized */
        else muse_matmul_tile_prep(type, ne0, qr, xr);
    }
}

bool muse_matmul_tile(const struct muse_kernels *k, const struct muse_matmul_weight *w, const void *xp, size_t xps,
                      int n_act, float *out, int64_t out_stride, void *scratch, size_t scratch_bytes) {
    MUSE_ASSERT(muse_matmul_tile_supported(k, w->type, w->ne0, n_act));
    return k->tile_gemm[w->type](w->ne0, w->data, w->row_stride, w->n_rows, xp, xps, n_act, out, out_stride, scratch,
                                 scratch_bytes);
}

double muse_r8_bound(int64_t nb, double t) { return 2.0 * muse_tile_gamma(nb + 3) * t; }

double muse_tile_gamma(int64_t n) {
    const double u = 0x1p-24;
    return (double)n * u / (1.0 - (double)n * u);
}
