/* threadpool.c - persistent worker pool with one parallel region per call and a spin barrier. */
#include "core/threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spins before a waiting thread sleeps in the kernel: short inside a region (barrier, end of
 * region), longer for an idle worker waiting for the next region. Sleeping matters when the
 * machine has fewer free cores than threads: a spinning waiter would hold the core that the
 * thread it waits for needs. A pause takes ~55 ns on the Zen 3 development VM, so a waiter in a
 * region spins ~28 us (longer than the model forward's usual imbalance between barriers, which
 * backend_cpu.c keeps under ~20 us) before it gives its core back; 2000 spins (~110 us) left 12%
 * of decode CPU time spinning on a loaded machine, 500 leaves 4% (docs/perf.md). */
#define SPIN_IN_REGION 500
#define SPIN_IDLE 20000

static void futex_wait(int *addr, int val) { syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0); }
static void futex_wake(int *addr) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }

/* Wait until *addr != val: spin, then sleep. *sleepers counts the threads asleep on addr so that
 * wakers can skip the system call (both sides use sequentially consistent accesses). */
static void wait_change(int *addr, int val, int *sleepers, int spins) {
    for (int i = 0; i < spins; i++) {
        if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != val) return;
        cpu_relax();
    }
    __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(addr, __ATOMIC_SEQ_CST) == val) futex_wait(addr, val);
    __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
}

/* After changing *addr (seq_cst): wake its sleepers, if any. */
static void wake_change(int *addr, int *sleepers) {
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST) > 0) futex_wake(addr);
}

/* Keep the hot counters on their own cache lines. */
struct padded_int {
    int v;
    char pad[64 - sizeof(int)];
};

struct worker {
    struct muse_threadpool *pool;
    int ith;
    pthread_t thread;
};

struct muse_threadpool {
    int n_threads;
    struct worker *workers;         /* [n_threads - 1] */
    int n_started;                  /* workers actually running (for cleanup) */

    /* start of a region: workers wait for `generation` to change */
    struct padded_int generation;
    struct padded_int gen_sleepers;
    int stop;
    muse_parallel_fn fn;
    void *ctx;

    struct padded_int n_done;       /* workers finished with the current region */
    struct padded_int done_sleepers;

    /* barrier: sense by phase counter */
    struct padded_int barrier_arrived;
    struct padded_int barrier_phase;
    struct padded_int barrier_sleepers;
};

static void run_worker_region(struct muse_threadpool *pool, int ith) {
    pool->fn(ith, pool->n_threads, pool->ctx);
    __atomic_fetch_add(&pool->n_done.v, 1, __ATOMIC_SEQ_CST);
    wake_change(&pool->n_done.v, &pool->done_sleepers.v);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct muse_threadpool *pool = w->pool;
    int seen = 0;
    for (;;) {
        wait_change(&pool->generation.v, seen, &pool->gen_sleepers.v, SPIN_IDLE);
        seen = __atomic_load_n(&pool->generation.v, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) break;
        run_worker_region(pool, w->ith);
    }
    return NULL;
}

muse_status muse_threadpool_create(int n_threads, struct muse_threadpool **out, struct muse_error *err) {
    if (n_threads <= 0) n_threads = muse_cpu_features()->n_physical;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MUSE_THREADPOOL_MAX)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "thread pool: %d threads requested, at most %d",
                              n_threads, MUSE_THREADPOOL_MAX);
    struct muse_threadpool *pool = calloc(1, sizeof(*pool));
    if (!pool) return muse_error_set(err, MUSE_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    muse_status st = MUSE_OK;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "thread pool: out of memory");
            goto fail;
        }
    }
    /* Workers take none of the process's asynchronous signals (a terminal's SIGINT, SIGTERM, ...):
     * the kernel then hands them to a thread that takes them, the application's, so its handler
     * runs there and a call that thread is blocked in (a read waiting for a line) is interrupted.
     * A worker inherits the mask it is created with; faults stay deliverable. */
    sigset_t async, old;
    sigfillset(&async);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t k = 0; k < sizeof faults / sizeof faults[0]; k++) sigdelset(&async, faults[k]);
    pthread_sigmask(SIG_BLOCK, &async, &old);
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            st = muse_error_set(err, MUSE_ERR_INTERNAL, "thread pool: cannot start thread %d of %d", i,
                                n_threads);
            goto fail;
        }
        pool->n_started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = pool;
    return MUSE_OK;
fail:
    muse_threadpool_free(pool);
    return st;
}

void muse_threadpool_free(struct muse_threadpool *pool) {
    if (!pool) return;
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&pool->generation.v, 1, __ATOMIC_SEQ_CST);
    wake_change(&pool->generation.v, &pool->gen_sleepers.v);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers);
    free(pool);
}

int muse_threadpool_n_threads(const struct muse_threadpool *pool) { return pool->n_threads; }

void muse_threadpool_run(struct muse_threadpool *pool, muse_parallel_fn fn, void *ctx) {
    if (pool->n_threads == 1) {
        fn(0, 1, ctx);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    __atomic_store_n(&pool->n_done.v, 0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pool->generation.v, 1, __ATOMIC_SEQ_CST);
    wake_change(&pool->generation.v, &pool->gen_sleepers.v);

    fn(0, pool->n_threads, ctx);

    const int want = pool->n_threads - 1;
    int done;
    while ((done = __atomic_load_n(&pool->n_done.v, __ATOMIC_ACQUIRE)) != want)
        wait_change(&pool->n_done.v, done, &pool->done_sleepers.v, SPIN_IN_REGION);
}

void muse_threadpool_barrier(struct muse_threadpool *pool) {
    int nth = pool->n_threads;
    if (nth == 1) return;
    int phase = __atomic_load_n(&pool->barrier_phase.v, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&pool->barrier_arrived.v, 1, __ATOMIC_ACQ_REL) == nth) {
        __atomic_store_n(&pool->barrier_arrived.v, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pool->barrier_phase.v, phase + 1, __ATOMIC_SEQ_CST);
        wake_change(&pool->barrier_phase.v, &pool->barrier_sleepers.v);
        return;
    }
    wait_change(&pool->barrier_phase.v, phase, &pool->barrier_sleepers.v, SPIN_IN_REGION);
}
