/*
 * backend_ref.c - the reference backend: plain C, single-threaded, the correctness oracle.
 *
 * matmul: each activation row is converted to the weight type's vec_dot_type with the
 * reference quantizer (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for K- and I-quants,
 * F16 for F16, BF16 for BF16, none for F32), then every output is the type's reference dot
 * product (kernels/types.h), as ggml's CPU mul_mat does.
 *
 * attention: llama.cpp's non-flash path (text-model.md 5.4): kq = K·q with q converted to the
 * cache type's dot partner (F16 rounding for an F16 cache), softmax(kq*scale + mask) with the
 * denominator in double, then V·p with p rounded to F16 for an F16 cache, accumulated in double
 * like ggml's generic dot products. Masked keys are skipped: in ggml they contribute exact zeros.
 *
 * The parallel region is a plain call with one thread (ith 0 of 1) and the barrier does nothing,
 * so the forward reads as a sequence of whole ops; the jobs of a matmul step run one after another.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels/x86_numerics.h"
#include "backend/backend.h"

struct ref_state {
    struct muse_backend_plan plan;
    uint8_t *xq;      /* [n_batch][4 * max_ne0 bytes]: activation rows in vec_dot_type */
    size_t xq_stride; /* bytes per row of xq */
    float *scores;    /* [max_cells] */
    float *fscratch;  /* [10 * max_head_dim] muse_attn_head_ref's scratch */
    uint8_t *qc;      /* [4 * max_head_dim + 64] one query head in the K cache's dot partner */
};

static void ref_free(void *state) {
    struct ref_state *s = state;
    if (!s) return;
    free(s->xq);
    free(s->scores);
    free(s->fscratch);
    free(s->qc);
    free(s);
}

static muse_status ref_init(const struct muse_backend_plan *plan, void **state, struct muse_error *err) {
    struct ref_state *s = calloc(1, sizeof *s);
    if (!s) goto fail;
    s->plan = *plan;
    /* F32 is the widest activation format (4 bytes/element); every quantized one is smaller */
    s->xq_stride = (size_t)plan->max_ne0 * 4 + 64;
    s->xq = malloc((size_t)plan->n_batch * s->xq_stride);
    s->scores = malloc(sizeof(float) * (plan->max_cells ? plan->max_cells : 1));
    s->fscratch = malloc(sizeof(float) * 10 * (size_t)plan->max_head_dim);
    s->qc = malloc((size_t)plan->max_head_dim * 4 + 64);
    if (!s->xq || !s->scores || !s->fscratch || !s->qc) goto fail;
    *state = s;
    return MUSE_OK;
fail:
    ref_free(s);
    return muse_error_set(err, MUSE_ERR_NOMEM, "ref backend: out of memory for scratch buffers");
}

// ---- matmul ----------------------------------------------------------------------------------

static void ref_matmul_one(struct ref_state *s, const struct muse_weight *w, const float *x, int32_t n_rows, float *y) {
    const struct muse_type_traits *wt = &muse_type_traits[w->type];
    enum muse_type vt = wt->vec_dot_type;
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    const muse_vec_dot_fn dot = muse_x86_vec_dot(w->type);
    MUSE_ASSERT(n_rows <= s->plan.n_batch && ne0 <= s->plan.max_ne0 && dot);

    /* convert the activation rows once: x [n_rows][ne0] f32 -> xq [n_rows][row in vt] */
    const uint8_t *xq = (const uint8_t *)x;
    size_t xq_stride = (size_t)ne0 * sizeof(float);
    if (vt != MUSE_TYPE_F32) {
        for (int32_t r = 0; r < n_rows; r++) muse_x86_act_from_float(vt)(x + (size_t)r * ne0, s->xq + r * s->xq_stride, ne0);
        xq = s->xq;
        xq_stride = s->xq_stride;
    }
    /* weight row outer, activation row inner: each weight row is read once per call */
    const uint8_t *wrow = w->data;
    for (int64_t i = 0; i < ne1; i++, wrow += w->row_size)
        for (int32_t r = 0; r < n_rows; r++) dot(ne0, &y[(size_t)r * ne1 + i], wrow, xq + r * xq_stride);
}

static void ref_matmul(void *state, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows,
                       int ith, int nth) {
    MUSE_ASSERT(ith == 0 && nth == 1);
    for (int j = 0; j < n_jobs; j++) {
        ref_matmul_one(state, &jobs[j].w, x, n_rows, jobs[j].y);
        muse_matmul_job_epilogue(&jobs[j], n_rows, 0, jobs[j].w.ne1);
    }
}

/* One thread: the region is a plain call and the barrier has nothing to wait for. */
static void ref_parallel(void *state, muse_backend_fn fn, void *ctx) {
    (void)state;
    fn(0, 1, ctx);
}

static void ref_barrier(void *state) { (void)state; }

// ---- attention --------------------------------------------------------------------------------

/*
 * ggml's kernels per cache type (llama.cpp non-flash path, x86 AVX2+FMA build, prompt batches):
 *   F16: K·q is a mul_mat of the F16 keys with q rounded to F16, run by tinyBLAS (f32 FMA lanes,
 *        muse_x86_dot_tinyblas); V·p likewise, with p rounded to F16 and the lanes running over
 *        the KV cells (cell = position).
 *   F32: K·q needs no conversion, so ggml_vec_dot_f32 runs it (muse_x86_dot_vec); V·p is
 *        tinyBLAS over the cells.
 *   Q8_0 (llama.cpp only supports it with flash attention; an approximation): K·q with q
 *        quantized to Q8_0 and the reference dot, V dequantized, V·p as for F32.
 * Softmax: muse_x86_softmax_exp, then p = e * (float)(1/sum).
 * Single-token batches run ggml_vec_dot_f16/f32 instead of tinyBLAS in llama.cpp; muse keeps the
 * prompt order for every batch size, so that results never depend on the chunking.
 */
void muse_attn_head_ref(const struct muse_attn_args *a, int32_t t, int32_t h, float *scores, float *fscratch,
                        uint8_t *qc) {
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const int32_t kvh = h / (a->n_head / a->n_head_kv);
    const struct muse_type_traits *tt = &muse_type_traits[kv->type];
    const size_t head_bytes = muse_type_row_size(kv->type, hd);
    const bool f16 = kv->type == MUSE_TYPE_F16, f32 = kv->type == MUSE_TYPE_F32;
    float *qf = fscratch, *row = fscratch + hd; /* [hd] query as ggml sees it, [hd] one K/V row */
    float *lanes = fscratch + 2 * hd;           /* [hd][8] V·p accumulators */
    const int32_t p = a->pos[t];
    const int32_t lo = a->n_swa > 0 && p - a->n_swa + 1 > 0 ? p - a->n_swa + 1 : 0;
    const int32_t n = p - lo + 1; /* visible keys: positions lo..p */
    MUSE_ASSERT(n >= 1 && (uint32_t)n <= kv->n_cells);

    const float *qh = a->q + ((size_t)t * a->n_head + h) * hd;
    if (f16) {
        for (int32_t d = 0; d < hd; d++) qf[d] = muse_fp16_to_fp32(muse_fp32_to_fp16(qh[d]));
    } else if (!f32) {
        muse_type_traits[tt->vec_dot_type].from_float(qh, qc, hd);
    }
    /* scores = K·q, then * scale (the mask adds 0 to the visible keys) and softmax */
    for (int32_t j = 0; j < n; j++) {
        const uint8_t *kh = (const uint8_t *)kv->k + ((uint32_t)(lo + j) % kv->n_cells) * kv->k_row_size + (size_t)kvh * head_bytes;
        float kq;
        if (f16) {
            muse_x86_kv_to_float(kv->type, kh, row, hd);
            /* tinyBLAS needs hd % 8 == 0; otherwise ggml runs ggml_vec_dot_f16 */
            kq = hd % 8 ? muse_x86_dot_vec(hd, row, qf, 1) : muse_x86_dot_tinyblas(hd, row, qf);
        } else if (f32) {
            kq = muse_x86_dot_vec(hd, (const float *)kh, qh, 0);
        } else {
            tt->vec_dot_ref(hd, &kq, kh, qc);
        }
        scores[j] = kq;
    }
    muse_attn_softmax(scores, n, lo, a->scale, f16, NULL);
    /* out[d] = V[., d]·p: lane pos % 8 accumulates with FMA in increasing position, then hsum */
    memset(lanes, 0, sizeof(float) * 8 * (size_t)hd);
    for (int32_t j = 0; j < n; j++) {
        const uint8_t *vh = (const uint8_t *)kv->v + ((uint32_t)(lo + j) % kv->n_cells) * kv->v_row_size + (size_t)kvh * head_bytes;
        muse_x86_kv_to_float(kv->type, vh, row, hd);
        const int32_t lane = (lo + j) & 7;
        muse_x86_fma_lanes(lanes, row, scores[j], lane, hd); /* lanes[d][lane] = fma(V[d], p, .) */
    }
    float *oh = a->out + ((size_t)t * a->n_head + h) * hd;
    for (int32_t d = 0; d < hd; d++) oh[d] = muse_x86_hsum8(lanes + d * 8);
}

static void ref_attention(void *state, const struct muse_attn_args *a, int ith, int nth) {
    struct ref_state *s = state;
    MUSE_ASSERT(a->head_dim <= s->plan.max_head_dim && ith == 0 && nth == 1);
    for (int32_t t = 0; t < a->n_tokens; t++)
        for (int32_t h = 0; h < a->n_head; h++) {
            muse_attn_head_ref(a, t, h, s->scores, s->fscratch, s->qc);
            muse_attn_gate_head(a, t, h);
        }
}

/* Window attention: the plain-C kernel (the oracle of the SIMD one). */
static void ref_window_attention(void *state, const struct muse_window_attn_args *a, int ith, int nth) {
    muse_window_attn_share(a, muse_win_attn_rows_ref, ref_barrier, state, ith, nth);
}

const struct muse_backend_ops muse_backend_ref_ops = {
    .name = "ref",
    .init = ref_init,
    .free = ref_free,
    .parallel = ref_parallel,
    .barrier = ref_barrier,
    .matmul = ref_matmul,
    .attention = ref_attention,
    .window_attention = ref_window_attention,
};
