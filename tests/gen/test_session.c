/*
 * test_session.c - the session layer (src/gen/session.c) and the KV checkpoints under it
 * (src/model/kv_cache.c), on a small synthetic model (tests/model/model_fixture.h: 4 layers, three
 * of them sliding-window with a window of 4, one full) with batches of 4, so the rings hold 8 cells
 * and wrap after 8 positions. Properties a wrong implementation breaks:
 *   - the pure rules: common prefix, reuse length (always leaves one token to evaluate), the ring's
 *     rollback bound (n_cells - n_swa + 1 after a wrap, anything before);
 *   - rollback after the rings wrapped: evaluate a verify batch of n_batch tokens, keep any prefix
 *     of it, continue: logits bit-identical to never having evaluated the rejected tokens (what
 *     speculative decoding's reject step needs), at every split and at the n_batch + 1 bound;
 *   - a sliding-window miss restores a checkpoint (above the target, then truncates; or the highest
 *     below it) and the continuation equals a cold prefill bit for bit; without a usable checkpoint
 *     it clears and re-prefills; each outcome is reported and counted;
 *   - prefix reuse: a second prompt that extends the first evaluates only its new tokens;
 *   - checkpoints go stale when n_past drops below them, restoring a stale one is refused, and one
 *     may outlive its context; an exact truncate that cannot be served changes nothing.
 * Every property runs on the ref backend and on the default (SIMD) one.
 */
#include <string.h>
#include <unistd.h>

#include "gen/session.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/model_fixture.h"
#include "test.h"

static char path[256];
static int n_vocab;
static const char *g_backend;

#define N_BATCH 4 /* rings of window 4 + batch 4 = 8 cells */

static void make_tokens(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % 297);
    }
}

static struct muse_context *new_ctx(struct muse_model *m) {
    struct muse_context_params cp = muse_context_default_params();
    cp.kv_type = MUSE_KV_TYPE_F32;
    cp.no_repack = 1; /* the exact kernels at every batch size (no flash attention): splits compare bit for bit */
    cp.n_batch = N_BATCH;
    cp.n_ctx = 128;
    cp.backend = g_backend;
    struct muse_context *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(m, cp, &ctx, &err) != MUSE_OK) fprintf(stderr, "context: %s\n", err.msg);
    return ctx;
}

/* Logits [n][n_vocab] of the last n tokens of toks[0..n_all) through a fresh context (the cold reference),
 * the head evaluated as one call, the tail as another (the same split the warm paths use). */
static bool cold(struct muse_model *m, const int32_t *toks, int n_all, int n, float *out) {
    struct muse_context *ctx = new_ctx(m);
    struct muse_error err;
    bool ok = ctx && (n_all == n || muse_eval(ctx, toks, n_all - n, NULL, 0, &err) == MUSE_OK) &&
              muse_eval(ctx, toks + n_all - n, n, out, 1, &err) == MUSE_OK;
    muse_context_free(ctx);
    return ok;
}

static void test_pure_rules(void) {
    int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 9}, c[] = {7};
    TEST_COND("lcp partial", muse_session_common_prefix(a, 5, b, 4) == 3);
    TEST_COND("lcp none", muse_session_common_prefix(a, 5, c, 1) == 0);
    TEST_COND("lcp prefix", muse_session_common_prefix(a, 3, a, 5) == 3);
    TEST_COND("lcp empty", muse_session_common_prefix(a, 0, b, 4) == 0);
    TEST_COND("reuse: identical prompt re-evaluates its last token", muse_session_reuse_len(a, 5, a, 5) == 4);
    TEST_COND("reuse: extension keeps the whole cache", muse_session_reuse_len(a, 3, a, 5) == 3);
    TEST_COND("reuse: divergence", muse_session_reuse_len(a, 5, b, 4) == 3);
    TEST_COND("reuse: empty prompt", muse_session_reuse_len(a, 5, a, 0) == 0);
    /* the ring rule: a ring of 4352 cells, window 2048 (the 30B model at batch 2304) */
    TEST_COND("ring: not a sliding-window layer", muse_kv_ring_can_truncate(10000, 9000, 0, 10000));
    TEST_COND("ring: not wrapped yet", muse_kv_ring_can_truncate(4000, 100, 2048, 4352));
    TEST_COND("ring: at the wrap", muse_kv_ring_can_truncate(4352, 1, 2048, 4352));
    TEST_COND("ring: one past the wrap, deep", !muse_kv_ring_can_truncate(4353, 1, 2048, 4352));
    TEST_COND("ring: rewind n_cells - n_swa + 1 = 2305", muse_kv_ring_can_truncate(10000, 10000 - 2305, 2048, 4352));
    TEST_COND("ring: rewind 2306 refused", !muse_kv_ring_can_truncate(10000, 10000 - 2306, 2048, 4352));
    TEST_COND("ring: keeping everything", muse_kv_ring_can_truncate(10000, 10000, 2048, 4352));
    TEST_COND("ring: keeping nothing", muse_kv_ring_can_truncate(10000, 0, 2048, 4352));
}

/* A batch stopped midway (the stepper stops a step for a newcomer: muse_context_set_abort) wrote
 * the rings past n_past. An in-place rollback is then checked from the stopped batch's end, a
 * checkpoint's restore rewrites the rings (what the stopped batch wrote is gone), and the legality
 * rule muse_kv_can_truncate stays a pure function of its arguments: a checkpoint at the position
 * asked still serves it. Each continuation is bit-identical to a cold context. */
static int g_calls, g_stop_at;
static int stop_cb(void *user) {
    (void)user;
    return ++g_calls > g_stop_at;
}

static void test_stopped_batch(struct muse_model *m) {
    enum { P = 30, C = 3 };
    int32_t toks[P + 2 > P + 1 + C ? P + 2 : P + 1 + C], extra[N_BATCH], cont[C];
    make_tokens(toks, P + 2, 5);
    make_tokens(extra, N_BATCH, 23);
    make_tokens(cont, C, 29);
    float *warm = malloc(sizeof(float) * C * (size_t)n_vocab), *ref = malloc(sizeof(float) * C * (size_t)n_vocab);
    struct muse_context *ctx = new_ctx(m);
    struct muse_session *s = NULL;
    struct muse_error err;
    const struct muse_batch b = {.n_tokens = N_BATCH, .token = extra};
    if (!ctx || muse_session_create(ctx, muse_session_default_params(), &s, &err) != MUSE_OK) {
        TEST_COND("session over a context", false);
        goto done;
    }
    /* how many times a batch of N_BATCH asks the callback (on a context of its own): stop at half */
    struct muse_context *probe = new_ctx(m);
    g_calls = 0, g_stop_at = 1 << 30;
    if (probe) muse_context_set_abort(probe, stop_cb, NULL);
    bool ok = probe && muse_decode(probe, &b, NULL, &err) == MUSE_OK;
    const int per_batch = g_calls;
    muse_context_free(probe);
    ok = ok && muse_session_eval(s, toks, P, NULL, 0, &err) == MUSE_OK && muse_session_checkpoint(s, &err) == MUSE_OK;
    ok = ok && muse_session_eval(s, toks + P, 2, NULL, 0, &err) == MUSE_OK;
    TEST_CONDF(ok && per_batch > 2, "%s: prompt of %d, checkpoint, 2 more (a batch asks the callback %d times)", g_backend, P,
               per_batch);
    muse_context_set_abort(ctx, stop_cb, NULL);
    const bool legal[3] = {muse_kv_can_truncate(ctx, P + 2, P), muse_kv_can_truncate(ctx, P, P - 1),
                           muse_kv_can_truncate(ctx, P + 2 + N_BATCH, P)};
    g_calls = 0, g_stop_at = per_batch / 2;
    muse_status st = muse_decode(ctx, &b, NULL, &err);
    TEST_CONDF(st == MUSE_ERR_CANCELLED && muse_context_n_past(ctx) == P + 2 && g_calls > g_stop_at,
               "%s: a batch stopped after %d of its %d callbacks: status %d, n_past %d", g_backend, g_calls, per_batch, st,
               muse_context_n_past(ctx));
    TEST_COND("the legality rule stays pure after a stopped batch",
              legal[0] == muse_kv_can_truncate(ctx, P + 2, P) && legal[1] == muse_kv_can_truncate(ctx, P, P - 1) &&
                  legal[2] == muse_kv_can_truncate(ctx, P + 2 + N_BATCH, P) && legal[0] && !legal[2]);
    /* n_batch + 1 back from the stopped batch's end: in place */
    struct muse_session_keep k = muse_session_keep(s, P + 1);
    TEST_CONDF(k.kind == MUSE_SESSION_KEEP_TRUNCATED && k.n_kept == P + 1, "%s: keep %d after the stop: in place (kind %d, kept %d)",
               g_backend, P + 1, k.kind, k.n_kept);
    g_stop_at = 1 << 30;
    ok = muse_session_eval(s, cont, C, warm, 1, &err) == MUSE_OK;
    memcpy(toks + P + 1, cont, sizeof cont);
    ok = ok && cold(m, toks, P + 1 + C, C, ref);
    TEST_CONDF(ok && !memcmp(warm, ref, sizeof(float) * C * (size_t)n_vocab),
               "%s: in-place rollback after a stopped batch, then continue: bit-identical (%s)", g_backend, ok ? "logits differ" : err.msg);
    /* stopped again, then back to the checkpoint's own position: deeper than the rings allow from the
     * stopped batch's end, so the checkpoint serves it (it is at the position asked) */
    g_calls = 0, g_stop_at = per_batch / 2;
    st = muse_decode(ctx, &b, NULL, &err);
    g_stop_at = 1 << 30;
    k = muse_session_keep(s, P);
    TEST_CONDF(st == MUSE_ERR_CANCELLED && k.kind == MUSE_SESSION_KEEP_RESTORED && k.n_kept == P && k.ckpt_pos == P,
               "%s: keep %d after a second stop: the checkpoint at %d restored (status %d, kind %d, kept %d)", g_backend, P, P,
               st, k.kind, k.n_kept);
    TEST_COND("the restore forgot what the stopped batch wrote: n_batch further, back in place",
              muse_session_eval(s, extra, N_BATCH, NULL, 0, &err) == MUSE_OK &&
                  muse_session_keep(s, P).kind == MUSE_SESSION_KEEP_TRUNCATED);
    ok = muse_session_n_past(s) == P && muse_session_eval(s, cont, C, warm, 1, &err) == MUSE_OK;
    memcpy(toks + P, cont, sizeof cont);
    ok = ok && cold(m, toks, P + C, C, ref);
    TEST_CONDF(ok && !memcmp(warm, ref, sizeof(float) * C * (size_t)n_vocab),
               "%s: restore after a stopped batch, then continue: bit-identical (%s)", g_backend, ok ? "logits differ" : err.msg);
    muse_context_set_abort(ctx, NULL, NULL);
done:
    muse_session_free(s);
    muse_context_free(ctx);
    free(warm);
    free(ref);
}

/* Speculative decoding's reject step after the rings wrapped: bit-identical at every split. */
static void test_rollback_after_wrap(struct muse_model *m) {
    enum { P = 30, C = 6 };
    int32_t toks[P + N_BATCH + 2 + C], draft[N_BATCH + 1], cont[C];
    make_tokens(toks, P, 3);
    make_tokens(draft, N_BATCH + 1, 11);
    make_tokens(cont, C, 17);
    float *warm = malloc(sizeof(float) * C * (size_t)n_vocab), *ref = malloc(sizeof(float) * C * (size_t)n_vocab);
    float *vlog = malloc(sizeof(float) * (N_BATCH + 1) * (size_t)n_vocab);
    struct muse_context *ctx = new_ctx(m);
    struct muse_session *s = NULL;
    struct muse_error err;
    if (!ctx || muse_session_create(ctx, muse_session_default_params(), &s, &err) != MUSE_OK) {
        TEST_COND("session over a context", false);
        goto done;
    }
    TEST_COND("new session is empty", muse_session_n_past(s) == 0 && muse_context_n_past(ctx) == 0);
    TEST_COND("prompt of 30 (rings wrapped)", muse_session_eval(s, toks, P, NULL, 0, &err) == MUSE_OK);
    TEST_COND("checkpoint at the prompt's end", muse_session_checkpoint(s, &err) == MUSE_OK);
    TEST_COND("context n_batch", muse_context_n_batch(ctx) == N_BATCH);
    for (int accepted = 0; accepted <= N_BATCH; accepted++) {
        bool ok = muse_session_eval(s, draft, N_BATCH, vlog, 1, &err) == MUSE_OK; /* the verify batch */
        TEST_CONDF(ok && muse_kv_can_truncate(ctx, P + N_BATCH, P + accepted), "rollback of %d legal", N_BATCH - accepted);
        ok = ok && muse_session_truncate(s, P + accepted, &err) == MUSE_OK && muse_session_n_past(s) == P + accepted;
        ok = ok && muse_context_n_past(ctx) == P + accepted;
        ok = ok && muse_session_eval(s, cont, C, warm, 1, &err) == MUSE_OK;
        memcpy(toks + P, draft, sizeof(int32_t) * (size_t)accepted);
        memcpy(toks + P + accepted, cont, sizeof cont);
        ok = ok && cold(m, toks, P + accepted + C, C, ref);
        TEST_CONDF(ok && !memcmp(warm, ref, sizeof(float) * C * (size_t)n_vocab),
                   "%s: accept %d of %d after the wrap, then continue: bit-identical to never evaluating the rest (%s)",
                   g_backend, accepted, N_BATCH, ok ? "logits differ" : err.msg);
        TEST_COND("mirror matches", ok && !memcmp(muse_session_tokens(s), toks, sizeof(int32_t) * (size_t)(P + accepted + C)));
        /* 6..10 positions back: deeper than the rings allow, served by the checkpoint */
        TEST_COND("back to the prompt", muse_session_truncate(s, P, &err) == MUSE_OK && muse_session_n_past(s) == P);
    }
    /* the exact bound: n_batch + 1 positions back is legal, n_batch + 2 is not (without a checkpoint) */
    bool ok = muse_session_eval(s, draft, N_BATCH + 1, vlog, 1, &err) == MUSE_OK; /* two chunks: 4 + 1 */
    TEST_COND("rewind n_batch + 1 is legal", ok && muse_kv_can_truncate(ctx, P + N_BATCH + 1, P));
    ok = ok && muse_session_truncate(s, P, &err) == MUSE_OK && muse_session_eval(s, cont, C, warm, 1, &err) == MUSE_OK;
    memcpy(toks + P, cont, sizeof cont);
    ok = ok && cold(m, toks, P + C, C, ref);
    TEST_CONDF(ok && !memcmp(warm, ref, sizeof(float) * C * (size_t)n_vocab), "%s: rollback of n_batch + 1 bit-identical",
               g_backend);
    TEST_COND("rewind n_batch + 2 is not", !muse_kv_can_truncate(ctx, P + C, P + C - N_BATCH - 2));
    int32_t n_before = muse_session_n_past(s);
    muse_status st = muse_session_truncate(s, P - 10, &err); /* below the checkpoint, and too far from it */
    TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "checkpoint"), "exact truncate past the rings: %d '%s'", st, err.msg);
    TEST_COND("a refused truncate changes nothing", muse_session_n_past(s) == n_before && muse_context_n_past(ctx) == n_before);
    TEST_COND("truncate beyond n_past refused", muse_session_truncate(s, n_before + 1, &err) == MUSE_ERR_INVALID_ARG);
    struct muse_session_stats stt = muse_session_stats(s);
    TEST_CONDF(stt.n_truncated == N_BATCH + 1 && stt.n_restored == N_BATCH + 1 && stt.n_cleared == 0 && stt.n_checkpoints == 1,
               "stats: %llu truncated, %llu restored, %llu cleared", (unsigned long long)stt.n_truncated,
               (unsigned long long)stt.n_restored, (unsigned long long)stt.n_cleared);
done:
    muse_session_free(s);
    muse_context_free(ctx);
    free(warm);
    free(ref);
    free(vlog);
}

/*
 * A chat turn: prompt, checkpoint where it ends, generate G tokens, then a new prompt diverging at
 * `diverge`; returns the keep result and checks the continuation against a cold prefill.
 */
struct turn_case {
    const char *name;
    int n_checkpoints;
    int extra_ckpt; /* > 0: also a checkpoint at this position of the first prompt */
    int diverge;    /* where the second prompt leaves the first (<= P + G) */
    enum muse_session_keep_kind want_kind;
    int want_kept, want_ckpt;
};

static void run_turn_case(struct muse_model *m, const struct turn_case *tc) {
    enum { P = 40, G = 12, N2 = 10 };
    int32_t first[P + G], second[P + G + N2];
    make_tokens(first, P + G, 5);
    memcpy(second, first, sizeof(int32_t) * (size_t)tc->diverge);
    make_tokens(second + tc->diverge, N2, 23);
    const int n2 = tc->diverge + N2;
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    float *warm = malloc(sizeof(float) * (size_t)(n2 + 1) * (size_t)n_vocab);
    float *ref = malloc(sizeof(float) * (size_t)(n2 + 1) * (size_t)n_vocab);
    struct muse_context *ctx = new_ctx(m);
    struct muse_session *s = NULL;
    struct muse_error err;
    struct muse_session_params sp = {.n_checkpoints = tc->n_checkpoints};
    bool ok = ctx && muse_session_create(ctx, sp, &s, &err) == MUSE_OK;
    if (ok && tc->extra_ckpt > 0)
        ok = muse_session_eval(s, first, tc->extra_ckpt, NULL, 0, &err) == MUSE_OK && muse_session_checkpoint(s, &err) == MUSE_OK;
    struct muse_session_keep r = ok ? muse_session_reuse(s, first, P) : (struct muse_session_keep){0};
    ok = ok && r.n_kept == (tc->extra_ckpt > 0 ? tc->extra_ckpt : 0);
    ok = ok && muse_session_eval(s, first + r.n_kept, P - r.n_kept, logits, 0, &err) == MUSE_OK;
    ok = ok && muse_session_checkpoint(s, &err) == MUSE_OK; /* where the prompt ends */
    for (int i = P; ok && i < P + G; i++) ok = muse_session_eval(s, &first[i], 1, logits, 0, &err) == MUSE_OK;
    TEST_CONDF(ok, "%s/%s: first turn (%s)", g_backend, tc->name, err.msg);
    if (!ok) goto done;
    r = muse_session_reuse(s, second, n2);
    TEST_CONDF(r.kind == tc->want_kind && r.n_kept == tc->want_kept && r.ckpt_pos == tc->want_ckpt &&
                   r.n_asked == tc->diverge,
               "%s/%s: keep kind %d kept %d (asked %d) checkpoint %d; want kind %d kept %d checkpoint %d", g_backend,
               tc->name, r.kind, r.n_kept, r.n_asked, r.ckpt_pos, tc->want_kind, tc->want_kept, tc->want_ckpt);
    TEST_COND("cache and mirror agree", muse_context_n_past(ctx) == r.n_kept && muse_session_n_past(s) == r.n_kept);
    /* evaluate the rest; its logits equal a cold prefill's (same split: head, then the rest) */
    int rest = n2 - r.n_kept;
    ok = muse_session_eval(s, second + r.n_kept, rest, warm, 1, &err) == MUSE_OK && cold(m, second, n2, rest, ref);
    TEST_CONDF(ok && !memcmp(warm, ref, sizeof(float) * (size_t)rest * (size_t)n_vocab),
               "%s/%s: continuation after the keep is bit-identical to a cold prefill (%s)", g_backend, tc->name,
               ok ? "logits differ" : err.msg);
    struct muse_session_stats st = muse_session_stats(s);
    TEST_CONDF(st.n_restored == (tc->want_kind == MUSE_SESSION_KEEP_RESTORED) &&
                   st.n_cleared == (tc->want_kind == MUSE_SESSION_KEEP_CLEARED) &&
                   st.n_truncated == (tc->want_kind == MUSE_SESSION_KEEP_TRUNCATED),
               "%s/%s: counted once", g_backend, tc->name);
done:
    muse_session_free(s);
    muse_context_free(ctx);
    free(logits);
    free(warm);
    free(ref);
}

static void test_misses(struct muse_model *m) {
    /* after the first turn n_past = 52 and the rings (8 cells) hold 44..51: a rollback to >= 47 is in place */
    const struct turn_case cases[] = {
        {"diverge where generation began: restore the prompt's checkpoint", 1, 0, 40, MUSE_SESSION_KEEP_RESTORED, 40, 40},
        {"no checkpoints: re-prefill", 0, 0, 40, MUSE_SESSION_KEEP_CLEARED, 0, -1},
        {"inside the generation, within the rings: in place", 1, 0, 48, MUSE_SESSION_KEEP_TRUNCATED, 48, -1},
        {"inside the generation, past the rings: the checkpoint below", 1, 0, 44, MUSE_SESSION_KEEP_RESTORED, 40, 40},
        {"5 before the checkpoint: restore it, then truncate", 1, 0, 35, MUSE_SESSION_KEEP_RESTORED, 35, 40},
        {"6 before the checkpoint: too far, re-prefill", 1, 0, 34, MUSE_SESSION_KEEP_CLEARED, 0, -1},
        {"two checkpoints: the highest below", 2, 20, 30, MUSE_SESSION_KEEP_RESTORED, 20, 20},
        {"two checkpoints: above wins over below", 2, 20, 37, MUSE_SESSION_KEEP_RESTORED, 37, 40},
        {"one checkpoint, replaced by the newer", 1, 20, 30, MUSE_SESSION_KEEP_CLEARED, 0, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_turn_case(m, &cases[i]);
}

/* Prefix reuse: the second prompt extends the first; only its new tokens are evaluated. */
static void test_reuse(struct muse_model *m) {
    int32_t toks[50];
    make_tokens(toks, 50, 9);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    struct muse_context *ctx = new_ctx(m);
    struct muse_session *s = NULL;
    struct muse_error err;
    if (!ctx || muse_session_create(ctx, muse_session_default_params(), &s, &err) != MUSE_OK) {
        TEST_COND("session", false);
        goto done;
    }
    struct muse_session_keep r = muse_session_reuse(s, toks, 30);
    TEST_COND("cold: nothing to reuse", r.kind == MUSE_SESSION_KEEP_NONE && r.n_kept == 0);
    TEST_COND("prompt 1", muse_session_eval(s, toks, 30, logits, 0, &err) == MUSE_OK);
    r = muse_session_reuse(s, toks, 50);
    TEST_COND("extension: all of prompt 1 kept, nothing dropped", r.kind == MUSE_SESSION_KEEP_NONE && r.n_kept == 30);
    TEST_COND("prompt 2", muse_session_eval(s, toks + 30, 20, logits, 0, &err) == MUSE_OK);
    r = muse_session_reuse(s, toks, 50);
    TEST_COND("identical prompt: all but the last token", r.kind == MUSE_SESSION_KEEP_TRUNCATED && r.n_kept == 49);
    struct muse_session_stats st = muse_session_stats(s);
    TEST_CONDF(st.n_tokens_reused == 79 && st.n_tokens_evaluated == 50, "reused %llu evaluated %llu",
               (unsigned long long)st.n_tokens_reused, (unsigned long long)st.n_tokens_evaluated);
    muse_session_clear(s);
    TEST_COND("clear", muse_session_n_past(s) == 0 && muse_context_n_past(ctx) == 0);
    bool ok = muse_session_eval(s, toks, 50, NULL, 0, &err) == MUSE_OK && muse_session_eval(s, toks, 50, NULL, 0, &err) == MUSE_OK;
    TEST_COND("eval error (context full) leaves the mirror", ok && muse_session_eval(s, toks, 50, logits, 0, &err) == MUSE_ERR_CONTEXT &&
                                                                 muse_session_n_past(s) == 100 && muse_context_n_past(ctx) == 100);
    struct muse_session_params bad = {.n_checkpoints = -1};
    struct muse_session *s2 = NULL;
    TEST_COND("negative n_checkpoints refused", muse_session_create(ctx, bad, &s2, &err) == MUSE_ERR_INVALID_ARG && !s2);
done:
    muse_session_free(s);
    muse_context_free(ctx);
    free(logits);
}

/* The checkpoint object itself: cost, staleness, refusal, outliving its context. */
static void test_checkpoints(struct muse_model *m) {
    int32_t toks[40];
    make_tokens(toks, 40, 13);
    struct muse_context *ctx = new_ctx(m);
    struct muse_kv_checkpoint *ck = NULL, *ck2 = NULL;
    struct muse_error err;
    if (!ctx || muse_kv_checkpoint_create(ctx, &ck, &err) != MUSE_OK || muse_kv_checkpoint_create(ctx, &ck2, &err)) {
        TEST_COND("checkpoints", false);
        muse_context_free(ctx);
        return;
    }
    /* 3 ring layers x 8 cells x (k + v) x n_head_kv 2 x head_dim 32 x f32 */
    TEST_CONDF(muse_kv_checkpoint_size(ck) == (size_t)3 * 8 * 2 * 64 * 4, "checkpoint copies the rings only: %zu bytes",
               muse_kv_checkpoint_size(ck));
    TEST_COND("new checkpoint is empty", muse_kv_checkpoint_pos(ck) == -1);
    TEST_COND("restoring an empty one is refused", muse_kv_checkpoint_restore(ck, &err) == MUSE_ERR_INVALID_ARG);
    bool ok = muse_eval(ctx, toks, 20, NULL, 0, &err) == MUSE_OK && muse_kv_checkpoint_save(ck, &err) == MUSE_OK;
    ok = ok && muse_eval(ctx, toks + 20, 10, NULL, 0, &err) == MUSE_OK && muse_kv_checkpoint_save(ck2, &err) == MUSE_OK;
    TEST_COND("saved at 20 and 30", ok && muse_kv_checkpoint_pos(ck) == 20 && muse_kv_checkpoint_pos(ck2) == 30);
    ok = muse_eval(ctx, toks + 30, 10, NULL, 0, &err) == MUSE_OK && muse_kv_truncate(ctx, 36, &err) == MUSE_OK;
    TEST_COND("truncate above both keeps them", ok && muse_kv_checkpoint_pos(ck) == 20 && muse_kv_checkpoint_pos(ck2) == 30);
    TEST_COND("restore 20 from 36", muse_kv_checkpoint_restore(ck, &err) == MUSE_OK && muse_context_n_past(ctx) == 20);
    TEST_COND("the one above went stale", muse_kv_checkpoint_pos(ck2) == -1 && muse_kv_checkpoint_pos(ck) == 20);
    muse_status st = muse_kv_checkpoint_restore(ck2, &err);
    TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "stale"), "restoring a stale one: %d '%s'", st, err.msg);
    TEST_COND("refusal changes nothing", muse_context_n_past(ctx) == 20);
    TEST_COND("restore twice", muse_kv_checkpoint_restore(ck, &err) == MUSE_OK && muse_context_n_past(ctx) == 20);
    muse_kv_clear(ctx);
    TEST_COND("clear makes every checkpoint stale", muse_kv_checkpoint_pos(ck) == -1);
    TEST_COND("truncate legality is pure", muse_kv_can_truncate(ctx, 30, 25) && !muse_kv_can_truncate(ctx, 30, 20) &&
                                               muse_kv_can_truncate(ctx, 8, 1) && !muse_kv_can_truncate(ctx, 5, 6));
    muse_kv_checkpoint_free(ck2);
    muse_context_free(ctx); /* ck outlives its context: detached */
    TEST_COND("detached checkpoint: save refused", muse_kv_checkpoint_save(ck, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("detached checkpoint: restore refused", muse_kv_checkpoint_restore(ck, &err) == MUSE_ERR_INVALID_ARG);
    muse_kv_checkpoint_free(ck);
    muse_kv_checkpoint_free(NULL);

    /* without rings (swa_full) a checkpoint costs nothing and every rollback is in place */
    struct muse_context_params cp = muse_context_default_params();
    cp.n_batch = N_BATCH;
    cp.n_ctx = 64;
    cp.swa_full = 1;
    cp.backend = g_backend;
    if (muse_context_create(m, cp, &ctx, &err) == MUSE_OK) {
        ok = muse_kv_checkpoint_create(ctx, &ck, &err) == MUSE_OK && muse_kv_checkpoint_size(ck) == 0;
        ok = ok && muse_eval(ctx, toks, 40, NULL, 0, &err) == MUSE_OK && muse_kv_can_truncate(ctx, 40, 1);
        TEST_COND("swa_full: empty checkpoint, any rollback", ok);
        muse_kv_checkpoint_free(ck);
        muse_context_free(ctx);
    }
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/muse-test-session-%d.gguf", (int)getpid());
    test_pure_rules();
    struct fx_spec spec = fx_default(); /* 4 layers, window 4, layers 0-2 sliding-window */
    struct muse_model *m = NULL;
    struct muse_error err;
    if (!fx_write(path, &spec) || muse_model_load(path, muse_model_default_params(), &m, &err) != MUSE_OK) {
        TEST_COND("fixture model loads", false);
        unlink(path);
        return TEST_REPORT();
    }
    n_vocab = muse_model_n_vocab(m);
    const char *backends[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        g_backend = backends[b];
        test_rollback_after_wrap(m);
        test_misses(m);
        test_reuse(m);
        test_checkpoints(m);
        test_stopped_batch(m);
    }
    muse_model_free(m);
    unlink(path);
    return TEST_REPORT();
}
