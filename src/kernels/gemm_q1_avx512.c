/* gemm_q1_avx512.c - the kernel of gemm_q1_avx2.c for the AVX-512 level: the same source compiled with
 * the AVX-512 flags, its integer dot steps on VNNI (see simd_avx2.h); same bits as the AVX2 one. */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/gemm_q1_avx2.c"
