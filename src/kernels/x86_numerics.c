/* x86_numerics.c - see x86_numerics.h: the plain build of x86_numerics_body.h and the dispatch
 * to the FMA build (same bits, faster) where the CPU has FMA. */
#include "kernels/x86_numerics.h"

#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"

#define X86N(name) name##_generic
#include "kernels/x86_numerics_body.h"
#undef X86N

/* The FMA build (x86_numerics_avx2.c); called only where the CPU has FMA. */
float muse_x86_expf_fma(float x);
float muse_x86_silu_fma(float x);
float muse_x86_hsum8_fma(const float l[8]);
float muse_x86_dot_tinyblas_fma(int64_t n, const float *x, const float *y);
float muse_x86_dot_vec_fma(int64_t n, const float *x, const float *y, int tail_double);
double muse_x86_softmax_exp_fma(float *x, int32_t n, int32_t pos0, float max);
void muse_x86_fma_lanes_fma(float *lanes, const float *row, float p, int32_t lane, int32_t n);
/* muse_x86_vd_<t>_fma for each type of MUSE_X86_ORDER_TYPES */
#define DECLARE_VD_FMA(T, t) void muse_x86_vd_##t##_fma(int64_t n, float *s, const void *vx, const void *vy);
MUSE_X86_ORDER_TYPES(DECLARE_VD_FMA)
#undef DECLARE_VD_FMA
/* the AVX2 single-row dots (same bits as the generic / FMA builds, faster) */
void muse_x86_vd_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq2_xxs_avx2(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_f16_row_avx2(const uint16_t *x, float *y, int64_t n);

static int have_fma(void) { return muse_cpu_features()->fma; }
static int have_avx2(void) { return muse_cpu_level_max() >= MUSE_CPU_LEVEL_AVX2; }

float muse_x86_expf(float x) { return have_fma() ? muse_x86_expf_fma(x) : muse_x86_expf_generic(x); }
float muse_x86_silu(float x) { return have_fma() ? muse_x86_silu_fma(x) : muse_x86_silu_generic(x); }
void muse_x86_swiglu_avx2(float *y, const float *g, const float *u, int64_t n);
void muse_x86_swiglu(float *y, const float *g, const float *u, int64_t n) {
    if (have_avx2()) {
        muse_x86_swiglu_avx2(y, g, u, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = muse_x86_silu(g[i]) * u[i];
}
int32_t muse_rms_sums_avx2(const float *x, int64_t stride, int32_t n_rows, int64_t n, double *sums);
void muse_rms_sums(const float *x, int64_t stride, int32_t n_rows, int64_t n, double *sums) {
    const int32_t done = have_avx2() ? muse_rms_sums_avx2(x, stride, n_rows, n, sums) : 0;
    for (int32_t r = done; r < n_rows; r++) {
        const float *v = x + (size_t)r * (size_t)stride;
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)(v[i] * v[i]);
        sums[r] = sum;
    }
}
float muse_x86_hsum8(const float l[8]) { return muse_x86_hsum8_generic(l); }
float muse_x86_dot_tinyblas(int64_t n, const float *x, const float *y) {
    return have_fma() ? muse_x86_dot_tinyblas_fma(n, x, y) : muse_x86_dot_tinyblas_generic(n, x, y);
}
float muse_x86_dot_vec(int64_t n, const float *x, const float *y, int tail_double) {
    return have_fma() ? muse_x86_dot_vec_fma(n, x, y, tail_double) : muse_x86_dot_vec_generic(n, x, y, tail_double);
}
double muse_x86_softmax_exp(float *x, int32_t n, int32_t pos0, float max) {
    return have_fma() ? muse_x86_softmax_exp_fma(x, n, pos0, max) : muse_x86_softmax_exp_generic(x, n, pos0, max);
}
void muse_x86_fma_lanes(float *lanes, const float *row, float p, int32_t lane, int32_t n) {
    if (have_fma()) muse_x86_fma_lanes_fma(lanes, row, p, lane, n);
    else muse_x86_fma_lanes_generic(lanes, row, p, lane, n);
}

void muse_x86_kv_to_float(enum muse_type type, const void *x, float *y, int64_t n) {
    if (type == MUSE_TYPE_F16 && have_avx2()) muse_x86_f16_row_avx2(x, y, n);
    else muse_type_traits[type].to_float(x, y, n);
}

muse_vec_dot_fn muse_x86_vec_dot(enum muse_type type) {
    if (have_avx2()) {
        switch (type) {
        case MUSE_TYPE_Q8_0: return muse_x86_vd_q8_0_avx2;
        case MUSE_TYPE_Q4_0: return muse_x86_vd_q4_0_avx2;
        case MUSE_TYPE_IQ2_XXS: return muse_x86_vd_iq2_xxs_avx2;
        default: break;
        }
    }
    const int f = have_fma();
    switch (type) {
#define VD_CASE(T, t) case MUSE_TYPE_##T: return f ? muse_x86_vd_##t##_fma : muse_x86_vd_##t##_generic;
    MUSE_X86_ORDER_TYPES(VD_CASE)
#undef VD_CASE
    default: return muse_type_traits[type].vec_dot_ref;
    }
}

muse_from_float_fn muse_x86_act_from_float(enum muse_type act_type) {
    switch (act_type) {
    case MUSE_TYPE_Q8_0: return muse_from_float_q8_0_x86;
    case MUSE_TYPE_Q8_1: return muse_from_float_q8_1_x86;
    default: return muse_type_traits[act_type].from_float;
    }
}
