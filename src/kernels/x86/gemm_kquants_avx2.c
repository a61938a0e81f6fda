/*
 * gemm_kquants_avx2.c - the K-quant kernels (Q2_K .. Q6_K, IQ4_XS) of gemm_kquants.inc for the
 * AVX2 level: muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files
 * with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_kquants.inc"
