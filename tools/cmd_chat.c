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
 *
 * Interactive use: the line editor of line_edit.h (libedit, history in ~/.muse_history); a line
 * ending in a backslash continues on the next, and a """ line opens a block that a line ending in
 * """ closes. Ctrl-C stops an answer (what was generated is kept as the assistant's turn) or a
 * prompt being processed (the message is dropped) and returns to the prompt; Ctrl-C at an empty
 * prompt quits with status 130, as llama-cli does (/exit and Ctrl-D quit with 0), except within
 * CHAT_CTRL_C_GRACE_US after a turn ended (that one was meant for the answer). A conversation
 * that outgrows the context drops its oldest exchanges (the system prompt stays) and continues
 * (--no-context-shift: the turn fails instead).
 *
 * Generation goes through the loop of src/speculative/spec.h over the session: with --draft-model
 * it drafts and verifies (the output is unchanged), and the drafter's ring follows the session's
 * prefix reuse, checkpoints, context shifts and /reset.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "core/timer.h"
#include "text/chat.h"
#include "text/output_parser.h"
#include "gen/constrain.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "gen/media.h"
#include "line_edit.h"
#include "media_opts.h"
#include "model_opts.h"
#include "muse.h"
#include "progress.h"
#include "sampling_opts.h"
#include "spec_opts.h"
#include "text_opts.h"

struct chat_cli {
    struct model_opts mo;
    const char *system, *reasoning, *template_path, *tools_path, *prompt, *input_file;
    bool hide_reasoning, dump_prompt, oneshot, help, ignore_eos;
    bool context_shift;
    int64_t max_tokens;
    struct sampling_opts so;
    struct media_opts md;
    struct spec_opts spo;
    struct text_opts to;
    char *prompt_owned; /* -p with its escapes processed */
};

#define C(dst) ((struct chat_cli *)(dst))

static int set_str(void *d, const char *f, const char *v) {
    struct chat_cli *o = C(d);
    if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) o->prompt = v;
    else if (!strcmp(f, "-f") || !strcmp(f, "--file") || !strcmp(f, "--input")) o->input_file = v;
    else if (!strcmp(f, "-sys") || !strcmp(f, "--system-prompt") || !strcmp(f, "--system")) o->system = v;
    else if (!strncmp(f, "--reasoning", 11)) o->reasoning = v;
    else if (!strcmp(f, "--tools")) o->tools_path = v;
    else o->template_path = v; /* --template, --chat-template-file */
    return 0;
}

static int set_switch(void *d, const char *f, const char *v) {
    struct chat_cli *o = C(d);
    (void)v;
    if (!strcmp(f, "--chat")) o->oneshot = true; /* muse run --chat */
    else if (!strcmp(f, "--hide-reasoning")) o->hide_reasoning = true;
    else if (!strcmp(f, "--dump-prompt")) o->dump_prompt = true;
    else if (!strcmp(f, "--context-shift")) o->context_shift = true;
    else if (!strcmp(f, "--no-context-shift")) o->context_shift = false;
    else if (!strcmp(f, "--ignore-eos")) o->ignore_eos = true;
    else if (!strcmp(f, "--jinja")) (void)0; /* muse always renders the template with its Jinja interpreter */
    else o->help = true;
    return 0;
}

static int set_n(void *d, const char *f, const char *v) {
    if (!strcmp(v, "-1")) { /* llama.cpp: no limit */
        C(d)->max_tokens = INT32_MAX;
        return 0;
    }
    return cli_parse_int(f, v, 1, INT32_MAX, &C(d)->max_tokens) ? 0 : -1;
}

static const struct cli_opt rows[] = {
    {"-p|--prompt", "TEXT", "the user message of a one-shot turn", set_str},
    {"-f|--file|--input", "FILE", "the user message from a file (one shot); - = standard input", set_str},
    {"-sys|--system-prompt|--system", "TEXT", "system prompt (default: the template's own default system turn)", set_str},
    {"--reasoning|--reasoning-effort|--reasoning-strength", "R", "reasoning strength low|medium|high|xhigh", set_str},
    {"--hide-reasoning", NULL, "do not print the reasoning", set_switch},
    {"--tools", "FILE.json", "tool definitions (OpenAI function list); calls are printed", set_str},
    {"--template|--chat-template-file", "FILE", "chat template (Jinja) instead of the file's tokenizer.chat_template", set_str},
    {"--jinja", NULL, "accepted for llama.cpp compatibility (templates always go through Jinja)", set_switch},
    {"-n|--n-predict|--predict|--max-tokens", "N", "tokens per answer at most (default 1024; -1 = no limit)", set_n},
    {"--ignore-eos", NULL, "do not stop at the end of turn: the end token is left out and the answer goes on\n"
                           "(to -n, a -r text or Ctrl-C)", set_switch},
    {"--context-shift", NULL, "when the conversation outgrows the context, drop the oldest exchanges\n"
                              "(the system prompt stays) and go on (default)", set_switch},
    {"--no-context-shift", NULL, "instead fail the turn that does not fit", set_switch},
    {"--dump-prompt", NULL, "print the rendered prompt and its token ids instead of generating", set_switch},
    {"--chat", NULL, NULL, set_switch}, /* muse run --chat: undocumented here */
    {"-h|--help", NULL, "this help", set_switch},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse chat -m MODEL [options]            interactive chat (type /help inside)\n"
            "       muse chat -m MODEL -p TEXT [options]    one turn, then exit (also: muse run --chat -p TEXT)\n"
            "       muse chat -m MODEL -p TEXT --dump-prompt   print the rendered prompt and its token ids, no inference\n"
            "Interactive: arrows, history (~/.muse_history; MUSE_HISTORY=FILE, empty = none), a line ending in \\\n"
            "continues on the next, \"\"\" opens and closes a multi-line block. Ctrl-C stops an answer (kept\n"
            "as the assistant's turn) and returns to the prompt; Ctrl-C at an empty prompt quits (status 130),\n"
            "unless an answer ended less than a second before (that Ctrl-C was meant for the answer).\n");
    cli_opts_usage(f, rows, N_ROWS);
    text_opts_usage(f);
    fprintf(f, "  (-r: the answer ends before the text, which is not kept; -e applies to -p, not to typed lines)\n");
    sampling_opts_usage(f, SAMPLING_CHAT);
    spec_opts_usage(f);
    model_opts_usage(f);
    media_opts_usage(f);
    fprintf(f, "  (chat: the --image files go with the first user message; /image FILE attaches one to the next)\n");
}

/* Set by SIGINT while the interactive chat runs (no SA_RESTART: a blocked read returns EINTR).
 * The turn that it stops clears it; the prompt's reader watches it (line_edit_watch). SIGINT
 * reaches this thread: the thread pool's workers block it (src/core/threadpool.c). */
static volatile sig_atomic_t interrupted;

/* A Ctrl-C at the empty prompt within this long after an answer ended was meant for the answer
 * (it ended, or stopped, while the key was on its way): it does not quit. */
#define CHAT_CTRL_C_GRACE_US 1000000

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

struct session {
    struct chat_cli *o;
    struct muse_model *model;
    struct muse_context *ctx;
    struct muse_tokenizer *tok;
    struct muse_detok *detok;
    struct muse_sampler *smp;
    struct muse_grammar *grammar;        /* --grammar / --json-schema: the answers' grammar */
    struct muse_grammar_vocab *gvocab;
    struct muse_chat *chat;
    struct muse_chat_options copts;
    cJSON *tools;
    char *system_owned;
    struct muse_session *kv; /* the context's KV state: its tokens, prefix reuse, checkpoints */
    struct muse_drafter *drafter; /* --draft-model, or NULL */
    struct stop_match *sm;   /* -r: the answer's text goes through it (NULL without -r) */
    struct muse_gen *eng;    /* the generation loop over kv */
    struct muse_spec *spec;  /* speculative decoding plugged into it (with a drafter; its ring follows kv), or NULL */
    int32_t *gen;     /* [n_ctx] the answer's token ids so far (a context shift re-evaluates them) */
    bool color;
    int shown;        /* 0 nothing yet, 1 reasoning, 2 content */
    int turn;
    int64_t turn_end_us; /* when the last turn (or command) ended; 0: a key was typed since */
    bool bad_value;      /* open_text failed on a bad option value (exit status 2) */
    uint64_t calls;
    /* images: the projector, the images of the conversation's messages (in the order of their
     * <__media__> markers), those attached to the next user message, the current prompt */
    struct media_ctx media;
    struct muse_image *conv, *pending;
    int n_conv, n_pending;
    struct muse_media_prompt mp;
};

static char *read_all(const char *path, size_t *len) { return cli_read_file(path, len); }

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

static void feed_text(void *user, const char *t, size_t n) {
    if (n) muse_output_parser_feed_token(user, t, n, false);
}

/* Text for the parser, through the -r matcher when there is one; true when a -r text completed. */
static bool feed_checked(struct session *s, struct muse_output_parser *p, const char *t, size_t n) {
    if (!s->sm) {
        feed_text(p, t, n);
        return false;
    }
    return stop_match_feed(s->sm, t, n, feed_text, p);
}

/*
 * Feed a generated token to the parser (control tokens as markers, text through the detokenizer
 * and the -r matcher). True when a -r text completed: the answer ends before it. A control token
 * ends a partial match (its text is then text); a -r equal to a control token's text matches it.
 */
static bool feed_token(struct session *s, struct muse_output_parser *p, int32_t id) {
    const char *t;
    size_t n;
    if (muse_tokenizer_is_control(s->tok, id)) {
        if (muse_detok_flush(s->detok, &t, &n) == MUSE_OK && n && feed_checked(s, p, t, n)) return true;
        t = muse_tokenizer_token_bytes(s->tok, id, &n);
        if (s->sm) {
            stop_match_flush(s->sm, feed_text, p);
            if (t && stop_match_whole(s->sm, t, n)) return true;
        }
        if (t) muse_output_parser_feed_token(p, t, n, true);
        return false;
    }
    return muse_detok_push(s->detok, id, &t, &n) == MUSE_OK && n && feed_checked(s, p, t, n);
}

static bool render_prompt(struct session *s, int32_t **ids, size_t *n_ids, char **text, struct muse_error *err) {
    size_t len;
    *ids = NULL;
    muse_media_prompt_free(&s->mp);
    if (muse_chat_render(s->chat, &s->copts, true, text, &len, err) != MUSE_OK) return false;
    /* the template writes the BOS text itself; special-token parsing turns it into the BOS id */
    if (s->n_conv == 0)
        return muse_tokenizer_encode_alloc(s->tok, *text, len, MUSE_TOKENIZE_PARSE_SPECIAL, ids, n_ids, err) == MUSE_OK;
    /* images: each <__media__> of the rendered conversation becomes <|image_start|> rows <|image_end|> */
    static const char *const markers[] = {MUSE_MEDIA_MARKER_MTMD};
    if (muse_media_prompt_add_text(&s->mp, s->tok, s->media.vision, *text, len, false, markers, 1, s->conv, s->n_conv,
                                   false, s->media.max_tokens, err) != MUSE_OK)
        return false;
    if (!(*ids = malloc(sizeof **ids * (size_t)s->mp.n))) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory"), false;
    memcpy(*ids, s->mp.ids, sizeof **ids * (size_t)s->mp.n);
    *n_ids = (size_t)s->mp.n;
    return true;
}

/* The <__media__> markers in a message's content (its images). */
static int count_markers(const cJSON *m) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    int n = 0;
    for (const char *p = cJSON_IsString(c) ? c->valuestring : NULL; p && (p = strstr(p, MUSE_MEDIA_MARKER_MTMD)); p++) n++;
    return n;
}

/* Forget n images of the conversation: the first ones (from_front) or the last ones. */
static void drop_images(struct session *s, int n, bool from_front) {
    if (n > s->n_conv) n = s->n_conv;
    if (n <= 0) return;
    for (int k = 0; k < n; k++) muse_image_free(&s->conv[from_front ? k : s->n_conv - 1 - k]);
    if (from_front) memmove(s->conv, s->conv + n, sizeof *s->conv * (size_t)(s->n_conv - n));
    s->n_conv -= n;
}

/* Add a user message; the attached images (pending) go with it, their markers first (as
 * llama-mtmd-cli). False after printing the error. */
static bool add_user(struct session *s, const char *msg) {
    struct muse_error err;
    char *owned = NULL;
    if (s->media.vision && strstr(msg, MUSE_MEDIA_MARKER_MTMD)) { /* it would be read as an image's place */
        cli_err("the message contains %s, the image marker: attach images with /image FILE", MUSE_MEDIA_MARKER_MTMD);
        return false;
    }
    if (s->n_pending > 0) {
        const size_t ml = strlen(MUSE_MEDIA_MARKER_MTMD), len = strlen(msg);
        struct muse_image *a = realloc(s->conv, sizeof *a * (size_t)(s->n_conv + s->n_pending));
        if (!a || !(owned = malloc(ml * (size_t)s->n_pending + len + 1))) {
            if (a) s->conv = a;
            cli_err("out of memory");
            return false;
        }
        s->conv = a;
        for (int k = 0; k < s->n_pending; k++) memcpy(owned + ml * (size_t)k, MUSE_MEDIA_MARKER_MTMD, ml);
        memcpy(owned + ml * (size_t)s->n_pending, msg, len + 1);
        msg = owned;
    }
    if (muse_chat_add(s->chat, "user", msg, &err) != MUSE_OK) {
        free(owned);
        cli_err("%s", err.msg);
        return false;
    }
    free(owned);
    if (s->n_pending > 0) memcpy(s->conv + s->n_conv, s->pending, sizeof *s->pending * (size_t)s->n_pending);
    s->n_conv += s->n_pending;
    free(s->pending);
    s->pending = NULL;
    s->n_pending = 0;
    return true;
}

/* Attach an image file to the next user message (loading the projector on first use). */
static bool attach_image(struct session *s, const char *path) {
    struct muse_error err;
    struct muse_image img;
    if (!s->media.vision &&
        !media_load_vision(&s->media, s->o->md.mmproj, s->o->mo.model_path, s->model, muse_context_n_threads(s->ctx),
                           s->o->mo.cparams.backend, s->o->mo.verbosity < 0))
        return false;
    if (muse_image_load(path, 0, &img, &err) != MUSE_OK) {
        cli_err("%s", err.msg);
        return false;
    }
    struct muse_image *a = realloc(s->pending, sizeof *a * (size_t)(s->n_pending + 1));
    if (!a) {
        muse_image_free(&img);
        cli_err("out of memory");
        return false;
    }
    a[s->n_pending++] = img;
    s->pending = a;
    return true;
}

static const char *msg_role(const cJSON *m) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(r) ? r->valuestring : "";
}

/*
 * Context shift: drop the oldest exchange - the first non-system message and what follows it up
 * to the next user message - never the last user message (the one being answered). The system
 * prompt (--system, /system: the template's system turn) is not a message and always stays.
 * Returns the number of messages dropped; 0 when nothing can go.
 */
static int drop_oldest(struct session *s) {
    cJSON *msgs = (cJSON *)muse_chat_messages(s->chat);
    const int n = cJSON_GetArraySize(msgs);
    int last_user = -1, first = 0;
    for (int i = n - 1; i >= 0 && last_user < 0; i--)
        if (!strcmp(msg_role(cJSON_GetArrayItem(msgs, i)), "user")) last_user = i;
    while (first < n && !strcmp(msg_role(cJSON_GetArrayItem(msgs, first)), "system")) first++;
    if (last_user <= first) return 0;
    int end = first + 1;
    while (end < last_user && strcmp(msg_role(cJSON_GetArrayItem(msgs, end)), "user")) end++;
    for (int k = first; k < end; k++) {
        drop_images(s, count_markers(cJSON_GetArrayItem(msgs, first)), true);
        cJSON_DeleteItemFromArray(msgs, first);
    }
    return end - first;
}

/* A prompt chunk through the generation loop (target and drafter ring); the loop keeps the last
 * chunk's logits for the next sample. */
static muse_status eval_gen(void *eng, const int32_t *t, int32_t n, float *logits, struct muse_error *err) {
    (void)logits;
    return muse_gen_eval(eng, t, n, err);
}

static bool show_progress(const struct session *s) { return model_opts_progress(&s->o->mo); }

struct chat_rows {
    struct session *s;
    int32_t from, n;
};

static muse_status chat_rows_eval(void *user, float *logits, struct muse_error *err) {
    const struct chat_rows *c = user;
    return muse_media_eval(c->s->kv, c->s->media.cache, &c->s->mp, c->from, c->n - c->from, logits, 0, err);
}

/* Evaluate positions from..n of the rendered prompt (ids; s->mp when it has images) through the
 * loop. A conversation with images is decoded plainly: the drafter's ring restarts after image
 * rows (docs/speculative.md). */
static muse_status prefill(struct session *s, const int32_t *ids, int32_t from, int32_t n, volatile sig_atomic_t *stop,
                           struct muse_error *err) {
    if (s->mp.n_images > 0) {
        struct chat_rows c = {s, from, n};
        if (s->spec) muse_spec_set_drafting(s->spec, false);
        return muse_gen_eval_rows(s->eng, chat_rows_eval, &c, err);
    }
    if (s->spec) muse_spec_set_drafting(s->spec, true);
    return progress_prefill(eval_gen, s->eng, ids + from, n - from, (int32_t)muse_context_n_batch(s->ctx), NULL,
                            show_progress(s), stop, err);
}

/*
 * The context is full in the middle of an answer: drop the oldest exchanges until the rendered
 * conversation plus the answer so far (gen[0..n_gen), its last token not yet evaluated) leave
 * room, then evaluate that sequence after the prefix the cache keeps. Afterwards the loop's logits are
 * those after gen[n_gen - 1]. False when nothing more can be dropped (or on an error).
 */
static bool shift_mid_answer(struct session *s, int32_t n_gen, int *dropped, struct muse_error *err) {
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(s->ctx);
    const int64_t left = s->o->max_tokens - n_gen;
    const int64_t room = left < n_ctx / 4 ? left : n_ctx / 4;
    int32_t *ids = NULL, *seq = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    bool ok = false;
    for (;;) {
        int k = drop_oldest(s);
        if (k == 0) goto done;
        *dropped += k;
        free(ids);
        free(text);
        ids = NULL;
        text = NULL;
        if (!render_prompt(s, &ids, &n_ids, &text, err)) goto done;
        if ((int64_t)n_ids + n_gen + room <= n_ctx) break;
    }
    const int32_t n = (int32_t)n_ids + n_gen;
    if (!(seq = malloc(sizeof(int32_t) * (size_t)n))) goto done;
    memcpy(seq, ids, sizeof(int32_t) * n_ids);
    memcpy(seq + n_ids, s->gen, sizeof(int32_t) * (size_t)n_gen);
    if (s->mp.n_images > 0 && muse_media_prompt_add_tokens(&s->mp, s->gen, n_gen, err) != MUSE_OK) goto done;
    struct muse_session_keep keep = muse_gen_reuse(s->eng, seq, n);
    ok = prefill(s, seq, keep.n_kept, n, &interrupted, err) == MUSE_OK;
done:
    free(seq);
    free(ids);
    free(text);
    return ok;
}

static bool run_turn(struct session *s) {
    struct muse_error err;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    struct muse_output_parser *p = NULL;
    struct muse_constraint *cons = NULL;
    bool ok = false;
    int dropped = 0;
    s->turn++;
    const int32_t n_ctx = (int32_t)muse_context_n_ctx(s->ctx);
    /* with context shift, start a turn with room for an answer (a quarter of the context, or -n) */
    const int64_t reserve = s->o->context_shift ? (s->o->max_tokens < n_ctx / 4 ? s->o->max_tokens : n_ctx / 4) : 0;
    for (;;) {
        free(ids);
        free(text);
        ids = NULL;
        text = NULL;
        if (!render_prompt(s, &ids, &n_ids, &text, &err)) {
            cli_err("%s", err.msg);
            goto done;
        }
        const bool fits = (int64_t)n_ids < n_ctx, roomy = (int64_t)n_ids + reserve <= n_ctx;
        if (roomy || (fits && !s->o->context_shift)) break;
        const int k = s->o->context_shift ? drop_oldest(s) : 0;
        if (k == 0) {
            if (fits) break;
            cli_err("the conversation needs %zu tokens but the context holds %d (%s/reset, or a larger --ctx-size)", n_ids,
                    n_ctx, s->o->context_shift ? "" : "--context-shift, ");
            goto done;
        }
        dropped += k;
    }
    /* reuse the cached prefix; always evaluate at least the last prompt token (for its logits) */
    struct muse_session_keep keep = muse_gen_reuse(s->eng, ids, (int32_t)n_ids);
    const int common = keep.n_kept;
    int64_t t0 = muse_time_us();
    muse_status st = prefill(s, ids, common, (int32_t)n_ids, s->o->oneshot ? NULL : &interrupted, &err);
    if (st == MUSE_ERR_CANCELLED) {
        fprintf(stderr, "(interrupted while reading the prompt: the message was dropped)\n");
        goto done;
    }
    if (st != MUSE_OK) {
        cli_err("%s", err.msg);
        goto done;
    }
    /* the prompt ends here: the next turn may drop what follows (the reasoning), see session.h */
    if (muse_gen_checkpoint(s->eng, &err) != MUSE_OK) cli_err("%s", err.msg);
    int64_t t1 = muse_time_us();

    muse_sampler_reset(s->smp);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= 0) muse_sampler_accept(s->smp, ids[i]); /* image rows are no tokens */
    muse_gen_begin(s->eng, s->smp);
    if (s->spec) muse_spec_stats_reset(s->spec);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "call_t%d_", s->turn);
    struct muse_output_parser_params pp = {.tools = s->tools, .id_prefix = prefix, .callback = on_event, .user = s};
    if (muse_output_parser_create(&pp, &p, &err) != MUSE_OK) goto done;
    if (s->grammar) {
        /* the grammar constrains the answer: armed at its header (reasoning stays free) */
        static const char *const triggers[] = {"to=user<|message|>", "<|start|>assistant<|message|>", NULL};
        const size_t tn = strlen(text);
        if (muse_constraint_create(s->grammar, s->gvocab, s->tok, triggers, text + (tn > 64 ? tn - 64 : 0), &cons,
                                   &err) != MUSE_OK) {
            cli_err("%s", err.msg);
            goto done;
        }
        muse_gen_constrain(s->eng, cons); /* sampled through it, no drafting */
    }
    muse_detok_reset(s->detok);
    s->shown = 0;
    stop_match_free(s->sm);
    bool oom;
    if (!(s->sm = stop_match_create(&s->o->to, false, &oom)) && oom) {
        cli_err("out of memory");
        goto done;
    }
    int32_t n_gen = 0;
    const char *stop = "max-tokens";
    char stop_buf[160];
    while (n_gen < s->o->max_tokens) {
        if (interrupted) {
            stop = "interrupted (the answer so far is kept)";
            break;
        }
        int32_t t;
        if (muse_gen_sample(s->eng, &t, NULL, &err) != MUSE_OK) {
            fprintf(stderr, "\n");
            cli_err("%s", err.msg);
            break;
        }
        s->gen[n_gen++] = t;
        const bool eos = muse_model_token_is_stop(s->model, t);
        /* --ignore-eos: the end token is not shown to the parser, so the answer goes on as one
         * message (fed, it would close the message and hide what follows) */
        if (!(eos && s->o->ignore_eos) && feed_token(s, p, t)) {
            char shown[128];
            snprintf(stop_buf, sizeof stop_buf, "reverse prompt \"%s\"", text_show(stop_match_hit(s->sm), shown, sizeof shown));
            stop = stop_buf;
            break;
        }
        if (eos && !s->o->ignore_eos) {
            stop = "end of turn";
            break;
        }
        if (n_gen >= s->o->max_tokens) break;
        if (muse_gen_n_past(s->eng) >= n_ctx) {
            /* the answer so far must leave room for more: at most half the context */
            if (!s->o->context_shift || n_gen > n_ctx / 2 || !shift_mid_answer(s, n_gen, &dropped, &err)) {
                stop = interrupted ? "interrupted (the answer so far is kept)" : "context full";
                break;
            }
            continue; /* the shift evaluated t */
        }
        if (muse_gen_advance(s->eng, t, s->o->max_tokens - n_gen, &err) != MUSE_OK) {
            fprintf(stderr, "\n");
            cli_err("%s", err.msg);
            break;
        }
    }
    const char *rest;
    size_t rn;
    if (!stop_match_hit(s->sm)) {
        if (muse_detok_flush(s->detok, &rest, &rn) == MUSE_OK && rn) feed_checked(s, p, rest, rn);
        if (s->sm && !stop_match_hit(s->sm)) stop_match_flush(s->sm, feed_text, p);
    }
    muse_output_parser_finish(p);
    if (s->shown == 1 && s->color) fputs("\033[0m", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (muse_output_parser_cut_tool_call(p)) fprintf(stderr, "(a tool call was cut off before its end: dropped)\n");
    if (muse_chat_add_parsed(s->chat, p, &err) != MUSE_OK) cli_err("%s", err.msg);
    int64_t t2 = muse_time_us();
    double tp = (double)(t1 - t0) / 1e6, tg = (double)(t2 - t1) / 1e6;
    /* a sliding-window miss (the rings could not rewind to the common prefix) is shown, not hidden */
    char miss[96] = "", shift[96] = "";
    if (keep.kind == MUSE_SESSION_KEEP_RESTORED)
        snprintf(miss, sizeof miss, "; sliding-window miss: checkpoint at %d restored", keep.ckpt_pos);
    else if (keep.kind == MUSE_SESSION_KEEP_CLEARED)
        snprintf(miss, sizeof miss, "; sliding-window miss: %d cached tokens re-evaluated", keep.n_asked);
    if (dropped) snprintf(shift, sizeof shift, "; context shift: dropped the %d oldest messages", dropped);
    char spec[512];
    spec_opts_summary(s->spec, s->o->mo.verbosity > 0, spec, sizeof spec);
    if (s->o->mo.verbosity >= 0)
        fprintf(stderr, "[turn %d: prompt %zu tokens, %d reused from the cache, %zu evaluated in %.3f s; generated %d tokens in %.3f s (%.2f tok/s); stop: %s%s%s%s%s]\n",
                s->turn, n_ids, common, n_ids - (size_t)common, tp, n_gen, tg, tg > 0 ? (double)n_gen / tg : 0.0, stop,
                miss, shift, spec[0] ? "; " : "", spec);
    ok = true;
done:
    if (!ok && muse_chat_n_messages(s->chat) > 0) {
        /* forget the user message that could not be answered (and its images) */
        drop_images(s, count_markers(cJSON_GetArrayItem(muse_chat_messages(s->chat), (int)muse_chat_n_messages(s->chat) - 1)),
                    false);
        cJSON_DeleteItemFromArray((cJSON *)muse_chat_messages(s->chat), (int)muse_chat_n_messages(s->chat) - 1);
    }
    muse_output_parser_free(p);
    muse_gen_constrain(s->eng, NULL);
    muse_constraint_free(cons);
    free(ids);
    free(text);
    return ok;
}

/* ---- setup ---- */

static int parse_args(struct chat_cli *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(&o->mo, argc, argv, &i);
        if (r == 0) r = sampling_opts_parse(&o->so, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&o->spo, argc, argv, &i);
        if (r == 0) r = text_opts_parse(&o->to, argc, argv, &i);
        if (r == 0) r = cli_opts_parse(rows, N_ROWS, o, argc, argv, &i);
        if (r == 0) r = media_opts_parse(&o->md, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_unknown(argv[i]);
        if (o->help) {
            usage(stdout);
            return 0;
        }
    }
    if (o->reasoning && !muse_chat_reasoning_strength(o->reasoning))
        return cli_usage_err("--reasoning must be low, medium, high or xhigh (the model always reasons; use low)");
    if (!o->mo.model_path) return cli_usage_err("-m MODEL is required");
    if (o->prompt && o->input_file) return cli_usage_err("give -p TEXT or -f FILE, not both");
    if (o->prompt || o->input_file) o->oneshot = true;
    if (o->oneshot && !o->prompt && !o->input_file) return cli_usage_err("a one-shot turn needs -p TEXT or -f FILE");
    if (o->dump_prompt && !o->oneshot) return cli_usage_err("--dump-prompt needs -p TEXT or -f FILE");
    if (o->prompt && !(o->prompt = o->prompt_owned = text_opts_prompt(&o->to, o->prompt))) {
        cli_err("out of memory");
        return 1;
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
    if (!sampling_opts_grammar(&s->o->so, s->tok, &s->grammar, err)) {
        s->bad_value = err->status == MUSE_ERR_INVALID_ARG; /* --grammar / --json-schema text: exit 2 */
        goto done;
    }
    if (s->grammar && muse_grammar_vocab_from_tokenizer(s->tok, &s->gvocab, err) != MUSE_OK) goto done;
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
        cli_err("%s", err.msg);
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
           "          /image FILE (attach an image to your next message),\n"
           "          /tool TEXT (answer the last tool call with TEXT and continue), /exit (or Ctrl-D)\n"
           "input:    end a line with \\ to continue on the next; \"\"\" opens a multi-line block, a line\n"
           "          ending in \"\"\" closes it. Ctrl-C stops an answer (kept); at an empty prompt it quits.\n");
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

/* A growing message (multi-line input). */
struct msgbuf {
    char *p;
    size_t n, cap;
};

static bool msg_append(struct msgbuf *m, const char *s, size_t n) {
    if (m->n + n + 1 > m->cap) {
        size_t cap = (m->n + n + 1) * 2;
        char *np = realloc(m->p, cap);
        if (!np) return false;
        m->p = np;
        m->cap = cap;
    }
    memcpy(m->p + m->n, s, n);
    m->n += n;
    m->p[m->n] = '\0';
    return true;
}

static bool ends_with_quotes(const char *s, size_t n) { return n >= 3 && !memcmp(s + n - 3, "\"\"\"", 3); }

/* A /command; false for /exit. */
static bool command(struct session *s, const char *line) {
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit") || !strcmp(line, "/bye")) return false;
    if (!strcmp(line, "/reset") || !strcmp(line, "/clear")) {
        muse_chat_reset(s->chat);
        muse_gen_clear(s->eng);
        drop_images(s, s->n_conv, true);
        printf("(conversation reset)\n");
    } else if (!strncmp(line, "/image", 6) && (line[6] == ' ' || line[6] == '\0')) {
        const char *path = line + 6;
        while (*path == ' ') path++;
        if (!*path) printf("(usage: /image FILE)\n");
        else if (attach_image(s, path))
            printf("(%s attached to your next message: %d image%s)\n", path, s->n_pending, s->n_pending == 1 ? "" : "s");
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
    return true;
}

/* The interactive loop; returns the exit status (130 after Ctrl-C at an empty prompt). */
static int repl(struct session *s) {
    struct line_edit *le = line_edit_open("muse");
    if (!le) {
        cli_err("out of memory");
        return 1;
    }
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: Ctrl-C must end a blocked read */
    sigaction(SIGINT, &sa, &old);
    interrupted = 0;
    line_edit_watch(le, &interrupted, SIGINT);
    struct msgbuf m = {0};
    enum { NORMAL, CONTINUED, BLOCK } mode = NORMAL;
    int rc = 0;
    s->turn_end_us = 0;
    for (;;) {
        const char *line;
        bool had_text;
        /* a Ctrl-C that came after the last turn ended is pending here: the read returns at once */
        enum line_status ls = line_edit_read(le, mode == NORMAL ? "> " : "... ", &line, &had_text);
        if (ls == LINE_INTERRUPT) {
            interrupted = 0;
            const bool late = s->turn_end_us && muse_time_us() - s->turn_end_us < CHAT_CTRL_C_GRACE_US;
            s->turn_end_us = 0;
            if (had_text || mode != NORMAL) { /* discard what was being typed */
                m.n = 0;
                mode = NORMAL;
                continue;
            }
            if (late) { /* meant for the answer that had just ended: not a request to quit */
                printf("(the answer had already ended; Ctrl-C again at the empty prompt quits)\n");
                continue;
            }
            rc = 130;
            break;
        }
        s->turn_end_us = 0;
        if (ls == LINE_EOF) {
            if (line_edit_is_tty(le)) fputc('\n', stdout);
            break;
        }
        line_edit_add_history(le, line);
        size_t n = strlen(line);
        if (mode == BLOCK) { /* inside """ ... """ */
            if (ends_with_quotes(line, n)) {
                msg_append(&m, line, n - 3);
                mode = NORMAL;
            } else {
                msg_append(&m, line, n);
                msg_append(&m, "\n", 1);
                continue;
            }
        } else if (m.n == 0 && n >= 3 && !memcmp(line, "\"\"\"", 3)) {
            if (n >= 6 && ends_with_quotes(line + 3, n - 3)) {
                msg_append(&m, line + 3, n - 6);
            } else {
                if (n > 3) {
                    msg_append(&m, line + 3, n - 3);
                    msg_append(&m, "\n", 1);
                }
                mode = BLOCK;
                continue;
            }
        } else if (n > 0 && line[n - 1] == '\\') { /* continued on the next line */
            msg_append(&m, line, n - 1);
            msg_append(&m, "\n", 1);
            mode = CONTINUED;
            continue;
        } else {
            msg_append(&m, line, n);
            mode = NORMAL;
        }
        if (!m.p || m.n == 0) continue;
        const char *msg = m.p;
        m.n = 0; /* m.p stays valid until the next append */
        if (msg[0] == '/' && !strchr(msg, '\n')) {
            const bool go_on = command(s, msg);
            interrupted = 0; /* a Ctrl-C during a command (a /tool turn, an image load) was its own */
            s->turn_end_us = muse_time_us();
            if (!go_on) break;
            continue;
        }
        if (!add_user(s, msg)) continue;
        run_turn(s);
        interrupted = 0; /* a Ctrl-C during the turn stopped it (or came as it ended): used up */
        s->turn_end_us = muse_time_us();
    }
    sigaction(SIGINT, &old, NULL);
    free(m.p);
    line_edit_close(le);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    struct chat_cli o = {.max_tokens = 1024, .context_shift = true};
    model_opts_init(&o.mo);
    sampling_opts_init(&o.so, SAMPLING_CHAT);
    spec_opts_init(&o.spo);
    text_opts_init(&o.to);
    int r = parse_args(&o, argc, argv);
    if (r >= 0) return r;
    struct session s = {.o = &o, .color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR")};
    struct muse_error err;
    int rc = 1;
    char *input = NULL;
    if (!open_text(&s, &err)) {
        cli_err("%s", err.msg);
        if (s.bad_value) rc = 2;
        goto done;
    }
    const char *user = o.prompt;
    if (o.input_file) {
        size_t n;
        if (!(input = read_all(o.input_file, &n))) {
            cli_err("cannot read %s: %s", strcmp(o.input_file, "-") ? o.input_file : "standard input", strerror(errno));
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
    s.gen = malloc(sizeof(int32_t) * muse_context_n_ctx(s.ctx));
    if (!s.gen) {
        cli_err("out of memory");
        goto done;
    }
    if (muse_session_create(s.ctx, muse_session_default_params(), &s.kv, &err) != MUSE_OK ||
        muse_gen_create(s.kv, &s.eng, &err) != MUSE_OK ||
        (s.drafter && muse_spec_create(s.eng, s.drafter, o.spo.sp, &s.spec, &err) != MUSE_OK) ||
        muse_sampler_create(o.so.sp, n_vocab, &s.smp, &err) != MUSE_OK) {
        cli_err("%s", err.msg);
        goto done;
    }
    /* --image: the projector now, the images go with the first user message */
    if (!media_open(&o.md, o.mo.model_path, s.model, muse_context_n_threads(s.ctx), o.mo.cparams.backend, false,
                    o.mo.verbosity < 0, &s.media))
        goto done;
    if (s.media.n_images > 0) {
        s.pending = s.media.images; /* taken: conv/pending own them from here */
        s.n_pending = s.media.n_images;
        s.media.images = NULL;
        s.media.n_images = 0;
    }
    if (o.oneshot) {
        if (!add_user(&s, user)) goto done;
        rc = run_turn(&s) ? 0 : 1;
    } else {
        if (o.mo.verbosity >= 0) {
            char desc[256];
            muse_model_desc(s.model, desc, sizeof(desc));
            cli_err("%s, context %u tokens%s. /help for commands, /exit or Ctrl-C to quit.", desc,
                    muse_context_n_ctx(s.ctx), o.context_shift ? " (context shift on)" : "");
        }
        rc = repl(&s);
    }
done:
    free(input);
    muse_media_prompt_free(&s.mp);
    drop_images(&s, s.n_conv, true);
    free(s.conv);
    for (int k = 0; k < s.n_pending; k++) muse_image_free(&s.pending[k]);
    free(s.pending);
    media_close(&s.media);
    media_opts_free(&o.md);
    free(s.system_owned);
    stop_match_free(s.sm);
    free(o.prompt_owned);
    muse_spec_free(s.spec);
    muse_gen_free(s.eng);
    muse_session_free(s.kv);
    muse_drafter_free(s.drafter);
    free(s.gen);
    cJSON_Delete(s.tools);
    muse_sampler_free(s.smp);
    muse_grammar_free(s.grammar);
    muse_grammar_vocab_free(s.gvocab);
    muse_detok_free(s.detok);
    muse_chat_free(s.chat);
    muse_tokenizer_free(s.tok);
    muse_context_free(s.ctx);
    muse_model_free(s.model);
    return rc;
}
