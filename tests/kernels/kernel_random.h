/*
 * kernel_random.h - random test data for the kernel tests and the kernel lab (bench/): a
 * xorshift generator and random weight rows of the matmul weight types (random code bytes with
 * finite fp16 scales of random sign, 2^-9..2^-4 in magnitude).
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/types.h"

static uint64_t kr_state = 0x9e3779b97f4a7c15ULL;

static inline uint32_t kr_u32(void) {
    kr_state ^= kr_state << 13;
    kr_state ^= kr_state >> 7;
    kr_state ^= kr_state << 17;
    return (uint32_t)(kr_state >> 16);
}

/* uniform in [-1, 1) */
static inline float kr_float(void) { return (float)(kr_u32() & 0xffffff) / 8388608.0f - 1.0f; }

/* fp16 scale fields (byte offsets inside one block) of the block weight types */
struct kr_scale_fields {
    enum muse_type type;
    int n;
    int off[2];
};
static const struct kr_scale_fields kr_scale_fields[] = {
    {MUSE_TYPE_Q8_0, 1, {0}},    {MUSE_TYPE_Q4_0, 1, {0}},    {MUSE_TYPE_Q4_K, 2, {0, 2}},
    {MUSE_TYPE_Q5_K, 2, {0, 2}}, {MUSE_TYPE_Q6_K, 1, {208}},  {MUSE_TYPE_IQ2_XXS, 1, {0}},
    {MUSE_TYPE_IQ3_XXS, 1, {0}}, {MUSE_TYPE_IQ3_S, 1, {0}},   {MUSE_TYPE_IQ4_XS, 1, {0}},
    {MUSE_TYPE_Q5_0, 1, {0}},    {MUSE_TYPE_IQ4_NL, 1, {0}},  {MUSE_TYPE_Q2_K, 2, {80, 82}},
    {MUSE_TYPE_Q3_K, 1, {108}},  {MUSE_TYPE_IQ2_XS, 1, {0}},  {MUSE_TYPE_IQ2_S, 1, {0}},
    {MUSE_TYPE_Q4_1, 2, {0, 2}}, {MUSE_TYPE_Q5_1, 2, {0, 2}},  {MUSE_TYPE_IQ1_S, 1, {0}},
    {MUSE_TYPE_TQ2_0, 1, {64}},  {MUSE_TYPE_IQ1_M, 0, {0}},
    {MUSE_TYPE_MXFP4, 0, {0}},   {MUSE_TYPE_TQ1_0, 1, {52}},  {MUSE_TYPE_NVFP4, 0, {0}},
    {MUSE_TYPE_Q1_0, 1, {0}},
};

/* One random weight row of `type` (ne0 elements) into p. Returns false for types it does not
 * know how to fill. */
static inline bool kr_weight_row(enum muse_type type, int64_t ne0, uint8_t *p) {
    const struct muse_type_layout *l = muse_type_layout_get(type);
    if (type == MUSE_TYPE_F32 || type == MUSE_TYPE_F16 || type == MUSE_TYPE_BF16) {
        for (int64_t i = 0; i < ne0; i++) {
            float v = kr_float() * 2.0f;
            if (type == MUSE_TYPE_F32) memcpy(p + 4 * i, &v, 4);
            else {
                uint16_t h = type == MUSE_TYPE_F16 ? muse_fp32_to_fp16(v) : muse_fp32_to_bf16(v);
                memcpy(p + 2 * i, &h, 2);
            }
        }
        return true;
    }
    const struct kr_scale_fields *sf = NULL;
    for (size_t i = 0; i < sizeof(kr_scale_fields) / sizeof(kr_scale_fields[0]); i++)
        if (kr_scale_fields[i].type == type) sf = &kr_scale_fields[i];
    if (!sf || !l) return false;
    const int64_t nb = ne0 / l->block_size;
    const bool tiny = kr_u32() % 4 == 0; /* MXFP4: one row in four gets only the subnormal scales */
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * l->type_size;
        for (size_t j = 0; j < l->type_size; j++) blk[j] = (uint8_t)kr_u32();
        if (type == MUSE_TYPE_MXFP4) /* E8M0 scale 2^-13..2^0, or 0 / 1 (the subnormal forms) */
            blk[0] = (uint8_t)(tiny ? kr_u32() % 2 : 116 + kr_u32() % 14);
        if (type == MUSE_TYPE_IQ1_M) {
            /* no d field: the fp16 scale is the top nibbles of the four u16 scale words (48..55) */
            const uint16_t h = muse_fp32_to_fp16(ldexpf(1.0f + 0.5f * kr_float(), -4 - (int)(kr_u32() % 6)));
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0f) | ((h >> (4 * k)) & 15) << 4);
        }
        for (int k = 0; k < sf->n; k++) {
            float d = ldexpf(1.0f + 0.5f * kr_float(), -4 - (int)(kr_u32() % 6));
            if (kr_u32() & 1) d = -d;
            uint16_t h = muse_fp32_to_fp16(d);
            memcpy(blk + sf->off[k], &h, 2);
        }
    }
    return true;
}
