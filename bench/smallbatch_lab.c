/*
 * smallbatch_lab.c - the matmuls of several sequences decoded in one forward (issue 29): one weight
 * matrix (default 2048 x 5632, an FFN matrix of an n_embd 2048 model) against M = 1, 2, 4, 8, 16
 * activation rows, timed per path on one thread, as tokens per second per row (1 / the matmul's
 * time: each row is one sequence's token) and for all rows together (M / time).
 *
 *   build/bench/smallbatch_lab [-T type,...] [-m NE0xROWS] [-M 1,2,4,...] [-r REPS] [-w COPIES]
 *
 * Paths, as muse_matmul / the cpu backend runs them:
 *   exact   the kernel table's gemv (M = 1) / gemm (M > 1): what MUSE_CPU=exact runs, bit for bit
 *   fast    the active table's choice for M rows (the small-batch kernel where it has one,
 *           the tile GEMM from its threshold, else the exact kernels)
 *   tile    the tile GEMM forced at every M (weights packed per call), for comparison
 *   r8      the decode of rows interleaved by 8 (kernels/repack.h: the copy the cpu device makes
 *           at prepare for the types that have one), at every M
 * -w COPIES: that many copies of the matrix, used in turn, so that the weights come from memory
 * and not from the last level cache (default 4: 4 x 6.5 MB for Q4_K). Time: process CPU time,
 * best of REPS passes over the copies (default 5). MUSE_CPU=avx2|avx512 picks the level.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"

#define M_MAX 64

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum lab_path { PATH_EXACT, PATH_FAST, PATH_TILE, PATH_R8, PATH_COUNT };
static const char *const path_names[PATH_COUNT] = {"exact", "fast", "tile", "r8"};

struct lab {
    enum muse_type type;
    int64_t ne0, rows;
    int copies;
    uint8_t *w;              /* copies x rows x row_size */
    uint8_t *w8;             /* the same interleaved by 8 (NULL: the type has no such form) */
    size_t row_size;
    uint8_t *q;              /* M_MAX rows, reference layout */
    size_t q_stride;
    uint8_t *xp;             /* M_MAX rows, tile layout */
    size_t xps;
    void *scratch;
    size_t scratch_bytes;
    float *out;              /* M_MAX x rows */
};

/* One matmul of copy `c` with M rows by `path`; false when the path does not run here. */
static bool lab_run(const struct lab *L, const struct muse_kernels *exact, const struct muse_kernels *fast,
                    const struct muse_kernels *tile, enum lab_path path, int c, int M) {
    const struct muse_matmul_weight w = {L->type, L->ne0, L->rows, L->w + (size_t)c * L->rows * L->row_size,
                                         L->row_size};
    if (path == PATH_R8) {
        if (!L->w8 || !fast->gemm_r8[L->type]) return false;
        fast->gemm_r8[L->type](L->ne0, L->w8 + (size_t)c * L->rows * L->row_size, L->rows / 8, L->q, L->q_stride, M, L->out,
                               L->rows);
        return true;
    }
    const struct muse_kernels *k = path == PATH_EXACT ? exact : path == PATH_FAST ? fast : tile;
    if (path != PATH_EXACT && muse_matmul_tile_supported(k, L->type, L->ne0, M) && L->scratch)
        return muse_matmul_tile(k, &w, L->xp, L->xps, M, L->out, L->rows, L->scratch, L->scratch_bytes);
    if (path == PATH_TILE) return false;
    muse_matmul(k, &w, L->q, L->q_stride, M, L->out, L->rows, 0, 1);
    return true;
}

int main(int argc, char **argv) {
    int reps = 5, copies = 4, n_m = 0, ms[16];
    int64_t ne0 = 2048, rows = 5632;
    const char *types = "q8_0,q4_k,q6_k,iq2_xxs,iq4_xs", *mlist = "1,2,4,8,16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            long long a, b;
            if (sscanf(argv[++i], "%lldx%lld", &a, &b) != 2) goto usage;
            ne0 = a;
            rows = b;
        } else if (!strcmp(argv[i], "-M") && i + 1 < argc) mlist = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) copies = atoi(argv[++i]);
        else goto usage;
    }
    {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", mlist);
        for (char *s = strtok(buf, ","); s && n_m < 16; s = strtok(NULL, ",")) {
            ms[n_m] = atoi(s);
            if (ms[n_m] < 1 || ms[n_m] > M_MAX) goto usage;
            n_m++;
        }
    }
    if (reps < 1 || copies < 1 || ne0 < 1 || rows < 1 || n_m < 1) goto usage;
    const struct muse_kernels *fast = muse_kernels_active();
    const struct muse_kernels *exact = muse_kernels_exact_for(fast->level);
    struct muse_kernels tile = *fast; /* the same table with the tile GEMM from one row */
    tile.tile_min_act = 1;
    memset(tile.tile_min_small, 0, sizeof tile.tile_min_small);
    printf("small-batch lab: level %s, 1 thread, %lldx%lld weights (%d copies), best of %d (CPU time)\n\n",
           muse_cpu_level_name(fast->level), (long long)ne0, (long long)rows, copies, reps);
    printf("| type | path |");
    for (int j = 0; j < n_m; j++) printf(" M=%d ms | tok/s/row | all |", ms[j]);
    printf(" all M=%d / M=1 |\n|---|---|", ms[n_m - 1]);
    for (int j = 0; j < n_m; j++) printf("---|---|---|");
    printf("---|\n");

    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const int t = muse_type_from_name(name);
        if (t < 0 || !muse_matmul_supported((enum muse_type)t, ne0)) {
            printf("| %s | unsupported for ne0 %lld |\n", name, (long long)ne0);
            continue;
        }
        struct lab L = {.type = (enum muse_type)t, .ne0 = ne0, .rows = rows, .copies = copies};
        L.row_size = muse_type_row_size(L.type, ne0);
        L.q_stride = muse_matmul_act_row_size(L.type, ne0);
        L.xps = muse_matmul_tile_act_bytes(L.type, ne0);
        L.scratch_bytes = muse_matmul_tile_scratch(&tile, L.type, ne0);
        L.w = malloc(L.row_size * (size_t)rows * (size_t)copies);
        L.q = malloc(L.q_stride * M_MAX);
        L.xp = aligned_alloc(64, L.xps * M_MAX);
        L.scratch = L.scratch_bytes ? aligned_alloc(64, (L.scratch_bytes + 63) & ~(size_t)63) : NULL;
        L.out = malloc(sizeof(float) * (size_t)rows * M_MAX);
        float *x = malloc(sizeof(float) * (size_t)ne0 * M_MAX);
        if (!L.w || !L.q || !L.xp || !L.out || !x) return 1;
        for (int64_t i = 0; i < rows * copies; i++) {
            if (i < 256) kr_weight_row(L.type, ne0, L.w + i * L.row_size);
            else memcpy(L.w + i * L.row_size, L.w + (i % 256) * L.row_size, L.row_size);
        }
        if (muse_repack_r8_type(L.type) && rows % 8 == 0 && (L.w8 = malloc(L.row_size * (size_t)rows * (size_t)copies)))
            for (int c = 0; c < copies; c++)
                muse_repack_r8(L.type, L.w + (size_t)c * rows * L.row_size, L.row_size, rows / 8,
                               L.w8 + (size_t)c * rows * L.row_size);
        for (int64_t j = 0; j < ne0 * M_MAX; j++) x[j] = kr_float();
        if (L.scratch) muse_matmul_tile_quantize(&tile, L.type, ne0, x, ne0, M_MAX, L.q, L.q_stride, L.xp, L.xps, 0, 1);
        else muse_matmul_quantize(fast, L.type, ne0, x, ne0, M_MAX, L.q, L.q_stride, 0, 1);
        for (int p = 0; p < PATH_COUNT; p++) {
            printf("| %s | %s |", name, path_names[p]);
            double t1 = 0, tl = 0;
            for (int j = 0; j < n_m; j++) {
                const int M = ms[j];
                double best = 1e30;
                bool ran = lab_run(&L, exact, fast, &tile, (enum lab_path)p, 0, M); /* warm-up */
                for (int r = 0; ran && r < reps; r++) {
                    const double c0 = cpu_seconds();
                    for (int c = 0; c < copies; c++) lab_run(&L, exact, fast, &tile, (enum lab_path)p, c, M);
                    const double s = (cpu_seconds() - c0) / copies;
                    if (s < best) best = s;
                }
                if (!ran) {
                    printf(" - | - | - |");
                    continue;
                }
                if (j == 0) t1 = best / M;
                tl = best / M;
                printf(" %.3f | %.0f | %.0f |", best * 1e3, 1.0 / best, M / best);
            }
            if (t1 > 0 && tl > 0) printf(" %.2fx |\n", t1 / tl);
            else printf(" - |\n");
            fflush(stdout);
        }
        free(L.w), free(L.w8), free(L.q), free(L.xp), free(L.scratch), free(L.out), free(x);
    }
    return 0;
usage:
    fprintf(stderr, "usage: %s [-T type,...] [-m NE0xROWS] [-M 1,2,4,...] [-r REPS] [-w COPIES]\n", argv[0]);
    return 2;
}
