/*
 * threadpool.h - a persistent pool of worker threads that runs one parallel region per call.
 *
 * The model forward enters the pool once per call (muse_threadpool_run) and every thread walks
 * the same list of ops on its own slice, separated by muse_threadpool_barrier(); there are no
 * per-op wake-ups and nothing is allocated per call. The calling thread takes part as thread 0,
 * so a pool of n threads starts n - 1 workers.
 *
 * Waiting: workers spin briefly for the next region, then sleep on a futex (an idle pool costs no
 * CPU); the barrier and the end of a region spin a shorter while, then sleep too, so that more
 * threads than free cores (a shared machine) still make progress.
 *
 * Signals: the workers block every asynchronous signal (SIGINT, SIGTERM, ...; faults excepted),
 * so those always reach one of the application's own threads, where its handlers expect them.
 */
#pragma once

#include "muse.h"

struct muse_threadpool;

/* fn(ith, nth, ctx) runs on every thread of the pool with ith = 0 .. nth-1 (0 = the caller). */
typedef void (*muse_parallel_fn)(int ith, int nth, void *ctx);

/*
 * Create a pool of n_threads threads (including the caller); n_threads <= 0 means the number of
 * physical cores (muse_cpu_features()->n_physical). Returns MUSE_ERR_INVALID_ARG for more than
 * MUSE_THREADPOOL_MAX threads and MUSE_ERR_NOMEM / MUSE_ERR_INTERNAL when memory or a thread
 * cannot be had; *out is set only on success. Free with muse_threadpool_free.
 */
#define MUSE_THREADPOOL_MAX 256
muse_status muse_threadpool_create(int n_threads, struct muse_threadpool **out, struct muse_error *err);

/* Join the workers and free the pool. NULL is allowed. No region may be running. */
void muse_threadpool_free(struct muse_threadpool *pool);

/* Number of threads, caller included (>= 1). */
int muse_threadpool_n_threads(const struct muse_threadpool *pool);

/*
 * Run fn(ith, nth, ctx) on all threads and return when every thread has returned from fn.
 * Not reentrant: one region at a time per pool (calls from several threads must be serialized by
 * the caller). Allocation-free. fn must not call muse_threadpool_run on the same pool.
 */
void muse_threadpool_run(struct muse_threadpool *pool, muse_parallel_fn fn, void *ctx);

/*
 * Inside fn only: wait until all nth threads of the region have reached this barrier. Every
 * thread must call it the same number of times. Memory written before the barrier by any thread
 * is visible to all threads after it.
 */
void muse_threadpool_barrier(struct muse_threadpool *pool);
