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
