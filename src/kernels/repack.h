/*
 * repack.h - weight rows interleaved by 8 for the fast CPU decode (issue 34: ik_llama.cpp's
 * run-time repack, llama.cpp's CPU_REPACK buffers). A group of 8 consecutive rows becomes one
 * run of struct muse_block_r8x4 (blocks.h; the other types' forms below), block after block: the
 * 8 scales of a block in one load, and the code bytes of the 8 rows arranged so that one 32-byte
 * vector holds 4 bytes of each row, lane r = row r. A kernel then works on 8 rows at once with no horizontal sums, and
 * the 8 rows are one stream. The copy has the size of the rows it came from: group g of a matrix
 * starts at g * 8 * row_size, so a view of rows i0.. (i0 a multiple of 8) is the copy plus
 * i0 * row_size, as on the original.
 * Only the fast tables use it (kernels.h gemm_r8): exact mode keeps ggml's order on the rows.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/tensor_type.h"

/* Whether rows of `type` have an interleaved-by-8 form (Q4_0, IQ4_NL: struct muse_block_r8x4;
 * Q8_0: struct muse_block_r8x8; IQ4_XS: struct muse_block_iq4_xs_r8; Q4_K: struct
 * muse_block_q4_K_r8, blocks.h). */
bool muse_repack_r8_type(enum muse_type type);

/* n_groups groups of 8 rows (row_size bytes each, row r at src + r * row_size; the rows of a
 * supported type) into dst (n_groups * 8 * row_size bytes). */
void muse_repack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst);
/* The inverse: n_groups groups at src back into 8 * n_groups rows at dst (row_size bytes apart). */
void muse_unpack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst);
