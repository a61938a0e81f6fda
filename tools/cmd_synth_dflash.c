/* cmd_synth_dflash.c - `muse synth --dflash`: write a synthetic DFlash drafter for a target (synth/synth_dflash.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "synth/synth_dflash.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse synth --dflash --target TARGET.gguf [options] -o OUT.gguf\n"
            "\n"
            "Writes a synthetic DFlash drafter (general.architecture = dflash, random weights) for a\n"
            "Muse-Glimmer target: its width and tokenizer are the target's.\n"
            "\n"
            "  --target FILE        the target model (required)\n"
            "  --layers N           drafter layers (default 2)\n"
            "  --heads N            attention heads (default n_embd / head_dim)\n"
            "  --kv-heads N         KV heads, divides --heads (default heads / 2 when even)\n"
            "  --head-dim N         head size, even (default 64)\n"
            "  --ff N               feed_forward_length (default n_embd)\n"
            "  --block-size N       dflash.block_size incl. the anchor (default 16)\n"
            "  --window N           attention.sliding_window (default 32)\n"
            "  --target-layers L,.. dflash.target_layers: the target layers whose INPUT residuals are the\n"
            "                       features (default: 4 spread over the target)\n"
            "  --mask-id N          tokenizer.ggml.mask_token_id (default: the target's <|mask|> token)\n"
            "  --seed N             PRNG seed of the weights (default 1)\n"
            "  --types RULES        GLOB=TYPE,... matrix types (as `muse synth`); unmatched are F32\n"
            "  -o, --output PATH    output file (required)\n"
            "  -q, --quiet          no summary\n");
}

int cmd_synth_dflash(int argc, char **argv) {
    struct muse_synth_dflash_config cfg;
    muse_synth_dflash_default(&cfg);
    const char *target = NULL, *out = NULL, *types = NULL;
    bool quiet = false;
    struct muse_error err;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int32_t *dim = NULL;
        int64_t lo = 1, hi = 1 << 24, x;
        if (!strcmp(a, "--layers")) dim = &cfg.n_layer, hi = 64;
        else if (!strcmp(a, "--heads")) dim = &cfg.n_head;
        else if (!strcmp(a, "--kv-heads")) dim = &cfg.n_head_kv;
        else if (!strcmp(a, "--head-dim")) dim = &cfg.head_dim;
        else if (!strcmp(a, "--ff")) dim = &cfg.n_ff;
        else if (!strcmp(a, "--block-size")) dim = &cfg.block_size, lo = 2, hi = 256;
        else if (!strcmp(a, "--window")) dim = &cfg.n_swa;
        else if (!strcmp(a, "--mask-id")) dim = &cfg.mask_token_id, lo = 0, hi = INT32_MAX;
        if (dim) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, lo, hi, &x)) return 2;
            *dim = (int32_t)x;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dflash")) {
        } else if (!strcmp(a, "--target")) {
            if (!(target = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--target-layers")) {
            int32_t *ids;
            int n;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_ids(a, v, &ids, &n)) return 2;
            if (n > MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS) {
                fprintf(stderr, "muse synth: at most %d --target-layers\n", MUSE_SYNTH_DFLASH_MAX_TARGET_LAYERS);
                free(ids);
                return 2;
            }
            memcpy(cfg.target_layers, ids, sizeof(int32_t) * (size_t)n);
            cfg.n_target_layers = n;
            free(ids);
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT64_MAX, &x)) return 2;
            cfg.seed = (uint64_t)x;
        } else if (!strcmp(a, "--types")) {
            if (!(types = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else {
            return cli_unknown(a);
        }
    }
    if (!target || !out) {
        return cli_usage_err("--target TARGET.gguf and -o OUT.gguf are required");
    }
    if (types) { /* the rule parser of `muse synth`, through a scratch config */
        struct muse_synth_config tmp;
        memset(&tmp, 0, sizeof tmp);
        if (muse_synth_parse_types(types, &tmp, &err)) {
            fprintf(stderr, "muse synth: %s\n", err.msg);
            return 2;
        }
        cfg.n_rules = tmp.n_rules;
        memcpy(cfg.rules, tmp.rules, sizeof cfg.rules);
    }
    if (muse_synth_dflash_write(&cfg, target, out, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 1;
    }
    if (!quiet) fprintf(stderr, "wrote %s: DFlash drafter for %s\n", out, target);
    return 0;
}
