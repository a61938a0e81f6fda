/*
 * gemm_tiles_amx.c - the tile GEMM for the AMX level (AMX-TILE + AMX-INT8 on top of the AVX-512
 * level): muse_tile_gemm_<t>_amx for the types of MUSE_TILE_TYPES, the same function of the
 * inputs as the AVX-512 level's (gemm_tiles_avx512.c), bit for bit:
 *   the same panels (tile_pack_avx512.h): 16 weight rows, codes interleaved by 4 bytes, which is
 *   the layout of an AMX B tile (row k: elements 4k..4k+3 of the 16 weight rows), so a panel's K
 *   elements are one tile load of K/4 rows of 64 bytes;
 *   the activation rows' int8 codes (the tile layout of matmul.h) are the A tile as they are:
 *   16 rows of K bytes, xps apart;
 *   one TDPBSUD (A signed, B unsigned, exact int32 sums) per panel and K elements gives the
 *   16 x 16 integer sums of 16 activation rows and 16 weight rows, the sums the AVX-512 level's
 *   vpdpbusd chains build one activation row at a time; K is the group for the float-group forms
 *   (each group's sum gets its own float scale), else up to 64 elements of the float block;
 *   the integer sums, stored, are finished with the AVX-512 level's vector code and float order
 *   (offset -o A and IQ1_S's delta term added as integers, then per group T = fma(cvt(G), s_g d,
 *   T), per float block acc = fma(T, d_a, acc), the mins after): identical bits.
 * Tiles: C0, C1 (the two panels' sums), A, B0, B1. Per panel pair (packed once) the activation
 * rows run in blocks of 16 (the last block configured with fewer rows).
 * The tile instructions need the process's permission (core/cpu.c asks for it; without it there
 * is no AMX level). Tested without an AMX CPU by `make emu512` (amx_tiles.h's C model of the
 * instructions, checked bit for bit against the AVX-512 level by test_tile_gemm).
 */
#include "kernels/x86/kernels_isa.h"

#include <string.h>

#include "kernels/kernels.h"
#include "kernels/x86/amx_tiles.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/tile_decode_avx2.h"
#include "kernels/x86/tile_pack_avx512.h"

#define MB 16   /* activation rows per A tile */
#define GMAX 16 /* groups of a float block at most (256 / 16) */

/* the tile registers (plain numbers: the instructions' macros paste them into the assembly) */
#define TC0 0
#define TC1 1
#define TA 2
#define TB0 3
#define TB1 4

/* Bytes per TDPBSUD: the group for the float-group forms (fg, fgs), else up to 64 of the float block. */
static inline int amx_k(const struct tile_cfg c) { return c.fg || c.fgs ? c.g : c.fbe < 64 ? c.fbe : 64; }

/* The scratch after the two panels: offsets of MB rows, the C tiles of a float block, the accumulators. */
static inline size_t amx_ot_bytes(int64_t n) { return (size_t)MB * (size_t)(n / 16) * sizeof(int32_t); }
#define AMX_CBUF_BYTES ((size_t)GMAX * 2 * MB * 16 * sizeof(int32_t))
#define AMX_ACC_BYTES ((size_t)2 * MB * 16 * sizeof(float))

static void amx_configure(int K, int ny) {
    struct amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[TC0] = cfg.rows[TC1] = cfg.rows[TA] = (uint8_t)ny;
    cfg.colsb[TC0] = cfg.colsb[TC1] = cfg.colsb[TB0] = cfg.colsb[TB1] = 64;
    cfg.colsb[TA] = (uint16_t)K;
    cfg.rows[TB0] = cfg.rows[TB1] = (uint8_t)(K / 4);
    AMX_LOADCONFIG(&cfg);
}

/* The integer sums of the P panels against the ny rows at xa for elements e .. e + K - 1 (codes
 * at byte offset cb of each panel's float block record), added to C0 / C1 (not stored). */
static inline void amx_step(const uint8_t *const *pan, size_t cb, const char *xa, size_t xps, int64_t e, int P) {
    AMX_LOAD(TA, xa + e, xps);
    AMX_LOAD(TB0, pan[0] + cb, 64);
    AMX_DPBSUD(TC0, TA, TB0);
    if (P == 2) {
        AMX_LOAD(TB1, pan[1] + cb, 64);
        AMX_DPBSUD(TC1, TA, TB1);
    }
}

/* P packed panels against ny activation rows at xa (xps apart; ot: their offset tables): accb[p][r]
 * (16 floats) += panel p's dots with row r, in the AVX-512 level's float order. */
MUSE_AVX2_INLINE void amx_block(const struct tile_cfg c, int64_t n, const uint8_t *const *pan, const char *xa,
                                size_t xps, const int P, const int ny, const int32_t *ot, int32_t *cbuf, float *accb) {
    const struct tile_lay L = tile_layout(c);
    const int K = amx_k(c), fgx = c.fg || c.fgs;
    const int64_t nfb = n / c.fbe;
    const int nk = c.fbe / K; /* steps per float block (fgx: its groups) */
    for (int64_t fb = 0; fb < nfb; fb++) {
        const int64_t e0 = fb * c.fbe;
        const size_t rb = (size_t)fb * (size_t)L.rec;
        if (fgx) { /* each group's sums stored on their own: cbuf[gi][p] */
            for (int gi = 0; gi < nk; gi++) {
                AMX_ZERO(TC0);
                if (P == 2) AMX_ZERO(TC1);
                amx_step(pan, rb + (size_t)L.codes + (size_t)gi * (size_t)(K / 4) * 64, xa, xps, e0 + (int64_t)gi * K, P);
                AMX_STORE(TC0, cbuf + (2 * gi) * MB * 16, 64);
                if (P == 2) AMX_STORE(TC1, cbuf + (2 * gi + 1) * MB * 16, 64);
            }
        } else { /* one sum per float block: cbuf[0][p] */
            AMX_ZERO(TC0);
            if (P == 2) AMX_ZERO(TC1);
            for (int kk = 0; kk < nk; kk++)
                amx_step(pan, rb + (size_t)L.codes + (size_t)kk * (size_t)(K / 4) * 64, xa, xps, e0 + (int64_t)kk * K, P);
            AMX_STORE(TC0, cbuf, 64);
            if (P == 2) AMX_STORE(TC1, cbuf + MB * 16, 64);
        }
        for (int p = 0; p < P; p++) {
            const uint8_t *rec = pan[p] + rb;
            for (int r = 0; r < ny; r++) {
                const char *row = xa + (size_t)r * xps;
                const int16_t *gs = (const int16_t *)(const void *)(row + n);
                const float da = ((const float *)(const void *)(row + n + n / 8))[e0 / 32];
                const int32_t *oa = ot + (size_t)r * (size_t)(n / 16);
                float *acc = accb + (p * MB + r) * 16;
                __m512 A = _mm512_load_ps(acc);
                if (fgx) {
                    __m512 T = _mm512_setzero_ps();
                    for (int gi = 0; gi < nk; gi++) {
                        __m512i G = _mm512_load_si512((const void *)(cbuf + ((2 * gi + p) * MB + r) * 16));
                        if (c.o) G = _mm512_add_epi32(G, _mm512_set1_epi32(oa[(e0 + (int64_t)gi * c.g) / c.g]));
                        const __m512 dg = _mm512_loadu_ps((const void *)(rec + L.dv + gi * 64));
                        T = gi == 0 ? _mm512_mul_ps(tile_cvt(G), dg) : _mm512_fmadd_ps(tile_cvt(G), dg, T);
                    }
                    A = _mm512_fmadd_ps(T, _mm512_set1_ps(da), A);
                } else {
                    __m512i Is = _mm512_load_si512((const void *)(cbuf + (p * MB + r) * 16));
                    if (c.o) Is = _mm512_add_epi32(Is, _mm512_set1_epi32(oa[fb]));
                    for (int gi = 0; c.dm && gi < c.fbe / c.g; gi++) /* + delta s_g A_g (IQ1_S) */
                        Is = _mm512_dpwssd_epi32(Is, _mm512_loadu_si512((const void *)(rec + L.minp + gi * 64)),
                                                tile_bcast4(gs + (e0 + gi * c.g) / 16));
                    const __m512 dv = _mm512_loadu_ps((const void *)(rec + L.dv));
                    A = _mm512_fmadd_ps(tile_cvt(Is), _mm512_mul_ps(dv, _mm512_set1_ps(da)), A);
                }
                if (c.mins) {
                    __m512i M = _mm512_setzero_si512();
                    for (int jj = 0; jj < c.fbe / 32; jj++)
                        M = _mm512_dpwssd_epi32(M, _mm512_loadu_si512((const void *)(rec + L.minp + jj * 64)),
                                                tile_bcast4(gs + e0 / 16 + 2 * jj));
                    const __m512 mv = _mm512_loadu_ps((const void *)(rec + L.mv));
                    A = _mm512_fmadd_ps(tile_cvt(M), _mm512_mul_ps(mv, _mm512_set1_ps(da)), A);
                }
                _mm512_store_ps(acc, A);
            }
        }
    }
}

MUSE_AVX2_INLINE bool amx_gemm(const struct tile_cfg c, tile_decode_fn dec, int64_t n, const void *w, size_t ws,
                               int64_t n_rows, const void *act, size_t xps, int n_act, float *out, int64_t os,
                               void *scratch, size_t scratch_bytes) {
    if (n % c.fbe != 0 || c.fbe / amx_k(c) > GMAX) return false;
    const struct tile_lay L = tile_layout(c);
    const size_t pb = (size_t)(n / c.fbe) * (size_t)L.rec; /* one panel (a multiple of 64 bytes) */
    if (2 * pb + amx_ot_bytes(n) + AMX_CBUF_BYTES + AMX_ACC_BYTES > scratch_bytes || ((uintptr_t)scratch & 63))
        return false;
    uint8_t *s = scratch;
    const uint8_t *pan[2] = {s, s + pb};
    int32_t *ot = (int32_t *)(void *)(s + 2 * pb);
    int32_t *cbuf = (int32_t *)(void *)(s + 2 * pb + amx_ot_bytes(n));
    float *accb = (float *)(void *)(s + 2 * pb + amx_ot_bytes(n) + AMX_CBUF_BYTES);
    const int K = amx_k(c);
    int configured = 0; /* rows of the loaded configuration (0: none) */
    for (int64_t i0 = 0; i0 < n_rows; i0 += 2 * PW) {
        const int nr[2] = {n_rows - i0 < PW ? (int)(n_rows - i0) : PW,
                           n_rows - i0 - PW <= 0 ? 0 : n_rows - i0 - PW < PW ? (int)(n_rows - i0 - PW) : PW};
        const int P = nr[1] > 0 ? 2 : 1;
        tile_pack(c, dec, n, (const uint8_t *)w + i0 * ws, ws, nr[0], (uint8_t *)pan[0]);
        if (P == 2) tile_pack(c, dec, n, (const uint8_t *)w + (i0 + PW) * ws, ws, nr[1], (uint8_t *)pan[1]);
        const uint8_t *next = (const uint8_t *)w + (i0 + 2 * PW) * ws;
        const size_t next_bytes = tile_next_bytes(i0, 2 * PW, n_rows, ws);
        for (int r0 = 0; r0 < n_act; r0 += MB) {
            const int ny = n_act - r0 < MB ? n_act - r0 : MB;
            if (next_bytes) tile_prefetch(next, next_bytes, r0, ny, n_act);
            if (ny != configured) {
                amx_configure(K, ny);
                configured = ny;
            }
            const char *xa = (const char *)act + (size_t)r0 * xps;
            for (int r = 0; c.o && r < ny; r++)
                tile_offsets(c, n, (const int16_t *)(const void *)(xa + (size_t)r * xps + n), ot + (size_t)r * (size_t)(n / 16));
            memset(accb, 0, AMX_ACC_BYTES);
            amx_block(c, n, pan, xa, xps, P, ny, ot, cbuf, accb);
            for (int p = 0; p < P; p++)
                for (int r = 0; r < ny; r++)
                    memcpy(out + (int64_t)(r0 + r) * os + i0 + p * PW, accb + (p * MB + r) * 16, sizeof(float) * (size_t)nr[p]);
        }
    }
    if (configured) AMX_RELEASE();
    return true;
}

#define TILE_DEFINE_AMX(T, t, FBE, G, O, CMAX, MINS, S1)                                                          \
    static void td_##t##_fn(const uint8_t *blk, struct tile_row *r) { tdx_##t(blk, r); }                          \
    bool muse_tile_gemm_##t##_amx(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *xp, size_t xps, \
                                  int n_act, float *out, int64_t os, void *scratch, size_t scratch_bytes) {       \
        const struct tile_cfg c = tile_cfg_avx512(TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1), MUSE_TYPE_##T);    \
        return amx_gemm(c, td_##t##_fn, n, w, ws, n_rows, xp, xps, n_act, out, os, scratch, scratch_bytes);       \
    }                                                                                                              \
    size_t muse_tile_panel_bytes_##t##_amx(int64_t n) {                                                            \
        const struct tile_cfg c = tile_cfg_avx512(TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1), MUSE_TYPE_##T);    \
        return 2 * (size_t)(n / FBE) * (size_t)tile_layout(c).rec + amx_ot_bytes(n) + AMX_CBUF_BYTES + AMX_ACC_BYTES; \
    }

MUSE_TILE_TYPES(TILE_DEFINE_AMX) /* defines muse_tile_gemm_<t>_amx and muse_tile_panel_bytes_<t>_amx */
