/*
 * matmul.h - the threaded matrix-times-activations driver of the fast CPU backend.
 *
 * out[r][i] = dot(W row i, x row r) for a weight matrix W (rows of a ggml type) and n_act
 * activation rows x. Two steps, each called by every thread of a parallel region with its
 * (ith, nth) and separated by a barrier (the caller's): muse_matmul_quantize converts the f32
 * activation rows to the weight's vec_dot_type with the forward's quantizer
 * (muse_x86_act_from_float: ggml's x86 rounding for Q8_0/Q8_1, the reference otherwise),
 * muse_matmul computes this thread's contiguous share of output rows. The dot order in force
 * for a weight type is ggml's x86 one where x86_numerics.h has one (muse_x86_vec_dot, for the
 * types of MUSE_X86_ORDER_TYPES), vec_dot_ref otherwise (muse_matmul_order); the kernels
 * of a muse_kernels table run only when they declare that order (muse_kernels.order), and the
 * scalar dot of that order runs where a kernel is missing, follows another order, or declines:
 * the output is the same bits either way.
 * Nothing here allocates; both functions are safe to call concurrently on disjoint slices.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* A weight matrix: n_rows rows of ne0 elements of `type`, row i at data + i * row_stride. */
struct muse_matmul_weight {
    enum muse_type type;
    int64_t ne0;        /* elements per row (the input dimension) */
    int64_t n_rows;     /* output dimension */
    const void *data;
    size_t row_stride;  /* bytes; muse_type_row_size(type, ne0) when contiguous */
};

/* True when `type` can be a matmul weight (it has a vec_dot_ref and a to_float) and ne0 is a
 * multiple of the block sizes of the type and of its vec_dot_type. */
bool muse_matmul_supported(enum muse_type type, int64_t ne0);

/* The dot order the forward uses for weights of `type`: MUSE_ORDER_X86 where
 * muse_x86_vec_dot(type) differs from vec_dot_ref, else MUSE_ORDER_GENERIC. Pure. */
enum muse_dot_order muse_matmul_order(enum muse_type type);

/* The kernel of k that muse_matmul runs for `type` and n_act activation rows (gemv for 1, gemm
 * otherwise), or NULL when k is NULL, has none, or its kernels follow another order than
 * muse_matmul_order(type). Pure. */
muse_gemm_fn muse_matmul_kernel(const struct muse_kernels *k, enum muse_type type, int n_act);

/* Bytes of one quantized activation row for weights of `type` with rows of ne0 elements. */
size_t muse_matmul_act_row_size(enum muse_type type, int64_t ne0);

/* The layout muse_matmul_quantize writes for weights of `type` with k's kernels: k->act_layout[type]
 * where a kernel of the type runs, else MUSE_ACT_REF. Weight types with the same vec_dot_type and
 * the same layout read the same quantized rows (one conversion can serve several matmuls). Pure. */
enum muse_act_layout muse_matmul_act_layout(const struct muse_kernels *k, enum muse_type type);

/*
 * Thread slice (ith of nth) of: quantize activation rows r = 0..n_act-1 (x + r * x_stride
 * floats) into q + r * q_stride bytes, in the vec_dot_type of `type` (F32 is copied), in the
 * layout k's kernels read for `type` (muse_kernels_prepare_act). Pass the same k to muse_matmul.
 */
void muse_matmul_quantize(const struct muse_kernels *k, enum muse_type type, int64_t ne0, const float *x,
                          int64_t x_stride, int n_act, void *q, size_t q_stride, int ith, int nth);

/*
 * Thread slice (ith of nth) of out[r * out_stride + i] = dot(W row i, q row r) for all i and
 * r < n_act, where q holds n_act rows from muse_matmul_quantize (q_stride bytes apart). The rows
 * of W are split in contiguous chunks over the threads. k = NULL means the reference path only.
 * Preconditions (MUSE_ASSERT): muse_matmul_supported(w->type, w->ne0).
 */
void muse_matmul(const struct muse_kernels *k, const struct muse_matmul_weight *w, const void *q, size_t q_stride,
                 int n_act, float *out, int64_t out_stride, int ith, int nth);

/* ---- the tile GEMM (batched, reassociated; kernels.h muse_tile_gemm_fn) ---- */

/*
 * Whether muse_matmul_tile runs for weights of `type` with rows of ne0 elements and n_act
 * activation rows: k has a tile GEMM for the type (none in exact mode), n_act >= k->tile_min_act
 * (or the type's k->tile_min_small where set)
 * and ne0 is a multiple of the type's block. Pure.
 */
bool muse_matmul_tile_supported(const struct muse_kernels *k, enum muse_type type, int64_t ne0, int n_act);

/* Bytes of one activation row in the tile layout of weights of `type` for rows of ne0 elements (a
 * multiple of 64). Quant types: int8 codes [ne0], int16 sums of each 16 codes [ne0 / 16], f32
 * block scale of each 32 [ne0 / 32]. Float types (F32, F16, BF16): the values of the vec_dot_type
 * row as f32 [ne0]. */
size_t muse_matmul_tile_act_bytes(enum muse_type type, int64_t ne0);

/* The largest muse_matmul_tile_act_bytes over the types k has a tile GEMM for (0: none). */
size_t muse_matmul_tile_act_bytes_max(const struct muse_kernels *k, int64_t ne0);

/* Scratch bytes muse_matmul_tile needs for weights of `type` (0: no tile GEMM for it in k). */
size_t muse_matmul_tile_scratch(const struct muse_kernels *k, enum muse_type type, int64_t ne0);

/*
 * One activation row q (ne0 elements of the vec_dot_type of `type`, Q8_0, Q8_1, Q8_K, F32, F16 or
 * BF16, as muse_matmul_quantize wrote it in the reference layout) into the tile layout at xp.
 */
void muse_matmul_tile_prep(enum muse_type type, int64_t ne0, const void *q, void *xp);

/*
 * Thread slice (ith of nth) of: quantize activation rows r = 0..n_act-1 (x + r * x_stride floats)
 * like muse_matmul_quantize but always in the reference layout into q (q_stride bytes apart),
 * and from there into the tile layout at xp (xps bytes apart).
 */
void muse_matmul_tile_quantize(const struct muse_kernels *k, enum muse_type type, int64_t ne0, const float *x,
                               int64_t x_stride, int n_act, void *q, size_t q_stride, void *xp, size_t xps, int ith,
                               int nth);

/*
 * out[r * out_stride + i] = dot(W row i, A row r) for i < w->n_rows, r < n_act by k's tile GEMM
 * (docs/cpu-backend.md, "The tile GEMM": within muse_tile_bound of the dot in force), with A rows
 * in the tile layout at xp (xps bytes apart). scratch: 32-byte aligned, scratch_bytes >=
 * muse_matmul_tile_scratch(). Returns false, having written nothing, when the kernel declines.
 * Preconditions (MUSE_ASSERT): muse_matmul_tile_supported(k, w->type, w->ne0, n_act).
 */
bool muse_matmul_tile(const struct muse_kernels *k, const struct muse_matmul_weight *w, const void *xp, size_t xps,
                      int n_act, float *out, int64_t out_stride, void *scratch, size_t scratch_bytes);

/* gamma(n) = n u / (1 - n u), u = 2^-24: Higham's bound on the relative error of n float
 * operations, the factor of the tile GEMM's tolerance (docs/cpu-backend.md). */
double muse_tile_gamma(int64_t n);

/* The most the decode of rows interleaved by 8 (kernels.h muse_gemm_r8_fn) may differ from the dot
 * in force for a row of nb blocks: 2 gamma(nb + 3) T, T = sum over the blocks of |d_w d_a| times
 * the sum of |w_j a_j| over the block (docs/cpu-backend.md). */
double muse_r8_bound(int64_t nb, double t);
