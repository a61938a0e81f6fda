/* gbnf.c - the GBNF parser (gbnf.h): recursive descent over bytes, llama.cpp's rewrite rules. */
#include "text/gbnf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define MAX_REPETITION 2000 /* llama.cpp's MAX_REPETITION_THRESHOLD */
#define MAX_DEPTH 512       /* nested groups: deeper input is refused, not recursed into */

/* ---- growable element arrays ------------------------------------------------------------- */

struct ebuf {
    struct muse_gbnf_elem *e;
    uint32_t n, cap;
};

struct sym {
    char *name;
    uint32_t id;
};

struct parser {
    const char *src;
    size_t end;                /* len, or the first NUL */
    const struct muse_gbnf_token_lookup *lookup;
    struct sym *syms;          /* symbol table: name -> id, in insertion order */
    uint32_t n_syms, cap_syms;
    uint32_t *hash;            /* open addressing over syms (index + 1; 0 = empty) */
    uint32_t hash_cap;
    struct ebuf *rules;        /* [n_rules] by id; n == 0: not defined */
    size_t *rule_pos;          /* [n_rules] where each rule's definition starts */
    size_t *ref_pos;           /* [cap_refpos] first reference of each id (SIZE_MAX: none) */
    uint32_t n_rules, cap_rules, cap_refpos;
    uint64_t n_pushed;         /* elements written so far (the size cap) */
    int depth;
    bool failed;
    struct muse_error *err;
    muse_status status;
};

static char at(const struct parser *p, size_t i) { return i < p->end ? p->src[i] : 0; }

/* "line L, column C" of byte offset pos (column counts code points). */
static void line_col(const struct parser *p, size_t pos, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < pos && i < p->end; i++) {
        unsigned char b = (unsigned char)p->src[i];
        if (b == '\n') {
            l++;
            c = 1;
        } else if ((b & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static void fail(struct parser *p, size_t pos, const char *fmt, ...) MUSE_PRINTF(3, 4);
static void fail(struct parser *p, size_t pos, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    p->status = MUSE_ERR_FORMAT;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    unsigned line, col;
    line_col(p, pos, &line, &col);
    muse_error_set(p->err, MUSE_ERR_FORMAT, "grammar line %u, column %u: %s", line, col, what);
}

static void nomem(struct parser *p) {
    if (p->failed) return;
    p->failed = true;
    p->status = muse_error_set(p->err, MUSE_ERR_NOMEM, "grammar: out of memory");
}

static bool push(struct parser *p, struct ebuf *b, uint32_t type, uint32_t value) {
    if (p->failed) return false;
    if (++p->n_pushed > 2ull * MUSE_GBNF_MAX_ELEMS) {
        fail(p, 0, "the grammar is too large (over %u elements after expanding repetitions)", MUSE_GBNF_MAX_ELEMS);
        return false;
    }
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 16;
        struct muse_gbnf_elem *e = realloc(b->e, (size_t)cap * sizeof *e);
        if (!e) {
            nomem(p);
            return false;
        }
        b->e = e;
        b->cap = cap;
    }
    b->e[b->n].type = type;
    b->e[b->n].value = value;
    b->n++;
    return true;
}

static void append(struct parser *p, struct ebuf *b, const struct muse_gbnf_elem *e, uint32_t n) {
    for (uint32_t i = 0; i < n && !p->failed; i++) push(p, b, e[i].type, e[i].value);
}

/* ---- symbols ----------------------------------------------------------------------------- */

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Index (into syms) of name, or UINT32_MAX. */
static uint32_t sym_find(const struct parser *p, const char *s, size_t n) {
    if (!p->hash_cap) return UINT32_MAX;
    for (uint32_t h = hash_name(s, n) & (p->hash_cap - 1);; h = (h + 1) & (p->hash_cap - 1)) {
        uint32_t k = p->hash[h];
        if (!k) return UINT32_MAX;
        const char *name = p->syms[k - 1].name;
        if (strlen(name) == n && !memcmp(name, s, n)) return k - 1;
    }
}

static bool ensure_refpos(struct parser *p, uint32_t id) {
    if (id < p->cap_refpos) return true;
    uint32_t cap = p->cap_refpos ? p->cap_refpos : 64;
    while (cap <= id) cap *= 2;
    size_t *r = realloc(p->ref_pos, (size_t)cap * sizeof *r);
    if (!r) {
        nomem(p);
        return false;
    }
    for (uint32_t i = p->cap_refpos; i < cap; i++) r[i] = SIZE_MAX;
    p->ref_pos = r;
    p->cap_refpos = cap;
    return true;
}

/* Add a new symbol (name not present) with id. */
static bool sym_add(struct parser *p, const char *s, size_t n, uint32_t id) {
    if (p->n_syms == p->cap_syms) {
        uint32_t cap = p->cap_syms ? p->cap_syms * 2 : 64;
        struct sym *ns = realloc(p->syms, (size_t)cap * sizeof *ns);
        if (!ns) {
            nomem(p);
            return false;
        }
        p->syms = ns;
        p->cap_syms = cap;
    }
    if (2 * (p->n_syms + 1) > p->hash_cap) { /* rehash at half load */
        uint32_t cap = p->hash_cap ? p->hash_cap * 2 : 128;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) {
            nomem(p);
            return false;
        }
        for (uint32_t i = 0; i < p->n_syms; i++) {
            uint32_t k = hash_name(p->syms[i].name, strlen(p->syms[i].name)) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(p->hash);
        p->hash = h;
        p->hash_cap = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy) {
        nomem(p);
        return false;
    }
    memcpy(copy, s, n);
    copy[n] = 0;
    p->syms[p->n_syms].name = copy;
    p->syms[p->n_syms].id = id;
    uint32_t k = hash_name(s, n) & (p->hash_cap - 1);
    while (p->hash[k]) k = (k + 1) & (p->hash_cap - 1);
    p->hash[k] = ++p->n_syms;
    return ensure_refpos(p, id);
}

/* The id of a named rule (a new one on first sight), as llama.cpp's get_symbol_id. */
static uint32_t get_symbol_id(struct parser *p, const char *s, size_t n) {
    uint32_t k = sym_find(p, s, n);
    if (k != UINT32_MAX) return p->syms[k].id;
    uint32_t id = p->n_syms;
    sym_add(p, s, n, id);
    return id;
}

/* A fresh id for a generated rule named BASE_N (llama.cpp's generate_symbol_id: N is the symbol
 * count, and an existing symbol of that name is re-pointed rather than added). */
static uint32_t generate_symbol_id(struct parser *p, const char *base) {
    uint32_t id = p->n_syms;
    char name[320];
    int n = snprintf(name, sizeof name, "%.300s_%u", base, id);
    uint32_t k = sym_find(p, name, (size_t)n);
    if (k != UINT32_MAX) {
        p->syms[k].id = id;
        ensure_refpos(p, id);
    } else {
        sym_add(p, name, (size_t)n, id);
    }
    return id;
}

static void add_rule(struct parser *p, uint32_t id, struct ebuf *rule, size_t pos) {
    if (p->failed) return;
    if (id >= p->cap_rules) {
        uint32_t cap = p->cap_rules ? p->cap_rules : 64;
        while (cap <= id) cap *= 2;
        struct ebuf *r = realloc(p->rules, (size_t)cap * sizeof *r);
        size_t *rp = r ? realloc(p->rule_pos, (size_t)cap * sizeof *rp) : NULL;
        if (r) p->rules = r;
        if (!r || !rp) {
            nomem(p);
            return;
        }
        p->rule_pos = rp;
        memset(r + p->cap_rules, 0, (size_t)(cap - p->cap_rules) * sizeof *r);
        p->cap_rules = cap;
    }
    if (id >= p->n_rules) p->n_rules = id + 1;
    free(p->rules[id].e);
    p->rules[id] = *rule; /* takes the buffer */
    p->rule_pos[id] = pos;
    memset(rule, 0, sizeof *rule);
}

/* ---- lexical pieces ---------------------------------------------------------------------- */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit(c); }

static size_t parse_space(const struct parser *p, size_t pos, bool newline_ok) {
    for (;;) {
        char c = at(p, pos);
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            pos++;
        } else if (c == '#') {
            while (at(p, pos) && at(p, pos) != '\r' && at(p, pos) != '\n') pos++;
        } else {
            return pos;
        }
    }
}

static size_t parse_name(struct parser *p, size_t pos) {
    size_t s = pos;
    while (is_word(at(p, pos))) pos++;
    if (pos == s) fail(p, s, "expecting a rule name");
    return pos;
}

/* Digits at pos as a number (saturating above UINT64_MAX / 10); *end after them. */
static uint64_t parse_int(struct parser *p, size_t pos, size_t *end) {
    uint64_t v = 0;
    size_t s = pos;
    bool big = false;
    while (is_digit(at(p, pos))) {
        if (v > (UINT64_MAX - 9) / 10) big = true;
        else v = v * 10 + (uint64_t)(at(p, pos) - '0');
        pos++;
    }
    if (pos == s) fail(p, s, "expecting an integer");
    *end = pos;
    return big ? UINT64_MAX : v;
}

static uint32_t parse_hex(struct parser *p, size_t pos, int size, size_t *end) {
    uint32_t v = 0;
    int i = 0;
    for (; i < size; i++) {
        char c = at(p, pos + (size_t)i);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) break;
        v = (v << 4) + (uint32_t)d;
    }
    if (i != size) fail(p, pos, "expecting %d hex digits", size);
    *end = pos + (size_t)size;
    return v;
}

/*
 * One code point at pos, as llama.cpp decodes grammar text: the first byte's high nibble gives
 * the length (continuation bytes 0x80-0xBF count as 1-byte characters, keeping 7 bits), the next
 * bytes are taken without validation, stopping early at the end of the text.
 */
static uint32_t decode_char(const struct parser *p, size_t pos, size_t *end) {
    static const int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    unsigned char b = (unsigned char)at(p, pos);
    int len = lookup[b >> 4];
    uint32_t v = b & ((1u << (8 - len)) - 1);
    size_t i = pos + 1;
    for (; i < pos + (size_t)len && at(p, i); i++) v = (v << 6) + ((unsigned char)at(p, i) & 0x3F);
    *end = i;
    return v;
}

static uint32_t parse_char(struct parser *p, size_t pos, size_t *end) {
    char c = at(p, pos);
    if (c == '\\') {
        char e = at(p, pos + 1);
        *end = pos + 2;
        switch (e) {
        case 'x': return parse_hex(p, pos + 2, 2, end);
        case 'u': return parse_hex(p, pos + 2, 4, end);
        case 'U': return parse_hex(p, pos + 2, 8, end);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': return (uint32_t)(unsigned char)e;
        default:
            fail(p, pos, "unknown escape '\\%c'", e ? e : '0');
            return 0;
        }
    }
    if (c) return decode_char(p, pos, end);
    fail(p, pos, "unexpected end of input");
    *end = pos;
    return 0;
}

/* <[ID]> or <TEXT> at pos (which is '<'); returns the token id, *end after '>'. */
static uint32_t parse_token(struct parser *p, size_t pos, size_t *end) {
    size_t s = pos;
    *end = pos;
    if (at(p, pos) != '<') {
        fail(p, pos, "expecting '<'");
        return 0;
    }
    pos++;
    if (at(p, pos) == '[') {
        pos++;
        uint64_t id = parse_int(p, pos, &pos);
        if (p->failed) return 0;
        if (id > UINT32_MAX) {
            fail(p, s, "token id too big");
            return 0;
        }
        if (at(p, pos) != ']') {
            fail(p, pos, "expecting ']'");
            return 0;
        }
        if (at(p, pos + 1) != '>') {
            fail(p, pos + 1, "expecting '>'");
            return 0;
        }
        *end = pos + 2;
        return (uint32_t)id;
    }
    if (!p->lookup || !p->lookup->find) {
        fail(p, s, "no vocabulary to look up the token (use <[ID]>)");
        return 0;
    }
    while (at(p, pos) && at(p, pos) != '>') pos++;
    if (at(p, pos) != '>') {
        fail(p, pos, "expecting '>'");
        return 0;
    }
    pos++;
    int32_t id = p->lookup->find(p->lookup->user, p->src + s, pos - s);
    if (id < 0) {
        fail(p, s, "invalid token '%.*s' (not exactly one token of the vocabulary)", (int)(pos - s < 200 ? pos - s : 200),
             p->src + s);
        return 0;
    }
    *end = pos;
    return (uint32_t)id;
}

/* ---- rules ------------------------------------------------------------------------------- */

static size_t parse_alternates(struct parser *p, size_t pos, const char *rule_name, uint32_t rule_id, bool nested);

/* The repetition {min,max} (max UINT64_MAX: none) of rule->e[last_sym_start..]. */
static void repeat(struct parser *p, size_t pos, struct ebuf *rule, uint32_t last_sym_start, const char *rule_name,
                   uint64_t min, uint64_t max, uint64_t *n_prev_rules) {
    bool no_max = max == UINT64_MAX;
    if (last_sym_start == rule->n) {
        fail(p, pos, "expecting an item before */+/?/{");
        return;
    }
    if (!no_max && max < min) {
        fail(p, pos, "repetition {%llu,%llu}: the maximum is below the minimum", (unsigned long long)min,
             (unsigned long long)max);
        return;
    }
    uint64_t total = 1;
    if (!no_max && max > 0) total = max;
    else if (min > 0) total = min;
    if (*n_prev_rules * total > MAX_REPETITION) {
        fail(p, pos, "the repetition would copy its rules more than %d times; reduce the count or the rule", MAX_REPETITION);
        return;
    }
    uint32_t n_prev = rule->n - last_sym_start;
    struct ebuf prev = {0};
    append(p, &prev, rule->e + last_sym_start, n_prev);
    if (min == 0) rule->n = last_sym_start;
    for (uint64_t i = 1; i < min && !p->failed; i++) append(p, rule, prev.e, n_prev);
    uint64_t n_opt = no_max ? 1 : max - min;
    uint32_t last_rec = 0;
    for (uint64_t i = 0; i < n_opt && !p->failed; i++) {
        struct ebuf rec = {0};
        append(p, &rec, prev.e, n_prev);
        uint32_t rec_id = generate_symbol_id(p, rule_name);
        if (i > 0 || no_max) push(p, &rec, MUSE_GBNF_RULE_REF, no_max ? rec_id : last_rec);
        push(p, &rec, MUSE_GBNF_ALT, 0);
        push(p, &rec, MUSE_GBNF_END, 0);
        add_rule(p, rec_id, &rec, pos);
        free(rec.e);
        last_rec = rec_id;
    }
    if (n_opt > 0) push(p, rule, MUSE_GBNF_RULE_REF, last_rec);
    free(prev.e);
    *n_prev_rules *= total;
}

static size_t parse_sequence(struct parser *p, size_t pos, const char *rule_name, struct ebuf *rule, bool nested) {
    uint32_t last_sym_start = rule->n;
    uint64_t n_prev_rules = 1;
    while (at(p, pos) && !p->failed) {
        char c = at(p, pos);
        size_t start = pos;
        if (c == '"') { /* literal */
            pos++;
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (at(p, pos) != '"' && !p->failed) {
                if (!at(p, pos)) {
                    fail(p, pos, "unexpected end of input (unterminated string)");
                    break;
                }
                uint32_t cp = parse_char(p, pos, &pos);
                push(p, rule, MUSE_GBNF_CHAR, cp);
            }
            pos = parse_space(p, pos + 1, nested);
        } else if (c == '[') { /* class */
            pos++;
            uint32_t start_type = MUSE_GBNF_CHAR;
            if (at(p, pos) == '^') {
                pos++;
                start_type = MUSE_GBNF_CHAR_NOT;
            }
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (at(p, pos) != ']' && !p->failed) {
                if (!at(p, pos)) {
                    fail(p, pos, "unexpected end of input (unterminated character class)");
                    break;
                }
                uint32_t cp = parse_char(p, pos, &pos);
                push(p, rule, last_sym_start < rule->n ? MUSE_GBNF_CHAR_ALT : start_type, cp);
                if (at(p, pos) == '-' && at(p, pos + 1) != ']') {
                    if (!at(p, pos + 1)) {
                        fail(p, pos + 1, "unexpected end of input (unterminated character class)");
                        break;
                    }
                    uint32_t hi = parse_char(p, pos + 1, &pos);
                    push(p, rule, MUSE_GBNF_CHAR_RNG_UPPER, hi);
                }
            }
            pos = parse_space(p, pos + 1, nested);
        } else if (c == '<' || c == '!') { /* token */
            uint32_t type = MUSE_GBNF_TOKEN;
            if (c == '!') {
                type = MUSE_GBNF_TOKEN_NOT;
                pos++;
            }
            uint32_t id = parse_token(p, pos, &pos);
            last_sym_start = rule->n;
            n_prev_rules = 1;
            push(p, rule, type, id);
            pos = parse_space(p, pos, nested);
        } else if (is_word(c)) { /* rule reference */
            size_t name_end = parse_name(p, pos);
            uint32_t id = get_symbol_id(p, p->src + pos, name_end - pos);
            if (!p->failed && p->ref_pos[id] == SIZE_MAX) p->ref_pos[id] = pos;
            pos = parse_space(p, name_end, nested);
            last_sym_start = rule->n;
            n_prev_rules = 1;
            push(p, rule, MUSE_GBNF_RULE_REF, id);
        } else if (c == '(') { /* group */
            if (++p->depth > MAX_DEPTH) {
                fail(p, pos, "groups nested more than %d deep", MAX_DEPTH);
                break;
            }
            pos = parse_space(p, pos + 1, true);
            uint32_t n_before = p->n_syms;
            uint32_t sub_id = generate_symbol_id(p, rule_name);
            pos = parse_alternates(p, pos, rule_name, sub_id, true);
            p->depth--;
            n_prev_rules = p->n_syms - n_before > 1 ? p->n_syms - n_before : 1;
            last_sym_start = rule->n;
            push(p, rule, MUSE_GBNF_RULE_REF, sub_id);
            if (p->failed) break;
            if (at(p, pos) != ')') {
                fail(p, pos, "expecting ')'");
                break;
            }
            pos = parse_space(p, pos + 1, nested);
        } else if (c == '.') {
            last_sym_start = rule->n;
            n_prev_rules = 1;
            push(p, rule, MUSE_GBNF_CHAR_ANY, 0);
            pos = parse_space(p, pos + 1, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            pos = parse_space(p, pos + 1, nested);
            repeat(p, start, rule, last_sym_start, rule_name, c == '+' ? 1 : 0, c == '?' ? 1 : UINT64_MAX, &n_prev_rules);
        } else if (c == '{') {
            pos = parse_space(p, pos + 1, nested);
            if (!is_digit(at(p, pos))) {
                fail(p, pos, "expecting an integer");
                break;
            }
            uint64_t min = parse_int(p, pos, &pos), max = UINT64_MAX;
            pos = parse_space(p, pos, nested);
            if (at(p, pos) == '}') {
                max = min;
                pos = parse_space(p, pos + 1, nested);
            } else if (at(p, pos) == ',') {
                pos = parse_space(p, pos + 1, nested);
                if (is_digit(at(p, pos))) {
                    max = parse_int(p, pos, &pos);
                    pos = parse_space(p, pos, nested);
                }
                if (at(p, pos) != '}') {
                    fail(p, pos, "expecting '}'");
                    break;
                }
                pos = parse_space(p, pos + 1, nested);
            } else {
                fail(p, pos, "expecting ',' or '}'");
                break;
            }
            if (min > MAX_REPETITION) {
                fail(p, start, "repetition count %llu is above %d", (unsigned long long)min, MAX_REPETITION);
                break;
            }
            if (max != UINT64_MAX && max > MAX_REPETITION) max = UINT64_MAX; /* llama.cpp: unbounded */
            repeat(p, start, rule, last_sym_start, rule_name, min, max, &n_prev_rules);
        } else {
            break;
        }
    }
    return pos;
}

static size_t parse_alternates(struct parser *p, size_t pos, const char *rule_name, uint32_t rule_id, bool nested) {
    struct ebuf rule = {0};
    size_t start = pos;
    pos = parse_sequence(p, pos, rule_name, &rule, nested);
    while (at(p, pos) == '|' && !p->failed) {
        push(p, &rule, MUSE_GBNF_ALT, 0);
        pos = parse_space(p, pos + 1, true);
        pos = parse_sequence(p, pos, rule_name, &rule, nested);
    }
    push(p, &rule, MUSE_GBNF_END, 0);
    add_rule(p, rule_id, &rule, start);
    free(rule.e);
    return pos;
}

static size_t parse_rule(struct parser *p, size_t pos) {
    size_t name_end = parse_name(p, pos);
    if (p->failed) return pos;
    size_t n = name_end - pos;
    char name[300];
    snprintf(name, sizeof name, "%.*s", (int)(n < 299 ? n : 299), p->src + pos);
    uint32_t id = get_symbol_id(p, p->src + pos, n);
    size_t q = parse_space(p, name_end, false);
    if (!(at(p, q) == ':' && at(p, q + 1) == ':' && at(p, q + 2) == '=')) {
        fail(p, q, "expecting '::='");
        return q;
    }
    q = parse_space(p, q + 3, true);
    q = parse_alternates(p, q, name, id, false);
    if (p->failed) return q;
    if (p->rule_pos) p->rule_pos[id] = pos;
    if (at(p, q) == '\r') q += at(p, q + 1) == '\n' ? 2 : 1;
    else if (at(p, q) == '\n') q++;
    else if (at(p, q)) {
        fail(p, q, "expecting a newline or the end after the rule");
        return q;
    }
    return parse_space(p, q, true);
}

/* ---- checks ------------------------------------------------------------------------------ */

static const char *name_of(const struct parser *p, uint32_t id) {
    for (uint32_t i = 0; i < p->n_syms; i++)
        if (p->syms[i].id == id) return p->syms[i].name;
    return "?";
}

/* Rules that can match the empty string (fixpoint over alternatives of nullable refs only). */
static bool *nullable_rules(struct parser *p) {
    bool *nul = calloc(p->n_rules ? p->n_rules : 1, sizeof *nul);
    if (!nul) return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < p->n_rules; r++) {
            if (nul[r]) continue;
            const struct ebuf *b = &p->rules[r];
            bool alt_ok = true;
            for (uint32_t i = 0; i < b->n; i++) {
                uint32_t t = b->e[i].type;
                if (t == MUSE_GBNF_END || t == MUSE_GBNF_ALT) {
                    if (alt_ok) {
                        nul[r] = changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (t != MUSE_GBNF_RULE_REF || !nul[b->e[i].value]) {
                    alt_ok = false;
                }
            }
        }
    }
    return nul;
}

/*
 * Left recursion: a rule reachable from itself through leftmost references (references preceded
 * only by nullable references in their alternative). Iterative DFS; returns a rule on a cycle or
 * UINT32_MAX. (llama.cpp checks only empty alternatives for nullability; the rest hangs it.)
 */
static uint32_t find_left_recursion(struct parser *p, const bool *nul) {
    uint32_t n = p->n_rules;
    uint8_t *color = calloc(n ? n : 1, 1); /* 0 new, 1 on the path, 2 done */
    uint32_t *stk = malloc((size_t)(n ? n : 1) * sizeof *stk), *it = malloc((size_t)(n ? n : 1) * sizeof *it);
    uint32_t found = UINT32_MAX;
    if (!color || !stk || !it) {
        nomem(p);
        goto out;
    }
    for (uint32_t r0 = 0; r0 < n && found == UINT32_MAX; r0++) {
        if (color[r0]) continue;
        uint32_t sp = 0;
        stk[sp] = r0;
        it[sp++] = 0;
        color[r0] = 1;
        while (sp && found == UINT32_MAX) {
            uint32_t r = stk[sp - 1];
            const struct ebuf *b = &p->rules[r];
            uint32_t i = it[sp - 1];
            /* next leftmost reference from element i on */
            uint32_t next = UINT32_MAX;
            bool at_start = true;
            /* recompute "at start of alternative / preceded by nullable refs only" up to i */
            for (uint32_t k = 0; k < b->n; k++) {
                uint32_t t = b->e[k].type;
                if (t == MUSE_GBNF_END || t == MUSE_GBNF_ALT) {
                    at_start = true;
                    continue;
                }
                if (k >= i && at_start && t == MUSE_GBNF_RULE_REF) {
                    next = k;
                    break;
                }
                if (t != MUSE_GBNF_RULE_REF || !nul[b->e[k].value]) at_start = false;
            }
            if (next == UINT32_MAX) {
                color[r] = 2;
                sp--;
                continue;
            }
            it[sp - 1] = next + 1;
            uint32_t s = b->e[next].value;
            if (color[s] == 1) found = s;
            else if (color[s] == 0) {
                color[s] = 1;
                stk[sp] = s;
                it[sp++] = 0;
            }
        }
    }
out:
    free(color);
    free(stk);
    free(it);
    return found;
}

static void check(struct parser *p, const char *root, uint32_t *root_id) {
    if (p->n_rules == 0) {
        fail(p, 0, "the grammar has no rules");
        return;
    }
    for (uint32_t r = 0; r < p->n_rules && !p->failed; r++) {
        const struct ebuf *b = &p->rules[r];
        if (!b->n) {
            size_t at_pos = r < p->cap_refpos && p->ref_pos[r] != SIZE_MAX ? p->ref_pos[r] : 0;
            fail(p, at_pos, "undefined rule '%s'", name_of(p, r));
            return;
        }
        for (uint32_t i = 0; i < b->n; i++) {
            if (b->e[i].type != MUSE_GBNF_RULE_REF) continue;
            uint32_t v = b->e[i].value;
            if (v >= p->n_rules || !p->rules[v].n) {
                size_t at_pos = v < p->cap_refpos && p->ref_pos[v] != SIZE_MAX ? p->ref_pos[v] : 0;
                fail(p, at_pos, "undefined rule '%s'", name_of(p, v));
                return;
            }
        }
    }
    uint32_t k = sym_find(p, root, strlen(root));
    if (k == UINT32_MAX || p->syms[k].id >= p->n_rules) {
        fail(p, 0, "the grammar has no rule named '%s'", root);
        return;
    }
    *root_id = p->syms[k].id;
    bool *nul = nullable_rules(p);
    if (!nul) {
        nomem(p);
        return;
    }
    uint32_t lr = find_left_recursion(p, nul);
    free(nul);
    if (lr != UINT32_MAX && !p->failed)
        fail(p, p->rule_pos[lr], "left recursion: rule '%s' can start with itself (unsupported)", name_of(p, lr));
}

/* ---- public ------------------------------------------------------------------------------ */

void muse_gbnf_free(struct muse_gbnf *g) {
    if (!g) return;
    if (g->names)
        for (uint32_t i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->rule_off);
    free(g->elems);
    free(g);
}

static void parser_free(struct parser *p) {
    for (uint32_t i = 0; i < p->n_syms; i++) free(p->syms[i].name);
    free(p->syms);
    free(p->hash);
    for (uint32_t i = 0; i < p->n_rules; i++) free(p->rules[i].e);
    free(p->rules);
    free(p->rule_pos);
    free(p->ref_pos);
}

muse_status muse_gbnf_parse(const char *text, size_t len, const char *root, const struct muse_gbnf_token_lookup *lookup,
                            struct muse_gbnf **out, struct muse_error *err) {
    *out = NULL;
    struct parser p = {0};
    p.src = text;
    p.end = text ? strnlen(text, len) : 0;
    p.lookup = lookup;
    p.err = err;
    struct muse_gbnf *g = NULL;
    size_t pos = parse_space(&p, 0, true);
    while (at(&p, pos) && !p.failed) pos = parse_rule(&p, pos);
    uint32_t root_id = 0;
    if (!p.failed) check(&p, root ? root : "root", &root_id);
    if (p.failed) goto done;
    uint64_t total = 0;
    for (uint32_t r = 0; r < p.n_rules; r++) total += p.rules[r].n;
    if (total > MUSE_GBNF_MAX_ELEMS) {
        fail(&p, 0, "the grammar is too large (%llu elements after expanding repetitions; at most %u)",
             (unsigned long long)total, MUSE_GBNF_MAX_ELEMS);
        goto done;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->rule_off = malloc((size_t)p.n_rules * sizeof *g->rule_off)) ||
        !(g->elems = malloc((size_t)total * sizeof *g->elems)) || !(g->names = calloc(p.n_rules, sizeof *g->names))) {
        nomem(&p);
        goto done;
    }
    g->n_rules = p.n_rules;
    g->root = root_id;
    for (uint32_t r = 0; r < p.n_rules; r++) {
        g->rule_off[r] = g->n_elems;
        memcpy(g->elems + g->n_elems, p.rules[r].e, (size_t)p.rules[r].n * sizeof *g->elems);
        g->n_elems += p.rules[r].n;
    }
    for (uint32_t i = 0; i < p.n_syms; i++) { /* the last symbol pointing at an id names it */
        uint32_t id = p.syms[i].id;
        if (id >= g->n_rules) continue;
        free(g->names[id]);
        if (!(g->names[id] = strdup(p.syms[i].name))) {
            nomem(&p);
            goto done;
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!g->names[r] && !(g->names[r] = strdup("?"))) {
            nomem(&p);
            goto done;
        }
done:
    parser_free(&p);
    if (p.failed) {
        muse_gbnf_free(g);
        return p.status;
    }
    *out = g;
    return MUSE_OK;
}

/* ---- printing ---------------------------------------------------------------------------- */

struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct sbuf *b, const char *fmt, ...) MUSE_PRINTF(2, 3);
static void sb_put(struct sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->n) {
            b->n += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void put_char(struct sbuf *b, uint32_t c) {
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != ']' && c != '-' && c != '"' && c != '[') sb_put(b, "%c", (char)c);
    else if (c <= 0xff) sb_put(b, "\\x%02X", (unsigned)c);
    else if (c <= 0xffff) sb_put(b, "\\u%04X", (unsigned)c);
    else sb_put(b, "\\U%08X", (unsigned)c);
}

static bool is_char_elem(uint32_t t) {
    return t == MUSE_GBNF_CHAR || t == MUSE_GBNF_CHAR_NOT || t == MUSE_GBNF_CHAR_ALT || t == MUSE_GBNF_CHAR_RNG_UPPER ||
           t == MUSE_GBNF_CHAR_ANY;
}

char *muse_gbnf_print(const struct muse_gbnf *g) {
    struct sbuf b = {0};
    b.cap = 256;
    if (!(b.s = malloc(b.cap))) return NULL;
    b.s[0] = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        sb_put(&b, "%s ::=", g->names[r]);
        const struct muse_gbnf_elem *e = g->elems + g->rule_off[r];
        for (uint32_t i = 0; e[i].type != MUSE_GBNF_END; i++) {
            uint32_t t = e[i].type;
            switch (t) {
            case MUSE_GBNF_ALT: sb_put(&b, " |"); break;
            case MUSE_GBNF_RULE_REF: sb_put(&b, " %s", g->names[e[i].value]); break;
            case MUSE_GBNF_CHAR: sb_put(&b, " ["); put_char(&b, e[i].value); break;
            case MUSE_GBNF_CHAR_NOT: sb_put(&b, " [^"); put_char(&b, e[i].value); break;
            case MUSE_GBNF_CHAR_RNG_UPPER: sb_put(&b, "-"); put_char(&b, e[i].value); break;
            case MUSE_GBNF_CHAR_ALT: put_char(&b, e[i].value); break;
            case MUSE_GBNF_CHAR_ANY: sb_put(&b, " ."); break;
            case MUSE_GBNF_TOKEN: sb_put(&b, " <[%u]>", e[i].value); break;
            case MUSE_GBNF_TOKEN_NOT: sb_put(&b, " !<[%u]>", e[i].value); break;
            default: break;
            }
            if (is_char_elem(t) && t != MUSE_GBNF_CHAR_ANY) {
                uint32_t nt = e[i + 1].type;
                if (nt != MUSE_GBNF_CHAR_ALT && nt != MUSE_GBNF_CHAR_RNG_UPPER) sb_put(&b, "]");
            }
        }
        sb_put(&b, "\n");
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
