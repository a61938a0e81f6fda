/*
 * forward.c - the Muse-Glimmer text forward (text-model.md 5.1), plain C that reads like the
 * spec. Numerics follow ggml's CPU ops (spec section 8): rms_norm sums x*x in double and
 * multiplies by 1/sqrtf(mean + eps) before a separate multiply by the weight; rope angles are
 * computed incrementally in f32; sigmoid and silu use expf; the softcap is
 * softcap * tanhf(x * (1/softcap)). Matmuls and attention go through the backend.
 */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "kernels/types.h"
#include "kernels/x86_numerics.h"

struct muse_run_state {
    int32_t n_batch;
    int64_t n_embd;
    int64_t n_q_max, n_k_max, n_v_max, n_qkv_max, n_ff_max, hd_max;
    float *x;        /* [n_batch][n_embd] the residual stream */
    float *h;        /* [n_batch][n_embd] normed input of a block */
    float *qkv;      /* [n_batch][n_qkv_max] fused Q|K|V projection (layers with attn_qkv) */
    float *q;        /* [n_batch][n_q_max] */
    float *k;        /* [n_batch][n_k_max] */
    float *v;        /* [n_batch][n_v_max] */
    float *g;        /* [n_batch][n_q_max] attention gate projection */
    float *att;      /* [n_batch][n_q_max] attention output (heads concatenated) */
    float *o;        /* [n_batch][n_embd] block output before the post-norm */
    float *fg;       /* [n_batch][n_ff_max] ffn_gate projection, then silu(gate) * up */
    float *fu;       /* [n_batch][n_ff_max] ffn_up projection */
    float *rope_cos; /* [hd_max / 2] */
    float *rope_sin; /* [hd_max / 2] */
    float *mem;      /* the one allocation all of the above point into */
};

// ---- planning ---------------------------------------------------------------------------------

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t muse_weights_max_ne0(const struct muse_hparams *hp, const struct muse_weights *w) {
    int64_t m = hp->n_embd;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        m = max64(m, w->layers[il].wo.ne0);
        m = max64(m, w->layers[il].ffn_down.ne0);
    }
    return m;
}

muse_status muse_run_state_create(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                  struct muse_run_state **out, struct muse_error *err) {
    struct muse_run_state *rs = calloc(1, sizeof *rs);
    *out = NULL;
    if (!rs) goto nomem;
    rs->n_batch = n_batch;
    rs->n_embd = hp->n_embd;
    bool any_fused = false;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        int64_t nq = muse_hparams_n_embd_q(hp, il), nk = muse_hparams_n_embd_k_gqa(hp, il);
        int64_t nv = muse_hparams_n_embd_v_gqa(hp, il);
        rs->n_q_max = max64(rs->n_q_max, nq);
        rs->n_k_max = max64(rs->n_k_max, nk);
        rs->n_v_max = max64(rs->n_v_max, nv);
        rs->n_ff_max = max64(rs->n_ff_max, hp->n_ff[il]);
        rs->hd_max = max64(rs->hd_max, muse_hparams_head_dim_k(hp, il));
        if (w->layers[il].wqkv.data) {
            any_fused = true;
            rs->n_qkv_max = max64(rs->n_qkv_max, nq + nk + nv);
        }
    }
    /* sizes in floats, each buffer rounded up to 16 floats (64 bytes) */
#define R16(n) (((size_t)(n) + 15) & ~(size_t)15)
    const size_t nb = (size_t)n_batch;
    size_t sz_x = R16(nb * rs->n_embd), sz_qkv = any_fused ? R16(nb * rs->n_qkv_max) : 0;
    size_t sz_q = R16(nb * rs->n_q_max), sz_k = R16(nb * rs->n_k_max), sz_v = R16(nb * rs->n_v_max);
    size_t sz_ff = R16(nb * rs->n_ff_max), sz_rope = R16(rs->hd_max / 2 + 1);
    size_t total = 3 * sz_x + sz_qkv + 3 * sz_q + sz_k + sz_v + 2 * sz_ff + 2 * sz_rope;
#undef R16
    rs->mem = aligned_alloc(64, total * sizeof(float));
    if (!rs->mem) goto nomem;
    memset(rs->mem, 0, total * sizeof(float));
    float *p = rs->mem;
    rs->x = p, p += sz_x;
    rs->h = p, p += sz_x;
    rs->o = p, p += sz_x;
    rs->qkv = sz_qkv ? p : NULL, p += sz_qkv;
    rs->q = p, p += sz_q;
    rs->g = p, p += sz_q;
    rs->att = p, p += sz_q;
    rs->k = p, p += sz_k;
    rs->v = p, p += sz_v;
    rs->fg = p, p += sz_ff;
    rs->fu = p, p += sz_ff;
    rs->rope_cos = p, p += sz_rope;
    rs->rope_sin = p, p += sz_rope;
    MUSE_ASSERT((size_t)(p - rs->mem) == total);
    *out = rs;
    return MUSE_OK;
nomem:
    muse_run_state_free(rs);
    return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the run state (batch %d)", n_batch);
}

void muse_run_state_free(struct muse_run_state *rs) {
    if (!rs) return;
    free(rs->mem);
    free(rs);
}

// ---- elementwise ops (ggml CPU numerics) --------------------------------------------------------

/* y = x / sqrt(mean(x^2) + eps); y may alias x. */
static void rms_norm(const float *x, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

/* y *= w elementwise. */
static void mul(float *y, const float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] * w[i];
}

/* y += x elementwise. */
static void add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] + x[i];
}

static void scale(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] * s;
}

/* rows of x [n_rows][n] -> y, each rms-normed with eps and multiplied by the weight w [n]. */
static void rms_norm_rows(const float *x, float *y, int32_t n_rows, int64_t n, float eps, const float *w) {
    for (int32_t r = 0; r < n_rows; r++) {
        rms_norm(x + (size_t)r * n, y + (size_t)r * n, n, eps);
        if (w) mul(y + (size_t)r * n, w, n);
    }
}

/*
 * RoPE NORM (adjacent pairs) angles for position p, as ggml's rope cache: theta starts at p and
 * is multiplied by powf(base, -2/n_rot) after each pair, all in f32; cos/sin of freq_scale*theta.
 */
static void rope_angles(float p, int32_t n_rot, float base, float freq_scale, float *c, float *s) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = p;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const float th = freq_scale * theta;
        c[i] = cosf(th);
        s[i] = sinf(th);
        theta *= theta_scale;
    }
}

/* Rotate the first n_rot dims of each of n_heads vectors [n_heads][hd] by the cached angles. */
static void rope_apply(float *x, int32_t n_heads, int32_t hd, int32_t n_rot, const float *c, const float *s) {
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int32_t i = 0; i < n_rot / 2; i++) {
            const float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * c[i] - x1 * s[i];
            v[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
    }
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu(float x) { return x / (1.0f + expf(-x)); }

/*
 * y[i] = silu(g[i]) * u[i] over one row of n, as ggml_vec_swiglu_f32 on x86 AVX2+FMA: whole
 * groups of 8 use ggml's vector exp (muse_x86_silu), the n % 8 tail the scalar expf.
 */
static void swiglu_row(float *y, const float *g, const float *u, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i++) y[i] = muse_x86_silu(g[i]) * u[i];
    for (int64_t i = n8; i < n; i++) y[i] = silu(g[i]) * u[i];
}

static void trace_rows(const struct muse_forward_args *a, const float *x, int64_t n_embd, int32_t il) {
    if (!a->trace) return;
    for (int32_t r = 0; r < a->n_tokens; r++) {
        if (a->pos[r] >= a->trace_n_pos) continue;
        const float *xr = x + (size_t)r * n_embd;
        double sum = 0.0, sumsq = 0.0;
        for (int64_t i = 0; i < n_embd; i++) {
            sum += xr[i];
            sumsq += (double)xr[i] * xr[i];
        }
        float first[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < 4 && i < n_embd; i++) first[i] = xr[i];
        a->trace(a->trace_user, a->pos[r], il, sum, sumsq, first);
    }
}

// ---- the blocks ----------------------------------------------------------------------------------

struct fwd {
    const struct muse_hparams *hp;
    const struct muse_weights *w;
    const struct muse_backend_ops *ops;
    void *bs;
    struct muse_run_state *rs;
    struct muse_kv_cache *kv;
    const struct muse_forward_args *a;
};

/* y[n][ne1] = W·x, then (llama.cpp's build_lora_mm order) × the tensor's .scale, + bias. */
static void linear(const struct fwd *f, const struct muse_weight *wt, bool has_scale, float s, const struct muse_weight *b,
                   const float *x, float *y) {
    const int32_t n = f->a->n_tokens;
    f->ops->matmul(f->bs, wt, x, n, y);
    if (has_scale) scale(y, s, (int64_t)n * wt->ne1);
    if (b && b->data)
        for (int32_t r = 0; r < n; r++) add(y + (size_t)r * wt->ne1, b->data, wt->ne1);
}

/* x = embd_norm(token_embd[tok]) (or an injected row): RMS-normed WITHOUT a weight. */
static void embed_tokens(const struct fwd *f) {
    const struct muse_weight *te = &f->w->token_embd;
    const int64_t n_embd = f->hp->n_embd;
    for (int32_t r = 0; r < f->a->n_tokens; r++) {
        float *xr = f->rs->x + (size_t)r * n_embd;
        if (f->a->embd) {
            memcpy(xr, f->a->embd + (size_t)r * n_embd, sizeof(float) * (size_t)n_embd);
        } else {
            const uint8_t *row = (const uint8_t *)te->data + (size_t)f->a->tokens[r] * te->row_size;
            muse_type_traits[te->type].to_float(row, xr, n_embd);
        }
        rms_norm(xr, xr, n_embd, f->hp->f_norm_rms_eps);
    }
}

/* Q, K, V projections of h into rs->q/k/v ([n][n_q], [n][n_k], [n][n_v]). */
static void qkv_projections(const struct fwd *f, const struct muse_layer_weights *l, int64_t n_q, int64_t n_k,
                            int64_t n_v) {
    struct muse_run_state *rs = f->rs;
    if (!l->wqkv.data) {
        linear(f, &l->wq, l->has_wq_scale, l->wq_scale, &l->bq, rs->h, rs->q);
        linear(f, &l->wk, l->has_wk_scale, l->wk_scale, &l->bk, rs->h, rs->k);
        linear(f, &l->wv, l->has_wv_scale, l->wv_scale, &l->bv, rs->h, rs->v);
        return;
    }
    linear(f, &l->wqkv, l->has_wqkv_scale, l->wqkv_scale, &l->bqkv, rs->h, rs->qkv);
    const int64_t n_all = n_q + n_k + n_v; /* Q | K | V along the row */
    for (int32_t r = 0; r < f->a->n_tokens; r++) {
        const float *src = rs->qkv + (size_t)r * n_all;
        memcpy(rs->q + (size_t)r * n_q, src, sizeof(float) * (size_t)n_q);
        memcpy(rs->k + (size_t)r * n_k, src + n_q, sizeof(float) * (size_t)n_k);
        memcpy(rs->v + (size_t)r * n_v, src + n_q + n_k, sizeof(float) * (size_t)n_v);
    }
}

/* The attention half of layer il: x += post_norm(W_o·(attn(...) ⊙ sigmoid(W_gate·h))). */
static void attention_block(const struct fwd *f, uint32_t il) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_layer_weights *l = &f->w->layers[il];
    struct muse_run_state *rs = f->rs;
    const int32_t n = f->a->n_tokens;
    const int64_t n_embd = hp->n_embd;
    const int32_t n_head = (int32_t)hp->n_head[il], n_head_kv = (int32_t)hp->n_head_kv[il];
    const int32_t hd = (int32_t)muse_hparams_head_dim_k(hp, il);
    const int64_t n_q = (int64_t)n_head * hd, n_k = (int64_t)n_head_kv * hd, n_v = n_k;
    const bool swa = hp->is_swa[il];

    /* h = rms(x, eps) * attn_norm                                      [n][n_embd] */
    rms_norm_rows(rs->x, rs->h, n, n_embd, hp->f_norm_rms_eps, l->attn_norm.data);
    /* q [n][n_head][hd], k [n][n_head_kv][hd], v [n][n_head_kv][hd]; gate g [n][n_q] from the same h */
    qkv_projections(f, l, n_q, n_k, n_v);
    linear(f, &l->attn_gate, false, 1.0f, NULL, rs->h, rs->g);
    /* per-head RMS norm of q and k (eps from the file), weights q_norm (3.87) and k_norm (1) */
    rms_norm_rows(rs->q, rs->q, n * n_head, hd, hp->f_norm_rms_eps, l->attn_q_norm.data);
    rms_norm_rows(rs->k, rs->k, n * n_head_kv, hd, hp->f_norm_rms_eps, l->attn_k_norm.data);
    /* RoPE on sliding-window layers only (full layers are NoPE); then store k, v */
    for (int32_t r = 0; r < n; r++) {
        float *qr = rs->q + (size_t)r * n_q, *kr = rs->k + (size_t)r * n_k;
        if (swa) {
            const int32_t n_rot = (int32_t)hp->n_rot_swa;
            rope_angles((float)f->a->pos[r], n_rot, hp->rope_freq_base_swa, hp->rope_freq_scale_swa, rs->rope_cos,
                        rs->rope_sin);
            rope_apply(qr, n_head, hd, n_rot, rs->rope_cos, rs->rope_sin);
            rope_apply(kr, n_head_kv, hd, n_rot, rs->rope_cos, rs->rope_sin);
        }
        muse_kv_cache_store(f->kv, il, f->a->pos[r], kr, rs->v + (size_t)r * n_v);
    }
    /* att = softmax(q·K^T / sqrt(hd) + mask) · V                          [n][n_q] */
    struct muse_attn_args aa = {
        .q = rs->q, .out = rs->att, .kv = &f->kv->layers[il], .pos = f->a->pos, .n_tokens = n,
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd,
        .n_swa = swa ? (int32_t)hp->n_swa : 0, .scale = 1.0f / sqrtf((float)hd),
    };
    f->ops->attention(f->bs, &aa);
    /* att *= sigmoid(g), per channel, before W_o */
    for (int64_t i = 0; i < (int64_t)n * n_q; i++) rs->att[i] = rs->att[i] * sigmoid(rs->g[i]);
    /* o = W_o·att (× attn_output.scale)                                    [n][n_embd] */
    linear(f, &l->wo, l->has_wo_scale, l->wo_scale, NULL, rs->att, rs->o);
    /* x += rms(o, 1e-8) * post_attention_norm */
    rms_norm_rows(rs->o, rs->o, n, n_embd, hp->f_post_norm_eps, l->post_attention_norm.data);
    add(rs->x, rs->o, (int64_t)n * n_embd);
}

/* The FFN half of layer il: x += post_norm(W_down·(silu(W_gate·h) * (W_up·h))). */
static void ffn_block(const struct fwd *f, uint32_t il) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_layer_weights *l = &f->w->layers[il];
    struct muse_run_state *rs = f->rs;
    const int32_t n = f->a->n_tokens;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff[il];

    /* h = rms(x, eps) * ffn_norm                                          [n][n_embd] */
    rms_norm_rows(rs->x, rs->h, n, n_embd, hp->f_norm_rms_eps, l->ffn_norm.data);
    /* fg = W_gate·h, fu = W_up·h                                           [n][n_ff] */
    linear(f, &l->ffn_gate, false, 1.0f, NULL, rs->h, rs->fg);
    linear(f, &l->ffn_up, false, 1.0f, NULL, rs->h, rs->fu);
    /* fg = silu(fg) * fu (SwiGLU) */
    for (int32_t r = 0; r < n; r++)
        swiglu_row(rs->fg + (size_t)r * n_ff, rs->fg + (size_t)r * n_ff, rs->fu + (size_t)r * n_ff, n_ff);
    /* o = W_down·fg                                                        [n][n_embd] */
    linear(f, &l->ffn_down, false, 1.0f, NULL, rs->fg, rs->o);
    /* x += rms(o, 1e-8) * post_ffw_norm */
    rms_norm_rows(rs->o, rs->o, n, n_embd, hp->f_post_norm_eps, l->post_ffw_norm.data);
    add(rs->x, rs->o, (int64_t)n * n_embd);
}

/* logits = softcap(logit_scale · W_out·(rms(x) * output_norm)) for rows first..n-1. */
static void output_head(const struct fwd *f) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_weights *w = f->w;
    struct muse_run_state *rs = f->rs;
    const int32_t first = f->a->first_logit_row, n_out = f->a->n_tokens - first;
    const int64_t n_embd = hp->n_embd, n_vocab = w->output.ne1;
    if (n_out <= 0) return;
    float *h = rs->h + (size_t)first * n_embd;
    rms_norm_rows(rs->x + (size_t)first * n_embd, h, n_out, n_embd, hp->f_norm_rms_eps, w->output_norm.data);
    float *y = f->a->logits; /*                                             [n_out][n_vocab] */
    f->ops->matmul(f->bs, &w->output, h, n_out, y);
    const int64_t total = (int64_t)n_out * n_vocab;
    if (w->has_output_scale) scale(y, w->output_scale, total);
    scale(y, hp->f_logit_scale, total);
    const float cap = hp->f_final_logit_softcapping;
    if (cap != 0.0f) {
        const float inv = 1.0f / cap;
        for (int64_t i = 0; i < total; i++) y[i] = tanhf(y[i] * inv) * cap;
    }
}

void muse_forward(const struct muse_hparams *hp, const struct muse_weights *w, const struct muse_backend_ops *ops,
                  void *backend_state, struct muse_run_state *rs, struct muse_kv_cache *kv,
                  const struct muse_forward_args *args) {
    MUSE_ASSERT(args->n_tokens >= 1 && args->n_tokens <= rs->n_batch);
    const struct fwd f = {hp, w, ops, backend_state, rs, kv, args};
    embed_tokens(&f);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        trace_rows(args, rs->x, hp->n_embd, (int32_t)il); /* the residual entering layer il */
        if (args->capture) args->capture(args->capture_user, (int32_t)il, args->pos, args->n_tokens, rs->x);
        attention_block(&f, il);
        ffn_block(&f, il);
    }
    trace_rows(args, rs->x, hp->n_embd, (int32_t)hp->n_layer);
    output_head(&f);
}
