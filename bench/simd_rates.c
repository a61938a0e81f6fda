/*
 * simd_rates.c - the throughput of single AVX-512 instructions on this core, in cycles per
 * instruction: 8 independent chains of one instruction (or two, mixed) in a loop, timed by thread
 * CPU time against a chain of dependent adds (1 cycle each). The port model behind the decode
 * profile of docs/perf.md (issue 34). Inline assembly only, so it builds without ISA flags; run
 * it on an AVX-512 VBMI/VNNI CPU only (an illegal instruction otherwise).
 *
 *   build/bench/simd_rates
 */
#include <stdio.h>
#include <time.h>

#define N 20000000L

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
#define X8(op)                                                                                             \
    op " %%zmm8,%%zmm9,%%zmm0\n" op " %%zmm8,%%zmm9,%%zmm1\n" op " %%zmm8,%%zmm9,%%zmm2\n" op         \
       " %%zmm8,%%zmm9,%%zmm3\n" op " %%zmm8,%%zmm9,%%zmm4\n" op " %%zmm8,%%zmm9,%%zmm5\n" op         \
       " %%zmm8,%%zmm9,%%zmm6\n" op " %%zmm8,%%zmm9,%%zmm7\n"
#define RATE(name, ins)                                                                                    \
    static double name(void) {                                                                            \
        double best = 1e30;                                                                               \
        for (int t = 0; t < 3; t++) {                                                                     \
            const double t0 = thread_seconds();                                                           \
            for (long i = 0; i < N; i++) __asm__ volatile(ins ::: CLOBBER);                               \
            const double s = thread_seconds() - t0;                                                       \
            if (s < best) best = s;                                                                       \
        }                                                                                                 \
        return best;                                                                                      \
    }
RATE(r_vpermb, X8("vpermb"))
RATE(r_vpermi2b, X8("vpermi2b"))
RATE(r_vpmultishiftqb, X8("vpmultishiftqb"))
RATE(r_vpermd, X8("vpermd"))
RATE(r_vpshufb, X8("vpshufb"))
RATE(r_vpdpbusd, X8("vpdpbusd"))
RATE(r_vpdpwssd, X8("vpdpwssd"))
RATE(r_vpmaddubsw, X8("vpmaddubsw"))
RATE(r_vpaddd, X8("vpaddd"))
RATE(r_vpermb_vpdpbusd, X8("vpermb") X8("vpdpbusd"))
RATE(r_vpermb_vpaddd, X8("vpermb") X8("vpaddd"))

int main(void) {
    double best = 1e30;
    for (int t = 0; t < 3; t++) {
        unsigned long x = 0;
        const double t0 = thread_seconds();
        for (long i = 0; i < N; i++)
            __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\t"
                             "add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
        const double s = thread_seconds() - t0;
        if (s < best) best = s;
    }
    const double hz = 8.0 * N / best;
    printf("core clock %.2f GHz (dependent adds); cycles per zmm instruction, 8 independent chains:\n", hz * 1e-9);
#define P(f, n, label) printf("  %-26s %.2f\n", label, f() * hz / (N * (double)(n)))
    P(r_vpermb, 8, "vpermb");
    P(r_vpermi2b, 8, "vpermi2b");
    P(r_vpmultishiftqb, 8, "vpmultishiftqb");
    P(r_vpermd, 8, "vpermd");
    P(r_vpshufb, 8, "vpshufb");
    P(r_vpdpbusd, 8, "vpdpbusd");
    P(r_vpdpwssd, 8, "vpdpwssd");
    P(r_vpmaddubsw, 8, "vpmaddubsw");
    P(r_vpaddd, 8, "vpaddd");
    P(r_vpermb_vpdpbusd, 16, "vpermb + vpdpbusd (mixed)");
    P(r_vpermb_vpaddd, 16, "vpermb + vpaddd (mixed)");
    return 0;
}
