/*
 * gemm_fp4_avx2.c - AVX2 matrix kernels for MXFP4 and NVFP4 with Q8_0 activations, in the order in
 * force for the types: ggml's generic one (vec_dot_ref, quant_legacy.c; no x86 variant). MXFP4:
 *     per block:  d = d_a * 2^(e-128) (E8M0 "half" form), sumf += d * (float)sumi   (scalar)
 * with sumi the exact integer sum of the codebook values (2 * E2M1, |v| <= 12) times the
 * activations. 8 blocks at a time: maddubs/madd (|v| x a with v's sign) give 8 int32 lanes per
 * block, one horizontal reduction one lane per block, the 8 terms are computed as vectors (the
 * same single roundings) and added to sumf in block order; the last nb % 8 blocks one at a time.
 *
 * Shape: activation rows in groups of up to 8; the codes of 8 blocks are looked up once per group.
 */
#include "kernels/kernels_isa.h"

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"
#include "kernels/simd_avx2.h"

#define NY_MAX 8   /* activation rows per pass over a weight row */

/* The E8M0 "half" scales (muse_e8m0_half) of 8 consecutive MXFP4 blocks. */
MUSE_AVX2_INLINE __m256 e8m0_half8(const struct muse_block_mxfp4 *b) {
    const __m256i off = _mm256_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119);
    const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32((const int *)(const void *)b, off, 1), _mm256_set1_epi32(255));
    /* e < 2: 0x00200000 << e (subnormal), else (e - 1) << 23 */
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(nrm, sub, small));
}

/* The fp16 scales of 8 consecutive Q8_0 blocks as floats. */
MUSE_AVX2_INLINE __m256 q8_0_d8(const struct muse_block_q8_0 *a) {
    const __m256i off = _mm256_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238);
    const __m256i v = _mm256_i32gather_epi32((const int *)(const void *)a, off, 1);
    const __m256i lo = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                                               0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(lo, 0x08)));
}

MUSE_AVX2_INLINE void mxfp4_row(int64_t nb, const struct muse_block_mxfp4 *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_mxfp4));
    int64_t ib0 = 0;
    for (; ib0 + 8 <= nb; ib0 += 8) {
        __m256i wv[8], wa[8];
        MUSE_UNROLL
        for (int k = 0; k < 8; k++) {
            wv[k] = _mm256_shuffle_epi8(kv, avx2_nibbles_16(w[ib0 + k].qs));
            wa[k] = _mm256_sign_epi8(wv[k], wv[k]);
        }
        const __m256 dw = e8m0_half8(&w[ib0]);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + ib0;
            __m256i p[8];
            MUSE_UNROLL
            for (int k = 0; k < 8; k++)
                p[k] = avx2_dot_u8i8(wa[k], _mm256_sign_epi8(avx2_load(a[k].qs), wv[k]));
            const __m256 d = _mm256_mul_ps(q8_0_d8(a), dw);
            sumf[r] = avx2_lanes_total(sumf[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(avx2_reduce8x8_epi32(p))));
        }
    }
    for (; ib0 < nb; ib0++) {
        const __m256i wv = _mm256_shuffle_epi8(kv, avx2_nibbles_16(w[ib0].qs));
        const __m256i wa = _mm256_sign_epi8(wv, wv);
        const float dw = muse_e8m0_half(w[ib0].e);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + ib0;
            const int32_t sumi =
                avx2_hsum_epi32(avx2_dot_u8i8(wa, _mm256_sign_epi8(avx2_load(a->qs), wv)));
            const float d = avx2_h2f(a->d) * dw;
            sumf[r] += d * (float)sumi;
        }
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

MUSE_AVX2_ROWWISE_GEMM(mxfp4, 32, NY_MAX)

/*
 * NVFP4 (64 elements: 4 sub-blocks of 16 with a UE4M3 "half" scale each; sub-block s uses qs[8s ..
 * 8s + 7], low nibbles its elements 0-7, high nibbles 8-15; one block spans two Q8_0 blocks):
 *     per sub-block, in order:  sumf += (d_a * d_s) * (float)sumi_s   (scalar)
 * Two blocks (8 sub-blocks, 4 Q8_0 blocks) at a time: the codes are put in element order and
 * looked up (|v| <= 12: maddubs cannot saturate), sign trick + maddubs/madd give 4 int32 lanes per
 * sub-block, hadds one sum per sub-block, the 8 terms are computed as vectors (the same single
 * roundings) and added to sumf in order (an odd last block: the first 4).
 */
/* the 32 codebook values of sub-blocks 2h, 2h + 1 of b, in element order */
MUSE_AVX2_INLINE __m256i nvfp4_values(const struct muse_block_nvfp4 *b, int h, __m256i kv) {
    /* nibbles: [lo(qs 0-7) lo(8-15) | hi(0-7) hi(8-15)] -> [lo(0-7) hi(0-7) | lo(8-15) hi(8-15)] */
    const __m256i c = _mm256_permute4x64_epi64(avx2_nibbles_16(b->qs + 16 * h), 0xd8);
    return _mm256_shuffle_epi8(kv, c);
}

/* muse_ue4m3_half of the 4 scale bytes of b and of b + 1 (both when two, else zeros for b + 1),
 * exactly: (1 + m/8) * 2^(e - 8) built from bits, m * 2^-10 for e == 0, 0 for the bytes 0x00 and
 * 0x7f (0x80 gives 0 too, 0xff does not: bit 7 is ignored after that check). */
MUSE_AVX2_INLINE __m256 ue4m3_half8(const struct muse_block_nvfp4 *b, int two) {
    uint32_t s0, s1 = 0;
    memcpy(&s0, b[0].d, 4);
    if (two) memcpy(&s1, b[1].d, 4);
    const __m256i raw = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)s1, (int)s0));
    const __m256i x = _mm256_and_si256(raw, _mm256_set1_epi32(0x7f)); /* bit 7 ignored (but 0xff is not 0x7f) */
    const __m256i e = _mm256_srli_epi32(x, 3), m = _mm256_and_si256(x, _mm256_set1_epi32(7));
    const __m256i nrm = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(119)), 23), _mm256_slli_epi32(m, 20));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(1.0f / 1024.0f));
    const __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(nrm), sub, _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
    return _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(raw, _mm256_set1_epi32(0x7f))), v);
}

MUSE_AVX2_INLINE void nvfp4_row(int64_t nb, const struct muse_block_nvfp4 *w, const char *act, size_t act_stride,
                                const int ny, float *out, int64_t out_stride) {
    float sumf[NY_MAX];
    for (int r = 0; r < ny; r++) sumf[r] = 0.0f;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_mxfp4));
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const int nk = ib + 1 < nb ? 4 : 2; /* Q8_0 blocks (halves of NVFP4 blocks) in this step */
        __m256i wv[4], wa[4];
        for (int k = 0; k < 4; k++) {
            wv[k] = k < nk ? nvfp4_values(&w[ib + k / 2], k % 2, kv) : _mm256_setzero_si256();
            wa[k] = _mm256_sign_epi8(wv[k], wv[k]);
        }
        const __m256 dw = ue4m3_half8(&w[ib], nk == 4);
        for (int r = 0; r < ny; r++) {
            const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)(const void *)(act + r * act_stride) + 2 * ib;
            __m256i p[4];
            uint16_t dh[4] = {0, 0, 0, 0};
            _Alignas(32) float t[8];
            for (int k = 0; k < 4; k++) {
                p[k] = k < nk ? avx2_dot_u8i8(wa[k], _mm256_sign_epi8(avx2_load(a[k].qs), wv[k])) : _mm256_setzero_si256();
                if (k < nk) dh[k] = a[k].d;
            }
            const __m256 da = _mm256_cvtph_ps(_mm_setr_epi16((short)dh[0], (short)dh[0], (short)dh[1], (short)dh[1],
                                                             (short)dh[2], (short)dh[2], (short)dh[3], (short)dh[3]));
            /* lanes 0-3 of p[k]: sub-block 2k, 4-7: 2k + 1 -> one sum per sub-block, in order */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
            const __m256i sumi = _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_store_ps(t, _mm256_mul_ps(_mm256_mul_ps(da, dw), _mm256_cvtepi32_ps(sumi)));
            for (int s = 0; s < 2 * nk; s++) sumf[r] += t[s];
        }
    }
    for (int r = 0; r < ny; r++) out[r * out_stride] = sumf[r];
}

MUSE_AVX2_ROWWISE_GEMM(nvfp4, 64, NY_MAX)
