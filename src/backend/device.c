/* device.c - the process's devices (device.h): the registry, the kinds' table, buffers and runs.
 * The CPU kinds ("cpu", "ref": the interpreter of program.c on backend.h's ops) live here; other
 * kinds behind device_kind.h (src/backend/vulkan/). */
#include "backend/device.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_weights.h"
#include "backend/device_kind.h"
#include "core/assert.h"
#include "core/cpu.h"
#include "core/error.h"

struct muse_device {
    const struct muse_device_kind *kind;
    void *ks;                    /* the kind's state (the CPU kinds: the device itself) */
    int32_t n_threads;
    bool no_repack;
    /* the CPU kinds */
    const struct muse_backend_ops *ops;
    void *state;                 /* the backend's scratch and threads, for `plan` (NULL until reserved) */
    struct muse_backend_plan plan;
    float *ws;                   /* the workspace: the running program's activation buffers */
    size_t ws_floats;
    pthread_mutex_t lock;        /* held by a run (and by reserve) */
    int refs;                    /* under registry_lock */
    struct muse_device *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct muse_device *registry;

// ---- the CPU kinds ------------------------------------------------------------------------------

static muse_status cpu_reserve(void *ks, const struct muse_backend_plan *need, size_t workspace_floats,
                               struct muse_error *err) {
    struct muse_device *dev = ks;
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
        muse_status st = dev->ops->init(&p, &state, err);
        if (st) return st;
        if (dev->state) dev->ops->free(dev->state);
        dev->state = state;
        dev->plan = p;
    }
    if (workspace_floats > dev->ws_floats) {
        float *ws = aligned_alloc(64, workspace_floats * sizeof(float));
        if (!ws)
            return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %zu MiB workspace",
                                  (workspace_floats * sizeof(float)) >> 20);
        memset(ws, 0, workspace_floats * sizeof(float));
        free(dev->ws);
        dev->ws = ws;
        dev->ws_floats = workspace_floats;
    }
    return MUSE_OK;
}

static const struct muse_backend_plan *cpu_plan(void *ks) { return &((struct muse_device *)ks)->plan; }

struct prog_call {
    struct muse_device *dev;
    const struct muse_program *p;
    const struct muse_prog_run *run;
};

static void prog_region(int ith, int nth, void *ctx) {
    const struct prog_call *c = ctx;
    muse_program_region(c->p, c->run, c->dev->ws, c->dev->ops, c->dev->state, ith, nth);
}

static muse_status cpu_run(void *ks, const struct muse_program *p, const struct muse_prog_run *run,
                           struct muse_error *err) {
    struct muse_device *dev = ks;
    (void)err;
    MUSE_ASSERT(dev->state && p->workspace_floats <= dev->ws_floats && run->n_rows <= dev->plan.n_batch);
    struct prog_call c = {dev, p, run};
    dev->ops->parallel(dev->state, prog_region, &c);
    return MUSE_OK;
}

static muse_status cpu_check_kv(void *ks, enum muse_type type, struct muse_error *err) {
    (void)ks, (void)type, (void)err; /* every cache type muse_kv_cache_create takes */
    return MUSE_OK;
}

static muse_status cpu_prepare(void *ks, struct muse_program *p, struct muse_error *err) {
    const struct muse_device *dev = ks;
    if (dev->no_repack) return MUSE_OK;
    return muse_cpu_weights_prepare(muse_kernels_active(), p, err);
}

static void cpu_forget(void *ks, const struct muse_program *p) {
    (void)ks;
    muse_cpu_weights_forget(p);
}

static void cpu_stats(void *ks, struct muse_device_stats *s) {
    (void)ks;
    muse_cpu_weights_stats(&s->weight_bytes, &s->weight_uploads);
}

static const struct muse_device_kind kind_cpu = {
    .name = "cpu", .reserve = cpu_reserve, .plan = cpu_plan, .run = cpu_run, .check_kv = cpu_check_kv,
    .prepare = cpu_prepare, .forget = cpu_forget, .stats = cpu_stats,
};
static const struct muse_device_kind kind_ref = {
    .name = "ref", .reserve = cpu_reserve, .plan = cpu_plan, .run = cpu_run, .check_kv = cpu_check_kv,
};

/* The kinds, the default first. */
static const struct muse_device_kind *const kinds[] = {
    &kind_cpu,
    &kind_ref,
#ifdef MUSE_HAVE_VULKAN
    &muse_device_kind_vulkan,
#endif
};

static const struct muse_device_kind *kind_find(const char *name) {
    if (!strcmp(name, "auto")) { /* a library caller's "auto": resolved quietly (the CLI says which) */
        char why[300];
        name = muse_device_auto(why, sizeof why);
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

bool muse_device_kind_known(const char *name) { return !strcmp(name, "auto") || kind_find(name) || !strcmp(name, "vulkan"); }

bool muse_device_kind_built(const char *name) { return strcmp(name, "auto") && kind_find(name) != NULL; }

// ---- devices ------------------------------------------------------------------------------------

int32_t muse_device_threads(const char *name, int32_t n_threads) {
    const struct muse_device_kind *k = kind_find(name);
    if (!k) return 0;
    /* the oracle runs on one thread whatever is asked; the cpu device on every physical core by
     * default; a GPU kind uses one host thread to record and submit */
    if (k != &kind_cpu) return 1;
    if (n_threads <= 0) n_threads = muse_cpu_features()->n_physical;
    return n_threads < 1 ? 1 : n_threads;
}

muse_status muse_device_open(const char *name, int32_t n_threads, bool no_repack, struct muse_device **out,
                             struct muse_error *err) {
    *out = NULL;
    const struct muse_device_kind *kind = kind_find(name);
    if (!kind && !strcmp(name, "vulkan"))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "this muse was built without Vulkan (the build needs libvulkan-dev and glslc: "
                              "scripts/install-deps.sh, then make)");
    if (!kind) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "unknown backend '%s' (cpu, ref or vulkan)", name);
    n_threads = muse_device_threads(name, n_threads);
    if (kind->own_memory) no_repack = false;
    pthread_mutex_lock(&registry_lock);
    struct muse_device *d = registry;
    while (d && !(d->kind == kind && d->n_threads == n_threads && d->no_repack == no_repack)) d = d->next;
    muse_status st = MUSE_OK;
    if (d) {
        d->refs++;
    } else if ((d = calloc(1, sizeof *d))) {
        d->kind = kind;
        d->n_threads = d->plan.n_threads = n_threads;
        d->no_repack = d->plan.no_repack = no_repack;
        d->refs = 1;
        if (kind->open) { /* under the registry lock: two first users open one device */
            st = kind->open(n_threads, no_repack, &d->ks, err);
        } else {
            d->ks = d;
            d->ops = muse_backend_find(name);
        }
        if (st) {
            free(d);
            d = NULL;
        } else {
            pthread_mutex_init(&d->lock, NULL);
            d->next = registry;
            registry = d;
        }
    } else {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_unlock(&registry_lock);
    if (st) return st;
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
    if (dev->kind->close) dev->kind->close(dev->ks);
    if (dev->state) dev->ops->free(dev->state);
    free(dev->ws);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
}

const char *muse_device_name(const struct muse_device *dev) { return dev->kind->name; }
const char *muse_device_describe(const struct muse_device *dev) {
    return dev->kind->describe ? dev->kind->describe(dev->ks) : dev->kind->name;
}
int32_t muse_device_n_threads(const struct muse_device *dev) { return dev->n_threads; }
bool muse_device_own_memory(const struct muse_device *dev) { return dev->kind->own_memory; }

muse_status muse_device_reserve(struct muse_device *dev, const struct muse_backend_plan *need, size_t workspace_floats,
                                struct muse_error *err) {
    pthread_mutex_lock(&dev->lock);
    muse_status st = dev->kind->reserve(dev->ks, need, workspace_floats, err);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

const struct muse_backend_plan *muse_device_plan(const struct muse_device *dev) { return dev->kind->plan(dev->ks); }

void muse_device_swap_ops(struct muse_device *dev, const struct muse_backend_ops **ops, void **state) {
    MUSE_ASSERT(!dev->kind->own_memory);
    pthread_mutex_lock(&dev->lock);
    const struct muse_backend_ops *o = dev->ops;
    void *st = dev->state;
    dev->ops = *ops;
    dev->state = *state;
    *ops = o;
    *state = st;
    pthread_mutex_unlock(&dev->lock);
}

muse_status muse_device_prepare(struct muse_device *dev, struct muse_program *p, struct muse_error *err) {
    if (!dev->kind->prepare) return MUSE_OK;
    pthread_mutex_lock(&dev->lock);
    muse_status st = dev->kind->prepare(dev->ks, p, err);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

void muse_device_forget(struct muse_device *dev, const struct muse_program *p) {
    if (!dev || !dev->kind->forget) return;
    pthread_mutex_lock(&dev->lock);
    dev->kind->forget(dev->ks, p);
    pthread_mutex_unlock(&dev->lock);
}

muse_status muse_device_check_kv(struct muse_device *dev, enum muse_type type, struct muse_error *err) {
    return dev->kind->check_kv(dev->ks, type, err);
}

muse_status muse_device_exec(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run,
                             struct muse_error *err) {
    MUSE_ASSERT(run->n_rows >= 1 && run->n_rows <= p->n_batch);
    pthread_mutex_lock(&dev->lock);
    muse_status st = dev->kind->run(dev->ks, p, run, err);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

void muse_device_run(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run) {
    struct muse_error e = {0};
    const muse_status st = muse_device_exec(dev, p, run, &e);
    MUSE_ASSERT(st == MUSE_OK); /* the CPU kinds do not fail; other kinds' callers use muse_device_exec */
}

void muse_device_stats(struct muse_device *dev, struct muse_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (!dev->kind->stats) return;
    pthread_mutex_lock(&dev->lock);
    dev->kind->stats(dev->ks, out);
    pthread_mutex_unlock(&dev->lock);
}

const char *muse_device_auto(char *why, size_t size) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i]->gpu && kinds[i]->gpu(why, size)) return kinds[i]->name;
    if (sizeof kinds / sizeof kinds[0] == 2) snprintf(why, size, "this muse was built without Vulkan");
    return "cpu";
}

int muse_device_list(const char *name, char *buf, size_t size) {
    const struct muse_device_kind *k = kind_find(name);
    if (!k || !k->list) return -1;
    return k->list(buf, size);
}

// ---- buffers ------------------------------------------------------------------------------------

/* A kind with its own memory: the buffer's base is reserved address space that no host code touches. */
static muse_status device_alloc(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err) {
    struct muse_buffer *b = calloc(1, sizeof *b);
    if (!b) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    b->size = bytes ? bytes : 1;
    b->dev = dev;
    void *p = mmap(NULL, b->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of address space for a %zu MiB buffer", bytes >> 20);
    }
    b->base = p;
    pthread_mutex_lock(&dev->lock);
    muse_status st = dev->kind->alloc(dev->ks, b, err);
    pthread_mutex_unlock(&dev->lock);
    if (st) {
        munmap(p, b->size);
        free(b);
        return st;
    }
    *out = b;
    return MUSE_OK;
}

muse_status muse_device_alloc(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err) {
    *out = NULL;
    if (dev->kind->own_memory) return device_alloc(dev, bytes, out, err);
    struct muse_buffer *b = calloc(1, sizeof *b);
    if (b) b->host = calloc(1, bytes ? bytes : 1); /* calloc: untouched pages stay unmapped */
    if (!b || !b->host) {
        free(b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %zu MiB buffer", bytes >> 20);
    }
    b->base = b->host;
    b->size = bytes;
    b->dev = dev;
    *out = b;
    return MUSE_OK;
}

muse_status muse_device_alloc_lazy(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err) {
    *out = NULL;
    if (dev->kind->own_memory) return device_alloc(dev, bytes, out, err); /* committed (zeroed) whole */
    struct muse_buffer *b = calloc(1, sizeof *b);
    void *p = b ? mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of address space for a %zu MiB buffer", bytes >> 20);
    }
    b->host = b->base = p;
    b->size = bytes ? bytes : 1;
    b->mapped = true;
    b->dev = dev;
    *out = b;
    return MUSE_OK;
}

void muse_buffer_release(struct muse_buffer *b, size_t offset, size_t bytes) {
    if (!b || offset >= b->size) return;
    if (b->dev->kind->own_memory) { /* device memory stays committed: it reads as zero again */
        const size_t n = bytes < b->size - offset ? bytes : b->size - offset;
        muse_buffer_zero(b, offset, n);
        return;
    }
    if (!b->mapped) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t lo = (offset + page - 1) / page * page, hi = offset + bytes < b->size ? offset + bytes : b->size;
    hi = hi / page * page;
    if (hi > lo) madvise((char *)b->host + lo, hi - lo, MADV_DONTNEED);
}

void *muse_buffer_host(struct muse_buffer *b) { return b->host; }
void *muse_buffer_base(struct muse_buffer *b) { return b->base; }

void muse_buffer_zero(struct muse_buffer *b, size_t off, size_t bytes) {
    MUSE_ASSERT(off + bytes <= b->size || bytes == 0);
    if (!bytes) return;
    if (b->host) {
        memset((char *)b->host + off, 0, bytes);
        return;
    }
    pthread_mutex_lock(&b->dev->lock);
    b->dev->kind->buffer_zero(b->dev->ks, b, off, bytes);
    pthread_mutex_unlock(&b->dev->lock);
}

void muse_buffer_read(struct muse_buffer *b, size_t off, void *dst, size_t bytes) {
    MUSE_ASSERT(off + bytes <= b->size || bytes == 0);
    if (!bytes) return;
    if (b->host) {
        memcpy(dst, (const char *)b->host + off, bytes);
        return;
    }
    pthread_mutex_lock(&b->dev->lock);
    b->dev->kind->buffer_read(b->dev->ks, b, off, dst, bytes);
    pthread_mutex_unlock(&b->dev->lock);
}

void muse_buffer_write(struct muse_buffer *b, size_t off, const void *src, size_t bytes) {
    MUSE_ASSERT(off + bytes <= b->size || bytes == 0);
    if (!bytes) return;
    if (b->host) {
        memcpy((char *)b->host + off, src, bytes);
        return;
    }
    pthread_mutex_lock(&b->dev->lock);
    b->dev->kind->buffer_write(b->dev->ks, b, off, src, bytes);
    pthread_mutex_unlock(&b->dev->lock);
}

void muse_buffer_free(struct muse_buffer *b) {
    if (!b) return;
    if (b->dev && b->dev->kind->own_memory) {
        pthread_mutex_lock(&b->dev->lock);
        b->dev->kind->buffer_free(b->dev->ks, b);
        pthread_mutex_unlock(&b->dev->lock);
        munmap(b->base, b->size);
    } else if (b->mapped) {
        munmap(b->host, b->size);
    } else {
        free(b->host);
    }
    free(b);
}
