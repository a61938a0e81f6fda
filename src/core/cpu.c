#include "core/cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MUSE_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#endif

static struct muse_cpu_features features;
static int features_ready;

#ifdef MUSE_X86
static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

/*
 * Whether this process may use the AMX tile data (XTILEDATA, state component 18). Linux enables
 * it per process on request (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16+): without the
 * permission the first tile instruction dies with SIGILL, so a refusal (an older kernel, a
 * seccomp filter) means no AMX level, never a crash. Asked once, by detection.
 */
static bool amx_permitted(void) {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return false;
    unsigned long perm = 0;
    return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) == 0 && ((perm >> XFEATURE_XTILEDATA) & 1);
#else
    return false;
#endif
}

/* Count distinct (physical id, core id) pairs in /proc/cpuinfo; 0 when unknown. */
static int count_physical_cores(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    int phys = 0, n = 0;
    int seen[1024][2];
    while (fgets(line, sizeof(line), f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= (seen[i][0] == phys && seen[i][1] == v);
            if (!dup && n < 1024) { seen[n][0] = phys; seen[n][1] = v; n++; }
        }
    }
    fclose(f);
    return n;
}

/* Whether the comma-separated list `env` holds the word w. */
static bool env_has(const char *env, const char *w) {
    const size_t n = strlen(w);
    for (const char *p = env; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, w, n) == 0) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

static void detect(void) {
    struct muse_cpu_features f;
    memset(&f, 0, sizeof(f));
#ifdef MUSE_X86
    unsigned a, b, c, d;
    uint64_t xcr0 = 0; /* the OS's enabled state components (0 without OSXSAVE) */
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = (c >> 27) & 1;
        f.sse42 = (c >> 20) & 1;
        if (osxsave) {
            xcr0 = read_xcr0();
            f.os_avx = (xcr0 & 0x6) == 0x6;
            f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
        }
        f.avx = f.os_avx && ((c >> 28) & 1);
        f.fma = f.avx && ((c >> 12) & 1);
        f.f16c = f.avx && ((c >> 29) & 1);
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f.avx2 = f.avx && ((b >> 5) & 1);
        f.avx512f = f.os_avx512 && ((b >> 16) & 1);
        f.avx512dq = f.avx512f && ((b >> 17) & 1);
        f.avx512bw = f.avx512f && ((b >> 30) & 1);
        f.avx512vl = f.avx512f && ((b >> 31) & 1);
        f.avx512vnni = f.avx512f && ((c >> 11) & 1);
        f.avx512vbmi = f.avx512f && ((c >> 1) & 1);
        /* AMX-TILE (EDX bit 24), AMX-INT8 (bit 25); the OS saves the tile config and data
         * (XCR0 bits 17, 18); the process holds the permission for the data */
        const bool amx_cpu = ((d >> 24) & 1) && ((d >> 25) & 1);
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
        if (amx_cpu && f.os_avx512 && (xcr0 & 0x60000) == 0x60000 && amx_permitted())
            f.amx_tile = f.amx_int8 = true;
    }
#endif
#ifdef MUSE_CPU_EMULATE_AVX512
    /* the `make emu512` test build: its AVX-512 kernels run on SIMDe's emulation of the
     * AVX-512 intrinsics, so an AVX2 machine counts as an AVX-512 VNNI one */
    if (f.avx2 && f.fma && f.f16c)
        f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512vbmi = true;
#endif
#ifdef MUSE_CPU_EMULATE_AMX
    /* the same build's AMX level: its tile instructions are emulated in C (kernels/x86/amx_tiles.h) */
    if (f.avx512f && f.avx512vnni) f.amx_tile = f.amx_int8 = true;
#endif
    const char *env = getenv("MUSE_CPU");
    if (env && env_has(env, "novbmi")) f.avx512vbmi = false;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    f.n_logical = n > 0 ? (int)n : 1;
    int p = count_physical_cores();
    f.n_physical = (p > 0 && p <= f.n_logical) ? p : f.n_logical;
    features = f;
}

const struct muse_cpu_features *muse_cpu_features(void) {
    if (!__atomic_load_n(&features_ready, __ATOMIC_ACQUIRE)) {
        detect();  /* idempotent: racing first callers compute the same values */
        __atomic_store_n(&features_ready, 1, __ATOMIC_RELEASE);
    }
    return &features;
}

enum muse_cpu_level muse_cpu_level_max(void) {
    const struct muse_cpu_features *f = muse_cpu_features();
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni && f->fma && f->f16c)
        return f->amx_tile && f->amx_int8 ? MUSE_CPU_LEVEL_AMX : MUSE_CPU_LEVEL_AVX512;
    if (f->avx2 && f->fma && f->f16c) return MUSE_CPU_LEVEL_AVX2;
    return MUSE_CPU_LEVEL_SCALAR;
}

enum muse_cpu_level muse_cpu_level_active(void) {
    enum muse_cpu_level max = muse_cpu_level_max();
    const char *env = getenv("MUSE_CPU");
    if (env) {
        for (int l = 0; l < MUSE_CPU_LEVEL_COUNT; l++)
            if (env_has(env, muse_cpu_level_name((enum muse_cpu_level)l)))
                return (enum muse_cpu_level)l < max ? (enum muse_cpu_level)l : max;
    }
    /* The AMX level only when asked: on the first AMX CPU it met (an Intel Xeon VM, 2026-12-05)
     * its tile GEMM was slower than the AVX-512 level's for every type timed (docs/perf.md "AMX"). */
    return max == MUSE_CPU_LEVEL_AMX ? MUSE_CPU_LEVEL_AVX512 : max;
}

bool muse_cpu_exact_active(void) {
    const char *env = getenv("MUSE_CPU");
    return env && env_has(env, "exact");
}

const char *muse_cpu_level_name(enum muse_cpu_level level) {
    switch (level) {
    case MUSE_CPU_LEVEL_SCALAR: return "scalar";
    case MUSE_CPU_LEVEL_AVX2: return "avx2";
    case MUSE_CPU_LEVEL_AVX512: return "avx512";
    case MUSE_CPU_LEVEL_AMX: return "amx";
    default: return "unknown";
    }
}
