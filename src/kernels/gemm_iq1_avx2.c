/*
 * gemm_iq1_avx2.c - AVX2 matrix kernels for IQ1_S, IQ1_M, TQ1_0 and TQ2_0 with Q8_K activations, in the order
 * in force for these types: ggml's generic one (vec_dot_ref, quant_iq.c / quant_ternary.c; muse
 * has no x86 variant for them):
 *   IQ1_S, per super-block:  sumi = exact sum over the 8 groups of ls * (grid values x a),
 *                            sumi1 = exact sum of ls * delta * (the group's two bsums),
 *                            sumf += (d_w * d_a) * ((float)sumi + 0.125f * (float)sumi1)
 *   IQ1_M, per super-block:  sumi1 = exact sum of ls (per 16 elements) * (grid values x a),
 *                            sumi2 = exact sum of ls * delta (per 8 elements) * a,
 *                            sumf += (d_w * d_a) * ((float)sumi1 + 0.125f * (float)sumi2)
 *   TQ2_0, per super-block:  sumi = exact sum of (code - 1) x a = sum(code x a) - sum(bsums),
 *                            sumf += (float)sumi * (d_a * d_w)
 *   TQ1_0, per super-block:  the same with base-3 codes (5 trits per byte, decoded by 16-bit
 *                            multiplies as quant_ternary.c's trit()), sumf += (float)sumi * (d_w * d_a)
 * (scalar float, in that order). The integer sums come from maddubs/madd (exact in any order):
 * IQ1 grid values -1/0/+1 (and IQ1_M's ls * delta, |.| <= 15) as |value| x a with the value's
 * sign, TQ2_0 codes 0..3 unsigned.
 *
 * Shape: activation rows in groups of up to 8; each 32-element group is unpacked once per group
 * of rows.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

// ---- IQ1_S -----------------------------------------------------------------------------

MUSE_AVX2_INLINE void iq1_s_row(int64_t nb, const struct muse_block_iq1_s *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq1_s *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        int16_t coef[16]; /* ls * delta of group g, twice: pairs with bsums[2g], bsums[2g + 1] */
        for (int g = 0; g < 8; g++) {
            const unsigned h = b->qh[g];
            const int ls = 2 * ((h >> 12) & 7) + 1;
            coef[2 * g] = coef[2 * g + 1] = (int16_t)(h & 0x8000 ? -ls : ls);
            const uint8_t *q = b->qs + 4 * g;
#define IX(l) (long long)muse_iq1s_grid[q[l] | ((h >> (3 * (l))) & 7) << 8]
            const __m256i grid = _mm256_set_epi64x(IX(3), IX(2), IX(1), IX(0));
#undef IX
            const __m256i ag = _mm256_sign_epi8(grid, grid);
            const __m256i lsv = _mm256_set1_epi16((short)ls);
            MUSE_UNROLL
            for (int r = 0; r < ny; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const __m256i p = _mm256_maddubs_epi16(ag, _mm256_sign_epi8(avx2_load(a[ib].qs + 32 * g), grid));
                sumi[r] = avx2_madd_acc(sumi[r], p, lsv);
            }
        }
        const __m256i cv = _mm256_loadu_si256((const __m256i *)coef);
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            const int32_t s1 = avx2_hsum_epi32(_mm256_madd_epi16(avx2_load(a[ib].bsums), cv));
            sumf[r] += dw * a[ib].d * ((float)avx2_hsum_epi32(sumi[r]) + 0.125f * (float)s1);
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- TQ2_0 -----------------------------------------------------------------------------

MUSE_AVX2_INLINE void tq2_0_row(int64_t nb, const struct muse_block_tq2_0 *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_tq2_0 *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = avx2_load(b->qs + 32 * h);
            MUSE_UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * c), m3);
                MUSE_UNROLL
                for (int r = 0; r < ny; r++) {
                    const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                    sumi[r] = avx2_dot_u8i8_acc(sumi[r], codes, avx2_load(a[ib].qs + 128 * h + 32 * c));
                }
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            /* sum(code - 1) x a = sum(code x a) - sum(a), the latter from the 16 bsums */
            const __m256i s = _mm256_sub_epi32(sumi[r], _mm256_madd_epi16(avx2_load(a[ib].bsums), ones));
            const float d = a[ib].d * dw;
            sumf[r] += (float)avx2_hsum_epi32(s) * d;
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- IQ1_M -----------------------------------------------------------------------------

/* The bytes of c (4 int8 values) repeated 8 times each: 32 bytes c0 x8, c1 x8, c2 x8, c3 x8. */
MUSE_AVX2_INLINE __m256i bytes4x8(uint32_t c) {
    return _mm256_shuffle_epi8(_mm256_set1_epi32((int)c),
                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
}

MUSE_AVX2_INLINE void iq1_m_row(int64_t nb, const struct muse_block_iq1_m *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq1_m *b = &w[ib];
        uint16_t sc[4];
        memcpy(sc, b->scales, 8);
        const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float dw = avx2_h2f(dh);
        __m256i s1[NY_MAX], s2[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) s1[r] = s2[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const int ws = sc[g / 2] >> (6 * (g % 2));
            const int ls1 = 2 * (ws & 7) + 1, ls2 = 2 * ((ws >> 3) & 7) + 1;
            const uint8_t *q = b->qs + 4 * g;
            const unsigned h = (unsigned)b->qh[2 * g] | (unsigned)b->qh[2 * g + 1] << 8; /* nibble l = sub-group l */
#define IX(l) (long long)muse_iq1s_grid[q[l] | ((h >> (4 * (l))) & 7) << 8]
            const __m256i grid = _mm256_set_epi64x(IX(3), IX(2), IX(1), IX(0));
#undef IX
            /* per sub-group l: delta sign (bit 3 of its nibble) times the scale of its half */
            /* bytes ls1, ls1, ls2, ls2, negated where the sign bit is set (branch-free: the signs are
             * random) */
            const uint32_t mag = (uint32_t)ls1 * 0x0101u | (uint32_t)ls2 * 0x01010000u;
            const uint32_t neg = ((h >> 3) & 1) * 0xffu | ((h >> 7) & 1) * 0xff00u | ((h >> 11) & 1) * 0xff0000u |
                                 ((h >> 15) & 1) * 0xff000000u;
            const __m256i coef = _mm256_sign_epi8(bytes4x8(mag), bytes4x8(neg | 0x01010101u));
            const __m256i acoef = _mm256_sign_epi8(coef, coef);
            const __m256i ag = _mm256_sign_epi8(grid, grid);
            const __m256i lsv = _mm256_set_m128i(_mm_set1_epi16((short)ls2), _mm_set1_epi16((short)ls1));
            MUSE_UNROLL
            for (int r = 0; r < ny; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const __m256i q8 = avx2_load(a[ib].qs + 32 * g);
                s1[r] = avx2_madd_acc(s1[r], _mm256_maddubs_epi16(ag, _mm256_sign_epi8(q8, grid)), lsv);
                s2[r] = avx2_dot_u8i8_acc(s2[r], acoef, _mm256_sign_epi8(q8, coef));
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            sumf[r] += dw * a[ib].d * ((float)avx2_hsum_epi32(s1[r]) + 0.125f * (float)avx2_hsum_epi32(s2[r]));
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- TQ1_0 -----------------------------------------------------------------------------

/* Per byte b with the multiplier k of its 16-bit word: the trit ((uint8_t)(b * k) * 3) >> 8
 * (quant_ternary.c's trit(b, n) with k = 3^n). */
MUSE_AVX2_INLINE __m256i trits(__m256i v, __m256i k) {
    const __m256i three = _mm256_set1_epi16(3);
    const __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x00ff)), k); /* low byte: b*k mod 256 */
    const __m256i hi = _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16((short)0xff00)), k); /* high byte, low 0 */
    const __m256i tl = _mm256_mulhi_epu16(_mm256_slli_epi16(lo, 8), three);
    const __m256i th = _mm256_mulhi_epu16(hi, three);
    return _mm256_or_si256(tl, _mm256_slli_epi16(th, 8));
}

MUSE_AVX2_INLINE void tq1_0_row(int64_t nb, const struct muse_block_tq1_0 *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i ones = _mm256_set1_epi16(1);
    static const short pow3[5] = {1, 3, 9, 27, 81};
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_tq1_0 *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        /* the 256 codes (0..2) in element order, 8 vectors of 32 */
        __m256i codes[8];
        const __m256i q32 = avx2_load(b->qs);
        MUSE_UNROLL
        for (int c = 0; c < 5; c++) codes[c] = trits(q32, _mm256_set1_epi16(pow3[c]));
        const __m128i q16 = _mm_loadu_si128((const __m128i *)(b->qs + 32));
        const __m256i v16 = _mm256_set_m128i(q16, q16);
        codes[5] = trits(v16, _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(1)));   /* elements 160..191 */
        codes[6] = trits(v16, _mm256_set_m128i(_mm_set1_epi16(27), _mm_set1_epi16(9)));  /* 192..223 */
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        codes[7] = trits(_mm256_set_m128i(_mm_set1_epi32((int)qh), q16),                /* 224..239, 240..255 */
                         _mm256_set_m128i(_mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27), _mm_set1_epi16(81)));
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            /* sum(code - 1) x a = sum(code x a) - sum(a) */
            __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(avx2_load(a[ib].bsums), ones));
            MUSE_UNROLL
            for (int c = 0; c < 8; c++)
                acc = avx2_dot_u8i8_acc(acc, codes[c], avx2_load(a[ib].qs + 32 * c));
            sumf[r] += (float)avx2_hsum_epi32(acc) * (dw * a[ib].d);
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- drivers ---------------------------------------------------------------------------

MUSE_AVX2_ROWWISE_GEMM(iq1_s, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(iq1_m, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(tq2_0, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(tq1_0, 256, NY_MAX)
