/* cmd_synth.c - `muse synth`: write a synthetic Muse-Glimmer GGUF (synth/synth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "synth/synth.h"
#include "synth/synth_plant.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse synth [--preset NAME] [options] -o OUT.gguf\n"
            "\n"
            "Writes a synthetic Muse-Glimmer GGUF (random weights, working BPE vocabulary, chat template).\n"
            "`muse synth --dflash --help`: a synthetic DFlash drafter for a target instead.\n"
            "\n"
            "  --preset NAME      tiny (default), small, demo or 30b; the options below override it\n"
            "  --layers N         block_count\n"
            "  --embd N           embedding_length (n_embd)\n"
            "  --heads N          attention.head_count\n"
            "  --kv-heads N       attention.head_count_kv (divides --heads)\n"
            "  --head-dim N       attention.key_length = value_length (even)\n"
            "  --ff N             feed_forward_length\n"
            "  --vocab N          vocabulary size (>= %d; >= %d puts the special tokens at their real ids)\n"
            "  --ctx N            context_length\n"
            "  --window N         attention.sliding_window\n"
            "  --pattern P        SWA layers: a period (4 = SSSF: the last layer of each period is full\n"
            "                     attention) or a string of S and F (repeated, or one letter per layer)\n"
            "  --pattern-u32      write the pattern as a u32 period instead of a bool array\n"
            "  --seed N           PRNG seed of the weights (default 1); the vocabulary does not depend on it\n"
            "  --types RULES      GLOB=TYPE,... per-tensor types, first match wins, before the preset's\n"
            "                     rules; GLOB matches the short name (ffn_gate, attn_*, output) or the full\n"
            "                     name (blk.0.*); unmatched matrices are F32; norms are always F32\n"
            "  --values RECIPE    conditioned or plain (see docs/synth.md)\n"
            "  --cycle L          plant a bigram structure for speculative-decoding tests (synth/synth_plant.h):\n"
            "                     the greedy text walks cycles of L tokens; a drafter made with\n"
            "                     `muse synth --dflash --copy` predicts it (token_embd and output need\n"
            "                     f32, f16, bf16 or q8_0)\n"
            "  --noise X          with --cycle: post-norm scale, how often the text leaves its cycle (default 0.1)\n"
            "  --content M        with --cycle: embedding dimensions that carry the token (default n_embd / 2)\n"
            "  --stop-in-cycle    with --cycle: EOS ends the first cycle\n"
            "  -o, --output PATH  output file (required)\n"
            "  -q, --quiet        no progress bar or summary\n"
            "\n"
            "muse synth --mmproj [options] -o OUT.gguf writes a vision projector instead (--mmproj --help).\n",
            MUSE_SYNTH_MIN_VOCAB, MUSE_SYNTH_REAL_VOCAB);
}

struct progress_state {
    int64_t t_start, t_last;
    bool shown;
};

static int show_progress(void *user, uint64_t done, uint64_t total) {
    struct progress_state *p = user;
    int64_t now = muse_time_us();
    if (total < (64u << 20)) return 0; /* small files: no bar */
    if (done < total && now - p->t_last < 250000) return 0;
    p->t_last = now;
    p->shown = true;
    double frac = total ? (double)done / (double)total : 1.0;
    double secs = (double)(now - p->t_start) / 1e6;
    int width = 40, filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    double rate = secs > 0 ? (double)done / secs / 1e6 : 0;
    fprintf(stderr, "\r[%s] %5.1f%% %8.1f / %.1f MB  %6.1f MB/s  %5.0f s", bar, 100.0 * frac, (double)done / 1e6,
            (double)total / 1e6, rate, secs);
    if (done == total) fputc('\n', stderr);
    return 0;
}

static bool parse_dim(const char *opt, const char *val, int64_t lo, int64_t hi, int32_t *out) {
    int64_t v;
    if (!val || !cli_parse_int(opt, val, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

int cmd_synth(int argc, char **argv) {
    const char *preset = "tiny", *out = NULL, *types = NULL, *pattern = NULL, *values = NULL;
    bool quiet = false, pattern_u32 = false;
    struct muse_synth_plant_config plant = {.period = 0, .noise = 0.1f, .seed = 1};
    for (int i = 1; i < argc; i++) /* a DFlash drafter instead of a text model */
        if (!strcmp(argv[i], "--dflash")) return cmd_synth_dflash(argc, argv);
    for (int i = 1; i < argc; i++) /* vision projectors: cmd_synth_mmproj.c */
        if (!strcmp(argv[i], "--mmproj")) return cmd_synth_mmproj(argc, argv);
    /* first pass: the preset, so the other options can override it in any order */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
    }
    struct muse_synth_config cfg;
    struct muse_error err;
    if (muse_synth_preset(preset, &cfg, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int32_t *dim = NULL;
        int64_t lo = 1, hi = INT32_MAX;
        if (!strcmp(a, "--layers")) dim = &cfg.n_layer, hi = MUSE_SYNTH_MAX_LAYERS;
        else if (!strcmp(a, "--embd")) dim = &cfg.n_embd;
        else if (!strcmp(a, "--heads")) dim = &cfg.n_head;
        else if (!strcmp(a, "--kv-heads")) dim = &cfg.n_head_kv;
        else if (!strcmp(a, "--head-dim")) dim = &cfg.head_dim;
        else if (!strcmp(a, "--ff")) dim = &cfg.n_ff;
        else if (!strcmp(a, "--vocab")) dim = &cfg.n_vocab, lo = MUSE_SYNTH_MIN_VOCAB;
        else if (!strcmp(a, "--ctx")) dim = &cfg.n_ctx;
        else if (!strcmp(a, "--window")) dim = &cfg.n_swa;
        if (dim) {
            if (!parse_dim(a, cli_next(argc, argv, &i), lo, hi, dim)) return 2;
        } else if (!strcmp(a, "--preset")) {
            if (!cli_next(argc, argv, &i)) return 2; /* applied in the first pass */
        } else if (!strcmp(a, "--seed")) {
            const char *v = cli_next(argc, argv, &i);
            int64_t s;
            if (!v || !cli_parse_int(a, v, 0, INT64_MAX, &s)) return 2;
            cfg.seed = (uint64_t)s;
        } else if (!strcmp(a, "--types")) {
            if (!(types = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--pattern")) {
            if (!(pattern = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--pattern-u32")) {
            pattern_u32 = true;
        } else if (!strcmp(a, "--values")) {
            if (!(values = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--cycle")) {
            if (!parse_dim(a, cli_next(argc, argv, &i), 2, 1 << 20, &plant.period)) return 2;
        } else if (!strcmp(a, "--content")) {
            if (!parse_dim(a, cli_next(argc, argv, &i), 1, 1 << 20, &plant.content)) return 2;
        } else if (!strcmp(a, "--noise")) {
            const char *v = cli_next(argc, argv, &i);
            char *end = NULL;
            if (!v) return 2;
            plant.noise = strtof(v, &end);
            if (!*v || *end || !(plant.noise >= 0 && plant.noise <= 100)) {
                fprintf(stderr, "muse synth: bad value for --noise: '%s' (a number 0..100)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--stop-in-cycle")) {
            plant.stop_in_cycle = true;
        } else {
            return cli_unknown(a);
        }
    }
    if (!out) {
        return cli_usage_err("-o OUT.gguf is required");
    }
    if ((types && muse_synth_parse_types(types, &cfg, &err)) || (pattern && muse_synth_parse_pattern(pattern, &cfg, &err))) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 2;
    }
    cfg.pattern_scalar = pattern_u32;
    if (values) {
        if (!strcmp(values, "conditioned")) cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
        else if (!strcmp(values, "plain")) cfg.values = MUSE_SYNTH_VALUES_PLAIN;
        else {
            fprintf(stderr, "muse synth: bad value for --values: '%s' (conditioned or plain)\n", values);
            return 2;
        }
    }
    if (muse_synth_validate(&cfg, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 2;
    }
    struct progress_state ps = {muse_time_us(), 0, false};
    ps.t_last = ps.t_start;
    if (muse_synth_write(&cfg, out, quiet ? NULL : show_progress, &ps, &err)) {
        if (ps.shown) fputc('\n', stderr);
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 1;
    }
    plant.seed = cfg.seed;
    if (plant.period && muse_synth_plant_target(out, out, &plant, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 1;
    }
    if (!quiet) {
        struct muse_synth_tensor *t;
        size_t n;
        if (muse_synth_plan(&cfg, &t, &n, &err) == MUSE_OK) {
            fprintf(stderr, "wrote %s: %s preset, %zu tensors, %.1f MB of tensor data, %.2f s\n", out,
                    cfg.preset, n, (double)muse_synth_data_bytes(t, n) / 1e6,
                    (double)(muse_time_us() - ps.t_start) / 1e6);
            free(t);
        }
    }
    return 0;
}
