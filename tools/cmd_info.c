/*
 * cmd_info.c - `muse info MODEL.gguf [--json]`: the GGUF header, all metadata (long arrays
 * summarized), the tensor table, totals, and what muse makes of the file: derived
 * hyperparameters for Muse-Glimmer text models (per-layer sliding-window flags), vision
 * projector (clip) and DFlash drafter summaries, vocabulary-only files.
 *
 * Errors: exit status 1 and exactly one line on stderr, "muse info: FILE: ...". Usage: 2.
 * JSON schema: docs/info-json.md.
 */
#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "cli.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/tensor_type.h"
#include "info.h"
#include "speculative/dflash_hparams.h"
#include "vision/vision.h"

#define ARRAY_HEAD 8           /* array elements shown */
#define TEXT_STR_MAX 96        /* bytes of a string value shown in text mode */
#define TEXT_ELEM_STR_MAX 32   /* bytes of each string element shown in text mode */

enum file_kind { KIND_TEXT, KIND_VOCAB, KIND_MMPROJ, KIND_DRAFTER };
static const char *const kind_names[] = {"text-model", "vocab-only", "mmproj", "drafter"};

struct info {
    const char *path;
    const struct muse_gguf *g;
    char arch[64];
    enum file_kind kind;
    struct info_hparams hp;     /* KIND_TEXT, KIND_DRAFTER */
    uint64_t n_params, n_bytes;
    uint64_t meta_end;          /* end of the tensor infos (before padding) */
};

static void usage(FILE *f) {
    fprintf(f, "usage: muse info [-m] MODEL.gguf [--json]\n"
               "       muse info --devices\n\n"
               "Show a GGUF file: header, metadata (long arrays summarized), tensors, totals and, for the\n"
               "architectures muse knows (muse-glimmer, clip, dflash), the derived hyperparameters.\n"
               "  --json      one JSON document on stdout (schema: docs/info-json.md)\n"
               "  --devices   the GPUs --backend vulkan can use (name, type, memory, subgroup size, fp16 /\n"
               "              int8-dot / cooperative-matrix support); --device N or MUSE_VK_DEVICE=N picks one\n");
}

// ---- text output ------------------------------------------------------------------------------

static void print_str(const char *s, uint64_t len, uint64_t max) {
    char *c = info_clean_str(s, len, max, true);
    printf("\"%s\"", c ? c : "?");
    free(c);
}

static void print_scalar(const struct muse_gguf_value *v) {
    switch (v->type) {
    case MUSE_GGUF_TYPE_UINT8:
    case MUSE_GGUF_TYPE_UINT16:
    case MUSE_GGUF_TYPE_UINT32:
    case MUSE_GGUF_TYPE_UINT64: printf("%" PRIu64, v->v.u64); break;
    case MUSE_GGUF_TYPE_INT8:
    case MUSE_GGUF_TYPE_INT16:
    case MUSE_GGUF_TYPE_INT32:
    case MUSE_GGUF_TYPE_INT64: printf("%" PRId64, v->v.i64); break;
    case MUSE_GGUF_TYPE_FLOAT32: printf("%.9g", v->v.f64); break;
    case MUSE_GGUF_TYPE_FLOAT64: printf("%.17g", v->v.f64); break;
    case MUSE_GGUF_TYPE_BOOL: printf("%s", v->v.b ? "true" : "false"); break;
    case MUSE_GGUF_TYPE_STRING: print_str(v->v.str.data, v->v.str.len, TEXT_STR_MAX); break;
    default: printf("?"); break;
    }
}

static void print_array(const struct muse_gguf_value *v) {
    enum muse_gguf_type et = v->v.arr.elem_type;
    uint64_t count = v->v.arr.count;
    printf("[%s x %" PRIu64 "] [", muse_gguf_type_name(et), count);
    for (uint64_t i = 0; i < count && i < ARRAY_HEAD; i++) {
        if (i) printf(", ");
        if (et == MUSE_GGUF_TYPE_STRING) {
            print_str(v->v.arr.strs[i].data, v->v.arr.strs[i].len, TEXT_ELEM_STR_MAX);
        } else if (et == MUSE_GGUF_TYPE_FLOAT32 || et == MUSE_GGUF_TYPE_FLOAT64) {
            printf("%.9g", muse_gguf_arr_f64(v, i));
        } else if (et == MUSE_GGUF_TYPE_BOOL) {
            printf("%s", muse_gguf_arr_i64(v, i) ? "true" : "false");
        } else if (et == MUSE_GGUF_TYPE_UINT64) {
            printf("%.0f", muse_gguf_arr_f64(v, i));
        } else {
            printf("%" PRId64, muse_gguf_arr_i64(v, i));
        }
    }
    printf("%s]", count > ARRAY_HEAD ? ", ..." : "");
}

static void shape_str(const struct muse_gguf_tensor *t, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < t->n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

static void print_hparams(const struct info *in) {
    const struct info_hparams *hp = &in->hp;
    printf("\nhyperparameters (%s, llama.cpp defaults applied%s):\n", in->arch,
           in->kind == KIND_TEXT ? ", as muse_hparams_load reads them" : "");
    printf("  n_layer %u, n_embd %u, n_ctx_train %u, n_vocab %u\n", hp->n_layer, hp->n_embd, hp->n_ctx_train,
           hp->n_vocab);
    printf("  n_head %u%s, n_head_kv %u%s, n_ff %u%s\n", hp->n_head[0], hp->head_per_layer ? " (per layer)" : "",
           hp->n_head_kv[0], hp->head_kv_per_layer ? " (per layer)" : "", hp->n_ff[0],
           hp->ff_per_layer ? " (per layer)" : "");
    printf("  head_dim k %u, v %u (swa: k %u, v %u), n_rot %u (swa %u)\n", hp->n_embd_head_k, hp->n_embd_head_v,
           hp->n_embd_head_k_swa, hp->n_embd_head_v_swa, hp->n_rot, hp->n_rot_swa);
    if (hp->n_head_kv[0] && hp->n_head[0] % hp->n_head_kv[0] == 0)
        printf("  q width %u, k/v width %u, gqa group %u\n", hp->n_head[0] * hp->n_embd_head_k,
               hp->n_head_kv[0] * hp->n_embd_head_k, hp->n_head[0] / hp->n_head_kv[0]);
    printf("  rms_eps %.9g, post_norm_eps %.9g (hard-coded)\n", hp->f_norm_rms_eps, hp->f_post_norm_eps);
    printf("  rope freq_base %.9g, freq_base_swa %.9g, scaling %s, freq_scale %.9g, causal %s\n", hp->rope_freq_base,
           hp->rope_freq_base_swa, hp->rope_scaling_type, hp->rope_freq_scale, hp->causal_attn ? "true" : "false");
    printf("  sliding_window %u, final_logit_softcapping %.9g, logit_scale %.9g\n", hp->n_swa,
           hp->f_final_logit_softcapping, hp->f_logit_scale);
    uint32_t n_swa_layers = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) n_swa_layers += hp->is_swa[il];
    if (hp->swa_pattern_is_period)
        printf("  sliding_window_pattern: period %u (scalar form)\n", hp->swa_period);
    else
        printf("  sliding_window_pattern: per-layer array\n");
    printf("  layers (S = sliding-window with RoPE, F = full attention, NoPE): ");
    for (uint32_t il = 0; il < hp->n_layer; il++) putchar(hp->is_swa[il] ? 'S' : 'F');
    printf("\n  %u sliding-window layers, %u full%s", n_swa_layers, hp->n_layer - n_swa_layers,
           n_swa_layers == hp->n_layer ? "" : ":");
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (!hp->is_swa[il]) printf(" %u", il);
    printf("\n");
}

static void print_kind_extra(const struct info *in) {
    const struct muse_gguf *g = in->g;
    struct muse_error err;
    if (in->kind == KIND_DRAFTER) {
        uint32_t bs = 0, mask = 0;
        const struct muse_gguf_value *tl = NULL;
        printf("  drafter:");
        if (muse_gguf_get_u32(g, "dflash.block_size", &bs, &err) == MUSE_OK) printf(" block_size %u,", bs);
        if (muse_gguf_get_u32(g, "tokenizer.ggml.mask_token_id", &mask, &err) == MUSE_OK)
            printf(" mask_token_id %u,", mask);
        if (muse_gguf_get_arr(g, "dflash.target_layers", &tl, &err) == MUSE_OK &&
            muse_gguf_type_size(tl->v.arr.elem_type)) {
            printf(" target_layers [");
            for (uint64_t i = 0; i < tl->v.arr.count && i < 64; i++)
                printf("%s%" PRId64, i ? ", " : "", muse_gguf_arr_i64(tl, i));
            printf("%s]", tl->v.arr.count > 64 ? ", ..." : "");
        }
        printf("\n");
    }
}

/* A drafter as muse_drafter_load reads it (before the checks against a target). */
static void print_drafter(const struct info *in) {
    struct muse_dflash_hparams d;
    struct muse_error err;
    printf("\ndrafter (as muse_drafter_load reads it, before the checks against a target):\n");
    if (muse_dflash_hparams_load(&d, in->g, &err)) {
        char *m = info_clean_str(err.msg, strlen(err.msg), 1024, true);
        printf("  not loadable: %s\n", m ? m : "?");
        free(m);
        return;
    }
    printf("  %u layers, n_embd %u (must equal the target's), heads %u / kv %u x %u, n_ff %u, rms_eps %.9g\n", d.n_layer,
           d.n_embd, d.n_head, d.n_head_kv, d.head_dim, d.n_ff, d.eps);
    printf("  block_size %u: [anchor, MASK x %u], %u drafts per block; mask token %d\n", d.block_size, d.block_size - 1,
           d.block_size - 1, d.mask_token_id);
    printf("  features: the residuals ENTERING target layers [");
    for (uint32_t i = 0; i < d.n_target_layers; i++) printf("%s%d", i ? ", " : "", d.target_layers[i]);
    printf("], F = %u x %u = %u floats per position\n", d.n_target_layers, d.n_embd, muse_dflash_n_features(&d));
    printf("  every layer sliding-window %u, non-causal block; RoPE NeoX on %u dims, base %.9g, freq_scale %.9g\n", d.n_swa,
           d.n_rot, d.rope_freq_base, d.rope_freq_scale);
    printf("  KV ring: pad32(window + block_size + 1) = %u cells per layer by default\n",
           muse_dflash_default_ring(d.n_swa, d.block_size));
}
static cJSON *json_u64(uint64_t v);

static void print_mmproj(const struct info *in) {
    static const char *const keys[] = {
        "clip.projector_type", "clip.vision.image_size", "clip.vision.patch_size", "clip.vision.embedding_length",
        "clip.vision.feed_forward_length", "clip.vision.block_count", "clip.vision.attention.head_count",
        "clip.vision.projection_dim", "clip.vision.spatial_merge_size"};
    printf("\nvision projector (clip):\n");
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const struct muse_gguf_kv *kv = muse_gguf_find_kv(in->g, keys[i]);
        printf("  %-36s ", keys[i] + 5);
        if (!kv) printf("(absent)");
        else if (kv->value.type == MUSE_GGUF_TYPE_ARRAY) print_array(&kv->value);
        else print_scalar(&kv->value);
        printf("\n");
    }
    struct muse_vision_hparams hp;
    struct muse_vision_weights w;
    struct muse_error err;
    if (muse_vision_hparams_load(in->g, &hp, &err) || muse_vision_weights_bind(in->g, &hp, &w, &err)) {
        char *m = info_clean_str(err.msg, strlen(err.msg), 400, true);
        printf("  muse cannot run it: %s\n", m ? m : "?");
        free(m);
        return;
    }
    uint32_t n_global = 0;
    for (uint32_t il = 0; il < hp.n_layer; il++) n_global += muse_vision_layer_is_global(&hp, il);
    const struct muse_type_layout *mt = muse_type_layout_get(w.layers[0].q.type), *at = muse_type_layout_get(w.mm0.type);
    printf("derived (muse):\n");
    printf("  %-36s %u (n_embd / n_head)\n", "head_dim", hp.head_dim);
    printf("  %-36s %u x %u patches (the position table's side)\n", "window", hp.window_side, hp.window_side);
    printf("  %-36s %u windowed, %u global (every 4th and the last)\n", "layers", hp.n_layer - n_global, n_global);
    printf("  %-36s %u pixels (patch %u x merge %u)\n", "token cell", hp.patch_size * hp.n_merge, hp.patch_size, hp.n_merge);
    printf("  %-36s %u -> %u -> %u -> %u (output = the text model's n_embd)\n", "adapter", muse_vision_n_embd_merged(&hp),
           hp.n_mm0, hp.n_mm1, hp.n_embd_out);
    printf("  %-36s tower %s, adapter %s\n", "matrix types", mt ? mt->name : "?", at ? at->name : "?");
    static const int32_t sizes[][2] = {{1024, 1024}, {336, 336}, {1920, 1080}, {3840, 2160}};
    struct muse_vision_prep p;
    muse_vision_prep_from_hparams(&hp, &p);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct muse_image_geometry g;
        if (muse_vision_prep_geometry(&p, sizes[i][0], sizes[i][1], 0, &g, NULL)) continue;
        char label[48];
        snprintf(label, sizeof label, "image %dx%d", sizes[i][0], sizes[i][1]);
        printf("  %-36s %d x %d px, %d x %d = %d tokens, %d patches, %d window%s\n", label, g.target_w, g.target_h,
               g.grid_tok_cols, g.grid_tok_rows, g.n_tokens, g.patches_w * g.patches_h, g.n_windows,
               g.n_windows == 1 ? "" : "s");
    }
    muse_vision_weights_free(&w);
}

/* The "vision" object of --json for an mmproj muse can run; NULL otherwise. */
static cJSON *json_vision(const struct muse_gguf *g) {
    struct muse_vision_hparams hp;
    struct muse_vision_weights w;
    if (muse_vision_hparams_load(g, &hp, NULL) || muse_vision_weights_bind(g, &hp, &w, NULL)) return NULL;
    muse_vision_weights_free(&w);
    uint32_t n_global = 0;
    for (uint32_t il = 0; il < hp.n_layer; il++) n_global += muse_vision_layer_is_global(&hp, il);
    cJSON *o = cJSON_CreateObject();
    const struct {
        const char *k;
        uint32_t v;
    } f[] = {{"n_layer", hp.n_layer}, {"n_embd", hp.n_embd}, {"n_ff", hp.n_ff}, {"n_head", hp.n_head},
             {"head_dim", hp.head_dim}, {"patch_size", hp.patch_size}, {"n_merge", hp.n_merge},
             {"window_side", hp.window_side}, {"n_global_layers", n_global}, {"n_embd_merged", muse_vision_n_embd_merged(&hp)},
             {"n_mm0", hp.n_mm0}, {"n_mm1", hp.n_mm1}, {"n_embd_out", hp.n_embd_out}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) cJSON_AddItemToObject(o, f[i].k, json_u64(f[i].v));
    struct muse_vision_prep p;
    struct muse_image_geometry geo;
    muse_vision_prep_from_hparams(&hp, &p);
    if (!muse_vision_prep_geometry(&p, 1024, 1024, 0, &geo, NULL))
        cJSON_AddItemToObject(o, "n_tokens_1024x1024", json_u64((uint64_t)geo.n_tokens));
    return o;
}

static void print_text(const struct info *in) {
    const struct muse_gguf *g = in->g;
    char *path = info_clean_str(in->path, strlen(in->path), 4096, true);
    printf("file: %s (%" PRIu64 " bytes)\n", path ? path : "?", g->size);
    free(path);
    printf("  GGUF version %u, alignment %u, data offset %" PRIu64 " (metadata %" PRIu64 " bytes), %" PRIu64
           " keys, %" PRIu64 " tensors\n",
           g->version, g->alignment, g->data_start, in->meta_end, g->n_kv, g->n_tensors);
    printf("  architecture: %s (%s)\n", in->arch, kind_names[in->kind]);
    print_kind_extra(in);

    printf("\nmetadata (%" PRIu64 " keys):\n", g->n_kv);
    size_t w = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) w = strlen(g->kv[i].key) > w ? strlen(g->kv[i].key) : w;
    if (w > 60) w = 60;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct muse_gguf_kv *kv = &g->kv[i];
        char *key = info_clean_str(kv->key, strlen(kv->key), 200, true);
        printf("  %-*s %-7s ", (int)w, key ? key : "?", muse_gguf_type_name(kv->value.type));
        free(key);
        if (kv->value.type == MUSE_GGUF_TYPE_ARRAY) print_array(&kv->value);
        else print_scalar(&kv->value);
        printf("\n");
    }

    printf("\ntensors (%" PRIu64 "):\n", g->n_tensors);
    if (g->n_tensors) printf("  %-40s %-8s %-24s %12s %12s\n", "name", "type", "shape", "bytes", "offset");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        char shape[128];
        char *name = info_clean_str(t->name, strlen(t->name), 64, true);
        shape_str(t, shape, sizeof(shape));
        printf("  %-40s %-8s %-24s %12" PRIu64 " %12" PRIu64 "\n", name ? name : "?",
               muse_type_layout_get(t->type)->name, shape, t->nbytes, t->offset);
        free(name);
    }
    printf("\ntotals: %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data", in->n_params, in->n_bytes);
    if (in->n_params) printf(", %.4f bits per weight", 8.0 * (double)in->n_bytes / (double)in->n_params);
    printf("\n");

    if (in->kind == KIND_TEXT || in->kind == KIND_DRAFTER) print_hparams(in);
    if (in->kind == KIND_DRAFTER) print_drafter(in);
    if (in->kind == KIND_MMPROJ) print_mmproj(in);
    if (in->kind == KIND_VOCAB) printf("\nvocabulary-only file (no tensors): the tokenizer keys above are its content\n");
}

// ---- JSON output ------------------------------------------------------------------------------

static cJSON *json_str(const char *s, uint64_t len) {
    char *c = info_clean_str(s, len, len, false);
    cJSON *j = cJSON_CreateString(c ? c : "");
    free(c);
    return j;
}

static cJSON *json_u64(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cJSON_CreateRaw(buf);
}

static cJSON *json_i64(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return cJSON_CreateRaw(buf);
}

/* Shortest text that reads back to the same double; null when not finite (JSON has no NaN/inf). */
static cJSON *json_f64(double v, bool is_f32) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    snprintf(buf, sizeof(buf), is_f32 ? "%.9g" : "%.17g", v);
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
    return cJSON_CreateRaw(buf);
}

static cJSON *json_elem(const struct muse_gguf_value *a, uint64_t i) {
    switch (a->v.arr.elem_type) {
    case MUSE_GGUF_TYPE_STRING: return json_str(a->v.arr.strs[i].data, a->v.arr.strs[i].len);
    case MUSE_GGUF_TYPE_BOOL: return cJSON_CreateBool(muse_gguf_arr_i64(a, i) != 0);
    case MUSE_GGUF_TYPE_FLOAT32: return json_f64(muse_gguf_arr_f64(a, i), true);
    case MUSE_GGUF_TYPE_FLOAT64: return json_f64(muse_gguf_arr_f64(a, i), false);
    case MUSE_GGUF_TYPE_UINT64: {
        uint64_t raw = 0;
        memcpy(&raw, a->v.arr.data + i * 8, 8);   /* little-endian host */
        return json_u64(raw);
    }
    default: return json_i64(muse_gguf_arr_i64(a, i));
    }
}

static cJSON *json_value(const struct muse_gguf_value *v) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", muse_gguf_type_name(v->type));
    switch (v->type) {
    case MUSE_GGUF_TYPE_UINT8:
    case MUSE_GGUF_TYPE_UINT16:
    case MUSE_GGUF_TYPE_UINT32:
    case MUSE_GGUF_TYPE_UINT64: cJSON_AddItemToObject(o, "value", json_u64(v->v.u64)); break;
    case MUSE_GGUF_TYPE_INT8:
    case MUSE_GGUF_TYPE_INT16:
    case MUSE_GGUF_TYPE_INT32:
    case MUSE_GGUF_TYPE_INT64: cJSON_AddItemToObject(o, "value", json_i64(v->v.i64)); break;
    case MUSE_GGUF_TYPE_FLOAT32: cJSON_AddItemToObject(o, "value", json_f64(v->v.f64, true)); break;
    case MUSE_GGUF_TYPE_FLOAT64: cJSON_AddItemToObject(o, "value", json_f64(v->v.f64, false)); break;
    case MUSE_GGUF_TYPE_BOOL: cJSON_AddBoolToObject(o, "value", v->v.b); break;
    case MUSE_GGUF_TYPE_STRING: cJSON_AddItemToObject(o, "value", json_str(v->v.str.data, v->v.str.len)); break;
    case MUSE_GGUF_TYPE_ARRAY: {
        cJSON_AddStringToObject(o, "elem_type", muse_gguf_type_name(v->v.arr.elem_type));
        cJSON_AddItemToObject(o, "count", json_u64(v->v.arr.count));
        cJSON *head = cJSON_AddArrayToObject(o, "head");
        for (uint64_t i = 0; i < v->v.arr.count && i < ARRAY_HEAD; i++) cJSON_AddItemToArray(head, json_elem(v, i));
        cJSON_AddBoolToObject(o, "truncated", v->v.arr.count > ARRAY_HEAD);
        break;
    }
    default: break;
    }
    return o;
}

static cJSON *json_u32_array(const uint32_t *v, uint32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (uint32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, json_u64(v[i]));
    return a;
}

static cJSON *json_hparams(const struct info_hparams *hp) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "n_layer", json_u64(hp->n_layer));
    cJSON_AddItemToObject(o, "n_embd", json_u64(hp->n_embd));
    cJSON_AddItemToObject(o, "n_ctx_train", json_u64(hp->n_ctx_train));
    cJSON_AddItemToObject(o, "n_vocab", json_u64(hp->n_vocab));
    cJSON_AddItemToObject(o, "n_head", json_u32_array(hp->n_head, hp->n_layer));
    cJSON_AddItemToObject(o, "n_head_kv", json_u32_array(hp->n_head_kv, hp->n_layer));
    cJSON_AddItemToObject(o, "n_ff", json_u32_array(hp->n_ff, hp->n_layer));
    cJSON_AddItemToObject(o, "n_embd_head_k", json_u64(hp->n_embd_head_k));
    cJSON_AddItemToObject(o, "n_embd_head_v", json_u64(hp->n_embd_head_v));
    cJSON_AddItemToObject(o, "n_embd_head_k_swa", json_u64(hp->n_embd_head_k_swa));
    cJSON_AddItemToObject(o, "n_embd_head_v_swa", json_u64(hp->n_embd_head_v_swa));
    cJSON_AddItemToObject(o, "n_rot", json_u64(hp->n_rot));
    cJSON_AddItemToObject(o, "n_rot_swa", json_u64(hp->n_rot_swa));
    cJSON_AddItemToObject(o, "f_norm_rms_eps", json_f64(hp->f_norm_rms_eps, true));
    cJSON_AddItemToObject(o, "f_post_norm_eps", json_f64(hp->f_post_norm_eps, true));
    cJSON_AddItemToObject(o, "rope_freq_base", json_f64(hp->rope_freq_base, true));
    cJSON_AddItemToObject(o, "rope_freq_base_swa", json_f64(hp->rope_freq_base_swa, true));
    cJSON_AddStringToObject(o, "rope_scaling_type", hp->rope_scaling_type);
    cJSON_AddItemToObject(o, "rope_freq_scale", json_f64(hp->rope_freq_scale, true));
    cJSON_AddItemToObject(o, "n_ctx_orig_yarn", json_u64(hp->n_ctx_orig_yarn));
    cJSON_AddBoolToObject(o, "causal_attn", hp->causal_attn);
    cJSON_AddItemToObject(o, "n_swa", json_u64(hp->n_swa));
    cJSON_AddItemToObject(o, "f_final_logit_softcapping", json_f64(hp->f_final_logit_softcapping, true));
    cJSON_AddItemToObject(o, "f_logit_scale", json_f64(hp->f_logit_scale, true));
    cJSON *pat = cJSON_AddObjectToObject(o, "sliding_window_pattern");
    cJSON_AddStringToObject(pat, "form", hp->swa_pattern_is_period ? "period" : "per-layer");
    if (hp->swa_pattern_is_period) cJSON_AddItemToObject(pat, "period", json_u64(hp->swa_period));
    cJSON *swa = cJSON_AddArrayToObject(o, "is_swa");
    cJSON *full = cJSON_AddArrayToObject(o, "full_attention_layers");
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        cJSON_AddItemToArray(swa, cJSON_CreateBool(hp->is_swa[il]));
        if (!hp->is_swa[il]) cJSON_AddItemToArray(full, json_u64(il));
    }
    return o;
}

static int print_json(const struct info *in) {
    const struct muse_gguf *g = in->g;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "file", json_str(in->path, strlen(in->path)));
    cJSON_AddItemToObject(root, "size", json_u64(g->size));
    cJSON *hdr = cJSON_AddObjectToObject(root, "gguf");
    cJSON_AddItemToObject(hdr, "version", json_u64(g->version));
    cJSON_AddItemToObject(hdr, "alignment", json_u64(g->alignment));
    cJSON_AddItemToObject(hdr, "metadata_end", json_u64(in->meta_end));
    cJSON_AddItemToObject(hdr, "data_offset", json_u64(g->data_start));
    cJSON_AddItemToObject(hdr, "n_kv", json_u64(g->n_kv));
    cJSON_AddItemToObject(hdr, "n_tensors", json_u64(g->n_tensors));
    cJSON_AddStringToObject(root, "architecture", in->arch);
    cJSON_AddStringToObject(root, "kind", kind_names[in->kind]);

    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char *key = info_clean_str(g->kv[i].key, strlen(g->kv[i].key), 4096, false);
        cJSON_AddItemToObject(meta, key ? key : "?", json_value(&g->kv[i].value));
        free(key);
    }
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", json_str(t->name, strlen(t->name)));
        cJSON_AddStringToObject(o, "type", muse_type_layout_get(t->type)->name);
        cJSON_AddItemToObject(o, "type_id", json_u64(t->type));
        cJSON *shape = cJSON_AddArrayToObject(o, "ne");
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, json_i64(t->ne[d]));
        cJSON_AddItemToObject(o, "n_elements", json_i64(t->n_elements));
        cJSON_AddItemToObject(o, "bytes", json_u64(t->nbytes));
        cJSON_AddItemToObject(o, "offset", json_u64(t->offset));
        cJSON_AddItemToArray(tensors, o);
    }
    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddItemToObject(tot, "parameters", json_u64(in->n_params));
    cJSON_AddItemToObject(tot, "bytes", json_u64(in->n_bytes));
    if (in->n_params)
        cJSON_AddItemToObject(tot, "bits_per_weight", json_f64(8.0 * (double)in->n_bytes / (double)in->n_params, false));
    else
        cJSON_AddNullToObject(tot, "bits_per_weight");

    if (in->kind == KIND_TEXT || in->kind == KIND_DRAFTER) cJSON_AddItemToObject(root, "hparams", json_hparams(&in->hp));
    if (in->kind == KIND_MMPROJ) {
        cJSON *v = json_vision(g);
        if (v) cJSON_AddItemToObject(root, "vision", v);
        else cJSON_AddNullToObject(root, "vision");
    }
    if (in->kind == KIND_DRAFTER) {
        const struct muse_gguf_kv *bs = muse_gguf_find_kv(g, "dflash.block_size");
        const struct muse_gguf_kv *tl = muse_gguf_find_kv(g, "dflash.target_layers");
        cJSON *d = cJSON_AddObjectToObject(root, "drafter");
        if (bs && bs->value.type != MUSE_GGUF_TYPE_ARRAY && bs->value.type != MUSE_GGUF_TYPE_STRING)
            cJSON_AddItemToObject(d, "block_size", json_u64(bs->value.v.u64));
        if (tl && tl->value.type == MUSE_GGUF_TYPE_ARRAY && muse_gguf_type_size(tl->value.v.arr.elem_type)) {
            cJSON *a = cJSON_AddArrayToObject(d, "target_layers");
            for (uint64_t i = 0; i < tl->value.v.arr.count && i < INFO_MAX_LAYERS; i++)
                cJSON_AddItemToArray(a, json_i64(muse_gguf_arr_i64(&tl->value, i)));
        }
        struct muse_dflash_hparams dh;
        struct muse_error derr;
        if (muse_dflash_hparams_load(&dh, g, &derr)) {
            cJSON_AddItemToObject(d, "loader_error", json_str(derr.msg, strlen(derr.msg)));
        } else {
            cJSON *x = cJSON_AddObjectToObject(d, "derived");
            cJSON_AddItemToObject(x, "mask_token_id", json_i64(dh.mask_token_id));
            cJSON_AddItemToObject(x, "drafts_per_block", json_i64(dh.block_size - 1));
            cJSON_AddItemToObject(x, "n_features", json_i64(muse_dflash_n_features(&dh)));
            cJSON_AddItemToObject(x, "head_dim", json_i64(dh.head_dim));
            cJSON_AddItemToObject(x, "n_rot", json_i64(dh.n_rot));
            cJSON_AddItemToObject(x, "n_swa", json_i64(dh.n_swa));
            cJSON_AddItemToObject(x, "ring_cells", json_i64(muse_dflash_default_ring(dh.n_swa, dh.block_size)));
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "muse info: out of memory formatting JSON\n");
        return 1;
    }
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return 0;
}

// ---- the command ------------------------------------------------------------------------------

/* Bytes a value occupies in the file (after its type tag). */
static uint64_t value_size(const struct muse_gguf_value *v) {
    if (v->type == MUSE_GGUF_TYPE_STRING) return 8 + v->v.str.len;
    if (v->type != MUSE_GGUF_TYPE_ARRAY) return muse_gguf_type_size(v->type);
    uint64_t n = 12;
    if (v->v.arr.elem_type == MUSE_GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < v->v.arr.count; i++) n += 8 + v->v.arr.strs[i].len;
    else
        n += v->v.arr.count * muse_gguf_type_size(v->v.arr.elem_type);
    return n;
}

/* End of the metadata (the last tensor info, else the last kv record, else the header). */
static uint64_t metadata_end(const struct muse_gguf *g) {
    if (g->n_tensors) {
        const struct muse_gguf_tensor *t = &g->tensors[g->n_tensors - 1];
        return t->info_offset + 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4 + 8;
    }
    if (g->n_kv) {
        const struct muse_gguf_kv *kv = &g->kv[g->n_kv - 1];
        return kv->offset + 8 + strlen(kv->key) + 4 + value_size(&kv->value);
    }
    return 24;
}

/* One error line: "muse info: FILE: msg" (the parser's messages already start with the file). */
static int fail_line(const char *path, const char *msg, bool has_path) {
    char *p = info_clean_str(path, strlen(path), 512, true);
    char *m = info_clean_str(msg, strlen(msg), 1024, true);
    if (has_path) fprintf(stderr, "muse info: %s\n", m ? m : "error");
    else fprintf(stderr, "muse info: %s: %s\n", p ? p : "?", m ? m : "error");
    free(p);
    free(m);
    return 1;
}

/* muse info --devices: the CPU, then every Vulkan device (or why there is none). */
static int list_devices(void) {
    printf("cpu: %d physical cores (--backend cpu, the default; ref: the plain-C oracle)\n", muse_device_threads("cpu", 0));
    if (!muse_device_kind_built("vulkan")) {
        printf("vulkan: not built (the build needs libvulkan-dev and glslc: scripts/install-deps.sh)\n");
        return 0;
    }
    char buf[8192];
    muse_device_list("vulkan", buf, sizeof buf);
    fputs(buf, stdout);
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--devices")) {
            return list_devices();
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) { /* as run, chat ... take it */
            const char *v = cli_next(argc, argv, &i);
            if (!v) return 2;
            if (path) return cli_usage_err("more than one file given");
            path = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_unknown(argv[i]);
        } else if (path) {
            return cli_usage_err("more than one file given");
        } else {
            path = argv[i];
        }
    }
    if (!path) return cli_usage_err("a GGUF file is required");

    struct muse_gguf *g = NULL;
    struct muse_error err = {0};
    if (muse_gguf_open(path, &g, &err)) return fail_line(path, err.msg, true);

    int rc = 1;
    struct info *in = calloc(1, sizeof(*in));   /* large (per-layer arrays): kept off the stack */
    if (!in) {
        fail_line(path, "out of memory", false);
        muse_gguf_free(g);
        return 1;
    }
    in->path = path;
    in->g = g;
    muse_status st = muse_gguf_get_str(g, "general.architecture", in->arch, sizeof(in->arch), &err);
    if (st) {
        fail_line(path, err.msg, false);
        goto done;
    }
    if (!strcmp(in->arch, "muse-glimmer")) {
        in->kind = g->n_tensors == 0 ? KIND_VOCAB : KIND_TEXT;
    } else if (!strcmp(in->arch, "clip")) {
        in->kind = KIND_MMPROJ;
    } else if (!strcmp(in->arch, "dflash")) {
        in->kind = KIND_DRAFTER;
    } else {
        char msg[200];
        char *a = info_clean_str(in->arch, strlen(in->arch), 64, true);
        snprintf(msg, sizeof(msg), "unknown architecture '%s' (muse knows muse-glimmer, clip, dflash)", a ? a : "?");
        free(a);
        fail_line(path, msg, false);
        goto done;
    }
    if (in->kind == KIND_TEXT || in->kind == KIND_DRAFTER) {
        st = in->kind == KIND_TEXT ? info_hparams_load_glimmer(g, &in->hp, &err) : info_hparams_load(g, in->arch, &in->hp, &err);
        if (st) {
            fail_line(path, err.msg, false);
            goto done;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        in->n_params += (uint64_t)g->tensors[i].n_elements;
        in->n_bytes += g->tensors[i].nbytes;
    }
    in->meta_end = metadata_end(g);
    rc = json ? print_json(in) : (print_text(in), 0);
done:
    free(in);
    muse_gguf_free(g);
    return rc;
}
