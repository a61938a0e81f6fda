/* kernels.c - the per-level kernel tables (explicit, one row per kernel) and their selection. */
#include "kernels/kernels.h"

#include <string.h>

#include "kernels/x86/kernels_isa.h"
#include "kernels/x86_numerics.h"

static const struct muse_kernels kernels_scalar = {
    .level = MUSE_CPU_LEVEL_SCALAR,
    /* no entries: the scalar level is the reference path */
};

#define GEMM_ENTRY_AVX2(T, t) [MUSE_TYPE_##T] = muse_gemm_##t##_avx2,
#define GEMM_ENTRY_AVX512(T, t) [MUSE_TYPE_##T] = muse_gemm_##t##_avx512,
#define EXACT_ENTRY(T, t) [MUSE_TYPE_##T] = true,
#define ORDER_ENTRY(T, t) [MUSE_TYPE_##T] = MUSE_ORDER_X86,

/* The x86 tables: the AVX2 one, and the AVX-512 one with the VNNI builds of the same matrix
 * kernels (quantizers and attention helpers are the AVX2 ones). */
#define X86_KERNELS(LEVEL, GEMM_ENTRY, ACT_PERM8)                                      \
    {                                                                                  \
        .level = LEVEL,                                                                \
        .quantize = {                                                                  \
            [MUSE_TYPE_Q8_0] = muse_quantize_q8_0_avx2,                                \
            [MUSE_TYPE_Q8_K] = muse_quantize_q8_K_avx2,                                \
            [MUSE_TYPE_F16] = muse_quantize_f16_avx2,                                  \
            [MUSE_TYPE_BF16] = muse_quantize_bf16_avx2,                                \
        },                                                                             \
        .quantize_x86 = {                                                              \
            [MUSE_TYPE_Q8_0] = muse_quantize_q8_0_x86_avx2,                            \
        },                                                                             \
        .gemv = {MUSE_X86_GEMM_TYPES(GEMM_ENTRY)},                                     \
        .gemm = {MUSE_X86_GEMM_TYPES(GEMM_ENTRY)},                                     \
        .act_layout = {                                                                \
            [MUSE_TYPE_Q3_K] = MUSE_ACT_Q8K_PERM8,                                     \
        },                                                                             \
        .act_prepare = {[MUSE_ACT_Q8K_PERM8] = ACT_PERM8},                             \
        /* the types whose forward order is ggml's x86 one (x86_numerics.h) */         \
        .order = {MUSE_X86_ORDER_TYPES(ORDER_ENTRY)},                                  \
        /* every x86 matrix kernel reproduces its order bit for bit */                 \
        .exact = {MUSE_X86_GEMM_TYPES(EXACT_ENTRY)},                                   \
        .attn_kq_f16 = muse_attn_kq_f16_avx2,                                          \
        .attn_pv_f16 = muse_attn_pv_f16_avx2,                                          \
        .attn_kq_f16_multi = muse_attn_kq_f16_multi_avx2,                              \
        .attn_pv_f16_multi = muse_attn_pv_f16_multi_avx2,                              \
        .attn_probs_f16 = muse_attn_probs_f16_avx2,                                    \
        .attn_kq_f32 = muse_attn_kq_f32_avx2,                                          \
        .attn_pv_f32 = muse_attn_pv_f32_avx2,                                          \
        .attn_kq_q8_0 = muse_attn_kq_q8_0_avx2,                                        \
        .attn_pv_q8_0 = muse_attn_pv_q8_0_avx2,                                        \
    }

static const struct muse_kernels kernels_avx2 =
    X86_KERNELS(MUSE_CPU_LEVEL_AVX2, GEMM_ENTRY_AVX2, muse_act_q8K_perm8_avx2);
static const struct muse_kernels kernels_avx512 =
    X86_KERNELS(MUSE_CPU_LEVEL_AVX512, GEMM_ENTRY_AVX512, muse_act_q8K_perm8_avx512);

const struct muse_kernels *muse_kernels_for(enum muse_cpu_level level) {
    if (level > muse_cpu_level_max()) return NULL;
    switch (level) {
    case MUSE_CPU_LEVEL_SCALAR: return &kernels_scalar;
    case MUSE_CPU_LEVEL_AVX2: return &kernels_avx2;
    case MUSE_CPU_LEVEL_AVX512: return &kernels_avx512;
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
