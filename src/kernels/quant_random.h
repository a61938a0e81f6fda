/*
 * quant_random.h - random but valid rows of any tensor type, for synthetic models, tests and
 * benchmarks (kernels floor; uses the block layouts of blocks.h).
 */
#pragma once

#include <stdint.h>

#include "gguf/tensor_type.h"

/*
 * Write n elements of `type` to dst (n a multiple of the block size; dst holds
 * muse_type_row_size(type, n) bytes). Quantized types get random codes and valid scale fields
 * (redundant fields such as Q8_1's s and Q8_K's bsums are made consistent) chosen so that the
 * dequantized values have a root-mean-square of roughly `scale` (within a factor of about 1.5;
 * MXFP4's power-of-two scale and NVFP4's 3-bit mantissa make those two coarser). F32, F16,
 * BF16 and F64 get normal-ish values (Irwin-Hall of 4 uniforms) with standard deviation
 * `scale`; I8..I64 get random integers (scale ignored).
 * Deterministic: the same *rng_state, type and n give the same bytes; *rng_state is advanced
 * (any value is a valid state, including 0). No allocation, thread-safe for distinct states.
 * Fast: a few ns per element, meant to stream multi-GB files.
 * Unknown or removed type ids write nothing.
 */
void muse_quant_random_row(enum muse_type type, void *dst, int64_t n, uint64_t *rng_state, float scale);
