/* test_threadpool.c - the persistent pool: every thread runs each region once, barriers order
 * memory between phases, results do not depend on the thread count, the pool survives many
 * back-to-back regions. */
#include <stdint.h>
#include <string.h>

#include "core/threadpool.h"
#include "test.h"

#define N_SLOTS 64

struct phase_ctx {
    struct muse_threadpool *pool;
    int n_phases;
    int64_t slots[N_SLOTS];      /* each phase: slot i written by thread i % nth */
    int64_t sums[MUSE_THREADPOOL_MAX];
    int errors[MUSE_THREADPOOL_MAX];
    int visits[MUSE_THREADPOOL_MAX];
};

/* Phase p: every slot becomes f(p, i, old values of all slots); reading all slots is only correct
 * when the barrier separates the read of phase p from the writes of phase p+1. */
static void phase_fn(int ith, int nth, void *vctx) {
    struct phase_ctx *c = vctx;
    c->visits[ith]++;
    int64_t local[N_SLOTS];
    for (int p = 0; p < c->n_phases; p++) {
        for (int i = 0; i < N_SLOTS; i++) local[i] = c->slots[i];
        /* every slot must hold the value the previous phase wrote */
        for (int i = 0; i < N_SLOTS; i++)
            if (local[i] != (int64_t)p * 1000 + i) c->errors[ith]++;
        muse_threadpool_barrier(c->pool);
        for (int i = ith; i < N_SLOTS; i += nth) c->slots[i] = (int64_t)(p + 1) * 1000 + i;
        int64_t s = 0;
        for (int i = 0; i < N_SLOTS; i++) s += local[i];
        c->sums[ith] += s;
        muse_threadpool_barrier(c->pool);
    }
}

static void run_phases(int n_threads, int n_regions, int n_phases) {
    struct muse_threadpool *pool = NULL;
    struct muse_error err;
    muse_status st = muse_threadpool_create(n_threads, &pool, &err);
    TEST_CONDF(st == MUSE_OK, "create %d threads: %s", n_threads, err.msg);
    if (st != MUSE_OK) return;
    TEST_CONDF(muse_threadpool_n_threads(pool) == n_threads, "n_threads %d", n_threads);
    static struct phase_ctx c;
    int total_errors = 0, bad_visits = 0, bad_sums = 0;
    for (int r = 0; r < n_regions; r++) {
        memset(&c, 0, sizeof(c));
        c.pool = pool;
        c.n_phases = n_phases;
        for (int i = 0; i < N_SLOTS; i++) c.slots[i] = i;
        muse_threadpool_run(pool, phase_fn, &c);
        /* sum over phases p of sum_i (p*1000 + i) */
        int64_t want = 0;
        for (int p = 0; p < n_phases; p++)
            for (int i = 0; i < N_SLOTS; i++) want += (int64_t)p * 1000 + i;
        for (int t = 0; t < n_threads; t++) {
            total_errors += c.errors[t];
            bad_visits += c.visits[t] != 1;
            bad_sums += c.sums[t] != want;
        }
        for (int t = n_threads; t < MUSE_THREADPOOL_MAX; t++) bad_visits += c.visits[t] != 0;
        for (int i = 0; i < N_SLOTS; i++) total_errors += c.slots[i] != (int64_t)n_phases * 1000 + i;
    }
    TEST_CONDF(total_errors == 0, "%d threads: %d stale reads across barriers", n_threads, total_errors);
    TEST_CONDF(bad_visits == 0, "%d threads: %d threads ran a region other than once", n_threads, bad_visits);
    TEST_CONDF(bad_sums == 0, "%d threads: %d wrong per-thread sums", n_threads, bad_sums);
    muse_threadpool_free(pool);
}

/* A parallel float reduction whose result must not depend on the thread count when each thread
 * owns fixed chunks and thread 0 combines them in chunk order. */
struct reduce_ctx {
    struct muse_threadpool *pool;
    const float *x;
    int n;
    float partial[16];
    float result;
};

static void reduce_fn(int ith, int nth, void *vctx) {
    struct reduce_ctx *c = vctx;
    for (int chunk = ith; chunk < 16; chunk += nth) {
        float s = 0;
        for (int i = chunk * (c->n / 16); i < (chunk + 1) * (c->n / 16); i++) s += c->x[i];
        c->partial[chunk] = s;
    }
    muse_threadpool_barrier(c->pool);
    if (ith == 0) {
        float s = 0;
        for (int k = 0; k < 16; k++) s += c->partial[k];
        c->result = s;
    }
}

static float reduce_with(int n_threads, const float *x, int n) {
    struct muse_threadpool *pool = NULL;
    if (muse_threadpool_create(n_threads, &pool, NULL) != MUSE_OK) return -1;
    struct reduce_ctx c = {.pool = pool, .x = x, .n = n};
    float r = 0;
    for (int rep = 0; rep < 50; rep++) {
        muse_threadpool_run(pool, reduce_fn, &c);
        if (rep == 0) r = c.result;
        else if (c.result != r) r = -2;
    }
    muse_threadpool_free(pool);
    return r;
}

int main(void) {
    const char *san = getenv("MUSE_SANITIZER");
    int regions = san ? 100 : 1000;
    for (int t = 1; t <= 3; t++) run_phases(t, regions, 8);
    run_phases(5, regions / 10, 4);   /* more threads than cores */

    static float x[4096];
    uint32_t s = 12345;
    for (int i = 0; i < 4096; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 977.0f - 30.0f;
    }
    float r1 = reduce_with(1, x, 4096), r2 = reduce_with(2, x, 4096), r3 = reduce_with(3, x, 4096);
    TEST_CONDF(r1 != -1 && r1 != -2, "1-thread reduction is repeatable (%g)", r1);
    TEST_CONDF(r1 == r2 && r1 == r3, "reduction equal for 1/2/3 threads: %.9g %.9g %.9g", r1, r2, r3);

    struct muse_threadpool *pool = NULL;
    struct muse_error err;
    TEST_COND("too many threads rejected",
              muse_threadpool_create(MUSE_THREADPOOL_MAX + 1, &pool, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("default thread count >= 1", muse_threadpool_create(0, &pool, &err) == MUSE_OK &&
                                               muse_threadpool_n_threads(pool) >= 1);
    muse_threadpool_free(pool);
    muse_threadpool_free(NULL);
    return TEST_REPORT();
}
