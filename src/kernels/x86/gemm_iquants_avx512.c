/*
 * gemm_iquants_avx512.c - the I-quant grid kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) of
 * gemm_iquants.inc for the AVX-512 level: muse_gemm_<t>_avx512. The Makefile compiles *_avx512.c
 * files with the AVX-512 flags; the integer dot steps then run on VNNI, with the same bits as the AVX2
 * build (simd_avx2.h).
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/gemm_iquants.inc"
