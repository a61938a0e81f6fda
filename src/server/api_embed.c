/*
 * api_embed.c - the embeddings endpoints over the adapter's `embed` (muse_embed: the final hidden
 * states, pooled as the server was told, normalized):
 *
 *   POST /v1/embeddings, /embeddings  OpenAI: input = a string, an array of strings, an array of
 *                                     token ids or an array of such arrays; encoding_format float |
 *                                     base64; dimensions only when it is the model's width
 *   POST /embedding                   llama-server's own: content (or input) -> [{index, embedding:
 *                                     [[...]]}]
 *   POST /api/embed                   Ollama: input = a string or an array -> {model, embeddings,
 *                                     total_duration, load_duration, prompt_eval_count}
 *   POST /api/embeddings              Ollama's older one: prompt -> {embedding} (not normalized,
 *                                     as Ollama)
 *
 * The inputs of a request are embedded together on the work pool's thread (muse_embed_batch: they
 * share forwards; the adapter serialises embed calls); each must fit the context of a slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "server/server_int.h"

#define MAX_INPUTS 2048 /* OpenAI's limit per request */

/* One input: its tokens (owned). */
struct embd_input {
    int32_t *toks;
    int n;
};

static void inputs_free(struct embd_input *in, int n) {
    for (int i = 0; in && i < n; i++) free(in[i].toks);
    free(in);
}

/* An array of token ids (all integers) into *out; false when it is not one. */
static bool token_array(const cJSON *a, int n_vocab, struct embd_input *out) {
    const int n = cJSON_GetArraySize(a);
    if (n < 1 || !(out->toks = malloc(sizeof(int32_t) * (size_t)n))) return false;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int64_t)e->valuedouble || e->valuedouble < 0 ||
            e->valuedouble >= n_vocab) {
            free(out->toks);
            out->toks = NULL;
            return false;
        }
        out->toks[i++] = (int32_t)e->valuedouble;
    }
    out->n = n;
    return true;
}

/* The request's inputs, tokenized (with BOS as the model asks); NULL after replying 400/500. */
static struct embd_input *parse_inputs(struct srv_req *r, const cJSON *input, const char *field, int *n_out) {
    struct muse_server *srv = r->srv;
    const bool one = cJSON_IsString(input) || (cJSON_IsArray(input) && cJSON_GetArraySize(input) > 0 &&
                                               cJSON_IsNumber(cJSON_GetArrayItem(input, 0)));
    const int n = one ? 1 : cJSON_IsArray(input) ? cJSON_GetArraySize(input) : 0;
    if (n < 1 || n > MAX_INPUTS) {
        muse_srv_reply_error(r, 400, "invalid_request_error", field,
                             "'%s' must be a non-empty string, an array of 1..%d strings, an array of token ids or "
                             "an array of such arrays",
                             field, MAX_INPUTS);
        return NULL;
    }
    struct embd_input *in = calloc((size_t)n, sizeof *in);
    if (!in) {
        muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *x = one ? input : cJSON_GetArrayItem(input, i);
        struct muse_error err = {0};
        if (cJSON_IsString(x)) {
            if (!x->valuestring[0]) {
                muse_srv_reply_error(r, 400, "invalid_request_error", field, "'%s' item %d is an empty string", field, i);
                inputs_free(in, n);
                return NULL;
            }
            if (srv->ad.ops->tokenize(srv->ad.self, x->valuestring, strlen(x->valuestring), true, false, &in[i].toks,
                                      &in[i].n, &err) != MUSE_OK) {
                muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
                inputs_free(in, n);
                return NULL;
            }
        } else if (!cJSON_IsArray(x) || !token_array(x, srv->info.n_vocab, &in[i])) {
            muse_srv_reply_error(r, 400, "invalid_request_error", field,
                                 "'%s' item %d is neither a string nor an array of token ids below %d", field, i,
                                 srv->info.n_vocab);
            inputs_free(in, n);
            return NULL;
        }
    }
    *n_out = n;
    return in;
}

/* Standard base64 of n bytes (RFC 4648, with padding); malloc'd. */
static char *base64(const uint8_t *p, size_t n) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = a[v >> 18 & 63];
        *o++ = a[v >> 12 & 63];
        *o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? a[v & 63] : '=';
    }
    *o = '\0';
    return s;
}

/* A float vector as a JSON array whose numbers read back as exactly these floats (%.9g; cJSON's
 * own printer may drop the last bit of a double). */
static cJSON *float_array(const float *v, int n) {
    char *s = malloc((size_t)n * 18 + 3), *o = s;
    if (!s) return NULL;
    *o++ = '[';
    for (int i = 0; i < n; i++) o += sprintf(o, "%s%.9g", i ? "," : "", v[i]);
    *o++ = ']';
    *o = '\0';
    cJSON *a = cJSON_CreateRaw(s);
    free(s);
    return a;
}

enum embd_dialect { EMBD_OPENAI, EMBD_LLAMA, EMBD_OLLAMA, EMBD_OLLAMA_OLD };

enum MHD_Result muse_srv_api_embeddings(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    const enum embd_dialect d = !strcmp(r->url, "/embedding")        ? EMBD_LLAMA
                                : !strcmp(r->url, "/api/embed")      ? EMBD_OLLAMA
                                : !strcmp(r->url, "/api/embeddings") ? EMBD_OLLAMA_OLD
                                                                     : EMBD_OPENAI;
    if (!srv->ad.ops->embed)
        return muse_srv_reply_error(r, 501, "not_implemented_error", NULL, "this server computes no embeddings");
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    const int64_t t0 = muse_time_us();
    const char *field = d == EMBD_OLLAMA_OLD ? "prompt" : "input";
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(req, field);
    if (!input && d == EMBD_LLAMA) input = cJSON_GetObjectItemCaseSensitive(req, field = "content");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(req, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(req, "dimensions");
    const int E = srv->info.n_embd;
    enum MHD_Result ret;
    bool b64 = false;
    if (fmt && !cJSON_IsNull(fmt) && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") &&
                                                               !(b64 = !strcmp(fmt->valuestring, "base64"))))) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "encoding_format",
                                   "'encoding_format' must be \"float\" or \"base64\"");
    } else if (dims && !cJSON_IsNull(dims) && (!cJSON_IsNumber(dims) || dims->valuedouble != E)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "dimensions",
                                   "'dimensions' is not supported: the embeddings have the model's %d dimensions", E);
    } else if (d == EMBD_OLLAMA_OLD && !cJSON_IsString(input)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "prompt", "'prompt' must be a string");
    } else {
        int n = 0;
        struct embd_input *in = parse_inputs(r, input, field, &n);
        if (!in) {
            cJSON_Delete(req);
            return MHD_YES;
        }
        float *all = malloc(sizeof(float) * (size_t)E * (size_t)n);
        const int32_t **toks = malloc(sizeof *toks * (size_t)n);
        int32_t *lens = malloc(sizeof *lens * (size_t)n);
        cJSON *data = cJSON_CreateArray();
        long long n_tok = 0;
        struct muse_error err = {0};
        muse_status st = all && toks && lens ? MUSE_OK : muse_error_set(&err, MUSE_ERR_NOMEM, "out of memory");
        for (int i = 0; st == MUSE_OK && i < n; i++) toks[i] = in[i].toks, lens[i] = in[i].n;
        if (st == MUSE_OK) /* every input at once: they share forwards */
            st = srv->ad.ops->embed(srv->ad.self, toks, lens, n, d == EMBD_OLLAMA_OLD ? -1 : 2, all, &err);
        for (int i = 0; st == MUSE_OK && i < n; i++) {
            const float *v = all + (size_t)i * (size_t)E;
            n_tok += in[i].n;
            cJSON *vec = NULL;
            if (b64) {
                char *s = base64((const uint8_t *)v, sizeof(float) * (size_t)E); /* little-endian f32, as OpenAI */
                vec = s ? cJSON_CreateString(s) : NULL;
                free(s);
            } else {
                vec = float_array(v, E);
            }
            if (d == EMBD_OPENAI) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "object", "embedding");
                cJSON_AddNumberToObject(o, "index", i);
                cJSON_AddItemToObject(o, "embedding", vec);
                cJSON_AddItemToArray(data, o);
            } else if (d == EMBD_LLAMA) {
                cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
                cJSON_AddNumberToObject(o, "index", i);
                cJSON_AddItemToArray(rows, vec);
                cJSON_AddItemToObject(o, "embedding", rows);
                cJSON_AddItemToArray(data, o);
            } else {
                cJSON_AddItemToArray(data, vec);
            }
        }
        inputs_free(in, n);
        free(all);
        free(toks);
        free(lens);
        if (st) {
            cJSON_Delete(data);
            ret = muse_srv_reply_error(r, st == MUSE_ERR_NOMEM ? 500 : 400,
                                       st == MUSE_ERR_NOMEM ? "server_error" : "invalid_request_error", NULL, "%s", err.msg);
        } else if (d == EMBD_LLAMA) {
            ret = muse_srv_reply_json(r, 200, data);
        } else {
            cJSON *root = cJSON_CreateObject();
            if (d == EMBD_OPENAI) {
                cJSON_AddStringToObject(root, "object", "list");
                cJSON_AddItemToObject(root, "data", data);
                cJSON_AddStringToObject(root, "model", srv->info.model_name);
                cJSON *u = cJSON_AddObjectToObject(root, "usage");
                cJSON_AddNumberToObject(u, "prompt_tokens", (double)n_tok);
                cJSON_AddNumberToObject(u, "total_tokens", (double)n_tok);
            } else if (d == EMBD_OLLAMA) {
                cJSON_AddStringToObject(root, "model", srv->info.model_name);
                cJSON_AddItemToObject(root, "embeddings", data);
                cJSON_AddNumberToObject(root, "total_duration", (double)(muse_time_us() - t0) * 1e3);
                cJSON_AddNumberToObject(root, "load_duration", 0);
                cJSON_AddNumberToObject(root, "prompt_eval_count", (double)n_tok);
            } else {
                cJSON_AddItemToObject(root, "embedding", cJSON_DetachItemFromArray(data, 0));
                cJSON_Delete(data);
            }
            ret = muse_srv_reply_json(r, 200, root);
        }
    }
    cJSON_Delete(req);
    return ret;
}
