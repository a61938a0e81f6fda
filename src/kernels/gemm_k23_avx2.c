/*
 * gemm_k23_avx2.c - AVX2 matrix kernels for Q2_K and Q3_K with Q8_K activations, in the order in
 * force for these types: ggml's generic one (vec_dot_ref, quant_k.c; muse has no x86 variant):
 *   Q2_K, per super-block:  isum = exact int sum over the 16 sub-blocks of scale * (codes x a),
 *                           summs = exact int sum of bsums x mins,
 *                           sumf += (d_a * d_w) * (float)isum - (d_a * dmin_w) * (float)summs
 *        (scalar, in that order). The integer sums come from maddubs/madd in any order (exact).
 *   Q3_K, like Q4_K..Q6_K: aux[l] = exact int sum over e % 8 == l of scale * code * a (8 lanes),
 *        sums[l] += (d_w * d_a) * (float)aux[l] (vector mul, then add: no FMA), result
 *        0 + sums[0] + ... + sums[7]. The activations come in the class layout
 *        (MUSE_ACT_Q8K_PERM8) and the codes get the same permutation (avx2_perm8), so the 8 int32
 *        lanes of maddubs + madd are exactly aux[0..7].
 * maddubs cannot saturate: codes 0..3 (Q2_K) / |code| <= 4 (Q3_K), |a| <= 127.
 *
 * Shape: activation rows in groups of up to 8; the codes and scales of each super-block are
 * unpacked once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

// ---- Q2_K ------------------------------------------------------------------------------

MUSE_AVX2_INLINE void q2_K_row(int64_t nb, const struct muse_block_q2_K *w, const char *act, size_t act_stride,
                               const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_q2_K *b = &w[ib];
        const float dw = avx2_h2f(b->d), dminw = avx2_h2f(b->dmin);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
        /* the 16 mins (high nibbles) as int16, to pair with the 16 bsums */
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(15)));
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = avx2_load(b->qs + 32 * h);
            MUSE_UNROLL
            for (int c = 0; c < 4; c++) {
                const int k = 4 * h + c; /* 32-element chunk: sub-blocks 2k (elements 0-15), 2k+1 */
                const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * c), m3);
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16((short)(b->scales[2 * k + 1] & 15)),
                                                    _mm_set1_epi16((short)(b->scales[2 * k] & 15)));
                MUSE_UNROLL
                for (int r = 0; r < ny; r++) {
                    const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                    const __m256i p = _mm256_maddubs_epi16(codes, avx2_load(a[ib].qs + 32 * k));
                    sumi[r] = avx2_madd_acc(sumi[r], p, sv);
                }
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            const int32_t summs = avx2_hsum_epi32(_mm256_madd_epi16(avx2_load(a[ib].bsums), mins16));
            const float dall = a[ib].d * dw, dmin = a[ib].d * dminw;
            sumf[r] += dall * (float)avx2_hsum_epi32(sumi[r]) - dmin * (float)summs;
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

// ---- Q3_K ------------------------------------------------------------------------------

/* The 16 signed six-bit scales of a Q3_K super-block (spec 2.5): low 4 bits from S[0..7]
 * (sub-blocks 0-7 low nibbles, 8-15 high nibbles), high 2 bits from S[8 + i % 4] >> 2 * (i / 4). */
MUSE_AVX2_INLINE void q3_K_scales(const uint8_t *S, int16_t sc[16]) {
    for (int i = 0; i < 16; i++) {
        const int low4 = i < 8 ? (S[i] & 15) : (S[i - 8] >> 4);
        const int high2 = (S[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (int16_t)((low4 | high2 << 4) - 32);
    }
}

MUSE_AVX2_INLINE void q3_K_row(int64_t nb, const struct muse_block_q3_K *w, const char *act, size_t act_stride,
                               const int ny, float *out, int64_t out_stride) {
    __m256 sums[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) sums[r] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1), m4 = _mm256_set1_epi8(4);
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_q3_K *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        int16_t sc[16];
        q3_K_scales(b->scales, sc);
        /* the class permutation commutes with the bytewise unpacking: apply it to the packed bytes */
        const __m256i hm = avx2_perm8(avx2_load(b->hmask));
        __m256i aux[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) aux[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = avx2_perm8(avx2_load(b->qs + 32 * h));
            MUSE_UNROLL
            for (int c = 0; c < 4; c++) {
                const int k = 4 * h + c;
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * c), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, k), m1);
                /* code = low2 - 4 + 4 * hbit, -4..3 */
                const __m256i code = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), m4);
                const __m256i acode = _mm256_sign_epi8(code, code);
                const __m256i sv = _mm256_set1_epi32((int)((uint32_t)(uint16_t)sc[2 * k + 1] << 16 | (uint16_t)sc[2 * k]));
                MUSE_UNROLL
                for (int r = 0; r < ny; r++) {
                    const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                    const __m256i p = _mm256_maddubs_epi16(acode, _mm256_sign_epi8(avx2_load(a[ib].qs + 32 * k), code));
                    aux[r] = avx2_madd_acc(aux[r], p, sv);
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

MUSE_AVX2_ROWWISE_GEMM(q2_K, 256, NY_MAX)
MUSE_AVX2_ROWWISE_GEMM(q3_K, 256, NY_MAX)

// ---- activation layout ----------------------------------------------------------------------

/* MUSE_ACT_Q8K_PERM8: each 32-element group of a Q8_K row's qs permuted by avx2_perm8 (in place). */
void MUSE_ISA_NAME(muse_act_q8K_perm8)(void *q, int64_t n) {
    struct muse_block_q8_K *y = q;
    for (int64_t i = 0; i < n / 256; i++)
        for (int g = 0; g < 8; g++) {
            int8_t *p = y[i].qs + 32 * g;
            _mm256_storeu_si256((__m256i *)p, avx2_perm8(avx2_load(p)));
        }
}
