/*
 * gbnf_buf.h - a growable string for the grammar writers of src/gen (gbnf_rules.c, json_schema.c,
 * json_regex.c, tool_grammar.c). Internal; static inline so each file keeps its own copy.
 * Errors are sticky: after a failed allocation every append is a no-op and `oom` stays set.
 */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gbuf {
    char *s;    /* NUL-terminated when n > 0 or after gbuf_str */
    size_t n, cap;
    bool oom;
};

static inline bool gbuf_reserve(struct gbuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

static inline void gbuf_putn(struct gbuf *b, const char *s, size_t n) {
    if (!gbuf_reserve(b, n)) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static inline void gbuf_puts(struct gbuf *b, const char *s) { gbuf_putn(b, s, strlen(s)); }

static inline void gbuf_putc(struct gbuf *b, char c) { gbuf_putn(b, &c, 1); }

static inline void gbuf_printf(struct gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void gbuf_printf(struct gbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        gbuf_putn(b, tmp, (size_t)n);
        return;
    }
    if (!gbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

/* The text so far ("" when empty); NULL after an allocation failure. */
static inline const char *gbuf_str(struct gbuf *b) {
    if (b->oom) return NULL;
    if (!b->s && !gbuf_reserve(b, 0)) return NULL;
    b->s[b->n] = 0;
    return b->s;
}

/* Hand the string over (caller frees); NULL after an allocation failure. */
static inline char *gbuf_take(struct gbuf *b) {
    char *s = gbuf_str(b) ? b->s : NULL;
    if (!s) free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
    return s;
}

static inline void gbuf_free(struct gbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

/* Append code point cp as UTF-8. */
static inline void gbuf_put_utf8(struct gbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    gbuf_putn(b, u, n);
}

/*
 * Code point cp written inside a GBNF literal "..." or class [...]: printable ASCII as is (with
 * the escapes GBNF needs: \\ \" \[ \] \- and ^ in classes), other code points as \xHH / \uHHHH /
 * \UHHHHHHHH.
 */
static inline void gbuf_put_gbnf_char(struct gbuf *b, uint32_t cp, bool in_class) {
    if (cp == '\\' || cp == '"' || (in_class && (cp == '[' || cp == ']' || cp == '-'))) {
        gbuf_putc(b, '\\');
        gbuf_putc(b, (char)cp);
    } else if (in_class && cp == '^') {
        gbuf_puts(b, "\\x5E");
    } else if (cp >= 0x20 && cp < 0x7F) {
        gbuf_putc(b, (char)cp);
    } else if (cp == '\n') {
        gbuf_puts(b, "\\n");
    } else if (cp == '\r') {
        gbuf_puts(b, "\\r");
    } else if (cp == '\t') {
        gbuf_puts(b, "\\t");
    } else if (cp < 0x100) {
        gbuf_printf(b, "\\x%02X", (unsigned)cp);
    } else if (cp < 0x10000) {
        gbuf_printf(b, "\\u%04X", (unsigned)cp);
    } else {
        gbuf_printf(b, "\\U%08X", (unsigned)cp);
    }
}
