/*
 * test_kernels_simd.c - every SIMD kernel variant this machine can run, against the reference
 * (`_ref`) numerics of kernels/types.h:
 *   - activation quantizers: the same bytes as the reference quantizers (random rows, rounding
 *     ties, zero blocks, special floats), output padding untouched;
 *   - matrix kernels: each kernel declares the dot order it follows (muse_kernels.order), which
 *     must be the order the forward uses for the type (muse_matmul_order: ggml's x86 order,
 *     muse_x86_vec_dot, where x86_numerics.h has one, else vec_dot_ref); every output is
 *     compared with the scalar dot of that order - bit for bit where the kernel is marked exact,
 *     else within 1e-5 of ||w||*||a|| - on random weights and activations (quantized by the
 *     forward's quantizer, muse_x86_act_from_float), odd sizes and row counts, 1..9 activation
 *     rows, NaN-poisoned padding around every input row and around the outputs (a read of
 *     padding or a missed/extra write shows up as NaN or a changed poison value);
 *   - the threaded driver (muse_matmul): identical bits for 1, 2 and 3 threads, and the
 *     kernel-less path equals vec_dot_ref exactly.
 * Levels the machine lacks (e.g. AVX-512 here) are reported as skipped, never as passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant_tables.h"
#include "kernels/x86/iq_codes.h"
#include "kernels/x86_numerics.h"
#include "test.h"

#include "kernels/kernel_random.h"

static void fill_poison(void *p, size_t n) { memset(p, 0xff, n); }  /* 0xff..: NaN in f32, f16, bf16 */

static bool all_ff(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xff) return false;
    return true;
}

// ---- quantizers --------------------------------------------------------------------------

/* x86: k->quantize_x86 against muse_x86_act_from_float, else k->quantize against from_float */
static void check_quantizer(const struct muse_kernels *k, enum muse_type act, const float *x, int64_t n,
                            const char *what, bool x86) {
    const size_t sz = muse_type_row_size(act, n);
    const size_t pad = 64;
    uint8_t *got = malloc(sz + 2 * pad), *want = malloc(sz);
    fill_poison(got, sz + 2 * pad);
    memset(want, 0, sz);
    (x86 ? k->quantize_x86[act] : k->quantize[act])(x, got + pad, n);
    (x86 ? muse_x86_act_from_float(act) : muse_type_traits[act].from_float)(x, want, n);
    TEST_CONDF(memcmp(got + pad, want, sz) == 0, "%s: %s%s quantizer (%s, n=%lld) differs from reference",
               muse_cpu_level_name(k->level), muse_type_layout_get(act)->name, x86 ? " x86" : "", what, (long long)n);
    TEST_CONDF(all_ff(got, pad) && all_ff(got + pad + sz, pad), "%s: %s quantizer wrote outside its row",
               muse_cpu_level_name(k->level), muse_type_layout_get(act)->name);
    free(got);
    free(want);
}

/* The IQ2_XXS / IQ2_XS grids as 2-bit codes and the IQ3_XXS / IQ3_S grids as 3-bit codes
 * (iq_codes.h, the AVX-512 VBMI decode's register tables) against the grids: every entry, every
 * element. */
static void test_iq2xxs_codes(void) {
    static const uint8_t mag[3] = {8, 25, 43};
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        const unsigned code = iq2xxs_code_bytes[0][i] | (unsigned)iq2xxs_code_bytes[1][i] << 8;
        for (int e = 0; e < 8; e++) {
            const unsigned c = code >> (2 * e) & 3;
            bad += c > 2 || mag[c > 2 ? 0 : c] != (uint8_t)(muse_iq2xxs_grid[i] >> (8 * e));
        }
    }
    TEST_CONDF(bad == 0, "iq2xxs_code_bytes: %d of 2048 codes differ from muse_iq2xxs_grid", bad);
    int bad2 = 0;
    for (int i = 0; i < 512; i++) {
        const unsigned code = iq2xs_code_bytes[0][i] | (unsigned)iq2xs_code_bytes[1][i] << 8;
        for (int e = 0; e < 8; e++) {
            const unsigned c = code >> (2 * e) & 3;
            bad2 += c > 2 || mag[c > 2 ? 0 : c] != (uint8_t)(muse_iq2xs_grid[i] >> (8 * e));
        }
    }
    TEST_CONDF(bad2 == 0, "iq2xs_code_bytes: %d of 4096 codes differ from muse_iq2xs_grid", bad2);
    static const uint8_t mag3[8] = {4, 12, 20, 28, 36, 44, 52, 62};
    int bad3 = 0;
    for (int i = 0; i < 256; i++) {
        const unsigned code = iq3xxs_code_bytes[0][i] | (unsigned)iq3xxs_code_bytes[1][i] << 8;
        bad3 += code >> 12 != 0;
        for (int e = 0; e < 4; e++) bad3 += mag3[code >> (3 * e) & 7] != (uint8_t)(muse_iq3xxs_grid[i] >> (8 * e));
    }
    TEST_CONDF(bad3 == 0, "iq3xxs_code_bytes: %d of 1024 codes differ from muse_iq3xxs_grid", bad3);
    int bad4 = 0;
    for (int i = 0; i < 512; i++) {
        const unsigned code = iq3s_code_bytes[0][i] | (unsigned)iq3s_code_bytes[1][i] << 8;
        bad4 += code >> 12 != 0;
        for (int e = 0; e < 4; e++) bad4 += 2 * (code >> (3 * e) & 7) + 1 != (uint8_t)(muse_iq3s_grid[i] >> (8 * e));
    }
    TEST_CONDF(bad4 == 0, "iq3s_code_bytes: %d of 2048 codes differ from muse_iq3s_grid", bad4);
    printf("  iq2xxs / iq2xs / iq3xxs / iq3s grid codes: every entry matches its grid\n");
}

static void test_quantizers(const struct muse_kernels *k) {
    static const enum muse_type acts[] = {MUSE_TYPE_Q8_0, MUSE_TYPE_Q8_K, MUSE_TYPE_F16, MUSE_TYPE_BF16};
    enum { N = 256 * 5 };
    static float x[N];
    for (size_t t = 0; t < 2 * sizeof(acts) / sizeof(acts[0]); t++) {
        const enum muse_type act = acts[t % 4];
        const bool x86 = t >= 4;
        if (!(x86 ? k->quantize_x86[act] : k->quantize[act])) continue;
        /* random rows at several scales */
        for (int rep = 0; rep < 20; rep++) {
            float scale = ldexpf(1.0f, (int)(kr_u32() % 40) - 20);
            for (int i = 0; i < N; i++) x[i] = kr_float() * scale;
            check_quantizer(k, act, x, N, "random", x86);
        }
        /* rounding ties: x*id lands on .5 for many elements (d = 1 when amax = 127) */
        for (int i = 0; i < N; i++) x[i] = (float)((int)(kr_u32() % 254) - 127) + ((kr_u32() & 1) ? 0.5f : 0.0f);
        for (int b = 0; b < N; b += 32) x[b] = (b & 64) ? 127.0f : -127.0f;
        check_quantizer(k, act, x, N, "ties", x86);
        /* a zero block, a block whose largest magnitude appears with both signs, small values */
        for (int i = 0; i < N; i++) x[i] = kr_float();
        for (int i = 0; i < 256; i++) x[i] = 0.0f;
        x[300] = -5.0f;
        x[301] = 5.0f;
        x[600] = 5.0f;
        x[601] = -5.0f;
        for (int i = 768; i < 1024; i++) x[i] = kr_float() * 1e-30f;
        check_quantizer(k, act, x, N, "zeros/ties of max/tiny", x86);
        if (act == MUSE_TYPE_F16 || act == MUSE_TYPE_BF16 || x86) {
            const float specials[] = {INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.0f, 65520.0f, -1e9f,
                                      5.9604645e-08f, 2.9802322e-08f, 1e-40f, -0.0f, 3.4e38f};
            for (int i = 0; i < N; i++) x[i] = specials[i % 13] * ((i / 13) % 2 ? 1.0f : 0.5f);
            uint32_t snan = 0x7f800001u, pnan = 0xffc12345u;
            memcpy(&x[5], &snan, 4);
            memcpy(&x[77], &pnan, 4);
            check_quantizer(k, act, x, N, "special values", x86);
            if (!x86) check_quantizer(k, act, x, 7, "7 elements", x86);
            /* a NaN in the first, an infinity in the last element of a block */
            if (x86) {
                for (int i = 0; i < N; i++) x[i] = kr_float();
                memcpy(&x[32], &snan, 4);
                x[95] = INFINITY;
                x[96] = -INFINITY;
                check_quantizer(k, act, x, N, "NaN/inf", x86);
            }
        }
    }
    /* the spec's verified ties (gguf-and-quants.md 2.11) */
    if (k->quantize[MUSE_TYPE_Q8_0]) {
        float v[32] = {127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 126.5f, -126.5f};
        uint8_t q[34];
        k->quantize[MUSE_TYPE_Q8_0](v, q, 32);
        const int8_t want[8] = {127, 1, 2, -3, -1, 3, 127, -127};
        TEST_CONDF(memcmp(q + 2, want, 8) == 0, "%s: Q8_0 spec tie example", muse_cpu_level_name(k->level));
    }
    if (k->quantize[MUSE_TYPE_Q8_K]) {
        float v[256] = {-127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 3.5f, -3.5f};
        uint8_t q[292];
        k->quantize[MUSE_TYPE_Q8_K](v, q, 256);
        const int8_t want[8] = {-127, 0, 2, -2, 0, 2, 4, -4};
        TEST_CONDF(memcmp(q + 4, want, 8) == 0, "%s: Q8_K spec tie example", muse_cpu_level_name(k->level));
    }
}

// ---- matrix kernels ----------------------------------------------------------------------

#define PAD 64

struct case_data {
    enum muse_type type, act_type;
    int64_t ne0, n_rows;
    int n_act;
    size_t w_row, w_stride, a_row, a_stride;
    int64_t out_stride;
    uint8_t *w;          /* [PAD][n_rows][w_stride] */
    uint8_t *a;          /* [PAD][n_act][a_stride] */
    uint8_t *ak;         /* the same rows in the kernels' activation layout */
    float *out;          /* [n_act][out_stride] + PAD floats */
    float *wf, *af;      /* dequantized rows, for the norms */
    float *ref;          /* [n_act][n_rows] */
};

static bool case_init(const struct muse_kernels *k, struct case_data *c, enum muse_type type, int64_t ne0,
                      int64_t n_rows, int n_act) {
    memset(c, 0, sizeof(*c));
    c->type = type;
    c->act_type = muse_type_traits[type].vec_dot_type;
    c->ne0 = ne0;
    c->n_rows = n_rows;
    c->n_act = n_act;
    c->w_row = muse_type_row_size(type, ne0);
    c->w_stride = c->w_row + PAD;
    c->a_row = muse_type_row_size(c->act_type, ne0);
    c->a_stride = c->a_row + PAD;
    c->out_stride = n_rows + 5;
    c->w = malloc(PAD + (size_t)n_rows * c->w_stride);
    c->a = malloc(PAD + (size_t)n_act * c->a_stride);
    c->out = malloc(((size_t)n_act * c->out_stride + PAD) * sizeof(float));
    c->wf = malloc((size_t)n_rows * ne0 * sizeof(float));
    c->af = malloc((size_t)n_act * ne0 * sizeof(float));
    c->ref = malloc((size_t)n_act * n_rows * sizeof(float));
    fill_poison(c->w, PAD + (size_t)n_rows * c->w_stride);
    fill_poison(c->a, PAD + (size_t)n_act * c->a_stride);
    for (int64_t i = 0; i < n_rows; i++)
        if (!kr_weight_row(type, ne0, c->w + PAD + i * c->w_stride)) return false;
    float *x = malloc((size_t)ne0 * sizeof(float));
    for (int r = 0; r < n_act; r++) {
        float scale = (r % 3 == 2) ? 100.0f : 1.0f;
        for (int64_t j = 0; j < ne0; j++) x[j] = (r == 4) ? 0.0f : kr_float() * scale;  /* row 4: all zero */
        if (c->act_type == MUSE_TYPE_F32) muse_kernels_quantize_row(NULL, c->act_type, x, c->a + PAD + r * c->a_stride, ne0);
        else muse_x86_act_from_float(c->act_type)(x, c->a + PAD + r * c->a_stride, ne0);
    }
    free(x);
    c->ak = malloc(PAD + (size_t)n_act * c->a_stride);
    memcpy(c->ak, c->a, PAD + (size_t)n_act * c->a_stride);
    for (int r = 0; r < n_act; r++) muse_kernels_prepare_act(k, type, c->ak + PAD + r * c->a_stride, ne0);
    for (int64_t i = 0; i < n_rows; i++)
        muse_type_traits[type].to_float(c->w + PAD + i * c->w_stride, c->wf + i * ne0, ne0);
    for (int r = 0; r < n_act; r++)
        muse_type_traits[c->act_type].to_float(c->a + PAD + r * c->a_stride, c->af + r * ne0, ne0);
    /* the scalar dot of the order the kernel declares (checked against the order in force) */
    const muse_vec_dot_fn dot = k->order[type] == MUSE_ORDER_X86 ? muse_x86_vec_dot(type) : muse_type_traits[type].vec_dot_ref;
    for (int r = 0; r < n_act; r++)
        for (int64_t i = 0; i < n_rows; i++)
            dot(ne0, &c->ref[r * n_rows + i], c->w + PAD + i * c->w_stride, c->a + PAD + r * c->a_stride);
    return true;
}

static void case_free(struct case_data *c) {
    free(c->w);
    free(c->a);
    free(c->ak);
    free(c->out);
    free(c->wf);
    free(c->af);
    free(c->ref);
}

static double norm(const float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* Compare c->out with the reference; check the poison around the outputs. Returns the failures. */
static int check_out(const struct case_data *c, const char *who, bool exact) {
    int bad = 0;
    for (int r = 0; r < c->n_act; r++) {
        const double na = norm(c->af + r * c->ne0, c->ne0);
        for (int64_t i = 0; i < c->n_rows; i++) {
            const float got = c->out[r * c->out_stride + i], want = c->ref[r * c->n_rows + i];
            const double tol = exact ? 0.0 : 1e-5 * norm(c->wf + i * c->ne0, c->ne0) * na + 1e-30;
            const bool ok = exact ? memcmp(&got, &want, 4) == 0 : fabs((double)got - want) <= tol;
            if (!ok) {
                if (bad < 3)
                    fprintf(stderr, "  %s %s ne0=%lld rows=%lld n_act=%d: out[%d][%lld] = %.9g, ref %.9g (tol %.3g)\n",
                            who, muse_type_layout_get(c->type)->name, (long long)c->ne0, (long long)c->n_rows,
                            c->n_act, r, (long long)i, got, want, tol);
                bad++;
            }
        }
        for (int64_t i = c->n_rows; i < c->out_stride; i++)
            if (!all_ff((const uint8_t *)&c->out[r * c->out_stride + i], 4)) bad++;
    }
    if (!all_ff((const uint8_t *)&c->out[c->n_act * c->out_stride], PAD * sizeof(float))) bad++;
    return bad;
}

static const enum muse_type gemm_types[] = {
    MUSE_TYPE_IQ2_XXS, MUSE_TYPE_Q4_K, MUSE_TYPE_Q6_K, MUSE_TYPE_Q8_0, MUSE_TYPE_Q5_K, MUSE_TYPE_F16,
    MUSE_TYPE_BF16,    MUSE_TYPE_F32,  MUSE_TYPE_IQ3_XXS, MUSE_TYPE_IQ3_S, MUSE_TYPE_IQ4_XS, MUSE_TYPE_Q4_0,
    MUSE_TYPE_Q5_0,    MUSE_TYPE_IQ4_NL, MUSE_TYPE_Q2_K, MUSE_TYPE_Q3_K, MUSE_TYPE_IQ2_XS, MUSE_TYPE_IQ2_S,
    MUSE_TYPE_Q4_1,    MUSE_TYPE_Q5_1,   MUSE_TYPE_IQ1_S, MUSE_TYPE_TQ2_0,
    MUSE_TYPE_IQ1_M,   MUSE_TYPE_MXFP4,  MUSE_TYPE_TQ1_0, MUSE_TYPE_NVFP4, MUSE_TYPE_Q1_0,
};

static void test_gemm_type(const struct muse_kernels *k, enum muse_type type) {
    const struct muse_type_layout *l = muse_type_layout_get(type);
    const bool has_gemv = k->gemv[type] != NULL, has_gemm = k->gemm[type] != NULL;
    if (!has_gemv && !has_gemm) return;
    /* A kernel in another order than the forward's never runs (muse_matmul falls back to the
     * scalar dot: correct, slow). The x86-order kernels written for the forward's x86 types must
     * be the ones used; for other types a mismatch (the forward adopted a new x86 order the
     * kernel does not follow yet) is reported, not failed. */
    const bool used = k->order[type] == muse_matmul_order(type) && muse_matmul_kernel(k, type, 1) &&
                      muse_matmul_kernel(k, type, 5);
    const bool x86_kernel = type == MUSE_TYPE_F32 || type == MUSE_TYPE_F16 || type == MUSE_TYPE_BF16 ||
                            type == MUSE_TYPE_Q8_0 || type == MUSE_TYPE_Q4_0 || type == MUSE_TYPE_IQ2_XXS ||
                            type == MUSE_TYPE_Q5_0 || type == MUSE_TYPE_IQ4_NL;
    if (x86_kernel || used)
        TEST_CONDF(used && (!x86_kernel || k->order[type] == MUSE_ORDER_X86),
                   "%s: %s kernels follow the %s order, the forward uses the %s order", muse_cpu_level_name(k->level),
                   l->name, k->order[type] == MUSE_ORDER_X86 ? "x86" : "generic",
                   muse_matmul_order(type) == MUSE_ORDER_X86 ? "x86" : "generic");
    else
        printf("NOTE %s: %s kernels follow the generic order but the forward uses the x86 order: not used\n",
               muse_cpu_level_name(k->level), l->name);
    const int64_t bs = l->block_size == 1 ? 1 : l->block_size;
    /* sizes in elements: 1 block, 3 blocks, 11 blocks (odd), plus odd float lengths */
    int64_t sizes[8] = {bs, 3 * bs, 11 * bs, 0, 0, 0, 0, 0};
    int n_sizes = 3;
    if (bs == 1) {
        /* 8, 40, 1000: the 8-lane x86 order; 7, 257: kernels may decline (the scalar dot runs) */
        sizes[0] = 7;
        sizes[1] = 40;
        sizes[2] = 257;
        sizes[3] = 1000;
        sizes[4] = 8;
        n_sizes = 5;
    } else if (bs == 32) {
        sizes[3] = 37 * 32;
        sizes[4] = 650 * 32;  /* past the legacy kernels' pre-converted scale buffers */
        sizes[5] = 100 * 32;  /* Q4_0 prefill: too wide for its unpacked 16-row chunk buffer */
        n_sizes = 6;
    }
    if (type == MUSE_TYPE_IQ2_XXS) sizes[n_sizes++] = 140 * 256;  /* past the prefill decode buffer */
    /* the decode paths with stack buffers (Q1_0, MXFP4 in whole groups of 4 blocks, NVFP4, IQ1_S,
     * IQ1_M, Q3_K, IQ4_XS, Q4_1, Q5_1) take rows of up to 32768 elements: one size past that, and
     * for MXFP4 a short one they take */
    static const enum muse_type bounded[] = {MUSE_TYPE_Q1_0, MUSE_TYPE_MXFP4,  MUSE_TYPE_NVFP4, MUSE_TYPE_IQ1_S,
                                             MUSE_TYPE_IQ1_M, MUSE_TYPE_Q3_K, MUSE_TYPE_IQ4_XS, MUSE_TYPE_Q4_1,
                                             MUSE_TYPE_Q5_1};
    for (size_t bi = 0; bi < sizeof bounded / sizeof bounded[0]; bi++)
        if (type == bounded[bi]) sizes[n_sizes++] = 33280;
    if (type == MUSE_TYPE_MXFP4) sizes[n_sizes++] = 8 * 32;
    const int64_t rows_list[] = {1, 3, 6, 17};
    int cases = 0, failures = 0;
    for (int si = 0; si < n_sizes; si++) {
        for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++) {
            const int max_act = has_gemm ? 9 : 1;
            struct case_data c;
            if (!case_init(k, &c, type, sizes[si], rows_list[ri], max_act)) {
                TEST_CONDF(0, "no random weights for %s", l->name);
                case_free(&c);
                return;
            }
            for (int n_act = 1; n_act <= max_act; n_act++) {
                muse_gemm_fn fn = n_act == 1 && has_gemv ? k->gemv[type] : k->gemm[type];
                if (!fn) continue;
                fill_poison(c.out, ((size_t)c.n_act * c.out_stride + PAD) * sizeof(float));
                const int saved = c.n_act;
                bool ok = fn(c.ne0, c.w + PAD, c.w_stride, c.n_rows, c.ak + PAD, c.a_stride, n_act, c.out, c.out_stride);
                c.n_act = n_act;
                cases++;
                if (!ok) {
                    /* declining is allowed but must leave the output untouched */
                    failures += !all_ff((const uint8_t *)c.out, (size_t)n_act * c.out_stride * sizeof(float));
                } else {
                    /* rows beyond n_act must stay poisoned: check_out looks at n_act rows + tail */
                    failures += check_out(&c, muse_cpu_level_name(k->level), k->exact[type]) > 0;
                    if (!all_ff((const uint8_t *)&c.out[n_act * c.out_stride],
                                (size_t)(saved - n_act) * c.out_stride * sizeof(float)))
                        failures++;
                }
                c.n_act = saved;
            }
            case_free(&c);
        }
    }
    TEST_CONDF(failures == 0, "%s: %s kernels: %d of %d cases wrong", muse_cpu_level_name(k->level), l->name,
               failures, cases);
    printf("  %s %-8s %3d cases (gemv %s, gemm %s, %s order, %s)\n", muse_cpu_level_name(k->level), l->name,
           cases, has_gemv ? "yes" : "no", has_gemm ? "yes" : "no",
           k->order[type] == MUSE_ORDER_X86 ? "x86" : "generic", k->exact[type] ? "bit-exact" : "within 1e-5 |w||a|");
}

// ---- attention helpers ---------------------------------------------------------------------

/* attn_kq_f16 / attn_pv_f16 against the scalar x86 order (muse_x86_dot_tinyblas on the widened
 * rows; fmaf into lane (lane0 + j) % 8), bit for bit: head dims 8..136, key counts around the
 * 4-key blocks, every lane0, NaN-poisoned padding between the K/V rows and after the outputs. */
/* V.p of pv over nk rows of kv (type ty, hd values each) against the scalar order
 * (lanes[(lane0 + j) % 8][d] = fma(V_j[d], p[j], ...)), every starting lane, accumulating onto
 * non-zero lanes, with poison after the 8 lane rows. lanes, want: [8 * hd + 8]; row: [hd].
 * Returns the failed checks and counts the cases. */
static int check_pv(muse_attn_pv_fn pv, enum muse_type ty, int32_t hd, int32_t nk, const uint8_t *kv, size_t stride,
                    const float *p, float *lanes, float *want, float *row, int *cases) {
    int bad = 0;
    for (int32_t lane0 = 0; lane0 < 8; lane0++) {
        for (int32_t i = 0; i < 8 * hd; i++) lanes[i] = want[i] = kr_float();
        fill_poison(lanes + 8 * (size_t)hd, 8 * sizeof(float));
        pv(hd, nk, kv, stride, p, lane0, lanes);
        for (int32_t j = 0; j < nk; j++) {
            muse_type_traits[ty].to_float(kv + (size_t)j * stride, row, hd);
            float *l = want + (size_t)((lane0 + j) % 8) * hd;
            for (int32_t d = 0; d < hd; d++) l[d] = fmaf(row[d], p[j], l[d]);
        }
        bad += memcmp(lanes, want, sizeof(float) * 8 * (size_t)hd) != 0;
        bad += !all_ff((const uint8_t *)(lanes + 8 * (size_t)hd), 8 * sizeof(float));
        (*cases)++;
    }
    return bad;
}

static void test_attention(const struct muse_kernels *k) {
    if (!k->attn_kq_f16 || !k->attn_pv_f16) return;
    const int32_t hds[] = {8, 32, 128, 136};
    const int32_t nks[] = {1, 3, 4, 5, 17};
    int bad = 0, cases = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++) {
            const int32_t hd = hds[hi], nk = nks[ni];
            const size_t stride = (size_t)hd * 2 + 48; /* bytes per K/V row, 48 poisoned */
            uint8_t *kv = malloc(stride * (size_t)nk);
            float *qf = malloc(sizeof(float) * (size_t)hd), *row = malloc(sizeof(float) * (size_t)hd);
            float *p = malloc(sizeof(float) * (size_t)nk);
            float *scores = malloc(sizeof(float) * ((size_t)nk + 8));
            float *lanes = malloc(sizeof(float) * (8 * (size_t)hd + 8)), *want = malloc(sizeof(float) * 8 * (size_t)hd);
            fill_poison(kv, stride * (size_t)nk);
            for (int32_t j = 0; j < nk; j++)
                for (int32_t d = 0; d < hd; d++) {
                    const uint16_t h = muse_fp32_to_fp16(kr_float() * (j % 3 == 1 ? 30.0f : 1.0f));
                    memcpy(kv + (size_t)j * stride + 2 * (size_t)d, &h, 2);
                }
            for (int32_t d = 0; d < hd; d++) qf[d] = muse_fp16_to_fp32(muse_fp32_to_fp16(kr_float() * 4.0f));
            for (int32_t j = 0; j < nk; j++) p[j] = muse_fp16_to_fp32(muse_fp32_to_fp16(kr_float() * 0.5f + 0.5f));
            /* K.q */
            fill_poison(scores, sizeof(float) * ((size_t)nk + 8));
            k->attn_kq_f16(hd, nk, kv, stride, qf, scores);
            for (int32_t j = 0; j < nk; j++) {
                muse_type_traits[MUSE_TYPE_F16].to_float(kv + (size_t)j * stride, row, hd);
                const float w = muse_x86_dot_tinyblas(hd, row, qf);
                bad += memcmp(&w, &scores[j], 4) != 0;
            }
            bad += !all_ff((const uint8_t *)(scores + nk), 8 * sizeof(float));
            /* V.p, every starting lane, accumulating onto non-zero lanes */
            bad += check_pv(k->attn_pv_f16, MUSE_TYPE_F16, hd, nk, kv, stride, p, lanes, want, row, &cases);
            free(kv);
            free(qf);
            free(row);
            free(p);
            free(scores);
            free(lanes);
            free(want);
        }
    TEST_CONDF(bad == 0, "%s: attention helpers differ from the scalar x86 order in %d checks (%d cases)",
               muse_cpu_level_name(k->level), bad, cases);
    printf("  %s attention helpers: %d cases, bit-exact x86 order\n", muse_cpu_level_name(k->level), cases);
}

/* attn_kq_f16_multi / attn_pv_f16_multi (GQA: nq query heads on the same K/V rows) against the
 * scalar x86 order per head (muse_x86_dot_tinyblas on the widened rows; fmaf into lane
 * (lane0 + j) % 8), bit for bit: head dims 8..256, 1..17 keys (the 2-key blocks and their odd
 * tail), 1..9 heads (the 4-head tiles and every remainder), every lane0, heads and score rows
 * with gaps between them, NaN-poisoned padding between the K/V rows, the score rows, the queries
 * and the lane blocks, which must stay untouched. */
static void test_attention_multi(const struct muse_kernels *k) {
    if (!k->attn_kq_f16_multi || !k->attn_pv_f16_multi) return;
    const int32_t hds[] = {8, 64, 128, 136, 256};
    const int32_t nks[] = {1, 2, 3, 5, 8, 17};
    int bad = 0, cases = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++)
            for (int32_t nq = 1; nq <= 9; nq++) {
                const int32_t hd = hds[hi], nk = nks[ni];
                const size_t stride = (size_t)hd * 2 + 48;       /* bytes per K/V row, 48 poisoned */
                const size_t q_stride = (size_t)hd + 8;          /* floats per query, 8 poisoned */
                const size_t s_stride = (size_t)nk + 5;          /* floats per score row, 5 poisoned */
                const size_t l_stride = 8 * (size_t)hd + 8;      /* floats per lane block, 8 poisoned */
                uint8_t *kv = malloc(stride * (size_t)nk);
                float *qf = malloc(sizeof(float) * q_stride * (size_t)nq), *row = malloc(sizeof(float) * (size_t)hd);
                float *p = malloc(sizeof(float) * s_stride * (size_t)nq);
                float *scores = malloc(sizeof(float) * s_stride * (size_t)nq);
                float *lanes = malloc(sizeof(float) * l_stride * (size_t)nq), *want = malloc(sizeof(float) * l_stride * (size_t)nq);
                fill_poison(kv, stride * (size_t)nk);
                for (int32_t j = 0; j < nk; j++)
                    for (int32_t d = 0; d < hd; d++) {
                        const uint16_t h = muse_fp32_to_fp16(kr_float() * (j % 3 == 1 ? 30.0f : 1.0f));
                        memcpy(kv + (size_t)j * stride + 2 * (size_t)d, &h, 2);
                    }
                fill_poison(qf, sizeof(float) * q_stride * (size_t)nq);
                fill_poison(p, sizeof(float) * s_stride * (size_t)nq);
                for (int32_t i = 0; i < nq; i++) {
                    for (int32_t d = 0; d < hd; d++)
                        qf[(size_t)i * q_stride + d] = muse_fp16_to_fp32(muse_fp32_to_fp16(kr_float() * 4.0f));
                    for (int32_t j = 0; j < nk; j++)
                        p[(size_t)i * s_stride + j] = muse_fp16_to_fp32(muse_fp32_to_fp16(kr_float() * 0.5f + 0.5f));
                }
                /* K.q */
                fill_poison(scores, sizeof(float) * s_stride * (size_t)nq);
                k->attn_kq_f16_multi(hd, nk, kv, stride, nq, qf, q_stride, scores, s_stride);
                for (int32_t i = 0; i < nq; i++) {
                    for (int32_t j = 0; j < nk; j++) {
                        muse_type_traits[MUSE_TYPE_F16].to_float(kv + (size_t)j * stride, row, hd);
                        const float w = muse_x86_dot_tinyblas(hd, row, qf + (size_t)i * q_stride);
                        bad += memcmp(&w, &scores[(size_t)i * s_stride + j], 4) != 0;
                    }
                    bad += !all_ff((const uint8_t *)(scores + (size_t)i * s_stride + nk), 5 * sizeof(float));
                }
                /* V.p, every starting lane, accumulating onto non-zero lanes */
                for (int32_t lane0 = 0; lane0 < 8; lane0++) {
                    fill_poison(lanes, sizeof(float) * l_stride * (size_t)nq);
                    for (int32_t i = 0; i < nq; i++)
                        for (int32_t e = 0; e < 8 * hd; e++)
                            lanes[(size_t)i * l_stride + e] = want[(size_t)i * l_stride + e] = kr_float();
                    k->attn_pv_f16_multi(hd, nk, kv, stride, nq, p, s_stride, lane0, lanes, l_stride);
                    for (int32_t i = 0; i < nq; i++) {
                        for (int32_t j = 0; j < nk; j++) {
                            muse_type_traits[MUSE_TYPE_F16].to_float(kv + (size_t)j * stride, row, hd);
                            float *l = want + (size_t)i * l_stride + (size_t)((lane0 + j) % 8) * hd;
                            for (int32_t d = 0; d < hd; d++) l[d] = fmaf(row[d], p[(size_t)i * s_stride + j], l[d]);
                        }
                        bad += memcmp(lanes + (size_t)i * l_stride, want + (size_t)i * l_stride,
                                      sizeof(float) * 8 * (size_t)hd) != 0;
                        bad += !all_ff((const uint8_t *)(lanes + (size_t)i * l_stride + 8 * (size_t)hd), 8 * sizeof(float));
                    }
                    cases++;
                }
                free(kv);
                free(qf);
                free(row);
                free(p);
                free(scores);
                free(lanes);
                free(want);
            }
    TEST_CONDF(bad == 0, "%s: GQA attention helpers differ from the scalar x86 order in %d checks (%d cases)",
               muse_cpu_level_name(k->level), bad, cases);
    printf("  %s GQA attention helpers: %d cases, bit-exact x86 order\n", muse_cpu_level_name(k->level), cases);
}

/* attn_probs_f16 against the scalar F16 round trip of p * inv, bit for bit: lengths around the
 * 8-wide chunks, values that round to F16 subnormals, to zero, to inf, ties, inf and NaN. */
static void test_attention_probs(const struct muse_kernels *k) {
    if (!k->attn_probs_f16) return;
    int bad = 0, cases = 0;
    float p[48], want[48];
    for (int32_t n = 1; n <= 37; n++)
        for (int v = 0; v < 6; v++, cases++) {
            const float inv = v == 5 ? 3.0e4f : 1.0f / (float)(v + 1);
            for (int32_t j = 0; j < n; j++) {
                const float r = kr_float() * 0.5f + 0.5f;
                switch ((j + v) % 7) {
                case 0: p[j] = r * 1e-6f; break;          /* F16 subnormal */
                case 1: p[j] = r * 1e-9f; break;          /* rounds to 0 */
                case 2: p[j] = 1.0f + 0x1p-11f; break;    /* a tie: to even */
                case 3: p[j] = v == 4 && j == n / 2 ? NAN : r; break;
                case 4: p[j] = v == 3 && j == n / 3 ? INFINITY : r * 3.0f; break;
                default: p[j] = r; break;
                }
                want[j] = muse_fp16_to_fp32(muse_fp32_to_fp16(p[j] * inv));
            }
            fill_poison(p + n, sizeof(float) * (48 - (size_t)n));
            k->attn_probs_f16(n, inv, p);
            bad += memcmp(p, want, sizeof(float) * (size_t)n) != 0;
            bad += !all_ff((const uint8_t *)(p + n), sizeof(float) * (48 - (size_t)n));
        }
    TEST_CONDF(bad == 0, "%s: attn_probs_f16 differs from the scalar F16 round trip in %d of %d cases",
               muse_cpu_level_name(k->level), bad, cases);
    printf("  %s attention probabilities: %d cases, bit-exact\n", muse_cpu_level_name(k->level), cases);
}

/* attn_kq_f32 / attn_pv_f32 / attn_kq_q8_0 / attn_pv_q8_0 against muse_attn_head_ref's scalar
 * orders for those caches (K.q: muse_x86_dot_vec with an f32 tail, resp. Q8_0's vec_dot_ref
 * against the query quantized by the reference quantizer; V.p: fmaf of the dequantized row into
 * lane (lane0 + j) % 8), bit for bit: head dims (F32 also ones that are not multiples of 8 or
 * 32), key counts, every lane0, NaN-poisoned padding between the rows and after the outputs. */
static void test_attention_f32_q8_0(const struct muse_kernels *k) {
    if (!k->attn_kq_f32 || !k->attn_pv_f32 || !k->attn_kq_q8_0 || !k->attn_pv_q8_0) return;
    const int32_t hds[] = {8, 32, 40, 64, 100, 128, 256};
    const int32_t nks[] = {1, 3, 4, 5, 17};
    int bad = 0, cases = 0;
    for (int q8 = 0; q8 < 2; q8++)
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++) {
                const int32_t hd = hds[hi], nk = nks[ni];
                if (q8 && hd % 32) continue;
                const enum muse_type ty = q8 ? MUSE_TYPE_Q8_0 : MUSE_TYPE_F32;
                const size_t row_bytes = muse_type_row_size(ty, hd), stride = row_bytes + 40; /* 40 poisoned */
                uint8_t *kv = malloc(stride * (size_t)nk), *qq = malloc(row_bytes + 8);
                float *qf = malloc(sizeof(float) * (size_t)hd), *row = malloc(sizeof(float) * (size_t)hd);
                float *p = malloc(sizeof(float) * (size_t)nk);
                float *scores = malloc(sizeof(float) * ((size_t)nk + 8));
                float *lanes = malloc(sizeof(float) * (8 * (size_t)hd + 8)), *want = malloc(sizeof(float) * 8 * (size_t)hd);
                fill_poison(kv, stride * (size_t)nk);
                for (int32_t j = 0; j < nk; j++) {
                    for (int32_t d = 0; d < hd; d++) row[d] = kr_float() * (j % 3 == 1 ? 30.0f : 1.0f);
                    if (j == 2) row[hd / 2] = 0.0f;
                    muse_kernels_quantize_row(NULL, ty, row, kv + (size_t)j * stride, hd);
                }
                for (int32_t d = 0; d < hd; d++) qf[d] = kr_float() * 4.0f;
                if (q8) muse_type_traits[MUSE_TYPE_Q8_0].from_float(qf, qq, hd);
                for (int32_t j = 0; j < nk; j++) p[j] = kr_float() * 0.5f + 0.5f;
                /* K.q */
                fill_poison(scores, sizeof(float) * ((size_t)nk + 8));
                if (q8) k->attn_kq_q8_0(hd, nk, kv, stride, qq, scores);
                else k->attn_kq_f32(hd, nk, kv, stride, qf, scores);
                for (int32_t j = 0; j < nk; j++) {
                    float w;
                    if (q8) muse_type_traits[MUSE_TYPE_Q8_0].vec_dot_ref(hd, &w, kv + (size_t)j * stride, qq);
                    else w = muse_x86_dot_vec(hd, (const float *)(const void *)(kv + (size_t)j * stride), qf, 0);
                    bad += memcmp(&w, &scores[j], 4) != 0;
                }
                bad += !all_ff((const uint8_t *)(scores + nk), 8 * sizeof(float));
                /* V.p, every starting lane, accumulating onto non-zero lanes */
                bad += check_pv(q8 ? k->attn_pv_q8_0 : k->attn_pv_f32, ty, hd, nk, kv, stride, p, lanes, want, row,
                                &cases);
                free(kv);
                free(qq);
                free(qf);
                free(row);
                free(p);
                free(scores);
                free(lanes);
                free(want);
            }
    TEST_CONDF(bad == 0, "%s: F32/Q8_0 attention helpers differ from the scalar orders in %d checks (%d cases)",
               muse_cpu_level_name(k->level), bad, cases);
    printf("  %s F32/Q8_0 attention helpers: %d cases, bit-exact\n", muse_cpu_level_name(k->level), cases);
}

// ---- threaded driver ---------------------------------------------------------------------

struct drive_ctx {
    const struct muse_kernels *k;
    struct muse_threadpool *pool;
    struct muse_matmul_weight w;
    const float *x;
    void *q;
    size_t q_stride;
    int n_act;
    float *out;
};

static void drive_fn(int ith, int nth, void *vctx) {
    struct drive_ctx *c = vctx;
    muse_matmul_quantize(c->k, c->w.type, c->w.ne0, c->x, c->w.ne0, c->n_act, c->q, c->q_stride, ith, nth);
    muse_threadpool_barrier(c->pool);
    muse_matmul(c->k, &c->w, c->q, c->q_stride, c->n_act, c->out, c->w.n_rows, ith, nth);
}

static void test_driver(const struct muse_kernels *k, enum muse_type type) {
    const int64_t ne0 = 512, n_rows = 203;
    const int n_act_list[] = {1, 6};
    uint8_t *w = malloc((size_t)n_rows * muse_type_row_size(type, ne0));
    for (int64_t i = 0; i < n_rows; i++) kr_weight_row(type, ne0, w + i * muse_type_row_size(type, ne0));
    float *x = malloc((size_t)6 * ne0 * sizeof(float));
    for (int64_t i = 0; i < 6 * ne0; i++) x[i] = kr_float();
    const size_t q_stride = muse_matmul_act_row_size(type, ne0);
    void *q = malloc(6 * q_stride);
    float *outs[4];
    for (int a = 0; a < 2; a++) {
        const int n_act = n_act_list[a];
        for (int t = 0; t < 4; t++) {
            /* t = 0..2: 1, 2, 3 threads with the kernels; t = 3: reference path, 2 threads */
            const int nth = t < 3 ? t + 1 : 2;
            struct drive_ctx c = {.k = t < 3 ? k : NULL,
                                  .w = {type, ne0, n_rows, w, muse_type_row_size(type, ne0)},
                                  .x = x, .q = q, .q_stride = q_stride, .n_act = n_act};
            outs[t] = malloc((size_t)n_act * n_rows * sizeof(float));
            c.out = outs[t];
            muse_threadpool_create(nth, &c.pool, NULL);
            muse_threadpool_run(c.pool, drive_fn, &c);
            muse_threadpool_free(c.pool);
        }
        const size_t bytes = (size_t)n_act * n_rows * sizeof(float);
        TEST_CONDF(memcmp(outs[0], outs[1], bytes) == 0 && memcmp(outs[0], outs[2], bytes) == 0,
                   "%s: %s matmul differs between 1, 2 and 3 threads (n_act %d)", muse_cpu_level_name(k->level),
                   muse_type_layout_get(type)->name, n_act);
        /* reference path: bit-identical to the forward's dot product (ggml's x86 order where
         * x86_numerics.h has one, else vec_dot_ref) on rows quantized by the forward's quantizer */
        int bad = 0, bad_exact = 0;
        void *qr = malloc(q_stride);
        for (int r = 0; r < n_act; r++) {
            const enum muse_type vdt = muse_type_traits[type].vec_dot_type;
            if (vdt == MUSE_TYPE_F32) memcpy(qr, x + r * ne0, sizeof(float) * (size_t)ne0);
            else muse_x86_act_from_float(vdt)(x + r * ne0, qr, ne0);
            for (int64_t i = 0; i < n_rows; i++) {
                float s;
                muse_x86_vec_dot(type)(ne0, &s, w + i * muse_type_row_size(type, ne0), qr);
                bad += memcmp(&s, &outs[3][r * n_rows + i], 4) != 0;
                if (k->exact[type]) bad_exact += memcmp(&s, &outs[0][r * n_rows + i], 4) != 0;
            }
        }
        free(qr);
        TEST_CONDF(bad == 0, "%s: reference matmul path differs from the forward's dot in %d outputs",
                   muse_type_layout_get(type)->name, bad);
        TEST_CONDF(bad_exact == 0, "%s: %s matmul is marked exact but differs from the forward's dot in %d outputs",
                   muse_cpu_level_name(k->level), muse_type_layout_get(type)->name, bad_exact);
        for (int t = 0; t < 4; t++) free(outs[t]);
    }
    free(w);
    free(x);
    free(q);
}

int main(void) {
    const enum muse_cpu_level max = muse_cpu_level_max();
    printf("cpu level: max %s, active %s\n", muse_cpu_level_name(max), muse_cpu_level_name(muse_cpu_level_active()));
    const struct muse_kernels *seen[MUSE_CPU_LEVEL_COUNT];
    int n_seen = 0;
    test_iq2xxs_codes();
    for (int lv = MUSE_CPU_LEVEL_AVX2; lv < MUSE_CPU_LEVEL_COUNT; lv++) {
        const struct muse_kernels *k = muse_kernels_for((enum muse_cpu_level)lv);
        if (!k) {
            printf("SKIP %s kernels: this machine does not support them (not counted as passed)\n",
                   muse_cpu_level_name((enum muse_cpu_level)lv));
            continue;
        }
        bool dup = false;
        for (int i = 0; i < n_seen; i++) dup |= seen[i] == k;
        if (dup || (int)k->level != lv) {
            printf("note: level %s uses the %s table (no kernels of its own)\n",
                   muse_cpu_level_name((enum muse_cpu_level)lv), muse_cpu_level_name(k->level));
            continue;
        }
        seen[n_seen++] = k;
        test_quantizers(k);
        for (size_t t = 0; t < sizeof(gemm_types) / sizeof(gemm_types[0]); t++) test_gemm_type(k, gemm_types[t]);
        test_attention(k);
        test_attention_multi(k);
        test_attention_probs(k);
        test_attention_f32_q8_0(k);
        const enum muse_type drive_types[] = {MUSE_TYPE_Q8_0, MUSE_TYPE_Q4_K, MUSE_TYPE_Q6_K, MUSE_TYPE_IQ2_XXS,
                                              MUSE_TYPE_F16,  MUSE_TYPE_Q4_0, MUSE_TYPE_BF16, MUSE_TYPE_F32,
                                              MUSE_TYPE_IQ3_XXS, MUSE_TYPE_IQ3_S, MUSE_TYPE_IQ4_XS, MUSE_TYPE_Q5_0,
                                              MUSE_TYPE_IQ4_NL, MUSE_TYPE_Q2_K, MUSE_TYPE_Q3_K, MUSE_TYPE_IQ2_XS,
                                              MUSE_TYPE_IQ2_S, MUSE_TYPE_Q4_1, MUSE_TYPE_Q5_1, MUSE_TYPE_IQ1_S,
                                              MUSE_TYPE_TQ2_0, MUSE_TYPE_IQ1_M, MUSE_TYPE_MXFP4,
                                              MUSE_TYPE_TQ1_0, MUSE_TYPE_NVFP4, MUSE_TYPE_Q1_0};
        for (size_t t = 0; t < sizeof(drive_types) / sizeof(drive_types[0]); t++) test_driver(k, drive_types[t]);
    }
    setenv("MUSE_CPU", "scalar", 1);
    const struct muse_kernels *ks = muse_kernels_active();
    unsetenv("MUSE_CPU");
    TEST_COND("MUSE_CPU=scalar gives the scalar table", ks && ks->level == MUSE_CPU_LEVEL_SCALAR);
    return TEST_REPORT();
}
