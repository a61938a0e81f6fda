/*
 * cpu.h - CPU feature detection (CPUID + the OS XSAVE check) and the SIMD level choice.
 * Detection runs once; the result is an immutable process-wide table (STYLE rule 20).
 */
#pragma once

#include <stdbool.h>

struct muse_cpu_features {
    bool sse42, avx, fma, f16c, avx2;                     /* usable: CPU and OS both support */
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool avx512vbmi; /* byte permutes (vpermb, vpermi2b, vpmultishiftqb): Ice Lake, Zen 4 and later;
                        the AVX-512 level's grid lookups use them where present (MUSE_CPU=novbmi:
                        as if absent, to test the paths without) */
    bool amx_tile, amx_int8; /* usable: CPU, OS state (XCR0 bits 17, 18) and the process's
                                permission for the tile data (Linux arch_prctl, asked for once) */
    bool os_avx;     /* OS saves YMM state (XCR0 bits 1,2) */
    bool os_avx512;  /* OS saves opmask/ZMM state (XCR0 bits 5,6,7) */
    int n_logical;   /* online logical CPUs */
    int n_physical;  /* physical cores (best effort; = n_logical when unknown) */
};

/* SIMD levels, lowest first. A kernel table exists per level. */
enum muse_cpu_level {
    MUSE_CPU_LEVEL_SCALAR = 0,  /* plain C (the _ref kernels) */
    MUSE_CPU_LEVEL_AVX2   = 1,  /* AVX2 + FMA + F16C */
    MUSE_CPU_LEVEL_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Zen 4 and later) */
    MUSE_CPU_LEVEL_AMX    = 3,  /* the AVX-512 level + AMX-TILE/INT8 (Sapphire Rapids and later) */
    MUSE_CPU_LEVEL_COUNT
};

/* The detected features (computed on first call; thread-safe after that). */
const struct muse_cpu_features *muse_cpu_features(void);

/* Highest level this machine supports. */
enum muse_cpu_level muse_cpu_level_max(void);

/*
 * The level to use: the environment variable MUSE_CPU=scalar|avx2|avx512|amx forces a level
 * (clamped to what the machine supports; a comma-separated list may add "exact"), otherwise
 * the highest supported one below AMX (the AMX level is taken only when MUSE_CPU=amx asks for it:
 * slower than the AVX-512 level where it was timed).
 */
enum muse_cpu_level muse_cpu_level_active(void);

/*
 * Whether the exact mode is asked for: MUSE_CPU holds the word "exact" (MUSE_CPU=exact,
 * MUSE_CPU=avx2,exact). The kernels are then only those bit-identical to the reference backend
 * (no tile GEMM, no flash attention), for A/B diagnosis of a divergence.
 */
bool muse_cpu_exact_active(void);

/* "scalar", "avx2", "avx512", "amx". */
const char *muse_cpu_level_name(enum muse_cpu_level level);
