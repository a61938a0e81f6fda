/*
 * forward.c - the Muse-Glimmer text forward (text-model.md 5.1), plain C that reads like the
 * spec. Numerics follow ggml's CPU ops (spec section 8): rms_norm sums x*x in double and
 * multiplies by 1/sqrtf(mean + eps) before a separate multiply by the weight; rope angles are
 * computed incrementally in f32; silu uses expf (the attention gate's sigmoid, applied inside the
 * backend's attention op, too: muse_attn_gate_head); the softcap is softcap * tanhf(x * (1/softcap)).
 * Matmuls and attention go through the backend. The whole forward is one parallel region of the
 * backend; every step below is sliced by the thread's (ith, nth) (see "the region" below).
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
    int64_t n_q_max, n_k_max, n_v_max, n_ff_max, hd_max;
    int64_t rope_stride; /* floats per row of rope_cos / rope_sin */
    float *x;        /* [n_batch][n_embd] the residual stream */
    float *h;        /* [n_batch][n_embd] normed input of a block */
    float *q;        /* [n_batch][n_q_max] */
    float *k;        /* [n_batch][n_k_max] */
    float *v;        /* [n_batch][n_v_max] */
    float *g;        /* [n_batch][n_q_max] attention gate projection */
    float *att;      /* [n_batch][n_q_max] attention output (heads concatenated) */
    float *o;        /* [n_batch][n_embd] block output before the post-norm */
    float *fg;       /* [n_batch][n_ff_max] ffn_gate projection, then silu(gate) * up */
    float *fu;       /* [n_batch][n_ff_max] ffn_up projection */
    float *rope_cos; /* [n_batch][rope_stride] sliding-window rope angles of each row's position */
    float *rope_sin; /* [n_batch][rope_stride] */
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
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        int64_t nq = muse_hparams_n_embd_q(hp, il), nk = muse_hparams_n_embd_k_gqa(hp, il);
        int64_t nv = muse_hparams_n_embd_v_gqa(hp, il);
        rs->n_q_max = max64(rs->n_q_max, nq);
        rs->n_k_max = max64(rs->n_k_max, nk);
        rs->n_v_max = max64(rs->n_v_max, nv);
        rs->n_ff_max = max64(rs->n_ff_max, hp->n_ff[il]);
        rs->hd_max = max64(rs->hd_max, muse_hparams_head_dim_k(hp, il));
    }
    (void)w;
    /* sizes in floats, each buffer rounded up to 16 floats (64 bytes) */
#define R16(n) (((size_t)(n) + 15) & ~(size_t)15)
    rs->rope_stride = (int64_t)R16(hp->n_rot_swa / 2 + 1);
    const size_t nb = (size_t)n_batch;
    size_t sz_x = R16(nb * rs->n_embd);
    size_t sz_q = R16(nb * rs->n_q_max), sz_k = R16(nb * rs->n_k_max), sz_v = R16(nb * rs->n_v_max);
    size_t sz_ff = R16(nb * rs->n_ff_max), sz_rope = nb * (size_t)rs->rope_stride;
    size_t total = 3 * sz_x + 3 * sz_q + sz_k + sz_v + 2 * sz_ff + 2 * sz_rope;
#undef R16
    rs->mem = aligned_alloc(64, total * sizeof(float));
    if (!rs->mem) goto nomem;
    memset(rs->mem, 0, total * sizeof(float));
    float *p = rs->mem;
    rs->x = p, p += sz_x;
    rs->h = p, p += sz_x;
    rs->o = p, p += sz_x;
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

/* The elementwise loops below go by 8 (a fixed inner count, which GCC's -O2 vectorizer takes;
 * it leaves loops of unknown length scalar); distinct arrays are restrict. Same bits. */

/* y *= w elementwise. */
static void mul(float *restrict y, const float *restrict w, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] = y[i + j] * w[i + j];
    for (; i < n; i++) y[i] = y[i] * w[i];
}

/* y += x elementwise. */
static void add(float *restrict y, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] = y[i + j] + x[i + j];
    for (; i < n; i++) y[i] = y[i] + x[i];
}

/* y = x * s (y == x, or another array). */
static void scale_into(float *y, const float *x, float s, int64_t n) {
    if (y == x) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) y[i + j] = y[i + j] * s;
        for (; i < n; i++) y[i] = y[i] * s;
        return;
    }
    float *restrict yo = y;
    const float *restrict xo = x;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) yo[i + j] = xo[i + j] * s;
    for (; i < n; i++) yo[i] = xo[i] * s;
}

/* n_rows rows of n (row r at x + r xs) -> y (row r at y + r ys; y may alias x): y = x / sqrt(mean(x^2)
 * + eps), then * w if w, as ggml's rms_norm (the sum of x*x in double, in element order) and mul.
 * The sums of up to 64 rows at a time side by side (muse_rms_sums: each row's own chain of
 * additions, the same bits as one row at a time). */
static void rms_norm_rows(const float *x, int64_t xs, float *y, int64_t ys, int32_t n_rows, int64_t n, float eps,
                          const float *w) {
    double sums[64];
    for (int32_t r0 = 0; r0 < n_rows; r0 += 64) {
        const int32_t nr = n_rows - r0 < 64 ? n_rows - r0 : 64;
        muse_rms_sums(x + (size_t)r0 * (size_t)xs, xs, nr, n, sums);
        for (int32_t r = 0; r < nr; r++) {
            const float mean = (float)(sums[r] / (double)n);
            const float s = 1.0f / sqrtf(mean + eps);
            const float *xr = x + (size_t)(r0 + r) * (size_t)xs;
            float *yr = y + (size_t)(r0 + r) * (size_t)ys;
            scale_into(yr, xr, s, n);
            if (w) mul(yr, w, n);
        }
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

static float silu(float x) { return x / (1.0f + expf(-x)); }

/*
 * y[i] = silu(g[i]) * u[i] for columns c0..c1-1 of one row of n, as ggml_vec_swiglu_f32 on x86
 * AVX2+FMA: the whole groups of 8 of the row use ggml's vector exp (muse_x86_silu), its n % 8
 * tail the scalar expf.
 */
static void swiglu_cols(float *y, const float *g, const float *u, int64_t n, int64_t c0, int64_t c1) {
    const int64_t n8 = n & ~(int64_t)7, e8 = c1 < n8 ? c1 : n8;
    if (c0 < e8) muse_x86_swiglu(y + c0, g + c0, u + c0, e8 - c0);
    for (int64_t i = c0 > e8 ? c0 : e8; i < c1; i++) y[i] = silu(g[i]) * u[i];
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

// ---- the region: who does what -------------------------------------------------------------------

/*
 * muse_forward is ONE parallel region of the backend (backend.h): every thread runs the code
 * below with its (ith, nth). Row-wise steps (norms, residual adds, the SwiGLU) take the batch
 * rows r with r % nth == ith, which are also the rows that thread converts for the next matmul,
 * so row-wise steps chain into a matmul without a barrier; a barrier follows each matmul and
 * attention step, whose outputs every thread writes a share of.
 */
struct fwd {
    const struct muse_hparams *hp;
    const struct muse_weights *w;
    const struct muse_backend_ops *ops;
    void *bs;
    struct muse_run_state *rs;
    struct muse_kv_cache *kv;
    const struct muse_forward_args *a;
    int ith, nth; /* this thread of the region */
};

/* The batch rows r < n this thread owns in row-wise steps. */
#define FOR_OWN_ROWS(f, r, n) for (int32_t r = (f)->ith; r < (n); r += (f)->nth)

/* This thread's contiguous share [*i0, *i1) of n items. */
static void share(const struct fwd *f, int64_t n, int64_t *i0, int64_t *i1) {
    *i0 = n * f->ith / f->nth;
    *i1 = n * (f->ith + 1) / f->nth;
}

static void barrier(const struct fwd *f) { f->ops->barrier(f->bs); }

/* This thread's share of jobs (all reading x [n_rows][ne0]); complete after the next barrier. */
static void matmuls(const struct fwd *f, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows) {
    f->ops->matmul(f->bs, jobs, n_jobs, x, n_rows, f->ith, f->nth);
}

/* y = W·x, then (llama.cpp's build_lora_mm order) × the tensor's .scale, + bias. */
static struct muse_matmul_job linear(const struct muse_weight *wt, bool has_scale, float s, const struct muse_weight *b,
                                     float *y) {
    return (struct muse_matmul_job){*wt, y, has_scale, s, b && b->data ? (const float *)b->data : NULL};
}

/* Rope angles of the rows' positions (sliding-window rope; full layers are NoPE).  [n][n_rot/2] */
static float *rope_cos(const struct fwd *f, int32_t r) { return f->rs->rope_cos + (size_t)r * f->rs->rope_stride; }
static float *rope_sin(const struct fwd *f, int32_t r) { return f->rs->rope_sin + (size_t)r * f->rs->rope_stride; }

/* The layer trace and capture callbacks see the whole residual: thread 0 calls them. A barrier first
 * (the rows of the other threads), except for a single row, which thread 0 owns and wrote itself; no
 * thread writes x again before a barrier that thread 0 reaches after the call, so a capture needs no
 * barrier after it (the trace keeps one). Layers the capture does not ask for cost nothing. */
static void observe(const struct fwd *f, uint32_t il) {
    const struct muse_forward_args *a = f->a;
    if (!a->trace && !a->capture) return;
    if (!a->trace && a->capture_layers && (il >= f->hp->n_layer || !a->capture_layers[il])) return;
    if (a->trace || a->n_tokens > 1) barrier(f);
    if (f->ith == 0) {
        trace_rows(a, f->rs->x, f->hp->n_embd, (int32_t)il); /* the residual entering layer il */
        if (a->capture && il < f->hp->n_layer) a->capture(a->capture_user, (int32_t)il, a->pos, a->n_tokens, f->rs->x);
    }
    if (a->trace) barrier(f);
}

/* y = rms(x, eps) (* w) on this thread's rows of [n][n_embd] (FOR_OWN_ROWS': every nth row). */
static void norm_own_rows(const struct fwd *f, const float *x, float *y, int32_t n, float eps, const float *w) {
    const int64_t n_embd = f->hp->n_embd, step = (int64_t)f->nth * n_embd;
    if (n <= f->ith) return;
    const int32_t own = (n - 1 - f->ith) / f->nth + 1;
    rms_norm_rows(x + (size_t)f->ith * n_embd, step, y + (size_t)f->ith * n_embd, step, own, n_embd, eps, w);
}

/* h = rms(x, eps) * w on this thread's rows (the rows it converts for the next matmul). */
static void pre_norm(const struct fwd *f, const float *w) {
    norm_own_rows(f, f->rs->x, f->rs->h, f->a->n_tokens, f->hp->f_norm_rms_eps, w);
}

/* x += rms(o, post-norm eps 1e-8) * w on this thread's rows. */
static void add_post_norm(const struct fwd *f, const float *w) {
    const int64_t n_embd = f->hp->n_embd;
    norm_own_rows(f, f->rs->o, f->rs->o, f->a->n_tokens, f->hp->f_post_norm_eps, w);
    FOR_OWN_ROWS(f, r, f->a->n_tokens) add(f->rs->x + (size_t)r * n_embd, f->rs->o + (size_t)r * n_embd, n_embd);
}

// ---- the blocks ----------------------------------------------------------------------------------

/* x = embd_norm(token_embd[tok]) (or an injected row): RMS-normed WITHOUT a weight. Also the
 * rope angles of each row's position. */
static void embed_tokens(const struct fwd *f) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_weight *te = &f->w->token_embd;
    const int64_t n_embd = hp->n_embd;
    FOR_OWN_ROWS(f, r, f->a->n_tokens) {
        float *xr = f->rs->x + (size_t)r * n_embd;
        if (f->a->rows && f->a->rows[r]) {
            memcpy(xr, f->a->rows[r], sizeof(float) * (size_t)n_embd);
        } else if (f->a->embd) {
            memcpy(xr, f->a->embd + (size_t)r * n_embd, sizeof(float) * (size_t)n_embd);
        } else {
            const uint8_t *row = (const uint8_t *)te->data + (size_t)f->a->tokens[r] * te->row_size;
            muse_type_traits[te->type].to_float(row, xr, n_embd);
        }
        rope_angles((float)f->a->pos[r], (int32_t)hp->n_rot_swa, hp->rope_freq_base_swa, hp->rope_freq_scale_swa,
                    rope_cos(f, r), rope_sin(f, r));
    }
    norm_own_rows(f, f->rs->x, f->rs->x, f->a->n_tokens, hp->f_norm_rms_eps, NULL);
}

/* The Q, K, V projections of h into rs->q/k/v ([n][n_q], [n][n_k], [n][n_v]) as matmul jobs: three
 * weights, or three row ranges of the fused attn_qkv (Q | K | V along its rows). Returns 3. */
static int qkv_jobs(const struct fwd *f, const struct muse_layer_weights *l, int64_t n_q, int64_t n_k, int64_t n_v,
                    struct muse_matmul_job *jobs) {
    struct muse_run_state *rs = f->rs;
    if (!l->wqkv.data) {
        jobs[0] = linear(&l->wq, l->has_wq_scale, l->wq_scale, &l->bq, rs->q);
        jobs[1] = linear(&l->wk, l->has_wk_scale, l->wk_scale, &l->bk, rs->k);
        jobs[2] = linear(&l->wv, l->has_wv_scale, l->wv_scale, &l->bv, rs->v);
        return 3;
    }
    const int64_t r0[3] = {0, n_q, n_q + n_k}, nr[3] = {n_q, n_k, n_v};
    float *y[3] = {rs->q, rs->k, rs->v};
    for (int i = 0; i < 3; i++) {
        jobs[i] = linear(&l->wqkv, l->has_wqkv_scale, l->wqkv_scale, &l->bqkv, y[i]);
        jobs[i].w = muse_weight_rows(&l->wqkv, r0[i], nr[i]);
        if (jobs[i].bias) jobs[i].bias += r0[i];
    }
    return 3;
}

/* The attention half of layer il: x += post_norm(W_o·(attn(...) ⊙ sigmoid(W_gate·h))). */
static void attention_block(const struct fwd *f, uint32_t il) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_layer_weights *l = &f->w->layers[il];
    struct muse_run_state *rs = f->rs;
    const int32_t n = f->a->n_tokens;
    const int32_t n_head = (int32_t)hp->n_head[il], n_head_kv = (int32_t)hp->n_head_kv[il];
    const int32_t hd = (int32_t)muse_hparams_head_dim_k(hp, il);
    const int64_t n_q = (int64_t)n_head * hd, n_k = (int64_t)n_head_kv * hd, n_v = n_k;
    const bool swa = hp->is_swa[il];
    const int32_t n_rot = (int32_t)hp->n_rot_swa;
    const float eps = hp->f_norm_rms_eps;

    /* h = rms(x, eps) * attn_norm                                      [n][n_embd] */
    pre_norm(f, l->attn_norm.data);
    /* q [n][n_head][hd], k [n][n_head_kv][hd], v [n][n_head_kv][hd]; gate g [n][n_q] from the same h */
    struct muse_matmul_job jobs[4];
    const int n_jobs = qkv_jobs(f, l, n_q, n_k, n_v, jobs);
    jobs[n_jobs] = linear(&l->attn_gate, false, 1.0f, NULL, rs->g);
    matmuls(f, jobs, n_jobs + 1, rs->h, n);
    barrier(f);
    /* per-head RMS norm of q and k (eps from the file), weights q_norm (3.87) and k_norm (1);
     * RoPE on sliding-window layers only (full layers are NoPE); then store k, v. Q heads are
     * shared out one by one (decode has a single row), K/V by row. */
    int64_t i0, i1;
    share(f, (int64_t)n * n_head, &i0, &i1);
    rms_norm_rows(rs->q + (size_t)i0 * hd, hd, rs->q + (size_t)i0 * hd, hd, (int32_t)(i1 - i0), hd, eps,
                  l->attn_q_norm.data); /* the heads of the share are consecutive vectors */
    for (int64_t it = i0; it < i1 && swa; it++) /* row it / n_head, head it % n_head */
        rope_apply(rs->q + (size_t)it * hd, 1, hd, n_rot, rope_cos(f, (int32_t)(it / n_head)), rope_sin(f, (int32_t)(it / n_head)));
    FOR_OWN_ROWS(f, r, n) {
        float *kr = rs->k + (size_t)r * n_k;
        rms_norm_rows(kr, hd, kr, hd, n_head_kv, hd, eps, l->attn_k_norm.data);
        if (swa) rope_apply(kr, n_head_kv, hd, n_rot, rope_cos(f, r), rope_sin(f, r));
        muse_kv_cache_store(f->kv, il, f->a->pos[r], kr, rs->v + (size_t)r * n_v);
    }
    barrier(f);
    /* att = softmax(q·K^T / sqrt(hd) + mask) · V, then att *= sigmoid(g) per channel   [n][n_q] */
    struct muse_attn_args aa = {
        .q = rs->q, .out = rs->att, .kv = &f->kv->layers[il], .pos = f->a->pos, .n_tokens = n,
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd,
        .n_swa = swa ? (int32_t)hp->n_swa : 0, .scale = 1.0f / sqrtf((float)hd), .gate = rs->g,
    };
    f->ops->attention(f->bs, &aa, f->ith, f->nth);
    barrier(f);
    /* o = W_o·att (× attn_output.scale)                                    [n][n_embd] */
    const struct muse_matmul_job wo = linear(&l->wo, l->has_wo_scale, l->wo_scale, NULL, rs->o);
    matmuls(f, &wo, 1, rs->att, n);
    barrier(f);
    /* x += rms(o, 1e-8) * post_attention_norm */
    add_post_norm(f, l->post_attention_norm.data);
}

/* The FFN half of layer il: x += post_norm(W_down·(silu(W_gate·h) * (W_up·h))). */
static void ffn_block(const struct fwd *f, uint32_t il) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_layer_weights *l = &f->w->layers[il];
    struct muse_run_state *rs = f->rs;
    const int32_t n = f->a->n_tokens;
    const int64_t n_ff = hp->n_ff[il];

    /* h = rms(x, eps) * ffn_norm                                          [n][n_embd] */
    pre_norm(f, l->ffn_norm.data);
    /* fg = W_gate·h, fu = W_up·h (one step, one conversion of h)          [n][n_ff] */
    const struct muse_matmul_job gu[2] = {
        linear(&l->ffn_gate, false, 1.0f, NULL, rs->fg),
        linear(&l->ffn_up, false, 1.0f, NULL, rs->fu),
    };
    matmuls(f, gu, 2, rs->h, n);
    barrier(f);
    /* fg = silu(fg) * fu (SwiGLU): by row, or with fewer rows than threads (decode) by columns
     * and a barrier (the down matmul converts whole rows) */
    if (n >= f->nth) {
        FOR_OWN_ROWS(f, r, n) swiglu_cols(rs->fg + (size_t)r * n_ff, rs->fg + (size_t)r * n_ff, rs->fu + (size_t)r * n_ff, n_ff, 0, n_ff);
    } else {
        int64_t c0, c1;
        share(f, n_ff, &c0, &c1);
        for (int32_t r = 0; r < n; r++)
            swiglu_cols(rs->fg + (size_t)r * n_ff, rs->fg + (size_t)r * n_ff, rs->fu + (size_t)r * n_ff, n_ff, c0, c1);
        barrier(f);
    }
    /* o = W_down·fg                                                        [n][n_embd] */
    const struct muse_matmul_job down = linear(&l->ffn_down, false, 1.0f, NULL, rs->o);
    matmuls(f, &down, 1, rs->fg, n);
    barrier(f);
    /* x += rms(o, 1e-8) * post_ffw_norm */
    add_post_norm(f, l->post_ffw_norm.data);
}

/* logits = softcap(logit_scale · W_out·(rms(x) * output_norm)) for rows first..n-1. */
static void output_head(const struct fwd *f) {
    const struct muse_hparams *hp = f->hp;
    const struct muse_weights *w = f->w;
    struct muse_run_state *rs = f->rs;
    const int32_t first = f->a->first_logit_row, n_out = f->a->n_tokens - first;
    const int64_t n_embd = hp->n_embd, n_vocab = w->output.ne1;
    if (n_out <= 0) return;
    barrier(f); /* the head's rows are counted from `first`: their owners differ from the layers' */
    float *h = rs->h + (size_t)first * n_embd;
    norm_own_rows(f, rs->x + (size_t)first * n_embd, h, n_out, hp->f_norm_rms_eps, w->output_norm.data);
    float *y = f->a->logits; /*                                             [n_out][n_vocab] */
    const struct muse_matmul_job out = {w->output, y, w->has_output_scale, w->output_scale, NULL};
    matmuls(f, &out, 1, h, n_out);
    barrier(f);
    int64_t i0, i1;
    share(f, (int64_t)n_out * n_vocab, &i0, &i1);
    scale_into(y + i0, y + i0, hp->f_logit_scale, i1 - i0);
    const float cap = hp->f_final_logit_softcapping;
    if (cap != 0.0f) {
        const float inv = 1.0f / cap;
        for (int64_t i = i0; i < i1; i++) y[i] = tanhf(y[i] * inv) * cap;
    }
}

static void forward_region(int ith, int nth, void *ctx) {
    struct fwd f = *(const struct fwd *)ctx;
    f.ith = ith;
    f.nth = nth;
    embed_tokens(&f);
    for (uint32_t il = 0; il < f.hp->n_layer; il++) {
        observe(&f, il);
        attention_block(&f, il);
        ffn_block(&f, il);
    }
    observe(&f, f.hp->n_layer);
    output_head(&f);
}

void muse_forward(const struct muse_hparams *hp, const struct muse_weights *w, const struct muse_backend_ops *ops,
                  void *backend_state, struct muse_run_state *rs, struct muse_kv_cache *kv,
                  const struct muse_forward_args *args) {
    MUSE_ASSERT(args->n_tokens >= 1 && args->n_tokens <= rs->n_batch);
    const struct fwd f = {hp, w, ops, backend_state, rs, kv, args, 0, 1};
    ops->parallel(backend_state, forward_region, (void *)&f);
}
