/* main.c - `muse SUBCOMMAND ...`: dispatch to tools/cmd_<name>.c. */
#include <stdio.h>
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
    return sc->fn(argc - 1, argv + 1);
}
