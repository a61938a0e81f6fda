/*
 * test_vulkan_ops.c - every op of the text program on the Vulkan device against the cpu device
 * (1 thread), on small shapes, per weight type (docs/vulkan.md "Tolerances"). Each case is a
 * little program whose result lands in the logits output. The error is max |gpu - cpu| over the
 * output, relative to the cpu output's RMS:
 *   EMBED (dequantization)            0      bit-identical (the same products as to_float; no FMA
 *                                            can form: one multiply, or one multiply-subtract that
 *                                            the tolerance below still covers) -> bound 1e-6
 *   MATMUL F32 weights                1e-5   f32 sums in another order
 *   MATMUL F16 / BF16 / quantized     1e-5   the activations rounded as the cpu does (F16, BF16,
 *   (Q4_1 / Q5_1: 2e-3)                      Q8_0 / Q8_1 / Q8_K: act_quant.comp), f32 sums in
 *                                            another order; Q4_1 / Q5_1 add min * s with the
 *                                            cpu's s = fp16(d * sum q), which the GPU sums unrounded
 *   RMS_NORM, ROPE, SWIGLU, ADD,      1e-5   f32 tree sums vs ggml's double sum; exp / tanh of
 *   LOGITS (softcap)                         the driver vs the C library
 *   KV_STORE + ATTENTION (F32, F16,   1e-4   the cpu's two-pass softmax, its roundings (q and p to
 *   Q8_0 KV)                                 F16; q to Q8_0) and its integer Q8_0 block sums; exp
 *                                            of the driver, sums in another order
 * Without a Vulkan build or device this test FAILS (CI installs lavapipe: scripts/install-deps.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "backend/program.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/tensor_type.h"
#include "kernels/types.h"
#include "test.h"

static uint32_t rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

/* Rows of random weights of `type` (I-quants: random codes with a fixed scale). */
static void *make_weight(enum muse_type type, int64_t ne0, int64_t ne1, size_t *row_size) {
    *row_size = muse_type_row_size(type, ne0);
    uint8_t *w = malloc(*row_size * (size_t)ne1);
    float *row = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < ne1; r++) {
        uint8_t *dst = w + (size_t)r * *row_size;
        if (muse_type_traits[type].from_float || type == MUSE_TYPE_F32 || type == MUSE_TYPE_F16 || type == MUSE_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) row[i] = frand() * 0.5f;
            if (type == MUSE_TYPE_F32) memcpy(dst, row, sizeof(float) * (size_t)ne0);
            else if (type == MUSE_TYPE_F16) for (int64_t i = 0; i < ne0; i++) ((uint16_t *)dst)[i] = muse_fp32_to_fp16(row[i]);
            else if (type == MUSE_TYPE_BF16) for (int64_t i = 0; i < ne0; i++) ((uint16_t *)dst)[i] = muse_fp32_to_bf16(row[i]);
            else muse_type_traits[type].from_float(row, dst, ne0);
        } else { /* the I-quants without a quantizer: random codes, d = 0.01 (IQ1_M: spread over its scale words) */
            for (size_t i = 0; i < *row_size; i++) dst[i] = (uint8_t)(frand() * 128.0f + 128.0f);
            const size_t bs = muse_type_layouts[type].type_size;
            const uint16_t d = muse_fp32_to_fp16(0.01f);
            for (size_t b = 0; b < *row_size; b += bs) {
                if (type != MUSE_TYPE_IQ1_M) {
                    memcpy(dst + b, &d, 2);
                    continue;
                }
                for (int k = 0; k < 4; k++) { /* top nibble of scale word k = nibble k of d */
                    uint8_t *hi = dst + b + 48 + 2 * k + 1;
                    *hi = (uint8_t)((*hi & 0x0f) | (((d >> (4 * k)) & 15) << 4));
                }
            }
        }
    }
    free(row);
    return w;
}

struct dev {
    struct muse_device *d;
};

/* Run program p (n rows, tokens 0..n-1 of its EMBED table) on dev; the logits output [n][cols]. */
static int run_on(struct muse_device *dev, struct muse_program *p, int32_t n, struct muse_kv_layer *const *kv, float *out) {
    struct muse_error e = {0};
    int32_t tok[16], pos[16], rows[16];
    for (int32_t i = 0; i < n; i++) tok[i] = i, pos[i] = i, rows[i] = i;
    const struct muse_backend_plan plan = {.n_batch = p->n_batch, .max_ne0 = 2560, .max_cells = 64, .max_head_dim = 64};
    if (muse_device_reserve(dev, &plan, p->workspace_floats, &e) || muse_device_prepare(dev, p, &e)) {
        fprintf(stderr, "%s: %s\n", muse_device_name(dev), e.msg);
        return 1;
    }
    const struct muse_prog_run run = {.n_rows = n, .tokens = tok, .pos = pos, .kv = kv, .out_rows = rows, .n_out = n,
                                      .logits = out};
    const muse_status st = muse_device_exec(dev, p, &run, &e);
    muse_device_forget(dev, p);
    if (st) fprintf(stderr, "%s: %s\n", muse_device_name(dev), e.msg);
    return st != MUSE_OK;
}

/* max |a - b| / rms(b) */
static double rel_err(const float *a, const float *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
        s += (double)b[i] * b[i];
    }
    return m / (sqrt(s / (double)n) + 1e-30);
}

static struct muse_device *cpu, *gpu;

/* Run p on both devices and compare n x cols outputs within tol. */
static void compare(const char *what, struct muse_program *p, int32_t n, int64_t cols, double tol,
                    struct muse_kv_layer *const *kv_cpu, struct muse_kv_layer *const *kv_gpu) {
    float *a = calloc((size_t)(n * cols), sizeof(float)), *b = calloc((size_t)(n * cols), sizeof(float));
    const int fa = run_on(gpu, p, n, kv_gpu, a), fb = run_on(cpu, p, n, kv_cpu, b);
    const double e = fa || fb ? INFINITY : rel_err(a, b, (size_t)(n * cols));
    printf("%-28s max|gpu-cpu|/rms %.3g (bound %.0e)\n", what, e, tol);
    TEST_CONDF(e <= tol, "%s: error %.3g over the bound %.0e", what, e, tol);
    free(a), free(b);
}

/* Whether the Vulkan device runs matmul variant `var` for weights of type t ("muse info --devices"
 * line: fp16, int8-dot, coopmat). */
static char dev_line[4096];
static bool variant_ok(const char *var, enum muse_type t) {
    if (!strcmp(var, "f16")) return strstr(dev_line, "fp16 yes") != NULL;
    if (!strcmp(var, "dp4a"))
        return strstr(dev_line, "int8-dot yes") && (t == MUSE_TYPE_Q8_0 || t == MUSE_TYPE_Q4_0 || t == MUSE_TYPE_Q5_0 ||
                                                    t == MUSE_TYPE_IQ4_NL || t == MUSE_TYPE_MXFP4);
    if (!strcmp(var, "coopmat")) return strstr(dev_line, "coopmat yes") != NULL;
    if (!strcmp(var, "vec"))
        return strstr(dev_line, "int8-dot yes") && (t == MUSE_TYPE_Q4_K || t == MUSE_TYPE_Q6_K || t == MUSE_TYPE_IQ2_XXS);
    return true;
}

static struct muse_weight weight(enum muse_type t, const void *data, int64_t ne0, int64_t ne1, size_t rs, const char *name) {
    return (struct muse_weight){.data = data, .type = t, .ne0 = ne0, .ne1 = ne1, .row_size = rs, .name = name};
}

int main(void) {
    struct muse_error e = {0};
    if (muse_device_open("vulkan", 0, false, &gpu, &e)) {
        fprintf(stderr, "FAIL: no Vulkan device: %s\n", e.msg);
        return 1;
    }
    if (muse_device_open("cpu", 1, false, &cpu, &e)) return 1;
    printf("device: %s\n", muse_device_describe(gpu));
    muse_device_list("vulkan", dev_line, sizeof dev_line);
    const int32_t n = 5;
    const int64_t K = 256, N = 40;
    size_t rs;
    /* the input rows: tokens 0..n-1 of an F32 table */
    float *xt = make_weight(MUSE_TYPE_F32, K, 16, &rs);
    const struct muse_weight xtab = weight(MUSE_TYPE_F32, xt, K, 16, rs, "x");
    float bias[64], normw[512];
    for (int i = 0; i < 64; i++) bias[i] = frand();
    for (int i = 0; i < 512; i++) normw[i] = 1.0f + 0.5f * frand();

    static const enum muse_type types[] = {
        MUSE_TYPE_F32,     MUSE_TYPE_F16,    MUSE_TYPE_BF16,    MUSE_TYPE_Q4_0,   MUSE_TYPE_Q4_1,   MUSE_TYPE_Q5_0,
        MUSE_TYPE_Q5_1,    MUSE_TYPE_Q8_0,   MUSE_TYPE_Q2_K,    MUSE_TYPE_Q3_K,   MUSE_TYPE_Q4_K,   MUSE_TYPE_Q5_K,
        MUSE_TYPE_Q6_K,    MUSE_TYPE_IQ2_XXS, MUSE_TYPE_IQ2_XS, MUSE_TYPE_IQ2_S,  MUSE_TYPE_IQ3_XXS, MUSE_TYPE_IQ3_S,
        MUSE_TYPE_IQ1_S,   MUSE_TYPE_IQ1_M,  MUSE_TYPE_IQ4_NL,  MUSE_TYPE_IQ4_XS, MUSE_TYPE_TQ1_0,  MUSE_TYPE_TQ2_0,
        MUSE_TYPE_MXFP4,   MUSE_TYPE_NVFP4,  MUSE_TYPE_Q1_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const enum muse_type t = types[ti];
        const char *tn = muse_type_layouts[t].name;
        void *w = make_weight(t, K, N, &rs);
        const struct muse_weight W = weight(t, w, K, N, rs, tn);
        char what[64];
        struct muse_program p;
        /* EMBED: rows of W */
        muse_program_init(&p, 8);
        p.bufs[MUSE_BUF_LOGITS].cols = K;
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(MUSE_BUF_LOGITS, 0, K), .n = K, .table = &W});
        muse_program_finish(&p, &e);
        snprintf(what, sizeof what, "embed %s", tn);
        compare(what, &p, n, K, 1e-6, NULL, NULL);
        muse_program_free(&p);
        /* MATMUL with the epilogue (scale, bias) */
        muse_program_init(&p, 16); /* 16 rows for the coopmat variant */
        const int16_t x = muse_program_buffer(&p, K);
        p.bufs[MUSE_BUF_LOGITS].cols = N;
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(x, 0, K), .n = K, .table = &xtab});
        const struct muse_prog_job job = {W, muse_ref(MUSE_BUF_LOGITS, 0, N), true, 0.75f, bias};
        muse_program_matmul(&p, muse_ref(x, 0, K), &job, 1, MUSE_ROWS_ALL);
        muse_program_finish(&p, &e);
        /* the plain path, then each fast variant the device can run (forced: lavapipe is a CPU device) */
        static const char *const vars[] = {"plain", "f16", "dp4a", "coopmat"};
        for (size_t vi = 0; vi < sizeof vars / sizeof vars[0]; vi++) {
            if (vi && !variant_ok(vars[vi], t)) continue;
            setenv("MUSE_VK_VARIANT", vars[vi], 1);
            snprintf(what, sizeof what, "matmul %s%s%s", tn, vi ? " " : "", vi ? vars[vi] : "");
            const double tol = vi == 1 || vi == 3 ? 1e-2 : t == MUSE_TYPE_Q4_1 || t == MUSE_TYPE_Q5_1 ? 2e-3 : 1e-5;
            compare(what, &p, vi == 3 ? 16 : n, N, tol, NULL, NULL);
        }
        unsetenv("MUSE_VK_VARIANT");
        muse_program_free(&p);
        free(w);
        /* the decode matvec (vec: Q4_K, Q6_K, IQ2_XXS against Q8_K): rows of 10 blocks (every lane,
         * some twice), an odd row count (the workgroup's second row out of range), 1, 5 and 8 token
         * rows; the plain path on the same program first */
        if (variant_ok("vec", t)) {
            /* 71 x 2560 (64 lanes per row), 1100 x 256 (32 lanes per row: 1024 rows or more) */
            static const int64_t shapes[2][2] = {{2560, 71}, {256, 1100}};
            for (int si = 0; si < 2; si++) {
                const int64_t K2 = shapes[si][0], N2 = shapes[si][1];
                void *w2 = make_weight(t, K2, N2, &rs);
                const struct muse_weight W2 = weight(t, w2, K2, N2, rs, tn);
                float *xt2 = make_weight(MUSE_TYPE_F32, K2, 16, &rs);
                const struct muse_weight xtab2 = weight(MUSE_TYPE_F32, xt2, K2, 16, rs, "x2");
                muse_program_init(&p, 8);
                const int16_t x2 = muse_program_buffer(&p, K2);
                p.bufs[MUSE_BUF_LOGITS].cols = N2;
                muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(x2, 0, K2), .n = K2, .table = &xtab2});
                const struct muse_prog_job job2 = {W2, muse_ref(MUSE_BUF_LOGITS, 0, N2), false, 0, NULL};
                muse_program_matmul(&p, muse_ref(x2, 0, K2), &job2, 1, MUSE_ROWS_ALL);
                muse_program_finish(&p, &e);
                static const int32_t rows[] = {1, 5, 8};
                for (int v2 = 0; v2 < 2; v2++)
                    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                        setenv("MUSE_VK_VARIANT", v2 ? "vec" : "plain", 1);
                        snprintf(what, sizeof what, "matmul %s %dx%d %s n=%d", tn, (int)N2, (int)K2, v2 ? "vec" : "plain",
                                 (int)rows[ri]);
                        compare(what, &p, rows[ri], N2, 1e-5, NULL, NULL);
                    }
                unsetenv("MUSE_VK_VARIANT");
                muse_program_free(&p);
                free(w2);
                free(xt2);
            }
        }
    }

    /* the row ops on the input rows: per-head RMS norm with a weight, rope (both modes), swiglu, add, logits */
    {
        struct muse_program p;
        muse_program_init(&p, 8);
        const int16_t x = muse_program_buffer(&p, K), y = muse_program_buffer(&p, K);
        const int16_t rc = muse_program_buffer(&p, muse_rope_cols(32)), rsn = muse_program_buffer(&p, muse_rope_cols(32));
        p.bufs[MUSE_BUF_LOGITS].cols = K;
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(x, 0, K), .n = K, .table = &xtab});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(y, 0, K), .n = K, .table = &xtab});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_ROPE_ANGLES, .dst = muse_ref(rc, 0, 0), .src = muse_ref(rsn, 0, 0),
                                              .n_rot = 32, .rope_base = 10000.0f, .rope_scale = 1.0f});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_RMS_NORM, .split = MUSE_SPLIT_SHARE, .src = muse_ref(x, 0, K),
                                              .dst = muse_ref(x, 0, K), .n = 64, .per_row = 4, .w = normw, .eps = 1e-6f});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_ROPE, .dst = muse_ref(x, 0, K), .src = muse_ref(rc, 0, 0),
                                              .src2 = muse_ref(rsn, 0, 0), .n = 64, .per_row = 4, .rope = MUSE_ROPE_NORM, .n_rot = 32});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_ROPE, .dst = muse_ref(y, 0, K), .src = muse_ref(rc, 0, 0),
                                              .src2 = muse_ref(rsn, 0, 0), .n = 64, .per_row = 4, .rope = MUSE_ROPE_NEOX, .n_rot = 32});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_SWIGLU, .dst = muse_ref(x, 0, K), .src = muse_ref(y, 0, K), .n = K});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_ADD, .dst = muse_ref(x, 0, K), .src = muse_ref(y, 0, K), .n = K});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_RMS_NORM, .rows = MUSE_ROWS_OUT, .src = muse_ref(x, 0, K),
                                              .dst = muse_ref(MUSE_BUF_LOGITS, 0, K), .n = K, .per_row = 1, .w = normw, .eps = 1e-5f});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_LOGITS, .rows = MUSE_ROWS_OUT, .dst = muse_ref(MUSE_BUF_LOGITS, 0, K),
                                              .n = K, .scale = 3.0f, .softcap = 2.0f});
        muse_program_barrier(&p, MUSE_ROWS_ALL);
        muse_program_finish(&p, &e);
        compare("norm+rope+swiglu+add+logits", &p, n, K, 1e-5, NULL, NULL);
        muse_program_free(&p);
    }

    /* KV_STORE + ATTENTION (GQA 4/2, head 64, a window of 3, the gate) over F32, F16 and Q8_0 caches */
    for (int kind = 0; kind <= 2; kind++) {
        const int32_t nh = 4, nkv = 2, hd = 64, cells = 16;
        const enum muse_type kt = kind == 1 ? MUSE_TYPE_F16 : kind == 2 ? MUSE_TYPE_Q8_0 : MUSE_TYPE_F32;
        struct muse_kv_layer lc = {.type = kt, .n_cells = cells, .n_embd_k = nkv * hd, .n_embd_v = nkv * hd,
                                   .k_row_size = muse_type_row_size(kt, nkv * hd), .v_row_size = muse_type_row_size(kt, nkv * hd)};
        struct muse_kv_layer lg = lc;
        struct muse_buffer *bc, *bg;
        const size_t half = lc.k_row_size * cells;
        muse_device_alloc(cpu, 2 * half, &bc, &e);
        muse_device_alloc(gpu, 2 * half, &bg, &e);
        lc.k = muse_buffer_base(bc), lc.v = (uint8_t *)lc.k + half;
        lg.k = muse_buffer_base(bg), lg.v = (uint8_t *)lg.k + half;
        struct muse_kv_layer *kc[1] = {&lc}, *kg[1] = {&lg};
        struct muse_program p;
        muse_program_init(&p, 8);
        const int16_t q = muse_program_buffer(&p, K), kk = muse_program_buffer(&p, 128), vv = muse_program_buffer(&p, 128);
        p.bufs[MUSE_BUF_LOGITS].cols = K;
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(q, 0, K), .n = K, .table = &xtab});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(kk, 0, 128), .n = 128,
                                              .table = &(struct muse_weight){xt, MUSE_TYPE_F32, 128, 16, 512, "k", NULL}});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_EMBED, .dst = muse_ref(vv, 0, 128), .n = 128,
                                              .table = &(struct muse_weight){xt + 128, MUSE_TYPE_F32, 128, 15, 512, "v", NULL}});
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_KV_STORE, .layer = 0, .src = muse_ref(kk, 0, 128),
                                              .src2 = muse_ref(vv, 0, 128)});
        muse_program_barrier(&p, MUSE_ROWS_ALL);
        muse_program_op(&p, &(struct muse_op){.kind = MUSE_OP_ATTENTION, .layer = 0, .src = muse_ref(q, 0, K),
                                              .dst = muse_ref(MUSE_BUF_LOGITS, 0, K), .src2 = muse_ref(q, 0, K), .n_head = nh,
                                              .n_head_kv = nkv, .head_dim = hd, .n_swa = 3, .scale = 0.125f});
        muse_program_barrier(&p, MUSE_ROWS_ALL);
        muse_program_finish(&p, &e);
        static const char *const what_kv[] = {"kv_store+attention f32 kv", "kv_store+attention f16 kv", "kv_store+attention q8_0 kv"};
        compare(what_kv[kind], &p, n, K, 1e-4, kc, kg);
        muse_program_free(&p);
        muse_buffer_free(bc);
        muse_buffer_free(bg);
    }
    free(xt);
    muse_device_close(cpu);
    muse_device_close(gpu);
    return TEST_REPORT();
}
