/* x86_numerics_avx2.c - the FMA build of x86_numerics_body.h (see there). */
#include "kernels/x86_numerics.h"

#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_tables.h"
#include "kernels/quant_util.h"

#define X86N(name) name##_fma
#include "kernels/x86_numerics_body.h"
#undef X86N

#include "kernels/x86/simd_avx2.h"

/* Sum of the 8 lanes in muse_x86_hsum8's order. */
static inline float hsum8_avx(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v)); /* l_i + l_{i+4} */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                        /* (t0 + t2), (t1 + t3) */
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* Eight int32 lanes, lane l = sum of w[4l + t] * a[4l + t] (t < 4), exact: |w| <= 127 or
 * |a| <= 127 keeps every pair sum of maddubs inside int16. */
static inline __m256 lanes_i8(__m256i w, __m256i a) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), p16));
}

/* The same function as muse_x86_vd_q8_0_{generic,fma}, eight lanes at once. */
void muse_x86_vd_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q8_0 *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float d = muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(y[ib].d);
        const __m256 q = lanes_i8(_mm256_loadu_si256((const __m256i *)x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), q, acc);
    }
    *s = hsum8_avx(acc);
}

/* The same function as muse_x86_vd_q4_0_{generic,fma}. */
void muse_x86_vd_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_q4_0 *x = vx;
    const struct muse_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float d = muse_fp16_to_fp32(x[ib].d) * muse_fp16_to_fp32(y[ib].d);
        const __m128i b = _mm_loadu_si128((const __m128i *)x[ib].qs);
        const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
        const __m256i w = _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
        const __m256 q = lanes_i8(w, _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), q, acc);
    }
    *s = hsum8_avx(acc);
}

/* The same function as muse_x86_vd_iq2_xxs_{generic,fma}: per sub-block the 32 magnitudes from
 * the grid, the signs applied to the activations, lane l = scale * (4 products of elements
 * 4l..4l+3), summed over the sub-blocks in int32, then one FMA per super-block. */
void muse_x86_vd_iq2_xxs_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const struct muse_block_iq2_xxs *x = vx;
    const struct muse_block_q8_K *y = vy;
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = muse_fp16_to_fp32(x[i].d) * y[i].d;
        const uint8_t *rec = (const uint8_t *)x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const uint32_t A = muse_rd_le32(rec + 8 * g), B = muse_rd_le32(rec + 8 * g + 4);
            const __m256i w = _mm256_set_epi64x((long long)muse_iq2xxs_grid[(A >> 24) & 255], (long long)muse_iq2xxs_grid[(A >> 16) & 255],
                                                (long long)muse_iq2xxs_grid[(A >> 8) & 255], (long long)muse_iq2xxs_grid[A & 255]);
            const uint64_t rep = 0x0101010101010101ULL;
            const __m256i sb = _mm256_set_epi64x((long long)(muse_ksigns_iq2xs[(B >> 21) & 127] * rep), (long long)(muse_ksigns_iq2xs[(B >> 14) & 127] * rep),
                                                 (long long)(muse_ksigns_iq2xs[(B >> 7) & 127] * rep), (long long)(muse_ksigns_iq2xs[B & 127] * rep));
            const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(sb, sel), sel); /* 0xff where the sign bit is set */
            const __m256i q8 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * g)), _mm256_or_si256(neg, one));
            const __m256i p16 = _mm256_maddubs_epi16(w, q8);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)(2 * (B >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = 0.125f * hsum8_avx(acc);
}

/* F16 -> f32 of n values with F16C (exact, as muse_fp16_to_fp32). */
void muse_x86_f16_row_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = muse_fp16_to_fp32(x[i]);
}

void muse_x86_swiglu_avx2(float *y, const float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), avx2_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = muse_x86_silu_fma(g[i]) * u[i];
}

/* muse_rms_sums of 8 G rows (G 1 or 2): columns in blocks of 8, transposed so that each double
 * lane adds its row's squares in element order; the n % 8 tail per row afterwards. */
MUSE_AVX2_INLINE void rms_sums_rows(const float *x, int64_t stride, int64_t n, double *sums, const int G) {
    __m256d acc[2][2] = {{_mm256_setzero_pd(), _mm256_setzero_pd()}, {_mm256_setzero_pd(), _mm256_setzero_pd()}};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int g = 0; g < G; g++) {
            __m256 c[8]; /* after the transpose c[j] lane r = row r's element i + j */
            for (int r = 0; r < 8; r++) c[r] = _mm256_loadu_ps(x + (size_t)(8 * g + r) * (size_t)stride + i);
            avx2_transpose8_ps(c);
            for (int j = 0; j < 8; j++) {
                const __m256 sq = _mm256_mul_ps(c[j], c[j]);
                acc[g][0] = _mm256_add_pd(acc[g][0], _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
                acc[g][1] = _mm256_add_pd(acc[g][1], _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
            }
        }
    for (int g = 0; g < G; g++) {
        _mm256_storeu_pd(sums + 8 * g, acc[g][0]);
        _mm256_storeu_pd(sums + 8 * g + 4, acc[g][1]);
    }
    for (int r = 0; r < 8 * G; r++) {
        const float *v = x + (size_t)r * (size_t)stride;
        double sum = sums[r];
        for (int64_t k = i; k < n; k++) sum += (double)(v[k] * v[k]);
        sums[r] = sum;
    }
}

/* muse_rms_sums for the rows in whole groups of 8; returns how many rows it did. */
int32_t muse_rms_sums_avx2(const float *x, int64_t stride, int32_t n_rows, int64_t n, double *sums) {
    int32_t r = 0;
    for (; r + 16 <= n_rows; r += 16) rms_sums_rows(x + (size_t)r * (size_t)stride, stride, n, sums + r, 2);
    for (; r + 8 <= n_rows; r += 8) rms_sums_rows(x + (size_t)r * (size_t)stride, stride, n, sums + r, 1);
    return r;
}
