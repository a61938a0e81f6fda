/*
 * test_x86_numerics.c - kernels/x86_numerics.h: ggml's x86 arithmetic emulated in C.
 *
 * - the vector exp: special values, accuracy against exp() in double (ggml documents 1.5 ulp);
 * - every dot product: the plain build, the FMA build and the AVX2 kernels give the same bits
 *   (they are what makes --backend ref and cpu agree), and each is the dot product it claims to
 *   be (close to the exact sum in double);
 * - the x86 lane orders really differ from ggml's generic order on some rows (so the test would
 *   notice a dispatch that silently fell back to vec_dot_ref);
 * - the softmax helper: exps and a denominator equal to their sum;
 * - rms_norm's sums of many rows side by side: the scalar loop's bits;
 * - the KV-row widening: the reference values for every F16 bit pattern.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/types.h"
#include "kernels/x86_numerics.h"
#include "test.h"

#include "kernels/kernel_random.h"

/* The builds behind the dispatch (x86_numerics.c, x86_numerics_avx2.c). */
float muse_x86_expf_generic(float x);
float muse_x86_expf_fma(float x);
float muse_x86_dot_tinyblas_generic(int64_t n, const float *x, const float *y);
float muse_x86_dot_tinyblas_fma(int64_t n, const float *x, const float *y);
float muse_x86_dot_vec_generic(int64_t n, const float *x, const float *y, int tail_double);
float muse_x86_dot_vec_fma(int64_t n, const float *x, const float *y, int tail_double);
void muse_x86_vd_q8_0_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q8_0_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_0_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_0_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q5_0_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q5_0_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq4_nl_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_K_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q4_K_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q5_K_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q5_K_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q6_K_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_q6_K_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq4_nl_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq2_xxs_generic(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq2_xxs_fma(int64_t n, float *s, const void *vx, const void *vy);
void muse_x86_vd_iq2_xxs_avx2(int64_t n, float *s, const void *vx, const void *vy);

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_expf(bool fma) {
    TEST_COND("exp(-inf) = 0", muse_x86_expf(-INFINITY) == 0.0f);
    TEST_COND("exp(0) = 1", muse_x86_expf(0.0f) == 1.0f);
    TEST_COND("exp(-200) flushes to 0", muse_x86_expf(-200.0f) == 0.0f);
    TEST_COND("exp(100) overflows to inf", isinf(muse_x86_expf(100.0f)));
    double worst = 0.0;
    int differ = 0, same_builds = 1;
    for (int i = 0; i < 200000; i++) {
        const float x = -87.0f + 175.0f * (float)i / 200000.0f;
        const float e = muse_x86_expf_generic(x);
        if (fma && bits(e) != bits(muse_x86_expf_fma(x))) same_builds = 0;
        const double ex = exp((double)x);
        const double ulp = ldexp(1.0, ilogb(ex) - 23);
        const double err = fabs((double)e - ex) / ulp;
        if (err > worst) worst = err;
        differ += e != expf(x);
    }
    TEST_CONDF(worst <= 2.0, "vector exp error %.3f ulp (ggml: at most 1.45 + 0.5)", worst);
    TEST_CONDF(differ > 0, "vector exp never differs from libm expf: is it the libm one?");
    if (fma) TEST_COND("expf: plain and FMA builds agree", same_builds);
}

static void test_float_dots(bool fma) {
    enum { N = 512 };
    float x[N], y[N];
    int bad_build = 0, bad_value = 0, differ_vec = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < N; i++) x[i] = kr_float(), y[i] = kr_float() * 3.0f;
        double exact = 0.0;
        for (int i = 0; i < N; i++) exact += (double)x[i] * y[i];
        const float t = muse_x86_dot_tinyblas_generic(N, x, y);
        const float v = muse_x86_dot_vec_generic(N, x, y, 0);
        if (fma && (bits(t) != bits(muse_x86_dot_tinyblas_fma(N, x, y)) || bits(v) != bits(muse_x86_dot_vec_fma(N, x, y, 0))))
            bad_build++;
        if (fabs(t - exact) > 1e-4 || fabs(v - exact) > 1e-4) bad_value++;
        differ_vec += t != v;
    }
    TEST_CONDF(bad_build == 0, "float dots: plain and FMA builds differ on %d rows", bad_build);
    TEST_CONDF(bad_value == 0, "float dots: %d rows far from the exact dot product", bad_value);
    TEST_CONDF(differ_vec > 0, "tinyBLAS and vec_dot_f32 orders never differ");
    /* the F32 weight dot dispatches to tinyBLAS (n % 8 == 0) */
    float s;
    muse_x86_vec_dot(MUSE_TYPE_F32)(N, &s, x, y);
    TEST_COND("F32 weights use the tinyBLAS order", bits(s) == bits(muse_x86_dot_tinyblas(N, x, y)));
}

/* Random weight rows of `type` against x86-quantized activations: the builds agree, the value is
 * the dot product, and the order differs from the generic vec_dot_ref on some rows. */
static void test_quant_dot(enum muse_type type, muse_vec_dot_fn gen, muse_vec_dot_fn fmav, muse_vec_dot_fn avx2,
                           bool fma, bool has_avx2) {
    enum { N = 1024 };
    const enum muse_type at = muse_type_traits[type].vec_dot_type;
    uint8_t *w = malloc(muse_type_row_size(type, N)), *a = malloc(muse_type_row_size(at, N));
    float xf[N], wf[N];
    int bad_build = 0, bad_value = 0, differ_ref = 0;
    for (int rep = 0; rep < 100; rep++) {
        kr_weight_row(type, N, w);
        for (int i = 0; i < N; i++) xf[i] = kr_float();
        muse_x86_act_from_float(at)(xf, a, N);
        float s, s2, r;
        gen(N, &s, w, a);
        if (fma) {
            fmav(N, &s2, w, a);
            bad_build += bits(s) != bits(s2);
        }
        if (avx2 && has_avx2) {
            avx2(N, &s2, w, a);
            bad_build += bits(s) != bits(s2);
        }
        muse_type_traits[type].vec_dot_ref(N, &r, w, a);
        /* the same integer products in another float order: close to the generic result */
        muse_type_traits[type].to_float(w, wf, N);
        double mag = 0.0;
        for (int i = 0; i < N; i++) mag += fabs((double)wf[i] * xf[i]);
        bad_value += fabs((double)s - r) > 1e-5 * (mag + 1.0);
        differ_ref += s != r;
        muse_x86_vec_dot(type)(N, &s2, w, a);
        bad_build += bits(s) != bits(s2);
    }
    const char *name = muse_type_layout_get(type)->name;
    TEST_CONDF(bad_build == 0, "%s: the builds / the dispatch differ on %d rows", name, bad_build);
    TEST_CONDF(bad_value == 0, "%s: %d rows far from the generic dot product", name, bad_value);
    TEST_CONDF(differ_ref > 0, "%s: the x86 order never differs from the generic one", name);
    free(w);
    free(a);
}

static void test_softmax(void) {
    float x[13], e[13];
    for (int i = 0; i < 13; i++) x[i] = 3.0f * kr_float();
    float max = -INFINITY;
    for (int i = 0; i < 13; i++) max = x[i] > max ? x[i] : max;
    memcpy(e, x, sizeof x);
    const double sum = muse_x86_softmax_exp(e, 13, 5, max); /* positions 5..17: three groups */
    double ref = 0.0;
    int bad = 0;
    for (int i = 0; i < 13; i++) {
        bad += bits(e[i]) != bits(muse_x86_expf(x[i] - max));
        ref += e[i];
    }
    TEST_COND("softmax exps are the vector exp of x - max", bad == 0);
    TEST_CONDF(fabs(sum - ref) <= 1e-6 * ref, "softmax denominator %.9g, sum of the exps %.9g", sum, ref);
}

/* muse_x86_swiglu is silu(g) * u lane by lane with the scalar vector-exp silu: the same bits for
 * ordinary values, the exp's overflow / underflow branches (|x| > 126 and > 192), infinities,
 * zeros and every length's tail. */
static void test_swiglu(void) {
    enum { N = 203 };
    float g[N], u[N], y[N];
    const float special[] = {0.0f, -0.0f, 88.0f, -88.0f, 100.0f, -100.0f, 130.0f, -130.0f, 200.0f, -200.0f,
                             INFINITY, -INFINITY, 1e-30f, -1e-30f, 87.5f, -103.9f};
    int bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) {
            g[i] = (rep & 1) ? 40.0f * kr_float() : 4.0f * kr_float();
            u[i] = 2.0f * kr_float();
        }
        for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++) g[(7 * i + rep) % N] = special[i];
        const int n = N - rep; /* every tail length 0..7 */
        muse_x86_swiglu(y, g, u, n);
        for (int i = 0; i < n; i++) {
            const float r = muse_x86_silu(g[i]) * u[i];
            bad += bits(y[i]) != bits(r) && !(isnan(y[i]) && isnan(r));
        }
    }
    TEST_CONDF(bad == 0, "swiglu: %d values differ from silu(g) * u", bad);
    memcpy(y, g, sizeof g); /* in place over the gate */
    muse_x86_swiglu(y, y, u, N);
    int bad_alias = 0;
    for (int i = 0; i < N; i++) bad_alias += bits(y[i]) != bits(muse_x86_silu(g[i]) * u[i]) && !isnan(y[i]);
    TEST_CONDF(bad_alias == 0, "swiglu in place: %d values differ", bad_alias);
}

/* muse_rms_sums equals the scalar loop of ggml's rms_norm bit for bit: any row count (the 16- and
 * 8-row groups and the rows left over), every column tail, a row stride wider than the row, and
 * values over a wide range of magnitudes (where the order of the double additions shows). */
static void test_rms_sums(void) {
    enum { ROWS = 45, N = 203, STRIDE = 211 };
    float *x = malloc(sizeof(float) * ROWS * STRIDE);
    double sums[ROWS];
    int bad = 0;
    for (int rep = 0; rep < 12; rep++) {
        for (int i = 0; i < ROWS * STRIDE; i++) x[i] = kr_float() * ldexpf(1.0f, (int)(kr_float() * 40.0f));
        const int n_rows = ROWS - 3 * rep, n = N - rep; /* 45 .. 12 rows, tails 0..7 */
        muse_rms_sums(x, STRIDE, n_rows, n, sums);
        for (int r = 0; r < n_rows; r++) {
            double want = 0.0;
            for (int i = 0; i < n; i++) want += (double)(x[r * STRIDE + i] * x[r * STRIDE + i]);
            bad += memcmp(&want, &sums[r], sizeof want) != 0;
        }
    }
    TEST_CONDF(bad == 0, "rms sums: %d rows differ from the scalar loop", bad);
    free(x);
}

/* The KV-row widening equals to_float for every F16 bit pattern muse can store (subnormals, inf
 * and quiet NaN included; the F16C instruction quiets a signaling NaN, which muse_fp32_to_fp16
 * never produces). */
static void test_kv_to_float(void) {
    enum { N = 1 << 16 };
    uint16_t *h = malloc(N * sizeof *h);
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    muse_x86_kv_to_float(MUSE_TYPE_F16, h, a, N - 3); /* odd length: the scalar tail too */
    muse_type_traits[MUSE_TYPE_F16].to_float(h, b, N - 3);
    int bad = 0;
    for (int i = 0; i < N - 3; i++) {
        const bool snan = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff) && !(h[i] & 0x200);
        if (!snan) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    }
    TEST_CONDF(bad == 0, "F16 KV rows: %d values differ from the reference widening", bad);
    free(h);
    free(a);
    free(b);
}

int main(void) {
    const bool fma = muse_cpu_features()->fma, avx2 = muse_cpu_level_max() >= MUSE_CPU_LEVEL_AVX2;
    if (!fma) printf("SKIP FMA-build comparisons: this CPU has no FMA\n");
    test_expf(fma);
    test_float_dots(fma);
    test_quant_dot(MUSE_TYPE_Q8_0, muse_x86_vd_q8_0_generic, muse_x86_vd_q8_0_fma, muse_x86_vd_q8_0_avx2, fma, avx2);
    test_quant_dot(MUSE_TYPE_Q4_0, muse_x86_vd_q4_0_generic, muse_x86_vd_q4_0_fma, muse_x86_vd_q4_0_avx2, fma, avx2);
    test_quant_dot(MUSE_TYPE_Q5_0, muse_x86_vd_q5_0_generic, muse_x86_vd_q5_0_fma, NULL, fma, avx2);
    test_quant_dot(MUSE_TYPE_IQ4_NL, muse_x86_vd_iq4_nl_generic, muse_x86_vd_iq4_nl_fma, NULL, fma, avx2);
    test_quant_dot(MUSE_TYPE_IQ2_XXS, muse_x86_vd_iq2_xxs_generic, muse_x86_vd_iq2_xxs_fma, muse_x86_vd_iq2_xxs_avx2, fma, avx2);
    test_quant_dot(MUSE_TYPE_Q4_K, muse_x86_vd_q4_K_generic, muse_x86_vd_q4_K_fma, NULL, fma, avx2);
    test_quant_dot(MUSE_TYPE_Q5_K, muse_x86_vd_q5_K_generic, muse_x86_vd_q5_K_fma, NULL, fma, avx2);
    test_quant_dot(MUSE_TYPE_Q6_K, muse_x86_vd_q6_K_generic, muse_x86_vd_q6_K_fma, NULL, fma, avx2);
    test_softmax();
    test_swiglu();
    test_rms_sums();
    test_kv_to_float();
    return TEST_REPORT();
}
