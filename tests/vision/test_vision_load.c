/*
 * test_vision_load.c - muse_vision_load on the golden vis-mmproj and on broken copies of it, written
 * here with the GGUF writer: a missing tensor, a wrong shape, a wrong type, an unknown tensor, an
 * adapter whose widths disagree, a non-square position table, a wrong or missing projector type,
 * a missing key, an unsupported merge, a head count that does not divide the width, no vision
 * encoder. Each error is the expected status with ONE line naming the culprit. Also the text model
 * passed as an mmproj and the mmproj passed as a text model, a truncated file, a missing file, an
 * unknown backend, and the facts a good file reports.
 */
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "vision/vision.h"
#include "vision_test_util.h"

/* How a copy differs from vis-mmproj. */
struct variant {
    const char *drop_tensor;
    const char *reshape_tensor; /* new shape: ne[] / n_dims, zero-filled data */
    int64_t ne[4];
    uint32_t n_dims;
    const char *retype_tensor;  /* new type, zero-filled data */
    uint32_t type;
    const char *add_tensor;     /* an extra F32 [64] */
    const char *drop_key;
    const char *str_key, *str_val;
    const char *u32_key;
    uint32_t u32_val;
    const char *bool_key;
    bool bool_val;
};

static char src_path[1024], dst_path[512];

static bool write_variant(const struct variant *v) {
    struct muse_gguf *g = NULL;
    struct muse_gguf_writer *w = NULL;
    struct muse_error err;
    if (muse_gguf_open(src_path, &g, &err) || muse_gguf_writer_open(dst_path, &w, &err)) {
        fprintf(stderr, "variant: %s\n", err.msg);
        muse_gguf_free(g);
        return false;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (v->drop_key && !strcmp(k, v->drop_key)) continue;
        if (v->str_key && !strcmp(k, v->str_key)) muse_gguf_writer_set_str(w, k, v->str_val);
        else if (v->u32_key && !strcmp(k, v->u32_key)) muse_gguf_writer_set_u32(w, k, v->u32_val);
        else if (v->bool_key && !strcmp(k, v->bool_key)) muse_gguf_writer_set_bool(w, k, v->bool_val);
        else muse_gguf_writer_set_value(w, k, &g->kv[i].value);
    }
    if (v->str_key && !muse_gguf_find_kv(g, v->str_key)) muse_gguf_writer_set_str(w, v->str_key, v->str_val);
    if (v->u32_key && !muse_gguf_find_kv(g, v->u32_key)) muse_gguf_writer_set_u32(w, v->u32_key, v->u32_val);
    size_t n_bytes[128] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        uint32_t type = t->type, nd = t->n_dims;
        const int64_t *ne = t->ne;
        if (v->reshape_tensor && !strcmp(t->name, v->reshape_tensor)) ne = v->ne, nd = v->n_dims;
        if (v->retype_tensor && !strcmp(t->name, v->retype_tensor)) type = v->type;
        muse_gguf_writer_add_tensor(w, t->name, type, nd, ne);
        int64_t n = 1;
        for (uint32_t d = 1; d < nd; d++) n *= ne[d];
        n_bytes[i] = muse_type_row_size((enum muse_type)type, ne[0]) * (size_t)n;
    }
    if (v->add_tensor) muse_gguf_writer_add_tensor(w, v->add_tensor, MUSE_TYPE_F32, 1, (int64_t[]){64});
    muse_gguf_writer_begin_data(w);
    static uint8_t zeros[1 << 20];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        const bool changed = (v->reshape_tensor && !strcmp(t->name, v->reshape_tensor)) ||
                             (v->retype_tensor && !strcmp(t->name, v->retype_tensor));
        muse_gguf_writer_write_data(w, changed ? zeros : t->data, changed ? n_bytes[i] : t->nbytes);
    }
    if (v->add_tensor) muse_gguf_writer_write_data(w, zeros, 256);
    const muse_status st = muse_gguf_writer_close(w, &err);
    muse_gguf_free(g);
    if (st) fprintf(stderr, "variant: %s\n", err.msg);
    return st == MUSE_OK;
}

static void expect_load_error(const char *what, const char *path, muse_status want, const char *needle1,
                              const char *needle2) {
    struct muse_vision *v = NULL;
    struct muse_error err = {0};
    const muse_status st = muse_vision_load(path, muse_vision_default_params(), &v, &err);
    TEST_CONDF(st == want, "%s: status %d (%s), want %d", what, st, err.msg, want);
    TEST_CONDF(err.msg[0] && !strchr(err.msg, '\n'), "%s: not one line: '%s'", what, err.msg);
    TEST_CONDF(!needle1 || strstr(err.msg, needle1), "%s: '%s' lacks '%s'", what, err.msg, needle1);
    TEST_CONDF(!needle2 || strstr(err.msg, needle2), "%s: '%s' lacks '%s'", what, err.msg, needle2);
    TEST_CONDF(v == NULL, "%s: object returned on error", what);
    muse_vision_free(v);
}

static void variant_error(const char *what, struct variant v, muse_status want, const char *needle1, const char *needle2) {
    if (!write_variant(&v)) {
        TEST_CONDF(0, "%s: cannot write the variant", what);
        return;
    }
    expect_load_error(what, dst_path, want, needle1, needle2);
}

static void test_good(void) {
    struct muse_vision *v = NULL;
    struct muse_error err;
    TEST_CONDF(muse_vision_load(src_path, muse_vision_default_params(), &v, &err) == MUSE_OK, "vis-mmproj: %s", err.msg);
    if (!v) return;
    struct muse_vision_info in;
    muse_vision_get_info(v, &in);
    TEST_COND("facts", in.n_layer == 4 && in.n_embd == 64 && in.n_head == 4 && in.head_dim == 16 && in.n_ff == 128 &&
                           in.patch_size == 14 && in.n_merge == 2 && in.window_side == 4 && in.n_embd_merged == 256 &&
                           in.n_mm0 == 96 && in.n_mm1 == 96 && in.n_embd_out == 256 && in.n_global_layers == 1 &&
                           in.image_size == 112 && in.default_max_tokens == 4096 && !strcmp(in.backend, "cpu"));
    TEST_COND("token counts", muse_vision_n_tokens(v, 1024, 1024, 0) == 1369 && muse_vision_n_tokens(v, 336, 336, 0) == 144 &&
                                  muse_vision_n_tokens(v, 3840, 2160, 256) == 252 && muse_vision_n_tokens(v, 0, 5, 0) == -1);
    muse_vision_free(v);
    struct muse_vision_params p = muse_vision_default_params();
    p.backend = "gpu";
    TEST_COND("unknown backend", muse_vision_load(src_path, p, &v, &err) == MUSE_ERR_INVALID_ARG && strstr(err.msg, "gpu"));
    p.backend = "ref";
    p.n_threads = 4;
    TEST_COND("ref backend: 1 thread", muse_vision_load(src_path, p, &v, &err) == MUSE_OK);
    if (v) {
        muse_vision_get_info(v, &in);
        TEST_COND("ref facts", in.n_threads == 1 && !strcmp(in.backend, "ref"));
        muse_vision_free(v);
    }
}

static void test_variants(void) {
    variant_error("missing tensor", (struct variant){.drop_tensor = "v.blk.2.attn_k.weight"}, MUSE_ERR_MISSING,
                  "v.blk.2.attn_k.weight", "missing");
    variant_error("missing adapter", (struct variant){.drop_tensor = "mm.2.weight"}, MUSE_ERR_MISSING, "mm.2.weight", NULL);
    variant_error("wrong shape", (struct variant){.reshape_tensor = "v.blk.1.ffn_up.weight", .ne = {64, 100}, .n_dims = 2},
                  MUSE_ERR_SHAPE, "v.blk.1.ffn_up.weight", "n_ff");
    variant_error("wrong rank", (struct variant){.reshape_tensor = "v.pre_ln.bias", .ne = {64, 2}, .n_dims = 2},
                  MUSE_ERR_SHAPE, "v.pre_ln.bias", NULL);
    variant_error("adapter widths disagree", (struct variant){.reshape_tensor = "mm.1.weight", .ne = {128, 96}, .n_dims = 2},
                  MUSE_ERR_SHAPE, "mm.1.weight", "mm.0 rows");
    variant_error("patch kernel", (struct variant){.reshape_tensor = "v.patch_embd.weight", .ne = {16, 16, 3, 64}, .n_dims = 4},
                  MUSE_ERR_SHAPE, "v.patch_embd.weight", "patch_size");
    variant_error("non-square position table", (struct variant){.reshape_tensor = "v.position_embd.weight", .ne = {64, 15}, .n_dims = 2},
                  MUSE_ERR_SHAPE, "v.position_embd.weight", "square");
    variant_error("norm in f16", (struct variant){.retype_tensor = "v.blk.3.ln2.weight", .type = MUSE_TYPE_F16},
                  MUSE_ERR_SHAPE, "v.blk.3.ln2.weight", "f32");
    variant_error("integer matrix", (struct variant){.retype_tensor = "v.blk.0.attn_q.weight", .type = MUSE_TYPE_I32},
                  MUSE_ERR_SHAPE, "v.blk.0.attn_q.weight", "matmul");
    variant_error("unknown tensor", (struct variant){.add_tensor = "v.blk.0.attn_q_norm.weight"}, MUSE_ERR_UNSUPPORTED,
                  "v.blk.0.attn_q_norm.weight", NULL);
    variant_error("wrong projector type", (struct variant){.str_key = "clip.projector_type", .str_val = "qwen2vl"},
                  MUSE_ERR_UNSUPPORTED, "qwen2vl", "muse-glimmer");
    variant_error("no projector type", (struct variant){.drop_key = "clip.projector_type"}, MUSE_ERR_MISSING,
                  "clip.projector_type", NULL);
    variant_error("fallback projector key", (struct variant){.str_key = "clip.projector_type", .str_val = "",
                  .drop_key = "clip.vision.projector_type"}, MUSE_ERR_MISSING, "projector", NULL);
    variant_error("missing key", (struct variant){.drop_key = "clip.vision.block_count"}, MUSE_ERR_MISSING,
                  "clip.vision.block_count", NULL);
    variant_error("missing mean", (struct variant){.drop_key = "clip.vision.image_mean"}, MUSE_ERR_MISSING,
                  "clip.vision.image_mean", NULL);
    variant_error("merge 3", (struct variant){.u32_key = "clip.vision.spatial_merge_size", .u32_val = 3},
                  MUSE_ERR_UNSUPPORTED, "spatial_merge_size", NULL);
    variant_error("heads do not divide", (struct variant){.u32_key = "clip.vision.attention.head_count", .u32_val = 3},
                  MUSE_ERR_FORMAT, "head_count", NULL);
    variant_error("head_dim 2", (struct variant){.u32_key = "clip.vision.attention.head_count", .u32_val = 32},
                  MUSE_ERR_UNSUPPORTED, "head_dim", NULL);
    variant_error("no vision encoder", (struct variant){.bool_key = "clip.has_vision_encoder", .bool_val = false},
                  MUSE_ERR_UNSUPPORTED, "has_vision_encoder", NULL);
    variant_error("absurd layer count", (struct variant){.u32_key = "clip.vision.block_count", .u32_val = 4000000000u},
                  MUSE_ERR_FORMAT, "block_count", NULL);
    variant_error("more layers than tensors", (struct variant){.u32_key = "clip.vision.block_count", .u32_val = 5},
                  MUSE_ERR_MISSING, "v.blk.4.", NULL);
    variant_error("fewer layers than tensors", (struct variant){.u32_key = "clip.vision.block_count", .u32_val = 3},
                  MUSE_ERR_UNSUPPORTED, "v.blk.3.", NULL);
    variant_error("wrong architecture", (struct variant){.str_key = "general.architecture", .str_val = "llama"},
                  MUSE_ERR_UNSUPPORTED, "llama", NULL);
    /* a truncated file */
    size_t n;
    char *bytes = vt_read_file(src_path, &n);
    FILE *f = fopen(dst_path, "wb");
    if (bytes && f) fwrite(bytes, 1, n / 2, f);
    if (f) fclose(f);
    free(bytes);
    expect_load_error("truncated file", dst_path, MUSE_ERR_FORMAT, NULL, NULL);
    unlink(dst_path);
    expect_load_error("missing file", dst_path, MUSE_ERR_IO, dst_path, NULL);
}

static void test_wrong_files(void) {
    char text[1024];
    vt_golden("models/vis-text-4l-256.gguf", text, sizeof text);
    expect_load_error("text model as mmproj", text, MUSE_ERR_UNSUPPORTED, "text model", "--mmproj");
    struct muse_model *m = NULL;
    struct muse_error err = {0};
    const muse_status st = muse_model_load(src_path, muse_model_default_params(), &m, &err);
    TEST_CONDF(st == MUSE_ERR_UNSUPPORTED && strstr(err.msg, "vision projector") && strstr(err.msg, "--mmproj") &&
                   !strchr(err.msg, '\n'),
               "mmproj as text model: %d '%s'", st, err.msg);
    muse_model_free(m);
}

int main(void) {
    vt_golden("models/vis-mmproj.gguf", src_path, sizeof src_path);
    snprintf(dst_path, sizeof dst_path, "%s/muse-test-vision-load-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    test_good();
    test_variants();
    test_wrong_files();
    unlink(dst_path);
    return TEST_REPORT();
}
