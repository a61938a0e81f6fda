/*
 * program.c - building a program of layer ops (program.h) and the CPU devices' interpreter of it.
 *
 * The interpreter runs inside ONE parallel region of a backend (backend.h): every thread walks
 * the same ops in the same order with its (ith, nth), and the program's BARRIER ops separate
 * the steps where a thread reads what another wrote. Elementwise numerics are ggml's CPU ops
 * (spec section 8): rms_norm sums x*x in double and multiplies by 1/sqrtf(mean + eps) before a
 * separate multiply by the weight; rope angles are computed incrementally in f32; SwiGLU uses
 * ggml's vector exp on whole groups of 8 and expf on the tail; the softcap is
 * softcap * tanhf(x * (1/softcap)). Matmuls and attention go to the backend's ops.
 */
#include "backend/program.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/prog_profile.h"
#include "backend/tp/comm.h"
#include "core/assert.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/types.h"
#include "kernels/x86_numerics.h"

// ---- building ---------------------------------------------------------------------------------

void muse_program_init(struct muse_program *p, int32_t n_batch) {
    memset(p, 0, sizeof *p);
    p->n_batch = n_batch;
    muse_program_buffer(p, 0); /* MUSE_BUF_LOGITS: bound per run, no workspace */
    muse_program_buffer(p, 0); /* MUSE_BUF_EMBD: likewise */
}

void muse_program_free(struct muse_program *p) {
    if (!p) return;
    free(p->ops);
    free(p->jobs);
    free(p->bufs);
    memset(p, 0, sizeof *p);
}

/* Room for one more element of an array of `size`-byte elements (*n used of *cap). */
static bool grow(void **a, int32_t *cap, int32_t n, size_t size, struct muse_program *p) {
    if (n < *cap) return true;
    const int32_t c = *cap ? 2 * *cap : 64;
    void *q = realloc(*a, (size_t)c * size);
    if (!q) return p->failed = true, false;
    *a = q;
    *cap = c;
    return true;
}

int16_t muse_program_buffer(struct muse_program *p, int64_t cols) {
    if (!grow((void **)&p->bufs, &p->cap_bufs, p->n_bufs, sizeof *p->bufs, p)) return 0;
    p->bufs[p->n_bufs] = (struct muse_prog_buffer){.cols = cols};
    return (int16_t)p->n_bufs++;
}

struct muse_op *muse_program_op(struct muse_program *p, const struct muse_op *op) {
    if (!grow((void **)&p->ops, &p->cap_ops, p->n_ops, sizeof *p->ops, p)) return NULL;
    p->ops[p->n_ops] = *op;
    return &p->ops[p->n_ops++];
}

void muse_program_matmul(struct muse_program *p, struct muse_prog_ref src, const struct muse_prog_job *jobs, int n,
                         enum muse_op_rows rows) {
    const int32_t job0 = p->n_jobs;
    for (int i = 0; i < n; i++) {
        if (!grow((void **)&p->jobs, &p->cap_jobs, p->n_jobs, sizeof *p->jobs, p)) return;
        p->jobs[p->n_jobs++] = jobs[i];
    }
    muse_program_op(p, &(struct muse_op){.kind = MUSE_OP_MATMUL, .rows = rows, .src = src, .job0 = job0, .n_jobs = n});
}

void muse_program_barrier(struct muse_program *p, enum muse_op_rows rows) {
    muse_program_op(p, &(struct muse_op){.kind = MUSE_OP_BARRIER, .rows = rows});
}

muse_status muse_program_finish(struct muse_program *p, struct muse_error *err) {
    if (p->failed) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a program of %d ops", p->n_ops);
    size_t off = 0;
    for (int32_t b = MUSE_BUF_FIRST; b < p->n_bufs; b++) {
        if (p->bufs[b].bind) continue; /* the caller's memory */
        const size_t rows = (size_t)(p->bufs[b].rows ? p->bufs[b].rows : p->n_batch);
        p->bufs[b].off = off;
        off += (rows * (size_t)p->bufs[b].cols + 15) & ~(size_t)15; /* 64-byte aligned */
    }
    p->workspace_floats = off;
    return MUSE_OK;
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

/* n_rows vectors of n (vector r at x + r xs) -> y (at y + r ys; y may alias x): y = x / sqrt(mean(x^2)
 * + eps), then * w if w, as ggml's rms_norm (the sum of x*x in double, in element order) and mul.
 * The sums of up to 64 vectors at a time side by side (muse_rms_sums: each vector's own chain of
 * additions, the same bits as one at a time). */
static void rms_norm_vecs(const float *x, int64_t xs, float *y, int64_t ys, int32_t n_rows, int64_t n, float eps,
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
 * RoPE angles for position p, as ggml's rope cache: theta starts at p and is multiplied by
 * powf(base, -2/n_rot) after each pair, all in f32; cos/sin of freq_scale*theta.
 */
void muse_rope_angles(float p, int32_t n_rot, float base, float freq_scale, float *c, float *s) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = p;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const float th = freq_scale * theta;
        c[i] = cosf(th);
        s[i] = sinf(th);
        theta *= theta_scale;
    }
}

/* Rotate the first n_rot dims of each of n_heads vectors [n_heads][hd] by the cached angles:
 * NORM rotates adjacent pairs (2i, 2i+1), NEOX the halves (i, i + n_rot/2). */
static void rope_apply(enum muse_rope_mode mode, float *x, int32_t n_heads, int32_t hd, int32_t n_rot, const float *c,
                       const float *s) {
    const int32_t half = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        if (mode == MUSE_ROPE_NORM) {
            for (int32_t i = 0; i < half; i++) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c[i] - x1 * s[i];
                v[2 * i + 1] = x0 * s[i] + x1 * c[i];
            }
        } else {
            for (int32_t i = 0; i < half; i++) {
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c[i] - x1 * s[i];
                v[i + half] = x0 * s[i] + x1 * c[i];
            }
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

/* One row's k [n_embd_k] and v [n_embd_v] (f32) into its cell of a KV layer, converted to the cache type. */
static void store_row(enum muse_type type, const float *x, void *dst, int32_t n) {
    if (type == MUSE_TYPE_F32) {
        memcpy(dst, x, sizeof(float) * (size_t)n);
    } else if (type == MUSE_TYPE_F16) {
        uint16_t *h = dst;
        for (int32_t i = 0; i < n; i++) h[i] = muse_fp32_to_fp16(x[i]);
    } else {
        muse_type_traits[type].from_float(x, dst, n);
    }
}

void muse_kv_layer_store(struct muse_kv_layer *l, int32_t pos, const float *k, const float *v) {
    MUSE_ASSERT(pos >= 0);
    const uint32_t cell = (uint32_t)pos % l->n_cells;
    store_row(l->type, k, (uint8_t *)l->k + (size_t)cell * l->k_row_size, l->n_embd_k);
    store_row(l->type, v, (uint8_t *)l->v + (size_t)cell * l->v_row_size, l->n_embd_v);
}

// ---- the interpreter ------------------------------------------------------------------------------

struct interp {
    const struct muse_program *p;
    const struct muse_prog_run *run;
    float *ws;
    const struct muse_backend_ops *ops;
    void *bs;
    int ith, nth;
};

/* The number of rows of op o (all, or the output rows). */
static int32_t op_rows(const struct interp *I, const struct muse_op *o) {
    if (o->count) return o->count;
    return o->rows == MUSE_ROWS_OUT ? I->run->n_out : I->run->n_rows;
}

static int64_t ref_stride(const struct interp *I, struct muse_prog_ref f) {
    if (f.stride) return f.stride;
    return I->p->bufs[f.buf].cols;
}

/* Row 0 of f. */
static float *ref_ptr(const struct interp *I, struct muse_prog_ref f) {
    if (f.buf == MUSE_BUF_NONE) return NULL;
    if (f.buf == MUSE_BUF_LOGITS) return I->run->logits + f.off;
    if (f.buf == MUSE_BUF_EMBD) return I->run->embd_out + f.off;
    if (I->p->bufs[f.buf].bind) return I->run->bind[I->p->bufs[f.buf].bind - 1] + f.off;
    return I->ws + I->p->bufs[f.buf].off + (size_t)f.off;
}

/* This thread's contiguous share [*i0, *i1) of n items. */
static void share(const struct interp *I, int64_t n, int64_t *i0, int64_t *i1) {
    *i0 = n * I->ith / I->nth;
    *i1 = n * (I->ith + 1) / I->nth;
}

static void barrier(const struct interp *I) { I->ops->barrier(I->bs); }

/* Row r of a rope cache buffer (ROPE_ANGLES writes cos to its dst and sin to its src; ROPE reads them as src / src2). */
static const float *angles(const struct interp *I, struct muse_prog_ref f, int32_t r) {
    return I->ws + I->p->bufs[f.buf].off + (size_t)r * (size_t)ref_stride(I, f);
}

static void op_embed(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *run = I->run;
    const struct muse_weight *te = o->table;
    const int64_t n = o->n;
    float *x = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->dst);
    for (int32_t r = I->ith; r < run->n_rows; r += I->nth) {
        float *xr = x + (size_t)r * (size_t)xs;
        if (run->rows && run->rows[r]) memcpy(xr, run->rows[r], sizeof(float) * (size_t)n);
        else if (run->embd) memcpy(xr, run->embd + (size_t)r * (size_t)n, sizeof(float) * (size_t)n);
        else muse_type_traits[te->type].to_float((const uint8_t *)te->data + (size_t)run->tokens[r] * te->row_size, xr, n);
    }
}

static void op_rope_angles(const struct interp *I, const struct muse_op *o) {
    for (int32_t r = I->ith; r < op_rows(I, o); r += I->nth)
        muse_rope_angles((float)(o->idx ? o->idx[r] : I->run->pos[r]), o->n_rot, o->rope_base, o->rope_scale,
                         (float *)angles(I, o->dst, r), (float *)angles(I, o->src, r));
}

static void op_rms_norm(const struct interp *I, const struct muse_op *o) {
    const int32_t n = op_rows(I, o);
    const float *x = ref_ptr(I, o->src);
    float *y = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->src), ys = ref_stride(I, o->dst);
    if (o->rows == MUSE_ROWS_OUT) { /* batch row out_rows[i] -> row i, i of this thread's, one vector each */
        MUSE_ASSERT(o->split == MUSE_SPLIT_ROWS && o->per_row == 1);
        const int32_t *rows = I->run->out_rows;
        if (n > 0 && rows[n - 1] - rows[0] == n - 1) { /* consecutive rows: side by side */
            if (n <= I->ith) return;
            const int32_t own = (n - 1 - I->ith) / I->nth + 1;
            rms_norm_vecs(x + (size_t)(rows[0] + I->ith) * xs, I->nth * xs, y + (size_t)I->ith * ys, I->nth * ys, own,
                          o->n, o->eps, o->w);
            return;
        }
        for (int32_t i = I->ith; i < n; i += I->nth)
            rms_norm_vecs(x + (size_t)rows[i] * xs, o->n, y + (size_t)i * ys, o->n, 1, o->n, o->eps, o->w);
        return;
    }
    if (o->split == MUSE_SPLIT_SHARE) { /* vectors i0..i1-1 of all rows x per_row */
        int64_t i0, i1;
        share(I, (int64_t)n * o->per_row, &i0, &i1);
        if (xs == o->per_row * o->n && ys == xs) { /* consecutive vectors */
            rms_norm_vecs(x + (size_t)i0 * o->n, o->n, y + (size_t)i0 * o->n, o->n, (int32_t)(i1 - i0), o->n, o->eps, o->w);
            return;
        }
        for (int64_t i = i0; i < i1; i++) {
            const size_t r = (size_t)(i / o->per_row), h = (size_t)(i % o->per_row) * (size_t)o->n;
            rms_norm_vecs(x + r * xs + h, o->n, y + r * ys + h, o->n, 1, o->n, o->eps, o->w);
        }
        return;
    }
    if (n <= I->ith) return;
    if (o->per_row == 1) { /* this thread's rows side by side */
        const int32_t own = (n - 1 - I->ith) / I->nth + 1;
        rms_norm_vecs(x + (size_t)I->ith * xs, I->nth * xs, y + (size_t)I->ith * ys, I->nth * ys, own, o->n, o->eps, o->w);
        return;
    }
    for (int32_t r = I->ith; r < n; r += I->nth)
        rms_norm_vecs(x + (size_t)r * xs, o->n, y + (size_t)r * ys, o->n, o->per_row, o->n, o->eps, o->w);
}

static void op_rope(const struct interp *I, const struct muse_op *o) {
    float *x = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->dst);
    const int32_t n = I->run->n_rows, hd = (int32_t)o->n;
    if (o->split == MUSE_SPLIT_SHARE) {
        int64_t i0, i1;
        share(I, (int64_t)n * o->per_row, &i0, &i1);
        for (int64_t i = i0; i < i1; i++) { /* row i / per_row, head i % per_row */
            const int32_t r = (int32_t)(i / o->per_row);
            rope_apply(o->rope, x + (size_t)r * xs + (size_t)(i % o->per_row) * hd, 1, hd, o->n_rot, angles(I, o->src, r),
                       angles(I, o->src2, r));
        }
        return;
    }
    for (int32_t r = I->ith; r < n; r += I->nth)
        rope_apply(o->rope, x + (size_t)r * xs, o->per_row, hd, o->n_rot, angles(I, o->src, r), angles(I, o->src2, r));
}

static void op_matmul(const struct interp *I, const struct muse_op *o) {
    const int32_t n = op_rows(I, o);
    if (n <= 0) return;
    struct muse_matmul_job jobs[o->n_jobs];
    for (int32_t j = 0; j < o->n_jobs; j++) {
        const struct muse_prog_job *pj = &I->p->jobs[o->job0 + j];
        jobs[j] = (struct muse_matmul_job){pj->w, ref_ptr(I, pj->y), pj->has_scale, pj->scale, pj->bias};
    }
    I->ops->matmul(I->bs, jobs, o->n_jobs, ref_ptr(I, o->src), n, I->ith, I->nth);
}

static void op_kv_store(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *run = I->run;
    const float *k = ref_ptr(I, o->src), *v = ref_ptr(I, o->src2);
    const int64_t ks = ref_stride(I, o->src), vs = ref_stride(I, o->src2);
    for (int32_t r = I->ith; r < run->n_rows; r += I->nth)
        muse_kv_layer_store(&run->kv[run->seq ? run->seq[r] : 0][o->layer], run->pos[r], k + (size_t)r * ks,
                            v + (size_t)r * vs);
}

/* The BLOCK mask (program.h): each row on its own, its query placed at the block's last position
 * with a window that reaches back exactly to pos[r] - n_swa + 1 (or the run's kv_floor). */
static void attention_block_rows(const struct interp *I, const struct muse_op *o, float *q, float *out, float *g,
                                 int64_t stride) {
    const struct muse_prog_run *run = I->run;
    const int32_t n = run->n_rows, last = run->pos[n - 1];
    for (int32_t r = 0; r < n; r++) {
        int32_t w = o->n_swa + (last - run->pos[r]);
        if (w > last - run->kv_floor + 1) w = last - run->kv_floor + 1;
        const struct muse_attn_args aa = {
            .q = q + (size_t)r * stride, .out = out + (size_t)r * stride, .kv = &run->kv[run->seq ? run->seq[r] : 0][o->layer],
            .pos = &last, .n_tokens = 1, .n_head = o->n_head, .n_head_kv = o->n_head_kv, .head_dim = o->head_dim,
            .n_swa = w, .scale = o->scale, .gate = g ? g + (size_t)r * stride : NULL,
        };
        I->ops->attention(I->bs, &aa, I->ith, I->nth);
    }
}

/* Attention over each run of consecutive rows of one sequence, each over its own KV layer. The
 * calls only read q and the caches and write distinct rows: no barrier between them. */
static void op_attention(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *run = I->run;
    float *q = ref_ptr(I, o->src), *out = ref_ptr(I, o->dst), *g = ref_ptr(I, o->src2);
    const int64_t stride = (int64_t)o->n_head * o->head_dim; /* q, out and gate are [n][n_head][hd] */
    MUSE_ASSERT(ref_stride(I, o->src) == stride && ref_stride(I, o->dst) == stride);
    if (o->mask == MUSE_MASK_BLOCK) {
        attention_block_rows(I, o, q, out, g, stride);
        return;
    }
    for (int32_t r0 = 0, r1; r0 < run->n_rows; r0 = r1) {
        const int32_t s = run->seq ? run->seq[r0] : 0;
        for (r1 = r0 + 1; r1 < run->n_rows && (run->seq ? run->seq[r1] : 0) == s; r1++) {}
        const struct muse_attn_args aa = {
            .q = q + (size_t)r0 * stride, .out = out + (size_t)r0 * stride, .kv = &run->kv[s][o->layer],
            .pos = run->pos + r0, .n_tokens = r1 - r0, .n_head = o->n_head, .n_head_kv = o->n_head_kv,
            .head_dim = o->head_dim, .n_swa = o->n_swa, .scale = o->scale, .gate = g ? g + (size_t)r0 * stride : NULL,
        };
        I->ops->attention(I->bs, &aa, I->ith, I->nth);
    }
}

/* dst = silu(dst) * src: by row, or with fewer rows than threads (decode) by columns and a
 * barrier (the next matmul converts whole rows). */
static void op_swiglu(const struct interp *I, const struct muse_op *o) {
    const int32_t n = I->run->n_rows;
    float *g = ref_ptr(I, o->dst);
    const float *u = ref_ptr(I, o->src);
    const int64_t gs = ref_stride(I, o->dst), us = ref_stride(I, o->src);
    if (n >= I->nth) {
        for (int32_t r = I->ith; r < n; r += I->nth)
            swiglu_cols(g + (size_t)r * gs, g + (size_t)r * gs, u + (size_t)r * us, o->n, 0, o->n);
        return;
    }
    int64_t c0, c1;
    share(I, o->n, &c0, &c1);
    for (int32_t r = 0; r < n; r++) swiglu_cols(g + (size_t)r * gs, g + (size_t)r * gs, u + (size_t)r * us, o->n, c0, c1);
    barrier(I);
}

static void op_add(const struct interp *I, const struct muse_op *o) {
    const int32_t n = op_rows(I, o);
    float *y = ref_ptr(I, o->dst);
    const float *x = ref_ptr(I, o->src);
    const int64_t ys = ref_stride(I, o->dst), xs = ref_stride(I, o->src);
    for (int32_t r = I->ith; r < n; r += I->nth) add(y + (size_t)r * ys, x + (size_t)r * xs, o->n);
}

/* The output rows' logits [n_out][n] (dense): * scale, then the softcap, on a contiguous share. */
static void op_logits(const struct interp *I, const struct muse_op *o) {
    const int32_t n_out = op_rows(I, o);
    if (n_out <= 0) return;
    float *y = ref_ptr(I, o->dst);
    int64_t i0, i1;
    share(I, (int64_t)n_out * o->n, &i0, &i1);
    scale_into(y + i0, y + i0, o->scale, i1 - i0);
    if (o->softcap != 0.0f) {
        const float inv = 1.0f / o->softcap, cap = o->softcap;
        for (int64_t i = i0; i < i1; i++) y[i] = tanhf(y[i] * inv) * cap;
    }
}

#define TOP_K 10 /* llama.cpp's LLAMA_DRAFT_TOP_K: the draft sampler chain is top-k(10) then dist */

void muse_row_confidence(const float *row, int64_t n, int32_t *argmax, float *conf, float *conf_top10) {
    float top[TOP_K];
    int n_top = 0;
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++) {
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
    for (int64_t i = 0; i < n; i++)
        if (row[i] > cut) sum += exp((double)row[i] - max);
    for (int i = 0; i < n_top; i++) sum10 += exp((double)top[i] - max);
    *conf = (float)(1.0 / sum);
    *conf_top10 = (float)(1.0 / sum10);
}

/* The output rows' confidences, a row per thread in turn. */
static void op_top_probs(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *run = I->run;
    const float *x = ref_ptr(I, o->src);
    const int64_t xs = ref_stride(I, o->src);
    for (int32_t i = I->ith; i < op_rows(I, o); i += I->nth)
        muse_row_confidence(x + (size_t)i * (size_t)xs, o->n, &run->argmax[i], &run->conf[i], &run->conf_top10[i]);
}

/* The feature rows of layer il: each thread copies its own rows (r % nth == ith), which it wrote
 * itself (the residual's row steps split so) and writes next: no barrier. */
static void observe_features(const struct interp *I, int32_t il, const float *x) {
    const struct muse_prog_run *a = I->run;
    const size_t E = (size_t)a->n_embd, F = (size_t)a->n_features * E;
    for (int32_t k = 0; k < a->n_features; k++) {
        if (a->feature_layers[k] != il) continue;
        for (int32_t r = I->ith; r < a->n_rows; r += I->nth)
            memcpy(a->features + (size_t)r * F + (size_t)k * E, x + (size_t)r * E, sizeof(float) * E);
    }
}

/* The feature rows first (observe_features); the layer trace and capture see the whole residual:
 * thread 0 calls them. A barrier first (the rows of the other threads), except for a single row,
 * which thread 0 owns and wrote itself; no thread writes the residual again before a barrier that
 * thread 0 reaches after the call, so a capture needs no barrier after it (the trace keeps one). */
static void op_observe(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *a = I->run;
    const int32_t il = o->layer;
    const float *x = ref_ptr(I, o->src);
    if (a->features) observe_features(I, il, x);
    if (!a->trace && !a->capture) return;
    if (a->trace || a->n_rows > 1) barrier(I);
    if (I->ith == 0) {
        for (int32_t r = 0; a->trace && r < a->n_rows; r++) { /* the residual entering layer il */
            if (a->pos[r] >= a->trace_n_pos) continue;
            const float *xr = x + (size_t)r * (size_t)a->n_embd;
            double sum = 0.0, sumsq = 0.0;
            for (int64_t i = 0; i < a->n_embd; i++) {
                sum += xr[i];
                sumsq += (double)xr[i] * xr[i];
            }
            float first[4] = {0, 0, 0, 0};
            for (int64_t i = 0; i < 4 && i < a->n_embd; i++) first[i] = xr[i];
            a->trace(a->trace_user, a->pos[r], il, sum, sumsq, first);
        }
        if (a->capture && il < a->n_layers) a->capture(a->capture_user, il, a->pos, a->n_rows, x);
    }
    if (a->trace) barrier(I);
}

/* The row-range ops (the section at the end of this file). */
/* The rows of dst summed over the group: thread 0 (the caller's thread, which alone talks to the
 * group) after the program's barrier, then a barrier so that every thread reads the sums. */
static void op_all_reduce(const struct interp *I, const struct muse_op *o) {
    const int32_t n = op_rows(I, o);
    const int64_t stride = ref_stride(I, o->dst);
    if (I->ith == 0) {
        float *x = ref_ptr(I, o->dst);
        if (stride == o->n) {
            muse_comm_allreduce(I->run->comm, x, (int64_t)n * o->n, I->run->comm_bf16);
        } else {
            for (int32_t r = 0; r < n; r++) muse_comm_allreduce(I->run->comm, x + (size_t)r * (size_t)stride, o->n, I->run->comm_bf16);
        }
    }
    barrier(I);
}

static void op_layer_norm(const struct interp *I, const struct muse_op *o);
static void op_gelu(const struct interp *I, const struct muse_op *o);
static void op_gather(const struct interp *I, const struct muse_op *o);
static void op_rope_2d(const struct interp *I, const struct muse_op *o);
static void op_window_attention(const struct interp *I, const struct muse_op *o);
static bool op_hook(const struct interp *I, const struct muse_op *o);

void muse_program_region(const struct muse_program *p, const struct muse_prog_run *run, float *ws,
                         const struct muse_backend_ops *ops, void *bs, int ith, int nth) {
    const struct interp I = {p, run, ws, ops, bs, ith, nth};
    /* MUSE_PROFILE: thread 0 times each stretch of ops between two barriers (prog_profile.h) */
    const bool prof = ith == 0 && muse_prof_enabled();
    int64_t t_prof = prof ? muse_prof_now_ns() : 0;
    int32_t i_prof = 0;
    for (int32_t i = 0; i < p->n_ops; i++) {
        const struct muse_op *o = &p->ops[i];
        switch (o->kind) {
        case MUSE_OP_BARRIER:
            if (o->rows != MUSE_ROWS_ALL && run->n_out == 0) break;
            /* thread 0 stores i before barrier i and only then: a thread that has passed barrier
             * i' < i sees i, not i', goes on to barrier i (the next: thread 0 cannot be past it
             * without it) and stops there with the others */
            if (run->preempt && ith == 0 && run->preempt(run->preempt_user)) atomic_store(run->preempted, i);
            barrier(&I);
            if (run->preempt && atomic_load(run->preempted) == i) return;
            if (prof) {
                const int64_t t = muse_prof_now_ns();
                muse_prof_add(p, i_prof, i, run->n_rows, t - t_prof);
                t_prof = t, i_prof = i + 1;
            }
            break;
        case MUSE_OP_EMBED: op_embed(&I, o); break;
        case MUSE_OP_ROPE_ANGLES: op_rope_angles(&I, o); break;
        case MUSE_OP_RMS_NORM: op_rms_norm(&I, o); break;
        case MUSE_OP_ROPE: op_rope(&I, o); break;
        case MUSE_OP_MATMUL: op_matmul(&I, o); break;
        case MUSE_OP_KV_STORE: op_kv_store(&I, o); break;
        case MUSE_OP_ATTENTION: op_attention(&I, o); break;
        case MUSE_OP_SWIGLU: op_swiglu(&I, o); break;
        case MUSE_OP_ADD: op_add(&I, o); break;
        case MUSE_OP_LOGITS: op_logits(&I, o); break;
        case MUSE_OP_TOP_PROBS: op_top_probs(&I, o); break;
        case MUSE_OP_OBSERVE: op_observe(&I, o); break;
        case MUSE_OP_ALL_REDUCE: /* one device: the sums are already whole */
            if (run->comm) op_all_reduce(&I, o);
            break;
        case MUSE_OP_LAYER_NORM: op_layer_norm(&I, o); break;
        case MUSE_OP_GELU: op_gelu(&I, o); break;
        case MUSE_OP_GATHER: op_gather(&I, o); break;
        case MUSE_OP_ROPE_2D: op_rope_2d(&I, o); break;
        case MUSE_OP_WINDOW_ATTENTION: op_window_attention(&I, o); break;
        case MUSE_OP_HOOK:
            if (op_hook(&I, o)) return; /* every thread sees the stop after the hook's barrier */
            break;
        }
    }
    if (prof && i_prof < p->n_ops) muse_prof_add(p, i_prof, p->n_ops - 1, run->n_rows, muse_prof_now_ns() - t_prof);
}

// ---- row-range ops (the vision tower) -----------------------------------------------------------

int16_t muse_program_buffer_rows(struct muse_program *p, int32_t rows, int64_t cols) {
    const int16_t b = muse_program_buffer(p, cols);
    if (!p->failed) p->bufs[b].rows = rows;
    return b;
}

int16_t muse_program_bound(struct muse_program *p, int32_t slot, int64_t cols) {
    const int16_t b = muse_program_buffer(p, cols);
    if (!p->failed) p->bufs[b].bind = slot + 1;
    return b;
}

/* y = (x - mean) / sqrt(var + eps) * w + b as ggml_norm + ggml_mul + ggml_add (x86 AVX2 build):
 * the sum in double, mean and variance cast to f32, the squares summed in f32 per group of 8
 * (ggml_vec_cvar_f32) and the groups in double. y may alias x. */
static void layer_norm(const float *x, float *y, int64_t n, float eps, const float *w, const float *b) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i];
    const float mean = (float)s / (float)n;
    double var = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
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

/* Rows r % nth == ith (the rows this thread converts for the next matmul). */
static void op_layer_norm(const struct interp *I, const struct muse_op *o) {
    const float *x = ref_ptr(I, o->src);
    float *y = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->src), ys = ref_stride(I, o->dst);
    for (int32_t r = I->ith; r < op_rows(I, o); r += I->nth)
        layer_norm(x + (size_t)r * (size_t)xs, y + (size_t)r * (size_t)ys, o->n, o->eps, o->w, o->b);
}

/* x = 0.5 * x * (1 + erf(x / sqrt 2)) in place, as ggml_vec_gelu_erf_f32. */
static void op_gelu(const struct interp *I, const struct muse_op *o) {
    float *y = ref_ptr(I, o->dst);
    const int64_t ys = ref_stride(I, o->dst);
    for (int32_t r = I->ith; r < op_rows(I, o); r += I->nth) {
        float *x = y + (size_t)r * (size_t)ys;
        for (int64_t i = 0; i < o->n; i++)
            x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752440084436210484f));
    }
}

static void op_gather(const struct interp *I, const struct muse_op *o) {
    const float *x = ref_ptr(I, o->src);
    float *y = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->src), ys = ref_stride(I, o->dst), n = o->n;
    const int32_t per = o->per_row > 0 ? o->per_row : 1;
    for (int32_t r = I->ith; r < op_rows(I, o); r += I->nth) {
        float *yr = y + (size_t)r * (size_t)ys;
        for (int32_t v = 0; v < per; v++) {
            const int64_t i = (int64_t)r * per + v;
            const float *xr = x + (size_t)(o->idx ? o->idx[i] : i) * (size_t)xs;
            if (o->interleave)
                for (int64_t c = 0; c < n; c++) yr[(size_t)c * per + v] = xr[c];
            else
                memcpy(yr + (size_t)v * (size_t)n, xr, sizeof(float) * (size_t)n);
        }
    }
}

/* Each of per_row heads of n floats: [0, n/2) rotated by the angles of position idx[r], [n/2, n)
 * by those of idx2[r], each half as rope NORM (adjacent pairs) over its n_rot = n/2 dims. */
static void op_rope_2d(const struct interp *I, const struct muse_op *o) {
    float *x = ref_ptr(I, o->dst);
    const int64_t xs = ref_stride(I, o->dst);
    const int32_t hd = (int32_t)o->n, half = hd / 2;
    for (int32_t r = I->ith; r < op_rows(I, o); r += I->nth) {
        const float *ca = angles(I, o->src, o->idx[r]), *sa = angles(I, o->src2, o->idx[r]);
        const float *cb = angles(I, o->src, o->idx2[r]), *sb = angles(I, o->src2, o->idx2[r]);
        float *xr = x + (size_t)r * (size_t)xs;
        for (int32_t h = 0; h < o->per_row; h++) {
            rope_apply(MUSE_ROPE_NORM, xr + (size_t)h * hd, 1, hd, half, ca, sa);
            rope_apply(MUSE_ROPE_NORM, xr + (size_t)h * hd + half, 1, hd, half, cb, sb);
        }
    }
}

static void op_window_attention(const struct interp *I, const struct muse_op *o) {
    const struct muse_window_attn_args a = {
        .q = ref_ptr(I, o->dst), .k = ref_ptr(I, o->src), .v = ref_ptr(I, o->src2), .ld = ref_stride(I, o->dst),
        .n_rows = op_rows(I, o), .n_head = o->n_head, .head_dim = o->head_dim, .seg = o->seg, .n_seg = o->n_seg,
        .scale = o->scale, .scratch = ref_ptr(I, o->src3),
    };
    const size_t need = muse_window_attn_scratch(a.n_rows, a.n_head, a.head_dim, I->nth);
    MUSE_ASSERT(ref_stride(I, o->src) == a.ld && ref_stride(I, o->src2) == a.ld && o->seg[o->n_seg] == a.n_rows &&
                (size_t)I->p->bufs[o->src3.buf].cols >= need);
    I->ops->window_attention(I->bs, &a, I->ith, I->nth);
}

/* Thread 0 calls the hook between two barriers; returns whether the run stops here. */
static bool op_hook(const struct interp *I, const struct muse_op *o) {
    const struct muse_prog_run *run = I->run;
    if (!run->hook) return false;
    barrier(I);
    if (I->ith == 0 && run->hook(run->hook_user, o->layer, ref_ptr(I, o->src), op_rows(I, o), o->n) && run->stop)
        *run->stop = 1;
    barrier(I);
    return run->stop && *run->stop;
}
