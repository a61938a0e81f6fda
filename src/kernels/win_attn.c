/*
 * win_attn.c - the plain-C window attention (the vision tower's; the ref backend's, and the oracle of
 * x86/win_attn_avx2.c). See kernels.h for the numerics both follow: each score and each output
 * channel is one fmaf chain in a fixed order, so the SIMD kernel, which keeps one chain per lane,
 * reproduces it bit for bit.
 */
#include <math.h>
#include <string.h>

#include "kernels/x86_numerics.h"
#include "kernels/kernels.h"

size_t muse_win_attn_scratch(int32_t n) {
    /* R rows of scores from the panel before s0 to past the window's last panel, plus 8 floats of
     * slack for the SIMD kernel's masked tail */
    const size_t stride = ((size_t)n + 3 * MUSE_WIN_KPANEL + 7) & ~(size_t)7;
    return MUSE_WIN_ATTN_TILE * stride + 64;
}

void muse_win_attn_rows_ref(const struct muse_win_attn *a, int32_t i0, int32_t i1, float *scratch) {
    const int32_t hd = a->hd, s0 = a->s0, n = a->n;
    float *e = scratch; /* [n] */
    for (int32_t i = i0; i < i1; i++) {
        float *qi = a->q + (size_t)i * a->ld + (size_t)a->head * hd;
        float mx = -INFINITY;
        for (int32_t j = 0; j < n; j++) {
            const int32_t key = s0 + j;
            const float *kp = a->kp + ((size_t)(key / MUSE_WIN_KPANEL) * hd) * MUSE_WIN_KPANEL + key % MUSE_WIN_KPANEL;
            float acc = 0.0f;
            for (int32_t d = 0; d < hd; d++) acc = fmaf(qi[d], kp[(size_t)d * MUSE_WIN_KPANEL], acc);
            e[j] = acc * a->scale;
            if (e[j] > mx) mx = e[j];
        }
        float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int32_t j = 0; j < n; j++) {
            e[j] = muse_x86_expf(e[j] - mx);
            lanes[j % 8] += e[j];
        }
        const float inv = 1.0f / muse_x86_hsum8(lanes);
        for (int32_t d = 0; d < hd; d++) {
            float acc = 0.0f;
            for (int32_t j = 0; j < n; j++) acc = fmaf(e[j], a->v[(size_t)(s0 + j) * a->v_ld + d], acc);
            qi[d] = acc * inv; /* q[i] is no longer needed: its scores are done */
        }
    }
}
