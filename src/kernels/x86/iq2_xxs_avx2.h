/*
 * iq2_xxs_avx2.h - IQ2_XXS super-block unpacking on 256-bit registers, shared by the IQ2_XXS
 * kernels (gemm_iquants.inc) and the tile GEMM's packing (gemm_tiles_<isa>.c). Include only
 * from files compiled with the AVX2 or AVX-512 flags (after simd_avx2.h).
 */
#pragma once

#include "kernels/blocks.h"
#include "kernels/quant_tables.h"
#include "kernels/x86/simd_avx2.h"

/*
 * The side data of a super-block, for all 8 groups at once with a few vector ops, so that
 * each group costs only in-register shuffles besides its 4 grid loads:
 *   s03/s47: 32-bit unit g (g < 4 / g >= 4; both 128-bit halves hold the same 4 units) = the 4
 *            sign bytes of group g, byte k = ksigns of the 7-bit field k of B:
 *            field | parity(field) << 7 (element 8k + j negative when bit j is set);
 *   l03/l47: the same for 2 * ls + 1 in both int16 halves of the unit.
 */
struct iq2_xxs_side { __m256i s03, s47, l03, l47; };

MUSE_AVX2_INLINE struct iq2_xxs_side iq2_xxs_side(const struct muse_block_iq2_xxs *b) {
    const __m256 q0 = _mm256_castsi256_ps(avx2_load(b->qs));       /* A0 B0 A1 B1 | A2 B2 A3 B3 */
    const __m256 q1 = _mm256_castsi256_ps(avx2_load(b->qs + 16));  /* A4 B4 A5 B5 | A6 B6 A7 B7 */
    /* B0 B1 B4 B5 | B2 B3 B6 B7 -> B0 .. B7 */
    const __m256i B = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(q0, q1, 0xdd)), 0xd8);
    const __m256i m7 = _mm256_set1_epi32(0x7f);
    __m256i s = _mm256_and_si256(B, m7);
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 1), _mm256_slli_epi32(m7, 8)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 2), _mm256_slli_epi32(m7, 16)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(B, 3), _mm256_slli_epi32(m7, 24)));
    /* bit 0 of each byte of p = parity of that byte (bit 7 is clear) */
    __m256i p = _mm256_xor_si256(s, _mm256_srli_epi32(s, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    s = _mm256_or_si256(s, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
    __m256i ls = _mm256_srli_epi32(B, 28);
    ls = _mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1));
    ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
    struct iq2_xxs_side d = {_mm256_permute4x64_epi64(s, 0x44), _mm256_permute4x64_epi64(s, 0xee),
                             _mm256_permute4x64_epi64(ls, 0x44), _mm256_permute4x64_epi64(ls, 0xee)};
    return d;
}

/* The grid magnitudes (unsigned) of group g, from byte indices. */
MUSE_AVX2_INLINE __m256i iq2_xxs_grid(const struct muse_block_iq2_xxs *b, int g) {
    const uint8_t *ai = (const uint8_t *)(b->qs + 4 * g);
    return _mm256_set_epi64x((long long)muse_iq2xxs_grid[ai[3]], (long long)muse_iq2xxs_grid[ai[2]],
                             (long long)muse_iq2xxs_grid[ai[1]], (long long)muse_iq2xxs_grid[ai[0]]);
}

/* The signs of group g as bytes 0xff (negative) / 0x00 (g: a constant after unrolling). */
MUSE_AVX2_INLINE __m256i iq2_xxs_negmask(const struct iq2_xxs_side *sd, const int g) {
    const int h = g & 3;
    /* byte j <- sign byte j / 8 of unit h, then test bit j % 8 */
    const __m256i ctl = _mm256_setr_epi8(4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h + 1, 4 * h + 1,
                                         4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 2,
                                         4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2,
                                         4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3,
                                         4 * h + 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i sb = _mm256_shuffle_epi8(g < 4 ? sd->s03 : sd->s47, ctl);
    return _mm256_cmpeq_epi8(_mm256_and_si256(sb, sel), sel);
}

/* 2 * ls + 1 of group g in every int16 lane */
MUSE_AVX2_INLINE __m256i iq2_xxs_ls(const struct iq2_xxs_side *sd, const int g) {
    const __m256i v = g < 4 ? sd->l03 : sd->l47;
    switch (g & 3) {
    case 0: return _mm256_shuffle_epi32(v, 0x00);
    case 1: return _mm256_shuffle_epi32(v, 0x55);
    case 2: return _mm256_shuffle_epi32(v, 0xaa);
    default: return _mm256_shuffle_epi32(v, 0xff);
    }
}
