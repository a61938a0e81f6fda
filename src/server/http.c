/* http.c - the libmicrohttpd side of `muse serve`: binding, routing, auth, body limits, lifecycle. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/server_int.h"

struct muse_server_params muse_server_default_params(void) {
    struct muse_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_slots = 1;
    p.queue = 64;
    p.max_body = 4u << 20;
    p.max_connections = 256;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.top_k = 64;
    p.min_p = 0.0f;
    return p;
}

/* ---- replies ---- */

static void add_common_headers(struct MHD_Response *resp) {
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(resp, "Server", "muse");
}

/* Queue a response of n bytes (copied when copy, else borrowed: data must be static) and count it. */
static enum MHD_Result reply_buf(struct srv_req *r, unsigned status, const char *content_type, const void *data,
                                 size_t n, bool copy) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, (void *)data, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    add_common_headers(resp);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    muse_srv_metrics_request(&r->srv->metrics, status);
    return ret;
}

enum MHD_Result muse_srv_reply_json(struct srv_req *r, unsigned status, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) return reply_buf(r, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37, false);
    enum MHD_Result ret = reply_buf(r, status, "application/json; charset=utf-8", text, strlen(text), true);
    free(text);
    return ret;
}

enum MHD_Result muse_srv_reply_error(struct srv_req *r, unsigned status, const char *type, const char *param,
                                     const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return muse_srv_reply_json(r, status, root);
}

bool muse_srv_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

cJSON *muse_srv_parse_body(struct srv_req *r) {
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

/* ---- simple endpoints ---- */

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

static enum MHD_Result reply_models(struct srv_req *r) {
    struct muse_server *s = r->srv;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
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
    return muse_srv_reply_json(r, 200, root);
}

static enum MHD_Result reply_metrics(struct srv_req *r) {
    struct muse_server *s = r->srv;
    int n_slots = 0, busy = 0, queued = 0;
    muse_srv_sched_stats(s->sched, &n_slots, &busy, &queued);
    struct muse_srv_buf b = {0};
    muse_srv_metrics_render(&s->metrics, n_slots, busy, queued, &b);
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

static enum MHD_Result route(struct srv_req *r, const char *url, const char *method) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        add_common_headers(resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        enum MHD_Result ret = MHD_queue_response(r->conn, 204, resp);
        MHD_destroy_response(resp);
        r->answered = true;
        return ret;
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (!get) return muse_srv_reply_error(r, 405, "invalid_request_error", NULL, "use GET for %s", url);
        return reply_buf(r, 200, "text/html; charset=utf-8", muse_srv_page_index, muse_srv_page_index_len, false);
    }
    if (!strcmp(url, "/health")) return reply_health(r);
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
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        if (routes[i].post ? !post : !get)
            return muse_srv_reply_error(r, 405, "invalid_request_error", NULL, "use %s for %s",
                                        routes[i].post ? "POST" : "GET", url);
        if (!atomic_load(&r->srv->ready))
            return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "Loading model");
        if (atomic_load(&r->srv->stopping))
            return muse_srv_reply_error(r, 503, "unavailable_error", NULL, "the server is shutting down");
        return routes[i].fn(r);
    }
    return muse_srv_reply_error(r, 404, "not_found_error", NULL, "no such endpoint: %s %s", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls) {
    (void)version;
    struct muse_server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = conn;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        *req_cls = r;
        atomic_fetch_add(&s->active, 1);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->p.max_body) {
            /* answer at once: MHD then closes the connection instead of reading the body */
            r->too_large = true;
            return muse_srv_reply_error(r, 413, "invalid_request_error", NULL, "request body larger than %zu bytes (--max-body)",
                                        s->p.max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large && r->body.len + *upload_size <= s->p.max_body) {
            if (!muse_srv_buf_append(&r->body, upload, *upload_size)) r->too_large = true;
        } else {
            r->too_large = true;
            muse_srv_buf_free(&r->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    if (r->too_large)
        return muse_srv_reply_error(r, 413, "invalid_request_error", NULL, "request body larger than %zu bytes (--max-body)",
                                    s->p.max_body);
    return route(r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn, (void)toe;
    struct muse_server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r) return;
    atomic_fetch_sub(&s->active, 1);
    muse_srv_buf_free(&r->body);
    free(r);
    *req_cls = NULL;
}

/* ---- lifecycle ---- */

muse_status muse_server_create(const struct muse_server_params *params, struct muse_server **out,
                               struct muse_error *err) {
    *out = NULL;
    struct muse_server *s = calloc(1, sizeof *s);
    if (!s) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    s->p = *params;
    muse_srv_metrics_init(&s->metrics);
    s->created = (long long)time(NULL);
    s->id_base = (uint64_t)s->created << 24;
    atomic_init(&s->next_id, 0);
    atomic_init(&s->active, 0);
    s->host = strdup(params->host ? params->host : "127.0.0.1");
    if (params->api_key && params->api_key[0]) s->api_key = strdup(params->api_key);
    if (!s->host || (params->api_key && params->api_key[0] && !s->api_key)) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->p.host = s->host;
    s->p.api_key = s->api_key;
    if (s->p.n_slots < 1 || s->p.queue < 0 || s->p.port < 0 || s->p.port > 65535 || s->p.max_body < 1) {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad server parameters");
        goto fail;
    }
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (inet_pton(AF_INET, s->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->p.port);
        addr = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, s->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->p.port);
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "--host must be a numeric IPv4 or IPv6 address, not '%s'", s->host);
        goto fail;
    }
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->p.max_connections > 0 ? s->p.max_connections : 256),
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)120, MHD_OPTION_END); /* idle keep-alive connections free their thread */
    if (!s->daemon) {
        muse_error_set(err, MUSE_ERR_IO, "cannot listen on %s:%d (address in use?)", s->host, s->p.port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;
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
    int listen_fd = -1;
    if (s->daemon) listen_fd = MHD_quiesce_daemon(s->daemon); /* stop accepting; open connections go on */
    muse_srv_sched_stop(s->sched); /* cancel all generations: open streams send their last event */
    /* let answers in flight (last stream events, 503s of cancelled waits) reach their clients
     * before MHD closes every connection; a stuck upload delays shutdown by at most 3 s */
    for (int i = 0; i < 300 && atomic_load(&s->active) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->daemon) MHD_stop_daemon(s->daemon);
    if (listen_fd >= 0) close(listen_fd);
    muse_srv_sched_free(s->sched);
    if (s->ad.ops) s->ad.ops->destroy(s->ad.self);
    muse_srv_metrics_destroy(&s->metrics);
    free(s->host);
    free(s->api_key);
    free(s);
}
