/* kernels.c - the per-level kernel tables (explicit, one row per kernel) and their selection. */
#include "kernels/kernels.h"

#include <string.h>

#include "kernels/kernels_isa.h"

static const struct muse_kernels kernels_scalar = {
    .level = MUSE_CPU_LEVEL_SCALAR,
    /* no entries: the scalar level is the reference path */
};

/* The weight types with an AVX2 matrix kernel (muse_gemm_<t>_avx2; one function serves both the
 * 1-row gemv and the N-row gemm slots). */
#define AVX2_GEMM_TYPES(X) \
    X(Q8_0, q8_0) X(Q4_0, q4_0) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K) X(IQ2_XXS, iq2_xxs) \
    X(IQ3_XXS, iq3_xxs) X(IQ3_S, iq3_s) X(IQ4_XS, iq4_xs) X(Q5_0, q5_0) X(IQ4_NL, iq4_nl) X(Q2_K, q2_K) \
    X(Q3_K, q3_K) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(Q4_1, q4_1) X(Q5_1, q5_1) X(IQ1_S, iq1_s) \
    X(TQ2_0, tq2_0) X(IQ1_M, iq1_m) X(MXFP4, mxfp4) X(TQ1_0, tq1_0) X(F32, f32) X(F16, f16) \
    X(BF16, bf16)
#define AVX2_GEMM_ENTRY(T, t) [MUSE_TYPE_##T] = muse_gemm_##t##_avx2,
#define AVX2_EXACT_ENTRY(T, t) [MUSE_TYPE_##T] = true,

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
    .gemv = {AVX2_GEMM_TYPES(AVX2_GEMM_ENTRY)},
    .gemm = {AVX2_GEMM_TYPES(AVX2_GEMM_ENTRY)},
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
    /* every AVX2 matrix kernel reproduces its order bit for bit */
    .exact = {AVX2_GEMM_TYPES(AVX2_EXACT_ENTRY)},
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
