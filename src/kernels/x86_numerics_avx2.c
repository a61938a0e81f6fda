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

#include <immintrin.h>

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
