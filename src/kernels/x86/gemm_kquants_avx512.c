/*
 * gemm_kquants_avx512.c - the K-quant kernels (Q2_K .. Q6_K, IQ4_XS) of gemm_kquants.inc for the
 * AVX-512 level: muse_gemm_<t>_avx512. The Makefile compiles *_avx512.c files with the AVX-512 flags; the integer dot steps then run on VNNI, with the same bits
 * as the AVX2 build (simd_avx2.h).
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/gemm_kquants.inc"
