/*
 * cpu_weights.h - the cpu device's copies of weights in the layouts its fast kernels read (for now
 * the rows interleaved by 8 of kernels/repack.h, for the decode of Q4_0, IQ4_NL and Q8_0). Made when a
 * program is prepared on the cpu device (not with --no-repack, not in exact mode), shared by every
 * program that reads the same rows (the contexts of one model), reference-counted and freed with
 * the last of them. The cpu backend then reads only the copy (decode and small batches with the
 * interleaved kernels, the tile GEMM from rows unpacked per call), so the whole pages of the
 * original are paged out of the process (MADV_PAGEOUT): memory stays about the file's size. Other
 * readers (the ref device, --no-repack, exact mode) read the original, which comes back from the
 * file.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/program.h"
#include "core/error.h"
#include "kernels/kernels.h"

/* Set p's matmul weights' r8 (backend.h muse_weight) for the types k has a gemm_r8 for, making the
 * copies this process does not hold yet. A copy that cannot be allocated is skipped (that weight
 * keeps the plain kernels); never fails otherwise. */
muse_status muse_cpu_weights_prepare(const struct muse_kernels *k, struct muse_program *p, struct muse_error *err);
/* Drop p's references (the copies no program reads any more are freed). */
void muse_cpu_weights_forget(const struct muse_program *p);
/* Bytes of the copies held now, in the process, and how many copies were made since it started. */
void muse_cpu_weights_stats(uint64_t *bytes, uint64_t *made);
