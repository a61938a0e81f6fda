/*
 * json_regex.c - a JSON Schema `pattern` (an ECMA/Python regex subset) -> GBNF for the JSON
 * string content of its full matches (json_regex.h).
 *
 * Recursive descent that writes GBNF as it goes (as llama.cpp's _visit_pattern does): a sequence
 * is a list of items, a quantifier rewrites the last one, consecutive plain characters merge
 * into one literal. Characters become what JSON needs inside a string: `"` and `\` escaped,
 * control characters as \n \t \r \b \f or \u00XX. Sets are code-point ranges; a negated set (and
 * `.`) keeps no control characters (a subset of the regex: still only matching strings), and one
 * built from \D \W \S, or a negated one holding \d \w \s, stays within printable ASCII so that
 * the regex engine's Unicode classes cannot disagree with ours.
 */
#include <stdarg.h>

#include "core/error.h"
#include "gen/gbnf_buf.h"
#include "gen/json_regex.h"

#define MAX_RDEPTH 100      /* nested groups (llama.cpp's MAX_PATTERN_DEPTH) */
#define MAX_PATTERN 65536   /* bytes */
#define MAX_COUNT 100000    /* {m,n} */

struct range {
    uint32_t lo, hi;
};

struct cset {
    struct range *r;
    int n, cap;
    bool neg;        /* the complement of r */
    bool ascii_only; /* complement taken within printable ASCII */
};

struct rx {
    const char *s;
    size_t n, i;
    struct muse_gbnf_rules *rules;
    const char *name;
    int n_sub, depth;
    muse_status st;
    struct muse_error *err;
};

static void rfail(struct rx *x, muse_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rfail(struct rx *x, muse_status st, const char *fmt, ...) {
    if (x->st != MUSE_OK) return;
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    x->st = muse_error_set(x->err, st, "pattern position %zu: %s", x->i + 1, what);
}

static void rnomem(struct rx *x) {
    if (x->st == MUSE_OK) x->st = muse_error_set(x->err, MUSE_ERR_NOMEM, "pattern: out of memory");
}

/* ---- sets ------------------------------------------------------------------------------ */

static void cset_add(struct rx *x, struct cset *c, uint32_t lo, uint32_t hi) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        struct range *r = realloc(c->r, (size_t)cap * sizeof *r);
        if (!r) {
            rnomem(x);
            return;
        }
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n++] = (struct range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cset_norm(struct cset *c) {
    qsort(c->r, (size_t)c->n, sizeof *c->r, cmp_range);
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        if (k && c->r[i].lo <= c->r[k - 1].hi + 1) {
            if (c->r[i].hi > c->r[k - 1].hi) c->r[k - 1].hi = c->r[i].hi;
        } else {
            c->r[k++] = c->r[i];
        }
    }
    c->n = k;
}

static bool cset_has(const struct cset *c, uint32_t cp) {
    for (int i = 0; i < c->n; i++)
        if (c->r[i].lo <= cp && cp <= c->r[i].hi) return true;
    return false;
}

/* The shorthand classes (ASCII, a subset of the regex engine's Unicode ones). */
static void add_shorthand(struct rx *x, struct cset *c, char k) {
    switch (k) {
    case 'd': cset_add(x, c, '0', '9'); break;
    case 'w':
        cset_add(x, c, '0', '9');
        cset_add(x, c, 'A', 'Z');
        cset_add(x, c, 'a', 'z');
        cset_add(x, c, '_', '_');
        break;
    case 's':
        cset_add(x, c, ' ', ' ');
        cset_add(x, c, '\t', '\r'); /* \t \n \v \f \r */
        break;
    }
}

/* Printable ASCII minus c (c sorted and merged) into out. */
static void ascii_complement(struct rx *x, const struct cset *c, struct cset *out) {
    uint32_t lo = 0x20;
    for (int i = 0; i < c->n && lo <= 0x7E; i++) {
        if (c->r[i].hi < lo) continue;
        if (c->r[i].lo > 0x7E) break;
        if (c->r[i].lo > lo) cset_add(x, out, lo, c->r[i].lo - 1);
        lo = c->r[i].hi + 1;
    }
    if (lo <= 0x7E) cset_add(x, out, lo, 0x7E);
}

/* The JSON escape of a control character (or `"`, `\`) as GBNF literal text (with quotes). */
static void put_json_escape(struct gbuf *b, uint32_t cp) {
    switch (cp) {
    case '"': gbuf_puts(b, "\"\\\\\\\"\""); return;  /* GBNF "\\\"" = the two characters \" */
    case '\\': gbuf_puts(b, "\"\\\\\\\\\""); return; /* "\\\\" = \\ */
    case '\n': gbuf_puts(b, "\"\\\\n\""); return;
    case '\r': gbuf_puts(b, "\"\\\\r\""); return;
    case '\t': gbuf_puts(b, "\"\\\\t\""); return;
    case '\b': gbuf_puts(b, "\"\\\\b\""); return;
    case '\f': gbuf_puts(b, "\"\\\\f\""); return;
    default: gbuf_printf(b, "\"\\\\u00%02X\"", (unsigned)cp); return;
    }
}

static void put_range(struct gbuf *b, uint32_t a, uint32_t e) {
    gbuf_put_gbnf_char(b, a, true);
    if (e > a) {
        gbuf_putc(b, '-');
        gbuf_put_gbnf_char(b, e, true);
    }
}

static bool is_safe(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\'; }

/*
 * A set as GBNF: raw characters in one class, plus the escaped forms of the special characters
 * it holds. *single receives the code point when the set is one plain character (else -1).
 * *parts receives the number of alternatives written.
 */
static void emit_set(struct rx *x, struct cset *c, struct gbuf *b, int64_t *single, int *parts) {
    *single = -1;
    *parts = 0;
    cset_norm(c);
    struct cset pos = {0};
    if (c->neg && c->ascii_only) {
        ascii_complement(x, c, &pos);
    } else if (!c->neg) {
        for (int i = 0; i < c->n; i++) cset_add(x, &pos, c->r[i].lo, c->r[i].hi);
    }
    if (x->st != MUSE_OK) {
        free(pos.r);
        return;
    }
    if (c->neg && !c->ascii_only) {
        /* [^ the set, quote, backslash, controls] | escaped quote / backslash when not excluded */
        gbuf_puts(b, "[^\"\\\\\\x00-\\x1F");
        for (int i = 0; i < c->n; i++) {
            if (c->r[i].hi < 0x20) continue;
            uint32_t lo = c->r[i].lo < 0x20 ? 0x20 : c->r[i].lo;
            gbuf_put_gbnf_char(b, lo, true);
            if (c->r[i].hi > lo) {
                gbuf_putc(b, '-');
                gbuf_put_gbnf_char(b, c->r[i].hi, true);
            }
        }
        gbuf_putc(b, ']');
        (*parts)++;
        if (!cset_has(c, '"')) {
            gbuf_puts(b, " | ");
            put_json_escape(b, '"');
            (*parts)++;
        }
        if (!cset_has(c, '\\')) {
            gbuf_puts(b, " | ");
            put_json_escape(b, '\\');
            (*parts)++;
        }
        free(pos.r);
        return;
    }
    cset_norm(&pos);
    /* one plain character: a literal the caller may merge */
    if (pos.n == 1 && pos.r[0].lo == pos.r[0].hi && is_safe(pos.r[0].lo)) {
        *single = pos.r[0].lo;
        gbuf_putc(b, '"');
        gbuf_put_gbnf_char(b, pos.r[0].lo, false);
        gbuf_putc(b, '"');
        *parts = 1;
        free(pos.r);
        return;
    }
    struct gbuf raw = {0};
    for (int i = 0; i < pos.n; i++) {
        uint32_t lo = pos.r[i].lo < 0x20 ? 0x20 : pos.r[i].lo, hi = pos.r[i].hi;
        if (hi < 0x20) continue;
        /* split around '"' (0x22) and '\' (0x5C), which take escapes */
        static const uint32_t cuts[2] = {'"', '\\'};
        uint32_t a = lo;
        for (int k = 0; k < 2; k++) {
            if (cuts[k] < a || cuts[k] > hi) continue;
            if (cuts[k] > a) put_range(&raw, a, cuts[k] - 1);
            a = cuts[k] + 1;
        }
        if (a <= hi) put_range(&raw, a, hi);
    }
    if (raw.n) {
        gbuf_printf(b, "[%s]", gbuf_str(&raw) ? raw.s : "");
        (*parts)++;
    }
    if (raw.oom) b->oom = true;
    gbuf_free(&raw);
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (cset_has(&pos, cp)) {
            if (*parts) gbuf_puts(b, " | ");
            put_json_escape(b, cp);
            (*parts)++;
        }
    if (cset_has(&pos, '"')) {
        if (*parts) gbuf_puts(b, " | ");
        put_json_escape(b, '"');
        (*parts)++;
    }
    if (cset_has(&pos, '\\')) {
        if (*parts) gbuf_puts(b, " | ");
        put_json_escape(b, '\\');
        (*parts)++;
    }
    if (!*parts) rfail(x, MUSE_ERR_UNSUPPORTED, "a character class that matches nothing");
    free(pos.r);
}

/* ---- lexing ---------------------------------------------------------------------------- */

static int peek(const struct rx *x) { return x->i < x->n ? (unsigned char)x->s[x->i] : -1; }

/* One UTF-8 code point at x->i (pattern text is UTF-8). */
static uint32_t take_cp(struct rx *x) {
    const unsigned char *s = (const unsigned char *)x->s;
    uint32_t c = s[x->i];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c >= 0x80) c &= 0xFFu >> (len + 1);
    x->i++;
    for (int k = 1; k < len && x->i < x->n; k++) c = (c << 6) | (s[x->i++] & 0x3F);
    return c;
}

static bool hex_digits(struct rx *x, int n, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < n; k++) {
        int c = peek(x);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            rfail(x, MUSE_ERR_FORMAT, "expecting %d hex digits", n);
            return false;
        }
        *v = *v * 16 + (uint32_t)d;
        x->i++;
    }
    return true;
}

/*
 * An escape after the backslash (x->i at the escaped character). Sets *cp for a character, or
 * adds a shorthand class to c (returns 's' for \d\w\s, 'S' for \D\W\S, 'c' for a character).
 */
static int take_escape(struct rx *x, bool in_class, uint32_t *cp, struct cset *c) {
    if (x->i >= x->n) {
        rfail(x, MUSE_ERR_FORMAT, "a trailing backslash");
        return 0;
    }
    char e = x->s[x->i++];
    switch (e) {
    case 'd': case 'w': case 's': add_shorthand(x, c, e); return 's';
    case 'D': case 'W': case 'S': add_shorthand(x, c, (char)(e + 32)); return 'S';
    case 't': *cp = '\t'; return 'c';
    case 'n': *cp = '\n'; return 'c';
    case 'r': *cp = '\r'; return 'c';
    case 'f': *cp = '\f'; return 'c';
    case 'v': *cp = '\v'; return 'c';
    case 'a': *cp = 7; return 'c';
    case '0': *cp = 0; return 'c';
    case 'x': return hex_digits(x, 2, cp) ? 'c' : 0;
    case 'u': return hex_digits(x, 4, cp) ? 'c' : 0;
    case 'U': return hex_digits(x, 8, cp) ? 'c' : 0;
    case 'b':
        if (in_class) {
            *cp = 8;
            return 'c';
        }
        break;
    default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
        x->i--;
        rfail(x, MUSE_ERR_UNSUPPORTED, "'\\%c' (boundaries, anchors, backreferences) is not supported", e);
        return 0;
    }
    x->i--;
    *cp = take_cp(x); /* escaped punctuation (or any other character) stands for itself */
    return 'c';
}

/* ---- items ----------------------------------------------------------------------------- */

struct item {
    char *text;
    int64_t single; /* a plain character (mergeable), else -1 */
    bool atomic;    /* text is one GBNF symbol (a literal, a class, a rule or a group) */
};

static char *parse_alt(struct rx *x);

/* Item text of the set c: a class, parenthesised when it takes several alternatives. */
static bool set_item(struct rx *x, struct cset *c, struct item *it) {
    struct gbuf b = {0};
    int parts = 0;
    emit_set(x, c, &b, &it->single, &parts);
    if (x->st != MUSE_OK) {
        gbuf_free(&b);
        return false;
    }
    if (parts > 1) {
        struct gbuf w = {0};
        gbuf_printf(&w, "(%s)", gbuf_str(&b) ? b.s : "");
        gbuf_free(&b);
        b = w;
    }
    it->atomic = true;
    it->text = gbuf_take(&b);
    if (!it->text) rnomem(x);
    return it->text != NULL;
}

/* [...] at x->i (after '['). */
static bool parse_class(struct rx *x, struct item *it) {
    struct cset c = {0};
    bool neg_short = false, pos_short = false;
    if (peek(x) == '^') {
        c.neg = true;
        x->i++;
    }
    bool first = true;
    for (;;) {
        int ch = peek(x);
        if (ch < 0) {
            rfail(x, MUSE_ERR_FORMAT, "unterminated character class");
            free(c.r);
            return false;
        }
        if (ch == ']' && !first) {
            x->i++;
            break;
        }
        first = false;
        uint32_t lo;
        if (ch == '\\') {
            x->i++;
            struct cset sh = {0};
            int k = take_escape(x, true, &lo, &sh);
            if (!k) {
                free(sh.r);
                free(c.r);
                return false;
            }
            if (k == 's' || k == 'S') {
                if (k == 'S') { /* \D inside a class: its printable-ASCII complement */
                    cset_norm(&sh);
                    ascii_complement(x, &sh, &c);
                    neg_short = true;
                } else {
                    for (int i = 0; i < sh.n; i++) cset_add(x, &c, sh.r[i].lo, sh.r[i].hi);
                    pos_short = true;
                }
                free(sh.r);
                continue;
            }
            free(sh.r);
        } else {
            lo = take_cp(x);
        }
        uint32_t hi = lo;
        if (peek(x) == '-' && x->i + 1 < x->n && x->s[x->i + 1] != ']') {
            x->i++;
            if (peek(x) == '\\') {
                x->i++;
                struct cset sh = {0};
                int k = take_escape(x, true, &hi, &sh);
                free(sh.r);
                if (k != 'c') {
                    if (k) rfail(x, MUSE_ERR_FORMAT, "a range ending in a class");
                    free(c.r);
                    return false;
                }
            } else {
                hi = take_cp(x);
            }
            if (hi < lo) {
                rfail(x, MUSE_ERR_FORMAT, "a range out of order");
                free(c.r);
                return false;
            }
        }
        cset_add(x, &c, lo, hi);
    }
    /* a negated class with shorthands (or built from \D...) stays within printable ASCII */
    c.ascii_only = c.neg && (pos_short || neg_short);
    const bool ok = set_item(x, &c, it);
    free(c.r);
    return ok;
}

/* A {m}, {m,}, {m,n} or {,n} quantifier at x->i ('{'): true and the counts when it is one. */
static bool quantifier_braces(struct rx *x, long long *min, long long *max) {
    size_t j = x->i + 1;
    long long a = -1, b = -1;
    bool comma = false;
    while (j < x->n && x->s[j] >= '0' && x->s[j] <= '9') a = (a < 0 ? 0 : a) * 10 + (x->s[j++] - '0'), a = a > MAX_COUNT ? MAX_COUNT + 1 : a;
    if (j < x->n && x->s[j] == ',') {
        comma = true;
        j++;
        while (j < x->n && x->s[j] >= '0' && x->s[j] <= '9') b = (b < 0 ? 0 : b) * 10 + (x->s[j++] - '0'), b = b > MAX_COUNT ? MAX_COUNT + 1 : b;
    }
    if (j >= x->n || x->s[j] != '}' || (a < 0 && b < 0)) return false; /* a literal '{' */
    x->i = j + 1;
    *min = a < 0 ? 0 : a;
    *max = comma ? b : *min;
    return true;
}

static char *make_sub_rule(struct rx *x, const char *body) {
    char nm[340];
    snprintf(nm, sizeof nm, "%s-%d", x->name, ++x->n_sub);
    const char *n = muse_gbnf_rules_add(x->rules, nm, body);
    if (!n) {
        rnomem(x);
        return NULL;
    }
    return strdup(n);
}

/* Apply a quantifier to it (min, max; max < 0 = unbounded). */
static bool quantify(struct rx *x, struct item *it, long long min, long long max) {
    if (max >= 0 && max < min) {
        rfail(x, MUSE_ERR_FORMAT, "a quantifier {%lld,%lld} out of order", min, max);
        return false;
    }
    if (min > MAX_COUNT || max > MAX_COUNT) {
        rfail(x, MUSE_ERR_UNSUPPORTED, "a repetition count above %d", MAX_COUNT);
        return false;
    }
    char *base = it->text;
    if (!it->atomic) {
        struct gbuf w = {0};
        gbuf_printf(&w, "(%s)", base);
        free(base);
        base = gbuf_take(&w);
        if (!base) {
            rnomem(x);
            return false;
        }
    }
    bool counted = !((min == 0 && max < 0) || (min == 1 && max < 0) || (min == 0 && max == 1));
    if (counted && base[0] == '(') { /* a counted group becomes a rule (one symbol to repeat) */
        char *r = make_sub_rule(x, base);
        free(base);
        if (!r) return false;
        base = r;
    }
    char *rep = NULL;
    if (min == 0 && max < 0) {
        struct gbuf w = {0};
        gbuf_printf(&w, "%s*", base);
        rep = gbuf_take(&w);
    } else if (min == 1 && max < 0) {
        struct gbuf w = {0};
        gbuf_printf(&w, "%s+", base);
        rep = gbuf_take(&w);
    } else if (min == 0 && max == 1) {
        struct gbuf w = {0};
        gbuf_printf(&w, "%s?", base);
        rep = gbuf_take(&w);
    } else {
        char nm[340];
        snprintf(nm, sizeof nm, "%s-%d", x->name, ++x->n_sub);
        rep = muse_gbnf_repeat(x->rules, base, min, max, nm);
    }
    free(base);
    it->text = rep;
    it->single = -1;
    it->atomic = false;
    if (!rep) rnomem(x);
    /* a lazy quantifier generates the same strings; a possessive one may not */
    if (peek(x) == '?') x->i++;
    else if (peek(x) == '+') rfail(x, MUSE_ERR_UNSUPPORTED, "possessive quantifiers are not supported");
    return rep != NULL && x->st == MUSE_OK;
}

static void free_items(struct item *items, int n) {
    for (int i = 0; i < n; i++) free(items[i].text);
    free(items);
}

/* A sequence up to '|', ')' or the end. */
static char *parse_seq(struct rx *x) {
    struct item *items = NULL;
    int n = 0;
    while (x->st == MUSE_OK) {
        int ch = peek(x);
        if (ch < 0 || ch == '|' || ch == ')') break;
        if (ch == '{' && n > 0) { /* a quantifier, or a literal '{' */
            long long min = 0, max = -1;
            if (quantifier_braces(x, &min, &max)) {
                quantify(x, &items[n - 1], min, max);
                continue;
            }
        } else if (ch == '*' || ch == '+' || ch == '?') {
            x->i++;
            if (!n) {
                rfail(x, MUSE_ERR_FORMAT, "nothing to repeat");
                break;
            }
            quantify(x, &items[n - 1], ch == '+', ch == '?' ? 1 : -1);
            continue;
        }
        struct item *ni = realloc(items, ((size_t)n + 1) * sizeof *ni);
        if (!ni) {
            rnomem(x);
            break;
        }
        items = ni;
        struct item *it = &items[n];
        *it = (struct item){NULL, -1, true};
        if (ch == '(') {
            x->i++;
            if (peek(x) == '?') {
                if (x->i + 1 < x->n && x->s[x->i + 1] == ':') {
                    x->i += 2;
                } else if (x->i + 2 < x->n && (x->s[x->i + 1] == 'P' || x->s[x->i + 1] == '<') &&
                           x->s[x->i + 2] != '=' && x->s[x->i + 2] != '!') { /* (?P<name>...) / (?<name>...) */
                    while (x->i < x->n && x->s[x->i] != '>') x->i++;
                    if (x->i >= x->n) {
                        rfail(x, MUSE_ERR_FORMAT, "unterminated group name");
                        break;
                    }
                    x->i++;
                } else {
                    rfail(x, MUSE_ERR_UNSUPPORTED, "lookaround, inline flags and other (?...) groups are not supported");
                    break;
                }
            }
            if (++x->depth > MAX_RDEPTH) {
                rfail(x, MUSE_ERR_UNSUPPORTED, "groups nested more than %d deep", MAX_RDEPTH);
                break;
            }
            char *inner = parse_alt(x);
            x->depth--;
            if (!inner) break;
            if (peek(x) != ')') {
                free(inner);
                rfail(x, MUSE_ERR_FORMAT, "missing ')'");
                break;
            }
            x->i++;
            struct gbuf w = {0};
            gbuf_printf(&w, "(%s)", inner);
            free(inner);
            it->text = gbuf_take(&w);
            if (!it->text) rnomem(x);
            n++;
            continue;
        }
        if (ch == '[') {
            x->i++;
            if (parse_class(x, it)) n++;
            continue;
        }
        if (ch == '.') {
            x->i++;
            struct cset c = {0};
            c.neg = true;
            cset_add(x, &c, '\n', '\n');
            struct gbuf b = {0};
            int64_t single;
            int parts;
            emit_set(x, &c, &b, &single, &parts);
            free(c.r);
            const char *dot = gbuf_str(&b) ? muse_gbnf_rules_add(x->rules, "dot", b.s) : NULL;
            gbuf_free(&b);
            if (!dot || !(it->text = strdup(dot))) {
                rnomem(x);
                break;
            }
            n++;
            continue;
        }
        if (ch == '^' || ch == '$') {
            rfail(x, MUSE_ERR_UNSUPPORTED, "'%c' inside the pattern is not supported (only at its start / end)", ch);
            break;
        }
        if (ch == '\\') {
            x->i++;
            struct cset c = {0};
            uint32_t cp = 0;
            int k = take_escape(x, false, &cp, &c);
            if (!k) {
                free(c.r);
                break;
            }
            if (k == 'c') cset_add(x, &c, cp, cp);
            else if (k == 'S') {
                c.neg = true;
                c.ascii_only = true;
            }
            bool ok = set_item(x, &c, it);
            free(c.r);
            if (ok) n++;
            continue;
        }
        /* any other character (also a '{' that is no quantifier) stands for itself */
        uint32_t cp = take_cp(x);
        struct cset c = {0};
        cset_add(x, &c, cp, cp);
        bool ok = set_item(x, &c, it);
        free(c.r);
        if (ok) n++;
    }
    if (x->st != MUSE_OK) {
        free_items(items, n);
        return NULL;
    }
    /* join, merging neighbouring plain characters into one literal */
    struct gbuf b = {0};
    for (int i = 0; i < n; i++) {
        if (i) gbuf_putc(&b, ' ');
        if (items[i].single >= 0) {
            gbuf_putc(&b, '"');
            while (i < n && items[i].single >= 0) gbuf_put_gbnf_char(&b, (uint32_t)items[i++].single, false);
            i--;
            gbuf_putc(&b, '"');
        } else {
            gbuf_puts(&b, items[i].text);
        }
    }
    free_items(items, n);
    char *out = gbuf_take(&b);
    if (!out) rnomem(x);
    return out;
}

static char *parse_alt(struct rx *x) {
    struct gbuf b = {0};
    for (bool first = true;; first = false) {
        char *seq = parse_seq(x);
        if (!seq) {
            gbuf_free(&b);
            return NULL;
        }
        if (!first) gbuf_puts(&b, " | ");
        gbuf_puts(&b, seq);
        free(seq);
        if (peek(x) != '|') break;
        x->i++;
    }
    char *out = gbuf_take(&b);
    if (!out) rnomem(x);
    return out;
}

muse_status muse_json_regex_to_gbnf(struct muse_gbnf_rules *r, const char *pattern, const char *name, char **body,
                                    struct muse_error *err) {
    *body = NULL;
    struct rx x = {0};
    x.s = pattern;
    x.n = strlen(pattern);
    x.rules = r;
    x.name = name;
    x.err = err;
    if (x.n > MAX_PATTERN) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "pattern longer than %d bytes", MAX_PATTERN);
    /* ^ at the start and an unescaped $ at the end anchor the whole pattern: a full match is
     * what we generate anyway (and it satisfies an unanchored search too) */
    if (x.n && x.s[0] == '^') x.i = 1;
    if (x.n > x.i && x.s[x.n - 1] == '$') {
        size_t bs = 0;
        while (bs + 2 <= x.n && x.s[x.n - 2 - bs] == '\\') bs++;
        if (bs % 2 == 0) x.n--;
    }
    char *out = parse_alt(&x);
    if (out && x.i < x.n && x.st == MUSE_OK) rfail(&x, MUSE_ERR_FORMAT, "unbalanced ')'");
    if (x.st != MUSE_OK) {
        free(out);
        return x.st;
    }
    *body = out;
    return MUSE_OK;
}
