/* model_opts.c - options shared by `muse run` and `muse logits` (model_opts.h). */
#include "model_opts.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

void model_opts_init(struct model_opts *o) {
    memset(o, 0, sizeof *o);
    o->cparams = muse_context_default_params();
}

int model_opts_parse(struct model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v;
    int64_t n;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        o->model_path = v;
        return 1;
    }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        if (!(v = cli_next(argc, argv, i)) || !cli_parse_int(a, v, 1, 1 << 24, &n)) return -1;
        o->cparams.n_ctx = (uint32_t)n;
        return 1;
    }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
        if (!(v = cli_next(argc, argv, i)) || !cli_parse_int(a, v, 1, 1 << 16, &n)) return -1;
        o->cparams.n_batch = (uint32_t)n;
        return 1;
    }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (!(v = cli_next(argc, argv, i)) || !cli_parse_int(a, v, 1, 1024, &n)) return -1;
        o->cparams.n_threads = (uint32_t)n;
        return 1;
    }
    if (!strcmp(a, "--kv")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        int k = muse_kv_type_from_name(v);
        if (k >= 0) {
            o->cparams.kv_type = (enum muse_kv_type)k;
            return 1;
        }
        fprintf(stderr, "muse: bad value for --kv: '%s' (expected f16, f32 or q8_0)\n", v);
        return -1;
    }
    if (!strcmp(a, "--backend")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        o->cparams.backend = v;
        return 1;
    }
    if (!strcmp(a, "--swa-full")) {
        o->cparams.swa_full = 1;
        return 1;
    }
    if (!strcmp(a, "--no-repack")) {
        o->cparams.no_repack = 1;
        return 1;
    }
    return 0;
}

void model_opts_usage(FILE *f) {
    fprintf(f,
            "  -m, --model FILE     Muse-Glimmer text GGUF (required)\n"
            "  -c, --ctx-size N     context positions (default: min(4096, the model's context_length))\n"
            "  -b, --batch N        prompt chunk size, tokens per forward (default 512)\n"
            "  -t, --threads N      threads for the backend (default: physical cores; the ref backend uses 1)\n"
            "  --kv f16|f32|q8_0    KV cache type (default f16, as llama.cpp)\n"
            "  --backend NAME       forward backend: cpu (threads + SIMD kernels, default) or ref (the plain-C reference)\n"
            "  --swa-full           sliding-window layers keep the whole context (no ring)\n"
            "  --no-repack          batched matmuls read the mapped weights (exact kernels) instead of\n"
            "                       packing weight panels for the tile GEMM (cpu backend)\n"
            "environment: MUSE_LAYER_TRACE=1 prints a residual checksum per layer for the first\n"
            "  MUSE_LAYER_TRACE_POS (default 4) positions on stderr; MUSE_CPU=scalar|avx2|avx512 forces\n"
            "  a SIMD level, MUSE_CPU=exact (or avx2,exact ...) the kernels bit-identical to --backend ref\n");
}

static void trace_print(void *user, int32_t pos, int32_t il, double sum, double sumsq, const float first[4]) {
    (void)user;
    fprintf(stderr, "layer-trace pos=%d layer=%d sum=%.9g sumsq=%.9g first=%.9g,%.9g,%.9g,%.9g\n", pos, il, sum, sumsq,
            first[0], first[1], first[2], first[3]);
}

bool model_opts_open(const struct model_opts *o, const char *cmd, struct muse_model **model, struct muse_context **ctx) {
    struct muse_error err;
    *model = NULL;
    *ctx = NULL;
    if (!o->model_path) {
        fprintf(stderr, "muse %s: -m MODEL is required\n", cmd);
        return false;
    }
    if (muse_model_load(o->model_path, muse_model_default_params(), model, &err)) {
        fprintf(stderr, "muse %s: %s\n", cmd, err.msg);
        return false;
    }
    struct muse_context_params cp = o->cparams;
    const char *tr = getenv("MUSE_LAYER_TRACE");
    if (tr && *tr && strcmp(tr, "0")) {
        const char *np = getenv("MUSE_LAYER_TRACE_POS");
        cp.trace = trace_print;
        cp.trace_n_pos = np && atoi(np) > 0 ? atoi(np) : 4;
    }
    if (muse_context_create(*model, cp, ctx, &err)) {
        fprintf(stderr, "muse %s: %s\n", cmd, err.msg);
        muse_model_free(*model);
        *model = NULL;
        return false;
    }
    return true;
}
