/*
 * quant_util.h - small numeric helpers shared by the reference quant files (internal to
 * src/kernels; the SIMD files may include it too). All static inline, no state.
 */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"

/* fp16 bits -> f32 (exact). */
static inline float muse_h2f(uint16_t h) { return muse_fp16_to_fp32(h); }

/* E8M0 "half" form: 2^(e-128) as f32 (gguf-and-quants.md 2.2; no NaN handling). */
static inline float muse_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23);
    return muse_f32_from_bits(bits);
}

/* UE4M3 "half" form: 0.5 * UE4M3(x); 0x00 and 0x7F give 0; bit 7 ignored. */
static inline float muse_ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    int e = (x >> 3) & 15, m = x & 7;
    float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

/* Round to nearest, ties to even, via the 1.5*2^23 magic add (valid for |x| <= 2^22). */
static inline int muse_nearest_int(float x) {
    float v = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline uint16_t muse_rd_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t muse_rd_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
