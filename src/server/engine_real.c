/*
 * engine_real.c - the server's engine interface over libmuse: the model + one muse_context per
 * slot (muse.h), the GGUF tokenizer (engine/tokenizer.h), the chat template of the file or the
 * built-in one (engine/chat.h), and the server's sampler (sampler.h).
 *
 * Prefix reuse: slot_keep truncates the context's KV cache; when a sliding-window layer no longer
 * holds what the kept prefix needs, muse_kv_truncate refuses and the slot restarts from 0.
 */
#include <cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/chat.h"
#include "engine/tokenizer.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/engine_iface.h"
#include "server/sampler.h"

struct real {
    struct muse_model *model;
    struct muse_tokenizer *tok;
    struct muse_chat *chat;   /* template + scratch conversation; guarded by chat_mu */
    pthread_mutex_t chat_mu;
    char bos_text[64], eos_text[64];
    struct muse_srv_engine_info info;
};

struct real_slot {
    struct real *r;
    struct muse_context *ctx;
    float *logits; /* [n_vocab] of the last evaluated position */
    bool has_logits;
    struct muse_srv_sampler_scratch scratch;
};

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
    opts.reasoning = in->reasoning_strength;
    opts.tools = in->tools;
    opts.bos_token = r->bos_text[0] ? r->bos_text : NULL;
    opts.eos_token = r->eos_text[0] ? r->eos_text : NULL;
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
    if (!s->logits || muse_context_create(r->model, cp, &s->ctx, err) != MUSE_OK) {
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
    muse_srv_sampler_scratch_free(&s->scratch);
    free(s->logits);
    free(s);
}

static int real_slot_keep(void *slot, int n_keep) {
    struct real_slot *s = slot;
    int n_past = muse_context_n_past(s->ctx);
    if (n_keep > n_past) n_keep = n_past;
    if (n_keep < n_past) s->has_logits = false;
    if (n_keep == n_past) return n_keep;
    if (n_keep > 0 && muse_kv_truncate(s->ctx, n_keep, NULL) == MUSE_OK) return n_keep;
    /* a sliding-window layer lost the rows the prefix needs (or n_keep is 0): start over */
    muse_kv_clear(s->ctx);
    return 0;
}

static muse_status real_slot_eval(void *slot, const int32_t *toks, int n, struct muse_error *err) {
    struct real_slot *s = slot;
    s->has_logits = false;
    muse_status st = muse_eval(s->ctx, toks, n, s->logits, 0, err);
    if (st == MUSE_OK) s->has_logits = true;
    return st;
}

static muse_status real_slot_sample(void *slot, const struct muse_srv_sampling *sp, const int32_t *history,
                                    int n_history, uint64_t *rng, int n_probs, struct muse_srv_prob *probs,
                                    int32_t *tok, struct muse_error *err) {
    struct real_slot *s = slot;
    if (!s->has_logits) return muse_error_set(err, MUSE_ERR_INTERNAL, "sample before eval");
    s->has_logits = false; /* the penalties modify the row: one sample per evaluation */
    muse_status st = muse_srv_sample(s->logits, s->r->info.n_vocab, sp, history, n_history, rng, n_probs, probs,
                                     &s->scratch, tok);
    if (st != MUSE_OK) return muse_error_set(err, st, "sampler: out of memory");
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

muse_status muse_srv_real_engine_create(const char *model_path, int n_ctx, struct muse_srv_engine *out,
                                        struct muse_error *err) {
    struct real *r = calloc(1, sizeof *r);
    if (!r) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->chat_mu, NULL);
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
