/*
 * vision_encode.c - the Muse-Glimmer tower and adapter (spec 5; llama.cpp's
 * clip_graph_muse_glimmer::build with build_vit), plain C that reads like the spec, run as ONE
 * parallel region of the backend (backend.h), like the text forward:
 *
 *   patches (window order) -> 14x14 conv as a matmul (F32) -> + bilinear-resized position table
 *   -> pre_ln -> n_layer x [ln1 -> q,k,v (+bias) -> 2D RoPE -> attention per window (or over all
 *   patches on global layers) -> out (+bias) -> residual -> ln2 -> up (+bias) -> erf-GELU ->
 *   down (+bias) -> residual] -> post_ln -> back to raster -> 2x2 channel-outer pixel shuffle ->
 *   mm.0 -> GELU -> mm.1 -> GELU -> mm.2 -> the output rows.
 *
 * The residual lives in window order from the start (the patches are embedded in that order), so
 * each window is a contiguous row range and a windowed layer is independent attention per range:
 * there is never an n x n mask. Matmuls run through the backend over chunks of rows (the
 * backend's n_batch): quantized weights stay quantized, activations are converted to the weight
 * type's dot partner exactly as ggml does. Row-wise steps (norms, RoPE, GELU, residual adds) take
 * the chunk rows r with r % nth == ith, the rows that thread also converts for the next matmul, so
 * they chain into it without a barrier (backend.h's contract); a barrier follows every matmul and
 * the attention. Attention work items (window, head, block of query rows) are claimed from a
 * shared counter.
 *
 * Numerics (docs/vision.md): matmuls as ggml's CPU backend (the backends agree bit for bit);
 * LayerNorm as ggml_norm (sum in double, mean and variance cast to f32, squares summed per 8 lanes
 * as its AVX2 build does), then * weight, + bias; GELU 0.5f*x*(1 + erff(x*0.70710678f)) as
 * ggml_vec_gelu_erf_f32; RoPE angles as ggml's rope cache (theta multiplied in f32); bilinear
 * position table with ggml's f32 coordinates and edge clamping. Two deliberate differences from
 * llama.cpp: the patch convolution stays F32 (ggml rounds image and kernel to F16 for its
 * im2col, ~5e-4 away) and the attention is F32 (ggml's flash attention rounds K and V to F16);
 * both are closer to the exact result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/x86_numerics.h"
#include "vision/vision.h"

#define ATTN_BLOCK 48 /* query rows per attention work item (a multiple of the SIMD tile) */

struct attn_item {
    int32_t s0, n;   /* the window */
    int32_t head;
    int32_t i0, i1;  /* its query rows */
};

/* Everything the region's threads share: geometry, index maps, buffers. */
struct enc {
    struct muse_vision *v;
    const struct muse_vision_hparams *hp;
    const struct muse_vision_weights *w;
    const float *pixels;   /* [3][H][W] */
    float *out;            /* [n_out][n_embd_out] */
    int32_t W, H;          /* image pixels */
    int32_t gw, gh, n_tok; /* patches */
    int32_t f, n_out;      /* merge factor, merged tokens */
    int32_t D, hd, n_head, C;
    int32_t *sp_perm;      /* [n_tok] window order -> raster */
    int32_t *inv_perm;     /* [n_tok] raster -> window order */
    int32_t *ds;           /* [n_out * f * f] pixel-shuffle gather (raster) */
    int32_t *rope_col;     /* [n_tok] 1-based column of window-order row i */
    int32_t *rope_row;     /* [n_tok] 1-based row */
    float *rcos, *rsin;    /* [max(gw, gh) + 1][hd / 4] rope angles of position p */
    struct attn_item *items_win, *items_glob;
    int32_t n_items_win, n_items_glob;
    int32_t n_panels;
    float *x;              /* [n_tok][D] the residual, window order */
    float *q;              /* [n_tok][D] queries, then the attention output */
    float *vp;             /* [n_head][n_tok][hd] values, packed per head */
    float *kp;             /* [n_head][n_panels][hd][16] packed keys */
    float *h;              /* [C][h_w] normed rows / im2col rows / merged rows */
    int64_t h_w;
    float *kc;             /* [C][D] keys of a chunk before packing */
    float *vc;             /* [C][D] values of a chunk before packing */
    float *o;              /* [C][D] attention-out and FFN-down projections */
    float *mid;            /* [C][max(n_ff, n_mm0)] */
    float *mid2;           /* [C][n_mm1] */
    float *ascr;           /* [nth][ascr_n] attention scratch */
    size_t ascr_n;
    float *st_raster;      /* stage hook only: [n_tok][D] a raster copy */
    float *st_ps, *st_a0, *st_a1; /* stage hook only: [n_out][merged / n_mm0 / n_mm1] */
    int attn_next;         /* next unclaimed attention item */
    int cancelled;
    void *mem;             /* the allocation the buffers point into */
};

/* One thread's view of the region. */
struct thr {
    struct enc *e;
    int ith, nth;
};

#define FOR_OWN_ROWS(t, r, n) for (int32_t r = (t)->ith; r < (n); r += (t)->nth)

static void barrier(const struct thr *t) { muse_device_barrier(t->e->v->dev); }

static void matmuls(const struct thr *t, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows) {
    muse_device_matmul(t->e->v->dev, jobs, n_jobs, x, n_rows, t->ith, t->nth);
}

static struct muse_matmul_job job(const struct muse_weight *wt, const struct muse_weight *bias, float *y) {
    return (struct muse_matmul_job){*wt, y, false, 1.0f, bias && bias->data ? (const float *)bias->data : NULL};
}

// ---- elementwise ops (ggml CPU numerics) ------------------------------------------------------------

/* y = (x - mean) / sqrt(var + eps) * w + b as ggml_norm + ggml_mul + ggml_add (AVX2 build); y may
 * alias x. */
static void layer_norm(const float *x, float *y, int64_t n, float eps, const float *w, const float *b) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i];
    const float mean = (float)s / (float)n;
    double var = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { /* ggml_vec_cvar_f32: each group of 8 squares summed in f32 */
        float sq[8];
        for (int l = 0; l < 8; l++) {
            const float d = x[i + l] - mean;
            y[i + l] = d;
            sq[l] = d * d;
        }
        var += (double)muse_x86_hsum8(sq);
    }
    for (; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        var += (double)(d * d);
    }
    const float scale = 1.0f / sqrtf((float)(var / (double)n) + eps);
    for (int64_t k = 0; k < n; k++) y[k] = y[k] * scale;
    if (w)
        for (int64_t k = 0; k < n; k++) y[k] = y[k] * w[k];
    if (b)
        for (int64_t k = 0; k < n; k++) y[k] = y[k] + b[k];
}

/* x = 0.5 * x * (1 + erf(x / sqrt 2)) in place, as ggml_vec_gelu_erf_f32. */
static void gelu_erf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752440084436210484f));
}

static void add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] + x[i];
}

static const float *vec(const struct muse_weight *w) { return w->data; }

// ---- setup ----------------------------------------------------------------------------------------

/* Work items of one layer kind: windows (or one window over everything) x heads x blocks of rows,
 * window-major then head-major so that consecutive items share keys and values in cache. */
static int32_t make_items(const int32_t *seg, int32_t n_seg, int32_t n_head, struct attn_item *items) {
    int32_t n = 0;
    for (int32_t s = 0; s < n_seg; s++)
        for (int32_t h = 0; h < n_head; h++)
            for (int32_t i0 = seg[s]; i0 < seg[s + 1]; i0 += ATTN_BLOCK) {
                if (items) {
                    const int32_t i1 = i0 + ATTN_BLOCK < seg[s + 1] ? i0 + ATTN_BLOCK : seg[s + 1];
                    items[n] = (struct attn_item){seg[s], seg[s + 1] - seg[s], h, i0, i1};
                }
                n++;
            }
    return n;
}

/* RoPE NORM angles of position p for n_pairs pairs over a half of n_dims = 2 * n_pairs channels:
 * theta starts at p and is multiplied by powf(theta_base, -2 / n_dims) after each pair, in f32. */
static void rope_angles(float p, int32_t n_pairs, float theta_base, float *c, float *s) {
    const float theta_scale = powf(theta_base, -2.0f / (float)(2 * n_pairs));
    float theta = p;
    for (int32_t i = 0; i < n_pairs; i++) {
        c[i] = cosf(theta);
        s[i] = sinf(theta);
        theta *= theta_scale;
    }
}

static size_t r64(size_t n) { return (n + 15) & ~(size_t)15; } /* floats, rounded to 64 bytes */

static muse_status enc_setup(struct enc *e, struct muse_vision *v, const struct muse_vision_input *in, float *out,
                             struct muse_error *err) {
    const struct muse_vision_hparams *hp = &v->hp;
    memset(e, 0, sizeof *e);
    e->v = v;
    e->hp = hp;
    e->w = &v->w;
    e->pixels = in->pixels;
    e->out = out;
    e->W = in->geom.target_w;
    e->H = in->geom.target_h;
    const int32_t p = (int32_t)hp->patch_size;
    e->f = (int32_t)hp->n_merge;
    if (!in->pixels || e->W < 1 || e->H < 1 || e->W % (p * e->f) || e->H % (p * e->f) ||
        in->geom.patches_w != e->W / p || in->geom.patches_h != e->H / p ||
        in->geom.n_tokens != (e->W / (p * e->f)) * (e->H / (p * e->f)))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "vision input %d x %d does not fit this projector (patch %d, merge %d): preprocess it with "
                              "the same projector", e->W, e->H, p, e->f);
    e->gw = e->W / p;
    e->gh = e->H / p;
    e->n_tok = e->gw * e->gh;
    e->n_out = (e->gw / e->f) * (e->gh / e->f);
    e->D = (int32_t)hp->n_embd;
    e->hd = (int32_t)hp->head_dim;
    e->n_head = (int32_t)hp->n_head;
    e->C = v->chunk;
    const int32_t win = (int32_t)hp->window_side, n_win = muse_vision_n_windows(e->gw, e->gh, win);
    const int32_t nth = v->n_threads, side = (e->gw > e->gh ? e->gw : e->gh) + 1, pairs = e->hd / 4;
    const int64_t merged = muse_vision_n_embd_merged(hp);
    e->h_w = merged > e->D ? merged : e->D;
    if (v->w.patch.ne0 > e->h_w) e->h_w = v->w.patch.ne0;
    const int64_t mid_w = hp->n_ff > hp->n_mm0 ? hp->n_ff : hp->n_mm0;
    e->n_panels = (e->n_tok + MUSE_VISION_KPANEL - 1) / MUSE_VISION_KPANEL;
    int32_t *seg = malloc(sizeof(int32_t) * ((size_t)n_win + 1));
    if (!seg) goto nomem;
    /* the sizes of everything, then one allocation */
    const size_t D = (size_t)e->D, nt = (size_t)e->n_tok, C = (size_t)e->C;
    e->ascr_n = r64(muse_vision_attn_scratch(e->n_tok));
    const bool stages = v->params.stage != NULL;
    size_t sz[] = {
        r64(nt * D), r64(nt * D), r64(nt * D),                                /* x, q, vp */
        r64((size_t)e->n_head * e->n_panels * (size_t)e->hd * MUSE_VISION_KPANEL), /* kp */
        r64(C * (size_t)e->h_w), r64(C * D), r64(C * D), r64(C * D),          /* h, kc, vc, o */
        r64(C * (size_t)mid_w), r64(C * hp->n_mm1),                           /* mid, mid2 */
        r64((size_t)nth * e->ascr_n),                                         /* ascr */
        r64((size_t)side * pairs), r64((size_t)side * pairs),                 /* rcos, rsin */
        stages ? r64(nt * D) : 0,                                             /* st_raster */
        stages ? r64((size_t)e->n_out * (size_t)merged) : 0,                  /* st_ps */
        stages ? r64((size_t)e->n_out * hp->n_mm0) : 0,                       /* st_a0 */
        stages ? r64((size_t)e->n_out * hp->n_mm1) : 0,                       /* st_a1 */
    };
    float **dst[] = {&e->x, &e->q, &e->vp, &e->kp, &e->h, &e->kc, &e->vc, &e->o, &e->mid, &e->mid2, &e->ascr,
                     &e->rcos, &e->rsin, &e->st_raster, &e->st_ps, &e->st_a0, &e->st_a1};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) total += sz[i];
    const size_t n_idx = nt * 4 + (size_t)e->n_out * e->f * e->f;
    e->mem = aligned_alloc(64, (total * sizeof(float) + n_idx * sizeof(int32_t) + 63) & ~(size_t)63);
    if (!e->mem) goto nomem;
    float *pf = e->mem;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        *dst[i] = sz[i] ? pf : NULL;
        pf += sz[i];
    }
    int32_t *pi = (int32_t *)pf;
    e->sp_perm = pi, pi += nt;
    e->inv_perm = pi, pi += nt;
    e->rope_col = pi, pi += nt;
    e->rope_row = pi, pi += nt;
    e->ds = pi;
    /* the tails of the last key panels (past n_tok) are read by the SIMD kernel: zero them */
    memset(e->kp, 0, sizeof(float) * sz[3]);
    /* index maps */
    const int32_t n_seg = muse_vision_window_perm(e->gw, e->gh, win, e->sp_perm, e->inv_perm, seg);
    muse_vision_shuffle_perm(e->gw, e->gh, e->f, e->ds);
    for (int32_t i = 0; i < e->n_tok; i++) {
        e->rope_col[i] = e->sp_perm[i] % e->gw + 1;
        e->rope_row[i] = e->sp_perm[i] / e->gw + 1;
    }
    for (int32_t pos = 0; pos < side; pos++)
        rope_angles((float)pos, pairs, hp->rope_theta, e->rcos + (size_t)pos * pairs, e->rsin + (size_t)pos * pairs);
    const int32_t glob[2] = {0, e->n_tok};
    e->n_items_win = make_items(seg, n_seg, e->n_head, NULL);
    e->n_items_glob = make_items(glob, 1, e->n_head, NULL);
    e->items_win = malloc(sizeof(struct attn_item) * ((size_t)e->n_items_win + (size_t)e->n_items_glob));
    if (!e->items_win) goto nomem;
    e->items_glob = e->items_win + e->n_items_win;
    make_items(seg, n_seg, e->n_head, e->items_win);
    make_items(glob, 1, e->n_head, e->items_glob);
    free(seg);
    return MUSE_OK;
nomem:
    free(seg);
    return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the vision activations (%d patches)", e->n_tok);
}

static void enc_free(struct enc *e) {
    free(e->mem);
    free(e->items_win);
}

// ---- stages -------------------------------------------------------------------------------------

static void stage(const struct thr *t, const char *name, const float *data, int64_t rows, int64_t cols) {
    const struct muse_vision_params *p = &t->e->v->params;
    if (p->stage && t->ith == 0) p->stage(p->stage_user, name, data, rows, cols);
}

/* The residual (window order) in raster order, for a stage: thread 0, between barriers. */
static void stage_raster(const struct thr *t, const char *name) {
    struct enc *e = t->e;
    if (!e->v->params.stage || t->ith) return;
    for (int32_t i = 0; i < e->n_tok; i++)
        memcpy(e->st_raster + (size_t)e->sp_perm[i] * e->D, e->x + (size_t)i * e->D, sizeof(float) * (size_t)e->D);
    stage(t, name, e->st_raster, e->n_tok, e->D);
}

// ---- the embedding ---------------------------------------------------------------------------------

/* The im2col row of raster patch t: (c, ky, kx), kx fastest, the conv kernel's flattening. */
static void im2col(const struct enc *e, int32_t t, float *row) {
    const int32_t p = (int32_t)e->hp->patch_size, py = t / e->gw, px = t % e->gw;
    const size_t plane = (size_t)e->W * (size_t)e->H;
    for (int32_t c = 0; c < 3; c++)
        for (int32_t ky = 0; ky < p; ky++) {
            const float *src = e->pixels + (size_t)c * plane + (size_t)(py * p + ky) * e->W + (size_t)px * p;
            memcpy(row, src, sizeof(float) * (size_t)p);
            row += p;
        }
}

/* x += the position table at raster patch t, bilinearly resized to the patch grid as ggml's
 * GGML_SCALE_MODE_BILINEAR does (half-pixel centres, f32 coordinates, edges clamped); the table
 * as it is when the grid is its size. */
static void add_pos(const struct enc *e, float *x, int32_t t) {
    const int32_t side = (int32_t)e->hp->window_side, D = e->D, py = t / e->gw, px = t % e->gw;
    const float *tab = e->w->pos.data;
    if (e->gw == side && e->gh == side) {
        add(x, tab + (size_t)t * D, D);
        return;
    }
    const float sfx = (float)e->gw / (float)side, sfy = (float)e->gh / (float)side;
    const float fy = ((float)py + 0.5f) / sfy - 0.5f, fx = ((float)px + 0.5f) / sfx - 0.5f;
    int32_t y0 = (int32_t)floorf(fy), y1 = y0 + 1, x0 = (int32_t)floorf(fx), x1 = x0 + 1;
    y0 = y0 < 0 ? 0 : y0 > side - 1 ? side - 1 : y0;
    y1 = y1 < 0 ? 0 : y1 > side - 1 ? side - 1 : y1;
    x0 = x0 < 0 ? 0 : x0 > side - 1 ? side - 1 : x0;
    x1 = x1 < 0 ? 0 : x1 > side - 1 ? side - 1 : x1;
    float dy = fy - (float)y0, dx = fx - (float)x0;
    dy = dy < 0.0f ? 0.0f : dy > 1.0f ? 1.0f : dy;
    dx = dx < 0.0f ? 0.0f : dx > 1.0f ? 1.0f : dx;
    const float *a = tab + (size_t)(y0 * side + x0) * D, *b = tab + (size_t)(y0 * side + x1) * D;
    const float *c = tab + (size_t)(y1 * side + x0) * D, *d = tab + (size_t)(y1 * side + x1) * D;
    for (int32_t k = 0; k < D; k++)
        x[k] = x[k] + (a[k] * (1 - dx) * (1 - dy) + b[k] * dx * (1 - dy) + c[k] * (1 - dx) * dy + d[k] * dx * dy);
}

/* x = conv(patches) + pos in window order, then pre_ln. */
static void embed(const struct thr *t) {
    struct enc *e = t->e;
    const int64_t K = e->w->patch.ne0;
    for (int32_t c0 = 0; c0 < e->n_tok; c0 += e->C) {
        const int32_t n = e->n_tok - c0 < e->C ? e->n_tok - c0 : e->C;
        FOR_OWN_ROWS(t, r, n) im2col(e, e->sp_perm[c0 + r], e->h + (size_t)r * K);
        const struct muse_matmul_job j = job(&e->w->patch, &e->w->patch_b, e->x + (size_t)c0 * e->D);
        matmuls(t, &j, 1, e->h, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) add_pos(e, e->x + (size_t)(c0 + r) * e->D, e->sp_perm[c0 + r]);
    }
    barrier(t);
    stage_raster(t, "after_posemb");
    barrier(t); /* the stage reads x, which pre_ln rewrites */
    FOR_OWN_ROWS(t, i, e->n_tok) {
        float *xi = e->x + (size_t)i * e->D;
        layer_norm(xi, xi, e->D, e->hp->eps, vec(&e->w->pre_ln_w), vec(&e->w->pre_ln_b));
    }
    barrier(t);
    stage(t, "after_pre_ln", e->x, e->n_tok, e->D);
}

// ---- a block ----------------------------------------------------------------------------------------

/* 2D RoPE of one row [n_head][hd]: channels [0, hd/2) rotate by the column, [hd/2, hd) by the row,
 * each half as ggml rope mode 0 (adjacent pairs) with n_dims = hd / 2. */
static void rope_row(const struct enc *e, float *x, int32_t i) {
    const int32_t hd = e->hd, pairs = hd / 4;
    const float *cw = e->rcos + (size_t)e->rope_col[i] * pairs, *sw = e->rsin + (size_t)e->rope_col[i] * pairs;
    const float *ch = e->rcos + (size_t)e->rope_row[i] * pairs, *sh = e->rsin + (size_t)e->rope_row[i] * pairs;
    for (int32_t h = 0; h < e->n_head; h++) {
        float *v = x + (size_t)h * hd;
        for (int half = 0; half < 2; half++, v += hd / 2) {
            const float *c = half ? ch : cw, *s = half ? sh : sw;
            for (int32_t j = 0; j < pairs; j++) {
                const float x0 = v[2 * j], x1 = v[2 * j + 1];
                v[2 * j] = x0 * c[j] - x1 * s[j];
                v[2 * j + 1] = x0 * s[j] + x1 * c[j];
            }
        }
    }
}

/* Row i's keys (roped) into the packed panels of every head, its values into each head's rows. */
static void pack_kv(const struct enc *e, const float *k, const float *v, int32_t i) {
    const int32_t hd = e->hd;
    for (int32_t h = 0; h < e->n_head; h++) {
        float *dst = e->kp + (((size_t)h * e->n_panels + (size_t)(i / MUSE_VISION_KPANEL)) * hd) * MUSE_VISION_KPANEL +
                     i % MUSE_VISION_KPANEL;
        for (int32_t d = 0; d < hd; d++) dst[(size_t)d * MUSE_VISION_KPANEL] = k[(size_t)h * hd + d];
        memcpy(e->vp + ((size_t)h * e->n_tok + (size_t)i) * hd, v + (size_t)h * hd, sizeof(float) * (size_t)hd);
    }
}

static void attention(const struct thr *t, bool global) {
    struct enc *e = t->e;
    const struct attn_item *items = global ? e->items_glob : e->items_win;
    const int32_t n_items = global ? e->n_items_glob : e->n_items_win;
    float *scr = e->ascr + (size_t)t->ith * e->ascr_n;
    const float scale = 1.0f / sqrtf((float)e->hd);
    const bool simd = e->v->simd_attn && e->hd % 8 == 0;
    for (int32_t it; (it = __atomic_fetch_add(&e->attn_next, 1, __ATOMIC_RELAXED)) < n_items;) {
        const struct attn_item *a = &items[it];
        const struct muse_vision_attn args = {
            .q = e->q, .ld = e->D, .hd = e->hd, .head = a->head, .s0 = a->s0, .n = a->n, .scale = scale,
            .v = e->vp + (size_t)a->head * e->n_tok * (size_t)e->hd, .v_ld = e->hd,
            .kp = e->kp + (size_t)a->head * e->n_panels * (size_t)e->hd * MUSE_VISION_KPANEL,
        };
        if (simd) muse_vision_attn_rows_avx2(&args, a->i0, a->i1, scr);
        else muse_vision_attn_rows_ref(&args, a->i0, a->i1, scr);
    }
}

static void block(const struct thr *t, uint32_t il) {
    struct enc *e = t->e;
    const struct muse_vision_layer *l = &e->w->layers[il];
    const int32_t D = e->D;
    const int64_t n_ff = e->hp->n_ff;
    const float eps = e->hp->eps;
    /* q, k, v = W (ln1(x)) + b, RoPE on q and k, keys packed per head */
    for (int32_t c0 = 0; c0 < e->n_tok; c0 += e->C) {
        const int32_t n = e->n_tok - c0 < e->C ? e->n_tok - c0 : e->C;
        FOR_OWN_ROWS(t, r, n)
            layer_norm(e->x + (size_t)(c0 + r) * D, e->h + (size_t)r * D, D, eps, vec(&l->ln1_w), vec(&l->ln1_b));
        const struct muse_matmul_job qkv[3] = {
            job(&l->q, &l->q_b, e->q + (size_t)c0 * D),
            job(&l->k, &l->k_b, e->kc),
            job(&l->v, &l->v_b, e->vc),
        };
        matmuls(t, qkv, 3, e->h, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) {
            rope_row(e, e->q + (size_t)(c0 + r) * D, c0 + r);
            rope_row(e, e->kc + (size_t)r * D, c0 + r);
            pack_kv(e, e->kc + (size_t)r * D, e->vc + (size_t)r * D, c0 + r);
        }
    }
    if (t->ith == 0) __atomic_store_n(&e->attn_next, 0, __ATOMIC_RELAXED);
    barrier(t);
    /* softmax(q k^T / sqrt(hd)) v per window and head, written over q */
    attention(t, muse_vision_layer_is_global(e->hp, il));
    barrier(t);
    /* x += W_o att + b_o; x += W_down gelu(W_up ln2(x) + b_up) + b_down */
    for (int32_t c0 = 0; c0 < e->n_tok; c0 += e->C) {
        const int32_t n = e->n_tok - c0 < e->C ? e->n_tok - c0 : e->C;
        const struct muse_matmul_job wo = job(&l->o, &l->o_b, e->o);
        matmuls(t, &wo, 1, e->q + (size_t)c0 * D, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) {
            float *xr = e->x + (size_t)(c0 + r) * D;
            add(xr, e->o + (size_t)r * D, D);
            layer_norm(xr, e->h + (size_t)r * D, D, eps, vec(&l->ln2_w), vec(&l->ln2_b));
        }
        const struct muse_matmul_job up = job(&l->up, &l->up_b, e->mid);
        matmuls(t, &up, 1, e->h, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) gelu_erf(e->mid + (size_t)r * n_ff, n_ff);
        const struct muse_matmul_job down = job(&l->down, &l->down_b, e->o);
        matmuls(t, &down, 1, e->mid, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) add(e->x + (size_t)(c0 + r) * D, e->o + (size_t)r * D, D);
    }
    barrier(t);
}

// ---- the head: post_ln, pixel shuffle, adapter ----------------------------------------------------

/* Merged token o: m[c * f^2 + s] = x_raster[ds[o * f^2 + s]][c] (channel-outer). */
static void merge_row(const struct enc *e, int32_t o, float *m) {
    const int32_t ff = e->f * e->f;
    for (int32_t s = 0; s < ff; s++) {
        const float *xr = e->x + (size_t)e->inv_perm[e->ds[(size_t)o * ff + s]] * e->D;
        for (int32_t c = 0; c < e->D; c++) m[(size_t)c * ff + s] = xr[c];
    }
}

static void head(const struct thr *t) {
    struct enc *e = t->e;
    const struct muse_vision_weights *w = e->w;
    FOR_OWN_ROWS(t, i, e->n_tok) {
        float *xi = e->x + (size_t)i * e->D;
        layer_norm(xi, xi, e->D, e->hp->eps, vec(&w->post_ln_w), vec(&w->post_ln_b));
    }
    barrier(t);
    stage(t, "after_post_ln_window_order", e->x, e->n_tok, e->D);
    stage_raster(t, "after_inv_perm");
    const int64_t merged = w->mm0.ne0, n0 = w->mm0.ne1, n1 = w->mm1.ne1, n_emb = w->mm2.ne1;
    const bool stages = e->v->params.stage != NULL;
    for (int32_t o0 = 0; o0 < e->n_out; o0 += e->C) {
        const int32_t n = e->n_out - o0 < e->C ? e->n_out - o0 : e->C;
        FOR_OWN_ROWS(t, r, n) {
            merge_row(e, o0 + r, e->h + (size_t)r * merged);
            if (stages) memcpy(e->st_ps + (size_t)(o0 + r) * merged, e->h + (size_t)r * merged, sizeof(float) * (size_t)merged);
        }
        const struct muse_matmul_job j0 = job(&w->mm0, NULL, e->mid);
        matmuls(t, &j0, 1, e->h, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) {
            gelu_erf(e->mid + (size_t)r * n0, n0);
            if (stages) memcpy(e->st_a0 + (size_t)(o0 + r) * n0, e->mid + (size_t)r * n0, sizeof(float) * (size_t)n0);
        }
        const struct muse_matmul_job j1 = job(&w->mm1, NULL, e->mid2);
        matmuls(t, &j1, 1, e->mid, n);
        barrier(t);
        FOR_OWN_ROWS(t, r, n) {
            gelu_erf(e->mid2 + (size_t)r * n1, n1);
            if (stages) memcpy(e->st_a1 + (size_t)(o0 + r) * n1, e->mid2 + (size_t)r * n1, sizeof(float) * (size_t)n1);
        }
        const struct muse_matmul_job j2 = job(&w->mm2, NULL, e->out + (size_t)o0 * n_emb);
        matmuls(t, &j2, 1, e->mid2, n);
        barrier(t);
    }
    stage(t, "pixel_shuffle", e->st_ps, e->n_out, merged);
    stage(t, "adapter0", e->st_a0, e->n_out, n0);
    stage(t, "adapter1", e->st_a1, e->n_out, n1);
    stage(t, "projected", e->out, e->n_out, n_emb);
}

// ---- the region ---------------------------------------------------------------------------------------

static void region(int ith, int nth, void *ctx) {
    const struct thr t = {ctx, ith, nth};
    struct enc *e = t.e;
    const struct muse_vision_params *p = &e->v->params;
    embed(&t);
    for (uint32_t il = 0; il < e->hp->n_layer; il++) {
        block(&t, il);
        if (ith == 0) {
            if (p->stage) {
                char name[48];
                snprintf(name, sizeof name, "layer%u_out_window_order", il);
                p->stage(p->stage_user, name, e->x, e->n_tok, e->D);
            }
            if (p->progress && p->progress(p->progress_user, il + 1, e->hp->n_layer)) e->cancelled = 1;
        }
        barrier(&t);
        if (e->cancelled) return; /* every thread sees the same flag after the barrier */
    }
    head(&t);
}

muse_status muse_vision_encode(struct muse_vision *v, const struct muse_vision_input *in, float *out,
                               struct muse_error *err) {
    if (!v || !in || !out) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "muse_vision_encode: NULL argument");
    struct enc e;
    muse_status st = enc_setup(&e, v, in, out, err);
    if (st) {
        enc_free(&e);
        return st;
    }
    muse_device_region(v->dev, region, &e);
    const int cancelled = e.cancelled;
    enc_free(&e);
    if (cancelled) return muse_error_set(err, MUSE_ERR_CANCELLED, "image encoding cancelled");
    return MUSE_OK;
}
