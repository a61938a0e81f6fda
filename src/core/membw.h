/*
 * membw.h - memory-read bandwidth probe: the denominator of the decode roofline
 * (bytes of weights read per token / read bandwidth).
 */
#pragma once

#include <stddef.h>

#include "core/threadpool.h"

/*
 * Read `size` bytes at buf (every thread of `pool` reads a contiguous share with 16-byte loads),
 * `reps` times, and return the best observed bandwidth in bytes per second (0 on a zero size).
 * The buffer should be much larger than the last-level cache. Thread-safety: uses the pool for
 * one region per repeat (not reentrant on the same pool).
 */
double muse_membw_read(struct muse_threadpool *pool, const void *buf, size_t size, int reps);
