/*
 * test_forward.c - properties of the reference forward that a wrong implementation breaks:
 *   - chunked prompts (any --batch), token-by-token decoding and one big batch give bitwise
 *     identical logits;
 *   - the sliding-window ring (SWA layers holding n_swa + n_batch cells) equals a full-size cache;
 *   - the window is exactly n_swa keys: with only SWA layers, token 0 reaches position
 *     n_layer*(n_swa-1) and no further;
 *   - full layers are NoPE (a one-layer full-attention model is invariant to the order of the
 *     earlier tokens at the last position; a one-layer SWA model is not);
 *   - the u32 and bool-array pattern forms give identical logits;
 *   - KV f16 vs f32: close but not identical; q8_0 runs and stays close;
 *   - a prompt longer than the context is an error, not a truncation;
 *   - the layer trace sees n_layer + 1 residuals per position, the first one RMS-normalized.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model_fixture.h"
#include "test.h"

static char path[256];
static int n_vocab;
static const char *g_backend = "ref"; /* every test runs once per backend */

/* logits [n][n_vocab] of tokens through a fresh context with the given params */
static bool run(struct muse_model *m, struct muse_context_params cp, const int32_t *toks, int n, float *out,
                bool one_by_one) {
    struct muse_context *ctx;
    struct muse_error err;
    if (!cp.backend) cp.backend = g_backend;
    if (muse_context_create(m, cp, &ctx, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return false;
    }
    bool ok = true;
    if (one_by_one) {
        for (int i = 0; i < n && ok; i++) ok = muse_eval(ctx, &toks[i], 1, out + (size_t)i * n_vocab, 1, &err) == MUSE_OK;
    } else {
        ok = muse_eval(ctx, toks, n, out, 1, &err) == MUSE_OK;
    }
    if (!ok) fprintf(stderr, "eval: %s\n", err.msg);
    muse_context_free(ctx);
    return ok;
}

static struct muse_model *load_spec(const struct fx_spec *s) {
    struct muse_model *m = NULL;
    struct muse_error err;
    if (!fx_write(path, s) || muse_model_load(path, muse_model_default_params(), &m, &err)) {
        fprintf(stderr, "load: %s\n", err.msg);
        return NULL;
    }
    n_vocab = muse_model_n_vocab(m);
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

#define NTOK 40

static void make_prompt(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % 297);
    }
}

/* Context parameters with the exact kernels at every batch size (no tile GEMM): the chunking and
 * rollback checks below compare batchings bit for bit, and the fixture's F32 weights have a tile
 * GEMM for 32+ rows that sums in another order by design (bounded in test_tile_forward). */
static struct muse_context_params unrepacked_params(void) {
    struct muse_context_params cp = muse_context_default_params();
    cp.no_repack = 1;
    return cp;
}

static void test_chunking_and_ring(void) {
    struct fx_spec s = fx_default();
    struct muse_model *m = load_spec(&s);
    TEST_COND("fixture loads", m != NULL);
    if (!m) return;
    int32_t toks[NTOK];
    make_prompt(toks, NTOK, 5);
    size_t sz = (size_t)NTOK * n_vocab;
    float *a = malloc(sz * 4), *b = malloc(sz * 4);
    struct muse_context_params cp = unrepacked_params();
    cp.kv_type = MUSE_KV_TYPE_F32;
    TEST_COND("one batch runs", run(m, cp, toks, NTOK, a, false));
    bool finite = true;
    for (size_t i = 0; i < sz; i++) finite = finite && isfinite(a[i]) && fabsf(a[i]) <= 20.0f;
    TEST_COND("logits finite and within the softcap", finite);
    int batches[] = {1, 3, 7, 16};
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
        cp.n_batch = (uint32_t)batches[k];
        memset(b, 0, sz * 4);
        TEST_CONDF(run(m, cp, toks, NTOK, b, false) && !memcmp(a, b, sz * 4), "batch %d differs from one batch (max %g)",
                   batches[k], max_diff(a, b, sz));
    }
    /* decoding token by token goes through the same code */
    cp.n_batch = 512;
    TEST_CONDF(run(m, cp, toks, NTOK, b, true) && !memcmp(a, b, sz * 4), "token by token differs (max %g)", max_diff(a, b, sz));
    /* the SWA ring (window 4 + batch 3 = 7 cells) equals the full-size cache */
    cp.n_batch = 3;
    cp.swa_full = 1;
    TEST_CONDF(run(m, cp, toks, NTOK, b, false) && !memcmp(a, b, sz * 4), "swa_full differs from the ring (max %g)",
               max_diff(a, b, sz));
    /* F16 KV: close to F32 but not the same numbers */
    cp = unrepacked_params();
    TEST_COND("f16 KV runs", run(m, cp, toks, NTOK, b, false));
    double d16 = max_diff(a, b, sz);
    TEST_CONDF(d16 > 0 && d16 < 0.05, "f16 vs f32 KV: max diff %g (want >0, <0.05)", d16);
    cp.kv_type = MUSE_KV_TYPE_Q8_0;
    TEST_COND("q8_0 KV runs", run(m, cp, toks, NTOK, b, false));
    double d8 = max_diff(a, b, sz);
    TEST_CONDF(d8 > 0 && d8 < 0.5, "q8_0 vs f32 KV: max diff %g", d8);

    /* context overflow: an error, nothing evaluated */
    struct muse_context *ctx;
    struct muse_error err;
    cp = unrepacked_params();
    cp.n_ctx = 16;
    cp.backend = g_backend;
    if (muse_context_create(m, cp, &ctx, &err) == MUSE_OK) {
        muse_status st = muse_eval(ctx, toks, 17, b, 1, &err);
        TEST_CONDF(st == MUSE_ERR_CONTEXT && strstr(err.msg, "context"), "17 tokens in 16: status %d '%s'", st, err.msg);
        TEST_COND("nothing evaluated", muse_context_n_past(ctx) == 0);
        TEST_COND("16 tokens fit", muse_eval(ctx, toks, 16, b, 1, &err) == MUSE_OK && muse_context_n_past(ctx) == 16);
        TEST_COND("one more does not", muse_eval(ctx, toks, 1, b, 1, &err) == MUSE_ERR_CONTEXT);
        int32_t bad = n_vocab;
        muse_kv_clear(ctx);
        TEST_COND("token id out of range", muse_eval(ctx, &bad, 1, b, 1, &err) == MUSE_ERR_INVALID_ARG);
        muse_context_free(ctx);
    }
    /* rollback: truncate to 30 and re-evaluate 30..39 gives the same rows; too far back for the ring fails */
    cp = unrepacked_params();
    cp.kv_type = MUSE_KV_TYPE_F32;
    cp.n_batch = 16; /* SWA ring of 4 + 16 cells */
    cp.backend = g_backend;
    if (muse_context_create(m, cp, &ctx, &err) == MUSE_OK) {
        bool ok = muse_eval(ctx, toks, NTOK, b, 1, &err) == MUSE_OK;
        ok = ok && muse_kv_truncate(ctx, 30, &err) == MUSE_OK && muse_context_n_past(ctx) == 30;
        ok = ok && muse_eval(ctx, toks + 30, NTOK - 30, b, 1, &err) == MUSE_OK;
        TEST_CONDF(ok && !memcmp(a + (size_t)30 * n_vocab, b, (size_t)(NTOK - 30) * n_vocab * 4),
                   "truncate + re-evaluate differs (%s)", err.msg);
        muse_status st = muse_kv_truncate(ctx, 20, &err);
        TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "re-prefill"), "rollback past the ring: %d '%s'", st, err.msg);
        TEST_COND("failed rollback keeps n_past", muse_context_n_past(ctx) == NTOK);
        TEST_COND("truncate beyond n_past refused", muse_kv_truncate(ctx, NTOK + 1, &err) == MUSE_ERR_INVALID_ARG);
        muse_context_free(ctx);
    }
    /* above the trained context: allowed, as llama.cpp (which warns); positions past it evaluate */
    cp.n_ctx = 2 * (uint32_t)muse_model_n_ctx_train(m);
    TEST_COND("n_ctx above context_length allowed", muse_context_create(m, cp, &ctx, &err) == MUSE_OK);
    if (ctx) {
        const int32_t n = muse_model_n_ctx_train(m) + 5;
        int32_t *t = calloc((size_t)n, sizeof *t);
        for (int32_t i = 0; t && i < n; i++) t[i] = (i * 7 + 3) % 100;
        TEST_COND("evaluates past the trained context", t && muse_eval(ctx, t, n, NULL, 0, &err) == MUSE_OK);
        free(t);
        muse_context_free(ctx);
    }
    cp.n_ctx = 1u << 31;
    TEST_COND("absurd n_ctx refused", muse_context_create(m, cp, &ctx, &err) == MUSE_ERR_INVALID_ARG);
    muse_model_free(m);
    free(a);
    free(b);
}

static void test_window_reach(void) {
    /* only SWA layers: token 0 influences positions <= n_layer * (window - 1) and no others */
    struct fx_spec s = fx_default();
    s.n_layer = 2;
    s.window = 4;
    s.pattern = FX_PATTERN_U32;
    s.period = 0; /* every layer SWA */
    struct muse_model *m = load_spec(&s);
    if (!m) return;
    int32_t t1[NTOK], t2[NTOK];
    make_prompt(t1, NTOK, 9);
    memcpy(t2, t1, sizeof t1);
    t2[0] = (t1[0] + 50) % 297;
    size_t sz = (size_t)NTOK * n_vocab;
    float *a = malloc(sz * 4), *b = malloc(sz * 4);
    struct muse_context_params cp = muse_context_default_params();
    cp.kv_type = MUSE_KV_TYPE_F32;
    cp.n_batch = 5;
    if (run(m, cp, t1, NTOK, a, false) && run(m, cp, t2, NTOK, b, false)) {
        const int reach = 2 * (4 - 1);
        for (int p = 0; p < 12; p++) {
            bool same = !memcmp(a + (size_t)p * n_vocab, b + (size_t)p * n_vocab, (size_t)n_vocab * 4);
            TEST_CONDF(same == (p > reach), "window reach: position %d %s token 0", p, same ? "ignores" : "depends on");
        }
    }
    muse_model_free(m);
    free(a);
    free(b);
}

static void test_nope(void) {
    /* one full-attention layer: attention over a set, so the last position ignores the order of
     * the earlier tokens (up to summation order); one SWA layer (rope) does not */
    int32_t t1[8] = {10, 20, 30, 40, 50, 60, 70, 80}, t2[8] = {40, 10, 70, 20, 60, 30, 50, 80};
    double d[2];
    for (int swa = 0; swa < 2; swa++) {
        struct fx_spec s = fx_default();
        s.n_layer = 1;
        s.window = 64;
        s.pattern = FX_PATTERN_U32;
        s.period = swa ? 0 : 1;
        struct muse_model *m = load_spec(&s);
        if (!m) return;
        float *a = malloc((size_t)8 * n_vocab * 4), *b = malloc((size_t)8 * n_vocab * 4);
        struct muse_context_params cp = muse_context_default_params();
        cp.kv_type = MUSE_KV_TYPE_F32;
        d[swa] = -1;
        if (run(m, cp, t1, 8, a, false) && run(m, cp, t2, 8, b, false))
            d[swa] = max_diff(a + (size_t)7 * n_vocab, b + (size_t)7 * n_vocab, (size_t)n_vocab);
        muse_model_free(m);
        free(a);
        free(b);
    }
    TEST_CONDF(d[0] >= 0 && d[0] < 1e-4, "full (NoPE) layer depends on token order: %g", d[0]);
    TEST_CONDF(d[1] > 1e-3, "SWA (RoPE) layer ignores token order: %g", d[1]);
}

static void test_pattern_forms_same_logits(void) {
    struct fx_spec s = fx_default();
    s.n_layer = 8;
    s.q8_0 = true; /* also exercises Q8_0 weights with Q8_0 activations */
    for (int i = 0; i < 8; i++) s.swa[i] = i % 4 != 3;
    int32_t toks[NTOK];
    make_prompt(toks, NTOK, 3);
    size_t sz = (size_t)NTOK * 300;
    float *a = malloc(sz * 4), *b = malloc(sz * 4);
    struct muse_model *m = load_spec(&s);
    bool ok = m && run(m, muse_context_default_params(), toks, NTOK, a, false);
    muse_model_free(m);
    s.pattern = FX_PATTERN_U32;
    s.period = 4;
    m = load_spec(&s);
    ok = ok && m && run(m, muse_context_default_params(), toks, NTOK, b, false);
    muse_model_free(m);
    TEST_CONDF(ok && !memcmp(a, b, sz * 4), "bool[8] and u32 4 patterns give different logits");
    /* and a different pattern gives different logits */
    s.period = 2;
    m = load_spec(&s);
    ok = m && run(m, muse_context_default_params(), toks, NTOK, b, false);
    muse_model_free(m);
    TEST_COND("pattern 2 differs from pattern 4", ok && max_diff(a, b, sz) > 1e-3);
    free(a);
    free(b);
}

struct trace_rec {
    int n;
    int n_layer_seen[4];
    double sumsq0[4];
};

static void trace_cb(void *user, int32_t pos, int32_t il, double sum, double sumsq, const float first[4]) {
    struct trace_rec *r = user;
    (void)sum, (void)first;
    r->n++;
    if (pos < 4) {
        r->n_layer_seen[pos]++;
        if (il == 0) r->sumsq0[pos] = sumsq;
    }
}

static void test_trace(void) {
    struct fx_spec s = fx_default();
    struct muse_model *m = load_spec(&s);
    if (!m) return;
    struct trace_rec rec = {0};
    struct muse_context_params cp = muse_context_default_params();
    cp.trace = trace_cb;
    cp.trace_user = &rec;
    cp.trace_n_pos = 3;
    cp.n_batch = 2;
    int32_t toks[6] = {1, 2, 3, 4, 5, 6};
    float *out = malloc((size_t)6 * n_vocab * 4);
    TEST_COND("traced run", run(m, cp, toks, 6, out, false));
    TEST_CONDF(rec.n == 3 * (4 + 1), "trace calls %d, want 15", rec.n);
    for (int p = 0; p < 3; p++) {
        TEST_CONDF(rec.n_layer_seen[p] == 5, "position %d traced %d times", p, rec.n_layer_seen[p]);
        /* layer 0 input is the weightless RMS-normed embedding: mean square 1 up to eps */
        TEST_CONDF(fabs(rec.sumsq0[p] / 64.0 - 1.0) < 1e-3, "layer-0 residual mean square %g", rec.sumsq0[p] / 64.0);
    }
    free(out);
    muse_model_free(m);
}

/* logits of a fixed prompt on the fixture `s` (F32 KV), into out [12][n_vocab] */
static bool spec_logits(struct fx_spec s, float *out) {
    struct muse_model *m = load_spec(&s);
    if (!m) return false;
    int32_t toks[12];
    make_prompt(toks, 12, 21);
    struct muse_context_params cp = muse_context_default_params();
    cp.kv_type = MUSE_KV_TYPE_F32;
    bool ok = run(m, cp, toks, 12, out, false);
    muse_model_free(m);
    return ok;
}

static void test_optional_tensors(void) {
    size_t sz = (size_t)12 * 300;
    float *a = malloc(sz * 4), *b = malloc(sz * 4), *c = malloc(sz * 4);
    struct fx_spec s = fx_default();
    bool ok = spec_logits(s, a);
    TEST_COND("base fixture", ok);
    s.fused_qkv = true;
    TEST_COND("fused attn_qkv == separate Q/K/V (bitwise)", ok && spec_logits(s, b) && !memcmp(a, b, sz * 4));
    s = fx_default();
    s.wo_scale = 4.0f; /* weights stored /4, attn_output.weight.scale = 4: applied -> identical */
    TEST_COND("attn_output.scale applied (bitwise)", ok && spec_logits(s, b) && !memcmp(a, b, sz * 4));
    s = fx_default();
    s.gate_scale = 7.0f; /* llama.cpp's graph ignores attn_gate.scale */
    TEST_COND("attn_gate.scale ignored (bitwise)", ok && spec_logits(s, b) && !memcmp(a, b, sz * 4));
    s = fx_default();
    s.q_bias = 0.5f;
    bool ok2 = spec_logits(s, b);
    TEST_CONDF(ok2 && max_diff(a, b, sz) > 1e-3, "attn_q.bias has no effect (%g)", max_diff(a, b, sz));
    s.fused_qkv = true;
    TEST_COND("attn_qkv.bias == attn_q.bias (bitwise)", ok2 && spec_logits(s, c) && !memcmp(b, c, sz * 4));
    free(a);
    free(b);
    free(c);
}

struct capture_rec {
    int calls;
    int rows_l0;
    double max_err_l0; /* layer-0 input vs an independent RMS norm of the embedding row */
    const float *embd; /* token_embd data (F32 fixture) */
    const int32_t *toks;
};

static void capture_cb(void *user, int32_t il, const int32_t *pos, int32_t n, const float *x) {
    struct capture_rec *r = user;
    r->calls++;
    if (il != 0) return;
    for (int32_t i = 0; i < n; i++, r->rows_l0++) {
        const float *e = r->embd + (size_t)r->toks[pos[i]] * 64;
        double ss = 0;
        for (int j = 0; j < 64; j++) ss += (double)e[j] * e[j];
        double sc = 1.0 / sqrt(ss / 64 + 1e-5);
        for (int j = 0; j < 64; j++) r->max_err_l0 = fmax(r->max_err_l0, fabs(x[(size_t)i * 64 + j] - e[j] * sc));
    }
}

static void test_embd_and_capture(void) {
    struct fx_spec s = fx_default();
    struct muse_model *m = load_spec(&s);
    if (!m) return;
    int32_t toks[12];
    make_prompt(toks, 12, 11);
    const struct muse_weights *w = muse_model_weights(m);
    const float *te = w->token_embd.data; /* F32 [n_vocab][64] */
    float *rows = malloc(sizeof(float) * 12 * 64);
    for (int i = 0; i < 12; i++) memcpy(rows + i * 64, te + (size_t)toks[i] * 64, 64 * sizeof(float));
    size_t sz = (size_t)12 * n_vocab;
    float *a = malloc(sz * 4), *b = malloc(sz * 4);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_batch = 5;
    struct capture_rec rec = {.embd = te, .toks = toks};
    cp.capture = capture_cb;
    cp.capture_user = &rec;
    struct muse_context *ctx;
    struct muse_error err;
    TEST_COND("token run", run(m, cp, toks, 12, a, false));
    TEST_CONDF(rec.calls == 3 * 4, "capture calls %d, want 3 micro-batches x 4 layers", rec.calls);
    TEST_CONDF(rec.rows_l0 == 12 && rec.max_err_l0 < 1e-5, "layer-0 input is the normed embedding: rows %d err %g",
               rec.rows_l0, rec.max_err_l0);
    cp.capture = NULL;
    cp.backend = g_backend;
    if (muse_context_create(m, cp, &ctx, &err) == MUSE_OK) {
        TEST_COND("embd run", muse_eval_embd(ctx, rows, 12, b, 1, &err) == MUSE_OK);
        TEST_COND("embedding rows == token rows (bitwise)", !memcmp(a, b, sz * 4));
        /* the weightless RMS norm is applied to injected rows: scaling them changes almost nothing */
        for (int i = 0; i < 12 * 64; i++) rows[i] *= 3.0f;
        muse_kv_clear(ctx);
        TEST_COND("scaled embd run", muse_eval_embd(ctx, rows, 12, b, 1, &err) == MUSE_OK);
        double d = max_diff(a, b, sz);
        TEST_CONDF(d < 1e-3, "scaled injected rows change logits by %g (norm not applied?)", d);
        muse_context_free(ctx);
    }
    free(rows);
    free(a);
    free(b);
    muse_model_free(m);
}

/* The cpu backend (SIMD kernels, threads) gives the ref backend's logits byte for byte: F32 and
 * Q8_0 matrices, F16 / F32 / Q8_0 KV caches, one batch, small batches through the SWA ring
 * (window 4 + batch 3 = 7 cells: runs of cells wrap) and token by token; 1, 2 and 3 threads.
 * A third model has 36 query heads on 2 KV heads (GQA groups of 18: attention work items of 16 + 2
 * heads, the F16 cache's multi-head helpers in tiles of 4 + remainders, decode ranges that cut
 * through a group) with an F16 cache. */
/* MUSE_CPU with "exact" added (the bit-exact kernel tables; the level it names stays). */
static void set_exact_mode(bool on) {
    static char saved[64], buf[96];
    static bool have_saved, saved_set;
    if (!have_saved) {
        const char *e = getenv("MUSE_CPU");
        saved_set = e != NULL;
        snprintf(saved, sizeof saved, "%s", e ? e : "");
        have_saved = true;
    }
    if (on) {
        snprintf(buf, sizeof buf, "%s%sexact", saved, saved[0] ? "," : "");
        setenv("MUSE_CPU", buf, 1);
    } else if (saved_set) {
        setenv("MUSE_CPU", saved, 1);
    } else {
        unsetenv("MUSE_CPU");
    }
}

static void test_cpu_equals_ref(void) {
    if (!muse_backend_find("cpu")) return;
    set_exact_mode(true);
    for (int q8 = 0; q8 < 3; q8++) {
        struct fx_spec s = fx_default();
        s.q8_0 = q8 == 1;
        if (q8 == 2) s.n_head = 36;
        s.head_dim = 128; /* long K.q sums: their order shows in the bits */
        struct muse_model *m = load_spec(&s);
        TEST_COND("fixture loads", m != NULL);
        if (!m) return;
        int32_t toks[NTOK];
        make_prompt(toks, NTOK, 11);
        size_t sz = (size_t)NTOK * n_vocab;
        float *a = malloc(sz * 4), *b = malloc(sz * 4);
        const enum muse_kv_type kvs[] = {MUSE_KV_TYPE_F16, MUSE_KV_TYPE_F32, MUSE_KV_TYPE_Q8_0};
        for (int kv = 0; kv < (q8 == 2 ? 1 : 3); kv++)
            for (int mode = 0; mode < 3; mode++) {
                struct muse_context_params cp = muse_context_default_params();
                cp.kv_type = kvs[kv];
                cp.n_batch = mode == 1 ? 3 : 512;
                cp.n_threads = 2;
                cp.backend = "ref";
                bool ok = run(m, cp, toks, NTOK, a, mode == 2);
                cp.backend = "cpu";
                /* 1..3 threads: fewer, as many and more threads than rows (decode splits by column) */
                for (uint32_t nt = 1; nt <= 3; nt++) {
                    cp.n_threads = nt;
                    memset(b, 0xff, sz * 4);
                    bool okc = ok && run(m, cp, toks, NTOK, b, mode == 2);
                    TEST_CONDF(okc && !memcmp(a, b, sz * 4), "cpu (%u threads) != ref (%s matrices, kv %d, %s): max %g", nt,
                               q8 == 1 ? "Q8_0" : q8 == 2 ? "F32, 36 heads" : "F32", kv, mode == 0 ? "one batch" : mode == 1 ? "batches of 3" : "token by token",
                               max_diff(a, b, sz));
                }
            }
        free(a);
        free(b);
        muse_model_free(m);
    }
    set_exact_mode(false);
}

/* The fast cpu backend (tile GEMM for batches of several rows): the same bits for 1, 2 and 3
 * threads (every output element is computed the same way wherever it lands). Its numerics are
 * checked op by op against the reference within their derived bounds by test_tile_gemm and
 * test_tile_forward (this random fixture is chaotic: whole-model logits say little). */
static void test_cpu_fast(void) {
    if (!muse_backend_find("cpu")) return;
    struct fx_spec s = fx_default();
    s.q8_0 = true;
    s.head_dim = 128;
    struct muse_model *m = load_spec(&s);
    TEST_COND("fixture loads", m != NULL);
    if (!m) return;
    int32_t toks[NTOK];
    make_prompt(toks, NTOK, 11);
    size_t sz = (size_t)NTOK * n_vocab;
    float *b = malloc(sz * 4), *c = malloc(sz * 4);
    for (int mode = 0; mode < 2; mode++) {
        struct muse_context_params cp = muse_context_default_params();
        cp.n_batch = mode == 1 ? 5 : 512;
        cp.backend = "cpu";
        const bool ok = true;
        for (uint32_t nt = 1; nt <= 3; nt++) {
            cp.n_threads = nt;
            memset(b, 0xff, sz * 4);
            bool okc = ok && run(m, cp, toks, NTOK, b, false);
            if (nt == 1) memcpy(c, b, sz * 4);
            TEST_CONDF(okc && !memcmp(b, c, sz * 4), "fast cpu: %u threads differ from 1 thread (batch %d)", nt, cp.n_batch);
        }
    }
    free(b);
    free(c);
    muse_model_free(m);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/muse-test-forward-%d.gguf", (int)getpid());
    const char *backends[] = {"ref", "cpu"};
    for (int i = 0; i < 2; i++) {
        if (!muse_backend_find(backends[i])) continue;
        g_backend = backends[i];
        int before = test_n_failed;
        test_chunking_and_ring();
        test_window_reach();
        test_nope();
        test_pattern_forms_same_logits();
        test_trace();
        test_embd_and_capture();
        test_optional_tensors();
        if (test_n_failed != before) fprintf(stderr, "(failures above: backend %s)\n", g_backend);
    }
    test_cpu_equals_ref();
    test_cpu_fast();
    unlink(path);
    return TEST_REPORT();
}
