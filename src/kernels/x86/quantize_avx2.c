/*
 * quantize_avx2.c - AVX2 activation quantizers: Q8_0, Q8_K, F16, BF16. Each produces exactly
 * the bytes of its reference twin (muse_from_float_*, spec 2.11); tests/kernels compares them
 * byte for byte.
 */
#include "kernels/x86/kernels_isa.h"

#include <math.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/x86/simd_avx2.h"

// ---- rounding helpers ------------------------------------------------------------------

/* roundf() (half away from zero) of 8 lanes, exact for |v| < 2^23: trunc, then step away from
 * zero when the dropped fraction is >= 0.5 (v - trunc(v) is exact). */
MUSE_AVX2_INLINE __m256 round_half_away(__m256 v) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign_mask), _mm256_set1_ps(1.0f));
    __m256 need = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(need, step));
}

/* Pack 4 x 8 int32 lanes (values in -128..127) into 32 int8 in order. */
MUSE_AVX2_INLINE __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b);   /* a0-3 b0-3 | a4-7 b4-7 */
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);  /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

MUSE_AVX2_INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

MUSE_AVX2_INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// ---- Q8_0 ------------------------------------------------------------------------------

void muse_quantize_q8_0_avx2(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
        const float amax = hmax_ps(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q0 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v0, vid)));
        __m256i q1 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v1, vid)));
        __m256i q2 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v2, vid)));
        __m256i q3 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v3, vid)));
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32_to_i8(q0, q1, q2, q3));
    }
}

/* ggml's x86 Q8_0 quantizer (muse_from_float_q8_0_x86): id = 127 / amax, codes rounded half to
 * even (vcvtps2dq in the default rounding mode, as nearbyintf), a code outside -128..127 (NaN,
 * inf) becomes 0. amax ignores NaN as fmaxf does (max_ps returns its second operand, the running
 * maximum, when the element is NaN). */
void muse_quantize_q8_0_x86_avx2(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_0 *y = vy;
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(abs_ps(v[k]), m);
        }
        const float amax = hmax_ps(m);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = muse_fp32_to_fp16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(r, lo, _CMP_GE_OQ), _mm256_cmp_ps(r, hi, _CMP_LE_OQ));
            q[k] = _mm256_cvtps_epi32(_mm256_and_ps(r, ok));
        }
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    }
}

// ---- Q8_K ------------------------------------------------------------------------------

void muse_quantize_q8_K_avx2(const float *x, void *vy, int64_t n) {
    struct muse_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(m);
        if (!(amax > 0.0f)) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of largest magnitude gives the signed max */
        const __m256 vamax = _mm256_set1_ps(amax);
        float max = 0.0f;
        for (int j = 0; j < 256; j += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), vamax, _CMP_EQ_OQ));
            if (mask) {
                max = x[j + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        const __m256i v127 = _mm256_set1_epi32(127);
        for (int j = 0; j < 256; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vis);
                v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), v127);
            }
            __m256i packed = pack_i32_to_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), packed);
            /* bsums of the two 16-element halves */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), packed);  /* 16 pair sums */
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));        /* 8 quad sums */
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            __m128i t = _mm_hadd_epi32(lo, hi);                                   /* 8-sums */
            t = _mm_hadd_epi32(t, t);                                             /* 16-sums */
            y[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(t);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---- F16, BF16 -------------------------------------------------------------------------

void muse_quantize_f16_avx2(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            /* NaN payloads: the reference makes every NaN 0x7e00 | sign */
            for (int k = 0; k < 8; k++) y[i + k] = muse_fp32_to_fp16(x[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) y[i] = muse_fp32_to_fp16(x[i]);
}

void muse_quantize_bf16_avx2(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 8 * k));
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
            __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
            __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
            __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
            r[k] = _mm256_blendv_epi8(rounded, quiet, is_nan);
        }
        /* values are < 65536: unsigned saturation keeps them; fix the lane interleave */
        __m256i p = _mm256_packus_epi32(r[0], r[1]);
        p = _mm256_permute4x64_epi64(p, 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    for (; i < n; i++) y[i] = muse_fp32_to_bf16(x[i]);
}

// ---- widening (the tile GEMM's f32 activation rows of float weights) ------------------------

/* F16 / BF16 row -> f32 (exact): the values muse_fp16_to_fp32 / muse_bf16_to_fp32 give. */
void muse_widen_f16_avx2(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = muse_fp16_to_fp32(x[i]);
}

void muse_widen_bf16_avx2(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16));
    for (; i < n; i++) y[i] = muse_bf16_to_fp32(x[i]);
}
