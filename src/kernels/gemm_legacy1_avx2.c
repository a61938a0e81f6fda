/*
 * gemm_legacy1_avx2.c - AVX2 matrix kernels for Q4_1 and Q5_1 with Q8_1 activations, in the order
 * in force for these types: ggml's generic one (vec_dot_ref, quant_legacy.c; muse has no x86
 * variant for them):
 *     per block:  sumf += (d_w * d_a) * (float)sumi + m_w * s_a      (scalar, in that order)
 * with sumi the exact integer sum of the unsigned codes times the activations. The kernels take
 * 8 blocks at a time: maddubs/madd give 8 int32 lanes per block, one horizontal reduction turns
 * them into one lane per block, the float terms of the 8 blocks are computed as vectors (the
 * same single roundings) and added to sumf in block order (avx2_lanes_total).
 * maddubs cannot saturate: codes <= 31, |a| <= 127.
 *
 * Shape: activation rows in groups of up to 8; the codes of 8 blocks are unpacked once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

/* Lane g of the result = the sum of the 8 int32 lanes of p[g] (g = 0..7). */
MUSE_AVX2_INLINE __m256i reduce8x8(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* sumf + v[0] + ... + v[cnt - 1], in order */
MUSE_AVX2_INLINE float lanes_total_n(float sumf, __m256 v, int cnt) {
    float l[8];
    _mm256_storeu_ps(l, v);
    for (int i = 0; i < cnt; i++) sumf += l[i];
    return sumf;
}

MUSE_AVX2_INLINE __m256i q4_1_codes(const struct muse_block_q4_1 *b) { return avx2_nibbles_16(b->qs); }

MUSE_AVX2_INLINE __m256i q5_1_codes(const struct muse_block_q5_1 *b) {
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                              _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
    return _mm256_or_si256(avx2_nibbles_16(b->qs), hb);
}

#define LEGACY1_ROW(BLOCK)                                                                                   \
    MUSE_AVX2_INLINE void BLOCK##_row(int64_t nb, const struct muse_block_##BLOCK *w, const char *act,        \
                                      size_t act_stride, const int ny, float *out, int64_t out_stride) {      \
        float sumf[NY_MAX];                                                                                  \
        for (int r = 0; r < ny; r++) sumf[r] = 0.0f;                                                         \
        const __m256i ones = _mm256_set1_epi16(1);                                                           \
        for (int64_t ib0 = 0; ib0 < nb; ib0 += 8) {                                                          \
            const int cnt = nb - ib0 < 8 ? (int)(nb - ib0) : 8;                                              \
            __m256i wq[8];                                                                                   \
            uint16_t dh[8] = {0}, mh[8] = {0};                                                               \
            for (int k = 0; k < 8; k++) {                                                                    \
                if (k < cnt) {                                                                               \
                    wq[k] = BLOCK##_codes(&w[ib0 + k]);                                                      \
                    dh[k] = w[ib0 + k].d;                                                                    \
                    mh[k] = w[ib0 + k].m;                                                                    \
                } else {                                                                                     \
                    wq[k] = _mm256_setzero_si256();                                                          \
                }                                                                                            \
            }                                                                                                \
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));                        \
            const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh));                         \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_1 *a = (const struct muse_block_q8_1 *)(const void *)(act + r * act_stride) + ib0; \
                __m256i p[8];                                                                                \
                uint16_t ad[8] = {0}, as[8] = {0};                                                           \
                for (int k = 0; k < 8; k++) {                                                                \
                    if (k < cnt) {                                                                           \
                        p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[k], avx2_load(a[k].qs)), ones);     \
                        ad[k] = a[k].d;                                                                      \
                        as[k] = a[k].s;                                                                      \
                    } else {                                                                                 \
                        p[k] = _mm256_setzero_si256();                                                       \
                    }                                                                                        \
                }                                                                                            \
                const __m256 da = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)ad));                     \
                const __m256 sa = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)as));                     \
                const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(reduce8x8(p))), \
                                               _mm256_mul_ps(mw, sa));                                       \
                sumf[r] = lanes_total_n(sumf[r], t, cnt);                                                    \
            }                                                                                                \
        }                                                                                                    \
        for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];                                          \
    }                                                                                                        \
    MUSE_AVX2_INLINE void BLOCK##_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows,           \
                                       const char *act, size_t act_stride, const int ny, float *out,         \
                                       int64_t out_stride) {                                                 \
        for (int64_t i = 0; i < n_rows; i++)                                                                 \
            BLOCK##_row(nb, (const void *)(w + i * w_stride), act, act_stride, ny, out + i, out_stride);     \
    }                                                                                                        \
    bool muse_gemm_##BLOCK##_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, \
                                  size_t act_stride, int n_act, float *out, int64_t out_stride) {          \
        if (n % 32 != 0) return false;                                                                      \
        const int64_t nb = n / 32;                                                                          \
        MUSE_AVX2_ROW_GROUPS(NY_MAX, BLOCK##_CALL)                                                          \
        return true;                                                                                        \
    }

#define q4_1_CALL(NY) q4_1_rows(nb, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
#define q5_1_CALL(NY) q5_1_rows(nb, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
LEGACY1_ROW(q4_1)
LEGACY1_ROW(q5_1)
