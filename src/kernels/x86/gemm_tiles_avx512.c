/*
 * gemm_tiles_avx512.c - the tile GEMM for the AVX-512 level (VNNI, 512-bit registers):
 * muse_tile_gemm_<t>_avx512 for the types of MUSE_TILE_TYPES, the same function of the inputs as
 * the AVX2 build (gemm_tiles_avx2.c) but for the float-group types (tile_cfg_avx512 in
 * tile_decode.h; all within the bound of docs/cpu-backend.md "The tile GEMM"), with another
 * packing and inner loop:
 *   panels of 16 weight rows; the codes c = v + o (0..255, one plane) interleaved by 4 bytes, so a
 *   64-byte register holds elements 4k..4k+3 of the 16 rows;
 *   per step of 4 elements one vpdpbusd (codes unsigned x the activation's 4 signed bytes,
 *   broadcast) adds the 4 products of each row into its int32 lane, exactly (no int16 stage, no
 *   saturation bound: every code width takes the same path); two panels (32 weight rows) go
 *   against 6 activation rows at a time (12 independent vpdpbusd chains, 8 loads per 12; a
 *   single panel against 8 rows only for a last odd panel), the steps of a group unrolled;
 *   per group the int32 lanes are converted and FMA'd with the group's float scale s_g d into
 *   the float block's sum (none for the types whose scales are all 1: one int32 sum per float
 *   block); every sum starts from -o A (tile_offsets); the mins are one vpdpwssd per 32
 *   elements, with the activation's 16-element sums.
 * The first packing stage (tile_decode_avx2.h: AVX2 decoders of the common types, the plain
 * td_<t> of tile_decode.h for the others) is shared with the AVX2 build.
 * Tested without an AVX-512 CPU by `make emu512` (SIMDe), like the other AVX-512 kernels; timed on
 * an Intel Xeon with AVX-512 VNNI (bench/tile_lab, docs/perf.md issue 14).
 */
#include "kernels/x86/kernels_isa.h"

#include "kernels/kernels.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/tile_decode_avx2.h"
#include "kernels/x86/tile_pack_avx512.h"

/* The loops over rows, panels and steps unrolled (registers, not stack arrays, hold the
 * accumulators); not in the SIMDe emulation build, where that only made the compiler take ~15
 * minutes over this file (its speed does not matter there, its results do: the same either way). */
#if defined(MUSE_EMULATE_AVX512) || defined(MUSE_KERNELS_COMPACT)
#define TILE_UNROLL
#else
#define TILE_UNROLL MUSE_UNROLL
#endif

#define NY_MAX 8 /* activation rows per pass */

/* The steps of group gi of float block fb: S[p][r] += panel p's codes x row r's bytes, one
 * vpdpbusd per panel, row and 4 elements (exact int32 sums). */
MUSE_AVX2_INLINE void tile_steps(const struct tile_cfg c, const uint8_t *const *pan, const struct tile_lay L, int64_t fb,
                                 int gi, const int8_t *const *a, int64_t eg, const int P, const int NY,
                                 __m512i S[2][NY_MAX]) {
    TILE_UNROLL
    for (int k = 0; k < c.g / 4; k++) {
        __m512i w[2];
        TILE_UNROLL
        for (int p = 0; p < P; p++)
            w[p] = _mm512_loadu_si512((const void *)(pan[p] + fb * L.rec + L.codes + gi * (c.g / 4) * 64 + k * 64));
        TILE_UNROLL
        for (int r = 0; r < NY; r++) {
            const __m512i x = tile_bcast4(a[r] + eg + 4 * k);
            TILE_UNROLL
            for (int p = 0; p < P; p++) S[p][r] = _mm512_dpbusd_epi32(S[p][r], w[p], x);
        }
    }
}

/* P packed panels (1 or 2: 16 or 32 weight rows) against NY activation rows: acc[p][r] (16 floats)
 * += panel p's dots with row r. Two panels per step load two weight registers for NY broadcasts,
 * 2 NY independent vpdpbusd chains (NY 6: 12, enough to cover its latency on two ports, 8 loads
 * per 12 vpdpbusd instead of 9 per 8). Every output element sees the same operations in the same
 * order for any P and NY (exact integer sums, then one FMA per float block). */
MUSE_AVX2_INLINE void tile_run(const struct tile_cfg c, int64_t n, const uint8_t *const *pan, const int8_t *const *a,
                               const int16_t *const *gs, const float *const *da, const int32_t *const *oa, const int P,
                               const int NY, __m512 acc[2][NY_MAX]) {
    const struct tile_lay L = tile_layout(c);
    const int64_t nfb = n / c.fbe;
    for (int64_t fb = 0; fb < nfb; fb++) {
        const int64_t e0 = fb * c.fbe;
        if (c.fgs || c.fg) { /* float group scales: each group's G_g (from -o A_g) finished in float */
            __m512 T[2][NY_MAX];
            TILE_UNROLL
            for (int p = 0; p < P; p++)
                TILE_UNROLL
                for (int r = 0; r < NY; r++) T[p][r] = _mm512_setzero_ps(); /* (all set by group 0) */
            for (int gi = 0; gi < c.fbe / c.g; gi++) {
                const int64_t eg = e0 + (int64_t)gi * c.g;
                __m512i Gsum[2][NY_MAX];
                TILE_UNROLL
                for (int r = 0; r < NY; r++)
                    TILE_UNROLL
                    for (int p = 0; p < P; p++) Gsum[p][r] = c.o ? _mm512_set1_epi32(oa[r][eg / c.g]) : _mm512_setzero_si512();
                tile_steps(c, pan, L, fb, gi, a, eg, P, NY, Gsum);
                TILE_UNROLL
                for (int p = 0; p < P; p++) {
                    const __m512 dg = _mm512_loadu_ps((const void *)(pan[p] + fb * L.rec + L.dv + gi * 64));
                    TILE_UNROLL
                    for (int r = 0; r < NY; r++)
                        T[p][r] = gi == 0 ? _mm512_mul_ps(tile_cvt(Gsum[p][r]), dg) : _mm512_fmadd_ps(tile_cvt(Gsum[p][r]), dg, T[p][r]);
                }
            }
            TILE_UNROLL
            for (int p = 0; p < P; p++)
                TILE_UNROLL
                for (int r = 0; r < NY; r++) acc[p][r] = _mm512_fmadd_ps(T[p][r], _mm512_set1_ps(da[r][e0 / 32]), acc[p][r]);
        } else { /* every group scale is 1 (tile_cfg_avx512 leaves no integer group scales here): one
                  * exact int32 sum per float block, from -o A */
            __m512i Isum[2][NY_MAX];
            TILE_UNROLL
            for (int p = 0; p < P; p++)
                TILE_UNROLL
                for (int r = 0; r < NY; r++) Isum[p][r] = c.o ? _mm512_set1_epi32(oa[r][fb]) : _mm512_setzero_si512();
            for (int gi = 0; gi < c.fbe / c.g; gi++) {
                tile_steps(c, pan, L, fb, gi, a, e0 + (int64_t)gi * c.g, P, NY, Isum);
                if (!c.dm) continue;
                TILE_UNROLL
                for (int p = 0; p < P; p++) { /* + delta s_g A_g (both 16-units of the 32-element group) */
                    const __m512i mp = _mm512_loadu_si512((const void *)(pan[p] + fb * L.rec + L.minp + gi * 64));
                    TILE_UNROLL
                    for (int r = 0; r < NY; r++) Isum[p][r] = _mm512_dpwssd_epi32(Isum[p][r], mp, tile_bcast4(gs[r] + (e0 + gi * c.g) / 16));
                }
            }
            TILE_UNROLL
            for (int p = 0; p < P; p++) {
                const __m512 dv = _mm512_loadu_ps((const void *)(pan[p] + fb * L.rec + L.dv));
                TILE_UNROLL
                for (int r = 0; r < NY; r++)
                    acc[p][r] = _mm512_fmadd_ps(tile_cvt(Isum[p][r]), _mm512_mul_ps(dv, _mm512_set1_ps(da[r][e0 / 32])), acc[p][r]);
            }
        }
        if (!c.mins) continue;
        TILE_UNROLL
        for (int p = 0; p < P; p++) {
            const uint8_t *rec = pan[p] + fb * L.rec;
            __m512i Msum[NY_MAX];
            TILE_UNROLL
            for (int r = 0; r < NY; r++) Msum[r] = _mm512_setzero_si512();
            for (int jj = 0; jj < c.fbe / 32; jj++) {
                const __m512i mp = _mm512_loadu_si512((const void *)(rec + L.minp + jj * 64));
                TILE_UNROLL
                for (int r = 0; r < NY; r++) Msum[r] = _mm512_dpwssd_epi32(Msum[r], mp, tile_bcast4(gs[r] + e0 / 16 + 2 * jj));
            }
            const __m512 mv = _mm512_loadu_ps((const void *)(rec + L.mv));
            TILE_UNROLL
            for (int r = 0; r < NY; r++)
                acc[p][r] = _mm512_fmadd_ps(tile_cvt(Msum[r]), _mm512_mul_ps(mv, _mm512_set1_ps(da[r][e0 / 32])), acc[p][r]);
        }
    }
}

/* P panels against the NY activation rows at xa (xps bytes apart); the nr[p] valid columns of
 * each to the output rows at out (os floats apart). */
MUSE_AVX2_INLINE void tile_rows(const struct tile_cfg c, int64_t n, const uint8_t *const *pan, const char *xa, size_t xps,
                                const int P, const int NY, const int *nr, float *out, int64_t os, int32_t *ot) {
    const int8_t *a[NY_MAX];
    const int16_t *gs[NY_MAX];
    const float *da[NY_MAX];
    const int32_t *oa[NY_MAX];
    __m512 acc[2][NY_MAX];
    TILE_UNROLL
    for (int r = 0; r < NY; r++) {
        const char *row = xa + (size_t)r * xps;
        a[r] = (const int8_t *)row;
        gs[r] = (const int16_t *)(const void *)(row + n);
        da[r] = (const float *)(const void *)(row + n + n / 8);
        oa[r] = ot + (size_t)r * (size_t)(n / 16);
        if (c.o) tile_offsets(c, n, gs[r], ot + (size_t)r * (size_t)(n / 16));
        acc[0][r] = acc[1][r] = _mm512_setzero_ps();
    }
    tile_run(c, n, pan, a, gs, da, oa, P, NY, acc);
    TILE_UNROLL
    for (int p = 0; p < P; p++)
        TILE_UNROLL
        for (int r = 0; r < NY; r++) {
            float *o = out + (int64_t)r * os + p * PW;
            if (nr[p] == PW) {
                _mm512_storeu_ps(o, acc[p][r]);
            } else {
                _Alignas(64) float t[PW];
                _mm512_store_ps(t, acc[p][r]);
                for (int i = 0; i < nr[p]; i++) o[i] = t[i];
            }
        }
}

#define NY_PAIR 6 /* activation rows per pass with two panels */

/* The scratch of the offset tables of a pass's activation rows (after the two panels). */
static inline size_t tile_offset_bytes(int64_t n) { return (size_t)NY_MAX * (size_t)(n / 16) * sizeof(int32_t); }

/* tile_rows for a group of NY activation rows of MUSE_AVX2_ROW_GROUPS_WITH (a, o: its first row) */
#define TILE_ROWS(P, NY)                                                          \
    do {                                                                          \
        if (next_bytes) tile_prefetch(next, next_bytes, r0, NY, n_act);           \
        tile_rows(c, n, pan, a, act_stride, P, NY, nr, o + i0, out_stride, ot);   \
    } while (0)

/* The groups of at most NYM activation rows against P panels. MUSE_KERNELS_COMPACT (the sanitizer
 * builds, Makefile): one kernel per P with the group's size a run-time value instead of one
 * unrolled kernel per size - the same operations in the same order for every output element
 * (tile_run), a tenth of the code, and minutes less to compile under the sanitizers. */
#if defined(MUSE_KERNELS_COMPACT)
#define TILE_GROUPS(NYM, P)                                                            \
    for (int r0 = 0; r0 < n_act; r0 += (NYM)) {                                        \
        const char *a = (const char *)act + (size_t)r0 * act_stride;                   \
        float *o = out + (int64_t)r0 * out_stride;                                     \
        const int ny = n_act - r0 < (NYM) ? n_act - r0 : (NYM);                        \
        TILE_ROWS(P, ny);                                                              \
    }
#else
#define TILE_GROUPS(NYM, P) MUSE_AVX2_ROW_GROUPS_WITH(NYM, TILE_ROWS, P)
#endif

MUSE_AVX2_INLINE bool tile_gemm(const struct tile_cfg c, tile_decode_fn dec, int64_t n, const void *w, size_t ws,
                                int64_t n_rows, const void *act, size_t act_stride, int n_act, float *out,
                                int64_t out_stride, void *scratch, size_t scratch_bytes) {
    if (n % c.fbe != 0) return false;
    const struct tile_lay L = tile_layout(c);
    const size_t pb = (size_t)(n / c.fbe) * (size_t)L.rec; /* one panel (a multiple of 64 bytes) */
    if (2 * pb + tile_offset_bytes(n) > scratch_bytes || ((uintptr_t)scratch & 31)) return false;
    const uint8_t *pan[2] = {scratch, (uint8_t *)scratch + pb};
    int32_t *ot = (int32_t *)(void *)((uint8_t *)scratch + 2 * pb); /* tile_offsets of the pass's rows */
    for (int64_t i0 = 0; i0 < n_rows; i0 += 2 * PW) {
        const int nr[2] = {n_rows - i0 < PW ? (int)(n_rows - i0) : PW,
                           n_rows - i0 - PW <= 0 ? 0 : n_rows - i0 - PW < PW ? (int)(n_rows - i0 - PW) : PW};
        tile_pack(c, dec, n, (const uint8_t *)w + i0 * ws, ws, nr[0], (uint8_t *)pan[0]);
        if (nr[1] > 0) tile_pack(c, dec, n, (const uint8_t *)w + (i0 + PW) * ws, ws, nr[1], (uint8_t *)pan[1]);
        const uint8_t *next = (const uint8_t *)w + (i0 + 2 * PW) * ws;
        const size_t next_bytes = tile_next_bytes(i0, 2 * PW, n_rows, ws);
        if (nr[1] > 0) {
            TILE_GROUPS(NY_PAIR, 2)
        } else {
            TILE_GROUPS(NY_MAX, 1)
        }
    }
    return true;
}

#define TILE_DEFINE(T, t, FBE, G, O, CMAX, MINS, S1)                                                               \
    static inline void td_##t##_fn(const uint8_t *blk, struct tile_row *r) { tdx_##t(blk, r); }                    \
    bool muse_tile_gemm_##t##_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp,          \
                                     size_t xps, int n_act, float *out, int64_t os, void *scratch,                 \
                                     size_t scratch_bytes) {                                                       \
        const struct tile_cfg c = tile_cfg_avx512(TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1), MUSE_TYPE_##T);    \
        return tile_gemm(c, td_##t##_fn, n, w, ws, n_rows, xp, xps, n_act, out, os, scratch, scratch_bytes);       \
    }                                                                                                              \
    size_t muse_tile_panel_bytes_##t##_avx512(int64_t n) {                                                         \
        const struct tile_cfg c = tile_cfg_avx512(TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1), MUSE_TYPE_##T);    \
        return 2 * (size_t)(n / FBE) * (size_t)tile_layout(c).rec + tile_offset_bytes(n); /* two panels, offsets */ \
    }

MUSE_TILE_TYPES(TILE_DEFINE) /* defines muse_tile_gemm_<t>_avx512 and muse_tile_panel_bytes_<t>_avx512 */
