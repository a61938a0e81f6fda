/*
 * comm.h - the collectives of a tensor-parallel group (docs/tensor-parallel.md): N processes, one
 * per rank, started by an MPI launcher (mpirun -np N ...). muse writes no network code: this is a
 * thin layer over MPI (OpenMPI from Debian), compiled when the build finds mpicc (comm_mpi.c);
 * without it muse_comm_init answers with one line saying so.
 *
 * Threads: MPI is initialized with MPI_THREAD_SERIALIZED. Every call below is made by the thread
 * that runs a forward (thread 0 of the device's region is the caller's thread) or issues a
 * command, one at a time under the group's lock (model/tp.c), never by two threads at once.
 *
 * No wait is endless: a collective that gets no answer from the others within MUSE_TP_TIMEOUT
 * seconds (default 15) ends the job with one line (a node vanished, the network failed); rank 0
 * sends a heartbeat command every second while idle (model/tp.c), so a quiet server is not taken
 * for a dead one. A rank that dies is noticed by the launcher, which ends the others.
 *
 * Reductions are deterministic and identical on every rank: each rank's buffer is cut into N
 * chunks, chunk c of every rank goes to rank c (an all-to-all), rank c sums its chunk in rank
 * order 0, 1, .., N-1, and the sums are gathered back to every rank (an all-gather). The traffic
 * is that of a ring all-reduce (2 (N-1)/N of the buffer sent per rank), and the same inputs give
 * the same bits run after run, whatever MPI's own algorithms would choose.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"

struct muse_comm;

/* What a group has done since it started (muse_comm_stats). */
struct muse_comm_stats {
    int64_t n_allreduce;     /* all-reduce calls */
    int64_t floats_reduced;  /* floats summed over those calls (the buffers' size) */
    int64_t bytes_sent;      /* payload bytes this rank sent (all collectives) */
    double seconds;          /* wall time inside all-reduces */
};

/* Whether this build has MPI (mpicc was found at build time). */
bool muse_comm_available(void);

/*
 * Join the group of the MPI job this process was started in (MPI_Init_thread). n_ranks: the group
 * size the caller expects (--tp N); it must equal the job's size. Errors (one line each):
 * MUSE_ERR_UNSUPPORTED (built without MPI), MUSE_ERR_INVALID_ARG (the job has another size, or
 * MPI gives less than MPI_THREAD_SERIALIZED). Once per process.
 */
muse_status muse_comm_init(int32_t n_ranks, struct muse_comm **out, struct muse_error *err);
/* Leave the group (MPI_Finalize). Every rank must call it. */
void muse_comm_finish(struct muse_comm *c);
/* End every rank of the job now with `msg` on this rank's stderr (MPI_Abort): a rank that
 * cannot go on must not leave the others waiting. Does not return. */
_Noreturn void muse_comm_abort(struct muse_comm *c, const char *msg);

int32_t muse_comm_rank(const struct muse_comm *c);
int32_t muse_comm_size(const struct muse_comm *c);

/*
 * x[0..n) summed over the ranks, in place, the same bits on every rank (see above). bf16: the
 * payload travels as bf16 (each rank's part rounded to nearest even, the sums in f32 and rounded
 * again), half the bytes. Every rank calls it with the same n.
 */
void muse_comm_allreduce(struct muse_comm *c, float *x, int64_t n, bool bf16);
/* Rank 0's `bytes` bytes at buf to every rank. */
void muse_comm_bcast(struct muse_comm *c, void *buf, size_t bytes);
/* Every rank's `bytes` bytes at mine to all, rank r's at all + r * bytes (waits up to 10 minutes:
 * the load's checks, while ranks read their shares). */
void muse_comm_allgather(struct muse_comm *c, const void *mine, void *all, size_t bytes);
/* Wait for every rank. */
void muse_comm_barrier(struct muse_comm *c);

/* The counters of this rank. */
struct muse_comm_stats muse_comm_stats(const struct muse_comm *c);
