/* prog_profile.c - the MUSE_PROFILE table (prog_profile.h). */
#include "backend/prog_profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/tensor_type.h"

#define PROF_ROWS 1024

struct prof_row {
    char label[160];
    int64_t ns, calls;
};

static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;
static struct prof_row *prof;
static int prof_n, prof_dropped;
static int prof_state = -1; /* -1 unread, 0 off, 1 on */

static int prof_cmp(const void *a, const void *b) {
    const struct prof_row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

static void prof_print(void) {
    pthread_mutex_lock(&prof_mu);
    int64_t total = 0;
    for (int i = 0; i < prof_n; i++) total += prof[i].ns;
    qsort(prof, (size_t)prof_n, sizeof *prof, prof_cmp);
    fprintf(stderr, "\nMUSE_PROFILE: wall time between barriers (thread 0), %.1f ms in all\n", (double)total / 1e6);
    fprintf(stderr, "%10s %10s %10s %6s  %s\n", "ms", "calls", "us/call", "share", "ops [rows]");
    for (int i = 0; i < prof_n; i++)
        fprintf(stderr, "%10.2f %10lld %10.2f %5.1f%%  %s\n", (double)prof[i].ns / 1e6, (long long)prof[i].calls,
                (double)prof[i].ns / 1e3 / (double)prof[i].calls, total ? 100.0 * (double)prof[i].ns / (double)total : 0.0,
                prof[i].label);
    if (prof_dropped) fprintf(stderr, "(%d stretches beyond the table's %d labels not counted)\n", prof_dropped, PROF_ROWS);
    pthread_mutex_unlock(&prof_mu);
}

bool muse_prof_enabled(void) {
    int s = __atomic_load_n(&prof_state, __ATOMIC_RELAXED);
    if (s >= 0) return s;
    pthread_mutex_lock(&prof_mu);
    if (prof_state < 0) {
        const char *e = getenv("MUSE_PROFILE");
        prof_state = e && *e && strcmp(e, "0") != 0 && (prof = calloc(PROF_ROWS, sizeof *prof)) != NULL;
        if (prof_state) atexit(prof_print);
    }
    s = prof_state;
    pthread_mutex_unlock(&prof_mu);
    return s;
}

int64_t muse_prof_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *kind_name(enum muse_op_kind k) {
    static const char *const names[] = {
        [MUSE_OP_BARRIER] = "barrier", [MUSE_OP_EMBED] = "embed", [MUSE_OP_ROPE_ANGLES] = "rope_angles",
        [MUSE_OP_RMS_NORM] = "rms_norm", [MUSE_OP_ROPE] = "rope", [MUSE_OP_MATMUL] = "matmul",
        [MUSE_OP_KV_STORE] = "kv_store", [MUSE_OP_ATTENTION] = "attention", [MUSE_OP_SWIGLU] = "swiglu",
        [MUSE_OP_ADD] = "add", [MUSE_OP_LOGITS] = "logits", [MUSE_OP_TOP_PROBS] = "top_probs",
        [MUSE_OP_OBSERVE] = "observe", [MUSE_OP_ALL_REDUCE] = "all_reduce", [MUSE_OP_LAYER_NORM] = "layer_norm",
        [MUSE_OP_GELU] = "gelu", [MUSE_OP_GATHER] = "gather", [MUSE_OP_ROPE_2D] = "rope_2d",
        [MUSE_OP_WINDOW_ATTENTION] = "window_attention", [MUSE_OP_HOOK] = "hook",
    };
    return (unsigned)k < sizeof names / sizeof *names && names[k] ? names[k] : "?";
}

/* "matmul attn_q.weight q4_k 2048x2048": the weight's name without "blk.N." */
static void put_weight(char *s, size_t cap, const struct muse_weight *w) {
    const char *n = w->name ? w->name : "?";
    if (!strncmp(n, "blk.", 4)) {
        const char *d = strchr(n + 4, '.');
        if (d) n = d + 1;
    }
    const struct muse_type_layout *l = muse_type_layout_get(w->type);
    const size_t len = strlen(s);
    snprintf(s + len, cap - len, " %s %s %lldx%lld%s", n, l ? l->name : "?", (long long)w->ne0, (long long)w->ne1,
             w->r8 ? " r8" : "");
}

static void label_of(char *s, size_t cap, const struct muse_program *p, int32_t i0, int32_t i1, int32_t n_rows) {
    s[0] = 0;
    for (int32_t i = i0; i <= i1 && i < p->n_ops; i++) {
        const struct muse_op *o = &p->ops[i];
        if (o->kind == MUSE_OP_BARRIER) continue;
        size_t len = strlen(s);
        snprintf(s + len, cap - len, "%s%s", len ? " + " : "", kind_name(o->kind));
        if (o->kind == MUSE_OP_MATMUL)
            for (int32_t j = 0; j < o->n_jobs; j++) put_weight(s, cap, &p->jobs[o->job0 + j].w);
    }
    if (!s[0]) snprintf(s, cap, "(barrier)");
    const size_t len = strlen(s);
    if (n_rows <= 16) snprintf(s + len, cap - len, " [%d]", n_rows);
    else snprintf(s + len, cap - len, " [%s]", n_rows <= 128 ? "17-128" : n_rows <= 512 ? "129-512" : ">512");
}

void muse_prof_add(const struct muse_program *p, int32_t i0, int32_t i1, int32_t n_rows, int64_t ns) {
    char label[sizeof prof->label];
    label_of(label, sizeof label, p, i0, i1, n_rows);
    pthread_mutex_lock(&prof_mu);
    int i = 0;
    while (i < prof_n && strcmp(prof[i].label, label) != 0) i++;
    if (i == prof_n) {
        if (prof_n == PROF_ROWS) {
            prof_dropped++;
            pthread_mutex_unlock(&prof_mu);
            return;
        }
        memcpy(prof[prof_n++].label, label, sizeof label);
    }
    prof[i].ns += ns;
    prof[i].calls++;
    pthread_mutex_unlock(&prof_mu);
}
