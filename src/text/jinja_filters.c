/*
 * jinja_filters.c - the jinja2 filters chat templates use, with jinja2 3.1 semantics
 * (case-insensitive sort/unique/dictsort by default, transformers' tojson, indent quirks).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_builtins.h"

#define ARG(i, nm) muse_jarg(args, n_args, kwnames, kwargs, n_kwargs, i, nm)

/* Follow a dotted attribute path ("function.name", "0") like jinja2's make_attrgetter. */
static bool attr_path(struct jctx *c, struct jv v, struct jstr *path, struct jv *out) {
    const char *p = path->s, *end = p + path->len;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++)
            if (p[i] < '0' || p[i] > '9') digits = false;
        struct jv key = digits ? muse_jv_int(strtoll(p, NULL, 10)) : muse_jv_strn(c, p, n);
        if (key.kind == JV_UNDEF) return false;
        if (!muse_jinja_getitem(c, v, key, &v)) return false;
        if (!dot) break;
        p = dot + 1;
    }
    *out = v;
    return true;
}

static bool to_str(struct jctx *c, struct jv v, struct jstr **out) {
    struct jv s;
    if (!muse_jv_stringify(c, v, &s)) return false;
    *out = s.u.s;
    return true;
}

/* select/reject/selectattr/rejectattr. */
static bool select_filter(struct jctx *c, struct jv v, bool attr, bool keep, struct jv *args,
                          size_t n_args, struct jv *out) {
    struct jlist *items;
    if (!muse_jv_truthy(v)) v = muse_jv_undef(NULL); /* jinja2: `if value: for item in value` */
    if (!muse_jv_iterate(c, v, &items)) return false;
    size_t ai = 0;
    struct jstr *path = NULL;
    if (attr) {
        if (n_args < 1 || !muse_jarg_str(c, &args[0], "attribute name", &path)) return false;
        ai = 1;
    }
    const char *test = NULL;
    if (ai < n_args) {
        if (args[ai].kind != JV_STR) return muse_jerr(c, "test name must be a string");
        test = args[ai].u.s->s;
        ai++;
    }
    struct jlist *r = muse_jlist_new(c, 0);
    if (!r) return false;
    for (size_t i = 0; i < items->n; i++) {
        struct jv x = items->items[i];
        if (path && !attr_path(c, x, path, &x)) return false;
        bool ok;
        if (test) {
            if (!muse_jinja_apply_test(c, test, x, args + ai, n_args - ai, &ok)) return false;
        } else {
            ok = muse_jv_truthy(x);
        }
        if (ok == keep && !muse_jlist_push(c, r, items->items[i])) return false;
    }
    r->gen = true;
    return muse_jlist_value(c, r, out);
}

/* Sort key comparison: strings compared lower-cased unless case_sensitive. */
static bool key_cmp(struct jctx *c, struct jv a, struct jv b, bool cs, int *r) {
    if (!cs && a.kind == JV_STR && b.kind == JV_STR) {
        struct jv la, lb;
        if (!muse_jcase(c, a.u.s, 0, &la) || !muse_jcase(c, b.u.s, 0, &lb)) return false;
        return muse_jv_compare(c, la, lb, r);
    }
    return muse_jv_compare(c, a, b, r);
}

/* Stable insertion sort of items by keys. */
static bool sort_items(struct jctx *c, struct jv *items, struct jv *keys, size_t n, bool cs, bool rev) {
    for (size_t i = 1; i < n; i++) {
        struct jv it = items[i], k = keys[i];
        size_t j = i;
        while (j > 0) {
            int r;
            if (!key_cmp(c, keys[j - 1], k, cs, &r)) return false;
            if (rev ? r >= 0 : r <= 0) break;
            items[j] = items[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        items[j] = it;
        keys[j] = k;
    }
    return true;
}

static bool copy_list(struct jctx *c, struct jlist *src, struct jlist **out) {
    struct jlist *l = muse_jlist_new(c, src->n);
    if (!l) return false;
    if (src->n) memcpy(l->items, src->items, src->n * sizeof(struct jv));
    l->n = src->n;
    *out = l;
    return true;
}

static bool f_tojson(struct jctx *c, struct jv v, struct jv *args, size_t n_args,
                     const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    struct jjson_opts o = {.item_sep = ", ", .key_sep = ": "};
    struct jv *ea = ARG(0, "ensure_ascii"), *ind = ARG(1, "indent"), *sep = ARG(2, "separators"),
              *sk = ARG(3, "sort_keys");
    char spaces[64];
    if (ea) o.ensure_ascii = muse_jv_truthy(*ea);
    if (sk) o.sort_keys = muse_jv_truthy(*sk);
    if (ind && ind->kind != JV_NONE) {
        if (ind->kind == JV_INT) {
            int64_t k = ind->u.i < 0 ? 0 : ind->u.i > 63 ? 63 : ind->u.i;
            memset(spaces, ' ', (size_t)k);
            spaces[k] = '\0';
            o.indent = spaces;
        } else if (ind->kind == JV_STR) {
            o.indent = ind->u.s->s;
        } else {
            return muse_jerr(c, "tojson indent must be an int or a string");
        }
        o.item_sep = ",";
    }
    if (sep && sep->kind != JV_NONE) {
        if (sep->kind != JV_LIST || sep->u.l->n != 2 || sep->u.l->items[0].kind != JV_STR ||
            sep->u.l->items[1].kind != JV_STR)
            return muse_jerr(c, "tojson separators must be a pair of strings");
        o.item_sep = sep->u.l->items[0].u.s->s;
        o.key_sep = sep->u.l->items[1].u.s->s;
    }
    struct jbuf b = {0};
    bool ok = muse_jv_to_json(c, v, &o, &b);
    if (ok) {
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        ok = out->kind == JV_STR;
    }
    muse_jbuf_free(&b);
    return ok;
}

static bool f_indent(struct jctx *c, struct jv v, struct jv *args, size_t n_args,
                     const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    struct jstr *s;
    if (!to_str(c, v, &s)) return false;
    struct jv *w = ARG(0, "width"), *first = ARG(1, "first"), *blank = ARG(2, "blank");
    char ind[256];
    if (w && w->kind == JV_STR) {
        snprintf(ind, sizeof(ind), "%s", w->u.s->s);
    } else {
        int64_t k = w && w->kind == JV_INT ? w->u.i : 4;
        if (k < 0) k = 0;
        if (k > 255) k = 255;
        memset(ind, ' ', (size_t)k);
        ind[k] = '\0';
    }
    size_t il = strlen(ind);
    bool do_blank = blank && muse_jv_truthy(*blank);
    /* Python: lines = (s + "\n").splitlines(); the first line is never indented, empty lines
     * only with blank=True */
    struct jbuf b = {0};
    size_t st = 0, line_no = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->s[i] != '\n' && s->s[i] != '\r') continue;
        size_t ln = i - st;
        if (line_no > 0) {
            muse_jbuf_putc(&b, '\n');
            if (ln > 0 || do_blank) muse_jbuf_put(&b, ind, il);
        }
        muse_jbuf_put(&b, s->s + st, ln);
        line_no++;
        if (s->s[i] == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') i++;
        st = i + 1;
    }
    /* the last line, terminated by the appended "\n" */
    {
        size_t ln = s->len - st;
        if (line_no > 0) {
            muse_jbuf_putc(&b, '\n');
            if (ln > 0 || do_blank) muse_jbuf_put(&b, ind, il);
        }
        muse_jbuf_put(&b, s->s + st, ln);
    }
    struct jbuf r = {0};
    if (first && muse_jv_truthy(*first)) muse_jbuf_put(&r, ind, il);
    muse_jbuf_put(&r, b.data ? b.data : "", b.len);
    muse_jbuf_free(&b);
    *out = muse_jv_strn(c, r.data ? r.data : "", r.len);
    muse_jbuf_free(&r);
    return out->kind == JV_STR;
}

static bool num_of(struct jv v, double *d) {
    if (v.kind == JV_INT) *d = (double)v.u.i;
    else if (v.kind == JV_FLOAT) *d = v.u.f;
    else if (v.kind == JV_BOOL) *d = v.u.b;
    else return false;
    return true;
}

bool muse_jinja_apply_filter(struct jctx *c, const char *name, struct jv v, struct jv *args,
                             size_t n_args, const char **kwnames, struct jv *kwargs, size_t n_kwargs,
                             struct jv *out) {
#define F(s) (!strcmp(name, s))
    if (F("tojson")) return f_tojson(c, v, args, n_args, kwnames, kwargs, n_kwargs, out);
    if (F("safe") || F("e") || F("escape") || F("forceescape")) {
        struct jstr *s = NULL;
        if (v.kind == JV_STR && (JV_SAFE(v) || F("safe"))) {
            *out = v;
            out->safe = true;
            return true;
        }
        if (!to_str(c, v, &s)) return false;
        struct jbuf b = {0};
        if (F("safe")) muse_jbuf_put(&b, s->s, s->len);
        else muse_jhtml_escape(&b, s->s, s->len);
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        muse_jbuf_free(&b);
        out->safe = true;
        return out->kind == JV_STR;
    }
    if (F("length") || F("count")) {
        switch (v.kind) {
        case JV_STR: *out = muse_jv_int((int64_t)muse_jutf8_len(v.u.s->s, v.u.s->len)); return true;
        case JV_LIST:
            if (v.u.l->gen) return muse_jerr(c, "object of type 'generator' has no len()");
            *out = muse_jv_int((int64_t)v.u.l->n);
            return true;
        case JV_DICT: *out = muse_jv_int((int64_t)v.u.d->n); return true;
        case JV_UNDEF: *out = muse_jv_int(0); return true;
        default: return muse_jerr(c, "object of type '%s' has no len()", muse_jv_type_name(v));
        }
    }
    if (F("string")) {
        if (!muse_jv_stringify(c, v, out)) return false;
        out->safe = JV_SAFE(v);
        return true;
    }
    if (F("trim")) {
        struct jstr *s, *chars = NULL;
        struct jv *ch = ARG(0, "chars");
        if (!to_str(c, v, &s)) return false;
        if (ch && ch->kind != JV_NONE && !muse_jarg_str(c, ch, "trim chars", &chars)) return false;
        return muse_jstrip(c, s, chars, 3, out);
    }
    if (F("lower") || F("upper") || F("capitalize") || F("title")) {
        struct jstr *s = NULL;
        if (!to_str(c, v, &s)) return false;
        if (F("lower")) return muse_jcase(c, s, 0, out);
        if (F("upper")) return muse_jcase(c, s, 1, out);
        struct jv low;
        if (!muse_jcase(c, s, 0, &low)) return false;
        return muse_jcase(c, low.u.s, F("capitalize") ? 2 : 3, out);
    }
    if (F("replace")) {
        struct jstr *s = NULL, *o = NULL, *n = NULL;
        struct jv *cnt = ARG(2, "count");
        if (!to_str(c, v, &s) || !muse_jarg_str(c, ARG(0, "old"), "replace old", &o) ||
            !muse_jarg_str(c, ARG(1, "new"), "replace new", &n))
            return false;
        return muse_jreplace(c, s, o, n, cnt && cnt->kind == JV_INT ? cnt->u.i : -1, out);
    }
    if (F("items")) {
        if (v.kind == JV_UNDEF) {
            struct jlist *l = muse_jlist_new(c, 0);
            return l && muse_jlist_value(c, l, out);
        }
        if (v.kind != JV_DICT) return muse_jerr(c, "Can only get item pairs from a mapping.");
        struct jmethod m = {.self = v, .name = "items"};
        if (!muse_jinja_call_method(c, &m, NULL, 0, NULL, NULL, 0, out)) return false;
        out->u.l->gen = true;
        return true;
    }
    if (F("list")) {
        struct jlist *items, *l;
        if (!muse_jv_iterate(c, v, &items) || !copy_list(c, items, &l)) return false;
        return muse_jlist_value(c, l, out);
    }
    if (F("join")) {
        struct jlist *items;
        struct jv *sep = ARG(0, "d"), *attr = ARG(1, "attribute");
        struct jstr *sp = NULL;
        if (!muse_jv_iterate(c, v, &items)) return false;
        if (sep && !to_str(c, *sep, &sp)) return false;
        struct jbuf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            struct jv x = items->items[i];
            if (attr && (attr->kind != JV_STR || !attr_path(c, x, attr->u.s, &x))) {
                muse_jbuf_free(&b);
                return c->failed ? false : muse_jerr(c, "join attribute must be a string");
            }
            if (i && sp) muse_jbuf_put(&b, sp->s, sp->len);
            if (!muse_jv_to_str(c, x, &b)) {
                muse_jbuf_free(&b);
                return false;
            }
        }
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        muse_jbuf_free(&b);
        return out->kind == JV_STR;
    }
    if (F("default") || F("d")) {
        struct jv *dv = ARG(0, "default_value"), *bo = ARG(1, "boolean");
        bool use = v.kind == JV_UNDEF || (bo && muse_jv_truthy(*bo) && !muse_jv_truthy(v));
        if (use) *out = dv ? *dv : muse_jv_strn(c, "", 0);
        else *out = v;
        return true;
    }
    if (F("selectattr") || F("rejectattr") || F("select") || F("reject")) {
        if (n_kwargs) return muse_jerr(c, "filter '%s' takes no keyword arguments", name);
        return select_filter(c, v, strstr(name, "attr") != NULL, name[0] == 's', args, n_args, out);
    }
    if (F("map")) {
        struct jlist *items;
        if (!muse_jv_truthy(v)) v = muse_jv_undef(NULL);
        if (!muse_jv_iterate(c, v, &items)) return false;
        struct jlist *r = muse_jlist_new(c, items->n);
        if (!r) return false;
        struct jv *attr = muse_jarg(NULL, 0, kwnames, kwargs, n_kwargs, 0, "attribute");
        struct jv *dflt = muse_jarg(NULL, 0, kwnames, kwargs, n_kwargs, 0, "default");
        if (!attr && (n_args < 1 || args[0].kind != JV_STR)) return muse_jerr(c, "map requires a filter name or attribute=");
        for (size_t i = 0; i < items->n; i++) {
            struct jv x = items->items[i];
            if (attr) {
                if (attr->kind != JV_STR) return muse_jerr(c, "map attribute must be a string");
                if (!attr_path(c, x, attr->u.s, &x)) return false;
                if (x.kind == JV_UNDEF && dflt) x = *dflt;
            } else if (!muse_jinja_apply_filter(c, args[0].u.s->s, x, args + 1, n_args - 1, NULL, NULL, 0, &x)) {
                return false;
            }
            r->items[r->n++] = x;
        }
        r->gen = true;
        return muse_jlist_value(c, r, out);
    }
    if (F("sort") || F("unique") || F("dictsort")) {
        bool dsort = F("dictsort");
        struct jv *rev = dsort ? ARG(2, "reverse") : ARG(0, "reverse");
        struct jv *cs = dsort ? ARG(0, "case_sensitive") : ARG(F("unique") ? 0 : 1, "case_sensitive");
        struct jv *attr = dsort ? NULL : ARG(F("unique") ? 1 : 2, "attribute");
        struct jv *by = dsort ? ARG(1, "by") : NULL;
        if (F("unique")) rev = NULL;
        struct jlist *items, *l;
        if (dsort) {
            if (v.kind != JV_DICT) return muse_jerr(c, "You can only sort by either \"key\" or \"value\" of a mapping");
            struct jmethod m = {.self = v, .name = "items"};
            struct jv it;
            if (!muse_jinja_call_method(c, &m, NULL, 0, NULL, NULL, 0, &it)) return false;
            l = it.u.l;
        } else {
            if (!muse_jv_iterate(c, v, &items) || !copy_list(c, items, &l)) return false;
        }
        struct jv *keys = muse_jarena_alloc(&c->arena, (l->n ? l->n : 1) * sizeof(struct jv));
        if (!keys) return muse_jerr(c, "out of memory");
        for (size_t i = 0; i < l->n; i++) {
            keys[i] = l->items[i];
            if (dsort) keys[i] = l->items[i].u.l->items[by && muse_jv_is_str(*by, "value") ? 1 : 0];
            else if (attr && attr->kind == JV_STR && !attr_path(c, keys[i], attr->u.s, &keys[i])) return false;
        }
        bool case_s = cs && muse_jv_truthy(*cs);
        if (F("unique")) {
            struct jlist *r = muse_jlist_new(c, 0);
            if (!r) return false;
            for (size_t i = 0; i < l->n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++) {
                    if (!case_s && keys[i].kind == JV_STR && keys[j].kind == JV_STR) {
                        int rr;
                        if (!key_cmp(c, keys[i], keys[j], false, &rr)) return false;
                        seen = rr == 0;
                    } else {
                        seen = muse_jv_equal(keys[i], keys[j]);
                    }
                }
                if (!seen && !muse_jlist_push(c, r, l->items[i])) return false;
            }
            r->gen = true;
            return muse_jlist_value(c, r, out);
        }
        if (!sort_items(c, l->items, keys, l->n, case_s, rev && muse_jv_truthy(*rev))) return false;
        return muse_jlist_value(c, l, out);
    }
    if (F("first") || F("last")) {
        struct jlist *items;
        if (!muse_jv_iterate(c, v, &items)) return false;
        if (!items->n) *out = muse_jv_undef(NULL);
        else *out = items->items[F("first") ? 0 : items->n - 1];
        return true;
    }
    if (F("reverse")) {
        struct jlist *items, *l;
        if (!muse_jv_iterate(c, v, &items) || !(l = muse_jlist_new(c, items->n))) return false;
        for (size_t i = 0; i < items->n; i++) l->items[i] = items->items[items->n - 1 - i];
        l->n = items->n;
        l->gen = v.kind != JV_STR;
        if (v.kind == JV_STR) {
            struct jbuf b = {0};
            for (size_t i = 0; i < l->n; i++) muse_jbuf_put(&b, l->items[i].u.s->s, l->items[i].u.s->len);
            *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
            muse_jbuf_free(&b);
            return out->kind == JV_STR;
        }
        return muse_jlist_value(c, l, out);
    }
    if (F("min") || F("max")) {
        struct jlist *items;
        if (!muse_jv_iterate(c, v, &items)) return false;
        if (!items->n) {
            *out = muse_jv_undef(NULL);
            return true;
        }
        struct jv *cs = ARG(0, "case_sensitive");
        size_t best = 0;
        for (size_t i = 1; i < items->n; i++) {
            int r;
            if (!key_cmp(c, items->items[i], items->items[best], cs && muse_jv_truthy(*cs), &r)) return false;
            if (F("min") ? r < 0 : r > 0) best = i;
        }
        *out = items->items[best];
        return true;
    }
    if (F("sum")) {
        struct jlist *items;
        struct jv *attr = ARG(0, "attribute"), *start = ARG(1, "start");
        if (!muse_jv_iterate(c, v, &items)) return false;
        double fs = 0;
        int64_t is = 0;
        bool fl = false;
        if (start && !num_of(*start, &fs)) return muse_jerr(c, "sum start must be a number");
        if (start && start->kind == JV_INT) is = start->u.i;
        if (start && start->kind == JV_FLOAT) fl = true;
        for (size_t i = 0; i < items->n; i++) {
            struct jv x = items->items[i];
            double d;
            if (attr && attr->kind == JV_STR && !attr_path(c, x, attr->u.s, &x)) return false;
            if (!num_of(x, &d)) return muse_jerr(c, "unsupported operand type(s) for +: 'int' and '%s'", muse_jv_type_name(x));
            if (x.kind == JV_FLOAT) fl = true;
            fs += d;
            is += x.kind == JV_INT ? x.u.i : x.kind == JV_BOOL ? x.u.b : 0;
        }
        *out = fl ? muse_jv_float(fs) : muse_jv_int(is);
        return true;
    }
    if (F("abs")) {
        if (v.kind == JV_INT) *out = muse_jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else if (v.kind == JV_FLOAT) *out = muse_jv_float(fabs(v.u.f));
        else if (v.kind == JV_BOOL) *out = muse_jv_int(v.u.b);
        else return muse_jerr(c, "bad operand type for abs(): '%s'", muse_jv_type_name(v));
        return true;
    }
    if (F("int")) {
        struct jv *dflt = ARG(0, "default");
        *out = dflt ? *dflt : muse_jv_int(0);
        if (v.kind == JV_INT) *out = v;
        else if (v.kind == JV_BOOL) *out = muse_jv_int(v.u.b);
        else if (v.kind == JV_FLOAT && isfinite(v.u.f)) *out = muse_jv_int((int64_t)v.u.f);
        else if (v.kind == JV_STR) {
            char *end;
            struct jv t;
            if (!muse_jstrip(c, v.u.s, NULL, 3, &t)) return false;
            long long x = strtoll(t.u.s->s, &end, 10);
            if (t.u.s->len && *end == '\0') *out = muse_jv_int(x);
            else {
                double d = strtod(t.u.s->s, &end);
                if (t.u.s->len && *end == '\0' && isfinite(d)) *out = muse_jv_int((int64_t)d);
            }
        }
        return true;
    }
    if (F("float")) {
        struct jv *dflt = ARG(0, "default");
        *out = dflt ? *dflt : muse_jv_float(0.0);
        double d;
        if (num_of(v, &d)) *out = muse_jv_float(d);
        else if (v.kind == JV_STR) {
            char *end;
            d = strtod(v.u.s->s, &end);
            if (v.u.s->len && *end == '\0') *out = muse_jv_float(d);
        }
        return true;
    }
    if (F("round")) {
        struct jv *prec = ARG(0, "precision"), *meth = ARG(1, "method");
        double d, p = prec && prec->kind == JV_INT ? pow(10, (double)prec->u.i) : 1;
        if (!num_of(v, &d)) return muse_jerr(c, "round needs a number");
        double x = d * p;
        if (meth && muse_jv_is_str(*meth, "floor")) x = floor(x);
        else if (meth && muse_jv_is_str(*meth, "ceil")) x = ceil(x);
        else {
            double r = nearbyint(x); /* banker's rounding like Python's round() */
            x = r;
        }
        *out = muse_jv_float(x / p);
        return true;
    }
    if (F("attr")) {
        struct jstr *nm = NULL;
        if (!muse_jarg_str(c, ARG(0, "name"), "attribute name", &nm)) return false;
        return muse_jinja_getattr(c, v, nm->s, nm->len, out);
    }
    if (F("format")) {
        struct jstr *s = NULL;
        if (!to_str(c, v, &s)) return false;
        struct jlist *tup = muse_jlist_new(c, n_args);
        if (!tup) return false;
        for (size_t i = 0; i < n_args; i++) tup->items[i] = args[i];
        tup->n = n_args;
        tup->tuple = true;
        /* reuse the % operator through a tiny expression-free path */
        struct jv fmt = muse_jv_str(s), targ = {.kind = JV_LIST};
        targ.u.l = tup;
        return muse_jinja_percent_format(c, fmt, targ, out);
    }
    if (F("wordcount")) {
        struct jstr *s = NULL;
        struct jv parts;
        if (!to_str(c, v, &s) || !muse_jsplit(c, s, NULL, -1, &parts)) return false;
        *out = muse_jv_int((int64_t)parts.u.l->n);
        return true;
    }
    if (F("center")) {
        struct jstr *s = NULL;
        if (!to_str(c, v, &s)) return false;
        struct jv *w = ARG(0, "width");
        int64_t width = w && w->kind == JV_INT ? w->u.i : 80;
        int64_t len = (int64_t)muse_jutf8_len(s->s, s->len);
        if (len >= width) {
            *out = muse_jv_str(s);
            return true;
        }
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        struct jbuf b = {0};
        for (int64_t i = 0; i < left; i++) muse_jbuf_putc(&b, ' ');
        muse_jbuf_put(&b, s->s, s->len);
        for (int64_t i = 0; i < pad - left; i++) muse_jbuf_putc(&b, ' ');
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        muse_jbuf_free(&b);
        return out->kind == JV_STR;
    }
    if (F("indent")) return f_indent(c, v, args, n_args, kwnames, kwargs, n_kwargs, out);
#undef F
    return muse_jerr(c, "No filter named '%s'.", name);
}
