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
    {"tokenize", cmd_tokenize, "tokenize text or detokenize ids"},
    {"template", cmd_template, "render a chat template for a conversation"},
    {"chat", cmd_chat, "interactive chat"},
    {"bench", cmd_bench, "prefill/decode speed, llama-bench style"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"image", cmd_image, "preprocess an image and run the vision projector (the vision parity interface)"},
};

static void usage(FILE *f) {
    fprintf(f, "muse %s - inference engine for Muse-Glimmer GGUF models\n\nusage: muse SUBCOMMAND [options]\n\n",
            muse_version());
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\n`muse SUBCOMMAND --help` for its options. See README.md.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("muse %s\n", muse_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "muse: unknown subcommand '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
