/*
 * cmd_run.c - `muse run`: one-shot generation, llama-completion style. Processes the prompt
 * (chunked by --batch-size, with a progress line on a terminal when it is longer than a chunk),
 * echoes it (unless --no-display-prompt), then samples token by token (greedy unless --temp > 0),
 * streaming each token to stdout as it is produced; stops at EOS / EOT (never at EOM), at
 * --n-predict or when the context is full. Prompt and generation speed go to stderr at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gen/sampler.h"
#include "model_opts.h"
#include "muse.h"
#include "progress.h"
#include "run_text.h"
#include "sampling_opts.h"

struct run_opts {
    const char *prompt_text;
    const char *input_file;
    int32_t *tokens;
    int n_tokens;
    int64_t max_tokens;
    bool print_ids, no_echo, help;
    struct sampling_opts so;
};

#define R(dst) ((struct run_opts *)(dst))

static int set_prompt(void *d, const char *f, const char *v) {
    (void)f;
    R(d)->prompt_text = v;
    return 0;
}

static int set_file(void *d, const char *f, const char *v) {
    (void)f;
    R(d)->input_file = v;
    return 0;
}

static int set_tokens(void *d, const char *f, const char *v) {
    free(R(d)->tokens);
    R(d)->tokens = NULL;
    return cli_parse_ids(f, v, &R(d)->tokens, &R(d)->n_tokens) ? 0 : -1;
}

static int set_n(void *d, const char *f, const char *v) {
    /* llama.cpp's -n -1 = "until the context is full" */
    if (!strcmp(v, "-1")) {
        R(d)->max_tokens = INT32_MAX;
        return 0;
    }
    return cli_parse_int(f, v, 0, INT32_MAX, &R(d)->max_tokens) ? 0 : -1;
}

static int set_flag(void *d, const char *f, const char *v) {
    (void)v;
    if (!strcmp(f, "--ids")) R(d)->print_ids = true;
    else if (!strcmp(f, "--no-display-prompt")) R(d)->no_echo = true;
    else R(d)->help = true;
    return 0;
}

static const struct cli_opt rows[] = {
    {"-p|--prompt", "TEXT", "prompt text (tokenized with the model's tokenizer, BOS added)", set_prompt},
    {"-f|--file|--input", "FILE", "prompt text from a UTF-8 file; - = standard input", set_file},
    {"--tokens", "IDS", "prompt as comma-separated token ids (used as given)", set_tokens},
    {"-n|--n-predict|--predict|--max-tokens", "N", "tokens to generate at most (default 128; 0 = prompt only;\n"
                                                   "-1 = until the context is full)", set_n},
    {"--no-display-prompt", NULL, "do not echo the prompt before the generated text", set_flag},
    {"--ids", NULL, "print the generated token ids (comma-separated, like --tokens) instead of text;\n"
                    "the prompt is not echoed", set_flag},
    {"-h|--help", NULL, "this help", set_flag},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static void usage(FILE *f) {
    fprintf(f, "usage: muse run -m MODEL (-p TEXT | -f FILE | --tokens IDS) [-n N] [sampling] [options]\n"
               "Generates text from a raw prompt (no chat template; --chat applies it: see muse chat --help).\n"
               "The prompt is echoed, then the generated text streams (stdout); speed on stderr.\n");
    cli_opts_usage(f, rows, N_ROWS);
    sampling_opts_usage(f, SAMPLING_RUN);
    model_opts_usage(f);
}

static muse_status eval_ctx(void *ctx, const int32_t *t, int32_t n, float *logits, struct muse_error *err) {
    return muse_eval(ctx, t, n, logits, 0, err);
}

int cmd_run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--chat")) return cmd_chat(argc, argv); /* chat formatting: tools/cmd_chat.c */
    struct model_opts mo;
    struct run_opts ro = {.max_tokens = 128};
    model_opts_init(&mo);
    sampling_opts_init(&ro.so, SAMPLING_RUN);
    int usage_rc = 2;
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r == 0) r = sampling_opts_parse(&ro.so, argc, argv, &i);
        if (r == 0) r = cli_opts_parse(rows, N_ROWS, &ro, argc, argv, &i);
        if (r < 0) goto usage_fail;
        if (r == 0) {
            cli_unknown(argv[i]);
            goto usage_fail;
        }
        if (ro.help) {
            usage(stdout);
            usage_rc = 0;
            goto usage_fail;
        }
    }
    if (!mo.model_path) {
        cli_usage_err("-m MODEL is required");
        goto usage_fail;
    }
    if ((!!ro.prompt_text + !!ro.input_file + !!ro.tokens) != 1) {
        cli_usage_err("exactly one of -p TEXT, -f FILE, --tokens IDS is required");
        goto usage_fail;
    }
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    struct muse_sampler *smp = NULL;
    struct run_text *rt = NULL;
    float *logits = NULL;
    int rc = 1;
    struct muse_error err;
    /* text in and out (the tokenizer), or ids only; the prompt is read before the model loads */
    if (run_text_open(mo.model_path, &rt, &err)) {
        if (ro.prompt_text || ro.input_file) {
            cli_err("%s", err.msg);
            goto done;
        }
        rt = NULL; /* ids in, ids out */
        ro.print_ids = true;
    }
    if (!ro.tokens && run_text_encode_prompt(rt, ro.prompt_text, ro.input_file, &ro.tokens, &ro.n_tokens, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    if (!model_opts_open(&mo, "run", &model, &ctx)) goto done;
    const int32_t n_vocab = muse_model_n_vocab(model);
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(ctx);
    if (ro.n_tokens > n_ctx) {
        cli_err("the prompt has %d tokens but the context holds %d (use a larger --ctx-size)", ro.n_tokens, n_ctx);
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)n_vocab);
    if (!logits || muse_sampler_create(ro.so.sp, n_vocab, &smp, &err)) {
        cli_err("%s", logits ? err.msg : "out of memory");
        goto done;
    }
    for (int i = 0; i < ro.n_tokens; i++) muse_sampler_accept(smp, ro.tokens[i]);

    int64_t t0 = muse_time_us();
    if (progress_prefill(eval_ctx, ctx, ro.tokens, ro.n_tokens, (int32_t)muse_context_n_batch(ctx), logits,
                         model_opts_progress(&mo), NULL, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    int64_t t1 = muse_time_us();
    const bool text_out = rt && !ro.print_ids;
    if (text_out && !ro.no_echo) /* as llama-completion: the prompt, then the continuation */
        for (int i = 0; i < ro.n_tokens; i++) run_text_print_token(rt, ro.tokens[i], stdout);
    int64_t n_gen = 0;
    const char *stop = "max-tokens";
    while (n_gen < ro.max_tokens) {
        int32_t tok = muse_sampler_sample(smp, logits);
        muse_sampler_accept(smp, tok);
        n_gen++;
        if (muse_model_token_is_stop(model, tok)) {
            stop = "end of turn (EOS/EOT)";
            break;
        }
        if (text_out) run_text_print_token(rt, tok, stdout);
        else printf("%s%d", n_gen > 1 ? "," : "", tok);
        fflush(stdout);
        if (n_gen == ro.max_tokens) break;
        if (muse_context_n_past(ctx) >= n_ctx) {
            stop = "context full";
            break;
        }
        if (muse_eval(ctx, &tok, 1, logits, 0, &err)) {
            fprintf(stderr, "\n");
            cli_err("%s", err.msg);
            goto done;
        }
    }
    if (text_out) run_text_flush(rt, stdout);
    printf("\n");
    fflush(stdout);
    int64_t t2 = muse_time_us();
    double tp = (double)(t1 - t0) / 1e6, tg = (double)(t2 - t1) / 1e6;
    if (mo.verbosity >= 0)
        cli_err("prompt %d tokens in %.3f s (%.2f tok/s); generated %lld tokens in %.3f s (%.2f tok/s); "
                "stop: %s; backend %s; context %d; seed %llu",
                ro.n_tokens, tp, tp > 0 ? ro.n_tokens / tp : 0.0, (long long)n_gen, tg, tg > 0 ? (double)n_gen / tg : 0.0,
                stop, muse_context_backend(ctx), n_ctx, (unsigned long long)ro.so.sp.seed);
    rc = 0;
done:
    free(logits);
    muse_sampler_free(smp);
    run_text_close(rt);
    muse_context_free(ctx);
    muse_model_free(model);
    free(ro.tokens);
    return rc;
usage_fail:
    free(ro.tokens);
    return usage_rc;
}
