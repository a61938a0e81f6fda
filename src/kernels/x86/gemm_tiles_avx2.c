/*
 * gemm_tiles_avx2.c - the tile GEMM for the AVX2 level: the batched (prefill / verify) matmul of
 * every quant type of tile_decode.h in a reassociated float order (not bit-identical to the
 * reference; within the bound of docs/cpu-backend.md, "The tile GEMM"). Defines
 * muse_tile_gemm_<t>_avx2 (muse_tile_gemm_fn, kernels.h) for the types of MUSE_TILE_TYPES.
 *
 * Per panel of 8 weight rows the weights are packed once (tile_decode.h, then here) into:
 *   codes  u8 c = v + o, the 8 rows interleaved by 4 bytes: register k of a 32-element chunk
 *          holds elements 4k..4k+3 of rows 0..7; codes above 15 (Q8_0, IQ4_NL, IQ4_XS) are split
 *          into two nibble planes (c = 16 h + l), packed the same way;
 *   scales int16 pairs (s_r, s_r) per group and plane (plane h: 16 s), then per float block the
 *          float factors d, m of the 8 rows and int16 pairs for the offset (o s) and min terms.
 * and then multiplied with every activation row (muse_fast_act rows: int8 codes, 16-element sums,
 * the block scales as f32), NY rows at a time. Per step of 4 elements: the activation's 4 bytes
 * are broadcast (a pshufd of a 16-byte broadcast), maddubs(codes, a) gives int16 pair sums per
 * row, which are added in int16 for FL steps (FL * 2 * cmax * 127 <= 32767: no saturation; the
 * activation codes are within +-127), then one madd with the group scale widens them to int32.
 * Per float block the int32 sum I (exact) is converted and accumulated with one FMA by
 * d * d_a, the offset o * sum_g s_g A_g is subtracted in int32 and the mins go through a madd with
 * the activation's 16-element sums. Per 32 weights and activation row that is 1 maddubs + 1 add
 * (+ 1/FL madd) for 4-bit codes, against sign + maddubs + madd + convert + FMA in the exact
 * kernels (measured bounds in docs/perf.md).
 */
#include "kernels/x86/kernels_isa.h"

#include "kernels/kernels.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/tile_decode_avx2.h"

#define PW 8           /* weight rows per panel */
/* Keep v in a register at this point: stops GCC from re-associating the integer sums of the
 * unrolled steps into a tree of spilled partial sums (as in gemm_kquants.inc). */
#define TILE_PIN(v) __asm__("" : "+x"(v))
#define NY_MAX1 4      /* activation rows per pass, one code plane */
#define NY_MAX2 3      /* ... two code planes */

/* int16 steps between widenings: FL * 2 * c * 127 <= 32767 for the codes of one plane, capped
 * at the group's steps; 0 = two planes */
#define TILE_PLANES(cmax) ((cmax) > 129 ? 2 : 1)
#define TILE_CPL(cmax) (TILE_PLANES(cmax) == 2 ? 15 : (cmax))
#define TILE_FL_RAW(cmax) (32767 / (254 * TILE_CPL(cmax)))
#define TILE_POW2(x) ((x) >= 8 ? 8 : (x) >= 4 ? 4 : (x) >= 2 ? 2 : 1)
#define TILE_FL(cmax, g) (TILE_POW2(TILE_FL_RAW(cmax)) < (g) / 4 ? TILE_POW2(TILE_FL_RAW(cmax)) : (g) / 4)

/* Byte layout of one float block of a panel. */
struct tile_lay {
    int codes, scal, dv, mv, offp, minp, rec;
};

MUSE_AVX2_INLINE struct tile_lay tile_layout(const struct tile_cfg c) {
    const int pl = TILE_PLANES(c.cmax);
    struct tile_lay l;
    l.codes = 0;
    l.scal = c.fbe * 8 * pl;
    l.dv = l.scal + (c.s1 ? 0 : (c.fbe / c.g) * pl * 32);
    l.mv = l.dv + (c.fgs ? c.fbe / c.g : 1) * 32; /* d, or the float scale of each group (fgs) */
    l.offp = l.mv + (c.mins ? 32 : 0);
    l.minp = l.offp + (c.o && !c.s1 ? c.fbe : 0);
    l.rec = l.minp + (c.mins ? c.fbe : 0);
    return l;
}


/* 8 int16 at p as 8 int32 lanes (p[i], p[i]) */
MUSE_AVX2_INLINE __m256i tile_dup_pairs(const int16_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

/* Pack rows [0, nr) of n elements (nr <= PW; the others as zero rows) into pan. */
MUSE_AVX2_INLINE void tile_pack(const struct tile_cfg c, tile_decode_fn dec, int64_t n, const uint8_t *w, size_t ws,
                                int nr, uint8_t *pan) {
    const struct tile_lay L = tile_layout(c);
    const int pl = TILE_PLANES(c.cmax);
    const int64_t nfb = n / c.fbe;
    struct tile_row tr[PW], big[PW]; /* big: whole weight blocks (c.sub > 1) */
    for (int r = nr; r < PW; r++) memset(&tr[r], 0, sizeof tr[r]);
    const __m256i off = _mm256_set1_epi8((char)c.o), m4 = _mm256_set1_epi8(15);
    for (int64_t fb = 0; fb < nfb; fb++) {
        uint8_t *rec = pan + fb * L.rec;
        for (int r = 0; r < nr; r++) td_float_block(c, dec, w + r * ws, fb, &big[r], &tr[r]);
        for (int j = 0; j < c.fbe / 32; j++) {
            __m256i x[PW];
            for (int r = 0; r < PW; r++) x[r] = _mm256_add_epi8(_mm256_load_si256((const __m256i *)(tr[r].v + 32 * j)), off);
            if (pl == 1) {
                avx2_transpose8x32(x);
                for (int k = 0; k < 8; k++) _mm256_store_si256((__m256i *)(rec + L.codes + (j * 8 + k) * 32), x[k]);
            } else {
                __m256i h[PW];
                for (int r = 0; r < PW; r++) {
                    h[r] = _mm256_and_si256(_mm256_srli_epi16(x[r], 4), m4);
                    x[r] = _mm256_and_si256(x[r], m4);
                }
                avx2_transpose8x32(h);
                avx2_transpose8x32(x);
                for (int k = 0; k < 8; k++) {
                    _mm256_store_si256((__m256i *)(rec + L.codes + ((j * 2 + 0) * 8 + k) * 32), h[k]);
                    _mm256_store_si256((__m256i *)(rec + L.codes + ((j * 2 + 1) * 8 + k) * 32), x[k]);
                }
            }
        }
        if (!c.s1) { /* per group and plane: (s_r, s_r) for the 8 rows (plane h: 16 s) */
            for (int half = 0; half < c.fbe / c.g / 8; half++) {
                __m256i x[PW];
                for (int r = 0; r < PW; r++) x[r] = tile_dup_pairs(tr[r].s + 8 * half);
                avx2_transpose8x32(x);
                for (int k = 0; k < 8; k++)
                    for (int p = 0; p < pl; p++)
                        _mm256_store_si256((__m256i *)(rec + L.scal + ((8 * half + k) * pl + p) * 32),
                                           pl == 2 && p == 0 ? _mm256_slli_epi16(x[k], 4) : x[k]);
            }
            if (c.o) { /* per 32 elements: (o s of its first 16, o s of its second 16) */
                __m256i x[PW];
                const __m256i o16 = _mm256_set1_epi16((short)c.o);
                for (int r = 0; r < PW; r++)
                    x[r] = _mm256_mullo_epi16(o16, c.g == 16 ? _mm256_loadu_si256((const __m256i *)tr[r].s)
                                                             : tile_dup_pairs(tr[r].s));
                avx2_transpose8x32(x);
                for (int k = 0; k < c.fbe / 32; k++) _mm256_store_si256((__m256i *)(rec + L.offp + k * 32), x[k]);
            }
        }
        float *dv = (float *)(void *)(rec + L.dv), *mv = (float *)(void *)(rec + L.mv);
        for (int r = 0; r < PW; r++) {
            dv[r] = tr[r].d;
            if (c.mins) mv[r] = tr[r].m;
            for (int gi = 0; gi < c.fbe / c.g && c.fgs; gi++) dv[PW * gi + r] = tr[r].dg[gi];
        }
        if (c.mins) { /* per 32 elements: (mn of its first 16, mn of its second 16) */
            __m256i x[PW];
            for (int r = 0; r < PW; r++) x[r] = _mm256_loadu_si256((const __m256i *)tr[r].mn);
            avx2_transpose8x32(x);
            for (int k = 0; k < c.fbe / 32; k++) _mm256_store_si256((__m256i *)(rec + L.minp + k * 32), x[k]);
        }
    }
}

/* The int32 lane pairs of the activation's 16-element sums u = 2jj, 2jj + 1, broadcast. */
MUSE_AVX2_INLINE __m256i tile_gsum_pair(const int16_t *gs, int jj) {
    int32_t v;
    memcpy(&v, gs + 2 * jj, 4);
    return _mm256_set1_epi32(v);
}

/*
 * One packed panel against NY activation rows: acc[r] (8 floats, one per weight row) += the
 * panel's dot products with row r. xp rows: codes at a[r], 16-element sums at gs[r], block
 * scales at da[r] (muse_fast_act layout).
 */
/* The 32-bit element k (0..3) of each 128-bit half in every lane of its half. A switch, so that
 * the shuffle's immediate is a constant also where the compiler does not unroll the k loop (-O1:
 * the asan build). */
MUSE_AVX2_INLINE __m256i tile_bcast32(__m256i v, int k) {
    switch (k) {
    case 0: return _mm256_shuffle_epi32(v, 0x00);
    case 1: return _mm256_shuffle_epi32(v, 0x55);
    case 2: return _mm256_shuffle_epi32(v, 0xaa);
    default: return _mm256_shuffle_epi32(v, 0xff);
    }
}

MUSE_AVX2_INLINE void tile_run(const struct tile_cfg c, int64_t n, const uint8_t *pan, const int8_t *const *a,
                               const int16_t *const *gs, const float *const *da, const int NY, __m256 *acc) {
    const struct tile_lay L = tile_layout(c);
    const int PL = TILE_PLANES(c.cmax), FL = TILE_FL(c.cmax, c.g);
    const int64_t nfb = n / c.fbe;
    for (int64_t fb = 0; fb < nfb; fb++) {
        const uint8_t *rec = pan + fb * L.rec;
        const int64_t e0 = fb * c.fbe;
        __m256i I[NY_MAX1];
        __m256 T[NY_MAX1]; /* fgs: the float block's sum of cvt(G_g) dg_g */
        MUSE_UNROLL
        for (int r = 0; r < NY; r++) {
            I[r] = _mm256_setzero_si256();
            T[r] = _mm256_setzero_ps();
        }
        for (int j = 0; j < c.fbe / 32; j++) {
            const uint8_t *scj = rec + L.scal + (32 / c.g) * j * PL * 32; /* the chunk's group scales */
            __m256i s16[NY_MAX1][2];
            MUSE_UNROLL
            for (int r = 0; r < NY; r++)
                MUSE_UNROLL
                for (int p = 0; p < PL; p++) s16[r][p] = _mm256_setzero_si256();
            MUSE_UNROLL
            for (int h = 0; h < 2; h++) {
                __m256i a128[NY_MAX1];
                MUSE_UNROLL
                for (int r = 0; r < NY; r++)
                    a128[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a[r] + e0 + 32 * j + 16 * h)));
                MUSE_UNROLL
                for (int k = 0; k < 4; k++) {
                    const int t = 4 * h + k; /* step within the chunk */
                    __m256i wv[2];
                    MUSE_UNROLL
                    for (int p = 0; p < PL; p++)
                        wv[p] = _mm256_load_si256((const __m256i *)(rec + L.codes + ((j * PL + p) * 8 + t) * 32));
                    MUSE_UNROLL
                    for (int r = 0; r < NY; r++) {
                        const __m256i b = tile_bcast32(a128[r], k);
                        MUSE_UNROLL
                        for (int p = 0; p < PL; p++) {
                            s16[r][p] = _mm256_add_epi16(s16[r][p], _mm256_maddubs_epi16(wv[p], b));
                            TILE_PIN(s16[r][p]);
                        }
                    }
                    if (c.fgs && (t + 1) % FL == 0) { /* widen into G_g; at the group's end, finish it */
                        const int gj = j * (32 / c.g) + (4 * t) / c.g; /* group within the float block */
                        const bool end = (t + 1) % (c.g / 4) == 0;
                        int32_t oa[NY_MAX1];
                        MUSE_UNROLL
                        for (int r = 0; r < NY; r++) {
                            oa[r] = 0;
                            for (int u = 0; end && u < c.g / 16; u++) oa[r] += c.o * gs[r][(e0 + gj * c.g) / 16 + u];
                        }
                        const __m256 dg = _mm256_load_ps((const float *)(const void *)(rec + L.dv + gj * 32));
                        MUSE_UNROLL
                        for (int r = 0; r < NY; r++) {
                            I[r] = _mm256_add_epi32(I[r], _mm256_madd_epi16(s16[r][0], _mm256_set1_epi16(1)));
                            s16[r][0] = _mm256_setzero_si256();
                            if (!end) continue;
                            const __m256 G = _mm256_cvtepi32_ps(_mm256_sub_epi32(I[r], _mm256_set1_epi32(oa[r])));
                            T[r] = gj == 0 ? _mm256_mul_ps(G, dg) : _mm256_fmadd_ps(G, dg, T[r]);
                            I[r] = _mm256_setzero_si256();
                        }
                    } else if ((t + 1) % FL == 0) { /* widen with the group scale */
                        const int gi = (4 * t) / c.g; /* group within the chunk */
                        MUSE_UNROLL
                        for (int p = 0; p < PL; p++) {
                            const __m256i sc = c.s1 ? _mm256_set1_epi16(PL == 2 && p == 0 ? 16 : 1)
                                                    : _mm256_load_si256((const __m256i *)(scj + (gi * PL + p) * 32));
                            MUSE_UNROLL
                            for (int r = 0; r < NY; r++) {
                                I[r] = _mm256_add_epi32(I[r], _mm256_madd_epi16(s16[r][p], sc));
                                TILE_PIN(I[r]);
                                s16[r][p] = _mm256_setzero_si256();
                            }
                        }
                    }
                }
            }
        }
        if (c.fgs) {
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) acc[r] = _mm256_fmadd_ps(T[r], _mm256_set1_ps(da[r][e0 / 32]), acc[r]);
            continue;
        }
        if (c.o)
            for (int jj = 0; jj < c.fbe / 32; jj++) {
                const __m256i ov = c.s1 ? _mm256_set1_epi16((short)c.o)
                                        : _mm256_load_si256((const __m256i *)(rec + L.offp + jj * 32));
                MUSE_UNROLL
                for (int r = 0; r < NY; r++)
                    I[r] = _mm256_sub_epi32(I[r], _mm256_madd_epi16(ov, tile_gsum_pair(gs[r] + e0 / 16, jj)));
            }
        const __m256 dv = _mm256_load_ps((const float *)(const void *)(rec + L.dv));
        MUSE_UNROLL
        for (int r = 0; r < NY; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[r]), _mm256_mul_ps(dv, _mm256_set1_ps(da[r][e0 / 32])), acc[r]);
        if (c.mins) {
            __m256i M[NY_MAX1];
            MUSE_UNROLL
            for (int r = 0; r < NY; r++) M[r] = _mm256_setzero_si256();
            for (int jj = 0; jj < c.fbe / 32; jj++) {
                const __m256i mp = _mm256_load_si256((const __m256i *)(rec + L.minp + jj * 32));
                MUSE_UNROLL
                for (int r = 0; r < NY; r++) M[r] = _mm256_add_epi32(M[r], _mm256_madd_epi16(mp, tile_gsum_pair(gs[r] + e0 / 16, jj)));
            }
            const __m256 mv = _mm256_load_ps((const float *)(const void *)(rec + L.mv));
            MUSE_UNROLL
            for (int r = 0; r < NY; r++)
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M[r]), _mm256_mul_ps(mv, _mm256_set1_ps(da[r][e0 / 32])), acc[r]);
        }
    }
}

/* NY activation rows from r0 through one packed panel; the nr valid columns to out. */
MUSE_AVX2_INLINE void tile_rows(const struct tile_cfg c, int64_t n, const uint8_t *pan, const char *xp, size_t xps,
                                int r0, const int NY, int nr, float *out, int64_t os) {
    const int8_t *a[NY_MAX1];
    const int16_t *gs[NY_MAX1];
    const float *da[NY_MAX1];
    __m256 acc[NY_MAX1];
    MUSE_UNROLL
    for (int r = 0; r < NY; r++) {
        const char *row = xp + (size_t)(r0 + r) * xps;
        a[r] = (const int8_t *)row;
        gs[r] = (const int16_t *)(const void *)(row + n);
        da[r] = (const float *)(const void *)(row + n + n / 8);
        acc[r] = _mm256_setzero_ps();
    }
    tile_run(c, n, pan, a, gs, da, NY, acc);
    MUSE_UNROLL
    for (int r = 0; r < NY; r++) {
        float *o = out + (int64_t)(r0 + r) * os;
        if (nr == PW) {
            _mm256_storeu_ps(o, acc[r]);
        } else {
            _Alignas(32) float t[PW];
            _mm256_store_ps(t, acc[r]);
            for (int i = 0; i < nr; i++) o[i] = t[i];
        }
    }
}

MUSE_AVX2_INLINE bool tile_gemm(const struct tile_cfg c, tile_decode_fn dec, int64_t n, const void *w, size_t ws,
                                int64_t n_rows, const void *xp, size_t xps, int n_act, float *out, int64_t os,
                                void *scratch, size_t scratch_bytes) {
    if (n % c.fbe != 0) return false;
    const struct tile_lay L = tile_layout(c);
    if ((size_t)(n / c.fbe) * (size_t)L.rec > scratch_bytes || ((uintptr_t)scratch & 31)) return false;
    uint8_t *pan = scratch;
    const int ny_max = TILE_PLANES(c.cmax) == 2 ? NY_MAX2 : NY_MAX1;
    for (int64_t i0 = 0; i0 < n_rows; i0 += PW) {
        const int nr = n_rows - i0 < PW ? (int)(n_rows - i0) : PW;
        tile_pack(c, dec, n, (const uint8_t *)w + i0 * ws, ws, nr, pan);
        const uint8_t *next = (const uint8_t *)w + (i0 + PW) * ws; /* the next panel's rows */
        const size_t next_bytes = tile_next_bytes(i0, PW, n_rows, ws);
        for (int r0 = 0; r0 < n_act; r0 += ny_max) {
            if (next_bytes) tile_prefetch(next, next_bytes, r0, ny_max, n_act);
#if defined(MUSE_KERNELS_COMPACT) /* one kernel, the group's size at run time (gemm_tiles_avx512.c) */
            tile_rows(c, n, pan, xp, xps, r0, n_act - r0 < ny_max ? n_act - r0 : ny_max, nr, out + i0, os);
#else
            switch (n_act - r0 < ny_max ? n_act - r0 : ny_max) {
            case 1: tile_rows(c, n, pan, xp, xps, r0, 1, nr, out + i0, os); break;
            case 2: tile_rows(c, n, pan, xp, xps, r0, 2, nr, out + i0, os); break;
            case 3: tile_rows(c, n, pan, xp, xps, r0, 3, nr, out + i0, os); break;
            default: tile_rows(c, n, pan, xp, xps, r0, TILE_PLANES(c.cmax) == 2 ? 3 : 4, nr, out + i0, os); break;
            }
#endif
        }
    }
    return true;
}


#define TILE_DEFINE(T, t, FBE, G, O, CMAX, MINS, S1)                                                              \
    static void td_##t##_fn(const uint8_t *blk, struct tile_row *r) { tdx_##t(blk, r); }                          \
    bool muse_tile_gemm_##t##_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp, size_t xps, \
                                   int n_act, float *out, int64_t os, void *scratch, size_t scratch_bytes) {      \
        const struct tile_cfg c = TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1);                                        \
        return tile_gemm(c, td_##t##_fn, n, w, ws, n_rows, xp, xps, n_act, out, os, scratch, scratch_bytes);       \
    }                                                                                                             \
    size_t muse_tile_panel_bytes_##t##_avx2(int64_t n) {                                                          \
        const struct tile_cfg c = TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1);                                        \
        return (size_t)(n / FBE) * (size_t)tile_layout(c).rec;                                                    \
    }

MUSE_TILE_TYPES(TILE_DEFINE) /* defines muse_tile_gemm_<t>_avx2 and muse_tile_panel_bytes_<t>_avx2 */
