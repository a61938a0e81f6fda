/*
 * jinja_value.c - arena, buffers and the Python semantics of template values: truthiness,
 * equality, ordering, str(), repr(), json.dumps(), float repr, UTF-8 helpers.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

/* ---- arena ---- */

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *muse_jarena_alloc(struct jarena *a, size_t size) {
    if (a->failed) return NULL;
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    if (a->limit && a->used + size > a->limit) {
        a->failed = true;
        return NULL;
    }
    struct jarena_chunk *ch = a->head;
    if (!ch || ch->cap - ch->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        ch = malloc(sizeof(*ch) + cap);
        if (!ch) {
            a->failed = true;
            return NULL;
        }
        ch->used = 0;
        ch->cap = cap;
        /* keep a partly used head chunk in front when this one is a one-off big block */
        if (a->head && size > 65536) {
            ch->next = a->head->next;
            a->head->next = ch;
        } else {
            ch->next = a->head;
            a->head = ch;
        }
    }
    void *p = ch->data + ch->used;
    ch->used += size;
    a->used += size;
    memset(p, 0, size);
    return p;
}

void muse_jarena_free(struct jarena *a) {
    struct jarena_chunk *ch = a->head;
    while (ch) {
        struct jarena_chunk *next = ch->next;
        free(ch);
        ch = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- buffers ---- */

bool muse_jbuf_put(struct jbuf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (b->limit && b->len + n > b->limit) {
        b->failed = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return false;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static bool jbuf_puts(struct jbuf *b, const char *s) { return muse_jbuf_put(b, s, strlen(s)); }
bool muse_jbuf_putc(struct jbuf *b, char c) { return muse_jbuf_put(b, &c, 1); }

bool muse_jbuf_printf(struct jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n >= sizeof(tmp)) n = sizeof(tmp) - 1;
    return muse_jbuf_put(b, tmp, (size_t)n);
}

void muse_jbuf_free(struct jbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- errors ---- */

bool muse_jerr(struct jctx *c, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int line = 0, col = 0;
    if (c->cur) muse_jinja_line_col(c->t->src, c->t->src_len, c->cur->off, &line, &col);
    muse_error_set(c->err, MUSE_ERR_TEMPLATE, "line %d, column %d: %s", line, col, msg);
    return false;
}

/* ---- constructors ---- */

struct jv muse_jv_undef(struct jstr *name) { struct jv v = {.kind = JV_UNDEF}; v.u.s = name; return v; }
struct jv muse_jv_none(void) { struct jv v = {.kind = JV_NONE}; return v; }
struct jv muse_jv_bool(bool b) { struct jv v = {.kind = JV_BOOL}; v.u.b = b; return v; }
struct jv muse_jv_int(int64_t i) { struct jv v = {.kind = JV_INT}; v.u.i = i; return v; }
struct jv muse_jv_float(double f) { struct jv v = {.kind = JV_FLOAT}; v.u.f = f; return v; }
struct jv muse_jv_str(struct jstr *s) { struct jv v = {.kind = JV_STR}; v.u.s = s; return v; }

static bool oom(struct jctx *c) {
    return muse_jerr(c, "out of memory (render memory limit of %zu bytes)", c->lim.max_memory);
}

struct jstr *muse_jstr_new(struct jctx *c, const char *s, size_t len) {
    struct jstr *r = muse_jarena_alloc(&c->arena, sizeof(*r) + len + 1);
    if (!r) {
        oom(c);
        return NULL;
    }
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = '\0';
    return r;
}

struct jv muse_jv_strn(struct jctx *c, const char *s, size_t len) {
    struct jstr *r = muse_jstr_new(c, s, len);
    return r ? muse_jv_str(r) : muse_jv_undef(NULL);
}

struct jlist *muse_jlist_new(struct jctx *c, size_t cap) {
    struct jlist *l = muse_jarena_alloc(&c->arena, sizeof(*l));
    if (!l) {
        oom(c);
        return NULL;
    }
    if (cap) {
        l->items = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        if (!l->items) {
            oom(c);
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

bool muse_jlist_push(struct jctx *c, struct jlist *l, struct jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *items = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        if (!items) return oom(c);
        if (l->n) memcpy(items, l->items, l->n * sizeof(struct jv));
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return true;
}

struct jdict *muse_jdict_new(struct jctx *c, size_t cap) {
    struct jdict *d = muse_jarena_alloc(&c->arena, sizeof(*d));
    if (!d) {
        oom(c);
        return NULL;
    }
    if (cap) {
        d->keys = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        d->vals = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        if (!d->keys || !d->vals) {
            oom(c);
            return NULL;
        }
        d->cap = cap;
    }
    return d;
}

struct jv *muse_jdict_get(const struct jdict *d, struct jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (muse_jv_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

struct jv *muse_jdict_get_str(const struct jdict *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->n; i++) {
        const struct jv *k = &d->keys[i];
        if (k->kind == JV_STR && k->u.s->len == len && memcmp(k->u.s->s, key, len) == 0)
            return &d->vals[i];
    }
    return NULL;
}

bool muse_jdict_set(struct jctx *c, struct jdict *d, struct jv key, struct jv val) {
    struct jv *slot = muse_jdict_get(d, key);
    if (slot) {
        *slot = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *k = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        struct jv *v = muse_jarena_alloc(&c->arena, cap * sizeof(struct jv));
        if (!k || !v) return oom(c);
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof(struct jv));
            memcpy(v, d->vals, d->n * sizeof(struct jv));
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

bool muse_jv_from_json(struct jctx *c, const cJSON *j, struct jv *out) {
    if (!j || cJSON_IsNull(j)) {
        *out = muse_jv_none();
    } else if (cJSON_IsBool(j)) {
        *out = muse_jv_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: integral values within int64 become ints */
        if (d == floor(d) && fabs(d) < 9.2e18) *out = muse_jv_int((int64_t)d);
        else *out = muse_jv_float(d);
    } else if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        *out = muse_jv_strn(c, s, strlen(s));
        if (out->kind != JV_STR) return false;
    } else if (cJSON_IsArray(j)) {
        struct jlist *l = muse_jlist_new(c, (size_t)cJSON_GetArraySize(j));
        if (!l) return false;
        for (const cJSON *e = j->child; e; e = e->next) {
            struct jv v;
            if (!muse_jv_from_json(c, e, &v) || !muse_jlist_push(c, l, v)) return false;
        }
        out->kind = JV_LIST;
        out->u.l = l;
    } else if (cJSON_IsObject(j)) {
        struct jdict *d = muse_jdict_new(c, (size_t)cJSON_GetArraySize(j));
        if (!d) return false;
        for (const cJSON *e = j->child; e; e = e->next) {
            struct jv v;
            const char *k = e->string ? e->string : "";
            struct jv key = muse_jv_strn(c, k, strlen(k));
            if (key.kind != JV_STR || !muse_jv_from_json(c, e, &v) || !muse_jdict_set(c, d, key, v))
                return false;
        }
        out->kind = JV_DICT;
        out->u.d = d;
    } else {
        *out = muse_jv_none();
    }
    return true;
}

/* ---- Python semantics ---- */

bool muse_jv_truthy(struct jv v) {
    switch (v.kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->gen || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double num_f(struct jv v) {
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct jv v) { return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b; }

bool muse_jv_equal(struct jv a, struct jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!muse_jv_equal(a.u.l->items[i], b.u.l->items[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = muse_jdict_get(b.u.d, a.u.d->keys[i]);
            if (!o || !muse_jv_equal(a.u.d->vals[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.mc == b.u.mc;
    case JV_BUILTIN: return a.u.builtin == b.u.builtin;
    default: return false;
    }
}

bool muse_jv_is_str(struct jv v, const char *s) {
    return v.kind == JV_STR && strcmp(v.u.s->s, s) == 0 && strlen(s) == v.u.s->len;
}

bool muse_jv_compare(struct jctx *c, struct jv a, struct jv b, int *res) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            *res = x < y ? -1 : x > y ? 1 : 0;
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *res = x < y ? -1 : x > y ? 1 : 0;
        }
        return true;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        if (r == 0) r = a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len ? 1 : 0;
        *res = r < 0 ? -1 : r > 0 ? 1 : 0;
        return true;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (muse_jv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
            return muse_jv_compare(c, a.u.l->items[i], b.u.l->items[i], res);
        }
        *res = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
        return true;
    }
    return muse_jerr(c, "'<' not supported between instances of '%s' and '%s'", muse_jv_type_name(a),
                     muse_jv_type_name(b));
}

const char *muse_jv_type_name(struct jv v) {
    switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->gen ? "generator" : v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_BUILTIN: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

void muse_jhtml_escape(struct jbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': jbuf_puts(b, "&amp;"); break;
        case '<': jbuf_puts(b, "&lt;"); break;
        case '>': jbuf_puts(b, "&gt;"); break;
        case '"': jbuf_puts(b, "&#34;"); break;
        case '\'': jbuf_puts(b, "&#39;"); break;
        default: muse_jbuf_putc(b, s[i]);
        }
    }
}

/* ---- float repr ---- */

/* Python float repr (shortest round trip). */
static void jfloat_repr(double f, char *buf, size_t n) {
    if (isnan(f)) { snprintf(buf, n, "nan"); return; }
    if (isinf(f)) { snprintf(buf, n, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, n, signbit(f) ? "-0.0" : "0.0"); return; }
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof(digits), "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f) break;
    }
    /* digits: [-]D[.DDD]e[+-]XX */
    const char *p = digits;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    char mant[24];
    size_t nm = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') mant[nm++] = *p;
    mant[nm] = '\0';
    int exp = atoi(p + 1);
    while (nm > 1 && mant[nm - 1] == '0') mant[--nm] = '\0';
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (size_t i = 0; i < nm; i++) out[o++] = mant[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = (size_t)i < nm ? mant[i] : '0';
            out[o++] = '.';
            if ((size_t)exp + 1 < nm) {
                for (size_t i = (size_t)exp + 1; i < nm; i++) out[o++] = mant[i];
            } else {
                out[o++] = '0';
            }
        }
        out[o] = '\0';
    } else {
        out[o++] = mant[0];
        if (nm > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nm; i++) out[o++] = mant[i];
        }
        out[o] = '\0';
        snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

/* ---- UTF-8 ---- */

static size_t u8_decode(const char *s, size_t n, size_t pos, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s + pos;
    size_t rem = n - pos;
    if (u[0] < 0x80) { *cp = u[0]; return 1; }
    if ((u[0] & 0xE0) == 0xC0 && rem >= 2) { *cp = ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu); return 2; }
    if ((u[0] & 0xF0) == 0xE0 && rem >= 3) {
        *cp = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
        return 3;
    }
    if ((u[0] & 0xF8) == 0xF0 && rem >= 4) {
        *cp = ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
        return 4;
    }
    *cp = u[0];
    return 1;
}

size_t muse_jutf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t muse_jutf8_offset(const char *s, size_t n, size_t cp) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == cp) return i;
            k++;
        }
    }
    return n;
}

static bool py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool muse_jis_space_at(const char *s, size_t n, size_t pos, size_t *clen) {
    uint32_t cp;
    *clen = u8_decode(s, n, pos, &cp);
    return py_space(cp);
}

bool muse_jrstrip_len(const char *s, size_t n, size_t *out_n) {
    /* walk forward remembering the end of the last non-space character */
    size_t end = 0, pos = 0, cl;
    while (pos < n) {
        bool sp = muse_jis_space_at(s, n, pos, &cl);
        pos += cl;
        if (!sp) end = pos;
    }
    *out_n = end;
    return true;
}

/* ---- str() / repr() ---- */

static bool py_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) return false;
    if (cp == 0xA0 || cp == 0xAD) return false;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E)
        return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
    if ((cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF) return false;
    if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
    if ((cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000) return false;
    return true;
}

static bool repr_str(struct jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    muse_jbuf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = u8_decode(s, n, i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            muse_jbuf_putc(b, '\\');
            muse_jbuf_putc(b, (char)cp);
        } else if (cp == '\n') {
            jbuf_puts(b, "\\n");
        } else if (cp == '\r') {
            jbuf_puts(b, "\\r");
        } else if (cp == '\t') {
            jbuf_puts(b, "\\t");
        } else if (!py_printable(cp)) {
            if (cp < 0x100) muse_jbuf_printf(b, "\\x%02x", cp);
            else if (cp < 0x10000) muse_jbuf_printf(b, "\\u%04x", cp);
            else muse_jbuf_printf(b, "\\U%08x", cp);
        } else {
            muse_jbuf_put(b, s + i, cl);
        }
        i += cl;
    }
    return muse_jbuf_putc(b, q);
}

static bool put_num(struct jbuf *b, struct jv v) {
    if (v.kind == JV_INT) return muse_jbuf_printf(b, "%lld", (long long)v.u.i);
    char tmp[64];
    jfloat_repr(v.u.f, tmp, sizeof(tmp));
    return jbuf_puts(b, tmp);
}

bool muse_jv_repr(struct jctx *c, struct jv v, struct jbuf *b) {
    if (v.kind == JV_LIST && v.u.l->gen) return jbuf_puts(b, "<generator object>");
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return muse_jerr(c, "maximum recursion depth exceeded while formatting a value");
    }
    bool ok = true;
    switch (v.kind) {
    case JV_STR: ok = repr_str(b, v.u.s->s, v.u.s->len); break;
    case JV_LIST: {
        muse_jbuf_putc(b, v.u.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n && ok; i++) {
            if (i) jbuf_puts(b, ", ");
            ok = muse_jv_repr(c, v.u.l->items[i], b);
        }
        if (v.u.l->tuple && v.u.l->n == 1) muse_jbuf_putc(b, ',');
        muse_jbuf_putc(b, v.u.l->tuple ? ')' : ']');
        break;
    }
    case JV_DICT:
        muse_jbuf_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n && ok; i++) {
            if (i) jbuf_puts(b, ", ");
            ok = muse_jv_repr(c, v.u.d->keys[i], b);
            jbuf_puts(b, ": ");
            if (ok) ok = muse_jv_repr(c, v.u.d->vals[i], b);
        }
        muse_jbuf_putc(b, '}');
        break;
    default: ok = muse_jv_to_str(c, v, b); break;
    }
    c->depth--;
    return ok && !b->failed;
}

bool muse_jv_to_str(struct jctx *c, struct jv v, struct jbuf *b) {
    switch (v.kind) {
    case JV_UNDEF: return true;
    case JV_NONE: return jbuf_puts(b, "None");
    case JV_BOOL: return jbuf_puts(b, v.u.b ? "True" : "False");
    case JV_INT: case JV_FLOAT: return put_num(b, v);
    case JV_STR: return muse_jbuf_put(b, v.u.s->s, v.u.s->len);
    case JV_LIST: case JV_DICT: return muse_jv_repr(c, v, b);
    case JV_NS: return jbuf_puts(b, "<Namespace>");
    case JV_MACRO: return muse_jbuf_printf(b, "<Macro '%s'>", v.u.mc->node->str);
    case JV_BUILTIN: return jbuf_puts(b, "<built-in function>");
    case JV_METHOD: return muse_jbuf_printf(b, "<built-in method %s>", v.u.mt->name);
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    }
    return true;
}

bool muse_jv_stringify(struct jctx *c, struct jv v, struct jv *out) {
    if (v.kind == JV_STR) {
        *out = v;
        return true;
    }
    struct jbuf b = {0};
    if (!muse_jv_to_str(c, v, &b)) {
        muse_jbuf_free(&b);
        return c->failed ? false : oom(c);
    }
    *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
    muse_jbuf_free(&b);
    return out->kind == JV_STR;
}

/* ---- json.dumps ---- */

static void json_str(struct jbuf *b, const char *s, size_t n, bool ascii) {
    muse_jbuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = u8_decode(s, n, i, &cp);
        switch (cp) {
        case '"': jbuf_puts(b, "\\\""); break;
        case '\\': jbuf_puts(b, "\\\\"); break;
        case '\n': jbuf_puts(b, "\\n"); break;
        case '\r': jbuf_puts(b, "\\r"); break;
        case '\t': jbuf_puts(b, "\\t"); break;
        case '\b': jbuf_puts(b, "\\b"); break;
        case '\f': jbuf_puts(b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7F)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    muse_jbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    muse_jbuf_printf(b, "\\u%04x", cp);
                }
            } else {
                muse_jbuf_put(b, s + i, cl);
            }
        }
        i += cl;
    }
    muse_jbuf_putc(b, '"');
}

static void json_nl(struct jbuf *b, const struct jjson_opts *o, int level) {
    muse_jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_puts(b, o->indent);
}

static int key_cmp(const void *x, const void *y) {
    const struct jv *a = x, *b = y;
    if (a->kind == JV_STR && b->kind == JV_STR) return strcmp(a->u.s->s, b->u.s->s);
    return 0;
}

static bool json_rec(struct jctx *c, struct jv v, const struct jjson_opts *o, struct jbuf *b,
                     int level) {
    if (level > c->lim.max_depth) return muse_jerr(c, "maximum recursion depth exceeded in tojson");
    switch (v.kind) {
    case JV_NONE: jbuf_puts(b, "null"); return true;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); return true;
    case JV_INT: return put_num(b, v);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jbuf_puts(b, "NaN");
        if (isinf(v.u.f)) return jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        return put_num(b, v);
    case JV_STR: json_str(b, v.u.s->s, v.u.s->len, o->ensure_ascii); return true;
    case JV_LIST:
        if (v.u.l->gen) return muse_jerr(c, "Object of type generator is not JSON serializable");
        if (v.u.l->n == 0) return jbuf_puts(b, "[]");
        muse_jbuf_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) json_nl(b, o, level + 1);
            if (!json_rec(c, v.u.l->items[i], o, b, level + 1)) return false;
        }
        if (o->indent) json_nl(b, o, level);
        muse_jbuf_putc(b, ']');
        return true;
    case JV_DICT: case JV_NS: {
        struct jdict *d = v.u.d;
        if (d->n == 0) return jbuf_puts(b, "{}");
        size_t *order = NULL;
        struct jv *keys = d->keys;
        if (o->sort_keys) {
            keys = muse_jarena_alloc(&c->arena, d->n * sizeof(struct jv));
            if (!keys) return oom(c);
            memcpy(keys, d->keys, d->n * sizeof(struct jv));
            qsort(keys, d->n, sizeof(struct jv), key_cmp);
        }
        (void)order;
        muse_jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            struct jv k = keys[i];
            struct jv val = o->sort_keys ? *muse_jdict_get(d, k) : d->vals[i];
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) json_nl(b, o, level + 1);
            if (k.kind == JV_STR) {
                json_str(b, k.u.s->s, k.u.s->len, o->ensure_ascii);
            } else if (k.kind == JV_INT || k.kind == JV_FLOAT || k.kind == JV_BOOL ||
                       k.kind == JV_NONE) {
                muse_jbuf_putc(b, '"');
                if (k.kind == JV_BOOL) jbuf_puts(b, k.u.b ? "true" : "false");
                else if (k.kind == JV_NONE) jbuf_puts(b, "null");
                else put_num(b, k);
                muse_jbuf_putc(b, '"');
            } else {
                return muse_jerr(c, "keys must be str, int, float, bool or None, not %s",
                                 muse_jv_type_name(k));
            }
            jbuf_puts(b, o->key_sep);
            if (!json_rec(c, val, o, b, level + 1)) return false;
        }
        if (o->indent) json_nl(b, o, level);
        muse_jbuf_putc(b, '}');
        return true;
    }
    default:
        return muse_jerr(c, "Object of type %s is not JSON serializable", muse_jv_type_name(v));
    }
}

bool muse_jv_to_json(struct jctx *c, struct jv v, const struct jjson_opts *o, struct jbuf *b) {
    if (!json_rec(c, v, o, b, 0)) return false;
    if (b->failed) return oom(c);
    return true;
}

bool muse_jv_iterate(struct jctx *c, struct jv v, struct jlist **out) {
    switch (v.kind) {
    case JV_LIST: *out = v.u.l; return true;
    case JV_UNDEF: {
        *out = muse_jlist_new(c, 0);
        return *out != NULL;
    }
    case JV_DICT: {
        struct jlist *l = muse_jlist_new(c, v.u.d->n);
        if (!l) return false;
        for (size_t i = 0; i < v.u.d->n; i++) l->items[i] = v.u.d->keys[i];
        l->n = v.u.d->n;
        *out = l;
        return true;
    }
    case JV_STR: {
        const char *s = v.u.s->s;
        size_t n = v.u.s->len;
        struct jlist *l = muse_jlist_new(c, muse_jutf8_len(s, n));
        if (!l) return false;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t cl = u8_decode(s, n, i, &cp);
            struct jv ch = muse_jv_strn(c, s + i, cl);
            if (ch.kind != JV_STR || !muse_jlist_push(c, l, ch)) return false;
            i += cl;
        }
        *out = l;
        return true;
    }
    default:
        return muse_jerr(c, "'%s' object is not iterable", muse_jv_type_name(v));
    }
}
