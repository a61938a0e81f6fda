/*
 * gemm_r8_avx2.c - the decode of rows interleaved by 8 (gemm_r8.inc) for the AVX2 level: muse_gemm_r8_<t>_avx2. The Makefile compiles *_avx2.c files
 * with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_r8.inc"
