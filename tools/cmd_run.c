/*
 * cmd_run.c - `muse run`: one-shot generation, llama-completion style. Processes the prompt
 * (chunked by --batch-size, with a progress line on a terminal when it is longer than a chunk),
 * echoes it (unless --no-display-prompt), then samples token by token (greedy unless --temp > 0),
 * streaming each token to stdout as it is produced; stops at EOS / EOT (never at EOM), at
 * --n-predict or when the context is full. Prompt and generation speed go to stderr at the end.
 * With --image: the prompt's <__media__> markers (or, when it has none, the start of the prompt)
 * take the images' rows between <|image_start|> and <|image_end|> (src/gen/media.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gen/media.h"
#include "gen/constrain.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "media_opts.h"
#include "model_opts.h"
#include "muse.h"
#include "progress.h"
#include "run_text.h"
#include "text/tokenizer.h"
#include "sampling_opts.h"
#include "spec_opts.h"
#include "text_opts.h"

struct run_opts {
    const char *prompt_text;
    const char *input_file;
    int32_t *tokens;
    int n_tokens;
    int64_t max_tokens;
    bool print_ids, no_echo, help, ignore_eos;
    struct sampling_opts so;
    struct spec_opts spo;
    struct text_opts to;
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
    else if (!strcmp(f, "--ignore-eos")) R(d)->ignore_eos = true;
    else R(d)->help = true;
    return 0;
}

static const struct cli_opt rows[] = {
    {"-p|--prompt", "TEXT", "prompt text (tokenized with the model's tokenizer, BOS added)", set_prompt},
    {"-f|--file|--input", "FILE", "prompt text from a UTF-8 file; - = standard input", set_file},
    {"--tokens", "IDS", "prompt as comma-separated token ids (used as given)", set_tokens},
    {"-n|--n-predict|--predict|--max-tokens", "N", "tokens to generate at most (default 128; 0 = prompt only;\n"
                                                   "-1 = until the context is full)", set_n},
    {"--ignore-eos", NULL, "do not stop at EOS / EOT: the end token is left out of the output and generation\n"
                           "goes on (to -n, the context's end or a -r text)", set_flag},
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
    text_opts_usage(f);
    fprintf(f, "  (-r: the text is printed, then generation stops; the prompt itself is never matched)\n");
    sampling_opts_usage(f, SAMPLING_RUN);
    spec_opts_usage(f);
    model_opts_usage(f);
    media_opts_usage(f);
}

struct encode_progress {
    struct progress p;
    int n_images;
};

static int encode_progress_cb(void *user, int32_t image, uint64_t done, uint64_t total) {
    struct encode_progress *e = user;
    progress_draw(&e->p, false, "encoding image %d of %d: layer %d/%d", image + 1, e->n_images, (int)done, (int)total);
    return 0;
}

/*
 * The prompt of a run with images: the text (with one <__media__> per image put first when it has
 * no marker, as llama-mtmd-cli does) split at its markers around the images' rows. On failure
 * prints the error and returns false.
 */
static bool media_prompt(struct run_text *rt, const struct run_opts *ro, struct media_ctx *m,
                         struct muse_media_prompt *mp) {
    static const char *const markers[] = {MUSE_MEDIA_MARKER_MTMD, MUSE_MEDIA_MARKER_PATCH};
    struct muse_error err;
    size_t len = 0;
    char *text = ro->prompt_text ? strdup(ro->prompt_text) : cli_read_file(ro->input_file, &len);
    if (!text) {
        cli_err("cannot read %s", ro->input_file && strcmp(ro->input_file, "-") ? ro->input_file : "the prompt");
        return false;
    }
    len = strlen(text);
    if (!strstr(text, markers[0]) && !strstr(text, markers[1])) {
        const size_t ml = strlen(markers[0]);
        char *t = malloc(ml * (size_t)m->n_images + len + 1);
        if (!t) {
            free(text);
            cli_err("out of memory");
            return false;
        }
        for (int k = 0; k < m->n_images; k++) memcpy(t + ml * (size_t)k, markers[0], ml);
        memcpy(t + ml * (size_t)m->n_images, text, len + 1);
        free(text);
        text = t;
        len = strlen(text);
    }
    struct muse_tokenizer *tok = run_text_tokenizer(rt);
    muse_status st = muse_media_prompt_add_text(mp, tok, m->vision, text, len, muse_tokenizer_add_bos(tok), markers, 2,
                                                m->images, m->n_images, false, m->max_tokens, &err);
    free(text);
    if (st) cli_err("%s", err.msg);
    return st == MUSE_OK;
}

/* The media prompt's positions (text and image rows) into the session: muse_gen_eval_rows. */
struct media_rows {
    struct muse_session *s;
    struct muse_media_cache *cache;
    struct muse_media_prompt *p;
};

static muse_status media_rows_eval(void *user, float *logits, struct muse_error *err) {
    const struct media_rows *m = user;
    return muse_media_eval(m->s, m->cache, m->p, 0, m->p->n, logits, 0, err);
}

static void emit_stdout(void *user, const char *s, size_t n) {
    (void)user;
    if (n) fwrite(s, 1, n, stdout);
}

static void emit_none(void *user, const char *s, size_t n) { (void)user, (void)s, (void)n; }

/* A prompt chunk through the generation loop (target and drafter ring); the loop keeps the last
 * chunk's logits for the first sample. */
static muse_status eval_gen(void *g, const int32_t *t, int32_t n, float *logits, struct muse_error *err) {
    (void)logits;
    return muse_gen_eval(g, t, n, err);
}

int cmd_run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--chat")) return cmd_chat(argc, argv); /* chat formatting: tools/cmd_chat.c */
    struct model_opts mo;
    struct media_opts md;
    struct run_opts ro = {.max_tokens = 128};
    model_opts_init(&mo);
    media_opts_init(&md);
    sampling_opts_init(&ro.so, SAMPLING_RUN);
    spec_opts_init(&ro.spo);
    text_opts_init(&ro.to);
    int usage_rc = 2;
    char *prompt_owned = NULL; /* -p with its escapes processed */
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r == 0) r = sampling_opts_parse(&ro.so, argc, argv, &i);
        if (r == 0) r = text_opts_parse(&ro.to, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&ro.spo, argc, argv, &i);
        if (r == 0) r = cli_opts_parse(rows, N_ROWS, &ro, argc, argv, &i);
        if (r == 0) r = media_opts_parse(&md, argc, argv, &i);
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
    if (md.n_images > 0 && ro.tokens) {
        cli_usage_err("--image needs a text prompt (-p or -f; for token ids with images: muse logits --tokens ...,img,...)");
        goto usage_fail;
    }
    if (ro.prompt_text && !(ro.prompt_text = prompt_owned = text_opts_prompt(&ro.to, ro.prompt_text))) {
        cli_err("out of memory");
        media_opts_free(&md);
        return 1;
    }
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    struct muse_sampler *smp = NULL;
    struct run_text *rt = NULL;
    struct muse_drafter *drafter = NULL;
    struct muse_session *ses = NULL;
    struct muse_gen *gen = NULL; /* the generation loop (src/gen/generate.h) */
    struct muse_spec *sp = NULL; /* speculative decoding plugged into it, with a drafter (src/speculative/spec.h) */
    struct muse_grammar *grammar = NULL;
    struct muse_grammar_vocab *gvocab = NULL;
    struct muse_constraint *cons = NULL;
    int rc = 1;
    struct muse_error err;
    struct media_ctx media = {0};
    struct muse_media_prompt mp = {0};
    struct stop_match *sm = NULL; /* -r */
    /* text in and out (the tokenizer), or ids only; the prompt is read before the model loads */
    if (run_text_open(mo.model_path, &rt, &err)) {
        if (ro.prompt_text || ro.input_file || ro.to.n_stops) {
            cli_err("%s", err.msg);
            goto done;
        }
        rt = NULL; /* ids in, ids out */
        ro.print_ids = true;
    }
    bool oom;
    if (!(sm = stop_match_create(&ro.to, true, &oom)) && oom) {
        cli_err("out of memory");
        goto done;
    }
    if (md.n_images == 0 && !ro.tokens && run_text_encode_prompt(rt, ro.prompt_text, ro.input_file, &ro.tokens, &ro.n_tokens, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    if (ro.so.grammar || ro.so.grammar_file || ro.so.json_schema || ro.so.json_schema_file) {
        if (!rt) {
            cli_err("a grammar needs the model's tokenizer (%s)", err.msg);
            goto done;
        }
        const struct muse_tokenizer *tok = run_text_tokenizer(rt);
        if (!sampling_opts_grammar(&ro.so, tok, &grammar, &err)) {
            cli_err("%s", err.msg);
            if (err.status == MUSE_ERR_INVALID_ARG) rc = 2; /* a bad --grammar / --json-schema value */
            goto done;
        }
        if (muse_grammar_vocab_from_tokenizer(tok, &gvocab, &err) ||
            muse_constraint_create(grammar, gvocab, tok, NULL, NULL, &cons, &err)) {
            cli_err("%s", err.msg);
            goto done;
        }
    }
    if (!model_opts_open(&mo, "run", &model, &ctx)) goto done;
    if (!media_open(&md, mo.model_path, model, muse_context_n_threads(ctx), mo.cparams.backend, false, mo.verbosity < 0,
                    &media))
        goto done;
    if (md.n_images > 0) {
        if (!media_prompt(rt, &ro, &media, &mp)) goto done;
        ro.tokens = malloc(sizeof *ro.tokens * (size_t)mp.n);
        if (!ro.tokens) goto done;
        memcpy(ro.tokens, mp.ids, sizeof *ro.tokens * (size_t)mp.n);
        ro.n_tokens = mp.n;
    }
    const int32_t n_vocab = muse_model_n_vocab(model);
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(ctx);
    if (ro.n_tokens > n_ctx) {
        cli_err("the prompt has %d tokens but the context holds %d (use a larger --ctx-size)", ro.n_tokens, n_ctx);
        goto done;
    }
    if (!spec_opts_load(&ro.spo, "run", model, &drafter)) goto done;
    struct muse_session_params ps = {.n_checkpoints = 0};
    if (muse_sampler_create(ro.so.sp, n_vocab, &smp, &err) || muse_session_create(ctx, ps, &ses, &err) ||
        muse_gen_create(ses, &gen, &err) || (drafter && muse_spec_create(gen, drafter, ro.spo.sp, &sp, &err))) {
        cli_err("%s", err.msg);
        goto done;
    }
    for (int i = 0; i < ro.n_tokens; i++)
        if (ro.tokens[i] >= 0) muse_sampler_accept(smp, ro.tokens[i]); /* image rows are no tokens */

    int64_t t0 = muse_time_us();
    if (md.n_images > 0) {
        /* image rows through the loop: the drafter's ring restarts after them, and this turn is
         * decoded plainly (docs/speculative.md) */
        struct encode_progress ep = {.n_images = media.n_images};
        progress_begin(&ep.p, model_opts_progress(&mo));
        if (ep.p.on) muse_media_cache_set_progress(media.cache, encode_progress_cb, &ep);
        struct media_rows rows = {ses, media.cache, &mp};
        muse_status st = muse_gen_eval_rows(gen, media_rows_eval, &rows, &err);
        progress_end(&ep.p);
        if (sp) muse_spec_set_drafting(sp, false);
        if (st) {
            cli_err("%s", err.msg);
            goto done;
        }
    } else if (progress_prefill(eval_gen, gen, ro.tokens, ro.n_tokens, (int32_t)muse_context_n_batch(ctx), NULL,
                                model_opts_progress(&mo), NULL, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    muse_gen_begin(gen, smp);
    muse_gen_constrain(gen, cons); /* a grammar: sampled through it, no drafting */
    int64_t t1 = muse_time_us();
    const bool text_out = rt && !ro.print_ids;
    if (text_out && !ro.no_echo) /* as llama-completion: the prompt, then the continuation */
        for (int i = 0; i < ro.n_tokens; i++)
            if (ro.tokens[i] >= 0) run_text_print_token(rt, ro.tokens[i], stdout);
    int64_t n_gen = 0;
    const char *stop = "max-tokens";
    char stop_buf[160];
    while (n_gen < ro.max_tokens) {
        int32_t tok;
        if (muse_gen_sample(gen, &tok, NULL, &err)) {
            fprintf(stderr, "\n");
            cli_err("%s", err.msg);
            goto done;
        }
        n_gen++;
        const bool eos = muse_model_token_is_stop(model, tok);
        if (eos && !ro.ignore_eos) {
            stop = "end of turn (EOS/EOT)";
            break;
        }
        bool hit = false;
        if (!text_out && !eos) printf("%s%d", n_gen > 1 ? "," : "", tok);
        if (rt && !eos) { /* --ignore-eos: the end token is not part of the text */
            const char *piece;
            size_t len;
            run_text_piece(rt, tok, &piece, &len);
            if (sm) hit = stop_match_feed(sm, piece, len, text_out ? emit_stdout : emit_none, NULL);
            else if (text_out) fwrite(piece, 1, len, stdout);
        }
        fflush(stdout);
        if (hit) {
            char shown[128];
            snprintf(stop_buf, sizeof stop_buf, "reverse prompt \"%s\"", text_show(stop_match_hit(sm), shown, sizeof shown));
            stop = stop_buf;
            break;
        }
        if (n_gen == ro.max_tokens) break;
        if (muse_gen_n_past(gen) >= n_ctx) {
            stop = "context full";
            break;
        }
        if (muse_gen_advance(gen, tok, ro.max_tokens - n_gen, &err)) {
            fprintf(stderr, "\n");
            cli_err("%s", err.msg);
            goto done;
        }
    }
    if (rt && !stop_match_hit(sm)) {
        const char *piece;
        size_t len;
        run_text_flush_piece(rt, &piece, &len);
        if (sm) {
            stop_match_feed(sm, piece, len, text_out ? emit_stdout : emit_none, NULL);
            stop_match_flush(sm, text_out ? emit_stdout : emit_none, NULL);
        } else if (text_out) {
            fwrite(piece, 1, len, stdout);
        }
    }
    printf("\n");
    fflush(stdout);
    int64_t t2 = muse_time_us();
    double tp = (double)(t1 - t0) / 1e6, tg = (double)(t2 - t1) / 1e6;
    if (mo.verbosity >= 0) {
        cli_err("prompt %d tokens in %.3f s (%.2f tok/s); generated %lld tokens in %.3f s (%.2f tok/s); "
                "stop: %s; backend %s; context %d; seed %llu",
                ro.n_tokens, tp, tp > 0 ? ro.n_tokens / tp : 0.0, (long long)n_gen, tg, tg > 0 ? (double)n_gen / tg : 0.0,
                stop, muse_context_backend(ctx), n_ctx, (unsigned long long)ro.so.sp.seed);
        char summary[512];
        spec_opts_summary(sp, mo.verbosity > 0, summary, sizeof summary);
        if (summary[0]) cli_err("%s", summary);
    }
    if (mo.verbosity >= 0 && media.cache && media.n_images > 0) {
        const struct muse_media_cache_stats cs = muse_media_cache_stats(media.cache);
        cli_err("images: %d, %llu rows from the vision tower in %.3f s (%.1f tokens/s)", media.n_images,
                (unsigned long long)cs.tokens_encoded, cs.encode_s,
                cs.encode_s > 0 ? (double)cs.tokens_encoded / cs.encode_s : 0.0);
    }
    if (cons && mo.verbosity > 0) { /* -v: the grammar's cost */
        uint64_t ns = 0, nm = 0;
        double ms = 0;
        muse_constraint_counts(cons, &ns, &nm, &ms);
        cli_err("grammar: %llu tokens checked, %llu of them refused and sampled again from the allowed ones; "
                "%.3f ms in the grammar (%.3f ms per token)",
                (unsigned long long)ns, (unsigned long long)nm, ms, ns ? ms / (double)ns : 0.0);
    }
    rc = 0;
done:
    stop_match_free(sm);
    free(prompt_owned);
    muse_spec_free(sp);
    muse_gen_free(gen);
    muse_session_free(ses);
    muse_drafter_free(drafter);
    muse_sampler_free(smp);
    muse_constraint_free(cons);
    muse_grammar_free(grammar);
    muse_grammar_vocab_free(gvocab);
    run_text_close(rt);
    muse_media_prompt_free(&mp);
    media_close(&media);
    media_opts_free(&md);
    muse_context_free(ctx);
    muse_model_free(model);
    free(ro.tokens);
    return rc;
usage_fail:
    free(ro.tokens);
    media_opts_free(&md);
    return usage_rc;
}
