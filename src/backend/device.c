/* device.c - the process's devices (device.h): the registry, buffers, the workspace and runs. */
#include "backend/device.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/cpu.h"
#include "core/error.h"

struct muse_device {
    const struct muse_backend_ops *ops;
    void *state;                 /* the backend's scratch and threads, for `plan` (NULL until reserved) */
    struct muse_backend_plan plan;
    float *ws;                   /* the workspace: the running program's activation buffers */
    size_t ws_floats;
    pthread_mutex_t lock;        /* held by a run (and by reserve) */
    int refs;                    /* under registry_lock */
    struct muse_device *next;
};

struct muse_buffer {
    void *data;
    size_t size;
    bool mapped; /* muse_device_alloc_lazy: an anonymous mapping (munmap, madvise) */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct muse_device *registry;

int32_t muse_device_threads(const char *name, int32_t n_threads) {
    const struct muse_backend_ops *ops = muse_backend_find(name); /* backend.c's kinds */
    if (!ops) return 0;
    /* the oracle runs on one thread whatever is asked; the cpu device on every physical core by default */
    if (ops == &muse_backend_ref_ops) return 1;
    if (n_threads <= 0) n_threads = muse_cpu_features()->n_physical;
    return n_threads < 1 ? 1 : n_threads;
}

muse_status muse_device_open(const char *name, int32_t n_threads, bool no_repack, struct muse_device **out,
                             struct muse_error *err) {
    *out = NULL;
    const struct muse_backend_ops *ops = muse_backend_find(name);
    if (!ops) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "unknown backend '%s' (cpu or ref)", name);
    n_threads = muse_device_threads(name, n_threads);
    pthread_mutex_lock(&registry_lock);
    struct muse_device *d = registry;
    while (d && !(d->ops == ops && d->plan.n_threads == n_threads && d->plan.no_repack == no_repack)) d = d->next;
    if (d) {
        d->refs++;
    } else if ((d = calloc(1, sizeof *d))) {
        d->ops = ops;
        d->plan.n_threads = n_threads;
        d->plan.no_repack = no_repack;
        d->refs = 1;
        pthread_mutex_init(&d->lock, NULL);
        d->next = registry;
        registry = d;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!d) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    *out = d;
    return MUSE_OK;
}

void muse_device_close(struct muse_device *dev) {
    if (!dev) return;
    pthread_mutex_lock(&registry_lock);
    const bool last = --dev->refs == 0;
    if (last)
        for (struct muse_device **p = &registry; *p; p = &(*p)->next)
            if (*p == dev) {
                *p = dev->next;
                break;
            }
    pthread_mutex_unlock(&registry_lock);
    if (!last) return;
    if (dev->state) dev->ops->free(dev->state);
    free(dev->ws);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
}

const char *muse_device_name(const struct muse_device *dev) { return dev->ops->name; }
int32_t muse_device_n_threads(const struct muse_device *dev) { return dev->plan.n_threads; }

muse_status muse_device_reserve(struct muse_device *dev, const struct muse_backend_plan *need, size_t workspace_floats,
                                struct muse_error *err) {
    muse_status st = MUSE_OK;
    pthread_mutex_lock(&dev->lock);
    struct muse_backend_plan p = dev->plan;
    bool grow = dev->state == NULL;
#define GROW(f) if (need->f > p.f) p.f = need->f, grow = true
    GROW(n_batch);
    GROW(max_ne0);
    GROW(max_cells);
    GROW(max_head_dim);
#undef GROW
    if (grow) {
        void *state = NULL;
        if ((st = dev->ops->init(&p, &state, err))) goto out;
        if (dev->state) dev->ops->free(dev->state);
        dev->state = state;
        dev->plan = p;
    }
    if (workspace_floats > dev->ws_floats) {
        float *ws = aligned_alloc(64, workspace_floats * sizeof(float));
        if (!ws) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %zu MiB workspace",
                                (workspace_floats * sizeof(float)) >> 20);
            goto out;
        }
        memset(ws, 0, workspace_floats * sizeof(float));
        free(dev->ws);
        dev->ws = ws;
        dev->ws_floats = workspace_floats;
    }
out:
    pthread_mutex_unlock(&dev->lock);
    return st;
}

const struct muse_backend_plan *muse_device_plan(const struct muse_device *dev) { return &dev->plan; }

void muse_device_swap_ops(struct muse_device *dev, const struct muse_backend_ops **ops, void **state) {
    pthread_mutex_lock(&dev->lock);
    const struct muse_backend_ops *o = dev->ops;
    void *st = dev->state;
    dev->ops = *ops;
    dev->state = *state;
    *ops = o;
    *state = st;
    pthread_mutex_unlock(&dev->lock);
}

// ---- runs -------------------------------------------------------------------------------------

struct prog_call {
    struct muse_device *dev;
    const struct muse_program *p;
    const struct muse_prog_run *run;
};

static void prog_region(int ith, int nth, void *ctx) {
    const struct prog_call *c = ctx;
    muse_program_region(c->p, c->run, c->dev->ws, c->dev->ops, c->dev->state, ith, nth);
}

void muse_device_run(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run) {
    pthread_mutex_lock(&dev->lock);
    MUSE_ASSERT(dev->state && p->workspace_floats <= dev->ws_floats && run->n_rows >= 1 &&
                run->n_rows <= p->n_batch && run->n_rows <= dev->plan.n_batch);
    struct prog_call c = {dev, p, run};
    dev->ops->parallel(dev->state, prog_region, &c);
    pthread_mutex_unlock(&dev->lock);
}

// ---- buffers ------------------------------------------------------------------------------------

muse_status muse_device_alloc(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err) {
    (void)dev; /* both CPU devices keep buffers in host memory */
    *out = NULL;
    struct muse_buffer *b = calloc(1, sizeof *b);
    if (b) b->data = calloc(1, bytes ? bytes : 1); /* calloc: untouched pages stay unmapped */
    if (!b || !b->data) {
        free(b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %zu MiB buffer", bytes >> 20);
    }
    b->size = bytes;
    *out = b;
    return MUSE_OK;
}

muse_status muse_device_alloc_lazy(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err) {
    (void)dev;
    *out = NULL;
    struct muse_buffer *b = calloc(1, sizeof *b);
    void *p = b ? mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of address space for a %zu MiB buffer", bytes >> 20);
    }
    b->data = p;
    b->size = bytes ? bytes : 1;
    b->mapped = true;
    *out = b;
    return MUSE_OK;
}

void muse_buffer_release(struct muse_buffer *b, size_t offset, size_t bytes) {
    if (!b || !b->mapped || offset >= b->size) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t lo = (offset + page - 1) / page * page, hi = offset + bytes < b->size ? offset + bytes : b->size;
    hi = hi / page * page;
    if (hi > lo) madvise((char *)b->data + lo, hi - lo, MADV_DONTNEED);
}

void *muse_buffer_host(struct muse_buffer *b) { return b->data; }

void muse_buffer_free(struct muse_buffer *b) {
    if (!b) return;
    if (b->mapped) munmap(b->data, b->size);
    else free(b->data);
    free(b);
}
