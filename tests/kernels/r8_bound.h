/*
 * r8_bound.h - what the tests of the decode of rows interleaved by 8 (kernels.h muse_gemm_r8_fn:
 * test_gemm_r8, tests/model/test_tile_forward) bound its outputs with: muse_r8_bound(nb, T), T the
 * sum over the blocks of |d_w d_a| times the sum of |w_j a_j| (w_j the integer codes: Q4_0 nibble -
 * 8, IQ4_NL the codebook value, Q8_0 the code; a_j the Q8_0 activation codes). Static: include from one test each.
 */
#pragma once

#include <math.h>
#include <stdlib.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/quant_tables.h"
#include "kernels/types.h"

static inline double r8_bound(enum muse_type type, int64_t ne0, const void *wrow, const void *qrow) {
    const struct muse_block_q4_0 *w = wrow; /* IQ4_NL: the same fields */
    const struct muse_block_q8_0 *w8 = wrow, *a = qrow;
    double t = 0;
    for (int64_t ib = 0; ib < ne0 / 32; ib++) {
        long s = 0;
        for (int j = 0; j < 32; j++) {
            const int nib = j < 16 ? w[ib].qs[j] & 15 : w[ib].qs[j - 16] >> 4;
            const int c = type == MUSE_TYPE_Q8_0 ? w8[ib].qs[j] : type == MUSE_TYPE_Q4_0 ? nib - 8 : muse_kvalues_iq4nl[nib];
            s += labs((long)c * a[ib].qs[j]);
        }
        const uint16_t dw = type == MUSE_TYPE_Q8_0 ? w8[ib].d : w[ib].d;
        t += fabs((double)muse_fp16_to_fp32(dw) * muse_fp16_to_fp32(a[ib].d)) * (double)s;
    }
    return muse_r8_bound(ne0 / 32, t);
}
