/*
 * backend_numerics.c - the arithmetic every backend shares so that they agree bit for bit
 * (backend.h): the matmul epilogue (.scale, bias), the sigmoid attention gate and the attention
 * softmax (scale, max, ggml's vector exp, the optional F16 rounding of the probabilities), and
 * the window attention's driver (key packing and work items around a kernels.h row kernel).
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/x86_numerics.h"

void muse_matmul_job_epilogue(const struct muse_matmul_job *j, int32_t n_rows, int64_t i0, int64_t i1) {
    const int64_t ne1 = j->w.ne1;
    if (!j->has_scale && !j->bias) return;
    for (int32_t r = 0; r < n_rows; r++) {
        float *y = j->y + (size_t)r * ne1;
        if (j->has_scale)
            for (int64_t i = i0; i < i1; i++) y[i] = y[i] * j->scale;
        if (j->bias)
            for (int64_t i = i0; i < i1; i++) y[i] = y[i] + j->bias[i];
    }
}

void muse_attn_gate_head(const struct muse_attn_args *a, int32_t t, int32_t h) {
    if (!a->gate) return;
    const size_t off = ((size_t)t * a->n_head + h) * a->head_dim;
    float *o = a->out + off;
    const float *g = a->gate + off;
    for (int32_t d = 0; d < a->head_dim; d++) o[d] = o[d] * (1.0f / (1.0f + expf(-g[d])));
}

void muse_attn_softmax(float *scores, int32_t n, int32_t lo, float scale, bool round_f16,
                       void (*probs_f16)(int32_t n, float inv, float *p)) {
    float max = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        scores[j] = scores[j] * scale;
        if (scores[j] > max) max = scores[j];
    }
    const float inv = (float)(1.0 / muse_x86_softmax_exp(scores, n, lo, max));
    if (round_f16 && probs_f16) {
        probs_f16(n, inv, scores);
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        const float pj = scores[j] * inv;
        scores[j] = round_f16 ? muse_fp16_to_fp32(muse_fp32_to_fp16(pj)) : pj;
    }
}

// ---- window attention ---------------------------------------------------------------------------

#define WIN_BLOCK 48 /* query rows per window-attention work item (a multiple of the SIMD tile) */

/* The scratch: [16 floats: the work counter][n_head][n_panels][head_dim][KPANEL] packed keys
 * [n_head][n_rows][head_dim] the values per head (a head's keys and values are contiguous: the
 * global layers stream them) [nth][per-thread score rows], each part a multiple of 16 floats. */
static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

static int32_t win_panels(int32_t n_rows) { return (n_rows + MUSE_WIN_KPANEL - 1) / MUSE_WIN_KPANEL; }

size_t muse_window_attn_scratch(int32_t n_rows, int32_t n_head, int32_t head_dim, int nth) {
    const size_t kp = (size_t)n_head * (size_t)win_panels(n_rows) * (size_t)head_dim * MUSE_WIN_KPANEL;
    return 16 + r16(kp) + r16((size_t)n_head * (size_t)n_rows * (size_t)head_dim) +
           (size_t)nth * r16(muse_win_attn_scratch(n_rows));
}

void muse_window_attn_share(const struct muse_window_attn_args *a,
                            void (*rows)(const struct muse_win_attn *, int32_t, int32_t, float *),
                            void (*barrier)(void *), void *bs, int ith, int nth) {
    const int32_t hd = a->head_dim, n_panels = win_panels(a->n_rows);
    int *next = (int *)a->scratch; /* the next unclaimed item */
    float *kp = a->scratch + 16;
    const size_t head_floats = (size_t)n_panels * (size_t)hd * MUSE_WIN_KPANEL;
    float *vp = kp + r16((size_t)a->n_head * head_floats);
    float *scr = vp + r16((size_t)a->n_head * (size_t)a->n_rows * (size_t)hd) +
                 (size_t)ith * r16(muse_win_attn_scratch(a->n_rows));
    /* this thread's rows' keys into the panels of every head, its values into each head's rows;
     * thread 0 zeroes the last panel's tail (the SIMD kernel reads whole panels) and the counter */
    for (int32_t i = ith; i < a->n_rows; i += nth) {
        const float *k = a->k + (size_t)i * (size_t)a->ld;
        for (int32_t h = 0; h < a->n_head; h++) {
            float *dst = kp + (size_t)h * head_floats + ((size_t)(i / MUSE_WIN_KPANEL) * hd) * MUSE_WIN_KPANEL +
                         i % MUSE_WIN_KPANEL;
            for (int32_t d = 0; d < hd; d++) dst[(size_t)d * MUSE_WIN_KPANEL] = k[(size_t)h * hd + d];
            memcpy(vp + ((size_t)h * a->n_rows + (size_t)i) * hd, a->v + (size_t)i * (size_t)a->ld + (size_t)h * hd,
                   sizeof(float) * (size_t)hd);
        }
    }
    if (ith == 0) {
        __atomic_store_n(next, 0, __ATOMIC_RELAXED);
        for (int32_t i = a->n_rows; i < n_panels * MUSE_WIN_KPANEL; i++)
            for (int32_t h = 0; h < a->n_head; h++) {
                float *dst = kp + (size_t)h * head_floats + ((size_t)(i / MUSE_WIN_KPANEL) * hd) * MUSE_WIN_KPANEL +
                             i % MUSE_WIN_KPANEL;
                for (int32_t d = 0; d < hd; d++) dst[(size_t)d * MUSE_WIN_KPANEL] = 0.0f;
            }
    }
    barrier(bs);
    /* items: window-major, then head, then blocks of WIN_BLOCK rows (consecutive items share keys
     * and values in cache); a thread's claims increase, so its window cursor only moves forward */
    int32_t s = 0, base = 0;
    for (;;) {
        const int32_t it = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
        int32_t nb = 0;
        for (; s < a->n_seg; s++) {
            nb = (a->seg[s + 1] - a->seg[s] + WIN_BLOCK - 1) / WIN_BLOCK;
            if (it < base + a->n_head * nb) break;
            base += a->n_head * nb;
        }
        if (s >= a->n_seg) break;
        const int32_t local = it - base, head = local / nb, s0 = a->seg[s];
        const int32_t i0 = s0 + (local % nb) * WIN_BLOCK, n = a->seg[s + 1] - s0;
        const int32_t i1 = i0 + WIN_BLOCK < s0 + n ? i0 + WIN_BLOCK : s0 + n;
        const struct muse_win_attn w = {
            .q = a->q, .ld = a->ld, .hd = hd, .head = head, .s0 = s0, .n = n, .scale = a->scale,
            .v = vp + (size_t)head * a->n_rows * hd, .v_ld = hd, .kp = kp + (size_t)head * head_floats,
        };
        rows(&w, i0, i1, scr);
    }
}
