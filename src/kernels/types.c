/*
 * types.c - the type-traits table (kernels/types.h) and the plain-type numerics.
 *
 * Decisions for the plain types:
 *   F32  to_float = copy, from_float = copy, dot with F32.
 *   F16  to_float = exact h2f, from_float = round to nearest even (spec 2.3), dot with F16.
 *   BF16 to_float = bits << 16, from_float = RNE with quiet NaNs (spec 2.3), dot with BF16.
 *   F64  to_float = (float) conversion (round to nearest; ggml has none): lets tools print and
 *        compare F64 tensors. No from_float, no dot (never a matmul weight).
 *   I8..I64 have no to_float (they hold indices, not values): every field NULL.
 * The F32/F16/BF16 dots follow ggml's scalar (non-SIMD) ggml_vec_dot_{f32,f16,bf16}: each
 * product is formed in f32 and the products are summed in double, rounded to f32 at the end.
 * ggml's SIMD builds instead sum in f32 vector lanes with FMA, so on x86 llama.cpp differs from
 * this reference by a few ulps of the sum; the SIMD kernels may choose either order.
 */
#include "kernels/types.h"

#include <string.h>

#include "core/fp16.h"
#include "kernels/quant_ref.h"

// ---- plain types ----

void muse_to_float_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void muse_from_float_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void muse_to_float_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = muse_fp16_to_fp32(x[i]);
}

void muse_from_float_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = muse_fp32_to_fp16(x[i]);
}

void muse_to_float_bf16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = muse_bf16_to_fp32(x[i]);
}

void muse_from_float_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = muse_fp32_to_bf16(x[i]);
}

void muse_to_float_f64(const void *vx, float *y, int64_t n) {
    const double *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
}

void muse_vec_dot_f32_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void muse_vec_dot_f16_f16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(muse_fp16_to_fp32(x[i]) * muse_fp16_to_fp32(y[i]));
    *s = (float)sum;
}

void muse_vec_dot_bf16_bf16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(muse_bf16_to_fp32(x[i]) * muse_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

// ---- the table ----

#define T(id, tf, ff, vt, vd) [id] = {.to_float = tf, .from_float = ff, .vec_dot_type = vt, .vec_dot_ref = vd}

const struct muse_type_traits muse_type_traits[MUSE_TYPE_COUNT] = {
    T(MUSE_TYPE_F32, muse_to_float_f32, muse_from_float_f32, MUSE_TYPE_F32, muse_vec_dot_f32_f32_ref),
    T(MUSE_TYPE_F16, muse_to_float_f16, muse_from_float_f16, MUSE_TYPE_F16, muse_vec_dot_f16_f16_ref),
    T(MUSE_TYPE_BF16, muse_to_float_bf16, muse_from_float_bf16, MUSE_TYPE_BF16, muse_vec_dot_bf16_bf16_ref),
    T(MUSE_TYPE_F64, muse_to_float_f64, NULL, MUSE_TYPE_F64, NULL),
    T(MUSE_TYPE_I8, NULL, NULL, MUSE_TYPE_I8, NULL),
    T(MUSE_TYPE_I16, NULL, NULL, MUSE_TYPE_I16, NULL),
    T(MUSE_TYPE_I32, NULL, NULL, MUSE_TYPE_I32, NULL),
    T(MUSE_TYPE_I64, NULL, NULL, MUSE_TYPE_I64, NULL),

    T(MUSE_TYPE_Q4_0, muse_to_float_q4_0, muse_from_float_q4_0, MUSE_TYPE_Q8_0, muse_vec_dot_q4_0_q8_0_ref),
    T(MUSE_TYPE_Q4_1, muse_to_float_q4_1, muse_from_float_q4_1, MUSE_TYPE_Q8_1, muse_vec_dot_q4_1_q8_1_ref),
    T(MUSE_TYPE_Q5_0, muse_to_float_q5_0, muse_from_float_q5_0, MUSE_TYPE_Q8_0, muse_vec_dot_q5_0_q8_0_ref),
    T(MUSE_TYPE_Q5_1, muse_to_float_q5_1, muse_from_float_q5_1, MUSE_TYPE_Q8_1, muse_vec_dot_q5_1_q8_1_ref),
    T(MUSE_TYPE_Q8_0, muse_to_float_q8_0, muse_from_float_q8_0, MUSE_TYPE_Q8_0, muse_vec_dot_q8_0_q8_0_ref),
    T(MUSE_TYPE_Q8_1, muse_to_float_q8_1, muse_from_float_q8_1, MUSE_TYPE_Q8_1, muse_vec_dot_q8_1_q8_1_ref),
    T(MUSE_TYPE_IQ4_NL, muse_to_float_iq4_nl, NULL, MUSE_TYPE_Q8_0, muse_vec_dot_iq4_nl_q8_0_ref),
    T(MUSE_TYPE_MXFP4, muse_to_float_mxfp4, muse_from_float_mxfp4, MUSE_TYPE_Q8_0, muse_vec_dot_mxfp4_q8_0_ref),
    T(MUSE_TYPE_NVFP4, muse_to_float_nvfp4, muse_from_float_nvfp4, MUSE_TYPE_Q8_0, muse_vec_dot_nvfp4_q8_0_ref),
    T(MUSE_TYPE_Q1_0, muse_to_float_q1_0, muse_from_float_q1_0, MUSE_TYPE_Q8_0, muse_vec_dot_q1_0_q8_0_ref),

    T(MUSE_TYPE_Q2_K, muse_to_float_q2_K, muse_from_float_q2_K, MUSE_TYPE_Q8_K, muse_vec_dot_q2_K_q8_K_ref),
    T(MUSE_TYPE_Q3_K, muse_to_float_q3_K, muse_from_float_q3_K, MUSE_TYPE_Q8_K, muse_vec_dot_q3_K_q8_K_ref),
    T(MUSE_TYPE_Q4_K, muse_to_float_q4_K, muse_from_float_q4_K, MUSE_TYPE_Q8_K, muse_vec_dot_q4_K_q8_K_ref),
    T(MUSE_TYPE_Q5_K, muse_to_float_q5_K, muse_from_float_q5_K, MUSE_TYPE_Q8_K, muse_vec_dot_q5_K_q8_K_ref),
    T(MUSE_TYPE_Q6_K, muse_to_float_q6_K, muse_from_float_q6_K, MUSE_TYPE_Q8_K, muse_vec_dot_q6_K_q8_K_ref),
    T(MUSE_TYPE_Q8_K, muse_to_float_q8_K, muse_from_float_q8_K, MUSE_TYPE_Q8_K, NULL),

    T(MUSE_TYPE_IQ2_XXS, muse_to_float_iq2_xxs, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq2_xxs_q8_K_ref),
    T(MUSE_TYPE_IQ2_XS, muse_to_float_iq2_xs, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq2_xs_q8_K_ref),
    T(MUSE_TYPE_IQ2_S, muse_to_float_iq2_s, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq2_s_q8_K_ref),
    T(MUSE_TYPE_IQ3_XXS, muse_to_float_iq3_xxs, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq3_xxs_q8_K_ref),
    T(MUSE_TYPE_IQ3_S, muse_to_float_iq3_s, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq3_s_q8_K_ref),
    T(MUSE_TYPE_IQ1_S, muse_to_float_iq1_s, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq1_s_q8_K_ref),
    T(MUSE_TYPE_IQ1_M, muse_to_float_iq1_m, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq1_m_q8_K_ref),
    T(MUSE_TYPE_IQ4_XS, muse_to_float_iq4_xs, NULL, MUSE_TYPE_Q8_K, muse_vec_dot_iq4_xs_q8_K_ref),

    T(MUSE_TYPE_TQ1_0, muse_to_float_tq1_0, muse_from_float_tq1_0, MUSE_TYPE_Q8_K, muse_vec_dot_tq1_0_q8_K_ref),
    T(MUSE_TYPE_TQ2_0, muse_to_float_tq2_0, muse_from_float_tq2_0, MUSE_TYPE_Q8_K, muse_vec_dot_tq2_0_q8_K_ref),
};
