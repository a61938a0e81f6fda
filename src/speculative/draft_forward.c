/*
 * draft_forward.c - the DFlash drafter forward (spec dflash.md section 3) as two programs of layer
 * ops (backend/program.h) that the target's device runs, written as the spec reads:
 *
 *   inject (pass A + B, per committed position p):  g = rms(fc . feat) * enc_norm;
 *       for every layer: K = rope_neox(head_rms(Wk g) * k_norm, p), V = Wv g -> ring cells of p
 *   block (pass C, rows [anchor, MASK...] at P..P+n-1):  h = token_embd[ids] (raw rows);
 *       per layer: x = rms(h) * attn_norm; q/k = rope_neox(head_rms(Wq/Wk x) * q/k_norm); v = Wv x;
 *       h += Wo . attn([ring window | block], non-causal); h += down(silu(gate x') * up x') with
 *       x' = rms(h) * ffn_norm; logits = output_target . (rms(h) * output_norm), raw; then each
 *       head row's argmax and confidences
 *
 * Numerics are the program ops' (ggml's CPU ops, as the text forward): quantized weights stay
 * quantized, the ref and cpu devices agree bit for bit, and the drafter uses the target's kernels
 * and threads. Splits and barriers as forward.c: row steps take a thread's own rows and chain into
 * the next matmul; a barrier follows every matmul and the attention; q heads are shared out one by
 * one, k by row.
 */
#include <math.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "backend/device.h"
#include "speculative/drafter.h"

static struct muse_prog_ref rows(int16_t b, int64_t cols) { return muse_ref(b, 0, cols); }

static struct muse_prog_job linear(const struct muse_weight *w, struct muse_prog_ref y) {
    return (struct muse_prog_job){*w, y, false, 1.0f, NULL};
}

static void op(struct muse_program *p, struct muse_op o) { muse_program_op(p, &o); }

static void norm_rows(struct muse_program *p, int16_t src, int16_t dst, int64_t n, float eps, const void *w,
                      enum muse_op_rows r) {
    op(p, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .rows = r, .split = MUSE_SPLIT_ROWS, .src = rows(src, n),
                           .dst = rows(dst, n), .n = n, .per_row = 1, .w = w, .eps = eps});
}

/* Per-head RMS norm (weight w) then NeoX RoPE of the heads of f, by row or by head (split). */
static void head_norm_rope(struct muse_program *p, const struct muse_dflash_hparams *hp, struct muse_prog_ref f,
                           int32_t n_heads, const void *w, int16_t rc, int16_t rs, enum muse_op_split split) {
    op(p, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .split = split, .src = f, .dst = f, .n = hp->head_dim,
                           .per_row = n_heads, .w = w, .eps = hp->eps});
    op(p, (struct muse_op){.kind = MUSE_OP_ROPE, .split = split, .dst = f, .src = muse_ref(rc, 0, 0),
                           .src2 = muse_ref(rs, 0, 0), .n = hp->head_dim, .per_row = n_heads, .rope = MUSE_ROPE_NEOX,
                           .n_rot = (int32_t)hp->n_rot});
}

static void rope_angles(struct muse_program *p, const struct muse_dflash_hparams *hp, int16_t rc, int16_t rs) {
    op(p, (struct muse_op){.kind = MUSE_OP_ROPE_ANGLES, .dst = muse_ref(rc, 0, 0), .src = muse_ref(rs, 0, 0),
                           .n_rot = (int32_t)hp->n_rot, .rope_base = hp->rope_freq_base, .rope_scale = hp->rope_freq_scale});
}


// ---- pass A + B: inject --------------------------------------------------------------------------

/* Rows of features (the run's embd) at their positions: g = rms(fc . feat) * enc_norm, then every
 * layer's K, V of g into the ring (KV layer il of sequence 0 = ring layer il). */
static void build_inject(const struct muse_drafter *d, struct muse_program *p) {
    const struct muse_dflash_hparams *hp = &d->hp;
    const int64_t H = hp->n_embd, F = muse_dflash_n_features(hp), n_kv = muse_dflash_n_kv(hp), nb = p->n_batch;
    const int16_t feat = muse_program_buffer(p, F), g = muse_program_buffer(p, H);
    const int16_t kc = muse_program_buffer(p, (int64_t)hp->n_layer * n_kv), vc = muse_program_buffer(p, (int64_t)hp->n_layer * n_kv);
    const int16_t rc = muse_program_buffer(p, muse_rope_cols(hp->n_rot)), rs = muse_program_buffer(p, muse_rope_cols(hp->n_rot));

    op(p, (struct muse_op){.kind = MUSE_OP_EMBED, .dst = rows(feat, F), .n = F});
    /* g = fc . feat (x fc.scale)                                              [n][H] */
    struct muse_prog_job fc = linear(&d->w.fc, rows(g, H));
    fc.has_scale = d->has_fc_scale;
    fc.scale = d->fc_scale;
    muse_program_matmul(p, rows(feat, F), &fc, 1, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    /* g = rms(g) * enc_norm; the rope angles of each row's (target) position */
    norm_rows(p, g, g, H, hp->eps, d->w.enc_norm.data, MUSE_ROWS_ALL);
    rope_angles(p, hp, rc, rs);
    /* K = Wk g, V = Wv g of every layer in one step (one conversion of g)   [layer][n][n_kv] */
    struct muse_prog_job jobs[2 * MUSE_DFLASH_MAX_LAYERS];
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        jobs[2 * il] = linear(&d->w.layers[il].wk, muse_ref(kc, il * nb * n_kv, n_kv));
        jobs[2 * il + 1] = linear(&d->w.layers[il].wv, muse_ref(vc, il * nb * n_kv, n_kv));
    }
    muse_program_matmul(p, rows(g, H), jobs, 2 * (int)hp->n_layer, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    /* K = rope_neox(head_rms(K) * k_norm, p); V as is; both into the ring cell of p */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct muse_prog_ref k = muse_ref(kc, il * nb * n_kv, n_kv), v = muse_ref(vc, il * nb * n_kv, n_kv);
        head_norm_rope(p, hp, k, (int32_t)hp->n_head_kv, d->w.layers[il].attn_k_norm.data, rc, rs, MUSE_SPLIT_ROWS);
        op(p, (struct muse_op){.kind = MUSE_OP_KV_STORE, .layer = (int32_t)il, .src = k, .src2 = v});
    }
}

// ---- pass C: draft a block -------------------------------------------------------------------------

struct block_bufs {
    int16_t x, h, o, q, att, kb, vb, fg, fu, rc, rs;
};

/* The attention half of layer il for the block rows: x += Wo . attn(q, [ring | block]). */
static void block_attention(const struct muse_drafter *d, struct muse_program *p, const struct block_bufs *b,
                            int32_t window, uint32_t il) {
    const struct muse_dflash_hparams *hp = &d->hp;
    const struct muse_dflash_layer_weights *l = &d->w.layers[il];
    const int64_t H = hp->n_embd, n_q = muse_dflash_n_q(hp), n_kv = muse_dflash_n_kv(hp);
    const int32_t hd = (int32_t)hp->head_dim;

    /* h = rms(x) * attn_norm (x: the residual stream, the spec's h)           [n][H] */
    norm_rows(p, b->x, b->h, H, hp->eps, l->attn_norm.data, MUSE_ROWS_ALL);
    /* q [n][n_head][hd], k/v [n][n_head_kv][hd] */
    const struct muse_prog_job qkv[3] = {linear(&l->wq, rows(b->q, n_q)), linear(&l->wk, rows(b->kb, n_kv)),
                                         linear(&l->wv, rows(b->vb, n_kv))};
    muse_program_matmul(p, rows(b->h, H), qkv, 3, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    /* q, k: per-head RMS norm, NeoX RoPE at P + row; the block's k, v into the ring cells of P.. */
    head_norm_rope(p, hp, rows(b->q, n_q), (int32_t)hp->n_head, l->attn_q_norm.data, b->rc, b->rs, MUSE_SPLIT_SHARE);
    head_norm_rope(p, hp, rows(b->kb, n_kv), (int32_t)hp->n_head_kv, l->attn_k_norm.data, b->rc, b->rs, MUSE_SPLIT_ROWS);
    op(p, (struct muse_op){.kind = MUSE_OP_KV_STORE, .layer = (int32_t)il, .src = rows(b->kb, n_kv), .src2 = rows(b->vb, n_kv)});
    muse_program_barrier(p, MUSE_ROWS_ALL);
    /* att = softmax(q.K^T / sqrt(hd)) . V, row r over ring positions P + r - window + 1 .. P - 1 and
     * the block positions P .. P + n - 1 (drafter.h; never below the ring's floor)    [n][n_q] */
    op(p, (struct muse_op){.kind = MUSE_OP_ATTENTION, .layer = (int32_t)il, .src = rows(b->q, n_q), .dst = rows(b->att, n_q),
                           .src2 = muse_ref(MUSE_BUF_NONE, 0, 0), .n_head = (int32_t)hp->n_head,
                           .n_head_kv = (int32_t)hp->n_head_kv, .head_dim = hd, .n_swa = window,
                           .mask = MUSE_MASK_BLOCK, .scale = 1.0f / sqrtf((float)hd)});
    muse_program_barrier(p, MUSE_ROWS_ALL);
    /* o = Wo . att; x += o (no post-norm)                                      [n][H] */
    const struct muse_prog_job wo = linear(&l->wo, rows(b->o, H));
    muse_program_matmul(p, rows(b->att, n_q), &wo, 1, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    op(p, (struct muse_op){.kind = MUSE_OP_ADD, .dst = rows(b->x, H), .src = rows(b->o, H), .n = H});
}

/* The FFN half of layer il: x += down(silu(gate h) * up h), h = rms(x) * ffn_norm. */
static void block_ffn(const struct muse_drafter *d, struct muse_program *p, const struct block_bufs *b, uint32_t il) {
    const struct muse_dflash_hparams *hp = &d->hp;
    const struct muse_dflash_layer_weights *l = &d->w.layers[il];
    const int64_t H = hp->n_embd, n_ff = hp->n_ff;

    norm_rows(p, b->x, b->h, H, hp->eps, l->ffn_norm.data, MUSE_ROWS_ALL);
    const struct muse_prog_job gu[2] = {linear(&l->ffn_gate, rows(b->fg, n_ff)), linear(&l->ffn_up, rows(b->fu, n_ff))};
    muse_program_matmul(p, rows(b->h, H), gu, 2, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    op(p, (struct muse_op){.kind = MUSE_OP_SWIGLU, .dst = rows(b->fg, n_ff), .src = rows(b->fu, n_ff), .n = n_ff});
    const struct muse_prog_job down = linear(&l->ffn_down, rows(b->o, H));
    muse_program_matmul(p, rows(b->fg, n_ff), &down, 1, MUSE_ROWS_ALL);
    muse_program_barrier(p, MUSE_ROWS_ALL);
    op(p, (struct muse_op){.kind = MUSE_OP_ADD, .dst = rows(b->x, H), .src = rows(b->o, H), .n = H});
}

/* The block: x = token_embd[ids] (raw rows of the target's table: no scale, no norm), the layers,
 * then for the run's output rows: logits = output . (rms(x) * output_norm) x the target's
 * output.scale (raw: no logit scale, no softcap) and each row's argmax and confidences. */
static void build_block(const struct muse_drafter *d, int32_t window, struct muse_program *p) {
    const struct muse_dflash_hparams *hp = &d->hp;
    const int64_t H = hp->n_embd, n_q = muse_dflash_n_q(hp), n_kv = muse_dflash_n_kv(hp), n_vocab = d->n_vocab;
    struct block_bufs b;
    b.x = muse_program_buffer(p, H);
    b.h = muse_program_buffer(p, H);
    b.o = muse_program_buffer(p, H);
    b.q = muse_program_buffer(p, n_q);
    b.att = muse_program_buffer(p, n_q);
    b.kb = muse_program_buffer(p, n_kv);
    b.vb = muse_program_buffer(p, n_kv);
    b.fg = muse_program_buffer(p, hp->n_ff);
    b.fu = muse_program_buffer(p, hp->n_ff);
    b.rc = muse_program_buffer(p, muse_rope_cols(hp->n_rot));
    b.rs = muse_program_buffer(p, muse_rope_cols(hp->n_rot));
    p->bufs[MUSE_BUF_LOGITS].cols = n_vocab;

    op(p, (struct muse_op){.kind = MUSE_OP_EMBED, .dst = rows(b.x, H), .n = H, .table = &d->token_embd});
    rope_angles(p, hp, b.rc, b.rs);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        block_attention(d, p, &b, window, il);
        block_ffn(d, p, &b, il);
    }
    muse_program_barrier(p, MUSE_ROWS_OUT);
    norm_rows(p, b.x, b.h, H, hp->eps, d->w.output_norm.data, MUSE_ROWS_OUT);
    const struct muse_prog_job out = {d->output, muse_ref(MUSE_BUF_LOGITS, 0, n_vocab), d->has_output_scale,
                                      d->output_scale, NULL};
    muse_program_matmul(p, rows(b.h, H), &out, 1, MUSE_ROWS_OUT);
    muse_program_barrier(p, MUSE_ROWS_OUT);
    op(p, (struct muse_op){.kind = MUSE_OP_TOP_PROBS, .rows = MUSE_ROWS_OUT, .src = muse_ref(MUSE_BUF_LOGITS, 0, n_vocab),
                           .n = n_vocab});
}

muse_status muse_draft_programs_build(struct muse_draft_ctx *dc, struct muse_error *err) {
    const struct muse_drafter *d = dc->d;
    muse_program_init(&dc->prog_inject, dc->n_batch);
    build_inject(d, &dc->prog_inject);
    muse_status st = muse_program_finish(&dc->prog_inject, err);
    if (st) return st;
    muse_program_init(&dc->prog_block, (int32_t)d->hp.block_size);
    build_block(d, dc->window, &dc->prog_block);
    return muse_program_finish(&dc->prog_block, err);
}

// ---- runs ------------------------------------------------------------------------------------------

void muse_draft_forward_inject(struct muse_draft_ctx *dc, const float *features, int32_t n, int32_t pos0) {
    MUSE_ASSERT(n >= 1 && n <= dc->n_batch);
    for (int32_t r = 0; r < n; r++) dc->pos[r] = pos0 + r;
    struct muse_kv_layer *const kv[1] = {dc->ring};
    const struct muse_prog_run run = {.n_rows = n, .embd = features, .pos = dc->pos, .kv = kv};
    muse_device_run(dc->target->dev, &dc->prog_inject, &run);
}

void muse_draft_forward_block(struct muse_draft_ctx *dc, int32_t n_rows, int32_t P, int32_t head_lo, int32_t head_hi) {
    MUSE_ASSERT(n_rows >= 1 && (uint32_t)n_rows <= dc->d->hp.block_size);
    MUSE_ASSERT(head_lo >= 0 && head_lo <= head_hi && head_hi <= n_rows);
    const int64_t n_vocab = dc->d->n_vocab;
    for (int32_t r = 0; r < n_rows; r++) dc->pos[r] = P + r;
    for (int32_t i = 0; i < head_hi - head_lo; i++) dc->out_rows[i] = head_lo + i;
    struct muse_kv_layer *const kv[1] = {dc->ring};
    const struct muse_prog_run run = {
        .n_rows = n_rows, .tokens = dc->ids, .pos = dc->pos, .kv = kv, .kv_floor = dc->floor,
        .out_rows = dc->out_rows, .n_out = head_hi - head_lo, .logits = dc->logits + (size_t)head_lo * n_vocab,
        .argmax = dc->argmax + head_lo, .conf = dc->conf + head_lo, .conf_top10 = dc->conf_top10 + head_lo,
    };
    muse_device_run(dc->target->dev, &dc->prog_block, &run);
}
