/*
 * gemm_iquants_avx2.c - AVX2 matrix kernels for the I-quants with Q8_K activations (IQ2_XXS).
 * The grid magnitudes stay unsigned; the 8 signs of each sub-group are applied to the
 * activation bytes (sign_epi8), so maddubs sees |w| x +-a. The order is ggml's AVX2 one
 * (ggml_vec_dot_iq2_xxs_q8_K; muse_x86_vec_dot in x86_numerics.h): per super-block, int32 lane
 * l (0..7) = the exact sum over the 8 sub-blocks of (2 * ls + 1) * (products of elements
 * 4l..4l+3); acc[l] = fma(d_w * d_a, (float)lane, acc[l]); the result is 0.125f * hsum(acc)
 * (avx2_hsum_ps): bit for bit muse_x86_vec_dot.
 *
 * Shape: activation rows in groups of up to 8; the grid values and sign masks
 * of each 32-element group are unpacked once per group of rows.
 *
 * Measured alternative (kernel lab, 6656x8192, 1 core, CPU time, best of 7, two rounds): AVX2
 * gathers (vpgatherdq) for the 4 grid entries and the 4 sign masks instead of scalar loads were
 * slower both at decode (14.3-14.6 ms vs 6.9-8.5) and at prefill with 128 rows (41-42 ms vs
 * 28-32); gathers only for several rows were in between. Scalar loads it is.
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

/* 32 bytes of +1/-1 for the four 7-bit sign indices in bits 0-27 of B */
MUSE_AVX2_INLINE __m256i signs_of_word(uint32_t B) {
    return _mm256_set_epi64x((long long)sign_bytes[(B >> 21) & 127], (long long)sign_bytes[(B >> 14) & 127],
                             (long long)sign_bytes[(B >> 7) & 127], (long long)sign_bytes[B & 127]);
}

// ---- IQ2_XXS ---------------------------------------------------------------------------

MUSE_AVX2_INLINE void iq2_xxs_row(int64_t nb, const struct muse_block_iq2_xxs *w, const char *act,
                                  size_t act_stride, const int ny, float *out, int64_t out_stride) {
    __m256 acc[NY_MAX];
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const struct muse_block_iq2_xxs *b = &w[ib];
        const float dw = avx2_h2f(b->d);
        __m256i sumi[NY_MAX];
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) sumi[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            uint32_t A, B;
            memcpy(&A, b->qs + 4 * g, 4);
            memcpy(&B, b->qs + 4 * g + 2, 4);
            const __m256i grid = _mm256_set_epi64x((long long)muse_iq2xxs_grid[A >> 24],
                                                   (long long)muse_iq2xxs_grid[(A >> 16) & 255],
                                                   (long long)muse_iq2xxs_grid[(A >> 8) & 255],
                                                   (long long)muse_iq2xxs_grid[A & 255]);
            const __m256i signs = signs_of_word(B);
            const __m256i ls = _mm256_set1_epi16((int16_t)(2 * (B >> 28) + 1));
            MUSE_UNROLL
            for (int r = 0; r < ny; r++) {
                const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
                const __m256i q8 = _mm256_sign_epi8(avx2_load(a[ib].qs + 32 * g), signs);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(grid, q8), ls));
            }
        }
        MUSE_UNROLL
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_K *a = (const void *)(act + r * act_stride);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a[ib].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    MUSE_UNROLL
    for (int r = 0; r < ny; r++) out[r * out_stride] = 0.125f * avx2_hsum_ps(acc[r]);
}

MUSE_AVX2_INLINE void iq2_xxs_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act,
                                   size_t act_stride, const int ny, float *out, int64_t out_stride) {
    for (int64_t i = 0; i < n_rows; i++)
        iq2_xxs_row(nb, (const void *)(w + i * w_stride), act, act_stride, ny, out + i, out_stride);
}

bool muse_gemm_iq2_xxs_avx2(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,
                            size_t act_stride, int n_act, float *out, int64_t out_stride) {
    if (n % 256 != 0) return false;
#define CALL(NY) iq2_xxs_rows(n / 256, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)
    MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL)
#undef CALL
    return true;
}
