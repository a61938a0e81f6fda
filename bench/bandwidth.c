/* bandwidth.c - memory-read bandwidth probe (all threads): the roofline denominator for decode.
 *   build/bench/bandwidth [-t THREADS] [-s MIB] [-r REPS]
 * Prints the best read bandwidth over REPS passes for 1 thread and for THREADS threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/membw.h"
#include "core/threadpool.h"

int main(int argc, char **argv) {
    int n_threads = muse_cpu_features()->n_physical, mib = 1024, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) mib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-t THREADS] [-s MIB] [-r REPS]\n", argv[0]);
            return 2;
        }
    }
    if (n_threads < 1 || mib < 1 || reps < 1) {
        fprintf(stderr, "bandwidth: bad arguments\n");
        return 2;
    }
    size_t size = (size_t)mib << 20;
    unsigned char *buf = malloc(size);
    if (!buf) {
        fprintf(stderr, "bandwidth: cannot allocate %d MiB\n", mib);
        return 1;
    }
    memset(buf, 1, size);  /* fault the pages in */
    printf("| threads | buffer MiB | read GB/s (best of %d) |\n|---|---|---|\n", reps);
    for (int t = 1; t <= n_threads; t = t == n_threads ? t + 1 : (t * 2 > n_threads ? n_threads : t * 2)) {
        struct muse_threadpool *pool = NULL;
        if (muse_threadpool_create(t, &pool, NULL) != MUSE_OK) return 1;
        double bw = muse_membw_read(pool, buf, size, reps);
        printf("| %d | %d | %.2f |\n", t, mib, bw * 1e-9);
        muse_threadpool_free(pool);
    }
    free(buf);
    return 0;
}
