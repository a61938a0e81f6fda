/*
 * x86_numerics.h - scalar emulations of the arithmetic ggml's CPU backend performs on an x86-64
 * AVX2+FMA build (the build that produced the parity goldens), for the operations where that
 * arithmetic differs from ggml's generic C code. Plain C, one element or one dot product at a
 * time, bit-exact with the SIMD code they describe (fmaf is a true fused multiply-add).
 *
 * Sources (llama.cpp, ggml/src/ggml-cpu): vec.h ggml_v_expf / ggml_v_silu (AVX2 + FMA),
 * vec.cpp ggml_vec_soft_max_f32 (8-lane groups, each group summed in f32, groups added in
 * double), llamafile/sgemm.cpp tinyBLAS (one 8-lane FMA accumulator per output, hsum),
 * vec.cpp ggml_vec_dot_f32 / ggml_vec_dot_f16 (four 8-lane FMA accumulators, GGML_F32x8_REDUCE).
 *
 * All functions are pure and thread-safe. Each is built twice from x86_numerics_body.h (plain,
 * and with FMA inlined for CPUs that have it); both builds give the same bits.
 */
#pragma once

#include <stdint.h>

/* ggml_v_expf (AVX2 + FMA) for one lane: exp(x) within 1.5 ulp; exp(-inf) = 0. */
float muse_x86_expf(float x);

/* ggml_v_silu for one lane: x / (1 + ggml_v_expf(-x)). */
float muse_x86_silu(float x);

/* y[i] = muse_x86_silu(g[i]) * u[i] for i < n (y may alias g or u): the same bits, eight lanes at a
 * time where the CPU has AVX2 + FMA. */
void muse_x86_swiglu(float *y, const float *g, const float *u, int64_t n);

/* The horizontal sum of tinyBLAS (hsum) and of ggml's hsum_float_8 over 8 f32 lanes:
 * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
float muse_x86_hsum8(const float l[8]);

/*
 * tinyBLAS dot product (prompt matmuls with F32/F16/BF16 operands, n a multiple of 8): lane
 * i % 8 accumulates fmaf(x[i], y[i], lane) in increasing i, then muse_x86_hsum8.
 */
float muse_x86_dot_tinyblas(int64_t n, const float *x, const float *y);

/*
 * ggml_vec_dot_f32 / ggml_vec_dot_f16 (AVX, GGML_F32_STEP 32): element i goes to accumulator
 * (i / 8) % 4, lane i % 8, with FMA, for i below n rounded down to 32; the four accumulators
 * are reduced as GGML_F32x8_REDUCE does. The tail (n % 32 elements) is added in double when
 * tail_double (the F16 dot) or in f32 (the F32 dot).
 */
float muse_x86_dot_vec(int64_t n, const float *x, const float *y, int tail_double);

/*
 * The exponentials and the denominator of one softmax row as ggml_vec_soft_max_f32 computes them
 * (AVX2+FMA). x holds the n scores of positions pos0 .. pos0 + n - 1 (each already scaled); every
 * other position of the row is masked (-inf, an exact 0 after the exp). x[j] becomes
 * muse_x86_expf(x[j] - max); the returned sum adds, for each group of 8 positions aligned at
 * position 0 (llama.cpp's KV cell of position p is p, and the row length is padded to a multiple
 * of 256), the f32 horizontal sum of its lanes (muse_x86_hsum8, masked lanes 0) in double, in
 * increasing position order.
 */
double muse_x86_softmax_exp(float *x, int32_t n, int32_t pos0, float max);

/* lanes[d * 8 + lane] = fmaf(row[d], p, lanes[d * 8 + lane]) for d < n: one key's share of a
 * tinyBLAS V·p (the attention's output lanes). */
void muse_x86_fma_lanes(float *lanes, const float *row, float p, int32_t lane, int32_t n);

/* ---- matmul numerics of ggml's x86 backend ------------------------------------------------- */

#include "kernels/types.h"

/* Dequantize n values of a KV-cache row of `type` (to_float; an F16 row with F16C where the CPU
 * has it: the same values, faster). */
void muse_x86_kv_to_float(enum muse_type type, const void *x, float *y, int64_t n);

/*
 * The weight types whose dot product has an x86 order here, X(TYPE, t) for MUSE_TYPE_<TYPE>: the
 * one list of them. muse_x86_vec_dot(type) differs from vec_dot_ref exactly for these
 * (muse_x86_vd_<t>_{generic,fma} in x86_numerics_body.h), so they are the types whose forward
 * order is MUSE_ORDER_X86 (muse_matmul_order), and the x86 kernel tables mark their matrix kernels
 * so (kernels.c).
 */
#define MUSE_X86_ORDER_TYPES(X)                                                                      \
    X(F32, f32) X(F16, f16) X(BF16, bf16) X(Q8_0, q8_0) X(Q4_0, q4_0) X(Q5_0, q5_0) X(IQ4_NL, iq4_nl) \
    X(IQ2_XXS, iq2_xxs) X(Q2_K, q2_K) X(Q3_K, q3_K) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K) X(NVFP4, nvfp4) X(MXFP4, mxfp4) \
    X(Q1_0, q1_0) X(IQ1_S, iq1_s) X(IQ1_M, iq1_m) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(IQ3_XXS, iq3_xxs)      \
    X(IQ3_S, iq3_s) X(IQ4_XS, iq4_xs) X(TQ2_0, tq2_0) X(TQ1_0, tq1_0) X(Q4_1, q4_1) X(Q5_1, q5_1)

/*
 * The dot product ggml's x86 AVX2+FMA build uses for weights of `type` (the x86 kernels and
 * llamafile's tinyBLAS agree on it; for float weights tinyBLAS, i.e. the order of batches of two
 * or more rows, which muse uses for every batch) for the types of MUSE_X86_ORDER_TYPES, the type's
 * vec_dot_ref for the others:
 *   F32, F16, BF16 (activations converted to the same type): tinyBLAS, muse_x86_dot_tinyblas
 *     (n % 8 != 0: ggml_vec_dot_f32 for F32, the reference for F16/BF16);
 *   IQ2_XXS x Q8_K: per super-block d = d_w * d_a; lane l = the exact integer sum over the 8
 *     sub-blocks of (2 * ls + 1) * (products of elements 4l..4l+3); acc[l] = fmaf(d, lane,
 *     acc[l]); the result is 0.125f * muse_x86_hsum8(acc);
 *   Q4_1, Q5_1 x Q8_1 (ggml's AVX2 vec_dot): per block the lanes of the unsigned codes x a,
 *     acc[l] = fmaf(d_w * d_a, lane, acc[l]), summs = fmaf(m_w, s_a, summs); hsum8(acc) + summs;
 *   Q2_K x Q8_K (ggml's AVX2 vec_dot): first the mins, acc[l] = fmaf(-d_a * dmin_w, mins[2l] *
 *     bsums[2l] + mins[2l + 1] * bsums[2l + 1], acc[l]), then the lanes as Q3_K's; hsum8;
 *   Q3_K x Q8_K (ggml's AVX2 vec_dot): lane l = the exact sum of scale * code * a over the
 *     elements with (e % 32) / 4 == l, acc[l] = fmaf(d_a * d_w, lane, acc[l]); hsum8;
 *   IQ4_XS x Q8_K (likewise): lane l = the exact sum of (ls - 32) * codebook value * a, the same
 *     lanes, d = d_w * d_a; hsum8;
 *   TQ2_0 x Q8_K (likewise): the same lanes of code * a minus bsums[2l] + bsums[2l + 1],
 *     acc[l] = fmaf(lane, d_a * d_w, acc[l]) (ggml writes mul + add; GCC contracts it); hsum8;
 *   TQ1_0 x Q8_K (likewise): the same with its base-3 codes;
 *   Q4_K, Q5_K, Q6_K x Q8_K (ggml's AVX2 vec_dot, not its generic one; muse's choice, the golden
 *     machine ran repacked Q4_K kernels in yet another order): per super-block d = d_a * d_w;
 *     lane l (0..7) = the exact integer sum of scale * code * a over the elements e with
 *     (e % 32) / 4 == l (Q6_K: the code 0..63, then lane k minus 32 x the scale-weighted bsums of
 *     sub-blocks 2k, 2k + 1); acc[l] = fmaf(d, lane, acc[l]). Mins of Q4_K with
 *     dmin = -d_a * dmin_w into four more lanes: accm[k] = fmaf(dmin, mn[2k] * (bs[4k] + bs[4k+1])
 *     + mn[2k+1] * (bs[4k+2] + bs[4k+3]), accm[k]), result muse_x86_hsum8(acc) + ((accm[0] +
 *     accm[2]) + (accm[1] + accm[3])); of Q5_K into one float, summs = fmaf(dmin, sum of mn[j] *
 *     (bs[2j] + bs[2j+1]), summs), result muse_x86_hsum8(acc) + summs; Q6_K muse_x86_hsum8(acc);
 *   Q8_0, Q4_0, Q5_0, IQ4_NL x Q8_0 (llamafile's tinyBLAS_Q0_AVX; Q8_0/Q4_0/Q5_0 also ggml's AVX2
 *     vec_dot): per block d = d_w * d_a; lane l (0..7) = the exact integer sum of the
 *     products of elements 4l..4l+3; acc[l] = fmaf(d, lane, acc[l]); muse_x86_hsum8 at the end;
 *   NVFP4 x Q8_0 (ggml's AVX2 vec_dot, in llama.cpp since Oct 2026): the same per 32-element half
 *     of a block with d = ue4m3_half(d_sub) * d_a of the lane's 16-element sub-block;
 *   MXFP4 x Q8_0 (likewise): the same with d = d_a * e8m0_half(e), even blocks into one set of
 *     lanes and odd ones into another, hsum8 of their sum; an odd last block added after it as
 *     the generic code does (sumf += d * (float)sumi);
 *   Q1_0 x Q8_0 (likewise): per block the 4 Q8_0 blocks' lanes of +-a sums chained, b = d_a0 *
 *     lane, b = fmaf(d_ak, lane, b), then acc = fmaf(d_w, b, acc); hsum8;
 *   IQ1_S x Q8_K (ggml's AVX2 vec_dot): per super-block d = d_a * d_w, lane l = the exact sum over
 *     the 8 groups of ls * (grid products of elements 4l..4l+3), acc[l] = fmaf(d, lane, acc[l]),
 *     accum1 = fmaf(d, sum1, accum1) with sum1 the exact sum of ls * sign * (the group's bsums)
 *     (ggml's `accum1 += d * sumi1`, FMA-contracted by GCC); hsum8(acc) + 0.125f * accum1;
 *   IQ1_M x Q8_K (likewise): two sets of lanes, the grid products and the delta terms (ls * sign
 *     * the sums of a), each acc = fmaf(d, lane, acc); hsum8(acc1) + 0.125f * hsum8(acc2);
 *   IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S x Q8_K (likewise, as IQ2_XXS): per super-block d = d_w * d_a,
 *     lane l = the exact sum of ls * w * a over elements 4l..4l+3 of each 32, acc[l] = fmaf(d,
 *     lane, acc[l]); c * hsum8(acc) with c = 0.125f, 0.125f, 0.25f, 1.
 */
muse_vec_dot_fn muse_x86_vec_dot(enum muse_type type);

/*
 * The activation quantizer ggml's x86 build uses for activation format `act_type`: the x86
 * Q8_0/Q8_1 quantizers (muse_from_float_q8_0_x86: id = 127/amax, round half to even) for
 * Q8_0/Q8_1, the reference from_float otherwise.
 */
muse_from_float_fn muse_x86_act_from_float(enum muse_type act_type);

/*
 * The sums of ggml's rms_norm (generic C: sum += (double)(x[i] * x[i]) in increasing i) of n_rows
 * rows of n floats, row r at x + r * stride: sums[r]. Not x86 arithmetic, but its fast build lives
 * here: with AVX2, 8 or 16 rows side by side, one double lane per row (each lane is that row's
 * chain of additions in the same order, so the same bits as the scalar loop, 4-8x faster: the
 * scalar loop waits on one addition's latency per element).
 */
void muse_rms_sums(const float *x, int64_t stride, int32_t n_rows, int64_t n, double *sums);
