/*
 * forward.c - the Muse-Glimmer text forward (text-model.md 5.1) as one program of layer ops
 * (backend/program.h), written as the spec reads: one function per block of the layer, each
 * appending its ops. The program is built once per context and run by the device for every
 * batch; numerics are the program ops' (ggml's CPU ops, spec section 8).
 *
 * Splits and barriers (program.h): row-wise steps (norms, residual adds, the SwiGLU) take the
 * rows a thread also converts for the next matmul (MUSE_SPLIT_ROWS), so they chain into it
 * without a barrier; a barrier follows each matmul and attention step, whose outputs every thread
 * writes a share of. Q heads are shared out one by one (decode has a single row), K/V by row.
 */
#include "model/forward.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

/* The activation buffers of the text program ([n_batch][cols] floats each). */
struct bufs {
    int16_t x;    /* [n_embd] the residual stream */
    int16_t h;    /* [n_embd] normed input of a block */
    int16_t o;    /* [n_embd] block output before the post-norm */
    int16_t q;    /* [n_q_max] */
    int16_t k;    /* [n_k_max] */
    int16_t v;    /* [n_v_max] */
    int16_t g;    /* [n_q_max] attention gate projection */
    int16_t att;  /* [n_q_max] attention output (heads concatenated) */
    int16_t fg;   /* [n_ff_max] ffn_gate projection, then silu(gate) * up */
    int16_t fu;   /* [n_ff_max] ffn_up projection */
    int16_t rc;   /* [n_rot/2] sliding-window rope angles (cos) of each row's position */
    int16_t rs;   /* [n_rot/2] (sin) */
};

struct build {
    const struct muse_hparams *hp;
    const struct muse_weights *w;
    struct muse_program *p;
    struct bufs b;
};

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t muse_weights_max_ne0(const struct muse_hparams *hp, const struct muse_weights *w) {
    int64_t m = hp->n_embd;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        m = max64(m, w->layers[il].wo.ne0);
        m = max64(m, w->layers[il].ffn_down.ne0);
    }
    return m;
}

/* Rows of buffer b, dense at `cols` floats per row. */
static struct muse_prog_ref rows(int16_t b, int64_t cols) { return muse_ref(b, 0, cols); }

/* y = W·x, then (llama.cpp's build_lora_mm order) × the tensor's .scale, + bias; y dense [n][W.ne1]. */
static struct muse_prog_job linear(const struct muse_weight *wt, bool has_scale, float s, const struct muse_weight *b,
                                   int16_t y) {
    return (struct muse_prog_job){*wt, rows(y, wt->ne1), has_scale, s, b && b->data ? (const float *)b->data : NULL};
}

static void op(struct build *B, struct muse_op o) { muse_program_op(B->p, &o); }

/* dst = rms(src, eps) (* w) on this thread's rows of [n][n_embd]. */
static void norm_rows(struct build *B, int16_t src, int16_t dst, float eps, const void *w, enum muse_op_rows r) {
    const int64_t n_embd = B->hp->n_embd;
    op(B, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .rows = r, .split = MUSE_SPLIT_ROWS, .src = rows(src, n_embd),
                           .dst = rows(dst, n_embd), .n = n_embd, .per_row = 1, .w = w, .eps = eps});
}

/* x += rms(o, post-norm eps 1e-8) * w on this thread's rows. */
static void add_post_norm(struct build *B, const void *w) {
    const int64_t n_embd = B->hp->n_embd;
    norm_rows(B, B->b.o, B->b.o, B->hp->f_post_norm_eps, w, MUSE_ROWS_ALL);
    op(B, (struct muse_op){.kind = MUSE_OP_ADD, .dst = rows(B->b.x, n_embd), .src = rows(B->b.o, n_embd), .n = n_embd});
}

// ---- the blocks ----------------------------------------------------------------------------------

/* x = embd_norm(token_embd[tok]) (or an injected row): RMS-normed WITHOUT a weight. Also the
 * rope angles of each row's position. */
static void embed_tokens(struct build *B) {
    const struct muse_hparams *hp = B->hp;
    const int64_t n_embd = hp->n_embd;
    op(B, (struct muse_op){.kind = MUSE_OP_EMBED, .dst = rows(B->b.x, n_embd), .n = n_embd, .table = &B->w->token_embd});
    op(B, (struct muse_op){.kind = MUSE_OP_ROPE_ANGLES, .dst = muse_ref(B->b.rc, 0, 0), .src = muse_ref(B->b.rs, 0, 0),
                           .n_rot = (int32_t)hp->n_rot_swa, .rope_base = hp->rope_freq_base_swa,
                           .rope_scale = hp->rope_freq_scale_swa});
    norm_rows(B, B->b.x, B->b.x, hp->f_norm_rms_eps, NULL, MUSE_ROWS_ALL);
}

/* The Q, K, V projections of h into q/k/v ([n][n_q], [n][n_k], [n][n_v]) as matmul jobs: three
 * weights, or three row ranges of the fused attn_qkv (Q | K | V along its rows). Returns 3. */
static int qkv_jobs(struct build *B, const struct muse_layer_weights *l, int64_t n_q, int64_t n_k, int64_t n_v,
                    struct muse_prog_job *jobs) {
    if (!l->wqkv.data) {
        jobs[0] = linear(&l->wq, l->has_wq_scale, l->wq_scale, &l->bq, B->b.q);
        jobs[1] = linear(&l->wk, l->has_wk_scale, l->wk_scale, &l->bk, B->b.k);
        jobs[2] = linear(&l->wv, l->has_wv_scale, l->wv_scale, &l->bv, B->b.v);
        return 3;
    }
    const int64_t r0[3] = {0, n_q, n_q + n_k}, nr[3] = {n_q, n_k, n_v};
    const int16_t y[3] = {B->b.q, B->b.k, B->b.v};
    for (int i = 0; i < 3; i++) {
        const struct muse_weight part = muse_weight_rows(&l->wqkv, r0[i], nr[i]);
        jobs[i] = linear(&part, l->has_wqkv_scale, l->wqkv_scale, &l->bqkv, y[i]);
        if (jobs[i].bias) jobs[i].bias += r0[i];
    }
    return 3;
}

/* The attention half of layer il: x += post_norm(W_o·(attn(...) ⊙ sigmoid(W_gate·h))). */
static void attention_block(struct build *B, uint32_t il) {
    const struct muse_hparams *hp = B->hp;
    const struct muse_layer_weights *l = &B->w->layers[il];
    const struct bufs *b = &B->b;
    const int32_t n_head = (int32_t)hp->n_head[il], n_head_kv = (int32_t)hp->n_head_kv[il];
    const int32_t hd = (int32_t)muse_hparams_head_dim_k(hp, il);
    const int64_t n_q = (int64_t)n_head * hd, n_k = (int64_t)n_head_kv * hd, n_v = n_k;
    const bool swa = hp->is_swa[il];
    const int32_t n_rot = (int32_t)hp->n_rot_swa;
    const float eps = hp->f_norm_rms_eps;

    /* h = rms(x, eps) * attn_norm                                      [n][n_embd] */
    norm_rows(B, b->x, b->h, eps, l->attn_norm.data, MUSE_ROWS_ALL);
    /* q [n][n_head][hd], k [n][n_head_kv][hd], v [n][n_head_kv][hd]; gate g [n][n_q] from the same h */
    struct muse_prog_job jobs[4];
    const int n_jobs = qkv_jobs(B, l, n_q, n_k, n_v, jobs);
    jobs[n_jobs] = linear(&l->attn_gate, false, 1.0f, NULL, b->g);
    muse_program_matmul(B->p, rows(b->h, hp->n_embd), jobs, n_jobs + 1, MUSE_ROWS_ALL);
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    /* per-head RMS norm of q and k (eps from the file), weights q_norm (3.87) and k_norm (1);
     * RoPE on sliding-window layers only (full layers are NoPE); then store k, v */
    op(B, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .split = MUSE_SPLIT_SHARE, .src = rows(b->q, n_q),
                           .dst = rows(b->q, n_q), .n = hd, .per_row = n_head, .w = l->attn_q_norm.data, .eps = eps});
    if (swa)
        op(B, (struct muse_op){.kind = MUSE_OP_ROPE, .split = MUSE_SPLIT_SHARE, .dst = rows(b->q, n_q),
                               .src = muse_ref(b->rc, 0, 0), .src2 = muse_ref(b->rs, 0, 0), .n = hd, .per_row = n_head,
                               .rope = MUSE_ROPE_NORM, .n_rot = n_rot});
    op(B, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .split = MUSE_SPLIT_ROWS, .src = rows(b->k, n_k),
                           .dst = rows(b->k, n_k), .n = hd, .per_row = n_head_kv, .w = l->attn_k_norm.data, .eps = eps});
    if (swa)
        op(B, (struct muse_op){.kind = MUSE_OP_ROPE, .split = MUSE_SPLIT_ROWS, .dst = rows(b->k, n_k),
                               .src = muse_ref(b->rc, 0, 0), .src2 = muse_ref(b->rs, 0, 0), .n = hd,
                               .per_row = n_head_kv, .rope = MUSE_ROPE_NORM, .n_rot = n_rot});
    op(B, (struct muse_op){.kind = MUSE_OP_KV_STORE, .layer = (int32_t)il, .src = rows(b->k, n_k), .src2 = rows(b->v, n_v)});
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    /* att = softmax(q·K^T / sqrt(hd) + mask) · V over the row's own sequence, then att *= sigmoid(g)
     * per channel                                                           [n][n_q] */
    op(B, (struct muse_op){.kind = MUSE_OP_ATTENTION, .layer = (int32_t)il, .src = rows(b->q, n_q),
                           .dst = rows(b->att, n_q), .src2 = rows(b->g, n_q), .n_head = n_head, .n_head_kv = n_head_kv,
                           .head_dim = hd, .n_swa = swa ? (int32_t)hp->n_swa : 0, .scale = 1.0f / sqrtf((float)hd)});
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    /* o = W_o·att (× attn_output.scale)                                    [n][n_embd] */
    const struct muse_prog_job wo = linear(&l->wo, l->has_wo_scale, l->wo_scale, NULL, b->o);
    muse_program_matmul(B->p, rows(b->att, n_q), &wo, 1, MUSE_ROWS_ALL);
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    if (l->split_attn) /* tensor parallel: o is this rank's partial sum; the sum before the post-norm */
        op(B, (struct muse_op){.kind = MUSE_OP_ALL_REDUCE, .dst = rows(b->o, hp->n_embd), .n = hp->n_embd});
    /* x += rms(o, 1e-8) * post_attention_norm */
    add_post_norm(B, l->post_attention_norm.data);
}

/* The FFN half of layer il: x += post_norm(W_down·(silu(W_gate·h) * (W_up·h))). */
static void ffn_block(struct build *B, uint32_t il) {
    const struct muse_hparams *hp = B->hp;
    const struct muse_layer_weights *l = &B->w->layers[il];
    const struct bufs *b = &B->b;
    const int64_t n_ff = hp->n_ff[il];

    /* h = rms(x, eps) * ffn_norm                                          [n][n_embd] */
    norm_rows(B, b->x, b->h, hp->f_norm_rms_eps, l->ffn_norm.data, MUSE_ROWS_ALL);
    /* fg = W_gate·h, fu = W_up·h (one step, one conversion of h)          [n][n_ff] */
    const struct muse_prog_job gu[2] = {
        linear(&l->ffn_gate, false, 1.0f, NULL, b->fg),
        linear(&l->ffn_up, false, 1.0f, NULL, b->fu),
    };
    muse_program_matmul(B->p, rows(b->h, hp->n_embd), gu, 2, MUSE_ROWS_ALL);
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    /* fg = silu(fg) * fu (SwiGLU) */
    op(B, (struct muse_op){.kind = MUSE_OP_SWIGLU, .dst = rows(b->fg, n_ff), .src = rows(b->fu, n_ff), .n = n_ff});
    /* o = W_down·fg                                                        [n][n_embd] */
    const struct muse_prog_job down = linear(&l->ffn_down, false, 1.0f, NULL, b->o);
    muse_program_matmul(B->p, rows(b->fg, n_ff), &down, 1, MUSE_ROWS_ALL);
    muse_program_barrier(B->p, MUSE_ROWS_ALL);
    if (l->split_ffn)
        op(B, (struct muse_op){.kind = MUSE_OP_ALL_REDUCE, .dst = rows(b->o, hp->n_embd), .n = hp->n_embd});
    /* x += rms(o, 1e-8) * post_ffw_norm */
    add_post_norm(B, l->post_ffw_norm.data);
}

/* logits = softcap(logit_scale · W_out·(rms(x) * output_norm)) for the output rows. */
static void output_head(struct build *B) {
    const struct muse_hparams *hp = B->hp;
    const struct muse_weights *w = B->w;
    const int64_t n_vocab = w->output.ne1;
    /* the head's rows are counted from the first output row: their owners differ from the layers' */
    muse_program_barrier(B->p, MUSE_ROWS_OUT);
    norm_rows(B, B->b.x, B->b.h, hp->f_norm_rms_eps, w->output_norm.data, MUSE_ROWS_OUT);
    const struct muse_prog_job out = {w->output, muse_ref(MUSE_BUF_LOGITS, 0, n_vocab), w->has_output_scale,
                                      w->output_scale, NULL};
    muse_program_matmul(B->p, rows(B->b.h, hp->n_embd), &out, 1, MUSE_ROWS_OUT);
    muse_program_barrier(B->p, MUSE_ROWS_OUT);
    op(B, (struct muse_op){.kind = MUSE_OP_LOGITS, .rows = MUSE_ROWS_OUT, .dst = muse_ref(MUSE_BUF_LOGITS, 0, n_vocab),
                           .n = n_vocab, .scale = hp->f_logit_scale, .softcap = hp->f_final_logit_softcapping});
}

static void observe(struct build *B, uint32_t il) {
    op(B, (struct muse_op){.kind = MUSE_OP_OBSERVE, .layer = (int32_t)il, .src = rows(B->b.x, B->hp->n_embd)});
}

muse_status muse_text_program_build(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                    bool embeddings, struct muse_program *p, struct muse_error *err) {
    return muse_text_program_build_layers(hp, w, n_batch, embeddings, 0, hp->n_layer, p, err);
}

muse_status muse_text_program_build_layers(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                           bool embeddings, uint32_t il0, uint32_t il1, struct muse_program *p,
                                           struct muse_error *err) {
    if (il0 >= il1 || il1 > hp->n_layer)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "layers %u..%u of a model of %u", il0, il1, hp->n_layer);
    int64_t n_q = 0, n_k = 0, n_v = 0, n_ff = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        n_q = max64(n_q, muse_hparams_n_embd_q(hp, il));
        n_k = max64(n_k, muse_hparams_n_embd_k_gqa(hp, il));
        n_v = max64(n_v, muse_hparams_n_embd_v_gqa(hp, il));
        n_ff = max64(n_ff, hp->n_ff[il]);
    }
    muse_program_init(p, n_batch);
    struct build B = {hp, w, p, {0}};
    struct bufs *b = &B.b;
    const int64_t n_embd = hp->n_embd, rope_cols = muse_rope_cols(hp->n_rot_swa);
    b->x = muse_program_buffer(p, n_embd);
    b->h = muse_program_buffer(p, n_embd);
    b->o = muse_program_buffer(p, n_embd);
    b->q = muse_program_buffer(p, n_q);
    b->g = muse_program_buffer(p, n_q);
    b->att = muse_program_buffer(p, n_q);
    b->k = muse_program_buffer(p, n_k);
    b->v = muse_program_buffer(p, n_v);
    b->fg = muse_program_buffer(p, n_ff);
    b->fu = muse_program_buffer(p, n_ff);
    b->rc = muse_program_buffer(p, rope_cols);
    b->rs = muse_program_buffer(p, rope_cols);
    p->bufs[MUSE_BUF_LOGITS].cols = w->output.ne1;
    p->bufs[MUSE_BUF_EMBD].cols = n_embd;

    if (il0 == 0) {
        embed_tokens(&B);
    } else { /* the residual entering layer il0 comes in as every row's injected row (no norm) */
        op(&B, (struct muse_op){.kind = MUSE_OP_EMBED, .dst = rows(b->x, n_embd), .n = n_embd, .table = &w->token_embd});
        op(&B, (struct muse_op){.kind = MUSE_OP_ROPE_ANGLES, .dst = muse_ref(b->rc, 0, 0), .src = muse_ref(b->rs, 0, 0),
                                .n_rot = (int32_t)hp->n_rot_swa, .rope_base = hp->rope_freq_base_swa,
                                .rope_scale = hp->rope_freq_scale_swa});
    }
    for (uint32_t il = il0; il < il1; il++) {
        observe(&B, il);
        attention_block(&B, il);
        ffn_block(&B, il);
    }
    observe(&B, il1);
    if (il1 < hp->n_layer) { /* a first part: its output is the residual, OBSERVE il1's feature rows */
        muse_status st = muse_program_finish(p, err);
        if (st) muse_program_free(p);
        return st;
    }
    /* the final hidden state of every row (the rows a thread wrote last: no barrier) */
    if (embeddings)
        op(&B, (struct muse_op){.kind = MUSE_OP_RMS_NORM, .split = MUSE_SPLIT_ROWS, .src = rows(b->x, n_embd),
                                .dst = rows(MUSE_BUF_EMBD, n_embd), .n = n_embd, .per_row = 1, .w = w->output_norm.data,
                                .eps = hp->f_norm_rms_eps});
    if (w->output.data) output_head(&B); /* tensor parallel: rank 0's only */
    muse_status st = muse_program_finish(p, err);
    if (st) muse_program_free(p);
    return st;
}
