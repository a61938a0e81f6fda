/* api_common.c - request fields shared by the generating endpoints, and running a job to a reply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        free(text);
    }
    if (st != MUSE_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return false;
    }
    *param = NULL;
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
    if (s->ad.ops->tokenize(s->ad.self, text, strlen(text), add_special, true, &job->prompt, &job->n_prompt, &err) !=
        MUSE_OK) {
        muse_srv_reply_error(r, 500, "server_error", NULL, "tokenizer failed: %s", err.msg);
        return false;
    }
    if (job->n_prompt < 1) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "prompt", "the prompt is empty");
        return false;
    }
    if (job->n_prompt >= s->info.n_ctx) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "messages",
                             "the prompt is %d tokens but the context of a slot is %d tokens: shorten the input or start "
                             "the server with a larger --ctx-size",
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

static const char *chat_finish(const struct muse_srv_job *job) {
    switch (job->finish) {
    case MUSE_SRV_FINISH_LENGTH: return "length";
    default: return job->n_calls > 0 ? "tool_calls" : "stop";
    }
}

static const char *native_stop_type(const struct muse_srv_job *job) {
    switch (job->finish) {
    case MUSE_SRV_FINISH_EOG: return "eos";
    case MUSE_SRV_FINISH_WORD: return "word";
    case MUSE_SRV_FINISH_LENGTH: return "limit";
    default: return "none";
    }
}

static cJSON *usage_json(const struct muse_srv_job *job) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", job->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", job->n_out);
    cJSON_AddNumberToObject(u, "total_tokens", job->n_prompt + job->n_out);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", job->n_cached);
    return u;
}

static cJSON *timings_json(const struct muse_srv_job *job) {
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

static cJSON *tool_call_json(const struct muse_srv_tool_call *c, int index, bool with_index) {
    cJSON *o = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(fn, "name", c->name);
    cJSON_AddStringToObject(fn, "arguments", c->arguments);
    return o;
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

/* root printed (and freed); NULL when out of memory. */
static char *print_root(cJSON *root) {
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* Reply with JSON text (malloc'd, ownership moves; NULL = out of memory). */
static enum MHD_Result reply_text(struct srv_req *r, unsigned status, char *text) {
    if (!text) return muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    return muse_srv_reply_response(r, status, resp, "application/json; charset=utf-8");
}

static cJSON *openai_base(struct muse_server *srv, const struct srv_gen_opts *o, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", o->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", srv->info.model_name);
    char fp[64];
    snprintf(fp, sizeof fp, "muse-%s", muse_version());
    cJSON_AddStringToObject(root, "system_fingerprint", fp);
    return root;
}

/* The whole answer of a finished job as one JSON document (job->mu held); echo: the prompt text
 * put before a completion's text (NULL: none). */
static cJSON *final_json(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o,
                         const char *echo) {
    if (SRV_API_IS_OLLAMA(o->api)) return muse_srv_ollama_final(srv, job, o);
    if (o->api == SRV_API_NATIVE) {
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
        cJSON_AddItemToObject(root, "timings", timings_json(job)); /* completion_probabilities: print_with_probs */
        return root;
    }
    bool chat = o->api == SRV_API_CHAT;
    cJSON *root = openai_base(srv, o, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (job->n_calls > 0 && !job->content.len) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", muse_srv_buf_str(&job->content));
        if (job->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", muse_srv_buf_str(&job->reasoning));
        if (job->n_calls > 0) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int i = 0; i < job->n_calls; i++) cJSON_AddItemToArray(calls, tool_call_json(&job->calls[i], i, false));
        }
        cJSON_AddStringToObject(c, "finish_reason", chat_finish(job));
    } else if (echo) {
        size_t ne = strlen(echo);
        char *text = malloc(ne + job->content.len + 1);
        if (text) {
            memcpy(text, echo, ne);
            memcpy(text + ne, muse_srv_buf_str(&job->content), job->content.len + 1);
        }
        cJSON_AddStringToObject(c, "text", text ? text : "");
        free(text);
        cJSON_AddStringToObject(c, "finish_reason", job->finish == MUSE_SRV_FINISH_LENGTH ? "length" : "stop");
    } else {
        cJSON_AddStringToObject(c, "text", muse_srv_buf_str(&job->content));
        cJSON_AddStringToObject(c, "finish_reason", job->finish == MUSE_SRV_FINISH_LENGTH ? "length" : "stop");
    }
    if (!o->logprobs) cJSON_AddNullToObject(c, "logprobs");
    else if (chat)
        cJSON_AddItemToObject(c, "logprobs", muse_srv_chat_logprobs(srv, job, 0, muse_srv_logprobs_end(srv, job), o->top_logprobs));
    else
        cJSON_AddItemToObject(c, "logprobs", muse_srv_completion_logprobs(srv, job, 0, muse_srv_logprobs_end(srv, job),
                                                                         o->top_logprobs, echo ? strlen(echo) : 0));
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    cJSON_AddItemToObject(root, "timings", timings_json(job));
    return root;
}

/* ---- streaming ---- */

/*
 * A streaming reply: MHD's content reader. It runs on the connection's event loop and never
 * blocks: with nothing new it parks the connection (suspended until the scheduler's news hook
 * wakes it). Holds a reference on the request (for parking) and on the job.
 */
struct srv_stream {
    struct muse_server *srv;
    struct srv_req *r;
    struct muse_srv_job *job;
    struct srv_gen_opts o;
    size_t sent_content, sent_reasoning;
    int sent_calls, sent_toks, sent_lp; /* sent_lp: tokens whose logprobs were sent */
    bool sent_role, sent_echo, finished;
    struct muse_srv_buf out;
    size_t out_pos;
};

static void sse_text(struct srv_stream *st, char *text) {
    if (!text) return;
    muse_srv_buf_puts(&st->out, "data: ");
    muse_srv_buf_puts(&st->out, text);
    muse_srv_buf_puts(&st->out, "\n\n");
    free(text);
}

static void sse(struct srv_stream *st, cJSON *obj) {
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    sse_text(st, text);
}

/* A chat/completions chunk with one choice; returns the root and the delta (chat) or the choice. */
static cJSON *chunk(struct srv_stream *st, cJSON **slot) {
    bool chat = st->o.api == SRV_API_CHAT;
    cJSON *root = openai_base(st->srv, &st->o, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    *slot = chat ? cJSON_AddObjectToObject(c, "delta") : c;
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    return root;
}

static void set_finish(cJSON *root, const char *reason) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "finish_reason", cJSON_CreateString(reason));
}

/* Put the log probabilities of the tokens not yet reported (up to lp_end) on root's choice. */
static void attach_logprobs(struct srv_stream *st, cJSON *root, int lp_end) {
    if (!st->o.logprobs || lp_end <= st->sent_lp) return;
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON *lp = st->o.api == SRV_API_CHAT ? muse_srv_chat_logprobs(st->srv, st->job, st->sent_lp, lp_end, st->o.top_logprobs)
                                          : muse_srv_completion_logprobs(st->srv, st->job, st->sent_lp, lp_end, st->o.top_logprobs,
                                                                         st->r->echo ? strlen(st->r->echo) : 0);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp);
    st->sent_lp = lp_end;
}

/* Format what is new in the job (job->mu held). */
static void stream_collect(struct srv_stream *st) {
    struct muse_srv_job *job = st->job;
    struct muse_server *srv = st->srv;
    if (SRV_API_IS_OLLAMA(st->o.api)) {
        st->finished = muse_srv_ollama_collect(srv, job, &st->o, &st->sent_content, &st->sent_reasoning, &st->sent_calls,
                                               &st->out);
        return;
    }
    if (st->o.api == SRV_API_NATIVE) {
        if (job->n_out > st->sent_toks || job->content.len > st->sent_content) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddStringToObject(root, "content", job->content.p ? job->content.p + st->sent_content : "");
            cJSON_AddBoolToObject(root, "stop", false);
            cJSON_AddNumberToObject(root, "id_slot", job->slot);
            if (st->o.return_tokens)
                cJSON_AddItemToObject(root, "tokens", cJSON_CreateIntArray(job->out_toks + st->sent_toks, job->n_out - st->sent_toks));
            sse_text(st, print_with_probs(srv, job, root, st->sent_toks, job->n_out));
            st->sent_toks = job->n_out;
            st->sent_content = job->content.len;
        }
        if (job->done) {
            if (job->finish == MUSE_SRV_FINISH_ERROR || job->finish == MUSE_SRV_FINISH_CANCELLED) goto error;
            cJSON *root = final_json(srv, job, &st->o, NULL);
            cJSON_ReplaceItemInObjectCaseSensitive(root, "content", cJSON_CreateString(""));
            sse(st, root);
            st->finished = true;
        }
        return;
    }
    bool chat = st->o.api == SRV_API_CHAT;
    int lp_end = st->o.logprobs ? muse_srv_logprobs_end(srv, job) : 0;
    cJSON *slot;
    if (!chat && st->r->echo && !st->sent_echo) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "text", st->r->echo);
        sse(st, root);
        st->sent_echo = true;
    }
    if (chat && !st->sent_role) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "role", "assistant");
        cJSON_AddStringToObject(slot, "content", "");
        sse(st, root);
        st->sent_role = true;
    }
    if (chat && job->reasoning.len > st->sent_reasoning) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "reasoning_content", job->reasoning.p + st->sent_reasoning);
        st->sent_reasoning = job->reasoning.len;
        attach_logprobs(st, root, lp_end);
        sse(st, root);
    }
    if (job->content.len > st->sent_content) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, chat ? "content" : "text", job->content.p + st->sent_content);
        st->sent_content = job->content.len;
        attach_logprobs(st, root, lp_end);
        sse(st, root);
    }
    while (chat && st->sent_calls < job->n_calls) {
        cJSON *root = chunk(st, &slot);
        cJSON *arr = cJSON_AddArrayToObject(slot, "tool_calls");
        cJSON_AddItemToArray(arr, tool_call_json(&job->calls[st->sent_calls], st->sent_calls, true));
        st->sent_calls++;
        attach_logprobs(st, root, lp_end);
        sse(st, root);
    }
    if (st->o.logprobs && lp_end > st->sent_lp) { /* tokens whose text is held back (or no text): their own chunk */
        cJSON *root = chunk(st, &slot);
        if (!chat) cJSON_AddStringToObject(slot, "text", "");
        attach_logprobs(st, root, lp_end);
        sse(st, root);
    }
    if (!job->done) return;
    if (job->finish == MUSE_SRV_FINISH_ERROR) goto error;
    /*
     * The last chunk carries finish_reason. A generation cut short by shutdown (the only
     * cancellation a client still sees) ends the same way, with finish_reason "error", so that
     * OpenAI clients end the stream normally instead of failing on its last event.
     */
    cJSON *root = chunk(st, &slot);
    if (!chat) cJSON_AddStringToObject(slot, "text", "");
    set_finish(root, job->finish == MUSE_SRV_FINISH_CANCELLED ? "error"
                     : chat                                    ? chat_finish(job)
                     : job->finish == MUSE_SRV_FINISH_LENGTH   ? "length"
                                                               : "stop");
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    cJSON_AddItemToObject(root, "timings", timings_json(job));
    sse(st, root);
    if (st->o.include_usage) {
        root = openai_base(srv, &st->o, chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_json(job));
        sse(st, root);
    }
    muse_srv_buf_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
    return;
error:;
    cJSON *e = cJSON_CreateObject(), *eo = cJSON_AddObjectToObject(e, "error");
    bool cancelled = job->finish == MUSE_SRV_FINISH_CANCELLED;
    cJSON_AddStringToObject(eo, "message", cancelled ? "generation cancelled (server shutting down)" : job->err);
    cJSON_AddStringToObject(eo, "type", cancelled ? "unavailable_error" : "server_error");
    cJSON_AddNumberToObject(eo, "code", cancelled ? 503 : 500);
    sse(st, e);
    if (st->o.api != SRV_API_NATIVE) muse_srv_buf_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
}

static bool job_has_news(const struct srv_stream *st) {
    const struct muse_srv_job *job = st->job;
    return job->done || job->content.len > st->sent_content || job->reasoning.len > st->sent_reasoning ||
           job->n_calls > st->sent_calls || (st->o.api == SRV_API_NATIVE && job->n_out > st->sent_toks) ||
           (st->o.api == SRV_API_CHAT && !st->sent_role) ||
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
        if (news) stream_collect(st);
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
    return muse_srv_reply_response(r, 200, resp,
                                   SRV_API_IS_OLLAMA(o->api) ? "application/x-ndjson" : "text/event-stream; charset=utf-8");
}

enum MHD_Result muse_srv_reply_job(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    struct muse_srv_job *job = r->job;
    enum MHD_Result ret;
    pthread_mutex_lock(&job->mu);
    if (job->finish == MUSE_SRV_FINISH_ERROR) {
        ret = muse_srv_reply_error(r, 500, "server_error", NULL, "generation failed: %s", job->err);
    } else if (job->finish == MUSE_SRV_FINISH_CANCELLED) {
        ret = muse_srv_reply_error(r, 503, "unavailable_error", NULL, "generation cancelled (server shutting down)");
    } else {
        cJSON *root = final_json(srv, job, &r->o, r->echo);
        ret = reply_text(r, 200, r->o.api == SRV_API_NATIVE ? print_with_probs(srv, job, root, 0, job->n_out) : print_root(root));
    }
    pthread_mutex_unlock(&job->mu);
    return ret;
}
