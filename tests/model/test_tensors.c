/*
 * test_tensors.c - the tensor tables (model/tensors.h):
 *   - every table (text model, mmproj, drafter) keeps the conventions tensors.h states: names (one
 *     %u exactly on per-layer entries, unique), kinds and their dimensionality, one slot per entry,
 *     one contiguous per-layer run, `dep` pointing back to an optional entry of the same scope;
 *   - muse_tensors_walk visits in each of its three orders, and skips by `when`;
 *   - the Muse-Glimmer table gives the 30B shapes of text-model.md §4 (base list and optional
 *     variants) and its counts: 731 tensors = 313 F32 norms + 418 matrices;
 *   - muse_glimmer_dims_uniform agrees with muse_glimmer_dims on a file of the same sizes;
 *   - muse_tensor_bind: missing / optional / shape / type errors with the loader's messages.
 */
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/types.h"
#include "model/tensors.h"
#include "speculative/dflash_tensors.h"
#include "vision/vision.h"
#include "test.h"

/* The conventions of tensors.h for any table of n entries whose dimension enum has n_dim_ids ids. */
static void check_table(const char *what, const struct muse_tensor_table *table) {
    const struct muse_tensor_desc *tab = table->desc;
    const int n = table->n_desc, n_dim_ids = table->n_dim_ids;
    int first_layer = -1, last_layer = -1;
    TEST_CONDF(n_dim_ids <= MUSE_TENSOR_MAX_DIM_IDS && table->layer_size > 0, "%s: %d dimension ids fit", what, n_dim_ids);
    for (int i = 0; i < n; i++) {
        const struct muse_tensor_desc *d = &tab[i];
        TEST_CONDF(d->name && d->role && d->role[0], "%s[%d]: name and role set", what, i);
        if (!d->name) continue;
        int n_pct = 0;
        bool only_u = true;
        for (const char *p = strchr(d->name, '%'); p; p = strchr(p + 1, '%')) n_pct++, only_u = only_u && p[1] == 'u';
        TEST_CONDF(d->per_layer ? n_pct == 1 && only_u : n_pct == 0, "%s: '%s': one %%u exactly when per layer", what,
                   d->name);
        TEST_CONDF((unsigned)d->kind < MUSE_TENSOR_KIND_COUNT, "%s: '%s': kind", what, d->name);
        int n_dims = 0;
        bool dims_ok = true;
        for (int k = 0; k < MUSE_TENSOR_MAX_DIMS; k++) {
            dims_ok = dims_ok && d->dims[k] < n_dim_ids && (d->dims[k] == 0 || n_dims == k);
            if (d->dims[k]) n_dims++;
        }
        bool fits = d->kind == MUSE_TENSOR_MATRIX || d->kind == MUSE_TENSOR_ROWS ? n_dims == 2
                    : d->kind == MUSE_TENSOR_FLOAT                                ? n_dims >= 2
                                                                                  : n_dims == 1;
        TEST_CONDF(dims_ok && fits, "%s: '%s': dims {%d, %d, %d, %d} fit its kind", what, d->name, d->dims[0], d->dims[1],
                   d->dims[2], d->dims[3]);
        TEST_CONDF((unsigned)d->when < MUSE_TENSOR_WHEN_COUNT, "%s: '%s': when", what, d->name);
        if (d->when != MUSE_TENSOR_ALWAYS)
            TEST_CONDF(d->dep < i && tab[d->dep].optional && tab[d->dep].per_layer == d->per_layer &&
                           tab[d->dep].when == MUSE_TENSOR_ALWAYS,
                       "%s: '%s': dep is an earlier optional entry of the same scope", what, d->name);
        TEST_CONDF(d->kind == MUSE_TENSOR_SCALE ? d->found && d->offset != d->found : !d->found,
                   "%s: '%s': a scale binds a value and a flag, anything else a view", what, d->name);
        for (int j = 0; j < i; j++)
            TEST_CONDF(tab[j].per_layer != d->per_layer || tab[j].offset != d->offset, "%s: '%s': its own slot", what, d->name);
        if (d->per_layer) {
            if (first_layer < 0) first_layer = i;
            TEST_CONDF(last_layer < 0 || last_layer == i - 1, "%s: '%s': the per-layer run is contiguous", what, d->name);
            last_layer = i;
        }
        char a[96], b[96];
        for (uint32_t il = 0; il < 12; il += 11) {
            muse_tensor_name(d, il, a, sizeof a);
            for (int j = 0; j < i; j++) {
                muse_tensor_name(&tab[j], il, b, sizeof b);
                TEST_CONDF(strcmp(a, b), "%s: '%s' is unique", what, a);
            }
        }
    }
}

/* The 30B (text-model.md 2, 4): shapes per entry, the optional variants included. */
static void test_glimmer_30b(void) {
    static struct muse_hparams hp; /* large (per-layer arrays): not on the stack */
    memset(&hp, 0, sizeof hp);
    hp.n_embd = 6656, hp.n_layer = 52, hp.n_embd_head_k = hp.n_embd_head_v = 128;
    hp.n_embd_head_k_swa = hp.n_embd_head_v_swa = 128;
    for (int il = 0; il < 52; il++) hp.n_ff[il] = 19968, hp.n_head[il] = 32, hp.n_head_kv[il] = 2, hp.is_swa[il] = il % 4 != 3;
    static const struct { int id; int64_t ne0, ne1; } spec[] = { /* ne1 0: 1-D */
        {MUSE_GLIMMER_TOKEN_EMBD, 6656, 202048},   {MUSE_GLIMMER_OUTPUT_NORM, 6656, 0},
        {MUSE_GLIMMER_OUTPUT, 6656, 202048},       {MUSE_GLIMMER_OUTPUT_SCALE, 1, 0},
        {MUSE_GLIMMER_ATTN_NORM, 6656, 0},         {MUSE_GLIMMER_ATTN_Q, 6656, 4096},
        {MUSE_GLIMMER_ATTN_K, 6656, 256},          {MUSE_GLIMMER_ATTN_V, 6656, 256},
        {MUSE_GLIMMER_ATTN_OUTPUT, 4096, 6656},    {MUSE_GLIMMER_ATTN_Q_NORM, 128, 0},
        {MUSE_GLIMMER_ATTN_K_NORM, 128, 0},        {MUSE_GLIMMER_ATTN_GATE, 6656, 4096},
        {MUSE_GLIMMER_POST_ATTENTION_NORM, 6656, 0}, {MUSE_GLIMMER_FFN_NORM, 6656, 0},
        {MUSE_GLIMMER_FFN_GATE, 6656, 19968},      {MUSE_GLIMMER_FFN_UP, 6656, 19968},
        {MUSE_GLIMMER_FFN_DOWN, 19968, 6656},      {MUSE_GLIMMER_POST_FFW_NORM, 6656, 0},
        {MUSE_GLIMMER_ATTN_QKV, 6656, 4608},       {MUSE_GLIMMER_ATTN_QKV_BIAS, 4608, 0},
        {MUSE_GLIMMER_ATTN_QKV_SCALE, 1, 0},       {MUSE_GLIMMER_ATTN_Q_BIAS, 4096, 0},
        {MUSE_GLIMMER_ATTN_K_BIAS, 256, 0},        {MUSE_GLIMMER_ATTN_V_BIAS, 256, 0},
        {MUSE_GLIMMER_ATTN_Q_SCALE, 1, 0},         {MUSE_GLIMMER_ATTN_K_SCALE, 1, 0},
        {MUSE_GLIMMER_ATTN_V_SCALE, 1, 0},         {MUSE_GLIMMER_ATTN_OUTPUT_SCALE, 1, 0},
    };
    TEST_COND("every entry has its 30B shape listed", sizeof spec / sizeof spec[0] == MUSE_GLIMMER_TENSOR_COUNT);
    int64_t dims[MUSE_GLIMMER_DIM_COUNT], uni[MUSE_GLIMMER_DIM_COUNT];
    muse_glimmer_dims_uniform(uni, 6656, 202048, 32, 2, 128, 19968);
    for (uint32_t il = 0; il < 52; il += 3) { /* SWA and full layers alike */
        muse_glimmer_dims(dims, &hp, il, 202048);
        TEST_CONDF(!memcmp(dims, uni, sizeof dims), "layer %u: dims_uniform == dims", il);
        for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
            const struct muse_tensor_desc *d = &muse_glimmer_tensors[spec[k].id];
            int64_t ne[MUSE_TENSOR_MAX_DIMS];
            int n_dims = muse_tensor_shape(d, dims, ne);
            bool ok = n_dims == (spec[k].ne1 ? 2 : 1) && ne[0] == spec[k].ne0 && ne[1] == (spec[k].ne1 ? spec[k].ne1 : 1);
            TEST_CONDF(ok, "layer %u: '%s' is {%lld, %lld} (%d-D), spec {%lld, %lld}", il, d->name, (long long)ne[0],
                       (long long)ne[1], n_dims, (long long)spec[k].ne0, (long long)spec[k].ne1);
        }
    }
    /* the converter's file: the required entries; 731 tensors, 313 F32 norms + 418 matrices */
    int n_norm = 0, n_matrix = 0;
    for (int id = 0; id < MUSE_GLIMMER_TENSOR_COUNT; id++) {
        const struct muse_tensor_desc *d = &muse_glimmer_tensors[id];
        if (d->optional) continue;
        int times = d->per_layer ? 52 : 1;
        if (d->kind == MUSE_TENSOR_VECTOR) n_norm += times;
        else n_matrix += times;
        TEST_CONDF(d->kind != MUSE_TENSOR_SCALE, "'%s': a scale is never required", d->name);
    }
    TEST_CONDF(n_norm == 313 && n_matrix == 418, "30B: %d norms + %d matrices, spec 313 + 418", n_norm, n_matrix);
    char name[64];
    muse_tensor_name(&muse_glimmer_tensors[MUSE_GLIMMER_ATTN_Q_NORM], 51, name, sizeof name);
    TEST_CONDF(!strcmp(name, "blk.51.attn_q_norm.weight"), "layer name: %s", name);
    muse_tensor_name(&muse_glimmer_tensors[MUSE_GLIMMER_OUTPUT], 51, name, sizeof name);
    TEST_CONDF(!strcmp(name, "output.weight"), "global name: %s", name);
}

/* muse_tensor_bind on a small file: the loader's checks and messages. */
static void test_bind(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/muse-test-tensors-%d.gguf", (int)getpid());
    struct muse_error err;
    struct muse_gguf_writer *w;
    if (muse_gguf_writer_open(path, &w, &err)) {
        TEST_CONDF(0, "writer: %s", err.msg);
        return;
    }
    static const struct { const char *name; uint32_t type; int64_t ne0, ne1; } file[] = {
        {"v", MUSE_TYPE_F32, 64, 0},  {"h", MUSE_TYPE_F16, 64, 0},   {"m", MUSE_TYPE_Q8_0, 64, 3},
        {"s", MUSE_TYPE_F32, 1, 0},   {"i", MUSE_TYPE_I32, 64, 2},   {"k", MUSE_TYPE_Q4_K, 256, 2},
    };
    size_t n_file = sizeof file / sizeof file[0];
    for (size_t i = 0; i < n_file; i++) {
        int64_t ne[2] = {file[i].ne0, file[i].ne1};
        muse_gguf_writer_add_tensor(w, file[i].name, file[i].type, file[i].ne1 ? 2 : 1, ne);
    }
    bool ok = muse_gguf_writer_begin_data(w) == MUSE_OK;
    static const uint8_t zeros[4096];
    for (size_t i = 0; ok && i < n_file; i++)
        ok = muse_gguf_writer_write_data(w, zeros, muse_type_row_size(file[i].type, file[i].ne0) *
                                                       (size_t)(file[i].ne1 ? file[i].ne1 : 1)) == MUSE_OK;
    if (muse_gguf_writer_close(w, &err) || !ok) {
        TEST_CONDF(0, "writer failed");
        unlink(path);
        return;
    }
    struct muse_gguf *g;
    if (muse_gguf_open(path, &g, &err)) {
        TEST_CONDF(0, "open: %s", err.msg);
        unlink(path);
        return;
    }
    static const struct {
        const char *name;
        struct muse_tensor_desc d;
        int n_dims;
        int64_t ne0, ne1;
        muse_status want;
        const char *msg; /* the whole message after the file name; NULL for MUSE_OK */
    } cases[] = {
        {"v", {.kind = MUSE_TENSOR_VECTOR}, 1, 64, 1, MUSE_OK, NULL},
        {"m", {.kind = MUSE_TENSOR_MATRIX}, 2, 64, 3, MUSE_OK, NULL},
        {"k", {.kind = MUSE_TENSOR_ROWS}, 2, 256, 2, MUSE_OK, NULL},
        {"s", {.kind = MUSE_TENSOR_SCALE}, 1, 1, 1, MUSE_OK, NULL},
        {"x", {.kind = MUSE_TENSOR_VECTOR, .optional = true}, 1, 64, 1, MUSE_OK, NULL},
        {"x", {.kind = MUSE_TENSOR_MATRIX}, 2, 64, 3, MUSE_ERR_MISSING, "missing tensor 'x'"},
        {"v", {.kind = MUSE_TENSOR_VECTOR, .optional = true}, 1, 32, 1, MUSE_ERR_SHAPE,
         "tensor 'v' has wrong shape: expected {32}, found {64}"},
        {"m", {.kind = MUSE_TENSOR_MATRIX}, 2, 64, 4, MUSE_ERR_SHAPE, "tensor 'm' has wrong shape: expected {64, 4}, found {64, 3}"},
        {"m", {.kind = MUSE_TENSOR_VECTOR}, 1, 64, 1, MUSE_ERR_SHAPE, "tensor 'm' has wrong shape: expected {64}, found {64, 3}"},
        {"h", {.kind = MUSE_TENSOR_VECTOR}, 1, 64, 1, MUSE_ERR_SHAPE, "tensor 'h' has type f16, expected f32"},
        {"m", {.kind = MUSE_TENSOR_ROWS}, 2, 64, 3, MUSE_OK, NULL},
        {"i", {.kind = MUSE_TENSOR_MATRIX}, 2, 64, 2, MUSE_ERR_UNSUPPORTED, "tensor 'i' has type i32, which has no matmul kernel"},
        {"i", {.kind = MUSE_TENSOR_ROWS}, 2, 64, 2, MUSE_ERR_UNSUPPORTED, "tensor 'i' has type i32, which cannot be dequantized"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct muse_weight wt;
        int64_t ne[2] = {cases[c].ne0, cases[c].ne1};
        memset(&err, 0, sizeof err);
        muse_status st = muse_tensor_bind(g, &cases[c].d, cases[c].name, cases[c].n_dims, ne, &wt, &err);
        TEST_CONDF(st == cases[c].want, "case %zu: status %d (%s), want %d", c, st, err.msg, cases[c].want);
        if (cases[c].msg)
            TEST_CONDF(!strcmp(err.msg, cases[c].msg), "case %zu: message '%s', want '%s'", c, err.msg, cases[c].msg);
        else if (st == MUSE_OK && strcmp(cases[c].name, "x"))
            TEST_CONDF(wt.data && wt.ne0 == cases[c].ne0 && wt.ne1 == cases[c].ne1 && !strcmp(wt.name, cases[c].name) &&
                           wt.row_size == muse_type_row_size(wt.type, wt.ne0),
                       "case %zu: bound view", c);
        else if (st == MUSE_OK)
            TEST_CONDF(wt.data == NULL, "case %zu: an absent optional entry binds nothing", c);
    }
    muse_gguf_free(g);
    unlink(path);
}

/* The three orders of muse_tensors_walk on the drafter table (3 globals, an 11-entry run, 3 optional
 * globals after it) with 2 layers: the sequence of (entry, layer) visited. */
struct walk_log {
    int n;
    int id[64];
    uint32_t il[64];
};

static muse_status log_visit(struct muse_tensor_net *net, const struct muse_tensor_visit *v, void *user) {
    struct walk_log *l = user;
    if (l->n < 64) l->id[l->n] = v->id, l->il[l->n] = v->il;
    l->n++;
    char name[64];
    muse_tensor_name(v->desc, v->il, name, sizeof name);
    TEST_CONDF(!strcmp(name, v->name) && !v->base, "walk: '%s' named, no weights", v->name);
    return MUSE_OK;
}

static void test_walk_order(void) {
    struct muse_tensor_net net = {.table = &muse_dflash_table, .n_layer = 2};
    for (int k = 1; k < MUSE_DFLASH_DIM_COUNT; k++) net.dims[k] = 16 * k;
    /* the entry ids of each order, written out (the run is ids 3..13; its k-th visit of an entry is layer k) */
    static const int file[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static const int globals[] = {0, 1, 2, 14, 15, 16, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    static const int entries[] = {0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 15, 16};
    static const struct { enum muse_tensor_order order; const int *ids; const char *what; } cases[] = {
        {MUSE_TENSOR_ORDER_FILE, file, "file"},
        {MUSE_TENSOR_ORDER_GLOBALS_FIRST, globals, "globals first"},
        {MUSE_TENSOR_ORDER_ENTRIES, entries, "entries"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct walk_log l = {0};
        muse_tensors_walk(&net, cases[c].order, log_visit, &l);
        TEST_CONDF(l.n == 28, "%s: 3 + 11 * 2 + 3 visits, got %d", cases[c].what, l.n);
        bool same = l.n == 28;
        int seen_run[2] = {0, 0};
        for (int i = 0; same && i < 28; i++) {
            same = l.id[i] == cases[c].ids[i];
            if (muse_dflash_table.desc[l.id[i]].per_layer) {
                /* the layer of the k-th visit of a run entry is k (its layers in order) */
                int k = 0;
                for (int j = 0; j < i; j++) k += l.id[j] == l.id[i];
                same = same && l.il[i] == (uint32_t)k && k < 2;
                seen_run[k]++;
            } else {
                same = same && l.il[i] == 0;
            }
        }
        TEST_CONDF(same && seen_run[0] == 11 && seen_run[1] == 11, "%s: the order of the visits", cases[c].what);
    }
    /* a `when` on an absent dep: without weights the split Q/K/V are visited, the fused bias is not */
    struct muse_tensor_net text = {.table = &muse_glimmer_table, .n_layer = 1};
    struct walk_log l = {0};
    muse_tensors_walk(&text, MUSE_TENSOR_ORDER_FILE, log_visit, &l);
    bool q = false, qkv_bias = false;
    for (int i = 0; i < l.n && i < 64; i++)
        q |= l.id[i] == MUSE_GLIMMER_ATTN_Q, qkv_bias |= l.id[i] == MUSE_GLIMMER_ATTN_QKV_BIAS;
    TEST_CONDF(q && !qkv_bias && l.n == MUSE_GLIMMER_TENSOR_COUNT - 2, "text walk: Q visited, QKV bias and scale not (%d)", l.n);
}

int main(void) {
    check_table("muse_glimmer_table", &muse_glimmer_table);
    check_table("muse_vision_table", &muse_vision_table);
    check_table("muse_dflash_table", &muse_dflash_table);
    TEST_COND("the text table is muse_glimmer_tensors",
              muse_glimmer_table.desc == muse_glimmer_tensors && muse_glimmer_table.n_desc == MUSE_GLIMMER_TENSOR_COUNT);
    test_walk_order();
    test_glimmer_30b();
    test_bind();
    return TEST_REPORT();
}
