/*
 * gemm_kquants_avx2.c - AVX2 matrix kernels for the K-quants with Q8_K activations: Q4_K, Q5_K,
 * Q6_K. They reproduce the reference (vec_dot_ref, ggml's generic order) bit for bit:
 *   aux[l] = sum over e % 8 == l of scale * code * a      (exact int32, 8 lanes)
 *   sums[l] += d * (float)aux[l]                           (mul, then add: no FMA)
 *   sumf -= dmin * (float)summins                          (Q4_K/Q5_K, scalar)
 *   result = sumf + sums[0] + ... + sums[7]
 * The lanes come out of maddubs/madd directly because the activation rows are given in the
 * "class" layout (MUSE_ACT_Q8K_PERM8: each 32-byte group of qs permuted by avx2_perm8) and the
 * weight codes get the same permutation after unpacking.
 *
 * Shape: activation rows in groups of up to 8; the codes and scales of each
 * weight super-block are unpacked once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

// ---- Q4_K / Q5_K ------------------------------------------------------------------------

/* The 8 six-bit scales and mins of a Q4_K/Q5_K super-block (spec 2.5 bit map), four per u32:
 * sc[0..3] = bits 0-5 of S[0..3]; mn[0..3] = bits 0-5 of S[4..7]; sc[4..7] = low nibbles of
 * S[8..11] | bits 6-7 of S[0..3] << 4; mn[4..7] = high nibbles of S[8..11] | bits 6-7 of
 * S[4..7] << 4. */
MUSE_AVX2_INLINE void k4_scales_mins(const uint8_t *S, uint8_t *sc, uint8_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, S, 4);
    memcpy(&u1, S + 4, 4);
    memcpy(&u2, S + 8, 4);
    const uint32_t s03 = u0 & 0x3f3f3f3fu, m03 = u1 & 0x3f3f3f3fu;
    const uint32_t s47 = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
    const uint32_t m47 = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
    memcpy(sc, &s03, 4);
    memcpy(sc + 4, &s47, 4);
    memcpy(mn, &m03, 4);
    memcpy(mn + 4, &m47, 4);
}

/* 16 int16 lanes [mn0, mn0, mn1, mn1, ..., mn7, mn7] to pair with the 16 bsums. */
MUSE_AVX2_INLINE __m256i k4_mins16(const uint8_t *mn) {
    __m128i m8 = _mm_loadl_epi64((const __m128i *)mn);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

/* The 5th bits of sub-block j (0..7) of a Q5_K super-block as 0/16 per byte. */
MUSE_AVX2_INLINE __m256i q5_high(__m256i qh, int j) {
    __m256i b = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1));
    return _mm256_slli_epi16(b, 4);
}

/* One weight row of Q4_K (high = 0) or Q5_K (high = 1) against ny activation rows. */
MUSE_AVX2_INLINE void k45_row(int64_t nb, const uint8_t *wrow, size_t block_bytes, const int high,
                              const char *act, size_t act_stride, const int ny, float *out, int64_t out_stride) {
    __m256 sums[NY_MAX];
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) {
        sums[r] = _mm256_setzero_ps();
        sumf[r] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = wrow + ib * block_bytes;
        /* both layouts: d, dmin, scales[12]; Q5_K then qh[32]; then qs[128] */
        const struct muse_block_q4_K *b4 = (const void *)b;
        const uint8_t *qs = high ? ((const struct muse_block_q5_K *)(const void *)b)->qs : b4->qs;
        uint8_t sc[8], mn[8];
        k4_scales_mins(b4->scales, sc, mn);
        const __m256i mins16 = k4_mins16(mn);
        const float dw = avx2_h2f(b4->d), dminw = avx2_h2f(b4->dmin);
        __m256i aux[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) aux[r] = _mm256_setzero_si256();
        /* the class permutation commutes with the bytewise unpacking: apply it to the packed
         * bytes once (codes and 5th bits) */
        const __m256i hbits = high ? avx2_perm8(avx2_load(((const struct muse_block_q5_K *)(const void *)b)->qh))
                                   : _mm256_setzero_si256();
        /* the 8 scales as int16 in both 128-bit halves; scale j is broadcast by a byte shuffle */
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
        MUSE_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256i q = avx2_perm8(avx2_load(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (high) {
                lo = _mm256_or_si256(lo, q5_high(hbits, 2 * c));
                hi = _mm256_or_si256(hi, q5_high(hbits, 2 * c + 1));
            }
            const __m256i s_lo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * 2 * c)));
            const __m256i s_hi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
            MUSE_UNROLL
            for (int r = 0; r < ny; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const int8_t *aq = a[ib].qs + 64 * c;
                __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, avx2_load(aq)), s_lo);
                __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, avx2_load(aq + 32)), s_hi);
                aux[r] = _mm256_add_epi32(aux[r], _mm256_add_epi32(p_lo, p_hi));
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            const int32_t summins = avx2_hsum_epi32(_mm256_madd_epi16(avx2_load(a[ib].bsums), mins16));
            sums[r] = _mm256_add_ps(sums[r], _mm256_mul_ps(_mm256_set1_ps(dw * a[ib].d), _mm256_cvtepi32_ps(aux[r])));
            sumf[r] -= (dminw * a[ib].d) * (float)summins;
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = avx2_lanes_total(sumf[r], sums[r]);
}

// ---- Q6_K ------------------------------------------------------------------------------

MUSE_AVX2_INLINE void q6_row(int64_t nb, const struct muse_block_q6_K *w, const char *act, size_t act_stride,
                             const int ny, float *out, int64_t out_stride) {
    __m256 sums[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sums[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03), m32 = _mm256_set1_epi8(32);
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_q6_K *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i aux[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) aux[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = avx2_load(b->ql + 64 * h), ql1 = avx2_load(b->ql + 64 * h + 32);
            const __m256i qh = avx2_load(b->qh + 32 * h);
            MUSE_UNROLL
            for (int k = 0; k < 4; k++) {
                __m256i lo = (k & 1) ? ql1 : ql0;
                lo = (k < 2) ? _mm256_and_si256(lo, m4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
                /* signed codes -32..31 in class order; |code| and the sign go to maddubs */
                const __m256i q = avx2_perm8(_mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), m32));
                const __m256i aq = _mm256_sign_epi8(q, q);
                const int s = 8 * h + 2 * k;   /* sub-blocks s (elements 0-15) and s+1 (16-31) */
                const __m256i sv = _mm256_set1_epi32((int)((uint32_t)(uint16_t)b->scales[s + 1] << 16 |
                                                           (uint16_t)b->scales[s]));
                MUSE_UNROLL
                for (int r = 0; r < ny; r++) {
                    const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                    const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(avx2_load(a[ib].qs + 128 * h + 32 * k), q));
                    aux[r] = _mm256_add_epi32(aux[r], _mm256_madd_epi16(p, sv));
                }
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            sums[r] = _mm256_add_ps(sums[r], _mm256_mul_ps(_mm256_set1_ps(dw * a[ib].d), _mm256_cvtepi32_ps(aux[r])));
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = avx2_lanes_total(0.0f, sums[r]);
}

// ---- drivers ---------------------------------------------------------------------------

MUSE_AVX2_INLINE void k45_rows(int64_t nb, const char *w, size_t w_stride, size_t block_bytes, const int high,
                               int64_t n_rows, const char *act, size_t act_stride, const int ny, float *out,
                               int64_t out_stride) {
    for (int64_t i = 0; i < n_rows; i++)
        k45_row(nb, (const uint8_t *)w + i * w_stride, block_bytes, high, act, act_stride, ny, out + i, out_stride);
}

MUSE_AVX2_INLINE void q6_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                              size_t act_stride, const int ny, float *out, int64_t out_stride) {
    for (int64_t i = 0; i < n_rows; i++)
        q6_row(nb, (const void *)(w + i * w_stride), act, act_stride, ny, out + i, out_stride);
}

bool muse_gemm_q4_K_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
#define CALL(NY) k45_rows(n / 256, w, w_stride, sizeof(struct muse_block_q4_K), 0, n_rows, a, act_stride, NY, o, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    return true;
}

bool muse_gemm_q5_K_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
#define CALL(NY) k45_rows(n / 256, w, w_stride, sizeof(struct muse_block_q5_K), 1, n_rows, a, act_stride, NY, o, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    return true;
}

bool muse_gemm_q6_K_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                         size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
#define CALL(NY) q6_rows(n / 256, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    return true;
}

// ---- activation layout ----------------------------------------------------------------------

void muse_act_q8K_perm8_avx2(void *q, int64_t n) {
    struct muse_block_q8_K *y = q;
    for (int64_t i = 0; i < n / 256; i++)
        for (int g = 0; g < 8; g++) {
            int8_t *p = y[i].qs + 32 * g;
            _mm256_storeu_si256((__m256i *)p, avx2_perm8(avx2_load(p)));
        }
}
