/*
 * device_kind.h - what a device kind implements behind device.h (internal to src/backend).
 *
 * device.c keeps a small table of kinds: "cpu" and "ref" (the CPU interpreter of program.c on
 * the backend ops of backend.h, implemented in device.c itself) and, when the build found the
 * Vulkan loader's headers and glslc, "vulkan" (src/backend/vulkan/). device.c owns the registry,
 * the reference counts, the lock that serializes runs and struct muse_buffer; a kind owns its
 * state (`ks`) and whatever a buffer is on its side (`handle`).
 *
 * Buffers of a kind with its own memory (own_memory) have no host view: their `base` is an
 * address reserved for the buffer (PROT_NONE, never dereferenced; see device.h
 * muse_buffer_base), so that code that lays arrays out inside a buffer (the KV cache's layer
 * arrays) keeps computing pointers, and the kind maps base + offset back to (buffer, offset)
 * when a run binds them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"

struct muse_buffer {
    void *host;         /* the host view (CPU kinds), NULL on a kind with its own memory */
    void *base;         /* host, or the reserved address the kind resolves */
    size_t size;
    bool mapped;        /* CPU kinds, muse_device_alloc_lazy: an anonymous mapping (munmap, madvise) */
    void *handle;       /* the kind's side of the buffer */
    struct muse_device *dev;
};

struct muse_device_kind {
    const char *name;
    bool own_memory;    /* buffers are device memory; programs must be prepared (weights uploaded) */
    /* the kind's state for a device (n_threads as muse_device_threads resolved it) */
    muse_status (*open)(int32_t n_threads, bool no_repack, void **ks, struct muse_error *err);
    void (*close)(void *ks);
    muse_status (*reserve)(void *ks, const struct muse_backend_plan *need, size_t workspace_floats,
                           struct muse_error *err);
    const struct muse_backend_plan *(*plan)(void *ks);
    /* own_memory kinds: check p's ops and types, upload its weights; the cpu kind: the copies of
     * its weights in the fast kernels' layouts (cpu_weights.h; it sets their r8); forget drops that */
    muse_status (*prepare)(void *ks, struct muse_program *p, struct muse_error *err);
    void (*forget)(void *ks, const struct muse_program *p);
    muse_status (*run)(void *ks, const struct muse_program *p, const struct muse_prog_run *run,
                       struct muse_error *err);
    muse_status (*check_kv)(void *ks, enum muse_type type, struct muse_error *err);
    /* own_memory kinds: a zeroed device buffer (b->size set; the kind sets handle) */
    muse_status (*alloc)(void *ks, struct muse_buffer *b, struct muse_error *err);
    void (*buffer_free)(void *ks, struct muse_buffer *b);
    void (*buffer_zero)(void *ks, struct muse_buffer *b, size_t off, size_t bytes);
    void (*buffer_read)(void *ks, struct muse_buffer *b, size_t off, void *dst, size_t bytes);
    void (*buffer_write)(void *ks, struct muse_buffer *b, size_t off, const void *src, size_t bytes);
    /* a line per physical device for `muse info --devices` (NULL: the kind has none to list) */
    int (*list)(char *buf, size_t size);
    /* what the device holds (NULL: nothing of its own; device.c zeroes *s first) */
    void (*stats)(void *ks, struct muse_device_stats *s);
    /* --backend auto: whether the machine has a GPU of this kind (a discrete or integrated device;
     * a CPU implementation such as lavapipe does not count), its name or why not into buf */
    bool (*gpu)(char *buf, size_t size);
    /* the device's name for messages (NULL: the kind's name) */
    const char *(*describe)(void *ks);
};

#ifdef MUSE_HAVE_VULKAN
extern const struct muse_device_kind muse_device_kind_vulkan;
#endif
