/*
 * test_ggml_ref.c - muse's reference kernels against outputs of ggml's own C code, stored in
 * tests/kernels/data/ggml_ref.json (written by data/gen_ggml_ref.c, which links ggml's
 * ggml-quants.c and ggml-cpu/quants.c): for every quantized weight type, vec_dot_ref on the
 * stored rows must return exactly ggml_vec_dot_*_generic's f32 bits, the activation
 * quantizers Q8_0, Q8_1, Q8_K must reproduce quantize_row_*_ref's bytes, and the x86 variants
 * muse_from_float_q8_{0,1}_x86 the bytes of ggml's AVX2 quantize_row_q8_{0,1}, and every weight
 * quantizer (Q4_0..Q5_1, Q2_K..Q6_K, TQ1_0, TQ2_0, Q1_0, MXFP4, NVFP4) the bytes of ggml's
 * quantize_row_<t>_ref on two stored inputs (random, and sub-blocks of edge patterns). Run from the
 * repository root (scripts/run-tests.sh does).
 */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant_ref.h"
#include "kernels/types.h"
#include "test.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

/* Hex string -> bytes; returns the byte count or -1. */
static long unhex(const cJSON *s, uint8_t *out, size_t cap) {
    if (!cJSON_IsString(s)) return -1;
    size_t n = strlen(s->valuestring);
    if (n % 2 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s->valuestring + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    return (long)(n / 2);
}

int main(void) {
    const char *path = "tests/kernels/data/ggml_ref.json";
    char *text = slurp(path);
    TEST_CONDF(text != NULL, "cannot read %s (run from the repository root)", path);
    if (!text) return TEST_REPORT();
    cJSON *root = cJSON_Parse(text);
    TEST_COND("ggml_ref.json parses", root != NULL);
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(root, "n");
    const int64_t n = cJSON_IsNumber(jn) ? (int64_t)jn->valuedouble : 0;
    static uint8_t x[1 << 16], y[1 << 16], q[1 << 16];
    int n_dots = 0, n_quants = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "dots")) {
        const int t = muse_type_from_name(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring);
        TEST_CONDF(t >= 0 && muse_type_traits[t].vec_dot_ref, "dot case: bad type");
        if (t < 0 || !muse_type_traits[t].vec_dot_ref) continue;
        const enum muse_type at = muse_type_traits[t].vec_dot_type;
        const long nx = unhex(cJSON_GetObjectItemCaseSensitive(c, "x"), x, sizeof x);
        const long ny = unhex(cJSON_GetObjectItemCaseSensitive(c, "y"), y, sizeof y);
        TEST_CONDF(nx == (long)muse_type_row_size((enum muse_type)t, n) && ny == (long)muse_type_row_size(at, n),
                   "%s: row sizes %ld %ld", muse_type_layout_get((uint32_t)t)->name, nx, ny);
        uint32_t want = (uint32_t)strtoul(cJSON_GetObjectItemCaseSensitive(c, "f32_bits")->valuestring, NULL, 16);
        float s = 0;
        muse_type_traits[t].vec_dot_ref(n, &s, x, y);
        uint32_t got;
        memcpy(&got, &s, 4);
        TEST_CONDF(got == want, "%s . %s: %08x (%.9g), ggml %08x", muse_type_layout_get((uint32_t)t)->name,
                   muse_type_layout_get(at)->name, got, s, want);
        n_dots++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "quants")) {
        const int t = muse_type_from_name(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring);
        TEST_CONDF(t >= 0 && muse_type_traits[t].from_float, "quant case: bad type");
        if (t < 0 || !muse_type_traits[t].from_float) continue;
        float f[4096];
        const long nf = unhex(cJSON_GetObjectItemCaseSensitive(c, "x"), (uint8_t *)f, sizeof f);
        const long nq = unhex(cJSON_GetObjectItemCaseSensitive(c, "q"), q, sizeof q);
        TEST_CONDF(nf == n * 4 && nq == (long)muse_type_row_size((enum muse_type)t, n), "quant case sizes");
        const char *variant = cJSON_GetObjectItemCaseSensitive(c, "variant")->valuestring;
        const bool x86 = !strcmp(variant, "x86");
        muse_from_float_fn fq = muse_type_traits[t].from_float;
        if (x86) fq = t == MUSE_TYPE_Q8_0 ? muse_from_float_q8_0_x86 : t == MUSE_TYPE_Q8_1 ? muse_from_float_q8_1_x86 : NULL;
        TEST_CONDF(fq != NULL, "no %s quantizer for type %d", variant, t);
        if (!fq) continue;
        memset(y, 0xcc, (size_t)nq);
        fq(f, y, n);
        TEST_CONDF(memcmp(y, q, (size_t)nq) == 0, "%s %s quantizer differs from ggml's", muse_type_layout_get((uint32_t)t)->name,
                   variant);
        n_quants++;
    }
    /* weight quantizers: every case against the same stored inputs */
    static float win[2][4096];
    int n_inputs = 0, n_weight = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "weight_inputs")) {
        if (n_inputs >= 2) break;
        TEST_CONDF(unhex(c, (uint8_t *)win[n_inputs], sizeof win[n_inputs]) == n * 4, "weight input %d size", n_inputs);
        n_inputs++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "weight_quants")) {
        const int t = muse_type_from_name(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring);
        const int inp = (int)cJSON_GetObjectItemCaseSensitive(c, "input")->valuedouble;
        TEST_CONDF(t >= 0 && muse_type_traits[t].from_float && inp >= 0 && inp < n_inputs, "weight case: bad type/input");
        if (t < 0 || !muse_type_traits[t].from_float || inp < 0 || inp >= n_inputs) continue;
        const long nq = unhex(cJSON_GetObjectItemCaseSensitive(c, "q"), q, sizeof q);
        TEST_CONDF(nq == (long)muse_type_row_size((enum muse_type)t, n), "weight case size");
        memset(y, 0xcc, (size_t)nq);
        muse_type_traits[t].from_float(win[inp], y, n);
        long first = -1;
        for (long k = 0; k < nq && first < 0; k++) if (y[k] != q[k]) first = k;
        TEST_CONDF(first < 0, "%s weight quantizer differs from ggml's quantize_row_*_ref on input %d at byte %ld",
                   muse_type_layout_get((uint32_t)t)->name, inp, first);
        n_weight++;
    }
    TEST_CONDF(n_dots == 48 && n_quants == 10 && n_weight == 28, "%d dot cases, %d quant cases, %d weight cases",
               n_dots, n_quants, n_weight);
    cJSON_Delete(root);
    free(text);
    return TEST_REPORT();
}
