/*
 * draft_forward.c - the DFlash drafter forward (spec dflash.md section 3) as two parallel regions
 * on the target context's backend (backend.h), written as the spec reads:
 *
 *   inject (pass A + B, per committed position p):  g = rms(fc . feat) * enc_norm;
 *       for every layer: K = rope_neox(head_rms(Wk g) * k_norm, p), V = Wv g -> ring cells of p
 *   block (pass C, rows [anchor, MASK...] at P..P+n-1):  h = token_embd[ids] (raw rows);
 *       per layer: x = rms(h) * attn_norm; q/k = rope_neox(head_rms(Wq/Wk x) * q/k_norm); v = Wv x;
 *       h += Wo . attn([ring window | block], non-causal); h += down(silu(gate x') * up x') with
 *       x' = rms(h) * ffn_norm; logits = output_target . (rms(h) * output_norm), raw
 *
 * Numerics as ggml's CPU ops (and forward.c): rms_norm sums x*x in double, scales by
 * 1/sqrtf(mean + eps), then multiplies by the weight; RoPE NeoX pairs (i, i + n_rot/2) with
 * ggml's incremental f32 angle cache; SwiGLU with ggml's vector silu on whole groups of 8. The
 * matmuls (quantized weights stay quantized) and the attention are the backend's ops, so the
 * ref and cpu backends agree bit for bit and the drafter uses the target's kernels and threads.
 *
 * Threads: every thread runs the same steps; row-wise steps take the rows r % nth == ith (the rows
 * the thread converts for the next matmul), a barrier follows each matmul / attention step.
 */
#include <math.h>
#include <string.h>

#include "core/assert.h"
#include "core/fp16.h"
#include "kernels/types.h"
#include "backend/device.h"
#include "kernels/x86_numerics.h"
#include "speculative/drafter.h"

// ---- elementwise ops (ggml CPU numerics) --------------------------------------------------------

/* y = x / sqrt(mean(x^2) + eps), then y *= w when w; y may alias x. */
static void rms_norm(const float *x, float *y, int64_t n, float eps, const float *w) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = y[i] * w[i];
}

/* NeoX RoPE (split halves) on the first n_rot dims of each of n_heads vectors [n_heads][hd]. */
static void rope_neox(float *x, int32_t n_heads, int32_t hd, int32_t n_rot, const float *c, const float *s) {
    const int32_t half = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int32_t i = 0; i < half; i++) {
            const float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * c[i] - x1 * s[i];
            v[i + half] = x0 * s[i] + x1 * c[i];
        }
    }
}

/* y[i] = silu(g[i]) * u[i] for columns c0..c1-1 of a row of n (ggml_vec_swiglu_f32 on x86 AVX2:
 * the whole groups of 8 with ggml's vector exp, the tail with expf). */
static void swiglu_cols(float *y, const float *g, const float *u, int64_t n, int64_t c0, int64_t c1) {
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = c0; i < c1; i++) y[i] = (i < n8 ? muse_x86_silu(g[i]) : g[i] / (1.0f + expf(-g[i]))) * u[i];
}

// ---- the region: who does what -------------------------------------------------------------------

struct dfw {
    struct muse_draft_ctx *dc;
    const struct muse_drafter *d;
    struct muse_device *dev;
    const float *features; /* inject: [n][n_features] */
    int32_t n;             /* rows */
    int32_t pos0;          /* position of row 0 */
    int ith, nth;
    int32_t head_lo, head_hi; /* block: the rows whose LM head (and confidences) are computed */
};

#define FOR_OWN_ROWS(f, r, n) for (int32_t r = (f)->ith; r < (n); r += (f)->nth)

static void share(const struct dfw *f, int64_t n, int64_t *i0, int64_t *i1) {
    *i0 = n * f->ith / f->nth;
    *i1 = n * (f->ith + 1) / f->nth;
}

static void barrier(const struct dfw *f) { muse_device_barrier(f->dev); }

static void matmuls(const struct dfw *f, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows) {
    muse_device_matmul(f->dev, jobs, n_jobs, x, n_rows, f->ith, f->nth);
}

static struct muse_matmul_job linear(const struct muse_weight *w, float *y) {
    return (struct muse_matmul_job){*w, y, false, 1.0f, NULL};
}

static float *rope_c(const struct dfw *f, int32_t r) { return f->dc->rope_cos + (size_t)r * f->dc->rope_stride; }
static float *rope_s(const struct dfw *f, int32_t r) { return f->dc->rope_sin + (size_t)r * f->dc->rope_stride; }

static void row_angles(const struct dfw *f, int32_t r, int32_t pos) {
    const struct muse_dflash_hparams *hp = &f->d->hp;
    muse_rope_angles((float)pos, (int32_t)hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale, rope_c(f, r), rope_s(f, r));
}

// ---- pass A + B: inject --------------------------------------------------------------------------

static void inject_region(int ith, int nth, void *ctx) {
    struct dfw f = *(const struct dfw *)ctx;
    f.ith = ith;
    f.nth = nth;
    struct muse_draft_ctx *dc = f.dc;
    const struct muse_drafter *d = f.d;
    const struct muse_dflash_hparams *hp = &d->hp;
    const int64_t H = hp->n_embd, n_kv = muse_dflash_n_kv(hp), nb = dc->n_batch;
    const int32_t hd = (int32_t)hp->head_dim, n_head_kv = (int32_t)hp->n_head_kv;

    /* g = fc . feat (x fc.scale)                                              [n][H] */
    struct muse_matmul_job fc = linear(&d->w.fc, dc->g);
    fc.has_scale = d->has_fc_scale;
    fc.scale = d->fc_scale;
    matmuls(&f, &fc, 1, f.features, f.n);
    barrier(&f);
    /* g = rms(g) * enc_norm; the rope angles of each row's (target) position */
    FOR_OWN_ROWS(&f, r, f.n) {
        rms_norm(dc->g + (size_t)r * H, dc->g + (size_t)r * H, H, hp->eps, d->w.enc_norm.data);
        row_angles(&f, r, f.pos0 + r);
    }
    /* K = Wk g, V = Wv g of every layer in one step (one conversion of g)   [layer][n][n_kv] */
    struct muse_matmul_job jobs[2 * MUSE_DFLASH_MAX_LAYERS];
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        jobs[2 * il] = linear(&d->w.layers[il].wk, dc->kc + (size_t)il * nb * n_kv);
        jobs[2 * il + 1] = linear(&d->w.layers[il].wv, dc->vc + (size_t)il * nb * n_kv);
    }
    matmuls(&f, jobs, 2 * (int)hp->n_layer, dc->g, f.n);
    barrier(&f);
    /* K = rope_neox(head_rms(K) * k_norm, p); V as is; both into the ring cell of p */
    FOR_OWN_ROWS(&f, r, f.n) {
        const int32_t p = f.pos0 + r;
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            float *k = dc->kc + ((size_t)il * nb + r) * n_kv, *v = dc->vc + ((size_t)il * nb + r) * n_kv;
            for (int32_t h = 0; h < n_head_kv; h++)
                rms_norm(k + (size_t)h * hd, k + (size_t)h * hd, hd, hp->eps, d->w.layers[il].attn_k_norm.data);
            rope_neox(k, n_head_kv, hd, (int32_t)hp->n_rot, rope_c(&f, r), rope_s(&f, r));
            muse_kv_layer_store(&dc->ring[il], p, k, v); /* cell p % n_cells */
        }
    }
}

void muse_draft_forward_inject(struct muse_draft_ctx *dc, const float *features, int32_t n, int32_t pos0) {
    MUSE_ASSERT(n >= 1 && n <= dc->n_batch);
    struct muse_context *t = dc->target;
    const struct dfw f = {dc, dc->d, t->dev, features, n, pos0, 0, 1, 0, 0};
    muse_device_region(t->dev, inject_region, (void *)&f);
}

// ---- pass C: draft a block -------------------------------------------------------------------------

/* The attention half of layer il for the block rows: x += Wo . attn(q, [ring | block]) (x = the residual). */
static void block_attention(const struct dfw *f, uint32_t il) {
    struct muse_draft_ctx *dc = f->dc;
    const struct muse_dflash_hparams *hp = &f->d->hp;
    const struct muse_dflash_layer_weights *l = &f->d->w.layers[il];
    const int32_t n = f->n, P = f->pos0;
    const int64_t H = hp->n_embd, n_q = muse_dflash_n_q(hp), n_kv = muse_dflash_n_kv(hp);
    const int32_t hd = (int32_t)hp->head_dim, n_head = (int32_t)hp->n_head, n_head_kv = (int32_t)hp->n_head_kv;
    const int32_t n_rot = (int32_t)hp->n_rot;

    /* h = rms(x) * attn_norm (x: the residual stream, the spec's h)           [n][H] */
    FOR_OWN_ROWS(f, r, n) rms_norm(dc->x + (size_t)r * H, dc->h + (size_t)r * H, H, hp->eps, l->attn_norm.data);
    /* q [n][n_head][hd], k/v [n][n_head_kv][hd] */
    const struct muse_matmul_job qkv[3] = {linear(&l->wq, dc->q), linear(&l->wk, dc->kb), linear(&l->wv, dc->vb)};
    matmuls(f, qkv, 3, dc->h, n);
    barrier(f);
    /* q, k: per-head RMS norm, NeoX RoPE at P + row; the block's k, v into the ring cells of P.. */
    int64_t i0, i1;
    share(f, (int64_t)n * n_head, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        const int32_t r = (int32_t)(it / n_head);
        float *qh = dc->q + (size_t)it * hd;
        rms_norm(qh, qh, hd, hp->eps, l->attn_q_norm.data);
        rope_neox(qh, 1, hd, n_rot, rope_c(f, r), rope_s(f, r));
    }
    FOR_OWN_ROWS(f, r, n) {
        float *k = dc->kb + (size_t)r * n_kv;
        for (int32_t h = 0; h < n_head_kv; h++) rms_norm(k + (size_t)h * hd, k + (size_t)h * hd, hd, hp->eps, l->attn_k_norm.data);
        rope_neox(k, n_head_kv, hd, n_rot, rope_c(f, r), rope_s(f, r));
        muse_kv_layer_store(&dc->ring[il], P + r, k, dc->vb + (size_t)r * n_kv);
    }
    barrier(f);
    /* att = softmax(q.K^T / sqrt(hd)) . V, row r over ring positions P + r - window + 1 .. P - 1 and
     * the block positions P .. P + n - 1 (drafter.h): the query is placed at the last block position
     * with a window that reaches back exactly to P + r - window + 1. The calls only read q and the
     * ring, so they need no barrier between them.                              [n][n_q] */
    const int32_t last = P + n - 1;
    for (int32_t r = 0; r < n; r++) {
        /* a restarted ring (drafter.h: floor) holds nothing below floor: the window stops there */
        int32_t w = dc->window + n - 1 - r;
        if (w > last - dc->floor + 1) w = last - dc->floor + 1;
        const struct muse_attn_args aa = {
            .q = dc->q + (size_t)r * n_q, .out = dc->att + (size_t)r * n_q, .kv = &dc->ring[il], .pos = &last,
            .n_tokens = 1, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd,
            .n_swa = w, .scale = 1.0f / sqrtf((float)hd), .gate = NULL,
        };
        muse_device_attention(f->dev, &aa, f->ith, f->nth);
    }
    barrier(f);
    /* o = Wo . att; x += o (no post-norm)                                      [n][H] */
    const struct muse_matmul_job wo = linear(&l->wo, dc->o);
    matmuls(f, &wo, 1, dc->att, n);
    barrier(f);
    FOR_OWN_ROWS(f, r, n)
        for (int64_t i = 0; i < H; i++) dc->x[(size_t)r * H + i] = dc->o[(size_t)r * H + i] + dc->x[(size_t)r * H + i];
}

/* The FFN half of layer il: x += down(silu(gate h) * up h), h = rms(x) * ffn_norm. */
static void block_ffn(const struct dfw *f, uint32_t il) {
    struct muse_draft_ctx *dc = f->dc;
    const struct muse_dflash_hparams *hp = &f->d->hp;
    const struct muse_dflash_layer_weights *l = &f->d->w.layers[il];
    const int32_t n = f->n;
    const int64_t H = hp->n_embd, n_ff = hp->n_ff;

    FOR_OWN_ROWS(f, r, n) rms_norm(dc->x + (size_t)r * H, dc->h + (size_t)r * H, H, hp->eps, l->ffn_norm.data);
    const struct muse_matmul_job gu[2] = {linear(&l->ffn_gate, dc->fg), linear(&l->ffn_up, dc->fu)};
    matmuls(f, gu, 2, dc->h, n);
    barrier(f);
    /* by row, or (fewer rows than threads) by columns and a barrier: the down matmul converts whole rows */
    if (n >= f->nth) {
        FOR_OWN_ROWS(f, r, n) {
            float *g = dc->fg + (size_t)r * n_ff;
            swiglu_cols(g, g, dc->fu + (size_t)r * n_ff, n_ff, 0, n_ff);
        }
    } else {
        int64_t c0, c1;
        share(f, n_ff, &c0, &c1);
        for (int32_t r = 0; r < n; r++) {
            float *g = dc->fg + (size_t)r * n_ff;
            swiglu_cols(g, g, dc->fu + (size_t)r * n_ff, n_ff, c0, c1);
        }
        barrier(f);
    }
    const struct muse_matmul_job down = linear(&l->ffn_down, dc->o);
    matmuls(f, &down, 1, dc->fg, n);
    barrier(f);
    FOR_OWN_ROWS(f, r, n)
        for (int64_t i = 0; i < H; i++) dc->x[(size_t)r * H + i] = dc->o[(size_t)r * H + i] + dc->x[(size_t)r * H + i];
}

static void head_rows(const struct dfw *f);

static void block_region(int ith, int nth, void *ctx) {
    struct dfw f = *(const struct dfw *)ctx;
    f.ith = ith;
    f.nth = nth;
    struct muse_draft_ctx *dc = f.dc;
    const struct muse_drafter *d = f.d;
    const struct muse_dflash_hparams *hp = &d->hp;
    const int64_t H = hp->n_embd;
    const struct muse_weight *te = &d->token_embd;

    /* x = token_embd[ids]: raw rows of the target's table (no scale, no norm); rope angles */
    FOR_OWN_ROWS(&f, r, f.n) {
        muse_type_traits[te->type].to_float((const uint8_t *)te->data + (size_t)dc->ids[r] * te->row_size,
                                            dc->x + (size_t)r * H, H);
        row_angles(&f, r, f.pos0 + r);
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        block_attention(&f, il);
        block_ffn(&f, il);
    }
    /* h = rms(x) * output_norm, then the head for the rows asked for */
    FOR_OWN_ROWS(&f, r, f.n) rms_norm(dc->x + (size_t)r * H, dc->h + (size_t)r * H, H, hp->eps, d->w.output_norm.data);
    if (f.head_hi > f.head_lo) {
        barrier(&f);
        head_rows(&f);
    }
}

/* logits = output . h, times the target's output.scale (raw: no logit scale, no softcap), and the
 * confidences, for rows head_lo..head_hi-1 of dc->h                                 [n][n_vocab] */
static void head_rows(const struct dfw *f) {
    struct muse_draft_ctx *dc = f->dc;
    const struct muse_drafter *d = f->d;
    const int64_t H = d->hp.n_embd, n_vocab = d->n_vocab;
    const int32_t lo = f->head_lo, n = f->head_hi - f->head_lo;
    struct muse_matmul_job out = linear(&d->output, dc->logits + (size_t)lo * n_vocab);
    out.has_scale = d->has_output_scale;
    out.scale = d->output_scale;
    matmuls(f, &out, 1, dc->h + (size_t)lo * H, n);
    barrier(f);
    for (int32_t r = lo + f->ith; r < f->head_hi; r += f->nth)
        muse_draft_row_confidence(dc->logits + (size_t)r * n_vocab, n_vocab, &dc->argmax[r], &dc->conf[r], &dc->conf_top10[r]);
}

void muse_draft_forward_block(struct muse_draft_ctx *dc, int32_t n_rows, int32_t P, int32_t head_lo, int32_t head_hi) {
    MUSE_ASSERT(n_rows >= 1 && (uint32_t)n_rows <= dc->d->hp.block_size);
    MUSE_ASSERT(head_lo >= 0 && head_lo <= head_hi && head_hi <= n_rows);
    struct muse_context *t = dc->target;
    struct dfw f = {dc, dc->d, t->dev, NULL, n_rows, P, 0, 1, head_lo, head_hi};
    muse_device_region(t->dev, block_region, (void *)&f);
}

// ---- confidences ----------------------------------------------------------------------------------

#define TOP_K 10 /* llama.cpp's LLAMA_DRAFT_TOP_K: the draft sampler chain is top-k(10) then dist */

void muse_draft_row_confidence(const float *row, int64_t n_vocab, int32_t *argmax, float *conf, float *conf_top10) {
    float top[TOP_K];
    int n_top = 0;
    int32_t best = -1;
    for (int64_t i = 0; i < n_vocab; i++) {
        const float v = row[i];
        if (v != v) continue; /* NaN never ranks */
        if (best < 0 || v > row[best]) best = (int32_t)i;
        if (n_top == TOP_K && !(v > top[TOP_K - 1])) continue;
        int j = n_top < TOP_K ? n_top++ : TOP_K - 1;
        for (; j > 0 && v > top[j - 1]; j--) top[j] = top[j - 1];
        top[j] = v;
    }
    *argmax = best < 0 ? 0 : best;
    if (best < 0) {
        *conf = *conf_top10 = 0.0f;
        return;
    }
    /* terms more than 40 below the max add < e^-40 each (< 1e-12 relative over any vocabulary):
     * skipping their exp keeps the sum exact to float precision at a fraction of the cost */
    const double max = row[best];
    const float cut = row[best] - 40.0f;
    double sum = 0.0, sum10 = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        if (row[i] > cut) sum += exp((double)row[i] - max);
    for (int i = 0; i < n_top; i++) sum10 += exp((double)top[i] - max);
    *conf = (float)(1.0 / sum);
    *conf_top10 = (float)(1.0 / sum10);
}
