/*
 * test_tile_forward.c - the fast cpu backend checked op by op inside real forwards, against the
 * reference with the bounds that follow from reassociation (docs/cpu-backend.md, "The tile GEMM"
 * and "Flash attention"). Synthetic models cover every weight type of the tile GEMM; a wrapper
 * backend runs each step on the cpu backend, then (thread 0, between two extra barriers) redoes
 * it with the reference on the very same inputs:
 *   - matmuls: the tile GEMM's outputs within 2 gamma(ne0/16 + 8) T of muse_x86_vec_dot on the same
 *     quantized rows (T from the packing's exact integers, as test_tile_gemm); the decode of the
 *     Q4_0 / IQ4_NL / Q8_0 / IQ4_XS / Q4_K rows interleaved by 8 within muse_r8_bound (tests/kernels/r8_bound.h); steps
 *     the exact kernels ran (decode) bit for bit;
 *   - attention: flash outputs within (gamma(n) + gamma(n/8 + 4)) sum_j p_j |v_j| of
 *     muse_attn_head_ref (the same F16 probabilities p on both sides, the sums over the n keys
 *     in two orders); exact steps bit for bit.
 * The forward goes on with the cpu backend's values, so later layers see its real activations.
 * Two prompt batches (tile GEMM + flash attention; the second at depth, through the wrapped SWA
 * rings), then decode steps (exact kernels), 1 and 2 threads, F16 KV cache.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/x86_numerics.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test.h"

#include "kernels/r8_bound.h"
#include "kernels/tile_bound.h"

// ---- the verifying wrapper backend ------------------------------------------------------------

struct verify {
    const struct muse_backend_ops *cpu;
    void *cs;
    const struct muse_kernels *k;
    int64_t max_ne0;
    uint8_t *q, *xp;   /* [n_batch] rows: reference quantization, tile layout */
    float *save;       /* attention outputs of the fast path */
    float *scores, *fscratch;
    uint8_t *qc;
    /* counts */
    long mm_tile, mm_r8, mm_exact, at_flash, at_exact, bad;
    double worst_mm, worst_at; /* largest error / bound: matmuls, attention */
};

static void v_parallel(void *state, muse_backend_fn fn, void *ctx) {
    struct verify *v = state;
    v->cpu->parallel(v->cs, fn, ctx);
}

static void v_barrier(void *state) {
    struct verify *v = state;
    v->cpu->barrier(v->cs);
}

static void note(struct verify *v, double err, double tol, const char *what, double *worst) {
    if (!(err <= tol)) {
        if (v->bad++ < 5) fprintf(stderr, "  %s: error %.3g > bound %.3g\n", what, err, tol);
    } else if (tol > 0 && err / tol > *worst) {
        *worst = err / tol;
    }
}

/* A matmul output x of job j's row i after the job's epilogue (muse_matmul_job_epilogue: scale, bias). */
static float epilogue(const struct muse_matmul_job *j, int64_t i, float x) {
    if (j->has_scale) x = x * j->scale;
    if (j->bias) x = x + j->bias[i];
    return x;
}

static void check_matmul(struct verify *v, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows) {
    const int64_t ne0 = jobs[0].w.ne0;
    for (int j = 0; j < n_jobs; j++) {
        const struct muse_weight *w = &jobs[j].w;
        /* the rows interleaved by 8 (decode of the types of repack.h: the cpu device prepared them),
         * which below tile_min_act rows keep their kernel where the type's small-batch threshold
         * would have picked the tile GEMM (backend_cpu.c use_tile) */
        const bool has_r8 = w->r8 && v->k->gemm_r8[w->type];
        const bool tile = muse_matmul_tile_supported(v->k, w->type, ne0, n_rows) && !(has_r8 && n_rows < v->k->tile_min_act);
        const bool r8 = !tile && has_r8;
        const size_t qs = muse_matmul_act_row_size(w->type, ne0), xps = muse_matmul_tile_act_bytes(w->type, ne0);
        for (int32_t r = 0; r < n_rows; r++) {
            muse_matmul_quantize(NULL, w->type, ne0, x + (size_t)r * ne0, 0, 1, v->q + (size_t)r * qs, qs, 0, 1);
            if (tile) muse_matmul_tile_prep(w->type, ne0, v->q + (size_t)r * qs, v->xp + (size_t)r * xps);
        }
        /* an interleaved step must be that kernel's own bits (so a step that ran the tile GEMM or the
         * exact kernels instead is caught, not only one outside the bound) */
        float *r8y = r8 ? malloc(sizeof(float) * (size_t)n_rows * (size_t)w->ne1) : NULL;
        if (r8y) v->k->gemm_r8[w->type](ne0, w->r8, w->ne1 / 8, v->q, qs, n_rows, r8y, w->ne1);
        const struct tile_type *tt = tile ? tile_type_of(w->type) : NULL; /* NULL for the float types */
        const double u = 0x1p-24;
        for (int32_t r = 0; r < n_rows; r++)
            for (int64_t i = 0; i < w->ne1; i++) {
                float dot;
                muse_x86_vec_dot(w->type)(ne0, &dot, (const uint8_t *)w->data + (size_t)i * w->row_size, v->q + (size_t)r * qs);
                const float want = epilogue(&jobs[j], i, dot);
                const float got = jobs[j].y[(size_t)r * w->ne1 + i];
                if (r8 && i < w->ne1 / 8 * 8) {
                    const float mine = epilogue(&jobs[j], i, r8y[(size_t)r * w->ne1 + i]);
                    if (memcmp(&got, &mine, 4)) note(v, INFINITY, 0, "interleaved step not the interleaved kernel's bits", &v->worst_mm);
                    const double sc = jobs[j].has_scale ? fabs((double)jobs[j].scale) : 1.0;
                    const double tol = r8_bound(w->type, ne0, (const uint8_t *)w->data + (size_t)i * w->row_size,
                                                v->q + (size_t)r * qs) * sc * (1 + 4 * u) + 4 * u * fabs((double)want);
                    note(v, fabs((double)got - want), tol, muse_type_layout_get(w->type)->name, &v->worst_mm);
                    continue;
                }
                if (!tile) {
                    note(v, memcmp(&got, &want, 4) ? INFINITY : 0, 0, "exact matmul step not bit-identical", &v->worst_mm);
                    continue;
                }
                /* the dot's bound, through the epilogue's two roundings on both sides */
                const double sc = jobs[j].has_scale ? fabs((double)jobs[j].scale) : 1.0;
                const uint8_t *wr = (const uint8_t *)w->data + (size_t)i * w->row_size, *xr = v->xp + (size_t)r * xps;
                const double tol = tile_bound(w->type, tt, ne0, wr, xr) * sc * (1 + 4 * u) + 4 * u * fabs((double)want);
                note(v, fabs((double)got - want), tol, muse_type_layout_get(w->type)->name, &v->worst_mm);
            }
        free(r8y);
        if (tile) v->mm_tile++;
        else if (r8) v->mm_r8++;
        else v->mm_exact++;
    }
}

static void v_matmul(void *state, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows,
                     int ith, int nth) {
    struct verify *v = state;
    v->cpu->matmul(v->cs, jobs, n_jobs, x, n_rows, ith, nth);
    v->cpu->barrier(v->cs);
    if (ith == 0) check_matmul(v, jobs, n_jobs, x, n_rows);
    v->cpu->barrier(v->cs);
}

/* The bound of one flash row (t, h) per element d. Both sides multiply V by the same F16 (F32
 * cache: F32) probabilities p (muse_attn_head_ref leaves them in its scores, positions lo..hi); only the sums
 * over the n keys differ: one FMA chain (flash) against 8 lanes by position and a hsum (the
 * reference), gamma(n) + gamma(n / 8 + 4) times sum_j p_j |v_j[d]|. */
static void flash_bounds(const struct muse_attn_args *a, int32_t t, int32_t h, const float *p, double *tol) {
    const int32_t hd = a->head_dim, kvh = h / (a->n_head / a->n_head_kv);
    const int32_t hi = a->pos[t], lo = a->n_swa > 0 && hi - a->n_swa + 1 > 0 ? hi - a->n_swa + 1 : 0, n = hi - lo + 1;
    const bool f32 = a->kv->type == MUSE_TYPE_F32, q8 = a->kv->type == MUSE_TYPE_Q8_0;
    const size_t hb = muse_type_row_size(a->kv->type, hd);
    const double f = muse_tile_gamma(n) + muse_tile_gamma(n / 8 + 4);
    for (int32_t d = 0; d < hd; d++) tol[d] = 0;
    for (int32_t j = 0; j < n; j++) {
        const void *vr = (const char *)a->kv->v + (size_t)((uint32_t)(lo + j) % a->kv->n_cells) * a->kv->v_row_size + kvh * hb;
        for (int32_t d = 0; d < hd; d++) {
            const struct muse_block_q8_0 *b = (const struct muse_block_q8_0 *)vr + d / 32;
            const double x = f32  ? (double)((const float *)vr)[d]
                             : q8 ? (double)b->qs[d % 32] * muse_fp16_to_fp32(b->d)
                                  : (double)muse_fp16_to_fp32(((const uint16_t *)vr)[d]);
            tol[d] += (double)p[j] * fabs(x);
        }
    }
    for (int32_t d = 0; d < hd; d++) tol[d] *= f;
}

static void v_attention(void *state, const struct muse_attn_args *a, int ith, int nth) {
    struct verify *v = state;
    v->cpu->attention(v->cs, a, ith, nth);
    v->cpu->barrier(v->cs);
    if (ith == 0) {
        const size_t n = (size_t)a->n_tokens * a->n_head * a->head_dim;
        const bool flash = a->n_tokens >= 4 && ((v->k->attn_flash_f16 && a->kv->type == MUSE_TYPE_F16 && a->head_dim % 8 == 0) ||
                                                (v->k->attn_flash_f32 && a->kv->type == MUSE_TYPE_F32 && a->head_dim % 32 == 0) ||
                                                (v->k->attn_flash_q8_0 && a->kv->type == MUSE_TYPE_Q8_0 && a->head_dim % 32 == 0));
        memcpy(v->save, a->out, n * sizeof(float));
        double *tol = malloc(sizeof(double) * (size_t)a->head_dim);
        for (int32_t t = 0; t < a->n_tokens; t++)
            for (int32_t h = 0; h < a->n_head; h++) {
                muse_attn_head_ref(a, t, h, v->scores, v->fscratch, v->qc);
                muse_attn_gate_head(a, t, h);
                const size_t o = ((size_t)t * a->n_head + h) * a->head_dim;
                if (flash) flash_bounds(a, t, h, v->scores, tol);
                for (int32_t d = 0; d < a->head_dim; d++) {
                    const float got = v->save[o + d], want = a->out[o + d];
                    /* the gate multiplies both sides by the same sigmoid (<= 1), rounded */
                    if (flash) note(v, fabs((double)got - want), tol[d] * (1 + 0x1p-24) + 4 * 0x1p-24 * fabs((double)want), "flash attention", &v->worst_at);
                    else note(v, memcmp(&got, &want, 4) ? INFINITY : 0, 0, "exact attention not bit-identical", &v->worst_at);
                }
            }
        memcpy(a->out, v->save, n * sizeof(float)); /* the forward goes on with the fast values */
        free(tol);
        if (flash) v->at_flash++;
        else v->at_exact++;
    }
    v->cpu->barrier(v->cs);
}

static const struct muse_backend_ops verify_ops = {
    .name = "cpu-verify", .parallel = v_parallel, .barrier = v_barrier, .matmul = v_matmul, .attention = v_attention,
};

// ---- the models ---------------------------------------------------------------------------------

static const char *const mixes[] = {
    "*=q8_0",
    "attn_q=q4_0,attn_k=q5_0,attn_v=iq4_nl,attn_output=mxfp4,attn_gate=nvfp4,ffn_gate=q5_0,ffn_up=nvfp4,"
    "ffn_down=mxfp4,*=q8_0",
    "attn_q=q4_1,attn_k=q5_1,attn_v=q4_1,attn_output=q5_1,attn_gate=q4_1,ffn_gate=q5_1,ffn_up=q4_1,"
    "ffn_down=q5_1,output=q6_k,*=q8_0",
    "attn_q=f16,attn_k=bf16,attn_v=f32,attn_output=q1_0,attn_gate=bf16,ffn_gate=f16,ffn_up=q1_0,ffn_down=f32,"
    "output=q6_k,*=q8_0",
    "attn_q=q4_k,attn_k=q5_k,attn_v=q6_k,attn_output=q2_k,attn_gate=q3_k,ffn_gate=iq4_xs,ffn_up=tq2_0,"
    "ffn_down=tq1_0,output=q6_k,*=q4_k",
    "attn_q=iq2_xxs,attn_k=iq2_xs,attn_v=iq2_s,attn_output=iq3_xxs,attn_gate=iq3_s,ffn_gate=iq1_s,"
    "ffn_up=iq3_s,ffn_down=iq1_m,output=q6_k,*=q4_k",
};

static void run_case(const char *types, int32_t head_dim, uint32_t threads, enum muse_kv_type kv) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/muse-test-tile-forward-%d.gguf", (int)getpid());
    struct muse_error err;
    struct muse_synth_config cfg;
    TEST_COND("preset", muse_synth_preset("tiny", &cfg, &err) == MUSE_OK);
    cfg.n_layer = 4;
    cfg.head_dim = head_dim;
    cfg.n_head = head_dim == 32 ? 8 : 4;
    cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
    cfg.n_rules = 0;
    if (muse_synth_parse_types(types, &cfg, &err) != MUSE_OK || muse_synth_write(&cfg, path, NULL, NULL, &err) != MUSE_OK) {
        TEST_CONDF(false, "synth %s: %s", types, err.msg);
        return;
    }
    struct muse_model *m = NULL;
    struct muse_context *ctx = NULL;
    TEST_COND("load", muse_model_load(path, muse_model_default_params(), &m, &err) == MUSE_OK);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 64;
    cp.n_threads = threads;
    cp.backend = "cpu";
    cp.kv_type = kv;
    if (!m || muse_context_create(m, cp, &ctx, &err) != MUSE_OK) {
        TEST_CONDF(false, "context: %s", err.msg);
        muse_model_free(m);
        unlink(path);
        return;
    }
    struct verify v = {.k = muse_kernels_active()};
    const struct muse_backend_plan *plan = muse_device_plan(ctx->dev);
    const int64_t ne0 = plan->max_ne0, nb = plan->n_batch;
    v.q = malloc((size_t)nb * muse_type_row_size(MUSE_TYPE_F32, ne0));
    v.xp = malloc((size_t)nb * muse_matmul_tile_act_bytes_max(v.k, ne0));
    v.save = malloc(sizeof(float) * (size_t)nb * cfg.n_head * head_dim);
    v.scores = malloc(sizeof(float) * plan->max_cells);
    v.fscratch = malloc(sizeof(float) * 10 * (size_t)head_dim);
    v.qc = malloc(4 * (size_t)head_dim + 64);
    v.cpu = &verify_ops; /* the device runs the wrapper; v gets the cpu device's own ops and state */
    v.cs = &v;
    muse_device_swap_ops(ctx->dev, &v.cpu, &v.cs);
    int32_t toks[104];
    for (int i = 0; i < 104; i++) toks[i] = (int32_t)((i * 37 + 11) % (cfg.n_vocab - 3));
    float *logits = malloc(sizeof(float) * (size_t)cfg.n_vocab * 104);
    TEST_COND("prompt", muse_eval(ctx, toks, 44, logits, 1, &err) == MUSE_OK);
    /* a second batch at depth: the SWA rings (8 + 64 cells) wrap, the windows start off the tiles */
    TEST_COND("prompt 2", muse_eval(ctx, toks + 44, 36, logits, 1, &err) == MUSE_OK);
    /* a small batch (several sequences' rows, a short prompt): 20 rows, where the AVX-512 table's
     * small-batch thresholds (16) would run the tile GEMM but interleaved weights keep theirs */
    TEST_COND("prompt 3", muse_eval(ctx, toks + 80, 20, logits, 1, &err) == MUSE_OK);
    for (int i = 100; i < 103; i++) TEST_COND("decode", muse_eval(ctx, toks + i, 1, logits, 0, &err) == MUSE_OK);
    const struct muse_backend_ops *cpu = v.cpu;
    void *cs = v.cs;
    muse_device_swap_ops(ctx->dev, &cpu, &cs);
    TEST_CONDF(v.bad == 0, "%s (head_dim %d, %u threads, %s KV): %ld ops outside their bound", types, head_dim, threads,
               muse_kv_type_name(kv), v.bad);
    TEST_CONDF(v.mm_tile > 0 && v.mm_exact + v.mm_r8 > 0 && v.at_flash > 0 && v.at_exact > 0,
               "%s: both paths ran (tile %ld, exact %ld, interleaved %ld, flash %ld, exact attention %ld)", types, v.mm_tile,
               v.mm_exact, v.mm_r8, v.at_flash, v.at_exact);
    /* every matrix of a type with an interleaved kernel (repack.h: Q4_0, IQ4_NL, Q8_0, IQ4_XS, Q4_K)
     * and at least one group of 8 rows got its copy when the context was made, no other did, and
     * the decode steps ran on them */
    int n_r8 = 0, n_want = 0;
    for (int32_t j = 0; j < ctx->prog.n_jobs; j++) {
        const struct muse_weight *w = &ctx->prog.jobs[j].w;
        n_r8 += w->r8 != NULL;
        n_want += v.k->gemm_r8[w->type] && w->ne1 >= 8;
    }
    TEST_CONDF(n_r8 == n_want, "%s: %d interleaved copies, %d matrices of the interleaved types", types, n_r8, n_want);
    TEST_CONDF((n_r8 > 0) == (v.mm_r8 > 0), "%s: %d interleaved copies, %ld interleaved steps", types, n_r8, v.mm_r8);
    printf("  %-36.36s hd %3d t%u %-4s: tile matmuls %3ld, interleaved %3ld, exact %3ld, flash %2ld, exact attention %2ld; "
           "worst error / bound: matmul %.3f, attention %.3f\n",
           types, head_dim, threads, muse_kv_type_name(kv), v.mm_tile, v.mm_r8, v.mm_exact, v.at_flash, v.at_exact,
           v.worst_mm, v.worst_at);
    free(logits);
    free(v.q);
    free(v.xp);
    free(v.save);
    free(v.scores);
    free(v.fscratch);
    free(v.qc);
    muse_context_free(ctx);
    muse_model_free(m);
    unlink(path);
}

/* The interleaved copies (backend/cpu_weights.c): made once for two contexts of one model, none with
 * --no-repack, all freed with the last context; the second context's outputs are the first's. */
static void test_copies_shared(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/muse-test-r8-shared-%d.gguf", (int)getpid());
    struct muse_error err;
    struct muse_synth_config cfg;
    TEST_COND("preset", muse_synth_preset("tiny", &cfg, &err) == MUSE_OK);
    cfg.n_layer = 2;
    cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
    cfg.n_rules = 0;
    if (muse_synth_parse_types("attn_q=q4_0,ffn_up=iq4_nl,ffn_down=q8_0,*=q5_k", &cfg, &err) != MUSE_OK ||
        muse_synth_write(&cfg, path, NULL, NULL, &err) != MUSE_OK) {
        TEST_CONDF(false, "synth: %s", err.msg);
        return;
    }
    struct muse_model *m = NULL;
    TEST_COND("load", muse_model_load(path, muse_model_default_params(), &m, &err) == MUSE_OK);
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.n_threads = 2;
    cp.backend = "cpu";
    struct muse_context *a = NULL, *b = NULL, *c = NULL;
    struct muse_device_stats s1, s2, s3, s4;
    const bool ok = m && muse_context_create(m, cp, &a, &err) == MUSE_OK;
    TEST_CONDF(ok, "context: %s", err.msg);
    if (!ok) {
        muse_model_free(m);
        unlink(path);
        return;
    }
    muse_device_stats(a->dev, &s1);
    const uint64_t made = s1.weight_uploads;
    TEST_CONDF(s1.weight_bytes > 0 && made >= 3 * (uint64_t)cfg.n_layer, "one context: %llu copies, %llu bytes",
               (unsigned long long)made, (unsigned long long)s1.weight_bytes);
    TEST_COND("second context", muse_context_create(m, cp, &b, &err) == MUSE_OK);
    muse_device_stats(a->dev, &s2);
    TEST_CONDF(s2.weight_uploads == made && s2.weight_bytes == s1.weight_bytes, "two contexts: %llu copies (want %llu)",
               (unsigned long long)s2.weight_uploads, (unsigned long long)made);
    cp.no_repack = 1;
    TEST_COND("no-repack context", muse_context_create(m, cp, &c, &err) == MUSE_OK);
    muse_device_stats(a->dev, &s3);
    TEST_CONDF(s3.weight_uploads == made, "--no-repack made copies");
    int ra = 0, rc = 0;
    for (int32_t j = 0; j < a->prog.n_jobs; j++) ra += a->prog.jobs[j].w.r8 != NULL;
    for (int32_t j = 0; j < c->prog.n_jobs; j++) rc += c->prog.jobs[j].w.r8 != NULL;
    TEST_CONDF(ra == 3 * (int)cfg.n_layer && rc == 0, "matrices reading a copy: %d (want %d), --no-repack %d (want 0)", ra,
               3 * (int)cfg.n_layer, rc);
    /* the same logits from both fast contexts, and from the --no-repack one within float noise */
    const int32_t toks[3] = {5, 9, 17};
    const size_t nv = (size_t)cfg.n_vocab;
    float *la = malloc(sizeof(float) * nv * 3), *lb = malloc(sizeof(float) * nv * 3), *lc = malloc(sizeof(float) * nv * 3);
    for (int i = 0; i < 3; i++) {
        TEST_COND("eval", muse_eval(a, toks + i, 1, la + i * nv, 0, &err) == MUSE_OK &&
                              muse_eval(b, toks + i, 1, lb + i * nv, 0, &err) == MUSE_OK &&
                              muse_eval(c, toks + i, 1, lc + i * nv, 0, &err) == MUSE_OK);
    }
    TEST_COND("shared copies give the same bits", !memcmp(la, lb, sizeof(float) * nv * 3));
    double worst = 0, big = 0;
    for (size_t i = 0; i < nv * 3; i++) {
        worst = fmax(worst, fabs((double)la[i] - lc[i]));
        big = fmax(big, fabs((double)lc[i]));
    }
    TEST_CONDF(worst <= 1e-3 * (big + 1), "interleaved vs --no-repack logits: max difference %.3g (max |logit| %.3g)", worst, big);
    printf("  copies: %llu (%.2f MiB) for two contexts; logits vs --no-repack max difference %.3g\n", (unsigned long long)made,
           (double)s1.weight_bytes / (1 << 20), worst);
    free(la), free(lb), free(lc);
    muse_context_free(a);
    muse_context_free(b);
    muse_context_free(c);
    /* every context gone: the device (opened by the next context) holds no copies */
    TEST_COND("context after", muse_context_create(m, cp, &c, &err) == MUSE_OK);
    muse_device_stats(c->dev, &s4);
    TEST_CONDF(s4.weight_bytes == 0, "copies left after the contexts were freed: %llu bytes", (unsigned long long)s4.weight_bytes);
    muse_context_free(c);
    muse_model_free(m);
    unlink(path);
}

int main(void) {
    const struct muse_kernels *k = muse_kernels_active();
    if (!k || k->exact_mode || !k->tile_gemm[MUSE_TYPE_Q8_0]) {
        printf("SKIP: no tile GEMM at this level (%s)\n", k ? muse_cpu_level_name(k->level) : "none");
        return TEST_REPORT();
    }
    printf("level %s\n", muse_cpu_level_name(k->level));
    test_copies_shared();
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) run_case(mixes[i], 32, 1, MUSE_KV_TYPE_F16);
    run_case(mixes[0], 128, 2, MUSE_KV_TYPE_F16);
    run_case(mixes[2], 128, 1, MUSE_KV_TYPE_F16);
    run_case(mixes[1], 128, 2, MUSE_KV_TYPE_F16); /* the interleaved decode's groups split over 2 threads */
    run_case(mixes[4], 128, 2, MUSE_KV_TYPE_F16); /* the same for Q4_K and IQ4_XS (Q8_K activations) */
    /* F32 and Q8_0 caches: their flash attention (head sizes that are multiples of 32) */
    run_case(mixes[0], 128, 2, MUSE_KV_TYPE_F32);
    run_case(mixes[4], 32, 1, MUSE_KV_TYPE_Q8_0);
    return TEST_REPORT();
}
