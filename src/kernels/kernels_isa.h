/*
 * kernels_isa.h - prototypes of the per-ISA kernels that kernels.c puts into the tables of
 * kernels.h. Internal to src/kernels. Each kernel follows the muse_gemm_fn / muse_from_float_fn
 * contracts of kernels.h; the files are split by quant family and ISA:
 *   quantize_<isa>.c       activation quantizers (bit-identical to the reference ones)
 *   gemm_legacy_<isa>.c    Q8_0, Q4_0 (32-element blocks, Q8_0 activations)
 *   gemm_kquants_<isa>.c   Q4_K, Q5_K, Q6_K (Q8_K activations)
 *   gemm_iquants_<isa>.c   IQ2_XXS (Q8_K activations)
 *   gemm_floats_<isa>.c    F32, F16, BF16
 *   attn_<isa>.c           attention over an F16 KV cache
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MUSE_DECLARE_GEMM(name)                                                                          \
    bool name(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, size_t act_stride, \
              int n_act, float *out, int64_t out_stride)

// ---- AVX2 + FMA + F16C ----
void muse_quantize_q8_0_avx2(const float *x, void *y, int64_t n);
void muse_quantize_q8_0_x86_avx2(const float *x, void *y, int64_t n);
void muse_quantize_q8_K_avx2(const float *x, void *y, int64_t n);
void muse_quantize_f16_avx2(const float *x, void *y, int64_t n);
void muse_quantize_bf16_avx2(const float *x, void *y, int64_t n);

MUSE_DECLARE_GEMM(muse_gemm_q8_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q4_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q4_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q5_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q6_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq2_xxs_avx2);
MUSE_DECLARE_GEMM(muse_gemm_f32_avx2);
MUSE_DECLARE_GEMM(muse_gemm_f16_avx2);
MUSE_DECLARE_GEMM(muse_gemm_bf16_avx2);

void muse_attn_kq_f16_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                           float *scores);
void muse_attn_pv_f16_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p, int32_t lane0,
                           float *lanes);
