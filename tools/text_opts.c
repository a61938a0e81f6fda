/* text_opts.c - reverse prompts, escape sequences and the stop-string matcher (text_opts.h). */
#include "text_opts.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

void text_opts_init(struct text_opts *o) { memset(o, 0, sizeof *o); }

int text_opts_parse(struct text_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-e") || !strcmp(a, "--escape")) {
        o->no_escape = false;
        return 1;
    }
    if (!strcmp(a, "--no-escape")) {
        o->no_escape = true;
        return 1;
    }
    if (strcmp(a, "-r") && strcmp(a, "--reverse-prompt")) return 0;
    if (!(v = cli_next(argc, argv, i))) return -1;
    if (!*v) {
        cli_err("bad value for %s: '' (expected a non-empty text)", a);
        return -1;
    }
    if (o->n_stops == TEXT_OPTS_MAX_STOPS) {
        cli_err("too many %s (at most %d)", a, TEXT_OPTS_MAX_STOPS);
        return -1;
    }
    o->stops[o->n_stops++] = v;
    return 1;
}

void text_opts_usage(FILE *f) {
    static const struct cli_opt rows[] = {
        {"-r|--reverse-prompt", "TEXT", "stop when the generated text contains TEXT (repeat for several, at most 16)",
         NULL},
        {"-e|--escape", NULL, "process escapes in -p and -r: \\n \\r \\t \\' \\\" \\\\ \\xHH (default, as llama.cpp)", NULL},
        {"--no-escape", NULL, "take -p and -r literally", NULL},
    };
    cli_opts_usage(f, rows, sizeof rows / sizeof rows[0]);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t text_unescape(char *s) {
    size_t r = 0, w = 0, n = strlen(s);
    while (r < n) {
        char c = s[r++];
        if (c != '\\' || r == n) { /* a plain byte, or a backslash that ends the text */
            s[w++] = c;
            continue;
        }
        char e = s[r++];
        switch (e) {
        case 'n': s[w++] = '\n'; break;
        case 'r': s[w++] = '\r'; break;
        case 't': s[w++] = '\t'; break;
        case '\'': case '"': case '\\': s[w++] = e; break;
        default:
            if (e == 'x' && r + 1 < n && hex_digit(s[r]) >= 0 && hex_digit(s[r + 1]) >= 0) {
                s[w++] = (char)(hex_digit(s[r]) * 16 + hex_digit(s[r + 1]));
                r += 2;
            } else { /* not an escape (or \x without two hex digits): kept as written */
                s[w++] = '\\';
                s[w++] = e;
            }
        }
    }
    s[w] = '\0';
    return w;
}

char *text_opts_prompt(const struct text_opts *o, const char *text) {
    if (!text) return NULL;
    char *s = strdup(text);
    if (s && !o->no_escape) text_unescape(s);
    return s;
}

/* ---- the stop-string matcher ---- */

struct stop_match {
    char *stops[TEXT_OPTS_MAX_STOPS];
    size_t len[TEXT_OPTS_MAX_STOPS];
    int n;
    bool keep_stop;
    int hit;       /* index of the stop string that matched, -1 none yet */
    char *held;    /* [cap] text not emitted yet: a possible start of a stop string */
    size_t n_held, cap;
};

void stop_match_free(struct stop_match *m) {
    if (!m) return;
    for (int k = 0; k < m->n; k++) free(m->stops[k]);
    free(m->held);
    free(m);
}

struct stop_match *stop_match_create(const struct text_opts *o, bool keep_stop, bool *oom) {
    *oom = false;
    if (o->n_stops == 0) return NULL;
    struct stop_match *m = calloc(1, sizeof *m);
    if (!m) goto fail;
    m->keep_stop = keep_stop;
    m->hit = -1;
    for (int k = 0; k < o->n_stops; k++) {
        if (!(m->stops[k] = strdup(o->stops[k]))) goto fail;
        m->n++;
        m->len[k] = o->no_escape ? strlen(m->stops[k]) : text_unescape(m->stops[k]);
    }
    return m;
fail:
    *oom = true;
    stop_match_free(m);
    return NULL;
}

/* The length of the longest end of held[0..n) that is the beginning (not the whole) of a stop string. */
static size_t partial_end(const struct stop_match *m, size_t n) {
    size_t best = 0;
    for (int k = 0; k < m->n; k++)
        for (size_t l = m->len[k] - 1 < n ? m->len[k] - 1 : n; l > best; l--)
            if (!memcmp(m->held + n - l, m->stops[k], l)) {
                best = l;
                break;
            }
    return best;
}

bool stop_match_feed(struct stop_match *m, const char *s, size_t n, stop_emit_fn emit, void *user) {
    if (m->hit >= 0) return true;
    if (m->n_held + n > m->cap) {
        size_t cap = (m->n_held + n) * 2;
        char *p = realloc(m->held, cap);
        if (!p) { /* out of memory: the text goes out unchecked rather than being lost */
            emit(user, m->held, m->n_held);
            emit(user, s, n);
            m->n_held = 0;
            return false;
        }
        m->held = p;
        m->cap = cap;
    }
    memcpy(m->held + m->n_held, s, n);
    m->n_held += n;
    /* the earliest stop string in the held text (held never contains a whole one before this piece) */
    for (size_t p = 0; p < m->n_held; p++)
        for (int k = 0; k < m->n; k++)
            if (m->len[k] <= m->n_held - p && !memcmp(m->held + p, m->stops[k], m->len[k])) {
                emit(user, m->held, p + (m->keep_stop ? m->len[k] : 0));
                m->hit = k;
                m->n_held = 0;
                return true;
            }
    const size_t keep = partial_end(m, m->n_held);
    emit(user, m->held, m->n_held - keep);
    memmove(m->held, m->held + m->n_held - keep, keep);
    m->n_held = keep;
    return false;
}

bool stop_match_whole(struct stop_match *m, const char *s, size_t n) {
    for (int k = 0; m->hit < 0 && k < m->n; k++)
        if (m->len[k] == n && !memcmp(s, m->stops[k], n)) m->hit = k;
    return m->hit >= 0;
}

void stop_match_flush(struct stop_match *m, stop_emit_fn emit, void *user) {
    if (m->n_held) emit(user, m->held, m->n_held);
    m->n_held = 0;
}

const char *stop_match_hit(const struct stop_match *m) { return m && m->hit >= 0 ? m->stops[m->hit] : NULL; }

const char *text_show(const char *s, char *buf, size_t cap) {
    size_t w = 0;
    for (; s && *s && w + 5 < cap; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '\n') w += (size_t)snprintf(buf + w, cap - w, "\\n");
        else if (c == '\t') w += (size_t)snprintf(buf + w, cap - w, "\\t");
        else if (c == '\\' || c == '"') w += (size_t)snprintf(buf + w, cap - w, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) w += (size_t)snprintf(buf + w, cap - w, "\\x%02x", c);
        else buf[w++] = (char)c;
    }
    buf[w < cap ? w : cap - 1] = '\0';
    return buf;
}
