/* api_common.c - request fields shared by the generating endpoints, and running a job to a reply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "core/utf8.h"
#include "server/server_int.h"

#define MAX_STOPS 16
#define MAX_STOP_LEN 127

/* ---- request fields ---- */

/* A number field: absent = keep *out; wrong type or out of [lo, hi] = false. */
static bool get_number(const cJSON *req, const char *key, double lo, double hi, bool integer, double *out,
                       bool *present, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (present) *present = false;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        snprintf(msg, cap, "'%s' must be a number", key);
        return false;
    }
    double d = v->valuedouble;
    if (integer && d != floor(d)) {
        snprintf(msg, cap, "'%s' must be an integer", key);
        return false;
    }
    if (d < lo || d > hi) {
        snprintf(msg, cap, "'%s' must be between %g and %g", key, lo, hi);
        return false;
    }
    *out = d;
    if (present) *present = true;
    return true;
}

void muse_srv_make_id(struct muse_server *srv, struct muse_srv_job *job, const char *prefix, char *out, size_t cap) {
    job->id = srv->id_base + atomic_fetch_add(&srv->next_id, 1);
    snprintf(out, cap, "%s%016llx", prefix, (unsigned long long)job->id);
}

struct muse_srv_job *muse_srv_completion_job(struct srv_req *r, const cJSON *req, bool openai, struct srv_gen_opts *o,
                                             enum MHD_Result *ret) {
    struct muse_srv_job *job = muse_srv_job_new();
    if (!job) {
        *ret = muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    muse_srv_make_id(r->srv, job, "cmpl-", o->id, sizeof o->id);
    char msg[300] = "";
    const char *param = NULL;
    if (!muse_srv_parse_common(r->srv, req, job, openai, msg, sizeof msg, &param)) {
        *ret = muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        muse_srv_job_release(job);
        return NULL;
    }
    return job;
}

/*
 * Constrained decoding fields, as llama-server reads them: `grammar` (GBNF text) or `json_schema`
 * (a schema object), and OpenAI's `response_format` {"type": "text" | "json_object" (optional
 * "schema") | "json_schema", "json_schema": {"name", "schema", "strict"}}, which wins over
 * `json_schema`. An empty schema means any JSON object. Bad grammars and schemas are the
 * client's: false with the position or keyword in msg.
 */
static bool parse_grammar(struct muse_server *srv, const cJSON *req, struct muse_srv_job *job, char *msg, size_t cap,
                          const char **param) {
    static const char any_object[] = "{\"type\": \"object\"}";
    const cJSON *grammar = cJSON_GetObjectItemCaseSensitive(req, "grammar");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(req, "json_schema");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(req, "response_format");
    const char *where = "json_schema";
    bool any = false; /* any JSON object */
    if (grammar && !cJSON_IsNull(grammar) && !cJSON_IsString(grammar)) {
        snprintf(msg, cap, "'grammar' must be a string of GBNF");
        *param = "grammar";
        return false;
    }
    if (grammar && (cJSON_IsNull(grammar) || !grammar->valuestring[0])) grammar = NULL;
    if (schema && cJSON_IsNull(schema)) schema = NULL;
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
        *param = "response_format";
        if (!cJSON_IsObject(rf) || (type && !t)) {
            snprintf(msg, cap, "'response_format' must be an object with a string 'type'");
            return false;
        }
        if (t && !strcmp(t, "json_object")) {
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(rf, "schema");
            if (sc) schema = sc, where = "response_format.schema";
            else if (!schema) any = true;
        } else if (t && !strcmp(t, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
            if (!cJSON_IsObject(js)) {
                snprintf(msg, cap, "response_format json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
                return false;
            }
            if (sc) schema = sc, where = "response_format.json_schema.schema";
            else schema = NULL, any = true;
        } else if (t && strcmp(t, "text")) {
            snprintf(msg, cap, "response_format type must be \"text\", \"json_object\" or \"json_schema\", not '%.40s'", t);
            return false;
        }
    }
    if (grammar && (schema || any)) {
        snprintf(msg, cap, "use either 'grammar' or a JSON schema (json_schema, response_format), not both");
        *param = "grammar";
        return false;
    }
    if (!grammar && !schema && !any) {
        *param = NULL;
        return true;
    }
    *param = grammar ? "grammar" : schema ? where : "response_format";
    if (!srv->ad.ops->grammar_compile) {
        snprintf(msg, cap, "this server cannot constrain its output");
        return false;
    }
    struct muse_error err = {0};
    muse_status st;
    if (grammar) {
        st = srv->ad.ops->grammar_compile(srv->ad.self, MUSE_GRAMMAR_GBNF, grammar->valuestring,
                                          strlen(grammar->valuestring), &job->grammar, &err);
    } else {
        if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
            snprintf(msg, cap, "'%s' must be a JSON Schema (an object)", where);
            return false;
        }
        /* an empty schema means any object (llama-server) */
        char *text = !schema || (cJSON_IsObject(schema) && !schema->child) ? strdup(any_object)
                                                                             : cJSON_PrintUnformatted(schema);
        if (!text) {
            snprintf(msg, cap, "out of memory");
            return false;
        }
        st = srv->ad.ops->grammar_compile(srv->ad.self, MUSE_GRAMMAR_JSON_SCHEMA, text, strlen(text), &job->grammar, &err);
        free(job->schema);
        job->schema = text; /* a chat compiles its whole-answer grammar from it (muse_srv_chat_whole_grammar) */
    }
    if (st != MUSE_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return false;
    }
    *param = NULL;
    return true;
}

bool muse_srv_chat_whole_grammar(struct muse_server *srv, struct muse_srv_job *job, char *msg, size_t cap) {
    if (!job->schema || !job->grammar || !srv->ad.ops->grammar_compile) return true;
    struct muse_error err = {0};
    if (srv->ad.ops->grammar_compile(srv->ad.self, MUSE_GRAMMAR_CHAT_JSON_SCHEMA, job->schema, strlen(job->schema),
                                     &job->grammar_whole, &err) != MUSE_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return false;
    }
    return true;
}

bool muse_srv_parse_common(struct muse_server *srv, const cJSON *req, struct muse_srv_job *job, bool openai, char *msg,
                           size_t cap, const char **param) {
    struct muse_sampler_params *sp = &job->sp; /* starts as muse_sampler_default_params (muse_srv_job_new) */
    double t = srv->p.temperature, tp = srv->p.top_p, mp = srv->p.min_p, tk = srv->p.top_k;
    double pp = 0, fp = 0, seed = -1, np = -1, n = 1;
    bool has_seed = false, has_max = false;
#define FIELD(key, lo, hi, integer, var, present)                                   \
    do {                                                                            \
        if (!get_number(req, key, lo, hi, integer, &var, present, msg, cap)) {      \
            *param = key;                                                           \
            return false;                                                           \
        }                                                                           \
    } while (0)
    FIELD("temperature", 0, 100, false, t, NULL);
    FIELD("top_p", 0, 1, false, tp, NULL);
    FIELD("min_p", 0, 1, false, mp, NULL);
    FIELD("top_k", 0, 1e9, true, tk, NULL);
    FIELD("presence_penalty", -2, 2, false, pp, NULL);
    FIELD("frequency_penalty", -2, 2, false, fp, NULL);
    FIELD("seed", -9.2e18, 1.8e19, true, seed, &has_seed);
    if (openai) {
        FIELD("n", 1, 1, true, n, NULL);
        FIELD("max_tokens", 0, 1e9, true, np, &has_max);
        if (!has_max) FIELD("max_completion_tokens", 0, 1e9, true, np, &has_max);
    } else {
        FIELD("n_predict", -1, 1e9, true, np, &has_max);
        if (!has_max) FIELD("max_tokens", 0, 1e9, true, np, &has_max);
    }
#undef FIELD
    sp->temperature = (float)t;
    sp->top_p = (float)tp;
    sp->min_p = (float)mp;
    sp->top_k = (int32_t)tk;
    sp->presence_penalty = (float)pp;
    sp->frequency_penalty = (float)fp;
    if (has_seed) sp->seed = seed < 0 ? (uint64_t)(int64_t)seed : (uint64_t)seed;
    else sp->seed = (uint64_t)muse_time_us() ^ (job->id * 0x9e3779b97f4a7c15ull);
    job->n_predict = has_max ? (int)np : -1;

    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop"), *s;
    const cJSON *items[MAX_STOPS];
    int count = 0;
    bool bad = false;
    if (cJSON_IsString(stop)) {
        items[count++] = stop;
    } else if (cJSON_IsArray(stop)) {
        cJSON_ArrayForEach(s, stop) {
            if (count == MAX_STOPS) bad = true;
            else items[count++] = s;
        }
    } else if (stop && !cJSON_IsNull(stop)) {
        bad = true;
    }
    for (int i = 0; i < count; i++)
        bad |= !cJSON_IsString(items[i]) || !items[i]->valuestring[0] || strlen(items[i]->valuestring) > MAX_STOP_LEN;
    if (bad) {
        snprintf(msg, cap, "'stop' must be a non-empty string or an array of at most %d non-empty strings of at most %d bytes",
                 MAX_STOPS, MAX_STOP_LEN);
        *param = "stop";
        return false;
    }
    if (count) {
        job->stops = calloc((size_t)count, sizeof *job->stops);
        for (int i = 0; job->stops && i < count; i++)
            if ((job->stops[job->n_stops] = strdup(items[i]->valuestring))) job->n_stops++;
        if (!job->stops || job->n_stops < count) {
            snprintf(msg, cap, "out of memory");
            *param = "stop";
            return false;
        }
    }
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(req, "ignore_eos");
    if (ie && !cJSON_IsBool(ie) && !cJSON_IsNull(ie)) {
        snprintf(msg, cap, "'ignore_eos' must be a boolean");
        *param = "ignore_eos";
        return false;
    }
    job->ignore_eos = cJSON_IsTrue(ie);
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(req, "stream");
    if (stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream)) {
        snprintf(msg, cap, "'stream' must be a boolean");
        *param = "stream";
        return false;
    }
    return parse_grammar(srv, req, job, msg, cap, param);
}

bool muse_srv_tokenize_prompt(struct srv_req *r, const char *text, bool add_special, struct muse_srv_job *job) {
    struct muse_server *s = r->srv;
    struct muse_error err = {0};
    free(job->prompt);
    job->prompt = NULL;
    if (s->ad.ops->tokenize(s->ad.self, text, strlen(text), add_special, true, &job->prompt, &job->n_prompt, &err) !=
        MUSE_OK) {
        muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
        return false;
    }
    return muse_srv_check_prompt(r, job);
}

bool muse_srv_check_prompt(struct srv_req *r, struct muse_srv_job *job) {
    struct muse_server *s = r->srv;
    if (job->n_prompt < 1) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "prompt", "the prompt is empty");
        return false;
    }
    if (job->n_prompt >= s->info.n_ctx) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "messages",
                             "the prompt is %d tokens but the context of a slot is %d tokens: shorten the input or start "
                             "the server with a larger --ctx-size (a chat drops its oldest turns unless --no-context-shift, "
                             "but its system messages and last user message must fit)",
                             job->n_prompt, s->info.n_ctx);
        return false;
    }
    return true;
}

/* Valid UTF-8 copy of s[0..n) with invalid bytes replaced by U+FFFD (malloc'd). */
char *muse_srv_utf8_clean(const char *s, size_t n) {
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        const int k = muse_utf8_seq(p + i, n - i); /* core/utf8.h: one U+FFFD per byte outside a character */
        if (k > 0) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    return out;
}

cJSON *muse_srv_piece_json(struct muse_server *srv, int32_t tok) {
    char piece[256];
    int n = srv->ad.ops->token_piece(srv->ad.self, tok, piece, sizeof piece);
    if (n < 0) n = 0;
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    char *clean = muse_srv_utf8_clean(piece, (size_t)n);
    cJSON *j = cJSON_CreateString(clean ? clean : "");
    free(clean);
    return j;
}

/* ---- formatting ---- */

cJSON *muse_srv_timings_json(const struct muse_srv_job *job) {
    cJSON *t = cJSON_CreateObject();
    double pms = (double)(job->t_prefill_end_us - job->t_start_us) / 1000.0;
    double dms = (double)(job->t_end_us - job->t_prefill_end_us) / 1000.0;
    int evaluated = job->n_prompt - job->n_cached;
    cJSON_AddNumberToObject(t, "cache_n", job->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", evaluated);
    cJSON_AddNumberToObject(t, "prompt_ms", pms);
    cJSON_AddNumberToObject(t, "prompt_per_second", pms > 0 ? evaluated / (pms / 1000.0) : 0);
    cJSON_AddNumberToObject(t, "predicted_n", job->n_out);
    cJSON_AddNumberToObject(t, "predicted_ms", dms);
    cJSON_AddNumberToObject(t, "predicted_per_second", dms > 0 ? job->n_out / (dms / 1000.0) : 0);
    cJSON_AddNumberToObject(t, "queue_ms", (double)(job->t_start_us - job->t_submit_us) / 1000.0);
    return t;
}

/* Reply with JSON text (malloc'd, ownership moves; NULL = out of memory). */
static enum MHD_Result reply_text(struct srv_req *r, unsigned status, char *text) {
    if (!text) return muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    return muse_srv_reply_response(r, status, resp, "application/json; charset=utf-8");
}

/* ---- streaming ---- */

void muse_srv_sse_text(struct srv_stream *st, char *text) {
    if (!text) return;
    muse_srv_buf_puts(&st->out, "data: ");
    muse_srv_buf_puts(&st->out, text);
    muse_srv_buf_puts(&st->out, "\n\n");
    free(text);
}

void muse_srv_sse(struct srv_stream *st, cJSON *obj) {
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    muse_srv_sse_text(st, text);
}

void muse_srv_sse_error(struct srv_stream *st) {
    const struct muse_srv_job *job = st->job;
    cJSON *e = cJSON_CreateObject(), *eo = cJSON_AddObjectToObject(e, "error");
    bool cancelled = job->finish == MUSE_SRV_FINISH_CANCELLED;
    cJSON_AddStringToObject(eo, "message", cancelled ? "generation cancelled (server shutting down)" : job->err);
    cJSON_AddStringToObject(eo, "type", cancelled ? "unavailable_error" : "server_error");
    cJSON_AddNumberToObject(eo, "code", cancelled ? 503 : 500);
    muse_srv_sse(st, e);
}

static bool job_has_news(const struct srv_stream *st) {
    const struct muse_srv_job *job = st->job;
    return job->done || job->content.len > st->sent_content || job->reasoning.len > st->sent_reasoning ||
           job->n_calls > st->sent_calls || (st->o.dialect->more_news && st->o.dialect->more_news(st)) ||
           (st->o.logprobs && muse_srv_logprobs_end(st->srv, job) > st->sent_lp);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct srv_stream *st = cls;
    for (;;) {
        if (st->out_pos < st->out.len) {
            size_t n = st->out.len - st->out_pos;
            if (n > max) n = max;
            memcpy(buf, st->out.p + st->out_pos, n);
            st->out_pos += n;
            return (ssize_t)n;
        }
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.len = st->out_pos = 0;
        struct muse_srv_job *job = st->job;
        pthread_mutex_lock(&job->mu);
        bool news = job_has_news(st);
        if (news) st->o.dialect->collect(st);
        pthread_mutex_unlock(&job->mu);
        if (news) continue;
        switch (muse_srv_park(st->r)) {
        case SRV_PARK_SUSPENDED: return 0; /* called again once woken */
        case SRV_PARK_RETRY: continue;
        case SRV_PARK_REFUSED:
            muse_srv_sched_abandon(st->srv->sched, job); /* the client is gone: free the slot */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    struct srv_stream *st = cls;
    bool done;
    pthread_mutex_lock(&st->job->mu);
    done = st->job->done;
    pthread_mutex_unlock(&st->job->mu);
    if (!done) muse_srv_sched_abandon(st->srv->sched, st->job); /* the connection ended before the job */
    muse_srv_job_release(st->job);
    muse_srv_req_release(st->r);
    muse_srv_buf_free(&st->out);
    free(st);
}

enum MHD_Result muse_srv_run_job(struct srv_req *r, struct muse_srv_job *job, const struct srv_gen_opts *o) {
    struct muse_server *srv = r->srv;
    if (!muse_srv_req_attach_job(r, job, o->stream)) { /* the client is already gone */
        muse_srv_job_release(job);
        return MHD_YES;
    }
    enum muse_srv_submit sub = muse_srv_sched_submit(srv->sched, job);
    if (sub != MUSE_SRV_SUBMIT_OK) {
        muse_srv_job_release(job); /* r keeps its reference; the job never ran, nothing waits on it */
        if (sub == MUSE_SRV_SUBMIT_FULL)
            return muse_srv_reply_error(r, 503, "unavailable_error", NULL,
                                        "server busy: all %d slots are busy and the queue (%d) is full; retry later",
                                        srv->p.n_slots, srv->p.queue);
        return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is shutting down");
    }
    if (!o->stream) {
        r->o = *o; /* the event loop formats the reply once the job is done (muse_srv_reply_job) */
        muse_srv_job_release(job);
        return MHD_YES;
    }
    struct srv_stream *st = calloc(1, sizeof *st);
    if (!st) {
        muse_srv_job_release(job);
        return MHD_NO; /* r's reference on the job: abandoned when r goes */
    }
    st->srv = srv;
    st->r = r;
    muse_srv_req_ref(r);
    st->job = job; /* the caller's reference moves here */
    st->o = *o;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return muse_srv_reply_response(r, 200, resp, o->dialect->stream_type);
}

enum MHD_Result muse_srv_reply_job(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    struct muse_srv_job *job = r->job;
    enum MHD_Result ret;
    pthread_mutex_lock(&job->mu);
    if (job->finish == MUSE_SRV_FINISH_ERROR && job->err_status == MUSE_ERR_CONTEXT) { /* the KV pool: try later */
        ret = muse_srv_reply_error(r, 503, "unavailable_error", NULL, "generation failed: %s", job->err);
    } else if (job->finish == MUSE_SRV_FINISH_ERROR) {
        ret = muse_srv_reply_error(r, 500, "server_error", NULL, "generation failed: %s", job->err);
    } else if (job->finish == MUSE_SRV_FINISH_CANCELLED) {
        ret = muse_srv_reply_error(r, 503, "unavailable_error", NULL, "generation cancelled (server shutting down)");
    } else {
        ret = reply_text(r, 200, r->o.dialect->reply(srv, job, &r->o, r->echo));
    }
    pthread_mutex_unlock(&job->mu);
    return ret;
}
