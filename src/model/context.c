/* context.c - the public model / context API of include/muse.h over the model floor. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/tensor_type.h"
#include "model/model.h"

// ---- model ------------------------------------------------------------------------------------

struct muse_model_params muse_model_default_params(void) {
    struct muse_model_params p = {0};
    p.use_mmap = 1;
    p.populate = 1;
    return p;
}

muse_status muse_model_load(const char *path, struct muse_model_params params, struct muse_model **out,
                            struct muse_error *err) {
    muse_status st;
    *out = NULL;
    struct muse_tp *tp = muse_tp_group();
    if (tp && !muse_tp_claim_model(tp))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "%s: tensor parallel runs one text model per job", path);
    struct muse_model *m = calloc(1, sizeof *m);
    if (!m) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        return tp ? muse_tp_load_check(tp, st, err, NULL, err) : st;
    }
    const struct muse_gguf_load_params lp = {
        /* tensor parallel: each rank brings in only its share (tp.c), not the whole file */
        .read = !params.use_mmap, .populate = params.populate != 0 && !tp, .mlock = params.use_mlock != 0,
        .progress = params.progress, .progress_user = params.progress_user,
    };
    /* the GGUF layer's messages already start with the file name */
    if ((st = muse_gguf_open_ex(path, &lp, &m->gguf, err))) goto fail_named;
    if ((st = muse_hparams_load(&m->hp, m->gguf, err))) goto fail;
    if ((st = muse_weights_bind(&m->w, &m->hp, m->gguf, err))) goto fail;
    if (tp) { /* every rank in step: the same file everywhere, then each rank's share */
        m->tp = tp;
        if ((st = muse_tp_load_check(tp, MUSE_OK, NULL, m->gguf, err))) goto fail_tp;
        if ((m->hp_full = malloc(sizeof *m->hp_full))) *m->hp_full = m->hp;
        st = m->hp_full ? MUSE_OK : muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        if (!st) st = muse_tp_shard(tp, &m->hp, &m->w, m->gguf, path, &m->tp_owned, err);
        if ((st = muse_tp_load_check(tp, st, err, m->gguf, err))) goto fail_tp;
        muse_tp_set_live(tp);
    }
    *out = m;
    return MUSE_OK;
fail:
    muse_error_prefix(err, "%s: ", path);
fail_named:
    if (tp && !m->tp) st = muse_tp_load_check(tp, st, err, NULL, err); /* the others learn of it in step */
fail_tp:
    muse_model_free(m);
    return st;
}

void muse_model_free(struct muse_model *m) {
    if (!m) return;
    muse_tp_owned_free(m->tp_owned);
    free(m->hp_full);
    muse_weights_free(&m->w);
    muse_gguf_free(m->gguf);
    free(m);
}

const struct muse_hparams *muse_model_hparams(const struct muse_model *m) { return &m->hp; }
const struct muse_weights *muse_model_weights(const struct muse_model *m) { return &m->w; }
int32_t muse_model_n_vocab(const struct muse_model *m) { return (int32_t)m->w.n_vocab; }
int32_t muse_model_n_ctx_train(const struct muse_model *m) { return (int32_t)m->hp.n_ctx_train; }
int32_t muse_model_n_layer(const struct muse_model *m) { return (int32_t)m->hp.n_layer; }
int32_t muse_model_n_embd(const struct muse_model *m) { return (int32_t)m->hp.n_embd; }
int32_t muse_model_token_bos(const struct muse_model *m) { return m->hp.bos_token_id; }
int32_t muse_model_token_eos(const struct muse_model *m) { return m->hp.eos_token_id; }
int32_t muse_model_token_eot(const struct muse_model *m) { return m->hp.eot_token_id; }

uint64_t muse_model_n_params(const struct muse_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) n += (uint64_t)m->gguf->tensors[i].n_elements;
    return n;
}

const char *muse_model_size_label(uint64_t n_params, char *buf, size_t size) {
    static const char units[] = "KMBT";
    double v = (double)n_params;
    int u = -1;
    while (u < 3 && v >= 999.5) { /* 999.6K prints as 1.0M, not 1000K */
        v /= 1000;
        u++;
    }
    char num[32];
    if (v < 9.95 && u >= 0) snprintf(num, sizeof num, "%.1f", v);
    else snprintf(num, sizeof num, "%.0f", v);
    size_t n = strlen(num);
    if (n > 2 && !strcmp(num + n - 2, ".0")) num[n - 2] = '\0';
    snprintf(buf, size, "%s%.*s", num, u >= 0 ? 1 : 0, u >= 0 ? &units[u] : "");
    return buf;
}

int muse_model_token_is_stop(const struct muse_model *m, int32_t token) {
    return token >= 0 && (token == m->hp.eos_token_id || token == m->hp.eot_token_id);
}

void muse_model_desc(const struct muse_model *m, char *buf, size_t size) {
    const struct muse_hparams *hp = m->hp_full ? m->hp_full : &m->hp;
    const char *type = hp->n_layer ? muse_type_layouts[m->w.layers[0].ffn_down.type].name : "?";
    char label[32];
    snprintf(buf, size, "%s %s %s: %u layers (%u SWA, window %u), n_embd %u, heads %u/%u, head_dim %u, n_ff %u, vocab %d",
             hp->arch, muse_model_size_label(muse_model_n_params(m), label, sizeof label), type ? type : "?",
             hp->n_layer, muse_hparams_n_swa_layers(hp),
             hp->n_swa, hp->n_embd, hp->n_head[0], hp->n_head_kv[0], hp->n_embd_head_k, hp->n_ff[0],
             (int)m->w.n_vocab);
}

// ---- context -----------------------------------------------------------------------------------

static const char *const kv_type_names[MUSE_KV_TYPE_COUNT] = {"f16", "f32", "q8_0"};
static const enum muse_type kv_type_ids[MUSE_KV_TYPE_COUNT] = {MUSE_TYPE_F16, MUSE_TYPE_F32, MUSE_TYPE_Q8_0};

int muse_kv_type_from_name(const char *name) {
    for (int i = 0; i < MUSE_KV_TYPE_COUNT; i++)
        if (!strcmp(name, kv_type_names[i])) return i;
    return -1;
}

const char *muse_kv_type_name(enum muse_kv_type type) {
    return (unsigned)type < MUSE_KV_TYPE_COUNT ? kv_type_names[type] : "?";
}

struct muse_context_params muse_context_default_params(void) {
    struct muse_context_params p = {0};
    p.n_ctx = 0;
    p.n_batch = 512;
    p.n_threads = 0;
    p.kv_type = MUSE_KV_TYPE_F16;
    p.backend = NULL;
    return p;
}

uint32_t muse_context_params_threads(struct muse_context_params params) {
    return (uint32_t)muse_device_threads(params.backend ? params.backend : "cpu", (int32_t)params.n_threads);
}

uint64_t muse_context_bytes_per_pos(const struct muse_model *model, struct muse_context_params params) {
    const struct muse_hparams *hp = &model->hp;
    const enum muse_type type = (unsigned)params.kv_type < MUSE_KV_TYPE_COUNT ? kv_type_ids[params.kv_type] : MUSE_TYPE_F16;
    uint64_t bytes = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_swa[il] && !params.swa_full) continue; /* a ring of n_swa + n_batch cells: no per-position cost */
        bytes += muse_type_row_size(type, muse_hparams_n_embd_k_gqa(hp, il)) +
                 muse_type_row_size(type, muse_hparams_n_embd_v_gqa(hp, il));
    }
    /* the session's token mirror, the attention score rows of each thread, slack */
    return bytes + 64;
}

/* Bytes of memory available now: MUSE_MEM_AVAILABLE (tests), else /proc/meminfo's MemAvailable; 0 = unknown. */
static uint64_t mem_available(void) {
    const char *env = getenv("MUSE_MEM_AVAILABLE");
    if (env && *env) return strtoull(env, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

uint32_t muse_context_auto_n_ctx(const struct muse_model *model, struct muse_context_params params, int32_t n_seq) {
    const uint32_t train = model->hp.n_ctx_train;
    const uint32_t floor = train < 4096 ? train : 4096;
    if (n_seq < 1) n_seq = 1;
    uint64_t avail = mem_available();
    if (avail == 0) return floor; /* unknown: the old default */
    uint64_t margin = avail / 8 > ((uint64_t)256 << 20) ? avail / 8 : (uint64_t)256 << 20;
    uint64_t used = model->gguf->size + margin;
    if (avail <= used) return floor;
    uint64_t per_pos = muse_context_bytes_per_pos(model, params) * (uint64_t)n_seq;
    uint64_t n = (avail - used) / per_pos;
    if (n >= train) return train;
    n &= ~(uint64_t)255;
    return n > floor ? (uint32_t)n : floor;
}

void muse_context_free(struct muse_context *ctx) {
    if (!ctx) return;
    if (ctx->tp_lead) muse_tp_command(ctx->model->tp, MUSE_TP_CTX_FREE, ctx->tp_id, -1, 0);
    for (uint32_t s = 0; ctx->kv && s < ctx->params.n_seq_max; s++) muse_kv_cache_free(ctx->kv[s]);
    free(ctx->kv);
    free(ctx->kv_layers);
    muse_device_forget(ctx->dev, &ctx->prog);
    muse_program_free(&ctx->prog);
    if (ctx->dev_hi) {
        muse_device_forget(ctx->dev_hi, &ctx->prog_hi);
        muse_program_free(&ctx->prog_hi);
        muse_device_close(ctx->dev_hi);
    }
    free(ctx->split_rows);
    free(ctx->features);
    free(ctx->feature_layers);
    free(ctx->embd);
    muse_device_close(ctx->dev);
    free(ctx->pos);
    free(ctx->out_rows);
    free(ctx);
}

muse_status muse_context_create(struct muse_model *model, struct muse_context_params params, struct muse_context **out,
                                struct muse_error *err) {
    const struct muse_hparams *hp = &model->hp;
    muse_status st;
    *out = NULL;
    if ((unsigned)params.kv_type >= MUSE_KV_TYPE_COUNT)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad KV cache type %d", (int)params.kv_type);
    if (params.n_seq_max == 0) params.n_seq_max = 1;
    if (params.n_seq_max > MUSE_MAX_SEQ)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "%u sequences exceed the most a context holds (%d)",
                              params.n_seq_max, MUSE_MAX_SEQ);
    if (params.n_ctx == 0) params.n_ctx = muse_context_auto_n_ctx(model, params, (int32_t)params.n_seq_max);
    if (params.n_ctx > INT32_MAX / 2) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "context size %u is too large", params.n_ctx);
    if (params.n_batch == 0) params.n_batch = 512;
    if (params.n_batch > params.n_ctx) params.n_batch = params.n_ctx;
    if (model->tp && (params.trace || params.capture))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "the layer trace and capture hooks are not supported under --tp yet");
    const uint32_t n_threads_asked = params.n_threads;

    struct muse_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    ctx->model = model;
    if ((st = muse_device_open(params.backend ? params.backend : "cpu", (int32_t)params.n_threads, params.no_repack != 0,
                               &ctx->dev, err))) {
        free(ctx);
        return st;
    }
    if (model->tp && muse_device_own_memory(ctx->dev)) { /* a GPU rank's all-reduce is not done yet */
        muse_device_close(ctx->dev);
        free(ctx);
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "--tp runs on the CPU devices for now (backend %s under --tp is not done yet)",
                              params.backend);
    }
    ctx->split = hp->n_layer;
    if (params.gpu_layers > 0 && params.gpu_layers < hp->n_layer && muse_device_own_memory(ctx->dev)) {
        /* -ngl: layers gpu_layers.. and the head on the cpu */
        if (params.trace || params.capture) {
            st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "--gpu-layers: the layer trace and capture hooks are not supported");
            goto fail;
        }
        if ((st = muse_device_open("cpu", (int32_t)n_threads_asked, params.no_repack != 0, &ctx->dev_hi, err))) goto fail;
        ctx->split = params.gpu_layers;
        if (!(ctx->split_rows = calloc(params.n_batch * (size_t)hp->n_embd, sizeof(float)))) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto fail;
        }
    } else {
        params.gpu_layers = 0;
    }
    params.backend = muse_device_name(ctx->dev);
    params.n_threads = (uint32_t)muse_device_n_threads(ctx->dev);
    ctx->params = params;
    ctx->pos = malloc(sizeof(int32_t) * params.n_batch);
    ctx->out_rows = malloc(sizeof(int32_t) * params.n_batch);
    ctx->kv = calloc(params.n_seq_max, sizeof *ctx->kv);
    ctx->kv_layers = calloc(params.n_seq_max, sizeof *ctx->kv_layers);
    if (!ctx->pos || !ctx->out_rows || !ctx->kv || !ctx->kv_layers) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    atomic_init(&ctx->pool.used, 0);
    ctx->pool.total = params.n_ctx_pool;
    for (uint32_t s = 0; s < params.n_seq_max; s++) {
        if ((st = muse_kv_cache_create_split(ctx->dev, ctx->dev_hi, ctx->split, hp, params.n_ctx, params.n_batch,
                                             kv_type_ids[params.kv_type], params.swa_full != 0,
                                             params.n_ctx_pool ? &ctx->pool : NULL, &ctx->kv[s], err)))
            goto fail;
        ctx->kv_layers[s] = ctx->kv[s]->layers;
    }
    if (params.embeddings && !(ctx->embd = calloc(params.n_batch * (size_t)hp->n_embd, sizeof(float)))) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = muse_text_program_build_layers(hp, &model->w, (int32_t)params.n_batch, params.embeddings != 0, 0, ctx->split,
                                             &ctx->prog, err)))
        goto fail;
    if (ctx->dev_hi && (st = muse_text_program_build_layers(hp, &model->w, (int32_t)params.n_batch, params.embeddings != 0,
                                                            ctx->split, hp->n_layer, &ctx->prog_hi, err))) {
        muse_device_close(ctx->dev_hi); /* prog_hi was not made: free must not free it */
        ctx->dev_hi = NULL;
        goto fail;
    }
    /* a device with its own memory checks the program's ops and types and uploads its weights */
    if ((st = muse_device_prepare(ctx->dev, &ctx->prog, err))) goto fail;
    if (ctx->dev_hi && (st = muse_device_prepare(ctx->dev_hi, &ctx->prog_hi, err))) goto fail;
    const struct muse_backend_plan plan = {
        .n_batch = (int32_t)params.n_batch,
        .max_ne0 = muse_weights_max_ne0(hp, &model->w),
        .max_cells = params.n_ctx,
        .max_head_dim = (int32_t)(hp->n_embd_head_k > hp->n_embd_head_k_swa ? hp->n_embd_head_k : hp->n_embd_head_k_swa),
    };
    if ((st = muse_device_reserve(ctx->dev, &plan, ctx->prog.workspace_floats, err))) goto fail;
    if (ctx->dev_hi && (st = muse_device_reserve(ctx->dev_hi, &plan, ctx->prog_hi.workspace_floats, err))) goto fail;
    ctx->tp_id = -1;
    if (muse_tp_live(model->tp)) { /* rank 0: the other ranks make the same context */
        struct muse_tp *tp = model->tp;
        struct muse_tp_cmd c = {.op = MUSE_TP_CTX_CREATE, .ctx = muse_tp_next_id(tp, false), .n_ctx = params.n_ctx,
                                .n_batch = params.n_batch, .n_threads = n_threads_asked, .n_seq_max = params.n_seq_max,
                                .n_ctx_pool = params.n_ctx_pool, .kv_type = (int32_t)params.kv_type,
                                .swa_full = params.swa_full, .no_repack = params.no_repack};
        snprintf(c.backend, sizeof c.backend, "%s", params.backend);
        ctx->tp_id = c.ctx;
        ctx->tp_lead = true;
        muse_tp_lock(tp);
        muse_tp_send(tp, &c);
        muse_tp_unlock(tp);
        for (uint32_t s = 0; s < params.n_seq_max; s++) {
            ctx->kv[s]->tp = tp;
            ctx->kv[s]->tp_ctx = c.ctx;
            ctx->kv[s]->tp_seq = (int32_t)s;
        }
    }
    *out = ctx;
    return MUSE_OK;
fail:
    muse_context_free(ctx);
    return st;
}

uint32_t muse_context_n_ctx(const struct muse_context *ctx) { return ctx->params.n_ctx; }
uint32_t muse_context_n_batch(const struct muse_context *ctx) { return ctx->params.n_batch; }
uint32_t muse_context_n_threads(const struct muse_context *ctx) { return ctx->params.n_threads; }
int32_t muse_context_n_past(const struct muse_context *ctx) { return ctx->kv[0]->n_past; }
const char *muse_context_backend(const struct muse_context *ctx) { return muse_device_name(ctx->dev); }
uint32_t muse_context_n_seq_max(const struct muse_context *ctx) { return ctx->params.n_seq_max; }

/* The run arguments every batch of ctx shares (the rows, positions and outputs are the caller's). */
static struct muse_prog_run run_args(const struct muse_context *ctx) {
    const struct muse_model *m = ctx->model;
    return (struct muse_prog_run){
        .pos = ctx->pos, .kv = ctx->kv_layers, .out_rows = ctx->out_rows,
        .trace = ctx->params.trace, .trace_user = ctx->params.trace_user, .trace_n_pos = ctx->params.trace_n_pos,
        .capture = ctx->params.capture, .capture_user = ctx->params.capture_user,
        .n_layers = (int32_t)m->hp.n_layer, .n_embd = m->hp.n_embd,
        .features = ctx->n_features ? ctx->features : NULL, .feature_layers = ctx->feature_layers,
        .n_features = ctx->n_features, .embd_out = ctx->embd,
        .comm = m->tp ? muse_tp_comm(m->tp) : NULL, .comm_bf16 = m->tp && muse_tp_bf16(m->tp),
    };
}

/* Run the text program over a (tokens, not image rows). Tensor parallel, rank 0: the other
 * ranks get the batch first and run it with us (its all-reduces), under the group's lock. */
static muse_status run_batch(struct muse_context *ctx, const struct muse_prog_run *a, struct muse_error *err) {
    struct muse_tp *tp = ctx->model->tp;
    if (ctx->dev_hi) { /* -ngl: layers 0..split-1 on dev, their output residual into the rest on the cpu */
        const int32_t layer = (int32_t)ctx->split;
        struct muse_prog_run lo = *a;
        lo.features = ctx->split_rows, lo.feature_layers = &layer, lo.n_features = 1;
        lo.n_out = 0, lo.logits = NULL, lo.embd_out = NULL;
        muse_status st = muse_device_exec(ctx->dev, &ctx->prog, &lo, err);
        if (st) return st;
        struct muse_prog_run hi = *a;
        hi.rows = NULL, hi.embd = ctx->split_rows;
        return muse_device_exec(ctx->dev_hi, &ctx->prog_hi, &hi, err);
    }
    if (!ctx->tp_lead || !muse_tp_live(tp)) return muse_device_exec(ctx->dev, &ctx->prog, a, err);
    const struct muse_tp_cmd c = {.op = MUSE_TP_RUN, .ctx = ctx->tp_id, .a = a->n_rows, .flags = a->seq ? 1 : 0};
    muse_tp_lock(tp);
    muse_tp_send(tp, &c);
    muse_tp_send_rows(tp, a->n_rows, a->tokens, a->pos, a->seq);
    const muse_status st = muse_device_exec(ctx->dev, &ctx->prog, a, err); /* the CPU devices do not fail */
    muse_tp_unlock(tp);
    return st;
}

static muse_status tp_no_rows(const struct muse_context *ctx, struct muse_error *err) {
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "image rows are not supported under --tp yet (text only)");
}

const float *muse_context_embeddings(const struct muse_context *ctx, int32_t *n_rows) {
    if (n_rows) *n_rows = ctx->embd ? ctx->n_last_rows : 0;
    return ctx->embd;
}

static const char *const pooling_names[] = {"none", "mean", "cls", "last"};

int muse_pooling_from_name(const char *name) {
    for (int i = 0; name && i < (int)(sizeof pooling_names / sizeof pooling_names[0]); i++)
        if (!strcmp(name, pooling_names[i])) return i;
    return -1;
}

const char *muse_pooling_name(enum muse_pooling pooling) {
    return (unsigned)pooling < sizeof pooling_names / sizeof pooling_names[0] ? pooling_names[pooling] : "?";
}

int muse_model_pooling(const struct muse_model *model) {
    char key[96];
    uint32_t v;
    if (!muse_gguf_find_kv(model->gguf, muse_gguf_arch_key(key, sizeof key, MUSE_ARCH_MUSE_GLIMMER, "pooling_type")) ||
        muse_gguf_get_u32(model->gguf, key, &v, NULL) != MUSE_OK || v > MUSE_POOLING_LAST)
        return -1;
    return (int)v;
}

/* llama.cpp's embedding normalization (common_embd_normalize): the norm in double, then x * (1/norm) in f32. */
static void embd_normalize(const float *x, float *y, int64_t n, int p) {
    double sum = 0.0;
    if (p < 0) {
        sum = 1.0;
    } else if (p == 0) { /* the largest magnitude maps to 32760 (int16) */
        for (int64_t i = 0; i < n; i++)
            if (sum < fabs((double)x[i])) sum = fabs((double)x[i]);
        sum /= 32760.0;
    } else if (p == 2) {
        for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
        sum = sqrt(sum);
    } else {
        for (int64_t i = 0; i < n; i++) sum += pow(fabs((double)x[i]), p);
        sum = pow(sum, 1.0 / p);
    }
    const float norm = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * norm;
}

muse_status muse_embed(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, enum muse_pooling pooling,
                       int normalize, float *out, struct muse_error *err) {
    const int64_t E = ctx->model->hp.n_embd;
    if (!ctx->embd)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "this context computes no embeddings (create it with params.embeddings)");
    if ((unsigned)pooling > MUSE_POOLING_LAST)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad pooling %d", (int)pooling);
    if (!tokens || n_tokens < 1 || !out) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to embed");
    if (n_tokens > (int32_t)ctx->params.n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT, "%d tokens exceed the context size %u (use a larger --ctx-size)",
                              n_tokens, ctx->params.n_ctx);
    if (pooling != MUSE_POOLING_NONE) /* one vector: the batched path with one input (sequence 0) */
        return muse_embed_batch(ctx, &tokens, &n_tokens, 1, pooling, normalize, out, err);
    muse_kv_clear(ctx);
    const int32_t nb = (int32_t)ctx->params.n_batch;
    for (int32_t done = 0; done < n_tokens;) { /* a vector per token */
        const int32_t n = n_tokens - done < nb ? n_tokens - done : nb;
        muse_status st = muse_eval_rows(ctx, tokens + done, n, n, NULL, err);
        if (st) return st;
        const float *h = ctx->embd;
        for (int32_t r = 0; r < n; r++) embd_normalize(h + (size_t)r * E, out + (size_t)(done + r) * E, E, normalize);
        done += n;
    }
    return MUSE_OK;
}

muse_status muse_embed_batch(struct muse_context *ctx, const int32_t *const *tokens, const int32_t *n_tokens,
                             int32_t n_inputs, enum muse_pooling pooling, int normalize, float *out, struct muse_error *err) {
    const int64_t E = ctx->model->hp.n_embd;
    const int32_t n_vocab = (int32_t)ctx->model->w.n_vocab, nb = (int32_t)ctx->params.n_batch;
    const int32_t n_seq = (int32_t)ctx->params.n_seq_max;
    if (!ctx->embd)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "this context computes no embeddings (create it with params.embeddings)");
    if ((unsigned)pooling > MUSE_POOLING_LAST || pooling == MUSE_POOLING_NONE)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "pooling %s gives no vector per input: use muse_embed",
                              muse_pooling_name(pooling));
    if (n_inputs < 0 || (n_inputs > 0 && (!tokens || !n_tokens || !out)))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to embed");
    for (int32_t i = 0; i < n_inputs; i++) {
        if (!tokens[i] || n_tokens[i] < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "input %d: nothing to embed", i);
        if (n_tokens[i] > (int32_t)ctx->params.n_ctx)
            return muse_error_set(err, MUSE_ERR_CONTEXT, "input %d: %d tokens exceed the context size %u (use a larger --ctx-size)",
                                  i, n_tokens[i], ctx->params.n_ctx);
        for (int32_t k = 0; k < n_tokens[i]; k++)
            if (tokens[i][k] < 0 || tokens[i][k] >= n_vocab)
                return muse_error_set(err, MUSE_ERR_INVALID_ARG, "input %d: token id %d at index %d is out of range (vocabulary %d)",
                                      i, tokens[i][k], k, n_vocab);
    }
    /* per sequence: the input it holds (-1: free), its rows done, its running mean (double, as muse_embed) */
    int32_t *input = malloc(sizeof *input * (size_t)n_seq), *done = calloc((size_t)n_seq, sizeof *done);
    int32_t *bt = malloc(sizeof *bt * (size_t)nb), *bs = malloc(sizeof *bs * (size_t)nb);
    double *sum = pooling == MUSE_POOLING_MEAN ? calloc((size_t)n_seq * (size_t)E, sizeof *sum) : NULL;
    muse_status st = MUSE_OK;
    if (!input || !done || !bt || !bs || (pooling == MUSE_POOLING_MEAN && !sum)) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t s = 0; s < n_seq; s++) input[s] = -1;
    for (int32_t next = 0, busy = 0;;) {
        for (int32_t s = 0; s < n_seq && next < n_inputs; s++) /* free sequences take the next inputs */
            if (input[s] < 0) {
                muse_kv_cache_clear(ctx->kv[s]);
                input[s] = next++, done[s] = 0, busy++;
                if (sum) memset(sum + (size_t)s * E, 0, sizeof *sum * (size_t)E);
            }
        if (!busy) break;
        int32_t n = 0;
        for (int32_t s = 0; s < n_seq && n < nb; s++) /* each sequence's next rows, in order, while they fit */
            for (int32_t k = input[s] < 0 ? 0 : done[s]; input[s] >= 0 && k < n_tokens[input[s]] && n < nb; k++)
                bt[n] = tokens[input[s]][k], bs[n++] = s;
        struct muse_batch b = {.n_tokens = n, .token = bt, .seq_id = bs};
        if ((st = muse_decode(ctx, &b, NULL, err)) != MUSE_OK) goto out;
        const float *h = ctx->embd;
        for (int32_t r = 0; r < n; r++) {
            const int32_t s = bs[r], i = input[s], p = done[s]++;
            const float *x = h + (size_t)r * E;
            float *o = out + (size_t)i * E;
            if (sum) {
                for (int64_t k = 0; k < E; k++) sum[(size_t)s * E + k] += x[k];
            } else if ((pooling == MUSE_POOLING_CLS && p == 0) || (pooling == MUSE_POOLING_LAST && p == n_tokens[i] - 1)) {
                memcpy(o, x, sizeof(float) * (size_t)E);
            }
            if (done[s] == n_tokens[i]) { /* this input is complete */
                if (sum)
                    for (int64_t k = 0; k < E; k++) o[k] = (float)(sum[(size_t)s * E + k] / n_tokens[i]);
                embd_normalize(o, o, E, normalize);
                input[s] = -1, busy--;
            }
        }
    }
out:
    free(input), free(done), free(bt), free(bs), free(sum);
    return st;
}

muse_status muse_context_set_features(struct muse_context *ctx, const int32_t *layers, int32_t n_layers,
                                      struct muse_error *err) {
    const int32_t n_layer = (int32_t)ctx->model->hp.n_layer;
    if (ctx->model->tp && n_layers > 0)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "feature rows (the DFlash drafter) are not supported under --tp yet");
    if (ctx->dev_hi && n_layers > 0)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "feature rows (the DFlash drafter) are not supported with --gpu-layers yet");
    if (n_layers < 0 || (n_layers > 0 && !layers))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad feature layer list (%d layers)", n_layers);
    for (int32_t k = 0; k < n_layers; k++)
        if (layers[k] < 0 || layers[k] > n_layer)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "feature layer %d is outside 0..%d", layers[k], n_layer);
    float *buf = NULL;
    int32_t *copy = NULL;
    if (n_layers > 0) {
        const size_t n = ctx->params.n_batch * (size_t)n_layers * (size_t)ctx->model->hp.n_embd;
        if (!(buf = calloc(n, sizeof(float))) || !(copy = malloc(sizeof *copy * (size_t)n_layers))) {
            free(buf);
            return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        }
        memcpy(copy, layers, sizeof *copy * (size_t)n_layers);
    }
    free(ctx->features);
    free(ctx->feature_layers);
    ctx->features = buf;
    ctx->feature_layers = copy;
    ctx->n_features = n_layers;
    ctx->n_last_rows = 0;
    return MUSE_OK;
}

const float *muse_context_features(const struct muse_context *ctx, int32_t *n_rows) {
    if (n_rows) *n_rows = ctx->n_features ? ctx->n_last_rows : 0;
    return ctx->n_features ? ctx->features : NULL;
}

bool muse_context_copy_features(const struct muse_context *ctx, int32_t first, int32_t n, float *out) {
    int32_t n_rows = 0;
    const float *f = muse_context_features(ctx, &n_rows);
    if (!f || first < 0 || n < 0 || first + n > n_rows) return false;
    const size_t F = (size_t)ctx->n_features * (size_t)ctx->model->hp.n_embd;
    memcpy(out, f + (size_t)first * F, sizeof(float) * F * (size_t)n);
    return true;
}

/* Shared body of muse_eval / muse_eval_embd / muse_eval_rows / muse_eval_mixed: exactly one of
 * tokens / embd is non-NULL; with tokens, rows (may be NULL) replaces the token of every position
 * whose pointer is non-NULL; rows first_row..n_tokens-1 get logits (first_row = n_tokens or logits
 * NULL: none). */
static muse_status eval(struct muse_context *ctx, const int32_t *tokens, const float *embd, const float *const *rows,
                        int32_t n_tokens, float *logits, int32_t first_row, struct muse_error *err) {
    const struct muse_model *m = ctx->model;
    const int32_t n_vocab = (int32_t)m->w.n_vocab;
    const int64_t n_embd = m->hp.n_embd;
    struct muse_kv_cache *kv = ctx->kv[0];
    if (n_tokens < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to evaluate (0 tokens)");
    if (m->tp && (embd || rows)) {
        for (int32_t i = 0; i < n_tokens; i++)
            if (embd || rows[i]) return tp_no_rows(ctx, err);
    }
    for (int32_t i = 0; tokens && i < n_tokens; i++)
        if ((!rows || !rows[i]) && (tokens[i] < 0 || tokens[i] >= n_vocab))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "token id %d at index %d is out of range (vocabulary %d)",
                                  tokens[i], i, n_vocab);
    if ((int64_t)kv->n_past + n_tokens > (int64_t)ctx->params.n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT,
                              "%d tokens after %d already in the context exceed the context size %u (use a larger --ctx-size)",
                              n_tokens, kv->n_past, ctx->params.n_ctx);
    muse_status st = muse_kv_cache_reserve(kv, kv->n_past + n_tokens, err); /* paged: the pool's cells */
    if (st) return st;
    const int32_t n_batch = (int32_t)ctx->params.n_batch;
    for (int32_t done = 0; done < n_tokens;) {
        const int32_t n = n_tokens - done < n_batch ? n_tokens - done : n_batch;
        for (int32_t i = 0; i < n; i++) ctx->pos[i] = kv->n_past + i;
        struct muse_prog_run a = run_args(ctx);
        a.tokens = tokens ? tokens + done : NULL;
        a.embd = embd ? embd + (size_t)done * n_embd : NULL;
        a.rows = rows ? rows + done : NULL;
        a.n_rows = n;
        if (logits && first_row < done + n) {
            const int32_t first = first_row > done ? first_row - done : 0;
            for (int32_t i = first; i < n; i++) ctx->out_rows[a.n_out++] = i;
            a.logits = logits + (size_t)(done + first - first_row) * n_vocab;
        }
        if ((st = run_batch(ctx, &a, err))) return st;
        ctx->n_last_rows = n;
        kv->n_past += n;
        if (kv->n_past > kv->n_high) kv->n_high = kv->n_past;
        done += n;
    }
    return MUSE_OK;
}

muse_status muse_eval(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, float *logits, int logits_all,
                      struct muse_error *err) {
    if (!tokens) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no tokens");
    return eval(ctx, tokens, NULL, NULL, n_tokens, logits, logits_all ? 0 : n_tokens - 1, err);
}

muse_status muse_eval_rows(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, int32_t first_row,
                           float *logits, struct muse_error *err) {
    if (!tokens) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no tokens");
    if (first_row < 0 || first_row > n_tokens)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "first logits row %d outside 0..%d", first_row, n_tokens);
    return eval(ctx, tokens, NULL, NULL, n_tokens, logits, first_row, err);
}

muse_status muse_eval_embd(struct muse_context *ctx, const float *embd, int32_t n_tokens, float *logits, int logits_all,
                           struct muse_error *err) {
    if (!embd) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no embeddings");
    return eval(ctx, NULL, embd, NULL, n_tokens, logits, logits_all ? 0 : n_tokens - 1, err);
}

muse_status muse_eval_mixed(struct muse_context *ctx, const int32_t *tokens, const float *const *rows, int32_t n_tokens,
                            float *logits, int logits_all, struct muse_error *err) {
    if (!tokens) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no tokens");
    return eval(ctx, tokens, NULL, rows, n_tokens, logits, logits_all ? 0 : n_tokens - 1, err);
}

void muse_kv_clear(struct muse_context *ctx) { muse_kv_cache_clear(ctx->kv[0]); }

muse_status muse_kv_truncate(struct muse_context *ctx, int32_t n_keep, struct muse_error *err) {
    return muse_kv_cache_truncate(ctx->kv[0], n_keep, err);
}

int muse_kv_can_truncate(const struct muse_context *ctx, int32_t n_past, int32_t n_keep) {
    if (n_keep < 0 || n_keep > n_past || (uint32_t)n_past > ctx->params.n_ctx) return 0;
    return muse_kv_cache_can_truncate(ctx->kv[0], n_past, n_keep);
}

muse_status muse_kv_checkpoint_create(struct muse_context *ctx, struct muse_kv_checkpoint **out,
                                      struct muse_error *err) {
    return muse_kv_cache_checkpoint_create(ctx->kv[0], out, err);
}

// ---- batches of several sequences ---------------------------------------------------------------

/* Sequences a batch does not name are neither read nor written, so their owners may change them
 * (truncate, restore a checkpoint) while a batch of other sequences runs (muse.h, continuous batching). */
muse_status muse_decode(struct muse_context *ctx, const struct muse_batch *b, float *logits, struct muse_error *err) {
    const struct muse_model *m = ctx->model;
    const int32_t n = b ? b->n_tokens : 0, n_seq = (int32_t)ctx->params.n_seq_max;
    if (n < 1 || !b->token) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to evaluate (0 tokens)");
    if (n > (int32_t)ctx->params.n_batch)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a batch of %d rows exceeds the context's batch size %u", n,
                              ctx->params.n_batch);
    for (int32_t i = 0; m->tp && b->embd && i < n; i++)
        if (b->embd[i]) return tp_no_rows(ctx, err);
    int32_t next[MUSE_MAX_SEQ]; /* each named sequence's next position while the rows are checked */
    int32_t last[MUSE_MAX_SEQ]; /* each sequence's last row in the batch; -1: not named (next unread) */
    for (int32_t s = 0; s < n_seq; s++) last[s] = -1;
    for (int32_t i = 0; i < n; i++) {
        const int32_t s = b->seq_id ? b->seq_id[i] : 0;
        if (s < 0 || s >= n_seq)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "row %d: sequence id %d outside 0..%d", i, s, n_seq - 1);
        if (last[s] < 0) next[s] = ctx->kv[s]->n_past;
        if ((!b->embd || !b->embd[i]) && (b->token[i] < 0 || b->token[i] >= (int32_t)m->w.n_vocab))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "token id %d at index %d is out of range (vocabulary %d)",
                                  b->token[i], i, (int)m->w.n_vocab);
        if (b->pos && b->pos[i] != next[s])
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "row %d: position %d of sequence %d, expected %d", i,
                                  b->pos[i], s, next[s]);
        if (next[s] >= (int32_t)ctx->params.n_ctx)
            return muse_error_set(err, MUSE_ERR_CONTEXT, "sequence %d: position %d exceeds the context size %u", s,
                                  next[s], ctx->params.n_ctx);
        ctx->pos[i] = next[s]++;
        last[s] = i;
    }
    if (ctx->params.n_ctx_pool) { /* paged: every named sequence's new cells, taken at once */
        int64_t need = 0;
        for (int32_t s = 0; s < n_seq; s++)
            if (last[s] >= 0) need += muse_kv_cache_need(ctx->kv[s], next[s]);
        if (!muse_kv_pool_take(&ctx->pool, need))
            return muse_error_set(err, MUSE_ERR_CONTEXT, "the KV pool is full: %lld of its %lld cells are in use and the batch needs %lld more",
                                  (long long)atomic_load(&ctx->pool.used), (long long)ctx->pool.total, (long long)need);
        for (int32_t s = 0; s < n_seq; s++)
            if (last[s] >= 0) ctx->kv[s]->n_commit += (int32_t)muse_kv_cache_need(ctx->kv[s], next[s]);
    }
    struct muse_prog_run a = run_args(ctx);
    a.tokens = b->token;
    a.rows = b->embd;
    a.seq = b->seq_id;
    a.n_rows = n;
    for (int32_t i = 0; i < n && logits; i++) {
        const int32_t s = b->seq_id ? b->seq_id[i] : 0;
        if (b->logits ? b->logits[i] != 0 : last[s] == i) ctx->out_rows[a.n_out++] = i;
    }
    a.logits = logits;
    _Atomic int32_t preempted = -1;
    if (ctx->abort_fn && !m->tp) a.preempt = ctx->abort_fn, a.preempt_user = ctx->abort_user, a.preempted = &preempted;
    muse_status st = run_batch(ctx, &a, err);
    if (st) return st; /* a device error: the pool cells taken above stay with the sequences' n_commit */
    if (atomic_load(&preempted) >= 0) {
        /* stopped: no position advanced; the cells written count as written (muse_kv_cache_clear
         * zeroes below n_high), the pool cells stay with n_commit */
        for (int32_t s = 0; s < n_seq; s++)
            if (last[s] >= 0) {
                struct muse_kv_cache *kv = ctx->kv[s];
                if (kv->n_high < next[s]) kv->n_high = next[s];
                if (kv->n_ahead < next[s]) kv->n_ahead = next[s];
            }
        return muse_error_set(err, MUSE_ERR_CANCELLED, "the batch was stopped by the context's abort callback");
    }
    ctx->n_last_rows = n;
    for (int32_t s = 0; s < n_seq; s++) {
        if (last[s] < 0) continue;
        struct muse_kv_cache *kv = ctx->kv[s];
        kv->n_past = next[s];
        if (kv->n_past > kv->n_high) kv->n_high = kv->n_past;
        if (kv->n_past >= kv->n_ahead) kv->n_ahead = 0;
    }
    return MUSE_OK;
}

void muse_context_set_abort(struct muse_context *ctx, int (*fn)(void *user), void *user) {
    ctx->abort_fn = fn;
    ctx->abort_user = user;
}

static muse_status seq_check(const struct muse_context *ctx, int32_t seq, struct muse_error *err) {
    if (seq < 0 || seq >= (int32_t)ctx->params.n_seq_max)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "sequence id %d outside 0..%u", seq, ctx->params.n_seq_max - 1);
    return MUSE_OK;
}

int32_t muse_seq_n_past(const struct muse_context *ctx, int32_t seq) {
    return seq >= 0 && seq < (int32_t)ctx->params.n_seq_max ? ctx->kv[seq]->n_past : 0;
}

muse_status muse_seq_clear(struct muse_context *ctx, int32_t seq, struct muse_error *err) {
    muse_status st = seq_check(ctx, seq, err);
    if (!st) muse_kv_cache_clear(ctx->kv[seq]);
    return st;
}

muse_status muse_seq_truncate(struct muse_context *ctx, int32_t seq, int32_t n_keep, struct muse_error *err) {
    muse_status st = seq_check(ctx, seq, err);
    return st ? st : muse_kv_cache_truncate(ctx->kv[seq], n_keep, err);
}

muse_status muse_seq_reserve(struct muse_context *ctx, int32_t seq, int32_t n_pos, struct muse_error *err) {
    muse_status st = seq_check(ctx, seq, err);
    if (st) return st;
    if (n_pos < 0 || n_pos > (int32_t)ctx->params.n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT, "sequence %d: %d positions exceed the context size %u", seq, n_pos,
                              ctx->params.n_ctx);
    return muse_kv_cache_reserve(ctx->kv[seq], n_pos, err);
}

void muse_context_kv_cells(const struct muse_context *ctx, int64_t *used, int64_t *total) {
    int64_t u = 0;
    if (ctx->params.n_ctx_pool) {
        u = atomic_load(&((struct muse_context *)ctx)->pool.used);
    } else {
        for (uint32_t s = 0; s < ctx->params.n_seq_max; s++) u += ctx->kv[s]->n_past;
    }
    if (used) *used = u;
    if (total) *total = ctx->params.n_ctx_pool ? ctx->params.n_ctx_pool : (int64_t)ctx->params.n_ctx * ctx->params.n_seq_max;
}

muse_status muse_seq_checkpoint_create(struct muse_context *ctx, int32_t seq, struct muse_kv_checkpoint **out,
                                       struct muse_error *err) {
    muse_status st = seq_check(ctx, seq, err);
    return st ? st : muse_kv_cache_checkpoint_create(ctx->kv[seq], out, err);
}
