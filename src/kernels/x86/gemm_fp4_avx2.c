/*
 * gemm_fp4_avx2.c - the FP4 kernels (MXFP4, NVFP4) of gemm_fp4.inc for the AVX2 level:
 * muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_fp4.inc"
