/*
 * gemm_1bit_avx2.c - the 1-bit kernels (IQ1_S, IQ1_M, TQ1_0, TQ2_0, Q1_0) of gemm_1bit.inc for the
 * AVX2 level: muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_1bit.inc"
