/*
 * flash_lab.c - one flash-attention call (kernels.h muse_attn_flash_fn) timed by itself on one
 * thread, for A/B work on the batched attention of prefill at depth: R query rows (n_tok tokens x
 * nq heads of one KV head, the last n_tok positions before DEPTH) over a cache of DEPTH keys, the
 * best call by this thread's CPU time. Prints a hash of the outputs' bits, so that two builds can
 * be seen to give the same values.
 *
 *   build/bench/flash_lab [-t f32|f16|q8_0] [-d HD,...] [-k DEPTH] [-n N_TOK] [-q NQ] [-w N_SWA] [-r CALLS]
 *
 * Defaults: f32, head sizes 64 and 128, 32768 keys, 64 tokens x 2 heads (128 rows), full
 * attention, best of 5 calls. MUSE_CPU=avx2|avx512 picks the level.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "core/fp16.h"
#include "kernels/kernel_random.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* FNV-1a over the output floats' bits */
static uint64_t hash_bits(const float *x, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint8_t *b = (const uint8_t *)x;
    for (size_t i = 0; i < 4 * n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

int main(int argc, char **argv) {
    const char *type_name = "f32", *hds = "64,128";
    int32_t depth = 32768, n_tok = 64, nq = 2, n_swa = 0;
    int calls = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) type_name = argv[++i];
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) hds = argv[++i];
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-q") && i + 1 < argc) nq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) n_swa = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) calls = atoi(argv[++i]);
        else goto usage;
    }
    const int type = !strcmp(type_name, "f32") ? MUSE_TYPE_F32 : !strcmp(type_name, "f16") ? MUSE_TYPE_F16
                     : !strcmp(type_name, "q8_0")                                         ? MUSE_TYPE_Q8_0
                                                                                          : -1;
    if (type < 0 || depth < n_tok || n_tok < 1 || nq < 1 || n_swa < 0 || calls < 1) goto usage;
    const struct muse_kernels *k = muse_kernels_active();
    muse_attn_flash_fn fn = type == MUSE_TYPE_F32 ? k->attn_flash_f32 : type == MUSE_TYPE_F16 ? k->attn_flash_f16 : k->attn_flash_q8_0;
    if (!fn) {
        printf("flash lab: no flash attention for %s at level %s\n", type_name, muse_cpu_level_name(k->level));
        return 1;
    }
    printf("flash lab: level %s, %s cache, %d keys, %d tokens x %d heads = %d rows, swa %d, best of %d calls "
           "(thread CPU time)\n",
           muse_cpu_level_name(k->level), type_name, depth, n_tok, nq, n_tok * nq, n_swa, calls);
    char list[128];
    snprintf(list, sizeof list, "%s", hds);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int32_t hd = atoi(tok);
        if (hd < 32 || hd % 32) {
            printf("hd %d: not a multiple of 32\n", hd);
            continue;
        }
        const size_t row = muse_type_row_size((enum muse_type)type, hd);
        uint8_t *kc = malloc(row * (size_t)depth), *vc = malloc(row * (size_t)depth);
        const size_t stride = (size_t)nq * hd;
        float *q = malloc(sizeof(float) * stride * (size_t)n_tok), *out = malloc(sizeof(float) * stride * (size_t)n_tok);
        float *x = malloc(sizeof(float) * (size_t)hd);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
        const size_t sb = k->attn_flash_scratch(hd, n_tok * nq, (uint32_t)depth);
        void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
        if (!kc || !vc || !q || !out || !x || !pos || !scratch) return 1;
        for (int32_t c = 0; c < 2 * depth; c++) {
            for (int32_t i = 0; i < hd; i++) x[i] = kr_float();
            uint8_t *dst = (c < depth ? kc : vc) + (size_t)(c % depth) * row;
            if (type == MUSE_TYPE_F16)
                for (int32_t i = 0; i < hd; i++) ((uint16_t *)dst)[i] = muse_fp32_to_fp16(x[i]);
            else if (type == MUSE_TYPE_F32) memcpy(dst, x, row);
            else muse_type_traits[type].from_float(x, dst, hd);
        }
        for (size_t i = 0; i < stride * (size_t)n_tok; i++) q[i] = 2.0f * kr_float();
        for (int32_t t = 0; t < n_tok; t++) pos[t] = depth - n_tok + t;
        const struct muse_attn_flash f = {
            .hd = hd, .n_tok = n_tok, .nq = nq, .q = q, .q_tstride = stride, .out = out, .o_tstride = stride,
            .pos = pos, .n_swa = n_swa, .k = kc, .v = vc, .k_stride = row, .v_stride = row,
            .n_cells = (uint32_t)depth, .scale = 1.0f / sqrtf((float)hd),
        };
        double best = INFINITY;
        for (int c = 0; c < calls; c++) {
            const double t0 = thread_seconds();
            fn(&f, scratch);
            const double dt = thread_seconds() - t0;
            best = dt < best ? dt : best;
        }
        /* the keys the rows see, summed over the rows: two MACs per key and head element */
        double keys = 0;
        for (int32_t t = 0; t < n_tok; t++) keys += n_swa > 0 && pos[t] + 1 > n_swa ? n_swa : pos[t] + 1;
        const double macs = 2.0 * keys * nq * hd;
        printf("hd %3d: %9.3f ms per call, %6.2f GMAC/s (QK and PV), outputs %016llx\n", hd, best * 1e3,
               macs / best * 1e-9, (unsigned long long)hash_bits(out, stride * (size_t)n_tok));
        free(kc);
        free(vc);
        free(q);
        free(out);
        free(x);
        free(pos);
        free(scratch);
    }
    return 0;
usage:
    fprintf(stderr, "usage: flash_lab [-t f32|f16|q8_0] [-d HD,...] [-k DEPTH] [-n N_TOK] [-q NQ] [-w N_SWA] [-r CALLS]\n");
    return 2;
}
