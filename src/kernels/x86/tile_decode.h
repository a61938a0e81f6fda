/*
 * tile_decode.h - the first stage of the tile GEMM's weight packing (gemm_tiles_<isa>.c): one
 * float block of one weight row decoded into exact integers and float scales, the same for every
 * ISA. Internal to src/kernels/x86; include only from *_avx2.c / *_avx512.c files (static
 * inline, compiled with their flags; the code is plain C that the compiler vectorizes).
 *
 * Every supported weight type's dot product with its activation row (Q8_0, Q8_1 or Q8_K: integer codes
 * a with one float scale d_a per block) is, per float block FB of the weight row,
 *     d * d_a * I  +  m * d_a * M,   I = sum over groups g of s_g * sum_{e in g} v_e * a_e,
 *                                    M = sum over 16-element units u of mn_u * A_u  (A_u = sum a)
 * with exact integers v (the signed weight value), s (group scale), mn (K-quant mins) and the
 * float factors d, m. These are the integer sums the reference dot products compute (gguf-and-
 * quants.md; kernels/quant_*.c): the tile GEMM computes them exactly and only applies the float
 * factors in another order (docs/cpu-backend.md, "The tile GEMM").
 */
#pragma once

#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"
#include "kernels/types.h"

/* One float block of one weight row, decoded. */
struct tile_row {
    _Alignas(32) int8_t v[256]; /* the weight values, element order */
    int16_t s[16];              /* the scale of each group of g elements (tile_cfg) */
    int16_t mn[16];             /* the min of each 16-element unit (K-quants with dmin) */
    float d, m;                 /* float factors of I and M (m: 0 unless the type has mins) */
    float dg[4];                /* tile_cfg.fgs: the float scale of each group (d is 1) */
};

/*
 * How a weight type is packed and multiplied (all compile-time constants where used):
 *   fbe    elements per float block (32 or 256) = the weight block
 *   g      elements per integer group scale (16 or 32; types without one use s = 1 per 32)
 *   o      the offset making v + o >= 0 (the codes the kernels multiply are c = v + o; the
 *          kernels subtract o * s_g * A_g exactly)
 *   cmax   the largest code c (bounds the int16 accumulation of the AVX2 kernel)
 *   mins   1 when the type has the m * d_a * M term
 *   s1     1 when every group scale is 1 (the 32-element types, TQ1_0/TQ2_0: none is stored)
 *   bpb    bytes per weight block
 *   sub    float blocks per weight block: 1, 2 for NVFP4 (64-element blocks), 4 for Q1_0 (128)
 *          against the 32-element blocks of their Q8_0 activations (TILE_SUB in kernels_isa.h)
 *   fgs    1 when the group scales are floats (NVFP4's UE4M3 per 16 elements, s1 set, d = 1):
 *          each group's exact int32 sum G_g (offset removed) is finished in float, per float
 *          block T = cvt(G_0) dg_0, T = fma(cvt(G_1), dg_1, T), then acc = fma(T, d_a, acc), the
 *          same operations in both kernels (TILE_FGS in kernels_isa.h)
 *   ps     0, or (the AVX-512 packing's pre-scaled form, tile_cfg_avx512) the group size g of
 *          the scales that the packing multiplied into the codes, c = v * s_g + o: the kernel
 *          then runs s1 (no per-group multiply)
 *   fg     1 for the AVX-512 packing's float-group form (tile_cfg_avx512): the integer group
 *          scales s_g times d are stored as exact floats dg_g per group and the groups finished
 *          in float as with fgs
 *   dm     1 for the AVX-512 packing's IQ1_S (tile_cfg_avx512): pre-scaled without its group's
 *          delta, which goes into the integer sum as a min term (delta s_g times A_g)
 */
struct tile_cfg {
    int fbe, g, o, cmax, mins, s1, bpb, sub, fgs, ps, fg, dm;
};

/* The packing of type T (MUSE_TILE_TYPES' fields) */
#define TILE_CFG(T, t, FBE, G, O, CMAX, MINS, S1) \
    ((struct tile_cfg){FBE, G, O, CMAX, MINS, S1, (int)sizeof(struct muse_block_##t), TILE_SUB(T), TILE_FGS(T), 0, 0, 0})

/*
 * How the AVX-512 level (gemm_tiles_avx512.c) packs and runs type t, from the shared c:
 *  - pre-scaled (ps): Q2_K (v 0..3, s 0..15: 0..45, offset 0) and Q3_K (v -4..3, s -32..31:
 *    -124..128, offset 127), whose value x group scale fits a byte with an offset. The packing
 *    stores c = v s_g + o and the kernel runs the float block as one scale-1 group: its exact
 *    int32 sum minus o A is sum_g s_g sum v a, the very integer of the grouped form, without a
 *    vpmulld + vpaddd per group.
 *  - IQ1_S pre-scaled with its delta as a min (ps, dm): v = 8 q + delta with q in {-1, 0, 1}
 *    and one delta = +-1 per 32-element group, so s_g sum v a = s_g 8 sum q a + delta s_g A_g:
 *    the packing stores c = 8 q s_g + 120 (0..240) and delta s_g on both 16-units of the group,
 *    and the kernel adds delta s_g A_g into the float block's int32 sum (one vpdpwssd per
 *    group): the grouped form's integer, so the same bits as the AVX2 level.
 *  - float groups (fg): the other types with integer group scales (Q4_K..Q6_K, IQ4_XS, the IQ2,
 *    IQ3 types and IQ1_M; Q6_K 63 x 127, Q4_K 15 x 63, the IQ grids 43 x 31 leave a byte). Each
 *    group's exact int32 sum G_g is converted and accumulated as T = fma(cvt(G_g), s_g d, T)
 *    (s_g d: an exact float, at most 8 + 11 significant bits), acc = fma(T, d_a, acc): one
 *    conversion + FMA per group instead of vpmulld (2 slots) + vpaddd, and no conversion and
 *    multiply per float block. Not the AVX2 level's bits (it widens int16 sums with the scale
 *    in one madd and converts per float block); both are within 2 gamma(ne0/16 + 8) T of the
 *    reference (docs/cpu-backend.md, "The tile GEMM").
 */
static inline struct tile_cfg tile_cfg_avx512(struct tile_cfg c, enum muse_type t) {
    if (t == MUSE_TYPE_Q2_K || t == MUSE_TYPE_Q3_K) {
        c.ps = c.g;
        c.g = 32;
        c.o = t == MUSE_TYPE_Q2_K ? 0 : 127;
        c.s1 = 1;
        c.cmax = 255;
    } else if (t == MUSE_TYPE_IQ1_S) {
        c.ps = c.g;
        c.o = 120;
        c.s1 = 1;
        c.cmax = 255;
        c.dm = 1;
    } else if (!c.s1 && !c.fgs) {
        c.fg = 1;
    }
    return c;
}

typedef void (*tile_decode_fn)(const uint8_t *blk, struct tile_row *r);

/* Float block fb of the weight row at w into *r. With c.sub > 1 (only for types with s1 and no
 * mins): part fb % sub of weight block fb / sub (with its float group scales), which is decoded
 * whole into *big when fb % sub == 0 (so the float blocks of a row must be visited in order). */
static inline void td_float_block(const struct tile_cfg c, tile_decode_fn dec, const uint8_t *w, int64_t fb,
                                  struct tile_row *big, struct tile_row *r) {
    if (c.sub <= 1) {
        dec(w + fb * c.bpb, r);
        return;
    }
    const int k = (int)(fb % c.sub);
    if (k == 0) dec(w + fb / c.sub * c.bpb, big);
    memcpy(r->v, big->v + c.fbe * k, (size_t)c.fbe);
    if (c.fgs) memcpy(r->dg, big->dg + (c.fbe / c.g) * k, sizeof(float) * (size_t)(c.fbe / c.g));
    r->s[0] = 1;
    r->d = big->d;
    r->m = 0.0f;
}

// ---- 32-element blocks (Q8_0 activations) ---------------------------------------------------

static inline void td_q8_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q8_0 *b = (const void *)blk;
    memcpy(r->v, b->qs, 32);
    r->s[0] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_q4_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_0 *b = (const void *)blk;
    for (int j = 0; j < 16; j++) {
        r->v[j] = (int8_t)((b->qs[j] & 15) - 8);
        r->v[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
    r->s[0] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_q5_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_0 *b = (const void *)blk;
    const uint32_t qh = muse_rd_le32(b->qh);
    for (int j = 0; j < 16; j++) {
        r->v[j] = (int8_t)(((b->qs[j] & 15) | ((qh >> j) & 1) << 4) - 16);
        r->v[j + 16] = (int8_t)(((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
    r->s[0] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

/* Q4_1/Q5_1: w = d q + m with codes q >= 0; the min m is the M term with mn = 1 on both 16-units */
static inline void td_q4_1(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_1 *b = (const void *)blk;
    for (int j = 0; j < 16; j++) {
        r->v[j] = (int8_t)(b->qs[j] & 15);
        r->v[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
    r->s[0] = 1;
    r->mn[0] = r->mn[1] = 1;
    r->d = muse_h2f(b->d);
    r->m = muse_h2f(b->m);
}

static inline void td_q5_1(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_1 *b = (const void *)blk;
    const uint32_t qh = muse_rd_le32(b->qh);
    for (int j = 0; j < 16; j++) {
        r->v[j] = (int8_t)((b->qs[j] & 15) | ((qh >> j) & 1) << 4);
        r->v[j + 16] = (int8_t)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
    r->s[0] = 1;
    r->mn[0] = r->mn[1] = 1;
    r->d = muse_h2f(b->d);
    r->m = muse_h2f(b->m);
}

/* Q1_0: 128 elements of +-1 (bit e % 8 of qs[e / 8] set: +1), one scale */
static inline void td_q1_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q1_0 *b = (const void *)blk;
    for (int e = 0; e < 128; e++) r->v[e] = (int8_t)((b->qs[e / 8] >> (e % 8)) & 1 ? 1 : -1);
    r->s[0] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_codebook32(const int8_t *kv, const uint8_t *qs, int8_t *v) {
    for (int j = 0; j < 16; j++) {
        v[j] = kv[qs[j] & 15];
        v[j + 16] = kv[qs[j] >> 4];
    }
}

static inline void td_iq4_nl(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq4_nl *b = (const void *)blk;
    td_codebook32(muse_kvalues_iq4nl, b->qs, r->v);
    r->s[0] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_mxfp4(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_mxfp4 *b = (const void *)blk;
    td_codebook32(muse_kvalues_mxfp4, b->qs, r->v);
    r->s[0] = 1;
    r->d = muse_e8m0_half(b->e);
    r->m = 0.0f;
}

/* NVFP4: 64 elements, a UE4M3 scale (halved, as the kvalues are doubled) per 16; the 8 bytes of
 * 16-element sub-block sb: low nibbles elements 16 sb + 0..7, high nibbles 16 sb + 8..15 */
static inline void td_nvfp4(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_nvfp4 *b = (const void *)blk;
    for (int sb = 0; sb < 4; sb++) {
        for (int j = 0; j < 8; j++) {
            r->v[16 * sb + j] = muse_kvalues_mxfp4[b->qs[8 * sb + j] & 15];
            r->v[16 * sb + j + 8] = muse_kvalues_mxfp4[b->qs[8 * sb + j] >> 4];
        }
        r->dg[sb] = muse_ue4m3_half(b->d[sb]);
    }
    r->s[0] = 1;
    r->d = 1.0f;
    r->m = 0.0f;
}

// ---- 256-element super-blocks (Q8_K activations) ----------------------------------------------

/* Q4_K/Q5_K scales and mins of the 8 sub-blocks ("get_scale_min_k4"); mins per 16-unit */
static inline void td_k45_scales(const uint8_t *S, struct tile_row *r) {
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        if (j < 4) {
            sc = S[j] & 63;
            mn = S[j + 4] & 63;
        } else {
            sc = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4);
            mn = (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
        }
        r->s[j] = (int16_t)sc;
        r->mn[2 * j] = r->mn[2 * j + 1] = (int16_t)mn;
    }
}

static inline void td_q4_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q4_K *b = (const void *)blk;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            r->v[64 * c + l] = (int8_t)(b->qs[32 * c + l] & 15);
            r->v[64 * c + 32 + l] = (int8_t)(b->qs[32 * c + l] >> 4);
        }
    td_k45_scales(b->scales, r);
    r->d = muse_h2f(b->d);
    r->m = -muse_h2f(b->dmin);
}

static inline void td_q5_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q5_K *b = (const void *)blk;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const int h0 = (b->qh[l] >> (2 * c)) & 1, h1 = (b->qh[l] >> (2 * c + 1)) & 1;
            r->v[64 * c + l] = (int8_t)((b->qs[32 * c + l] & 15) | h0 << 4);
            r->v[64 * c + 32 + l] = (int8_t)((b->qs[32 * c + l] >> 4) | h1 << 4);
        }
    td_k45_scales(b->scales, r);
    r->d = muse_h2f(b->d);
    r->m = -muse_h2f(b->dmin);
}

static inline void td_q6_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q6_K *b = (const void *)blk;
    for (int nh = 0; nh < 2; nh++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *ql = b->ql + 64 * nh, h = b->qh[32 * nh + l];
            int8_t *v = r->v + 128 * nh + l;
            v[0] = (int8_t)(((ql[l] & 15) | (h & 3) << 4) - 32);
            v[32] = (int8_t)(((ql[l + 32] & 15) | ((h >> 2) & 3) << 4) - 32);
            v[64] = (int8_t)(((ql[l] >> 4) | ((h >> 4) & 3) << 4) - 32);
            v[96] = (int8_t)(((ql[l + 32] >> 4) | ((h >> 6) & 3) << 4) - 32);
        }
    for (int j = 0; j < 16; j++) r->s[j] = b->scales[j];
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

/* element e of a Q2_K / Q3_K / TQ2_0 2-bit plane */
static inline int td_plane2(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static inline void td_q2_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q2_K *b = (const void *)blk;
    for (int e = 0; e < 256; e++) r->v[e] = (int8_t)td_plane2(b->qs, e);
    for (int j = 0; j < 16; j++) {
        r->s[j] = (int16_t)(b->scales[j] & 15);
        r->mn[j] = (int16_t)(b->scales[j] >> 4);
    }
    r->d = muse_h2f(b->d);
    r->m = -muse_h2f(b->dmin);
}

/* Q3_K's 16 signed 6-bit scales (4 low bits, then 2 high bits from the last 4 bytes) */
static inline void td_q3_K_scales(const uint8_t *S, struct tile_row *r) {
    for (int i = 0; i < 16; i++) {
        const int low4 = i < 8 ? (S[i] & 15) : (S[i - 8] >> 4);
        const int high2 = (S[8 + i % 4] >> (2 * (i / 4))) & 3;
        r->s[i] = (int16_t)((low4 | high2 << 4) - 32);
    }
}

static inline void td_q3_K(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_q3_K *b = (const void *)blk;
    for (int e = 0; e < 256; e++) {
        const int hb = (b->hmask[e % 32] >> (e / 32)) & 1;
        r->v[e] = (int8_t)(td_plane2(b->qs, e) - (hb ? 0 : 4));
    }
    td_q3_K_scales(b->scales, r);
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_iq4_xs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq4_xs *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        td_codebook32(muse_kvalues_iq4nl, b->qs + 16 * g, r->v + 32 * g);
        const int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b->scales_h >> (2 * g)) & 3) << 4;
        r->s[g] = (int16_t)(ls - 32);
    }
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_tq2_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_tq2_0 *b = (const void *)blk;
    for (int e = 0; e < 256; e++) r->v[e] = (int8_t)(td_plane2(b->qs, e) - 1);
    for (int g = 0; g < 8; g++) r->s[g] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

static inline int td_trit(uint8_t b, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint16_t)(uint8_t)(b * pow3[n]) * 3) >> 8;
}

static inline void td_tq1_0(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_tq1_0 *b = (const void *)blk;
    for (int e = 0; e < 160; e++) r->v[e] = (int8_t)(td_trit(b->qs[e % 32], e / 32) - 1);
    for (int e = 160; e < 240; e++) r->v[e] = (int8_t)(td_trit(b->qs[32 + (e - 160) % 16], (e - 160) / 16) - 1);
    for (int e = 240; e < 256; e++) r->v[e] = (int8_t)(td_trit(b->qh[(e - 240) % 4], (e - 240) / 4) - 1);
    for (int g = 0; g < 8; g++) r->s[g] = 1;
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

/* 8 grid magnitudes (bytes of a u64 entry) with 8 sign bits */
static inline void td_grid8(uint64_t grid, uint8_t signs, int8_t *v) {
    for (int j = 0; j < 8; j++) {
        const int m = (int)((grid >> (8 * j)) & 0xff);
        v[j] = (int8_t)((signs >> j) & 1 ? -m : m);
    }
}

static inline void td_grid4x2(uint32_t g1, uint32_t g2, uint8_t signs, int8_t *v) {
    for (int j = 0; j < 4; j++) {
        const int m1 = (int)((g1 >> (8 * j)) & 0xff), m2 = (int)((g2 >> (8 * j)) & 0xff);
        v[j] = (int8_t)((signs >> j) & 1 ? -m1 : m1);
        v[j + 4] = (int8_t)((signs >> (j + 4)) & 1 ? -m2 : m2);
    }
}

static inline void td_iq2_xxs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_xxs *b = (const void *)blk;
    const uint8_t *rec = (const uint8_t *)b->qs;
    for (int g = 0; g < 8; g++) {
        const uint32_t A = muse_rd_le32(rec + 8 * g), B = muse_rd_le32(rec + 8 * g + 4);
        for (int l = 0; l < 4; l++)
            td_grid8(muse_iq2xxs_grid[(A >> (8 * l)) & 255], muse_ksigns_iq2xs[(B >> (7 * l)) & 127],
                     r->v + 32 * g + 8 * l);
        r->s[g] = (int16_t)(2 * (B >> 28) + 1);
    }
    r->d = 0.125f * muse_h2f(b->d);
    r->m = 0.0f;
}

/* IQ2_XS / IQ2_S: 2 ls + 1 of each 16 elements from the nibbles of 8 bytes */
static inline void td_iq2_scales(const uint8_t *scales, struct tile_row *r) {
    for (int g = 0; g < 8; g++) {
        r->s[2 * g] = (int16_t)(2 * (scales[g] & 15) + 1);
        r->s[2 * g + 1] = (int16_t)(2 * (scales[g] >> 4) + 1);
    }
}

static inline void td_iq2_xs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_xs *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const uint16_t q = b->qs[4 * g + l];
            td_grid8(muse_iq2xs_grid[q & 511], muse_ksigns_iq2xs[q >> 9], r->v + 32 * g + 8 * l);
        }
    }
    td_iq2_scales(b->scales, r);
    r->d = 0.125f * muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_iq2_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq2_s *b = (const void *)blk;
    const uint8_t *qs = b->qs, *signs = b->qs + 32;
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++)
            td_grid8(muse_iq2s_grid[qs[4 * g + l] | ((b->qh[g] >> (2 * l)) & 3) << 8], signs[4 * g + l],
                     r->v + 32 * g + 8 * l);
    }
    td_iq2_scales(b->scales, r);
    r->d = 0.125f * muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_iq3_xxs(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq3_xxs *b = (const void *)blk;
    const uint8_t *qs = b->qs, *w = b->qs + 64;
    for (int g = 0; g < 8; g++) {
        const uint32_t W = muse_rd_le32(w + 4 * g);
        for (int l = 0; l < 4; l++)
            td_grid4x2(muse_iq3xxs_grid[qs[8 * g + 2 * l]], muse_iq3xxs_grid[qs[8 * g + 2 * l + 1]],
                       muse_ksigns_iq2xs[(W >> (7 * l)) & 127], r->v + 32 * g + 8 * l);
        r->s[g] = (int16_t)(2 * (W >> 28) + 1);
    }
    r->d = 0.25f * muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_iq3_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq3_s *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const int i1 = b->qs[8 * g + 2 * l] | ((b->qh[g] >> (2 * l)) & 1) << 8;
            const int i2 = b->qs[8 * g + 2 * l + 1] | ((b->qh[g] >> (2 * l + 1)) & 1) << 8;
            td_grid4x2(muse_iq3s_grid[i1], muse_iq3s_grid[i2], b->signs[4 * g + l], r->v + 32 * g + 8 * l);
        }
        r->s[g] = (int16_t)(2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1);
    }
    r->d = muse_h2f(b->d);
    r->m = 0.0f;
}

/* IQ1_S / IQ1_M: the reference sums d d_a (sumi + 0.125 sumi1) with sumi over grid values g in
 * {-1, 0, 1} and sumi1 over the group's (IQ1_S) or the 8 elements' (IQ1_M) delta +-1 times the
 * activation: 8 sumi + sumi1 is one exact integer sum of v = 8 g + delta (|v| <= 9) with the
 * same group scales, and d / 8 (exact) its float factor. */
static inline void td_iq1_grid(uint64_t grid, int delta, int8_t *v) {
    for (int j = 0; j < 8; j++) v[j] = (int8_t)(8 * (int8_t)((grid >> (8 * j)) & 0xff) + delta);
}

static inline void td_iq1_s(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq1_s *b = (const void *)blk;
    for (int g = 0; g < 8; g++) {
        const uint16_t h = b->qh[g];
        for (int l = 0; l < 4; l++)
            td_iq1_grid(muse_iq1s_grid[b->qs[4 * g + l] | ((h >> (3 * l)) & 7) << 8], h & 0x8000 ? -1 : 1,
                        r->v + 32 * g + 8 * l);
        r->s[g] = (int16_t)(2 * ((h >> 12) & 7) + 1);
    }
    r->d = 0.125f * muse_h2f(b->d);
    r->m = 0.0f;
}

static inline void td_iq1_m(const uint8_t *blk, struct tile_row *r) {
    const struct muse_block_iq1_m *b = (const void *)blk;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = muse_rd_le16(b->scales + 2 * k);
    const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const int nib = (b->qh[2 * g + l / 2] >> (4 * (l % 2))) & 15;
            td_iq1_grid(muse_iq1s_grid[b->qs[4 * g + l] | (nib & 7) << 8], nib & 8 ? -1 : 1, r->v + 32 * g + 8 * l);
        }
        r->s[2 * g] = (int16_t)(2 * ((sc[g / 2] >> (6 * (g % 2))) & 7) + 1);
        r->s[2 * g + 1] = (int16_t)(2 * ((sc[g / 2] >> (6 * (g % 2) + 3)) & 7) + 1);
    }
    r->d = 0.125f * muse_h2f(d16);
    r->m = 0.0f;
}
