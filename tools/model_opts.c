/* model_opts.c - the model/context options of run, chat, logits and bench (model_opts.h). */
#include "model_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "model/model.h"
#include "progress.h"

#define O(dst) ((struct model_opts *)(dst))

static int set_model(void *d, const char *f, const char *v) {
    (void)f;
    O(d)->model_path = v;
    return 0;
}

static int set_ctx(void *d, const char *f, const char *v) {
    int64_t n;
    if (!cli_parse_int(f, v, 0, 1 << 24, &n)) return -1; /* 0 = the default (llama.cpp: the model's) */
    O(d)->cparams.n_ctx = (uint32_t)n;
    return 0;
}

static int set_batch(void *d, const char *f, const char *v) {
    int64_t n;
    if (!cli_parse_int(f, v, 1, 1 << 16, &n)) return -1;
    O(d)->cparams.n_batch = (uint32_t)n;
    return 0;
}

static int set_threads(void *d, const char *f, const char *v) {
    int64_t n;
    if (!cli_parse_int(f, v, 1, MUSE_THREADPOOL_MAX, &n)) return -1;
    O(d)->cparams.n_threads = (uint32_t)n;
    return 0;
}

static int kv_type(const char *f, const char *v) {
    int k = muse_kv_type_from_name(v);
    if (k < 0) cli_err("bad value for %s: '%s' (expected f16, f32 or q8_0)", f, v);
    return k;
}

static int set_kv(void *d, const char *f, const char *v) {
    int k = kv_type(f, v);
    if (k < 0) return -1;
    O(d)->kv_k = O(d)->kv_v = k;
    O(d)->cparams.kv_type = (enum muse_kv_type)k;
    return 0;
}

static int set_kv_k(void *d, const char *f, const char *v) {
    int k = kv_type(f, v);
    if (k < 0) return -1;
    O(d)->kv_k = k;
    O(d)->cparams.kv_type = (enum muse_kv_type)k; /* model_opts_open refuses a -ctv that differs */
    return 0;
}

static int set_kv_v(void *d, const char *f, const char *v) {
    int k = kv_type(f, v);
    if (k < 0) return -1;
    O(d)->kv_v = k;
    O(d)->cparams.kv_type = (enum muse_kv_type)k;
    return 0;
}

static int set_backend(void *d, const char *f, const char *v) {
    if (!muse_device_kind_known(v)) { /* a bad value (exit 2), not an error of the model it would load */
        cli_err("bad value for %s: '%s' (expected cpu, ref, vulkan or auto)", f, v);
        return -1;
    }
    if (!strcmp(v, "auto")) { /* a GPU when there is one, said on stderr (docs/vulkan.md) */
        char why[300] = "";
        v = muse_device_auto(why, sizeof why);
        fprintf(stderr, "backend auto: %s%s%s%s\n", v, why[0] ? " (" : "", why, why[0] ? ")" : "");
    }
    O(d)->cparams.backend = v;
    return 0;
}

/* --device N: the Vulkan device (the same as MUSE_VK_DEVICE=N, which the device reads when it opens) */
static int set_device(void *d, const char *f, const char *v) {
    (void)d;
    int64_t n;
    if (!cli_parse_int(f, v, 0, 255, &n)) return -1;
    char buf[16];
    snprintf(buf, sizeof buf, "%d", (int)n);
    setenv("MUSE_VK_DEVICE", buf, 1);
    return 0;
}

static int set_swa_full(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->cparams.swa_full = 1;
    return 0;
}

/* -ngl N (llama.cpp's spelling, also "auto" and "all" = -1: every layer): with a GPU backend the
 * first N layers run there, the rest and the head on the cpu (model_opts_apply_ngl) */
static int set_ngl(void *d, const char *f, const char *v) {
    int64_t n = -1;
    if (strcmp(v, "auto") && strcmp(v, "all") && !cli_parse_int(f, v, -1, 1 << 20, &n)) return -1;
    O(d)->ngl_given = true;
    O(d)->ngl = n;
    return 0;
}

void model_opts_apply_ngl(const struct model_opts *o, struct muse_context_params *cp) {
    if (!o->ngl_given) return;
    const char *b = cp->backend ? cp->backend : "cpu";
    if (strcmp(b, "vulkan")) { /* the cpu backends: nothing to offload */
        if (o->verbosity >= 0) cli_err("note: -ngl is ignored: muse runs on the CPU (--backend vulkan for a GPU)");
        return;
    }
    if (o->ngl == 0) { /* llama.cpp's -ngl 0: no layer on the GPU */
        cp->backend = "cpu";
        if (o->verbosity >= 0) cli_err("note: -ngl 0: every layer on the cpu");
    } else {
        cp->gpu_layers = o->ngl > 0 ? (uint32_t)o->ngl : 0; /* >= the layer count or -1: all */
    }
}

static int set_fa(void *d, const char *f, const char *v) {
    (void)d, (void)f, (void)v; /* muse's attention is one fused kernel already; nothing to switch */
    return 0;
}

static int set_no_mmap(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->mparams.use_mmap = 0;
    return 0;
}

static int set_mlock(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->mparams.use_mlock = 1;
    return 0;
}

static int set_load_mode(void *d, const char *f, const char *v) {
    struct muse_model_params *mp = &O(d)->mparams;
    if (!strcmp(v, "auto") || !strcmp(v, "mmap")) mp->use_mmap = 1, mp->use_mlock = 0;
    else if (!strcmp(v, "none")) mp->use_mmap = 0, mp->use_mlock = 0;
    else if (!strcmp(v, "mlock")) mp->use_mmap = 0, mp->use_mlock = 1;
    else if (!strcmp(v, "mmap+mlock")) mp->use_mmap = 1, mp->use_mlock = 1;
    else {
        cli_err("bad value for %s: '%s' (expected auto, none, mmap, mlock or mmap+mlock)", f, v);
        return -1;
    }
    return 0;
}

static int set_verbose(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->verbosity = 1;
    return 0;
}

static int set_no_repack(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->cparams.no_repack = 1;
    return 0;
}

static int set_no_warmup(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->no_warmup = true;
    return 0;
}

static int set_quiet(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->verbosity = -1;
    return 0;
}

static int set_tp(void *d, const char *f, const char *v) {
    int64_t n; /* main.c joined the group (tp_start); here the value is only checked */
    if (!cli_parse_int(f, v, 1, 4096, &n)) return -1;
    if (n != muse_tp_size()) {
        cli_err("--tp %lld: start muse as mpirun -np %lld muse ... --tp %lld", (long long)n, (long long)n, (long long)n);
        return -1;
    }
    return 0;
}

static int set_tp_bf16(void *d, const char *f, const char *v) {
    (void)d, (void)f, (void)v; /* main.c passed it to muse_tp_init */
    return 0;
}

static const struct cli_opt rows[] = {
    {"-m|--model", "FILE", "Muse-Glimmer text GGUF (required)", set_model},
    {"-c|--ctx-size", "N", "context positions (default, or 0: the model's context_length, capped so\n"
                           "the KV cache fits in the memory available; see README)", set_ctx},
    {"-b|--batch-size|--batch", "N", "prompt chunk size, tokens per forward (default 512)", set_batch},
    {"-t|--threads", "N", "threads for the backend, 1..256 (default: physical cores; the ref backend uses 1)",
     set_threads},
    {"--kv", "f16|f32|q8_0", "KV cache type of keys and values (default f16, as llama.cpp)", set_kv},
    {"-ctk|--cache-type-k", "TYPE", "llama.cpp's spelling of --kv for the keys; muse keeps keys and values\n"
                                    "in one type, so -ctk and -ctv must agree", set_kv_k},
    {"-ctv|--cache-type-v", "TYPE", "the same for the values", set_kv_v},
    {"--backend", "NAME", "forward backend: cpu (threads + SIMD kernels, default), ref (the plain-C reference), vulkan (a GPU, docs/vulkan.md) or auto (vulkan when a discrete or integrated GPU is found, else cpu; says which on stderr)",
     set_backend},
    {"--device", "N", "the GPU --backend vulkan runs on (muse info --devices; default: MUSE_VK_DEVICE, else the first discrete GPU)",
     set_device},
    {"--swa-full", NULL, "sliding-window layers keep the whole context (no ring)", set_swa_full},
    {"--no-repack", NULL, "matmuls read the mapped weights (exact kernels) instead of packing weight\n"
                          "panels for the tile GEMM or copying Q4_0/IQ4_NL/Q8_0 into rows interleaved by 8,\n"
                          "and attention without the flash kernels: any batch size gives the same bits\n"
                          "(cpu backend; saves the packed copies)", set_no_repack},
    {"--tp", "N", "tensor parallel over the N processes of an MPI job, each holding 1/N of the model:\n"
                  "mpirun -np N muse CMD -m MODEL --tp N (docs/tensor-parallel.md)", set_tp},
    {"--tp-bf16", NULL, "with --tp: all-reduce payloads as bf16 (half the bytes)", set_tp_bf16},
    {"--no-mmap", NULL, "read the model into memory instead of mapping it", set_no_mmap},
    {"--mlock", NULL, "lock the model in RAM (needs `ulimit -l` room; failing is an error)", set_mlock},
    {"-lm|--load-mode", "MODE", "llama.cpp's loading modes: auto|mmap (default), none (= --no-mmap),\n"
                                "mlock (read + lock), mmap+mlock", set_load_mode},
    {"-ngl|--gpu-layers|--n-gpu-layers", "N", "with --backend vulkan: layers 0..N-1 on the GPU, the others and the output "
                                              "head on the cpu (-t threads; default, -1, auto, all: every layer; 0: none); "
                                              "ignored with a note on the cpu backends (docs/vulkan.md)",
     set_ngl},
    {"-fa|--flash-attn", "[on|off|auto]",
     "accepted for llama.cpp compatibility (muse's attention is always fused)", set_fa},
    {"--no-warmup", NULL, "accepted for llama.cpp compatibility: run, chat and serve do no warm-up run\n"
                          "(llama.cpp's evaluates one empty batch at load); bench skips its warm-up runs", set_no_warmup},
    {"-v|--verbose|--log-verbose", NULL, "also print the model, the context size and the load time", set_verbose},
    {"--log-disable", NULL, "quiet: no progress lines and no speed summary on stderr (errors still print)",
     set_quiet},
};

void model_opts_init(struct model_opts *o) {
    memset(o, 0, sizeof *o);
    o->cparams = muse_context_default_params();
    o->mparams = muse_model_default_params();
    o->kv_k = o->kv_v = -1;
}

int model_opts_parse(struct model_opts *o, int argc, char **argv, int *i) {
    return cli_opts_parse(rows, sizeof rows / sizeof rows[0], o, argc, argv, i);
}

void model_opts_usage(FILE *f) {
    fprintf(f, "model and context:\n");
    cli_opts_usage(f, rows, sizeof rows / sizeof rows[0]);
    fprintf(f, "environment: MUSE_LAYER_TRACE=1 prints a residual checksum per layer for the first\n"
               "  MUSE_LAYER_TRACE_POS (default 4) positions on stderr; MUSE_CPU=scalar|avx2|avx512|amx\n"
               "  forces a SIMD level, MUSE_CPU=exact (or avx2,exact ...) the kernels bit-identical to --backend ref\n");
}

bool model_opts_progress(const struct model_opts *o) { return o->verbosity >= 0 && cli_stderr_tty(); }

static void trace_print(void *user, int32_t pos, int32_t il, double sum, double sumsq, const float first[4]) {
    (void)user;
    fprintf(stderr, "layer-trace pos=%d layer=%d sum=%.9g sumsq=%.9g first=%.9g,%.9g,%.9g,%.9g\n", pos, il, sum, sumsq,
            first[0], first[1], first[2], first[3]);
}

bool model_opts_open(const struct model_opts *o, const char *cmd, struct muse_model **model, struct muse_context **ctx) {
    (void)cmd; /* the message prefix is cli_prog */
    struct muse_error err;
    struct muse_context_params cp = o->cparams;
    *model = NULL;
    *ctx = NULL;
    if (!o->model_path) {
        cli_usage_err("-m MODEL is required");
        return false;
    }
    if (o->kv_k >= 0 || o->kv_v >= 0) {
        const int k = o->kv_k >= 0 ? o->kv_k : MUSE_KV_TYPE_F16, v = o->kv_v >= 0 ? o->kv_v : MUSE_KV_TYPE_F16;
        if (k != v) {
            cli_err("muse keeps keys and values in one type: -ctk %s and -ctv %s differ (give both, or --kv TYPE)",
                    muse_kv_type_name((enum muse_kv_type)k), muse_kv_type_name((enum muse_kv_type)v));
            return false;
        }
        cp.kv_type = (enum muse_kv_type)k;
    }
    model_opts_apply_ngl(o, &cp);
    struct load_progress lp = {.file = o->model_path};
    struct muse_model_params mp = o->mparams;
    progress_begin(&lp.p, model_opts_progress(o));
    if (lp.p.on) {
        mp.progress = progress_load_cb;
        mp.progress_user = &lp;
    }
    muse_status st = muse_model_load(o->model_path, mp, model, &err);
    progress_end(&lp.p);
    if (st) {
        cli_err("%s", err.msg);
        return false;
    }
    const double load_s = progress_seconds(&lp.p);
    const char *tr = getenv("MUSE_LAYER_TRACE");
    if (tr && *tr && strcmp(tr, "0")) {
        const char *np = getenv("MUSE_LAYER_TRACE_POS");
        cp.trace = trace_print;
        cp.trace_n_pos = np && atoi(np) > 0 ? atoi(np) : 4;
    }
    if (muse_context_create(*model, cp, ctx, &err)) {
        cli_err("%s: %s", o->model_path, err.msg);
        muse_model_free(*model);
        *model = NULL;
        return false;
    }
    if (o->verbosity >= 0 && muse_context_n_ctx(*ctx) > (uint32_t)muse_model_n_ctx_train(*model))
        cli_err("warning: the context (%u positions) is larger than the model was trained for (%d): positions past it "
                "may give poor output",
                muse_context_n_ctx(*ctx), muse_model_n_ctx_train(*model));
    if (o->verbosity > 0) {
        char desc[256];
        muse_model_desc(*model, desc, sizeof desc);
        cli_err("%s: %s", o->model_path, desc);
        if (muse_tp_size() > 1) {
            muse_tp_describe((*model)->tp_owned, desc, sizeof desc);
            cli_err("tensor parallel, rank 0 of %s", desc);
        }
        cli_err("loaded in %.2f s (%s%s); context %u positions (trained %d), batch %u, %u threads, KV %s, backend %s",
                load_s, o->mparams.use_mmap ? "mmap" : "read", o->mparams.use_mlock ? " + mlock" : "",
                muse_context_n_ctx(*ctx), muse_model_n_ctx_train(*model), muse_context_n_batch(*ctx),
                muse_context_n_threads(*ctx), muse_kv_type_name(cp.kv_type), muse_context_backend(*ctx));
    }
    return true;
}
