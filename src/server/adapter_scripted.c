/*
 * adapter_scripted.c - TEST-ONLY adapter (adapter.h) for `muse serve --test-script FILE`.
 *
 * No model: a byte-level tokenizer (ids 0..255 = bytes, 256.. = Muse-Glimmer special tokens),
 * a simplified Muse-Glimmer chat renderer, and "generation" that plays a scripted text chosen by
 * rules matched against the last user message. It exists so that HTTP, SSE, slots, the queue,
 * cancellation, the prompt cache, the parsers and the chat page can be tested deterministically.
 * It is never used unless --test-script is given. Script format: docs/server.md.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "server/buf.h"
#include "model/kv_cache.h"
#include "server/adapter.h"

enum { TOK_BOS = 256, TOK_EOS, TOK_START, TOK_MESSAGE, TOK_EOM, TOK_EOT, N_VOCAB };
static const char *const specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start|>",
                                       "<|message|>",       "<|eom|>",         "<|eot|>"};

struct rule {
    char *match;  /* substring of the last user message; NULL = default */
    char *output; /* text with special-token markup; "{LAST}" = the last user message */
    bool repeat;  /* loop the output forever instead of ending with <|eot|> */
    int delay_ms; /* per generated token; -1 = the script's default */
};

struct fake {
    char model[256];
    int n_ctx, n_swa, ring_rows;
    int delay_ms;             /* per generated token */
    int prefill_us_per_token; /* simulated prefill cost */
    struct rule *rules;       /* [n_rules]; the last one may be the default */
    int n_rules;
};

struct fake_slot {
    struct fake *f;
    int32_t *toks; /* [n_ctx] */
    int n;
    int32_t *script; /* the chosen output, tokenized */
    int n_script, pos;
    const struct rule *rule;
};

static muse_status fake_tokenize(void *self, const char *text, size_t len, bool add_special, bool parse_special,
                                 int32_t **out, int *n_out, struct muse_error *err) {
    (void)self;
    int32_t *t = malloc((len + 1) * sizeof *t);
    if (!t) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    int n = 0;
    if (add_special) t[n++] = TOK_BOS;
    for (size_t i = 0; i < len;) {
        int sp = -1;
        if (parse_special && text[i] == '<')
            for (int k = 0; k < N_VOCAB - 256; k++)
                if (!strncmp(text + i, specials[k], strlen(specials[k]))) sp = k;
        if (sp >= 0) {
            t[n++] = 256 + sp;
            i += strlen(specials[sp]);
        } else {
            t[n++] = (unsigned char)text[i++];
        }
    }
    *out = t;
    *n_out = n;
    return MUSE_OK;
}

static int fake_piece(void *self, int32_t tok, char *buf, int cap) {
    (void)self;
    if (tok < 0 || tok >= N_VOCAB) return -1;
    if (tok < 256) {
        if (cap > 0) buf[0] = (char)tok;
        return 1;
    }
    const char *s = specials[tok - 256];
    int n = (int)strlen(s);
    memcpy(buf, s, (size_t)(n < cap ? n : cap));
    return n;
}

static bool fake_is_eog(void *self, int32_t tok) {
    (void)self;
    return tok == TOK_EOT || tok == TOK_EOS;
}

static void fake_info(void *self, struct muse_srv_adapter_info *out) {
    struct fake *f = self;
    memset(out, 0, sizeof *out);
    snprintf(out->model_name, sizeof out->model_name, "%s", f->model);
    out->n_ctx = f->n_ctx;
    out->n_ctx_train = f->n_ctx;
    out->n_vocab = N_VOCAB;
}

/* Append a message's text content (a string or an array of text parts). */
static void put_content(struct muse_srv_buf *b, const cJSON *content) {
    if (cJSON_IsString(content)) {
        muse_srv_buf_puts(b, content->valuestring);
        return;
    }
    const cJSON *part;
    bool first = true;
    cJSON_ArrayForEach(part, content) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(text)) continue;
        if (!first) muse_srv_buf_puts(b, "\n");
        muse_srv_buf_puts(b, text->valuestring);
        first = false;
    }
}

static muse_status fake_render(void *self, const struct muse_srv_chat_input *in, char **prompt,
                               struct muse_error *err) {
    (void)self;
    struct muse_srv_buf b = {0};
    const cJSON *msg, *first = cJSON_GetArrayItem(in->messages, 0);
    const cJSON *role0 = cJSON_GetObjectItemCaseSensitive(first, "role");
    bool has_system = cJSON_IsString(role0) && !strcmp(role0->valuestring, "system");
    muse_srv_buf_puts(&b, "<|begin_of_text|><|start|>system<|message|>");
    if (has_system) put_content(&b, cJSON_GetObjectItemCaseSensitive(first, "content"));
    else muse_srv_buf_puts(&b, "You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04.");
    muse_srv_buf_printf(&b, "\n\nReasoning strength: %s.", in->reasoning_strength ? in->reasoning_strength : "high");
    if (in->tools && cJSON_GetArraySize(in->tools) > 0) {
        char *js = cJSON_PrintUnformatted(in->tools);
        muse_srv_buf_printf(&b, "\n\nTools: %s", js ? js : "");
        free(js);
    }
    muse_srv_buf_puts(&b, "\n\n# Valid recipients: \"self\", \"user\".<|eot|>");
    cJSON_ArrayForEach(msg, in->messages) {
        if (msg == first && has_system) continue;
        const char *role = cJSON_GetObjectItemCaseSensitive(msg, "role")->valuestring;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!strcmp(role, "assistant")) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
            if (cJSON_IsString(r)) muse_srv_buf_printf(&b, "<|start|>assistant to=self<|message|>%s<|eom|>", r->valuestring);
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"), *c;
            int n_calls = cJSON_GetArraySize(calls), i = 0;
            cJSON_ArrayForEach(c, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                muse_srv_buf_printf(&b, "<|start|>assistant to=%s<|message|><atem:function_calls>%s%s",
                                    cJSON_IsString(name) ? name->valuestring : "",
                                    cJSON_IsString(args) ? args->valuestring : "",
                                    ++i < n_calls ? "<|eom|>" : "<|eot|>");
            }
            if (!n_calls) {
                muse_srv_buf_puts(&b, "<|start|>assistant to=user<|message|>");
                put_content(&b, content);
                muse_srv_buf_puts(&b, "<|eot|>");
            }
        } else if (!strcmp(role, "tool")) {
            muse_srv_buf_puts(&b, "<|start|>tool<|message|>");
            put_content(&b, content);
            muse_srv_buf_puts(&b, "<|eot|>");
        } else {
            muse_srv_buf_printf(&b, "<|start|>%s<|message|>", role);
            put_content(&b, content);
            muse_srv_buf_puts(&b, "<|eot|>");
        }
    }
    if (!muse_srv_buf_puts(&b, "<|start|>assistant")) {
        muse_srv_buf_free(&b);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    *prompt = b.p;
    return MUSE_OK;
}

static void *fake_slot_create(void *self, struct muse_error *err) {
    struct fake *f = self;
    struct fake_slot *s = calloc(1, sizeof *s);
    if (s) s->toks = malloc((size_t)f->n_ctx * sizeof *s->toks);
    if (!s || !s->toks) {
        if (s) free(s);
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->f = f;
    return s;
}

static void fake_slot_free(void *slot) {
    struct fake_slot *s = slot;
    if (!s) return;
    free(s->toks);
    free(s->script);
    free(s);
}

/* A simulated sliding-window ring (the script's n_swa, ring_rows) under the KV cache's own rollback
 * rule, without checkpoints: what the ring cannot serve restarts at 0. */
static struct muse_session_keep fake_slot_keep(void *slot, int n_keep) {
    struct fake_slot *s = slot;
    if (n_keep < 0) n_keep = 0;
    if (n_keep > s->n) n_keep = s->n;
    struct muse_session_keep k = {.kind = MUSE_SESSION_KEEP_NONE, .n_asked = n_keep, .n_kept = n_keep, .ckpt_pos = -1};
    if (n_keep == s->n) return k;
    if (muse_kv_ring_can_truncate(s->n, n_keep, s->f->n_swa, s->f->ring_rows)) {
        k.kind = MUSE_SESSION_KEEP_TRUNCATED;
    } else {
        k.kind = MUSE_SESSION_KEEP_CLEARED;
        k.n_kept = 0;
    }
    s->n = k.n_kept;
    return k;
}

static void sleep_us(long us) {
    if (us <= 0) return;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static muse_status fake_slot_eval(void *slot, const int32_t *toks, int n, struct muse_error *err) {
    struct fake_slot *s = slot;
    if (n < 0 || s->n + n > s->f->n_ctx) return muse_error_set(err, MUSE_ERR_CONTEXT, "context full");
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= N_VOCAB) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad token id %d", toks[i]);
    memcpy(s->toks + s->n, toks, (size_t)n * sizeof *toks);
    s->n += n;
    sleep_us((long)n * s->f->prefill_us_per_token);
    return MUSE_OK;
}

/* The slot's text between the last `<|start|>user<|message|>` and the next `<|eot|>`, or its tail. */
static char *last_user_text(const struct fake_slot *s) {
    int start = -1;
    for (int i = s->n - 2; i >= 0; i--)
        if (s->toks[i] == TOK_START && s->toks[i + 1] == 'u' && i + 5 < s->n && s->toks[i + 5] == TOK_MESSAGE) {
            start = i + 6;
            break;
        }
    int end = s->n;
    if (start < 0) start = s->n > 64 ? s->n - 64 : 0;
    else
        for (int i = start; i < s->n; i++)
            if (s->toks[i] == TOK_EOT) { end = i; break; }
    struct muse_srv_buf b = {0};
    char piece[32];
    for (int i = start; i < end; i++) {
        if (s->toks[i] >= 256) continue;
        int k = fake_piece(NULL, s->toks[i], piece, sizeof piece);
        muse_srv_buf_append(&b, piece, (size_t)k);
    }
    if (!b.p) muse_srv_buf_puts(&b, "");
    return b.p;
}

/* Pick the rule for this prompt and tokenize its output. */
static muse_status choose_script(struct fake_slot *s, struct muse_error *err) {
    char *last = last_user_text(s);
    if (!last) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    const struct rule *r = NULL;
    for (int i = 0; i < s->f->n_rules && !r; i++)
        if (!s->f->rules[i].match || strstr(last, s->f->rules[i].match)) r = &s->f->rules[i];
    static const struct rule echo = {NULL, " to=self<|message|>The user said something.<|eom|><|start|>assistant"
                                           " to=user<|message|>You said: {LAST}", false, -1};
    static const struct rule raw_echo = {NULL, " You said: {LAST}", false, -1};
    /* a chat prompt ends with the generation prompt `<|start|>assistant`; anything else is raw text */
    static const char gen[] = "assistant";
    bool chat = s->n > 9 && s->toks[s->n - 10] == TOK_START;
    for (int i = 0; chat && i < 9; i++) chat = s->toks[s->n - 9 + i] == gen[i];
    if (!r) r = chat ? &echo : &raw_echo;
    struct muse_srv_buf text = {0};
    for (const char *p = r->output; *p;) {
        const char *q = strstr(p, "{LAST}");
        if (!q) {
            muse_srv_buf_puts(&text, p);
            break;
        }
        muse_srv_buf_append(&text, p, (size_t)(q - p));
        muse_srv_buf_puts(&text, last);
        p = q + 6;
    }
    free(last);
    muse_status st = fake_tokenize(NULL, muse_srv_buf_str(&text), text.len, false, true, &s->script, &s->n_script, err);
    muse_srv_buf_free(&text);
    s->rule = r;
    s->pos = 0;
    return st;
}

/* A new request: the sampling parameters do not matter, the script does. */
static muse_status fake_slot_begin(void *slot, const struct muse_sampler_params *sp, struct muse_error *err) {
    (void)sp;
    struct fake_slot *s = slot;
    free(s->script);
    s->script = NULL;
    s->n_script = s->pos = 0;
    return choose_script(s, err);
}

static muse_status fake_slot_sample(void *slot, int n_probs, struct muse_srv_prob *probs, int32_t *tok,
                                    struct muse_error *err) {
    struct fake_slot *s = slot;
    if (!s->script) return muse_error_set(err, MUSE_ERR_INTERNAL, "sample before begin");
    if (s->pos < s->n_script) *tok = s->script[s->pos++];
    else if (s->rule->repeat && s->n_script > 0) *tok = s->script[(s->pos++) % s->n_script];
    else *tok = TOK_EOT;
    if (s->rule->repeat && s->pos >= s->n_script) s->pos = s->pos % (s->n_script ? s->n_script : 1);
    /* a made-up but well-formed distribution: the scripted token first, then its neighbours */
    float p = 0.5f;
    for (int i = 0; i < n_probs; i++, p *= 0.5f) {
        probs[i].token = (*tok + i) % N_VOCAB;
        probs[i].prob = p;
    }
    if (n_probs > 0) probs[n_probs] = (struct muse_srv_prob){*tok, 0.5f};
    int delay = s->rule->delay_ms >= 0 ? s->rule->delay_ms : s->f->delay_ms;
    sleep_us((long)delay * 1000);
    return MUSE_OK;
}

static void fake_destroy(void *self) {
    struct fake *f = self;
    if (!f) return;
    for (int i = 0; i < f->n_rules; i++) {
        free(f->rules[i].match);
        free(f->rules[i].output);
    }
    free(f->rules);
    free(f);
}

static const struct muse_srv_adapter_ops fake_ops = {
    .destroy = fake_destroy,
    .info = fake_info,
    .tokenize = fake_tokenize,
    .token_piece = fake_piece,
    .is_eog = fake_is_eog,
    .render_chat = fake_render,
    .slot_create = fake_slot_create,
    .slot_free = fake_slot_free,
    .slot_keep = fake_slot_keep,
    .slot_eval = fake_slot_eval,
    .slot_begin = fake_slot_begin,
    .slot_sample = fake_slot_sample,
};

static int get_int(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

muse_status muse_srv_scripted_adapter_create(const char *path, struct muse_srv_adapter *out, struct muse_error *err) {
    struct fake *f = calloc(1, sizeof *f);
    cJSON *js = NULL;
    char *text = NULL;
    if (!f) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    snprintf(f->model, sizeof f->model, "muse-test-script");
    f->n_ctx = 4096;
    if (path) {
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            muse_error_set(err, MUSE_ERR_IO, "cannot open test script %s", path);
            goto fail;
        }
        struct muse_srv_buf b = {0};
        char chunk[4096];
        size_t k;
        while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0) muse_srv_buf_append(&b, chunk, k);
        fclose(fp);
        text = b.p;
        js = cJSON_Parse(text ? text : "");
        if (!cJSON_IsObject(js)) {
            muse_error_set(err, MUSE_ERR_FORMAT, "test script %s is not a JSON object", path);
            goto fail;
        }
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(js, "model");
        if (cJSON_IsString(m)) snprintf(f->model, sizeof f->model, "%s", m->valuestring);
        f->n_ctx = get_int(js, "n_ctx", f->n_ctx);
        f->n_swa = get_int(js, "n_swa", 0);
        f->ring_rows = get_int(js, "ring_rows", 2 * f->n_swa);
        f->delay_ms = get_int(js, "token_delay_ms", 0);
        f->prefill_us_per_token = get_int(js, "prefill_us_per_token", 0);
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(js, "rules"), *r;
        int n = cJSON_GetArraySize(rules);
        f->rules = calloc((size_t)n + 1, sizeof *f->rules);
        if (!f->rules) {
            muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto fail;
        }
        cJSON_ArrayForEach(r, rules) {
            const cJSON *match = cJSON_GetObjectItemCaseSensitive(r, "match");
            const cJSON *output = cJSON_GetObjectItemCaseSensitive(r, "output");
            if (!cJSON_IsString(output) || (match && !cJSON_IsString(match))) {
                muse_error_set(err, MUSE_ERR_FORMAT, "test script %s: each rule needs a string \"output\"", path);
                goto fail;
            }
            struct rule *dst = &f->rules[f->n_rules++];
            dst->match = match ? strdup(match->valuestring) : NULL;
            dst->output = strdup(output->valuestring);
            dst->repeat = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "repeat"));
            dst->delay_ms = get_int(r, "token_delay_ms", -1);
            if (!dst->output || (match && !dst->match)) {
                muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
                goto fail;
            }
        }
        int load_ms = get_int(js, "load_delay_ms", 0);
        sleep_us((long)load_ms * 1000);
    }
    if (f->n_ctx < 16 || f->n_ctx > (1 << 24)) {
        muse_error_set(err, MUSE_ERR_FORMAT, "test script: n_ctx %d out of range", f->n_ctx);
        goto fail;
    }
    cJSON_Delete(js);
    free(text);
    out->ops = &fake_ops;
    out->self = f;
    return MUSE_OK;
fail:
    cJSON_Delete(js);
    free(text);
    fake_destroy(f);
    return err ? err->status : MUSE_ERR_INTERNAL;
}
