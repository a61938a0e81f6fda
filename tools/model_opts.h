/*
 * model_opts.h - the model/context options shared by `muse run` and `muse logits`
 * (-m, --ctx-size, --batch, --threads, --kv, --backend, --swa-full) and the MUSE_LAYER_TRACE hook.
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "muse.h"

struct model_opts {
    const char *model_path;
    struct muse_context_params cparams;
};

/* Defaults (context defaults of the library). */
void model_opts_init(struct model_opts *o);

/*
 * If argv[*i] is one of the shared options, consume it (and its value) and return 1; return 0
 * when it is not one of them; -1 after printing an error (bad or missing value).
 */
int model_opts_parse(struct model_opts *o, int argc, char **argv, int *i);

/* The usage lines of the shared options. */
void model_opts_usage(FILE *f);

/*
 * Load the model and create a context; on failure print "muse CMD: <message>" and return false.
 * Installs the layer trace when MUSE_LAYER_TRACE is set (non-empty, not "0"): for positions
 * below MUSE_LAYER_TRACE_POS (default 4), one stderr line per layer with the residual entering
 * it: "layer-trace pos=P layer=L sum=S sumsq=Q first=a,b,c,d" (layer = n_layer: the final
 * residual entering the output norm).
 */
bool model_opts_open(const struct model_opts *o, const char *cmd, struct muse_model **model, struct muse_context **ctx);
