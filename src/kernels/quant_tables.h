/*
 * quant_tables.h - the fixed codebooks of the I-quants and FP4 types (gguf-and-quants.md 2.2).
 * Immutable data, generated into quant_tables.c by scripts/gen_quant_tables.py.
 * Byte j of a grid entry is (entry >> 8*j) & 0xff; iq1s_grid bytes are int8 (-1, 0, +1).
 */
#pragma once

#include <stdint.h>

extern const uint8_t muse_kmask_iq2xs[8];      /* 1 << j */
extern const uint8_t muse_ksigns_iq2xs[128];   /* 7-bit sign index -> 8 signs with even parity */
extern const int8_t muse_kvalues_iq4nl[16];    /* IQ4_NL / IQ4_XS non-linear codebook */
extern const int8_t muse_kvalues_mxfp4[16];    /* 2 * E2M1(code) */
extern const uint64_t muse_iq2xxs_grid[256];   /* 8 magnitudes of {8, 25, 43} */
extern const uint64_t muse_iq2xs_grid[512];
extern const uint64_t muse_iq2s_grid[1024];
extern const uint32_t muse_iq3xxs_grid[256];   /* 4 magnitudes of {4, 12, ..., 62} */
extern const uint32_t muse_iq3s_grid[512];     /* 4 magnitudes of {1, 3, ..., 15} */
extern const uint64_t muse_iq1s_grid[2048];    /* 8 int8 values of {-1, 0, +1} */
