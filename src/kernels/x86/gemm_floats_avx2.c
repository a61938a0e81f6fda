/*
 * gemm_floats_avx2.c - the float kernels (F32, F16, BF16) of gemm_floats.inc for the AVX2 level:
 * muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_floats.inc"
