/* cpu_weights.c - the cpu device's interleaved weight copies (cpu_weights.h). */
#include "backend/cpu_weights.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/repack.h"
#include "kernels/types.h"

#define HUGE_MIN ((size_t)64 << 20) /* copies from this size on are advised into huge pages */

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

static void copy_release(struct cw_copy *c) {
    if (--c->refs > 0) return;
    for (struct cw_copy **q = &copies; *q; q = &(*q)->next)
        if (*q == c) {
            *q = c->next;
            break;
        }
    munmap(c->dst, c->map_bytes);
    cw_bytes -= c->bytes;
    free(c);
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
    /* huge pages for large copies only: a copy rounded up to 2 MiB pages costs up to 2 MiB more
     * (8-layer test model: +100 MB of RSS with every copy advised) */
    const bool huge = bytes >= HUGE_MIN;
    const size_t page = huge ? (size_t)2 << 20 : (size_t)sysconf(_SC_PAGESIZE);
    c->map_bytes = (bytes + page - 1) / page * page;
    void *dst = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED) {
        free(c);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) madvise(dst, c->map_bytes, MADV_HUGEPAGE); /* a stream of whole groups: fewer TLB misses */
#endif
    muse_repack_r8(w->type, w->data, w->row_size, w->ne1 / 8, dst);
    mprotect(dst, c->map_bytes, PROT_READ);
#ifdef MADV_PAGEOUT
    /* the cpu backend reads only the copy from now on: the whole pages of the original leave the
     * process (a mapped file's pages are dropped and come back from the file if something else reads
     * them; an anonymous copy (--no-mmap) goes to swap if there is any, else stays) */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)w->data + pg - 1) / pg * pg,
                    b = ((uintptr_t)w->data + bytes) / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_PAGEOUT);
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
