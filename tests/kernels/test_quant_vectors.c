/*
 * test_quant_vectors.c - every block of shared/data/quant-vectors.json decodes bit-exactly
 * through muse_type_traits[type].to_float (memcmp of the f32 bits, so -0 vs +0 and NaN
 * payloads count). F64 is checked as (float) of the given f64 bits; the integer types must
 * have no to_float. Also checks that every type with a layout has the expected table row.
 */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "test.h"

static char *read_file(const char *path) {
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

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode a hex string into out (capacity cap); returns the byte count or -1. */
static long unhex(const char *s, uint8_t *out, size_t cap) {
    size_t n = strlen(s);
    if (n % 2 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

static int n_blocks_checked;

static void check_type(const char *name, const cJSON *t) {
    const int type = muse_type_from_name(name);
    TEST_CONDF(type >= 0, "%s: unknown type name", name);
    if (type < 0) return;
    const struct muse_type_layout *lay = muse_type_layout_get((uint32_t)type);
    const struct muse_type_traits *tr = &muse_type_traits[type];
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(t, "blocks");
    TEST_CONDF(cJSON_IsArray(blocks) && cJSON_GetArraySize(blocks) > 0, "%s: no blocks", name);
    const bool is_int = type == MUSE_TYPE_I8 || type == MUSE_TYPE_I16 || type == MUSE_TYPE_I32 ||
                        type == MUSE_TYPE_I64;
    if (is_int) {
        TEST_CONDF(tr->to_float == NULL && tr->vec_dot_ref == NULL, "%s: integer type has numerics", name);
        return;
    }
    TEST_CONDF(tr->to_float != NULL, "%s: no to_float", name);
    if (!tr->to_float) return;

    const cJSON *b;
    int bi = 0;
    cJSON_ArrayForEach(b, blocks) {
        uint8_t raw[4096];
        const cJSON *hex = cJSON_GetObjectItemCaseSensitive(b, "hex");
        long nbytes = cJSON_IsString(hex) ? unhex(hex->valuestring, raw, sizeof raw) : -1;
        TEST_CONDF(nbytes > 0 && nbytes % (long)lay->type_size == 0, "%s block %d: bad hex", name, bi);
        if (nbytes <= 0 || nbytes % (long)lay->type_size) { bi++; continue; }
        const int64_t n = nbytes / (long)lay->type_size * lay->block_size;
        const bool f64 = type == MUSE_TYPE_F64;
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(b, f64 ? "f64_bits" : "f32_bits");
        TEST_CONDF(cJSON_IsArray(bits) && cJSON_GetArraySize(bits) == n, "%s block %d: %lld expected values",
                   name, bi, (long long)n);
        if (!cJSON_IsArray(bits) || cJSON_GetArraySize(bits) != n) { bi++; continue; }
        float *want = malloc((size_t)n * sizeof(float));
        float *got = malloc((size_t)n * sizeof(float));
        /* poison the output so an element the decoder skips cannot match by accident */
        memset(got, 0xa5, (size_t)n * sizeof(float));
        int k = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, bits) {
            if (f64) {
                uint64_t u = strtoull(v->valuestring, NULL, 16);
                double dv;
                memcpy(&dv, &u, 8);
                want[k++] = (float)dv;
            } else {
                uint32_t u = (uint32_t)strtoul(v->valuestring, NULL, 16);
                memcpy(&want[k++], &u, 4);
            }
        }
        tr->to_float(raw, got, n);
        int first_bad = -1;
        for (int64_t j = 0; j < n && first_bad < 0; j++)
            if (memcmp(&want[j], &got[j], 4)) first_bad = (int)j;
        const cJSON *edge = cJSON_GetObjectItemCaseSensitive(b, "edge_case");
        if (first_bad >= 0) {
            uint32_t w, g;
            memcpy(&w, &want[first_bad], 4);
            memcpy(&g, &got[first_bad], 4);
            TEST_CONDF(0, "%s block %d%s%s: y[%d] = %08x (%g), want %08x (%g)", name, bi,
                       edge ? " edge " : "", edge ? edge->valuestring : "", first_bad, g, got[first_bad], w,
                       want[first_bad]);
        } else {
            TEST_COND(name, 1);
            n_blocks_checked++;
        }
        free(want);
        free(got);
        bi++;
    }
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/quant-vectors.json", test_shared_dir());
    char *text = read_file(path);
    TEST_CONDF(text != NULL, "cannot read %s", path);
    if (!text) return TEST_REPORT();
    cJSON *root = cJSON_Parse(text);
    TEST_COND("quant-vectors.json parses", root != NULL);
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "types");
    int n_types = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, types) {
        check_type(t->string, t);
        n_types++;
    }
    /* the file covers every standard type (spec 2.12): 34 of them */
    TEST_CONDF(n_types == 34, "expected 34 types in the vectors, got %d", n_types);
    TEST_CONDF(n_blocks_checked >= 90, "only %d blocks checked", n_blocks_checked);

    /* table shape: every id with a layout and a numeric role has the expected pieces */
    for (int id = 0; id < MUSE_TYPE_COUNT; id++) {
        const struct muse_type_layout *l = muse_type_layout_get((uint32_t)id);
        const struct muse_type_traits *tr = &muse_type_traits[id];
        if (!l) {
            TEST_CONDF(!tr->to_float && !tr->from_float && !tr->vec_dot_ref, "id %d: row without layout", id);
            continue;
        }
        if (tr->vec_dot_ref) {
            const struct muse_type_traits *a = &muse_type_traits[tr->vec_dot_type];
            TEST_CONDF(a->from_float != NULL, "%s: activation type %d has no quantizer", l->name,
                       tr->vec_dot_type);
        }
    }
    printf("%d types, %d blocks bit-exact\n", n_types, n_blocks_checked);
    cJSON_Delete(root);
    free(text);
    return TEST_REPORT();
}
