/*
 * device.h - the device: what runs a network. It owns its buffers (the KV storage of every
 * sequence, one workspace for the activations of whatever program runs, and - on a device with
 * memory of its own - the weights) and runs programs of layer ops (program.h) over a batch of rows
 * from one or more sequences.
 *
 * One device per (kind, thread count, tile GEMM on/off) per process: muse_device_open returns the
 * same object to every caller that asks for it (the text context and every server slot, the
 * vision tower, the DFlash drafter), counting references. A run holds the device for its
 * duration: callers on several threads take turns, one program at a time, on one thread pool and
 * one workspace. Nothing is allocated per run.
 *
 * Kinds (device_kind.h: a small table in device.c, one entry per kind): "cpu" (the default: a
 * thread pool and the SIMD kernels, backend_cpu.c) and "ref" (the plain-C oracle, one thread,
 * backend_ref.c) interpret programs with muse_program_region on the backend ops of backend.h,
 * which are the CPU devices' inside, not the seam; they read the mapped GGUF in place and their
 * runs are synchronous. "vulkan" (src/backend/vulkan/, docs/vulkan.md; built when the build
 * finds the Vulkan headers and glslc) has memory of its own and runs a program itself, a shader
 * dispatch per op: muse_device_prepare uploads a program's weights once (and refuses an op or
 * weight type it has no shader for), and only the run's outputs come back to the host.
 *
 * Buffers. A CPU device's buffer is host memory: muse_buffer_host is its view and
 * muse_buffer_base the same address. A buffer of a device with its own memory has no host view
 * (muse_buffer_host is NULL); its base is an address range reserved for it and never mapped
 * (PROT_NONE), so code that lays arrays out in a buffer keeps its pointer arithmetic (the KV
 * cache's muse_kv_layer k / v point to base + offset) and the device resolves such a pointer to
 * (its buffer, offset) when a run binds it. Host code touches such a buffer only through
 * muse_buffer_zero / _read / _write.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/program.h"
#include "muse.h"

struct muse_device;
struct muse_buffer;

/*
 * The device of kind `name` with n_threads threads (0: the kind's default - every physical core
 * for "cpu"; "ref" always runs on 1) and no_repack (the cpu device without the tile GEMM's packed panels).
 * Errors: INVALID_ARG (unknown kind; the message lists the known ones). Release with
 * muse_device_close.
 */
muse_status muse_device_open(const char *name, int32_t n_threads, bool no_repack, struct muse_device **out,
                             struct muse_error *err);
void muse_device_close(struct muse_device *dev);
/* What muse_device_open resolves n_threads to for kind `name` (0: unknown kind). */
int32_t muse_device_threads(const char *name, int32_t n_threads);

const char *muse_device_name(const struct muse_device *dev);
int32_t muse_device_n_threads(const struct muse_device *dev);

/*
 * Grow the device's scratch so that it covers `need` (n_threads is the device's) and its
 * workspace to at least workspace_floats floats; shrinks nothing. Takes the device (waits for a
 * run in flight). Errors: NOMEM (the old scratch is kept).
 */
muse_status muse_device_reserve(struct muse_device *dev, const struct muse_backend_plan *need, size_t workspace_floats,
                                struct muse_error *err);

/* Run program p over the batch `run` (the device's workspace holds its buffers: reserve
 * p->workspace_floats first). Returns when the outputs are written. Errors (devices with their
 * own memory only; the CPU kinds never fail): UNSUPPORTED (a run binds what the device does not
 * do, e.g. the layer trace hooks), IO (the device was lost or a submission failed; the outputs
 * are not written), NOMEM. */
muse_status muse_device_exec(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run,
                             struct muse_error *err);
/* muse_device_exec for callers that run only on the CPU kinds (asserts success). */
void muse_device_run(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run);

/* Get program p ready to run on dev: on a device with its own memory, check every op and weight
 * type against the shaders it has (UNSUPPORTED names the first it lacks) and upload the weights
 * it reads, once (NOMEM: out of device memory, with the sizes). On the cpu device (not with
 * no_repack, not in exact mode): the copies of its Q4_0 / IQ4_NL / Q8_0 weights interleaved by 8 for
 * the decode kernels (cpu_weights.h), set in p's jobs; a no-op on "ref". A program that is run
 * without being prepared runs, on the plain kernels.
 * muse_device_forget drops what prepare made (call it before freeing p). */
muse_status muse_device_prepare(struct muse_device *dev, struct muse_program *p, struct muse_error *err);
void muse_device_forget(struct muse_device *dev, const struct muse_program *p);
/* Whether the device keeps KV caches of `type` (UNSUPPORTED otherwise, with the types it keeps). */
muse_status muse_device_check_kv(struct muse_device *dev, enum muse_type type, struct muse_error *err);
/* Whether dev has memory of its own (buffers without a host view; programs must be prepared). */
bool muse_device_own_memory(const struct muse_device *dev);
/* The device as messages name it ("cpu", or the GPU's name for "vulkan"). */
const char *muse_device_describe(const struct muse_device *dev);
/* Whether `name` is a kind muse knows (cpu, ref, vulkan) / one this build has. */
bool muse_device_kind_known(const char *name);
bool muse_device_kind_built(const char *name);
/* --backend auto: "vulkan" when the build has it and the machine has a discrete or integrated GPU
 * (a CPU driver such as lavapipe does not count), else "cpu"; what was found (the GPU's name, or
 * why none) into why. Opens and closes a Vulkan instance (tens of ms); opens no device. */
const char *muse_device_auto(char *why, size_t size);
/* The physical devices of kind `name`, a line each, into buf (muse info --devices). Returns their
 * count, or -1 when the kind lists none (not built, or a CPU kind); 0 with a line saying why in
 * buf when the kind is there but finds no device. */
int muse_device_list(const char *name, char *buf, size_t size);

/* What a device with its own memory holds: the weights resident on it (bytes, shared by every
 * prepared program that reads them: the contexts of one model upload once) and how many weight
 * uploads it has made since it was opened (a prepare that finds all its weights resident makes
 * none). The cpu kind: the bytes of the interleaved weight copies the process holds (cpu_weights.h)
 * and the number of copies made; zeros on "ref". */
struct muse_device_stats {
    uint64_t weight_bytes;
    uint64_t weight_uploads;
    uint64_t decode_records;    /* decode steps recorded into the persistent command buffer */
    uint64_t decode_replays;    /* decode steps that replayed it */
};
void muse_device_stats(struct muse_device *dev, struct muse_device_stats *out);

/* The sizes the device's scratch covers now (n_threads: its threads). */
const struct muse_backend_plan *muse_device_plan(const struct muse_device *dev);

/* Tests that check the CPU devices op by op: run on *ops / *state from now on, and get the
 * device's previous pair back in their place (swap again to restore). Not while a run is in flight. */
void muse_device_swap_ops(struct muse_device *dev, const struct muse_backend_ops **ops, void **state);

/*
 * A zeroed buffer of `bytes` owned by the device (KV storage). Pages a CPU device never writes
 * cost nothing. Errors: NOMEM. muse_buffer_host: the host view (every CPU device has one; NULL on
 * a device with its own memory). muse_buffer_base: the address offsets into the buffer count
 * from (the host view, or the reserved range above).
 */
muse_status muse_device_alloc(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err);
void *muse_buffer_host(struct muse_buffer *b);
void *muse_buffer_base(struct muse_buffer *b);
/* Zero / read / write bytes [off, off + bytes) of b, on any device (synchronous). */
void muse_buffer_zero(struct muse_buffer *b, size_t off, size_t bytes);
void muse_buffer_read(struct muse_buffer *b, size_t off, void *dst, size_t bytes);
void muse_buffer_write(struct muse_buffer *b, size_t off, const void *src, size_t bytes);
void muse_buffer_free(struct muse_buffer *b);
/*
 * A buffer whose memory is taken as it is written (paged KV caches): address space is reserved,
 * pages are zero and cost nothing until touched; muse_buffer_release gives pages back (they read
 * as zero again). Errors: NOMEM (no address space).
 */
muse_status muse_device_alloc_lazy(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err);
/* Give back the whole pages inside [offset, offset + bytes) of a reserved buffer: they read as
 * zero afterwards. A no-op for other buffers (muse_device_alloc). On a device with its own
 * memory a lazy buffer is committed whole, and release zeroes the range. */
void muse_buffer_release(struct muse_buffer *b, size_t offset, size_t bytes);

