/*
 * cmd_run.c - `muse run`: one-shot generation. Processes the prompt (chunked by --batch), then
 * samples token by token (greedy unless --temperature > 0), streaming each token to stdout as
 * it is produced; stops at EOS / EOT (never at EOM), at --max-tokens or when the context is
 * full. Prompt and generation speed go to stderr at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gen/sampler.h"
#include "model_opts.h"
#include "muse.h"
#include "run_text.h"
#include "sampling_opts.h"
#include "spec_opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse run -m MODEL (-p TEXT | --input FILE | --tokens IDS) [--max-tokens N] [sampling] [options]\n"
            "Generates text from a raw prompt (no chat template; --chat applies it: see muse chat --help).\n"
            "Greedy unless --temperature > 0.\n"
            "  -p, --prompt TEXT      prompt text (tokenized with the model's tokenizer, BOS added)\n"
            "  --input FILE           prompt text from a UTF-8 file\n"
            "  --tokens IDS           prompt as comma-separated token ids (used as given)\n"
            "  -n, --max-tokens N     tokens to generate at most (default 128; 0 = prompt only)\n"
            "  --ids                  print generated token ids instead of text\n");
    sampling_opts_usage(f, SAMPLING_RUN);
    spec_opts_usage(f);
    model_opts_usage(f);
}

struct run_opts {
    const char *prompt_text;
    const char *input_file;
    int32_t *tokens;
    int n_tokens;
    int64_t max_tokens;
    bool print_ids;
    struct sampling_opts so;
    struct spec_opts spo;
};

int cmd_run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--chat")) return cmd_chat(argc, argv); /* chat formatting: tools/cmd_chat.c */
    struct model_opts mo;
    struct run_opts ro = {.max_tokens = 128};
    model_opts_init(&mo);
    sampling_opts_init(&ro.so, SAMPLING_RUN);
    spec_opts_init(&ro.spo);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r == 0) r = sampling_opts_parse(&ro.so, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&ro.spo, argc, argv, &i);
        if (r < 0) goto usage_fail;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(ro.tokens);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(ro.prompt_text = cli_next(argc, argv, &i))) goto usage_fail;
        } else if (!strcmp(a, "--input")) {
            if (!(ro.input_file = cli_next(argc, argv, &i))) goto usage_fail;
        } else if (!strcmp(a, "--tokens")) {
            free(ro.tokens);
            ro.tokens = NULL;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_ids(a, v, &ro.tokens, &ro.n_tokens)) goto usage_fail;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT32_MAX, &ro.max_tokens)) goto usage_fail;
        } else if (!strcmp(a, "--ids")) {
            ro.print_ids = true;
        } else {
            fprintf(stderr, "muse run: unknown option '%s'\n", a);
            goto usage_fail;
        }
    }
    if (!mo.model_path || (!ro.prompt_text && !ro.input_file && !ro.tokens) ||
        (!!ro.prompt_text + !!ro.input_file + !!ro.tokens) > 1) {
        fprintf(stderr, "muse run: -m MODEL and exactly one of -p TEXT, --input FILE, --tokens IDS are required\n");
        goto usage_fail;
    }
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    struct muse_sampler *smp = NULL;
    struct run_text *rt = NULL;
    struct muse_drafter *drafter = NULL;
    struct muse_session *ses = NULL;
    struct muse_spec *sp = NULL; /* the generation loop, speculative with a drafter (src/speculative/spec.h) */
    int rc = 1;
    struct muse_error err;
    if (!model_opts_open(&mo, "run", &model, &ctx)) {
        free(ro.tokens);
        return 1;
    }
    /* text in and out (the tokenizer), or ids only */
    if (run_text_open(mo.model_path, &rt, &err)) {
        if (ro.prompt_text || ro.input_file) {
            fprintf(stderr, "muse run: %s\n", err.msg);
            goto done;
        }
        rt = NULL; /* ids in, ids out */
        ro.print_ids = true;
    }
    if (!ro.tokens && run_text_encode_prompt(rt, ro.prompt_text, ro.input_file, &ro.tokens, &ro.n_tokens, &err)) {
        fprintf(stderr, "muse run: %s\n", err.msg);
        goto done;
    }
    const int32_t n_vocab = muse_model_n_vocab(model);
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(ctx);
    if (ro.n_tokens > n_ctx) {
        fprintf(stderr, "muse run: the prompt has %d tokens but the context holds %d (use a larger --ctx-size)\n",
                ro.n_tokens, n_ctx);
        goto done;
    }
    if (!spec_opts_load(&ro.spo, "run", model, &drafter)) goto done;
    struct muse_session_params ps = {.n_checkpoints = 0};
    if (muse_sampler_create(ro.so.sp, n_vocab, &smp, &err) || muse_session_create(ctx, ps, &ses, &err) ||
        muse_spec_create(ses, drafter, ro.spo.sp, &sp, &err)) {
        fprintf(stderr, "muse run: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < ro.n_tokens; i++) muse_sampler_accept(smp, ro.tokens[i]);

    int64_t t0 = muse_time_us();
    if (muse_spec_eval(sp, ro.tokens, ro.n_tokens, &err)) {
        fprintf(stderr, "muse run: %s\n", err.msg);
        goto done;
    }
    muse_spec_begin(sp, smp);
    int64_t t1 = muse_time_us();
    int64_t n_gen = 0;
    const char *stop = "max-tokens";
    while (n_gen < ro.max_tokens) {
        int32_t tok;
        if (muse_spec_sample(sp, &tok, NULL, &err)) {
            fprintf(stderr, "\nmuse run: %s\n", err.msg);
            goto done;
        }
        n_gen++;
        if (muse_model_token_is_stop(model, tok)) {
            stop = "end of turn (EOS/EOT)";
            break;
        }
        if (ro.print_ids || !rt) printf("%s%d", n_gen > 1 ? " " : "", tok);
        else run_text_print_token(rt, tok, stdout);
        fflush(stdout);
        if (n_gen == ro.max_tokens) break;
        if (muse_spec_n_past(sp) >= n_ctx) {
            stop = "context full";
            break;
        }
        if (muse_spec_advance(sp, tok, ro.max_tokens - n_gen, &err)) {
            fprintf(stderr, "\nmuse run: %s\n", err.msg);
            goto done;
        }
    }
    if (rt && !ro.print_ids) run_text_flush(rt, stdout);
    printf("\n");
    fflush(stdout);
    int64_t t2 = muse_time_us();
    double tp = (double)(t1 - t0) / 1e6, tg = (double)(t2 - t1) / 1e6;
    fprintf(stderr, "muse run: prompt %d tokens in %.3f s (%.2f tok/s); generated %lld tokens in %.3f s (%.2f tok/s); "
                    "stop: %s; backend %s; seed %llu\n",
            ro.n_tokens, tp, tp > 0 ? ro.n_tokens / tp : 0.0, (long long)n_gen, tg, tg > 0 ? (double)n_gen / tg : 0.0, stop,
            muse_context_backend(ctx), (unsigned long long)ro.so.sp.seed);
    char summary[512];
    spec_opts_summary(sp, summary, sizeof summary);
    if (summary[0]) fprintf(stderr, "muse run: %s\n", summary);
    rc = 0;
done:
    muse_spec_free(sp);
    muse_session_free(ses);
    muse_drafter_free(drafter);
    muse_sampler_free(smp);
    run_text_close(rt);
    muse_context_free(ctx);
    muse_model_free(model);
    free(ro.tokens);
    return rc;
usage_fail:
    free(ro.tokens);
    usage(stderr);
    return 2;
}
