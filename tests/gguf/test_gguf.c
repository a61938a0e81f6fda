/*
 * GGUF reader and writer: the worked example of gguf-and-quants.md 1.9 (written byte-for-byte,
 * parsed back), the typed getters' strictness, every golden .gguf (parses, data inside the file,
 * rewrites byte-identically), and hostile variants (truncations, absurd counts and lengths, bad
 * types, offsets, dimensions, duplicates, alignment) that must fail with the right status and a
 * one-line message, never crash (the asan build runs this too).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fp16.h"
#include "gguf/gguf.h"
#include "test.h"

// ---- helpers ----------------------------------------------------------------------------------

/* The 416-byte file of spec 1.9, as printed there (16 bytes a row). */
static const char *const spec_hex[] = {
    "47475546030000000200000000000000", "05000000000000001400000000000000", "67656e6572616c2e6172636869746563",
    "74757265080000000500000000000000", "6c6c616d61110000000000000067656e", "6572616c2e616c69676e6d656e740400",
    "0000200000001500000000000000746f", "6b656e697a65722e67676d6c2e746f6b", "656e7309000000080000000200000000",
    "00000003000000000000003c733e0200", "00000000000068691900000000000000", "746f6b656e697a65722e67676d6c2e74",
    "6f6b656e5f7479706509000000050000", "00020000000000000003000000010000", "001c00000000000000746f6b656e697a",
    "65722e67676d6c2e6164645f626f735f", "746f6b656e0700000001010000000000", "00006101000000030000000000000000",
    "00000000000000000000000100000000", "00000062020000000200000000000000", "02000000000000000100000020000000",
    "00000000000000000000000000000000", "0000803f00000040000000bf00000000", "00000000000000000000000000000000",
    "003c00c00038ff7b0000000000000000", "00000000000000000000000000000000",
};
#define SPEC_SIZE 416

static uint8_t spec_bytes[SPEC_SIZE];

static void decode_spec(void) {
    size_t n = 0;
    for (size_t r = 0; r < sizeof(spec_hex) / sizeof(spec_hex[0]); r++)
        for (const char *p = spec_hex[r]; p[0] && p[1]; p += 2) {
            unsigned v;
            sscanf(p, "%2x", &v);
            spec_bytes[n++] = (uint8_t)v;
        }
    if (n != SPEC_SIZE) {
        fprintf(stderr, "spec hex decodes to %zu bytes\n", n);
        exit(1);
    }
}

static char tmp_dir[512];

static void make_tmp_dir(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof(tmp_dir), "%s/muse-test-gguf-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void tmp_path(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", tmp_dir, name); }

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Parse a private exact-size copy (so ASan sees any read past `size`). */
static muse_status parse_copy(const uint8_t *data, size_t size, struct muse_gguf **out, struct muse_error *err) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    muse_status st = muse_gguf_parse(copy, size, "x.gguf", out, err);
    if (st == MUSE_OK) {
        /* walk everything the parser exposes; free the copy only after */
        struct muse_gguf *g = *out;
        uint64_t sum = 0;
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const struct muse_gguf_value *v = &g->kv[i].value;
            if (v->type == MUSE_GGUF_TYPE_ARRAY && v->v.arr.elem_type == MUSE_GGUF_TYPE_STRING) {
                for (uint64_t k = 0; k < v->v.arr.count; k++)
                    if (v->v.arr.strs[k].len) sum += (uint8_t)v->v.arr.strs[k].data[v->v.arr.strs[k].len - 1];
            } else if (v->type == MUSE_GGUF_TYPE_ARRAY && v->v.arr.count) {
                sum += (uint64_t)muse_gguf_arr_i64(v, v->v.arr.count - 1);
            }
        }
        for (uint64_t i = 0; i < g->n_tensors; i++)
            if (g->tensors[i].nbytes) sum += ((const uint8_t *)g->tensors[i].data)[g->tensors[i].nbytes - 1];
        (void)sum;
        muse_gguf_free(g);
        *out = NULL;
    }
    free(copy);
    return st;
}

/* A failure must be one non-empty line naming the file. */
static bool good_message(const struct muse_error *err) {
    return err->msg[0] && !strchr(err->msg, '\n') && !strncmp(err->msg, "x.gguf: ", 8);
}

/* Patch a copy of `base`, parse it, expect status `want` and a message containing `needle`. */
static void expect_fail(const char *what, const uint8_t *base, size_t size, size_t at, const void *patch,
                        size_t patch_len, muse_status want, const char *needle) {
    uint8_t *buf = malloc(size);
    memcpy(buf, base, size);
    memcpy(buf + at, patch, patch_len);
    struct muse_gguf *g = NULL;
    struct muse_error err = {0};
    muse_status st = parse_copy(buf, size, &g, &err);
    TEST_CONDF(st == want, "%s: status %d (%s), want %d; msg: %s", what, st, muse_status_str(st), want, err.msg);
    TEST_CONDF(st == MUSE_OK || good_message(&err), "%s: message '%s'", what, err.msg);
    TEST_CONDF(!needle || strstr(err.msg, needle), "%s: message '%s' lacks '%s'", what, err.msg, needle);
    free(buf);
}

static void expect_fail_u32(const char *what, const uint8_t *base, size_t size, size_t at, uint32_t v,
                            muse_status want, const char *needle) {
    uint8_t b[4];
    put_u32(b, v);
    expect_fail(what, base, size, at, b, 4, want, needle);
}

static void expect_fail_u64(const char *what, const uint8_t *base, size_t size, size_t at, uint64_t v,
                            muse_status want, const char *needle) {
    uint8_t b[8];
    put_u64(b, v);
    expect_fail(what, base, size, at, b, 8, want, needle);
}

// ---- the worked example: writer --------------------------------------------------------------

/* Write the spec file; `piece` = bytes per write_data call (0 = all data in one call). */
static muse_status write_spec_file(const char *path, size_t piece, struct muse_error *err) {
    struct muse_gguf_writer *w;
    muse_status st = muse_gguf_writer_open(path, &w, err);
    if (st) return st;
    const char *tokens[] = {"<s>", "hi"};
    int32_t token_type[] = {3, 1};
    muse_gguf_writer_set_str(w, "general.architecture", "llama");
    muse_gguf_writer_set_u32(w, "general.alignment", 32);
    muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 2);
    muse_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", MUSE_GGUF_TYPE_INT32, token_type, 2);
    muse_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    int64_t ne_a[] = {3}, ne_b[] = {2, 2};
    muse_gguf_writer_add_tensor(w, "a", 0, 1, ne_a);
    muse_gguf_writer_add_tensor(w, "b", 1, 2, ne_b);
    muse_gguf_writer_begin_data(w);
    uint8_t data[20];
    float a[3] = {1.0f, 2.0f, -0.5f};
    uint16_t b[4] = {muse_fp32_to_fp16(1), muse_fp32_to_fp16(-2), muse_fp32_to_fp16(0.5f), muse_fp32_to_fp16(65504)};
    memcpy(data, a, 12);
    memcpy(data + 12, b, 8);
    if (piece == 0) {
        muse_gguf_writer_write_data(w, data, 20);   /* crosses the a|b boundary: the writer pads */
    } else {
        for (size_t i = 0; i < 20; i += piece) muse_gguf_writer_write_data(w, data + i, 20 - i < piece ? 20 - i : piece);
    }
    return muse_gguf_writer_close(w, err);
}

static void test_writer_spec_example(void) {
    char path[600];
    tmp_path(path, sizeof(path), "spec.gguf");
    size_t pieces[] = {0, 1, 3, 12, 7};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        struct muse_error err = {0};
        muse_status st = write_spec_file(path, pieces[k], &err);
        TEST_CONDF(st == MUSE_OK, "write spec file (piece %zu): %s", pieces[k], err.msg);
        size_t size = 0;
        uint8_t *bytes = read_file(path, &size);
        TEST_CONDF(bytes && size == SPEC_SIZE, "spec file size %zu, want 416", size);
        if (bytes && size == SPEC_SIZE) {
            size_t diff = 0;
            while (diff < SPEC_SIZE && bytes[diff] == spec_bytes[diff]) diff++;
            TEST_CONDF(diff == SPEC_SIZE, "writer output differs from spec 1.9 at byte %zu (piece %zu)", diff,
                       pieces[k]);
        }
        free(bytes);
    }
    unlink(path);
}

static void test_writer_errors(void) {
    char path[600];
    tmp_path(path, sizeof(path), "bad.gguf");
    struct muse_gguf_writer *w;
    struct muse_error err = {0};
    int64_t ne[] = {32};

    /* duplicate key: set_* fails, the error sticks, close fails and leaves no file */
    TEST_COND("writer open", muse_gguf_writer_open(path, &w, &err) == MUSE_OK);
    TEST_COND("first key ok", muse_gguf_writer_set_u32(w, "k", 1) == MUSE_OK);
    TEST_COND("duplicate key refused", muse_gguf_writer_set_str(w, "k", "x") == MUSE_ERR_INVALID_ARG);
    TEST_COND("error names the key", strstr(muse_gguf_writer_error(w), "'k'") != NULL);
    TEST_COND("close reports it", muse_gguf_writer_close(w, &err) == MUSE_ERR_INVALID_ARG && strstr(err.msg, "duplicate"));
    TEST_COND("no file left behind", access(path, F_OK) != 0);

    /* tensor checks */
    muse_gguf_writer_open(path, &w, &err);
    TEST_COND("removed type refused", muse_gguf_writer_add_tensor(w, "t", 4, 1, ne) == MUSE_ERR_INVALID_ARG);
    muse_gguf_writer_close(w, &err);
    muse_gguf_writer_open(path, &w, &err);
    int64_t ne_bad[] = {33};
    TEST_COND("ne0 not a block multiple refused", muse_gguf_writer_add_tensor(w, "t", 2, 1, ne_bad) == MUSE_ERR_INVALID_ARG);
    muse_gguf_writer_close(w, &err);
    muse_gguf_writer_open(path, &w, &err);
    TEST_COND("alignment 48 refused", muse_gguf_writer_set_u32(w, "general.alignment", 48) == MUSE_ERR_INVALID_ARG);
    muse_gguf_writer_close(w, &err);
    muse_gguf_writer_open(path, &w, &err);
    TEST_COND("alignment as INT32 refused", muse_gguf_writer_set_i32(w, "general.alignment", 32) == MUSE_ERR_INVALID_ARG);
    muse_gguf_writer_close(w, &err);

    /* short data: close fails naming the tensor */
    muse_gguf_writer_open(path, &w, &err);
    muse_gguf_writer_add_tensor(w, "t", 0, 1, ne);
    muse_gguf_writer_begin_data(w);
    float x[32] = {0};
    muse_gguf_writer_write_data(w, x, 100);
    TEST_COND("short tensor data detected", muse_gguf_writer_close(w, &err) != MUSE_OK && strstr(err.msg, "'t'"));
    /* too much data */
    muse_gguf_writer_open(path, &w, &err);
    muse_gguf_writer_add_tensor(w, "t", 0, 1, ne);
    muse_gguf_writer_begin_data(w);
    TEST_COND("extra data refused", muse_gguf_writer_write_data(w, x, 129 > sizeof(x) ? sizeof(x) : 129) == MUSE_OK &&
                                        muse_gguf_writer_write_data(w, x, 1) == MUSE_ERR_INVALID_ARG);
    muse_gguf_writer_close(w, &err);
    TEST_COND("no file after failures", access(path, F_OK) != 0);

    /* a non-default alignment moves data_start and offsets; zero-tensor files are padded */
    tmp_path(path, sizeof(path), "align.gguf");
    muse_gguf_writer_open(path, &w, &err);
    muse_gguf_writer_set_u32(w, "general.alignment", 64);
    int64_t ne3[] = {3}, ne5[] = {5};
    muse_gguf_writer_add_tensor(w, "p", 0, 1, ne3);
    muse_gguf_writer_add_tensor(w, "q", 0, 1, ne5);
    muse_gguf_writer_begin_data(w);
    float pq[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    muse_gguf_writer_write_data(w, pq, sizeof(pq));
    TEST_COND("aligned write ok", muse_gguf_writer_close(w, &err) == MUSE_OK);
    struct muse_gguf *g = NULL;
    TEST_COND("aligned file parses", muse_gguf_open(path, &g, &err) == MUSE_OK);
    if (g) {
        TEST_COND("alignment 64 read", g->alignment == 64 && g->data_start % 64 == 0);
        TEST_COND("offsets 0 and 64", g->n_tensors == 2 && g->tensors[0].offset == 0 && g->tensors[1].offset == 64);
        TEST_COND("file padded to 64", g->size == g->data_start + 128);
        float q0;
        memcpy(&q0, g->tensors[1].data, 4);
        TEST_COND("q data", q0 == 4.0f);
        muse_gguf_free(g);
    }
    unlink(path);
}

// ---- the worked example: parser and getters --------------------------------------------------

static void test_parse_spec_example(void) {
    struct muse_gguf *g = NULL;
    struct muse_error err = {0};
    muse_status st = muse_gguf_parse(spec_bytes, SPEC_SIZE, "spec.gguf", &g, &err);
    TEST_CONDF(st == MUSE_OK, "parse spec example: %s", err.msg);
    if (!g) return;
    TEST_COND("version 3", g->version == 3);
    TEST_COND("5 kv, 2 tensors", g->n_kv == 5 && g->n_tensors == 2);
    TEST_COND("data_start 352", g->data_start == 352);
    TEST_COND("alignment 32", g->alignment == 32);
    TEST_COND("kv record offsets", g->kv[0].offset == 0x18 && g->kv[1].offset == 0x45 && g->kv[2].offset == 0x66);
    const struct muse_gguf_tensor *a = muse_gguf_find_tensor(g, "a"), *b = muse_gguf_find_tensor(g, "b");
    TEST_COND("tensors found", a && b && !muse_gguf_find_tensor(g, "c") && !muse_gguf_find_tensor(g, ""));
    if (a && b) {
        TEST_COND("offsets 0 and 32", a->offset == 0 && b->offset == 32);
        TEST_COND("a info at 0x10a", a->info_offset == 0x10a);
        TEST_COND("a: f32 [3]", a->type == 0 && a->n_dims == 1 && a->ne[0] == 3 && a->ne[1] == 1 && a->nbytes == 12);
        TEST_COND("b: f16 [2,2]", b->type == 1 && b->n_dims == 2 && b->ne[0] == 2 && b->ne[1] == 2 &&
                                      b->n_elements == 4 && b->nbytes == 8);
        float fa[3];
        memcpy(fa, a->data, 12);
        TEST_COND("a data", fa[0] == 1.0f && fa[1] == 2.0f && fa[2] == -0.5f);
        TEST_COND("a data address", (const uint8_t *)a->data == spec_bytes + 352);
        uint16_t hb[4];
        memcpy(hb, b->data, 8);
        TEST_COND("b data", muse_fp16_to_fp32(hb[0]) == 1.0f && muse_fp16_to_fp32(hb[1]) == -2.0f &&
                                muse_fp16_to_fp32(hb[2]) == 0.5f && muse_fp16_to_fp32(hb[3]) == 65504.0f);
    }

    char buf[64];
    uint32_t u = 7;
    int64_t i64 = 0;
    float f = 0;
    bool bl = false;
    const struct muse_gguf_value *arr = NULL;
    TEST_COND("get_str arch", muse_gguf_get_str(g, "general.architecture", buf, sizeof(buf), &err) == MUSE_OK &&
                                  !strcmp(buf, "llama"));
    TEST_COND("get_str truncation is an error",
              muse_gguf_get_str(g, "general.architecture", buf, 5, &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_str exact fit", muse_gguf_get_str(g, "general.architecture", buf, 6, &err) == MUSE_OK);
    TEST_COND("get_u32 alignment", muse_gguf_get_u32(g, "general.alignment", &u, &err) == MUSE_OK && u == 32);
    TEST_COND("get_i64 of a UINT32", muse_gguf_get_i64(g, "general.alignment", &i64, &err) == MUSE_OK && i64 == 32);
    TEST_COND("get_bool", muse_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bl, &err) == MUSE_OK && bl);
    u = 7;
    TEST_COND("get_u32 of a BOOL fails",
              muse_gguf_get_u32(g, "tokenizer.ggml.add_bos_token", &u, &err) == MUSE_ERR_FORMAT && u == 7);
    TEST_COND("type error names key and types", strstr(err.msg, "tokenizer.ggml.add_bos_token") &&
                                                    strstr(err.msg, "BOOL") && strstr(err.msg, "UINT32"));
    TEST_COND("get_bool of a UINT32 fails", muse_gguf_get_bool(g, "general.alignment", &bl, &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_f32 of a UINT32 fails", muse_gguf_get_f32(g, "general.alignment", &f, &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_str of a UINT32 fails",
              muse_gguf_get_str(g, "general.alignment", buf, sizeof(buf), &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_u32 of a STRING fails", muse_gguf_get_u32(g, "general.architecture", &u, &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_arr of a scalar fails", muse_gguf_get_arr(g, "general.alignment", &arr, &err) == MUSE_ERR_FORMAT);
    TEST_COND("get_u32 missing", muse_gguf_get_u32(g, "llama.block_count", &u, &err) == MUSE_ERR_MISSING && u == 7 &&
                                     strstr(err.msg, "llama.block_count"));
    TEST_COND("get_arr tokens", muse_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, &err) == MUSE_OK);
    if (arr) {
        TEST_COND("tokens", arr->v.arr.elem_type == MUSE_GGUF_TYPE_STRING && arr->v.arr.count == 2 &&
                                arr->v.arr.strs[0].len == 3 && !memcmp(arr->v.arr.strs[0].data, "<s>", 3) &&
                                arr->v.arr.strs[1].len == 2 && !memcmp(arr->v.arr.strs[1].data, "hi", 2));
    }
    TEST_COND("get_arr token_type", muse_gguf_get_arr(g, "tokenizer.ggml.token_type", &arr, &err) == MUSE_OK);
    if (arr) {
        TEST_COND("token types", arr->v.arr.elem_type == MUSE_GGUF_TYPE_INT32 && arr->v.arr.count == 2 &&
                                     muse_gguf_arr_i64(arr, 0) == 3 && muse_gguf_arr_i64(arr, 1) == 1 &&
                                     muse_gguf_arr_f64(arr, 0) == 3.0);
    }
    muse_gguf_free(g);
}

/* Integer getters accept any integer type whose value fits; floats are strict. */
static void test_getters_numeric(void) {
    char path[600];
    tmp_path(path, sizeof(path), "getters.gguf");
    struct muse_gguf_writer *w;
    struct muse_error err = {0};
    muse_gguf_writer_open(path, &w, &err);
    muse_gguf_writer_set_i32(w, "neg", -1);
    muse_gguf_writer_set_i32(w, "pos", 7);
    muse_gguf_writer_set_f32(w, "f", 0.1f);
    struct muse_gguf_value big = {.type = MUSE_GGUF_TYPE_UINT64, .v.u64 = 1ull << 40};
    struct muse_gguf_value huge = {.type = MUSE_GGUF_TYPE_UINT64, .v.u64 = UINT64_MAX};
    struct muse_gguf_value i8 = {.type = MUSE_GGUF_TYPE_INT8, .v.i64 = -5};
    struct muse_gguf_value f64 = {.type = MUSE_GGUF_TYPE_FLOAT64, .v.f64 = 0.25};
    muse_gguf_writer_set_value(w, "big", &big);
    muse_gguf_writer_set_value(w, "huge", &huge);
    muse_gguf_writer_set_value(w, "i8", &i8);
    muse_gguf_writer_set_value(w, "f64", &f64);
    uint8_t bools[3] = {1, 0, 1};
    muse_gguf_writer_set_arr(w, "bools", MUSE_GGUF_TYPE_BOOL, bools, 3);
    float fl[2] = {1.5f, -2.25f};
    muse_gguf_writer_set_arr(w, "floats", MUSE_GGUF_TYPE_FLOAT32, fl, 2);
    TEST_COND("getters file written", muse_gguf_writer_close(w, &err) == MUSE_OK);
    struct muse_gguf *g = NULL;
    TEST_COND("getters file parses", muse_gguf_open(path, &g, &err) == MUSE_OK);
    if (!g) return;
    uint32_t u = 9;
    int64_t i = 0;
    float f = 0;
    TEST_COND("u32 of INT32 -1 fails", muse_gguf_get_u32(g, "neg", &u, &err) == MUSE_ERR_FORMAT && u == 9);
    TEST_COND("u32 of INT32 7", muse_gguf_get_u32(g, "pos", &u, &err) == MUSE_OK && u == 7);
    TEST_COND("u32 of UINT64 2^40 fails", muse_gguf_get_u32(g, "big", &u, &err) == MUSE_ERR_FORMAT);
    TEST_COND("i64 of UINT64 2^40", muse_gguf_get_i64(g, "big", &i, &err) == MUSE_OK && i == (1ll << 40));
    TEST_COND("i64 of UINT64 max fails", muse_gguf_get_i64(g, "huge", &i, &err) == MUSE_ERR_FORMAT);
    TEST_COND("i64 of INT8 -5", muse_gguf_get_i64(g, "i8", &i, &err) == MUSE_OK && i == -5);
    TEST_COND("i64 of FLOAT32 fails", muse_gguf_get_i64(g, "f", &i, &err) == MUSE_ERR_FORMAT);
    TEST_COND("f32 exact", muse_gguf_get_f32(g, "f", &f, &err) == MUSE_OK && f == 0.1f);
    TEST_COND("f32 of FLOAT64 fails (llama.cpp is strict)", muse_gguf_get_f32(g, "f64", &f, &err) == MUSE_ERR_FORMAT);
    TEST_COND("f32 of INT32 fails", muse_gguf_get_f32(g, "pos", &f, &err) == MUSE_ERR_FORMAT);
    const struct muse_gguf_value *arr = NULL;
    if (muse_gguf_get_arr(g, "bools", &arr, &err) == MUSE_OK)
        TEST_COND("bool array", arr->v.arr.count == 3 && muse_gguf_arr_i64(arr, 0) == 1 &&
                                    muse_gguf_arr_i64(arr, 1) == 0 && muse_gguf_arr_i64(arr, 2) == 1);
    else
        TEST_COND("bools present", false);
    if (muse_gguf_get_arr(g, "floats", &arr, &err) == MUSE_OK)
        TEST_COND("float array", muse_gguf_arr_f64(arr, 0) == 1.5 && muse_gguf_arr_f64(arr, 1) == -2.25 &&
                                     muse_gguf_arr_i64(arr, 1) == -2);
    else
        TEST_COND("floats present", false);
    TEST_COND("no data section", g->n_tensors == 0 && g->data_start == g->size);
    muse_gguf_free(g);
    unlink(path);
}

// ---- golden files -----------------------------------------------------------------------------

static void find_ggufs(const char *dir, char paths[][600], int *n, int max) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[600];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            find_ggufs(p, paths, n, max);
        } else {
            size_t len = strlen(p);
            if (len > 5 && !strcmp(p + len - 5, ".gguf") && *n < max) snprintf(paths[(*n)++], 600, "%s", p);
        }
    }
    closedir(d);
}

/* Rewrite g with the writer (every kv via set_value, every tensor) into path. */
static muse_status rewrite(const struct muse_gguf *g, const char *path, struct muse_error *err) {
    struct muse_gguf_writer *w;
    muse_status st = muse_gguf_writer_open(path, &w, err);
    if (st) return st;
    for (uint64_t i = 0; i < g->n_kv; i++) muse_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        muse_gguf_writer_add_tensor(w, g->tensors[i].name, g->tensors[i].type, g->tensors[i].n_dims, g->tensors[i].ne);
    muse_gguf_writer_begin_data(w);
    for (uint64_t i = 0; i < g->n_tensors; i++) muse_gguf_writer_write_data(w, g->tensors[i].data, g->tensors[i].nbytes);
    return muse_gguf_writer_close(w, err);
}

static void test_golden(void) {
    static char paths[64][600];
    int n = 0;
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/golden", test_shared_dir());
    find_ggufs(dir, paths, &n, 64);
    TEST_CONDF(n >= 10, "found %d golden .gguf files under %s (expected at least 10)", n, dir);
    bool saw_tok = false, saw_clip = false, saw_dflash = false;
    for (int k = 0; k < n; k++) {
        struct muse_gguf *g = NULL;
        struct muse_error err = {0};
        muse_status st = muse_gguf_open(paths[k], &g, &err);
        TEST_CONDF(st == MUSE_OK, "golden %s: %s", paths[k], err.msg);
        if (!g) continue;
        char arch[64] = "";
        TEST_CONDF(muse_gguf_get_str(g, "general.architecture", arch, sizeof(arch), &err) == MUSE_OK,
                   "%s: architecture: %s", paths[k], err.msg);
        saw_clip |= !strcmp(arch, "clip");
        saw_dflash |= !strcmp(arch, "dflash");
        saw_tok |= g->n_tensors == 0 && muse_gguf_find_kv(g, "tokenizer.ggml.tokens");
        bool inside = true, dense = true;
        uint64_t expect_off = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct muse_gguf_tensor *t = &g->tensors[i];
            const uint8_t *p = t->data;
            inside &= p >= g->base + g->data_start && p + t->nbytes <= g->base + g->size;
            dense &= t->offset == expect_off;
            expect_off += (t->nbytes + g->alignment - 1) / g->alignment * g->alignment;
            inside &= muse_gguf_find_tensor(g, t->name) == t;
        }
        TEST_CONDF(inside, "%s: every tensor's data inside the file and found by name", paths[k]);
        TEST_CONDF(dense, "%s: dense ggml layout", paths[k]);
        for (uint64_t i = 0; i < g->n_kv; i++)
            TEST_CONDF(muse_gguf_find_kv(g, g->kv[i].key) == &g->kv[i], "%s: key %s found", paths[k], g->kv[i].key);

        /* The writer reproduces the file byte-for-byte (the goldens come from gguf-py's writer). */
        char out[600];
        tmp_path(out, sizeof(out), "rewrite.gguf");
        st = rewrite(g, out, &err);
        TEST_CONDF(st == MUSE_OK, "%s: rewrite: %s", paths[k], err.msg);
        size_t size = 0;
        uint8_t *bytes = read_file(out, &size);
        TEST_CONDF(bytes && size == g->size && !memcmp(bytes, g->base, size),
                   "%s: rewrite is byte-identical (size %zu vs %llu)", paths[k], size, (unsigned long long)g->size);
        free(bytes);
        unlink(out);
        muse_gguf_free(g);
    }
    TEST_COND("saw the tokenizer-only file, a clip and a dflash file", saw_tok && saw_clip && saw_dflash);
}

// ---- hostile variants -------------------------------------------------------------------------

/* Offsets in the spec file (1.9). */
enum {
    OFF_KV0_KEYLEN = 0x18,
    OFF_KV0_TYPE = 0x34,
    OFF_KV0_STRLEN = 0x38,
    OFF_ALIGN_TYPE = 0x5e,
    OFF_ALIGN_VALUE = 0x62,
    OFF_TOKENS_ELEMTYPE = 0x87,
    OFF_TOKENS_COUNT = 0x8b,
    OFF_TOKTYPE_COUNT = 0xd1,
    OFF_A_NDIMS = 0x113,
    OFF_A_NE0 = 0x117,
    OFF_A_TYPE = 0x11f,
    OFF_B_NDIMS = 0x134,
    OFF_B_NE0 = 0x138,
    OFF_B_NE1 = 0x140,
    OFF_B_TYPE = 0x148,
    OFF_B_OFFSET = 0x14c,
};

static void test_hostile_spec(void) {
    const uint8_t *s = spec_bytes;
    const size_t n = SPEC_SIZE;
    const muse_status F = MUSE_ERR_FORMAT, U = MUSE_ERR_UNSUPPORTED;

    /* Truncation at every byte: everything before the end of b's data (352 + 32 + 8) fails. */
    int wrong = 0, bad_msg = 0;
    for (size_t len = 0; len <= n; len++) {
        struct muse_gguf *g = NULL;
        struct muse_error err = {0};
        muse_status st = parse_copy(s, len, &g, &err);
        bool should_parse = len >= 392;
        if ((st == MUSE_OK) != should_parse || (st != MUSE_OK && st != F)) {
            if (wrong++ < 5) fprintf(stderr, "truncated at %zu: status %d: %s\n", len, st, err.msg);
        }
        if (st != MUSE_OK && !good_message(&err)) bad_msg++;
    }
    TEST_CONDF(wrong == 0, "truncations: %d with the wrong verdict", wrong);
    TEST_CONDF(bad_msg == 0, "truncations: %d without a one-line message", bad_msg);

    /* header */
    expect_fail("bad magic", s, n, 0, "GGUG", 4, F, "magic");
    expect_fail_u32("version 0", s, n, 4, 0, F, "version");
    expect_fail_u32("version 1", s, n, 4, 1, U, "obsolete");
    expect_fail_u32("version 4", s, n, 4, 4, U, "version");
    expect_fail_u32("big-endian", s, n, 4, 0x03000000u, U, "big-endian");
    expect_fail_u32("version 2 accepted", s, n, 4, 2, MUSE_OK, NULL);
    expect_fail_u64("n_tensors 2^63", s, n, 8, 1ull << 63, F, "tensor_count");
    expect_fail_u64("n_tensors 2^64-1", s, n, 8, UINT64_MAX, F, "tensor_count");
    expect_fail_u64("n_tensors 2^40", s, n, 8, 1ull << 40, F, "tensor_count");
    expect_fail_u64("n_tensors 3", s, n, 8, 3, F, NULL);
    expect_fail_u64("n_kv 2^63", s, n, 16, 1ull << 63, F, "kv_count");
    expect_fail_u64("n_kv 2^40", s, n, 16, 1ull << 40, F, "kv_count");
    expect_fail_u64("n_kv 2^63-1", s, n, 16, (1ull << 63) - 1, F, "kv_count");
    expect_fail_u64("n_kv 30", s, n, 16, 30, F, NULL);

    /* strings and values */
    expect_fail_u64("key length 2^63", s, n, OFF_KV0_KEYLEN, 1ull << 63, F, "key length");
    expect_fail_u64("key length 2^40", s, n, OFF_KV0_KEYLEN, 1ull << 40, F, "key length");
    expect_fail_u64("key length 2^64-1", s, n, OFF_KV0_KEYLEN, UINT64_MAX, F, "byte 24");
    expect_fail_u64("empty key", s, n, OFF_KV0_KEYLEN, 0, F, "empty key");
    expect_fail("NUL in key", s, n, 0x22, "\0", 1, F, "NUL");
    expect_fail_u64("string length 2^63", s, n, OFF_KV0_STRLEN, 1ull << 63, F, "general.architecture");
    expect_fail_u64("string length 2^40", s, n, OFF_KV0_STRLEN, 1ull << 40, F, "string value length");
    expect_fail_u32("value type 13", s, n, OFF_KV0_TYPE, 13, F, "value type 13");
    expect_fail_u32("value type 2^32-1", s, n, OFF_KV0_TYPE, UINT32_MAX, F, "value type");
    expect_fail_u32("array element type 13", s, n, OFF_TOKENS_ELEMTYPE, 13, F, "element type");
    expect_fail_u32("nested array", s, n, OFF_TOKENS_ELEMTYPE, MUSE_GGUF_TYPE_ARRAY, U, "nested");
    expect_fail_u64("string array count 2^40", s, n, OFF_TOKENS_COUNT, 1ull << 40, F, "tokenizer.ggml.tokens");
    expect_fail_u64("string array count 2^63", s, n, OFF_TOKENS_COUNT, 1ull << 63, F, "strings");
    expect_fail_u64("string array count 2^61 (x8 wraps)", s, n, OFF_TOKENS_COUNT, 1ull << 61, F, "strings");
    expect_fail_u64("int array count 2^62 (x4 wraps)", s, n, OFF_TOKTYPE_COUNT, 1ull << 62, F, "token_type");
    expect_fail_u64("int array count 2^40", s, n, OFF_TOKTYPE_COUNT, 1ull << 40, F, "INT32");

    /* alignment */
    expect_fail_u32("alignment 0", s, n, OFF_ALIGN_VALUE, 0, F, "power of two");
    expect_fail_u32("alignment 48", s, n, OFF_ALIGN_VALUE, 48, F, "power of two");
    expect_fail_u32("alignment 3", s, n, OFF_ALIGN_VALUE, 3, F, "general.alignment");
    expect_fail_u32("alignment as INT32", s, n, OFF_ALIGN_TYPE, MUSE_GGUF_TYPE_INT32, F, "UINT32");
    expect_fail_u32("alignment as FLOAT32", s, n, OFF_ALIGN_TYPE, MUSE_GGUF_TYPE_FLOAT32, F, "UINT32");
    expect_fail_u32("alignment 64 misaligns b", s, n, OFF_ALIGN_VALUE, 64, F, "tensor 'b'");
    /* alignment 16 leaves b's offset 32 past where ggml's packed layout puts it: llama.cpp refuses it */
    expect_fail_u32("alignment 16: b no longer packed", s, n, OFF_ALIGN_VALUE, 16, F, "offset 32, expected 16");

    /* tensor types */
    static const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof(removed) / sizeof(removed[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "removed type %u", removed[i]);
        expect_fail_u32(what, s, n, OFF_A_TYPE, removed[i], U, "tensor 'a' (info at byte 266): type id");
        expect_fail_u32(what, s, n, OFF_A_TYPE, removed[i], U, "removed");
    }
    static const uint32_t unknown[] = {42, 100, 106, 1u << 31, UINT32_MAX};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "unknown type %u", unknown[i]);
        expect_fail_u32(what, s, n, OFF_B_TYPE, unknown[i], U, "tensor 'b'");
        expect_fail_u32(what, s, n, OFF_B_TYPE, unknown[i], U, "unknown type");
    }
    expect_fail_u32("q4_0 with ne0 3", s, n, OFF_A_TYPE, 2, F, "block size");

    /* dimensions */
    expect_fail_u32("n_dims 5", s, n, OFF_B_NDIMS, 5, F, "n_dims 5");
    expect_fail_u32("n_dims 0", s, n, OFF_A_NDIMS, 0, F, "n_dims 0");
    expect_fail_u32("n_dims 2^32-1", s, n, OFF_A_NDIMS, UINT32_MAX, F, "n_dims");
    expect_fail_u64("ne negative", s, n, OFF_B_NE0, 1ull << 63, F, "negative");
    expect_fail_u64("ne1 2^62 * ne0 2 overflows", s, n, OFF_B_NE1, 1ull << 62, F, "overflow");
    {
        uint8_t buf[SPEC_SIZE];
        memcpy(buf, s, n);
        put_u64(buf + OFF_B_NE0, 1ull << 32);
        expect_fail_u64("ne 2^32 x 2^32 overflows", buf, n, OFF_B_NE1, 1ull << 32, F, "overflow");
        expect_fail_u64("nbytes overflow (2^62 f32)", s, n, OFF_A_NE0, 1ull << 62, F, "overflow");
        put_u64(buf + OFF_B_NE0, 0);
        expect_fail_u64("zero-sized dim is fine", buf, n, OFF_B_NE1, 1ull << 62, MUSE_OK, NULL);
    }
    expect_fail_u64("a ne0 too big for the file", s, n, OFF_A_NE0, 1000, F, "past the end");

    /* offsets */
    expect_fail_u64("offset misaligned", s, n, OFF_B_OFFSET, 33, F, "multiple of the alignment");
    expect_fail_u64("offset past end", s, n, OFF_B_OFFSET, 64, F, "past the end");
    expect_fail_u64("offset 2^64-32 wraps", s, n, OFF_B_OFFSET, UINT64_MAX - 31, F, "past the end");
    expect_fail_u64("offset 2^63", s, n, OFF_B_OFFSET, 1ull << 63, F, "tensor 'b'");
    expect_fail_u64("b overlaps a", s, n, OFF_B_OFFSET, 0, F, "overlaps");
    /* llama.cpp's packed layout: a zero-sized tensor takes no room, so a tensor after it at the
     * next aligned offset leaves a gap and is refused (gguf.cpp: "tensor 'b' has offset 32, expected 0") */
    expect_fail_u64("zero-sized a followed by a gap", s, n, OFF_A_NE0, 0, F, "offset 32, expected 0");
    {
        uint8_t buf[SPEC_SIZE];
        memcpy(buf, s, n);
        put_u64(buf + OFF_A_NE0, 0);
        expect_fail_u64("zero-sized a, b packed at 0", buf, n, OFF_B_OFFSET, 0, MUSE_OK, NULL);
    }
}

/* Duplicates, names: hostile variants of a writer-made file found by searching its bytes. */
static void test_hostile_names(void) {
    char path[600];
    tmp_path(path, sizeof(path), "names.gguf");
    struct muse_gguf_writer *w;
    struct muse_error err = {0};
    muse_gguf_writer_open(path, &w, &err);
    muse_gguf_writer_set_str(w, "general.architecture", "muse-glimmer");
    muse_gguf_writer_set_u32(w, "k.aaaa", 1);
    muse_gguf_writer_set_u32(w, "k.bbbb", 2);
    int64_t ne[] = {8};
    static const char long_name[] = "blk.0.a_tensor_name_of_exactly_sixty_three_bytes_xxxxxxxxxxxxxx";
    TEST_COND("63-byte name", strlen(long_name) == 63);
    muse_gguf_writer_add_tensor(w, "t0.weight", 0, 1, ne);
    muse_gguf_writer_add_tensor(w, "t1.weight", 0, 1, ne);
    muse_gguf_writer_add_tensor(w, long_name, 0, 1, ne);
    muse_gguf_writer_begin_data(w);
    float zeros[24] = {0};
    muse_gguf_writer_write_data(w, zeros, sizeof(zeros));
    TEST_COND("names file written", muse_gguf_writer_close(w, &err) == MUSE_OK);
    size_t size = 0;
    uint8_t *base = read_file(path, &size);
    unlink(path);
    if (!base) return;
    expect_fail("valid names file", base, size, 0, base, 1, MUSE_OK, NULL);
    uint8_t *p = memmem(base, size, "k.bbbb", 6);
    if (p) expect_fail("duplicate key", base, size, (size_t)(p - base), "k.aaaa", 6, MUSE_ERR_FORMAT, "duplicate key");
    p = memmem(base, size, "t1.weight", 9);
    if (p)
        expect_fail("duplicate tensor", base, size, (size_t)(p - base), "t0.weight", 9, MUSE_ERR_FORMAT,
                    "tensor 't0.weight'");
    p = memmem(base, size, "t1.weight", 9);
    if (p) expect_fail("NUL in tensor name", base, size, (size_t)(p - base) + 2, "\0", 1, MUSE_ERR_FORMAT, "NUL");
    p = memmem(base, size, long_name, 63);
    if (p) {
        /* make the name 64 bytes long by swallowing the first byte of n_dims into it */
        uint8_t len64[8];
        put_u64(len64, 64);
        expect_fail("64-byte tensor name", base, size, (size_t)(p - base) - 8, len64, 8, MUSE_ERR_FORMAT, "longer than 63");
    }
    p = memmem(base, size, "t1.weight", 9);
    uint8_t *q = memmem(base, size, "t0.weight", 9);
    if (p && q) {
        /* a duplicate whose name holds a newline: the message shows it as '?', on one line */
        uint8_t *copy = malloc(size);
        memcpy(copy, base, size);
        copy[q - base] = '\n';
        expect_fail("control byte shown as ?", copy, size, (size_t)(p - base), "\n0.weight", 9, MUSE_ERR_FORMAT,
                    "tensor '?0.weight'");
        free(copy);
    }
    TEST_COND("found the patch points", p != NULL);
    free(base);
}

/* Deterministic random corruption of the spec file and a golden file: never crash. */
static void test_random_mutations(void) {
    uint64_t state = 0x9e3779b97f4a7c15ull;
#define NEXT() (state ^= state << 13, state ^= state >> 7, state ^= state << 17, state)
    int rounds = getenv("MUSE_SANITIZER") ? 3000 : 20000;
    uint8_t buf[SPEC_SIZE];
    int ok = 0, bad_msg = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, spec_bytes, SPEC_SIZE);
        int flips = 1 + (int)(NEXT() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = NEXT() % 352;
            switch (NEXT() % 3) {
            case 0: buf[at] ^= (uint8_t)(1u << (NEXT() % 8)); break;
            case 1: buf[at] = (uint8_t)NEXT(); break;
            default: buf[at] = 0xff; break;
            }
        }
        struct muse_gguf *g = NULL;
        struct muse_error err = {0};
        muse_status st = parse_copy(buf, SPEC_SIZE - (NEXT() % 3 == 0 ? NEXT() % 64 : 0), &g, &err);
        if (st == MUSE_OK) ok++;
        else if (!good_message(&err)) bad_msg++;
    }
    TEST_CONDF(bad_msg == 0, "random mutations: %d failures without a one-line message", bad_msg);
    TEST_CONDF(ok > 0 && ok < rounds, "random mutations: %d of %d parsed (some must, most must not)", ok, rounds);
#undef NEXT
}

/* Truncations of a golden file: every byte up to the end of the metadata, then many points. */
static void test_golden_truncations(void) {
    char path[600];
    snprintf(path, sizeof(path), "%s/golden/vision/models/vis-mmproj.gguf", test_shared_dir());
    size_t size = 0;
    uint8_t *base = read_file(path, &size);
    TEST_CONDF(base != NULL, "read %s", path);
    if (!base) return;
    struct muse_gguf *g = NULL;
    struct muse_error err = {0};
    muse_status st = muse_gguf_parse(base, size, "x.gguf", &g, &err);
    TEST_CONDF(st == MUSE_OK, "mmproj parses: %s", err.msg);
    if (!g) {
        free(base);
        return;
    }
    uint64_t need = 0;   /* the smallest prefix that still holds every tensor */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t end = (uint64_t)((const uint8_t *)g->tensors[i].data - g->base) + g->tensors[i].nbytes;
        if (end > need) need = end;
    }
    uint64_t meta_end = g->data_start;
    muse_gguf_free(g);
    int wrong = 0, bad_msg = 0, tried = 0;
    size_t step_meta = getenv("MUSE_SANITIZER") ? 3 : 1;
    for (size_t len = 0; len <= size; len += (len < meta_end ? step_meta : 1 + size / 300)) {
        st = parse_copy(base, len, &g, &err);
        tried++;
        if ((st == MUSE_OK) != (len >= need) || (st != MUSE_OK && st != MUSE_ERR_FORMAT)) {
            if (wrong++ < 5) fprintf(stderr, "golden truncated at %zu: %d %s\n", len, st, err.msg);
        }
        if (st != MUSE_OK && !good_message(&err)) bad_msg++;
    }
    TEST_CONDF(tried > 4000 / (int)step_meta, "tried %d truncations", tried);
    TEST_CONDF(wrong == 0, "golden truncations: %d wrong verdicts", wrong);
    TEST_CONDF(bad_msg == 0, "golden truncations: %d bad messages", bad_msg);
    free(base);
}

static void test_open_errors(void) {
    struct muse_gguf *g = (struct muse_gguf *)1;
    struct muse_error err = {0};
    TEST_COND("missing file is IO", muse_gguf_open("/nonexistent/x.gguf", &g, &err) == MUSE_ERR_IO && g == NULL &&
                                        strstr(err.msg, "/nonexistent/x.gguf"));
    TEST_COND("directory is IO", muse_gguf_open(tmp_dir, &g, &err) == MUSE_ERR_IO);
    char path[600];
    tmp_path(path, sizeof(path), "empty.gguf");
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    TEST_COND("empty file is FORMAT", muse_gguf_open(path, &g, &err) == MUSE_ERR_FORMAT && strstr(err.msg, "24-byte"));
    unlink(path);
}

int main(void) {
    decode_spec();
    make_tmp_dir();
    test_writer_spec_example();
    test_writer_errors();
    test_parse_spec_example();
    test_getters_numeric();
    test_golden();
    test_hostile_spec();
    test_hostile_names();
    test_random_mutations();
    test_golden_truncations();
    test_open_errors();
    rmdir(tmp_dir);
    return TEST_REPORT();
}
