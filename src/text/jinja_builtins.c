/*
 * jinja_builtins.c - globals (range, namespace, raise_exception, strftime_now, dict), attribute
 * and item access, Python methods of str/dict/list, and the jinja2 tests.
 * Filters live in jinja_filters.c.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_builtins.h"

struct jv *muse_jarg(struct jv *args, size_t n_args, const char **kwnames, struct jv *kwargs,
                     size_t n_kwargs, size_t pos, const char *name) {
    if (pos < n_args) return &args[pos];
    for (size_t i = 0; i < n_kwargs; i++)
        if (name && !strcmp(kwnames[i], name)) return &kwargs[i];
    return NULL;
}

bool muse_jarg_str(struct jctx *c, struct jv *v, const char *what, struct jstr **out) {
    if (!v || v->kind != JV_STR) return muse_jerr(c, "%s must be a string, not %s", what, v ? muse_jv_type_name(*v) : "nothing");
    *out = v->u.s;
    return true;
}

bool muse_jlist_value(struct jctx *c, struct jlist *l, struct jv *out) {
    (void)c;
    out->kind = JV_LIST;
    out->u.l = l;
    return true;
}

/* ---- globals ---- */

static bool fmt_time(struct jctx *c, const char *fmt, struct jv *out) {
    struct tm tm = {0};
    tm.tm_year = c->now[0] - 1900;
    tm.tm_mon = c->now[1] - 1;
    tm.tm_mday = c->now[2];
    tm.tm_hour = c->now[3];
    tm.tm_min = c->now[4];
    tm.tm_sec = c->now[5];
    time_t t = timegm(&tm);
    struct tm norm;
    gmtime_r(&t, &norm);
    char buf[512];
    size_t n = strlen(fmt) ? strftime(buf, sizeof(buf), fmt, &norm) : 0;
    if (strlen(fmt) && n == 0 && strlen(fmt) > 200) return muse_jerr(c, "strftime format too long");
    *out = muse_jv_strn(c, buf, n);
    return out->kind == JV_STR;
}

bool muse_jinja_call_builtin(struct jctx *c, int id, struct jv *args, size_t n_args,
                             const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    switch (id) {
    case JB_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (n_args < 1 || n_args > 3 || n_kwargs) return muse_jerr(c, "range expected 1 to 3 integer arguments");
        for (size_t i = 0; i < n_args; i++) {
            if (args[i].kind != JV_INT && args[i].kind != JV_BOOL)
                return muse_jerr(c, "'%s' object cannot be interpreted as an integer", muse_jv_type_name(args[i]));
            v[i] = args[i].kind == JV_INT ? args[i].u.i : args[i].u.b;
        }
        int64_t start = 0, stop, step = 1;
        if (n_args == 1) stop = v[0];
        else { start = v[0]; stop = v[1]; if (n_args == 3) step = v[2]; }
        if (step == 0) return muse_jerr(c, "range() arg 3 must not be zero");
        struct jlist *l = muse_jlist_new(c, 0);
        if (!l) return false;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l->n >= c->lim.max_iterations) return muse_jerr(c, "range too big");
            if (!muse_jlist_push(c, l, muse_jv_int(i))) return false;
        }
        return muse_jlist_value(c, l, out);
    }
    case JB_NAMESPACE: case JB_DICT: {
        struct jdict *d = muse_jdict_new(c, n_kwargs);
        if (!d) return false;
        for (size_t i = 0; i < n_args; i++) {
            if (args[i].kind != JV_DICT && args[i].kind != JV_NS)
                return muse_jerr(c, "%s() positional argument must be a mapping", id == JB_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < args[i].u.d->n; k++)
                if (!muse_jdict_set(c, d, args[i].u.d->keys[k], args[i].u.d->vals[k])) return false;
        }
        for (size_t i = 0; i < n_kwargs; i++) {
            struct jv key = muse_jv_strn(c, kwnames[i], strlen(kwnames[i]));
            if (key.kind != JV_STR || !muse_jdict_set(c, d, key, kwargs[i])) return false;
        }
        out->kind = id == JB_DICT ? JV_DICT : JV_NS;
        out->u.d = d;
        return true;
    }
    case JB_RAISE: {
        struct jbuf b = {0};
        if (n_args >= 1) muse_jv_to_str(c, args[0], &b);
        bool r = muse_jerr(c, "%s", b.data ? b.data : "");
        muse_jbuf_free(&b);
        return r;
    }
    case JB_STRFTIME: {
        struct jstr *f = NULL;
        if (n_args != 1 || !muse_jarg_str(c, &args[0], "strftime_now() format", &f)) {
            if (!c->failed) muse_jerr(c, "strftime_now() takes one format string");
            return false;
        }
        return fmt_time(c, f->s, out);
    }
    }
    return muse_jerr(c, "unknown builtin");
}

/* ---- attribute and item access ---- */

static const char *const dict_methods[] = {
    "clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem", "setdefault",
    "update", "values", NULL};
static const char *const list_methods[] = {
    "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
    "reverse", "sort", NULL};
static const char *const str_methods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
    "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
    "join", "ljust", "lower", "lstrip", "maketrans", "partition", "removeprefix",
    "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip",
    "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper",
    "zfill", NULL};

static const char *find_name(const char *const *list, const char *name, size_t len) {
    for (size_t i = 0; list[i]; i++)
        if (strlen(list[i]) == len && !memcmp(list[i], name, len)) return list[i];
    return NULL;
}

static bool make_method(struct jctx *c, struct jv self, const char *name, struct jv *out) {
    struct jmethod *m = muse_jarena_alloc(&c->arena, sizeof(*m));
    if (!m) return muse_jerr(c, "out of memory");
    m->self = self;
    m->name = name;
    out->kind = JV_METHOD;
    out->u.mt = m;
    return true;
}

static bool undef_named(struct jctx *c, const char *name, size_t len, struct jv *out) {
    struct jstr *s = muse_jstr_new(c, name, len);
    if (!s) return false;
    *out = muse_jv_undef(s);
    return true;
}

static bool loop_attr(struct jctx *c, struct jv v, const char *name, size_t len, struct jv *out) {
    struct jloop *l = v.u.loop;
#define IS(s) (len == strlen(s) && !memcmp(name, s, len))
    if (IS("index")) *out = muse_jv_int((int64_t)l->index0 + 1);
    else if (IS("index0")) *out = muse_jv_int((int64_t)l->index0);
    else if (IS("revindex")) *out = muse_jv_int((int64_t)(l->n - l->index0));
    else if (IS("revindex0")) *out = muse_jv_int((int64_t)(l->n - l->index0 - 1));
    else if (IS("first")) *out = muse_jv_bool(l->index0 == 0);
    else if (IS("last")) *out = muse_jv_bool(l->index0 + 1 == l->n);
    else if (IS("length")) *out = muse_jv_int((int64_t)l->n);
    else if (IS("depth")) *out = muse_jv_int(l->depth);
    else if (IS("depth0")) *out = muse_jv_int(l->depth - 1);
    else if (IS("previtem")) *out = l->index0 > 0 ? l->items[l->index0 - 1] : muse_jv_undef(NULL);
    else if (IS("nextitem")) *out = l->index0 + 1 < l->n ? l->items[l->index0 + 1] : muse_jv_undef(NULL);
    else if (IS("cycle")) return make_method(c, v, "cycle", out);
    else return undef_named(c, name, len, out);
#undef IS
    return true;
}

bool muse_jinja_getattr(struct jctx *c, struct jv v, const char *name, size_t len, struct jv *out) {
    if (len > 0 && name[0] == '_') return undef_named(c, name, len, out); /* sandbox */
    const char *m;
    switch (v.kind) {
    case JV_UNDEF:
        if (v.u.s) return muse_jerr(c, "'%s' is undefined", v.u.s->s);
        return muse_jerr(c, "undefined value has no attribute '%.*s'", (int)len, name);
    case JV_DICT:
        if ((m = find_name(dict_methods, name, len))) return make_method(c, v, m, out);
        {
            struct jv *x = muse_jdict_get_str(v.u.d, name, len);
            if (x) {
                *out = *x;
                return true;
            }
        }
        return undef_named(c, name, len, out);
    case JV_NS: {
        struct jv *x = muse_jdict_get_str(v.u.d, name, len);
        if (x) {
            *out = *x;
            return true;
        }
        return undef_named(c, name, len, out);
    }
    case JV_STR:
        if ((m = find_name(str_methods, name, len))) return make_method(c, v, m, out);
        return undef_named(c, name, len, out);
    case JV_LIST:
        if ((m = find_name(list_methods, name, len)) && (!v.u.l->tuple || !strcmp(m, "count") || !strcmp(m, "index")))
            return make_method(c, v, m, out);
        return undef_named(c, name, len, out);
    case JV_LOOP: return loop_attr(c, v, name, len, out);
    default: return undef_named(c, name, len, out);
    }
}

bool muse_jinja_getitem(struct jctx *c, struct jv v, struct jv key, struct jv *out) {
    switch (v.kind) {
    case JV_UNDEF:
        if (v.u.s) return muse_jerr(c, "'%s' is undefined", v.u.s->s);
        return muse_jerr(c, "undefined value is not subscriptable");
    case JV_DICT: {
        struct jv *x = muse_jdict_get(v.u.d, key);
        if (x) {
            *out = *x;
            return true;
        }
        break;
    }
    case JV_LIST: case JV_STR:
        if (v.kind == JV_LIST && v.u.l->gen) break;
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            int64_t i = key.kind == JV_INT ? key.u.i : key.u.b;
            if (v.kind == JV_LIST) {
                int64_t n = (int64_t)v.u.l->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) {
                    *out = v.u.l->items[i];
                    return true;
                }
                *out = muse_jv_undef(NULL);
                return true;
            }
            int64_t n = (int64_t)muse_jutf8_len(v.u.s->s, v.u.s->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t a = muse_jutf8_offset(v.u.s->s, v.u.s->len, (size_t)i);
                size_t b = muse_jutf8_offset(v.u.s->s, v.u.s->len, (size_t)i + 1);
                *out = muse_jv_strn(c, v.u.s->s + a, b - a);
                return out->kind == JV_STR;
            }
            *out = muse_jv_undef(NULL);
            return true;
        }
        break;
    default:
        break;
    }
    if (key.kind == JV_STR) return muse_jinja_getattr(c, v, key.u.s->s, key.u.s->len, out);
    *out = muse_jv_undef(NULL);
    return true;
}

/* ---- string helpers ---- */

static bool in_chars(const char *chars, size_t nchars, const char *s, size_t clen) {
    for (size_t i = 0; i < nchars;) {
        size_t cl = 1;
        unsigned char u = (unsigned char)chars[i];
        if (u >= 0xF0) cl = 4; else if (u >= 0xE0) cl = 3; else if (u >= 0xC0) cl = 2;
        if (cl == clen && !memcmp(chars + i, s, clen)) return true;
        i += cl;
    }
    return false;
}

static size_t char_len_at(const char *s, size_t n, size_t pos) {
    unsigned char u = (unsigned char)s[pos];
    size_t cl = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
    return pos + cl > n ? n - pos : cl;
}

/* Python str.strip family. chars == NULL: whitespace. which: 1 left, 2 right, 3 both. */
bool muse_jstrip(struct jctx *c, struct jstr *s, struct jstr *chars, int which, struct jv *out) {
    size_t a = 0, b = s->len;
    if (which & 1) {
        while (a < b) {
            size_t cl;
            bool sp;
            if (chars) {
                cl = char_len_at(s->s, b, a);
                sp = in_chars(chars->s, chars->len, s->s + a, cl);
            } else {
                sp = muse_jis_space_at(s->s, b, a, &cl);
            }
            if (!sp) break;
            a += cl;
        }
    }
    if (which & 2) {
        if (!chars) {
            size_t keep;
            muse_jrstrip_len(s->s + a, b - a, &keep);
            b = a + keep;
        } else {
            while (b > a) {
                size_t st = b - 1;
                while (st > a && ((unsigned char)s->s[st] & 0xC0) == 0x80) st--;
                if (!in_chars(chars->s, chars->len, s->s + st, b - st)) break;
                b = st;
            }
        }
    }
    *out = muse_jv_strn(c, s->s + a, b - a);
    return out->kind == JV_STR;
}

bool muse_jreplace(struct jctx *c, struct jstr *s, struct jstr *old, struct jstr *new_, int64_t count,
                   struct jv *out) {
    struct jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->len == 0) {
        /* Python inserts `new` between every character and at both ends */
        while (i <= s->len && (count < 0 || done < count)) {
            muse_jbuf_put(&b, new_->s, new_->len);
            done++;
            if (i == s->len) { i++; break; }
            size_t cl = char_len_at(s->s, s->len, i);
            muse_jbuf_put(&b, s->s + i, cl);
            i += cl;
        }
        if (i < s->len) muse_jbuf_put(&b, s->s + i, s->len - i);
    } else {
        while (i < s->len) {
            const char *p = (count < 0 || done < count)
                                ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!p) {
                muse_jbuf_put(&b, s->s + i, s->len - i);
                break;
            }
            muse_jbuf_put(&b, s->s + i, (size_t)(p - (s->s + i)));
            muse_jbuf_put(&b, new_->s, new_->len);
            i = (size_t)(p - s->s) + old->len;
            done++;
        }
    }
    if (b.failed) {
        muse_jbuf_free(&b);
        return muse_jerr(c, "out of memory");
    }
    *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
    muse_jbuf_free(&b);
    return out->kind == JV_STR;
}

/* ASCII + Latin-1 case mapping (enough for chat-template text). */
bool muse_jcase(struct jctx *c, struct jstr *s, int mode, struct jv *out) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title, 4 swapcase */
    struct jstr *r = muse_jstr_new(c, s->s, s->len);
    if (!r) return false;
    bool prev_letter = false;
    for (size_t i = 0; i < r->len; i++) {
        unsigned char *p = (unsigned char *)&r->s[i];
        bool up;
        bool is_letter = isalpha(*p) != 0;
        bool latin = *p == 0xC3 && i + 1 < r->len;
        if (latin) {
            unsigned char *q = p + 1;
            bool is_up = *q >= 0x80 && *q <= 0x9E && *q != 0x97;
            bool is_lo = *q >= 0xA0 && *q <= 0xBE && *q != 0xB7;
            up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && !prev_letter) || (mode == 4 && is_lo);
            if (up && is_lo) *q -= 0x20;
            else if (!up && is_up) *q += 0x20;
            prev_letter = is_up || is_lo;
            i++;
            continue;
        }
        if ((*p & 0x80) != 0) { /* other non-ASCII: unchanged, counts as a letter */
            if ((*p & 0xC0) == 0xC0) prev_letter = true;
            continue;
        }
        up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && !prev_letter) || (mode == 4 && islower(*p));
        *p = (unsigned char)(up ? toupper(*p) : tolower(*p));
        prev_letter = is_letter;
    }
    *out = muse_jv_str(r);
    return true;
}

bool muse_jsplit(struct jctx *c, struct jstr *s, struct jstr *sep, int64_t maxsplit, struct jv *out) {
    struct jlist *l = muse_jlist_new(c, 0);
    if (!l) return false;
    if (sep) {
        if (sep->len == 0) return muse_jerr(c, "empty separator");
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *p = (maxsplit < 0 || done < maxsplit) ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
            size_t end = p ? (size_t)(p - s->s) : s->len;
            struct jv part = muse_jv_strn(c, s->s + i, end - i);
            if (part.kind != JV_STR || !muse_jlist_push(c, l, part)) return false;
            if (!p) break;
            i = end + sep->len;
            done++;
        }
    } else {
        size_t i = 0, cl;
        int64_t done = 0;
        while (i < s->len) {
            while (i < s->len && muse_jis_space_at(s->s, s->len, i, &cl)) i += cl;
            if (i >= s->len) break;
            size_t st = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t keep;
                muse_jrstrip_len(s->s + st, s->len - st, &keep);
                struct jv part = muse_jv_strn(c, s->s + st, keep);
                if (part.kind != JV_STR || !muse_jlist_push(c, l, part)) return false;
                break;
            }
            while (i < s->len && !muse_jis_space_at(s->s, s->len, i, &cl)) i += cl;
            struct jv part = muse_jv_strn(c, s->s + st, i - st);
            if (part.kind != JV_STR || !muse_jlist_push(c, l, part)) return false;
            done++;
        }
    }
    return muse_jlist_value(c, l, out);
}

static bool affix(struct jctx *c, struct jstr *s, struct jv *arg, bool prefix, struct jv *out) {
    if (!arg) return muse_jerr(c, "%s() takes at least 1 argument", prefix ? "startswith" : "endswith");
    struct jv *cands = arg;
    size_t n = 1;
    if (arg->kind == JV_LIST && arg->u.l->tuple) {
        cands = arg->u.l->items;
        n = arg->u.l->n;
    }
    for (size_t i = 0; i < n; i++) {
        if (cands[i].kind != JV_STR)
            return muse_jerr(c, "%s first arg must be str or a tuple of str, not %s", prefix ? "startswith" : "endswith", muse_jv_type_name(cands[i]));
        struct jstr *a = cands[i].u.s;
        if (a->len <= s->len && !memcmp(prefix ? s->s : s->s + s->len - a->len, a->s, a->len)) {
            *out = muse_jv_bool(true);
            return true;
        }
    }
    *out = muse_jv_bool(false);
    return true;
}

static bool str_method(struct jctx *c, struct jstr *s, const char *name, struct jv *args, size_t n_args,
                       const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
#define ARG(i, nm) muse_jarg(args, n_args, kwnames, kwargs, n_kwargs, i, nm)
    struct jv *a0 = ARG(0, NULL);
    struct jstr *chars = NULL;
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (a0 && a0->kind != JV_NONE && !muse_jarg_str(c, a0, "strip chars", &chars)) return false;
        return muse_jstrip(c, s, chars, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3, out);
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        struct jv *sp = ARG(0, "sep"), *mx = ARG(1, "maxsplit");
        struct jstr *sep = NULL;
        if (sp && sp->kind != JV_NONE && !muse_jarg_str(c, sp, "separator", &sep)) return false;
        int64_t maxsplit = mx && mx->kind == JV_INT ? mx->u.i : -1;
        if (name[0] == 'r' && maxsplit >= 0) {
            /* rsplit with a limit: split fully, then re-join the leading parts */
            struct jv all;
            if (!muse_jsplit(c, s, sep, -1, &all)) return false;
            struct jlist *l = all.u.l;
            if (!sep) {
                /* whitespace rsplit: take up to maxsplit words from the right */
                struct jlist *r = muse_jlist_new(c, 0);
                if (!r) return false;
                size_t e = s->len;
                int64_t done = 0;
                struct jv words[64];
                size_t nw = 0;
                while (e > 0 && done < maxsplit && nw < 64) {
                    while (e > 0 && isspace((unsigned char)s->s[e - 1])) e--;
                    if (e == 0) break;
                    size_t b = e;
                    while (b > 0 && !isspace((unsigned char)s->s[b - 1])) b--;
                    words[nw] = muse_jv_strn(c, s->s + b, e - b);
                    if (words[nw++].kind != JV_STR) return false;
                    e = b;
                    done++;
                }
                while (e > 0 && isspace((unsigned char)s->s[e - 1])) e--;
                if (e > 0) {
                    struct jv head = muse_jv_strn(c, s->s, e);
                    if (head.kind != JV_STR || !muse_jlist_push(c, r, head)) return false;
                }
                while (nw > 0)
                    if (!muse_jlist_push(c, r, words[--nw])) return false;
                return muse_jlist_value(c, r, out);
            }
            if ((int64_t)l->n <= maxsplit + 1) {
                *out = all;
                return true;
            }
            size_t head = l->n - (size_t)maxsplit;
            struct jbuf b = {0};
            for (size_t i = 0; i < head; i++) {
                if (i) muse_jbuf_put(&b, sep->s, sep->len);
                muse_jbuf_put(&b, l->items[i].u.s->s, l->items[i].u.s->len);
            }
            struct jlist *r = muse_jlist_new(c, 0);
            struct jv first = muse_jv_strn(c, b.data ? b.data : "", b.len);
            muse_jbuf_free(&b);
            if (!r || first.kind != JV_STR || !muse_jlist_push(c, r, first)) return false;
            for (size_t i = head; i < l->n; i++)
                if (!muse_jlist_push(c, r, l->items[i])) return false;
            return muse_jlist_value(c, r, out);
        }
        return muse_jsplit(c, s, sep, maxsplit, out);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return affix(c, s, a0, name[0] == 's', out);
    if (!strcmp(name, "replace")) {
        struct jstr *o = NULL, *n = NULL;
        struct jv *cnt = ARG(2, "count");
        if (!muse_jarg_str(c, ARG(0, "old"), "replace() old", &o) || !muse_jarg_str(c, ARG(1, "new"), "replace() new", &n)) return false;
        return muse_jreplace(c, s, o, n, cnt && cnt->kind == JV_INT ? cnt->u.i : -1, out);
    }
    if (!strcmp(name, "lower")) return muse_jcase(c, s, 0, out);
    if (!strcmp(name, "upper")) return muse_jcase(c, s, 1, out);
    if (!strcmp(name, "capitalize")) {
        struct jv low;
        if (!muse_jcase(c, s, 0, &low)) return false;
        return muse_jcase(c, low.u.s, 2, out);
    }
    if (!strcmp(name, "title")) {
        struct jv low;
        if (!muse_jcase(c, s, 0, &low)) return false;
        return muse_jcase(c, low.u.s, 3, out);
    }
    if (!strcmp(name, "swapcase")) return muse_jcase(c, s, 4, out);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex") || !strcmp(name, "count")) {
        struct jstr *sub = NULL;
        if (!muse_jarg_str(c, a0, "substring", &sub)) return false;
        bool rev = name[0] == 'r';
        int64_t found = -1, count = 0;
        for (size_t i = 0; i + sub->len <= s->len; i++) {
            if (memcmp(s->s + i, sub->s, sub->len)) continue;
            if (found < 0 || rev) found = (int64_t)muse_jutf8_len(s->s, i);
            count++;
            if (!strcmp(name, "count") && sub->len) i += sub->len - 1;
            if (!rev && strcmp(name, "count")) break;
        }
        if (!strcmp(name, "count")) {
            *out = muse_jv_int(sub->len ? count : (int64_t)muse_jutf8_len(s->s, s->len) + 1);
            return true;
        }
        if (found < 0 && strstr(name, "index")) return muse_jerr(c, "substring not found");
        *out = muse_jv_int(found);
        return true;
    }
    if (!strcmp(name, "join")) {
        if (!a0) return muse_jerr(c, "join() takes exactly one argument");
        struct jlist *items;
        if (!muse_jv_iterate(c, *a0, &items)) return false;
        struct jbuf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (items->items[i].kind != JV_STR) {
                muse_jbuf_free(&b);
                return muse_jerr(c, "sequence item %zu: expected str instance, %s found", i, muse_jv_type_name(items->items[i]));
            }
            if (i) muse_jbuf_put(&b, s->s, s->len);
            muse_jbuf_put(&b, items->items[i].u.s->s, items->items[i].u.s->len);
        }
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        muse_jbuf_free(&b);
        return out->kind == JV_STR;
    }
    if (!strcmp(name, "splitlines")) {
        struct jlist *l = muse_jlist_new(c, 0);
        if (!l) return false;
        size_t st = 0;
        for (size_t i = 0; i < s->len; i++) {
            if (s->s[i] != '\n' && s->s[i] != '\r') continue;
            struct jv part = muse_jv_strn(c, s->s + st, i - st);
            if (part.kind != JV_STR || !muse_jlist_push(c, l, part)) return false;
            if (s->s[i] == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') i++;
            st = i + 1;
        }
        if (st < s->len) {
            struct jv part = muse_jv_strn(c, s->s + st, s->len - st);
            if (part.kind != JV_STR || !muse_jlist_push(c, l, part)) return false;
        }
        return muse_jlist_value(c, l, out);
    }
    if (!strncmp(name, "is", 2)) {
        bool all = s->len > 0, any_cased = false;
        for (size_t i = 0; i < s->len; i++) {
            unsigned char u = (unsigned char)s->s[i];
            bool ok;
            if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal") || !strcmp(name, "isnumeric")) ok = isdigit(u);
            else if (!strcmp(name, "isalpha")) ok = isalpha(u) || u >= 0x80;
            else if (!strcmp(name, "isalnum")) ok = isalnum(u) || u >= 0x80;
            else if (!strcmp(name, "isspace")) ok = isspace(u);
            else if (!strcmp(name, "islower")) { ok = !isupper(u); any_cased |= islower(u) != 0; }
            else if (!strcmp(name, "isupper")) { ok = !islower(u); any_cased |= isupper(u) != 0; }
            else return muse_jerr(c, "str.%s() is not supported", name);
            if (!ok) all = false;
        }
        if (!strcmp(name, "islower") || !strcmp(name, "isupper")) all = all && any_cased;
        *out = muse_jv_bool(all);
        return true;
    }
    return muse_jerr(c, "str.%s() is not supported", name);
#undef ARG
}

bool muse_jinja_call_method(struct jctx *c, struct jmethod *m, struct jv *args, size_t n_args,
                            const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    struct jv self = m->self;
    const char *name = m->name;
    if (self.kind == JV_STR) return str_method(c, self.u.s, name, args, n_args, kwnames, kwargs, n_kwargs, out);
    if (self.kind == JV_LOOP) {
        if (!n_args) return muse_jerr(c, "no items for cycling given");
        *out = args[self.u.loop->index0 % n_args];
        return true;
    }
    if (self.kind == JV_DICT) {
        struct jdict *d = self.u.d;
        if (!strcmp(name, "get")) {
            if (n_args < 1) return muse_jerr(c, "get expected at least 1 argument, got 0");
            struct jv *x = muse_jdict_get(d, args[0]);
            *out = x ? *x : n_args > 1 ? args[1] : muse_jv_none();
            return true;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            struct jlist *l = muse_jlist_new(c, d->n);
            if (!l) return false;
            for (size_t i = 0; i < d->n; i++) {
                if (name[0] == 'k') l->items[i] = d->keys[i];
                else if (name[0] == 'v') l->items[i] = d->vals[i];
                else {
                    struct jlist *pair = muse_jlist_new(c, 2);
                    if (!pair) return false;
                    pair->items[0] = d->keys[i];
                    pair->items[1] = d->vals[i];
                    pair->n = 2;
                    pair->tuple = true;
                    l->items[i].kind = JV_LIST;
                    l->items[i].u.l = pair;
                }
            }
            l->n = d->n;
            return muse_jlist_value(c, l, out);
        }
        if (!strcmp(name, "copy")) {
            struct jdict *n = muse_jdict_new(c, d->n);
            if (!n) return false;
            for (size_t i = 0; i < d->n; i++)
                if (!muse_jdict_set(c, n, d->keys[i], d->vals[i])) return false;
            out->kind = JV_DICT;
            out->u.d = n;
            return true;
        }
        return muse_jerr(c, "access to attribute '%s' of 'dict' object is unsafe.", name);
    }
    if (self.kind == JV_LIST) {
        struct jlist *l = self.u.l;
        if (!strcmp(name, "count") || !strcmp(name, "index")) {
            if (n_args < 1) return muse_jerr(c, "%s() takes exactly one argument", name);
            int64_t cnt = 0, idx = -1;
            for (size_t i = 0; i < l->n; i++)
                if (muse_jv_equal(l->items[i], args[0])) {
                    if (idx < 0) idx = (int64_t)i;
                    cnt++;
                }
            if (name[0] == 'i' && idx < 0) return muse_jerr(c, "list.index(x): x not in list");
            *out = muse_jv_int(name[0] == 'c' ? cnt : idx);
            return true;
        }
        if (!strcmp(name, "copy")) {
            struct jlist *n = muse_jlist_new(c, l->n);
            if (!n) return false;
            if (l->n) memcpy(n->items, l->items, l->n * sizeof(struct jv));
            n->n = l->n;
            return muse_jlist_value(c, n, out);
        }
        return muse_jerr(c, "access to attribute '%s' of 'list' object is unsafe.", name);
    }
    return muse_jerr(c, "'%s' object has no method '%s'", muse_jv_type_name(self), name);
}

/* ---- tests ---- */

bool muse_jinja_apply_test(struct jctx *c, const char *name, struct jv v, struct jv *args, size_t n_args,
                           bool *out) {
    struct jv *a0 = n_args ? &args[0] : NULL;
#define T(s) (!strcmp(name, s))
    if (T("defined")) *out = v.kind != JV_UNDEF;
    else if (T("undefined")) *out = v.kind == JV_UNDEF;
    else if (T("none")) *out = v.kind == JV_NONE;
    else if (T("string")) *out = v.kind == JV_STR;
    else if (T("mapping")) *out = v.kind == JV_DICT;
    else if (T("iterable")) *out = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
    else if (T("sequence")) *out = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
    else if (T("number")) *out = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
    else if (T("integer")) *out = v.kind == JV_INT;
    else if (T("float")) *out = v.kind == JV_FLOAT;
    else if (T("boolean")) *out = v.kind == JV_BOOL;
    else if (T("true")) *out = v.kind == JV_BOOL && v.u.b;
    else if (T("false")) *out = v.kind == JV_BOOL && !v.u.b;
    else if (T("callable")) *out = v.kind == JV_MACRO || v.kind == JV_BUILTIN || v.kind == JV_METHOD;
    else if (T("odd") || T("even") || T("divisibleby")) {
        if (v.kind != JV_INT && v.kind != JV_BOOL) return muse_jerr(c, "test '%s' needs an integer", name);
        int64_t x = v.kind == JV_INT ? v.u.i : v.u.b;
        if (T("divisibleby")) {
            if (!a0 || a0->kind != JV_INT || a0->u.i == 0) return muse_jerr(c, "divisibleby needs a non-zero integer");
            *out = x % a0->u.i == 0;
        } else {
            *out = ((x % 2) != 0) == T("odd");
        }
    } else if (T("lower") || T("upper")) {
        struct jv s, r;
        if (!muse_jv_stringify(c, v, &s) || !muse_jcase(c, s.u.s, T("lower") ? 0 : 1, &r)) return false;
        *out = muse_jv_equal(s, r);
    } else if (T("sameas")) {
        if (!a0) return muse_jerr(c, "sameas needs an argument");
        *out = (v.kind == a0->kind) && (v.kind == JV_NONE || v.kind == JV_UNDEF || muse_jv_equal(v, *a0)) &&
               !(v.kind == JV_LIST && v.u.l != a0->u.l) && !(v.kind == JV_DICT && v.u.d != a0->u.d);
    } else if (T("escaped")) {
        *out = false;
    } else {
        static const struct { const char *n; enum jop op; } cmp[] = {
            {"equalto", JOP_EQ}, {"eq", JOP_EQ}, {"==", JOP_EQ}, {"ne", JOP_NE}, {"!=", JOP_NE},
            {"lt", JOP_LT}, {"lessthan", JOP_LT}, {"<", JOP_LT}, {"le", JOP_LE}, {"<=", JOP_LE},
            {"gt", JOP_GT}, {"greaterthan", JOP_GT}, {">", JOP_GT}, {"ge", JOP_GE}, {">=", JOP_GE},
            {"in", JOP_IN}};
        for (size_t i = 0; i < sizeof(cmp) / sizeof(cmp[0]); i++) {
            if (strcmp(name, cmp[i].n)) continue;
            if (!a0) return muse_jerr(c, "test '%s' needs an argument", name);
            int r;
            switch (cmp[i].op) {
            case JOP_EQ: *out = muse_jv_equal(v, *a0); return true;
            case JOP_NE: *out = !muse_jv_equal(v, *a0); return true;
            case JOP_IN: {
                if (a0->kind == JV_STR && v.kind == JV_STR) {
                    *out = v.u.s->len == 0 || memmem(a0->u.s->s, a0->u.s->len, v.u.s->s, v.u.s->len);
                    return true;
                }
                if (a0->kind != JV_LIST && a0->kind != JV_DICT)
                    return muse_jerr(c, "argument of type '%s' is not iterable", muse_jv_type_name(*a0));
                struct jlist *items;
                if (!muse_jv_iterate(c, *a0, &items)) return false;
                *out = false;
                for (size_t k = 0; k < items->n; k++)
                    if (muse_jv_equal(v, items->items[k])) *out = true;
                return true;
            }
            default:
                if (!muse_jv_compare(c, v, *a0, &r)) return false;
                *out = cmp[i].op == JOP_LT ? r < 0 : cmp[i].op == JOP_LE ? r <= 0 : cmp[i].op == JOP_GT ? r > 0 : r >= 0;
                return true;
            }
        }
        return muse_jerr(c, "No test named '%s'.", name);
    }
#undef T
    return true;
}
