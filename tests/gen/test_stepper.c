/*
 * test_stepper.c - continuous batching (src/gen/stepper.c): four threads, each driving a session
 * on its own sequence of one shared context through one stepper, run a random schedule - requests
 * that arrive and leave (join / leave), prompts of random lengths that share prefixes with the
 * thread's previous request (prefix reuse, rollbacks past the sliding-window rings: checkpoints and
 * re-prefills), decode steps cut off at random (a cancelled request), random pauses, an image-like
 * request with embedding rows, and evaluations that would outgrow the context (refused, nothing
 * changed), all on a paged KV pool smaller than the sequences' contexts together (an evaluation the
 * pool cannot hold is refused, nothing evaluated; that thread then clears its sequence, giving its
 * cells back, as the server evicts). Every evaluation's logits are recorded; afterwards each thread's operations are
 * replayed on a context of its own without a stepper, and every logits row must be equal bit for
 * bit (the exact kernels: MUSE_CPU=exact). Steps must have held several sequences at once (the
 * first one all four: they join before a barrier), prompt rows must have been split across steps
 * (a prefill cap of 5 rows while others decode), and a waiting request of a sequence that never
 * joined must not wait for anybody. On the ref backend (1 thread) and the CPU backend (2 threads).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/session.h"
#include "model/model.h"
#include "model/synth_fixture.h"
#include "test.h"

#define N_SEQ 4
#define N_CTX 96
#define N_BATCH 16
#define MAX_OPS 400

enum op_kind { OP_KEEP, OP_EVAL, OP_EVAL_ROWS, OP_CKPT, OP_CLEAR, OP_TOO_LONG };

struct op {
    enum op_kind kind;
    int32_t n;          /* KEEP: positions asked; EVAL: tokens */
    int32_t kept;       /* KEEP: what the session kept */
    int32_t *ids;       /* EVAL: [n] */
    float *logits;      /* EVAL: the last row's logits */
};

struct worker {
    int32_t seq;
    uint32_t rng;
    struct muse_session *kv;
    struct muse_stepper *st;
    pthread_barrier_t *bar;
    struct op ops[MAX_OPS];
    int n_ops;
    const float *last;  /* the logits of the last evaluation */
    int pool_full;      /* evaluations the shared KV pool could not hold (the request then ends) */
    bool req_over;      /* this request hit a full pool */
    bool failed;
    char why[256];
};

static int32_t g_vocab;
static int64_t g_embd;
static float *g_rows; /* [4][n_embd]: the "image" rows */

static uint32_t rnd(struct worker *w, uint32_t n) {
    w->rng = w->rng * 1103515245u + 12345u;
    return (w->rng >> 8) % n;
}

static struct op *add(struct worker *w, enum op_kind k, int32_t n) {
    if (w->n_ops == MAX_OPS) return NULL;
    struct op *o = &w->ops[w->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = k, o->n = n;
    return o;
}

static bool eval(struct worker *w, const int32_t *ids, int32_t n, bool rows) {
    struct op *o = add(w, rows ? OP_EVAL_ROWS : OP_EVAL, n);
    if (!o) return false;
    o->ids = malloc(sizeof *o->ids * (size_t)n);
    o->logits = malloc(sizeof(float) * (size_t)g_vocab);
    memcpy(o->ids, ids, sizeof *ids * (size_t)n);
    struct muse_error err = {0};
    muse_status st;
    if (rows) {
        const float *r[8] = {0};
        for (int32_t i = 0; i < n; i++) r[i] = ids[i] < 0 ? g_rows + (size_t)(-ids[i] - 1) * g_embd : NULL;
        st = muse_session_eval_mixed(w->kv, ids, r, n, o->logits, 0, &err);
    } else {
        st = muse_session_eval(w->kv, ids, n, o->logits, 0, &err);
    }
    if (st == MUSE_ERR_CONTEXT && strstr(err.msg, "KV pool")) { /* refused, nothing evaluated: the request ends */
        free(o->ids), free(o->logits);
        w->n_ops--;
        w->pool_full++;
        w->req_over = true;
        return false;
    }
    if (st != MUSE_OK) {
        w->failed = true;
        snprintf(w->why, sizeof w->why, "sequence %d: eval of %d: %.200s", w->seq, n, err.msg);
    }
    w->last = o->logits;
    return st == MUSE_OK;
}

static int32_t argmax(const float *x) {
    int32_t b = 0;
    for (int32_t i = 1; i < g_vocab; i++) b = x[i] > x[b] ? i : b;
    return b;
}

static void *drive(void *arg) {
    struct worker *w = arg;
    int32_t prompt[N_CTX], prev[N_CTX], n_prev = 0;
    muse_stepper_join(w->st, w->seq);
    pthread_barrier_wait(w->bar);
    for (int req = 0; req < 6 && !w->failed; req++) {
        if (req) muse_stepper_join(w->st, w->seq);
        /* a prompt: part of the previous request's tokens (prefix reuse, rollbacks), then new ones */
        int32_t n_keep = n_prev ? (int32_t)rnd(w, (uint32_t)n_prev + 1) : 0, n = n_keep + 1 + (int32_t)rnd(w, 30);
        memcpy(prompt, prev, sizeof *prompt * (size_t)n_keep);
        for (int32_t i = n_keep; i < n; i++) prompt[i] = (int32_t)rnd(w, (uint32_t)g_vocab);
        struct op *o = add(w, OP_KEEP, muse_session_reuse_len(muse_session_tokens(w->kv), muse_session_n_past(w->kv), prompt, n));
        if (!o) break;
        o->kept = muse_session_keep(w->kv, o->n).n_kept;
        for (int32_t at = o->kept; at < n && !w->failed;) { /* the rest in chunks of up to 12 */
            int32_t k = 1 + (int32_t)rnd(w, 12);
            if (k > n - at) k = n - at;
            if (!eval(w, prompt + at, k, false)) break;
            at += k;
        }
        if (req == 2 && !w->failed && !w->req_over && muse_session_n_past(w->kv) + 6 < N_CTX) { /* "image" rows */
            int32_t ids[6] = {-1, -2, -3, -4, prompt[0], -1};
            eval(w, ids, 6, true);
        }
        if (w->failed || (!w->req_over && !add(w, OP_CKPT, 0))) break;
        if (!w->req_over) muse_session_checkpoint(w->kv, NULL);
        /* decode until a random cut (the request cancelled or done), pausing now and then */
        const int32_t steps = 1 + (int32_t)rnd(w, 14);
        for (int32_t k = 0; k < steps && muse_session_n_past(w->kv) < N_CTX && !w->failed && !w->req_over; k++) {
            int32_t t = argmax(w->last);
            if (rnd(w, 4) == 0) usleep(rnd(w, 400));
            if (!eval(w, &t, 1, false)) break;
        }
        if (w->req_over) { /* the pool was full: this sequence gives its cells back (as a server evicts) */
            if (!add(w, OP_CLEAR, 0)) break;
            muse_session_clear(w->kv);
            w->req_over = false;
        }
        /* one that would outgrow the context: refused, nothing changed */
        if (!w->failed && rnd(w, 3) == 0) {
            int32_t big[N_CTX + 1] = {0}; /* np may be 0 */
            const int32_t np = muse_session_n_past(w->kv), nb = N_CTX - np + 1;
            struct muse_error err = {0};
            const bool refused = muse_session_eval(w->kv, big, nb, NULL, 0, &err) == MUSE_ERR_CONTEXT;
            if (!refused || muse_session_n_past(w->kv) != np) {
                w->failed = true;
                snprintf(w->why, sizeof w->why, "sequence %d: an eval past the context was not refused cleanly", w->seq);
            }
            add(w, OP_TOO_LONG, nb);
        }
        n_prev = muse_session_n_past(w->kv);
        memcpy(prev, muse_session_tokens(w->kv), sizeof *prev * (size_t)n_prev);
        for (int32_t i = 0; i < n_prev; i++)
            if (prev[i] < 0) n_prev = i; /* the next prompt's tokens are text only */
        muse_stepper_leave(w->st, w->seq);
        if (rnd(w, 2)) usleep(rnd(w, 2000));
    }
    muse_stepper_leave(w->st, w->seq);
    return NULL;
}

/* Replay w's operations on a context of its own (no stepper, sequence 0): every logits row equal. */
static void replay(struct muse_model *m, struct muse_context_params cp, struct worker *w, const char *what) {
    struct muse_context *ctx = NULL;
    struct muse_session *kv = NULL;
    struct muse_error err;
    cp.n_seq_max = 1;
    cp.n_ctx_pool = 0; /* plain KV: the shared context's paged cache must give the same */
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK ||
        muse_session_create(ctx, muse_session_default_params(), &kv, &err) != MUSE_OK) {
        TEST_CONDF(false, "solo context: %s", err.msg);
        muse_context_free(ctx);
        return;
    }
    float *lg = malloc(sizeof(float) * (size_t)g_vocab);
    int bad = 0, n_eval = 0;
    for (int i = 0; i < w->n_ops && !bad; i++) {
        struct op *o = &w->ops[i];
        if (o->kind == OP_KEEP) {
            const int32_t kept = muse_session_keep(kv, o->n).n_kept;
            if (kept != o->kept) bad = 1, fprintf(stderr, "%s seq %d op %d: kept %d, solo %d\n", what, w->seq, i, o->kept, kept);
        } else if (o->kind == OP_CKPT) {
            muse_session_checkpoint(kv, NULL);
        } else if (o->kind == OP_CLEAR) {
            muse_session_clear(kv);
        } else if (o->kind == OP_TOO_LONG) {
            continue;
        } else {
            const float *r[8] = {0};
            for (int32_t j = 0; o->kind == OP_EVAL_ROWS && j < o->n; j++)
                r[j] = o->ids[j] < 0 ? g_rows + (size_t)(-o->ids[j] - 1) * g_embd : NULL;
            muse_status st = o->kind == OP_EVAL_ROWS ? muse_session_eval_mixed(kv, o->ids, r, o->n, lg, 0, &err)
                                                     : muse_session_eval(kv, o->ids, o->n, lg, 0, &err);
            n_eval++;
            if (st != MUSE_OK || memcmp(lg, o->logits, sizeof(float) * (size_t)g_vocab))
                bad = 1, fprintf(stderr, "%s seq %d op %d (eval of %d): differs from the solo run\n", what, w->seq, i, o->n);
        }
    }
    TEST_CONDF(!bad && n_eval > 5, "%s: sequence %d: %d evaluations equal to its solo run", what, w->seq, n_eval);
    free(lg);
    muse_session_free(kv);
    muse_context_free(ctx);
}

static void run(struct muse_model *m, const char *backend, uint32_t threads) {
    char what[64];
    snprintf(what, sizeof what, "%s t%u", backend, threads);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = N_BATCH;
    cp.n_threads = threads;
    cp.backend = backend;
    cp.n_seq_max = N_SEQ + 1; /* the last one never joins */
    cp.n_ctx_pool = 160;      /* a paged KV pool smaller than 5 x 96: evaluations it cannot hold are refused */
    struct muse_context *ctx = NULL;
    struct muse_stepper *st = NULL;
    struct muse_error err;
    struct muse_stepper_params sp = muse_stepper_default_params();
    sp.n_prefill_rows = 5;
    sp.wait_us = 2000000; /* a joined thread always comes back long before: every step waits for all */
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK || muse_stepper_create(ctx, sp, &st, &err) != MUSE_OK) {
        TEST_CONDF(false, "%s: shared context: %s", what, err.msg);
        muse_context_free(ctx);
        return;
    }
    struct muse_stepper_params badp = sp;
    badp.wait_us = -1;
    struct muse_stepper *bad = NULL;
    TEST_COND("bad stepper parameters refused", muse_stepper_create(ctx, badp, &bad, &err) == MUSE_ERR_INVALID_ARG && !bad);
    struct muse_session_params np = muse_session_default_params();
    np.seq = 1;
    struct muse_session *nokv = NULL;
    TEST_COND("a session on sequence 1 without a stepper is refused",
              muse_session_create(ctx, np, &nokv, &err) == MUSE_ERR_INVALID_ARG && !nokv);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, N_SEQ);
    struct worker *w = calloc(N_SEQ, sizeof *w);
    for (int s = 0; s < N_SEQ; s++) {
        struct muse_session_params p = muse_session_default_params();
        p.seq = s;
        p.stepper = st;
        w[s] = (struct worker){.seq = s, .rng = 1234u + 77u * (uint32_t)s + threads, .st = st, .bar = &bar};
        if (muse_session_create(ctx, p, &w[s].kv, &err) != MUSE_OK) TEST_CONDF(false, "session %d: %s", s, err.msg);
    }
    pthread_t th[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) pthread_create(&th[s], NULL, drive, &w[s]);
    for (int s = 0; s < N_SEQ; s++) pthread_join(th[s], NULL);
    const struct muse_stepper_stats stats = muse_stepper_stats(st);
    int pool_full = 0;
    for (int s = 0; s < N_SEQ; s++) pool_full += w[s].pool_full;
    TEST_CONDF(stats.max_seqs == N_SEQ && stats.n_multi > 0 && stats.n_split > 0,
               "%s: steps held several sequences (%llu steps, %llu of them shared, at most %d sequences, %llu prompt "
               "splits; %d evaluations refused by the full pool)", what, (unsigned long long)stats.n_steps,
               (unsigned long long)stats.n_multi, stats.max_seqs, (unsigned long long)stats.n_split, pool_full);
    printf("%s: %llu steps, %llu shared, %llu prompt splits, %llu stopped for a newcomer, %d evaluations refused by the full pool\n",
           what, (unsigned long long)stats.n_steps, (unsigned long long)stats.n_multi, (unsigned long long)stats.n_split,
           (unsigned long long)stats.n_preempted, pool_full);
    int64_t used = -1, total = -1;
    muse_context_kv_cells(ctx, &used, &total);
    TEST_CONDF(total == 160 && used >= 0 && used <= 160, "%s: the pool %lld of %lld", what, (long long)used, (long long)total);
    /* a sequence that never joined is evaluated at once, with nobody joined and waiting (the
     * others' cells given back first, so that the pool has room) */
    for (int s = 0; s < N_SEQ; s++) muse_session_clear(w[s].kv);
    struct muse_session_params lp = muse_session_default_params();
    lp.seq = N_SEQ;
    lp.stepper = st;
    struct muse_session *loose = NULL;
    int32_t t3[3] = {1, 2, 3};
    muse_stepper_join(st, 0); /* joined but never coming: must not delay a loose request */
    const uint64_t timeouts = muse_stepper_stats(st).n_timeouts;
    TEST_COND("a loose sequence is not kept waiting",
              muse_session_create(ctx, lp, &loose, &err) == MUSE_OK &&
                  muse_session_eval(loose, t3, 3, NULL, 0, &err) == MUSE_OK && muse_stepper_stats(st).n_timeouts == timeouts);
    muse_stepper_leave(st, 0);
    muse_session_free(loose);
    for (int s = 0; s < N_SEQ; s++) {
        TEST_CONDF(!w[s].failed, "%s: %s", what, w[s].why);
        if (!w[s].failed) replay(m, cp, &w[s], what);
    }
    for (int s = 0; s < N_SEQ; s++) {
        for (int i = 0; i < w[s].n_ops; i++) free(w[s].ops[i].ids), free(w[s].ops[i].logits);
        muse_session_free(w[s].kv);
    }
    free(w);
    pthread_barrier_destroy(&bar);
    muse_stepper_free(st);
    muse_context_free(ctx);
}

/* Feature rows through the stepper (the drafter's input when speculative slots are batched): two
 * threads on sequences 0 and 1 of a shared context with features set get, for every position, the
 * feature rows a context of their own gives (exact kernels), whatever shares their steps. */
struct feat_job {
    struct muse_session *kv;
    const int32_t *t;
    float *f;
    muse_status st;
};

static void *feat_drive(void *arg) {
    struct feat_job *j = arg;
    struct muse_error err;
    const int64_t F = 2 * g_embd;
    j->st = muse_session_eval_features(j->kv, j->t, 9, NULL, 0, j->f, &err);
    for (int32_t k = 9; k < 14 && !j->st; k++) j->st = muse_session_eval_features(j->kv, j->t + k, 1, NULL, 0, j->f + k * F, &err);
    return NULL;
}

static void test_features(struct muse_model *m) {
    static const int32_t layers[2] = {1, 4};
    const int64_t F = 2 * g_embd;
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 32;
    cp.n_batch = 16;
    cp.n_threads = 2;
    struct muse_context *solo = NULL, *ctx = NULL;
    struct muse_stepper *st = NULL;
    struct muse_error err;
    int32_t t[2][14];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 14; i++) t[s][i] = (int32_t)((s * 31 + i * 17 + 3) % (g_vocab - 1));
    float *want = malloc(sizeof(float) * (size_t)(14 * F)), *got[2];
    got[0] = malloc(sizeof(float) * (size_t)(14 * F)), got[1] = malloc(sizeof(float) * (size_t)(14 * F));
    bool ok = muse_context_create(m, cp, &solo, &err) == MUSE_OK && muse_context_set_features(solo, layers, 2, &err) == MUSE_OK;
    cp.n_seq_max = 2;
    ok = ok && muse_context_create(m, cp, &ctx, &err) == MUSE_OK && muse_context_set_features(ctx, layers, 2, &err) == MUSE_OK &&
         muse_stepper_create(ctx, muse_stepper_default_params(), &st, &err) == MUSE_OK;
    TEST_CONDF(ok, "feature contexts: %s", ok ? "" : err.msg);
    struct feat_job jobs[2] = {{0}};
    for (int s = 0; ok && s < 2; s++) {
        struct muse_session_params p = muse_session_default_params();
        p.seq = s, p.stepper = st;
        ok = muse_session_create(ctx, p, &jobs[s].kv, &err) == MUSE_OK;
        jobs[s].t = t[s], jobs[s].f = got[s];
        muse_stepper_join(st, s);
    }
    pthread_t th[2];
    for (int s = 0; ok && s < 2; s++) pthread_create(&th[s], NULL, feat_drive, &jobs[s]);
    for (int s = 0; ok && s < 2; s++) pthread_join(th[s], NULL);
    for (int s = 0; ok && s < 2; s++) {
        muse_stepper_leave(st, s);
        TEST_COND("batched evaluations with features", jobs[s].st == MUSE_OK);
        muse_kv_clear(solo);
        struct muse_session *kv = NULL;
        ok = muse_session_create(solo, muse_session_default_params(), &kv, &err) == MUSE_OK &&
             muse_session_eval_features(kv, t[s], 9, NULL, 0, want, &err) == MUSE_OK;
        for (int32_t k = 9; k < 14 && ok; k++) ok = muse_session_eval_features(kv, t[s] + k, 1, NULL, 0, want + k * F, &err) == MUSE_OK;
        muse_session_free(kv);
        TEST_CONDF(ok && !memcmp(want, got[s], sizeof(float) * (size_t)(14 * F)),
                   "sequence %d: the feature rows through the stepper equal a context of its own", s);
    }
    TEST_COND("a context without features refuses", ok && muse_context_set_features(ctx, NULL, 0, &err) == MUSE_OK &&
                                                        muse_session_eval_features(jobs[0].kv, t[0], 1, NULL, 0, got[0], &err) ==
                                                            MUSE_ERR_INVALID_ARG);
    for (int s = 0; s < 2; s++) muse_session_free(jobs[s].kv);
    free(want), free(got[0]), free(got[1]);
    muse_stepper_free(st);
    muse_context_free(ctx);
    muse_context_free(solo);
}

/* ---- preemption: a lone prompt's step stopped for a newcomer ------------------------------------
 * First muse_decode itself: an abort callback that fires at its third poll stops a 16-row batch
 * (MUSE_ERR_CANCELLED, no position advanced); the same batch then, or another one, gives what a
 * context that never stopped gives, bit for bit, with the sliding-window rings wrapped (window 8,
 * positions past 40). Then the stepper: sequence 0's 40-token prompt runs alone in 16-row steps
 * (n_prefill_rows 4); the capture hook holds the first such step inside its forward until sequence
 * 1's request has arrived, so the stop is forced, not timed; both sequences' logits equal their
 * solo runs and the step counts one preemption. The same with a 16-token prompt, whose one lone
 * step ends its request (as every other step of the server's 256-token prompt parts does): a wide
 * chunk is stopped too. */
struct hold {
    struct muse_context *ctx;
    atomic_int inside, held;
};

static void hold_capture(void *user, int32_t il, const int32_t *pos, int32_t n_tokens, const float *x) {
    struct hold *h = user;
    if (il != 1 || n_tokens < 16 || atomic_exchange(&h->held, 1)) return; /* the first lone step, once */
    atomic_store(&h->inside, 1);
    for (int i = 0; i < 10000 && !(h->ctx->abort_fn && h->ctx->abort_fn(h->ctx->abort_user)); i++) usleep(1000);
}

static int polls_left;
static int abort_third(void *user) { return --polls_left <= 0; }

struct pre_job {
    struct muse_session *kv;
    const int32_t *t;
    int32_t n;
    float *logits;
    muse_status st;
};

static void *pre_drive(void *arg) {
    struct pre_job *j = arg;
    struct muse_error err;
    j->st = muse_session_eval(j->kv, j->t, j->n, j->logits, 0, &err);
    return NULL;
}

/* logits of the last row of t[0..n) evaluated alone (a fresh context, the exact kernels) */
static bool solo_logits(struct muse_model *m, struct muse_context_params cp, const int32_t *t, int32_t n, float *out) {
    struct muse_context *c = NULL;
    struct muse_error err;
    cp.n_seq_max = 1, cp.capture = NULL;
    bool ok = muse_context_create(m, cp, &c, &err) == MUSE_OK && muse_eval(c, t, n, out, 0, &err) == MUSE_OK;
    muse_context_free(c);
    return ok;
}

static void preempt_stepper(struct muse_model *m, struct muse_context_params cp, int32_t t[2][64], int32_t n0, float *want,
                            float *got, float *got1);

static void test_preempt(struct muse_model *m) {
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 96, cp.n_batch = 16, cp.n_threads = 2;
    struct muse_error err;
    int32_t t[2][64];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 64; i++) t[s][i] = (int32_t)((s * 29 + i * 13 + 5) % (g_vocab - 1));
    const size_t V = (size_t)g_vocab;
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V), *got1 = malloc(sizeof(float) * V);

    /* muse_decode stopped at its third poll */
    struct muse_context *c = NULL;
    bool ok = muse_context_create(m, cp, &c, &err) == MUSE_OK && muse_eval(c, t[0], 40, NULL, 0, &err) == MUSE_OK;
    TEST_CONDF(ok, "preempt context: %s", ok ? "" : err.msg);
    int8_t want_last[16] = {0};
    want_last[15] = 1;
    const struct muse_batch b = {.n_tokens = 16, .token = t[0] + 40, .logits = want_last};
    polls_left = 3;
    muse_context_set_abort(c, abort_third, NULL);
    const muse_status st = ok ? muse_decode(c, &b, got, &err) : MUSE_ERR_INTERNAL;
    TEST_CONDF(st == MUSE_ERR_CANCELLED && muse_context_n_past(c) == 40,
               "a stopped muse_decode fails with MUSE_ERR_CANCELLED and keeps n_past (%d, %d)", (int)st, muse_context_n_past(c));
    muse_context_set_abort(c, NULL, NULL);
    ok = ok && muse_decode(c, &b, got, &err) == MUSE_OK && solo_logits(m, cp, t[0], 56, want);
    TEST_COND("the stopped batch run again equals a context that never stopped, bit for bit",
              ok && !memcmp(want, got, sizeof(float) * V));
    /* stopped again, then a different batch in its place (another continuation of the first 56) */
    polls_left = 2;
    muse_context_set_abort(c, abort_third, NULL);
    const struct muse_batch b2 = {.n_tokens = 16, .token = t[1], .logits = want_last};
    TEST_COND("stopped again", ok && muse_decode(c, &b2, got, &err) == MUSE_ERR_CANCELLED && muse_context_n_past(c) == 56);
    muse_context_set_abort(c, NULL, NULL);
    const struct muse_batch b3 = {.n_tokens = 5, .token = t[0] + 56};
    ok = ok && muse_decode(c, &b3, got, &err) == MUSE_OK && solo_logits(m, cp, t[0], 61, want);
    TEST_COND("another batch after a stopped one equals a context that never stopped", ok && !memcmp(want, got, sizeof(float) * V));
    muse_context_free(c);

    /* the stepper: a newcomer stops the lone prompt's step (one that leaves rows of the prompt for
     * later, then one that ends it) */
    cp.n_seq_max = 2, cp.capture = hold_capture;
    for (int n0 = 40; n0 >= 16; n0 -= 24)
        preempt_stepper(m, cp, t, n0, want, got, got1);
    free(want), free(got), free(got1);
}

static void preempt_stepper(struct muse_model *m, struct muse_context_params cp, int32_t t[2][64], int32_t n0, float *want,
                            float *got, float *got1) {
    const size_t V = (size_t)g_vocab;
    struct muse_error err;
    struct muse_context *c = NULL;
    struct hold h = {0};
    cp.capture_user = &h;
    struct muse_stepper *stp = NULL;
    struct muse_stepper_params sp = muse_stepper_default_params();
    sp.n_prefill_rows = 4;
    bool ok = muse_context_create(m, cp, &c, &err) == MUSE_OK && muse_stepper_create(c, sp, &stp, &err) == MUSE_OK;
    TEST_CONDF(ok, "preempt stepper: %s", ok ? "" : err.msg);
    h.ctx = c;
    struct pre_job j[2] = {{.t = t[0], .n = n0, .logits = got}, {.t = t[1], .n = 5, .logits = got1}};
    for (int s = 0; ok && s < 2; s++) {
        struct muse_session_params p = muse_session_default_params();
        p.seq = s, p.stepper = stp;
        ok = muse_session_create(c, p, &j[s].kv, &err) == MUSE_OK;
    }
    pthread_t th[2];
    if (ok) {
        muse_stepper_join(stp, 0);
        pthread_create(&th[0], NULL, pre_drive, &j[0]);
        for (int i = 0; i < 10000 && !atomic_load(&h.inside); i++) usleep(1000);
        muse_stepper_join(stp, 1);
        pthread_create(&th[1], NULL, pre_drive, &j[1]);
        pthread_join(th[0], NULL), pthread_join(th[1], NULL);
        muse_stepper_leave(stp, 0), muse_stepper_leave(stp, 1);
        const struct muse_stepper_stats ss = muse_stepper_stats(stp);
        TEST_CONDF(atomic_load(&h.inside) && ss.n_preempted == 1,
                   "%d-token prompt: the lone prompt's step was stopped for the newcomer (%llu)", n0,
                   (unsigned long long)ss.n_preempted);
        TEST_COND("both evaluations succeed", j[0].st == MUSE_OK && j[1].st == MUSE_OK);
        TEST_COND("sequence 0 (stopped, run again) equals its solo run", solo_logits(m, cp, t[0], n0, want) && !memcmp(want, got, sizeof(float) * V));
        TEST_COND("sequence 1 (the newcomer) equals its solo run", solo_logits(m, cp, t[1], 5, want) && !memcmp(want, got1, sizeof(float) * V));
    }
    for (int s = 0; s < 2; s++) muse_session_free(j[s].kv);
    muse_stepper_free(stp);
    muse_context_free(c);
}

int main(void) {
    fixture_exact_kernels();
    char path[128];
    struct muse_model *m = fixture_synth_model("stepper", 4, 8, "*=q8_0", path, sizeof path);
    if (!m) {
        unlink(path);
        return TEST_REPORT();
    }
    g_vocab = muse_model_n_vocab(m);
    g_embd = muse_model_n_embd(m);
    g_rows = malloc(sizeof(float) * 4 * (size_t)g_embd);
    for (int64_t i = 0; i < 4 * g_embd; i++) g_rows[i] = (float)((i * 37) % 101 - 50) / 100.0f;
    run(m, "ref", 1);
    run(m, "cpu", 2);
    test_features(m);
    test_preempt(m);
    free(g_rows);
    muse_model_free(m);
    unlink(path);
    return TEST_REPORT();
}
