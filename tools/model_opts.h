/*
 * model_opts.h - the model/context options shared by `muse run`, `chat`, `logits` and `bench`
 * (-m, -c, -b, -t, --kv / -ctk / -ctv, --backend, --swa-full, loading: --no-mmap, --mlock,
 * -lm; accepted for llama.cpp compatibility: -ngl, -fa, --no-warmup; output: -v, --log-disable) and the
 * MUSE_LAYER_TRACE hook. One table of rows in model_opts.c: an alias or a new flag is one row.
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "muse.h"

struct model_opts {
    const char *model_path;
    struct muse_context_params cparams;
    struct muse_model_params mparams;
    int kv_k, kv_v;   /* -ctk / -ctv as given (enum muse_kv_type), -1 = not given; cparams.kv_type
                         holds the last one given (model_opts_open refuses a pair that differs) */
    int verbosity;    /* -1 --log-disable (no progress, no speed lines), 0 default, 1 -v */
    bool ngl_given;   /* -ngl was given (model_opts_apply_ngl) */
    int64_t ngl;      /* its value: -1 (auto, all) every layer, 0 none, N the first N on the GPU */
    bool no_warmup;   /* --no-warmup: bench skips its warm-up runs (the others never warm up) */
};

/* Defaults (context and model defaults of the library). */
void model_opts_init(struct model_opts *o);

/*
 * If argv[*i] is one of the shared options, consume it (and its value) and return 1; return 0
 * when it is not one of them; -1 after printing an error (bad or missing value).
 */
int model_opts_parse(struct model_opts *o, int argc, char **argv, int *i);

/* The usage lines of the shared options. */
void model_opts_usage(FILE *f);

/* Whether progress lines may be drawn: stderr is a terminal and --log-disable was not given. */
bool model_opts_progress(const struct model_opts *o);

/*
 * Load the model and create a context; on failure print "muse CMD: <message>" and return false
 * (cmd is unused: the prefix is cli_prog; kept so callers need not change).
 * Draws a loading progress line (model_opts_progress), prints the -ngl note and, with -v, the
 * model, the context size and the load time. Installs the layer trace when MUSE_LAYER_TRACE is
 * set (non-empty, not "0"): for positions below MUSE_LAYER_TRACE_POS (default 4), one stderr
 * line per layer with the residual entering it: "layer-trace pos=P layer=L sum=S sumsq=Q
 * first=a,b,c,d" (layer = n_layer: the final residual entering the output norm).
 */
bool model_opts_open(const struct model_opts *o, const char *cmd, struct muse_model **model, struct muse_context **ctx);
/* -ngl into *cp (made from o->cparams): with --backend vulkan the first N layers there (N 0: the
 * cpu backend, with a note), on the cpu backends one note that it is ignored. */
void model_opts_apply_ngl(const struct model_opts *o, struct muse_context_params *cp);
