/*
 * blocks.h - one C struct per ggml block format, pinned by _Static_assert on its size
 * (STYLE rule 10). Field order and sizes follow gguf-and-quants.md part 2 exactly.
 *
 * Multi-byte fields are little-endian in files; these structs are read in place, so muse
 * requires a little-endian host (checked below). fp16 fields are raw binary16 bits
 * (convert with muse_fp16_to_fp32 from core/fp16.h). Only Q8_K carries an f32 scale.
 * Every struct has alignment <= 4 and a size that is a multiple of its alignment, so rows of
 * blocks can be indexed as arrays.
 */
#pragma once

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "muse reads GGUF blocks in place and needs a little-endian host"
#endif

#define MUSE_QK_K 256  /* elements per K-quant / I-quant super-block */

/* ---- 32-element legacy blocks ---- */
struct muse_block_q4_0 { uint16_t d; uint8_t qs[16]; };
struct muse_block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct muse_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct muse_block_q5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct muse_block_q8_0 { uint16_t d; int8_t qs[32]; };
struct muse_block_q8_1 { uint16_t d; uint16_t s; int8_t qs[32]; };  /* s = fp16(d * sum(qs)) */

_Static_assert(sizeof(struct muse_block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(struct muse_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(struct muse_block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(struct muse_block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(struct muse_block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(struct muse_block_q8_1) == 36, "q8_1");

/* ---- K-quants (256 elements) ---- */
struct muse_block_q2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct muse_block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct muse_block_q4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct muse_block_q5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct muse_block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct muse_block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

_Static_assert(sizeof(struct muse_block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(struct muse_block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(struct muse_block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(struct muse_block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(struct muse_block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(struct muse_block_q8_K) == 292, "q8_K");

/* ---- I-quants ---- */
/* qs: per 32-group two u32 words A (4 grid indices), B (4 x 7-bit sign index, 4-bit scale) */
struct muse_block_iq2_xxs { uint16_t d; uint16_t qs[32]; };
/* qs: per 8-group u16: bits 0-8 grid index, bits 9-15 sign index */
struct muse_block_iq2_xs { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
/* qs[0..31] grid index low bits, qs[32..63] explicit sign bytes */
struct muse_block_iq2_s { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };
/* qs[0..63] grid indices, qs[64..95] eight u32 sign/scale words */
struct muse_block_iq3_xxs { uint16_t d; uint8_t qs[96]; };
struct muse_block_iq3_s { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct muse_block_iq1_s { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; };
/* no d field: the fp16 super-scale is spread over the top nibbles of the four u16 scale words */
struct muse_block_iq1_m { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };
struct muse_block_iq4_nl { uint16_t d; uint8_t qs[16]; };
struct muse_block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

/* ---- in memory only: 8 rows interleaved (kernels/repack.h) ---- */
/* Block ib of 8 rows of Q4_0 or IQ4_NL (same fields): the 8 scales, then the 16 code bytes of each
 * row as 4 dwords, dword c of row r at qs[32 c + 4 r]. */
struct muse_block_r8x4 { uint16_t d[8]; uint8_t qs[128]; };
_Static_assert(sizeof(struct muse_block_r8x4) == 8 * 18, "r8x4");
/* Block ib of 8 rows of Q8_0: the 8 scales, then the 32 codes of each row as 8 dwords, dword c of
 * row r at qs[32 c + 4 r]. */
struct muse_block_r8x8 { uint16_t d[8]; int8_t qs[256]; };
_Static_assert(sizeof(struct muse_block_r8x8) == 8 * 34, "r8x8");
/* Super-block ib of 8 rows of IQ4_XS: the 8 scales, the 8 rows' scales_h, their scales_l as one
 * dword each (row r at scales_l[4 r]: lane r of a 32-byte vector), then the 128 code bytes of each
 * row as 32 dwords, dword c of row r at qs[32 c + 4 r] (sub-block g in qs[128 g .. 128 g + 127]). */
struct muse_block_iq4_xs_r8 { uint16_t d[8]; uint16_t scales_h[8]; uint8_t scales_l[32]; uint8_t qs[1024]; };
_Static_assert(sizeof(struct muse_block_iq4_xs_r8) == 8 * 136, "iq4_xs_r8");
/* Super-block ib of 8 rows of Q4_K: the 8 scales, the 8 mins, the 12 scale bytes of each row as 3
 * dwords (dword c of row r at scales[32 c + 4 r]), then the 128 code bytes of each row as 32
 * dwords, dword c of row r at qs[32 c + 4 r] (sub-blocks 2p, 2p + 1 in qs[256 p .. 256 p + 255]). */
struct muse_block_q4_K_r8 { uint16_t d[8]; uint16_t dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; };
_Static_assert(sizeof(struct muse_block_q4_K_r8) == 8 * 144, "q4_K_r8");

_Static_assert(sizeof(struct muse_block_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(struct muse_block_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(struct muse_block_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(struct muse_block_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(struct muse_block_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(struct muse_block_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(struct muse_block_iq1_m) == 56, "iq1_m");
_Static_assert(sizeof(struct muse_block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(struct muse_block_iq4_xs) == 136, "iq4_xs");

/* ---- ternary, FP4, 1-bit ---- */
struct muse_block_tq1_0 { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; };
struct muse_block_tq2_0 { uint8_t qs[64]; uint16_t d; };
struct muse_block_mxfp4 { uint8_t e; uint8_t qs[16]; };            /* e: E8M0 exponent */
struct muse_block_nvfp4 { uint8_t d[4]; uint8_t qs[32]; };         /* d: UE4M3 per 16 */
struct muse_block_q1_0 { uint16_t d; uint8_t qs[16]; };

_Static_assert(sizeof(struct muse_block_tq1_0) == 54, "tq1_0");
_Static_assert(sizeof(struct muse_block_tq2_0) == 66, "tq2_0");
_Static_assert(sizeof(struct muse_block_mxfp4) == 17, "mxfp4");
_Static_assert(sizeof(struct muse_block_nvfp4) == 36, "nvfp4");
_Static_assert(sizeof(struct muse_block_q1_0) == 18, "q1_0");
