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
 * Kinds: "cpu" (the default: a thread pool and the SIMD kernels, backend_cpu.c) and "ref" (the
 * plain-C oracle, one thread, backend_ref.c). Both interpret programs with muse_program_region
 * on the backend ops of backend.h, which are the CPU devices' inside, not the seam. Weights: the
 * CPU devices read the mapped GGUF in place (no upload); a device with its own memory uploads
 * them once at load. Synchronization: runs are synchronous on the CPU devices.
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
 * p->workspace_floats first). Returns when the outputs are written. */
void muse_device_run(struct muse_device *dev, const struct muse_program *p, const struct muse_prog_run *run);

/* The sizes the device's scratch covers now (n_threads: its threads). */
const struct muse_backend_plan *muse_device_plan(const struct muse_device *dev);

/* Tests that check the CPU devices op by op: run on *ops / *state from now on, and get the
 * device's previous pair back in their place (swap again to restore). Not while a run is in flight. */
void muse_device_swap_ops(struct muse_device *dev, const struct muse_backend_ops **ops, void **state);

/*
 * A zeroed buffer of `bytes` owned by the device (KV storage). Pages a CPU device never writes
 * cost nothing. Errors: NOMEM. muse_buffer_host: the host view (every CPU device has one).
 */
muse_status muse_device_alloc(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err);
void *muse_buffer_host(struct muse_buffer *b);
void muse_buffer_free(struct muse_buffer *b);
/*
 * A buffer whose memory is taken as it is written (paged KV caches): address space is reserved,
 * pages are zero and cost nothing until touched; muse_buffer_release gives pages back (they read
 * as zero again). Errors: NOMEM (no address space).
 */
muse_status muse_device_alloc_lazy(struct muse_device *dev, size_t bytes, struct muse_buffer **out, struct muse_error *err);
/* Give back the whole pages inside [offset, offset + bytes) of a reserved buffer: they read as
 * zero afterwards. A no-op for other buffers (muse_device_alloc). */
void muse_buffer_release(struct muse_buffer *b, size_t offset, size_t bytes);

