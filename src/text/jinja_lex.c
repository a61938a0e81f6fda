/*
 * jinja_lex.c - the template lexer: newline normalization, text/tag splitting with jinja2's
 * whitespace control (trim_blocks, lstrip_blocks, `-` and `+` modifiers), expression tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

void muse_jinja_line_col(const char *src, size_t src_len, size_t off, int *line, int *col) {
    int l = 1, cc = 1;
    for (size_t i = 0; i < off && i < src_len; i++) {
        if (src[i] == '\n') {
            l++;
            cc = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            cc++;
        }
    }
    *line = l;
    *col = cc;
}

struct lexer {
    struct jarena *a;
    const char *src;
    size_t n;
    struct jtok *toks;
    size_t n_toks, cap;
    struct muse_error *err;
};

static bool lex_fail(struct lexer *L, size_t off, const char *msg) {
    int line, col;
    muse_jinja_line_col(L->src, L->n, off, &line, &col);
    muse_error_set(L->err, MUSE_ERR_TEMPLATE, "line %d, column %d: %s", line, col, msg);
    return false;
}

static struct jtok *push(struct lexer *L, enum jtok_kind kind, size_t off) {
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct jtok *t = muse_jarena_alloc(L->a, cap * sizeof(*t));
        if (!t) {
            muse_error_set(L->err, MUSE_ERR_NOMEM, "out of memory");
            return NULL;
        }
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof(*t));
        L->toks = t;
        L->cap = cap;
    }
    struct jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->off = off;
    return t;
}

static char *dup(struct lexer *L, const char *s, size_t n) {
    char *d = muse_jarena_alloc(L->a, n + 1);
    if (!d) {
        muse_error_set(L->err, MUSE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static bool is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string literal at *pos (quote char there). Python unicode-escape decoding. */
static bool lex_string(struct lexer *L, size_t *pos) {
    size_t start = *pos;
    char q = L->src[start];
    size_t i = start + 1;
    while (i < L->n && L->src[i] != q) {
        if (L->src[i] == '\\' && i + 1 < L->n) i++;
        i++;
    }
    if (i >= L->n) return lex_fail(L, start, "unexpected end of template inside a string");
    size_t raw_n = i - start - 1;
    char *out = muse_jarena_alloc(L->a, raw_n * 2 + 8);
    if (!out) return muse_error_set(L->err, MUSE_ERR_NOMEM, "out of memory"), false;
    size_t o = 0;
    const char *s = L->src + start + 1;
    for (size_t k = 0; k < raw_n; k++) {
        char ch = s[k];
        if (ch != '\\' || k + 1 >= raw_n) {
            out[o++] = ch;
            continue;
        }
        char e = s[++k];
        int digits = 0;
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case '\n': break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int m = 0;
                while (m < 3 && k < raw_n && s[k] >= '0' && s[k] <= '7') v = v * 8 + (uint32_t)(s[k++] - '0'), m++;
                k--;
                o += put_utf8(out + o, v);
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
        if (digits) {
            uint32_t v = 0;
            for (int m = 0; m < digits; m++) {
                int h = k + 1 < raw_n ? hexval(s[k + 1]) : -1;
                if (h < 0) return lex_fail(L, start, "truncated \\x/\\u escape in a string");
                v = v * 16 + (uint32_t)h;
                k++;
            }
            if (v > 0x10FFFF) return lex_fail(L, start, "illegal Unicode character in a string");
            o += put_utf8(out + o, v);
        }
    }
    out[o] = '\0';
    struct jtok *t = push(L, JT_STRING, start);
    if (!t) return false;
    t->s = out;
    t->len = o;
    *pos = i + 1;
    return true;
}

static const char *const ops3[] = {NULL};
static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/*
 * Lex the inside of a tag starting at *pos up to its end marker `close` ("}}" or "%}").
 * On return *pos is after the end marker and *strip tells the end modifier: '-', '+' or 0.
 */
static bool lex_tag(struct lexer *L, size_t *pos, char close, char *strip) {
    size_t i = *pos;
    int depth = 0;
    size_t tag_start = i;
    for (;;) {
        while (i < L->n && is_ws(L->src[i])) i++;
        if (i >= L->n) return lex_fail(L, tag_start, close == '%' ? "unexpected end of template: missing '%}'" : "unexpected end of template: missing '}}'");
        const char *p = L->src + i;
        size_t rem = L->n - i;
        if (depth == 0) {
            if (rem >= 3 && (p[0] == '-' || p[0] == '+') && p[1] == close && p[2] == '}') {
                *strip = p[0];
                *pos = i + 3;
                return true;
            }
            if (rem >= 2 && p[0] == close && p[1] == '}') {
                *strip = 0;
                *pos = i + 2;
                return true;
            }
        }
        char ch = p[0];
        if (is_name0(ch)) {
            size_t j = i + 1;
            while (j < L->n && (is_name0(L->src[j]) || is_digit(L->src[j]))) j++;
            struct jtok *t = push(L, JT_NAME, i);
            if (!t || !(t->s = dup(L, p, j - i))) return false;
            t->len = j - i;
            i = j;
        } else if (is_digit(ch)) {
            size_t j = i;
            while (j < L->n && (is_digit(L->src[j]) || L->src[j] == '_')) j++;
            bool is_float = false;
            if (j + 1 < L->n && L->src[j] == '.' && is_digit(L->src[j + 1])) {
                is_float = true;
                j++;
                while (j < L->n && (is_digit(L->src[j]) || L->src[j] == '_')) j++;
            }
            if (j < L->n && (L->src[j] == 'e' || L->src[j] == 'E')) {
                size_t k = j + 1;
                if (k < L->n && (L->src[k] == '+' || L->src[k] == '-')) k++;
                if (k < L->n && is_digit(L->src[k])) {
                    is_float = true;
                    j = k;
                    while (j < L->n && is_digit(L->src[j])) j++;
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t k = i; k < j && m < sizeof(num) - 1; k++)
                if (L->src[k] != '_') num[m++] = L->src[k];
            num[m] = '\0';
            struct jtok *t = push(L, is_float ? JT_FLOAT : JT_INT, i);
            if (!t) return false;
            if (is_float) t->f = strtod(num, NULL);
            else t->i = strtoll(num, NULL, 10);
            i = j;
        } else if (ch == '\'' || ch == '"') {
            if (!lex_string(L, &i)) return false;
        } else {
            size_t len = 0;
            for (int k = 0; ops2[k]; k++)
                if (rem >= 2 && memcmp(p, ops2[k], 2) == 0) len = 2;
            if (!len && strchr(ops1, ch) && ch) len = 1;
            (void)ops3;
            if (!len) {
                char msg[64];
                snprintf(msg, sizeof(msg), "unexpected char '%c'", ch);
                return lex_fail(L, i, msg);
            }
            if (ch == '(' || ch == '[' || ch == '{') depth++;
            if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
            struct jtok *t = push(L, JT_OP, i);
            if (!t || !(t->s = dup(L, p, len))) return false;
            t->len = len;
            i += len;
        }
    }
}

/* Normalize newlines like Python's str.splitlines + "\n".join, dropping one trailing newline. */
static char *normalize(struct jarena *a, const char *text, size_t len, size_t *out_len) {
    char *o = muse_jarena_alloc(a, len + 1);
    if (!o) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '\r') {
            if (i + 1 < len && text[i + 1] == '\n') i++;
            o[n++] = '\n';
        } else if (ch == '\v' || ch == '\f' || ch == 0x1C || ch == 0x1D || ch == 0x1E) {
            o[n++] = '\n';
        } else if (ch == 0xC2 && i + 1 < len && (unsigned char)text[i + 1] == 0x85) {
            o[n++] = '\n';
            i++;
        } else if (ch == 0xE2 && i + 2 < len && (unsigned char)text[i + 1] == 0x80 &&
                   ((unsigned char)text[i + 2] == 0xA8 || (unsigned char)text[i + 2] == 0xA9)) {
            o[n++] = '\n';
            i += 2;
        } else {
            o[n++] = (char)ch;
        }
    }
    if (n > 0 && o[n - 1] == '\n') n--;
    o[n] = '\0';
    *out_len = n;
    return o;
}

/* Find the next tag opener at or after pos; returns its offset or n. */
static size_t find_open(const char *s, size_t n, size_t pos) {
    for (size_t i = pos; i + 1 < n; i++)
        if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    return n;
}

static bool emit_text(struct lexer *L, size_t start, size_t end) {
    if (end <= start) return true;
    struct jtok *t = push(L, JT_TEXT, start);
    if (!t) return false;
    t->s = L->src + start;
    t->len = end - start;
    return true;
}

/* Is the {% raw %} tag at `open`? Sets *body_start after its end. */
static bool is_raw(const char *s, size_t n, size_t open, size_t *after, char *end_strip) {
    size_t i = open + 2;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    while (i < n && is_ws(s[i])) i++;
    if (i + 3 > n || memcmp(s + i, "raw", 3) != 0) return false;
    i += 3;
    while (i < n && is_ws(s[i])) i++;
    *end_strip = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *end_strip = s[i++];
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return false;
    *after = i + 2;
    return true;
}

bool muse_jinja_lex(struct jarena *a, const char *text, size_t len, struct jlex_result *out,
                    struct muse_error *err) {
    struct lexer L = {.a = a, .err = err};
    char *src = normalize(a, text, len, &L.n);
    if (!src) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory"), false;
    L.src = src;
    size_t pos = 0;
    const char *s = src;
    size_t n = L.n;
    while (pos < n) {
        size_t open = find_open(s, n, pos);
        size_t text_end = open;
        if (open < n) {
            char kind = s[open + 1];
            char sign = open + 2 < n ? s[open + 2] : 0;
            if (sign == '-') {
                while (text_end > pos && is_ws(s[text_end - 1])) text_end--;
            } else if (sign != '+' && kind != '{') {
                /* lstrip_blocks: whitespace from the line start up to a block/comment tag */
                size_t l = text_end;
                while (l > pos && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
                bool at_line_start = (l > pos && s[l - 1] == '\n') ||
                                     (l == pos && (pos == 0 || s[pos - 1] == '\n'));
                if (at_line_start) text_end = l;
            }
        }
        if (!emit_text(&L, pos, text_end)) return false;
        if (open >= n) break;
        char kind = s[open + 1];
        size_t body = open + 2;
        if (body < n && (s[body] == '-' || s[body] == '+')) body++;
        char strip = 0;
        size_t after;
        size_t raw_after;
        char raw_strip;
        if (kind == '#') {
            size_t i = body;
            while (i + 1 < n && !(s[i] == '#' && s[i + 1] == '}')) i++;
            if (i + 1 >= n) return lex_fail(&L, open, "missing end of comment tag");
            if (i > body && (s[i - 1] == '-' || s[i - 1] == '+')) strip = s[i - 1];
            after = i + 2;
        } else if (kind == '%' && is_raw(s, n, open, &raw_after, &raw_strip)) {
            size_t i = raw_after;
            if (raw_strip == '-') while (i < n && is_ws(s[i])) i++;
            else if (raw_strip != '+' && i < n && s[i] == '\n') i++;
            /* find {% endraw %} */
            size_t j = i, end_open = n, end_after = n;
            char es = 0;
            for (; j + 1 < n; j++) {
                if (s[j] != '{' || s[j + 1] != '%') continue;
                size_t k = j + 2;
                char os = 0;
                if (k < n && (s[k] == '-' || s[k] == '+')) os = s[k++];
                while (k < n && is_ws(s[k])) k++;
                if (k + 6 > n || memcmp(s + k, "endraw", 6) != 0) continue;
                k += 6;
                while (k < n && is_ws(s[k])) k++;
                es = 0;
                if (k < n && (s[k] == '-' || s[k] == '+')) es = s[k++];
                if (k + 2 > n || s[k] != '%' || s[k + 1] != '}') continue;
                end_open = j;
                end_after = k + 2;
                if (os == '-') while (end_open > i && is_ws(s[end_open - 1])) end_open--;
                break;
            }
            if (end_open >= n) return lex_fail(&L, open, "missing end of raw directive");
            if (!emit_text(&L, i, end_open)) return false;
            strip = es;
            after = end_after;
        } else {
            bool blk = kind == '%';
            if (!push(&L, blk ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, open)) return false;
            after = body;
            if (!lex_tag(&L, &after, blk ? '%' : '}', &strip)) return false;
            if (!push(&L, blk ? JT_BLOCK_END : JT_VAR_END, after - 2)) return false;
            if (!blk) {
                if (strip == '-') while (after < n && is_ws(s[after])) after++;
                pos = after;
                continue;
            }
        }
        if (strip == '-') {
            while (after < n && is_ws(s[after])) after++;
        } else if (strip != '+' && after < n && s[after] == '\n') {
            after++; /* trim_blocks */
        }
        pos = after;
    }
    if (!push(&L, JT_EOF, n)) return false;
    out->toks = L.toks;
    out->n = L.n_toks;
    out->src = src;
    out->src_len = n;
    return true;
}
