/* kernels.c - the per-level kernel tables (explicit, one row per kernel) and their selection. */
#include "kernels/kernels.h"

#include <string.h>

#include "kernels/x86/kernels_isa.h"
#include "kernels/x86_numerics.h"

static const struct muse_kernels kernels_scalar = {
    .level = MUSE_CPU_LEVEL_SCALAR,
    .exact_mode = true,
    /* no entries: the scalar level is the reference path */
};

#define GEMM_ENTRY_AVX2(T, t) [MUSE_TYPE_##T] = muse_gemm_##t##_avx2,
#define GEMM_ENTRY_AVX512(T, t) [MUSE_TYPE_##T] = muse_gemm_##t##_avx512,
#define EXACT_ENTRY(T, t) [MUSE_TYPE_##T] = true,
#define ORDER_ENTRY(T, t) [MUSE_TYPE_##T] = MUSE_ORDER_X86,

#define TILE_ENTRY_AVX2(T, t, ...) [MUSE_TYPE_##T] = muse_tile_gemm_##t##_avx2,
#define TILE_ENTRY_AVX512(T, t, ...) [MUSE_TYPE_##T] = muse_tile_gemm_##t##_avx512,
#define TILE_BYTES_AVX2(T, t, ...) [MUSE_TYPE_##T] = muse_tile_panel_bytes_##t##_avx2,
#define TILE_BYTES_AVX512(T, t, ...) [MUSE_TYPE_##T] = muse_tile_panel_bytes_##t##_avx512,
#define TILE_ENTRY_AMX(T, t, ...) [MUSE_TYPE_##T] = muse_tile_gemm_##t##_amx,
#define TILE_BYTES_AMX(T, t, ...) [MUSE_TYPE_##T] = muse_tile_panel_bytes_##t##_amx,
#define TILE_NONE(T, t, ...)
#define R8_ENTRY_AVX2(T, t) [MUSE_TYPE_##T] = muse_gemm_r8_##t##_avx2,
/* The AVX-512 builds of the interleaved decode run two groups of 8 rows per zmm (gemm_r8.inc, the *_x2
 * passes); Q4_K's is in the table again since they exist (its 256-bit pass had decoded one row 20%
 * slower than the 512-bit row kernel: docs/perf.md "Two groups per register"). */
#define R8_ENTRY_AVX512(T, t) [MUSE_TYPE_##T] = muse_gemm_r8_##t##_avx512,
#define R8_NONE(T, t)

/* Activation rows from which the tile GEMM replaces the gemm kernels (docs/perf.md). */
#define TILE_MIN_ACT 32

/* The types whose AVX-512 tile GEMM (weights packed per call) beats the exact gemm kernels from
 * fewer rows, and from how many: bench/smallbatch_lab on a 2048 x 5632 matrix from memory, one
 * thread (docs/perf.md "Several sequences in one forward"). Not set at the AMX level (its
 * packing was never timed) nor at the AVX2 level (its packing is another). IQ4_XS from 16: below
 * that its rows interleaved by 8 (repack.h) beat the tile GEMM (smallbatch_lab's r8 path, 8 rows:
 * 1.08 ms against 1.71 on an Intel AVX-512 Xeon). */
#define TILE_SMALL_AVX512 {[MUSE_TYPE_IQ2_XXS] = 8, [MUSE_TYPE_IQ4_XS] = 16, [MUSE_TYPE_Q8_0] = 16, \
                           [MUSE_TYPE_Q4_K] = 16, [MUSE_TYPE_Q6_K] = 16}
#define TILE_SMALL_NONE {0}

/* The x86 tables: the AVX2 one, and the AVX-512 one with the VNNI builds of the same matrix
 * kernels (quantizers and attention helpers are the AVX2 ones; flash attention has an AVX-512 build
 * of its own, FLASH). TILE_*: the quant types' tile GEMM, FLOAT_*: the float types'. EXACT: the
 * tables without the reassociating kernels (tile GEMM), bit-identical to the reference (MUSE_CPU=exact). */
#define X86_KERNELS(LEVEL, GEMM_ENTRY, TILE_ENTRY, TILE_BYTES, FLOAT_ENTRY, FLOAT_BYTES, FLASH, EXACT, SMALL, R8) \
    {                                                                                  \
        .level = LEVEL,                                                                \
        .exact_mode = EXACT,                                                           \
        .tile_gemm = {MUSE_TILE_TYPES(TILE_ENTRY) MUSE_TILE_FLOAT_TYPES(FLOAT_ENTRY)},  \
        .tile_bytes = {MUSE_TILE_TYPES(TILE_BYTES) MUSE_TILE_FLOAT_TYPES(FLOAT_BYTES)}, \
        .tile_min_act = TILE_MIN_ACT,                                                  \
        .gemm_r8 = {MUSE_X86_R8_TYPES(R8)},                                            \
        .tile_min_small = SMALL,                                                       \
        .widen = {[MUSE_TYPE_F16] = muse_widen_f16_avx2, [MUSE_TYPE_BF16] = muse_widen_bf16_avx2}, \
        .attn_flash_f16 = EXACT ? NULL : muse_attn_flash_f16_##FLASH,                  \
        .attn_flash_f32 = EXACT ? NULL : muse_attn_flash_f32_##FLASH,                  \
        .attn_flash_q8_0 = EXACT ? NULL : muse_attn_flash_q8_0_##FLASH,                \
        .attn_flash_scratch = EXACT ? NULL : muse_attn_flash_scratch_##FLASH,          \
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
        .win_attn_rows = muse_win_attn_rows_avx2,                                      \
    }

static const struct muse_kernels kernels_avx2 = X86_KERNELS(MUSE_CPU_LEVEL_AVX2, GEMM_ENTRY_AVX2, TILE_ENTRY_AVX2,
                                                           TILE_BYTES_AVX2, TILE_ENTRY_AVX2, TILE_BYTES_AVX2, avx2,
                                                           false, TILE_SMALL_NONE, R8_ENTRY_AVX2);
static const struct muse_kernels kernels_avx512 = X86_KERNELS(MUSE_CPU_LEVEL_AVX512, GEMM_ENTRY_AVX512, TILE_ENTRY_AVX512,
                                                             TILE_BYTES_AVX512, TILE_ENTRY_AVX512, TILE_BYTES_AVX512,
                                                             avx512, false, TILE_SMALL_AVX512, R8_ENTRY_AVX512);
/* AMX: the AVX-512 table with the quant types' tile GEMM on the tile unit (the float types keep
 * the AVX-512 one: AMX-INT8 has no float product) */
static const struct muse_kernels kernels_amx = X86_KERNELS(MUSE_CPU_LEVEL_AMX, GEMM_ENTRY_AVX512, TILE_ENTRY_AMX,
                                                          TILE_BYTES_AMX, TILE_ENTRY_AVX512, TILE_BYTES_AVX512,
                                                          avx512, false, TILE_SMALL_NONE, R8_ENTRY_AVX512);
static const struct muse_kernels kernels_avx2_exact = X86_KERNELS(MUSE_CPU_LEVEL_AVX2, GEMM_ENTRY_AVX2, TILE_NONE, TILE_NONE,
                                                                 TILE_NONE, TILE_NONE, avx2, true,
                                                                 TILE_SMALL_NONE, R8_NONE);
static const struct muse_kernels kernels_avx512_exact = X86_KERNELS(MUSE_CPU_LEVEL_AVX512, GEMM_ENTRY_AVX512, TILE_NONE,
                                                                   TILE_NONE, TILE_NONE, TILE_NONE, avx512, true,
                                                                   TILE_SMALL_NONE, R8_NONE);
static const struct muse_kernels kernels_amx_exact = X86_KERNELS(MUSE_CPU_LEVEL_AMX, GEMM_ENTRY_AVX512, TILE_NONE,
                                                                TILE_NONE, TILE_NONE, TILE_NONE, avx512, true,
                                                                TILE_SMALL_NONE, R8_NONE);

const struct muse_kernels *muse_kernels_for(enum muse_cpu_level level) {
    if (level > muse_cpu_level_max()) return NULL;
    switch (level) {
    case MUSE_CPU_LEVEL_SCALAR: return &kernels_scalar;
    case MUSE_CPU_LEVEL_AVX2: return &kernels_avx2;
    case MUSE_CPU_LEVEL_AVX512: return &kernels_avx512;
    case MUSE_CPU_LEVEL_AMX: return &kernels_amx;
    default: return NULL;
    }
}

const struct muse_kernels *muse_kernels_exact_for(enum muse_cpu_level level) {
    if (level > muse_cpu_level_max()) return NULL;
    switch (level) {
    case MUSE_CPU_LEVEL_SCALAR: return &kernels_scalar;
    case MUSE_CPU_LEVEL_AVX2: return &kernels_avx2_exact;
    case MUSE_CPU_LEVEL_AVX512: return &kernels_avx512_exact;
    case MUSE_CPU_LEVEL_AMX: return &kernels_amx_exact;
    default: return NULL;
    }
}

const struct muse_kernels *muse_kernels_active(void) {
    return muse_cpu_exact_active() ? muse_kernels_exact_for(muse_cpu_level_active())
                                   : muse_kernels_for(muse_cpu_level_active());
}

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
    if (!k) return;
    const unsigned l = k->act_layout[wtype];
    if (l != MUSE_ACT_REF && l < MUSE_ACT_LAYOUT_COUNT && k->act_prepare[l]) k->act_prepare[l](q, n);
}
