/*
 * synth_write.c - muse_synth_write: the metadata of a synthetic Muse-Glimmer file and its tensor
 * data, generated row by row and streamed through the GGUF writer.
 *
 * Values: each tensor has its own PRNG stream, seeded from (seed, tensor name), so a tensor's
 * bytes do not depend on the others (changing --layers keeps blk.0 identical). Float tensors
 * (F32, F16, BF16) hold mean + std * N(0, 1) draws (Box-Muller in double precision). Quantized
 * tensors are random *valid* blocks from muse_quant_random_row() (kernels/quant_random.h), whose
 * dequantized values have about the requested std; exact quantization of random weights would be
 * slow and pointless.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/glimmer_template.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "kernels/quant_random.h"
#include "synth/synth.h"

#define ARCH "muse-glimmer"
#define LOGIT_SCALE 0.19611613513818404
#define CHUNK_BYTES (4u << 20)

/* ---- random values ------------------------------------------------------------------------- */

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double rng_uniform(struct rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* n draws of mean + std * N(0, 1) (Box-Muller, both outputs used). */
static void fill_normal(struct rng *r, float *y, int64_t n, float mean, float std) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = rng_uniform(r), u2 = rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1));
        y[i] = (float)(mean + std * rad * cos(6.283185307179586 * u2));
        if (i + 1 < n) y[i + 1] = (float)(mean + std * rad * sin(6.283185307179586 * u2));
    }
}

static struct rng tensor_rng(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    struct rng r = {seed ^ h};
    rng_next(&r);
    return r;
}

/* Fill n_rows rows of tensor t into dst. tmp has room for one row of floats. */
static void fill_rows(const struct muse_synth_tensor *t, struct rng *r, int64_t n_rows, void *dst, float *tmp) {
    int64_t ne0 = t->ne[0];
    size_t row_size = muse_type_row_size(t->type, ne0);
    for (int64_t row = 0; row < n_rows; row++) {
        uint8_t *out = (uint8_t *)dst + (size_t)row * row_size;
        switch (t->type) {
        case MUSE_TYPE_F32:
            fill_normal(r, (float *)(void *)out, ne0, t->mean, t->std);
            break;
        case MUSE_TYPE_F16:
        case MUSE_TYPE_BF16:
            fill_normal(r, tmp, ne0, t->mean, t->std);
            for (int64_t i = 0; i < ne0; i++) {
                uint16_t h = t->type == MUSE_TYPE_F16 ? muse_fp32_to_fp16(tmp[i]) : muse_fp32_to_bf16(tmp[i]);
                memcpy(out + 2 * i, &h, 2);
            }
            break;
        default:
            /* random valid blocks whose dequantized RMS is about std (matrices have mean 0) */
            muse_quant_random_row(t->type, out, ne0, &r->s, t->std);
            break;
        }
    }
}

/* ---- metadata ------------------------------------------------------------------------------ */

static muse_status set_metadata(struct muse_gguf_writer *w, const struct muse_synth_config *cfg,
                                const struct muse_synth_tensor *t, size_t n_t, const struct muse_synth_vocab *v) {
    char name[128];
    snprintf(name, sizeof(name), "Muse-Glimmer synthetic (%s)", cfg->preset[0] ? cfg->preset : "custom");
    bool quantized = false;
    for (size_t i = 0; i < n_t; i++) quantized |= muse_type_layouts[t[i].type].is_quantized;
    muse_status st = MUSE_OK;
#define SET(call) do { if ((st = (call)) != MUSE_OK) return st; } while (0)
    SET(muse_gguf_writer_set_str(w, "general.architecture", ARCH));
    SET(muse_gguf_writer_set_str(w, "general.type", "model"));
    SET(muse_gguf_writer_set_str(w, "general.name", name));
    SET(muse_gguf_writer_set_u32(w, "general.file_type", muse_synth_file_type(t, n_t)));
    if (quantized) SET(muse_gguf_writer_set_u32(w, "general.quantization_version", 2));
    SET(muse_gguf_writer_set_u32(w, ARCH ".context_length", (uint32_t)cfg->n_ctx));
    SET(muse_gguf_writer_set_u32(w, ARCH ".embedding_length", (uint32_t)cfg->n_embd));
    SET(muse_gguf_writer_set_u32(w, ARCH ".block_count", (uint32_t)cfg->n_layer));
    SET(muse_gguf_writer_set_u32(w, ARCH ".feed_forward_length", (uint32_t)cfg->n_ff));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.head_count", (uint32_t)cfg->n_head));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.head_count_kv", (uint32_t)cfg->n_head_kv));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.key_length", (uint32_t)cfg->head_dim));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.value_length", (uint32_t)cfg->head_dim));
    SET(muse_gguf_writer_set_f32(w, ARCH ".attention.layer_norm_rms_epsilon", 1e-5f));
    SET(muse_gguf_writer_set_f32(w, ARCH ".rope.freq_base", 500000.0f));
    SET(muse_gguf_writer_set_f32(w, ARCH ".final_logit_softcapping", 20.0f));
    SET(muse_gguf_writer_set_f32(w, ARCH ".logit_scale", (float)LOGIT_SCALE));
    SET(muse_gguf_writer_set_u32(w, ARCH ".attention.sliding_window", (uint32_t)cfg->n_swa));
    if (cfg->pattern_scalar) {
        size_t len = strlen(cfg->pattern);
        uint32_t period = strspn(cfg->pattern, "S") == len ? 0 : (uint32_t)len;
        SET(muse_gguf_writer_set_u32(w, ARCH ".attention.sliding_window_pattern", period));
    } else {
        uint8_t swa[MUSE_SYNTH_MAX_LAYERS];
        for (int32_t il = 0; il < cfg->n_layer; il++) swa[il] = muse_synth_layer_is_swa(cfg, il);
        SET(muse_gguf_writer_set_arr(w, ARCH ".attention.sliding_window_pattern", MUSE_GGUF_TYPE_BOOL, swa,
                                     (uint64_t)cfg->n_layer));
    }
    SET(muse_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    SET(muse_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama4"));
    SET(muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n_tokens));
    SET(muse_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", MUSE_GGUF_TYPE_INT32, v->types, (uint64_t)v->n_tokens));
    SET(muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges));
    SET(muse_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos));
    SET(muse_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    /* eot as the converter writes it; no eom_token_id key: <|eom|> must not become a stop token */
    SET(muse_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot));
    SET(muse_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    SET(muse_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
    SET(muse_gguf_writer_set_str(w, "tokenizer.chat_template", muse_glimmer_chat_template));
#undef SET
    for (size_t i = 0; i < n_t; i++) {
        int64_t ne[2] = {t[i].ne[0], t[i].ne[1]};
        if ((st = muse_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, ne)) != MUSE_OK) return st;
    }
    return MUSE_OK;
}

/* ---- the write ------------------------------------------------------------------------------ */

muse_status muse_synth_write(const struct muse_synth_config *cfg, const char *path, muse_progress_fn progress,
                             void *user, struct muse_error *err) {
    struct muse_synth_tensor *t = NULL;
    size_t n_t = 0;
    struct muse_synth_vocab *v = NULL;
    struct muse_gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    float *tmp = NULL;
    bool created = false;
    muse_status st = muse_synth_plan(cfg, &t, &n_t, err);
    if (st) goto fail;
    if ((st = muse_synth_vocab_build(cfg->n_vocab, &v, err))) goto fail;
    if ((st = muse_gguf_writer_open(path, &w, err))) goto fail;
    created = true;
    if ((st = set_metadata(w, cfg, t, n_t, v)) != MUSE_OK) {
        st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
        goto fail;
    }
    muse_synth_vocab_free(v);
    v = NULL;
    if ((st = muse_gguf_writer_begin_data(w)) != MUSE_OK) {
        st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
        goto fail;
    }
    size_t max_row = 0;
    int64_t max_ne0 = 0;
    for (size_t i = 0; i < n_t; i++) {
        size_t rs = muse_type_row_size(t[i].type, t[i].ne[0]);
        if (rs > max_row) max_row = rs;
        if (t[i].ne[0] > max_ne0) max_ne0 = t[i].ne[0];
    }
    size_t buf_size = max_row > CHUNK_BYTES ? max_row : CHUNK_BYTES;
    buf = malloc(buf_size);
    tmp = malloc((size_t)max_ne0 * sizeof(float) + 16);
    if (!buf || !tmp) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "synth: out of memory");
        goto fail;
    }
    uint64_t total = muse_synth_data_bytes(t, n_t), done = 0;
    for (size_t i = 0; i < n_t; i++) {
        struct rng r = tensor_rng(cfg->seed, t[i].name);
        size_t row_size = muse_type_row_size(t[i].type, t[i].ne[0]);
        int64_t rows_per_chunk = (int64_t)(buf_size / row_size);
        for (int64_t row = 0; row < t[i].ne[1]; row += rows_per_chunk) {
            int64_t n_rows = t[i].ne[1] - row < rows_per_chunk ? t[i].ne[1] - row : rows_per_chunk;
            fill_rows(&t[i], &r, n_rows, buf, tmp);
            if ((st = muse_gguf_writer_write_data(w, buf, (size_t)n_rows * row_size)) != MUSE_OK) {
                st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
                goto fail;
            }
            done += (uint64_t)n_rows * row_size;
            if (progress && progress(user, done, total)) {
                st = muse_error_set(err, MUSE_ERR_CANCELLED, "synth: cancelled");
                goto fail;
            }
        }
    }
    st = muse_gguf_writer_close(w, err);
    w = NULL;
    if (st) goto fail;
    free(t);
    free(buf);
    free(tmp);
    return MUSE_OK;
fail:
    if (w) {
        struct muse_error ignored;
        muse_gguf_writer_close(w, &ignored);
    }
    if (created) unlink(path);
    free(t);
    free(buf);
    free(tmp);
    muse_synth_vocab_free(v);
    return st;
}
