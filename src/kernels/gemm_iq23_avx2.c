/*
 * gemm_iq23_avx2.c - AVX2 matrix kernels for IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S with Q8_K
 * activations, in the order in force for these types: ggml's generic one (vec_dot_ref,
 * quant_iq.c; muse has no x86 variant for them):
 *     per super-block:  bsum = exact int32 sum over the groups of (2 * ls + 1) * (signed grid
 *                       values x activations) (IQ2_XS/IQ2_S: one scale per 16 elements),
 *                       sumf += (d_w * d_a) * (float)bsum          (scalar: mul, then add)
 *     result:           0.125f * sumf (IQ2_XS, IQ2_S), 0.25f * sumf (IQ3_XXS), sumf (IQ3_S)
 * The integer part is exact in any order, so the kernels compute it with maddubs (unsigned grid
 * magnitudes x activations with the weight signs applied) + madd (group scale) into 8 int32
 * lanes and reduce them once per super-block; the float part is the scalar code, bit for bit.
 * maddubs cannot saturate: |grid| <= 43 (IQ2), 62 (IQ3_XXS), 15 (IQ3_S), |a| <= 127, so a pair
 * is at most 15748.
 *
 * Shape: activation rows in groups of up to 8; the grid values and signs of each 32-element group
 * are unpacked once per group of rows.
 *
 * Measured alternative (kernel lab, 2048x6144, 1 core, CPU time, two alternating runs): one
 * vpgatherdd for the 8 grid entries of a group instead of scalar loads: decode 2.41-2.43 ms vs
 * 1.62 (IQ3_XXS) and 2.36-3.60 vs 2.03-2.25 (IQ3_S), prefill with 64 rows 5.3-5.6 vs 4.9-6.1 ms.
 * Scalar loads it is.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

/* The 8 signs of a 7-bit sign index k as bytes +1 / -1 (element j negative when bit j of
 * ksigns(k) = k | parity(k) << 7 is set), packed in a u64: one load per sub-group of 8. */
#define P7(k) ((((k) >> 0) ^ ((k) >> 1) ^ ((k) >> 2) ^ ((k) >> 3) ^ ((k) >> 4) ^ ((k) >> 5) ^ ((k) >> 6)) & 1)
#define KS(k) ((k) | (P7(k) << 7))
#define SB(k, j) (((KS(k) >> (j)) & 1) ? 0xffULL : 0x01ULL)
#define E(k) (SB(k, 0) | SB(k, 1) << 8 | SB(k, 2) << 16 | SB(k, 3) << 24 | SB(k, 4) << 32 | SB(k, 5) << 40 | \
              SB(k, 6) << 48 | SB(k, 7) << 56)
#define E4(k) E(k), E(k + 1), E(k + 2), E(k + 3)
#define E16(k) E4(k), E4(k + 4), E4(k + 8), E4(k + 12)
static const uint64_t sign_bytes[128] = {E16(0), E16(16), E16(32), E16(48), E16(64), E16(80), E16(96), E16(112)};
#undef P7
#undef KS
#undef SB
#undef E
#undef E4
#undef E16

/* 32 bytes of +1/-1 for the four 7-bit sign indices in bits 0-27 of W */
MUSE_AVX2_INLINE __m256i signs_of_idx4(uint32_t W) {
    return _mm256_set_epi64x((long long)sign_bytes[(W >> 21) & 127], (long long)sign_bytes[(W >> 14) & 127],
                             (long long)sign_bytes[(W >> 7) & 127], (long long)sign_bytes[W & 127]);
}

/* 32 bytes of +1/-1 from 32 explicit sign bits (bit e set: element e negative). */
MUSE_AVX2_INLINE __m256i signs_of_bits(uint32_t s) {
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s),
                                              _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_or_si256(neg, _mm256_set1_epi8(1));
}

/* bsum lanes += ls * (grid (unsigned) x signed activations) for ny rows, 32 elements. */
#define GROUP_DOT(grid, signs, ls, g)                                                                  \
    MUSE_UNROLL                                                                                        \
    for (int r = 0; r < ny; r++) {                                                                     \
        const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);                        \
        const __m256i q8 = _mm256_sign_epi8(avx2_load(a[ib].qs + 32 * (g)), signs);                    \
        sumi[r] = avx2_madd_acc(sumi[r], _mm256_maddubs_epi16(grid, q8), ls);    \
    }

/* sumf[r] += (d_w * d_a) * (float)bsum, the scalar order of vec_dot_ref */
#define BLOCK_TOTAL()                                                                                  \
    MUSE_UNROLL                                                                                        \
    for (int r = 0; r < ny; r++) {                                                                     \
        const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);                        \
        const float d = dw * a[ib].d;                                                                  \
        sumf[r] += d * (float)avx2_hsum_epi32(sumi[r]);                                                \
    }

// ---- IQ3_XXS ---------------------------------------------------------------------------

MUSE_AVX2_INLINE void iq3_xxs_row(int64_t nb, const struct muse_block_iq3_xxs *w, const char *act,
                                  size_t act_stride, const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq3_xxs *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        const uint8_t *qs = b->qs;
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            uint32_t W;
            memcpy(&W, b->qs + 64 + 4 * g, 4);
            const uint8_t *q = qs + 8 * g;
            const __m256i grid = _mm256_setr_epi32((int)muse_iq3xxs_grid[q[0]], (int)muse_iq3xxs_grid[q[1]],
                                                   (int)muse_iq3xxs_grid[q[2]], (int)muse_iq3xxs_grid[q[3]],
                                                   (int)muse_iq3xxs_grid[q[4]], (int)muse_iq3xxs_grid[q[5]],
                                                   (int)muse_iq3xxs_grid[q[6]], (int)muse_iq3xxs_grid[q[7]]);
            const __m256i signs = signs_of_idx4(W);
            const __m256i ls = _mm256_set1_epi16((int16_t)(2 * (W >> 28) + 1));
            GROUP_DOT(grid, signs, ls, g)
        }
        BLOCK_TOTAL()
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = 0.25f * sumf[r];
}

// ---- IQ3_S -----------------------------------------------------------------------------

MUSE_AVX2_INLINE void iq3_s_row(int64_t nb, const struct muse_block_iq3_s *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq3_s *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const uint8_t *q = b->qs + 8 * g;
            const unsigned h = b->qh[g];
#define IX(k) (int)muse_iq3s_grid[q[k] | ((h >> (k)) & 1) << 8]
            const __m256i grid = _mm256_setr_epi32(IX(0), IX(1), IX(2), IX(3), IX(4), IX(5), IX(6), IX(7));
#undef IX
            uint32_t sb;
            memcpy(&sb, b->signs + 4 * g, 4);
            const __m256i signs = signs_of_bits(sb);
            const __m256i ls = _mm256_set1_epi16((int16_t)(2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1));
            GROUP_DOT(grid, signs, ls, g)
        }
        BLOCK_TOTAL()
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- IQ2_XS ----------------------------------------------------------------------------

/* int16 lanes 0-7 (elements 0-15 after maddubs) = 2 * (s & 15) + 1, lanes 8-15 = 2 * (s >> 4) + 1 */
MUSE_AVX2_INLINE __m256i iq2_scales16(uint8_t s) {
    return _mm256_set_m128i(_mm_set1_epi16((short)(2 * (s >> 4) + 1)), _mm_set1_epi16((short)(2 * (s & 15) + 1)));
}

MUSE_AVX2_INLINE void iq2_xs_row(int64_t nb, const struct muse_block_iq2_xs *w, const char *act, size_t act_stride,
                                 const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq2_xs *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const uint16_t *v = b->qs + 4 * g;
            const __m256i grid = _mm256_set_epi64x((long long)muse_iq2xs_grid[v[3] & 511], (long long)muse_iq2xs_grid[v[2] & 511],
                                                   (long long)muse_iq2xs_grid[v[1] & 511], (long long)muse_iq2xs_grid[v[0] & 511]);
            const __m256i signs = _mm256_set_epi64x((long long)sign_bytes[v[3] >> 9], (long long)sign_bytes[v[2] >> 9],
                                                    (long long)sign_bytes[v[1] >> 9], (long long)sign_bytes[v[0] >> 9]);
            const __m256i ls = iq2_scales16(b->scales[g]);
            GROUP_DOT(grid, signs, ls, g)
        }
        BLOCK_TOTAL()
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = 0.125f * sumf[r];
}

// ---- IQ2_S -----------------------------------------------------------------------------

MUSE_AVX2_INLINE void iq2_s_row(int64_t nb, const struct muse_block_iq2_s *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq2_s *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const uint8_t *q = b->qs + 4 * g;
            const unsigned h = b->qh[g];
#define IX(l) (long long)muse_iq2s_grid[q[l] | ((h >> (2 * (l))) & 3) << 8]
            const __m256i grid = _mm256_set_epi64x(IX(3), IX(2), IX(1), IX(0));
#undef IX
            uint32_t sb;
            memcpy(&sb, b->qs + 32 + 4 * g, 4);
            const __m256i signs = signs_of_bits(sb);
            const __m256i ls = iq2_scales16(b->scales[g]);
            GROUP_DOT(grid, signs, ls, g)
        }
        BLOCK_TOTAL()
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = 0.125f * sumf[r];
}

// ---- drivers ---------------------------------------------------------------------------

MUSE_AVX2_ROWWISE_GEMM(iq2_xs, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(iq2_s, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(iq3_xxs, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(iq3_s, 256, NY_MAX)
