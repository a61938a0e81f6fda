/*
 * stepper.c - one forward per step over the waiting requests of many sequences (the contract:
 * muse.h, "continuous batching").
 *
 * State: the queue of waiting requests (FIFO, at most one per sequence: its owner blocks in
 * muse_stepper_eval), which sequences joined, and whether a step is running - all under mu. The
 * batch arrays and the logits scratch belong to the thread running the step (running is set), so
 * only one thread uses them at a time. A request lives on its caller's stack; the caller leaves
 * only once the request is finished and out of the queue.
 */
#include "muse.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "core/error.h"
#include "model/model.h"

#define DEFAULT_PREFILL_ROWS 32 /* muse.h: 0 in the params means these */
#define DEFAULT_WAIT_US 20000

struct req {
    int32_t seq, n, done, first_row;
    const int32_t *ids;
    const float *const *rows;
    float *logits;
    float *features;   /* [n][feature floats] or NULL */
    int64_t t_us;      /* when it began waiting (again, after a step that took only part of it) */
    bool finished;
    bool planned;      /* taken into the step being planned */
    muse_status status;
    struct muse_error err;
    struct req *next;
};

struct take {
    struct req *r;
    int32_t from, k; /* rows r->from .. from+k-1 of the request go in this step */
};

struct muse_stepper {
    struct muse_context *ctx;      /* borrowed */
    struct muse_stepper_params p;
    int32_t n_seq, n_vocab, n_ctx, n_want_cap;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a step ended, a sequence left, or a request arrived */
    struct req *head;              /* waiting requests, oldest first */
    bool *joined;                  /* [n_seq] */
    int32_t n_joined;
    bool running;
    /* the running step holds a chunk of a prompt it does not finish, or a lone prompt's wide chunk
     * (plan): a sequence with no rows in it that joins or sends a request stops it (preempt, read
     * by the context's abort callback) */
    bool preemptible;
    bool *in_step;                 /* [n_seq] the running step's sequences */
    atomic_int preempt;
    /* the running step's batch (its runner's alone) */
    int32_t *tok, *seq;
    const float **rowp;
    int8_t *want;
    float *logits;                 /* [n_want_cap][n_vocab] */
    struct take *take;
    struct muse_stepper_stats stats;
};

struct muse_stepper_params muse_stepper_default_params(void) {
    return (struct muse_stepper_params){.n_rows_step = 0, .n_prefill_rows = DEFAULT_PREFILL_ROWS, .wait_us = DEFAULT_WAIT_US};
}

static int abort_cb(void *user) { return atomic_load_explicit(&((struct muse_stepper *)user)->preempt, memory_order_relaxed); }

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void muse_stepper_free(struct muse_stepper *st) {
    if (!st) return;
    muse_context_set_abort(st->ctx, NULL, NULL);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st->joined);
    free(st->in_step);
    free(st->tok);
    free(st->seq);
    free(st->rowp);
    free(st->want);
    free(st->logits);
    free(st->take);
    free(st);
}

muse_status muse_stepper_create(struct muse_context *ctx, struct muse_stepper_params p, struct muse_stepper **out,
                                struct muse_error *err) {
    *out = NULL;
    if (p.n_rows_step < 0 || p.n_prefill_rows < 0 || p.wait_us < 0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad stepper parameters (rows %d, prefill rows %d, wait %d us)",
                              p.n_rows_step, p.n_prefill_rows, p.wait_us);
    const int32_t n_batch = (int32_t)muse_context_n_batch(ctx);
    if (p.n_rows_step == 0 || p.n_rows_step > n_batch) p.n_rows_step = n_batch;
    if (p.n_prefill_rows == 0) p.n_prefill_rows = DEFAULT_PREFILL_ROWS;
    if (p.wait_us == 0) p.wait_us = DEFAULT_WAIT_US;
    struct muse_stepper *st = calloc(1, sizeof *st);
    if (!st) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    st->ctx = ctx;
    st->p = p;
    st->n_seq = (int32_t)muse_context_n_seq_max(ctx);
    st->n_vocab = muse_model_n_vocab(ctx->model);
    st->n_ctx = (int32_t)muse_context_n_ctx(ctx);
    /* logits rows per step: one per sequence (their decode rows) and some for a request that wants
     * every row's (a verify batch): such a request is fed in pieces that fit */
    st->n_want_cap = st->n_seq + 16 < p.n_rows_step ? st->n_seq + 16 : p.n_rows_step;
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);
    const size_t nr = (size_t)p.n_rows_step;
    st->joined = calloc((size_t)st->n_seq, sizeof *st->joined);
    st->in_step = calloc((size_t)st->n_seq, sizeof *st->in_step);
    st->tok = malloc(nr * sizeof *st->tok);
    st->seq = malloc(nr * sizeof *st->seq);
    st->rowp = malloc(nr * sizeof *st->rowp);
    st->want = malloc(nr * sizeof *st->want);
    st->take = malloc((size_t)st->n_seq * sizeof *st->take);
    st->logits = malloc((size_t)st->n_want_cap * (size_t)st->n_vocab * sizeof *st->logits);
    if (!st->joined || !st->in_step || !st->tok || !st->seq || !st->rowp || !st->want || !st->take || !st->logits) {
        muse_stepper_free(st);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the batch stepper");
    }
    muse_context_set_abort(ctx, abort_cb, st);
    *out = st;
    return MUSE_OK;
}

struct muse_context *muse_stepper_context(const struct muse_stepper *st) { return st->ctx; }

/* Under mu: seq has no rows in the running step and wants some - stop that step if it may be. */
static void stop_for(struct muse_stepper *st, int32_t seq) {
    if (st->running && st->preemptible && !st->in_step[seq]) atomic_store(&st->preempt, 1);
}

void muse_stepper_join(struct muse_stepper *st, int32_t seq) {
    if (seq < 0 || seq >= st->n_seq) return;
    pthread_mutex_lock(&st->mu);
    if (!st->joined[seq]) st->joined[seq] = true, st->n_joined++;
    stop_for(st, seq); /* its rows come soon */
    pthread_mutex_unlock(&st->mu);
}

int muse_stepper_leave(struct muse_stepper *st, int32_t seq) {
    if (seq < 0 || seq >= st->n_seq) return false;
    pthread_mutex_lock(&st->mu);
    const bool was = st->joined[seq];
    if (was) st->joined[seq] = false, st->n_joined--;
    pthread_cond_broadcast(&st->cv); /* the others may now all be waiting */
    pthread_mutex_unlock(&st->mu);
    return was;
}

struct muse_stepper_stats muse_stepper_stats(struct muse_stepper *st) {
    pthread_mutex_lock(&st->mu);
    struct muse_stepper_stats s = st->stats;
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* Under mu: may a step start now? *deadline: when the oldest request's wait runs out. */
static bool ready(const struct muse_stepper *st, int64_t now, int64_t *deadline, bool *timeout) {
    int32_t n_wait_joined = 0;
    int64_t oldest = INT64_MAX;
    bool loose = false; /* a request of a sequence that has not joined waits for nobody */
    for (const struct req *r = st->head; r; r = r->next) {
        if (st->joined[r->seq]) n_wait_joined++;
        else loose = true;
        if (r->t_us < oldest) oldest = r->t_us;
    }
    *deadline = oldest == INT64_MAX ? INT64_MAX : oldest + st->p.wait_us;
    *timeout = false;
    if (!st->head) return false;
    if (loose || n_wait_joined >= st->n_joined) return true;
    return (*timeout = now >= *deadline);
}

/* Under mu: choose the rows of the step (muse.h: decode rows first, then prompt rows, shortest
 * first, capped while other sequences take part; logits rows within the scratch). Returns the
 * number of takes. */
static int32_t plan(struct muse_stepper *st, int32_t *n_rows, bool *chunk) {
    int32_t rows_left = st->p.n_rows_step, want_left = st->n_want_cap, n_take = 0, n_prompts = 0;
    for (struct req *r = st->head; r && rows_left > 0; r = r->next) {
        if (r->n - r->done != 1) {
            n_prompts++;
            continue;
        }
        const bool want = r->logits && r->done >= r->first_row;
        if (want && want_left == 0) continue;
        st->take[n_take++] = (struct take){r, r->done, 1};
        r->planned = true;
        rows_left--, want_left -= want;
    }
    /* alone, a prompt takes 4x the rows (a newcomer stops such a step: run_step) */
    const bool others = n_take > 0 || n_prompts > 1 || st->n_joined > 1;
    const int64_t want_cap = (int64_t)st->p.n_prefill_rows * (others ? 1 : 4);
    int32_t cap = want_cap < rows_left ? (int32_t)want_cap : rows_left;
    /* prompts by rows left, fewest first: a short prompt is not queued behind a long one, and a step
     * that finishes a prompt takes no rows of one it cannot finish (that prompt's time to its first
     * token is then one short step) */
    bool finished_one = false;
    for (int32_t k = 0; k < n_prompts && cap > 0; k++) {
        struct req *r = NULL;
        for (struct req *q = st->head; q; q = q->next)
            if (q->n - q->done >= 2 && !q->planned && (!r || q->n - q->done < r->n - r->done)) r = q;
        if (!r || (finished_one && r->n - r->done > cap)) break;
        int32_t n = r->n - r->done < cap ? r->n - r->done : cap;
        if (r->logits) { /* the rows that want logits must fit the scratch */
            const int32_t w0 = r->first_row > r->done ? r->first_row : r->done;
            if (r->done + n - w0 > want_left) n = w0 - r->done + want_left;
            if (n < 1) n = 0;
            want_left -= r->done + n > w0 ? r->done + n - w0 : 0;
        }
        finished_one |= r->done + n == r->n;
        st->take[n_take++] = (struct take){r, r->done, n}; /* n 0: none this step */
        r->planned = true;
        cap -= n, rows_left -= n;
    }
    *n_rows = st->p.n_rows_step - rows_left;
    /* a step may be stopped for a newcomer when it holds rows of a prompt it does not finish, or a
     * lone prompt's wide chunk (more than n_prefill_rows rows: a caller that feeds a long prompt in
     * parts, as the server does 256 tokens at a time, ends a request every other step there, and
     * that step would make the newcomer wait a whole lone step). Progress: once the newcomer is
     * in, the prompt is no longer alone and its chunks are capped at n_prefill_rows, so a step
     * that finishes a request is stopped at most once per sequence that joins. */
    *chunk = false;
    for (int32_t t = 0; t < n_take; t++) {
        const struct take *tk = &st->take[t];
        *chunk |= tk->k >= 2 && (tk->from + tk->k < tk->r->n || tk->k > st->p.n_prefill_rows);
    }
    return n_take;
}

static void unlink_req(struct muse_stepper *st, struct req *r) {
    for (struct req **pp = &st->head; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

/* Under mu, with a step ready: plan it, run it without the lock, hand out the results. */
static void run_step(struct muse_stepper *st, bool timed_out) {
    int32_t n_rows = 0;
    bool chunk = false;
    const int32_t n_take = plan(st, &n_rows, &chunk);
    MUSE_ASSERT(n_take > 0 && n_rows > 0); /* some request always has a row that fits */
    st->running = true;
    st->preemptible = chunk;
    for (int32_t t = 0; t < n_take; t++) st->in_step[st->take[t].r->seq] = true;
    atomic_store(&st->preempt, 0);
    int32_t b = 0;
    for (int32_t t = 0; t < n_take; t++) {
        const struct take *tk = &st->take[t];
        const struct req *r = tk->r;
        for (int32_t j = tk->from; j < tk->from + tk->k; j++, b++) {
            st->rowp[b] = r->rows ? r->rows[j] : NULL;
            st->tok[b] = st->rowp[b] ? 0 : r->ids[j];
            st->seq[b] = r->seq;
            st->want[b] = r->logits && j >= r->first_row;
        }
    }
    pthread_mutex_unlock(&st->mu);
    struct muse_batch batch = {.n_tokens = n_rows, .token = st->tok, .seq_id = st->seq, .logits = st->want, .embd = st->rowp};
    struct muse_error err = {0};
    const muse_status status = muse_decode(st->ctx, &batch, st->logits, &err);
    pthread_mutex_lock(&st->mu);
    st->preemptible = false;
    for (int32_t t = 0; t < n_take; t++) st->in_step[st->take[t].r->seq] = false;
    if (status == MUSE_ERR_CANCELLED && atomic_load(&st->preempt)) { /* stopped for a newcomer: as if not run */
        for (int32_t t = 0; t < n_take; t++) st->take[t].r->planned = false;
        st->stats.n_preempted++;
        st->running = false;
        pthread_cond_broadcast(&st->cv);
        return;
    }
    const int64_t now = now_us();
    int32_t o = 0, n_seqs = 0, row = 0; /* the next logits row of the scratch; sequences in the step; batch row */
    for (int32_t t = 0; t < n_take; t++) {
        const struct take *tk = &st->take[t];
        struct req *r = tk->r;
        r->planned = false;
        n_seqs += tk->k > 0;
        if (status == MUSE_OK && r->features)
            muse_context_copy_features(st->ctx, row, tk->k,
                                       r->features + (size_t)tk->from * (size_t)st->ctx->n_features * (size_t)st->ctx->model->hp.n_embd);
        row += tk->k;
        if (status == MUSE_OK) {
            for (int32_t j = tk->from; j < tk->from + tk->k; j++)
                if (r->logits && j >= r->first_row)
                    memcpy(r->logits + (size_t)(j - r->first_row) * (size_t)st->n_vocab,
                           st->logits + (size_t)o++ * (size_t)st->n_vocab, sizeof(float) * (size_t)st->n_vocab);
            r->done += tk->k;
            r->t_us = now; /* what is left waits afresh for the others' next tokens */
            st->stats.n_split += r->done < r->n;
        }
        if (status != MUSE_OK || r->done == r->n) {
            r->status = status;
            if (status != MUSE_OK) r->err = err;
            r->finished = true;
            unlink_req(st, r);
        }
    }
    st->stats.n_steps++;
    st->stats.n_rows += (uint64_t)n_rows;
    st->stats.n_multi += n_seqs > 1;
    st->stats.n_timeouts += timed_out;
    if (n_seqs > st->stats.max_seqs) st->stats.max_seqs = n_seqs;
    st->running = false;
    pthread_cond_broadcast(&st->cv);
}

muse_status muse_stepper_eval(struct muse_stepper *st, int32_t seq, const int32_t *ids, const float *const *rows,
                              int32_t n, float *logits, int32_t first_row, float *features, struct muse_error *err) {
    if (seq < 0 || seq >= st->n_seq)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "sequence id %d outside 0..%d", seq, st->n_seq - 1);
    if (n < 1 || !ids) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to evaluate (0 tokens)");
    if (first_row < 0 || first_row > n)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "first logits row %d outside 0..%d", first_row, n);
    for (int32_t i = 0; i < n; i++)
        if ((!rows || !rows[i]) && (ids[i] < 0 || ids[i] >= st->n_vocab))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "token id %d at index %d is out of range (vocabulary %d)",
                                  ids[i], i, st->n_vocab);
    /* the sequence is the caller's: no step holds it, so its n_past is stable here */
    const int32_t n_past = muse_seq_n_past(st->ctx, seq);
    if ((int64_t)n_past + n > st->n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT,
                              "%d tokens after %d already in the context exceed the context size %d (use a larger --ctx-size)",
                              n, n_past, st->n_ctx);
    muse_status rs = muse_seq_reserve(st->ctx, seq, n_past + n, err); /* a paged cache's cells: this request's alone */
    if (rs != MUSE_OK) return rs;
    if (features && !st->ctx->n_features)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "feature rows asked of a context that writes none");
    struct req r = {.seq = seq, .n = n, .first_row = logits ? first_row : n, .ids = ids, .rows = rows,
                    .logits = first_row < n ? logits : NULL, .features = features};
    pthread_mutex_lock(&st->mu);
    r.t_us = now_us();
    struct req **tail = &st->head;
    while (*tail) tail = &(*tail)->next;
    *tail = &r;
    stop_for(st, seq);
    while (!r.finished) {
        int64_t deadline;
        bool timeout;
        if (!st->running && ready(st, now_us(), &deadline, &timeout)) {
            run_step(st, timeout);
            continue;
        }
        if (st->running || deadline == INT64_MAX) {
            pthread_cond_wait(&st->cv, &st->mu);
        } else {
            struct timespec ts = {.tv_sec = deadline / 1000000, .tv_nsec = (long)(deadline % 1000000) * 1000};
            pthread_cond_timedwait(&st->cv, &st->mu, &ts);
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (r.status != MUSE_OK && err) *err = r.err;
    return r.status;
}
