/* main.c - `muse SUBCOMMAND ...`: dispatch to tools/cmd_<name>.c. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "muse.h"

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"info", cmd_info, "show a GGUF file: header, metadata, tensors, derived hyperparameters"},
    {"synth", cmd_synth, "write a synthetic Muse-Glimmer GGUF (tests, demo, benchmarks)"},
    {"run", cmd_run, "generate text from a prompt"},
    {"logits", cmd_logits, "dump logits as JSON (the parity interface)"},
    {"embed", cmd_embed, "embeddings of text (final hidden states, pooled), llama-embedding style"},
    {"draft", cmd_draft, "draft one DFlash block after a prompt (the drafter's parity interface)"},
    {"tokenize", cmd_tokenize, "tokenize text or detokenize ids"},
    {"template", cmd_template, "render a chat template for a conversation"},
    {"chat", cmd_chat, "interactive chat"},
    {"quantize", cmd_quantize, "quantize an F32/F16/BF16 GGUF, byte for byte as llama-quantize"},
    {"perplexity", cmd_perplexity, "perplexity of a text, KL divergence against a base model (llama-perplexity)"},
    {"bench", cmd_bench, "prefill/decode speed, llama-bench style"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"image", cmd_image, "preprocess an image and run the vision projector (the vision parity interface)"},
};

static void usage(FILE *f) {
    fprintf(f, "muse %s - inference engine for Muse-Glimmer GGUF models\n\nusage: muse SUBCOMMAND [options]\n\n",
            muse_version());
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\n`muse SUBCOMMAND --help` (or `muse help SUBCOMMAND`) for its options; `muse --version`.\n"
               "See README.md and `man muse`.\n");
}

/*
 * Tensor parallelism (docs/tensor-parallel.md): `mpirun -np N muse CMD ... --tp N`. Every process
 * parses the same arguments; the group is joined here, before the command runs. Rank 0 runs the
 * command (its --tp option only checks the group); ranks 1..N-1 load the model named by -m and
 * follow rank 0 until it is done (they print nothing of their own unless the job fails).
 */
static const char *const tp_commands[] = {"run", "chat", "logits", "bench", "perplexity", "serve", "embed"};

/* The N of --tp N / --tp=N in argv (1 when absent, 0 when its value is bad); *bf16: --tp-bf16. */
static int tp_scan(int argc, char **argv, int *bf16) {
    int n = 1;
    *bf16 = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--tp") && i + 1 < argc) v = argv[++i];
        else if (!strncmp(argv[i], "--tp=", 5)) v = argv[i] + 5;
        else if (!strcmp(argv[i], "--tp-bf16")) *bf16 = 1;
        if (!v) continue;
        char *end;
        const long x = strtol(v, &end, 10);
        n = *end || end == v || x < 1 || x > 4096 ? 0 : (int)x;
    }
    return n;
}

/* Ranks 1..N-1: the model of -m, then rank 0's commands. */
static int tp_worker_main(int argc, char **argv) {
    /* the launcher passes a Ctrl-C or a SIGTERM to every rank: rank 0 ends its command and then
     * tells the others (muse_tp_finish); if rank 0 dies instead, the launcher ends them */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    struct muse_model_params mp = muse_model_default_params();
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--no-mmap")) mp.use_mmap = 0;
    }
    struct muse_model *model = NULL;
    struct muse_error err;
    int rc = 1;
    /* without -m rank 0 stops with the usage error, and the launcher ends the job */
    if (path && muse_model_load(path, mp, &model, &err) == MUSE_OK) { /* rank 0 reports a failed load */
        if (muse_tp_worker(model, &err) == MUSE_OK) rc = 0;
        else fprintf(stderr, "muse: rank %d: %s\n", muse_tp_rank(), err.msg);
        muse_model_free(model);
    }
    muse_tp_finish();
    return rc;
}

static int tp_start(const char *cmd, int argc, char **argv, int *worker_rc) {
    int bf16;
    const int n = tp_scan(argc, argv, &bf16);
    if (n == 1 && !bf16) return 0;
    bool ok = false;
    for (size_t i = 0; i < sizeof tp_commands / sizeof tp_commands[0]; i++) ok |= !strcmp(cmd, tp_commands[i]);
    if (!ok) {
        fprintf(stderr, "muse %s: --tp is for run, chat, logits, bench, perplexity, serve and embed\n", cmd);
        return -1;
    }
    if (n == 0) {
        fprintf(stderr, "muse %s: bad value for --tp (expected 1..4096 ranks)\n", cmd);
        return -1;
    }
    if (n == 1) return 0;
    struct muse_error err;
    int32_t rank = 0;
    if (muse_tp_init(n, bf16, &rank, &err)) {
        fprintf(stderr, "muse %s: %s\n", cmd, err.msg);
        return -1;
    }
    if (rank > 0) {
        *worker_rc = tp_worker_main(argc, argv);
        return 1;
    }
    atexit(muse_tp_finish);
    return 0;
}

static const struct subcommand *find(const char *name) {
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (!strcmp(name, subcommands[i].name)) return &subcommands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        printf("muse %s (commit %s)\n", muse_version(), muse_build_commit());
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        if (argc > 2 && strcmp(argv[1], "help") == 0) { /* muse help run = muse run --help */
            const struct subcommand *sc = find(argv[2]);
            if (!sc) {
                fprintf(stderr, "muse: unknown subcommand '%s' (see 'muse --help')\n", argv[2]);
                return 2;
            }
            char *hargv[] = {argv[2], "--help", NULL};
            cli_set_prog(sc->name);
            return sc->fn(2, hargv);
        }
        usage(stdout);
        return 0;
    }
    const struct subcommand *sc = find(argv[1]);
    if (!sc) {
        fprintf(stderr, "muse: unknown subcommand '%s' (see 'muse --help')\n", argv[1]);
        return 2;
    }
    cli_set_prog(sc->name);
    int worker_rc = 0;
    const int tp = tp_start(sc->name, argc - 1, argv + 1, &worker_rc);
    if (tp < 0) return 1;
    if (tp > 0) return worker_rc;
    return sc->fn(argc - 1, argv + 1);
}
