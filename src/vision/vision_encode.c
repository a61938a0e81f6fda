/*
 * vision_encode.c - the Muse-Glimmer tower and adapter (spec 5; llama.cpp's
 * clip_graph_muse_glimmer::build with build_vit) as a program of layer ops (backend/program.h),
 * built for the image's patch grid and run by the device, like the text forward:
 *
 *   patches (window order) -> 14x14 conv as a matmul (F32) -> + bilinear-resized position table
 *   -> pre_ln -> n_layer x [ln1 -> q,k,v (+bias) -> 2D RoPE -> attention per window (or over all
 *   patches on global layers) -> out (+bias) -> residual -> ln2 -> up (+bias) -> erf-GELU ->
 *   down (+bias) -> residual] -> post_ln -> back to raster -> 2x2 channel-outer pixel shuffle ->
 *   mm.0 -> GELU -> mm.1 -> GELU -> mm.2 -> the output rows.
 *
 * The residual lives in window order from the start (the patches are gathered in that order), so
 * each window is a contiguous row range and a windowed layer is attention per range (the
 * WINDOW_ATTENTION op): there is never an n x n mask. Matmuls run over chunks of v->chunk rows
 * (the device's n_batch), spelled out as ops with row counts: quantized weights stay quantized,
 * activations are converted to the weight type's dot partner exactly as ggml does. Row steps
 * (gathers, norms, RoPE, GELU, residual adds) take the chunk rows r with r % nth == ith, the rows
 * that thread also converts for the next matmul, so they chain into it without a barrier
 * (backend.h's contract); a barrier follows every matmul and the attention.
 *
 * What the host prepares per image (inputs bound to the run): the pixels (read by the im2col
 * gather as rows of patch_size floats) and the position table resized to the grid, in window
 * order. The index maps (window order, im2col, pixel shuffle, RoPE positions) belong to the
 * program. The stage hook and the progress callback are HOOK ops; a progress callback that
 * returns nonzero ends the run after its layer.
 *
 * Numerics (docs/vision.md): matmuls as ggml's CPU backend (the backends agree bit for bit);
 * LayerNorm as ggml_norm (program.c); GELU 0.5f*x*(1 + erff(x*0.70710678f)) as
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

#include "backend/program.h"
#include "core/error.h"
#include "vision/vision.h"

enum { BIND_PIXELS, BIND_POS, BIND_OUT, BIND_COUNT };

/* A HOOK op's meaning: the stage it shows (or none) and the layer it ends (0: none). */
struct hook_info {
    char name[48];
    int32_t layer_done;
};

/* One encode: the program for the image's grid, its index maps and the run's inputs. */
struct tower {
    struct muse_vision *v;
    struct muse_program p;
    int32_t W, H;            /* image pixels */
    int32_t gw, gh, n_tok;   /* patches */
    int32_t f, n_out;        /* merge factor, merged tokens */
    int32_t D;
    int32_t *sp_perm;        /* [n_tok] window order -> raster */
    int32_t *inv_perm;       /* [n_tok] raster -> window order */
    int32_t *seg, n_seg;     /* [n_seg + 1] the windows */
    int32_t glob[2];         /* one window over every row (global layers) */
    int32_t *im2col;         /* [n_tok][3 * p] pixel rows of patch_size floats, window order */
    int32_t *shuffle;        /* [n_out][f * f] window-order rows of each merged token */
    int32_t *rope_col;       /* [n_tok] 1-based column of window-order row i */
    int32_t *rope_row;       /* [n_tok] 1-based row */
    int32_t *positions;      /* [max(gw, gh) + 1] 0, 1, ...: the rows of the angle table */
    float *pos;              /* [n_tok][D] the resized position table, window order (bound) */
    struct hook_info *hooks;
    int32_t n_hooks;
    int stop;
};

// ---- the host's part: geometry, index maps, the position table -----------------------------------

/* The position table at raster patch t into y, bilinearly resized to the patch grid as ggml's
 * GGML_SCALE_MODE_BILINEAR does (half-pixel centres, f32 coordinates, edges clamped); the table
 * as it is when the grid is its size. */
static void pos_row(const struct tower *t, int32_t pt, float *y) {
    const struct muse_vision *v = t->v;
    const int32_t side = (int32_t)v->hp.window_side, D = t->D, py = pt / t->gw, px = pt % t->gw;
    const float *tab = v->w.pos.data;
    if (t->gw == side && t->gh == side) {
        memcpy(y, tab + (size_t)pt * D, sizeof(float) * (size_t)D);
        return;
    }
    const float sfx = (float)t->gw / (float)side, sfy = (float)t->gh / (float)side;
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
        y[k] = a[k] * (1 - dx) * (1 - dy) + b[k] * dx * (1 - dy) + c[k] * (1 - dx) * dy + d[k] * dx * dy;
}

static muse_status tower_maps(struct tower *t, struct muse_vision *v, const struct muse_vision_input *in,
                              struct muse_error *err) {
    const struct muse_vision_hparams *hp = &v->hp;
    t->v = v;
    t->W = in->geom.target_w;
    t->H = in->geom.target_h;
    const int32_t p = (int32_t)hp->patch_size;
    t->f = (int32_t)hp->n_merge;
    if (!in->pixels || t->W < 1 || t->H < 1 || t->W % (p * t->f) || t->H % (p * t->f) ||
        in->geom.patches_w != t->W / p || in->geom.patches_h != t->H / p ||
        in->geom.n_tokens != (t->W / (p * t->f)) * (t->H / (p * t->f)))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "vision input %d x %d does not fit this projector (patch %d, merge %d): preprocess it with "
                              "the same projector", t->W, t->H, p, t->f);
    t->gw = t->W / p;
    t->gh = t->H / p;
    t->n_tok = t->gw * t->gh;
    t->n_out = (t->gw / t->f) * (t->gh / t->f);
    t->D = (int32_t)hp->n_embd;
    const int32_t win = (int32_t)hp->window_side, n_win = muse_vision_n_windows(t->gw, t->gh, win);
    const int32_t side = (t->gw > t->gh ? t->gw : t->gh) + 1, ff = t->f * t->f;
    const size_t nt = (size_t)t->n_tok;
    t->sp_perm = malloc(sizeof(int32_t) * nt);
    t->inv_perm = malloc(sizeof(int32_t) * nt);
    t->seg = malloc(sizeof(int32_t) * ((size_t)n_win + 1));
    t->im2col = malloc(sizeof(int32_t) * nt * 3 * (size_t)p);
    t->shuffle = malloc(sizeof(int32_t) * (size_t)t->n_out * ff);
    t->rope_col = malloc(sizeof(int32_t) * nt);
    t->rope_row = malloc(sizeof(int32_t) * nt);
    t->positions = malloc(sizeof(int32_t) * (size_t)side);
    t->pos = malloc(sizeof(float) * nt * (size_t)t->D);
    if (!t->sp_perm || !t->inv_perm || !t->seg || !t->im2col || !t->shuffle || !t->rope_col || !t->rope_row ||
        !t->positions || !t->pos)
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the vision activations (%d patches)", t->n_tok);
    t->n_seg = muse_vision_window_perm(t->gw, t->gh, win, t->sp_perm, t->inv_perm, t->seg);
    t->glob[0] = 0;
    t->glob[1] = t->n_tok;
    muse_vision_shuffle_perm(t->gw, t->gh, t->f, t->shuffle); /* raster indices ... */
    for (int32_t i = 0; i < t->n_out * ff; i++) t->shuffle[i] = t->inv_perm[t->shuffle[i]]; /* ... to window rows */
    const size_t plane = (size_t)t->W * (size_t)t->H;
    for (int32_t i = 0; i < t->n_tok; i++) {
        const int32_t pt = t->sp_perm[i], py = pt / t->gw, px = pt % t->gw;
        t->rope_col[i] = px + 1;
        t->rope_row[i] = py + 1;
        /* the im2col row (c, ky, kx), kx fastest (the conv kernel's flattening), as rows of p floats */
        int32_t *row = t->im2col + (size_t)i * 3 * p;
        for (int32_t c = 0; c < 3; c++)
            for (int32_t ky = 0; ky < p; ky++)
                *row++ = (int32_t)(((size_t)c * plane + (size_t)(py * p + ky) * t->W + (size_t)px * p) / (size_t)p);
        pos_row(t, pt, t->pos + (size_t)i * t->D);
    }
    for (int32_t i = 0; i < side; i++) t->positions[i] = i;
    return MUSE_OK;
}

static void tower_free(struct tower *t) {
    muse_program_free(&t->p);
    free(t->sp_perm);
    free(t->inv_perm);
    free(t->seg);
    free(t->im2col);
    free(t->shuffle);
    free(t->rope_col);
    free(t->rope_row);
    free(t->positions);
    free(t->pos);
    free(t->hooks);
}

// ---- the program ------------------------------------------------------------------------------------

/* The builder's state: the buffers' ids. */
struct build {
    struct tower *t;
    struct muse_program *p;
    bool stages;
    int16_t pix, pos, out;           /* bound */
    int16_t x, q, k, vv;             /* [n_tok][D] residual (window order), queries (then the attention's
                                        output), keys, values */
    int16_t h, o, mid, mid2;         /* [chunk][..] matmul inputs and outputs */
    int16_t cosb, sinb;              /* [side][hd / 4] the rope angles of position p */
    int16_t scr;                     /* the window attention's scratch */
    int16_t raster, st_ps, st_a0, st_a1; /* stages only */
};

static void op(struct build *b, struct muse_op o) { muse_program_op(b->p, &o); }
static void bar(struct build *b) { muse_program_barrier(b->p, MUSE_ROWS_ALL); }
/* Rows of `stride` floats of buffer buf from row `row` on (stride 0: the buffer's cols, row 0). */
static struct muse_prog_ref at(int16_t buf, int64_t row, int64_t stride) { return muse_ref(buf, row * stride, stride); }

/* The row count of the op just appended (a MATMUL: muse_program_matmul has no count). */
static void counted(struct build *b, int32_t n) {
    if (!b->p->failed) b->p->ops[b->p->n_ops - 1].count = n;
}

static void matmul(struct build *b, struct muse_prog_ref x, const struct muse_weight *w, const struct muse_weight *bias,
                   struct muse_prog_ref y, int32_t n) {
    const struct muse_prog_job j = {*w, y, false, 1.0f, bias && bias->data ? (const float *)bias->data : NULL};
    muse_program_matmul(b->p, x, &j, 1, MUSE_ROWS_ALL);
    counted(b, n);
}

/* A HOOK op showing `count` rows of src (a stage, when name is set) and/or ending layer_done. */
static void hook(struct build *b, const char *name, struct muse_prog_ref src, int32_t count, int64_t cols,
                 int32_t layer_done) {
    struct tower *t = b->t;
    struct hook_info *hi = realloc(t->hooks, sizeof *hi * ((size_t)t->n_hooks + 1));
    if (!hi) {
        b->p->failed = true;
        return;
    }
    t->hooks = hi;
    hi += t->n_hooks;
    snprintf(hi->name, sizeof hi->name, "%s", name ? name : "");
    hi->layer_done = layer_done;
    op(b, (struct muse_op){.kind = MUSE_OP_HOOK, .layer = t->n_hooks++, .src = src, .count = count, .n = cols});
}

/* The residual in raster order as a stage (thread rows, after a barrier; the hook's barriers follow). */
static void stage_raster(struct build *b, const char *name) {
    const int32_t D = b->t->D;
    op(b, (struct muse_op){.kind = MUSE_OP_GATHER, .dst = at(b->raster, 0, D), .src = at(b->x, 0, D), .n = D,
                           .per_row = 1, .idx = b->t->inv_perm, .count = b->t->n_tok});
    hook(b, name, at(b->raster, 0, D), b->t->n_tok, D, 0);
}

/* x = conv(patches) + pos in window order, then pre_ln. */
static void build_embed(struct build *b) {
    const struct tower *t = b->t;
    const struct muse_vision *v = t->v;
    const int32_t D = t->D, C = v->chunk, p = (int32_t)v->hp.patch_size;
    const int64_t K = v->w.patch.ne0;
    for (int32_t c0 = 0; c0 < t->n_tok; c0 += C) {
        const int32_t n = t->n_tok - c0 < C ? t->n_tok - c0 : C;
        op(b, (struct muse_op){.kind = MUSE_OP_GATHER, .dst = at(b->h, 0, K), .src = at(b->pix, 0, p), .n = p,
                               .per_row = 3 * p, .idx = t->im2col + (size_t)c0 * 3 * p, .count = n});
        matmul(b, at(b->h, 0, K), &v->w.patch, &v->w.patch_b, at(b->x, c0, D), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_ADD, .dst = at(b->x, c0, D), .src = at(b->pos, c0, D), .n = D,
                               .count = n});
    }
    bar(b);
    if (b->stages) stage_raster(b, "after_posemb"); /* its barriers keep pre_ln from rewriting x under it */
    op(b, (struct muse_op){.kind = MUSE_OP_LAYER_NORM, .dst = at(b->x, 0, D), .src = at(b->x, 0, D), .n = D,
                           .eps = v->hp.eps, .w = v->w.pre_ln_w.data, .b = v->w.pre_ln_b.data, .count = t->n_tok});
    bar(b);
    if (b->stages) hook(b, "after_pre_ln", at(b->x, 0, D), t->n_tok, D, 0);
}

static void build_layer(struct build *b, uint32_t il) {
    const struct tower *t = b->t;
    const struct muse_vision *v = t->v;
    const struct muse_vision_layer *l = &v->w.layers[il];
    const int32_t D = t->D, C = v->chunk, hd = (int32_t)v->hp.head_dim, n_head = (int32_t)v->hp.n_head;
    const int64_t n_ff = v->hp.n_ff;
    const float eps = v->hp.eps;
    /* q, k, v = W (ln1(x)) + b, RoPE on q and k */
    for (int32_t c0 = 0; c0 < t->n_tok; c0 += C) {
        const int32_t n = t->n_tok - c0 < C ? t->n_tok - c0 : C;
        op(b, (struct muse_op){.kind = MUSE_OP_LAYER_NORM, .dst = at(b->h, 0, D), .src = at(b->x, c0, D), .n = D,
                               .eps = eps, .w = l->ln1_w.data, .b = l->ln1_b.data, .count = n});
        const struct muse_prog_job qkv[3] = {
            {l->q, at(b->q, c0, D), false, 1.0f, l->q_b.data},
            {l->k, at(b->k, c0, D), false, 1.0f, l->k_b.data},
            {l->v, at(b->vv, c0, D), false, 1.0f, l->v_b.data},
        };
        muse_program_matmul(b->p, at(b->h, 0, D), qkv, 3, MUSE_ROWS_ALL);
        counted(b, n);
        bar(b);
        for (int qk = 0; qk < 2; qk++)
            op(b, (struct muse_op){.kind = MUSE_OP_ROPE_2D, .dst = at(qk ? b->k : b->q, c0, D), .src = at(b->cosb, 0, 0),
                                   .src2 = at(b->sinb, 0, 0), .n = hd, .per_row = n_head, .idx = t->rope_col + c0,
                                   .idx2 = t->rope_row + c0, .count = n});
    }
    bar(b);
    /* softmax(q k^T / sqrt(hd)) v per window and head, written over q */
    const bool global = muse_vision_layer_is_global(&v->hp, il);
    op(b, (struct muse_op){.kind = MUSE_OP_WINDOW_ATTENTION, .dst = at(b->q, 0, D), .src = at(b->k, 0, D),
                           .src2 = at(b->vv, 0, D), .src3 = at(b->scr, 0, 0), .n_head = n_head, .head_dim = hd,
                           .scale = 1.0f / sqrtf((float)hd), .seg = global ? t->glob : t->seg,
                           .n_seg = global ? 1 : t->n_seg, .count = t->n_tok});
    bar(b);
    /* x += W_o att + b_o; x += W_down gelu(W_up ln2(x) + b_up) + b_down */
    for (int32_t c0 = 0; c0 < t->n_tok; c0 += C) {
        const int32_t n = t->n_tok - c0 < C ? t->n_tok - c0 : C;
        matmul(b, at(b->q, c0, D), &l->o, &l->o_b, at(b->o, 0, D), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_ADD, .dst = at(b->x, c0, D), .src = at(b->o, 0, D), .n = D, .count = n});
        op(b, (struct muse_op){.kind = MUSE_OP_LAYER_NORM, .dst = at(b->h, 0, D), .src = at(b->x, c0, D), .n = D,
                               .eps = eps, .w = l->ln2_w.data, .b = l->ln2_b.data, .count = n});
        matmul(b, at(b->h, 0, D), &l->up, &l->up_b, at(b->mid, 0, n_ff), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_GELU, .dst = at(b->mid, 0, n_ff), .n = n_ff, .count = n});
        matmul(b, at(b->mid, 0, n_ff), &l->down, &l->down_b, at(b->o, 0, D), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_ADD, .dst = at(b->x, c0, D), .src = at(b->o, 0, D), .n = D, .count = n});
    }
    bar(b);
    char name[48];
    snprintf(name, sizeof name, "layer%u_out_window_order", il);
    hook(b, b->stages ? name : NULL, at(b->x, 0, D), t->n_tok, D, (int32_t)il + 1);
}

/* post_ln, pixel shuffle, adapter. */
static void build_head(struct build *b) {
    const struct tower *t = b->t;
    const struct muse_vision *v = t->v;
    const struct muse_vision_weights *w = &v->w;
    const int32_t D = t->D, C = v->chunk, ff = t->f * t->f;
    const int64_t merged = w->mm0.ne0, n0 = w->mm0.ne1, n1 = w->mm1.ne1, n_emb = w->mm2.ne1;
    op(b, (struct muse_op){.kind = MUSE_OP_LAYER_NORM, .dst = at(b->x, 0, D), .src = at(b->x, 0, D), .n = D,
                           .eps = v->hp.eps, .w = w->post_ln_w.data, .b = w->post_ln_b.data, .count = t->n_tok});
    bar(b);
    if (b->stages) {
        hook(b, "after_post_ln_window_order", at(b->x, 0, D), t->n_tok, D, 0);
        stage_raster(b, "after_inv_perm");
    }
    for (int32_t o0 = 0; o0 < t->n_out; o0 += C) {
        const int32_t n = t->n_out - o0 < C ? t->n_out - o0 : C;
        /* merged token o: m[c * f^2 + s] = x[shuffle[o * f^2 + s]][c] (channel-outer) */
        const struct muse_op ps = {.kind = MUSE_OP_GATHER, .dst = at(b->h, 0, merged), .src = at(b->x, 0, D), .n = D,
                                   .per_row = ff, .interleave = true, .idx = t->shuffle + (size_t)o0 * ff, .count = n};
        op(b, ps);
        if (b->stages) {
            struct muse_op copy = ps;
            copy.dst = at(b->st_ps, o0, merged);
            op(b, copy);
        }
        matmul(b, at(b->h, 0, merged), &w->mm0, NULL, at(b->mid, 0, n0), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_GELU, .dst = at(b->mid, 0, n0), .n = n0, .count = n});
        if (b->stages)
            op(b, (struct muse_op){.kind = MUSE_OP_GATHER, .dst = at(b->st_a0, o0, n0), .src = at(b->mid, 0, n0), .n = n0,
                                   .per_row = 1, .count = n});
        matmul(b, at(b->mid, 0, n0), &w->mm1, NULL, at(b->mid2, 0, n1), n);
        bar(b);
        op(b, (struct muse_op){.kind = MUSE_OP_GELU, .dst = at(b->mid2, 0, n1), .n = n1, .count = n});
        if (b->stages)
            op(b, (struct muse_op){.kind = MUSE_OP_GATHER, .dst = at(b->st_a1, o0, n1), .src = at(b->mid2, 0, n1),
                                   .n = n1, .per_row = 1, .count = n});
        matmul(b, at(b->mid2, 0, n1), &w->mm2, NULL, at(b->out, o0, n_emb), n);
        bar(b);
    }
    if (b->stages) {
        hook(b, "pixel_shuffle", at(b->st_ps, 0, merged), t->n_out, merged, 0);
        hook(b, "adapter0", at(b->st_a0, 0, n0), t->n_out, n0, 0);
        hook(b, "adapter1", at(b->st_a1, 0, n1), t->n_out, n1, 0);
        hook(b, "projected", at(b->out, 0, n_emb), t->n_out, n_emb, 0);
    }
}

static muse_status tower_program(struct tower *t, bool stages, struct muse_error *err) {
    struct muse_vision *v = t->v;
    const struct muse_vision_hparams *hp = &v->hp;
    const int32_t D = t->D, C = v->chunk, hd = (int32_t)hp->head_dim, side = (t->gw > t->gh ? t->gw : t->gh) + 1;
    const int64_t merged = muse_vision_n_embd_merged(hp), mid_w = hp->n_ff > hp->n_mm0 ? hp->n_ff : hp->n_mm0;
    int64_t h_w = merged > D ? merged : D;
    if (v->w.patch.ne0 > h_w) h_w = v->w.patch.ne0;
    struct build b = {.t = t, .p = &t->p, .stages = stages};
    muse_program_init(&t->p, C);
    b.pix = muse_program_bound(&t->p, BIND_PIXELS, hp->patch_size);
    b.pos = muse_program_bound(&t->p, BIND_POS, D);
    b.out = muse_program_bound(&t->p, BIND_OUT, v->w.mm2.ne1);
    b.x = muse_program_buffer_rows(&t->p, t->n_tok, D);
    b.q = muse_program_buffer_rows(&t->p, t->n_tok, D);
    b.k = muse_program_buffer_rows(&t->p, t->n_tok, D);
    b.vv = muse_program_buffer_rows(&t->p, t->n_tok, D);
    b.h = muse_program_buffer(&t->p, h_w);
    b.o = muse_program_buffer(&t->p, D);
    b.mid = muse_program_buffer(&t->p, mid_w);
    b.mid2 = muse_program_buffer(&t->p, hp->n_mm1);
    b.cosb = muse_program_buffer_rows(&t->p, side, hd / 4);
    b.sinb = muse_program_buffer_rows(&t->p, side, hd / 4);
    const size_t scr = muse_window_attn_scratch(t->n_tok, (int32_t)hp->n_head, hd, v->n_threads);
    b.scr = muse_program_buffer_rows(&t->p, 1, (int64_t)scr);
    if (stages) {
        b.raster = muse_program_buffer_rows(&t->p, t->n_tok, D);
        b.st_ps = muse_program_buffer_rows(&t->p, t->n_out, merged);
        b.st_a0 = muse_program_buffer_rows(&t->p, t->n_out, hp->n_mm0);
        b.st_a1 = muse_program_buffer_rows(&t->p, t->n_out, hp->n_mm1);
    }
    /* the rope angles of positions 0 .. side - 1 over hd / 2 dims (each half of a head) */
    op(&b, (struct muse_op){.kind = MUSE_OP_ROPE_ANGLES, .dst = at(b.cosb, 0, 0), .src = at(b.sinb, 0, 0),
                            .n_rot = hd / 2, .rope_base = hp->rope_theta, .rope_scale = 1.0f, .idx = t->positions,
                            .count = side});
    build_embed(&b); /* its barriers come before the first RoPE */
    for (uint32_t il = 0; il < hp->n_layer; il++) build_layer(&b, il);
    build_head(&b);
    return muse_program_finish(&t->p, err);
}

// ---- the run ----------------------------------------------------------------------------------------

static int on_hook(void *user, int32_t id, const float *data, int64_t rows, int64_t cols) {
    const struct tower *t = user;
    const struct muse_vision_params *p = &t->v->params;
    const struct hook_info *hi = &t->hooks[id];
    if (p->stage && hi->name[0]) p->stage(p->stage_user, hi->name, data, rows, cols);
    if (hi->layer_done && p->progress && p->progress(p->progress_user, (uint64_t)hi->layer_done, t->v->hp.n_layer))
        return 1;
    return 0;
}

muse_status muse_vision_encode(struct muse_vision *v, const struct muse_vision_input *in, float *out,
                               struct muse_error *err) {
    if (!v || !in || !out) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "muse_vision_encode: NULL argument");
    struct tower t;
    memset(&t, 0, sizeof t);
    muse_status st = tower_maps(&t, v, in, err);
    if (!st) st = tower_program(&t, v->params.stage != NULL, err);
    if (!st) st = muse_device_reserve(v->dev, muse_device_plan(v->dev), t.p.workspace_floats, err);
    if (st) {
        tower_free(&t);
        return st;
    }
    float *bind[BIND_COUNT] = {(float *)in->pixels, t.pos, out};
    const struct muse_prog_run run = {
        .n_rows = t.n_tok < v->chunk ? t.n_tok : v->chunk, /* the ops carry their own row counts */
        .bind = bind,
        .hook = v->params.stage || v->params.progress ? on_hook : NULL,
        .hook_user = &t,
        .stop = &t.stop,
    };
    muse_device_run(v->dev, &t.p, &run);
    const int stopped = t.stop;
    tower_free(&t);
    if (stopped) return muse_error_set(err, MUSE_ERR_CANCELLED, "image encoding cancelled");
    return MUSE_OK;
}
