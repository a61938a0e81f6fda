/*
 * test_win_attn.c - the window-attention kernels (kernels.h): the AVX2 one (x86/win_attn_avx2.c)
 * against the plain-C oracle (win_attn.c) bit for bit, over odd windows at unaligned starts,
 * every tile size and several head dims, and its vector exp against muse_x86_expf.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/kernels.h"
#include "kernels/x86/kernels_isa.h"
#include "kernels/x86_numerics.h"
#include "test.h"

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_kernels(void) {
    if (muse_cpu_level_max() < MUSE_CPU_LEVEL_AVX2) {
        printf("no AVX2: the SIMD attention kernel is not run on this machine\n");
        return;
    }
    /* exp: a sweep over the fast and the slow paths (|n| > 126, > 192) */
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x[8], y[8];
        for (int l = 0; l < 8; l++) x[l] = (float)((i * 8 + l) - 800000) * 2.5e-4f * (i % 3 ? 1.0f : 0.9f);
        muse_expf8_avx2(x, y);
        for (int l = 0; l < 8; l++) bad += memcmp(&y[l], &(float){muse_x86_expf(x[l])}, 4) != 0;
    }
    TEST_CONDF(bad == 0, "vector exp differs from muse_x86_expf in %d lanes", bad);
    /* attention: odd windows at unaligned starts, every tile size, head dims 8, 16, 24, 96 */
    static const int32_t hds[] = {8, 16, 24, 96};
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        const int32_t hd = hds[h], n_head = 2, D = hd * n_head, n_tok = 83;
        const int32_t n_panels = (n_tok + 15) / 16;
        float *q = aligned_alloc(64, sizeof(float) * (size_t)n_tok * D), *q2 = aligned_alloc(64, sizeof(float) * (size_t)n_tok * D);
        float *v = aligned_alloc(64, sizeof(float) * (size_t)n_tok * D);
        float *kp = aligned_alloc(64, sizeof(float) * (size_t)n_head * n_panels * hd * 16);
        for (int32_t i = 0; i < n_tok * D; i++) q[i] = 3 * frand(), v[i] = frand();
        for (int32_t i = 0; i < n_head * n_panels * hd * 16; i++) kp[i] = frand();
        memcpy(q2, q, sizeof(float) * (size_t)n_tok * D);
        float *scr = malloc(sizeof(float) * muse_win_attn_scratch(n_tok));
        static const int32_t win[][2] = {{0, 83}, {5, 1}, {7, 30}, {16, 16}, {21, 7}, {40, 43}, {3, 13}};
        for (size_t w = 0; w < sizeof win / sizeof win[0]; w++)
            for (int32_t head = 0; head < n_head; head++) {
                struct muse_win_attn a = {q, v + (size_t)head * hd, kp + (size_t)head * n_panels * hd * 16, D, D, hd, head,
                                             win[w][0], win[w][1], 0.3f};
                struct muse_win_attn b = a;
                b.q = q2;
                for (int32_t i0 = a.s0; i0 < a.s0 + a.n; i0 += 7) { /* blocks of 7 rows: tiles of 6 and 1 */
                    const int32_t i1 = i0 + 7 < a.s0 + a.n ? i0 + 7 : a.s0 + a.n;
                    muse_win_attn_rows_ref(&a, i0, i1, scr);
                    muse_win_attn_rows_avx2(&b, i0, i1, scr);
                }
            }
        TEST_CONDF(!memcmp(q, q2, sizeof(float) * (size_t)n_tok * D), "attention hd %d: AVX2 differs from plain C", hd);
        free(q), free(q2), free(v), free(kp), free(scr);
    }
}

int main(void) {
    test_kernels();
    return TEST_REPORT();
}
