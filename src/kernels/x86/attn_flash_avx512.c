/*
 * attn_flash_avx512.c - flash attention (attn_flash.inc) for the AVX-512 level:
 * muse_attn_flash_f16_avx512 and muse_attn_flash_scratch_avx512, 16-lane loops with the AVX2
 * build's bits. The Makefile compiles *_avx512.c files with the AVX-512 flags (SIMDe in `make emu512`).
 */
#define MUSE_ISA_NAME(name) name##_avx512
#include "kernels/x86/attn_flash.inc"
