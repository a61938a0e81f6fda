/*
 * synth_dflash.c - muse_synth_dflash_write: a synthetic DFlash drafter for a target (synth_dflash.h).
 *
 * Values: matrices ~ N(0, 1/in_dim) (so every sublayer's output is O(1) next to the residual and
 * the drafts depend on the context), norm weights 1 + N(0, 0.1); quantized matrices are random
 * valid blocks of about that RMS (kernels/quant_random.h). Each tensor has its own PRNG stream
 * seeded from (seed, name).
 */
#include "synth/synth_dflash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/quant_random.h"
#include "model/hparams.h"
#include "speculative/dflash_tensors.h"
#include "synth/synth.h"

#define ARCH "dflash"

void muse_synth_dflash_default(struct muse_synth_dflash_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->n_layer = 2;
    cfg->block_size = 16;
    cfg->n_swa = 32;
    cfg->mask_token_id = -1;
    cfg->seed = 1;
}

/* Glob with `*` and `?` (the rules of synth.h). */
static bool glob_match(const char *g, const char *s) {
    if (!*g) return !*s;
    if (*g == '*') {
        for (;; s++) {
            if (glob_match(g + 1, s)) return true;
            if (!*s) return false;
        }
    }
    return *s && (*g == '?' || *g == *s) && glob_match(g + 1, s + 1);
}

/* The type of matrix `name` (short name "attn_q" / "fc" or the full name). */
static enum muse_type matrix_type(const struct muse_synth_dflash_config *cfg, const char *name) {
    char sn[64];
    const char *p = strncmp(name, "blk.", 4) ? name : strchr(name + 4, '.') ? strchr(name + 4, '.') + 1 : name;
    snprintf(sn, sizeof sn, "%s", p);
    char *dot = strstr(sn, ".weight");
    if (dot) *dot = 0;
    for (int i = 0; i < cfg->n_rules; i++)
        if (glob_match(cfg->rules[i].pattern, sn) || glob_match(cfg->rules[i].pattern, name)) return cfg->rules[i].type;
    return MUSE_TYPE_F32;
}

struct dtensor {
    char name[64];
    enum muse_type type;
    int64_t ne0, ne1;   /* ne1 = 0: a vector */
};

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return seed ^ h;
}

/* Resolve the 0 / -1 defaults against the target and check the result. */
static muse_status resolve(struct muse_synth_dflash_config *c, const struct muse_hparams *t, const struct muse_gguf *tg,
                           struct muse_error *err) {
    const int32_t E = (int32_t)t->n_embd;
    if (!c->head_dim) c->head_dim = E < 64 ? E - E % 2 : 64;
    if (!c->n_head) c->n_head = E / c->head_dim > 0 ? E / c->head_dim : 1;
    if (!c->n_head_kv) c->n_head_kv = c->n_head % 2 ? c->n_head : c->n_head / 2;
    if (!c->n_ff) c->n_ff = E;
    if (!c->n_target_layers) {
        c->n_target_layers = t->n_layer < 4 ? (int32_t)t->n_layer : 4;
        for (int32_t k = 0; k < c->n_target_layers; k++)
            c->target_layers[k] = (int32_t)((2 * k + 1) * (int64_t)t->n_layer / (2 * c->n_target_layers));
    }
    if (c->mask_token_id < 0) {
        const struct muse_gguf_kv *kv = muse_gguf_find_kv(tg, "tokenizer.ggml.tokens");
        if (kv && kv->value.type == MUSE_GGUF_TYPE_ARRAY && kv->value.v.arr.elem_type == MUSE_GGUF_TYPE_STRING)
            for (uint64_t i = 0; i < kv->value.v.arr.count && c->mask_token_id < 0; i++)
                if (kv->value.v.arr.strs[i].len == 8 && !memcmp(kv->value.v.arr.strs[i].data, "<|mask|>", 8))
                    c->mask_token_id = (int32_t)i;
        if (c->mask_token_id < 0)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the target's vocabulary has no '<|mask|>' token: give --mask-id");
    }
    if (c->n_layer < 1 || c->n_layer > 64 || c->head_dim < 2 || c->head_dim % 2 || c->n_head < 1 || c->n_head_kv < 1 ||
        c->n_head % c->n_head_kv || c->n_ff < 1 || c->block_size < 2 || c->block_size > 256 || c->n_swa < 1)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "bad drafter dimensions (layers %d, heads %d/%d x %d, ff %d, block %d, window %d)", c->n_layer,
                              c->n_head, c->n_head_kv, c->head_dim, c->n_ff, c->block_size, c->n_swa);
    if (c->n_target_layers < 1 || c->n_target_layers > MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "1..%d target layers, not %d", MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS,
                              c->n_target_layers);
    for (int32_t k = 0; k < c->n_target_layers; k++)
        if (c->target_layers[k] < 0 || c->target_layers[k] >= (int32_t)t->n_layer)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "target layer %d is outside the target's layers 0..%u",
                                  c->target_layers[k], t->n_layer - 1);
    return MUSE_OK;
}

/* One tensor of a drafter's plan: its name and shape (its type comes after, from the rules). */
static void fill_tensor(const struct muse_tensor_visit *v, void *elem, const void *ctx) {
    struct dtensor *t = elem;
    snprintf(t->name, sizeof t->name, "%s", v->name);
    t->ne0 = v->ne[0];
    t->ne1 = v->n_dims == 2 ? v->ne[1] : 0;
}

/* The tensor list: the required entries of the drafter table (speculative/dflash_tensors.h) in file
 * order (fc, enc.output_norm, output_norm, blk.*). *n = 3 + 11 * n_layer. */
static muse_status plan(const struct muse_synth_dflash_config *c, int64_t E, struct dtensor **out, size_t *n,
                        struct muse_error *err) {
    struct muse_dflash_hparams hp = {.n_layer = (uint32_t)c->n_layer, .n_embd = (uint32_t)E, .n_ff = (uint32_t)c->n_ff,
                                     .n_head = (uint32_t)c->n_head, .n_head_kv = (uint32_t)c->n_head_kv,
                                     .head_dim = (uint32_t)c->head_dim, .n_target_layers = (uint32_t)c->n_target_layers};
    struct muse_tensor_net net = {.table = &muse_dflash_table, .n_layer = hp.n_layer};
    muse_dflash_dims(net.dims, &hp, 0);
    void *plan;
    size_t k;
    muse_status st = muse_synth_entries(&net, sizeof(struct dtensor), fill_tensor, NULL, &plan, &k, err);
    if (st) return st;
    struct dtensor *t = plan;
    for (size_t i = 0; i < k; i++) {
        t[i].type = t[i].ne1 ? matrix_type(c, t[i].name) : MUSE_TYPE_F32;
        const struct muse_type_layout *l = muse_type_layout_get(t[i].type);
        if (t[i].ne0 % l->block_size) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s: row length %lld is not a multiple of the %s block size %lld",
                                t[i].name, (long long)t[i].ne0, l->name, (long long)l->block_size);
            free(t);
            return st;
        }
    }
    *out = t;
    *n = k;
    return MUSE_OK;
}

static muse_status set_metadata(struct muse_gguf_writer *w, const struct muse_synth_dflash_config *c, const struct muse_hparams *t,
                                const struct muse_gguf *tg, const struct dtensor *ts, size_t n_t) {
    muse_status st;
#define SET(call) do { if ((st = (call)) != MUSE_OK) return st; } while (0)
    SET(muse_gguf_writer_set_str(w, "general.architecture", ARCH));
    SET(muse_gguf_writer_set_str(w, "general.type", "model"));
    SET(muse_gguf_writer_set_str(w, "general.name", "DFlash synthetic drafter"));
    bool all_f32 = true;
    for (size_t i = 0; i < n_t; i++) all_f32 = all_f32 && ts[i].type == MUSE_TYPE_F32;
    if (all_f32) SET(muse_gguf_writer_set_u32(w, "general.file_type", 0)); /* else informative only: left out */
    SET(muse_gguf_writer_set_u32(w, ARCH ".block_count", (uint32_t)c->n_layer));
    SET(muse_gguf_writer_set_u32(w, ARCH ".context_length", t->n_ctx_train));
    SET(muse_gguf_writer_set_u32(w, ARCH ".embedding_length", t->n_embd));
    SET(muse_gguf_writer_set_u32(w, ARCH ".feed_forward_length", (uint32_t)c->n_ff));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.head_count", (uint32_t)c->n_head));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.head_count_kv", (uint32_t)c->n_head_kv));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.key_length", (uint32_t)c->head_dim));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.value_length", (uint32_t)c->head_dim));
    SET(muse_gguf_writer_set_f32(w, ARCH ".rope.freq_base", 500000.0f));
    SET(muse_gguf_writer_set_f32(w, ARCH ".attention.layer_norm_rms_epsilon", 1e-5f));
    SET(muse_gguf_writer_set_u32(w, ARCH ".block_size", (uint32_t)c->block_size));
    SET(muse_gguf_writer_set_arr(w, ARCH ".target_layers", MUSE_GGUF_TYPE_INT32, c->target_layers, (uint64_t)c->n_target_layers));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.sliding_window", (uint32_t)c->n_swa));
    uint8_t swa[64];
    memset(swa, 1, sizeof swa);
    SET(muse_gguf_writer_set_arr(w, ARCH ".attention.sliding_window_pattern", MUSE_GGUF_TYPE_BOOL, swa, (uint64_t)c->n_layer));
    /* the target's tokenizer, as the converter copies it; then the MASK token */
    for (uint64_t i = 0; i < tg->n_kv; i++)
        if (!strncmp(tg->kv[i].key, "tokenizer.ggml.", 15) && strcmp(tg->kv[i].key, "tokenizer.ggml.mask_token_id"))
            SET(muse_gguf_writer_set_value(w, tg->kv[i].key, &tg->kv[i].value));
    SET(muse_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)c->mask_token_id));
#undef SET
    for (size_t i = 0; i < n_t; i++) {
        const int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        if ((st = muse_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].ne1 ? 2 : 1, ne))) return st;
    }
    return MUSE_OK;
}

muse_status muse_synth_dflash_write(const struct muse_synth_dflash_config *cfg, const char *target_path, const char *path,
                                    struct muse_error *err) {
    struct muse_synth_dflash_config c = *cfg;
    struct muse_gguf *tg = NULL;
    struct muse_hparams *thp = malloc(sizeof *thp); /* ~6 KB: off the stack */
    struct muse_gguf_writer *w = NULL;
    struct dtensor *ts = NULL;
    size_t n_t = 0;
    uint8_t *buf = NULL;
    bool created = false;
    muse_status st;
    if (!thp) return muse_error_set(err, MUSE_ERR_NOMEM, "synth: out of memory");
    if ((st = muse_gguf_open(target_path, &tg, err))) goto fail;
    if ((st = muse_hparams_load(thp, tg, err))) {
        muse_error_prefix(err, "%s: ", target_path);
        goto fail;
    }
    if ((st = resolve(&c, thp, tg, err)) || (st = plan(&c, thp->n_embd, &ts, &n_t, err))) goto fail;
    if ((st = muse_gguf_writer_open(path, &w, err))) goto fail;
    created = true;
    if ((st = set_metadata(w, &c, thp, tg, ts, n_t)) || (st = muse_gguf_writer_begin_data(w))) {
        st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
        goto fail;
    }
    size_t max_row = 0;
    for (size_t i = 0; i < n_t; i++)
        if (muse_type_row_size(ts[i].type, ts[i].ne0) > max_row) max_row = muse_type_row_size(ts[i].type, ts[i].ne0);
    buf = malloc(max_row);
    if (!buf) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "synth: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n_t; i++) {
        uint64_t rng = name_seed(c.seed, ts[i].name);
        const size_t row = muse_type_row_size(ts[i].type, ts[i].ne0);
        const bool norm = ts[i].ne1 == 0;
        for (int64_t r = 0; r < (norm ? 1 : ts[i].ne1); r++) {
            muse_quant_random_row(ts[i].type, buf, ts[i].ne0, &rng, norm ? 0.1f : (float)(1.0 / sqrt((double)ts[i].ne0)));
            if (norm)
                for (int64_t j = 0; j < ts[i].ne0; j++) ((float *)(void *)buf)[j] += 1.0f;
            if ((st = muse_gguf_writer_write_data(w, buf, row))) {
                st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
                goto fail;
            }
        }
    }
    st = muse_gguf_writer_close(w, err);
    w = NULL;
    if (st) goto fail;
    free(ts);
    free(buf);
    free(thp);
    muse_gguf_free(tg);
    return MUSE_OK;
fail:
    if (w) {
        struct muse_error ignored;
        muse_gguf_writer_close(w, &ignored);
    }
    if (created) unlink(path);
    free(ts);
    free(buf);
    free(thp);
    muse_gguf_free(tg);
    return st;
}
