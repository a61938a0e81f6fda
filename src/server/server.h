/*
 * server.h - `muse serve`: an OpenAI-compatible HTTP server over an adapter (adapter.h).
 *
 * Lifecycle: muse_server_create() binds and starts answering at once (GET /health says 503
 * "loading" and API calls 503 until an adapter is attached); muse_server_attach_adapter() starts the
 * slots; muse_server_free() shuts down gracefully (stops accepting, cancels generations, lets
 * open streams finish their last event, joins every thread). Endpoints: docs/server.md.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"
#include "server/adapter.h"

struct muse_server_params {
    const char *host;       /* numeric IPv4/IPv6 address to bind; "127.0.0.1" by default */
    int port;               /* 0 = any free port (see muse_server_port) */
    int n_slots;            /* parallel sequences, each with its own KV cache */
    int queue;              /* requests that may wait for a slot; beyond: 503 + Retry-After */
    size_t max_body;        /* request bodies above this many bytes: 413 */
    const char *api_key;    /* NULL = no auth; else `Authorization: Bearer KEY` on all but /health and / */
    int max_connections;    /* open connections in all (held by an event loop, not a thread each); clamped
                               to the descriptors the process may open */
    float temperature, top_p, min_p; /* sampling defaults when a request omits them */
    int top_k;
    /* hardening (docs/server.md, "Connections and limits") */
    int max_connections_per_addr; /* open connections per client address (IPv6: per /64); 0 = max_connections / 4 */
    int read_timeout_s;     /* a request (head and body) must arrive within this many seconds of accept; the head
                               within min(10, this); never restarted by trickling bytes */
    const char *const *cors_origins; /* [n_cors] origins given Access-Control-Allow-Origin ("*" = any); none by default */
    int n_cors;
    const char *const *allow_hosts;  /* [n_allow_hosts] extra Host names accepted on a loopback bind */
    int n_allow_hosts;
    int http_threads;       /* libmicrohttpd event-loop threads (2) */
    int work_threads;       /* threads that parse and prepare POST requests off the event loops (2) */
    /* the request log: one line per request once it is over (method, path, status, prompt and
     * generated tokens, milliseconds; with log_verbose also the cached tokens and the prefill and
     * decode speeds), called from the event-loop threads (NULL = no log) */
    void (*log)(void *ud, const char *line);
    void *log_ud;
    bool log_verbose;
    /* a chat whose prompt leaves no room for the answer drops its oldest turns (the system messages
     * and the last user message stay) instead of a 400 (llama-server's --context-shift) */
    bool context_shift;
};

/* The defaults: 127.0.0.1:8080, 1 slot, queue 64, 4 MiB bodies, 1024 connections (256 per address),
 * 30 s read deadline, no CORS, published sampling (T 1, p .95, k 64), context shift on. */
struct muse_server_params muse_server_default_params(void);

struct muse_server;

/* Bind and start serving (503 until an adapter is attached). *out owned by the caller. */
muse_status muse_server_create(const struct muse_server_params *params, struct muse_server **out,
                               struct muse_error *err);
/* The bound TCP port. */
int muse_server_port(const struct muse_server *s);
/*
 * Hand the server its adapter (ownership moves to the server, also on failure) and start the
 * slots. After this the API endpoints answer. Call at most once, from the thread that created s.
 */
muse_status muse_server_attach_adapter(struct muse_server *s, struct muse_srv_adapter ad, struct muse_error *err);
/* Graceful shutdown and free (NULL is a no-op). Not callable from a request thread. */
void muse_server_free(struct muse_server *s);
