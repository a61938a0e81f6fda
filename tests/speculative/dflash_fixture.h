/*
 * dflash_fixture.h - helpers of the DFlash drafter tests (header-only, static functions): a float32
 * .npy reader, the golden JSON, variants of a drafter GGUF (a key left out or replaced, a tensor
 * left out, reshaped or added) written with the GGUF writer, and synthetic target + drafter pairs.
 */
#pragma once

#include <cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "synth/synth.h"
#include "synth/synth_dflash.h"
#include "test.h"

/* A float32 C-order .npy file of 2 dimensions: malloc'd data, or NULL. */
static float *fx_npy_read(const char *path, int64_t *rows, int64_t *cols) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char pre[10];
    float *data = NULL;
    char hdr[1024];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) || pre[6] != 1) goto done;
    size_t hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (hl >= sizeof hdr || fread(hdr, 1, hl, f) != hl) goto done;
    hdr[hl] = 0;
    const char *sh = strstr(hdr, "'shape': (");
    long long a = 0, b = 0;
    if (!strstr(hdr, "'<f4'") || strstr(hdr, "'fortran_order': True") || !sh || sscanf(sh, "'shape': (%lld, %lld)", &a, &b) != 2)
        goto done;
    data = malloc(sizeof(float) * (size_t)(a * b) + 1);
    if (data && fread(data, sizeof(float), (size_t)(a * b), f) != (size_t)(a * b)) {
        free(data);
        data = NULL;
    }
    *rows = a;
    *cols = b;
done:
    fclose(f);
    return data;
}

static char *fx_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void fx_tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/muse-test-dflash-%d-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), name);
}

/* A change to a drafter file: keys and tensors are copied from `src` except as told. */
struct fx_variant {
    const char *omit_key;                /* left out */
    const char *set_key;                 /* replaced (or added) with one of: */
    enum muse_gguf_type set_type;        /*   UINT32, INT32 (array when set_n > 0), STRING, BOOL, BOOL array */
    uint32_t set_u32;
    const char *set_str;
    const int32_t *set_i32;
    int set_n;
    const char *omit_tensor;             /* left out */
    const char *reshape_tensor;          /* written with ne1 (or ne0 for vectors) + 1 row, values 0 */
    const char *retype_tensor;           /* written as F16 */
    const char *add_tensor;              /* an extra {n_embd} f32 tensor */
    uint64_t n_tokens;                   /* > 0: tokenizer.ggml.tokens cut to this many entries */
};

/* Write `src` changed by `v` to `path`. Returns false on any writer error. */
static bool fx_write_variant(const char *src, const char *path, const struct fx_variant *v) {
    struct muse_gguf *g;
    struct muse_error err;
    if (muse_gguf_open(src, &g, &err)) return false;
    struct muse_gguf_writer *w;
    if (muse_gguf_writer_open(path, &w, &err)) {
        muse_gguf_free(g);
        return false;
    }
    muse_status st = MUSE_OK;
    for (uint64_t i = 0; i < g->n_kv && !st; i++) {
        const char *k = g->kv[i].key;
        if (v->omit_key && !strcmp(k, v->omit_key)) continue;
        if (v->set_key && !strcmp(k, v->set_key)) continue;
        struct muse_gguf_value val = g->kv[i].value;
        if (v->n_tokens && !strcmp(k, "tokenizer.ggml.tokens") && v->n_tokens < val.v.arr.count) val.v.arr.count = v->n_tokens;
        st = muse_gguf_writer_set_value(w, k, &val);
    }
    if (!st && v->set_key) {
        uint8_t bools[64];
        switch (v->set_type) {
        case MUSE_GGUF_TYPE_UINT32: st = muse_gguf_writer_set_u32(w, v->set_key, v->set_u32); break;
        case MUSE_GGUF_TYPE_STRING: st = muse_gguf_writer_set_str(w, v->set_key, v->set_str); break;
        case MUSE_GGUF_TYPE_BOOL:
            if (v->set_n > 0) {
                for (int i = 0; i < v->set_n; i++) bools[i] = (uint8_t)v->set_i32[i];
                st = muse_gguf_writer_set_arr(w, v->set_key, MUSE_GGUF_TYPE_BOOL, bools, (uint64_t)v->set_n);
            } else {
                st = muse_gguf_writer_set_bool(w, v->set_key, v->set_u32 != 0);
            }
            break;
        default: st = muse_gguf_writer_set_arr(w, v->set_key, MUSE_GGUF_TYPE_INT32, v->set_i32, (uint64_t)v->set_n); break;
        }
    }
    int64_t n_embd = 0;
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (!strcmp(t->name, "output_norm.weight")) n_embd = t->ne[0];
        if (v->omit_tensor && !strcmp(t->name, v->omit_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t type = t->type;
        if (v->reshape_tensor && !strcmp(t->name, v->reshape_tensor)) ne[t->n_dims > 1 ? 1 : 0]++;
        if (v->retype_tensor && !strcmp(t->name, v->retype_tensor)) type = MUSE_TYPE_F16;
        st = muse_gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne);
    }
    if (!st && v->add_tensor) st = muse_gguf_writer_add_tensor(w, v->add_tensor, MUSE_TYPE_F32, 1, &n_embd);
    if (!st) st = muse_gguf_writer_begin_data(w);
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (v->omit_tensor && !strcmp(t->name, v->omit_tensor)) continue;
        bool re = v->reshape_tensor && !strcmp(t->name, v->reshape_tensor);
        bool ty = v->retype_tensor && !strcmp(t->name, v->retype_tensor);
        if (!re && !ty) {
            st = muse_gguf_writer_write_data(w, t->data, t->nbytes);
            continue;
        }
        int64_t ne0 = t->ne[0], ne1 = t->ne[1];
        if (re) t->n_dims > 1 ? ne1++ : ne0++;
        size_t bytes = muse_type_row_size(ty ? MUSE_TYPE_F16 : (enum muse_type)t->type, ne0) * (size_t)ne1;
        void *z = calloc(1, bytes);
        st = z ? muse_gguf_writer_write_data(w, z, bytes) : MUSE_ERR_NOMEM;
        free(z);
    }
    if (!st && v->add_tensor) {
        float *z = calloc((size_t)n_embd, sizeof(float));
        st = z ? muse_gguf_writer_write_data(w, z, sizeof(float) * (size_t)n_embd) : MUSE_ERR_NOMEM;
        free(z);
    }
    st = muse_gguf_writer_close(w, &err) || st;
    muse_gguf_free(g);
    return st == MUSE_OK;
}

/*
 * A synthetic target (muse synth) and drafter (muse synth --dflash) in TMPDIR; names get `tag`.
 * The target: n_layer layers of width 64, vocabulary 300, the given SWA window and context.
 */
static bool fx_synth_pair(const char *tag, int n_layer, int window, int ctx, const struct muse_synth_dflash_config *dcfg,
                          char *target, char *drafter, size_t size) {
    struct muse_synth_config c;
    struct muse_error err;
    char name[64];
    if (muse_synth_preset("tiny", &c, &err)) return false;
    c.n_layer = n_layer, c.n_embd = 64, c.n_head = 2, c.n_head_kv = 1, c.head_dim = 32, c.n_ff = 128, c.n_vocab = 300;
    c.n_ctx = ctx, c.n_swa = window;
    snprintf(c.pattern, sizeof c.pattern, "SSF");
    snprintf(name, sizeof name, "%s-target.gguf", tag);
    fx_tmp_path(target, size, name);
    snprintf(name, sizeof name, "%s-drafter.gguf", tag);
    fx_tmp_path(drafter, size, name);
    if (muse_synth_write(&c, target, NULL, NULL, &err)) {
        fprintf(stderr, "synth target: %s\n", err.msg);
        return false;
    }
    if (muse_synth_dflash_write(dcfg, target, drafter, &err)) {
        fprintf(stderr, "synth drafter: %s\n", err.msg);
        return false;
    }
    return true;
}
