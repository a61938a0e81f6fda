/*
 * kernels.h - the fast CPU kernels: one table per SIMD level, chosen once at start-up.
 *
 * Per weight type a level may provide a matrix kernel (muse_gemm_fn) for one activation row
 * (decode, `gemv`) and for many activation rows (prefill/verify, `gemm`: each unpacked weight
 * block is reused across several activation rows held in registers), plus the activation
 * quantizers. The activations are always quantized exactly as the reference path quantizes
 * them (the SIMD quantizers give the same bytes as muse_type_traits[].from_float; the matmul
 * driver uses muse_x86_act_from_float where that differs), and each kernel declares the dot
 * order it reproduces (`order`: ggml's generic vec_dot_ref or ggml's x86 muse_x86_vec_dot).
 *
 * Protocol (after llamafile's tinyBLAS): a NULL entry, a kernel whose `order` is not the order
 * in force for its type (muse_matmul_order), or a kernel that returns false, means "declined";
 * the caller (muse_matmul) then runs the scalar dot of the order in force (muse_x86_vec_dot,
 * which is vec_dot_ref for the generic types) row by row. The scalar level has no kernels of
 * its own: it is that scalar path.
 *
 * The tables are immutable process-wide constants; every function here is thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "kernels/types.h"

/* Activation rows a gemm kernel works on together at most (callers may pass any number: the
 * kernels walk them in groups of up to this many). */
#define MUSE_GEMM_MAX_NY 8

/*
 * For every weight row i in [0, n_rows) and activation row r in [0, n_act):
 *     out[r * out_stride + i] = dot(W row i, A row r)
 * W row i: n elements of the weight type at (char *)w + i * w_stride.
 * A row r: n elements of the weight type's vec_dot_type at (char *)act + r * act_stride.
 * n must be a multiple of both block sizes. Returns false (having written nothing) when the
 * kernel does not handle this shape.
 */
typedef bool (*muse_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                             size_t act_stride, int n_act, float *out, int64_t out_stride);

/*
 * Attention helpers over an F16 KV cache in ggml's x86 order (the order of the forward's
 * muse_attn_head_ref: llamafile tinyBLAS lanes). NULL at levels without them: callers use the
 * scalar code. K/V rows: hd F16 values, row j at (char *)base + j * stride; hd a multiple of 8.
 *   kq: scores[j] = the tinyBLAS dot of K_j (widened to f32) and qf (hd floats): lane l
 *       accumulates fma(K_j[d], qf[d], lane) for d = l, l + 8, ... in order, then
 *       muse_x86_hsum8; j < n_keys
 *   pv: for j = 0, 1, ..., n_keys - 1 in order, with L = (lane0 + j) % 8:
 *       lanes[L * hd + d] = fma(V_j[d], p[j], lanes[L * hd + d]) for every d < hd
 */
typedef void (*muse_attn_kq_fn)(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                                float *scores);
typedef void (*muse_attn_pv_fn)(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                                int32_t lane0, float *lanes);

/*
 * GQA: kq / pv over an F16 cache for nq >= 1 query heads that read the same K/V rows, each row
 * read and widened once for all of them. Per (key, head) the operations and their order are
 * those of kq / pv above, so the results equal nq separate calls bit for bit:
 *   kq_multi: scores[i * s_stride + j] = kq's scores[j] for the query qf + i * q_stride;
 *   pv_multi: for head i < nq, pv(hd, n_keys, v, v_stride, p + i * p_stride, lane0,
 *             lanes + i * l_stride).
 * Strides count floats.
 */
typedef void (*muse_attn_kq_multi_fn)(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, int32_t nq,
                                      const float *qf, size_t q_stride, float *scores, size_t s_stride);
typedef void (*muse_attn_pv_multi_fn)(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, int32_t nq,
                                      const float *p, size_t p_stride, int32_t lane0, float *lanes,
                                      size_t l_stride);

/* The probabilities over an F16 cache: p[j] = muse_fp16_to_fp32(muse_fp32_to_fp16(p[j] * inv))
 * for j < n, bit for bit (NaN included). */
typedef void (*muse_attn_probs_fn)(int32_t n, float inv, float *p);

/*
 * The same over F32 and Q8_0 KV caches, in the orders muse_attn_head_ref uses for them (NULL at
 * levels without them):
 *   kq_f32 (muse_attn_kq_fn): scores[j] = muse_x86_dot_vec(hd, K_j, qf, 0) (ggml_vec_dot_f32),
 *       any hd;
 *   kq_q8_0: scores[j] = vec_dot_ref of Q8_0 (K_j against qq, the query quantized to Q8_0 by the
 *       reference quantizer); hd a multiple of 32;
 *   pv_f32 / pv_q8_0 (muse_attn_pv_fn): as pv above with V_j as floats (Q8_0: the reference
 *       dequantizer, (float)q * d); pv_f32 any hd, pv_q8_0 hd a multiple of 32.
 */
typedef void (*muse_attn_kq_q_fn)(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const void *qq,
                                  float *scores);

/*
 * The tile GEMM (kernels/x86/gemm_tiles_<isa>.c, docs/cpu-backend.md "The tile GEMM"): the
 * batched matmul of a weight type in a reassociated float order. NOT bit-identical to the dot
 * product in force: each output differs from it by at most 2 * gamma(n/16 + 8) * T, T the sum of
 * the absolute values of the integer-times-scale terms (muse_tile_bound in matmul.h), since only
 * the float factors are applied in another order (the integer sums are the reference's, exact).
 * For every weight row i < n_rows and activation row r < n_act:
 *     out[r * out_stride + i] = dot(W row i, A row r)
 * with A row r in the tile activation layout (muse_matmul_tile_prep) at (char *)xp + r * xps.
 * (Float weight types: within (gamma(n) + gamma(n/8 + 3)) sum |w a|, the products being exact.)
 * scratch: a 64-byte aligned buffer of at least tile_bytes[type](n) bytes (the packed weights).
 * Returns false, having written nothing, when it does not handle the shape.
 */
typedef bool (*muse_tile_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *xp,
                                  size_t xps, int n_act, float *out, int64_t out_stride, void *scratch,
                                  size_t scratch_bytes);
typedef size_t (*muse_tile_bytes_fn)(int64_t n);
/*
 * The fast decode of weights interleaved by 8 (repack.h): out[r * out_stride + i] = dot(W row i,
 * A row r) for i < 8 * n_groups and r < n_act (any; 4 per pass), W the n_groups groups at w8 (rows
 * of n elements), A rows in the reference layout of the vec_dot_type (Q8_0) act_stride bytes apart.
 * NOT bit-identical to the dot in force: per row, the block terms (d_w * d_a) * I, I the exact
 * integer dot of a block, are summed block after block in one FMA chain where ggml's x86 order
 * keeps 8 lanes and adds them at the end; both are within gamma(nb) T of the exact sum (the block
 * scale products are exact: two fp16 values), so the two differ by at most muse_r8_bound (matmul.h).
 */
typedef void (*muse_gemm_r8_fn)(int64_t n, const void *w8, int64_t n_groups, const void *act, size_t act_stride,
                                int n_act, float *out, int64_t out_stride);
/* n F16 or BF16 values to f32 (exact). */
typedef void (*muse_widen_fn)(const void *x, float *y, int64_t n);

/*
 * Flash-style attention over an F16 KV cache (kernels/x86/attn_flash.inc): the rows of
 * n_tok consecutive query tokens times nq query heads that read one KV head. Row (t, h):
 *     out[t * o_tstride + h * hd + d] = sum_j p_j V_j[d],  p = softmax(scale * qf . K_j)
 * over the keys at positions lo_t .. pos[t] (lo_t = pos[t] - n_swa + 1 clamped at 0, or 0 when
 * n_swa = 0), qf = the query q[t * q_tstride + h * hd ..] rounded to F16. The key/value of
 * position p are the hd F16 values at (char *)k + (p % n_cells) * k_stride (v likewise); the
 * union of the rows' keys must fit the cache (max pos[t] - min lo_t < n_cells). The p_j are
 * muse_attn_head_ref's (rounded to F16) bit for bit; the sum over j is in another order, within
 * the bound of docs/cpu-backend.md "Flash attention". attn_flash_f32 / attn_flash_q8_0 do the same
 * over an F32 / Q8_0 cache with their reference's operations (q as it is / quantized to Q8_0, p
 * not rounded). scratch: muse_attn_flash_scratch(hd, n_tok * nq, n_cells or more) bytes, 32-byte
 * aligned.
 */
struct muse_attn_flash {
    int32_t hd, n_tok, nq;
    const float *q;
    size_t q_tstride;
    float *out;
    size_t o_tstride;
    const int32_t *pos;
    int32_t n_swa;
    const void *k, *v;
    size_t k_stride, v_stride;
    uint32_t n_cells;
    float scale;
};
typedef void (*muse_attn_flash_fn)(const struct muse_attn_flash *f, void *scratch);
typedef size_t (*muse_attn_flash_scratch_fn)(int32_t hd, int32_t max_rows, uint32_t max_cells);

/*
 * Window attention (the vision tower's; kernels/win_attn.c, x86/win_attn_avx2.c): one head of
 * bidirectional attention of the rows of one window over the keys of the same window, no KV
 * cache (a global layer is one window over every row). The numerics, identical in every
 * implementation (so that the cpu and ref devices agree bit for bit):
 *   s[j]  = (fmaf chain over d = 0..hd-1 of q[d] * k_j[d], from 0) * scale
 *   e[j]  = muse_x86_expf(s[j] - max_j s[j])                (ggml's vector exp)
 *   sum   = muse_x86_hsum8(lanes), lane (j - s0) % 8 summing its e[j] in increasing j
 *   out[d] = (fmaf chain over j = s0.. of e[j] * v_j[d], from 0) * (1.0f / sum)
 * The output of query i overwrites q[i] (its head's columns); a call reads only the q rows it writes.
 */
/* Keys are packed per head in panels of this many keys: [panel][head_dim][16] (the QK kernel reads
 * one panel as two 8-lane vectors per channel). Panels are aligned to key 0, not to windows. */
#define MUSE_WIN_KPANEL 16
/* Query rows the SIMD kernel computes together. */
#define MUSE_WIN_ATTN_TILE 6

struct muse_win_attn {
    float *q;             /* [n_rows][ld] queries (head at columns head*hd ..), overwritten with the output */
    const float *v;       /* this head's values: key j's channels at v + j * v_ld */
    const float *kp;      /* this head's packed keys [n_panels][hd][KPANEL], 32-byte aligned: key j at panel
                           * j / 16, lane j % 16 */
    int64_t ld, v_ld;
    int32_t hd;
    int32_t head;
    int32_t s0, n;        /* the window: keys and queries s0 .. s0 + n - 1 */
    float scale;
};

/* Queries i0 .. i1 - 1 (s0 <= i0 < i1 <= s0 + n) of a->head; scratch: muse_win_attn_scratch(a->n)
 * floats. The plain-C kernel takes any hd, a SIMD one (muse_kernels.win_attn_rows) hd % 8 == 0. */
typedef void (*muse_win_attn_rows_fn)(const struct muse_win_attn *a, int32_t i0, int32_t i1, float *scratch);

/* Scratch floats of a muse_win_attn_rows_fn over a window of n keys. */
size_t muse_win_attn_scratch(int32_t n);
/* The plain-C kernel (the oracle). */
void muse_win_attn_rows_ref(const struct muse_win_attn *a, int32_t i0, int32_t i1, float *scratch);

/* Activation layouts a level's kernels may ask for (muse_kernels.act_layout). Only the reference
 * one now: Q3_K's "class" layout (its qs permuted so that int32 unit m held elements m, m+8, m+16,
 * m+24, for ggml's generic order) went when Q3_K moved to ggml's x86 order; the hook stays for a
 * kernel that wants its activations laid out otherwise. */
enum muse_act_layout {
    MUSE_ACT_REF = 0,          /* the reference bytes of the vec_dot_type */
    MUSE_ACT_LAYOUT_COUNT
};

/* The float order a level's kernels of a weight type follow (muse_kernels.order). A kernel is
 * used only when its order is the one the forward uses for the type (muse_matmul_order). */
enum muse_dot_order {
    MUSE_ORDER_GENERIC = 0,    /* vec_dot_ref: ggml's generic C order */
    MUSE_ORDER_X86 = 1,        /* muse_x86_vec_dot: ggml's x86 AVX2 / tinyBLAS order */
};

/* In place: turn n elements of quantized activations (reference layout) into `layout`. */
typedef void (*muse_act_prepare_fn)(void *q, int64_t n);

struct muse_kernels {
    enum muse_cpu_level level;
    /* Activation quantizers indexed by the activation type (Q8_0, Q8_K, F16, BF16): the same
     * bytes as muse_type_traits[type].from_float. NULL = use the reference quantizer. */
    muse_from_float_fn quantize[MUSE_TYPE_COUNT];
    /* The same for ggml's x86 quantizers: the bytes of muse_x86_act_from_float(type) where that
     * differs from the reference (Q8_0). NULL = use muse_x86_act_from_float. */
    muse_from_float_fn quantize_x86[MUSE_TYPE_COUNT];
    muse_gemm_fn gemv[MUSE_TYPE_COUNT];  /* by weight type; called with n_act == 1 */
    muse_gemm_fn gemm[MUSE_TYPE_COUNT];  /* by weight type; any n_act >= 1 */
    /* Activation layout gemv/gemm of a weight type read (MUSE_ACT_REF unless set). Kernels that
     * want another layout never decline a shape muse_matmul_supported() accepts. */
    uint8_t act_layout[MUSE_TYPE_COUNT];
    muse_act_prepare_fn act_prepare[MUSE_ACT_LAYOUT_COUNT];
    /* The order gemv/gemm of the type implement (enum muse_dot_order; MUSE_ORDER_GENERIC unless
     * set). */
    uint8_t order[MUSE_TYPE_COUNT];
    /* True when gemv/gemm of the type reproduce the dot product of their order (vec_dot_ref or
     * muse_x86_vec_dot) bit for bit; otherwise they agree to float rounding (1e-5 of |w|*|a|). */
    bool exact[MUSE_TYPE_COUNT];
    /* The tile GEMM by weight type (NULL: none), the scratch it needs, and the number of activation
     * rows from which muse_matmul_tile_supported() chooses it over gemm. Empty in exact mode. */
    muse_tile_gemm_fn tile_gemm[MUSE_TYPE_COUNT];
    muse_tile_bytes_fn tile_bytes[MUSE_TYPE_COUNT];
    int tile_min_act;
    /* The decode of rows interleaved by 8 by weight type (NULL: none; empty in exact mode): the
     * cpu device repacks the weights of these types when it prepares a program
     * (backend/cpu_weights.c) and runs every batch below the tile GEMM's threshold with it. */
    muse_gemm_r8_fn gemm_r8[MUSE_TYPE_COUNT];
    /* Per weight type, the activation rows from which the tile GEMM runs when that is fewer than
     * tile_min_act (0: tile_min_act): the small batches of several sequences decoded together
     * (issue 29), where a type's packing pays from fewer rows (bench/smallbatch_lab). */
    uint8_t tile_min_small[MUSE_TYPE_COUNT];
    /* F16 / BF16 activation rows widened to the f32 tile layout of the float weights (NULL: plain C) */
    muse_widen_fn widen[MUSE_TYPE_COUNT];
    /* True in the tables that reproduce the reference bit for bit (MUSE_CPU=exact, and the scalar
     * level): no tile GEMM, no flash attention. */
    bool exact_mode;
    /* Flash attention over an F16 cache for batches of queries (NULL: none; empty in exact mode). */
    muse_attn_flash_fn attn_flash_f16;
    muse_attn_flash_fn attn_flash_f32;  /* an F32 cache, head_dim a multiple of 32 */
    muse_attn_flash_fn attn_flash_q8_0; /* a Q8_0 cache, head_dim a multiple of 32 */
    muse_attn_flash_scratch_fn attn_flash_scratch;
    muse_attn_kq_fn attn_kq_f16;
    muse_attn_pv_fn attn_pv_f16;
    muse_attn_kq_multi_fn attn_kq_f16_multi;
    muse_attn_pv_multi_fn attn_pv_f16_multi;
    muse_attn_probs_fn attn_probs_f16;
    muse_attn_kq_fn attn_kq_f32;
    muse_attn_pv_fn attn_pv_f32;
    muse_attn_kq_q_fn attn_kq_q8_0;
    muse_attn_pv_fn attn_pv_q8_0;
    /* Window attention (NULL: the plain-C muse_win_attn_rows_ref; the same bits) for hd % 8 == 0. */
    muse_win_attn_rows_fn win_attn_rows;
};

/*
 * The table of `level`, or NULL when this machine cannot run that level (level above
 * muse_cpu_level_max()) or muse was built without it.
 */
const struct muse_kernels *muse_kernels_for(enum muse_cpu_level level);

/* The same without the reassociating kernels: bit-identical to the reference (the exact mode). */
const struct muse_kernels *muse_kernels_exact_for(enum muse_cpu_level level);

/* The table of muse_cpu_level_active() (MUSE_CPU=scalar|avx2|avx512|amx forces a lower level), the
 * exact one when muse_cpu_exact_active() (MUSE_CPU=exact, alone or with a level: avx2,exact). */
const struct muse_kernels *muse_kernels_active(void);

/* Convert quantized activation rows for weights of `wtype` (n elements each, in the reference
 * layout) into the layout k's kernels read for that type; nothing to do for MUSE_ACT_REF. */
void muse_kernels_prepare_act(const struct muse_kernels *k, enum muse_type wtype, void *q, int64_t n);

/* Quantize one activation row of n floats into type `act_type` with the kernels of `k`
 * (falling back to the reference quantizer). F32 is a plain copy. n: a multiple of the block
 * size. */
void muse_kernels_quantize_row(const struct muse_kernels *k, enum muse_type act_type, const float *x, void *y,
                               int64_t n);
