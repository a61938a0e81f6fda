/*
 * x86_numerics_body.h - the bodies of x86_numerics.c, compiled twice: once plain
 * (x86_numerics.c, X86N(f) = f_generic, fmaf from libm) and once with the AVX2/FMA flags
 * (x86_numerics_avx2.c, X86N(f) = f_fma, fmaf inlined as one vfmadd). The C is the same, so
 * both builds give the same bits; the FMA build is only faster. No include guard on purpose.
 */
static float f_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float X86N(muse_x86_expf)(float x) {
    /* n = round(x / ln2) via the 1.5 * 2^23 shifter; b = x - n * ln2 (two-part ln2) */
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = f_to_bits(z) << 23;
    const float k = f_from_bits(e + f_to_bits(1.0f));
    const int c = fabsf(n) > 126.0f; /* false for NaN, as _CMP_GT_OQ */
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         0x1.ffffecp-1f * b);
    if (!c) return fmaf(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = f_from_bits(g + 0x7f000000u);
    const float s2 = f_from_bits(e - g);
    if (fabsf(n) > 192.0f) return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

float X86N(muse_x86_silu)(float x) {
    const float neg_x = 0.0f - x;
    return x / (1.0f + X86N(muse_x86_expf)(neg_x));
}

float X86N(muse_x86_hsum8)(const float l[8]) {
    const float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t2) + (t1 + t3);
}

float X86N(muse_x86_dot_tinyblas)(int64_t n, const float *x, const float *y) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    return X86N(muse_x86_hsum8)(acc);
}

float X86N(muse_x86_dot_vec)(int64_t n, const float *x, const float *y, int tail_double) {
    const int64_t np = n & ~(int64_t)31;
    float acc[4][8];
    memset(acc, 0, sizeof acc);
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++) acc[j][l] = fmaf(x[i + j * 8 + l], y[i + j * 8 + l], acc[j][l]);
    /* GGML_F32x8_REDUCE with GGML_F32_ARR 4: x0 += x2, x1 += x3, x0 += x1, then 128-bit halves,
     * then two hadds */
    float v[8];
    for (int l = 0; l < 8; l++) {
        const float a02 = acc[0][l] + acc[2][l], a13 = acc[1][l] + acc[3][l];
        v[l] = a02 + a13;
    }
    const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
    const float red = (t0 + t1) + (t2 + t3);
    if (tail_double) {
        double s = red;
        for (int64_t i = np; i < n; i++) s += (double)(x[i] * y[i]);
        return (float)s;
    }
    float s = red;
    for (int64_t i = np; i < n; i++) s += x[i] * y[i];
    return s;
}

double X86N(muse_x86_softmax_exp)(float *x, int32_t n, int32_t pos0, float max) {
    for (int32_t j = 0; j < n; j++) x[j] = X86N(muse_x86_expf)(x[j] - max);
    double sum = 0.0;
    const int32_t last = pos0 + n - 1;
    for (int32_t g0 = pos0 & ~7; g0 <= last; g0 += 8) {
        float l[8];
        for (int i = 0; i < 8; i++) {
            const int32_t pos = g0 + i;
            l[i] = pos >= pos0 && pos <= last ? x[pos - pos0] : 0.0f;
        }
        sum += (double)X86N(muse_x86_hsum8)(l);
    }
    return sum;
}

void X86N(muse_x86_fma_lanes)(float *lanes, const float *row, float p, int32_t lane, int32_t n) {
    for (int32_t d = 0; d < n; d++) lanes[d * 8 + lane] = fmaf(row[d], p, lanes[d * 8 + lane]);
}

// ---- matmul numerics ------------------------------------------------------------------------

void X86N(muse_x86_vd_q8_0)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q8_0 *x = vx;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)vy + ib;
        const float d = muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(a->d);
        for (int l = 0; l < 8; l++) {
            int32_t t = 0;
            for (int k = 0; k < 4; k++) t += (int32_t)x[ib].qs[4 * l + k] * a->qs[4 * l + k];
            acc[l] = fmaf(d, (float)t, acc[l]);
        }
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

void X86N(muse_x86_vd_q4_0)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_0 *x = vx;
    int8_t w[32];
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 32; ib++) {
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)((x[ib].qs[j] & 0x0f) - 8);
            w[j + 16] = (int8_t)((x[ib].qs[j] >> 4) - 8);
        }
        const struct muse_block_q8_0 *a = (const struct muse_block_q8_0 *)vy + ib;
        const float d = muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(a->d);
        for (int l = 0; l < 8; l++) {
            int32_t t = 0;
            for (int k = 0; k < 4; k++) t += (int32_t)w[4 * l + k] * a->qs[4 * l + k];
            acc[l] = fmaf(d, (float)t, acc[l]);
        }
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

/* tinyBLAS over F32/F16/BF16 operands (k a multiple of 8; else llamafile declines and
 * ggml_vec_dot_f32 runs, which muse_x86_dot_vec reproduces for F32). */
/* acc[l] = fmaf(d, sum of w[4l+t] * a->qs[4l+t], acc[l]): one 32-element block of tinyBLAS_Q0_AVX
 * (and of the AVX2 vec_dot kernels) over unpacked int8 weights. */
static void X86N(q0_block)(const int8_t w[32], const struct muse_block_q8_0 *a, float d, float acc[8]) {
    for (int l = 0; l < 8; l++) {
        int32_t t = 0;
        for (int k = 0; k < 4; k++) t += (int32_t)w[4 * l + k] * a->qs[4 * l + k];
        acc[l] = fmaf(d, (float)t, acc[l]);
    }
}

/* w = the 32 codebook values of a block of 4-bit codes (low nibbles elements 0-15, high 16-31) */
static void X86N(codebook32)(const int8_t *kv, const uint8_t qs[16], int8_t w[32]) {
    for (int j = 0; j < 16; j++) {
        w[j] = kv[qs[j] & 15];
        w[j + 16] = kv[qs[j] >> 4];
    }
}

void X86N(muse_x86_vd_q5_0)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q5_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    int8_t w[32];
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const uint32_t qh = muse_rd_le32(x[ib].qh);
        for (int j = 0; j < 32; j++) {
            const int lo = j < 16 ? (x[ib].qs[j] & 15) : (x[ib].qs[j - 16] >> 4);
            w[j] = (int8_t)((lo | (int)((qh >> j) & 1) << 4) - 16);
        }
        X86N(q0_block)(w, &y[ib], muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(y[ib].d), acc);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

void X86N(muse_x86_vd_iq4_nl)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq4_nl *x = vx;
    const struct muse_block_q8_0 *y = vy;
    int8_t w[32];
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 32; ib++) {
        X86N(codebook32)(muse_kvalues_iq4nl, x[ib].qs, w);
        X86N(q0_block)(w, &y[ib], muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(y[ib].d), acc);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

/* MXFP4 x Q8_0 (ggml's AVX2 vec_dot): blocks in pairs, the even one into acc1 and the odd one into
 * acc2 as q0_block does (d = d_a * e8m0_half), muse_x86_hsum8(acc1 + acc2); an odd last block
 * added after that, sumf += d * (float)sumi */
void X86N(muse_x86_vd_mxfp4)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_mxfp4 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    int8_t w[32];
    float acc[2][8] = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}}, t[8];
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2)
        for (int q = 0; q < 2; q++) {
            X86N(codebook32)(muse_kvalues_mxfp4, x[ib + q].qs, w);
            X86N(q0_block)(w, &y[ib + q], muse_fp16_to_fp32(y[ib + q].d) * muse_e8m0_half(x[ib + q].e), acc[q]);
        }
    for (int l = 0; l < 8; l++) t[l] = acc[0][l] + acc[1][l];
    float sumf = X86N(muse_x86_hsum8)(t);
    for (; ib < nb; ib++) {
        int32_t sumi = 0;
        X86N(codebook32)(muse_kvalues_mxfp4, x[ib].qs, w);
        for (int j = 0; j < 32; j++) sumi += (int32_t)w[j] * y[ib].qs[j];
        sumf += muse_fp16_to_fp32(y[ib].d) * muse_e8m0_half(x[ib].e) * (float)sumi;
    }
    *s = sumf;
}

/* Q1_0 x Q8_0 (ggml's AVX2 vec_dot): per block, lane l of each of its 4 Q8_0 blocks k is the
 * exact sum of +-a over elements 4l..4l+3; b[l] = d_a0 * lane (then fmaf(d_ak, lane, b[l]) for
 * k = 1..3), acc[l] = fmaf(d, b[l], acc[l]); muse_x86_hsum8 at the end */
void X86N(muse_x86_vd_q1_0)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q1_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 128; ib++) {
        float b[8];
        for (int k = 0; k < 4; k++) {
            const struct muse_block_q8_0 *a = &y[4 * ib + k];
            const float dy = muse_fp16_to_fp32(a->d);
            for (int l = 0; l < 8; l++) {
                int32_t t = 0;
                for (int e = 4 * l; e < 4 * l + 4; e++)
                    t += (x[ib].qs[4 * k + e / 8] >> (e % 8)) & 1 ? a->qs[e] : -a->qs[e];
                b[l] = k == 0 ? dy * (float)t : fmaf(dy, (float)t, b[l]);
            }
        }
        const float d = muse_fp16_to_fp32(x[ib].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, b[l], acc[l]);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

/* NVFP4 x Q8_0 (ggml's AVX2 vec_dot): per block and half h (its Q8_0 block 2 ib + h), lane l
 * is the exact integer sum of the half's elements 4l..4l+3 (sub-block 2h + l/4),
 * acc[l] = fmaf(d_sub * d_a, lane, acc[l]); muse_x86_hsum8 at the end */
void X86N(muse_x86_vd_nvfp4)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_nvfp4 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    int8_t w[64];
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t ib = 0; ib < n / 64; ib++) {
        for (int sb = 0; sb < 4; sb++)
            for (int j = 0; j < 8; j++) {
                w[16 * sb + j] = muse_kvalues_mxfp4[x[ib].qs[8 * sb + j] & 15];
                w[16 * sb + j + 8] = muse_kvalues_mxfp4[x[ib].qs[8 * sb + j] >> 4];
            }
        for (int h = 0; h < 2; h++) {
            const struct muse_block_q8_0 *a = &y[2 * ib + h];
            const float dy = muse_fp16_to_fp32(a->d);
            for (int l = 0; l < 8; l++) {
                int32_t t = 0;
                for (int k = 0; k < 4; k++) t += (int32_t)w[32 * h + 4 * l + k] * a->qs[4 * l + k];
                acc[l] = fmaf(muse_ue4m3_half(x[ib].d[2 * h + l / 4]) * dy, (float)t, acc[l]);
            }
        }
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

void X86N(muse_x86_vd_f32)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = n % 8 ? X86N(muse_x86_dot_vec)(n, vx, vy, 0) : X86N(muse_x86_dot_tinyblas)(n, vx, vy);
}

static void X86N(muse_x86_vd_half)(int64_t n, float *s, const uint16_t *x, const uint16_t *y, int bf16) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++) {
            const float a = bf16 ? muse_bf16_to_fp32(x[i + l]) : muse_fp16_to_fp32(x[i + l]);
            const float b = bf16 ? muse_bf16_to_fp32(y[i + l]) : muse_fp16_to_fp32(y[i + l]);
            acc[l] = fmaf(a, b, acc[l]);
        }
    *s = X86N(muse_x86_hsum8)(acc);
}

void X86N(muse_x86_vd_f16)(int64_t n, float *s, const void *vx, const void *vy) {
    if (n % 8) muse_type_traits[MUSE_TYPE_F16].vec_dot_ref(n, s, vx, vy);
    else X86N(muse_x86_vd_half)(n, s, vx, vy, 0);
}

void X86N(muse_x86_vd_bf16)(int64_t n, float *s, const void *vx, const void *vy) {
    if (n % 8) muse_type_traits[MUSE_TYPE_BF16].vec_dot_ref(n, s, vx, vy);
    else X86N(muse_x86_vd_half)(n, s, vx, vy, 1);
}

/* ggml_vec_dot_iq2_xxs_q8_K (AVX2): per super-block d = d_w * d_a and eight int32 lanes, lane l
 * holding, over the 8 sub-blocks, scale * (the 4 products of elements 4l..4l+3);
 * acc[l] = fma(d, lane, acc[l]); the result is 0.125f * hsum. */
void X86N(muse_x86_vd_iq2_xxs)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq2_xxs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_fp16_to_fp32(x[i].d) * y[i].d;
        const uint8_t *rec = (const uint8_t *)x[i].qs;
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int g = 0; g < 8; g++) {
            const uint32_t A = muse_rd_le32(rec + 8 * g), B = muse_rd_le32(rec + 8 * g + 4);
            const int32_t ls = 2 * (int32_t)(B >> 28) + 1;
            const int8_t *q8 = y[i].qs + 32 * g;
            for (int l = 0; l < 8; l++) {
                int32_t t = 0;
                for (int k = 0; k < 4; k++) {
                    const int e = 4 * l + k; /* element of the sub-block */
                    const uint64_t grid = muse_iq2xxs_grid[(A >> (8 * (e / 8))) & 255];
                    const uint8_t signs = muse_ksigns_iq2xs[(B >> (7 * (e / 8))) & 127];
                    const int32_t w = (int32_t)((grid >> (8 * (e % 8))) & 255);
                    t += (signs >> (e % 8) & 1 ? -w : w) * q8[e];
                }
                lanes[l] += ls * t;
            }
        }
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    *s = 0.125f * X86N(muse_x86_hsum8)(acc);
}

/* The signed weights of a super-block of IQ2_XS, IQ2_S, IQ3_XXS or IQ3_S (w[256]) and the group
 * scale 2 * ls + 1 of each 16 elements (l16[16]), as vec_dot_ref (quant_iq.c) decodes them. */
static void X86N(dec_iq2_xs)(const void *vb, int8_t *w, int32_t *l16) {
    const struct muse_block_iq2_xs *b = vb;
    for (int g = 0; g < 8; g++) {
        l16[2 * g] = 2 * (b->scales[g] & 15) + 1;
        l16[2 * g + 1] = 2 * (b->scales[g] >> 4) + 1;
        for (int l = 0; l < 4; l++) {
            const uint16_t v = b->qs[4 * g + l];
            const uint64_t grid = muse_iq2xs_grid[v & 511];
            const uint8_t sg = muse_ksigns_iq2xs[v >> 9];
            for (int j = 0; j < 8; j++) {
                const int m = (int)((grid >> (8 * j)) & 255);
                w[32 * g + 8 * l + j] = (int8_t)(sg & muse_kmask_iq2xs[j] ? -m : m);
            }
        }
    }
}
static void X86N(dec_iq2_s)(const void *vb, int8_t *w, int32_t *l16) {
    const struct muse_block_iq2_s *b = vb;
    for (int g = 0; g < 8; g++) {
        l16[2 * g] = 2 * (b->scales[g] & 15) + 1;
        l16[2 * g + 1] = 2 * (b->scales[g] >> 4) + 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = muse_iq2s_grid[b->qs[4 * g + l] | ((b->qh[g] >> (2 * l)) & 3) << 8];
            const uint8_t sg = b->qs[32 + 4 * g + l];
            for (int j = 0; j < 8; j++) {
                const int m = (int)((grid >> (8 * j)) & 255);
                w[32 * g + 8 * l + j] = (int8_t)(sg & muse_kmask_iq2xs[j] ? -m : m);
            }
        }
    }
}
static void X86N(dec_iq3_xxs)(const void *vb, int8_t *w, int32_t *l16) {
    const struct muse_block_iq3_xxs *b = vb;
    for (int g = 0; g < 8; g++) {
        const uint32_t W = muse_rd_le32(b->qs + 64 + 4 * g);
        l16[2 * g] = l16[2 * g + 1] = 2 * (int32_t)(W >> 28) + 1;
        for (int l = 0; l < 4; l++) {
            const uint8_t sg = muse_ksigns_iq2xs[(W >> (7 * l)) & 127];
            for (int j = 0; j < 8; j++) {
                const int m = (int)((muse_iq3xxs_grid[b->qs[8 * g + 2 * l + j / 4]] >> (8 * (j % 4))) & 255);
                w[32 * g + 8 * l + j] = (int8_t)(sg & muse_kmask_iq2xs[j] ? -m : m);
            }
        }
    }
}
static void X86N(dec_iq3_s)(const void *vb, int8_t *w, int32_t *l16) {
    const struct muse_block_iq3_s *b = vb;
    for (int g = 0; g < 8; g++) {
        l16[2 * g] = l16[2 * g + 1] = 2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1;
        for (int l = 0; l < 4; l++) {
            const uint8_t sg = b->signs[4 * g + l];
            for (int j = 0; j < 8; j++) {
                const int k = 2 * l + j / 4; /* grid entry of the group */
                const int m = (int)((muse_iq3s_grid[b->qs[8 * g + k] | ((b->qh[g] >> k) & 1) << 8] >> (8 * (j % 4))) & 255);
                w[32 * g + 8 * l + j] = (int8_t)(sg & muse_kmask_iq2xs[j] ? -m : m);
            }
        }
    }
}

/* ggml_vec_dot_{iq2_xs,iq2_s,iq3_xxs,iq3_s}_q8_K (AVX2): per super-block d = d_w * d_a, lane l =
 * the exact sum over the elements e with (e % 32) / 4 == l of ls(e) * w * a; acc[l] = fmaf(d, lane,
 * acc[l]); the result c * hsum8(acc) (c = 0.125f, 0.125f, 0.25f, 1). */
static float X86N(iq_grid_dot)(int64_t n, const void *vx, size_t block_bytes, const struct muse_block_q8_K *y,
                               void (*dec)(const void *, int8_t *, int32_t *), float c) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const void *b = (const uint8_t *)vx + i * block_bytes;
        int8_t w[256];
        int32_t l16[16], lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        dec(b, w, l16);
        for (int e = 0; e < 256; e++) lanes[(e % 32) / 4] += l16[e / 16] * (int32_t)w[e] * y[i].qs[e];
        uint16_t dh;
        memcpy(&dh, b, 2); /* d leads every one of these blocks */
        const float d = muse_fp16_to_fp32(dh) * y[i].d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return c * X86N(muse_x86_hsum8)(acc);
}
void X86N(muse_x86_vd_iq2_xs)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(iq_grid_dot)(n, vx, sizeof(struct muse_block_iq2_xs), vy, X86N(dec_iq2_xs), 0.125f);
}
void X86N(muse_x86_vd_iq2_s)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(iq_grid_dot)(n, vx, sizeof(struct muse_block_iq2_s), vy, X86N(dec_iq2_s), 0.125f);
}
void X86N(muse_x86_vd_iq3_xxs)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(iq_grid_dot)(n, vx, sizeof(struct muse_block_iq3_xxs), vy, X86N(dec_iq3_xxs), 0.25f);
}
void X86N(muse_x86_vd_iq3_s)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(iq_grid_dot)(n, vx, sizeof(struct muse_block_iq3_s), vy, X86N(dec_iq3_s), 1.0f);
}

/* ggml_vec_dot_iq1_s_q8_K (AVX2): per super-block d = d_a * d_w, eight int32 lanes, lane l holding,
 * over the 8 groups, ls * (the 4 products of elements 4l..4l+3 of the grid values), and the int
 * sum1 = sum of ls * sign(delta) * (the group's two bsums); acc[l] = fma(d, lane, acc[l]) and
 * accum1 = fma(d, sum1, accum1) (ggml's `accum1 += d * sumi1`, contracted by GCC's default
 * -ffp-contract=fast: checked against the AVX2 build); the result hsum(acc) + 0.125f * accum1. */
void X86N(muse_x86_vd_iq1_s)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq1_s *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, accum1 = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum1 = 0;
        for (int g = 0; g < 8; g++) {
            const unsigned h = x[i].qh[g];
            const int32_t ls = 2 * (int32_t)((h >> 12) & 7) + 1;
            for (int l = 0; l < 8; l++) {
                int32_t t = 0;
                for (int k = 0; k < 4; k++) {
                    const int e = 4 * l + k; /* element of the group: grid entry e / 8, byte e % 8 */
                    const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + e / 8] | ((h >> (3 * (e / 8))) & 7) << 8];
                    t += (int32_t)(int8_t)(grid >> (8 * (e % 8))) * y[i].qs[32 * g + e];
                }
                lanes[l] += ls * t;
            }
            sum1 += (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]) * (h & 0x8000 ? -ls : ls);
        }
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        accum1 = fmaf(d, (float)sum1, accum1);
    }
    *s = X86N(muse_x86_hsum8)(acc) + 0.125f * accum1;
}
/* ggml_vec_dot_iq1_m_q8_K (AVX2): per super-block d = d_a * d_w (the fp16 assembled from the top
 * nibbles of the scales), two sets of eight int32 lanes, lane l holding over the 8 groups ls *
 * (grid products of elements 4l..4l+3) and ls * sign(delta) * (the sum of those 4 activations),
 * ls the scale of the lane's 16-element half and the sign that of its 8-element sub-group;
 * acc1[l] = fma(d, lane1, acc1[l]), acc2[l] = fma(d, lane2, acc2[l]); the result
 * hsum(acc1) + 0.125f * hsum(acc2). */
void X86N(muse_x86_vd_iq1_m)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq1_m *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc1[8] = {0, 0, 0, 0, 0, 0, 0, 0}, acc2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, 8);
        const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        int32_t lanes1[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lanes2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int g = 0; g < 8; g++) {
            const int ws = sc[g / 2] >> (6 * (g % 2));
            const int32_t ls[2] = {2 * (ws & 7) + 1, 2 * ((ws >> 3) & 7) + 1};
            const unsigned h = (unsigned)x[i].qh[2 * g] | (unsigned)x[i].qh[2 * g + 1] << 8; /* nibble k: sub-group k */
            for (int l = 0; l < 8; l++) {
                const int sg = l / 2; /* the 8-element sub-group of elements 4l..4l+3 */
                const uint64_t grid = muse_iq1s_grid[x[i].qs[4 * g + sg] | ((h >> (4 * sg)) & 7) << 8];
                int32_t t1 = 0, t2 = 0;
                for (int k = 0; k < 4; k++) {
                    const int e = 4 * l + k;
                    t1 += (int32_t)(int8_t)(grid >> (8 * (e % 8))) * y[i].qs[32 * g + e];
                    t2 += y[i].qs[32 * g + e];
                }
                lanes1[l] += ls[l / 4] * t1;
                lanes2[l] += ls[l / 4] * ((h >> (4 * sg + 3)) & 1 ? -t2 : t2);
            }
        }
        const float d = y[i].d * muse_fp16_to_fp32(dh);
        for (int l = 0; l < 8; l++) {
            acc1[l] = fmaf(d, (float)lanes1[l], acc1[l]);
            acc2[l] = fmaf(d, (float)lanes2[l], acc2[l]);
        }
    }
    *s = X86N(muse_x86_hsum8)(acc1) + 0.125f * X86N(muse_x86_hsum8)(acc2);
}

/* ---- K-quants: ggml's AVX2 ggml_vec_dot_q{4,5,6}_K_q8_K ----------------------------------- */

/* Scale (0..63) and min of sub-block j of a Q4_K/Q5_K super-block (spec 2.5, get_scale_min_k4). */
static void X86N(k4_scale_min)(const uint8_t *S, int j, int32_t *sc, int32_t *mn) {
    if (j < 4) {
        *sc = S[j] & 63;
        *mn = S[j + 4] & 63;
    } else {
        *sc = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4);
        *mn = (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
    }
}

/* The K-quant lane of element e of a super-block: ggml's AVX2 kernels load 32 consecutive
 * elements per register, and maddubs + madd sum elements 4l..4l+3 of each 32 into int32 lane l. */
#define X86_KLANE(e) (((e) % 32) / 4)

/* Q4_K (qh NULL) or Q5_K super-block: lanes[l] = exact sum of scale * code * a over the elements
 * of lane l; *mins4 the four int32 lanes of ggml's mins product
 * prod[k] = mn[2k] * (bs[4k] + bs[4k+1]) + mn[2k+1] * (bs[4k+2] + bs[4k+3]). */
static void X86N(k45_lanes)(const uint8_t *S, const uint8_t *qh, const uint8_t *qs, const struct muse_block_q8_K *yb,
                            int32_t lanes[8], int32_t mins4[4]) {
    int32_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) X86N(k4_scale_min)(S, j, &sc[j], &mn[j]);
    for (int k = 0; k < 4; k++)
        mins4[k] = mn[2 * k] * (yb->bsums[4 * k] + yb->bsums[4 * k + 1]) +
                   mn[2 * k + 1] * (yb->bsums[4 * k + 2] + yb->bsums[4 * k + 3]);
    for (int l = 0; l < 8; l++) lanes[l] = 0;
    for (int e = 0; e < 256; e++) {
        const uint8_t b = qs[32 * (e / 64) + e % 32];
        int32_t q = e % 64 < 32 ? (b & 15) : (b >> 4);
        if (qh) q += 16 * ((qh[e % 32] >> (e / 32)) & 1);
        lanes[X86_KLANE(e)] += sc[e / 32] * (q * yb->qs[e]);
    }
}

/* ggml_vec_dot_q4_K_q8_K (AVX2): per super-block d = d_a * d_w, dmin = -d_a * dmin_w;
 * acc[l] = fmaf(d, lanes[l], acc[l]); accm[k] = fmaf(dmin, mins4[k], accm[k]);
 * result muse_x86_hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3])). */
void X86N(muse_x86_vd_q4_K)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, accm[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d), dmin = -y[i].d * muse_fp16_to_fp32(x[i].dmin);
        int32_t lanes[8], mins4[4];
        X86N(k45_lanes)(x[i].scales, NULL, x[i].qs, &y[i], lanes, mins4);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        for (int k = 0; k < 4; k++) accm[k] = fmaf(dmin, (float)mins4[k], accm[k]);
    }
    *s = X86N(muse_x86_hsum8)(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

/* ggml_vec_dot_q5_K_q8_K (AVX2): the lanes as Q4_K; the mins as one scalar per super-block,
 * summs = fmaf(dmin, (float)(sum of the four mins4), summs) (ggml's `summs += dmin * isum`,
 * contracted by the compiler); result muse_x86_hsum8(acc) + summs. */
void X86N(muse_x86_vd_q5_K)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q5_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, summs = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d), dmin = -y[i].d * muse_fp16_to_fp32(x[i].dmin);
        int32_t lanes[8], mins4[4];
        X86N(k45_lanes)(x[i].scales, x[i].qh, x[i].qs, &y[i], lanes, mins4);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        summs = fmaf(dmin, (float)(mins4[0] + mins4[1] + mins4[2] + mins4[3]), summs);
    }
    *s = X86N(muse_x86_hsum8)(acc) + summs;
}

/* ggml_vec_dot_q6_K_q8_K (AVX2): lanes[l] = exact sum of scale * (code - 32) * a over the
 * elements of lane l; d = d_a * d_w; acc[l] = fmaf(d, lanes[l], acc[l]); muse_x86_hsum8(acc). */
/* ggml_vec_dot_iq4_xs_q8_K (AVX2): per super-block d = d_w * d_a, lane l = the exact sum of
 * (ls_g - 32) * codebook value * a over the elements with (e % 32) / 4 == l (g = e / 32);
 * acc[l] = fmaf(d, lane, acc[l]); muse_x86_hsum8 at the end. */
void X86N(muse_x86_vd_iq4_xs)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq4_xs *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int g = 0; g < 8; g++) {
            const int32_t ls = (((x[i].scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((x[i].scales_h >> (2 * g)) & 3) << 4) - 32;
            for (int e = 0; e < 32; e++) {
                const uint8_t q = x[i].qs[16 * g + e % 16];
                const int32_t v = muse_kvalues_iq4nl[e < 16 ? q & 15 : q >> 4];
                lanes[e / 4] += ls * (v * y[i].qs[32 * g + e]);
            }
        }
        const float d = muse_fp16_to_fp32(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

/* The 2-bit field of element e of a 256-element super-block packed as Q2_K, Q3_K and TQ2_0 pack
 * their low bits: byte 32 * (e / 128) + e % 32, bits 2 * ((e % 128) / 32). */
static int X86N(plane2)(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

/* The trit / 2-bit code (0..2) of element e of a TQ1_0 / TQ2_0 super-block (quant_ternary.c):
 * TQ1_0 5 trits per byte of qs[0..31] for elements 0-159, of qs[32..47] for 160-239, 4 per byte of
 * qh for 240-255, trit n of byte b = ((uint8_t)(b * 3^n) * 3) >> 8; TQ2_0 2 bits per element. */
static int X86N(tq1_code)(const void *vb, int e) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const struct muse_block_tq1_0 *x = vb;
    const uint8_t b = e < 160 ? x->qs[e % 32] : e < 240 ? x->qs[32 + (e - 160) % 16] : x->qh[(e - 240) % 4];
    const int t = e < 160 ? e / 32 : e < 240 ? (e - 160) / 16 : (e - 240) / 4;
    return ((uint16_t)(uint8_t)(b * pow3[t]) * 3) >> 8;
}
static int X86N(tq2_code)(const void *vb, int e) {
    const struct muse_block_tq2_0 *x = vb;
    return X86N(plane2)(x->qs, e);
}

/* ggml_vec_dot_tq1_0_q8_K / tq2_0_q8_K (AVX2): per super-block lane l = the exact sum of code * a
 * over the elements with (e % 32) / 4 == l minus bsums[2l] + bsums[2l + 1], d = d_a * d_w,
 * acc[l] = fmaf(lane, d, acc[l]) (ggml's mul + add, which GCC contracts into one FMA: checked
 * against the AVX2 build); muse_x86_hsum8 at the end. The block's d is its last field. */
static float X86N(ternary_dot)(int64_t n, const void *vx, size_t block_bytes, const struct muse_block_q8_K *y,
                               int (*code)(const void *, int)) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *b = (const uint8_t *)vx + i * block_bytes;
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int e = 0; e < 256; e++) lanes[X86_KLANE(e)] += code(b, e) * y[i].qs[e];
        uint16_t dh;
        memcpy(&dh, b + block_bytes - 2, 2);
        const float d = y[i].d * muse_fp16_to_fp32(dh);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf((float)(lanes[l] - (y[i].bsums[2 * l] + y[i].bsums[2 * l + 1])), d, acc[l]);
    }
    return X86N(muse_x86_hsum8)(acc);
}
void X86N(muse_x86_vd_tq1_0)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(ternary_dot)(n, vx, sizeof(struct muse_block_tq1_0), vy, X86N(tq1_code));
}
void X86N(muse_x86_vd_tq2_0)(int64_t n, float *s, const void *vx, const void *vy) {
    *s = X86N(ternary_dot)(n, vx, sizeof(struct muse_block_tq2_0), vy, X86N(tq2_code));
}

/* ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1 (AVX2): per block lane l = the exact sum of code * a over
 * elements 4l..4l+3 (unsigned codes), acc[l] = fmaf(d_w * d_a, lane, acc[l]), and summs =
 * fmaf(m_w, s_a, summs) (ggml's `summs += m * s`, contracted by GCC); hsum8(acc) + summs. */
static float X86N(q1_dot)(int64_t n, const void *vx, int five, const struct muse_block_q8_1 *y) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, summs = 0.0f;
    for (int64_t ib = 0; ib < n / 32; ib++) {
        uint16_t d, m;
        const uint8_t *b;
        uint32_t qh = 0;
        if (five) {
            const struct muse_block_q5_1 *x = (const struct muse_block_q5_1 *)vx + ib;
            d = x->d, m = x->m, b = x->qs, qh = muse_rd_le32(x->qh);
        } else {
            const struct muse_block_q4_1 *x = (const struct muse_block_q4_1 *)vx + ib;
            d = x->d, m = x->m, b = x->qs;
        }
        const float dd = muse_fp16_to_fp32(d) * muse_fp16_to_fp32(y[ib].d);
        for (int l = 0; l < 8; l++) {
            int32_t t = 0;
            for (int k = 0; k < 4; k++) {
                const int j = 4 * l + k;
                const int code = (j < 16 ? b[j] & 15 : b[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
                t += code * y[ib].qs[j];
            }
            acc[l] = fmaf(dd, (float)t, acc[l]);
        }
        summs = fmaf(muse_fp16_to_fp32(m), muse_fp16_to_fp32(y[ib].s), summs);
    }
    return X86N(muse_x86_hsum8)(acc) + summs;
}
void X86N(muse_x86_vd_q4_1)(int64_t n, float *s, const void *vx, const void *vy) { *s = X86N(q1_dot)(n, vx, 0, vy); }
void X86N(muse_x86_vd_q5_1)(int64_t n, float *s, const void *vx, const void *vy) { *s = X86N(q1_dot)(n, vx, 1, vy); }

/* ggml_vec_dot_q2_K_q8_K (AVX2): per super-block d = d_a * d_w, dmin = -d_a * dmin_w; the mins
 * first, acc[l] = fmaf(dmin, mins[2l] * bsums[2l] + mins[2l + 1] * bsums[2l + 1], acc[l]), then
 * lane l = the exact sum of scale * code * a over the elements with (e % 32) / 4 == l,
 * acc[l] = fmaf(d, lane, acc[l]); muse_x86_hsum8 at the end. */
void X86N(muse_x86_vd_q2_K)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q2_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *S = x[i].scales;
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d), dmin = -y[i].d * muse_fp16_to_fp32(x[i].dmin);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(dmin, (float)((S[2 * l] >> 4) * y[i].bsums[2 * l] + (S[2 * l + 1] >> 4) * y[i].bsums[2 * l + 1]), acc[l]);
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int e = 0; e < 256; e++) {
            const int code = X86N(plane2)(x[i].qs, e);
            lanes[X86_KLANE(e)] += (S[e / 16] & 15) * (code * y[i].qs[e]);
        }
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

/* ggml_vec_dot_q3_K_q8_K (AVX2): per super-block d = d_a * d_w, lane l = the exact sum of scale *
 * code * a over the elements e with (e % 32) / 4 == l (code = 2 low bits - 4 unless the hmask bit
 * is set; 16 six-bit scales - 32), acc[l] = fmaf(d, lane, acc[l]); muse_x86_hsum8 at the end. */
void X86N(muse_x86_vd_q3_K)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q3_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *S = x[i].scales;
        int32_t sc[16], lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < 16; j++)
            sc[j] = ((j < 8 ? S[j] & 15 : S[j - 8] >> 4) | ((S[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        for (int e = 0; e < 256; e++) {
            const int low = X86N(plane2)(x[i].qs, e);
            const int code = low - ((x[i].hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
            lanes[X86_KLANE(e)] += sc[e / 16] * (code * y[i].qs[e]);
        }
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}

void X86N(muse_x86_vd_q6_K)(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q6_K *x = vx;
    const struct muse_block_q8_K *y = vy;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * muse_fp16_to_fp32(x[i].d);
        int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int e = 0; e < 256; e++) {
            const int nh = e / 128, r = e % 128, k = r / 32, l = r % 32;
            const uint8_t b = x[i].ql[64 * nh + l + 32 * (k & 1)];
            const int32_t lo = k < 2 ? (b & 15) : (b >> 4);
            const int32_t hi = (x[i].qh[32 * nh + l] >> (2 * k)) & 3;
            lanes[X86_KLANE(e)] += x[i].scales[e / 16] * ((lo | hi << 4) * y[i].qs[e]);
        }
        /* the codes' offset 32, per 32-element chunk k into lane k: 32 x (scale x bsum of its two
         * 16-element sub-blocks) (ggml's q8sclsub) */
        for (int l = 0; l < 8; l++)
            lanes[l] -= 32 * (x[i].scales[2 * l] * y[i].bsums[2 * l] + x[i].scales[2 * l + 1] * y[i].bsums[2 * l + 1]);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    *s = X86N(muse_x86_hsum8)(acc);
}
#undef X86_KLANE
