/*
 * gemm_q1_avx2.c - AVX2 matrix kernel for Q1_0 (128 elements: an fp16 d and 128 sign bits, bit j of
 * byte 4k + j/8 for element 32k + j; value +d or -d) with Q8_0 activations, in the order in force
 * for the type: ggml's generic one (vec_dot_ref, quant_legacy.c):
 *     per block:  sumi = 0.0f; for k in 0..3: sumi += d_a[k] * (float)s_k   (s_k = sum of +-a)
 *                 sumf += d * sumi                                           (scalar)
 * Two blocks (8 Q8_0 blocks) at a time: the bits become +1/-1 bytes once per weight row and step,
 * sign + maddubs/madd give 8 int32 lanes per Q8_0 block (|a| <= 127: no saturation), one horizontal
 * reduction one sum per Q8_0 block, the 8 products d_a[k] * s_k as one vector multiply (the same
 * single roundings), then the two blocks' scalar chains in order.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8 /* activation rows per pass over a weight row */

/* +1 / -1 bytes for the 32 bits at q (bit j of byte j / 8 -> element j) */
MUSE_AVX2_INLINE __m256i q1_signs(const uint8_t *q) {
    const __m256i set = avx2_bit_mask_32(q); /* 0xff (-1) where the bit is 1 */
    return _mm256_or_si256(_mm256_andnot_si256(set, _mm256_set1_epi8(-1)), _mm256_and_si256(set, _mm256_set1_epi8(1)));
}

MUSE_AVX2_INLINE void q1_0_row(int64_t nb, const struct muse_block_q1_0 *w, const char *act, size_t act_stride,
                               const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const int nk = ib + 1 < nb ? 8 : 4; /* Q8_0 blocks in this step */
        __m256i sg[8];
        float dw[2];
        for (int k = 0; k < 8; k++) sg[k] = k < nk ? q1_signs(w[ib + k / 4].qs + 4 * (k % 4)) : _mm256_setzero_si256();
        for (int h = 0; h < nk / 4; h++) dw[h] = avx2_h2f(w[ib + h].d);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + 4 * ib;
            __m256i p[8];
            _Alignas(32) float da[8] = {0}, t[8];
            for (int k = 0; k < 8; k++) {
                p[k] = k < nk ? avx2_dot_u8i8(ones, _mm256_sign_epi8(avx2_load(a[k].qs), sg[k])) : _mm256_setzero_si256();
                if (k < nk) da[k] = avx2_h2f(a[k].d);
            }
            _mm256_store_ps(t, _mm256_mul_ps(_mm256_load_ps(da), _mm256_cvtepi32_ps(avx2_reduce8x8_epi32(p))));
            for (int h = 0; h < nk / 4; h++) {
                float sumi = 0.0f;
                for (int k = 0; k < 4; k++) sumi += t[4 * h + k];
                sumf[r] += dw[h] * sumi;
            }
        }
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

MUSE_AVX2_ROWWISE_GEMM(q1_0, 128, NY_MAX)
