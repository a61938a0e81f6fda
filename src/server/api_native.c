/* api_native.c - llama.cpp-style native endpoints: POST /completion, /tokenize, /detokenize. */
#include <math.h>
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
    struct srv_gen_opts o = {.dialect = &muse_srv_dialect_native};
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

/* ---- replies (the native dialect; api_common.c calls them, job->mu held) ---- */

static const char *native_stop_type(const struct muse_srv_job *job) {
    switch (job->finish) {
    case MUSE_SRV_FINISH_EOG: return "eos";
    case MUSE_SRV_FINISH_WORD: return "word";
    case MUSE_SRV_FINISH_LENGTH: return "limit";
    default: return "none";
    }
}

/*
 * The completion_probabilities entries of tokens [from, to) as JSON text appended to out: one
 * token's objects at a time, so memory stays about the size of the text (a cJSON tree of the whole
 * list costs ~400 bytes per entry). False when out of memory.
 */
static bool probs_text(struct muse_server *srv, const struct muse_srv_job *job, int from, int to, struct muse_srv_buf *out) {
    bool ok = muse_srv_buf_puts(out, "[");
    for (int i = from; ok && i < to; i++) {
        const struct muse_srv_prob *pr = job->probs + (size_t)i * (size_t)(job->n_probs + 1);
        int32_t tok = job->out_toks[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", tok);
        cJSON_AddItemToObject(e, "token", muse_srv_piece_json(srv, tok));
        double p = pr[job->n_probs].prob; /* the sampled token's own, also outside the top n */
        cJSON_AddNumberToObject(e, "prob", p);
        if (p > 0) cJSON_AddNumberToObject(e, "logprob", log(p));
        cJSON *top = cJSON_AddArrayToObject(e, "top_probs");
        for (int k = 0; k < job->n_probs; k++) {
            cJSON *t = cJSON_CreateObject();
            cJSON_AddNumberToObject(t, "id", pr[k].token);
            cJSON_AddItemToObject(t, "token", muse_srv_piece_json(srv, pr[k].token));
            cJSON_AddNumberToObject(t, "prob", pr[k].prob);
            if (pr[k].prob > 0) cJSON_AddNumberToObject(t, "logprob", log(pr[k].prob));
            cJSON_AddItemToArray(top, t);
        }
        char *text = cJSON_PrintUnformatted(e);
        cJSON_Delete(e);
        ok = text && (i == from || muse_srv_buf_puts(out, ",")) && muse_srv_buf_puts(out, text);
        free(text);
    }
    return ok && muse_srv_buf_puts(out, "]");
}

/*
 * root printed as JSON text (malloc'd; root is freed), with "completion_probabilities" of tokens
 * [from, to) spliced in as the last member when the job has n_probs. NULL when out of memory.
 */
static char *print_with_probs(struct muse_server *srv, const struct muse_srv_job *job, cJSON *root, int from, int to) {
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text || job->n_probs <= 0) return text;
    struct muse_srv_buf b = {0};
    size_t n = strlen(text); /* text ends with the object's '}' */
    bool ok = n >= 2 && muse_srv_buf_append(&b, text, n - 1) &&
              muse_srv_buf_puts(&b, n > 2 ? ",\"completion_probabilities\":" : "\"completion_probabilities\":") &&
              probs_text(srv, job, from, to, &b) && muse_srv_buf_puts(&b, "}");
    free(text);
    if (!ok) {
        muse_srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}

/* The native answer of a finished job, without its completion_probabilities (print_with_probs). */
static cJSON *native_json(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "content", muse_srv_buf_str(&job->content));
    cJSON_AddStringToObject(root, "model", srv->info.model_name);
    cJSON_AddNumberToObject(root, "id_slot", job->slot);
    cJSON_AddBoolToObject(root, "stop", true);
    cJSON_AddStringToObject(root, "stop_type", native_stop_type(job));
    cJSON_AddStringToObject(root, "stopping_word", job->stop_word);
    cJSON_AddNumberToObject(root, "tokens_predicted", job->n_out);
    cJSON_AddNumberToObject(root, "tokens_evaluated", job->n_prompt);
    cJSON_AddNumberToObject(root, "tokens_cached", job->n_cached);
    cJSON_AddBoolToObject(root, "truncated", false);
    if (o->return_tokens) cJSON_AddItemToObject(root, "tokens", cJSON_CreateIntArray(job->out_toks, job->n_out));
    cJSON_AddItemToObject(root, "timings", muse_srv_timings_json(job)); /* completion_probabilities: print_with_probs */
    return root;
}

static char *native_reply(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o,
                          const char *echo) {
    (void)echo;
    return print_with_probs(srv, job, native_json(srv, job, o), 0, job->n_out);
}

/* Each new piece as {content, stop: false}, then the final answer with empty content. */
static void native_collect(struct srv_stream *st) {
    struct muse_srv_job *job = st->job;
    struct muse_server *srv = st->srv;
    if (job->n_out > st->sent_toks || job->content.len > st->sent_content) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "content", job->content.p ? job->content.p + st->sent_content : "");
        cJSON_AddBoolToObject(root, "stop", false);
        cJSON_AddNumberToObject(root, "id_slot", job->slot);
        if (st->o.return_tokens)
            cJSON_AddItemToObject(root, "tokens", cJSON_CreateIntArray(job->out_toks + st->sent_toks, job->n_out - st->sent_toks));
        muse_srv_sse_text(st, print_with_probs(srv, job, root, st->sent_toks, job->n_out));
        st->sent_toks = job->n_out;
        st->sent_content = job->content.len;
    }
    if (job->done) {
        if (job->finish == MUSE_SRV_FINISH_ERROR || job->finish == MUSE_SRV_FINISH_CANCELLED) {
            muse_srv_sse_error(st); /* llama-server's streams end without [DONE] */
            st->finished = true;
            return;
        }
        cJSON *root = native_json(srv, job, &st->o);
        cJSON_ReplaceItemInObjectCaseSensitive(root, "content", cJSON_CreateString(""));
        muse_srv_sse(st, root);
        st->finished = true;
    }
}

/* Tokens without text yet still make an event (their ids and probabilities). */
static bool native_news(const struct srv_stream *st) { return st->job->n_out > st->sent_toks; }

const struct srv_dialect muse_srv_dialect_native = {
    .stream_type = "text/event-stream; charset=utf-8",
    .reply = native_reply,
    .collect = native_collect,
    .more_news = native_news,
};
