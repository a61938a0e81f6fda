/*
 * cmd_chat.c - `muse chat`: an interactive multi-turn chat (and `muse run --chat`, one shot).
 *
 * Each turn renders the whole conversation with the model file's chat template (or the built-in
 * Muse-Glimmer one), tokenizes it with special-token parsing, and evaluates only the tokens after
 * the longest prefix already in the KV cache (the previous turns are not re-processed; the session
 * layer, src/gen/session.h, the same as the server's slots: a checkpoint of the sliding-window
 * rings where each prompt ends serves the next turn's rewind when the rings cannot). The answer
 * streams through the output parser: reasoning dimmed (or hidden with --hide-reasoning), content
 * plain, tool calls as one line each. See docs/chat.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "core/timer.h"
#include "text/chat.h"
#include "text/output_parser.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "model_opts.h"
#include "muse.h"
#include "sampling_opts.h"
#include "spec_opts.h"

static void usage(FILE *f, const char *cmd) {
    fprintf(f,
            "usage: muse chat -m MODEL [options]            interactive chat (type /help inside)\n"
            "       muse chat -m MODEL -p TEXT [options]    one turn, then exit (also: muse run --chat -p TEXT)\n"
            "       muse chat -m MODEL -p TEXT --dump-prompt   print the rendered prompt and its token ids, no inference\n"
            "  -p, --prompt TEXT      the user message of a one-shot turn\n"
            "  --input FILE           the user message from a file (one shot)\n"
            "  --system TEXT          system prompt (default: the template's own default system turn)\n"
            "  --reasoning R          reasoning strength low|medium|high|xhigh (alias: --reasoning-effort)\n"
            "  --hide-reasoning       do not print the reasoning\n"
            "  --tools FILE.json      tool definitions (OpenAI function list); calls are printed\n"
            "  --template FILE.jinja  chat template to use instead of the file's tokenizer.chat_template\n"
            "  -n, --max-tokens N     tokens per answer at most (default 1024)\n");
    sampling_opts_usage(f, SAMPLING_CHAT);
    fprintf(f, "  --dump-prompt          print the prompt and token ids instead of generating\n");
    spec_opts_usage(f);
    model_opts_usage(f);
    (void)cmd;
}

struct chat_cli {
    struct model_opts mo;
    const char *system, *reasoning, *template_path, *tools_path, *prompt, *input_file;
    bool hide_reasoning, dump_prompt, oneshot;
    int64_t max_tokens;
    struct sampling_opts so;
    struct spec_opts spo;
};

struct session {
    struct chat_cli *o;
    struct muse_model *model;
    struct muse_context *ctx;
    struct muse_tokenizer *tok;
    struct muse_detok *detok;
    struct muse_sampler *smp;
    struct muse_chat *chat;
    struct muse_chat_options copts;
    cJSON *tools;
    char *system_owned;
    struct muse_session *kv; /* the context's KV state: its tokens, prefix reuse, checkpoints */
    struct muse_drafter *drafter; /* --draft-model, or NULL */
    struct muse_spec *gen;   /* the generation loop over kv (speculative with a drafter; the ring follows kv) */
    bool color;
    int shown;        /* 0 nothing yet, 1 reasoning, 2 content */
    int turn;
    uint64_t calls;
};

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    fclose(f);
    if (b) b[n] = '\0';
    *len = n;
    return b;
}

/* ---- output ---- */

static void on_event(void *user, const struct muse_output_event *ev) {
    struct session *s = user;
    if (ev->kind == MUSE_OUTPUT_REASONING) {
        if (s->o->hide_reasoning) return;
        if (s->shown != 1) {
            fputs(s->color ? "\033[2m" : "[reasoning] ", stdout);
            s->shown = 1;
        }
        fwrite(ev->text, 1, ev->len, stdout);
    } else if (ev->kind == MUSE_OUTPUT_CONTENT) {
        if (s->shown == 1) fputs(s->color ? "\033[0m\n" : "\n", stdout);
        s->shown = 2;
        fwrite(ev->text, 1, ev->len, stdout);
    } else {
        if (s->shown == 1 && s->color) fputs("\033[0m", stdout);
        if (s->shown) fputc('\n', stdout);
        printf("[tool call %s] %s(%s)", ev->id, ev->name, ev->arguments);
        s->shown = 2;
    }
    fflush(stdout);
}

/* ---- one turn ---- */

/* Feed a generated token to the parser (control tokens as markers, text through the detokenizer). */
static void feed_token(struct session *s, struct muse_output_parser *p, int32_t id) {
    const char *t;
    size_t n;
    if (muse_tokenizer_is_control(s->tok, id)) {
        if (muse_detok_flush(s->detok, &t, &n) == MUSE_OK && n) muse_output_parser_feed_token(p, t, n, false);
        t = muse_tokenizer_token_bytes(s->tok, id, &n);
        if (t) muse_output_parser_feed_token(p, t, n, true);
    } else if (muse_detok_push(s->detok, id, &t, &n) == MUSE_OK && n) {
        muse_output_parser_feed_token(p, t, n, false);
    }
}

static bool render_prompt(struct session *s, int32_t **ids, size_t *n_ids, char **text, struct muse_error *err) {
    size_t len;
    *ids = NULL;
    if (muse_chat_render(s->chat, &s->copts, true, text, &len, err) != MUSE_OK) return false;
    /* the template writes the BOS text itself; special-token parsing turns it into the BOS id */
    return muse_tokenizer_encode_alloc(s->tok, *text, len, MUSE_TOKENIZE_PARSE_SPECIAL, ids, n_ids, err) == MUSE_OK;
}

static bool run_turn(struct session *s) {
    struct muse_error err;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    struct muse_output_parser *p = NULL;
    bool ok = false;
    s->turn++;
    if (!render_prompt(s, &ids, &n_ids, &text, &err)) {
        fprintf(stderr, "muse chat: %s\n", err.msg);
        goto done;
    }
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(s->ctx);
    if ((int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "muse chat: the conversation needs %zu tokens but the context holds %d (/reset, or a larger --ctx-size)\n",
                n_ids, n_ctx);
        goto done;
    }
    /* reuse the cached prefix; always evaluate at least the last prompt token (for its logits) */
    struct muse_session_keep keep = muse_spec_reuse(s->gen, ids, (int32_t)n_ids);
    const int common = keep.n_kept;
    int64_t t0 = muse_time_us();
    if (muse_spec_eval(s->gen, ids + common, (int32_t)(n_ids - (size_t)common), &err) != MUSE_OK) {
        fprintf(stderr, "muse chat: %s\n", err.msg);
        goto done;
    }
    /* the prompt ends here: the next turn may drop what follows (the reasoning), see session.h */
    if (muse_spec_checkpoint(s->gen, &err) != MUSE_OK) fprintf(stderr, "muse chat: %s\n", err.msg);
    int64_t t1 = muse_time_us();

    muse_sampler_reset(s->smp);
    for (size_t i = 0; i < n_ids; i++) muse_sampler_accept(s->smp, ids[i]);
    muse_spec_begin(s->gen, s->smp);
    muse_spec_stats_reset(s->gen);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "call_t%d_", s->turn);
    struct muse_output_parser_params pp = {.tools = s->tools, .id_prefix = prefix, .callback = on_event, .user = s};
    if (muse_output_parser_create(&pp, &p, &err) != MUSE_OK) goto done;
    muse_detok_reset(s->detok);
    s->shown = 0;
    int64_t n_gen = 0;
    const char *stop = "max-tokens";
    while (n_gen < s->o->max_tokens) {
        int32_t t;
        if (muse_spec_sample(s->gen, &t, NULL, &err) != MUSE_OK) {
            fprintf(stderr, "\nmuse chat: %s\n", err.msg);
            break;
        }
        n_gen++;
        feed_token(s, p, t);
        if (muse_model_token_is_stop(s->model, t)) {
            stop = "end of turn";
            break;
        }
        if (n_gen >= s->o->max_tokens) break;
        if (muse_spec_n_past(s->gen) >= n_ctx) {
            stop = "context full";
            break;
        }
        if (muse_spec_advance(s->gen, t, s->o->max_tokens - n_gen, &err) != MUSE_OK) {
            fprintf(stderr, "\nmuse chat: %s\n", err.msg);
            break;
        }
    }
    const char *rest;
    size_t rn;
    if (muse_detok_flush(s->detok, &rest, &rn) == MUSE_OK && rn) muse_output_parser_feed_token(p, rest, rn, false);
    muse_output_parser_finish(p);
    if (s->shown == 1 && s->color) fputs("\033[0m", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (muse_chat_add_parsed(s->chat, p, &err) != MUSE_OK) fprintf(stderr, "muse chat: %s\n", err.msg);
    int64_t t2 = muse_time_us();
    double tp = (double)(t1 - t0) / 1e6, tg = (double)(t2 - t1) / 1e6;
    /* a sliding-window miss (the rings could not rewind to the common prefix) is shown, not hidden */
    char miss[96] = "";
    if (keep.kind == MUSE_SESSION_KEEP_RESTORED)
        snprintf(miss, sizeof miss, "; sliding-window miss: checkpoint at %d restored", keep.ckpt_pos);
    else if (keep.kind == MUSE_SESSION_KEEP_CLEARED)
        snprintf(miss, sizeof miss, "; sliding-window miss: %d cached tokens re-evaluated", keep.n_asked);
    char spec[512];
    spec_opts_summary(s->gen, spec, sizeof spec);
    fprintf(stderr, "[turn %d: prompt %zu tokens, %d reused from the cache, %zu evaluated in %.3f s; generated %lld tokens in %.3f s (%.2f tok/s); stop: %s%s%s%s]\n",
            s->turn, n_ids, common, n_ids - (size_t)common, tp, (long long)n_gen, tg, tg > 0 ? (double)n_gen / tg : 0.0, stop, miss,
            spec[0] ? "; " : "", spec);
    ok = true;
done:
    if (!ok && muse_chat_n_messages(s->chat) > 0) {
        /* forget the user message that could not be answered */
        cJSON_DeleteItemFromArray((cJSON *)muse_chat_messages(s->chat), (int)muse_chat_n_messages(s->chat) - 1);
    }
    muse_output_parser_free(p);
    free(ids);
    free(text);
    return ok;
}

/* ---- setup ---- */

static int parse_args(struct chat_cli *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&o->mo, argc, argv, &i);
        if (r == 0) r = sampling_opts_parse(&o->so, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&o->spo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "--chat")) {
            o->oneshot = true; /* muse run --chat */
        } else if (!strcmp(a, "--hide-reasoning")) {
            o->hide_reasoning = true;
        } else if (!strcmp(a, "--dump-prompt")) {
            o->dump_prompt = true;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "--input") || !strcmp(a, "--system") ||
                   !strcmp(a, "--reasoning") || !strcmp(a, "--reasoning-effort") || !strcmp(a, "--reasoning-strength") ||
                   !strcmp(a, "--template") || !strcmp(a, "--tools")) {
            if (!(v = cli_next(argc, argv, &i))) return 2;
            if (a[1] == 'p' || !strcmp(a, "--prompt")) o->prompt = v;
            else if (!strcmp(a, "--input")) o->input_file = v;
            else if (!strcmp(a, "--system")) o->system = v;
            else if (!strncmp(a, "--reasoning", 11)) o->reasoning = v;
            else if (!strcmp(a, "--template")) o->template_path = v;
            else o->tools_path = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, INT32_MAX, &o->max_tokens)) return 2;
        } else {
            fprintf(stderr, "muse %s: unknown option '%s'\n", argv[0], a);
            return 2;
        }
    }
    if (o->reasoning && !muse_chat_reasoning_strength(o->reasoning)) {
        fprintf(stderr, "muse chat: --reasoning must be low, medium, high or xhigh (the model always reasons; use low)\n");
        return 2;
    }
    if (!o->mo.model_path) {
        fprintf(stderr, "muse chat: -m MODEL is required\n");
        return 2;
    }
    if (o->prompt || o->input_file) o->oneshot = true;
    if (o->oneshot && !o->prompt && !o->input_file) {
        fprintf(stderr, "muse chat: a one-shot turn needs -p TEXT or --input FILE\n");
        return 2;
    }
    if (o->dump_prompt && !o->oneshot) {
        fprintf(stderr, "muse chat: --dump-prompt needs -p TEXT or --input FILE\n");
        return 2;
    }
    return -1; /* go on */
}

/* Tokenizer and chat template from the GGUF (no weights needed). */
static bool open_text(struct session *s, struct muse_error *err) {
    struct muse_gguf *g = NULL;
    bool ok = false;
    char *tfile = NULL;
    size_t tlen = 0;
    if (muse_gguf_open(s->o->mo.model_path, &g, err) != MUSE_OK) return false;
    if (muse_tokenizer_init_from_gguf(g, &s->tok, err) != MUSE_OK) {
        muse_error_prefix(err, "the model's tokenizer: ");
        goto done;
    }
    const char *tsrc = NULL;
    if (s->o->template_path) {
        if (!(tfile = read_all(s->o->template_path, &tlen))) {
            muse_error_set(err, MUSE_ERR_IO, "cannot read %s", s->o->template_path);
            goto done;
        }
        tsrc = tfile;
    } else {
        const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, "tokenizer.chat_template");
        if (kv && kv->value.type == MUSE_GGUF_TYPE_STRING) {
            tsrc = kv->value.v.str.data;
            tlen = (size_t)kv->value.v.str.len;
        }
    }
    if (muse_chat_create(tsrc, tlen, &s->chat, err) != MUSE_OK) {
        muse_error_prefix(err, "chat template: ");
        goto done;
    }
    int32_t bos = muse_tokenizer_bos(s->tok), eos = muse_tokenizer_eos(s->tok);
    s->copts.bos_token = bos >= 0 ? muse_tokenizer_token_text(s->tok, bos, NULL) : "";
    s->copts.eos_token = eos >= 0 ? muse_tokenizer_token_text(s->tok, eos, NULL) : "";
    s->copts.system_prompt = s->o->system;
    s->copts.reasoning = s->o->reasoning;
    if (s->o->tools_path) {
        size_t n;
        char *js = read_all(s->o->tools_path, &n);
        s->tools = js ? cJSON_Parse(js) : NULL;
        free(js);
        if (!cJSON_IsArray(s->tools)) {
            muse_error_set(err, MUSE_ERR_FORMAT, "%s: not a JSON array of tools", s->o->tools_path);
            goto done;
        }
        s->copts.tools = s->tools;
    }
    s->detok = muse_detok_init(s->tok, 0);
    if (!s->detok) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto done;
    }
    ok = true;
done:
    free(tfile);
    muse_gguf_free(g);
    return ok;
}

static int dump_prompt(struct session *s, const char *user) {
    struct muse_error err;
    int32_t *ids;
    size_t n;
    char *text;
    if (muse_chat_add(s->chat, "user", user, &err) != MUSE_OK || !render_prompt(s, &ids, &n, &text, &err)) {
        fprintf(stderr, "muse chat: %s\n", err.msg);
        return 1;
    }
    fputs(text, stdout);
    printf("\n\ntokens (%zu):", n);
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : " ", ids[i]);
    printf("\n");
    free(ids);
    free(text);
    return 0;
}

static void repl_help(void) {
    printf("commands: /reset (forget the conversation), /system TEXT (set the system prompt),\n"
           "          /tool TEXT (answer the last tool call with TEXT and continue), /exit\n");
}

/* Add a tool result for the most recent tool call; false when there is none. */
static bool add_tool_result(struct session *s, const char *text) {
    const cJSON *msgs = muse_chat_messages(s->chat);
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
    const cJSON *call = cJSON_GetArrayItem(calls, cJSON_GetArraySize(calls) - 1);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call, "function"), "name");
    if (!cJSON_IsString(id) || !cJSON_IsString(name)) return false;
    cJSON *m = cJSON_CreateObject();
    bool ok = m && cJSON_AddStringToObject(m, "role", "tool") && cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) &&
              cJSON_AddStringToObject(m, "name", name->valuestring) && cJSON_AddStringToObject(m, "content", text) &&
              muse_chat_add_json(s->chat, m, NULL) == MUSE_OK;
    cJSON_Delete(m);
    return ok;
}

static int repl(struct session *s) {
    char *line = NULL;
    size_t cap = 0;
    bool tty = isatty(STDIN_FILENO);
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (tty) fputc('\n', stdout);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if (line[0] == '/') {
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            if (!strcmp(line, "/reset")) {
                muse_chat_reset(s->chat);
                muse_spec_clear(s->gen);
                printf("(conversation reset)\n");
            } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || line[7] == '\0')) {
                free(s->system_owned);
                s->system_owned = line[7] ? strdup(line + 8) : NULL;
                s->copts.system_prompt = s->system_owned;
                printf(s->system_owned ? "(system prompt set)\n" : "(system prompt cleared)\n");
            } else if (!strncmp(line, "/tool ", 6)) {
                if (add_tool_result(s, line + 6)) run_turn(s);
                else printf("(no tool call to answer)\n");
            } else if (!strcmp(line, "/help")) {
                repl_help();
            } else {
                printf("unknown command %s; ", line);
                repl_help();
            }
            continue;
        }
        struct muse_error err;
        if (muse_chat_add(s->chat, "user", line, &err) != MUSE_OK) {
            fprintf(stderr, "muse chat: %s\n", err.msg);
            continue;
        }
        run_turn(s);
    }
    free(line);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    struct chat_cli o = {.max_tokens = 1024};
    model_opts_init(&o.mo);
    sampling_opts_init(&o.so, SAMPLING_CHAT);
    spec_opts_init(&o.spo);
    int r = parse_args(&o, argc, argv);
    if (r >= 0) {
        if (r == 2) usage(stderr, argv[0]);
        return r;
    }
    struct session s = {.o = &o, .color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR")};
    struct muse_error err;
    int rc = 1;
    char *input = NULL;
    if (!open_text(&s, &err)) {
        fprintf(stderr, "muse chat: %s\n", err.msg);
        goto done;
    }
    const char *user = o.prompt;
    if (o.input_file) {
        size_t n;
        if (!(input = read_all(o.input_file, &n))) {
            fprintf(stderr, "muse chat: cannot read %s\n", o.input_file);
            goto done;
        }
        user = input;
    }
    if (o.dump_prompt) {
        rc = dump_prompt(&s, user);
        goto done;
    }
    if (!model_opts_open(&o.mo, "chat", &s.model, &s.ctx)) goto done;
    if (!spec_opts_load(&o.spo, "chat", s.model, &s.drafter)) goto done;
    int32_t n_vocab = muse_model_n_vocab(s.model);
    if (muse_session_create(s.ctx, muse_session_default_params(), &s.kv, &err) != MUSE_OK ||
        muse_spec_create(s.kv, s.drafter, o.spo.sp, &s.gen, &err) != MUSE_OK ||
        muse_sampler_create(o.so.sp, n_vocab, &s.smp, &err) != MUSE_OK) {
        fprintf(stderr, "muse chat: %s\n", err.msg);
        goto done;
    }
    if (o.oneshot) {
        if (muse_chat_add(s.chat, "user", user, &err) != MUSE_OK) goto done;
        rc = run_turn(&s) ? 0 : 1;
    } else {
        char desc[256];
        muse_model_desc(s.model, desc, sizeof(desc));
        fprintf(stderr, "muse chat: %s, context %u tokens. /help for commands, /exit to quit.\n", desc,
                muse_context_n_ctx(s.ctx));
        rc = repl(&s);
    }
done:
    free(input);
    free(s.system_owned);
    muse_spec_free(s.gen);
    muse_session_free(s.kv);
    muse_drafter_free(s.drafter);
    cJSON_Delete(s.tools);
    muse_sampler_free(s.smp);
    muse_detok_free(s.detok);
    muse_chat_free(s.chat);
    muse_tokenizer_free(s.tok);
    muse_context_free(s.ctx);
    muse_model_free(s.model);
    return rc;
}
