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
TDX_PLAIN(tq1_0)

/* Into L2: the share r0 / n_act .. (r0 + NY) / n_act of the bytes at p: the tile GEMMs pass the
 * weight rows of their next panel (AVX-512: panel pair) while the current one runs against the
 * activation rows, so that its packing does not wait on memory (a model larger than the
 * last-level cache streams its weights from DRAM). */
MUSE_AVX2_INLINE void tile_prefetch(const uint8_t *p, size_t bytes, int r0, int NY, int n_act) {
    const size_t lo = bytes * (size_t)r0 / (size_t)n_act;
    const size_t hi = r0 + NY >= n_act ? bytes : bytes * (size_t)(r0 + NY) / (size_t)n_act;
    for (size_t off = lo & ~(size_t)63; off < hi; off += 64) _mm_prefetch((const char *)p + off, _MM_HINT_T1);
}

/* The bytes of the weight rows after the panel (pair) of `step` rows at i0: rows i0 + step ..
 * min(i0 + 2 step, n_rows), ws bytes each (0 when it was the last). */
MUSE_AVX2_INLINE size_t tile_next_bytes(int64_t i0, int64_t step, int64_t n_rows, size_t ws) {
    const int64_t left = n_rows - i0 - step;
    return left <= 0 ? 0 : (size_t)(left < step ? left : step) * ws;
}

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

MUSE_AVX2_INLINE void tdx_q1_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q1_0 *b = (const void *)blk;
    const __m256i one = _mm256_set1_epi8(1), ones = _mm256_set1_epi8(-1);
    for (int k = 0; k < 4; k++) /* set bit: +1; clear: 0xff | 1 = -1 */
        _mm256_store_si256((__m256i *)(r->v + 32 * k),
                           _mm256_or_si256(_mm256_andnot_si256(avx2_bit_mask_32(b->qs + 4 * k), ones), one));
    r->s[0] = 1;
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
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

/* NVFP4 (td_nvfp4): per 128-bit lane the low nibbles of sub-blocks (0, 1 | 2, 3) and the high
 * ones; an unpack of 64-bit halves puts each sub-block's 8 low then 8 high nibbles together */
MUSE_AVX2_INLINE void tdx_nvfp4(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_nvfp4 *b = (const void *)blk;
    const __m256i q = _mm256_loadu_si256((const __m256i *)b->qs), m4 = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    const __m256i s02 = _mm256_unpacklo_epi64(lo, hi), s13 = _mm256_unpackhi_epi64(lo, hi);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)muse_kvalues_mxfp4));
    _mm256_store_si256((__m256i *)r->v, _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(s02, s13, 0x20)));
    _mm256_store_si256((__m256i *)(r->v + 32), _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(s02, s13, 0x31)));
    for (int sb = 0; sb < 4; sb++) r->dg[sb] = muse_ue4m3_half(b->d[sb]);
    r->s[0] = 1;
    r->d = 1.0f;
    r->m = 0.0f;
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

// ---- 2-bit planes: Q2_K, Q3_K, TQ2_0 -------------------------------------------------------------

/* The 4 planes of each 32-byte half of qs (element 128 c + 32 j + l = bits 2j..2j+1 of qs[32 c + l]),
 * minus `sub`, into v; Q3_K's high bit (bit 4c + j of hm[l]) adds 4 where hm is given. */
MUSE_AVX2_INLINE void tdx_planes2(const uint8_t *qs, const uint8_t *hm, int sub, int8_t *v) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), sb = _mm256_set1_epi8((char)sub);
    const __m256i h = hm ? avx2_load(hm) : _mm256_setzero_si256();
    for (int c = 0; c < 2; c++) {
        const __m256i q = avx2_load(qs + 32 * c);
        for (int j = 0; j < 4; j++) {
            __m256i x = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), sb);
            if (hm) /* + 4 hbit: bit 4c + j of each byte, a 0/1 byte times 4 */
                x = _mm256_add_epi8(x, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4 * c + j), one), 2));
            _mm256_store_si256((__m256i *)(v + 128 * c + 32 * j), x);
        }
    }
}

MUSE_AVX2_INLINE void tdx_q2_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q2_K *b = (const void *)blk;
    tdx_planes2(b->qs, NULL, 0, r->v);
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    _mm256_storeu_si256((__m256i *)r->s, _mm256_and_si256(sc, _mm256_set1_epi16(15)));
    _mm256_storeu_si256((__m256i *)r->mn, _mm256_srli_epi16(sc, 4));
    r->d = avx2_h2f(b->d);
    r->m = -avx2_h2f(b->dmin);
}

MUSE_AVX2_INLINE void tdx_q3_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q3_K *b = (const void *)blk;
    tdx_planes2(b->qs, b->hmask, 4, r->v);
    td_q3_K_scales(b->scales, r);
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_tq2_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_tq2_0 *b = (const void *)blk;
    tdx_planes2(b->qs, NULL, 1, r->v);
    for (int g = 0; g < 8; g++) r->s[g] = 1;
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
}

// ---- grids with sign bits: IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S; IQ1_S, IQ1_M ---------------------------

/* 32 elements from their magnitudes m, negated where bit j of byte k of `signs` is set (element
 * 8 k + j), as td_grid8 / td_grid4x2 do. */
MUSE_AVX2_INLINE __m256i tdx_signed(__m256i m, uint32_t signs) {
    const __m256i neg = avx2_bit_mask_32((const uint8_t *)&signs); /* little-endian x86 */
    return _mm256_sub_epi8(_mm256_xor_si256(m, neg), neg);
}

MUSE_AVX2_INLINE __m256i tdx_grid64(const uint64_t *grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

MUSE_AVX2_INLINE uint32_t tdx_ksigns4(int k0, int k1, int k2, int k3) {
    return (uint32_t)muse_ksigns_iq2xs[k0] | (uint32_t)muse_ksigns_iq2xs[k1] << 8 |
           (uint32_t)muse_ksigns_iq2xs[k2] << 16 | (uint32_t)muse_ksigns_iq2xs[k3] << 24;
}

MUSE_AVX2_INLINE void tdx_iq2_xs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_xs *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        const uint16_t *q = b->qs + 4 * g;
        const __m256i m = tdx_grid64(muse_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        const uint32_t signs = tdx_ksigns4(q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
        _mm256_store_si256((__m256i *)(r->v + 32 * g), tdx_signed(m, signs));
    }
    td_iq2_scales(b->scales, r);
    r->d = 0.125f * avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq2_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_s *b = (const void *)blk;
    const uint8_t *qs = b->qs, *signs = b->qs + 32;
    for (int g = 0; g < 8; g++) {
        const int h = b->qh[g];
        const __m256i m = tdx_grid64(muse_iq2s_grid, qs[4 * g] | (h & 3) << 8, qs[4 * g + 1] | ((h >> 2) & 3) << 8,
                                     qs[4 * g + 2] | ((h >> 4) & 3) << 8, qs[4 * g + 3] | ((h >> 6) & 3) << 8);
        _mm256_store_si256((__m256i *)(r->v + 32 * g), tdx_signed(m, muse_rd_le32(signs + 4 * g)));
    }
    td_iq2_scales(b->scales, r);
    r->d = 0.125f * avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq3_xxs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq3_xxs *b = (const void *)blk;
    const uint8_t *qs = b->qs, *w = b->qs + 64;
    for (int g = 0; g < 8; g++) {
        const uint32_t W = muse_rd_le32(w + 4 * g);
        const uint8_t *q = qs + 8 * g;
        const __m256i m = _mm256_setr_epi32((int)muse_iq3xxs_grid[q[0]], (int)muse_iq3xxs_grid[q[1]],
                                            (int)muse_iq3xxs_grid[q[2]], (int)muse_iq3xxs_grid[q[3]],
                                            (int)muse_iq3xxs_grid[q[4]], (int)muse_iq3xxs_grid[q[5]],
                                            (int)muse_iq3xxs_grid[q[6]], (int)muse_iq3xxs_grid[q[7]]);
        _mm256_store_si256((__m256i *)(r->v + 32 * g),
                           tdx_signed(m, tdx_ksigns4(W & 127, (W >> 7) & 127, (W >> 14) & 127, (W >> 21) & 127)));
        r->s[g] = (int16_t)(2 * (W >> 28) + 1);
    }
    r->d = 0.25f * avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq3_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq3_s *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        const uint8_t *q = b->qs + 8 * g;
        const int h = b->qh[g];
#define TDX_IQ3S(k) (int)muse_iq3s_grid[q[k] | ((h >> (k)) & 1) << 8]
        const __m256i m = _mm256_setr_epi32(TDX_IQ3S(0), TDX_IQ3S(1), TDX_IQ3S(2), TDX_IQ3S(3), TDX_IQ3S(4), TDX_IQ3S(5),
                                            TDX_IQ3S(6), TDX_IQ3S(7));
#undef TDX_IQ3S
        _mm256_store_si256((__m256i *)(r->v + 32 * g), tdx_signed(m, muse_rd_le32(b->signs + 4 * g)));
        r->s[g] = (int16_t)(2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1);
    }
    r->d = avx2_h2f(b->d);
    r->m = 0.0f;
}

/* IQ1: v = 8 g + delta from 4 grid entries (int8 values of {-1, 0, 1}) and the deltas (+-1) of
 * each 8 elements (td_iq1_grid) */
MUSE_AVX2_INLINE long long tdx_bytes8(int d) { return (long long)(0x0101010101010101ULL * (uint8_t)d); }

MUSE_AVX2_INLINE __m256i tdx_iq1(__m256i g, int d0, int d1, int d2, int d3) {
    const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
    const __m256i delta = _mm256_set_epi64x(tdx_bytes8(d3), tdx_bytes8(d2), tdx_bytes8(d1), tdx_bytes8(d0));
    return _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
}

MUSE_AVX2_INLINE void tdx_iq1_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq1_s *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        const uint16_t h = b->qh[g];
        const uint8_t *q = b->qs + 4 * g;
        const int d = h & 0x8000 ? -1 : 1;
        const __m256i m = tdx_grid64(muse_iq1s_grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8,
                                     q[2] | ((h >> 6) & 7) << 8, q[3] | ((h >> 9) & 7) << 8);
        _mm256_store_si256((__m256i *)(r->v + 32 * g), tdx_iq1(m, d, d, d, d));
        r->s[g] = (int16_t)(2 * ((h >> 12) & 7) + 1);
    }
    r->d = 0.125f * avx2_h2f(b->d);
    r->m = 0.0f;
}

MUSE_AVX2_INLINE void tdx_iq1_m(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq1_m *b = (const void *)blk;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = muse_rd_le16(b->scales + 2 * k);
    const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    for (int g = 0; g < 8; g++) {
        const int n0 = b->qh[2 * g] & 15, n1 = b->qh[2 * g] >> 4;
        const int n2 = b->qh[2 * g + 1] & 15, n3 = b->qh[2 * g + 1] >> 4;
        const uint8_t *q = b->qs + 4 * g;
        const __m256i m = tdx_grid64(muse_iq1s_grid, q[0] | (n0 & 7) << 8, q[1] | (n1 & 7) << 8, q[2] | (n2 & 7) << 8,
                                     q[3] | (n3 & 7) << 8);
        _mm256_store_si256((__m256i *)(r->v + 32 * g),
                           tdx_iq1(m, n0 & 8 ? -1 : 1, n1 & 8 ? -1 : 1, n2 & 8 ? -1 : 1, n3 & 8 ? -1 : 1));
        r->s[2 * g] = (int16_t)(2 * ((sc[g / 2] >> (6 * (g % 2))) & 7) + 1);
        r->s[2 * g + 1] = (int16_t)(2 * ((sc[g / 2] >> (6 * (g % 2) + 3)) & 7) + 1);
    }
    r->d = 0.125f * avx2_h2f(d16);
    r->m = 0.0f;
}
