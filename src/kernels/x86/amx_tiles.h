/*
 * amx_tiles.h - the few AMX operations of the AMX tile GEMM (gemm_tiles_amx.c), as macros over
 * the tile register numbers: the hardware instructions (GCC/Clang's <immintrin.h>, the file built
 * with -mamx-tile -mamx-int8), or, in the `make emu512` test build (MUSE_EMULATE_AMX), a plain C
 * model of them on a thread-local register file, so that the AMX level is tested on machines
 * without AMX the way the AVX-512 one is (SIMDe has no AMX).
 *
 * The model follows the instruction set reference (Intel SDM vol. 2, "TILELOADD", "TDPBSUD"): a
 * palette-1 configuration of 64 bytes (byte 0 the palette, bytes 16..47 colsb[16] as uint16,
 * bytes 48..63 rows[16]); a load fills rows[t] rows of colsb[t] bytes and zeroes the rest of the
 * register; TDPBSUD C += A B with A's bytes signed, B's unsigned, in int32 without saturation:
 *   C[m][n] += sum over k < colsb[A] / 4, j < 4 of A[m][4k + j] * B[k][4n + j].
 * Where the hardware raises #UD for shapes that do not fit (rows of B != colsb of A / 4, ...),
 * the model aborts with a message: a configuration mistake fails the tests instead of passing
 * here and dying on an AMX machine.
 */
#pragma once

#include <stdint.h>

#if defined(MUSE_EMULATE_AMX)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct amx_model {
    int configured;
    uint16_t colsb[8];
    uint8_t rows[8];
    _Alignas(64) uint8_t t[8][16][64];
};
static _Thread_local struct amx_model amx_model;

static inline void amx_model_fail(const char *what) {
    fprintf(stderr, "amx emulation: %s (an AMX CPU would raise #UD)\n", what);
    abort();
}

static inline void amx_model_loadconfig(const void *cfg) {
    const uint8_t *b = cfg;
    if (b[0] != 1) amx_model_fail("palette is not 1");
    for (int i = 0; i < 8; i++) {
        memcpy(&amx_model.colsb[i], b + 16 + 2 * i, 2);
        amx_model.rows[i] = b[48 + i];
        if (amx_model.rows[i] > 16 || amx_model.colsb[i] > 64) amx_model_fail("tile shape beyond 16 rows x 64 bytes");
    }
    memset(amx_model.t, 0, sizeof amx_model.t);
    amx_model.configured = 1;
}

static inline void amx_model_check(int t) {
    if (!amx_model.configured) amx_model_fail("tile instruction without a configuration");
    if (t < 0 || t > 7 || !amx_model.rows[t] || !amx_model.colsb[t]) amx_model_fail("tile not configured");
}

static inline void amx_model_zero(int t) {
    amx_model_check(t);
    memset(amx_model.t[t], 0, sizeof amx_model.t[t]);
}

static inline void amx_model_load(int t, const void *base, long stride) {
    amx_model_check(t);
    memset(amx_model.t[t], 0, sizeof amx_model.t[t]);
    for (int r = 0; r < amx_model.rows[t]; r++)
        memcpy(amx_model.t[t][r], (const uint8_t *)base + (long)r * stride, amx_model.colsb[t]);
}

static inline void amx_model_store(int t, void *base, long stride) {
    amx_model_check(t);
    for (int r = 0; r < amx_model.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, amx_model.t[t][r], amx_model.colsb[t]);
}

static inline void amx_model_dpbsud(int c, int a, int b) {
    amx_model_check(c);
    amx_model_check(a);
    amx_model_check(b);
    if (c == a || c == b || a == b) amx_model_fail("TDPBSUD with repeated tile registers");
    const int K = amx_model.colsb[a] / 4, N = amx_model.colsb[c] / 4, M = amx_model.rows[c];
    if (amx_model.colsb[a] % 4 || amx_model.colsb[c] % 4 || amx_model.rows[b] != K || amx_model.colsb[b] != amx_model.colsb[c] ||
        amx_model.rows[a] != M)
        amx_model_fail("TDPBSUD shapes do not match");
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            uint32_t s;
            memcpy(&s, &amx_model.t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < 4; j++)
                    s += (uint32_t)((int32_t)(int8_t)amx_model.t[a][m][4 * k + j] * (int32_t)amx_model.t[b][k][4 * n + j]);
            memcpy(&amx_model.t[c][m][4 * n], &s, 4);
        }
}

#define AMX_LOADCONFIG(cfg) amx_model_loadconfig(cfg)
#define AMX_RELEASE() (amx_model.configured = 0)
#define AMX_ZERO(t) amx_model_zero(t)
#define AMX_LOAD(t, base, stride) amx_model_load(t, base, (long)(stride))
#define AMX_STORE(t, base, stride) amx_model_store(t, base, (long)(stride))
#define AMX_DPBSUD(c, a, b) amx_model_dpbsud(c, a, b)
#else
#include <immintrin.h>
/* GCC 12's intrinsics under-declare what the instructions read: _tile_loadconfig names 8 bytes of
 * the 64-byte configuration (so a configuration built in a function of its own lost its stores of
 * the shapes: #UD at the first tile instruction, seen on an AMX Xeon) and _tile_loadd
 * names no memory at all (stores into a panel could be moved after the load that reads it). So:
 * LDTILECFG with the whole configuration as its operand, and a compiler barrier before each load
 * (TILESTORED already clobbers memory). */
#define AMX_LOADCONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct amx_config *)(const void *)(cfg)))
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride)                 \
    do {                                          \
        __asm__ volatile("" ::: "memory");        \
        _tile_loadd(t, base, (long)(stride));     \
    } while (0)
#define AMX_STORE(t, base, stride) _tile_stored(t, base, (long)(stride))
#define AMX_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#endif

/* The palette-1 configuration (64 bytes, as LDTILECFG reads it). */
struct amx_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
_Static_assert(sizeof(struct amx_config) == 64, "the tile configuration is 64 bytes");
