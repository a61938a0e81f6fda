/*
 * backend_numerics.c - the arithmetic every backend shares so that they agree bit for bit
 * (backend.h): the matmul epilogue (.scale, bias), the sigmoid attention gate and the attention
 * softmax (scale, max, ggml's vector exp, the optional F16 rounding of the probabilities).
 */
#include <math.h>

#include "backend/backend.h"
#include "core/fp16.h"
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
