/*
 * gemm_fp4_avx2.c - AVX2 matrix kernels for MXFP4 with Q8_0 activations, in the order in force for
 * the type: ggml's generic one (vec_dot_ref, quant_legacy.c; muse has no x86 variant):
 *     per block:  d = d_a * 2^(e-128) (E8M0 "half" form), sumf += d * (float)sumi   (scalar)
 * with sumi the exact integer sum of the codebook values (2 * E2M1, |v| <= 12) times the
 * activations. 8 blocks at a time: maddubs/madd (|v| x a with v's sign) give 8 int32 lanes per
 * block, one horizontal reduction one lane per block, the 8 terms are computed as vectors (the
 * same single roundings) and added to sumf in block order; the last nb % 8 blocks one at a time.
 *
 * Shape: activation rows in groups of up to 8; the codes of 8 blocks are looked up once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

/* The E8M0 "half" scales (muse_e8m0_half) of 8 consecutive MXFP4 blocks. */
MUSE_AVX2_INLINE __m256 e8m0_half8(const struct muse_block_mxfp4 *b) {
    const __m256i off = _mm256_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119);
    const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32((const int *)(const void *)b, off, 1), _mm256_set1_epi32(255));
    /* e < 2: 0x00200000 << e (subnormal), else (e - 1) << 23 */
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(nrm, sub, small));
}

/* The fp16 scales of 8 consecutive Q8_0 blocks as floats. */
MUSE_AVX2_INLINE __m256 q8_0_d8(const struct muse_block_q8_0 *a) {
    const __m256i off = _mm256_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238);
    const __m256i v = _mm256_i32gather_epi32((const int *)(const void *)a, off, 1);
    const __m256i lo = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                                               0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(lo, 0x08)));
}

MUSE_AVX2_INLINE void mxfp4_row(int64_t nb, const struct muse_block_mxfp4 *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_mxfp4));
    int64_t ib0 = 0;
    for (; ib0 + 8 <= nb; ib0 += 8) {
        __m256i wv[8], wa[8];
        MUSE_UNROLL
        for (int k = 0; k < 8; k++) {
            wv[k] = _mm256_shuffle_epi8(kv, avx2_nibbles_16(w[ib0 + k].qs));
            wa[k] = _mm256_sign_epi8(wv[k], wv[k]);
        }
        const __m256 dw = e8m0_half8(&w[ib0]);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + ib0;
            __m256i p[8];
            MUSE_UNROLL
            for (int k = 0; k < 8; k++)
                p[k] = avx2_dot_u8i8(wa[k], _mm256_sign_epi8(avx2_load(a[k].qs), wv[k]));
            const __m256 d = _mm256_mul_ps(q8_0_d8(a), dw);
            sumf[r] = avx2_lanes_total(sumf[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(avx2_reduce8x8_epi32(p))));
        }
    }
    for (; ib0 < nb; ib0++) {
        const __m256i wv = _mm256_shuffle_epi8(kv, avx2_nibbles_16(w[ib0].qs));
        const __m256i wa = _mm256_sign_epi8(wv, wv);
        const float dw = muse_e8m0_half(w[ib0].e);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + ib0;
            const int32_t sumi =
                avx2_hsum_epi32(avx2_dot_u8i8(wa, _mm256_sign_epi8(avx2_load(a->qs), wv)));
            const float d = avx2_h2f(a->d) * dw;
            sumf[r] += d * (float)sumi;
        }
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

MUSE_AVX2_ROWWISE_GEMM(mxfp4, 32, NY_MAX)
