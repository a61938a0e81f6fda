/*
 * gemm_legacy_avx2.c - the legacy-family kernels (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1) of
 * gemm_legacy.inc for the AVX2 level: muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files
 * with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_legacy.inc"
