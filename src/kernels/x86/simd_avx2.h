/*
 * simd_avx2.h - small helpers on 256-bit registers shared by the x86 kernel files. Include only
 * from translation units compiled with the AVX2 flags (files named *_avx2.c) or the AVX-512 ones
 * (*_avx512.c): the Makefile gives those names their -m flags.
 *
 * One kernel body serves two levels. The matrix kernels of a family live in an ISA-neutral
 * gemm_<family>.inc that names its functions through MUSE_ISA_NAME(muse_gemm_x); two thin files
 * include it: gemm_<family>_avx2.c with MUSE_ISA_NAME(name) = name##_avx2, compiled with the AVX2
 * flags, and gemm_<family>_avx512.c with name##_avx512, compiled with the AVX-512 flags. In the
 * latter the integer dot steps below use AVX-512 VNNI (vpdpbusd / vpdpwssd on 256-bit registers,
 * EVEX-encoded, 32 registers), which give the very same int32 lanes as maddubs + madd (+ add)
 * wherever maddubs does not saturate (every kernel states why it does not), so both levels give
 * the same bits. MUSE_EMULATE_AVX512 (the `make emu512` test build on an AVX2 machine) takes the
 * AVX-512 intrinsics from SIMDe instead of the CPU, so the AVX-512 kernels are tested where no
 * AVX-512 CPU is at hand.
 */
#pragma once

#if defined(MUSE_EMULATE_AVX512)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#endif
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd_avx2.h needs -mavx2 -mfma -mf16c (only *_avx2.c / *_avx512.c files get them)"
#endif

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(MUSE_EMULATE_AVX512)
#define MUSE_AVX2_VNNI 1
#else
#define MUSE_AVX2_VNNI 0
#endif

/* The AVX-512 build (or its SIMDe emulation): a kernel may add a 512-bit path with mask registers
 * where the AVX2 build has none (the decode paths of gemm_1bit.inc, gemm_fp4.inc and
 * gemm_legacy.inc), with the same bits as the AVX2 body. */
#if defined(__AVX512F__) || defined(MUSE_EMULATE_AVX512)
#define MUSE_AVX2_W512 1
#else
#define MUSE_AVX2_W512 0
#endif

/* How far ahead a decode kernel that walks its weight rows one after another (one stream per
 * thread) prefetches that stream. The hardware prefetcher alone left such a kernel stalled on
 * its loads: MXFP4 tg64 on the 8-layer n_embd 2048 file, 2-core Xeon (Emerald Rapids), 2 threads:
 * no prefetch 37.5-40.3 t/s, 1 KiB ahead 49-51, 2 KiB 55-56, 4 KiB 53-59, 8 KiB 49-52. */
#define MUSE_AVX2_DECODE_PF 4096

#define MUSE_AVX2_INLINE static inline __attribute__((always_inline))

#if MUSE_AVX2_W512
/* The upper 8 floats of a zmm (SIMDe of Debian 12 has no _mm512_extractf32x8_ps). */
MUSE_AVX2_INLINE __m256 avx512_hi8(__m512 z) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)); }
/* Two 256-bit halves as one zmm (lanes 0-7 from lo, 8-15 from hi). */
MUSE_AVX2_INLINE __m512 avx512_join_ps(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
MUSE_AVX2_INLINE __m512i avx512_join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
/* int32 -> float on 16 lanes (SIMDe has no _mm512_cvtepi32_ps: two 8-lane conversions there). */
MUSE_AVX2_INLINE __m512 avx512_i2f(__m512i v) {
#if defined(MUSE_EMULATE_AVX512)
    return avx512_join_ps(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v)), _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)));
#else
    return _mm512_cvtepi32_ps(v);
#endif
}

/* vpmaddwd (SIMDe's _mm512_madd_epi16 is declared with the masked form's arguments: there the
 * VNNI form from zero, the same lanes) */
MUSE_AVX2_INLINE __m512i avx512_madd(__m512i a, __m512i b) {
#if defined(MUSE_EMULATE_AVX512)
    return _mm512_dpwssd_epi32(_mm512_setzero_si512(), a, b);
#else
    return _mm512_madd_epi16(a, b);
#endif
}

/* The first n < 64 bytes at p, zero-extended to 64 (a masked load: no access past p + n). */
MUSE_AVX2_INLINE __m512i avx512_load_bytes(const void *p, int n) {
#if defined(MUSE_EMULATE_AVX512)
    _Alignas(64) uint8_t b[64] = {0};
    memcpy(b, p, (size_t)n);
    return _mm512_load_si512(b);
#else
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << n) - 1), p);
#endif
}
/* 32 bytes zero-extended to 32 words */
MUSE_AVX2_INLINE __m512i avx512_u8_to_u16(__m256i v) {
#if defined(MUSE_EMULATE_AVX512)
    const __m256i z = _mm256_setzero_si256();
    const __m256i lo = _mm256_unpacklo_epi8(v, z), hi = _mm256_unpackhi_epi8(v, z); /* per 128-bit half */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(lo, hi, 0x20)),
                              _mm256_permute2x128_si256(lo, hi, 0x31), 1);
#else
    return _mm512_cvtepu8_epi16(v);
#endif
}

/* 8 qwords / 16 dwords of a table at the indices of ix (vpgatherqq / vpgatherdd; SIMDe has no
 * AVX-512 gathers: scalar loads there). */
MUSE_AVX2_INLINE __m512i avx512_gather_q(__m512i ix, const uint64_t *table) {
#if defined(MUSE_EMULATE_AVX512)
    int64_t i[8], v[8];
    _mm512_storeu_si512(i, ix);
    for (int k = 0; k < 8; k++) v[k] = (int64_t)table[i[k]];
    return _mm512_loadu_si512(v);
#else
    return _mm512_i64gather_epi64(ix, (const void *)table, 8);
#endif
}
MUSE_AVX2_INLINE __m512i avx512_gather_d(__m512i ix, const uint32_t *table) {
#if defined(MUSE_EMULATE_AVX512)
    int32_t i[16], v[16];
    _mm512_storeu_si512(i, ix);
    for (int k = 0; k < 16; k++) v[k] = (int32_t)table[i[k]];
    return _mm512_loadu_si512(v);
#else
    return _mm512_i32gather_epi32(ix, (const void *)table, 4);
#endif
}

/* The high 16 bits of the unsigned 16-bit products (vpmulhuw; SIMDe lacks the 512-bit form) */
MUSE_AVX2_INLINE __m512i avx512_mulhi_epu16(__m512i a, __m512i b) {
#if defined(MUSE_EMULATE_AVX512)
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_mulhi_epu16(_mm512_castsi512_si256(a), _mm512_castsi512_si256(b))),
                              _mm256_mulhi_epu16(_mm512_extracti64x4_epi64(a, 1), _mm512_extracti64x4_epi64(b, 1)), 1);
#else
    return _mm512_mulhi_epu16(a, b);
#endif
}
/* Zero-extensions of the low 16 / 8 bytes of v to 16 dwords / 8 qwords */
MUSE_AVX2_INLINE __m512i avx512_u8_to_u32(__m128i v) {
#if defined(MUSE_EMULATE_AVX512)
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu8_epi32(v)), _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)), 1);
#else
    return _mm512_cvtepu8_epi32(v);
#endif
}
MUSE_AVX2_INLINE __m512i avx512_u8_to_u64(__m128i v) {
#if defined(MUSE_EMULATE_AVX512)
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu8_epi64(v)), _mm256_cvtepu8_epi64(_mm_srli_si128(v, 4)), 1);
#else
    return _mm512_cvtepu8_epi64(v);
#endif
}

/*
 * The 512-bit decode paths of the grid I-quants (gemm_1bit.inc IQ1_S / IQ1_M, gemm_iquants.inc
 * IQ2_XXS .. IQ3_S), of Q2_K / Q3_K (gemm_kquants.inc) and TQ1_0 (gemm_1bit.inc) work on pairs of
 * 32-element groups (64 elements, a zmm of activation codes) and keep per pair 16 int32 lanes:
 * lanes 0-7 the even group's, 8-15 the odd group's, each lane 4 elements; per super-block the
 * exact sum of both halves is the AVX2 kernels' 8 lanes.
 */
/* 16-bit word i of a zmm (i < 32) set to the constant f(i) */
#define AVX512_WORDS(f)                                                                                      \
    _mm512_set_epi16(f(31), f(30), f(29), f(28), f(27), f(26), f(25), f(24), f(23), f(22), f(21), f(20), f(19), \
                     f(18), f(17), f(16), f(15), f(14), f(13), f(12), f(11), f(10), f(9), f(8), f(7), f(6), f(5),  \
                     f(4), f(3), f(2), f(1), f(0))
/* From 32 16-bit grid indices (one per 8 elements of a super-block), the 8 of pair p as qword
 * indices (vpermw; the mask zeroes the upper 3 words of each qword). */
MUSE_AVX2_INLINE __m512i avx512_pair_ix(__m512i words, const int p) {
    const __m512i ix = _mm512_set_epi64(8 * p + 7, 8 * p + 6, 8 * p + 5, 8 * p + 4, 8 * p + 3, 8 * p + 2, 8 * p + 1, 8 * p);
    return _mm512_maskz_permutexvar_epi16(0x11111111u, ix, words);
}
/* dword lane l of pair p <- dword 4p + l / 4 (a scale per 16 elements) or 2p + l / 8 (per 32) of v */
MUSE_AVX2_INLINE __m512i avx512_pair_scales16(__m512i v, const int p) {
    const int b = 4 * p;
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(b, b, b, b, b + 1, b + 1, b + 1, b + 1, b + 2, b + 2, b + 2, b + 2,
                                                      b + 3, b + 3, b + 3, b + 3), v);
}
MUSE_AVX2_INLINE __m512i avx512_pair_scales32(__m512i v, const int p) {
    const int b = 2 * p;
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(b, b, b, b, b, b, b, b, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1,
                                                      b + 1, b + 1), v);
}
/* Per activation row of nb Q8_K blocks: S, the sum of each 4 codes (one int32 per 4 elements,
 * in element order), into s (unless NULL) and -(S << shift) into ns (64-byte aligned buffers). */
MUSE_AVX2_INLINE void avx512_q8k_sums4(const struct muse_block_q8_K *a, int64_t nb, int32_t *s, int32_t *ns, int shift) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++)
        for (int h = 0; h < 4; h++) {
            const __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a[ib].qs + 64 * h));
            if (s) _mm512_store_si512(s + 64 * ib + 16 * h, v);
            _mm512_store_si512(ns + 64 * ib + 16 * h, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(v, (unsigned)shift)));
        }
}
/* Two 16-byte blocks of nibble codes y = [A | B] as 64 codes [A low nibbles | A high | B low |
 * B high] (elements 0-31 of each block in order) */
MUSE_AVX2_INLINE __m512i avx512_nibbles2(__m256i y) {
    const __m256i m4 = _mm256_set1_epi8(15);
    return _mm512_permutex2var_epi64(_mm512_castsi256_si512(_mm256_and_si256(y, m4)), _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11),
                                     _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(y, 4), m4)));
}
/* The exact sum of a pair accumulator's halves as 8 floats */
MUSE_AVX2_INLINE __m256 avx512_pair_lanes_f(__m512i acc) {
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1)));
}
/* dword s (s < 2n for n bytes at p, n <= 8) = 2 x nibble s + 1, nibble s = byte s / 2 >> 4 (s % 2) */
MUSE_AVX2_INLINE __m512i avx512_nibble_scales(const uint8_t *p, int n) {
    uint64_t v = 0;
    memcpy(&v, p, (size_t)n);
    const __m128i dup = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)v), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i x = _mm512_srlv_epi32(_mm512_slli_epi32(avx512_u8_to_u32(dup), 1),
                                        _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
    return _mm512_ternarylogic_epi32(x, _mm512_set1_epi32(30), _mm512_set1_epi32(1), 0xEA); /* (a & b) | c */
}

/* The 512-bit decode paths of 32-element blocks against Q8_0 activations (gemm_fp4.inc MXFP4,
 * gemm_legacy.inc Q5_0 / IQ4_NL): the activation row laid out per group of 4 blocks as
 * [elements 0-15 of blocks 0, 1, 2, 3 | elements 16-31 of blocks 0, 1, 2, 3] (the low and high
 * nibbles of the 4 weight blocks' code bytes), and its scales as floats. nb % 4 == 0. */
MUSE_AVX2_INLINE void avx512_act_halves4(const void *act, int64_t nb, int8_t *at, float *da) {
    const struct muse_block_q8_0 *a = act;
    for (int64_t j = 0; j < nb; j++) {
        int8_t *g = at + 128 * (j / 4) + 16 * (j % 4);
        memcpy(g, a[j].qs, 16);
        memcpy(g + 64, a[j].qs + 16, 16);
        da[j] = _cvtsh_ss(a[j].d);
    }
}
/* c = -off x the sum of each int32 lane's 4 activation codes, for the n codes at at (n % 64 == 0):
 * the start of a lane whose weight codes enter vpdpbusd offset by +off (unsigned). */
MUSE_AVX2_INLINE void avx512_lane_starts(const int8_t *at, int64_t n, uint8_t off, int32_t *c) {
    for (int64_t k = 0; k < n / 64; k++) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)off), _mm512_load_si512(at + 64 * k));
        _mm512_store_si512(c + 16 * k, _mm512_sub_epi32(_mm512_setzero_si512(), s));
    }
}
/* The code bytes of 4 consecutive blocks (block_bytes apart, codes at qs) in one zmm. */
MUSE_AVX2_INLINE __m512i avx512_codes4(const uint8_t *qs, size_t block_bytes) {
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)qs));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + block_bytes)), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + 2 * block_bytes)), 2);
    return _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + 3 * block_bytes)), 3);
}
/* From the int32 lanes of the low (il) and high (ih) nibbles of 4 blocks, as floats: block 0's 8
 * lanes (elements 4l..4l+3 in order) in the low half of *v01, block 1's in its high half; blocks
 * 2, 3 in *v23. */
MUSE_AVX2_INLINE void avx512_blocks4_lanes(__m512i il, __m512i ih, __m512 *v01, __m512 *v23) {
    const __m512 fl = avx512_i2f(il), fh = avx512_i2f(ih);
    *v01 = _mm512_permutex2var_ps(fl, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23), fh);
    *v23 = _mm512_permutex2var_ps(fl, _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31), fh);
}
#endif

/* The 8 sub-block sums of a Q8_K activation block (bsums[2j] + bsums[2j + 1], int16): the K-quant
 * mins' partner (gemm_kquants.inc, gemm_r8.inc). */
MUSE_AVX2_INLINE __m128i q8k_pair_sums(const struct muse_block_q8_K *a) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)a->bsums),
                          _mm_loadu_si128((const __m128i *)(const void *)(a->bsums + 8)));
}

/* Decode: prefetch the `bytes` bytes MUSE_AVX2_DECODE_PF ahead of p (a weight row about to be
 * read; the next rows of the stream come that far behind it). */
MUSE_AVX2_INLINE void avx2_prefetch_ahead(const char *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + MUSE_AVX2_DECODE_PF + o, _MM_HINT_T0);
}

/* Fully unroll a short loop over activation rows (the trip count is a constant after inlining):
 * keeps per-row accumulators in registers instead of a stack array. */
#if defined(__clang__)
#define MUSE_UNROLL _Pragma("unroll")
#else
#define MUSE_UNROLL _Pragma("GCC unroll 8")
#endif

/* fp16 bits -> f32 (exact). */
/* ggml_v_expf (AVX2 + FMA): muse_x86_expf on 8 lanes, the same operations lane by lane (the same
 * bits). Used by the softmax of attention (text and vision) and SiLU. */
MUSE_AVX2_INLINE __m256 avx2_expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 c = _mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 normal = _mm256_fmadd_ps(j, k, k);
    if (_mm256_movemask_ps(c) == 0) return normal;
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 big = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 special = _mm256_blendv_ps(_mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), _mm256_mul_ps(s1, s1), big);
    return _mm256_blendv_ps(normal, special, c);
}

MUSE_AVX2_INLINE float avx2_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Sum of the 8 lanes. */
MUSE_AVX2_INLINE float avx2_hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sum of the 8 int32 lanes. */
MUSE_AVX2_INLINE int32_t avx2_hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Pairwise sums of 16-bit lanes into 8 int32 lanes. */
MUSE_AVX2_INLINE __m256i avx2_sum_i16_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

/* acc + int32 lanes of sum over groups of 4 of u[i]*s[i], u unsigned and s signed int8: maddubs +
 * madd + add, or one vpdpbusd. Equal as long as no pair u[2j]*s[2j] + u[2j+1]*s[2j+1] leaves
 * int16 (maddubs would saturate it; the callers keep |u*s| pairs < 32768). */
MUSE_AVX2_INLINE __m256i avx2_dot_u8i8_acc(__m256i acc, __m256i u, __m256i s) {
#if MUSE_AVX2_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, avx2_sum_i16_pairs(_mm256_maddubs_epi16(u, s)));
#endif
}

/* The same without an accumulator. */
MUSE_AVX2_INLINE __m256i avx2_dot_u8i8(__m256i u, __m256i s) {
#if MUSE_AVX2_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return avx2_sum_i16_pairs(_mm256_maddubs_epi16(u, s));
#endif
}

/* acc + madd(p, s) (int16 pairs times int16 scales, summed into int32 lanes): one vpdpwssd. */
MUSE_AVX2_INLINE __m256i avx2_madd_acc(__m256i acc, __m256i p, __m256i s) {
#if MUSE_AVX2_VNNI
    return _mm256_dpwssd_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* int32 lanes of sum over groups of 4 of x[i]*y[i], x and y signed int8 (x != -128 needed
 * only when y is -128; activations never hold -128). */
MUSE_AVX2_INLINE __m256i avx2_dot_i8(__m256i x, __m256i y) {
    return avx2_dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 32 unsigned nibbles from 16 bytes: low nibbles in bytes 0-15, high nibbles in bytes 16-31. */
MUSE_AVX2_INLINE __m256i avx2_nibbles_16(const uint8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* Byte j = 0xff where bit j of the 32-bit little-endian word at p is set (bit j % 8 of byte
 * j / 8), else 0. */
MUSE_AVX2_INLINE __m256i avx2_bit_mask_32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                              _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

/* The 32 five-bit codes of a Q5_0/Q5_1 block: avx2_nibbles_16(qs) with bit j of the 32-bit
 * little-endian qh added as 16 to element j. */
MUSE_AVX2_INLINE __m256i avx2_q5_codes(const uint8_t *qs, const uint8_t *qh) {
    return _mm256_or_si256(avx2_nibbles_16(qs), _mm256_and_si256(avx2_bit_mask_32(qh), _mm256_set1_epi8(16)));
}

MUSE_AVX2_INLINE __m256i avx2_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* x[k] becomes dword k of each of x[0..7] (an 8 x 8 transpose of 32-bit units: the tile packing's
 * codes and scales, the float tiles' and the rms sums' columns) */
MUSE_AVX2_INLINE void avx2_transpose8x32(__m256i x[8]) {
    __m256i t[8], u[8];
    MUSE_UNROLL
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(x[2 * i], x[2 * i + 1]);
    }
    MUSE_UNROLL
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    MUSE_UNROLL
    for (int k = 0; k < 4; k++) {
        x[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
        x[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
    }
}

/* The same transpose of 8 x 8 floats (a permutation: the same bits) */
MUSE_AVX2_INLINE void avx2_transpose8_ps(__m256 x[8]) {
    __m256i y[8];
    MUSE_UNROLL
    for (int i = 0; i < 8; i++) y[i] = _mm256_castps_si256(x[i]);
    avx2_transpose8x32(y);
    MUSE_UNROLL
    for (int i = 0; i < 8; i++) x[i] = _mm256_castsi256_ps(y[i]);
}

/*
 * Walk n_act activation rows in groups of at most NY_MAX (a constant, 1..8), calling APPLY(X, NY)
 * (MUSE_AVX2_ROW_GROUPS: CALL(NY)) with a literal group size so that each size gets its own unrolled kernel. Expects `act`,
 * `act_stride`, `n_act`, `out` and `out_stride` in scope and gives the call the group's first
 * activation row `a` and output column `o`. Labels above NY_MAX are unreachable; their
 * arguments are clamped so that no kernel is instantiated past NY_MAX.
 */
#define MUSE_AVX2_NY(k, NY_MAX) ((k) < (NY_MAX) ? (k) : (NY_MAX))
#define MUSE_AVX2_ROW_GROUPS_WITH(NY_MAX, APPLY, X)                                                \
    for (int r0 = 0; r0 < n_act; r0 += (NY_MAX)) {                                                 \
        const char *a = (const char *)act + (size_t)r0 * act_stride;                               \
        float *o = out + (int64_t)r0 * out_stride;                                                 \
        switch (n_act - r0 < (NY_MAX) ? n_act - r0 : (NY_MAX)) {                                   \
        case 1: APPLY(X, 1); break;                                                                \
        case 2: APPLY(X, MUSE_AVX2_NY(2, NY_MAX)); break;                                          \
        case 3: APPLY(X, MUSE_AVX2_NY(3, NY_MAX)); break;                                          \
        case 4: APPLY(X, MUSE_AVX2_NY(4, NY_MAX)); break;                                          \
        case 5: APPLY(X, MUSE_AVX2_NY(5, NY_MAX)); break;                                          \
        case 6: APPLY(X, MUSE_AVX2_NY(6, NY_MAX)); break;                                          \
        case 7: APPLY(X, MUSE_AVX2_NY(7, NY_MAX)); break;                                          \
        default: APPLY(X, NY_MAX); break;                                                          \
        }                                                                                          \
    }
/* The same with CALL(NY) for each group. */
#define MUSE_AVX2_CALL_NY(CALL, NY) CALL(NY)
#define MUSE_AVX2_ROW_GROUPS(NY_MAX, CALL) MUSE_AVX2_ROW_GROUPS_WITH(NY_MAX, MUSE_AVX2_CALL_NY, CALL)

/*
 * Define MUSE_ISA_NAME(muse_gemm_<T>) (muse_gemm_fn: muse_gemm_<T>_avx2 / _avx512) over a family's
 *     T_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act,
 *            size_t act_stride, const int ny, float *out, int64_t out_stride)
 * (n_rows weight rows of nb blocks of QK elements against ny activation rows): the activation
 * rows in MUSE_AVX2_ROW_GROUPS of at most NY_MAX. Declines rows that are not whole blocks.
 * Each use carries a note naming the two symbols it defines, for grep.
 */
#define MUSE_AVX2_GEMM_OF_ROWS(T, QK, NY_MAX) MUSE_AVX2_GEMM_OF_ROWS_DECODE(T, QK, NY_MAX, MUSE_AVX2_NO_DECODE)
/* The same with a decode path for one activation row: DECODE(nb, w, w_stride, n_rows, act, out)
 * (a bool function or macro) runs first when n_act == 1, and the row groups only when it
 * declines. */
#define MUSE_AVX2_GEMM_OF_ROWS_DECODE(T, QK, NY_MAX, DECODE)                                                \
    bool MUSE_ISA_NAME(muse_gemm_##T)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *act,    \
                              size_t act_stride, int n_act, float *out, int64_t out_stride) {               \
        if (n % (QK) != 0) return false;                                                                    \
        const int64_t nb = n / (QK);                                                                        \
        if (n_act == 1 && DECODE(nb, (const char *)w, w_stride, n_rows, (const char *)act, out)) return true; \
        MUSE_AVX2_ROW_GROUPS_WITH(NY_MAX, MUSE_AVX2_ROWS_CALL, T##_rows)                                     \
        return true;                                                                                        \
    }
#define MUSE_AVX2_NO_DECODE(nb, w, w_stride, n_rows, act, out) false
#define MUSE_AVX2_ROWS_CALL(rows, NY) rows(nb, w, w_stride, n_rows, a, act_stride, NY, o, out_stride)

/*
 * The same for a family whose kernel
 *     T_row(int64_t nb, const <block> *w, const char *act, size_t act_stride, const int ny,
 *           float *out, int64_t out_stride)
 * computes one weight row: T_rows walks the weight rows one after another (at decode each row's
 * bytes MUSE_AVX2_DECODE_PF ahead prefetched first).
 */
#define MUSE_AVX2_ROWWISE_GEMM(T, QK, NY_MAX) MUSE_AVX2_ROWWISE_GEMM_DECODE(T, QK, NY_MAX, MUSE_AVX2_NO_DECODE)
#define MUSE_AVX2_ROWWISE_GEMM_DECODE(T, QK, NY_MAX, DECODE)                                                \
    MUSE_AVX2_INLINE void T##_rows(int64_t nb, const char *w, size_t w_stride, int64_t n_rows, const char *act, \
                                   size_t act_stride, const int ny, float *out, int64_t out_stride) {        \
        for (int64_t i = 0; i < n_rows; i++) {                                                              \
            if (ny == 1) avx2_prefetch_ahead(w + i * w_stride, w_stride);                                   \
            T##_row(nb, (const void *)(w + i * w_stride), act, act_stride, ny, out + i, out_stride);        \
        }                                                                                                   \
    }                                                                                                       \
    MUSE_AVX2_GEMM_OF_ROWS_DECODE(T, QK, NY_MAX, DECODE)
