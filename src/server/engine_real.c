/*
 * engine_real.c - the server's engine interface over libmuse: the model + one muse_context per
 * slot (muse.h), the GGUF tokenizer (text/tokenizer.h), the chat template of the file or the
 * built-in one (text/chat.h), and the server's sampler (sampler.h).
 *
 * Prefix reuse: slot_keep truncates the context's KV cache. Sliding-window layers keep a ring of
 * n_swa + n_batch rows, so a rewind further than that is refused by muse_kv_truncate. The typical
 * case is a chat client that sends the history without the reasoning the model generated: the
 * new prompt diverges where the generation began. So each slot keeps a checkpoint of its rings
 * taken where the prompt ended (the first sample of a request) - llama.cpp's "context
 * checkpoints" - and rewinds from there; only when that fails too does the slot restart at 0.
 */
#include <cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/chat.h"
#include "gen/sampler.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/engine_iface.h"

struct real {
    struct muse_model *model;
    struct muse_tokenizer *tok;
    struct muse_chat *chat;   /* template + scratch conversation; guarded by chat_mu */
    pthread_mutex_t chat_mu;
    char bos_text[64], eos_text[64];
    struct muse_srv_engine_info info;
    int n_batch; /* context n_batch; 0 = libmuse's default */
};

struct real_slot {
    struct real *r;
    struct muse_context *ctx;
    float *logits; /* [n_vocab] of the last evaluated position */
    bool has_logits;
    struct muse_sampler *sampler; /* of the current request; made at its first sample */
    void *ckpt;                   /* copies of every sliding-window ring's k and v, [ckpt_size] */
    size_t ckpt_size;
    int32_t ckpt_pos;             /* n_past when the checkpoint was taken; -1 = none */
};

/* Bytes of the sliding-window rings of ctx (what a checkpoint copies). */
static size_t swa_bytes(const struct muse_kv_cache *kv) {
    size_t n = 0;
    for (uint32_t il = 0; il < kv->n_layer; il++)
        if (kv->n_swa[il] && kv->layers[il].n_cells < kv->n_ctx)
            n += (size_t)kv->layers[il].n_cells * (kv->layers[il].k_row_size + kv->layers[il].v_row_size);
    return n;
}

/* Copy the rings into (save) or out of (restore) the checkpoint. */
static void swa_copy(struct real_slot *s, bool save) {
    struct muse_kv_cache *kv = s->ctx->kv;
    char *p = s->ckpt;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        if (!kv->n_swa[il] || l->n_cells >= kv->n_ctx) continue;
        size_t nk = (size_t)l->n_cells * l->k_row_size, nv = (size_t)l->n_cells * l->v_row_size;
        if (save) memcpy(p, l->k, nk), memcpy(p + nk, l->v, nv);
        else memcpy(l->k, p, nk), memcpy(l->v, p + nk, nv);
        p += nk + nv;
    }
}

static void real_info(void *self, struct muse_srv_engine_info *out) { *out = ((struct real *)self)->info; }

static muse_status real_tokenize(void *self, const char *text, size_t len, bool add_special, bool parse_special,
                                 int32_t **toks, int *n_toks, struct muse_error *err) {
    struct real *r = self;
    size_t n = 0;
    unsigned flags = (add_special ? MUSE_TOKENIZE_ADD_BOS : 0) | (parse_special ? MUSE_TOKENIZE_PARSE_SPECIAL : 0);
    muse_status st = muse_tokenizer_encode_alloc(r->tok, text, len, flags, toks, &n, err);
    if (st != MUSE_OK) return st;
    if (n > (size_t)1 << 30) {
        free(*toks);
        *toks = NULL;
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "text too long");
    }
    *n_toks = (int)n;
    return MUSE_OK;
}

static int real_piece(void *self, int32_t tok, char *buf, int cap) {
    struct real *r = self;
    size_t len = 0;
    const char *b = muse_tokenizer_token_bytes(r->tok, tok, &len);
    if (!b) return -1;
    if (len > (size_t)1 << 20) len = (size_t)1 << 20;
    memcpy(buf, b, len < (size_t)cap ? len : (size_t)cap);
    return (int)len;
}

static bool real_is_eog(void *self, int32_t tok) { return muse_tokenizer_is_eog(((struct real *)self)->tok, tok); }

/*
 * An OpenAI message as the chat template wants it: tool-call arguments as objects (clients send
 * JSON strings), "developer" as "system", null content as "".
 */
static cJSON *template_message(const cJSON *m, struct muse_error *err) {
    cJSON *c = cJSON_Duplicate(m, true);
    if (!c) return NULL;
    cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "developer"))
        cJSON_ReplaceItemInObjectCaseSensitive(c, "role", cJSON_CreateString("system"));
    cJSON *content = cJSON_GetObjectItemCaseSensitive(c, "content");
    if (!content || cJSON_IsNull(content)) cJSON_ReplaceItemInObjectCaseSensitive(c, "content", cJSON_CreateString(""));
    if (!cJSON_GetObjectItemCaseSensitive(c, "content")) cJSON_AddStringToObject(c, "content", "");
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(c, "tool_calls"), *call;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (!cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            cJSON_Delete(c);
            muse_error_set(err, MUSE_ERR_INVALID_ARG, "tool_calls arguments must be a JSON object");
            return NULL;
        }
        cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
    }
    return c;
}

static muse_status real_render(void *self, const struct muse_srv_chat_input *in, char **prompt, struct muse_error *err) {
    struct real *r = self;
    muse_status st = MUSE_OK;
    pthread_mutex_lock(&r->chat_mu);
    muse_chat_reset(r->chat);
    const cJSON *m;
    cJSON_ArrayForEach(m, in->messages) {
        cJSON *c = template_message(m, err);
        if (!c) {
            st = err && err->status ? err->status : MUSE_ERR_NOMEM;
            goto out;
        }
        st = muse_chat_add_json(r->chat, c, err);
        cJSON_Delete(c);
        if (st != MUSE_OK) goto out;
    }
    struct muse_chat_options opts = {0};
    /* exactly what `muse chat` renders: the vocab's BOS/EOS texts ("" when it has none; the
     * template writes bos_token itself, so the prompt is tokenized without adding a second one) */
    opts.reasoning = in->reasoning_strength;
    opts.tools = in->tools;
    opts.extra = in->template_kwargs;
    opts.bos_token = r->bos_text;
    opts.eos_token = r->eos_text;
    size_t len = 0;
    st = muse_chat_render(r->chat, &opts, true, prompt, &len, err);
out:
    muse_chat_reset(r->chat);
    pthread_mutex_unlock(&r->chat_mu);
    return st;
}

static void *real_slot_create(void *self, struct muse_error *err) {
    struct real *r = self;
    struct real_slot *s = calloc(1, sizeof *s);
    if (!s) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->r = r;
    s->logits = malloc((size_t)r->info.n_vocab * sizeof *s->logits);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = (uint32_t)r->info.n_ctx;
    if (!s->logits) muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (r->n_batch > 0) cp.n_batch = (uint32_t)r->n_batch;
    s->ckpt_pos = -1;
    if (!s->logits || muse_context_create(r->model, cp, &s->ctx, err) != MUSE_OK) {
        free(s->logits);
        free(s);
        return NULL;
    }
    s->ckpt_size = swa_bytes(s->ctx->kv);
    if (s->ckpt_size && !(s->ckpt = malloc(s->ckpt_size))) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory (sliding-window checkpoint of %zu bytes)", s->ckpt_size);
        muse_context_free(s->ctx);
        free(s->logits);
        free(s);
        return NULL;
    }
    return s;
}

static void real_slot_free(void *slot) {
    struct real_slot *s = slot;
    if (!s) return;
    muse_context_free(s->ctx);
    muse_sampler_free(s->sampler);
    free(s->ckpt);
    free(s->logits);
    free(s);
}

static int real_slot_keep(void *slot, int n_keep) {
    struct real_slot *s = slot;
    muse_sampler_free(s->sampler); /* slot_keep starts every request: a fresh sampler follows */
    s->sampler = NULL;
    int n_past = muse_context_n_past(s->ctx);
    if (n_keep > n_past) n_keep = n_past;
    if (n_keep < n_past) s->has_logits = false;
    if (n_keep == n_past) return n_keep;
    if (n_keep > 0 && muse_kv_truncate(s->ctx, n_keep, NULL) == MUSE_OK) {
        if (s->ckpt_pos > n_keep) s->ckpt_pos = -1; /* the rows after n_keep will be overwritten */
        return n_keep;
    }
    /* the rings lost the rows: go back to the checkpoint taken where the last prompt ended */
    if (n_keep > 0 && s->ckpt && s->ckpt_pos >= n_keep && s->ckpt_pos <= n_past) {
        swa_copy(s, false);
        s->ctx->kv->n_past = s->ckpt_pos; /* full layers still hold every row below n_past */
        if (muse_kv_truncate(s->ctx, n_keep, NULL) == MUSE_OK) {
            if (s->ckpt_pos > n_keep) s->ckpt_pos = -1;
            return n_keep;
        }
    }
    muse_kv_clear(s->ctx);
    s->ckpt_pos = -1;
    return 0;
}

static muse_status real_slot_eval(void *slot, const int32_t *toks, int n, struct muse_error *err) {
    struct real_slot *s = slot;
    s->has_logits = false;
    muse_status st = muse_eval(s->ctx, toks, n, s->logits, 0, err);
    if (st == MUSE_OK) s->has_logits = true;
    return st;
}

/* probs[0..n) = the n most likely tokens of softmax(logits), descending (ties: lower id). */
static void top_probs(const float *logits, int n_vocab, int n, struct muse_srv_prob *probs) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    int k = 0; /* insertion into a sorted list of at most n entries: n is small (<= 100) */
    for (int i = 0; i < n_vocab; i++) {
        if (k == n && !(logits[i] > logits[probs[k - 1].token])) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && logits[probs[j - 1].token] < logits[i]) {
            probs[j] = probs[j - 1];
            j--;
        }
        probs[j].token = i;
    }
    for (int i = 0; i < k; i++) probs[i].prob = (float)(exp((double)logits[probs[i].token] - mx) / sum);
}

static muse_status real_slot_sample(void *slot, const struct muse_srv_sampling *sp, const int32_t *history,
                                    int n_history, uint64_t *rng, int n_probs, struct muse_srv_prob *probs,
                                    int32_t *tok, struct muse_error *err) {
    (void)history, (void)n_history, (void)rng; /* the sampler keeps its own history and RNG */
    struct real_slot *s = slot;
    if (!s->has_logits) return muse_error_set(err, MUSE_ERR_INTERNAL, "sample before eval");
    if (!s->sampler) {
        /* the first sample of a request: the prompt ends here, checkpoint the rings */
        if (s->ckpt) {
            swa_copy(s, true);
            s->ckpt_pos = muse_context_n_past(s->ctx);
        }
        struct muse_sampler_params p = muse_sampler_default_params();
        p.temperature = sp->temperature;
        p.top_k = sp->top_k;
        p.top_p = sp->top_p;
        p.min_p = sp->min_p;
        p.presence_penalty = sp->presence_penalty;
        p.frequency_penalty = sp->frequency_penalty;
        p.seed = sp->seed;
        muse_status st = muse_sampler_create(p, s->r->info.n_vocab, &s->sampler, err);
        if (st != MUSE_OK) return st;
    }
    if (n_probs > 0) top_probs(s->logits, s->r->info.n_vocab, n_probs < s->r->info.n_vocab ? n_probs : s->r->info.n_vocab, probs);
    *tok = muse_sampler_sample(s->sampler, s->logits);
    muse_sampler_accept(s->sampler, *tok); /* penalties look at what this request generated */
    s->has_logits = false;
    return MUSE_OK;
}

static void real_destroy(void *self) {
    struct real *r = self;
    if (!r) return;
    muse_chat_free(r->chat);
    muse_tokenizer_free(r->tok);
    muse_model_free(r->model);
    pthread_mutex_destroy(&r->chat_mu);
    free(r);
}

static const struct muse_srv_engine_ops real_ops = {
    .destroy = real_destroy,
    .info = real_info,
    .tokenize = real_tokenize,
    .token_piece = real_piece,
    .is_eog = real_is_eog,
    .render_chat = real_render,
    .slot_create = real_slot_create,
    .slot_free = real_slot_free,
    .slot_keep = real_slot_keep,
    .slot_eval = real_slot_eval,
    .slot_sample = real_slot_sample,
};

/* Text of token id (for the template's bos_token/eos_token), "" when absent. */
static void token_text(const struct muse_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    const char *t = id >= 0 ? muse_tokenizer_token_text(tok, id, &len) : NULL;
    if (!t || len >= cap) len = 0;
    if (t) memcpy(buf, t, len);
    buf[len] = 0;
}

muse_status muse_srv_real_engine_create(const char *model_path, const struct muse_srv_real_params *params,
                                        struct muse_srv_engine *out, struct muse_error *err) {
    int n_ctx = params ? params->n_ctx : 0;
    struct real *r = calloc(1, sizeof *r);
    if (!r) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->chat_mu, NULL);
    r->n_batch = params ? params->n_batch : 0;
    muse_status st = muse_model_load(model_path, muse_model_default_params(), &r->model, err);
    if (st != MUSE_OK) goto fail;
    const struct muse_gguf *g = r->model->gguf;
    if ((st = muse_tokenizer_init_from_gguf(g, &r->tok, err)) != MUSE_OK) goto fail;
    const struct muse_gguf_kv *tmpl = muse_gguf_find_kv(g, "tokenizer.chat_template");
    bool has_tmpl = tmpl && tmpl->value.type == MUSE_GGUF_TYPE_STRING;
    st = muse_chat_create(has_tmpl ? tmpl->value.v.str.data : NULL, has_tmpl ? (size_t)tmpl->value.v.str.len : 0, &r->chat, err);
    if (st != MUSE_OK) {
        muse_error_prefix(err, "chat template of %s: ", model_path);
        goto fail;
    }
    token_text(r->tok, muse_tokenizer_bos(r->tok), r->bos_text, sizeof r->bos_text);
    token_text(r->tok, muse_tokenizer_eos(r->tok), r->eos_text, sizeof r->eos_text);
    r->info.n_vocab = muse_tokenizer_n_vocab(r->tok);
    if (r->info.n_vocab != muse_model_n_vocab(r->model)) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "%s: tokenizer has %d tokens, the model %d", model_path,
                            r->info.n_vocab, muse_model_n_vocab(r->model));
        goto fail;
    }
    r->info.n_ctx_train = muse_model_n_ctx_train(r->model);
    r->info.n_ctx = n_ctx > 0 ? n_ctx : (r->info.n_ctx_train < 4096 ? r->info.n_ctx_train : 4096);
    if (r->info.n_ctx > r->info.n_ctx_train) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "--ctx-size %d is larger than the model's context (%d)",
                            r->info.n_ctx, r->info.n_ctx_train);
        goto fail;
    }
    char name[200] = "";
    if (muse_gguf_get_str(g, "general.name", name, sizeof name, NULL) != MUSE_OK || !name[0]) {
        const char *base = strrchr(model_path, '/');
        snprintf(name, sizeof name, "%s", base ? base + 1 : model_path);
    }
    snprintf(r->info.model_name, sizeof r->info.model_name, "%s", name);
    out->ops = &real_ops;
    out->self = r;
    return MUSE_OK;
fail:
    real_destroy(r);
    return st;
}
