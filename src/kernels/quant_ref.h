/*
 * quant_ref.h - the plain-C reference kernels behind muse_type_traits (kernels/types.h), named
 * so the SIMD files and tests can call them directly.
 *
 *   muse_to_float_<t>(x, y, n)             dequantize n elements, bit-exact with ggml's
 *                                          dequantize_row_<t> (gguf-and-quants.md part 2)
 *   muse_from_float_<t>(x, y, n)           reference quantizer (spec 2.11 rounding)
 *   muse_vec_dot_<t>_<act>_ref(n, s, x, y) one weight row of <t> dot one activation row of
 *                                          <act>, with the integer sums and float order of
 *                                          ggml's CPU ggml_vec_dot_<t>_<act>_generic
 *
 * Contract for all: n is a multiple of the block size(s) involved (callers guarantee it; not
 * checked); x and y do not overlap; rows may sit at any address with the block struct's
 * alignment (blocks.h); pure functions, thread-safe, no allocation.
 */
#pragma once

#include <stdint.h>

/* ---- plain types (types.c) ---- */
void muse_to_float_f32(const void *x, float *y, int64_t n);
void muse_to_float_f16(const void *x, float *y, int64_t n);
void muse_to_float_bf16(const void *x, float *y, int64_t n);
void muse_to_float_f64(const void *x, float *y, int64_t n);
void muse_from_float_f32(const float *x, void *y, int64_t n);
void muse_from_float_f16(const float *x, void *y, int64_t n);
void muse_from_float_bf16(const float *x, void *y, int64_t n);
void muse_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_f16_f16_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_bf16_bf16_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- 32-element legacy blocks, IQ4_NL, FP4, Q1_0 (quant_legacy.c) ---- */
void muse_to_float_q4_0(const void *x, float *y, int64_t n);
void muse_to_float_q4_1(const void *x, float *y, int64_t n);
void muse_to_float_q5_0(const void *x, float *y, int64_t n);
void muse_to_float_q5_1(const void *x, float *y, int64_t n);
void muse_to_float_q8_0(const void *x, float *y, int64_t n);
void muse_to_float_q8_1(const void *x, float *y, int64_t n);
void muse_to_float_iq4_nl(const void *x, float *y, int64_t n);
void muse_to_float_mxfp4(const void *x, float *y, int64_t n);
void muse_to_float_nvfp4(const void *x, float *y, int64_t n);
void muse_to_float_q1_0(const void *x, float *y, int64_t n);
void muse_from_float_q4_0(const float *x, void *y, int64_t n);
void muse_from_float_q4_1(const float *x, void *y, int64_t n);
void muse_from_float_q5_0(const float *x, void *y, int64_t n);
void muse_from_float_q5_1(const float *x, void *y, int64_t n);
void muse_from_float_q8_0(const float *x, void *y, int64_t n);
void muse_from_float_q8_1(const float *x, void *y, int64_t n);
/* ggml's x86 AVX/AVX2 activation quantizers (what llama.cpp runs on x86; not in the table):
 * id = 127/amax and round-half-to-even instead of 1/d and roundf. See docs/quant.md. */
void muse_from_float_q8_0_x86(const float *x, void *y, int64_t n);
void muse_from_float_q8_1_x86(const float *x, void *y, int64_t n);
void muse_from_float_mxfp4(const float *x, void *y, int64_t n);
void muse_from_float_nvfp4(const float *x, void *y, int64_t n);
void muse_from_float_q1_0(const float *x, void *y, int64_t n);
void muse_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_mxfp4_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_nvfp4_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q1_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- K-quants (quant_k.c; weight quantizers in quant_k_quantize.c) ---- */
void muse_to_float_q2_K(const void *x, float *y, int64_t n);
void muse_to_float_q3_K(const void *x, float *y, int64_t n);
void muse_to_float_q4_K(const void *x, float *y, int64_t n);
void muse_to_float_q5_K(const void *x, float *y, int64_t n);
void muse_to_float_q6_K(const void *x, float *y, int64_t n);
void muse_to_float_q8_K(const void *x, float *y, int64_t n);
void muse_from_float_q8_K(const float *x, void *y, int64_t n);
/* weight quantizers: ggml's quantize_row_<t>_ref (quant_k_quantize.c) */
void muse_from_float_q2_K(const float *x, void *y, int64_t n);
void muse_from_float_q3_K(const float *x, void *y, int64_t n);
void muse_from_float_q4_K(const float *x, void *y, int64_t n);
void muse_from_float_q5_K(const float *x, void *y, int64_t n);
void muse_from_float_q6_K(const float *x, void *y, int64_t n);
void muse_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- I-quants (quant_iq.c) ---- */
void muse_to_float_iq2_xxs(const void *x, float *y, int64_t n);
void muse_to_float_iq2_xs(const void *x, float *y, int64_t n);
void muse_to_float_iq2_s(const void *x, float *y, int64_t n);
void muse_to_float_iq3_xxs(const void *x, float *y, int64_t n);
void muse_to_float_iq3_s(const void *x, float *y, int64_t n);
void muse_to_float_iq1_s(const void *x, float *y, int64_t n);
void muse_to_float_iq1_m(const void *x, float *y, int64_t n);
void muse_to_float_iq4_xs(const void *x, float *y, int64_t n);
void muse_vec_dot_iq2_xxs_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq2_xs_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq2_s_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq3_xxs_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq3_s_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq1_s_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq1_m_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- ternary (quant_ternary.c) ---- */
void muse_to_float_tq1_0(const void *x, float *y, int64_t n);
void muse_to_float_tq2_0(const void *x, float *y, int64_t n);
void muse_from_float_tq1_0(const float *x, void *y, int64_t n);
void muse_from_float_tq2_0(const float *x, void *y, int64_t n);
void muse_vec_dot_tq1_0_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void muse_vec_dot_tq2_0_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
