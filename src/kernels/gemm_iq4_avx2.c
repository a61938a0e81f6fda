/*
 * gemm_iq4_avx2.c - AVX2 matrix kernels for IQ4_XS with Q8_K activations, in the order in force
 * for the type: ggml's generic one (vec_dot_ref, quant_iq.c; muse has no x86 variant for it):
 *     per 32-element sub-block g:  dl = (d_w * d_a) * (float)(ls_g - 32)
 *                                  sumf += dl * (float)(exact int sum of codebook value x a)
 * sub-block after sub-block, super-block after super-block. The kernels compute the 8 exact
 * sub-block sums of a super-block with maddubs/madd (|value| x activation with the value's sign,
 * |value| <= 127, so a pair is at most 32258: no saturation) and reduce them into one int32 lane
 * per sub-block; the 8 products dl * (float)sum are one vector multiply (the same roundings) and
 * are added to sumf in sub-block order (avx2_lanes_total): bit for bit vec_dot_ref.
 *
 * Shape: activation rows in groups of up to 8; the codebook values of each super-block are
 * looked up once per group of rows.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

MUSE_AVX2_INLINE void iq4_xs_row(int64_t nb, const struct muse_block_iq4_xs *w, const char *act, size_t act_stride,
                                 const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_iq4nl));
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq4_xs *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i wv[8], wa[8];   /* signed values and magnitudes, elements 32g..32g+31 */
        MUSE_UNROLL
        for (int g = 0; g < 8; g++) {
            wv[g] = _mm256_shuffle_epi8(kv, avx2_nibbles_16(b->qs + 16 * g));
            wa[g] = _mm256_sign_epi8(wv[g], wv[g]);
        }
        /* ls_g - 32: low nibble of scales_l[g / 2] (by g % 2), two bits of scales_h */
        uint32_t sl;
        memcpy(&sl, b->scales_l, 4);
        const __m256i g8 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_slli_epi32(g8, 2)),
                                            _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_slli_epi32(g8, 1)),
                                            _mm256_set1_epi32(3));
        const __m256 lsf = _mm256_cvtepi32_ps(
            _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32)));
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            __m256i p[8];
            MUSE_UNROLL
            for (int g = 0; g < 8; g++)
                p[g] = avx2_dot_u8i8(wa[g], _mm256_sign_epi8(avx2_load(a[ib].qs + 32 * g), wv[g]));
            const __m256 dl = _mm256_mul_ps(_mm256_set1_ps(dw * a[ib].d), lsf);
            sumf[r] = avx2_lanes_total(sumf[r], _mm256_mul_ps(dl, _mm256_cvtepi32_ps(avx2_reduce8x8_epi32(p))));
        }
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

MUSE_AVX2_ROWWISE_GEMM(iq4_xs, 256, NY_MAX)
