/*
 * model_fixture.h - writes small synthetic Muse-Glimmer GGUF files with chosen metadata for the
 * model tests (header-only, static functions; used by tests/model/test_*.c). The tensors are the
 * required entries of the tensor table (model/tensors.h) plus the optional variants a spec asks
 * for. Values are seeded normal draws; matrices may be F32 or Q8_0.
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "model/tensors.h"

enum fx_pattern {
    FX_PATTERN_BOOL_ARRAY, /* bool[n_layer] from `swa` */
    FX_PATTERN_INT_ARRAY,  /* i32[n_layer] from `swa` */
    FX_PATTERN_U32,        /* the scalar `period` */
    FX_PATTERN_NONE,       /* key absent */
    FX_PATTERN_SHORT,      /* bool array one element too short */
};

struct fx_spec {
    const char *arch;           /* default "muse-glimmer" */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, window, ctx;
    enum fx_pattern pattern;
    bool swa[16];               /* per layer, for the array forms */
    unsigned period;            /* for FX_PATTERN_U32 */
    bool no_softcap;            /* omit final_logit_softcapping */
    float freq_base_swa;        /* 0 = omit rope.freq_base_swa */
    const char *omit_key;       /* a key (without the arch prefix) to leave out */
    const char *bad_tensor;     /* a tensor written with ne1 (or ne0 for vectors) + 16 */
    const char *omit_tensor;    /* a tensor left out */
    bool q8_0;                  /* matrices in Q8_0 instead of F32 */
    int n_tokens_kv;            /* > 0: write tokenizer.ggml.tokens with this many entries */
    /* optional tensors (same random values as without them) */
    bool fused_qkv;             /* attn_qkv = rows of attn_q | attn_k | attn_v instead of the three */
    float wo_scale;             /* > 0: attn_output stored divided by it, attn_output.weight.scale = it */
    float gate_scale;           /* > 0: attn_gate.weight.scale = it (llama.cpp ignores it) */
    float q_bias;               /* != 0: attn_q.bias (or the Q part of attn_qkv.bias) = this constant */
    uint64_t seed;
};

static struct fx_spec fx_default(void) {
    struct fx_spec s = {0};
    s.arch = "muse-glimmer";
    s.n_layer = 4, s.n_embd = 64, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 32, s.n_ff = 96, s.n_vocab = 300;
    s.window = 4, s.ctx = 256;
    s.pattern = FX_PATTERN_BOOL_ARRAY;
    for (int i = 0; i < 16; i++) s.swa[i] = i % 4 != 3;
    s.period = 4;
    s.seed = 1;
    return s;
}

static double fx_normal(uint64_t *st) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        u[i] = ((double)(*st >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

#define FX_MAX_TENSORS (17 * MUSE_GLIMMER_TENSOR_COUNT) /* the globals and up to 16 layers, variants included */

/* A tensor of the base list: a required entry of the Muse-Glimmer table for one layer. */
struct fx_tensor {
    char name[64];
    int id;           /* enum muse_glimmer_tensor */
    uint32_t il;      /* the layer of a per-layer entry */
    int64_t ne0, ne1; /* ne1 == 0: a vector */
    double mean, std;
    bool matrix;
};

/* The fixture's value recipe: mean + std * N(0, 1) of table entry `id` (ne0 = its row length). */
static void fx_values(int id, int64_t ne0, double *mean, double *std) {
    *mean = 0, *std = 1;
    switch (id) {
    case MUSE_GLIMMER_TOKEN_EMBD: break;
    case MUSE_GLIMMER_OUTPUT: *std = 0.5; break;
    case MUSE_GLIMMER_ATTN_Q_NORM: *mean = 1.5, *std = 0.1; break;
    case MUSE_GLIMMER_POST_ATTENTION_NORM:
    case MUSE_GLIMMER_POST_FFW_NORM: *mean = 0.3, *std = 0.03; break;
    default:
        if (muse_glimmer_tensors[id].kind == MUSE_TENSOR_MATRIX) *std = 1 / sqrt((double)ne0);
        else *mean = 1, *std = 0.1; /* the other norms */
    }
}

/* The base list: the table's required entries, the global ones first, then layer by layer. */
static int fx_tensors(const struct fx_spec *s, struct fx_tensor *t) {
    int64_t dims[MUSE_GLIMMER_DIM_COUNT];
    muse_glimmer_dims_uniform(dims, s->n_embd, s->n_vocab, s->n_head, s->n_head_kv, s->head_dim, s->n_ff);
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int il = 0; il < (pass ? s->n_layer : 1); il++)
            for (int id = 0; id < MUSE_GLIMMER_TENSOR_COUNT; id++) {
                const struct muse_tensor_desc *d = &muse_glimmer_tensors[id];
                if (d->optional || d->per_layer != (pass == 1)) continue;
                struct fx_tensor *x = &t[n++];
                int64_t ne[MUSE_TENSOR_MAX_DIMS];
                muse_tensor_name(d, (uint32_t)il, x->name, sizeof x->name);
                bool two_d = muse_tensor_shape(d, dims, ne) == 2;
                x->id = id, x->il = (uint32_t)il, x->ne0 = ne[0], x->ne1 = two_d ? ne[1] : 0;
                x->matrix = d->kind == MUSE_TENSOR_MATRIX || d->kind == MUSE_TENSOR_ROWS;
                fx_values(id, ne[0], &x->mean, &x->std);
            }
    return n;
}

/* Write `s` to `path`; returns false (after printing why) on a writer error. */
static bool fx_write(const char *path, const struct fx_spec *s) {
    struct muse_error err;
    struct muse_gguf_writer *w;
    if (muse_gguf_writer_open(path, &w, &err)) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        return false;
    }
    char key[128];
#define KEY(sfx) (snprintf(key, sizeof key, "%s.%s", s->arch, sfx), key)
#define OMIT(sfx) (s->omit_key && !strcmp(s->omit_key, sfx))
    muse_gguf_writer_set_str(w, "general.architecture", s->arch);
    muse_gguf_writer_set_str(w, "general.name", "fixture");
    if (!OMIT("context_length")) muse_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->ctx);
    if (!OMIT("embedding_length")) muse_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    if (!OMIT("block_count")) muse_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    if (!OMIT("feed_forward_length")) muse_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    if (!OMIT("attention.head_count")) muse_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    if (!OMIT("attention.head_count_kv")) muse_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    if (!OMIT("attention.key_length")) muse_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    if (!OMIT("attention.value_length")) muse_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    if (!OMIT("attention.layer_norm_rms_epsilon")) muse_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (!OMIT("rope.freq_base")) muse_gguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f);
    if (s->freq_base_swa > 0) muse_gguf_writer_set_f32(w, KEY("rope.freq_base_swa"), s->freq_base_swa);
    if (!s->no_softcap) muse_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), 20.0f);
    if (!OMIT("logit_scale")) muse_gguf_writer_set_f32(w, KEY("logit_scale"), 0.5f);
    if (!OMIT("attention.sliding_window")) muse_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)s->window);
    bool b[16];
    int32_t i32[16];
    for (int i = 0; i < 16; i++) b[i] = s->swa[i], i32[i] = s->swa[i];
    switch (s->pattern) {
    case FX_PATTERN_BOOL_ARRAY: muse_gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), MUSE_GGUF_TYPE_BOOL, b, (uint64_t)s->n_layer); break;
    case FX_PATTERN_INT_ARRAY: muse_gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), MUSE_GGUF_TYPE_INT32, i32, (uint64_t)s->n_layer); break;
    case FX_PATTERN_U32: muse_gguf_writer_set_u32(w, KEY("attention.sliding_window_pattern"), s->period); break;
    case FX_PATTERN_NONE: break;
    case FX_PATTERN_SHORT: muse_gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), MUSE_GGUF_TYPE_BOOL, b, (uint64_t)s->n_layer - 1); break;
    }
    if (s->n_tokens_kv > 0) {
        const char **strs = malloc(sizeof(char *) * (size_t)s->n_tokens_kv);
        for (int i = 0; i < s->n_tokens_kv; i++) strs[i] = "t";
        muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)s->n_tokens_kv);
        free(strs);
    }
    muse_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->n_vocab - 3);
    muse_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)s->n_vocab - 2);
    muse_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)s->n_vocab - 1);
#undef KEY
#undef OMIT
    /* every base tensor's values first (one RNG stream, independent of the optional layout) */
    static struct fx_tensor t[FX_MAX_TENSORS];
    int n = fx_tensors(s, t);
    float *vals[FX_MAX_TENSORS];
    uint64_t rng = s->seed * 0x9E3779B97F4A7C15ull + 7;
    for (int i = 0; i < n; i++) {
        bool bad = s->bad_tensor && !strcmp(s->bad_tensor, t[i].name);
        if (bad) t[i].ne1 ? (t[i].ne1 += 16) : (t[i].ne0 += 16);
        size_t cnt = (size_t)t[i].ne0 * (size_t)(t[i].ne1 ? t[i].ne1 : 1);
        vals[i] = malloc(sizeof(float) * cnt);
        for (size_t j = 0; j < cnt; j++) vals[i][j] = (float)(t[i].mean + t[i].std * fx_normal(&rng));
    }
    /* the tensors as written: name, shape, values (owned or borrowed), matrix or not */
    struct out { char name[80]; int64_t ne0, ne1; float *v; bool own, matrix; };
    static struct out o[FX_MAX_TENSORS];
    int no = 0;
    for (int i = 0; i < n; i++) {
        if (s->omit_tensor && !strcmp(s->omit_tensor, t[i].name)) continue;
        const int id = t[i].id;
        if (s->fused_qkv && (id == MUSE_GLIMMER_ATTN_K || id == MUSE_GLIMMER_ATTN_V)) continue;
        struct out *x = &o[no++];
        snprintf(x->name, sizeof x->name, "%.63s", t[i].name);
        x->ne0 = t[i].ne0, x->ne1 = t[i].ne1, x->v = vals[i], x->own = false, x->matrix = t[i].matrix;
        if (s->fused_qkv && id == MUSE_GLIMMER_ATTN_Q) { /* t[i+1], t[i+2] are attn_k, attn_v (table order) */
            int64_t r = t[i].ne1 + t[i + 1].ne1 + t[i + 2].ne1;
            x->v = malloc(sizeof(float) * (size_t)(t[i].ne0 * r));
            x->own = true;
            memcpy(x->v, vals[i], sizeof(float) * (size_t)(t[i].ne0 * t[i].ne1));
            memcpy(x->v + t[i].ne0 * t[i].ne1, vals[i + 1], sizeof(float) * (size_t)(t[i].ne0 * t[i + 1].ne1));
            memcpy(x->v + t[i].ne0 * (t[i].ne1 + t[i + 1].ne1), vals[i + 2], sizeof(float) * (size_t)(t[i].ne0 * t[i + 2].ne1));
            muse_tensor_name(&muse_glimmer_tensors[MUSE_GLIMMER_ATTN_QKV], t[i].il, x->name, sizeof x->name);
            x->ne1 = r;
        }
        if (s->q_bias != 0 && id == MUSE_GLIMMER_ATTN_Q) {
            struct out *b = &o[no++];
            int bias = s->fused_qkv ? MUSE_GLIMMER_ATTN_QKV_BIAS : MUSE_GLIMMER_ATTN_Q_BIAS;
            muse_tensor_name(&muse_glimmer_tensors[bias], t[i].il, b->name, sizeof b->name);
            b->ne0 = s->fused_qkv ? o[no - 2].ne1 : t[i].ne1, b->ne1 = 0, b->own = true, b->matrix = false;
            b->v = calloc((size_t)b->ne0, sizeof(float));
            for (int64_t j = 0; j < t[i].ne1; j++) b->v[j] = s->q_bias;
        }
        if (s->wo_scale > 0 && id == MUSE_GLIMMER_ATTN_OUTPUT) {
            size_t cnt = (size_t)(t[i].ne0 * t[i].ne1);
            x->v = malloc(sizeof(float) * cnt);
            x->own = true;
            for (size_t j = 0; j < cnt; j++) x->v[j] = vals[i][j] / s->wo_scale;
        }
        /* attn_gate.weight.scale is not in the table (llama.cpp ignores it): its name is spelled here */
        float sc = id == MUSE_GLIMMER_ATTN_OUTPUT ? s->wo_scale : id == MUSE_GLIMMER_ATTN_GATE ? s->gate_scale : 0;
        if (sc > 0) {
            struct out *c = &o[no++];
            snprintf(c->name, sizeof c->name, "%.63s.scale", t[i].name);
            c->ne0 = 1, c->ne1 = 0, c->own = true, c->matrix = false;
            c->v = malloc(sizeof(float));
            c->v[0] = sc;
        }
    }
    for (int i = 0; i < no; i++) {
        int64_t ne[2] = {o[i].ne0, o[i].ne1};
        uint32_t type = o[i].matrix && s->q8_0 ? MUSE_TYPE_Q8_0 : MUSE_TYPE_F32;
        muse_gguf_writer_add_tensor(w, o[i].name, type, o[i].ne1 ? 2 : 1, ne);
    }
    bool ok = muse_gguf_writer_begin_data(w) == MUSE_OK;
    for (int i = 0; ok && i < no; i++) {
        int64_t ne0 = o[i].ne0, ne1 = o[i].ne1 ? o[i].ne1 : 1;
        uint8_t *q = malloc((size_t)ne0 * 2 + 64);
        for (int64_t r = 0; r < ne1; r++) {
            const float *row = o[i].v + r * ne0;
            if (o[i].matrix && s->q8_0) {
                muse_type_traits[MUSE_TYPE_Q8_0].from_float(row, q, ne0);
                muse_gguf_writer_write_data(w, q, muse_type_row_size(MUSE_TYPE_Q8_0, ne0));
            } else {
                muse_gguf_writer_write_data(w, row, sizeof(float) * (size_t)ne0);
            }
        }
        free(q);
    }
    for (int i = 0; i < no; i++)
        if (o[i].own) free(o[i].v);
    for (int i = 0; i < n; i++) free(vals[i]);
    if (!ok) goto fail;
    if (muse_gguf_writer_close(w, &err)) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        return false;
    }
    return true;
fail:
    fprintf(stderr, "fixture: %s\n", muse_gguf_writer_error(w));
    muse_gguf_writer_close(w, &err);
    return false;
}
