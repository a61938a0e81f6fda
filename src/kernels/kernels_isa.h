/*
 * kernels_isa.h - prototypes of the per-ISA kernels that kernels.c puts into the tables of
 * kernels.h. Internal to src/kernels. Each kernel follows the muse_gemm_fn / muse_from_float_fn
 * contracts of kernels.h; the files are split by quant family and ISA:
 *   quantize_<isa>.c       activation quantizers (bit-identical to the reference ones)
 *   gemm_legacy_<isa>.c    Q8_0, Q4_0 (32-element blocks, Q8_0 activations)
 *   gemm_kquants_<isa>.c   Q4_K, Q5_K, Q6_K (Q8_K activations)
 *   gemm_iquants_<isa>.c   IQ2_XXS (Q8_K activations)
 *   gemm_iq23_<isa>.c      IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (Q8_K activations)
 *   gemm_k23_<isa>.c       Q2_K, Q3_K (Q8_K activations)
 *   gemm_iq1_<isa>.c       IQ1_S, IQ1_M, TQ1_0, TQ2_0 (Q8_K activations)
 *   gemm_fp4_<isa>.c       MXFP4 (Q8_0 activations)
 *   gemm_legacy1_<isa>.c   Q4_1, Q5_1 (Q8_1 activations)
 *   gemm_iq4_<isa>.c       IQ4_XS (Q8_K activations)
 *   gemm_legacy5_<isa>.c   Q5_0, IQ4_NL (32-element blocks, Q8_0 activations)
 *   gemm_floats_<isa>.c    F32, F16, BF16
 *   attn_<isa>.c           attention over an F16, F32 or Q8_0 KV cache
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

void muse_act_q8K_perm8_avx2(void *q, int64_t n);

MUSE_DECLARE_GEMM(muse_gemm_q8_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q4_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q4_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q5_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q6_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq2_xxs_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq2_xs_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq2_s_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq1_s_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq1_m_avx2);
MUSE_DECLARE_GEMM(muse_gemm_mxfp4_avx2);
MUSE_DECLARE_GEMM(muse_gemm_tq2_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_tq1_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q2_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q3_K_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q4_1_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q5_1_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq3_xxs_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq3_s_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq4_xs_avx2);
MUSE_DECLARE_GEMM(muse_gemm_q5_0_avx2);
MUSE_DECLARE_GEMM(muse_gemm_iq4_nl_avx2);
MUSE_DECLARE_GEMM(muse_gemm_f32_avx2);
MUSE_DECLARE_GEMM(muse_gemm_f16_avx2);
MUSE_DECLARE_GEMM(muse_gemm_bf16_avx2);

void muse_attn_kq_f16_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                           float *scores);
void muse_attn_pv_f16_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p, int32_t lane0,
                           float *lanes);
void muse_attn_kq_f16_multi_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, int32_t nq,
                                 const float *qf, size_t q_stride, float *scores, size_t s_stride);
void muse_attn_pv_f16_multi_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, int32_t nq,
                                 const float *p, size_t p_stride, int32_t lane0, float *lanes, size_t l_stride);
void muse_attn_probs_f16_avx2(int32_t n, float inv, float *p);
void muse_attn_kq_f32_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const float *qf,
                           float *scores);
void muse_attn_pv_f32_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p, int32_t lane0,
                           float *lanes);
void muse_attn_kq_q8_0_avx2(int32_t hd, int32_t n_keys, const void *k, size_t k_stride, const void *qq,
                            float *scores);
void muse_attn_pv_q8_0_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                            int32_t lane0, float *lanes);
