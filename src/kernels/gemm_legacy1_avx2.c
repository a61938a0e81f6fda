/*
 * gemm_legacy1_avx2.c - AVX2 matrix kernels for Q4_1 and Q5_1 with Q8_1 activations, in the order
 * in force for these types: ggml's generic one (vec_dot_ref, quant_legacy.c; muse has no x86
 * variant for them):
 *     per block:  sumf += (d_w * d_a) * (float)sumi + m_w * s_a      (scalar, in that order)
 * with sumi the exact integer sum of the unsigned codes times the activations. The kernels take
 * 8 blocks at a time: maddubs/madd give 8 int32 lanes per block, one horizontal reduction turns
 * them into one lane per block, the float terms of the 8 blocks are computed as vectors (the
 * same single roundings; the fp16 scales of 8 blocks fetched with one gather) and added to sumf
 * in block order (avx2_lanes_total); the last nb % 8 blocks one at a time.
 * maddubs cannot saturate: codes <= 31, |a| <= 127.
 *
 * Shape: activation rows in groups of up to 8; the codes of 8 blocks are unpacked once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

MUSE_AVX2_INLINE __m256i q4_1_codes(const struct muse_block_q4_1 *b) { return avx2_nibbles_16(b->qs); }

MUSE_AVX2_INLINE __m256i q5_1_codes(const struct muse_block_q5_1 *b) { return avx2_q5_codes(b->qs, b->qh); }

/* The two fp16 fields at byte offsets 0 and 2 of 8 consecutive blocks (stride bytes apart) as
 * floats: *lo from offset 0, *hi from offset 2. */
MUSE_AVX2_INLINE void halves8(const void *p, int stride, __m256 *lo, __m256 *hi) {
    const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
    const __m256i v = _mm256_i32gather_epi32((const int *)p, off, 1);
    /* per 128-bit half: low u16 of each u32 in bytes 0-7, high u16 in bytes 8-15 */
    const __m256i s = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                                              0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    const __m256i j = _mm256_permute4x64_epi64(s, 0xd8); /* lo0 lo1 | hi0 hi1 */
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(j));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(j, 1));
}

/* The float terms of 8 blocks: (d_w * d_a) * (float)sumi + m_w * s_a. */
MUSE_AVX2_INLINE __m256 legacy1_terms(__m256 dw, __m256 mw, const struct muse_block_q8_1 *a, const __m256i p[8]) {
    __m256 da, sa;
    halves8(a, (int)sizeof(struct muse_block_q8_1), &da, &sa);
    return _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(avx2_reduce8x8_epi32(p))), _mm256_mul_ps(mw, sa));
}

#define LEGACY1_ROW(BLOCK)                                                                                   \
    MUSE_AVX2_INLINE void BLOCK##_row(int64_t nb, const struct muse_block_##BLOCK *w, const char *act,        \
                                      size_t act_stride, const int ny, float *out, int64_t out_stride) {      \
        float sumf[NY_MAX];                                                                                  \
        MUSE_UNROLL                                                                                          \
        for (int r = 0; r < ny; r++) sumf[r] = 0.0f;                                                         \
        int64_t ib0 = 0;                                                                                     \
        for (; ib0 + 8 <= nb; ib0 += 8) {                                                                    \
            __m256i wq[8];                                                                                   \
            MUSE_UNROLL                                                                                      \
            for (int k = 0; k < 8; k++) wq[k] = BLOCK##_codes(&w[ib0 + k]);                                  \
            __m256 dw, mw;                                                                                   \
            halves8(&w[ib0], (int)sizeof(w[0]), &dw, &mw);                                                   \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_1 *a = (const struct muse_block_q8_1 *)(const void *)(act + r * act_stride) + ib0; \
                __m256i p[8];                                                                                \
                MUSE_UNROLL                                                                                  \
                for (int k = 0; k < 8; k++)                                                                  \
                    p[k] = avx2_dot_u8i8(wq[k], avx2_load(a[k].qs));         \
                sumf[r] = avx2_lanes_total(sumf[r], legacy1_terms(dw, mw, a, p));                            \
            }                                                                                                \
        }                                                                                                    \
        /* the last nb % 8 blocks, one at a time: the same float operations */                             \
        for (; ib0 < nb; ib0++) {                                                                            \
            const __m256i wq = BLOCK##_codes(&w[ib0]);                                                       \
            const float dw = avx2_h2f(w[ib0].d), mw = avx2_h2f(w[ib0].m);                                    \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_1 *a = (const struct muse_block_q8_1 *)(const void *)(act + r * act_stride) + ib0; \
                const int32_t sumi = avx2_hsum_epi32(avx2_dot_u8i8(wq, avx2_load(a->qs))); \
                sumf[r] += (dw * avx2_h2f(a->d)) * (float)sumi + mw * avx2_h2f(a->s);                        \
            }                                                                                                \
        }                                                                                                    \
        MUSE_UNROLL                                                                                          \
        for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];                                          \
    }

LEGACY1_ROW(q4_1)
LEGACY1_ROW(q5_1)
MUSE_AVX2_ROWWISE_GEMM(q4_1, 32, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(q5_1, 32, NY_MAX)
