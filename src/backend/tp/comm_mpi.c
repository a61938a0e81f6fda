/* comm_mpi.c - comm.h over MPI (built with MUSE_HAVE_MPI when the build finds mpicc). */
#include "backend/tp/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#ifdef MUSE_HAVE_MPI
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

struct muse_comm {
    int32_t rank, size;
    float *scratch;            /* the all-reduce's chunks: [2][size][chunk] floats (bf16 halves them) */
    size_t scratch_floats;
    struct muse_comm_stats stats;
    double timeout;            /* seconds a collective may wait for the others (MUSE_TP_TIMEOUT) */
};

bool muse_comm_available(void) { return true; }

/* Every MPI call goes through here: an error (a rank gone, the network down) ends this rank with
 * one line; the launcher ends the others. */
static void check(struct muse_comm *c, int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "muse: tensor parallel: rank %d: %s failed: %.*s (a rank of the job died or the network failed)\n",
            c ? c->rank : -1, what, len, msg);
    fflush(stderr);
    exit(1);
}

muse_status muse_comm_init(int32_t n_ranks, struct muse_comm **out, struct muse_error *err) {
    *out = NULL;
    int inited = 0, provided = 0, size = 0, rank = 0;
    MPI_Initialized(&inited);
    if (inited) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor parallel: MPI is already initialized");
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return muse_error_set(err, MUSE_ERR_IO, "tensor parallel: MPI_Init_thread failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    muse_status st = MUSE_OK;
    if (provided < MPI_THREAD_SERIALIZED)
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor parallel: this MPI gives thread level %d, muse needs MPI_THREAD_SERIALIZED",
                            provided);
    else if (size == 1 && n_ranks > 1)
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "--tp %d needs %d processes: start muse as mpirun -np %d muse ... --tp %d",
                            n_ranks, n_ranks, n_ranks, n_ranks);
    else if (size != n_ranks)
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "--tp %d does not match the job's %d processes (mpirun -np %d)",
                            n_ranks, size, size);
    struct muse_comm *c = st ? NULL : calloc(1, sizeof *c);
    if (!st && !c) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (st) {
        MPI_Finalize();
        return st;
    }
    c->rank = rank;
    c->size = size;
    const char *t = getenv("MUSE_TP_TIMEOUT");
    c->timeout = t && atof(t) > 0 ? atof(t) : 15.0;
    *out = c;
    return MUSE_OK;
}

void muse_comm_finish(struct muse_comm *c) {
    if (!c) return;
    MPI_Finalize();
    free(c->scratch);
    free(c);
}

_Noreturn void muse_comm_abort(struct muse_comm *c, const char *msg) {
    fprintf(stderr, "muse: tensor parallel: rank %d: %s\n", c ? c->rank : -1, msg);
    fflush(stderr);
    /* MPI_Abort asks the launcher to end every rank; if the launcher cannot be reached (the
     * network is gone) it could wait forever: the alarm ends this process regardless */
    signal(SIGALRM, SIG_DFL);
    alarm(5);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/*
 * Wait for a non-blocking collective, at most c->timeout seconds: the others may be on a node that
 * vanished, and a blocking MPI call would then wait for TCP's minutes-long timeouts. It polls at
 * once (a reduction's partner is usually there within microseconds), then yields the CPU, then
 * sleeps in short naps (an idle rank waiting for rank 0's next command costs nothing).
 */
static void wait_for(struct muse_comm *c, MPI_Request *r, const char *what, bool idle, double timeout) {
    const double t0 = MPI_Wtime();
    for (long polls = 0;; polls++) {
        int done = 0;
        check(c, MPI_Test(r, &done, MPI_STATUS_IGNORE), what);
        if (done) return;
        if ((polls & 255) == 0 && MPI_Wtime() - t0 > timeout) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s: no answer from the other ranks for %.0f s (a rank's node vanished or the network failed; MUSE_TP_TIMEOUT)",
                     what, timeout);
            muse_comm_abort(c, msg);
        }
        if (polls > 2000) {
            const double waited = MPI_Wtime() - t0;
            if (waited > 1e-3) nanosleep(&(struct timespec){0, idle && waited > 0.1 ? 1000000 : 50000}, NULL);
            else sched_yield();
        }
    }
}

int32_t muse_comm_rank(const struct muse_comm *c) { return c->rank; }
int32_t muse_comm_size(const struct muse_comm *c) { return c->size; }

static float *scratch(struct muse_comm *c, size_t floats) {
    if (floats > c->scratch_floats) {
        float *s = realloc(c->scratch, floats * sizeof(float));
        if (!s) muse_comm_abort(c, "out of memory for the all-reduce buffer");
        c->scratch = s;
        c->scratch_floats = floats;
    }
    return c->scratch;
}

/* bf16 by rounding to nearest even (NaN stays NaN), and back. */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void muse_comm_allreduce(struct muse_comm *c, float *x, int64_t n, bool bf16) {
    if (c->size == 1 || n <= 0) return;
    const double t0 = MPI_Wtime();
    const int N = c->size;
    const int64_t chunk = (n + N - 1) / N;               /* floats of each rank's chunk */
    const size_t es = bf16 ? 2 : 4;                      /* payload bytes per float */
    /* send: [N][chunk] payload (x, padded); recv: [N][chunk] payload (chunk `rank` of every rank) */
    uint8_t *s = (uint8_t *)scratch(c, (size_t)(2 * N * chunk));
    uint8_t *send = s, *recv = s + (size_t)N * (size_t)chunk * es;
    if (bf16) {
        uint16_t *h = (uint16_t *)send;
        for (int64_t i = 0; i < N * chunk; i++) h[i] = i < n ? to_bf16(x[i]) : 0;
    } else {
        memcpy(send, x, (size_t)n * 4);
        memset(send + (size_t)n * 4, 0, (size_t)(N * chunk - n) * 4);
    }
    const MPI_Datatype t = bf16 ? MPI_UINT16_T : MPI_FLOAT;
    MPI_Request req;
    check(c, MPI_Ialltoall(send, (int)chunk, t, recv, (int)chunk, t, MPI_COMM_WORLD, &req), "all-reduce");
    wait_for(c, &req, "all-reduce", false, c->timeout);
    /* this rank's chunk: the sum in rank order, into send's first chunk */
    float sum[256];
    for (int64_t i0 = 0; i0 < chunk; i0 += 256) {
        const int64_t m = chunk - i0 < 256 ? chunk - i0 : 256;
        for (int64_t i = 0; i < m; i++) sum[i] = 0.0f;
        for (int r = 0; r < N; r++) {
            if (bf16) {
                const uint16_t *h = (const uint16_t *)recv + (size_t)r * (size_t)chunk + i0;
                for (int64_t i = 0; i < m; i++) sum[i] += from_bf16(h[i]);
            } else {
                const float *f = (const float *)recv + (size_t)r * (size_t)chunk + i0;
                for (int64_t i = 0; i < m; i++) sum[i] += f[i];
            }
        }
        if (bf16)
            for (int64_t i = 0; i < m; i++) ((uint16_t *)send)[i0 + i] = to_bf16(sum[i]);
        else
            memcpy((float *)send + i0, sum, (size_t)m * 4);
    }
    check(c, MPI_Iallgather(send, (int)chunk, t, recv, (int)chunk, t, MPI_COMM_WORLD, &req), "all-reduce");
    wait_for(c, &req, "all-reduce", false, c->timeout);
    if (bf16)
        for (int64_t i = 0; i < n; i++) x[i] = from_bf16(((const uint16_t *)recv)[i]);
    else
        memcpy(x, recv, (size_t)n * 4);
    c->stats.n_allreduce++;
    c->stats.floats_reduced += n;
    c->stats.bytes_sent += 2 * (int64_t)(N - 1) * chunk * (int64_t)es;
    c->stats.seconds += MPI_Wtime() - t0;
}

void muse_comm_bcast(struct muse_comm *c, void *buf, size_t bytes) {
    if (c->size == 1 || bytes == 0) return;
    for (size_t off = 0; off < bytes;) { /* counts are ints: big payloads go in pieces */
        const size_t m = bytes - off < ((size_t)1 << 30) ? bytes - off : ((size_t)1 << 30);
        MPI_Request req;
        check(c, MPI_Ibcast((uint8_t *)buf + off, (int)m, MPI_BYTE, 0, MPI_COMM_WORLD, &req), "broadcast");
        wait_for(c, &req, c->rank == 0 ? "sending a command" : "waiting for rank 0", c->rank != 0, c->timeout);
        off += m;
    }
    if (c->rank == 0) c->stats.bytes_sent += (int64_t)bytes * (c->size - 1);
}

void muse_comm_allgather(struct muse_comm *c, const void *mine, void *all, size_t bytes) {
    if (c->size == 1) {
        memcpy(all, mine, bytes);
        return;
    }
    MPI_Request req;
    check(c, MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req), "all-gather");
    /* the load's checks: a rank may still be reading its share of a large file */
    wait_for(c, &req, "all-gather", true, c->timeout > 600 ? c->timeout : 600);
    c->stats.bytes_sent += (int64_t)bytes * (c->size - 1);
}

void muse_comm_barrier(struct muse_comm *c) {
    if (c->size == 1) return;
    MPI_Request req;
    check(c, MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier");
    wait_for(c, &req, "barrier", true, c->timeout);
}

struct muse_comm_stats muse_comm_stats(const struct muse_comm *c) { return c->stats; }

#else /* built without MPI */

struct muse_comm {
    int unused;
};

bool muse_comm_available(void) { return false; }

muse_status muse_comm_init(int32_t n_ranks, struct muse_comm **out, struct muse_error *err) {
    *out = NULL;
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "--tp %d: this muse was built without MPI (install libopenmpi-dev openmpi-bin and rebuild)", n_ranks);
}

void muse_comm_finish(struct muse_comm *c) { (void)c; }
_Noreturn void muse_comm_abort(struct muse_comm *c, const char *msg) {
    (void)c;
    fprintf(stderr, "muse: tensor parallel: %s\n", msg);
    exit(1);
}
int32_t muse_comm_rank(const struct muse_comm *c) { return 0; }
int32_t muse_comm_size(const struct muse_comm *c) { return 1; }
void muse_comm_allreduce(struct muse_comm *c, float *x, int64_t n, bool bf16) {}
void muse_comm_bcast(struct muse_comm *c, void *buf, size_t bytes) {}
void muse_comm_allgather(struct muse_comm *c, const void *mine, void *all, size_t bytes) { memcpy(all, mine, bytes); }
void muse_comm_barrier(struct muse_comm *c) {}
struct muse_comm_stats muse_comm_stats(const struct muse_comm *c) { return (struct muse_comm_stats){0}; }

#endif
