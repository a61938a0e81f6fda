/* api_native.c - llama.cpp-style native endpoints: POST /completion, /tokenize, /detokenize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_int.h"

#define MAX_N_PROBS 100
/* Most probability entries (n_probs x generated tokens) one /completion may return: n_predict is
 * clamped to this / n_probs (the reply ends with stop_type "limit"). ~80 bytes of JSON each. */
#define MAX_PROB_ENTRIES (1 << 17)
/* /detokenize text may be at most this many times the request body (+ 64 KiB): a 2-byte id can
 * stand for a piece of up to 256 bytes, and the reply is not allowed to amplify the request. */
#define DETOKENIZE_AMPLIFICATION 8
/* /tokenize formats its reply this many tokens at a time, on demand (a streamed reply). */
#define TOKENIZE_BATCH 512

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
        if (job->n_probs > 0) {
            int cap = MAX_PROB_ENTRIES / job->n_probs;
            if (job->n_predict < 0 || job->n_predict > cap) job->n_predict = cap;
        }
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "post_sampling_probs"))) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "post_sampling_probs",
                                   "'post_sampling_probs' is not supported: n_probs reports softmax(logits) before sampling");
        goto out;
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

/* Append s[0..n) as a JSON string (quoted, escaped like cJSON's printer). False when out of memory. */
static bool json_string(struct muse_srv_buf *b, const char *s, size_t n) {
    char tmp[8];
    if (!muse_srv_buf_puts(b, "\"")) return false;
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (!esc) {
            run++;
            continue;
        }
        if ((run && !muse_srv_buf_append(b, s + i - run, run)) || !muse_srv_buf_puts(b, esc)) return false;
        run = 0;
    }
    return (!run || muse_srv_buf_append(b, s + n - run, run)) && muse_srv_buf_puts(b, "\"");
}

/* The /tokenize reply, formatted TOKENIZE_BATCH tokens at a time as MHD asks for more (so a 4 MiB
 * request never builds its whole reply, let alone a cJSON tree of it). */
struct tok_stream {
    struct muse_server *srv;
    int32_t *toks; /* [n] owned */
    int n, next;
    bool pieces;
    int stage; /* 0 the opening, 1 the tokens, 2 the closing, 3 done */
    struct muse_srv_buf out;
    size_t pos;
};

static bool tok_fill(struct tok_stream *ts) {
    struct muse_srv_buf *b = &ts->out;
    if (ts->stage == 0) {
        ts->stage = 1;
        return muse_srv_buf_puts(b, "{\"tokens\":[");
    }
    if (ts->stage == 2) {
        ts->stage = 3;
        return muse_srv_buf_puts(b, "]}");
    }
    int end = ts->next + TOKENIZE_BATCH < ts->n ? ts->next + TOKENIZE_BATCH : ts->n;
    for (; ts->next < end; ts->next++) {
        int32_t t = ts->toks[ts->next];
        if (ts->next && !muse_srv_buf_puts(b, ",")) return false;
        if (!ts->pieces) {
            if (!muse_srv_buf_printf(b, "%d", (int)t)) return false;
            continue;
        }
        char piece[256];
        int np = ts->srv->ad.ops->token_piece(ts->srv->ad.self, t, piece, sizeof piece);
        if (np < 0) np = 0;
        if (np > (int)sizeof piece) np = (int)sizeof piece;
        char *clean = muse_srv_utf8_clean(piece, (size_t)np);
        bool ok = clean && muse_srv_buf_printf(b, "{\"id\":%d,\"piece\":", (int)t) && json_string(b, clean, strlen(clean)) &&
                  muse_srv_buf_puts(b, "}");
        free(clean);
        if (!ok) return false;
    }
    if (ts->next >= ts->n) ts->stage = 2;
    return true;
}

static ssize_t tok_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct tok_stream *ts = cls;
    while (ts->pos >= ts->out.len) {
        if (ts->stage == 3) return MHD_CONTENT_READER_END_OF_STREAM;
        ts->out.len = ts->pos = 0;
        if (!tok_fill(ts)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = ts->out.len - ts->pos < max ? ts->out.len - ts->pos : max;
    memcpy(buf, ts->out.p + ts->pos, n);
    ts->pos += n;
    return (ssize_t)n;
}

static void tok_free(void *cls) {
    struct tok_stream *ts = cls;
    free(ts->toks);
    muse_srv_buf_free(&ts->out);
    free(ts);
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
        struct tok_stream *ts = calloc(1, sizeof *ts);
        struct muse_error err = {0};
        if (!ts) {
            ret = muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        } else if (srv->ad.ops->tokenize(srv->ad.self, content->valuestring, strlen(content->valuestring), add_special,
                                          parse_special, &ts->toks, &ts->n, &err) != MUSE_OK) {
            free(ts);
            ret = muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
        } else {
            ts->srv = srv;
            ts->pieces = with_pieces;
            cJSON_Delete(req); /* the request's memory goes before the reply is produced */
            req = NULL;
            struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32768, tok_read, ts, tok_free);
            if (!resp) tok_free(ts);
            ret = muse_srv_reply_response(r, 200, resp, "application/json; charset=utf-8");
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
    size_t cap = r->body.len * DETOKENIZE_AMPLIFICATION + (64u << 10);
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
        if (n > 0 && text.len + (size_t)n > cap) {
            muse_srv_buf_free(&text);
            ret = muse_srv_reply_error(r, 400, "invalid_request_error", "tokens",
                                       "the text of these tokens is over %zu bytes (%d times the request, plus 64 KiB)", cap,
                                       DETOKENIZE_AMPLIFICATION);
            cJSON_Delete(req);
            return ret;
        }
        if (n > 0 && !muse_srv_buf_append(&text, piece, (size_t)n)) {
            muse_srv_buf_free(&text);
            cJSON_Delete(req);
            return muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        }
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
