/* fp16.h - exact IEEE binary16 / bfloat16 conversions (reference rounding, see gguf-and-quants.md 2.2-2.3). */
#pragma once

#include <stdint.h>
#include <string.h>

static inline float muse_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t muse_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* binary16 bits -> f32, exact for every value (subnormals, +-0, inf, NaN). */
static inline float muse_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return muse_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return muse_f32_from_bits(sign);
        /* subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return muse_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

/* f32 -> binary16 bits, round to nearest even; overflow -> inf; NaN -> quiet NaN with the sign. */
static inline uint16_t muse_fp32_to_fp16(float f) {
    uint32_t x = muse_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00);          /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);         /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                          /* below 2^-14: subnormal or 0 */
        /* value * 2^24 rounded to nearest even integer gives the subnormal mantissa */
        if (ax < 0x33000000u) return (uint16_t)sign;                 /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;                                    /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (ax >> 23) - 112;
    uint32_t m = ax & 0x7fffff;
    uint32_t q = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;             /* may carry into the exponent: fine */
    return (uint16_t)(sign | q);
}

static inline float muse_bf16_to_fp32(uint16_t h) { return muse_f32_from_bits((uint32_t)h << 16); }

/* f32 -> bf16 bits, round to nearest even; NaN made quiet. */
static inline uint16_t muse_fp32_to_bf16(float f) {
    uint32_t x = muse_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
