/*
 * gemm_fp4_avx512.c - the FP4 kernels (MXFP4, NVFP4) of gemm_fp4.inc for the AVX-512 level:
 * muse_gemm_<t>_avx512. The Makefile compiles *_avx512.c files with the AVX-512 flags; its integer
 * dot steps run on VNNI, with the same bits as the AVX2 build (simd_avx2.h).
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/gemm_fp4.inc"
