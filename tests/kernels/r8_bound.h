/*
 * r8_bound.h - what the tests of the decode of rows interleaved by 8 (kernels.h muse_gemm_r8_fn:
 * test_gemm_r8, tests/model/test_tile_forward) bound its outputs with: muse_r8_bound(nb, T), T the
 * sum over the blocks of |d_w d_a| times the sum of |w_j a_j| (w_j the integer codes: Q4_0 nibble -
 * 8, IQ4_NL the codebook value, Q8_0 the code; a_j the Q8_0 activation codes; IQ4_XS: the super-blocks,
 * each sub-block's sum times |its scale|, against Q8_K; Q4_K: the same with its mins' term). Static: include from one test each.
 */
#pragma once

#include <math.h>
#include <stdlib.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/quant_tables.h"
#include "kernels/types.h"

/* IQ4_XS against Q8_K: per super-block |d_w d_a| times the sum over its sub-blocks of |ls - 32|
 * times the sum of |value_j a_j| */
static inline double r8_bound_iq4_xs(int64_t ne0, const struct muse_block_iq4_xs *w, const struct muse_block_q8_K *a) {
    double t = 0;
    for (int64_t ib = 0; ib < ne0 / 256; ib++) {
        long s = 0;
        for (int g = 0; g < 8; g++) {
            const int ls = (((w[ib].scales_l[g / 2] >> 4 * (g % 2)) & 15) | (((w[ib].scales_h >> 2 * g) & 3) << 4)) - 32;
            long sg = 0;
            for (int j = 0; j < 32; j++) {
                const uint8_t q = w[ib].qs[16 * g + j % 16];
                sg += labs((long)muse_kvalues_iq4nl[j < 16 ? q & 15 : q >> 4] * a[ib].qs[32 * g + j]);
            }
            s += labs((long)ls) * sg;
        }
        t += fabs((double)muse_fp16_to_fp32(w[ib].d) * a[ib].d) * (double)s;
    }
    return muse_r8_bound(ne0 / 256, t);
}

/* Q4_K against Q8_K: per super-block |d_w d_a| times the sum over its sub-blocks of sc_j times the
 * sum of |code_j a_j|, plus |dmin_w d_a| times the sum of m_j |sum of a over sub-block j|; two
 * chains of nb FMAs added at the end */
static inline double r8_bound_q4_K(int64_t ne0, const struct muse_block_q4_K *w, const struct muse_block_q8_K *a) {
    double t = 0;
    for (int64_t ib = 0; ib < ne0 / 256; ib++) {
        const uint8_t *S = w[ib].scales;
        long s = 0, sm = 0;
        for (int j = 0; j < 8; j++) {
            const int sc = j < 4 ? S[j] & 63 : (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4);
            const int m = j < 4 ? S[j + 4] & 63 : (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
            long sj = 0, bj = 0;
            for (int e = 0; e < 32; e++) {
                const int el = 32 * j + e, q = w[ib].qs[32 * (el / 64) + e] >> (4 * (j % 2)) & 15;
                sj += labs((long)q * a[ib].qs[el]);
                bj += a[ib].qs[el];
            }
            s += sc * sj;
            sm += m * labs(bj);
        }
        t += fabs((double)muse_fp16_to_fp32(w[ib].d) * a[ib].d) * (double)s +
             fabs((double)muse_fp16_to_fp32(w[ib].dmin) * a[ib].d) * (double)sm;
    }
    return muse_r8_bound(ne0 / 256 + 1, t);
}

static inline double r8_bound(enum muse_type type, int64_t ne0, const void *wrow, const void *qrow) {
    if (type == MUSE_TYPE_IQ4_XS) return r8_bound_iq4_xs(ne0, wrow, qrow);
    if (type == MUSE_TYPE_Q4_K) return r8_bound_q4_K(ne0, wrow, qrow);
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
