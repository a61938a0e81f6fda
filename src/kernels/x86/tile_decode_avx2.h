/*
 * tile_decode_avx2.h - the first packing stage of the tile GEMM with AVX2 instructions: tdx_<t>
 * decodes one weight block into a struct tile_row with the same values as td_<t> (tile_decode.h),
 * for the common types; the others are td_<t> itself. Used by both x86 levels' tile GEMMs
 * (gemm_tiles_avx2.c, gemm_tiles_avx512.c: the AVX-512 build runs them as they are; measured with
 * bench/tile_lab, the plain decoders made IQ2_XXS 27% slower there, docs/perf.md).
 */
#pragma once

#include "kernels/x86/iq2_xxs_avx2.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/tile_decode.h"

#define TDX_PLAIN(t) MUSE_AVX2_INLINE void tdx_##t(const uint8_t *blk, struct tile_row *r) { td_##t(blk, r); }
TDX_PLAIN(q8_0)
TDX_PLAIN(q2_K)
TDX_PLAIN(q3_K)
TDX_PLAIN(tq2_0)
TDX_PLAIN(tq1_0)
TDX_PLAIN(iq2_xs)
TDX_PLAIN(iq2_s)
TDX_PLAIN(iq3_xxs)
TDX_PLAIN(iq3_s)
TDX_PLAIN(iq1_s)
TDX_PLAIN(iq1_m)

MUSE_AVX2_INLINE void tdx_set32(struct tile_row *r, __m256i v, float d) {
    _mm256_store_si256((__m256i *)r->v, v);
    r->s[0] = 1;
    r->d = d;
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_q4_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_0 *b = (const void *)blk;
    tdx_set32(r, _mm256_sub_epi8(avx2_nibbles_16(b->qs), _mm256_set1_epi8(8)), avx2_h2f(b->d));
}

MUSE_AVX2_INLINE void tdx_q5_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_0 *b = (const void *)blk;
    tdx_set32(r, _mm256_sub_epi8(avx2_q5_codes(b->qs, b->qh), _mm256_set1_epi8(16)), avx2_h2f(b->d));
}

MUSE_AVX2_INLINE void tdx_q4_1(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_1 *b = (const void *)blk;
    tdx_set32(r, avx2_nibbles_16(b->qs), avx2_h2f(b->d));
    r->mn[0] = r->mn[1] = 1;
    r->m = avx2_h2f(b->m);
}

MUSE_AVX2_INLINE void tdx_q5_1(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_1 *b = (const void *)blk;
    tdx_set32(r, avx2_q5_codes(b->qs, b->qh), avx2_h2f(b->d));
    r->mn[0] = r->mn[1] = 1;
    r->m = avx2_h2f(b->m);
}

MUSE_AVX2_INLINE __m256i tdx_codebook(const int8_t *kv, const uint8_t *qs) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv)), avx2_nibbles_16(qs));
}

MUSE_AVX2_INLINE void tdx_iq4_nl(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq4_nl *b = (const void *)blk;
    tdx_set32(r, tdx_codebook(muse_kvalues_iq4nl, b->qs), avx2_h2f(b->d));
}

MUSE_AVX2_INLINE void tdx_mxfp4(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_mxfp4 *b = (const void *)blk;
    tdx_set32(r, tdx_codebook(muse_kvalues_mxfp4, b->qs), muse_e8m0_half(b->e));
}

/* Q4_K/Q5_K: the 8 scales into s, the 8 mins into mn as pairs (spec 2.5, "get_scale_min_k4"):
 *   sc0-3 = S0-3 & 63, sc4-7 = (S8-11 & 15) | (S0-3 >> 6) << 4,
 *   mn0-3 = S4-7 & 63, mn4-7 = (S8-11 >> 4) | (S4-7 >> 6) << 4. */
MUSE_AVX2_INLINE void tdx_k45_scales(const uint8_t *blk, struct tile_row *r) {
    const __m128i x = _mm_loadu_si128((const __m128i *)blk); /* S[k] = byte 4 + k */
    const __m128i v1 = _mm_shuffle_epi8(x, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m128i lo = _mm_blend_epi16(v1, _mm_srli_epi16(v1, 4), 0xC0);
    const __m128i v2 = _mm_shuffle_epi8(x, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v2, 2), _mm_set1_epi8(0x30));
    const __m128i m = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_or_si128(_mm_and_si128(lo, m), hi)); /* sc0..7, mn0..7 */
    _mm_storeu_si128((__m128i *)r->s, _mm256_castsi256_si128(sm));
    const __m128i mn = _mm256_extracti128_si256(sm, 1);
    _mm256_storeu_si256((__m256i *)r->mn, _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn)));
}

MUSE_AVX2_INLINE void tdx_q4_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_K *b = (const void *)blk;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int c = 0; c < 4; c++) {
        const __m256i q = avx2_load(b->qs + 32 * c);
        _mm256_store_si256((__m256i *)(r->v + 64 * c), _mm256_and_si256(q, m4));
        _mm256_store_si256((__m256i *)(r->v + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
    tdx_k45_scales(blk, r);
    r->d = avx2_h2f(b->d);
    r->m = -avx2_h2f(b->dmin);
}

MUSE_AVX2_INLINE void tdx_q5_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_K *b = (const void *)blk;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), hb = avx2_load(b->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i q = avx2_load(b->qs + 32 * c);
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4);
        _mm256_store_si256((__m256i *)(r->v + 64 * c), _mm256_or_si256(_mm256_and_si256(q, m4), h0));
        _mm256_store_si256((__m256i *)(r->v + 64 * c + 32),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1));
    }
    tdx_k45_scales(blk, r);
    r->d = avx2_h2f(b->d);
    r->m = -avx2_h2f(b->dmin);
}

MUSE_AVX2_INLINE void tdx_q6_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q6_K *b = (const void *)blk;
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30), m32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = avx2_load(b->ql + 64 * h), ql1 = avx2_load(b->ql + 64 * h + 32);
        const __m256i qh = avx2_load(b->qh + 32 * h);
        for (int k = 0; k < 4; k++) { /* elements 128 h + 32 k .. + 31 */
            const __m256i l4 = (k & 1) ? ql1 : ql0;
            const __m256i lo = k < 2 ? _mm256_and_si256(l4, m4) : _mm256_and_si256(_mm256_srli_epi16(l4, 4), m4);
            const __m256i hs = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2)
                             : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
            _mm256_store_si256((__m256i *)(r->v + 128 * h + 32 * k),
                               _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hs, m30)), m32));
        }
    }
    _mm256_storeu_si256((__m256i *)r->s, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)));
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq2_xxs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_xxs *b = (const void *)blk;
    const struct iq2_xxs_side sd = iq2_xxs_side(b);
    MUSE_UNROLL
    for (int g = 0; g < 8; g++) {
        const __m256i q = _mm256_sign_epi8(iq2_xxs_grid(b, g), _mm256_or_si256(iq2_xxs_negmask(&sd, g), _mm256_set1_epi8(1)));
        _mm256_store_si256((__m256i *)(r->v + 32 * g), q);
        r->s[g] = (int16_t)(2 * (b->qs[4 * g + 3] >> 12) + 1);
    }
    r->d = 0.125f * avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq4_xs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq4_xs *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        _mm256_store_si256((__m256i *)(r->v + 32 * g), tdx_codebook(muse_kvalues_iq4nl, b->qs + 16 * g));
        const int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b->scales_h >> (2 * g)) & 3) << 4;
        r->s[g] = (int16_t)(ls - 32);
    }
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
}
