/*
 * output_parser.c - the Muse-Glimmer output parser (see output_parser.h): a marker splitter
 * (text mode) in front of a small state machine over messages
 *   [<|start|>] HEADER <|message|> BODY (<|eom|> | <|eot|> | <|end_of_text|> | <|start|>)
 * with hold-back of partial markers and recipient headers while streaming.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/output_parser.h"

enum marker { MK_START, MK_MESSAGE, MK_EOM, MK_EOT, MK_EOS, MK_COUNT };
static const char *const marker_text[MK_COUNT] = {
    "<|start|>", "<|message|>", "<|eom|>", "<|eot|>", "<|end_of_text|>"};

static const char ATEM_OPEN[] = "<atem:function_calls>";

enum state { ST_HEADER, ST_BODY, ST_BETWEEN, ST_DONE };
enum channel { CH_REASONING, CH_CONTENT, CH_TOOL };

struct sbuf {
    char *d;
    size_t n, cap;
};

struct muse_output_parser {
    const cJSON *tools;
    bool raw;
    bool no_tool_calls;
    char *id_prefix;
    uint64_t next_call;
    muse_output_callback cb;
    void *user;

    enum state st;
    struct sbuf pending;   /* text mode: text that may end in a partial marker */
    struct sbuf header;    /* ST_HEADER: header text so far */
    enum channel ch;
    bool headerless;       /* body began without a recipient header */
    bool atem_checked;     /* headerless body: decided whether it is an ATEM call */
    struct sbuf body;      /* ST_BODY: held-back text (reasoning/content) or the whole tool body */
    bool word_start;       /* body.d[0] starts a word (message start, or whitespace emitted before) */

    struct sbuf reasoning, content;
    cJSON *tool_calls;
    bool ended, finished, nomem;
    bool cut_tool_call;
};

static bool sb_put(struct muse_output_parser *p, struct sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *d = realloc(b->d, cap);
        if (!d) {
            p->nomem = true;
            return false;
        }
        b->d = d;
        b->cap = cap;
    }
    if (n) memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = '\0';
    return true;
}

static void sb_consume(struct sbuf *b, size_t n) {
    if (n >= b->n) {
        b->n = 0;
    } else {
        memmove(b->d, b->d + n, b->n - n);
        b->n -= n;
    }
    if (b->d) b->d[b->n] = '\0';
}

static void sb_free(struct sbuf *b) {
    free(b->d);
    b->d = NULL;
    b->n = b->cap = 0;
}

/* ---- events ---- */

static void emit_text(struct muse_output_parser *p, enum channel ch, const char *s, size_t n) {
    if (n == 0) return;
    struct sbuf *acc = ch == CH_REASONING ? &p->reasoning : &p->content;
    sb_put(p, acc, s, n);
    if (p->cb) {
        struct muse_output_event ev = {
            .kind = ch == CH_REASONING ? MUSE_OUTPUT_REASONING : MUSE_OUTPUT_CONTENT,
            .text = s, .len = n};
        p->cb(p->user, &ev);
    }
}

static void emit_tool_call(struct muse_output_parser *p, const char *name, const char *args) {
    char id[160];
    snprintf(id, sizeof(id), "%s%" PRIu64, p->id_prefix, p->next_call++);
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (!call || !fn || !cJSON_AddStringToObject(call, "id", id) ||
        !cJSON_AddStringToObject(call, "type", "function") ||
        !cJSON_AddStringToObject(fn, "name", name) || !cJSON_AddStringToObject(fn, "arguments", args)) {
        cJSON_Delete(call);
        cJSON_Delete(fn);
        p->nomem = true;
        return;
    }
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(p->tool_calls, call);
    if (p->cb) {
        struct muse_output_event ev = {.kind = MUSE_OUTPUT_TOOL_CALL, .name = name, .arguments = args, .id = id};
        p->cb(p->user, &ev);
    }
}

/* ---- headers ---- */

static bool is_prefix(const char *s, size_t n, const char *full) {
    size_t fl = strlen(full);
    return n <= fl && memcmp(s, full, n) == 0;
}

/* Could h (so far) be a recipient header such as " to=self" or "assistant to=fn"? */
static bool header_possible(const char *h, size_t n) {
    if (n > 160) return false;
    int words = 0;
    bool have_to = false;
    size_t i = 0;
    while (i < n) {
        while (i < n && (h[i] == ' ' || h[i] == '\t')) i++;
        if (i >= n) break;
        size_t st = i;
        while (i < n && h[i] != ' ' && h[i] != '\t') i++;
        const char *w = h + st;
        size_t wl = i - st;
        if (memchr(w, '\n', wl) || memchr(w, '<', wl) || memchr(w, '\r', wl)) return false;
        /* every rule is prefix-closed (a prefix of a possible header is possible), so streamed
         * text is judged as it would be in one piece */
        bool ok;
        if (words == 0 && is_prefix(w, wl, "assistant")) ok = true;
        else if (!have_to && wl >= 3 && !memcmp(w, "to=", 3)) ok = have_to = true;
        else if (!have_to && is_prefix(w, wl, "to=")) ok = true;
        else ok = have_to && wl <= 32; /* e.g. a trailing content-type word */
        if (!ok) return false;
        if (++words > 3) return false;
    }
    return true;
}

/* The recipient of a complete header (malloc'd), or NULL for a bare header. */
static char *header_recipient(const char *h, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++) {
        if ((i == 0 || h[i - 1] == ' ' || h[i - 1] == '\t') && !memcmp(h + i, "to=", 3)) {
            size_t st = i + 3, e = st;
            while (e < n && h[e] != ' ' && h[e] != '\t' && h[e] != '\n') e++;
            if (e == st) return NULL;
            char *r = malloc(e - st + 1);
            if (!r) return NULL;
            memcpy(r, h + st, e - st);
            r[e - st] = '\0';
            return r;
        }
    }
    return NULL;
}

/*
 * Bytes at the end of a body to hold back while streaming: trailing whitespace, and a trailing
 * header-like tail ("to=fn", "assistant to=", " t") that a following <|message|> would turn into a
 * header (osaurus #2354: headers leaking into reasoning).
 */
static size_t header_tail(const char *s, size_t n, bool word_start) {
    if (n == 0) return 0; /* s may be NULL for an empty body */
    size_t k = n;
    while (k > 0 && isspace((unsigned char)s[k - 1])) k--;
    size_t j = k;
    while (j > 0 && !isspace((unsigned char)s[j - 1])) j--;
    const char *w = s + j;
    size_t wl = k - j;
    /* a word at s[0] may continue text already emitted (word_start false): then it is no header,
     * whatever its end looks like - the same decision as when the text comes in one piece */
    bool boundary = j > 0 || word_start;
    bool headerish = wl > 0 && wl <= 128 && boundary && !memchr(w, '<', wl) &&
                     ((wl >= 3 && !memcmp(w, "to=", 3)) || is_prefix(w, wl, "to="));
    if (!headerish) {
        /* "assistant" (or the start of it) may become the role word of "assistant to=fn" */
        bool blanks = true;
        for (size_t i = k; i < n; i++) blanks &= s[i] == ' ' || s[i] == '\t';
        if (!boundary || wl == 0 || !is_prefix(w, wl, "assistant") || !(wl == 9 ? blanks : k == n)) return n - k;
        while (j > 0 && (s[j - 1] == ' ' || s[j - 1] == '\t')) j--; /* and the blanks before it */
        return n - j;
    }
    /* include whitespace and an "assistant" role word before it */
    size_t st = j;
    while (st > 0 && (s[st - 1] == ' ' || s[st - 1] == '\t')) st--;
    if (st >= 9 && !memcmp(s + st - 9, "assistant", 9) &&
        (st == 9 ? word_start : isspace((unsigned char)s[st - 10]))) {
        st -= 9;
        while (st > 0 && (s[st - 1] == ' ' || s[st - 1] == '\t')) st--;
    }
    return n - st;
}

/* ---- bodies ---- */

static void start_body(struct muse_output_parser *p, const char *recipient, bool headerless) {
    p->st = ST_BODY;
    p->headerless = headerless;
    p->atem_checked = !headerless || p->no_tool_calls;
    p->body.n = 0;
    p->word_start = true;
    if (p->raw || !recipient || !strcmp(recipient, "user")) p->ch = CH_CONTENT;
    else if (!strcmp(recipient, "self")) p->ch = CH_REASONING;
    else p->ch = p->no_tool_calls ? CH_CONTENT : CH_TOOL;
}

static void flush_body(struct muse_output_parser *p, bool final) {
    if (p->ch == CH_TOOL) return;
    if (p->headerless && !p->atem_checked) {
        size_t i = 0;
        while (i < p->body.n && isspace((unsigned char)p->body.d[i])) i++;
        size_t rest = p->body.n - i;
        if (rest >= sizeof(ATEM_OPEN) - 1 && !memcmp(p->body.d + i, ATEM_OPEN, sizeof(ATEM_OPEN) - 1)) {
            p->ch = CH_TOOL;
            p->atem_checked = true;
            return;
        }
        if (!final && is_prefix(p->body.d + i, rest, ATEM_OPEN)) return; /* undecided: hold */
        p->atem_checked = true;
    }
    size_t hold = final || p->raw ? 0 : header_tail(p->body.d, p->body.n, p->word_start);
    size_t n = p->body.n - hold;
    emit_text(p, p->ch, p->body.d, n);
    if (n > 0) p->word_start = isspace((unsigned char)p->body.d[n - 1]);
    sb_consume(&p->body, n);
}

static void body_text(struct muse_output_parser *p, const char *s, size_t n) {
    if (!sb_put(p, &p->body, s, n)) return;
    flush_body(p, false);
}

static void end_message(struct muse_output_parser *p) {
    if (p->st != ST_BODY) return;
    if (p->ch == CH_TOOL) {
        char *name = NULL, *args = NULL;
        if (muse_atem_parse(p->body.d ? p->body.d : "", p->body.n, p->tools, &name, &args) == MUSE_OK) {
            emit_tool_call(p, name, args);
        } else {
            emit_text(p, CH_CONTENT, p->body.d, p->body.n); /* malformed: degrade to content */
        }
        free(name);
        free(args);
        p->body.n = 0;
    } else {
        flush_body(p, true);
    }
}

/* Header text that turned out not to be a header: content of a headerless message. */
static void header_to_body(struct muse_output_parser *p) {
    struct sbuf h = p->header;
    p->header = (struct sbuf){0};
    start_body(p, NULL, true);
    body_text(p, h.d ? h.d : "", h.n);
    sb_free(&h);
}

static void on_text(struct muse_output_parser *p, const char *s, size_t n) {
    if (p->raw && p->st != ST_DONE) {
        emit_text(p, CH_CONTENT, s, n);
        return;
    }
    switch (p->st) {
    case ST_DONE: return;
    case ST_BETWEEN:
        while (n > 0 && isspace((unsigned char)*s)) s++, n--;
        if (n == 0) return;
        p->st = ST_HEADER;
        p->header.n = 0;
        /* fall through */
    case ST_HEADER:
        if (!sb_put(p, &p->header, s, n)) return;
        if (!header_possible(p->header.d, p->header.n)) header_to_body(p);
        return;
    case ST_BODY:
        body_text(p, s, n);
        return;
    }
}

static void on_marker(struct muse_output_parser *p, enum marker m) {
    if (p->raw) {
        if (p->st == ST_DONE) return;
        if (m == MK_EOT || m == MK_EOS) {
            p->st = ST_DONE;
            p->ended = true;
            return;
        }
        emit_text(p, CH_CONTENT, marker_text[m], strlen(marker_text[m]));
        return;
    }
    switch (m) {
    case MK_MESSAGE:
        if (p->st == ST_HEADER) {
            char *r = header_recipient(p->header.d ? p->header.d : "", p->header.n);
            p->header.n = 0;
            start_body(p, r, false);
            free(r);
        } else if (p->st == ST_BETWEEN) {
            start_body(p, NULL, false);
        } else if (p->st == ST_BODY) {
            size_t tail = p->ch == CH_TOOL ? 0 : header_tail(p->body.d, p->body.n, p->word_start);
            char *r = tail ? header_recipient(p->body.d + p->body.n - tail, tail) : NULL;
            if (r) {
                /* "...text to=fn<|message|>": the tail is the next message's header */
                p->body.n -= tail;
                end_message(p);
                start_body(p, r, false);
                free(r);
            }
            /* else: a stray <|message|> inside a body is dropped */
        }
        return;
    case MK_EOM:
    case MK_START:
        if (p->st == ST_HEADER) {
            if (!header_possible(p->header.d ? p->header.d : "", p->header.n)) header_to_body(p);
            else p->header.n = 0; /* a header with no message */
        }
        if (p->st == ST_BODY) end_message(p);
        if (p->st != ST_DONE) {
            p->st = m == MK_START ? ST_HEADER : ST_BETWEEN;
            p->header.n = 0;
        }
        return;
    case MK_EOT:
    case MK_EOS:
        if (p->st == ST_HEADER && p->header.n) {
            /* text then <|eot|> with no <|message|>: a headerless reply unless it is a bare header */
            size_t i = 0;
            while (i < p->header.n && isspace((unsigned char)p->header.d[i])) i++;
            if (!is_prefix(p->header.d + i, p->header.n - i, "assistant") &&
                !(p->header.n - i >= 3 && !memcmp(p->header.d + i, "to=", 3)))
                header_to_body(p);
        }
        if (p->st == ST_BODY) end_message(p);
        if (p->st != ST_DONE) p->ended = true;
        p->st = ST_DONE;
        return;
    default:
        return;
    }
}

/* ---- splitting text into text and markers ---- */

static void split_pending(struct muse_output_parser *p, bool final) {
    struct sbuf *b = &p->pending;
    size_t i = 0;
    while (i < b->n) {
        const char *lt = memchr(b->d + i, '<', b->n - i);
        if (!lt) {
            on_text(p, b->d + i, b->n - i);
            i = b->n;
            break;
        }
        size_t at = (size_t)(lt - b->d);
        if (at > i) on_text(p, b->d + i, at - i);
        i = at;
        size_t rem = b->n - i;
        int found = -1;
        bool partial = false;
        for (int m = 0; m < MK_COUNT; m++) {
            size_t ml = strlen(marker_text[m]);
            if (rem >= ml && !memcmp(b->d + i, marker_text[m], ml)) found = m;
            else if (rem < ml && !memcmp(b->d + i, marker_text[m], rem)) partial = true;
        }
        if (found >= 0) {
            on_marker(p, (enum marker)found);
            i += strlen(marker_text[found]);
        } else if (partial && !final) {
            break; /* hold back a possible marker start */
        } else {
            on_text(p, b->d + i, 1);
            i++;
        }
    }
    sb_consume(b, i);
}

/* ---- public API ---- */

muse_status muse_output_parser_create(const struct muse_output_parser_params *params,
                                      struct muse_output_parser **out, struct muse_error *err) {
    *out = NULL;
    struct muse_output_parser *p = calloc(1, sizeof(*p));
    if (!p) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (params) {
        p->tools = params->tools;
        p->raw = params->raw;
        p->no_tool_calls = params->no_tool_calls;
        p->next_call = params->first_call_index;
        p->cb = params->callback;
        p->user = params->user;
    }
    p->id_prefix = strdup(params && params->id_prefix ? params->id_prefix : "call_");
    p->tool_calls = cJSON_CreateArray();
    if (!p->id_prefix || !p->tool_calls) {
        muse_output_parser_free(p);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    p->st = ST_HEADER; /* the prompt ended with <|start|>assistant */
    *out = p;
    return MUSE_OK;
}

void muse_output_parser_free(struct muse_output_parser *p) {
    if (!p) return;
    sb_free(&p->pending);
    sb_free(&p->header);
    sb_free(&p->body);
    sb_free(&p->reasoning);
    sb_free(&p->content);
    cJSON_Delete(p->tool_calls);
    free(p->id_prefix);
    free(p);
}

muse_status muse_output_parser_feed(struct muse_output_parser *p, const char *text, size_t len) {
    if (p->finished) return MUSE_OK;
    if (!sb_put(p, &p->pending, text, len)) return MUSE_ERR_NOMEM;
    split_pending(p, false);
    return p->nomem ? MUSE_ERR_NOMEM : MUSE_OK;
}

muse_status muse_output_parser_feed_token(struct muse_output_parser *p, const char *text,
                                          size_t len, bool special) {
    if (p->finished) return MUSE_OK;
    if (!special) {
        split_pending(p, true); /* nothing from earlier text mode may stay pending */
        on_text(p, text, len);
        return p->nomem ? MUSE_ERR_NOMEM : MUSE_OK;
    }
    split_pending(p, true);
    for (int m = 0; m < MK_COUNT; m++) {
        if (strlen(marker_text[m]) == len && !memcmp(text, marker_text[m], len)) {
            on_marker(p, (enum marker)m);
            return p->nomem ? MUSE_ERR_NOMEM : MUSE_OK;
        }
    }
    on_text(p, text, len); /* another special token (<|patch|> ...): its text */
    return p->nomem ? MUSE_ERR_NOMEM : MUSE_OK;
}

muse_status muse_output_parser_finish(struct muse_output_parser *p) {
    if (p->finished) return MUSE_OK;
    split_pending(p, true);
    if (p->st == ST_HEADER && p->header.n && !header_possible(p->header.d, p->header.n)) header_to_body(p);
    if (p->st == ST_BODY && p->ch == CH_TOOL) { /* cut off (max_tokens, a stop, the context end) */
        char *name = NULL, *args = NULL;
        if (muse_atem_parse(p->body.d ? p->body.d : "", p->body.n, p->tools, &name, &args) == MUSE_OK)
            emit_tool_call(p, name, args); /* complete but for its end marker */
        else
            p->cut_tool_call = true; /* half a call: neither a call nor content (never markup) */
        free(name);
        free(args);
        p->body.n = 0;
    }
    if (p->st == ST_BODY) end_message(p);
    p->st = ST_DONE;
    p->finished = true;
    return p->nomem ? MUSE_ERR_NOMEM : MUSE_OK;
}

const char *muse_output_parser_reasoning(const struct muse_output_parser *p, size_t *len) {
    if (len) *len = p->reasoning.n;
    return p->reasoning.d ? p->reasoning.d : "";
}

const char *muse_output_parser_content(const struct muse_output_parser *p, size_t *len) {
    if (len) *len = p->content.n;
    return p->content.d ? p->content.d : "";
}

const cJSON *muse_output_parser_tool_calls(const struct muse_output_parser *p) { return p->tool_calls; }

bool muse_output_parser_turn_ended(const struct muse_output_parser *p) { return p->ended; }

bool muse_output_parser_cut_tool_call(const struct muse_output_parser *p) { return p->cut_tool_call; }
