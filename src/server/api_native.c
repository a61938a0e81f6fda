/* api_native.c - llama.cpp-style native endpoints: POST /completion, /tokenize, /detokenize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_int.h"

#define MAX_N_PROBS 100

/* An optional boolean field: absent/null = def; another type = false. */
static bool get_bool(const cJSON *req, const char *key, bool def, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return true;
    }
    if (!cJSON_IsBool(v)) return false;
    *out = cJSON_IsTrue(v);
    return true;
}

enum MHD_Result muse_srv_api_completion(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.api = SRV_API_NATIVE};
    struct muse_srv_job *job = muse_srv_completion_job(r, req, false, &o, &ret);
    if (!job) goto out;
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(req, "n_probs");
    if (np && !cJSON_IsNull(np)) {
        if (!cJSON_IsNumber(np) || np->valuedouble != (double)np->valueint || np->valueint < 0 ||
            np->valueint > MAX_N_PROBS) {
            ret = muse_srv_reply_error(r, 400, "invalid_request_error", "n_probs", "'n_probs' must be an integer in 0..%d",
                                       MAX_N_PROBS);
            goto out;
        }
        job->n_probs = np->valueint < srv->info.n_vocab ? np->valueint : srv->info.n_vocab;
    }
    bool add_special = true;
    if (!get_bool(req, "return_tokens", false, &o.return_tokens) || !get_bool(req, "add_special", true, &add_special)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", NULL, "'return_tokens' and 'add_special' must be booleans");
        goto out;
    }
    if (!muse_srv_completion_prompt(r, cJSON_GetObjectItemCaseSensitive(req, "prompt"), add_special, job)) goto out;
    o.stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stream"));
    cJSON_Delete(req);
    return muse_srv_run_job(r, job, &o);
out:
    muse_srv_job_release(job);
    cJSON_Delete(req);
    return ret;
}

enum MHD_Result muse_srv_api_tokenize(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    enum MHD_Result ret;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(req, "content");
    bool add_special, parse_special, with_pieces;
    if (!cJSON_IsString(content)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "content", "'content' must be a string");
    } else if (!get_bool(req, "add_special", false, &add_special) || !get_bool(req, "parse_special", true, &parse_special) ||
               !get_bool(req, "with_pieces", false, &with_pieces)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", NULL,
                                   "'add_special', 'parse_special' and 'with_pieces' must be booleans");
    } else {
        int32_t *toks = NULL;
        int n = 0;
        struct muse_error err = {0};
        if (srv->ad.ops->tokenize(srv->ad.self, content->valuestring, strlen(content->valuestring), add_special,
                                   parse_special, &toks, &n, &err) != MUSE_OK) {
            ret = muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
        } else {
            cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "tokens");
            for (int i = 0; i < n; i++) {
                if (!with_pieces) {
                    cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
                    continue;
                }
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "id", toks[i]);
                cJSON_AddItemToObject(e, "piece", muse_srv_piece_json(srv, toks[i]));
                cJSON_AddItemToArray(arr, e);
            }
            free(toks);
            ret = muse_srv_reply_json(r, 200, root);
        }
    }
    cJSON_Delete(req);
    return ret;
}

enum MHD_Result muse_srv_api_detokenize(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, "tokens"), *t;
    enum MHD_Result ret;
    if (!cJSON_IsArray(toks)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "tokens", "'tokens' must be an array of token ids");
        cJSON_Delete(req);
        return ret;
    }
    struct muse_srv_buf text = {0};
    int i = 0;
    cJSON_ArrayForEach(t, toks) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)t->valueint || t->valueint < 0 ||
            t->valueint >= srv->info.n_vocab) {
            muse_srv_buf_free(&text);
            ret = muse_srv_reply_error(r, 400, "invalid_request_error", "tokens", "tokens[%d] is not a token id in [0, %d)", i,
                                       srv->info.n_vocab);
            cJSON_Delete(req);
            return ret;
        }
        char piece[256];
        int n = srv->ad.ops->token_piece(srv->ad.self, t->valueint, piece, sizeof piece);
        if (n > (int)sizeof piece) n = (int)sizeof piece;
        if (n > 0) muse_srv_buf_append(&text, piece, (size_t)n);
        i++;
    }
    /* pieces joined may still be invalid UTF-8 (a cut sequence): JSON needs valid text */
    char *clean = muse_srv_utf8_clean(muse_srv_buf_str(&text), text.len);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "content", clean ? clean : "");
    free(clean);
    muse_srv_buf_free(&text);
    cJSON_Delete(req);
    return muse_srv_reply_json(r, 200, root);
}
