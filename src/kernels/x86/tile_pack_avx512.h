/*
 * tile_pack_avx512.h - the packing of the 512-bit tile GEMMs (gemm_tiles_avx512.c, the VNNI
 * level, and gemm_tiles_amx.c, the AMX level, which run the same panels): panels of PW weight
 * rows, codes c = v + o interleaved by 4 bytes (a 64-byte register, or one row of an AMX B
 * tile, holds elements 4k..4k+3 of the 16 rows), per float block the float scales (d, or s_g d
 * per group), mins and the min planes (tile_layout); the offset tables -o A of the activation
 * rows (tile_offsets); the int32-to-float conversion both levels finish with. Include only from
 * files compiled with the AVX-512 flags (after tile_decode_avx2.h).
 */
#pragma once

#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/tile_decode_avx2.h"

#define PW 16    /* weight rows per panel */

struct tile_lay {
    int codes, dv, mv, minp, rec;
};

/* (the configurations of tile_cfg_avx512: s1, fgs or fg; no integer group scales) */
MUSE_AVX2_INLINE struct tile_lay tile_layout(const struct tile_cfg c) {
    struct tile_lay l;
    l.codes = 0;
    l.dv = c.fbe * PW;                                    /* fbe/4 steps x 64 bytes */
    l.mv = l.dv + (c.fgs || c.fg ? c.fbe / c.g : 1) * 64; /* d, or the float scale of each group (fgs, fg) */
    l.minp = l.mv + (c.mins ? 64 : 0); /* (no offset planes: the sums start from -o A, tile_offsets) */
    l.rec = l.minp + (c.mins || c.dm ? (c.fbe / 32) * 64 : 0);
    return l;
}


/* v[0..15] = (v - delta) s + o, each a byte 0..255 (the pre-scaled packing) */
MUSE_AVX2_INLINE void tile_prescale16(int8_t *v, int delta, int s, int o) {
    const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)v));
    const __m256i y = _mm256_add_epi16(_mm256_mullo_epi16(_mm256_sub_epi16(x, _mm256_set1_epi16((short)delta)), _mm256_set1_epi16((short)s)),
                                       _mm256_set1_epi16((short)o));
    const __m256i b = _mm256_packus_epi16(y, y); /* bytes 0-7 | 8-15 in the two lanes */
    _mm_storeu_si128((__m128i *)(void *)v, _mm256_castsi256_si128(_mm256_permute4x64_epi64(b, 0x08)));
}

/* Pack rows [0, nr) of n elements (nr <= PW; the others as zero rows) into pan. */
MUSE_AVX2_INLINE void tile_pack(const struct tile_cfg c, tile_decode_fn dec, int64_t n, const uint8_t *w, size_t ws,
                                int nr, uint8_t *pan) {
    const struct tile_lay L = tile_layout(c);
    const int64_t nfb = n / c.fbe;
    struct tile_row tr[PW], big[PW]; /* big: whole weight blocks (c.sub > 1) */
    for (int r = nr; r < PW; r++) memset(&tr[r], 0, sizeof tr[r]);
    const __m256i off = _mm256_set1_epi8((char)(c.ps ? 0 : c.o));
    for (int64_t fb = 0; fb < nfb; fb++) {
        uint8_t *rec = pan + fb * L.rec;
        for (int r = 0; r < nr; r++) {
            td_float_block(c, dec, w + r * ws, fb, &big[r], &tr[r]);
            for (int gi = 0; c.ps && gi < c.fbe / c.ps; gi++) { /* c = v s_g + o (a byte; off is 0) */
                /* dm (IQ1_S): the group's delta (v = 8 q + delta: v mod 8 is 1 or 7) left out of c
                 * and kept as the min delta s_g of both 16-units (0 for a zero row) */
                const int delta = c.dm ? ((tr[r].v[gi * c.ps] % 8 + 8) % 8 == 1 ? 1 : -1) : 0;
                if (c.dm) tr[r].mn[2 * gi] = tr[r].mn[2 * gi + 1] = (int16_t)(delta * tr[r].s[gi]);
                for (int e = gi * c.ps; e < (gi + 1) * c.ps; e += 16)
                    tile_prescale16(tr[r].v + e, delta, tr[r].s[gi], c.o);
            }
        }
        for (int j = 0; j < c.fbe / 32; j++)
            for (int half = 0; half < 2; half++) { /* rows 0-7, then 8-15: the two 32-byte halves */
                __m256i x[8];
                MUSE_UNROLL
                for (int r = 0; r < 8; r++)
                    x[r] = _mm256_add_epi8(_mm256_load_si256((const __m256i *)(tr[8 * half + r].v + 32 * j)), off);
                avx2_transpose8x32(x);
                MUSE_UNROLL
                for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(rec + L.codes + (j * 8 + k) * 64 + 32 * half), x[k]);
            }
        float *dv = (float *)(void *)(rec + L.dv), *mv = (float *)(void *)(rec + L.mv);
        for (int r = 0; r < PW; r++) {
            if (c.mins) mv[r] = tr[r].m;
            if (!c.fgs && !c.fg) dv[r] = tr[r].d;
            for (int gi = 0; gi < c.fbe / c.g && c.fgs; gi++) dv[PW * gi + r] = tr[r].dg[gi];
            for (int gi = 0; gi < c.fbe / c.g && c.fg; gi++) dv[PW * gi + r] = (float)tr[r].s[gi] * tr[r].d; /* exact */
        }
        for (int jj = 0; jj < c.fbe / 32 && (c.mins || c.dm); jj++) {
            int16_t *mp = (int16_t *)(void *)(rec + L.minp + jj * 64);
            for (int r = 0; r < PW; r++) {
                mp[2 * r] = tr[r].mn[2 * jj];
                mp[2 * r + 1] = tr[r].mn[2 * jj + 1];
            }
        }
    }
}

/* int32 lanes to float (SIMDe has no _mm512_cvtepi32_ps: the emulation build converts the two
 * halves with the AVX2 instruction, the same rounding) */
MUSE_AVX2_INLINE __m512 tile_cvt(__m512i x) {
#if defined(MUSE_EMULATE_AVX512)
    const __m256 lo = _mm256_cvtepi32_ps(_mm512_castsi512_si256(x));
    const __m256 hi = _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(x, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
#else
    return _mm512_cvtepi32_ps(x);
#endif
}

MUSE_AVX2_INLINE __m512i tile_bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The offset unit: the elements whose -o A one sum starts from (a group, or the scale-1 types' float block). */
#define TILE_OU(c) ((c).s1 && !(c).fgs ? (c).fbe : (c).g)

/* t[u] = -o A_u for the n / TILE_OU(c) units of an activation row (gs: its 16-element sums). The
 * kernel's integer sums start from these instead of 0, which removes the offset's vpdpwssd per 32
 * elements and the clearing per group on every accumulator (the same integers: -o s_g A_g is
 * what that vpdpwssd added). */
MUSE_AVX2_INLINE void tile_offsets(const struct tile_cfg c, int64_t n, const int16_t *gs, int32_t *t) {
    const int U = TILE_OU(c);
    const int64_t n16 = n / 16;
    int64_t i = 0;
    if (U == 16) { /* each sum widened, times -o (the emulation build: AVX2, SIMDe has no 512-bit widening) */
#if !defined(MUSE_EMULATE_AVX512)
        for (; i + 16 <= n16; i += 16)
            _mm512_storeu_si512((void *)(t + i), _mm512_mullo_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(gs + i))),
                                                                    _mm512_set1_epi32(-c.o)));
#endif
        for (; i + 8 <= n16; i += 8)
            _mm256_storeu_si256((__m256i *)(void *)(t + i), _mm256_mullo_epi32(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(gs + i))),
                                                                               _mm256_set1_epi32(-c.o)));
    } else if (U == 256) { /* 16 sums per unit: pair sums times -o (vpdpwssd from 0: SIMDe's
                            * _mm512_madd_epi16 is broken), then the 8 lanes of each unit
                            * added up, 8 units at a time (a transposing sum), the rest one by one */
        const __m512i mo = _mm512_set1_epi16((short)-c.o);
        for (; i + 128 <= n16; i += 128) {
            __m512i x[4]; /* x[k]: units 2k (lanes 0-7) and 2k + 1 (lanes 8-15), 8 pair sums each */
            for (int k = 0; k < 4; k++) x[k] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)(gs + i + 32 * k)), mo);
            const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(x[0], x[1]), _mm512_unpackhi_epi32(x[0], x[1]));
            const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(x[2], x[3]), _mm512_unpackhi_epi32(x[2], x[3]));
            /* 128-bit lane L: the 4-lane sums of quarter L of x[0..3] */
            const __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
            /* lanes 0 / 2: the unit sums of units 0, 2, 4, 6 / 1, 3, 5, 7 */
            const __m512i u = _mm512_add_epi32(q, _mm512_shuffle_i32x4(q, q, 0xb1));
            const __m128i ev = _mm512_castsi512_si128(u), od = _mm512_extracti32x4_epi32(u, 2);
            _mm_storeu_si128((__m128i *)(void *)(t + i / 16), _mm_unpacklo_epi32(ev, od));
            _mm_storeu_si128((__m128i *)(void *)(t + i / 16 + 4), _mm_unpackhi_epi32(ev, od));
        }
        for (; i + 16 <= n16; i += 16) {
            const __m256i p = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(gs + i)), _mm256_set1_epi16(1));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            t[i / 16] = -c.o * _mm_cvtsi128_si32(h);
        }
    } else if (U == 32) {
        for (; i + 32 <= n16; i += 32)
            _mm512_storeu_si512((void *)(t + i / 2), _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)(gs + i)),
                                                                     _mm512_set1_epi16((short)-c.o)));
    }
    for (; i < n16; i += U / 16) {
        int32_t A = 0;
        for (int u = 0; u < U / 16; u++) A += gs[i + u];
        t[i / (U / 16)] = -c.o * A;
    }
}
