/*
 * test_perplexity.c - src/eval: the scoring functions against direct float64 computations, the
 * base-row encoding (decode error within half a step), KL of a row against itself, the
 * percentile rule, the base file (round trip, truncated / foreign / hostile files), and
 * muse_ppl_eval_chunk on a synthetic model: batch < n_ctx equals batch = n_ctx, and both equal
 * the rows muse_eval gives for the BOS-substituted chunk.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/kld_base.h"
#include "eval/perplexity.h"
#include "model/model_fixture.h"
#include "muse.h"
#include "test.h"

static uint64_t rng = 12345;
static float uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0);
}

/* a row of logits spread over `spread` (so some tokens fall below the 16-nat floor when spread > 16) */
static void random_row(float *x, int n, float spread) {
    for (int i = 0; i < n; i++) x[i] = spread * (uniform() - 0.5f);
}

/* -log softmax(x)[tok] in float64 */
static double nll_f64(const float *x, int n, int tok) {
    double mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp(x[i] - mx);
    return mx + log(s) - x[tok];
}

static void test_sizes(void) {
    TEST_COND("first of 128", muse_ppl_first(128) == 64);
    TEST_COND("scored of 128", muse_ppl_n_scored(128) == 63);
    TEST_COND("scored of 7", muse_ppl_first(7) == 3 && muse_ppl_n_scored(7) == 3);
    TEST_COND("row length even vocab", muse_kld_row_len(1000) == 1004);
    TEST_COND("row length odd vocab", muse_kld_row_len(999) == 1004);
}

static void test_score(void) {
    enum { N = 301, R = 20 };
    static float x[R * N];
    int32_t next[R];
    double nll = 0, nll2 = 0;
    for (int r = 0; r < R; r++) {
        random_row(x + r * N, N, r % 2 ? 40.f : 6.f);
        next[r] = (int32_t)(uniform() * N) % N;
        const double v = nll_f64(x + r * N, N, next[r]);
        nll += v;
        nll2 += v * v;
    }
    struct muse_ppl_sums s = {0};
    muse_ppl_score(x, N, next, R, &s, NULL);
    TEST_COND("count", s.count == R);
    TEST_CONDF(fabs(s.nll - nll) < 1e-4 * R, "nll %.9g vs %.9g", s.nll, nll);
    double ppl, unc;
    TEST_COND("estimate defined", muse_ppl_estimate(&s, &ppl, &unc) == 1);
    const double mean = nll / R, sd = sqrt((nll2 / R - mean * mean) / (R - 1));
    TEST_CONDF(fabs(ppl / exp(mean) - 1) < 1e-5, "ppl %.9g vs %.9g", ppl, exp(mean));
    TEST_CONDF(fabs(unc / (sd * exp(mean)) - 1) < 1e-4, "unc %.9g vs %.9g", unc, sd * exp(mean));

    /* with packing: the same values up to float rounding */
    static uint16_t packed[R * 306];
    struct muse_ppl_sums p = {0};
    muse_ppl_score(x, N, next, R, &p, packed);
    TEST_CONDF(fabs(p.nll - nll) < 1e-4 * R, "packed nll %.9g vs %.9g", p.nll, nll);

    struct muse_ppl_sums one = {1.0, 1.0, 1};
    TEST_COND("one token: no uncertainty", muse_ppl_estimate(&one, &ppl, &unc) == 0 && fabs(ppl - exp(1.0)) < 1e-12);
    struct muse_ppl_sums none = {0};
    TEST_COND("no tokens", muse_ppl_estimate(&none, &ppl, &unc) == 0 && ppl == 0);
}

static void test_pack(void) {
    enum { N = 257 };
    float x[N];
    uint16_t row[N + 5];
    for (int trial = 0; trial < 6; trial++) {
        random_row(x, N, trial < 3 ? 10.f : 60.f);
        const int tok = trial * 37 % N;
        memset(row, 0xab, sizeof row);
        const double v = muse_kld_pack_row(x, N, tok, row);
        TEST_CONDF(fabs(v - nll_f64(x, N, tok)) < 1e-4, "pack nll %.9g vs %.9g", v, nll_f64(x, N, tok));
        float scale, min_lp;
        memcpy(&scale, row, 4);
        memcpy(&min_lp, row + 2, 4);
        double mx = x[0];
        for (int i = 1; i < N; i++) mx = x[i] > mx ? x[i] : mx;
        const double floor_lp = (mx - nll_f64(x, N, 0) - x[0]) - 16; /* log p of the top token, less 16 */
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const double lp = -nll_f64(x, N, i), dec = scale * row[4 + i] + min_lp;
            bad += fabs(dec - fmax(lp, floor_lp)) > 0.5 * scale + 2e-5; /* under the floor: read as the floor */
        }
        TEST_CONDF(bad == 0, "trial %d: %d decoded log-probs off by more than half a step (scale %g)", trial, bad, scale);
        if (trial >= 3) TEST_CONDF(fabs(scale - 16.0 / 65535) < 1e-9, "clamped scale %g", scale);
        TEST_COND("padding is zero", row[4 + N] == 0);
    }
    /* a constant row: scale 0, every value 0, log p = -log N */
    for (int i = 0; i < N; i++) x[i] = 3.0f;
    muse_kld_pack_row(x, N, 0, row);
    float scale, min_lp;
    memcpy(&scale, row, 4);
    memcpy(&min_lp, row + 2, 4);
    int nz = 0;
    for (int i = 0; i < N; i++) nz += row[4 + i] != 0;
    TEST_COND("constant row: scale 0 and zeros", scale == 0 && nz == 0);
    TEST_CONDF(fabs(min_lp + log(N)) < 1e-5, "constant row: min log-prob %g vs %g", min_lp, -log(N));
}

static void test_kld(void) {
    enum { N = 500, R = 200 };
    static float x[R * N], y[R * N];
    static uint16_t base[R * 504];
    int32_t next[R];
    for (int r = 0; r < R; r++) {
        random_row(x + r * N, N, 12.f);
        for (int i = 0; i < N; i++) y[r * N + i] = x[r * N + i] + 0.3f * (uniform() - 0.5f);
        next[r] = (int32_t)(uniform() * N) % N;
        muse_kld_pack_row(x + r * N, N, next[r], base + r * 504);
    }
    /* the base against itself */
    struct muse_kld_sums s = {0};
    static float kv[R], pd[R];
    muse_kld_score(x, N, next, R, base, &s, kv, pd);
    struct muse_kld_report rep;
    muse_kld_report(&s, &rep);
    TEST_CONDF(fabs(rep.kld.val) < 1e-5, "self KL %g", rep.kld.val);
    TEST_CONDF(rep.same_top.val == 1.0, "self same top %g", rep.same_top.val);
    TEST_CONDF(fabs(rep.ppl.val / rep.ppl_base.val - 1) < 1e-4, "self PPL %g vs base %g", rep.ppl.val, rep.ppl_base.val);
    TEST_CONDF(rep.cor > 0.999, "self correlation %g", rep.cor);
    TEST_CONDF(fabs(rep.p_diff.val) < 1e-4 && rep.p_diff_rms.val < 1e-4, "self p diff %g rms %g", rep.p_diff.val,
               rep.p_diff_rms.val);

    /* a perturbed model: KL against the decoded base in float64 (tokens above the floor) */
    struct muse_kld_sums q = {0};
    muse_kld_score(y, N, next, R, base, &q, kv, pd);
    double kl = 0, top = 0;
    for (int r = 0; r < R; r++) {
        const uint16_t *b = base + r * 504;
        float scale, min_lp;
        memcpy(&scale, b, 4);
        memcpy(&min_lp, b + 2, 4);
        double k = 0;
        int ay = 0, ab = 0;
        for (int i = 0; i < N; i++) {
            const double lpb = (double)scale * b[4 + i] + min_lp;
            if (lpb > -16) k += exp(lpb) * (lpb + nll_f64(y + r * N, N, i));
            if (y[r * N + i] > y[r * N + ay]) ay = i;
            if (b[4 + i] > b[4 + ab]) ab = i;
        }
        TEST_CONDF(fabs(kv[r] - k) < 1e-5 + 1e-4 * fabs(k), "row %d: KL %g vs %g", r, kv[r], k);
        kl += k;
        top += ay == ab;
    }
    muse_kld_report(&q, &rep);
    TEST_CONDF(fabs(rep.kld.val - kl / R) < 1e-6 + 1e-4 * kl / R, "mean KL %g vs %g", rep.kld.val, kl / R);
    TEST_CONDF(rep.kld.val > 1e-4, "a perturbed model has KL > 0 (%g)", rep.kld.val);
    TEST_CONDF(fabs(rep.same_top.val - top / R) < 1e-12, "same top %g vs %g", rep.same_top.val, top / R);
    TEST_CONDF(rep.kld.unc > 0 && rep.same_top.unc >= 0, "uncertainties %g %g", rep.kld.unc, rep.same_top.unc);
}

static void test_percentile(void) {
    const float v[5] = {0, 1, 2, 3, 4};
    TEST_COND("p0", muse_percentile(v, 5, 0) == 0);
    TEST_COND("p100", muse_percentile(v, 5, 1) == 4);
    TEST_COND("p50", fabsf(muse_percentile(v, 5, 0.5f) - 2) < 1e-6f);
    TEST_COND("p10 interpolates", fabsf(muse_percentile(v, 5, 0.1f) - 0.4f) < 1e-6f);
    TEST_COND("median odd", muse_median(v, 5) == 2);
    TEST_COND("median even", muse_median(v, 4) == 1.5f);
}

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
}

static void test_base_file(void) {
    char path[64], bad[64];
    snprintf(path, sizeof path, "/tmp/muse-test-kld-%d.bin", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/muse-test-kld-bad-%d.bin", (int)getpid());
    enum { C = 8, V = 11, K = 2 };
    const int32_t nsc = muse_ppl_n_scored(C), rl = (int32_t)muse_kld_row_len(V);
    int32_t tokens[K * C];
    for (int i = 0; i < K * C; i++) tokens[i] = i % V;
    uint16_t rows[K][3 * 16];
    for (int k = 0; k < K; k++)
        for (int i = 0; i < nsc * rl; i++) rows[k][i] = (uint16_t)(1000 * k + i);
    struct muse_error err;
    struct muse_kld_base *b;
    TEST_COND("create", muse_kld_base_create(path, C, V, K, tokens, &b, &err) == MUSE_OK);
    TEST_COND("write 1", muse_kld_base_write_chunk(b, rows[0], &err) == MUSE_OK);
    TEST_COND("write 2", muse_kld_base_write_chunk(b, rows[1], &err) == MUSE_OK);
    TEST_COND("no third chunk", muse_kld_base_write_chunk(b, rows[1], &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("close", muse_kld_base_close(b, &err) == MUSE_OK);

    TEST_COND("open", muse_kld_base_open(path, &b, &err) == MUSE_OK);
    const struct muse_kld_base_info *in = muse_kld_base_info(b);
    TEST_COND("header", in->n_ctx == C && in->n_vocab == V && in->n_chunk == K);
    TEST_COND("tokens", !memcmp(in->tokens, tokens, sizeof tokens));
    uint16_t got[3 * 16];
    for (int k = 0; k < K; k++)
        TEST_COND("rows", muse_kld_base_read_chunk(b, got, &err) == MUSE_OK && !memcmp(got, rows[k], nsc * rl * 2));
    TEST_COND("no more rows", muse_kld_base_read_chunk(b, got, &err) != MUSE_OK);
    muse_kld_base_close(b, NULL);

    /* hostile and damaged files: one clear error each */
    FILE *f = fopen(path, "rb");
    static uint8_t d[4096];
    size_t n = fread(d, 1, sizeof d, f);
    fclose(f);
    write_bytes(bad, d, n - 1);
    TEST_COND("truncated", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT && strstr(err.msg, "truncated"));
    write_bytes(bad, d, 19);
    TEST_COND("short header", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT);
    uint8_t e[4096];
    memcpy(e, d, n);
    e[0] = 'x';
    write_bytes(bad, e, n);
    TEST_COND("bad magic", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT && strstr(err.msg, "_logits_"));
    memcpy(e, d, n);
    e[20 + 4 * 3] = V; /* token 3 = n_vocab */
    write_bytes(bad, e, n);
    TEST_COND("token out of range", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT && strstr(err.msg, "vocabulary"));
    memcpy(e, d, n);
    e[16] = 0xff, e[17] = 0xff, e[18] = 0xff, e[19] = 0x7f; /* n_chunk = INT32_MAX */
    write_bytes(bad, e, n);
    TEST_COND("huge chunk count", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT);
    memcpy(e, d, n);
    e[8] = 2; /* n_ctx = 2 */
    write_bytes(bad, e, n);
    TEST_COND("tiny n_ctx", muse_kld_base_open(bad, &b, &err) == MUSE_ERR_FORMAT);
    TEST_COND("missing file", muse_kld_base_open("/nonexistent/x.bin", &b, &err) == MUSE_ERR_IO);
    TEST_COND("a directory", muse_kld_base_open("/tmp", &b, &err) == MUSE_ERR_IO);

    /* a writer closed early reports it */
    TEST_COND("create again", muse_kld_base_create(path, C, V, K, tokens, &b, &err) == MUSE_OK);
    muse_kld_base_write_chunk(b, rows[0], &err);
    TEST_COND("early close", muse_kld_base_close(b, &err) == MUSE_ERR_IO && strstr(err.msg, "1 of 2"));
    remove(path);
    remove(bad);
}

/* What the progress callback saw; it cancels at call `cancel_at` (-1: never). */
struct seen_progress {
    int calls;
    int64_t last_done, total;
    int cancel_at;
};
static int progress_cb(void *user, uint64_t done, uint64_t total) {
    struct seen_progress *p = user;
    p->calls++;
    p->last_done = (int64_t)done;
    p->total = (int64_t)total;
    return p->calls == p->cancel_at;
}

static void test_eval_chunk(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/muse-test-ppl-%d.gguf", (int)getpid());
    struct fx_spec spec = fx_default();
    struct muse_model *m = NULL;
    struct muse_context *c32 = NULL, *c7 = NULL;
    struct muse_error err;
    if (!fx_write(path, &spec) || muse_model_load(path, muse_model_default_params(), &m, &err)) {
        TEST_COND("fixture model", 0);
        return;
    }
    enum { C = 32 };
    struct muse_context_params p = muse_context_default_params();
    p.n_ctx = C;
    p.kv_type = MUSE_KV_TYPE_F32;
    p.n_threads = 1;
    p.n_batch = C;
    TEST_COND("context", muse_context_create(m, p, &c32, &err) == MUSE_OK);
    p.n_batch = 7;
    TEST_COND("context 7", muse_context_create(m, p, &c7, &err) == MUSE_OK);
    const int32_t V = muse_model_n_vocab(m), first = muse_ppl_first(C), bos = 5;
    int32_t chunk[C];
    for (int i = 0; i < C; i++) chunk[i] = (i * 7919 + 13) % V;
    const int32_t keep = chunk[0];
    float *a = malloc(sizeof(float) * (C - first) * V), *b = malloc(sizeof(float) * (C - first) * V);
    float *all = malloc(sizeof(float) * C * V);
    TEST_COND("eval whole", muse_ppl_eval_chunk(c32, chunk, C, C, bos, a, NULL, NULL, &err) == MUSE_OK);
    TEST_COND("caller's tokens untouched", chunk[0] == keep);
    TEST_COND("eval again (cache cleared)", muse_ppl_eval_chunk(c32, chunk, C, C, bos, b, NULL, NULL, &err) == MUSE_OK &&
                                                !memcmp(a, b, sizeof(float) * (C - first) * V));
    TEST_COND("eval in 7s", muse_ppl_eval_chunk(c7, chunk, C, 7, bos, b, NULL, NULL, &err) == MUSE_OK);
    double dmax = 0;
    for (int i = 0; i < (C - first) * V; i++) dmax = fmax(dmax, fabs(a[i] - b[i]));
    TEST_CONDF(dmax < 1e-4, "batch 7 vs batch 32: max diff %g", dmax);
    /* the same rows from muse_eval on the substituted chunk */
    int32_t sub[C];
    memcpy(sub, chunk, sizeof sub);
    sub[0] = bos;
    muse_kv_clear(c32);
    TEST_COND("muse_eval", muse_eval(c32, sub, C, all, 1, &err) == MUSE_OK);
    dmax = 0;
    for (int i = 0; i < (C - first) * V; i++) dmax = fmax(dmax, fabs(a[i] - all[(size_t)first * V + i]));
    TEST_CONDF(dmax < 1e-5, "rows first.. vs muse_eval: max diff %g", dmax);
    /* progress after every forward of 7, and a cancel from it */
    struct seen_progress pr = {0, 0, 0, -1};
    TEST_COND("eval with progress", muse_ppl_eval_chunk(c7, chunk, C, 7, bos, b, progress_cb, &pr, &err) == MUSE_OK);
    TEST_CONDF(pr.calls == (C + 6) / 7 && pr.last_done == C && pr.total == C, "progress: %d calls, last %lld of %lld",
               pr.calls, (long long)pr.last_done, (long long)pr.total);
    pr = (struct seen_progress){0, 0, 0, 2};
    TEST_COND("cancelled by progress", muse_ppl_eval_chunk(c7, chunk, C, 7, bos, b, progress_cb, &pr, &err) ==
                                           MUSE_ERR_CANCELLED && pr.calls == 2);
    TEST_COND("chunk too large", muse_ppl_eval_chunk(c32, chunk, C + 1, C, bos, a, NULL, NULL, &err) == MUSE_ERR_CONTEXT);
    TEST_COND("chunk too small", muse_ppl_eval_chunk(c32, chunk, 3, C, bos, a, NULL, NULL, &err) == MUSE_ERR_INVALID_ARG);
    chunk[9] = V;
    TEST_COND("bad token", muse_ppl_eval_chunk(c32, chunk, C, C, bos, a, NULL, NULL, &err) == MUSE_ERR_INVALID_ARG);
    free(a);
    free(b);
    free(all);
    muse_context_free(c32);
    muse_context_free(c7);
    muse_model_free(m);
    remove(path);
}

int main(void) {
    test_sizes();
    test_score();
    test_pack();
    test_kld();
    test_percentile();
    test_base_file();
    test_eval_chunk();
    return TEST_REPORT();
}
