/*
 * test_drafter.c - the DFlash drafter (src/speculative, include/muse.h) against the goldens of
 * $MUSE_SHARED/golden/dflash (README there): captured features, raw block logits, drafts, both
 * confidence definitions and the discarded row 0, on the ref and cpu backends with an F32 KV
 * cache and ring; cpu == ref bit for bit; the injection path alone (golden features in); chunking,
 * rollback and ring wrap-around invariance on synthetic pairs (bit for bit against a fresh or a
 * larger ring); F16 / Q8_0 rings; the gates; and bad drafter files, each with one clear error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dflash_fixture.h"
#include "muse.h"
#include "test.h"

static char g_dir[1024], g_target[1200], g_drafter[1200];

struct golden_case {
    int32_t P, anchor;
    int32_t tokens[64];
    int32_t drafts[16];
    double conf[16];
    int32_t row0;
    int32_t top_ids[16][10];
    double top_vals[16][10];
    int n_drafts;
};

static int json_ints(const cJSON *a, int32_t *out, int max) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) if (n < max) out[n++] = (int32_t)e->valuedouble;
    return n;
}

/* The golden anchors: tokens = prompt + the first P - 20 greedy tokens. */
static int load_golden(struct golden_case *cases, int max) {
    char path[1200];
    snprintf(path, sizeof path, "%s/dflash_vis.golden.json", g_dir);
    char *text = fx_read_text(path);
    if (!text) return 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return 0;
    int32_t prompt[64], greedy[64];
    int n_prompt = json_ints(cJSON_GetObjectItem(root, "prompt"), prompt, 64);
    int n_greedy = json_ints(cJSON_GetObjectItem(root, "plain_greedy"), greedy, 64);
    int n = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(root, "drafts")) {
        if (n == max) break;
        struct golden_case *c = &cases[n];
        c->P = (int32_t)cJSON_GetObjectItem(d, "n_committed")->valuedouble;
        c->anchor = (int32_t)cJSON_GetObjectItem(d, "anchor_token")->valuedouble;
        if (c->P - n_prompt > n_greedy || c->P > 64) continue;
        for (int i = 0; i < c->P; i++) c->tokens[i] = i < n_prompt ? prompt[i] : greedy[i - n_prompt];
        c->n_drafts = json_ints(cJSON_GetObjectItem(d, "draft_tokens"), c->drafts, 16);
        const cJSON *e;
        int k = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "confidences")) if (k < 16) c->conf[k++] = e->valuedouble;
        c->row0 = (int32_t)cJSON_GetObjectItem(d, "row0_argmax_discarded")->valuedouble;
        int r = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "top10_raw_logits_per_row")) {
            int j = 0;
            const cJSON *pair;
            cJSON_ArrayForEach(pair, e) if (r < 16 && j < 10) {
                c->top_ids[r][j] = (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble;
                c->top_vals[r][j++] = cJSON_GetArrayItem(pair, 1)->valuedouble;
            }
            r++;
        }
        n++;
    }
    cJSON_Delete(root);
    return n;
}

/* A target context (n_ctx, backend, threads, F32 KV) + drafter + draft context (F32 ring unless told). */
struct rig {
    struct muse_model *model;
    struct muse_context *ctx;
    struct muse_drafter *d;
    struct muse_draft_ctx *dc;
};

static bool rig_open(struct rig *r, const char *target, const char *drafter, uint32_t n_ctx, const char *backend, int threads,
                     struct muse_draft_ctx_params dp) {
    struct muse_error err;
    memset(r, 0, sizeof *r);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = n_ctx;
    cp.backend = backend;
    cp.n_threads = (uint32_t)threads;
    cp.kv_type = MUSE_KV_TYPE_F32;
    cp.no_repack = 1; /* the exact kernels at every batch size (no flash attention): cpu == ref bit for bit */
    if (muse_model_load(target, muse_model_default_params(), &r->model, &err) ||
        muse_context_create(r->model, cp, &r->ctx, &err) ||
        muse_drafter_load(drafter, r->model, muse_drafter_default_params(), &r->d, &err) ||
        muse_draft_ctx_create(r->d, r->ctx, dp, &r->dc, &err)) {
        fprintf(stderr, "rig: %s\n", err.msg);
        return false;
    }
    return true;
}

static void rig_close(struct rig *r) {
    muse_draft_ctx_free(r->dc);
    muse_drafter_free(r->d);
    muse_context_free(r->ctx);
    muse_model_free(r->model);
}

static struct muse_draft_ctx_params ring_params(enum muse_kv_type t, uint32_t n_ring, uint32_t n_batch) {
    struct muse_draft_ctx_params p = muse_draft_ctx_default_params();
    p.kv_type = t;
    p.n_ring = n_ring;
    p.n_batch = n_batch;
    return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

/* conf_top10 as llama.cpp computes it, from a row of logits. */
static double top10_prob(const float *row, int64_t n) {
    double top[10];
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = row[i];
        if (k == 10 && v <= top[9]) continue;
        int j = k < 10 ? k++ : 9;
        for (; j > 0 && v > top[j - 1]; j--) top[j] = top[j - 1];
        top[j] = v;
    }
    double s = 0;
    for (int i = 0; i < k; i++) s += exp(top[i] - top[0]);
    return 1.0 / s;
}

// ---- the goldens ----------------------------------------------------------------------------

/* One golden anchor on one backend: returns the block logits (malloc'd) for the cpu == ref check. */
static float *check_golden_case(const struct golden_case *c, const char *backend, int threads) {
    struct rig r;
    if (!rig_open(&r, g_target, g_drafter, (uint32_t)c->P, backend, threads, ring_params(MUSE_KV_TYPE_F32, 0, 0))) {
        TEST_COND("open the golden pair", false);
        return NULL;
    }
    struct muse_error err;
    const int32_t F = muse_drafter_n_features(r.d), V = muse_model_n_vocab(r.model);
    float *feat = malloc(sizeof(float) * (size_t)c->P * (size_t)F), *out = NULL;
    TEST_CONDF(muse_draft_eval(r.dc, c->tokens, c->P, NULL, 0, feat, &err) == MUSE_OK, "eval: %s", err.msg);
    TEST_CONDF(muse_draft_n_past(r.dc) == c->P && muse_context_n_past(r.ctx) == c->P, "ring and target at P = %d", c->P);
    char path[1300];
    int64_t rows, cols;
    snprintf(path, sizeof path, "%s/dflash_vis.P%d.features.npy", g_dir, c->P);
    float *gf = fx_npy_read(path, &rows, &cols);
    TEST_CONDF(gf && rows == c->P && cols == F, "golden features P%d: [%lld][%lld]", c->P, (long long)rows, (long long)cols);
    if (gf && rows == c->P && cols == F) {
        double d = max_abs_diff(feat, gf, (size_t)rows * (size_t)cols);
        TEST_CONDF(d <= 1e-3, "%s: features P%d max |diff| %g > 1e-3", backend, c->P, d);
    }
    struct muse_draft_block b;
    TEST_CONDF(muse_draft_block(r.dc, c->anchor, 0, &b, &err) == MUSE_OK, "draft: %s", err.msg);
    TEST_CONDF(b.anchor_pos == c->P && b.n_rows == c->n_drafts + 1 && b.n_drafts == c->n_drafts, "block shape %d %d", b.anchor_pos,
               b.n_rows);
    snprintf(path, sizeof path, "%s/dflash_vis.P%d.draft_logits.npy", g_dir, c->P);
    float *gl = fx_npy_read(path, &rows, &cols);
    TEST_CONDF(gl && rows == b.n_rows && cols == V, "golden logits P%d", c->P);
    if (gl && rows == b.n_rows && cols == V) {
        double d = max_abs_diff(b.logits, gl, (size_t)rows * (size_t)cols);
        TEST_CONDF(d <= 1e-3, "%s: logits P%d max |diff| %g > 1e-3", backend, c->P, d);
        for (int32_t i = 0; i < b.n_drafts; i++) {
            double want = top10_prob(gl + (size_t)(i + 1) * V, V);
            TEST_CONDF(fabs(b.conf_top10[i] - want) <= 1e-4, "%s: P%d conf_top10[%d] %g, from the golden logits %g", backend, c->P, i,
                       b.conf_top10[i], want);
        }
    }
    for (int32_t i = 0; i < b.n_drafts; i++) {
        TEST_CONDF(b.tokens[i] == c->drafts[i], "%s: P%d draft %d = %d, golden %d", backend, c->P, i, b.tokens[i], c->drafts[i]);
        TEST_CONDF(fabs(b.conf[i] - c->conf[i]) <= 1e-4, "%s: P%d conf %d = %g, golden %g", backend, c->P, i, b.conf[i], c->conf[i]);
    }
    TEST_CONDF(b.row0_argmax == c->row0, "%s: row 0 argmax %d, golden %d", backend, b.row0_argmax, c->row0);
    for (int32_t row = 0; row < b.n_rows; row++)
        for (int j = 0; j < 10; j++) {
            const int32_t id = c->top_ids[row][j];
            TEST_CONDF(fabs(b.logits[(size_t)row * V + id] - c->top_vals[row][j]) <= 1e-3, "%s: P%d row %d top id %d", backend, c->P,
                       row, id);
        }
    /* the injection path alone: the golden features straight into a fresh ring give the same block */
    if (gf) {
        out = malloc(sizeof(float) * (size_t)b.n_rows * V);
        memcpy(out, b.logits, sizeof(float) * (size_t)b.n_rows * V);
        muse_draft_clear(r.dc);
        TEST_CONDF(muse_draft_inject(r.dc, gf, c->P, &err) == MUSE_OK, "inject: %s", err.msg);
        TEST_CONDF(muse_draft_block(r.dc, c->anchor, 0, &b, &err) == MUSE_OK, "draft: %s", err.msg);
        if (gl) {
            double d = max_abs_diff(b.logits, gl, (size_t)b.n_rows * V);
            TEST_CONDF(d <= 1e-3, "%s: logits from the golden features, P%d: max |diff| %g", backend, c->P, d);
        }
    }
    free(gf);
    free(gl);
    free(feat);
    rig_close(&r);
    return out;
}

static void test_goldens(void) {
    struct golden_case cases[8];
    int n = load_golden(cases, 8);
    TEST_CONDF(n >= 2, "golden anchors in %s: %d", g_dir, n);
    for (int i = 0; i < n; i++) {
        float *ref = check_golden_case(&cases[i], "ref", 1);
        float *cpu = check_golden_case(&cases[i], "cpu", 2);
        float *cpu3 = check_golden_case(&cases[i], "cpu", 3);
        const size_t sz = sizeof(float) * (size_t)(cases[i].n_drafts + 1) * 1000;
        TEST_CONDF(ref && cpu && cpu3 && !memcmp(ref, cpu, sz) && !memcmp(ref, cpu3, sz), "P%d: cpu (2, 3 threads) == ref bit for bit",
                   cases[i].P);
        free(ref);
        free(cpu);
        free(cpu3);
    }
}

/* F16 and Q8_0 rings (llama.cpp's default is F16): the same drafts, logits close to the F32 ring's. */
static void test_ring_types(void) {
    struct golden_case cases[8];
    int n = load_golden(cases, 8);
    for (int i = 0; i < n; i++) {
        const struct golden_case *c = &cases[i];
        float *logits32 = NULL;
        for (int t = 0; t < 3; t++) {
            static const enum muse_kv_type types[3] = {MUSE_KV_TYPE_F32, MUSE_KV_TYPE_F16, MUSE_KV_TYPE_Q8_0};
            struct rig r;
            struct muse_error err;
            if (!rig_open(&r, g_target, g_drafter, (uint32_t)c->P, "cpu", 2, ring_params(types[t], 0, 0))) {
                TEST_COND("open", false);
                continue;
            }
            struct muse_draft_block b;
            TEST_CONDF(muse_draft_eval(r.dc, c->tokens, c->P, NULL, 0, NULL, &err) == MUSE_OK, "eval: %s", err.msg);
            TEST_CONDF(muse_draft_block(r.dc, c->anchor, 0, &b, &err) == MUSE_OK, "draft: %s", err.msg);
            const size_t nl = (size_t)b.n_rows * 1000;
            if (t == 0) {
                logits32 = malloc(sizeof(float) * nl);
                memcpy(logits32, b.logits, sizeof(float) * nl);
            } else {
                double d = max_abs_diff(b.logits, logits32, nl);
                TEST_CONDF(d <= (t == 1 ? 0.05 : 0.5), "%s ring: logits move by %g", muse_kv_type_name(types[t]), d);
                if (t == 1)
                    for (int32_t k = 0; k < b.n_drafts; k++)
                        TEST_CONDF(b.tokens[k] == c->drafts[k], "f16 ring: P%d draft %d = %d, golden %d", c->P, k, b.tokens[k], c->drafts[k]);
            }
            rig_close(&r);
        }
        free(logits32);
    }
}

// ---- invariances on synthetic pairs -------------------------------------------------------------

static char s_target[1200], s_drafter[1200];

/* tokens of a synthetic prompt */
static void some_tokens(int32_t *t, int n) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + 11) % 280 + 3);
}

/* Draft at P after evaluating t[0..P) with the given ring / chunking: a copy of the logits. */
static float *draft_after(const int32_t *t, int P, uint32_t n_ring, uint32_t n_batch, int32_t anchor, int32_t n_rows, const char *backend) {
    struct rig r;
    struct muse_error err;
    if (!rig_open(&r, s_target, s_drafter, 256, backend, 2, ring_params(MUSE_KV_TYPE_F32, n_ring, n_batch))) return NULL;
    struct muse_draft_block b;
    float *out = NULL;
    if (muse_draft_eval(r.dc, t, P, NULL, 0, NULL, &err) == MUSE_OK && muse_draft_block(r.dc, anchor, n_rows, &b, &err) == MUSE_OK) {
        out = malloc(sizeof(float) * (size_t)b.n_rows * 300);
        memcpy(out, b.logits, sizeof(float) * (size_t)b.n_rows * 300);
    } else {
        fprintf(stderr, "draft_after: %s\n", err.msg);
    }
    rig_close(&r);
    return out;
}

static void test_invariances(void) {
    int32_t t[200];
    some_tokens(t, 200);
    struct muse_error err;
    const int P = 70; /* past the window (8) and the default ring (pad32(8 + 16 + 1) = 32 cells) */
    const size_t nl = sizeof(float) * 16 * 300;
    float *base = draft_after(t, P, 0, 0, 42, 0, "ref");
    TEST_COND("synthetic pair drafts", base != NULL);
    if (!base) return;
    /* chunking (3 rows per injection and target chunk), a much larger ring, the cpu backend: same bits */
    float *a = draft_after(t, P, 0, 3, 42, 0, "ref");
    float *b = draft_after(t, P, 512, 0, 42, 0, "ref");
    float *c = draft_after(t, P, 0, 5, 42, 0, "cpu");
    TEST_COND("chunked injection == one batch, bit for bit", a && !memcmp(a, base, nl));
    TEST_COND("a 512-cell ring == the default ring after wrapping, bit for bit", b && !memcmp(b, base, nl));
    TEST_COND("cpu == ref, bit for bit", c && !memcmp(c, base, nl));
    free(a);
    free(b);
    free(c);

    /* rollback: go past P (a verify batch), roll both back, draft again: the same bits as fresh */
    struct rig r;
    if (rig_open(&r, s_target, s_drafter, 256, "ref", 1, ring_params(MUSE_KV_TYPE_F32, 0, 0))) {
        struct muse_draft_block blk;
        TEST_COND("eval P", muse_draft_eval(r.dc, t, P, NULL, 0, NULL, &err) == MUSE_OK);
        TEST_COND("draft at P", muse_draft_block(r.dc, 42, 0, &blk, &err) == MUSE_OK);
        TEST_COND("a draft does not move the ring", muse_draft_n_past(r.dc) == P);
        TEST_COND("verify rows", muse_draft_eval(r.dc, t + P, 9, NULL, 1 /* unused */, NULL, &err) == MUSE_OK);
        TEST_CONDF(muse_draft_truncate(r.dc, P + 2, &err) == MUSE_OK && muse_kv_truncate(r.ctx, P + 2, &err) == MUSE_OK,
                   "roll back to P + 2: %s", err.msg);
        TEST_COND("draft at P + 2", muse_draft_block(r.dc, 7, 0, &blk, &err) == MUSE_OK);
        float *fresh = draft_after(t, P + 2, 0, 0, 7, 0, "ref");
        TEST_COND("rolled back == fresh at P + 2, bit for bit", fresh && !memcmp(fresh, blk.logits, nl));
        free(fresh);
        TEST_COND("back to P", muse_draft_truncate(r.dc, P, &err) == MUSE_OK && muse_kv_truncate(r.ctx, P, &err) == MUSE_OK);
        TEST_COND("draft at P again", muse_draft_block(r.dc, 42, 0, &blk, &err) == MUSE_OK);
        TEST_COND("rolled back == fresh at P, bit for bit", !memcmp(base, blk.logits, nl));
        /* a copy of the ring drafts the same bits; a copy across layouts is refused */
        struct muse_draft_ctx *copy, *other;
        if (muse_draft_ctx_create(r.d, r.ctx, ring_params(MUSE_KV_TYPE_F32, 0, 0), &copy, &err) == MUSE_OK) {
            TEST_COND("copy", muse_draft_ctx_copy(copy, r.dc, &err) == MUSE_OK && muse_draft_n_past(copy) == P);
            struct muse_draft_block cb;
            TEST_COND("the copy drafts the same bits", muse_draft_block(copy, 42, 0, &cb, &err) == MUSE_OK &&
                                                           !memcmp(cb.logits, base, nl));
            if (muse_draft_ctx_create(r.d, r.ctx, ring_params(MUSE_KV_TYPE_F16, 0, 0), &other, &err) == MUSE_OK) {
                TEST_COND("copy to an f16 ring refused", muse_draft_ctx_copy(other, r.dc, &err) == MUSE_ERR_INVALID_ARG);
                muse_draft_ctx_free(other);
            }
            muse_draft_ctx_free(copy);
        }
        /* too deep for a 32-cell ring: one clear error, the ring unchanged */
        muse_status st = muse_draft_truncate(r.dc, P - 20, &err);
        TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "no longer holds") && !strchr(err.msg, '\n'), "deep rollback: %d %s",
                   st, err.msg);
        TEST_COND("ring unchanged after a refused rollback", muse_draft_n_past(r.dc) == P);
        TEST_COND("keep more than held", muse_draft_truncate(r.dc, P + 1, &err) == MUSE_ERR_INVALID_ARG);
        /* out of step with the target */
        TEST_COND("target ahead", muse_eval(r.ctx, t + P, 1, NULL, 0, &err) == MUSE_OK);
        st = muse_draft_eval(r.dc, t, 1, NULL, 0, NULL, &err);
        TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "out of step"), "out of step: %d %s", st, err.msg);
        /* bad arguments */
        TEST_COND("anchor out of range", muse_draft_block(r.dc, 300, 0, &blk, &err) == MUSE_ERR_INVALID_ARG);
        TEST_COND("one row is no block", muse_draft_block(r.dc, 1, 1, &blk, &err) == MUSE_ERR_INVALID_ARG);
        TEST_COND("17 rows > block_size 16", muse_draft_block(r.dc, 1, 17, &blk, &err) == MUSE_ERR_INVALID_ARG);
        TEST_COND("inject 0 rows", muse_draft_inject(r.dc, NULL, 0, &err) == MUSE_ERR_INVALID_ARG);
        muse_draft_clear(r.dc);
        muse_kv_clear(r.ctx);
        TEST_COND("cleared", muse_draft_n_past(r.dc) == 0);
        TEST_COND("draft on an empty ring (block only)", muse_draft_block(r.dc, 5, 4, &blk, &err) == MUSE_OK && blk.anchor_pos == 0);
        rig_close(&r);
    } else {
        TEST_COND("open", false);
    }

    /* a narrowed block (llama.cpp's n_max + 1 rows) is another computation: its rows differ */
    float *narrow = draft_after(t, P, 0, 0, 42, 4, "ref");
    TEST_COND("4-row block drafts", narrow != NULL);
    if (narrow) TEST_COND("a 4-row block differs from the 16-row one (non-causal)", memcmp(narrow, base, sizeof(float) * 4 * 300) != 0);
    free(narrow);
    free(base);

    /* a context of another model is refused */
    struct rig r2;
    if (rig_open(&r2, g_target, g_drafter, 32, "ref", 1, ring_params(MUSE_KV_TYPE_F32, 0, 0))) {
        struct muse_model *m;
        struct muse_context *ctx;
        struct muse_draft_ctx *dc;
        if (muse_model_load(s_target, muse_model_default_params(), &m, &err) == MUSE_OK) {
            struct muse_context_params cp = muse_context_default_params();
            cp.n_ctx = 16;
            if (muse_context_create(m, cp, &ctx, &err) == MUSE_OK) {
                muse_status st = muse_draft_ctx_create(r2.d, ctx, muse_draft_ctx_default_params(), &dc, &err);
                TEST_CONDF(st == MUSE_ERR_INVALID_ARG, "another model's context: %d %s", st, err.msg);
                muse_context_free(ctx);
            }
            muse_model_free(m);
        }
        struct muse_draft_ctx_params p = ring_params(MUSE_KV_TYPE_F32, 38, 0); /* < window 32 + block 8 - 1 */
        TEST_COND("ring too small", muse_draft_ctx_create(r2.d, r2.ctx, p, &dc, &err) == MUSE_ERR_INVALID_ARG);
        rig_close(&r2);
    }
}

// ---- the gates ----------------------------------------------------------------------------------

static void test_gates(void) {
    const float conf[5] = {0.9f, 0.8f, 0.3f, 0.9f, 0.9f}, top10[5] = {0.95f, 0.5f, 0.45f, 0.9f, 0.9f};
    struct muse_draft_block b = {.n_drafts = 5, .conf = conf, .conf_top10 = top10};
    TEST_COND("p_min 0 keeps all", muse_draft_gate_p_min(&b, 0.0f) == 5);
    TEST_COND("p_min 0.5 stops at the first row below", muse_draft_gate_p_min(&b, 0.5f) == 2);
    TEST_COND("p_min 0.99 keeps none", muse_draft_gate_p_min(&b, 0.99f) == 0);
    TEST_COND("cumulative 0 keeps all", muse_draft_gate_cumulative(&b, 0.0f) == 5);
    TEST_COND("cumulative 0.35: 0.9, 0.72 kept, 0.216 not", muse_draft_gate_cumulative(&b, 0.35f) == 2);
    TEST_COND("cumulative 0.95 keeps none", muse_draft_gate_cumulative(&b, 0.95f) == 0);
}

// ---- bad drafter files --------------------------------------------------------------------------

static void expect_bad(const char *what, const struct fx_variant *v, muse_status want, const char *needle) {
    char path[1200];
    fx_tmp_path(path, sizeof path, "bad.gguf");
    if (!fx_write_variant(g_drafter, path, v)) {
        TEST_CONDF(false, "%s: could not write the variant", what);
        return;
    }
    struct muse_model *m;
    struct muse_error err;
    if (muse_model_load(g_target, muse_model_default_params(), &m, &err)) return;
    struct muse_drafter *d = NULL;
    muse_status st = muse_drafter_load(path, m, muse_drafter_default_params(), &d, &err);
    if (want == MUSE_OK)
        TEST_CONDF(st == MUSE_OK && d, "%s: status %d, message '%s'", what, st, err.msg);
    else
        TEST_CONDF(st == want && strstr(err.msg, needle) && !strchr(err.msg, '\n') && !d,
                   "%s: status %d (want %d), message '%s' (want '%s')", what, st, want, err.msg, needle);
    muse_drafter_free(d);
    muse_model_free(m);
    unlink(path);
}

static void test_bad_files(void) {
    static const int32_t layers_out[] = {1, 3, 5, 8}, layers_neg[] = {1, -3}, pattern[] = {1, 0};
    struct fx_variant v;
#define V(...) (v = (struct fx_variant){__VA_ARGS__}, &v)
    expect_bad("unchanged copy loads", V(0), MUSE_OK, "");
    expect_bad("no mask token id", V(.omit_key = "tokenizer.ggml.mask_token_id"), MUSE_ERR_MISSING, "tokenizer.ggml.mask_token_id");
    expect_bad("mask id outside the vocabulary", V(.set_key = "tokenizer.ggml.mask_token_id", .set_type = MUSE_GGUF_TYPE_UINT32,
                                                   .set_u32 = 1000),
               MUSE_ERR_SHAPE, "mask_token_id 1000");
    expect_bad("target layer = the target's layer count",
               V(.set_key = "dflash.target_layers", .set_type = MUSE_GGUF_TYPE_INT32, .set_i32 = layers_out, .set_n = 4),
               MUSE_ERR_SHAPE, "target_layers[3] = 8");
    expect_bad("negative target layer",
               V(.set_key = "dflash.target_layers", .set_type = MUSE_GGUF_TYPE_INT32, .set_i32 = layers_neg, .set_n = 2),
               MUSE_ERR_FORMAT, "dflash.target_layers");
    expect_bad("no target layers", V(.omit_key = "dflash.target_layers"), MUSE_ERR_MISSING, "dflash.target_layers");
    expect_bad("width mismatch", V(.set_key = "dflash.embedding_length", .set_type = MUSE_GGUF_TYPE_UINT32, .set_u32 = 128),
               MUSE_ERR_SHAPE, "embedding_length 128");
    expect_bad("vocabulary mismatch", V(.n_tokens = 999), MUSE_ERR_SHAPE, "vocabulary (999 tokens)");
    expect_bad("no token list: the target's vocabulary is used", V(.omit_key = "tokenizer.ggml.tokens"), MUSE_OK, "");
    expect_bad("missing tensor", V(.omit_tensor = "blk.1.ffn_up.weight"), MUSE_ERR_MISSING, "blk.1.ffn_up.weight");
    expect_bad("mis-shaped matrix", V(.reshape_tensor = "fc.weight"), MUSE_ERR_SHAPE, "fc.weight");
    expect_bad("mis-shaped norm", V(.reshape_tensor = "blk.0.attn_k_norm.weight"), MUSE_ERR_SHAPE, "blk.0.attn_k_norm.weight");
    expect_bad("f16 norm", V(.retype_tensor = "enc.output_norm.weight"), MUSE_ERR_SHAPE, "expected f32");
    expect_bad("DFlash2 tensor", V(.add_tensor = "blk.0.attn_conv_base"), MUSE_ERR_UNSUPPORTED, "DFlash2");
    expect_bad("unknown tensor", V(.add_tensor = "blk.2.attn_norm.weight"), MUSE_ERR_UNSUPPORTED, "unexpected tensor");
    expect_bad("DFlash2 key", V(.set_key = "dflash.selector_rank", .set_type = MUSE_GGUF_TYPE_UINT32, .set_u32 = 256),
               MUSE_ERR_UNSUPPORTED, "DFlash2");
    expect_bad("causal block", V(.set_key = "dflash.attention.causal", .set_type = MUSE_GGUF_TYPE_BOOL, .set_u32 = 1),
               MUSE_ERR_UNSUPPORTED, "causal");
    expect_bad("a full-attention layer", V(.set_key = "dflash.attention.sliding_window_pattern", .set_type = MUSE_GGUF_TYPE_BOOL,
                                           .set_i32 = pattern, .set_n = 2),
               MUSE_ERR_FORMAT, "not sliding-window");
    expect_bad("no window", V(.omit_key = "dflash.attention.sliding_window"), MUSE_ERR_MISSING, "sliding_window");
    expect_bad("block of 1", V(.set_key = "dflash.block_size", .set_type = MUSE_GGUF_TYPE_UINT32, .set_u32 = 1), MUSE_ERR_FORMAT,
               "block_size");
    expect_bad("heads not dividing", V(.set_key = "dflash.attention.head_count_kv", .set_type = MUSE_GGUF_TYPE_UINT32, .set_u32 = 3),
               MUSE_ERR_FORMAT, "head_count_kv");
    expect_bad("a text model", V(.set_key = "general.architecture", .set_type = MUSE_GGUF_TYPE_STRING, .set_str = "muse-glimmer"),
               MUSE_ERR_UNSUPPORTED, "not a DFlash drafter");
#undef V
    /* the tokenizer of another vocabulary size */
    char tgt[1200], drf[1200];
    struct muse_synth_dflash_config dc;
    muse_synth_dflash_default(&dc);
    dc.block_size = 8;
    if (fx_synth_pair("vocab", 4, 8, 256, &dc, tgt, drf, sizeof tgt)) {
        struct muse_model *m;
        struct muse_error err;
        struct muse_drafter *d = NULL;
        if (muse_model_load(g_target, muse_model_default_params(), &m, &err) == MUSE_OK) {
            muse_status st = muse_drafter_load(drf, m, muse_drafter_default_params(), &d, &err);
            /* width 64 vs 256 is found first */
            TEST_CONDF(st == MUSE_ERR_SHAPE && strstr(err.msg, "embedding_length 64"), "another pair's drafter: %d %s", st, err.msg);
            muse_drafter_free(d);
            muse_model_free(m);
        }
        unlink(tgt);
        unlink(drf);
    }
    /* the drafter given as the model, the model given as the drafter */
    struct muse_model *m;
    struct muse_error err;
    muse_status st = muse_model_load(g_drafter, muse_model_default_params(), &m, &err);
    TEST_CONDF(st == MUSE_ERR_UNSUPPORTED && strstr(err.msg, "--draft-model"), "drafter as the model: %s", err.msg);
    if (muse_model_load(g_target, muse_model_default_params(), &m, &err) == MUSE_OK) {
        struct muse_drafter *d;
        st = muse_drafter_load(g_target, m, muse_drafter_default_params(), &d, &err);
        TEST_CONDF(st == MUSE_ERR_UNSUPPORTED && strstr(err.msg, "not a DFlash drafter"), "model as the drafter: %s", err.msg);
        st = muse_drafter_load("/nonexistent/d.gguf", m, muse_drafter_default_params(), &d, &err);
        TEST_CONDF(st == MUSE_ERR_IO, "missing file: %d %s", st, err.msg);
        muse_model_free(m);
    }
}

static void test_facts(void) {
    struct muse_model *m;
    struct muse_drafter *d;
    struct muse_error err;
    if (muse_model_load(g_target, muse_model_default_params(), &m, &err) ||
        muse_drafter_load(g_drafter, m, muse_drafter_default_params(), &d, &err)) {
        TEST_COND("load the golden pair", false);
        return;
    }
    TEST_COND("block_size 8", muse_drafter_block_size(d) == 8);
    TEST_COND("mask 996", muse_drafter_mask_token(d) == 996);
    TEST_COND("F = 4 x 256", muse_drafter_n_features(d) == 1024);
    TEST_COND("4 target layers", muse_drafter_n_target_layers(d) == 4);
    TEST_COND("target layers 1, 3, 5, 7", muse_drafter_target_layer(d, 0) == 1 && muse_drafter_target_layer(d, 3) == 7 &&
                                              muse_drafter_target_layer(d, 4) == -1);
    TEST_COND("window 32", muse_drafter_n_swa(d) == 32);
    TEST_COND("rows for n_max 3 (llama.cpp's default)", muse_draft_rows(d, 3) == 4);
    TEST_COND("rows for n_max 15: clamped to block_size - 1", muse_draft_rows(d, 15) == 8);
    TEST_COND("rows for n_max 0", muse_draft_rows(d, 0) == 2);
    muse_drafter_free(d);
    muse_model_free(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/golden/dflash", test_shared_dir());
    snprintf(g_target, sizeof g_target, "%s/df-target-8l-256.gguf", g_dir);
    snprintf(g_drafter, sizeof g_drafter, "%s/df-drafter.gguf", g_dir);
    test_facts();
    test_gates();
    test_goldens();
    test_ring_types();
    test_bad_files();
    /* a synthetic pair: block 16, window 8, target layers 0 (the normed embedding), 2, 5 */
    struct muse_synth_dflash_config dc;
    muse_synth_dflash_default(&dc);
    dc.block_size = 16, dc.n_swa = 8, dc.n_target_layers = 3, dc.n_head = 4, dc.n_head_kv = 2, dc.head_dim = 16;
    dc.target_layers[0] = 0, dc.target_layers[1] = 2, dc.target_layers[2] = 5;
    if (fx_synth_pair("inv", 6, 8, 256, &dc, s_target, s_drafter, sizeof s_target)) {
        test_invariances();
    } else {
        TEST_COND("write the synthetic pair", false);
    }
    unlink(s_target);
    unlink(s_drafter);
    return TEST_REPORT();
}
