/*
 * quant_iq.c - reference numerics of the I-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 * IQ1_S, IQ1_M and IQ4_XS (IQ4_NL, a 32-element format, lives in quant_legacy.c).
 * Decoders: gguf-and-quants.md 2.6. Dot products: ggml's *_q8_K_generic; the grid magnitudes
 * are integers, so each dot is an exact integer sum per 32-element group times an odd scale,
 * then one float multiply-add per super-block and (IQ2/IQ3_XXS) a final constant factor.
 * No quantizers: the I-quant writers are search-based and muse only reads these types.
 */
#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"

/* Byte j of a u64 / u32 grid entry (numeric order, host independent). */
static inline int g8(uint64_t v, int j) { return (int)((v >> (8 * j)) & 0xff); }
static inline int g4(uint32_t v, int j) { return (int)((v >> (8 * j)) & 0xff); }
static inline int g1s(uint64_t v, int j) { return (int)(int8_t)((v >> (8 * j)) & 0xff); }

// ---- IQ2_XXS / IQ2_XS / IQ2_S ----

void muse_to_float_iq2_xxs(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        const uint8_t *rec = (const uint8_t *)x[i].qs;
        for (int g = 0; g < 8; g++) {
            const uint32_t A = muse_rd_le32(rec + 8 * g), B = muse_rd_le32(rec + 8 * g + 4);
            const float db = d * (0.5f + (float)(B >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = muse_iq2xxs_grid[(A >> (8 * l)) & 255];
                const uint8_t signs = muse_ksigns_iq2xs[(B >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++)
                    y[j] = db * (float)g8(grid, j) * (signs & muse_kmask_iq2xs[j] ? -1.0f : 1.0f);
            }
        }
    }
}

void muse_to_float_iq2_xs(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        for (int g = 0; g < 8; g++) {
            const float db0 = d * (0.5f + (float)(x[i].scales[g] & 15)) * 0.25f;
            const float db1 = d * (0.5f + (float)(x[i].scales[g] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t v = x[i].qs[4 * g + l];
                const uint64_t grid = muse_iq2xs_grid[v & 511];
                const uint8_t signs = muse_ksigns_iq2xs[v >> 9];
                const float db = l < 2 ? db0 : db1;
                for (int j = 0; j < 8; j++)
                    y[j] = db * (float)g8(grid, j) * (signs & muse_kmask_iq2xs[j] ? -1.0f : 1.0f);
            }
        }
    }
}

void muse_to_float_iq2_s(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        const uint8_t *qs = x[i].qs, *signs = x[i].qs + 32;
        for (int g = 0; g < 8; g++) {
            const float db0 = d * (0.5f + (float)(x[i].scales[g] & 15)) * 0.25f;
            const float db1 = d * (0.5f + (float)(x[i].scales[g] >> 4)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = muse_iq2s_grid[qs[4 * g + l] | ((x[i].qh[g] >> (2 * l)) & 3) << 8];
                const uint8_t sg = signs[4 * g + l];
                const float db = l < 2 ? db0 : db1;
                for (int j = 0; j < 8; j++)
                    y[j] = db * (float)g8(grid, j) * (sg & muse_kmask_iq2xs[j] ? -1.0f : 1.0f);
            }
        }
    }
}

/* Signed grid value times q8 summed over 8 elements (IQ2 family). */
static inline int dot8_signed(uint64_t grid, uint8_t signs, const int8_t *q8) {
    int sum = 0;
    for (int j = 0; j < 8; j++) sum += g8(grid, j) * q8[j] * (signs & muse_kmask_iq2xs[j] ? -1 : 1);
    return sum;
}

void muse_vec_dot_iq2_xxs_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq2_xxs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d) * y[i].d;
        const uint8_t *rec = (const uint8_t *)x[i].qs;
        const int8_t *q8 = y[i].qs;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            const uint32_t A = muse_rd_le32(rec + 8 * g), B = muse_rd_le32(rec + 8 * g + 4);
            const int32_t ls = 2 * (int32_t)(B >> 28) + 1;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot8_signed(muse_iq2xxs_grid[(A >> (8 * l)) & 255],
                                    muse_ksigns_iq2xs[(B >> (7 * l)) & 127], q8);
            bsum += sumi * ls;
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void muse_vec_dot_iq2_xs_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq2_xs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d) * y[i].d;
        const int8_t *q8 = y[i].qs;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            const int32_t ls1 = 2 * (x[i].scales[g] & 15) + 1, ls2 = 2 * (x[i].scales[g] >> 4) + 1;
            int32_t sumi[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint16_t v = x[i].qs[4 * g + l];
                sumi[l / 2] += dot8_signed(muse_iq2xs_grid[v & 511], muse_ksigns_iq2xs[v >> 9], q8);
            }
            bsum += sumi[0] * ls1;
            bsum += sumi[1] * ls2;
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void muse_vec_dot_iq2_s_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq2_s *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d) * y[i].d;
        const uint8_t *qs = x[i].qs, *signs = x[i].qs + 32;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int g = 0; g < 8; g++) {
            const int ls1 = 1 + 2 * (x[i].scales[g] & 15), ls2 = 1 + 2 * (x[i].scales[g] >> 4);
            int sumi[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t grid = muse_iq2s_grid[qs[4 * g + l] | ((x[i].qh[g] >> (2 * l)) & 3) << 8];
                sumi[l / 2] += dot8_signed(grid, signs[4 * g + l], q8);
            }
            bsum += ls1 * sumi[0] + ls2 * sumi[1];
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

// ---- IQ3_XXS / IQ3_S ----

void muse_to_float_iq3_xxs(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        const uint8_t *qs = x[i].qs, *w = x[i].qs + 64;
        for (int g = 0; g < 8; g++) {
            const uint32_t W = muse_rd_le32(w + 4 * g);
            const float db = d * (0.5f + (float)(W >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t signs = muse_ksigns_iq2xs[(W >> (7 * l)) & 127];
                const uint32_t g1 = muse_iq3xxs_grid[qs[8 * g + 2 * l]], g2 = muse_iq3xxs_grid[qs[8 * g + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * (float)g4(g1, j) * (signs & muse_kmask_iq2xs[j] ? -1.0f : 1.0f);
                    y[j + 4] = db * (float)g4(g2, j) * (signs & muse_kmask_iq2xs[j + 4] ? -1.0f : 1.0f);
                }
            }
        }
    }
}

void muse_to_float_iq3_s(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        for (int g = 0; g < 8; g++) {
            const float db = d * (float)(1 + 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 15));
            for (int l = 0; l < 4; l++, y += 8) {
                const int i1 = x[i].qs[8 * g + 2 * l] | ((x[i].qh[g] >> (2 * l)) & 1) << 8;
                const int i2 = x[i].qs[8 * g + 2 * l + 1] | ((x[i].qh[g] >> (2 * l + 1)) & 1) << 8;
                const uint8_t sg = x[i].signs[4 * g + l];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * (float)g4(muse_iq3s_grid[i1], j) * (sg & muse_kmask_iq2xs[j] ? -1.0f : 1.0f);
                    y[j + 4] = db * (float)g4(muse_iq3s_grid[i2], j) * (sg & muse_kmask_iq2xs[j + 4] ? -1.0f : 1.0f);
                }
            }
        }
    }
}

/* Two 4-value grid entries (elements 0-3, 4-7) with 8 sign bits, times q8. */
static inline int dot4x2_signed(uint32_t g1, uint32_t g2, uint8_t signs, const int8_t *q8) {
    int sum = 0;
    for (int j = 0; j < 4; j++) {
        sum += g4(g1, j) * q8[j] * (signs & muse_kmask_iq2xs[j] ? -1 : 1);
        sum += g4(g2, j) * q8[j + 4] * (signs & muse_kmask_iq2xs[j + 4] ? -1 : 1);
    }
    return sum;
}

void muse_vec_dot_iq3_xxs_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq3_xxs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d) * y[i].d;
        const uint8_t *qs = x[i].qs, *w = x[i].qs + 64;
        const int8_t *q8 = y[i].qs;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            const uint32_t W = muse_rd_le32(w + 4 * g);
            const int32_t ls = 2 * (int32_t)(W >> 28) + 1;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot4x2_signed(muse_iq3xxs_grid[qs[8 * g + 2 * l]], muse_iq3xxs_grid[qs[8 * g + 2 * l + 1]],
                                      muse_ksigns_iq2xs[(W >> (7 * l)) & 127], q8);
            bsum += sumi * ls;
        }
        sumf += d * (float)bsum;
    }
    *s = 0.25f * sumf;
}

void muse_vec_dot_iq3_s_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq3_s *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d) * y[i].d;
        const int8_t *q8 = y[i].qs;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            const int32_t ls = 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 15) + 1;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const int i1 = x[i].qs[8 * g + 2 * l] | ((x[i].qh[g] >> (2 * l)) & 1) << 8;
                const int i2 = x[i].qs[8 * g + 2 * l + 1] | ((x[i].qh[g] >> (2 * l + 1)) & 1) << 8;
                sumi += dot4x2_signed(muse_iq3s_grid[i1], muse_iq3s_grid[i2], x[i].signs[4 * g + l], q8);
            }
            bsum += sumi * ls;
        }
        sumf += d * (float)bsum;
    }
    *s = sumf;
}

// ---- IQ1_S / IQ1_M ----

#define IQ1_DELTA 0.125f

void muse_to_float_iq1_s(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        for (int g = 0; g < 8; g++) {
            const uint16_t h = x[i].qh[g];
            const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
            const float delta = h & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + l] | ((h >> (3 * l)) & 7) << 8];
                for (int j = 0; j < 8; j++) y[j] = dl * ((float)g1s(grid, j) + delta);
            }
        }
    }
}

/* IQ1_M's fp16 super-scale, rebuilt from the top nibbles of the four scale words. */
static inline uint16_t iq1m_scale_words(const uint8_t *sc8, uint16_t sc[4]) {
    for (int k = 0; k < 4; k++) sc[k] = muse_rd_le16(sc8 + 2 * k);
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

void muse_to_float_iq1_m(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sc[4];
        const float d = muse_h2f(iq1m_scale_words(x[i].scales, sc));
        for (int g = 0; g < 8; g++) {
            const int w = sc[g / 2] >> (6 * (g % 2));
            const float dl0 = d * (float)(2 * (w & 7) + 1), dl1 = d * (float)(2 * ((w >> 3) & 7) + 1);
            for (int l = 0; l < 4; l++, y += 8) {
                const int nib = (x[i].qh[2 * g + l / 2] >> (4 * (l % 2))) & 15;
                const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + l] | (nib & 7) << 8];
                const float delta = nib & 8 ? -IQ1_DELTA : IQ1_DELTA;
                const float dl = l < 2 ? dl0 : dl1;
                for (int j = 0; j < 8; j++) y[j] = dl * ((float)g1s(grid, j) + delta);
            }
        }
    }
}

void muse_vec_dot_iq1_s_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq1_s *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const int8_t *q8 = y[i].qs;
        int sumi = 0, sumi1 = 0;
        for (int g = 0; g < 8; g++) {
            const uint16_t h = x[i].qh[g];
            const int ls = 2 * ((h >> 12) & 7) + 1;
            const int delta = h & 0x8000 ? -1 : 1;
            int lsum = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + l] | ((h >> (3 * l)) & 7) << 8];
                for (int j = 0; j < 8; j++) lsum += q8[j] * g1s(grid, j);
            }
            sumi += ls * lsum;
            sumi1 += ls * delta * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
        }
        sumf += muse_h2f(x[i].d) * y[i].d * ((float)sumi + IQ1_DELTA * (float)sumi1);
    }
    *s = sumf;
}

void muse_vec_dot_iq1_m_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq1_m *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sc[4];
        const float d = muse_h2f(iq1m_scale_words(x[i].scales, sc));
        const int8_t *q8 = y[i].qs;
        int sumi1 = 0, sumi2 = 0;
        for (int g = 0; g < 8; g++) {
            int sum1[2] = {0, 0}, sum2[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const int nib = (x[i].qh[2 * g + l / 2] >> (4 * (l % 2))) & 15;
                const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + l] | (nib & 7) << 8];
                int lsum1 = 0, lsum2 = 0;
                for (int j = 0; j < 8; j++) {
                    lsum1 += q8[j] * g1s(grid, j);
                    lsum2 += q8[j];
                }
                sum1[l / 2] += lsum1;
                sum2[l / 2] += lsum2 * (nib & 8 ? -1 : 1);
            }
            const int ls1 = 2 * ((sc[g / 2] >> (6 * (g % 2))) & 7) + 1;
            const int ls2 = 2 * ((sc[g / 2] >> (6 * (g % 2) + 3)) & 7) + 1;
            sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
            sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
        }
        sumf += d * y[i].d * ((float)sumi1 + IQ1_DELTA * (float)sumi2);
    }
    *s = sumf;
}

// ---- IQ4_XS ----

static inline int iq4xs_ls(const struct muse_block_iq4_xs *b, int g) {
    return ((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b->scales_h >> (2 * g)) & 3) << 4;
}

void muse_to_float_iq4_xs(const void *vx, float *y, int64_t n) {
    const struct muse_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_h2f(x[i].d);
        for (int g = 0; g < 8; g++, y += 32) {
            const float dl = d * (float)(iq4xs_ls(&x[i], g) - 32);
            const uint8_t *qs = x[i].qs + 16 * g;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)muse_kvalues_iq4nl[qs[j] & 15];
                y[j + 16] = dl * (float)muse_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void muse_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq4_xs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d4d8 = muse_h2f(x[i].d) * y[i].d;
        for (int g = 0; g < 8; g++) {
            const float dl = d4d8 * (float)(iq4xs_ls(&x[i], g) - 32);
            const uint8_t *qs = x[i].qs + 16 * g;
            const int8_t *q8 = y[i].qs + 32 * g;
            int sumi1 = 0, sumi2 = 0;
            for (int j = 0; j < 16; j++) {
                sumi1 += q8[j] * muse_kvalues_iq4nl[qs[j] & 15];
                sumi2 += q8[j + 16] * muse_kvalues_iq4nl[qs[j] >> 4];
            }
            sumf += dl * (float)(sumi1 + sumi2);
        }
    }
    *s = sumf;
}
