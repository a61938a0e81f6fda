/* tp.c - the tensor-parallel group, the split of the weights, and the command stream (tp.h). */
#include "model/tp.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/tensor_type.h"

struct muse_tp {
    struct muse_comm *comm;
    int32_t rank, size;
    bool bf16;
    pthread_mutex_t lock;
    int32_t next_ctx, next_ck;
    bool has_model; /* a text model is loaded (one per job) */
    bool live;      /* rank 0: the others follow commands (a model loaded everywhere, no QUIT yet) */
    /* rank 0's heartbeat: a NOP command each second nothing else was sent, so that the others'
     * waits (MUSE_TP_TIMEOUT) tell an idle rank 0 from a vanished one */
    pthread_t beat;
    bool beating;
    _Atomic bool stop_beat;
    _Atomic int64_t last_send_ms;
};

static struct muse_tp *group;

struct muse_tp *muse_tp_group(void) { return group; }
int32_t muse_tp_rank_of(const struct muse_tp *tp) { return tp->rank; }
struct muse_comm *muse_tp_comm(struct muse_tp *tp) { return tp->comm; }
bool muse_tp_bf16(const struct muse_tp *tp) { return tp->bf16; }
bool muse_tp_live(const struct muse_tp *tp) { return tp && tp->live; }
static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *heartbeat(void *arg) {
    struct muse_tp *tp = arg;
    while (!atomic_load(&tp->stop_beat)) {
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        if (now_ms() - atomic_load(&tp->last_send_ms) < 1000 || pthread_mutex_trylock(&tp->lock)) continue;
        if (tp->live && !atomic_load(&tp->stop_beat)) muse_tp_send(tp, &(struct muse_tp_cmd){.op = MUSE_TP_NOP});
        pthread_mutex_unlock(&tp->lock);
    }
    return NULL;
}

void muse_tp_set_live(struct muse_tp *tp) {
    tp->live = tp->rank == 0;
    if (!tp->live || tp->size == 1) return;
    atomic_store(&tp->last_send_ms, now_ms());
    tp->beating = pthread_create(&tp->beat, NULL, heartbeat, tp) == 0;
}

muse_status muse_tp_init(int32_t n_ranks, int bf16, int32_t *rank, struct muse_error *err) {
    if (group) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor parallel: this process already joined a group");
    if (n_ranks < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "--tp %d: the group needs at least 1 rank", n_ranks);
    struct muse_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_status st = muse_comm_init(n_ranks, &tp->comm, err);
    if (st) {
        free(tp);
        return st;
    }
    tp->rank = muse_comm_rank(tp->comm);
    tp->size = muse_comm_size(tp->comm);
    tp->bf16 = bf16 != 0;
    pthread_mutex_init(&tp->lock, NULL);
    group = tp;
    if (rank) *rank = tp->rank;
    return MUSE_OK;
}

int32_t muse_tp_size(void) { return group ? group->size : 1; }
int32_t muse_tp_rank(void) { return group ? group->rank : 0; }

void muse_tp_finish(void) {
    struct muse_tp *tp = group;
    if (!tp) return;
    /* rank 0 ending before the model was loaded (a usage error, --help) would leave the others
     * waiting for it in muse_model_load: end the job instead */
    if (tp->rank == 0 && tp->size > 1 && !tp->has_model) muse_comm_abort(tp->comm, "rank 0 ended before loading the model");
    if (tp->beating) {
        atomic_store(&tp->stop_beat, true);
        pthread_join(tp->beat, NULL);
        tp->beating = false;
    }
    if (tp->live) muse_tp_command(tp, MUSE_TP_QUIT, -1, -1, 0);
    tp->live = false;
    group = NULL;
    muse_comm_finish(tp->comm);
    /* tp itself stays: a model of the group may still point to it (its contexts no longer run) */
}

void muse_tp_get_stats(struct muse_tp_stats *s) {
    memset(s, 0, sizeof *s);
    if (!group) return;
    const struct muse_comm_stats c = muse_comm_stats(group->comm);
    s->n_allreduce = c.n_allreduce;
    s->floats_reduced = c.floats_reduced;
    s->bytes_sent = c.bytes_sent;
    s->seconds = c.seconds;
}

// ---- loading in step -------------------------------------------------------------------------

struct load_info {
    int32_t status;
    uint64_t size, n_tensors, hash;
    char msg[200];
};

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

muse_status muse_tp_load_check(struct muse_tp *tp, muse_status local, const struct muse_error *local_err,
                               const struct muse_gguf *g, struct muse_error *err) {
    struct load_info mine = {.status = local};
    if (local) snprintf(mine.msg, sizeof mine.msg, "%.199s", local_err ? local_err->msg : "failed");
    else if (g) mine.size = g->size, mine.n_tensors = g->n_tensors, mine.hash = fnv1a(g->base, (size_t)g->data_start);
    struct load_info *all = calloc((size_t)tp->size, sizeof *all);
    if (!all) muse_comm_abort(tp->comm, "out of memory");
    muse_comm_allgather(tp->comm, &mine, all, sizeof mine);
    muse_status st = MUSE_OK;
    for (int32_t r = 0; r < tp->size && !st; r++) {
        if (all[r].status)
            st = muse_error_set(err, (muse_status)all[r].status, "tensor parallel: rank %d: %s", r, all[r].msg);
        else if (all[r].size != all[0].size || all[r].n_tensors != all[0].n_tensors || all[r].hash != all[0].hash)
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                "tensor parallel: rank %d sees another model file than rank 0 (%llu bytes, %llu tensors, "
                                "header hash %016llx; rank 0: %llu bytes, %llu tensors, %016llx): every rank must load the same file",
                                r, (unsigned long long)all[r].size, (unsigned long long)all[r].n_tensors,
                                (unsigned long long)all[r].hash, (unsigned long long)all[0].size,
                                (unsigned long long)all[0].n_tensors, (unsigned long long)all[0].hash);
    }
    free(all);
    return st;
}

// ---- the split -------------------------------------------------------------------------------

struct muse_tp_owned {
    void **mem;
    int32_t n, cap;
    size_t bytes;
    int32_t n_layer, attn_split, ffn_split; /* layers whose attention / FFN is split (the rest replicated) */
    int32_t size;
};

void muse_tp_owned_free(struct muse_tp_owned *o) {
    if (!o) return;
    for (int32_t i = 0; i < o->n; i++) free(o->mem[i]);
    free(o->mem);
    free(o);
}

size_t muse_tp_owned_bytes(const struct muse_tp_owned *o) { return o ? o->bytes : 0; }

void muse_tp_describe(const struct muse_tp_owned *o, char *buf, size_t size) {
    if (!o) {
        snprintf(buf, size, "not split");
        return;
    }
    snprintf(buf, size, "%d ranks: attention split in %d of %d layers, FFN in %d of %d (the rest replicated); %.1f MiB of row-parallel copies",
             o->size, o->attn_split, o->n_layer, o->ffn_split, o->n_layer, (double)o->bytes / (1 << 20));
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* Units [u0, u1) of U that rank r of N takes. */
static void share_units(int64_t U, int32_t r, int32_t N, int64_t *u0, int64_t *u1) {
    *u0 = U * r / N;
    *u1 = U * (r + 1) / N;
}

/* Whether every rank's query heads [h0, h1) read whole GQA groups or lie inside one. */
static bool heads_ok(int64_t H, int64_t g, int64_t u, int32_t N) {
    for (int32_t r = 0; r < N; r++) {
        int64_t a, b;
        share_units(H / u, r, N, &a, &b);
        const int64_t h0 = a * u, h1 = b * u;
        if (h1 <= h0) return false;
        if (!(h0 / g == (h1 - 1) / g || (h0 % g == 0 && h1 % g == 0))) return false;
    }
    return true;
}

static muse_status keep(struct muse_tp_owned *o, void *p, size_t bytes, struct muse_error *err) {
    if (o->n == o->cap) {
        const int32_t cap = o->cap ? 2 * o->cap : 64;
        void **m = realloc(o->mem, sizeof *m * (size_t)cap);
        if (!m) {
            free(p);
            return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        }
        o->mem = m, o->cap = cap;
    }
    o->mem[o->n++] = p;
    o->bytes += bytes;
    return MUSE_OK;
}

/* w := columns [c0, c1) of w (c0, c1 on block boundaries), read from the file into memory of our own. */
static muse_status cut_columns(struct muse_weight *w, int64_t c0, int64_t c1, int fd, const struct muse_gguf *g,
                               struct muse_tp_owned *o, struct muse_error *err) {
    const struct muse_type_layout *t = &muse_type_layouts[w->type];
    const size_t row = muse_type_row_size(w->type, c1 - c0), skip = (size_t)(c0 / t->block_size) * t->type_size;
    const size_t bytes = row * (size_t)w->ne1;
    uint8_t *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for %s's share (%zu MiB)", w->name, bytes >> 20);
    const uint64_t base = (uint64_t)((const uint8_t *)w->data - g->base);
    for (int64_t i = 0; i < w->ne1; i++) {
        const off_t at = (off_t)(base + (uint64_t)i * w->row_size + skip);
        for (size_t done = 0; done < row;) {
            const ssize_t n = pread(fd, p + (size_t)i * row + done, row - done, at + (off_t)done);
            if (n <= 0) {
                free(p);
                return muse_error_set(err, MUSE_ERR_IO, "reading %s's share: %s", w->name, n < 0 ? "read error" : "short file");
            }
            done += (size_t)n;
        }
    }
    w->data = p;
    w->ne0 = c1 - c0;
    w->row_size = row;
    return keep(o, p, bytes, err);
}

/* Ask the kernel to read a view's pages ahead (the model is mapped without populating it). */
static void prefetch(const struct muse_weight *w) {
    if (!w->data) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)w->data / page * page, b = (uintptr_t)w->data + w->row_size * (size_t)w->ne1;
    madvise((void *)a, b - a, MADV_WILLNEED);
}

static void bias_rows(struct muse_weight *b, int64_t r0, int64_t n) {
    if (!b->data) return;
    b->data = (const float *)b->data + r0;
    b->ne0 = n;
    b->row_size = sizeof(float) * (size_t)n;
}

muse_status muse_tp_shard(struct muse_tp *tp, struct muse_hparams *hp, struct muse_weights *w, const struct muse_gguf *g,
                          const char *path, struct muse_tp_owned **owned, struct muse_error *err) {
    *owned = NULL;
    const int32_t N = tp->size, r = tp->rank;
    struct muse_tp_owned *o = calloc(1, sizeof *o);
    if (!o) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    o->n_layer = (int32_t)hp->n_layer;
    o->size = N;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        free(o);
        return muse_error_set(err, MUSE_ERR_IO, "%s: cannot open it again to read this rank's share", path);
    }
    muse_status st = MUSE_OK;
    for (uint32_t il = 0; il < hp->n_layer && !st; il++) {
        struct muse_layer_weights *l = &w->layers[il];
        const int64_t H = hp->n_head[il], Hk = hp->n_head_kv[il], hd = muse_hparams_head_dim_k(hp, il);
        const int64_t n_q = H * hd, n_k = Hk * hd;
        /* attention: units of u heads (whole blocks of attn_output's columns) */
        const int64_t Bo = muse_type_layouts[l->wo.type].block_size;
        const int64_t u = Bo / gcd64(Bo, hd);
        const bool attn = Hk > 0 && H % Hk == 0 && (int64_t)muse_hparams_n_embd_v_gqa(hp, il) == n_k && H % u == 0 &&
                          H / u >= N && heads_ok(H, H / Hk, u, N);
        if (attn) {
            int64_t a, b;
            share_units(H / u, r, N, &a, &b);
            const int64_t grp = H / Hk, h0 = a * u, h1 = b * u, k0 = h0 / grp, k1 = (h1 - 1) / grp + 1;
            if (l->wqkv.data) { /* the fused tensor: three views, as if Q, K and V were apart */
                l->wq = muse_weight_rows(&l->wqkv, 0, n_q);
                l->wk = muse_weight_rows(&l->wqkv, n_q, n_k);
                l->wv = muse_weight_rows(&l->wqkv, n_q + n_k, n_k);
                l->has_wq_scale = l->has_wk_scale = l->has_wv_scale = l->has_wqkv_scale;
                l->wq_scale = l->wk_scale = l->wv_scale = l->wqkv_scale;
                if (l->bqkv.data) {
                    l->bq = l->bk = l->bv = l->bqkv;
                    bias_rows(&l->bk, n_q, n_k);
                    bias_rows(&l->bv, n_q + n_k, n_k);
                    bias_rows(&l->bq, 0, n_q);
                }
                l->wqkv.data = NULL, l->bqkv.data = NULL, l->has_wqkv_scale = false;
            }
            l->wq = muse_weight_rows(&l->wq, h0 * hd, (h1 - h0) * hd);
            l->attn_gate = muse_weight_rows(&l->attn_gate, h0 * hd, (h1 - h0) * hd);
            l->wk = muse_weight_rows(&l->wk, k0 * hd, (k1 - k0) * hd);
            l->wv = muse_weight_rows(&l->wv, k0 * hd, (k1 - k0) * hd);
            bias_rows(&l->bq, h0 * hd, (h1 - h0) * hd);
            bias_rows(&l->bk, k0 * hd, (k1 - k0) * hd);
            bias_rows(&l->bv, k0 * hd, (k1 - k0) * hd);
            st = cut_columns(&l->wo, h0 * hd, h1 * hd, fd, g, o, err);
            hp->n_head[il] = (uint32_t)(h1 - h0);
            hp->n_head_kv[il] = (uint32_t)(k1 - k0);
            l->split_attn = true;
            o->attn_split++;
        }
        if (st) break;
        /* FFN: units of ffn_down's block */
        const int64_t Bd = muse_type_layouts[l->ffn_down.type].block_size, n_ff = hp->n_ff[il];
        if (n_ff % Bd == 0 && n_ff / Bd >= N) {
            int64_t a, b;
            share_units(n_ff / Bd, r, N, &a, &b);
            const int64_t f0 = a * Bd, f1 = b * Bd;
            l->ffn_gate = muse_weight_rows(&l->ffn_gate, f0, f1 - f0);
            l->ffn_up = muse_weight_rows(&l->ffn_up, f0, f1 - f0);
            st = cut_columns(&l->ffn_down, f0, f1, fd, g, o, err);
            hp->n_ff[il] = (uint32_t)(f1 - f0);
            l->split_ffn = true;
            o->ffn_split++;
        }
        const struct muse_weight *views[] = {&l->wq, &l->wk, &l->wv, &l->wqkv, &l->attn_gate, &l->ffn_gate, &l->ffn_up,
                                             &l->wo, &l->ffn_down};
        for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
            if (views[i]->data && !(views[i] == &l->wo && l->split_attn) && !(views[i] == &l->ffn_down && l->split_ffn))
                prefetch(views[i]);
    }
    close(fd);
    if (r != 0) w->output.data = NULL; /* the head is rank 0's */
    else prefetch(&w->output);
    if (st) {
        muse_tp_owned_free(o);
        return st;
    }
    *owned = o;
    return MUSE_OK;
}

// ---- commands --------------------------------------------------------------------------------

void muse_tp_lock(struct muse_tp *tp) { pthread_mutex_lock(&tp->lock); }
void muse_tp_unlock(struct muse_tp *tp) { pthread_mutex_unlock(&tp->lock); }

void muse_tp_send(struct muse_tp *tp, const struct muse_tp_cmd *c) {
    atomic_store(&tp->last_send_ms, now_ms());
    struct muse_tp_cmd copy = *c;
    muse_comm_bcast(tp->comm, &copy, sizeof copy);
}

void muse_tp_send_rows(struct muse_tp *tp, int32_t n, const int32_t *tokens, const int32_t *pos, const int32_t *seq) {
    int32_t *body = malloc(sizeof(int32_t) * 3 * (size_t)n);
    if (!body) muse_comm_abort(tp->comm, "out of memory");
    memcpy(body, tokens, sizeof(int32_t) * (size_t)n);
    memcpy(body + n, pos, sizeof(int32_t) * (size_t)n);
    if (seq) memcpy(body + 2 * n, seq, sizeof(int32_t) * (size_t)n);
    muse_comm_bcast(tp->comm, body, sizeof(int32_t) * (size_t)(seq ? 3 : 2) * (size_t)n);
    free(body);
}

void muse_tp_command(struct muse_tp *tp, enum muse_tp_op op, int32_t ctx, int32_t seq, int32_t a) {
    if (!tp || !tp->live) return;
    const struct muse_tp_cmd c = {.op = op, .ctx = ctx, .seq = seq, .a = a};
    muse_tp_lock(tp);
    muse_tp_send(tp, &c);
    muse_tp_unlock(tp);
}

int32_t muse_tp_next_id(struct muse_tp *tp, bool checkpoint) {
    muse_tp_lock(tp);
    const int32_t id = checkpoint ? tp->next_ck++ : tp->next_ctx++;
    muse_tp_unlock(tp);
    return id;
}

bool muse_tp_claim_model(struct muse_tp *tp) {
    if (tp->has_model) return false;
    tp->has_model = true;
    return true;
}
