/*
 * gemm_iquants_avx2.c - the I-quant grid kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) of
 * gemm_iquants.inc for the AVX2 level: muse_gemm_<t>_avx2. The Makefile compiles *_avx2.c files
 * with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/gemm_iquants.inc"
