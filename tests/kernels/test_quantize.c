/*
 * test_quantize.c - the reference quantizers (gguf-and-quants.md 2.3, 2.11): the verified tie
 * cases of Q8_0 and Q8_K, Q8_0's use of the unrounded d, Q8_1's s field, Q8_K bsums and the
 * zero block, fp16/bf16 rounding of activations, and quantize -> dequantize error bounds of
 * every writer quantizer (with exact round trips where the spec makes them exact), and the
 * K-quant weight quantizers' round-trip error (ggml's test-quantize-fns thresholds).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quant_random.h"
#include "kernels/quant_ref.h"
#include "kernels/types.h"
#include "test.h"

static void test_q8_0_ties(void) {
    float x[32] = {127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 126.5f, -126.5f};
    const int8_t want[8] = {127, 1, 2, -3, -1, 3, 127, -127};
    struct muse_block_q8_0 b;
    muse_type_traits[MUSE_TYPE_Q8_0].from_float(x, &b, 32);
    TEST_CONDF(b.d == 0x3c00, "q8_0 tie block: d bits %04x, want 3c00", b.d);
    for (int j = 0; j < 8; j++) TEST_CONDF(b.qs[j] == want[j], "q8_0 tie q[%d] = %d, want %d", j, b.qs[j], want[j]);
    for (int j = 8; j < 32; j++) TEST_CONDF(b.qs[j] == 0, "q8_0 tie q[%d] = %d, want 0", j, b.qs[j]);
}

/* id must come from the unrounded d = amax/127: with amax = 100 the fp16 d is 2.5e-4 larger,
 * which moves x/d = 125.51 below the rounding point (125.48). */
static void test_q8_0_unrounded_d(void) {
    float x[32] = {0};
    const float d = 100.0f / 127.0f;
    x[0] = 100.0f;
    x[1] = 125.51f * d;
    x[2] = -125.51f * d;
    const float dh = muse_fp16_to_fp32(muse_fp32_to_fp16(d));
    TEST_COND("test design: fp16 d would round differently", roundf(x[1] / dh) == 125.0f);
    struct muse_block_q8_0 b;
    muse_type_traits[MUSE_TYPE_Q8_0].from_float(x, &b, 32);
    TEST_CONDF(b.qs[0] == 127 && b.qs[1] == 126 && b.qs[2] == -126, "q8_0 unrounded d: %d %d %d, want 127 126 -126",
               b.qs[0], b.qs[1], b.qs[2]);
}

static void test_q8_1(void) {
    /* same tie block as Q8_0: codes identical, s = fp16(1 * (127+1+2-3-1+3+127-127)) = 129 */
    float x[64] = {127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 126.5f, -126.5f};
    for (int j = 0; j < 32; j++) x[32 + j] = (float)(j - 16) * 0.25f;   /* second block, amax 4 */
    struct muse_block_q8_1 b[2];
    muse_type_traits[MUSE_TYPE_Q8_1].from_float(x, b, 64);
    TEST_CONDF(b[0].d == 0x3c00 && muse_fp16_to_fp32(b[0].s) == 129.0f, "q8_1 s = %g, want 129",
               muse_fp16_to_fp32(b[0].s));
    struct muse_block_q8_0 c;
    muse_type_traits[MUSE_TYPE_Q8_0].from_float(x + 32, &c, 32);
    TEST_COND("q8_1 codes equal q8_0 codes", memcmp(c.qs, b[1].qs, 32) == 0 && c.d == b[1].d);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += b[1].qs[j];
    /* s is rounded from sum * (unrounded d = 4/127) */
    const uint16_t want = muse_fp32_to_fp16((float)sum * (4.0f / 127.0f));
    TEST_CONDF(b[1].s == want, "q8_1 block 1: s bits %04x, want %04x (sum %d)", b[1].s, want, sum);
    TEST_COND("q8_1 s is non-trivial", sum != 0);
}

static void test_q8_K(void) {
    float x[256] = {-127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 3.5f, -3.5f};
    const int8_t want[8] = {-127, 0, 2, -2, 0, 2, 4, -4};
    struct muse_block_q8_K b;
    muse_type_traits[MUSE_TYPE_Q8_K].from_float(x, &b, 256);
    TEST_CONDF(b.d == 1.0f, "q8_K tie block: d = %g, want 1", b.d);
    for (int j = 0; j < 8; j++) TEST_CONDF(b.qs[j] == want[j], "q8_K tie q[%d] = %d, want %d", j, b.qs[j], want[j]);
    TEST_CONDF(b.bsums[0] == -125, "q8_K bsums[0] = %d, want -125", b.bsums[0]);
    for (int k = 1; k < 16; k++) TEST_CONDF(b.bsums[k] == 0, "q8_K bsums[%d] = %d", k, b.bsums[k]);

    /* first maximum wins on a magnitude tie: +3 first -> d < 0, x[0] -> -127, x[1] -> +127 */
    float t[256] = {3.0f, -3.0f, 1.0f};
    muse_type_traits[MUSE_TYPE_Q8_K].from_float(t, &b, 256);
    TEST_CONDF(b.qs[0] == -127 && b.qs[1] == 127 && b.d < 0.0f, "q8_K +3,-3: %d %d d=%g", b.qs[0], b.qs[1], b.d);
    TEST_CONDF(b.qs[2] == -42, "q8_K 1 -> %d, want nearest_int(-127/3) = -42", b.qs[2]);
    TEST_CONDF(fabsf(b.d + 3.0f / 127.0f) < 1e-7f, "q8_K d = %g, want -3/127", b.d);
    t[0] = -3.0f; t[1] = 3.0f;
    muse_type_traits[MUSE_TYPE_Q8_K].from_float(t, &b, 256);
    TEST_CONDF(b.qs[0] == -127 && b.qs[1] == 127 && b.d > 0.0f, "q8_K -3,+3: %d %d d=%g", b.qs[0], b.qs[1], b.d);

    /* all-zero block: d = 0, all codes and bsums 0 */
    float z[256] = {0};
    memset(&b, 0x5a, sizeof b);
    muse_type_traits[MUSE_TYPE_Q8_K].from_float(z, &b, 256);
    int nz = 0;
    for (int j = 0; j < 256; j++) nz += b.qs[j] != 0;
    for (int k = 0; k < 16; k++) nz += b.bsums[k] != 0;
    TEST_CONDF(b.d == 0.0f && nz == 0, "q8_K zero block: d %g, %d nonzero", b.d, nz);

    /* bsums of a random block are the 16-element sums; values round-trip within d/2 */
    uint64_t rng = 7;
    float r[512], back[512];
    muse_quant_random_row(MUSE_TYPE_F32, r, 512, &rng, 3.0f);
    struct muse_block_q8_K bb[2];
    muse_type_traits[MUSE_TYPE_Q8_K].from_float(r, bb, 512);
    muse_type_traits[MUSE_TYPE_Q8_K].to_float(bb, back, 512);
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += bb[i].qs[16 * k + j];
            bad += s != bb[i].bsums[k];
        }
    TEST_CONDF(bad == 0, "q8_K: %d inconsistent bsums", bad);
    float maxerr = 0;
    for (int j = 0; j < 512; j++) maxerr = fmaxf(maxerr, fabsf(back[j] - r[j]) / fabsf(bb[j / 256].d));
    TEST_CONDF(maxerr <= 0.5f + 1e-4f, "q8_K round trip: max error %g d", maxerr);
}

static void test_fp16_bf16(void) {
    const float in[] = {1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 0x1p-25f, 0x1.8p-25f, 0x1p-24f,
                        -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, NAN};
    const uint16_t want16[] = {0x3c00, 0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x0000, 0x0001, 0x0001,
                               0x8000, 0x3c00, 0x3c02, 0x7e00};
    const int n = (int)(sizeof in / sizeof in[0]);
    uint16_t out[16];
    muse_type_traits[MUSE_TYPE_F16].from_float(in, out, n);
    for (int i = 0; i < n; i++) TEST_CONDF(out[i] == want16[i], "f16(%a) = %04x, want %04x", in[i], out[i], want16[i]);

    const uint32_t bin[] = {0x3f800000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0x7f800001, 0xff800000};
    const uint16_t wantb[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7fc0, 0xff80};
    float fb[7];
    for (int i = 0; i < 7; i++) fb[i] = muse_f32_from_bits(bin[i]);
    muse_type_traits[MUSE_TYPE_BF16].from_float(fb, out, 7);
    for (int i = 0; i < 7; i++) TEST_CONDF(out[i] == wantb[i], "bf16(%08x) = %04x, want %04x", bin[i], out[i], wantb[i]);

    /* F32 from_float is a copy; F16/BF16 round trips are idempotent */
    float r[64], q[64], back[64];
    uint64_t rng = 11;
    muse_quant_random_row(MUSE_TYPE_F32, r, 64, &rng, 10.0f);
    muse_type_traits[MUSE_TYPE_F32].from_float(r, q, 64);
    TEST_COND("f32 from_float copies", memcmp(r, q, sizeof r) == 0);
    uint16_t h1[64], h2[64];
    muse_type_traits[MUSE_TYPE_F16].from_float(r, h1, 64);
    muse_type_traits[MUSE_TYPE_F16].to_float(h1, back, 64);
    muse_type_traits[MUSE_TYPE_F16].from_float(back, h2, 64);
    int rel_ok = 1;
    for (int i = 0; i < 64; i++) rel_ok &= fabsf(back[i] - r[i]) <= fabsf(r[i]) * 0x1p-11f;
    TEST_COND("f16 round trip idempotent and within half an ulp", memcmp(h1, h2, sizeof h1) == 0 && rel_ok);
}

static float max_abs(const float *x, int n) {
    float m = 0;
    for (int j = 0; j < n; j++) m = fmaxf(m, fabsf(x[j]));
    return m;
}

static void test_writer_bounds(void) {
    enum { N = 1024 };
    float x[N], back[N];
    uint8_t q[N * 2];
    uint64_t rng = 12345;
    for (int rep = 0; rep < 4; rep++) {
        muse_quant_random_row(MUSE_TYPE_F32, x, N, &rng, rep == 0 ? 1e-3f : (float)(rep * 5));
        if (rep == 3) for (int j = 0; j < N; j += 7) x[j] = 0.0f;   /* exact zeros */

        /* Q4_0 / Q5_0: d = max/-8 (-16); error <= d/2 except the clamped +amax side (<= d) */
        const enum muse_type sym[2] = {MUSE_TYPE_Q4_0, MUSE_TYPE_Q5_0};
        for (int k = 0; k < 2; k++) {
            muse_type_traits[sym[k]].from_float(x, q, N);
            muse_type_traits[sym[k]].to_float(q, back, N);
            float worst = 0, rms = 0;
            for (int b = 0; b < N / 32; b++) {
                const float d = fabsf(muse_fp16_to_fp32(((const uint16_t *)(q + b * (k ? 22 : 18)))[0]));
                for (int j = 32 * b; j < 32 * b + 32; j++) {
                    float e = fabsf(back[j] - x[j]) / d;
                    worst = fmaxf(worst, e);
                    rms += e * e;
                }
            }
            rms = sqrtf(rms / N);
            TEST_CONDF(worst <= 1.01f && rms <= 0.4f, "%s rep %d: max err %g d, rms %g d",
                       k ? "q5_0" : "q4_0", rep, worst, rms);
        }
        /* Q4_1 / Q5_1: d = (max-min)/15 (31), m = min: error <= d/2 (+ fp16 of m) */
        const enum muse_type asym[2] = {MUSE_TYPE_Q4_1, MUSE_TYPE_Q5_1};
        for (int k = 0; k < 2; k++) {
            muse_type_traits[asym[k]].from_float(x, q, N);
            muse_type_traits[asym[k]].to_float(q, back, N);
            float worst = 0;
            for (int b = 0; b < N / 32; b++) {
                const uint16_t *hd = (const uint16_t *)(q + b * (k ? 24 : 20));
                const float d = muse_fp16_to_fp32(hd[0]), m = muse_fp16_to_fp32(hd[1]);
                for (int j = 32 * b; j < 32 * b + 32; j++)
                    worst = fmaxf(worst, (fabsf(back[j] - x[j]) - fabsf(m) * 0x1p-10f) / d);
            }
            TEST_CONDF(worst <= 0.52f, "%s rep %d: max err %g d", k ? "q5_1" : "q4_1", rep, worst);
        }
        /* Q8_0: error <= d/2 plus 127 times the fp16 rounding error of d (large when d is an
         * fp16 subnormal, as in rep 0) */
        muse_type_traits[MUSE_TYPE_Q8_0].from_float(x, q, N);
        muse_type_traits[MUSE_TYPE_Q8_0].to_float(q, back, N);
        float worst = 0;
        for (int b = 0; b < N / 32; b++) {
            const float d = max_abs(x + 32 * b, 32) / 127.0f;
            const float dh = muse_fp16_to_fp32(((const uint16_t *)(q + b * 34))[0]);
            const float bound = 0.5f * d + 127.0f * fabsf(dh - d) + 1e-6f * d;
            for (int j = 32 * b; j < 32 * b + 32; j++) worst = fmaxf(worst, fabsf(back[j] - x[j]) / bound);
        }
        TEST_CONDF(worst <= 1.0f, "q8_0 rep %d: max err %g of the bound", rep, worst);

        /* Q1_0: y = +-fp16(mean|x|) with the sign of x (x >= 0 -> +) */
        muse_type_traits[MUSE_TYPE_Q1_0].from_float(x, q, N);
        muse_type_traits[MUSE_TYPE_Q1_0].to_float(q, back, N);
        int bad = 0;
        for (int b = 0; b < N / 128; b++) {
            float mean = 0;
            for (int j = 128 * b; j < 128 * b + 128; j++) mean += fabsf(x[j]);
            mean = muse_fp16_to_fp32(muse_fp32_to_fp16(mean / 128.0f));
            for (int j = 128 * b; j < 128 * b + 128; j++) bad += back[j] != (x[j] >= 0.0f ? mean : -mean);
        }
        TEST_CONDF(bad == 0, "q1_0 rep %d: %d wrong elements", rep, bad);

        /* TQ1_0 / TQ2_0: y = d * round(x/d), d = amax: error <= d/2 (+ fp16 of d) */
        const enum muse_type ter[2] = {MUSE_TYPE_TQ1_0, MUSE_TYPE_TQ2_0};
        for (int k = 0; k < 2; k++) {
            muse_type_traits[ter[k]].from_float(x, q, N);
            muse_type_traits[ter[k]].to_float(q, back, N);
            float w = 0;
            for (int b = 0; b < N / 256; b++) {
                const float amax = max_abs(x + 256 * b, 256);
                for (int j = 256 * b; j < 256 * b + 256; j++) w = fmaxf(w, fabsf(back[j] - x[j]) / amax);
            }
            TEST_CONDF(w <= 0.5f + 1e-3f, "%s rep %d: max err %g amax", k ? "tq2_0" : "tq1_0", rep, w);
        }
        /* MXFP4: scale s = 2^(floor(log2 amax) - 2), amax in [4s, 8s): error <= 2s */
        muse_type_traits[MUSE_TYPE_MXFP4].from_float(x, q, N);
        muse_type_traits[MUSE_TYPE_MXFP4].to_float(q, back, N);
        float wm = 0;
        for (int b = 0; b < N / 32; b++) {
            const float amax = max_abs(x + 32 * b, 32);
            if (amax == 0.0f) continue;
            const float s = exp2f(floorf(log2f(amax)) - 2.0f);
            for (int j = 32 * b; j < 32 * b + 32; j++) wm = fmaxf(wm, fabsf(back[j] - x[j]) / s);
        }
        TEST_CONDF(wm <= 2.0f, "mxfp4 rep %d: max err %g s", rep, wm);
        /* NVFP4: per 16, scale ~ amax/6 (3-bit mantissa): error <= amax/5 */
        muse_type_traits[MUSE_TYPE_NVFP4].from_float(x, q, N);
        muse_type_traits[MUSE_TYPE_NVFP4].to_float(q, back, N);
        float wn = 0;
        for (int b = 0; b < N / 16; b++) {
            const float amax = max_abs(x + 16 * b, 16);
            if (amax < 1e-2f) continue;   /* below the UE4M3 normal range the scale underflows */
            for (int j = 16 * b; j < 16 * b + 16; j++) wn = fmaxf(wn, fabsf(back[j] - x[j]) / amax);
        }
        TEST_CONDF(wn <= 0.2f, "nvfp4 rep %d: max err %g amax", rep, wn);
    }
}

/*
 * K-quant weight quantizers (ggml's quantize_row_<t>_ref; bytes checked against ggml in
 * test_ggml_ref): dequantize(quantize(x)) on ggml's test-quantize-fns data 0.1 + 2 cos(i + off)
 * within its thresholds (its metric: sqrt(sum err^2) / n), on random normal-ish rows within a
 * relative RMS error per type, and all-zero input to all-zero bytes that decode to 0.
 */
static void test_kquant_round_trips(void) {
    enum { N = 32 * 128 };
    static float x[N], back[N];
    static uint8_t q[N * 2];
    const struct { enum muse_type t; float ggml_max, rel_rms; } cases[] = {
        {MUSE_TYPE_Q2_K, 0.0075f, 0.30f}, {MUSE_TYPE_Q3_K, 0.0040f, 0.16f}, {MUSE_TYPE_Q4_K, 0.002f, 0.08f},
        {MUSE_TYPE_Q5_K, 0.002f, 0.04f}, {MUSE_TYPE_Q6_K, 0.002f, 0.023f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const enum muse_type t = cases[c].t;
        const char *name = muse_type_layout_get(t)->name;
        for (int i = 0; i < N; i++) x[i] = 0.1f + 2.0f * cosf((float)i);
        muse_type_traits[t].from_float(x, q, N);
        muse_type_traits[t].to_float(q, back, N);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += (double)(back[i] - x[i]) * (back[i] - x[i]);
        const float ggml_err = sqrtf((float)sum) / N;
        TEST_CONDF(ggml_err < cases[c].ggml_max, "%s: test-quantize-fns error %g >= %g", name, ggml_err, cases[c].ggml_max);

        uint64_t rng = 777 + c;
        for (int rep = 0; rep < 3; rep++) {
            muse_quant_random_row(MUSE_TYPE_F32, x, N, &rng, rep == 0 ? 1e-3f : rep == 1 ? 1.0f : 50.0f);
            muse_type_traits[t].from_float(x, q, N);
            muse_type_traits[t].to_float(q, back, N);
            double se = 0, sx = 0;
            for (int i = 0; i < N; i++) {
                se += (double)(back[i] - x[i]) * (back[i] - x[i]);
                sx += (double)x[i] * x[i];
            }
            const double rel = sqrt(se / sx);
            TEST_CONDF(rel < cases[c].rel_rms, "%s rep %d: relative RMS error %g >= %g", name, rep, rel, cases[c].rel_rms);
        }
        memset(x, 0, sizeof x);
        memset(q, 0xcc, sizeof q);
        muse_type_traits[t].from_float(x, q, N);
        muse_type_traits[t].to_float(q, back, N);
        const size_t rs = muse_type_row_size(t, N);
        int nonzero = 0;
        for (size_t i = 0; i < rs; i++) nonzero += q[i] != 0;
        for (int i = 0; i < N; i++) nonzero += back[i] != 0.0f;
        TEST_CONDF(nonzero == 0, "%s: all-zero input gives %d non-zero bytes/values", name, nonzero);
    }
}

/* Values that sit exactly on the grid come back bit-exact. */
static void test_exact_round_trips(void) {
    /* ternary: {-0.5, 0, 0.5}, d = 0.5 exactly */
    float x[512], back[512];
    uint8_t q[1024];
    uint64_t rng = 99;
    for (int j = 0; j < 512; j++) x[j] = 0.5f * (float)((int)(rng = rng * 6364136223846793005ull + 1442695040888963407ull, (rng >> 33) % 3) - 1);
    x[5] = 0.5f;
    for (int k = 0; k < 2; k++) {
        enum muse_type t = k ? MUSE_TYPE_TQ2_0 : MUSE_TYPE_TQ1_0;
        muse_type_traits[t].from_float(x, q, 512);
        muse_type_traits[t].to_float(q, back, 512);
        TEST_CONDF(memcmp(x, back, sizeof x) == 0, "%s exact ternary round trip", k ? "tq2_0" : "tq1_0");
    }
    /* MXFP4 with amax 6 (scale 1) and NVFP4 with amax 6 per 16 (scale 0x38): E2M1 values exact */
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 512; j++) x[j] = e2m1[(j * 7 + j / 3) % 8] * ((j & 1) ? -1.0f : 1.0f) + 0.0f;
    for (int j = 0; j < 512; j += 16) x[j] = 6.0f;
    muse_type_traits[MUSE_TYPE_MXFP4].from_float(x, q, 512);
    TEST_CONDF(q[0] == 127, "mxfp4 e for amax 6 = %d, want 127", q[0]);
    muse_type_traits[MUSE_TYPE_MXFP4].to_float(q, back, 512);
    TEST_COND("mxfp4 exact E2M1 round trip", memcmp(x, back, sizeof x) == 0);
    muse_type_traits[MUSE_TYPE_NVFP4].from_float(x, q, 512);
    TEST_CONDF(q[0] == 0x38 && q[3] == 0x38, "nvfp4 scale byte for amax 6 = %02x, want 38", q[0]);
    muse_type_traits[MUSE_TYPE_NVFP4].to_float(q, back, 512);
    TEST_COND("nvfp4 exact E2M1 round trip", memcmp(x, back, sizeof x) == 0);
    /* UE4M3 scale encoding (ggml_fp32_to_ue4m3): amax/6 = 200 -> 1.5625 * 2^7 rounds half up to
     * 0x75; anything reaching the top exponent (300, 250 rounding up) saturates to 0x7E; below 2^-6
     * the subnormal code is (int)(v * 512 + 0.5): 2^-10 -> 1, 2^-11 -> 0 */
    const float amaxes[5] = {1200.0f, 1800.0f, 1500.0f, 6.0f * 0x1p-10f, 6.0f * 0x1p-11f};
    const uint8_t want_u[5] = {0x75, 0x7e, 0x7e, 0x01, 0x00};
    for (int k = 0; k < 5; k++) {
        float row[64] = {amaxes[k]};
        uint8_t blk[36];
        muse_type_traits[MUSE_TYPE_NVFP4].from_float(row, blk, 64);
        TEST_CONDF(blk[0] == want_u[k], "nvfp4 scale byte for amax %g = %02x, want %02x", amaxes[k], blk[0], want_u[k]);
    }
    /* Q8_0 of integers with amax 127: d = 1, exact */
    for (int j = 0; j < 512; j++) x[j] = (float)((j * 37) % 255 - 127);
    for (int j = 0; j < 512; j += 32) x[j] = 127.0f;
    muse_type_traits[MUSE_TYPE_Q8_0].from_float(x, q, 512);
    muse_type_traits[MUSE_TYPE_Q8_0].to_float(q, back, 512);
    TEST_COND("q8_0 exact integer round trip", memcmp(x, back, sizeof x) == 0);
    /* Q4_0 of (k - 8) with max -8: d = 1, exact */
    for (int j = 0; j < 512; j++) x[j] = (float)((j * 5) % 16 - 8);
    for (int j = 0; j < 512; j += 32) x[j] = -8.0f;
    muse_type_traits[MUSE_TYPE_Q4_0].from_float(x, q, 512);
    muse_type_traits[MUSE_TYPE_Q4_0].to_float(q, back, 512);
    TEST_COND("q4_0 exact round trip", memcmp(x, back, sizeof x) == 0);
}

/* ggml's x86 variant: id = 127/amax, ties to even. */
static void test_q8_x86(void) {
    float x[32] = {127, 0.5f, 1.5f, -2.5f, -0.5f, 2.5f, 126.5f, -126.5f};
    const int8_t want[8] = {127, 0, 2, -2, 0, 2, 126, -126};
    struct muse_block_q8_0 b;
    muse_from_float_q8_0_x86(x, &b, 32);
    TEST_CONDF(b.d == 0x3c00, "q8_0 x86 tie block: d bits %04x", b.d);
    for (int j = 0; j < 8; j++) TEST_CONDF(b.qs[j] == want[j], "q8_0 x86 tie q[%d] = %d, want %d", j, b.qs[j], want[j]);
    struct muse_block_q8_1 c;
    muse_from_float_q8_1_x86(x, &c, 32);
    TEST_CONDF(memcmp(c.qs, b.qs, 32) == 0 && muse_fp16_to_fp32(c.s) == 129.0f, "q8_1 x86: s = %g, want 129",
               muse_fp16_to_fp32(c.s));
    /* find amax and x with nearbyint(x * 127/amax) != nearbyint(x * 1/(amax/127)): the x86
     * variant must follow 127/amax */
    int found = 0;
    for (int k = 1; k < 4096 && !found; k++) {
        const float amax = 1.0f + (float)k * 0x1p-12f;
        const float id_ref = 1.0f / (amax / 127.0f), id_x86 = 127.0f / amax;
        if (id_ref == id_x86) continue;
        for (int q = 1; q < 126 && !found; q++) {
            float xv = ((float)q + 0.5f) / id_x86;
            for (int step = 0; step < 6 && !found; step++, xv = nextafterf(xv, 0.0f)) {
                if (nearbyintf(xv * id_x86) == nearbyintf(xv * id_ref)) continue;
                float row[32] = {amax, xv};
                muse_from_float_q8_0_x86(row, &b, 32);
                TEST_CONDF(b.qs[1] == (int8_t)nearbyintf(xv * id_x86), "q8_0 x86 uses 127/amax (amax %a x %a)", amax, xv);
                found = 1;
            }
        }
    }
    TEST_COND("found an amax separating 127/amax from 1/d", found);
}

/* Non-finite activations (a diverged or hostile model) give code 0, without undefined casts (UBSan run). */
static void test_q8_non_finite(void) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)j - 16.0f;
    x[3] = NAN;
    struct muse_block_q8_0 b0;
    struct muse_block_q8_1 b1;
    muse_from_float_q8_0(x, &b0, 32);
    muse_from_float_q8_1(x, &b1, 32);
    TEST_COND("q8_0 NaN -> 0", b0.qs[3] == 0 && b0.qs[0] == -127);
    TEST_COND("q8_1 NaN -> 0", b1.qs[3] == 0 && b1.qs[0] == -127);
    x[3] = INFINITY;
    muse_from_float_q8_0(x, &b0, 32);
    int zeros = 0;
    for (int j = 0; j < 32; j++) zeros += b0.qs[j] == 0;
    TEST_CONDF(zeros == 32, "q8_0 with inf: every code 0 (got %d zeros)", zeros);
}

int main(void) {
    test_q8_0_ties();
    test_q8_0_unrounded_d();
    test_q8_1();
    test_q8_K();
    test_q8_x86();
    test_fp16_bf16();
    test_writer_bounds();
    test_exact_round_trips();
    test_kquant_round_trips();
    test_q8_non_finite();
    return TEST_REPORT();
}
