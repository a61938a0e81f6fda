/* tp_worker.c - ranks 1..N-1 of a tensor-parallel group: do what rank 0's commands say (tp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

struct worker {
    struct muse_tp *tp;
    struct muse_model *model;
    struct muse_context **ctx;       /* by id */
    int32_t n_ctx;
    struct muse_kv_checkpoint **ck;  /* by id */
    int32_t n_ck;
};

/* Slot id of a table of pointers, grown as needed. */
static void **slot(struct worker *w, void ***table, int32_t *n, int32_t id) {
    if (id < 0) muse_comm_abort(muse_tp_comm(w->tp), "a command names a negative id");
    if (id >= *n) {
        const int32_t m = id + 64;
        void **t = realloc(*table, sizeof *t * (size_t)m);
        if (!t) muse_comm_abort(muse_tp_comm(w->tp), "out of memory");
        memset(t + *n, 0, sizeof *t * (size_t)(m - *n));
        *table = t, *n = m;
    }
    return &(*table)[id];
}

static struct muse_context *context(struct worker *w, int32_t id) {
    struct muse_context *c = id >= 0 && id < w->n_ctx ? w->ctx[id] : NULL;
    if (!c) muse_comm_abort(muse_tp_comm(w->tp), "a command names a context this rank does not have");
    return c;
}

static struct muse_kv_cache *cache(struct worker *w, const struct muse_tp_cmd *c) {
    struct muse_context *x = context(w, c->ctx);
    if (c->seq < 0 || c->seq >= (int32_t)x->params.n_seq_max) muse_comm_abort(muse_tp_comm(w->tp), "a command names a bad sequence");
    return x->kv[c->seq];
}

/* A step rank 0 did must succeed here too: the ranks hold the same state. If not, stop the job. */
static void must(struct worker *w, muse_status st, const struct muse_error *err, const char *what) {
    if (!st) return;
    char msg[700];
    snprintf(msg, sizeof msg, "%s failed here after it worked on rank 0 (the ranks' states differ): %.512s", what, err->msg);
    muse_comm_abort(muse_tp_comm(w->tp), msg);
}

static void run(struct worker *w, const struct muse_tp_cmd *c) {
    struct muse_context *x = context(w, c->ctx);
    const int32_t n = c->a;
    if (n < 1 || n > (int32_t)x->params.n_batch) muse_comm_abort(muse_tp_comm(w->tp), "a batch of a bad size");
    int32_t *body = malloc(sizeof(int32_t) * 3 * (size_t)n);
    if (!body) muse_comm_abort(muse_tp_comm(w->tp), "out of memory");
    muse_comm_bcast(muse_tp_comm(w->tp), body, sizeof(int32_t) * (size_t)(c->flags & 1 ? 3 : 2) * (size_t)n);
    const struct muse_batch b = {.n_tokens = n, .token = body, .pos = body + n, .seq_id = c->flags & 1 ? body + 2 * n : NULL};
    struct muse_error err;
    must(w, muse_decode(x, &b, NULL, &err), &err, "a batch");
    free(body);
}

muse_status muse_tp_worker(struct muse_model *model, struct muse_error *err) {
    struct muse_tp *tp = model->tp;
    if (!tp || muse_tp_rank_of(tp) == 0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "muse_tp_worker: not a tensor-parallel rank other than 0");
    struct worker w = {.tp = tp, .model = model};
    struct muse_error e;
    for (;;) {
        struct muse_tp_cmd c;
        muse_comm_bcast(muse_tp_comm(tp), &c, sizeof c);
        switch (c.op) {
        case MUSE_TP_QUIT:
            for (int32_t i = 0; i < w.n_ck; i++) muse_kv_checkpoint_free(w.ck[i]);
            for (int32_t i = 0; i < w.n_ctx; i++) muse_context_free(w.ctx[i]);
            free(w.ck);
            free(w.ctx);
            return MUSE_OK;
        case MUSE_TP_CTX_CREATE: {
            struct muse_context_params p = muse_context_default_params();
            c.backend[sizeof c.backend - 1] = '\0';
            p.n_ctx = c.n_ctx, p.n_batch = c.n_batch, p.n_threads = c.n_threads, p.n_seq_max = c.n_seq_max;
            p.n_ctx_pool = c.n_ctx_pool, p.kv_type = (enum muse_kv_type)c.kv_type, p.swa_full = c.swa_full;
            p.no_repack = c.no_repack, p.backend = c.backend;
            struct muse_context **s = (struct muse_context **)slot(&w, (void ***)&w.ctx, &w.n_ctx, c.ctx);
            if (*s) muse_comm_abort(muse_tp_comm(tp), "a context id used twice");
            must(&w, muse_context_create(model, p, s, &e), &e, "creating a context");
            break;
        }
        case MUSE_TP_CTX_FREE: {
            context(&w, c.ctx);
            muse_context_free(w.ctx[c.ctx]);
            w.ctx[c.ctx] = NULL;
            break;
        }
        case MUSE_TP_NOP: break;
        case MUSE_TP_RUN: run(&w, &c); break;
        case MUSE_TP_SEQ_CLEAR: muse_kv_cache_clear(cache(&w, &c)); break;
        case MUSE_TP_SEQ_TRUNCATE: must(&w, muse_kv_cache_truncate(cache(&w, &c), c.a, &e), &e, "a rollback"); break;
        case MUSE_TP_SEQ_RESERVE: must(&w, muse_kv_cache_reserve(cache(&w, &c), c.a, &e), &e, "taking KV cells"); break;
        case MUSE_TP_CK_CREATE: {
            struct muse_kv_checkpoint **s = (struct muse_kv_checkpoint **)slot(&w, (void ***)&w.ck, &w.n_ck, c.a);
            if (*s) muse_comm_abort(muse_tp_comm(tp), "a checkpoint id used twice");
            must(&w, muse_kv_cache_checkpoint_create(cache(&w, &c), s, &e), &e, "creating a KV checkpoint");
            break;
        }
        case MUSE_TP_CK_SAVE:
        case MUSE_TP_CK_RESTORE:
        case MUSE_TP_CK_FREE: {
            struct muse_kv_checkpoint *k = c.a >= 0 && c.a < w.n_ck ? w.ck[c.a] : NULL;
            if (!k) muse_comm_abort(muse_tp_comm(tp), "a command names a checkpoint this rank does not have");
            if (c.op == MUSE_TP_CK_SAVE) must(&w, muse_kv_checkpoint_save(k, &e), &e, "saving a KV checkpoint");
            else if (c.op == MUSE_TP_CK_RESTORE) must(&w, muse_kv_checkpoint_restore(k, &e), &e, "restoring a KV checkpoint");
            else muse_kv_checkpoint_free(k), w.ck[c.a] = NULL;
            break;
        }
        default: muse_comm_abort(muse_tp_comm(tp), "an unknown command (ranks of different muse builds?)");
        }
    }
}
