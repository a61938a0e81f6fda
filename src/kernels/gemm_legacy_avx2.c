/*
 * gemm_legacy_avx2.c - AVX2 matrix kernels for the 32-element legacy blocks with Q8_0
 * activations: Q8_0 and Q4_0. They reproduce vec_dot_ref (ggml's generic order) bit for bit:
 * the integer sum of each block is exact (4 blocks are reduced together with hadd), and the
 * float part is the reference's sequential chain
 *     Q8_0: sumf += (float)sumi * (d_w * d_a)      Q4_0: sumf += ((float)sumi * d_w) * d_a
 * with the products formed 4 blocks at a time in a vector (same roundings, no FMA).
 *
 * Shape: activation rows in groups of up to 4; for one weight row each block is
 * unpacked once and used against every row of the group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 4   /* activation rows per pass over a weight row */
#define DAS_MAX 1024 /* most blocks per row whose activation scales are converted once per tile */

/* The signed int8 weights of one block (32 lanes), unpacked. */
MUSE_AVX2_INLINE __m256i q8_0_unpack(const struct muse_block_q8_0 *b) { return avx2_load(b->qs); }

MUSE_AVX2_INLINE __m256i q4_0_unpack(const struct muse_block_q4_0 *b) {
    return _mm256_sub_epi8(avx2_nibbles_16(b->qs), _mm256_set1_epi8(8));
}

/* The four int32 totals of p0..p3 (8 lanes each), in order. */
MUSE_AVX2_INLINE __m128i hsum4_epi32(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* sumf += v[0]; sumf += v[1]; ... (the reference's sequential chain) */
MUSE_AVX2_INLINE float chain4(float sumf, __m128 v) {
    float l[4];
    _mm_storeu_ps(l, v);
    return (((sumf + l[0]) + l[1]) + l[2]) + l[3];
}

/* The per-block float terms of 4 blocks: Q8_0 (SCALE_Q4 = 0): s * (dw * da);
 * Q4_0 (SCALE_Q4 = 1): (s * dw) * da. */
MUSE_AVX2_INLINE __m128 terms4(__m128i s, __m128 dw, __m128 da, const int scale_q4) {
    const __m128 sf = _mm_cvtepi32_ps(s);
    return scale_q4 ? _mm_mul_ps(_mm_mul_ps(sf, dw), da) : _mm_mul_ps(sf, _mm_mul_ps(dw, da));
}

/* Rows ny >= 2: the chains of the 4 activation rows run in the 4 lanes of one vector (row r in
 * lane r), so each row still adds its block terms in block order, 4 rows per vaddps. */
#define LEGACY_ROWS(BLOCK, unpack, SCALE_Q4)                                                                \
    MUSE_AVX2_INLINE void BLOCK##_row(int64_t nb, const struct muse_block_##BLOCK *w, const char *act,      \
                                      size_t act_stride, const float *das, const int ny, float *out,        \
                                      int64_t out_stride) {                                                 \
        __m128 sumv = _mm_setzero_ps();                                                                      \
        float sum1 = 0.0f;                                                                                   \
        int64_t ib = 0;                                                                                      \
        for (; ib + 4 <= nb; ib += 4) {                                                                      \
            __m256i q[4], aq[4];                                                                             \
            MUSE_UNROLL \
            for (int k = 0; k < 4; k++) {                                                                    \
                q[k] = unpack(&w[ib + k]);                                                                   \
                aq[k] = _mm256_sign_epi8(q[k], q[k]);                                                        \
            }                                                                                                \
            const __m128 dw = _mm_setr_ps(avx2_h2f(w[ib].d), avx2_h2f(w[ib + 1].d), avx2_h2f(w[ib + 2].d),   \
                                          avx2_h2f(w[ib + 3].d));                                            \
            __m128 t[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};          \
            MUSE_UNROLL \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                __m256i p[4];                                                                                \
                MUSE_UNROLL \
                for (int k = 0; k < 4; k++)                                                                  \
                    p[k] = avx2_sum_i16_pairs(                                                               \
                        _mm256_maddubs_epi16(aq[k], _mm256_sign_epi8(avx2_load(a[ib + k].qs), q[k])));      \
                const __m128 da = das ? _mm_loadu_ps(das + r * nb + ib)                                        \
                                      : _mm_setr_ps(avx2_h2f(a[ib].d), avx2_h2f(a[ib + 1].d),                \
                                                    avx2_h2f(a[ib + 2].d), avx2_h2f(a[ib + 3].d));           \
                t[r] = terms4(hsum4_epi32(p[0], p[1], p[2], p[3]), dw, da, SCALE_Q4);                        \
            }                                                                                                \
            if (ny == 1) {                                                                                   \
                sum1 = chain4(sum1, t[0]);                                                                   \
            } else {                                                                                         \
                _MM_TRANSPOSE4_PS(t[0], t[1], t[2], t[3]);                                                   \
                sumv = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(sumv, t[0]), t[1]), t[2]), t[3]);         \
            }                                                                                                \
        }                                                                                                    \
        float sumf[4];                                                                                       \
        _mm_storeu_ps(sumf, sumv);                                                                           \
        if (ny == 1) sumf[0] = sum1;                                                                         \
        for (; ib < nb; ib++) {                                                                              \
            const __m256i q = unpack(&w[ib]);                                                                \
            const float dw = avx2_h2f(w[ib].d);                                                              \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                const float s = (float)avx2_hsum_epi32(avx2_dot_i8(q, avx2_load(a[ib].qs)));                 \
                const float da = avx2_h2f(a[ib].d);                                                          \
                sumf[r] += SCALE_Q4 ? (s * dw) * da : s * (dw * da);                                         \
            }                                                                                                \
        }                                                                                                    \
        for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];                                          \
    }                                                                                                        \
    MUSE_AVX2_INLINE void BLOCK##_rows(int64_t nb, const char *w0, size_t w_stride, int64_t n_rows,          \
                                       const char *act, size_t act_stride, const int ny, float *out,         \
                                       int64_t out_stride) {                                                 \
        /* the activation scales as floats, once for all weight rows of the tile */                       \
        float das[NY_MAX * DAS_MAX];                                                                         \
        const bool pre = nb <= DAS_MAX && n_rows > 1;                                                        \
        if (pre)                                                                                             \
            for (int r = 0; r < ny; r++) {                                                                   \
                const struct muse_block_q8_0 *a = (const void *)(act + r * act_stride);                      \
                for (int64_t ib = 0; ib < nb; ib++) das[r * nb + ib] = avx2_h2f(a[ib].d);                    \
            }                                                                                                \
        for (int64_t i = 0; i < n_rows; i++)                                                                 \
            BLOCK##_row(nb, (const void *)(w0 + i * w_stride), act, act_stride, pre ? das : NULL, ny, out + i, \
                        out_stride);                                                                         \
    }

LEGACY_ROWS(q8_0, q8_0_unpack, 0)
LEGACY_ROWS(q4_0, q4_0_unpack, 1)

/* Walk the activation rows in groups; each case inlines the body with a constant group size. */
#define LEGACY_GEMM(BLOCK)                                                                                 \
    bool muse_gemm_##BLOCK##_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act, \
                                  size_t act_stride, int n_act, float *out, int64_t out_stride) {          \
        if (n % 32 != 0) return false;                                                                      \
        const int64_t nb = n / 32;                                                                          \
        for (int r0 = 0; r0 < n_act; r0 += NY_MAX) {                                                        \
            const char *a = (const char *)act + (size_t)r0 * act_stride;                                    \
            float *o = out + (int64_t)r0 * out_stride;                                                      \
            switch (n_act - r0 < NY_MAX ? n_act - r0 : NY_MAX) {                                            \
            case 1: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 1, o, out_stride); break;          \
            case 2: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 2, o, out_stride); break;          \
            case 3: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 3, o, out_stride); break;          \
            default: BLOCK##_rows(nb, w, w_stride, n_rows, a, act_stride, 4, o, out_stride); break;         \
            }                                                                                               \
        }                                                                                                   \
        return true;                                                                                        \
    }

LEGACY_GEMM(q8_0)
LEGACY_GEMM(q4_0)
