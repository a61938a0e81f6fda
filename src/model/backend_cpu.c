/*
 * backend_cpu.c - the fast CPU backend ("cpu"): the ops of backend.h on a persistent thread
 * pool with the SIMD kernels of kernels/kernels.h (level chosen at start-up, MUSE_CPU forces one).
 *
 * matmul: one parallel region per call: every thread quantizes its share of the activation rows
 * (bit-identical to the reference quantizers), a barrier, then every thread computes a
 * contiguous share of the output rows (kernels/matmul.h; reference fallback per type). With
 * kernels marked exact (kernels.h) the results equal the ref backend's bit for bit, for any
 * thread count.
 * attention: the numerics of the ref backend bit for bit (llama.cpp's non-flash CPU path: q
 * rounded to the cache type's dot partner, softmax with exp/max/double sum, p rounded to F16 for
 * an F16 cache, V·p summed in double), split over (token, KV head, block of query heads) work
 * items; the query heads that share a KV head read each K/V row together (GQA); sliding-window
 * layers read only their window. An F16 cache uses the SIMD helpers of kernels.h.
 *
 * Everything is sized from the plan at init; the per-token path allocates nothing. Workers spin
 * briefly between regions, so the back-to-back regions of one forward do not sleep.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/types.h"
#include "model/backend.h"

#define ATTN_QB 8   /* query heads per attention work item */
/* Below this many multiply-adds an op runs on the calling thread alone: waking the pool costs
 * more than it saves (and a loaded machine may not schedule every worker promptly). The split
 * never changes results. */
#define MIN_PARALLEL_MACS (1 << 20)

/* Per-thread attention scratch. */
struct attn_scratch {
    float *scores;   /* [ATTN_QB][max_cells] */
    float *qf;       /* [ATTN_QB][max_head_dim] f32 queries; fast path: transposed [max_head_dim][ATTN_QB] */
    double *acc;     /* [ATTN_QB][max_head_dim] */
    uint8_t *qc;     /* [4 * max_head_dim + 64] one query head in the dot partner type */
    float *vrow;     /* [max_head_dim] */
    double *dacc;    /* [max_head_dim] */
};

struct cpu_state {
    struct muse_backend_plan plan;
    const struct muse_kernels *k;
    struct muse_threadpool *pool;
    uint8_t *xq;               /* [n_batch][xq_stride] activation rows in vec_dot_type */
    size_t xq_stride;
    struct attn_scratch *ts;   /* [n_threads] */

    /* arguments of the region in flight */
    const struct muse_weight *mm_w;
    const float *mm_x;
    int32_t mm_rows;
    float *mm_y;
    const struct muse_attn_args *at;
};

static void cpu_free(void *state) {
    struct cpu_state *s = state;
    if (!s) return;
    muse_threadpool_free(s->pool);
    if (s->ts) {
        for (int i = 0; i < s->plan.n_threads; i++) {
            free(s->ts[i].scores);
            free(s->ts[i].qf);
            free(s->ts[i].acc);
            free(s->ts[i].qc);
            free(s->ts[i].vrow);
            free(s->ts[i].dacc);
        }
        free(s->ts);
    }
    free(s->xq);
    free(s);
}

static muse_status cpu_init(const struct muse_backend_plan *plan, void **state, struct muse_error *err) {
    muse_status st = MUSE_ERR_NOMEM;
    struct cpu_state *s = calloc(1, sizeof *s);
    if (!s) goto fail;
    s->plan = *plan;
    if (s->plan.n_threads <= 0) s->plan.n_threads = muse_cpu_features()->n_physical;
    s->k = muse_kernels_active();
    if ((st = muse_threadpool_create(s->plan.n_threads, &s->pool, err))) goto fail;
    st = MUSE_ERR_NOMEM;
    s->xq_stride = ((size_t)plan->max_ne0 * 4 + 64 + 63) & ~(size_t)63;
    s->xq = malloc((size_t)plan->n_batch * s->xq_stride);
    s->ts = calloc((size_t)s->plan.n_threads, sizeof *s->ts);
    if (!s->xq || !s->ts) goto fail;
    const size_t cells = plan->max_cells ? plan->max_cells : 1, hd = (size_t)plan->max_head_dim;
    for (int i = 0; i < s->plan.n_threads; i++) {
        struct attn_scratch *t = &s->ts[i];
        t->scores = malloc(sizeof(float) * ATTN_QB * cells);
        t->qf = malloc(sizeof(float) * ATTN_QB * hd);
        t->acc = malloc(sizeof(double) * ATTN_QB * hd);
        t->qc = malloc(hd * 4 + 64);
        t->vrow = malloc(sizeof(float) * hd);
        t->dacc = malloc(sizeof(double) * hd);
        if (!t->scores || !t->qf || !t->acc || !t->qc || !t->vrow || !t->dacc) goto fail;
    }
    *state = s;
    return MUSE_OK;
fail:
    cpu_free(s);
    if (st == MUSE_ERR_NOMEM) return muse_error_set(err, MUSE_ERR_NOMEM, "cpu backend: out of memory for scratch buffers");
    return muse_error_prefix(err, "cpu backend: ");
}

// ---- matmul ----------------------------------------------------------------------------------

static void matmul_region(int ith, int nth, void *vs) {
    struct cpu_state *s = vs;
    const struct muse_weight *w = s->mm_w;
    muse_matmul_quantize(s->k, w->type, w->ne0, s->mm_x, w->ne0, s->mm_rows, s->xq, s->xq_stride, ith, nth);
    if (nth > 1) muse_threadpool_barrier(s->pool);
    const struct muse_matmul_weight mw = {w->type, w->ne0, w->ne1, w->data, w->row_size};
    muse_matmul(s->k, &mw, s->xq, s->xq_stride, s->mm_rows, s->mm_y, w->ne1, ith, nth);
}

static void cpu_matmul(void *state, const struct muse_weight *w, const float *x, int32_t n_rows, float *y) {
    struct cpu_state *s = state;
    MUSE_ASSERT(n_rows <= s->plan.n_batch && w->ne0 <= s->plan.max_ne0 && muse_matmul_supported(w->type, w->ne0));
    s->mm_w = w;
    s->mm_x = x;
    s->mm_rows = n_rows;
    s->mm_y = y;
    if ((double)w->ne0 * (double)w->ne1 * n_rows < MIN_PARALLEL_MACS) matmul_region(0, 1, s);
    else muse_threadpool_run(s->pool, matmul_region, s);
}

// ---- attention --------------------------------------------------------------------------------

/* Visible keys of the query at position p: positions lo..p (the window on SWA layers). */
static int32_t attn_lo(const struct muse_attn_args *a, int32_t p) {
    return a->n_swa > 0 && p - a->n_swa + 1 > 0 ? p - a->n_swa + 1 : 0;
}

/* Scores of nq query heads (qf / qc prepared) against keys lo..p of KV head kvh. */
static void attn_scores(const struct cpu_state *s, struct attn_scratch *t, const struct muse_attn_args *a,
                        int32_t kvh, int32_t nq, int32_t lo, int32_t n, bool fast, int64_t s_stride) {
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const size_t head_bytes = muse_type_row_size(kv->type, hd);
    if (fast) {
        /* the visible cells form at most two contiguous runs of the ring */
        int32_t j = 0;
        while (j < n) {
            uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
            int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
            const uint8_t *k0 = (const uint8_t *)kv->k + cell * kv->k_row_size + (size_t)kvh * head_bytes;
            s->k->attn_kq_f16(hd, run, k0, kv->k_row_size, t->qf, nq, t->scores + j, s_stride);
            j += run;
        }
        return;
    }
    const struct muse_type_traits *kt = &muse_type_traits[kv->type];
    const enum muse_type qt = kt->vec_dot_type;
    for (int32_t i = 0; i < nq; i++) {
        const void *qc = t->qf + (size_t)i * hd;
        if (qt != MUSE_TYPE_F32) {
            /* qf holds the f32 query for the generic path; convert it to the dot partner */
            muse_type_traits[qt].from_float(t->qf + (size_t)i * hd, t->qc, hd);
            qc = t->qc;
        }
        for (int32_t j = 0; j < n; j++) {
            uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
            const uint8_t *kh = (const uint8_t *)kv->k + cell * kv->k_row_size + (size_t)kvh * head_bytes;
            kt->vec_dot_ref(hd, &t->scores[(int64_t)i * s_stride + j], kh, qc);
        }
    }
}

static void attn_item(const struct cpu_state *s, struct attn_scratch *t, const struct muse_attn_args *a, int32_t tok,
                      int32_t kvh, int32_t h0, int32_t nq) {
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const int32_t p = a->pos[tok];
    const int32_t lo = attn_lo(a, p);
    const int32_t n = p - lo + 1;
    MUSE_ASSERT(n >= 1 && (uint32_t)n <= kv->n_cells);
    const bool f16 = kv->type == MUSE_TYPE_F16;
    const bool fast = f16 && s->k->attn_kq_f16 && s->k->attn_pv_f16 && hd % 16 == 0 && hd <= 512;
    const int64_t s_stride = n;

    /* queries: f32 rows for the generic path (converted there); for the fast path rounded to F16
     * (the reference's from_float) and transposed: qf[d * nq4 + i] */
    const int32_t nq4 = (nq + 3) & ~3;
    if (fast) memset(t->qf, 0, sizeof(float) * (size_t)hd * nq4);
    for (int32_t i = 0; i < nq; i++) {
        const float *qh = a->q + ((size_t)tok * a->n_head + h0 + i) * hd;
        if (fast) for (int32_t d = 0; d < hd; d++) t->qf[(size_t)d * nq4 + i] = muse_fp16_to_fp32(muse_fp32_to_fp16(qh[d]));
        else memcpy(t->qf + (size_t)i * hd, qh, sizeof(float) * (size_t)hd);
    }
    attn_scores(s, t, a, kvh, nq, lo, n, fast, s_stride);

    /* softmax per head, as the reference: exp(w - max), sum in double, times the f32 reciprocal */
    for (int32_t i = 0; i < nq; i++) {
        float *sc = t->scores + (int64_t)i * s_stride;
        float max = -INFINITY;
        for (int32_t j = 0; j < n; j++) {
            sc[j] *= a->scale;
            if (sc[j] > max) max = sc[j];
        }
        double sum = 0.0;
        for (int32_t j = 0; j < n; j++) {
            float e = expf(sc[j] - max);
            sum += (double)e;
            sc[j] = e;
        }
        const float inv = (float)(1.0 / sum);
        for (int32_t j = 0; j < n; j++) {
            float pj = sc[j] * inv;
            sc[j] = f16 ? muse_fp16_to_fp32(muse_fp32_to_fp16(pj)) : pj;
        }
    }

    const size_t head_bytes = muse_type_row_size(kv->type, hd);
    if (fast) {
        memset(t->acc, 0, sizeof(double) * (size_t)nq * hd);
        int32_t j = 0;
        while (j < n) {
            uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
            int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
            const uint8_t *v0 = (const uint8_t *)kv->v + cell * kv->v_row_size + (size_t)kvh * head_bytes;
            s->k->attn_pv_f16(hd, run, v0, kv->v_row_size, t->scores + j, s_stride, nq, t->acc);
            j += run;
        }
        for (int32_t i = 0; i < nq; i++) {
            float *oh = a->out + ((size_t)tok * a->n_head + h0 + i) * hd;
            for (int32_t d = 0; d < hd; d++) oh[d] = (float)t->acc[(size_t)i * hd + d];
        }
        return;
    }
    const struct muse_type_traits *vt = &muse_type_traits[kv->type];
    for (int32_t i = 0; i < nq; i++) {
        const float *sc = t->scores + (int64_t)i * s_stride;
        for (int32_t d = 0; d < hd; d++) t->dacc[d] = 0.0;
        for (int32_t j = 0; j < n; j++) {
            uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
            const uint8_t *vh = (const uint8_t *)kv->v + cell * kv->v_row_size + (size_t)kvh * head_bytes;
            vt->to_float(vh, t->vrow, hd);
            for (int32_t d = 0; d < hd; d++) t->dacc[d] += (double)(sc[j] * t->vrow[d]);
        }
        float *oh = a->out + ((size_t)tok * a->n_head + h0 + i) * hd;
        for (int32_t d = 0; d < hd; d++) oh[d] = (float)t->dacc[d];
    }
}

/* Sum over the queries of the visible keys (for the serial/parallel choice). */
static double attn_work(const struct muse_attn_args *a) {
    double keys = 0;
    for (int32_t t = 0; t < a->n_tokens; t++) keys += a->pos[t] - attn_lo(a, a->pos[t]) + 1;
    return keys * a->n_head * a->head_dim * 2.0;
}

static void attention_region(int ith, int nth, void *vs) {
    struct cpu_state *s = vs;
    const struct muse_attn_args *a = s->at;
    const int32_t group = a->n_head / a->n_head_kv;
    const int32_t n_qb = (group + ATTN_QB - 1) / ATTN_QB;
    const int64_t n_items = (int64_t)a->n_tokens * a->n_head_kv * n_qb;
    for (int64_t it = ith; it < n_items; it += nth) {
        const int32_t qb = (int32_t)(it % n_qb);
        const int32_t kvh = (int32_t)((it / n_qb) % a->n_head_kv);
        const int32_t tok = (int32_t)(it / ((int64_t)n_qb * a->n_head_kv));
        const int32_t h0 = kvh * group + qb * ATTN_QB;
        const int32_t nq = group - qb * ATTN_QB < ATTN_QB ? group - qb * ATTN_QB : ATTN_QB;
        attn_item(s, &s->ts[ith], a, tok, kvh, h0, nq);
    }
}

static void cpu_attention(void *state, const struct muse_attn_args *args) {
    struct cpu_state *s = state;
    MUSE_ASSERT(args->head_dim <= s->plan.max_head_dim && args->n_head % args->n_head_kv == 0);
    s->at = args;
    if (attn_work(args) < MIN_PARALLEL_MACS) attention_region(0, 1, s);
    else muse_threadpool_run(s->pool, attention_region, s);
}

const struct muse_backend_ops muse_backend_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .matmul = cpu_matmul,
    .attention = cpu_attention,
};
