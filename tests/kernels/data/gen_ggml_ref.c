/*
 * gen_ggml_ref.c - writes ggml_ref.json: reference outputs computed by ggml's OWN C code, so
 * test_ggml_ref.c can check muse's reference kernels bit for bit against ggml without ggml.
 * Not built by the Makefile (not named test_*). To regenerate, with G = a llama.cpp checkout's
 * ggml directory (e.g. the one vendored in the llama-cpp-python sdist):
 *
 *   I="-I$G/include -I$G/src -I$G/src/ggml-cpu"
 *   gcc -O1 -std=gnu11 -ffp-contract=off $I -c $G/src/ggml-quants.c $G/src/ggml-cpu/quants.c
 *   gcc -O2 -std=gnu11 -ffp-contract=off -mavx2 -mfma -mf16c $I -c $G/src/ggml-cpu/arch/x86/quants.c \
 *       -o x86_quants.o
 *   gcc -O1 -std=gnu11 -ffp-contract=off -Isrc -o gen tests/kernels/data/gen_ggml_ref.c \
 *       ggml-quants.o quants.o x86_quants.o build/libmuse.a -lm -lpthread
 *   ./gen > tests/kernels/data/ggml_ref.json
 *
 * Inputs are made with muse_quant_random_row (valid random blocks) and stored in the file, so
 * the test does not depend on the generator staying the same.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/quant_random.h"
#include "kernels/quant_util.h"
#include "kernels/types.h"

/* ---- what ggml's objects need from the rest of ggml ---- */
float ggml_table_f32_f16[1 << 16];
float ggml_table_f32_e8m0_half[256];
float ggml_table_f32_ue4m3[256];
void ggml_abort(const char *file, int line, const char *fmt, ...) { fprintf(stderr, "%s:%d %s\n", file, line, fmt); abort(); }
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
const char *ggml_type_name(int type) { (void)type; return "?"; }
size_t ggml_type_size(int type) { (void)type; abort(); }

typedef void (*vd_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
typedef void (*q_fn)(const float *x, void *y, int64_t k);
#define VD(name) void ggml_vec_dot_##name##_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
VD(q4_0_q8_0) VD(q4_1_q8_1) VD(q5_0_q8_0) VD(q5_1_q8_1) VD(q8_0_q8_0) VD(mxfp4_q8_0) VD(nvfp4_q8_0) VD(q1_0_q8_0)
VD(q2_K_q8_K) VD(q3_K_q8_K) VD(q4_K_q8_K) VD(q5_K_q8_K) VD(q6_K_q8_K) VD(tq1_0_q8_K) VD(tq2_0_q8_K)
VD(iq2_xxs_q8_K) VD(iq2_xs_q8_K) VD(iq2_s_q8_K) VD(iq3_xxs_q8_K) VD(iq3_s_q8_K) VD(iq1_s_q8_K) VD(iq1_m_q8_K)
VD(iq4_nl_q8_0) VD(iq4_xs_q8_K)
void quantize_row_q8_0_ref(const float *, void *, int64_t);
void quantize_row_q8_1_ref(const float *, void *, int64_t);
void quantize_row_q8_K_ref(const float *, void *, int64_t);
void quantize_row_q8_0(const float *, void *, int64_t);   /* the AVX2 versions (x86 arch file) */
/* the weight quantizers llama-quantize runs without an importance matrix (ggml-quants.c) */
void quantize_row_q4_0_ref(const float *, void *, int64_t);
void quantize_row_q4_1_ref(const float *, void *, int64_t);
void quantize_row_q5_0_ref(const float *, void *, int64_t);
void quantize_row_q5_1_ref(const float *, void *, int64_t);
void quantize_row_q2_K_ref(const float *, void *, int64_t);
void quantize_row_q3_K_ref(const float *, void *, int64_t);
void quantize_row_q4_K_ref(const float *, void *, int64_t);
void quantize_row_q5_K_ref(const float *, void *, int64_t);
void quantize_row_q6_K_ref(const float *, void *, int64_t);
void quantize_row_tq1_0_ref(const float *, void *, int64_t);
void quantize_row_tq2_0_ref(const float *, void *, int64_t);
void quantize_row_q1_0_ref(const float *, void *, int64_t);
void quantize_row_mxfp4_ref(const float *, void *, int64_t);
void quantize_row_nvfp4_ref(const float *, void *, int64_t);
void quantize_row_q8_1(const float *, void *, int64_t);

static void hex(const void *p, size_t n) {
    const uint8_t *b = p;
    putchar('"');
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    putchar('"');
}

int main(void) {
    for (int i = 0; i < 65536; i++) ggml_table_f32_f16[i] = muse_fp16_to_fp32((uint16_t)i);
    for (int i = 0; i < 256; i++) {
        ggml_table_f32_e8m0_half[i] = muse_e8m0_half((uint8_t)i);
        ggml_table_f32_ue4m3[i] = muse_ue4m3_half((uint8_t)i);
    }
    const struct { enum muse_type t; vd_fn f; } dots[] = {
        {MUSE_TYPE_Q4_0, ggml_vec_dot_q4_0_q8_0_generic}, {MUSE_TYPE_Q4_1, ggml_vec_dot_q4_1_q8_1_generic},
        {MUSE_TYPE_Q5_0, ggml_vec_dot_q5_0_q8_0_generic}, {MUSE_TYPE_Q5_1, ggml_vec_dot_q5_1_q8_1_generic},
        {MUSE_TYPE_Q8_0, ggml_vec_dot_q8_0_q8_0_generic}, {MUSE_TYPE_MXFP4, ggml_vec_dot_mxfp4_q8_0_generic},
        {MUSE_TYPE_NVFP4, ggml_vec_dot_nvfp4_q8_0_generic}, {MUSE_TYPE_Q1_0, ggml_vec_dot_q1_0_q8_0_generic},
        {MUSE_TYPE_Q2_K, ggml_vec_dot_q2_K_q8_K_generic}, {MUSE_TYPE_Q3_K, ggml_vec_dot_q3_K_q8_K_generic},
        {MUSE_TYPE_Q4_K, ggml_vec_dot_q4_K_q8_K_generic}, {MUSE_TYPE_Q5_K, ggml_vec_dot_q5_K_q8_K_generic},
        {MUSE_TYPE_Q6_K, ggml_vec_dot_q6_K_q8_K_generic}, {MUSE_TYPE_TQ1_0, ggml_vec_dot_tq1_0_q8_K_generic},
        {MUSE_TYPE_TQ2_0, ggml_vec_dot_tq2_0_q8_K_generic}, {MUSE_TYPE_IQ2_XXS, ggml_vec_dot_iq2_xxs_q8_K_generic},
        {MUSE_TYPE_IQ2_XS, ggml_vec_dot_iq2_xs_q8_K_generic}, {MUSE_TYPE_IQ2_S, ggml_vec_dot_iq2_s_q8_K_generic},
        {MUSE_TYPE_IQ3_XXS, ggml_vec_dot_iq3_xxs_q8_K_generic}, {MUSE_TYPE_IQ3_S, ggml_vec_dot_iq3_s_q8_K_generic},
        {MUSE_TYPE_IQ1_S, ggml_vec_dot_iq1_s_q8_K_generic}, {MUSE_TYPE_IQ1_M, ggml_vec_dot_iq1_m_q8_K_generic},
        {MUSE_TYPE_IQ4_NL, ggml_vec_dot_iq4_nl_q8_0_generic}, {MUSE_TYPE_IQ4_XS, ggml_vec_dot_iq4_xs_q8_K_generic},
    };
    const int64_t n = 512;
    static uint8_t x[8192], y[8192];
    static float f[512];
    uint64_t rng = 20261129;
    printf("{\"description\": \"Outputs of ggml's own C reference code (ggml_vec_dot_*_generic, quantize_row_*_ref) "
           "on random inputs; written by tests/kernels/data/gen_ggml_ref.c\",\n \"n\": %lld,\n \"dots\": [\n", (long long)n);
    const int ndots = (int)(sizeof dots / sizeof dots[0]);
    for (int k = 0; k < ndots; k++) {
        const struct muse_type_traits *tr = &muse_type_traits[dots[k].t];
        const struct muse_type_traits *at = &muse_type_traits[tr->vec_dot_type];
        for (int rep = 0; rep < 2; rep++) {
            muse_quant_random_row(dots[k].t, x, n, &rng, rep ? 0.05f : 1.0f);
            muse_quant_random_row(MUSE_TYPE_F32, f, n, &rng, rep ? 20.0f : 1.0f);
            at->from_float(f, y, n);
            float s;
            dots[k].f((int)n, &s, 0, x, 0, y, 0, 1);
            uint32_t bits;
            memcpy(&bits, &s, 4);
            printf("  {\"type\": \"%s\", \"x\": ", muse_type_layout_get(dots[k].t)->name);
            hex(x, muse_type_row_size(dots[k].t, n));
            printf(", \"y\": ");
            hex(y, muse_type_row_size(tr->vec_dot_type, n));
            printf(", \"f32_bits\": \"%08x\"}%s\n", bits, k == ndots - 1 && rep == 1 ? "" : ",");
        }
    }
    printf(" ],\n \"quants\": [\n");
    const struct { enum muse_type t; q_fn f; const char *variant; } qs[] = {
        {MUSE_TYPE_Q8_0, quantize_row_q8_0_ref, "ref"}, {MUSE_TYPE_Q8_1, quantize_row_q8_1_ref, "ref"},
        {MUSE_TYPE_Q8_K, quantize_row_q8_K_ref, "ref"}, {MUSE_TYPE_Q8_0, quantize_row_q8_0, "x86"},
        {MUSE_TYPE_Q8_1, quantize_row_q8_1, "x86"},
    };
    const int nq = (int)(sizeof qs / sizeof qs[0]);
    for (int k = 0; k < nq; k++) {
        for (int rep = 0; rep < 2; rep++) {
            muse_quant_random_row(MUSE_TYPE_F32, f, n, &rng, rep ? 1e-3f : 7.0f);
            for (int j = 0; j < n; j += 5) f[j] = (float)(int)(f[j] * 16) / 16;   /* some exact values */
            qs[k].f(f, y, n);
            printf("  {\"type\": \"%s\", \"variant\": \"%s\", \"x\": ", muse_type_layout_get(qs[k].t)->name, qs[k].variant);
            hex(f, sizeof f);
            printf(", \"q\": ");
            hex(y, muse_type_row_size(qs[k].t, n));
            printf("}%s\n", k == nq - 1 && rep == 1 ? "" : ",");
        }
    }
    /* Weight quantizers: two shared inputs of n floats. Input 0: random, scale 1, every 5th value
     * a multiple of 1/16. Input 1: eight 32-element sub-blocks of special patterns (zero,
     * constant, one outlier among tiny values, all positive, all negative, fp16-exact values,
     * 1e-6 noise, a ramp) followed by random values of scale 1e-3. */
    static float in[2][512];
    muse_quant_random_row(MUSE_TYPE_F32, in[0], n, &rng, 1.0f);
    for (int j = 0; j < n; j += 5) in[0][j] = (float)(int)(in[0][j] * 16) / 16;
    muse_quant_random_row(MUSE_TYPE_F32, in[1], n, &rng, 1e-3f);
    for (int j = 0; j < 256; j++) {
        const float r = in[1][j] * 1000.0f;
        switch (j / 32) {
        case 0: in[1][j] = 0.0f; break;
        case 1: in[1][j] = 0.375f; break;
        case 2: in[1][j] = j == 77 ? -3.0f : r * 1e-4f; break;
        case 3: in[1][j] = fabsf(r) + 0.01f; break;
        case 4: in[1][j] = -fabsf(r) - 0.25f; break;
        case 5: in[1][j] = muse_fp16_to_fp32(muse_fp32_to_fp16(r)); break;
        case 6: in[1][j] = r * 1e-6f; break;
        default: in[1][j] = (float)(j - 240) * 0.125f; break;
        }
    }
    printf(" ],\n \"weight_inputs\": [\n");
    for (int k = 0; k < 2; k++) {
        printf("  ");
        hex(in[k], sizeof in[k]);
        printf("%s\n", k ? "" : ",");
    }
    printf(" ],\n \"weight_quants\": [\n");
    const struct { enum muse_type t; q_fn f; } ws[] = {
        {MUSE_TYPE_Q4_0, quantize_row_q4_0_ref}, {MUSE_TYPE_Q4_1, quantize_row_q4_1_ref},
        {MUSE_TYPE_Q5_0, quantize_row_q5_0_ref}, {MUSE_TYPE_Q5_1, quantize_row_q5_1_ref},
        {MUSE_TYPE_Q2_K, quantize_row_q2_K_ref}, {MUSE_TYPE_Q3_K, quantize_row_q3_K_ref},
        {MUSE_TYPE_Q4_K, quantize_row_q4_K_ref}, {MUSE_TYPE_Q5_K, quantize_row_q5_K_ref},
        {MUSE_TYPE_Q6_K, quantize_row_q6_K_ref}, {MUSE_TYPE_TQ1_0, quantize_row_tq1_0_ref},
        {MUSE_TYPE_TQ2_0, quantize_row_tq2_0_ref}, {MUSE_TYPE_Q1_0, quantize_row_q1_0_ref},
        {MUSE_TYPE_MXFP4, quantize_row_mxfp4_ref}, {MUSE_TYPE_NVFP4, quantize_row_nvfp4_ref},
    };
    const int nw = (int)(sizeof ws / sizeof ws[0]);
    for (int k = 0; k < nw; k++) {
        for (int inp = 0; inp < 2; inp++) {
            ws[k].f(in[inp], y, n);
            printf("  {\"type\": \"%s\", \"input\": %d, \"q\": ", muse_type_layout_get(ws[k].t)->name, inp);
            hex(y, muse_type_row_size(ws[k].t, n));
            printf("}%s\n", k == nw - 1 && inp == 1 ? "" : ",");
        }
    }
    printf(" ]\n}\n");
    return 0;
}
