/*
 * gate.c - accept, hold and check connections until their request head is in (contract: gate.h).
 *
 * Records: every open connection has one, in accept order (so the oldest stalled connection is
 * the first of its kind in the list), indexed by socket number. Phases: PENDING (the gate waits for
 * the head; the socket is in the gate's epoll set, edge-triggered: each arrival of bytes is one
 * event, and the gate peeks the whole head again), CLOSING (the gate answered an error or a
 * timeout and drains what the client still sends for a moment, so that the answer is not lost to
 * a reset), HANDED (given to MHD, not yet reported started), BODY (MHD reads the body), BUSY (the
 * request is complete). Gate-owned records (PENDING, CLOSING) are closed only by the gate's thread;
 * a closed one goes to a graveyard freed after the current batch of epoll events, whose pointers
 * may still name it.
 */
#include "server/gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/wire.h"

#define TICK_MS 50
#define LINGER_MS 1000        /* a CLOSING socket is drained at most this long */
#define LINGER_BYTES (1 << 16) /* ... or this many bytes */
#define ACCEPT_BATCH 64

enum phase { PH_PENDING, PH_CLOSING, PH_HANDED, PH_BODY, PH_BUSY };

struct muse_srv_conn {
    struct muse_srv_conn *prev, *next; /* the list of open connections, in accept order */
    struct muse_srv_conn *grave_next;
    int fd;
    enum phase phase;
    bool killed;  /* counted as gone: closed by the gate, or shut down and waiting for MHD */
    bool dead;    /* gate-owned and closed: in the graveyard */
    int64_t t_accept, t_linger_end; /* ms, monotonic */
    size_t drained;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    unsigned char key[16]; /* client address for the per-address limit (IPv6: its /64) */
    int keylen;
};

struct muse_srv_gate {
    struct muse_srv_gate_params p;
    int listen_fd, ep, wake_fd;
    bool listening_in_ep;
    int port;
    pthread_t th;
    bool started, stopped;
    atomic_bool stop;
    struct MHD_Daemon *daemon;
    char *head_buf; /* [p.max_head] the gate thread's peek buffer */

    pthread_mutex_t mu; /* guards everything below */
    struct muse_srv_conn *head, *tail;
    int n_live; /* records not killed */
    struct muse_srv_conn **by_fd;
    int by_fd_cap;
    struct muse_srv_conn *grave;
    struct muse_srv_gate_stats st;
};

/* epoll user data of the two non-connection descriptors */
static char tag_listen, tag_wake;

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void make_key(struct muse_srv_conn *c) {
    if (c->addr.ss_family == AF_INET) {
        memcpy(c->key, &((struct sockaddr_in *)&c->addr)->sin_addr, 4);
        c->keylen = 4;
    } else if (c->addr.ss_family == AF_INET6) {
        const unsigned char *a = ((struct sockaddr_in6 *)&c->addr)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, mapped, 12)) {
            memcpy(c->key, a + 12, 4);
            c->keylen = 4;
        } else {
            memcpy(c->key, a, 8); /* one /64 is one client: it owns every address in it */
            c->keylen = 8;
        }
    } else {
        c->keylen = 0;
    }
}

static bool same_addr(const struct muse_srv_conn *a, const struct muse_srv_conn *b) {
    return a->keylen == b->keylen && !memcmp(a->key, b->key, (size_t)a->keylen);
}

/* ---- records (mu held) ---- */

static bool index_fd(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    if (c->fd >= g->by_fd_cap) {
        int cap = g->by_fd_cap ? g->by_fd_cap : 1024;
        while (cap <= c->fd) cap *= 2;
        struct muse_srv_conn **n = realloc(g->by_fd, (size_t)cap * sizeof *n);
        if (!n) return false;
        memset(n + g->by_fd_cap, 0, (size_t)(cap - g->by_fd_cap) * sizeof *n);
        g->by_fd = n;
        g->by_fd_cap = cap;
    }
    g->by_fd[c->fd] = c;
    return true;
}

static void unlink_conn(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else g->tail = c->prev;
    c->prev = c->next = NULL;
    if (c->fd >= 0 && c->fd < g->by_fd_cap && g->by_fd[c->fd] == c) g->by_fd[c->fd] = NULL;
    if (!c->killed) g->n_live--;
    c->killed = true;
}

/* Close a gate-owned connection now (its record is freed after the current batch). */
static void close_owned(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    unlink_conn(g, c);
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->dead = true;
    c->grave_next = g->grave;
    g->grave = c;
}

/* Answer a gate-owned connection with an HTTP error and let it drain for a moment (CLOSING). */
static void answer(struct muse_srv_gate *g, struct muse_srv_conn *c, int status, const char *reason, const char *msg) {
    /* what was peeked is still queued on the socket: read it away first */
    char sink[4096];
    while (recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    const char *type = status >= 500 ? (status == 501 ? "not_implemented_error" : "unavailable_error")
                                     : status == 408 ? "timeout_error" : "invalid_request_error";
    char body[512], all[1024];
    int nb = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%d}}",
                      msg, type, status);
    int n = snprintf(all, sizeof all,
                     "HTTP/1.1 %d %s\r\nServer: muse\r\nContent-Type: application/json; charset=utf-8\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n%s\r\n%s",
                     status, reason, nb, status == 503 ? "Retry-After: 1\r\n" : "", body);
    if (n > 0 && n < (int)sizeof all) (void)!send(c->fd, all, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(c->fd, SHUT_WR);
    c->phase = PH_CLOSING;
    c->t_linger_end = now_ms() + LINGER_MS;
    if (!c->killed) {
        c->killed = true; /* it no longer counts against the limits; its fd does until closed */
        g->n_live--;
    }
}

/* Make room for c by closing the oldest other connection still sending its request (of c's
 * address when per_addr); false when there is none: every connection of that scope is busy. */
static bool evict_one(struct muse_srv_gate *g, const struct muse_srv_conn *c, bool per_addr) {
    struct muse_srv_conn *victim = NULL;
    for (struct muse_srv_conn *v = g->head; v; v = v->next) {
        if (v == c || v->killed || (per_addr && !same_addr(v, c))) continue;
        if (v->phase == PH_PENDING || v->phase == PH_HANDED || v->phase == PH_BODY) {
            victim = v;
            break;
        }
    }
    if (!victim) return false;
    g->st.evicted++;
    if (victim->phase == PH_PENDING) {
        close_owned(g, victim);
    } else {
        shutdown(victim->fd, SHUT_RDWR); /* MHD sees the peer gone and closes it */
        victim->killed = true;
        g->n_live--;
    }
    return true;
}

static int live_of_addr(struct muse_srv_gate *g, const struct muse_srv_conn *c) {
    int n = 0;
    for (struct muse_srv_conn *v = g->head; v; v = v->next) n += !v->killed && same_addr(v, c);
    return n;
}

/* Free the sockets' slots held by CLOSING connections first when descriptors run out. */
static bool close_oldest_closing(struct muse_srv_gate *g) {
    for (struct muse_srv_conn *v = g->head; v; v = v->next)
        if (v->phase == PH_CLOSING && !v->dead) {
            close_owned(g, v);
            return true;
        }
    return false;
}

/* ---- the gate's thread ---- */

static void on_accept(struct muse_srv_gate *g) {
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                pthread_mutex_lock(&g->mu);
                bool freed = close_oldest_closing(g) || evict_one(g, NULL, false);
                pthread_mutex_unlock(&g->mu);
                if (!freed && g->listening_in_ep) { /* retry at the next tick instead of spinning */
                    epoll_ctl(g->ep, EPOLL_CTL_DEL, g->listen_fd, NULL);
                    g->listening_in_ep = false;
                }
            }
            return;
        }
        struct muse_srv_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->addr = addr;
        c->addrlen = len;
        c->t_accept = now_ms();
        c->phase = PH_PENDING;
        make_key(c);
        pthread_mutex_lock(&g->mu);
        if (fd < g->by_fd_cap && g->by_fd[fd]) { /* a handed socket MHD dropped without telling: stale */
            struct muse_srv_conn *stale = g->by_fd[fd];
            unlink_conn(g, stale);
            free(stale);
        }
        c->prev = g->tail;
        if (g->tail) g->tail->next = c;
        else g->head = c;
        g->tail = c;
        g->n_live++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
        if (!index_fd(g, c) || epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev)) {
            if (fd < g->by_fd_cap && g->by_fd[fd] == c) g->by_fd[fd] = NULL;
            unlink_conn(g, c);
            close(fd);
            free(c);
            pthread_mutex_unlock(&g->mu);
            continue;
        }
        /* limits, counting the new connection: make room by evicting a stalled one, else refuse */
        bool refuse = false;
        if (live_of_addr(g, c) > g->p.max_per_addr && !evict_one(g, c, true)) refuse = true;
        if (!refuse && g->n_live > g->p.max_conns && !evict_one(g, c, false)) refuse = true;
        if (refuse) {
            g->st.refused++;
            answer(g, c, 503, "Service Unavailable", "too many connections: every one is busy; retry later");
        }
        pthread_mutex_unlock(&g->mu);
    }
}

static void hand_over(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    c->phase = PH_HANDED;
    int fd = c->fd;
    struct sockaddr_storage addr = c->addr;
    socklen_t len = c->addrlen;
    pthread_mutex_unlock(&g->mu);
    /* from here MHD owns the socket: c may be freed by MHD's closed notification at any time */
    enum MHD_Result ok = MHD_add_connection(g->daemon, fd, (const struct sockaddr *)&addr, len);
    pthread_mutex_lock(&g->mu);
    if (ok != MHD_YES && fd < g->by_fd_cap && g->by_fd[fd] == c) { /* MHD refused and closed the socket */
        unlink_conn(g, c);
        free(c);
    }
}

static void on_readable(struct muse_srv_gate *g, struct muse_srv_conn *c, uint32_t events) {
    pthread_mutex_lock(&g->mu);
    if (c->dead) goto out;
    if (c->phase == PH_CLOSING) {
        char sink[4096];
        ssize_t r;
        while ((r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0 && c->drained < LINGER_BYTES) c->drained += (size_t)r;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || c->drained >= LINGER_BYTES) close_owned(g, c);
        goto out;
    }
    if (c->phase != PH_PENDING) goto out;
    ssize_t n = recv(c->fd, g->head_buf, g->p.max_head, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        close_owned(g, c); /* gone before sending a whole head */
        goto out;
    }
    if (n < 0) goto out;
    struct muse_srv_head h;
    switch (muse_srv_head_check(g->head_buf, (size_t)n, g->p.max_head, g->p.max_body, &h)) {
    case MUSE_SRV_HEAD_INCOMPLETE:
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) close_owned(g, c); /* no more bytes will come */
        break;
    case MUSE_SRV_HEAD_OK: hand_over(g, c); break;
    case MUSE_SRV_HEAD_BAD: g->st.malformed++; answer(g, c, 400, "Bad Request", h.why); break;
    case MUSE_SRV_HEAD_TOO_LARGE: g->st.malformed++; answer(g, c, 431, "Request Header Fields Too Large", h.why); break;
    case MUSE_SRV_HEAD_BODY_TOO_LARGE: g->st.malformed++; answer(g, c, 413, "Content Too Large", h.why); break;
    case MUSE_SRV_HEAD_UNSUPPORTED: g->st.malformed++; answer(g, c, 501, "Not Implemented", h.why); break;
    }
out:
    pthread_mutex_unlock(&g->mu);
}

/* Deadlines (never restarted by activity), counted from accept. */
static void check_deadlines(struct muse_srv_gate *g) {
    int64_t now = now_ms();
    pthread_mutex_lock(&g->mu);
    for (struct muse_srv_conn *c = g->head, *next; c; c = next) {
        next = c->next;
        if (c->dead) continue;
        if (c->phase == PH_PENDING && now - c->t_accept >= g->p.head_timeout_ms) {
            g->st.timed_out++;
            answer(g, c, 408, "Request Timeout", "the request head did not arrive in time");
        } else if (c->phase == PH_CLOSING && now >= c->t_linger_end) {
            close_owned(g, c);
        } else if ((c->phase == PH_HANDED || c->phase == PH_BODY) && !c->killed &&
                   now - c->t_accept >= g->p.request_timeout_ms) {
            g->st.timed_out++;
            shutdown(c->fd, SHUT_RDWR);
            c->killed = true;
            g->n_live--;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

static void bury(struct muse_srv_gate *g) {
    pthread_mutex_lock(&g->mu);
    struct muse_srv_conn *c = g->grave;
    g->grave = NULL;
    pthread_mutex_unlock(&g->mu);
    while (c) {
        struct muse_srv_conn *n = c->grave_next;
        free(c);
        c = n;
    }
}

static void *gate_main(void *arg) {
    struct muse_srv_gate *g = arg;
    struct epoll_event evs[64];
    int64_t last_tick = now_ms();
    while (!atomic_load(&g->stop)) {
        int n = epoll_wait(g->ep, evs, 64, TICK_MS);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &tag_listen) on_accept(g);
            else if (tag == &tag_wake) {
                uint64_t v;
                (void)!read(g->wake_fd, &v, sizeof v);
            } else on_readable(g, tag, evs[i].events);
        }
        int64_t now = now_ms();
        if (now - last_tick >= TICK_MS) {
            last_tick = now;
            check_deadlines(g);
            if (!g->listening_in_ep) {
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &tag_listen};
                g->listening_in_ep = !epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &ev);
            }
            if (g->p.tick) g->p.tick(g->p.tick_ud);
        }
        bury(g);
    }
    return NULL;
}

/* ---- lifecycle ---- */

muse_status muse_srv_gate_create(const struct muse_srv_gate_params *p, struct muse_srv_gate **out,
                                 struct muse_error *err) {
    *out = NULL;
    struct muse_srv_gate *g = calloc(1, sizeof *g);
    if (!g) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    g->p = *p;
    g->listen_fd = g->ep = g->wake_fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    atomic_init(&g->stop, false);
    if (g->p.max_conns < 1 || g->p.max_per_addr < 1 || g->p.max_head < 64 || g->p.head_timeout_ms < 1 ||
        g->p.request_timeout_ms < 1) {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad connection limits");
        goto fail;
    }
    g->head_buf = malloc(g->p.max_head);
    if (!g->head_buf) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    struct sockaddr_storage ss = {0};
    socklen_t len;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, p->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p->port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, p->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p->port);
        len = sizeof *a6;
    } else {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "--host must be a numeric IPv4 or IPv6 address, not '%s'", p->host);
        goto fail;
    }
    int one = 1;
    g->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g->listen_fd < 0 || setsockopt(g->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(g->listen_fd, (struct sockaddr *)&ss, len) || listen(g->listen_fd, SOMAXCONN)) {
        muse_error_set(err, MUSE_ERR_IO, "cannot listen on %s:%d (%s)", p->host, p->port, strerror(errno));
        goto fail;
    }
    len = sizeof ss;
    getsockname(g->listen_fd, (struct sockaddr *)&ss, &len);
    g->port = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &tag_listen}, ew = {.events = EPOLLIN, .data.ptr = &tag_wake};
    if (g->ep < 0 || g->wake_fd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &el) ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake_fd, &ew)) {
        muse_error_set(err, MUSE_ERR_IO, "cannot set up the connection poller (%s)", strerror(errno));
        goto fail;
    }
    g->listening_in_ep = true;
    *out = g;
    return MUSE_OK;
fail:
    muse_srv_gate_free(g);
    return err ? err->status : MUSE_ERR_INTERNAL;
}

int muse_srv_gate_port(const struct muse_srv_gate *g) { return g->port; }

muse_status muse_srv_gate_start(struct muse_srv_gate *g, struct MHD_Daemon *d, struct muse_error *err) {
    g->daemon = d;
    if (pthread_create(&g->th, NULL, gate_main, g)) return muse_error_set(err, MUSE_ERR_INTERNAL, "cannot start the gate thread");
    g->started = true;
    return MUSE_OK;
}

void muse_srv_gate_stop(struct muse_srv_gate *g) {
    if (!g || g->stopped) return;
    g->stopped = true;
    atomic_store(&g->stop, true);
    if (g->started) {
        uint64_t one = 1;
        (void)!write(g->wake_fd, &one, sizeof one);
        pthread_join(g->th, NULL);
    }
    if (g->listen_fd >= 0) close(g->listen_fd);
    g->listen_fd = -1;
    pthread_mutex_lock(&g->mu);
    for (struct muse_srv_conn *c = g->head, *next; c; c = next) {
        next = c->next;
        if (c->phase == PH_PENDING || c->phase == PH_CLOSING) close_owned(g, c);
    }
    pthread_mutex_unlock(&g->mu);
    bury(g);
}

void muse_srv_gate_free(struct muse_srv_gate *g) {
    if (!g) return;
    muse_srv_gate_stop(g);
    /* records MHD never reported closed (it refused them silently) */
    for (struct muse_srv_conn *c = g->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    if (g->ep >= 0) close(g->ep);
    if (g->wake_fd >= 0) close(g->wake_fd);
    free(g->by_fd);
    free(g->head_buf);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---- reports from the HTTP layer ---- */

struct muse_srv_conn *muse_srv_gate_conn_started(struct muse_srv_gate *g, int fd) {
    pthread_mutex_lock(&g->mu);
    struct muse_srv_conn *c = fd >= 0 && fd < g->by_fd_cap ? g->by_fd[fd] : NULL;
    if (c && c->phase == PH_HANDED) c->phase = PH_BODY;
    else c = NULL;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void muse_srv_gate_conn_request_read(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->phase == PH_BODY) c->phase = PH_BUSY;
    pthread_mutex_unlock(&g->mu);
}

void muse_srv_gate_conn_closed(struct muse_srv_gate *g, struct muse_srv_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    unlink_conn(g, c);
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void muse_srv_gate_stats(struct muse_srv_gate *g, struct muse_srv_gate_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    out->open = g->n_live;
    pthread_mutex_unlock(&g->mu);
}
