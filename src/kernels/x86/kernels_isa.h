/*
 * kernels_isa.h - prototypes of the per-ISA x86 kernels that kernels.c puts into the tables of
 * kernels.h. Internal to src/kernels. Each kernel follows the muse_gemm_fn / muse_from_float_fn
 * contracts of kernels.h. The files of src/kernels/x86 (a file named *_avx2.c / *_avx512.c /
 * *_amx.c is compiled with that level's flags):
 *   quantize_avx2.c        activation quantizers (bit-identical to the reference ones), F16/BF16
 *                          rows widened to f32
 *   attn_avx2.c            attention over an F16, F32 or Q8_0 KV cache
 *   win_attn_avx2.c        window attention (the vision tower's; kernels/win_attn.c is its oracle)
 *   attn_flash.inc         flash attention for batches of queries, built by attn_flash_avx2.c
 *                          and attn_flash_avx512.c (16-lane loops, the same bits)
 *   gemm_<family>.inc      the matrix kernels of a quant family, one ISA-neutral body (its functions
 *                          named through MUSE_ISA_NAME), built by gemm_<family>_avx2.c and
 *                          gemm_<family>_avx512.c (see simd_avx2.h); the families follow the
 *                          unpacking machinery, as ik_llama.cpp's iqk_gemm_<family> do:
 *     gemm_legacy     Q8_0, Q4_0, Q5_0, IQ4_NL (Q8_0 activations), Q4_1, Q5_1 (Q8_1 activations)
 *     gemm_kquants    Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (Q8_K activations)
 *     gemm_iquants    IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (Q8_K activations)
 *     gemm_1bit       IQ1_S, IQ1_M, TQ1_0, TQ2_0 (Q8_K activations), Q1_0 (Q8_0 activations)
 *     gemm_fp4        MXFP4, NVFP4 (Q8_0 activations)
 *     gemm_floats     F32, F16, BF16 (activations of the same type)
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

void muse_widen_f16_avx2(const void *x, float *y, int64_t n);
void muse_widen_bf16_avx2(const void *x, float *y, int64_t n);

// ---- AVX-512 (F/BW/VL/DQ + VNNI): the gemm_<family>_avx512.c builds, below ----


/* The weight types with an x86 matrix kernel, muse_gemm_<t>_avx2 and its AVX-512 twin
 * muse_gemm_<t>_avx512 (one function serves both the 1-row gemv and the N-row gemm slots), by
 * family (the gemm_<family>.inc that defines them). */
#define MUSE_X86_GEMM_TYPES(X)                                                                         \
    /* gemm_legacy */ X(Q8_0, q8_0) X(Q4_0, q4_0) X(Q5_0, q5_0) X(IQ4_NL, iq4_nl) X(Q4_1, q4_1)        \
    X(Q5_1, q5_1)                                                                                      \
    /* gemm_kquants */ X(Q2_K, q2_K) X(Q3_K, q3_K) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K)           \
    X(IQ4_XS, iq4_xs)                                                                                  \
    /* gemm_iquants */ X(IQ2_XXS, iq2_xxs) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(IQ3_XXS, iq3_xxs)       \
    X(IQ3_S, iq3_s)                                                                                    \
    /* gemm_1bit */ X(IQ1_S, iq1_s) X(IQ1_M, iq1_m) X(TQ1_0, tq1_0) X(TQ2_0, tq2_0) X(Q1_0, q1_0)      \
    /* gemm_fp4 */ X(MXFP4, mxfp4) X(NVFP4, nvfp4)                                                     \
    /* gemm_floats */ X(F32, f32) X(F16, f16) X(BF16, bf16)
#define MUSE_DECLARE_X86_GEMM(T, t) MUSE_DECLARE_GEMM(muse_gemm_##t##_avx2); MUSE_DECLARE_GEMM(muse_gemm_##t##_avx512);
MUSE_X86_GEMM_TYPES(MUSE_DECLARE_X86_GEMM)

/* The decode of rows interleaved by 8 (gemm_r8.inc, repack.h): muse_gemm_r8_<t>_<isa>
 * (muse_gemm_r8_fn) for t = q4_0, iq4_nl, q8_0, iq4_xs, q4_K. */
#define MUSE_X86_R8_TYPES(X) X(Q4_0, q4_0) X(IQ4_NL, iq4_nl) X(Q8_0, q8_0) X(IQ4_XS, iq4_xs) X(Q4_K, q4_K)
#define MUSE_DECLARE_R8(T, t)                                                                                \
    void muse_gemm_r8_##t##_avx2(int64_t n, const void *w8, int64_t n_groups, const void *act, size_t as,    \
                                 int n_act, float *out, int64_t os);                                         \
    void muse_gemm_r8_##t##_avx512(int64_t n, const void *w8, int64_t n_groups, const void *act, size_t as,  \
                                   int n_act, float *out, int64_t os);
MUSE_X86_R8_TYPES(MUSE_DECLARE_R8)

/* The tile GEMM (gemm_tiles_avx2.c, gemm_tiles_avx512.c) for the types of MUSE_TILE_TYPES
 * (tile_decode.h): muse_tile_gemm_<t>_<isa> (muse_tile_gemm_fn) and muse_tile_panel_bytes_<t>_<isa>. */
#define MUSE_DECLARE_TILE(T, t, ...)                                                                          \
    bool muse_tile_gemm_##t##_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp,       \
                                   size_t xps, int n_act, float *out, int64_t os, void *scratch, size_t sb);  \
    bool muse_tile_gemm_##t##_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp,     \
                                     size_t xps, int n_act, float *out, int64_t os, void *scratch, size_t sb); \
    size_t muse_tile_panel_bytes_##t##_avx2(int64_t n);                                                       \
    size_t muse_tile_panel_bytes_##t##_avx512(int64_t n);
/* The AMX level's tile GEMM (gemm_tiles_amx.c) for the types of MUSE_TILE_TYPES. */
#define MUSE_DECLARE_TILE_AMX(T, t, ...)                                                                      \
    bool muse_tile_gemm_##t##_amx(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp,        \
                                  size_t xps, int n_act, float *out, int64_t os, void *scratch, size_t sb);   \
    size_t muse_tile_panel_bytes_##t##_amx(int64_t n);

/* The float weight types with a tile GEMM (gemm_floats.inc; f32 activation rows in the tile layout). */
#define MUSE_TILE_FLOAT_TYPES(X) X(F32, f32) X(F16, f16) X(BF16, bf16)
MUSE_TILE_FLOAT_TYPES(MUSE_DECLARE_TILE)

/*
 * The types the tile GEMM handles, with their packing (struct tile_cfg in tile_decode.h):
 * X(TYPE, name, fbe, g, o, cmax, mins, s1). cmax is the largest code v + o; s1 = 1 when every
 * group scale is 1 (none stored). The reference's constant factors (IQ2: 0.125, IQ3_XXS: 0.25,
 * IQ1_S/IQ1_M: 0.125 with the delta folded into v = 8 g + delta) are folded into d (powers of two: exact).
 */
#define MUSE_TILE_TYPES(X)                                                                           \
    X(Q8_0, q8_0, 32, 32, 128, 255, 0, 1) X(Q4_0, q4_0, 32, 32, 8, 15, 0, 1)                          \
    X(Q5_0, q5_0, 32, 32, 16, 31, 0, 1) X(IQ4_NL, iq4_nl, 32, 32, 128, 255, 0, 1)                     \
    X(MXFP4, mxfp4, 32, 32, 12, 24, 0, 1) X(Q4_K, q4_K, 256, 32, 0, 15, 1, 0)                         \
    X(Q5_K, q5_K, 256, 32, 0, 31, 1, 0) X(Q6_K, q6_K, 256, 16, 32, 63, 0, 0)                          \
    X(Q2_K, q2_K, 256, 16, 0, 3, 1, 0) X(Q3_K, q3_K, 256, 16, 4, 7, 0, 0)                             \
    X(IQ4_XS, iq4_xs, 256, 32, 128, 255, 0, 0) X(TQ2_0, tq2_0, 256, 32, 1, 3, 0, 1)                   \
    X(TQ1_0, tq1_0, 256, 32, 1, 2, 0, 1) X(IQ2_XXS, iq2_xxs, 256, 32, 43, 86, 0, 0)                   \
    X(IQ2_XS, iq2_xs, 256, 16, 43, 86, 0, 0) X(IQ2_S, iq2_s, 256, 16, 43, 86, 0, 0)                   \
    X(IQ3_XXS, iq3_xxs, 256, 32, 62, 124, 0, 0) X(IQ3_S, iq3_s, 256, 32, 15, 30, 0, 0)                \
    X(IQ1_S, iq1_s, 256, 32, 9, 18, 0, 0) X(IQ1_M, iq1_m, 256, 16, 9, 18, 0, 0)                      \
    X(Q4_1, q4_1, 32, 32, 0, 15, 1, 1) X(Q5_1, q5_1, 32, 32, 0, 31, 1, 1)                             \
    X(Q1_0, q1_0, 32, 32, 1, 2, 0, 1) X(NVFP4, nvfp4, 32, 16, 12, 24, 0, 1)
/* Float blocks per weight block (tile_cfg.sub): Q1_0's 128-element block spans four, NVFP4's 64 two. */
#define TILE_SUB(T) (MUSE_TYPE_##T == MUSE_TYPE_Q1_0 ? 4 : MUSE_TYPE_##T == MUSE_TYPE_NVFP4 ? 2 : 1)
/* Float group scales (tile_cfg.fgs): NVFP4's UE4M3 scale per 16 elements. */
#define TILE_FGS(T) (MUSE_TYPE_##T == MUSE_TYPE_NVFP4)
MUSE_TILE_TYPES(MUSE_DECLARE_TILE)
MUSE_TILE_TYPES(MUSE_DECLARE_TILE_AMX)

struct muse_attn_flash;
void muse_attn_flash_f16_avx2(const struct muse_attn_flash *f, void *scratch);
size_t muse_attn_flash_scratch_avx2(int32_t hd, int32_t max_rows, uint32_t max_cells);
void muse_attn_flash_f16_avx512(const struct muse_attn_flash *f, void *scratch);
void muse_attn_flash_f32_avx2(const struct muse_attn_flash *f, void *scratch);
void muse_attn_flash_f32_avx512(const struct muse_attn_flash *f, void *scratch);
void muse_attn_flash_q8_0_avx2(const struct muse_attn_flash *f, void *scratch);
void muse_attn_flash_q8_0_avx512(const struct muse_attn_flash *f, void *scratch);
size_t muse_attn_flash_scratch_avx512(int32_t hd, int32_t max_rows, uint32_t max_cells);

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
struct muse_win_attn;
void muse_win_attn_rows_avx2(const struct muse_win_attn *a, int32_t i0, int32_t i1, float *scratch);
/* ggml's vector exp on 8 lanes (win_attn_avx2.c's, exposed for its test): y[l] = muse_x86_expf(x[l]) bit for bit. */
void muse_expf8_avx2(const float *x, float *y);
void muse_attn_pv_q8_0_avx2(int32_t hd, int32_t n_keys, const void *v, size_t v_stride, const float *p,
                            int32_t lane0, float *lanes);
