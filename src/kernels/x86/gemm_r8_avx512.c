/*
 * gemm_r8_avx512.c - the decode of rows interleaved by 8 (gemm_r8.inc) for the AVX-512 level: muse_gemm_r8_<t>_avx512. The Makefile compiles *_avx512.c
 * files with the AVX-512 flags; the integer dots then run on VNNI, with the same bits as the AVX2 build.
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/gemm_r8.inc"
