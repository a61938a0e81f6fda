/*
 * gemm_legacy_avx512.c - the legacy-family kernels (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1) of
 * gemm_legacy.inc for the AVX-512 level: muse_gemm_<t>_avx512. The Makefile compiles *_avx512.c
 * files with the AVX-512 flags; the integer dot steps then run on VNNI, with the same bits as the AVX2
 * build (simd_avx2.h).
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/gemm_legacy.inc"
