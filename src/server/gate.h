/*
 * gate.h - the front door of `muse serve`: the listening socket, and every connection until its
 * request head has fully arrived.
 *
 * One thread (the gate) accepts connections and holds them in an epoll set, costing no thread
 * each, until the whole header block is in the socket's buffer (peeked, not read). Then it checks
 * the framing (wire.h: Content-Length, Transfer-Encoding) and hands the socket to libmicrohttpd
 * (MHD_add_connection), or answers a malformed head itself, once, and closes. It enforces:
 *   - a head deadline and a request deadline, both counted from accept and never restarted by
 *     the bytes that trickle in (a slow-loris client gains nothing by sending a byte at a time);
 *     the request deadline covers the body read by libmicrohttpd: past it the gate shuts the
 *     socket down (the HTTP layer then sees the peer gone);
 *   - at most max_conns open connections, at most max_per_addr from one client address (IPv6:
 *     one /64). When a new connection would pass either limit, the oldest connection of that
 *     scope that is still sending its request (a stalled one) is closed to make room: so held
 *     connections can never lock out /health or a new client. Only when every connection of the
 *     scope is busy with a real request is the new one refused (503).
 * The gate keeps a record of every open connection (the HTTP layer's MHD callbacks report when a
 * handed socket starts, finished reading its request, and closes).
 *
 * Threads and locks: the gate's thread owns the listening socket and the sockets not yet handed;
 * a mutex guards the records, which MHD's threads update through the muse_srv_gate_conn_* calls.
 * A handed socket is only ever shut down (never closed) by the gate, under that mutex and before
 * MHD reports it closed, so its number cannot have been reused.
 */
#pragma once

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"

struct muse_srv_gate_params {
    const char *host;        /* numeric IPv4/IPv6 address to bind */
    int port;                /* 0 = any free port */
    int max_conns;           /* open connections in all (>= 1) */
    int max_per_addr;        /* open connections per client address (>= 1) */
    int head_timeout_ms;     /* accept -> end of the header block */
    int request_timeout_ms;  /* accept -> end of the body */
    size_t max_head;         /* longest header block */
    uint64_t max_body;       /* larger Content-Length: 413 from the gate */
    void (*tick)(void *ud);  /* called about every 50 ms from the gate's thread (may be NULL) */
    void *tick_ud;
};

struct muse_srv_gate_stats {
    int open;                 /* connections open now (gate + HTTP layer) */
    uint64_t evicted;         /* stalled connections closed to make room for a new one */
    uint64_t timed_out;       /* connections whose request did not arrive within its deadline */
    uint64_t refused;         /* new connections refused (503): every open one was busy */
    uint64_t malformed;       /* request heads answered by the gate (400, 413, 431, 501) */
};

struct muse_srv_gate;
struct muse_srv_conn; /* one connection's record; the HTTP layer keeps it as MHD's socket context */

/* Bind and listen (not accepting yet). NULL-safe on failure: *out stays NULL, err set. */
muse_status muse_srv_gate_create(const struct muse_srv_gate_params *p, struct muse_srv_gate **out,
                                 struct muse_error *err);
/* The bound port. */
int muse_srv_gate_port(const struct muse_srv_gate *g);
/* Start the gate's thread, handing complete heads to d (borrowed: must outlive muse_srv_gate_stop). */
muse_status muse_srv_gate_start(struct muse_srv_gate *g, struct MHD_Daemon *d, struct muse_error *err);
/* Stop accepting, close the listening socket and the sockets not yet handed, join the thread.
 * Idempotent. Records of handed sockets stay until the HTTP layer reports them closed. */
void muse_srv_gate_stop(struct muse_srv_gate *g);
/* Free (stopping first). Call after the HTTP layer has closed every handed socket. NULL is a no-op. */
void muse_srv_gate_free(struct muse_srv_gate *g);

/* MHD's connection-started notification for socket fd: the record (NULL when fd was not handed by
 * this gate). Any thread. */
struct muse_srv_conn *muse_srv_gate_conn_started(struct muse_srv_gate *g, int fd);
/* The connection's request has been read completely: its deadline no longer applies and it is not
 * a candidate for eviction. c may be NULL. Any thread. */
void muse_srv_gate_conn_request_read(struct muse_srv_gate *g, struct muse_srv_conn *c);
/* MHD's connection-closed notification (before MHD closes the socket); frees c. c may be NULL. */
void muse_srv_gate_conn_closed(struct muse_srv_gate *g, struct muse_srv_conn *c);
/* A consistent snapshot of the counters. */
void muse_srv_gate_stats(struct muse_srv_gate *g, struct muse_srv_gate_stats *out);
