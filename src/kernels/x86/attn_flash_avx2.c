/*
 * attn_flash_avx2.c - flash attention (attn_flash.inc) for the AVX2 level: muse_attn_flash_f16_avx2
 * and muse_attn_flash_scratch_avx2. The Makefile compiles *_avx2.c files with the AVX2 flags.
 */
#define MUSE_ISA_NAME(name) name##_avx2
#include "kernels/x86/attn_flash.inc"
