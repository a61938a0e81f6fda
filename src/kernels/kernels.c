/* kernels.c - the per-level kernel tables (explicit, one row per kernel) and their selection. */
#include "kernels/kernels.h"

#include <string.h>

#include "kernels/kernels_isa.h"

static const struct muse_kernels kernels_scalar = {
    .level = MUSE_CPU_LEVEL_SCALAR,
    /* no entries: the scalar level is the reference path */
};

static const struct muse_kernels kernels_avx2 = {
    .level = MUSE_CPU_LEVEL_AVX2,
    .quantize = {
        [MUSE_TYPE_Q8_0] = muse_quantize_q8_0_avx2,
        [MUSE_TYPE_Q8_K] = muse_quantize_q8_K_avx2,
        [MUSE_TYPE_F16] = muse_quantize_f16_avx2,
        [MUSE_TYPE_BF16] = muse_quantize_bf16_avx2,
    },
    .quantize_x86 = {
        [MUSE_TYPE_Q8_0] = muse_quantize_q8_0_x86_avx2,
    },
    .gemv = {
        [MUSE_TYPE_Q8_0] = muse_gemm_q8_0_avx2,
        [MUSE_TYPE_Q4_0] = muse_gemm_q4_0_avx2,
        [MUSE_TYPE_Q4_K] = muse_gemm_q4_K_avx2,
        [MUSE_TYPE_Q5_K] = muse_gemm_q5_K_avx2,
        [MUSE_TYPE_Q6_K] = muse_gemm_q6_K_avx2,
        [MUSE_TYPE_IQ2_XXS] = muse_gemm_iq2_xxs_avx2,
        [MUSE_TYPE_IQ3_XXS] = muse_gemm_iq3_xxs_avx2,
        [MUSE_TYPE_IQ3_S] = muse_gemm_iq3_s_avx2,
        [MUSE_TYPE_IQ4_XS] = muse_gemm_iq4_xs_avx2,
        [MUSE_TYPE_Q5_0] = muse_gemm_q5_0_avx2,
        [MUSE_TYPE_IQ4_NL] = muse_gemm_iq4_nl_avx2,
        [MUSE_TYPE_Q2_K] = muse_gemm_q2_K_avx2,
        [MUSE_TYPE_Q3_K] = muse_gemm_q3_K_avx2,
        [MUSE_TYPE_IQ2_XS] = muse_gemm_iq2_xs_avx2,
        [MUSE_TYPE_IQ2_S] = muse_gemm_iq2_s_avx2,
        [MUSE_TYPE_Q4_1] = muse_gemm_q4_1_avx2,
        [MUSE_TYPE_Q5_1] = muse_gemm_q5_1_avx2,
        [MUSE_TYPE_IQ1_S] = muse_gemm_iq1_s_avx2,
        [MUSE_TYPE_TQ2_0] = muse_gemm_tq2_0_avx2,
        [MUSE_TYPE_F32] = muse_gemm_f32_avx2,
        [MUSE_TYPE_F16] = muse_gemm_f16_avx2,
        [MUSE_TYPE_BF16] = muse_gemm_bf16_avx2,
    },
    .gemm = {
        [MUSE_TYPE_Q8_0] = muse_gemm_q8_0_avx2,
        [MUSE_TYPE_Q4_0] = muse_gemm_q4_0_avx2,
        [MUSE_TYPE_Q4_K] = muse_gemm_q4_K_avx2,
        [MUSE_TYPE_Q5_K] = muse_gemm_q5_K_avx2,
        [MUSE_TYPE_Q6_K] = muse_gemm_q6_K_avx2,
        [MUSE_TYPE_IQ2_XXS] = muse_gemm_iq2_xxs_avx2,
        [MUSE_TYPE_IQ3_XXS] = muse_gemm_iq3_xxs_avx2,
        [MUSE_TYPE_IQ3_S] = muse_gemm_iq3_s_avx2,
        [MUSE_TYPE_IQ4_XS] = muse_gemm_iq4_xs_avx2,
        [MUSE_TYPE_Q5_0] = muse_gemm_q5_0_avx2,
        [MUSE_TYPE_IQ4_NL] = muse_gemm_iq4_nl_avx2,
        [MUSE_TYPE_Q2_K] = muse_gemm_q2_K_avx2,
        [MUSE_TYPE_Q3_K] = muse_gemm_q3_K_avx2,
        [MUSE_TYPE_IQ2_XS] = muse_gemm_iq2_xs_avx2,
        [MUSE_TYPE_IQ2_S] = muse_gemm_iq2_s_avx2,
        [MUSE_TYPE_Q4_1] = muse_gemm_q4_1_avx2,
        [MUSE_TYPE_Q5_1] = muse_gemm_q5_1_avx2,
        [MUSE_TYPE_IQ1_S] = muse_gemm_iq1_s_avx2,
        [MUSE_TYPE_TQ2_0] = muse_gemm_tq2_0_avx2,
        [MUSE_TYPE_F32] = muse_gemm_f32_avx2,
        [MUSE_TYPE_F16] = muse_gemm_f16_avx2,
        [MUSE_TYPE_BF16] = muse_gemm_bf16_avx2,
    },
    .act_layout = {
        [MUSE_TYPE_Q3_K] = MUSE_ACT_Q8K_PERM8,
    },
    .act_prepare = {[MUSE_ACT_Q8K_PERM8] = muse_act_q8K_perm8_avx2},
    /* the types whose forward order is ggml's x86 one (muse_x86_vec_dot != vec_dot_ref) */
    .order = {
        [MUSE_TYPE_F32] = MUSE_ORDER_X86,
        [MUSE_TYPE_F16] = MUSE_ORDER_X86,
        [MUSE_TYPE_BF16] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q8_0] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q4_0] = MUSE_ORDER_X86,
        [MUSE_TYPE_IQ2_XXS] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q5_0] = MUSE_ORDER_X86,
        [MUSE_TYPE_IQ4_NL] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q4_K] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q5_K] = MUSE_ORDER_X86,
        [MUSE_TYPE_Q6_K] = MUSE_ORDER_X86,
    },
    .exact = {
        [MUSE_TYPE_F32] = true,
        [MUSE_TYPE_F16] = true,
        [MUSE_TYPE_BF16] = true,
        [MUSE_TYPE_Q8_0] = true,
        [MUSE_TYPE_Q4_0] = true,
        [MUSE_TYPE_IQ2_XXS] = true,
        [MUSE_TYPE_Q4_K] = true,
        [MUSE_TYPE_Q5_K] = true,
        [MUSE_TYPE_Q6_K] = true,
        [MUSE_TYPE_IQ3_XXS] = true,
        [MUSE_TYPE_IQ3_S] = true,
        [MUSE_TYPE_IQ4_XS] = true,
        [MUSE_TYPE_Q5_0] = true,
        [MUSE_TYPE_IQ4_NL] = true,
        [MUSE_TYPE_Q2_K] = true,
        [MUSE_TYPE_Q3_K] = true,
        [MUSE_TYPE_IQ2_XS] = true,
        [MUSE_TYPE_IQ2_S] = true,
        [MUSE_TYPE_Q4_1] = true,
        [MUSE_TYPE_Q5_1] = true,
        [MUSE_TYPE_IQ1_S] = true,
        [MUSE_TYPE_TQ2_0] = true,
    },
    .attn_kq_f16 = muse_attn_kq_f16_avx2,
    .attn_pv_f16 = muse_attn_pv_f16_avx2,
    .attn_kq_f16_multi = muse_attn_kq_f16_multi_avx2,
    .attn_pv_f16_multi = muse_attn_pv_f16_multi_avx2,
    .attn_probs_f16 = muse_attn_probs_f16_avx2,
    .attn_kq_f32 = muse_attn_kq_f32_avx2,
    .attn_pv_f32 = muse_attn_pv_f32_avx2,
    .attn_kq_q8_0 = muse_attn_kq_q8_0_avx2,
    .attn_pv_q8_0 = muse_attn_pv_q8_0_avx2,
};

const struct muse_kernels *muse_kernels_for(enum muse_cpu_level level) {
    if (level > muse_cpu_level_max()) return NULL;
    switch (level) {
    case MUSE_CPU_LEVEL_SCALAR: return &kernels_scalar;
    case MUSE_CPU_LEVEL_AVX2: return &kernels_avx2;
    /* no AVX-512 kernels yet: an AVX-512 machine runs the AVX2 table */
    case MUSE_CPU_LEVEL_AVX512: return &kernels_avx2;
    default: return NULL;
    }
}

const struct muse_kernels *muse_kernels_active(void) { return muse_kernels_for(muse_cpu_level_active()); }

void muse_kernels_quantize_row(const struct muse_kernels *k, enum muse_type act_type, const float *x, void *y,
                               int64_t n) {
    if (act_type == MUSE_TYPE_F32) {
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    }
    muse_from_float_fn fn = k && k->quantize[act_type] ? k->quantize[act_type] : muse_type_traits[act_type].from_float;
    fn(x, y, n);
}

void muse_kernels_prepare_act(const struct muse_kernels *k, enum muse_type wtype, void *q, int64_t n) {
    if (!k || !k->act_layout[wtype]) return;
    k->act_prepare[k->act_layout[wtype]](q, n);
}
