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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/types.h"
#include "model/backend.h"

struct ref_state {
    struct muse_backend_plan plan;
    uint8_t *xq;      /* [n_batch][4 * max_ne0 bytes]: activation rows in vec_dot_type */
    size_t xq_stride; /* bytes per row of xq */
    float *scores;    /* [max_cells] */
    float *vrow;      /* [max_head_dim] one dequantized V head */
    double *acc;      /* [max_head_dim] */
    uint8_t *qc;      /* [4 * max_head_dim + 64] one query head in the K cache's dot partner */
};

static void ref_free(void *state) {
    struct ref_state *s = state;
    if (!s) return;
    free(s->xq);
    free(s->scores);
    free(s->vrow);
    free(s->acc);
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
    s->vrow = malloc(sizeof(float) * (size_t)plan->max_head_dim);
    s->acc = malloc(sizeof(double) * (size_t)plan->max_head_dim);
    s->qc = malloc((size_t)plan->max_head_dim * 4 + 64);
    if (!s->xq || !s->scores || !s->vrow || !s->acc || !s->qc) goto fail;
    *state = s;
    return MUSE_OK;
fail:
    ref_free(s);
    return muse_error_set(err, MUSE_ERR_NOMEM, "ref backend: out of memory for scratch buffers");
}

// ---- matmul ----------------------------------------------------------------------------------

static void ref_matmul(void *state, const struct muse_weight *w, const float *x, int32_t n_rows, float *y) {
    struct ref_state *s = state;
    const struct muse_type_traits *wt = &muse_type_traits[w->type];
    enum muse_type vt = wt->vec_dot_type;
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    MUSE_ASSERT(n_rows <= s->plan.n_batch && ne0 <= s->plan.max_ne0 && wt->vec_dot_ref);

    /* convert the activation rows once: x [n_rows][ne0] f32 -> xq [n_rows][row in vt] */
    const uint8_t *xq = (const uint8_t *)x;
    size_t xq_stride = (size_t)ne0 * sizeof(float);
    if (vt != MUSE_TYPE_F32) {
        for (int32_t r = 0; r < n_rows; r++) muse_type_traits[vt].from_float(x + (size_t)r * ne0, s->xq + r * s->xq_stride, ne0);
        xq = s->xq;
        xq_stride = s->xq_stride;
    }
    /* weight row outer, activation row inner: each weight row is read once per call */
    const uint8_t *wrow = w->data;
    for (int64_t i = 0; i < ne1; i++, wrow += w->row_size)
        for (int32_t r = 0; r < n_rows; r++) wt->vec_dot_ref(ne0, &y[(size_t)r * ne1 + i], wrow, xq + r * xq_stride);
}

// ---- attention --------------------------------------------------------------------------------

static void ref_attention(void *state, const struct muse_attn_args *a) {
    struct ref_state *s = state;
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const int32_t group = a->n_head / a->n_head_kv;
    const struct muse_type_traits *kt = &muse_type_traits[kv->type];
    const struct muse_type_traits *vtr = &muse_type_traits[kv->type];
    const enum muse_type qt = kt->vec_dot_type;  /* F16 -> F16, F32 -> F32, Q8_0 -> Q8_0 */
    const size_t head_bytes = muse_type_row_size(kv->type, hd);
    const bool v_f16 = kv->type == MUSE_TYPE_F16; /* ggml rounds p to F16 before V·p */
    MUSE_ASSERT(hd <= s->plan.max_head_dim);

    for (int32_t t = 0; t < a->n_tokens; t++) {
        const int32_t p = a->pos[t];
        const int32_t lo = a->n_swa > 0 && p - a->n_swa + 1 > 0 ? p - a->n_swa + 1 : 0;
        const int32_t n = p - lo + 1; /* visible keys: positions lo..p */
        MUSE_ASSERT(n >= 1 && (uint32_t)n <= kv->n_cells);
        for (int32_t h = 0; h < a->n_head; h++) {
            const int32_t kvh = h / group;
            const float *qh = a->q + ((size_t)t * a->n_head + h) * hd;
            const void *qc = qh;
            if (qt != MUSE_TYPE_F32) {
                muse_type_traits[qt].from_float(qh, s->qc, hd);
                qc = s->qc;
            }
            /* kq = K·q, scaled; the mask adds 0 for visible keys */
            float max = -INFINITY;
            for (int32_t j = 0; j < n; j++) {
                uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
                const uint8_t *kh = (const uint8_t *)kv->k + cell * kv->k_row_size + (size_t)kvh * head_bytes;
                float kq;
                kt->vec_dot_ref(hd, &kq, kh, qc);
                float w = kq * a->scale;
                s->scores[j] = w;
                if (w > max) max = w;
            }
            /* softmax: exp(w - max), sum in double, multiply by the f32 reciprocal */
            double sum = 0.0;
            for (int32_t j = 0; j < n; j++) {
                float e = expf(s->scores[j] - max);
                sum += (double)e;
                s->scores[j] = e;
            }
            const float inv = (float)(1.0 / sum);
            for (int32_t j = 0; j < n; j++) {
                float pj = s->scores[j] * inv;
                s->scores[j] = v_f16 ? muse_fp16_to_fp32(muse_fp32_to_fp16(pj)) : pj;
            }
            /* out = V·p, each product in f32 (exact for F16 operands), accumulated in double */
            for (int32_t d = 0; d < hd; d++) s->acc[d] = 0.0;
            for (int32_t j = 0; j < n; j++) {
                uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
                const uint8_t *vh = (const uint8_t *)kv->v + cell * kv->v_row_size + (size_t)kvh * head_bytes;
                vtr->to_float(vh, s->vrow, hd);
                const float pj = s->scores[j];
                for (int32_t d = 0; d < hd; d++) s->acc[d] += (double)(pj * s->vrow[d]);
            }
            float *oh = a->out + ((size_t)t * a->n_head + h) * hd;
            for (int32_t d = 0; d < hd; d++) oh[d] = (float)s->acc[d];
        }
    }
}

const struct muse_backend_ops muse_backend_ref_ops = {
    .name = "ref",
    .init = ref_init,
    .free = ref_free,
    .matmul = ref_matmul,
    .attention = ref_attention,
};
