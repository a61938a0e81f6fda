/*
 * http.c - the libmicrohttpd side of `muse serve`: event loops, routing, auth, Host and CORS
 * policy, body limits, parking of waiting requests, the work pool, lifecycle.
 *
 * Connections: gate.c accepts them and hands over those whose request head has arrived; MHD runs
 * them on a few event-loop threads (epoll, a thread pool; MHD_USE_NO_LISTEN_SOCKET), so an open
 * connection costs no thread. Every response carries `Connection: close`: each request arrives on a
 * fresh connection, so each one passes the gate's checks and deadlines.
 *
 * A request's life: the access handler's first call (head read) checks Host and the body budget;
 * the body is buffered (at most --max-body); at the last call GET-style endpoints answer at once,
 * POST endpoints go to the work pool (parsing, tokenizing and rendering take CPU time that must not
 * stall an event loop) while the connection is suspended. A generation then waits for its job the
 * same way: suspended, woken by the scheduler's news hook (sched.h job->notify). Nothing an event
 * loop runs blocks. A watcher (the gate's tick, every 50 ms) polls the sockets of waiting requests:
 * a client that went away has its job taken out of the queue or cancelled at once.
 */
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timer.h"
#include "server/server_int.h"
#include "server/wire.h"

#define MAX_HEAD (16u << 10)        /* longest request head the gate accepts (431 beyond) */
#define HEAD_TIMEOUT_MAX_S 10       /* the head must arrive within min(this, --read-timeout) */
#define MHD_IDLE_TIMEOUT_S 60       /* MHD's own no-progress timeout (a client that stops reading) */

struct muse_server_params muse_server_default_params(void) {
    struct muse_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_slots = 4;
    p.queue = 64;
    p.max_body = 4u << 20;
    p.max_connections = 1024;
    p.max_connections_per_addr = 0;
    p.read_timeout_s = 30;
    p.http_threads = 2;
    p.work_threads = 2;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.top_k = 64;
    p.min_p = 0.0f;
    p.context_shift = true;
    return p;
}

/* ---- requests ---- */

void muse_srv_req_ref(struct srv_req *r) { atomic_fetch_add(&r->refs, 1); }

void muse_srv_req_release(struct srv_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    struct muse_server *s = r->srv;
    if (r->resp) MHD_destroy_response(r->resp);
    if (r->job) {
        bool done;
        pthread_mutex_lock(&r->job->mu);
        done = r->job->done;
        pthread_mutex_unlock(&r->job->mu);
        if (!done && s->sched) muse_srv_sched_abandon(s->sched, r->job);
        muse_srv_job_release(r->job);
    }
    if (r->body_reserved) atomic_fetch_sub(&s->body_bytes, r->body_reserved);
    muse_srv_buf_free(&r->body);
    free(r->url);
    free(r->echo);
    free(r);
    atomic_fetch_sub(&s->active, 1);
}

/* ---- parking (park_mu) ---- */

static void park_register_locked(struct muse_server *s, struct srv_req *r) {
    if (r->parked) return;
    r->parked = true;
    r->park_prev = NULL;
    r->park_next = s->parked;
    if (s->parked) s->parked->park_prev = r;
    s->parked = r;
}

static void park_unregister_locked(struct muse_server *s, struct srv_req *r) {
    if (!r->parked) return;
    if (r->park_prev) r->park_prev->park_next = r->park_next;
    else s->parked = r->park_next;
    if (r->park_next) r->park_next->park_prev = r->park_prev;
    r->parked = false;
}

static void wake_locked(struct srv_req *r) {
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    } else {
        r->wake_pending = true;
    }
}

enum srv_park muse_srv_park(struct srv_req *r) {
    struct muse_server *s = r->srv;
    enum srv_park res;
    pthread_mutex_lock(&s->park_mu);
    if (r->wake_pending) {
        r->wake_pending = false;
        res = SRV_PARK_RETRY;
    } else if (r->gone || s->no_suspend || !r->parked) {
        res = SRV_PARK_REFUSED;
    } else {
        MHD_suspend_connection(r->conn);
        r->suspended = true;
        res = SRV_PARK_SUSPENDED;
    }
    pthread_mutex_unlock(&s->park_mu);
    return res;
}

bool muse_srv_req_gone(struct srv_req *r) {
    pthread_mutex_lock(&r->srv->park_mu);
    bool gone = r->gone;
    pthread_mutex_unlock(&r->srv->park_mu);
    return gone;
}

bool muse_srv_req_attach_job(struct srv_req *r, struct muse_srv_job *job, bool stream) {
    struct muse_server *s = r->srv;
    pthread_mutex_lock(&s->park_mu);
    bool ok = !r->closed && !r->gone && !r->job;
    if (ok) {
        atomic_fetch_add(&job->refs, 1);
        r->job = job;
        r->stream = stream;
        job->notify = muse_srv_job_news;
        job->notify_ud = s;
    }
    pthread_mutex_unlock(&s->park_mu);
    return ok;
}

/*
 * Called by a slot's worker after each token (and when a job ends). The resume call itself is made
 * outside park_mu: holding that global lock across libmicrohttpd's own lock made the slots' workers
 * queue behind each other and cost them 30-50% of their decode speed (demo model, 2 cores). It is
 * safe: r->suspended is already false, so nothing else resumes this connection, and it cannot go
 * away while it is suspended; at shutdown the workers are joined before the last resume sweep, and
 * finished jobs never call this again.
 */
void muse_srv_job_news(void *ud, struct muse_srv_job *job, bool done) {
    struct muse_server *s = ud;
    struct MHD_Connection *resume = NULL;
    pthread_mutex_lock(&s->park_mu);
    for (struct srv_req *r = s->parked; r; r = r->park_next)
        if (r->job == job) {
            if (done || r->stream) {
                if (r->suspended) {
                    r->suspended = false;
                    resume = r->conn;
                } else {
                    r->wake_pending = true;
                }
            }
            break;
        }
    pthread_mutex_unlock(&s->park_mu);
    if (resume) MHD_resume_connection(resume);
}

/*
 * The disconnect watcher (the gate's tick, about every 50 ms): poll the sockets of the waiting
 * requests; a client that closed or reset its connection has its job abandoned (a queued job
 * leaves the queue at once) and its request woken, which then closes the connection.
 */
static void watch(void *ud) {
    struct muse_server *s = ud;
    enum { MAX_WATCH = 2048 };
    struct pollfd pfd[MAX_WATCH];
    struct srv_req *who[MAX_WATCH];
    struct muse_srv_job *gone_jobs[256];
    int n_gone = 0;
    pthread_mutex_lock(&s->park_mu);
    int n = 0;
    for (struct srv_req *r = s->parked; r && n < MAX_WATCH; r = r->park_next) {
        if (r->gone || r->fd < 0) continue;
        pfd[n] = (struct pollfd){.fd = r->fd, .events = POLLRDHUP};
        who[n++] = r;
    }
    if (n > 0 && poll(pfd, (nfds_t)n, 0) > 0) {
        for (int i = 0; i < n; i++) {
            if (!(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) continue;
            struct srv_req *r = who[i];
            r->gone = true;
            if (r->job && n_gone < (int)(sizeof gone_jobs / sizeof gone_jobs[0])) {
                atomic_fetch_add(&r->job->refs, 1);
                gone_jobs[n_gone++] = r->job;
            }
            wake_locked(r);
        }
    }
    pthread_mutex_unlock(&s->park_mu);
    for (int i = 0; i < n_gone; i++) { /* without park_mu: finishing a job calls the news hook */
        if (s->sched) muse_srv_sched_abandon(s->sched, gone_jobs[i]);
        muse_srv_job_release(gone_jobs[i]);
    }
}

/* ---- replies ---- */

/* The Access-Control-Allow-Origin value for r's Origin, or NULL (no CORS header). */
static const char *cors_origin(const struct srv_req *r) {
    const struct muse_server *s = r->srv;
    for (int i = 0; i < s->p.n_cors; i++) {
        if (!strcmp(s->cors[i], "*")) return "*";
        if (r->origin[0] && !strcasecmp(s->cors[i], r->origin)) return r->origin;
    }
    return NULL;
}

enum MHD_Result muse_srv_reply_response(struct srv_req *r, unsigned status, struct MHD_Response *resp,
                                        const char *ctype) {
    if (!resp) {
        r->fail = true;
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "Server", "muse");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    const char *acao = cors_origin(r);
    if (acao) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", acao);
        if (strcmp(acao, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (status == 405 && r->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (r->resp) MHD_destroy_response(r->resp); /* a reply replaces an earlier one (never expected) */
    r->resp = resp;
    r->status = status;
    if (status != 204) muse_srv_metrics_request(&r->srv->metrics, status);
    return MHD_YES;
}

/* A response of n bytes (copied when copy, else borrowed: data must be static). */
static enum MHD_Result reply_buf(struct srv_req *r, unsigned status, const char *content_type, const void *data,
                                 size_t n, bool copy) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, (void *)data, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    return muse_srv_reply_response(r, status, resp, content_type);
}

enum MHD_Result muse_srv_reply_json(struct srv_req *r, unsigned status, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) return reply_buf(r, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37, false);
    /* MHD frees text with free() once sent: no copy of a large reply */
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    return muse_srv_reply_response(r, status, resp, "application/json; charset=utf-8");
}

enum MHD_Result muse_srv_reply_error(struct srv_req *r, unsigned status, const char *type, const char *param,
                                     const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *e;
    if (r->url && !strncmp(r->url, "/api/", 5)) { /* the Ollama API's shape: {"error": "message"} */
        cJSON_AddStringToObject(root, "error", msg);
        return muse_srv_reply_json(r, status, root);
    }
    e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return muse_srv_reply_json(r, status, root);
}

/* Queue the prepared reply on the connection (event loop only). */
static enum MHD_Result queue_prepared(struct srv_req *r) {
    struct MHD_Response *resp = r->resp;
    r->resp = NULL;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    return ret;
}

cJSON *muse_srv_parse_body(struct srv_req *r) {
    /* RFC 8259 readers accept lone surrogate escapes; cJSON does not: make them U+FFFD first */
    if (r->body.len) muse_srv_json_fix_surrogates(r->body.p, r->body.len);
    const char *end = NULL;
    cJSON *js = r->body.len ? cJSON_ParseWithLengthOpts(r->body.p, r->body.len, &end, false) : NULL;
    if (js && (size_t)(end - r->body.p) < r->body.len) {
        /* only whitespace may follow the document */
        for (const char *p = end; p < r->body.p + r->body.len; p++)
            if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
                cJSON_Delete(js);
                js = NULL;
                break;
            }
    }
    if (!js) {
        muse_srv_reply_error(r, 400, "invalid_request_error", NULL, "the request body is not valid JSON");
        return NULL;
    }
    if (!cJSON_IsObject(js)) {
        cJSON_Delete(js);
        muse_srv_reply_error(r, 400, "invalid_request_error", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return js;
}

/* ---- simple endpoints (answered on the event loop: constant work) ---- */

static enum MHD_Result reply_health(struct srv_req *r) {
    if (!atomic_load(&r->srv->ready)) {
        cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
        cJSON_AddNumberToObject(e, "code", 503);
        cJSON_AddStringToObject(e, "message", "Loading model");
        cJSON_AddStringToObject(e, "type", "unavailable_error");
        cJSON_AddStringToObject(root, "status", "loading model");
        return muse_srv_reply_json(r, 503, root);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    return muse_srv_reply_json(r, 200, root);
}

/* The one model as an OpenAI model object. */
static cJSON *model_json(struct muse_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->info.model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "muse");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", s->info.n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", s->info.n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", s->info.n_vocab);
    cJSON_AddNumberToObject(meta, "n_slots", s->p.n_slots);
    cJSON_AddBoolToObject(meta, "vision", s->info.vision);
    return m;
}

static enum MHD_Result reply_models(struct srv_req *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), model_json(r->srv));
    return muse_srv_reply_json(r, 200, root);
}

/* GET /v1/models/{id}: the model when the id is its name (--alias), else 404. */
static enum MHD_Result reply_model(struct srv_req *r, const char *id) {
    if (strcmp(id, r->srv->info.model_name))
        return muse_srv_reply_error(r, 404, "not_found_error", "model", "the model '%.200s' does not exist (this server serves '%s')",
                                    id, r->srv->info.model_name);
    return muse_srv_reply_json(r, 200, model_json(r->srv));
}

static enum MHD_Result reply_metrics(struct srv_req *r) {
    struct muse_server *s = r->srv;
    int n_slots = 0, busy = 0, queued = 0;
    muse_srv_sched_stats(s->sched, &n_slots, &busy, &queued);
    struct muse_srv_buf b = {0};
    muse_srv_metrics_render(&s->metrics, n_slots, busy, queued, &b);
    struct muse_srv_gate_stats g;
    muse_srv_gate_stats(s->gate, &g);
    static const char *const help[][3] = {
        {"muse_connections_open", "gauge", "Open client connections."},
        {"muse_connections_evicted_total", "counter", "Stalled connections closed to make room for new ones."},
        {"muse_connections_timed_out_total", "counter", "Connections whose request did not arrive within --read-timeout."},
        {"muse_connections_refused_total", "counter", "New connections refused (503): every open one was busy."},
        {"muse_requests_malformed_total", "counter", "Request heads answered 400/413/431/501 before parsing."},
    };
    double v[] = {g.open, (double)g.evicted, (double)g.timed_out, (double)g.refused, (double)g.malformed};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        muse_srv_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", help[i][0], help[i][2], help[i][0], help[i][1],
                            help[i][0], v[i]);
    if (s->info.vision && s->ad.ops->media_stats) {
        static const char *const ihelp[][2] = {
            {"muse_image_encodes_total", "Images run through the vision tower (a cached image is not)."},
            {"muse_image_cache_hits_total", "Images whose projected rows came from the rows cache."},
            {"muse_image_tokens_encoded_total", "Merged image tokens (rows) the tower produced."},
            {"muse_image_encode_seconds_total", "Seconds in image preprocessing and the tower."},
        };
        uint64_t enc = 0, hits = 0, toks = 0;
        double secs = 0;
        s->ad.ops->media_stats(s->ad.self, &enc, &hits, &toks, &secs);
        const double iv[] = {(double)enc, (double)hits, (double)toks, secs};
        for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++)
            muse_srv_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", ihelp[i][0], ihelp[i][1], ihelp[i][0],
                                ihelp[i][0], iv[i]);
    }
    if (s->info.batched && s->ad.ops->batch_stats) {
        static const char *const bhelp[][2] = {
            {"muse_batch_steps_total", "Forwards run for the batched slots (continuous batching)."},
            {"muse_batch_rows_total", "Rows (tokens) in those forwards."},
            {"muse_batch_shared_steps_total", "Forwards that held rows of two or more slots."},
            {"muse_batch_prompt_splits_total", "Times a prompt chunk was cut at a step's row budget and went on in the next."},
            {"muse_batch_preempted_total", "Steps with a prompt chunk stopped for a newcomer (their rows ran again in the next steps)."},
        };
        uint64_t bv[5] = {0};
        s->ad.ops->batch_stats(s->ad.self, &bv[0], &bv[1], &bv[2], &bv[3], &bv[4]);
        for (size_t i = 0; i < 5; i++)
            muse_srv_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", bhelp[i][0], bhelp[i][1], bhelp[i][0],
                                bhelp[i][0], (double)bv[i]);
    }
    if (s->ad.ops->kv_cells) {
        int64_t used = -1, total = 0;
        s->ad.ops->kv_cells(s->ad.self, &used, &total);
        if (used >= 0)
            muse_srv_buf_printf(&b, "# HELP muse_kv_cells_used KV cells (full-attention positions) the slots hold, from the "
                                    "shared pool.\n# TYPE muse_kv_cells_used gauge\nmuse_kv_cells_used %lld\n",
                                (long long)used);
        muse_srv_buf_printf(&b, "# HELP muse_kv_cells_total KV cells of all slots (the pool's, when paged).\n"
                                "# TYPE muse_kv_cells_total gauge\nmuse_kv_cells_total %lld\n",
                            (long long)total);
    }
    enum MHD_Result ret = reply_buf(r, 200, "text/plain; version=0.0.4; charset=utf-8", muse_srv_buf_str(&b), b.len, true);
    muse_srv_buf_free(&b);
    return ret;
}

/* Constant-time comparison of the bearer token. */
static bool authorized(struct srv_req *r) {
    const char *key = r->srv->api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)key[i];
    return diff == 0;
}

/* Host policy (DNS rebinding): on a loopback bind, Host must be a loopback name with our port. */
static bool host_allowed(const struct muse_server *s, const char *host) {
    if (!s->check_host || !host) return true; /* HTTP/1.0 without Host: no browser sends that */
    size_t n = strlen(host);
    const char *colon = NULL;
    if (host[0] == '[') {
        const char *rb = strchr(host, ']');
        if (!rb) return false;
        if (rb[1] == ':') colon = rb + 1;
        else if (rb[1]) return false;
    } else {
        colon = strrchr(host, ':');
    }
    size_t name_len = colon ? (size_t)(colon - host) : n;
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || port != s->port) return false;
    } else if (s->port != 80) {
        return false;
    }
    char bound[64];
    snprintf(bound, sizeof bound, strchr(s->host, ':') ? "[%s]" : "%s", s->host);
    const char *names[] = {"localhost", "127.0.0.1", "[::1]", bound};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == name_len && !strncasecmp(host, names[i], name_len)) return true;
    for (int i = 0; i < s->p.n_allow_hosts; i++) {
        const char *a = s->allow_hosts[i];
        if ((strlen(a) == name_len && !strncasecmp(host, a, name_len)) || !strcasecmp(host, a)) return true;
    }
    return false;
}

static enum MHD_Result reply_options(struct srv_req *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (resp) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, OPTIONS");
        if (cors_origin(r)) { /* a preflight from an allowed origin */
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        }
    }
    return muse_srv_reply_response(r, 204, resp, NULL);
}

static enum MHD_Result not_allowed(struct srv_req *r, const char *allow, const char *use, const char *url) {
    r->allow = allow;
    return muse_srv_reply_error(r, 405, "invalid_request_error", NULL, "use %s for %s", use, url);
}

/* The page's icon: a quaver on the page's accent colour. */
static const char favicon_svg[] =
    "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 32 32\"><rect width=\"32\" height=\"32\" rx=\"7\" "
    "fill=\"#2f5d8a\"/><path d=\"M13 7h10v5h-7v11a4.5 4.5 0 1 1-3-4.24z\" fill=\"#fff\"/></svg>";

/*
 * Decide what to do with a fully read request (event loop): answer it now (GET endpoints, errors)
 * or set r->work_fn, the POST endpoint the work pool runs.
 */
static enum MHD_Result route(struct srv_req *r) {
    const char *url = r->url, *method = r->method;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) return reply_options(r);
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (!get) return not_allowed(r, "GET, HEAD, OPTIONS", "GET", url);
        return reply_buf(r, 200, "text/html; charset=utf-8", muse_srv_page_index, muse_srv_page_index_len, false);
    }
    if (!strcmp(url, "/vendor/marked.min.js") || !strcmp(url, "/favicon.svg") || !strcmp(url, "/favicon.ico")) {
        if (!get) return not_allowed(r, "GET, HEAD, OPTIONS", "GET", url);
        bool js = url[1] == 'v';
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            js ? muse_srv_page_marked_js_len : sizeof favicon_svg - 1, (void *)(js ? (const void *)muse_srv_page_marked_js : favicon_svg),
            MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "public, max-age=86400");
        return muse_srv_reply_response(r, 200, resp, js ? "text/javascript; charset=utf-8" : "image/svg+xml");
    }
    if (!strcmp(url, "/health")) {
        if (!get) return not_allowed(r, "GET, HEAD, OPTIONS", "GET", url);
        return reply_health(r);
    }
    if (!authorized(r)) return muse_srv_reply_error(r, 401, "authentication_error", NULL, "invalid or missing API key");

    static const struct {
        const char *path;
        bool post;
        enum MHD_Result (*fn)(struct srv_req *);
    } routes[] = {
        {"/v1/chat/completions", true, muse_srv_api_chat},   {"/chat/completions", true, muse_srv_api_chat},
        {"/v1/completions", true, muse_srv_api_completions}, {"/completions", true, muse_srv_api_completions},
        {"/completion", true, muse_srv_api_completion},      {"/tokenize", true, muse_srv_api_tokenize},
        {"/detokenize", true, muse_srv_api_detokenize},      {"/v1/models", false, reply_models},
        {"/models", false, reply_models},                    {"/metrics", false, reply_metrics},
        {"/props", false, muse_srv_api_props},               {"/slots", false, muse_srv_api_slots},
        {"/apply-template", true, muse_srv_api_apply_template},
        {"/v1/embeddings", true, muse_srv_api_embeddings},   {"/embeddings", true, muse_srv_api_embeddings},
        {"/embedding", true, muse_srv_api_embeddings},
        {"/api/chat", true, muse_srv_api_ollama_chat},       {"/api/generate", true, muse_srv_api_ollama_generate},
        {"/api/show", true, muse_srv_api_ollama_show},       {"/api/tags", false, muse_srv_api_ollama_tags},
        {"/api/version", false, muse_srv_api_ollama_version}, {"/api/ps", false, muse_srv_api_ollama_ps},
        {"/api/embed", true, muse_srv_api_embeddings},      {"/api/embeddings", true, muse_srv_api_embeddings},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        if (routes[i].post ? !post : !get)
            return routes[i].post ? not_allowed(r, "POST, OPTIONS", "POST", url)
                                  : not_allowed(r, "GET, HEAD, OPTIONS", "GET", url);
        if (!atomic_load(&r->srv->ready))
            return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "Loading model");
        if (atomic_load(&r->srv->stopping))
            return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is shutting down");
        if (!routes[i].post) return routes[i].fn(r);
        r->work_fn = routes[i].fn;
        return MHD_YES;
    }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        if (!get) return not_allowed(r, "GET, HEAD, OPTIONS", "GET", url);
        if (!atomic_load(&r->srv->ready)) return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "Loading model");
        return reply_model(r, url + 11);
    }
    return muse_srv_reply_error(r, 404, "not_found_error", NULL, "no such endpoint: %s %s", method, url);
}

/* ---- the work pool ---- */

static void work_push(struct muse_server *s, struct srv_req *r) {
    muse_srv_req_ref(r);
    pthread_mutex_lock(&s->work_mu);
    r->work_next = NULL;
    if (s->work_tail) s->work_tail->work_next = r;
    else s->work_head = r;
    s->work_tail = r;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->work_mu);
}

static void *work_main(void *arg) {
    struct muse_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->work_mu);
        while (!s->work_head && !s->work_stop) pthread_cond_wait(&s->work_cv, &s->work_mu);
        struct srv_req *r = s->work_head;
        if (r) {
            s->work_head = r->work_next;
            if (!s->work_head) s->work_tail = NULL;
        }
        pthread_mutex_unlock(&s->work_mu);
        if (!r) break; /* stopping and nothing left */
        pthread_mutex_lock(&s->park_mu);
        bool skip = r->closed || r->gone;
        pthread_mutex_unlock(&s->park_mu);
        if (!skip) {
            enum MHD_Result ret = atomic_load(&s->stopping)
                                      ? muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is shutting down")
                                      : r->work_fn(r);
            if (ret != MHD_YES) r->fail = true;
        }
        bool big = r->body.cap > (1u << 20);
        muse_srv_buf_free(&r->body); /* parsed: the body is not needed any more */
#ifdef __GLIBC__
        if (big) malloc_trim(0); /* a large request's parse tree is gone: give its pages back */
#else
        (void)big;
#endif
        pthread_mutex_lock(&s->park_mu);
        r->work_done = true;
        wake_locked(r);
        pthread_mutex_unlock(&s->park_mu);
        muse_srv_req_release(r);
    }
    return NULL;
}

/* ---- the access handler ---- */

/*
 * Move a fully read request on (event loop): answer, hand it to the work pool, or wait for what it
 * waits for (suspended). Returns what the access handler returns.
 */
static enum MHD_Result advance(struct srv_req *r) {
    struct muse_server *s = r->srv;
    for (;;) {
        if (r->state == SRV_REQ_WORK) {
            pthread_mutex_lock(&s->park_mu);
            bool done = r->work_done;
            pthread_mutex_unlock(&s->park_mu);
            if (done) r->state = r->resp || r->fail || !r->job ? SRV_REQ_READY : SRV_REQ_WAIT;
        }
        if (r->state != SRV_REQ_WORK) {
            if (r->resp) return queue_prepared(r);
            if (r->fail) return MHD_NO;
        }
        if (r->state == SRV_REQ_NEW) {
            r->state = SRV_REQ_READY;
            if (r->over_budget) {
                muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is busy reading other requests");
            } else if (r->too_large) {
                muse_srv_reply_error(r, 413, "invalid_request_error", NULL, "request body larger than %zu bytes (--max-body)",
                                     s->p.max_body);
            } else if (route(r) == MHD_YES && r->work_fn && !r->resp) {
                r->state = SRV_REQ_WORK;
                pthread_mutex_lock(&s->park_mu);
                park_register_locked(s, r);
                pthread_mutex_unlock(&s->park_mu);
                work_push(s, r);
            } else if (!r->resp) {
                return MHD_NO;
            }
            continue;
        }
        if (muse_srv_req_gone(r)) return MHD_NO;
        if (r->state == SRV_REQ_WAIT) {
            pthread_mutex_lock(&r->job->mu);
            bool done = r->job->done;
            pthread_mutex_unlock(&r->job->mu);
            if (done) {
                if (muse_srv_reply_job(r) != MHD_YES || !r->resp) return MHD_NO;
                continue;
            }
        } else if (r->state == SRV_REQ_READY) {
            return MHD_NO; /* nothing to send and nothing to wait for */
        }
        switch (muse_srv_park(r)) {
        case SRV_PARK_SUSPENDED: return MHD_YES;
        case SRV_PARK_RETRY: continue;
        case SRV_PARK_REFUSED: return MHD_NO;
        }
    }
}

/* Reserve n bytes of the body budget for r; false (nothing reserved) when that would pass it. */
static bool reserve_body(struct srv_req *r, size_t n) {
    struct muse_server *s = r->srv;
    size_t before = atomic_fetch_add(&s->body_bytes, n);
    if (before + n > s->body_budget) {
        atomic_fetch_sub(&s->body_bytes, n);
        return false;
    }
    r->body_reserved += n;
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls) {
    (void)version;
    struct muse_server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r) {
        /* first call: the head is in */
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        atomic_fetch_add(&s->active, 1);
        atomic_init(&r->refs, 1);
        r->srv = s;
        r->conn = conn;
        r->fd = -1;
        r->t0_us = muse_time_us();
        r->state = SRV_REQ_NEW;
        *req_cls = r;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) r->fd = ci->connect_fd;
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci) r->gc = ci->socket_context;
        snprintf(r->method, sizeof r->method, "%s", method);
        r->url = strdup(url);
        const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
        if (origin) snprintf(r->origin, sizeof r->origin, "%s", origin);
        if (!r->url) return MHD_NO;
        /* answered at once (MHD then discards the body and closes the connection) */
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (!host_allowed(s, host)) {
            muse_srv_reply_error(r, 403, "permission_error", NULL,
                                 "Host '%.100s' is not allowed: this server answers requests for localhost, 127.0.0.1 "
                                 "and [::1] on port %d (name more with --allow-host, or bind another --host)",
                                 host, s->port);
            return r->resp ? queue_prepared(r) : MHD_NO;
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
        if (len > s->p.max_body) { /* the gate already answers these; kept for heads that bypass it */
            muse_srv_reply_error(r, 413, "invalid_request_error", NULL, "request body larger than %zu bytes (--max-body)",
                                 s->p.max_body);
            return r->resp ? queue_prepared(r) : MHD_NO;
        }
        if (len && !reserve_body(r, (size_t)len)) {
            muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is busy reading other requests");
            return r->resp ? queue_prepared(r) : MHD_NO;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->over_budget) return MHD_YES;
        if (r->body.len + n > s->p.max_body) {
            r->too_large = true;
            muse_srv_buf_free(&r->body);
        } else if (r->body.len + n > r->body_reserved && !reserve_body(r, r->body.len + n - r->body_reserved)) {
            r->over_budget = true; /* chunked: the budget is taken as the body grows */
            muse_srv_buf_free(&r->body);
        } else if (!muse_srv_buf_append(&r->body, upload, n)) {
            r->too_large = true;
        }
        return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    if (!r->read_done) {
        r->read_done = true;
        muse_srv_gate_conn_request_read(s->gate, r->gc);
    }
    return advance(r);
}

/* The request log line of r (server.h: params.log), once the request is over. */
static void log_request(struct muse_server *s, struct srv_req *r, enum MHD_RequestTerminationCode toe) {
    if (!s->p.log || !strcmp(r->method, "OPTIONS")) return;
    char line[700], extra[200] = "";
    double ms = (double)(muse_time_us() - r->t0_us) / 1000.0;
    pthread_mutex_lock(&s->park_mu);
    struct muse_srv_job *job = r->job;
    if (job) atomic_fetch_add(&job->refs, 1);
    pthread_mutex_unlock(&s->park_mu);
    int n_prompt = 0, n_out = 0, n_shifted = 0;
    if (job) {
        pthread_mutex_lock(&job->mu);
        n_prompt = job->n_prompt;
        n_out = job->n_out;
        n_shifted = job->n_shifted;
        if (s->p.log_verbose && job->started) {
            double pre = (double)(job->t_prefill_end_us - job->t_start_us) / 1e3;
            double dec = (double)(job->t_end_us - job->t_prefill_end_us) / 1e3;
            snprintf(extra, sizeof extra, " (slot %d, %d cached, queued %.1f ms, prefill %.1f ms, decode %.1f tok/s)", job->slot,
                     job->n_cached, (double)(job->t_start_us - job->t_submit_us) / 1e3, pre,
                     dec > 0 ? job->n_out / (dec / 1e3) : 0.0);
        }
        pthread_mutex_unlock(&job->mu);
        muse_srv_job_release(job);
    }
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)";
    char shift[64] = "";
    if (n_shifted) snprintf(shift, sizeof shift, " (context shift: %d oldest messages dropped)", n_shifted);
    snprintf(line, sizeof line, "%s %.300s %u %d/%d tokens %.1f ms%s%s%s", r->method, r->url ? r->url : "?",
             r->answered ? r->status : 0, n_prompt, n_out, ms, shift, extra, how);
    s->p.log(s->p.log_ud, line);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    struct muse_server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r) return;
    *req_cls = NULL;
    log_request(s, r, toe);
    pthread_mutex_lock(&s->park_mu);
    park_unregister_locked(s, r); /* before MHD closes the socket: the watcher polls it no more */
    r->closed = true;
    r->suspended = false;
    pthread_mutex_unlock(&s->park_mu);
    muse_srv_req_release(r);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct muse_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? muse_srv_gate_conn_started(s->gate, ci->connect_fd) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        muse_srv_gate_conn_closed(s->gate, *socket_context);
        *socket_context = NULL;
    }
}

/* ---- lifecycle ---- */

static bool is_loopback(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

/* Owned copies of v[0..n), each entry split at commas (empty parts dropped); *count = entries. */
static char **copy_strings(const char *const *v, int n, int *count, bool *ok) {
    *count = 0;
    int cap = 0;
    for (int i = 0; i < n; i++) {
        cap++;
        for (const char *c = v[i]; *c; c++) cap += *c == ',';
    }
    if (!cap) return NULL;
    char **out = calloc((size_t)cap, sizeof *out);
    if (!out) {
        *ok = false;
        return NULL;
    }
    for (int i = 0; i < n; i++)
        for (const char *p = v[i];;) {
            size_t len = strcspn(p, ",");
            if (len) {
                if (!(out[*count] = strndup(p, len))) *ok = false;
                else (*count)++;
            }
            if (!p[len]) break;
            p += len + 1;
        }
    return out;
}

static void free_strings(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

muse_status muse_server_create(const struct muse_server_params *params, struct muse_server **out,
                               struct muse_error *err) {
    *out = NULL;
    struct muse_server *s = calloc(1, sizeof *s);
    if (!s) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    s->p = *params;
    muse_srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->park_mu, NULL);
    pthread_mutex_init(&s->work_mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    s->created = (long long)time(NULL);
    s->id_base = (uint64_t)s->created << 24;
    atomic_init(&s->next_id, 0);
    atomic_init(&s->active, 0);
    atomic_init(&s->body_bytes, 0);
    bool ok = true;
    s->host = strdup(params->host ? params->host : "127.0.0.1");
    if (params->api_key && params->api_key[0]) ok = (s->api_key = strdup(params->api_key)) != NULL;
    s->p.n_cors = s->p.n_allow_hosts = 0; /* counted again as the copies are made */
    s->cors = copy_strings(params->cors_origins, params->n_cors, &s->p.n_cors, &ok);
    s->allow_hosts = copy_strings(params->allow_hosts, params->n_allow_hosts, &s->p.n_allow_hosts, &ok);
    if (!s->host || !ok) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->p.host = s->host;
    s->p.api_key = s->api_key;
    s->p.cors_origins = (const char *const *)s->cors;
    s->p.allow_hosts = (const char *const *)s->allow_hosts;
    if (s->p.n_slots < 1 || s->p.queue < 0 || s->p.port < 0 || s->p.port > 65535 || s->p.max_body < 1 ||
        s->p.max_connections < 1 || s->p.max_connections_per_addr < 0 || s->p.read_timeout_s < 1 ||
        s->p.http_threads < 1 || s->p.work_threads < 1 || s->p.n_cors < 0 || s->p.n_allow_hosts < 0) {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad server parameters");
        goto fail;
    }
    /* every connection is a descriptor: stay below what the process may open */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY && (rlim_t)s->p.max_connections + 64 > rl.rlim_cur)
        s->p.max_connections = rl.rlim_cur > 96 ? (int)rl.rlim_cur - 64 : 32;
    if (!s->p.max_connections_per_addr) s->p.max_connections_per_addr = s->p.max_connections / 4 > 0 ? s->p.max_connections / 4 : 1;
    s->body_budget = s->p.max_body * 8 > (64u << 20) ? s->p.max_body * 8 : (64u << 20);
    s->check_host = is_loopback(s->host);

    int read_ms = s->p.read_timeout_s * 1000;
    struct muse_srv_gate_params gp = {
        .host = s->host,
        .port = s->p.port,
        .max_conns = s->p.max_connections,
        .max_per_addr = s->p.max_connections_per_addr,
        .head_timeout_ms = read_ms < HEAD_TIMEOUT_MAX_S * 1000 ? read_ms : HEAD_TIMEOUT_MAX_S * 1000,
        .request_timeout_ms = read_ms,
        .max_head = MAX_HEAD,
        .max_body = s->p.max_body,
        .tick = watch,
        .tick_ud = s,
    };
    if (muse_srv_gate_create(&gp, &s->gate, err) != MUSE_OK) goto fail;
    s->port = muse_srv_gate_port(s->gate);

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET;
    /* MHD's own limit is a backstop above the gate's (which counts connections it shut down as gone) */
    unsigned mhd_limit = (unsigned)s->p.max_connections * 2 + 64;
    if (s->p.http_threads > 1)
        s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_THREAD_POOL_SIZE,
                                     (unsigned)s->p.http_threads, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64u << 10), MHD_OPTION_NOTIFY_COMPLETED,
                                     on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)MHD_IDLE_TIMEOUT_S, MHD_OPTION_END);
    else
        s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64u << 10), MHD_OPTION_NOTIFY_COMPLETED,
                                     on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)MHD_IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!s->daemon) {
        muse_error_set(err, MUSE_ERR_IO, "cannot start the HTTP event loops");
        goto fail;
    }
    s->work_th = calloc((size_t)s->p.work_threads, sizeof *s->work_th);
    if (!s->work_th) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < s->p.work_threads; i++) {
        if (pthread_create(&s->work_th[i], NULL, work_main, s)) {
            muse_error_set(err, MUSE_ERR_INTERNAL, "cannot start a work thread");
            goto fail;
        }
        s->n_work_th++;
    }
    if (muse_srv_gate_start(s->gate, s->daemon, err) != MUSE_OK) goto fail;
    *out = s;
    return MUSE_OK;
fail:
    muse_server_free(s);
    return err ? err->status : MUSE_ERR_INTERNAL;
}

int muse_server_port(const struct muse_server *s) { return s->port; }

muse_status muse_server_attach_adapter(struct muse_server *s, struct muse_srv_adapter ad, struct muse_error *err) {
    s->ad = ad;
    ad.ops->info(ad.self, &s->info);
    s->sched = muse_srv_sched_create(&s->ad, s->p.n_slots, s->p.queue, &s->metrics, err);
    if (!s->sched) return err ? err->status : MUSE_ERR_INTERNAL;
    atomic_store(&s->ready, true);
    return MUSE_OK;
}

void muse_server_free(struct muse_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, true);
    muse_srv_gate_stop(s->gate); /* no new connections; those still sending their head are closed */
    muse_srv_sched_stop(s->sched); /* cancel all generations: open streams send their last event */
    /* the work pool answers what it still holds with 503 and ends */
    pthread_mutex_lock(&s->work_mu);
    s->work_stop = true;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->work_mu);
    for (int i = 0; i < s->n_work_th; i++) pthread_join(s->work_th[i], NULL);
    /* let answers in flight (last stream events, 503s) reach their clients before MHD closes every
     * connection; a stuck upload delays shutdown by at most 3 s */
    for (int i = 0; i < 300 && atomic_load(&s->active) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* MHD must not be stopped with a suspended connection: resume all, suspend none from now on */
    pthread_mutex_lock(&s->park_mu);
    s->no_suspend = true;
    for (struct srv_req *r = s->parked; r; r = r->park_next) wake_locked(r);
    pthread_mutex_unlock(&s->park_mu);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    muse_srv_gate_free(s->gate);
    muse_srv_sched_free(s->sched);
    if (s->ad.ops) s->ad.ops->destroy(s->ad.self);
    muse_srv_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->park_mu);
    pthread_mutex_destroy(&s->work_mu);
    pthread_cond_destroy(&s->work_cv);
    free(s->work_th);
    free_strings(s->cors, s->p.n_cors);
    free_strings(s->allow_hosts, s->p.n_allow_hosts);
    free(s->host);
    free(s->api_key);
    free(s);
}
