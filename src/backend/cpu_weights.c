/* cpu_weights.c - the cpu device's interleaved weight copies (cpu_weights.h). */
#include "backend/cpu_weights.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/repack.h"
#include "kernels/types.h"

/* One copy: the rows src .. src + bytes of `type`, interleaved at dst. */
struct cw_copy {
    const void *src;
    size_t bytes;
    enum muse_type type;
    void *dst;
    size_t map_bytes;
    int refs;
    struct cw_copy *next;
};

/* A prepared program and, per weight of its jobs it pointed at a copy, that weight and the copy it
 * holds a reference to (forget clears the weight's r8: the program may be prepared and run again). */
struct cw_prog {
    const struct muse_program *p;
    struct cw_held {
        struct muse_weight *w;
        struct cw_copy *c;
    } *held;
    int n_held;
    struct cw_prog *next;
};

static pthread_mutex_t cw_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cw_copy *copies;
static struct cw_prog *progs;
static uint64_t cw_bytes, cw_made;
/* The mapping file_backed() found last: [fb_lo, fb_hi), a file's or not. Forgotten when a copy made
 * from it goes (its mapping may go next, and the addresses be mapped again as something else). */
static uintptr_t fb_lo, fb_hi;
static bool fb_file;

static void copy_release(struct cw_copy *c) {
    if (--c->refs > 0) return;
    for (struct cw_copy **q = &copies; *q; q = &(*q)->next)
        if (*q == c) {
            *q = c->next;
            break;
        }
    if ((uintptr_t)c->src >= fb_lo && (uintptr_t)c->src < fb_hi) fb_lo = fb_hi = 0;
    munmap(c->dst, c->map_bytes);
    cw_bytes -= c->bytes;
    free(c);
}

/* A slice of a copy's groups for one worker. */
struct cw_slice {
    enum muse_type type;
    const uint8_t *src;
    uint8_t *dst;
    size_t row_size;
    int64_t g0, g1;
};

static void *cw_slice_run(void *arg) {
    const struct cw_slice *sl = arg;
    const size_t gb = 8 * sl->row_size;
    muse_repack_r8(sl->type, sl->src + (size_t)sl->g0 * gb, sl->row_size, sl->g1 - sl->g0, sl->dst + (size_t)sl->g0 * gb);
    return NULL;
}

/* muse_repack_r8 of n_groups groups, split over up to CW_THREADS threads when the copy is large: the
 * kernel zeroes every new page of the copy on its first write, which is most of the cost (the 30B
 * preset's Q4_K matrices: seconds on one thread of a VM) and runs in parallel on distinct pages. */
#define CW_THREADS 16
#define CW_PARALLEL_MIN ((size_t)8 << 20)
static void repack_parallel(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst) {
    const size_t bytes = (size_t)n_groups * 8 * row_size;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = bytes < CW_PARALLEL_MIN || n < 2 ? 1 : n > CW_THREADS ? CW_THREADS : (int)n;
    if (nt > n_groups) nt = (int)n_groups;
    struct cw_slice sl[CW_THREADS];
    pthread_t th[CW_THREADS];
    bool started[CW_THREADS] = {false};
    for (int t = 0; t < nt; t++) {
        sl[t] = (struct cw_slice){type, src, dst, row_size, n_groups * t / nt, n_groups * (t + 1) / nt};
        if (t > 0) started[t] = pthread_create(&th[t], NULL, cw_slice_run, &sl[t]) == 0;
    }
    if (nt > 0) cw_slice_run(&sl[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else cw_slice_run(&sl[t]); /* no thread: this one does the slice */
    }
}

/* Whether the bytes at p belong to a mapping of a file (/proc/self/maps: a nonzero inode), not to
 * anonymous memory (--no-mmap, a caller's buffer). False when that cannot be read. The mapping
 * last found is remembered (fb_*, under cw_lock): a model's weights, hundreds of copies, share one. */
static bool file_backed(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    if (a >= fb_lo && a < fb_hi) return fb_file;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    bool file = false;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, inode;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &inode) != 3) continue;
        if (a >= lo && a < hi) {
            file = inode != 0;
            fb_lo = lo, fb_hi = hi, fb_file = file;
            break;
        }
    }
    fclose(f);
    return file;
}

/* The copy of w's whole groups of 8 rows, made if no program holds it yet; NULL when out of memory. */
static struct cw_copy *copy_get(const struct muse_weight *w) {
    const size_t bytes = (size_t)(w->ne1 / 8) * 8 * w->row_size;
    for (struct cw_copy *c = copies; c; c = c->next)
        if (c->src == w->data && c->bytes == bytes && c->type == w->type) {
            c->refs++;
            return c;
        }
    struct cw_copy *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    /* plain pages: advised into huge pages (MADV_HUGEPAGE) the copies of the 30B preset took 1.5 s
     * more to make (the kernel compacts memory for them, THP defrag "madvise") and decoded no faster */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    c->map_bytes = (bytes + page - 1) / page * page;
    void *dst = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED) {
        free(c);
        return NULL;
    }
    repack_parallel(w->type, w->data, w->row_size, w->ne1 / 8, dst);
    mprotect(dst, c->map_bytes, PROT_READ);
    /* the cpu backend reads only the copy from now on: the whole pages of the original leave the
     * process. A mapped file's pages are unmapped (MADV_DONTNEED) and stay in the page cache, so
     * that the next process that maps the file finds them there (MADV_PAGEOUT, used before,
     * reclaims them: the next start read them from the file again); they come back from the file
     * if something else reads them. An anonymous copy (--no-mmap) goes to swap if there is any
     * (MADV_PAGEOUT), else stays. */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)w->data + pg - 1) / pg * pg,
                    b = ((uintptr_t)w->data + bytes) / pg * pg;
    if (b > a && file_backed(w->data)) madvise((void *)a, b - a, MADV_DONTNEED);
#ifdef MADV_PAGEOUT
    else if (b > a) madvise((void *)a, b - a, MADV_PAGEOUT);
#endif
    *c = (struct cw_copy){w->data, bytes, w->type, dst, c->map_bytes, 1, copies};
    copies = c;
    cw_bytes += bytes;
    cw_made++;
    return c;
}

muse_status muse_cpu_weights_prepare(const struct muse_kernels *k, struct muse_program *p, struct muse_error *err) {
    (void)err;
    if (!k) return MUSE_OK;
    pthread_mutex_lock(&cw_lock);
    struct cw_prog *cp = NULL;
    for (struct cw_prog *q = progs; q; q = q->next)
        if (q->p == p) cp = q;
    for (int32_t j = 0; j < p->n_jobs; j++) {
        struct muse_weight *w = &p->jobs[j].w;
        if (w->r8 || !w->data || w->ne1 < 8 || !muse_repack_r8_type(w->type) || !k->gemm_r8[w->type] ||
            w->ne0 % muse_type_layout_get(w->type)->block_size || w->row_size != muse_type_row_size(w->type, w->ne0))
            continue;
        if (!cp) {
            if (!(cp = calloc(1, sizeof *cp))) break;
            cp->p = p;
            cp->next = progs;
            progs = cp;
        }
        struct cw_held *held = realloc(cp->held, sizeof *held * (size_t)(cp->n_held + 1));
        if (!held) break;
        cp->held = held;
        struct cw_copy *c = copy_get(w);
        if (!c) continue; /* out of memory: this weight keeps the plain kernels */
        cp->held[cp->n_held++] = (struct cw_held){w, c};
        w->r8 = c->dst;
    }
    pthread_mutex_unlock(&cw_lock);
    return MUSE_OK;
}

void muse_cpu_weights_forget(const struct muse_program *p) {
    pthread_mutex_lock(&cw_lock);
    for (struct cw_prog **q = &progs; *q; q = &(*q)->next)
        if ((*q)->p == p) {
            struct cw_prog *cp = *q;
            *q = cp->next;
            for (int i = 0; i < cp->n_held; i++) {
                cp->held[i].w->r8 = NULL;
                copy_release(cp->held[i].c);
            }
            free(cp->held);
            free(cp);
            break;
        }
    pthread_mutex_unlock(&cw_lock);
}

void muse_cpu_weights_stats(uint64_t *bytes, uint64_t *made) {
    pthread_mutex_lock(&cw_lock);
    *bytes = cw_bytes;
    *made = cw_made;
    pthread_mutex_unlock(&cw_lock);
}
