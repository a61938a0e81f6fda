/*
 * jinja_eval.c - the interpreter: scopes, statements (if/for/set/macro/filter blocks,
 * break/continue), expressions with Python semantics, macro calls, resource limits, and the
 * public muse_jinja_parse / muse_jinja_render / muse_jinja_free.
 *
 * The contracts every function below keeps (jinja_builtins.c and jinja_filters.c keep them too):
 *
 * Memory. A render owns one arena (c->arena, jinja_impl.h) and everything it creates lives
 * there: strings, lists, dicts, namespaces, scopes and their variables, macros, loop objects,
 * argument arrays. Nothing is freed one by one and nothing is refcounted: muse_jinja_render
 * frees the whole arena when it returns, so a value is valid from its creation to the end of
 * the render, wherever it has been stored. The parsed template (c->t, its own arena) is only
 * read; values may point into it (scope variable names are AST strings) since it outlives every
 * render. The context JSON is copied in (muse_jv_from_json) and not referenced afterwards.
 * Temporary text is built in malloc'd struct jbuf buffers owned by the function that declares
 * them, which frees them on every path (muse_jbuf_free) after copying the result into the
 * arena (muse_jv_strn); the render's output buffer is the one jbuf that survives: it becomes
 * the caller's *out.
 *
 * Values. A struct jv is a small tagged union passed and copied by value; copies are shallow
 * (a list, dict or string is shared, as Python shares objects). Sharing is safe because values
 * are immutable once built (the sandbox refuses list.append and the like), with one exception
 * that jinja2 has too: a namespace's dict, changed by {% set ns.attr = v %} and seen by every
 * holder. A missing name evaluates to an UNDEF value carrying the name, jinja2's default
 * Undefined: printing it gives "", it is false, iterating it gives nothing, `is defined` tests
 * it, and arithmetic, an ordering comparison, a call or an attribute / item access on it is the
 * error "'name' is undefined".
 *
 * Errors. Every evaluating function returns bool: true = done (*out set), false = the render
 * failed and must unwind. The error itself is recorded once, at the point of failure, by
 * muse_jerr: it writes "line L, column C: message" into c->err, the position of c->cur, and
 * sets c->failed; later calls to muse_jerr are no-ops (the first error wins), so callers just
 * return false without adding to it. c->cur is the node being evaluated: eval and exec_stmt set
 * it on entry and eval restores its caller's on success only, so a failure reports the
 * innermost failing node; a caller that evaluates operands first and then fails in its own
 * operation sets c->cur = n again so the error points at the operator, not at an operand.
 * raise_exception() is an ordinary error whose message is kept verbatim after the prefix
 * (muse_jinja_error_message strips it). eval returns false when c->failed is set even if a
 * helper returned true. A false return with no error recorded means a malloc failed (a jbuf)
 * or the arena refused: muse_jinja_render turns it into MUSE_ERR_NOMEM, or into
 * MUSE_ERR_TEMPLATE "render memory limit exceeded" when the arena hit its limit. Values left in
 * *out by a failing call are unspecified; nothing needs freeing on the way out (the arena goes
 * in one piece).
 *
 * Control flow. break and continue are not errors: they travel up as *flow (JF_BREAK /
 * JF_CONTINUE), exec_body stops the current body when it sees one and the innermost exec_for
 * consumes it; c->loop_depth tells whether one is allowed (a macro body starts at 0: a break in
 * it never reaches the loop of its caller).
 *
 * Limits (struct muse_jinja_limits, defaults set by muse_jinja_render). c->depth counts nested
 * macro calls (at most max_depth), nested expression evaluations (at most max_depth + 100, so
 * an expression inside the deepest macro still has room) and repr() nesting; tojson's nesting
 * is bounded by max_depth on its own. c->iterations counts every loop iteration of the render,
 * loop-filter tests included, against max_iterations, which also bounds the length of a list
 * repetition or a range(). c->output_total counts every byte emitted into any buffer (the
 * output, captured {% set %} / {% filter %} blocks, macro bodies) against max_output, which
 * also bounds string repetition. The arena's limit is max_memory. Each limit is a clean
 * MUSE_ERR_TEMPLATE error, never a crash or a truncated output.
 *
 * Threads. A render reads the template and writes only its own struct jctx (on the stack of
 * muse_jinja_render) and arena: any number of renders of one template may run at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_builtins.h"

static bool eval(struct jctx *c, struct jscope *sc, struct jnode *n, struct jv *out);
static bool exec_body(struct jctx *c, struct jscope *sc, struct jnode **kids, size_t n,
                      struct jbuf *out, enum jflow *flow);

/* ---- scopes ----
 *
 * A scope is a list of (name, value) bindings in the arena with a parent pointer: lookups walk
 * outwards to the globals (the context variables), then to the builtin globals. Child scopes
 * are made by for loops (one per loop, emptied at each iteration), macro calls (whose parent is
 * the scope the macro was defined in: a closure) and filter chains (the "" placeholder). No
 * scope is freed while the render runs, so a macro can keep its defining scope (it sees that
 * scope's bindings at call time: a loop's, emptied at each iteration, holds the current ones).
 */

/* A new empty scope over parent (NULL for the globals); NULL after recording the error. */
static struct jscope *scope_new(struct jctx *c, struct jscope *parent) {
    struct jscope *s = muse_jarena_alloc(&c->arena, sizeof(*s));
    if (!s) {
        muse_jerr(c, "out of memory");
        return NULL;
    }
    s->parent = parent;
    return s;
}

/* The binding of name (len bytes, need not be NUL-terminated) in s itself, not its parents; or NULL. */
static struct jscope_var *scope_find(struct jscope *s, const char *name, size_t len) {
    for (struct jscope_var *v = s->vars; v; v = v->next)
        if (v->len == len && memcmp(v->name, name, len) == 0) return v;
    return NULL;
}

/*
 * Bind name to val in s itself, replacing an existing binding of s in place. Never writes to a
 * parent: an assignment in a loop or macro body stays there (jinja2's scoping; a namespace is
 * the way out). name is borrowed and must live for the render: an AST string of the template
 * or an arena string.
 */
static bool scope_set(struct jctx *c, struct jscope *s, const char *name, size_t len, struct jv val) {
    struct jscope_var *v = scope_find(s, name, len);
    if (!v) {
        v = muse_jarena_alloc(&c->arena, sizeof(*v));
        if (!v) return muse_jerr(c, "out of memory");
        v->name = name;
        v->len = len;
        v->next = s->vars;
        s->vars = v;
    }
    v->val = val;
    return true;
}

/* The builtin globals, found after every scope (a variable of the same name hides them). */
static const struct {
    const char *name;
    int id;
} builtins[] = {
    {"range", JB_RANGE}, {"namespace", JB_NAMESPACE}, {"raise_exception", JB_RAISE},
    {"strftime_now", JB_STRFTIME}, {"dict", JB_DICT},
};

/*
 * The value of name as seen from sc: the innermost binding, else a builtin global, else an
 * UNDEF value carrying the name (not an error by itself). False only when out of memory.
 */
static bool lookup(struct jctx *c, struct jscope *sc, const char *name, size_t len, struct jv *out) {
    for (struct jscope *s = sc; s; s = s->parent) {
        struct jscope_var *v = scope_find(s, name, len);
        if (v) {
            *out = v->val;
            return true;
        }
    }
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        if (strlen(builtins[i].name) == len && !memcmp(builtins[i].name, name, len)) {
            out->kind = JV_BUILTIN;
            out->u.builtin = builtins[i].id;
            return true;
        }
    }
    struct jstr *s = muse_jstr_new(c, name, len);
    if (!s) return false;
    *out = muse_jv_undef(s);
    return true;
}

/* ---- output ---- */

/* Append n bytes of rendered text to b; every emitted byte of the render counts against max_output. */
static bool emit(struct jctx *c, struct jbuf *b, const char *s, size_t n) {
    c->output_total += n;
    if (c->output_total > c->lim.max_output)
        return muse_jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output);
    if (!muse_jbuf_put(b, s, n)) return muse_jerr(c, "out of memory");
    return true;
}

/* Append str(v) to b (undefined -> nothing), through emit. */
static bool emit_value(struct jctx *c, struct jbuf *b, struct jv v) {
    if (v.kind == JV_STR) return emit(c, b, v.u.s->s, v.u.s->len);
    struct jbuf tmp = {0};
    bool ok = muse_jv_to_str(c, v, &tmp);
    if (ok) ok = emit(c, b, tmp.data ? tmp.data : "", tmp.len);
    else if (!c->failed) muse_jerr(c, "out of memory");
    muse_jbuf_free(&tmp);
    return ok;
}

/* ---- expressions ---- */

/* `a % b`: a is a string (the callers check), b a tuple of arguments or a single one (jinja_builtins.h). */
bool muse_jinja_percent_format(struct jctx *c, struct jv a, struct jv b, struct jv *out) {
    {
        /* printf-style formatting: %s %d %i %r %% */
        struct jlist *args = NULL;
        if (b.kind == JV_LIST && b.u.l->tuple) {
            args = b.u.l;
        } else {
            args = muse_jlist_new(c, 1);
            if (!args || !muse_jlist_push(c, args, b)) return false;
        }
        struct jbuf tmp = {0};
        size_t ai = 0;
        const char *s = a.u.s->s;
        for (size_t i = 0; i < a.u.s->len; i++) {
            if (s[i] != '%') {
                muse_jbuf_putc(&tmp, s[i]);
                continue;
            }
            char f = i + 1 < a.u.s->len ? s[++i] : 0;
            if (f == '%') {
                muse_jbuf_putc(&tmp, '%');
                continue;
            }
            if (ai >= args->n) {
                muse_jbuf_free(&tmp);
                return muse_jerr(c, "not enough arguments for format string");
            }
            struct jv v = args->items[ai++];
            bool ok = f == 'r' ? muse_jv_repr(c, v, &tmp) : f == 'd' || f == 'i'
                      ? (v.kind == JV_INT || v.kind == JV_BOOL ? muse_jbuf_printf(&tmp, "%lld", (long long)(v.kind == JV_INT ? v.u.i : v.u.b))
                         : v.kind == JV_FLOAT ? muse_jbuf_printf(&tmp, "%lld", (long long)v.u.f) : muse_jerr(c, "%%d format: a real number is required"))
                      : f == 's' ? muse_jv_to_str(c, v, &tmp) : muse_jerr(c, "unsupported format character '%c'", f);
            if (!ok) {
                muse_jbuf_free(&tmp);
                return false;
            }
        }
        *out = muse_jv_strn(c, tmp.data ? tmp.data : "", tmp.len);
        muse_jbuf_free(&tmp);
        return out->kind == JV_STR;
    }
}


/* Record the error for using an undefined value, naming it when it has a name; returns false. */
static bool undefined_error(struct jctx *c, struct jv v) {
    if (v.u.s) return muse_jerr(c, "'%s' is undefined", v.u.s->s);
    return muse_jerr(c, "undefined value used");
}

/*
 * a op b for the arithmetic operators, with Python's results: int/float/bool numbers (ints wrap
 * at 64 bits where Python's would grow; // and % floor), str + str (Markup + str escapes the
 * plain side), list + list, str * int and list * int (bounded by max_output / max_iterations),
 * and str % args. The operands are not modified; *out is a new arena value or a number.
 * Errors: an undefined operand, unsupported operand types, division by zero, overflow of
 * INT64_MIN // -1, a repetition over the limits.
 */
static bool arith(struct jctx *c, enum jop op, struct jv a, struct jv b, struct jv *out) {
    if (a.kind == JV_UNDEF) return undefined_error(c, a);
    if (b.kind == JV_UNDEF) return undefined_error(c, b);
    bool an = a.kind == JV_INT || a.kind == JV_FLOAT || a.kind == JV_BOOL;
    bool bn = b.kind == JV_INT || b.kind == JV_FLOAT || b.kind == JV_BOOL;
    if (an && bn) {
        bool fl = a.kind == JV_FLOAT || b.kind == JV_FLOAT;
        double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
        double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
        int64_t xi = a.kind == JV_INT ? a.u.i : a.kind == JV_BOOL ? a.u.b : 0;
        int64_t yi = b.kind == JV_INT ? b.u.i : b.kind == JV_BOOL ? b.u.b : 0;
        switch (op) {
        case JOP_ADD: *out = fl ? muse_jv_float(x + y) : muse_jv_int((int64_t)((uint64_t)xi + (uint64_t)yi)); return true;
        case JOP_SUB: *out = fl ? muse_jv_float(x - y) : muse_jv_int((int64_t)((uint64_t)xi - (uint64_t)yi)); return true;
        case JOP_MUL: *out = fl ? muse_jv_float(x * y) : muse_jv_int((int64_t)((uint64_t)xi * (uint64_t)yi)); return true;
        case JOP_DIV:
            if (y == 0) return muse_jerr(c, "division by zero");
            *out = muse_jv_float(x / y);
            return true;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (y == 0) return muse_jerr(c, op == JOP_MOD ? "modulo by zero" : "integer division or modulo by zero");
            if (fl) {
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                *out = op == JOP_MOD ? muse_jv_float(m) : muse_jv_float(floor((x - m) / y + 0.5 - 0.5));
                if (op == JOP_FLOORDIV) *out = muse_jv_float(floor(x / y));
            } else {
                if (yi == -1 && xi == INT64_MIN) return muse_jerr(c, "integer overflow");
                int64_t q = xi / yi, r = xi % yi;
                if (r != 0 && ((r < 0) != (yi < 0))) {
                    q--;
                    r += yi;
                }
                *out = muse_jv_int(op == JOP_MOD ? r : q);
            }
            return true;
        case JOP_POW:
            if (!fl && yi >= 0) {
                /* by squaring, wrapping like + - * above (Python's ints are unbounded; the
                 * result is exact while it fits in 64 bits) */
                uint64_t r = 1, base = (uint64_t)xi;
                for (uint64_t e = (uint64_t)yi; e; e >>= 1, base *= base)
                    if (e & 1) r *= base;
                *out = muse_jv_int((int64_t)r);
            } else {
                *out = muse_jv_float(pow(x, y));
            }
            return true;
        default: break;
        }
    }
    if (op == JOP_ADD && a.kind == JV_STR && b.kind == JV_STR && JV_SAFE(a) != JV_SAFE(b)) {
        /* Markup + str escapes the plain side (markupsafe) */
        struct jbuf tmp = {0};
        if (JV_SAFE(a)) muse_jbuf_put(&tmp, a.u.s->s, a.u.s->len);
        else muse_jhtml_escape(&tmp, a.u.s->s, a.u.s->len);
        if (JV_SAFE(b)) muse_jbuf_put(&tmp, b.u.s->s, b.u.s->len);
        else muse_jhtml_escape(&tmp, b.u.s->s, b.u.s->len);
        *out = muse_jv_strn(c, tmp.data ? tmp.data : "", tmp.len);
        muse_jbuf_free(&tmp);
        out->safe = true;
        return out->kind == JV_STR;
    }
    if (op == JOP_ADD && (JV_SAFE(a) || JV_SAFE(b)) && (a.kind == JV_STR || b.kind == JV_STR) && a.kind != b.kind) {
        /* Markup + non-string: markupsafe escapes str(other) */
        struct jv sa = a, sb = b;
        if (!muse_jv_stringify(c, a, &sa) || !muse_jv_stringify(c, b, &sb)) return false;
        sa.safe = JV_SAFE(a);
        sb.safe = JV_SAFE(b);
        return arith(c, op, sa, sb, out);
    }
    if (op == JOP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        struct jstr *s = muse_jarena_alloc(&c->arena, sizeof(*s) + a.u.s->len + b.u.s->len + 1);
        if (!s) return muse_jerr(c, "out of memory");
        s->len = a.u.s->len + b.u.s->len;
        memcpy(s->s, a.u.s->s, a.u.s->len);
        memcpy(s->s + a.u.s->len, b.u.s->s, b.u.s->len);
        s->s[s->len] = '\0';
        *out = muse_jv_str(s);
        out->safe = JV_SAFE(a) && JV_SAFE(b);
        return true;
    }
    if (op == JOP_ADD && a.kind == JV_LIST && b.kind == JV_LIST && a.u.l->tuple == b.u.l->tuple &&
        !a.u.l->gen && !b.u.l->gen) {
        struct jlist *l = muse_jlist_new(c, a.u.l->n + b.u.l->n);
        if (!l) return false;
        if (a.u.l->n) memcpy(l->items, a.u.l->items, a.u.l->n * sizeof(struct jv));
        if (b.u.l->n) memcpy(l->items + a.u.l->n, b.u.l->items, b.u.l->n * sizeof(struct jv));
        l->n = a.u.l->n + b.u.l->n;
        l->tuple = a.u.l->tuple;
        out->kind = JV_LIST;
        out->u.l = l;
        return true;
    }
    if (op == JOP_MUL && ((a.kind == JV_STR || a.kind == JV_LIST) && b.kind == JV_INT)) {
        int64_t k = b.u.i < 0 ? 0 : b.u.i;
        if (a.kind == JV_STR) {
            if (a.u.s->len && (uint64_t)k > c->lim.max_output / a.u.s->len)
                return muse_jerr(c, "string repetition exceeds the output limit");
            if (!a.u.s->len) k = 0; /* "" * 10**12 is "" at once (fuzz_jinja: it looped for minutes) */
            struct jbuf tmp = {0};
            for (int64_t i = 0; i < k; i++) muse_jbuf_put(&tmp, a.u.s->s, a.u.s->len);
            *out = muse_jv_strn(c, tmp.data ? tmp.data : "", tmp.len);
            muse_jbuf_free(&tmp);
            return out->kind == JV_STR;
        }
        if (a.u.l->n && (uint64_t)k > c->lim.max_iterations / a.u.l->n)
            return muse_jerr(c, "list repetition exceeds the iteration limit");
        struct jlist *l = muse_jlist_new(c, (size_t)k * a.u.l->n);
        if (!l) return false;
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++) l->items[l->n++] = a.u.l->items[j];
        l->tuple = a.u.l->tuple;
        out->kind = JV_LIST;
        out->u.l = l;
        return true;
    }
    if (op == JOP_MUL && a.kind == JV_INT && (b.kind == JV_STR || b.kind == JV_LIST))
        return arith(c, op, b, a, out);
    if (op == JOP_MOD && a.kind == JV_STR) return muse_jinja_percent_format(c, a, b, out);
    static const char *const opname[] = {"+", "-", "*", "/", "//", "%", "**"};
    return muse_jerr(c, "unsupported operand type(s) for %s: '%s' and '%s'", opname[op], muse_jv_type_name(a),
                     muse_jv_type_name(b));
}

/* `needle in hay`: a substring of a string, an equal item of a list, a key of a dict or namespace; nothing is in an undefined value. */
static bool contains(struct jctx *c, struct jv needle, struct jv hay, bool *out) {
    switch (hay.kind) {
    case JV_STR:
        if (needle.kind != JV_STR)
            return muse_jerr(c, "'in <string>' requires string as left operand, not %s", muse_jv_type_name(needle));
        if (needle.u.s->len == 0) *out = true;
        else *out = memmem(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
        return true;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (muse_jv_equal(needle, hay.u.l->items[i])) *out = true;
        return true;
    case JV_DICT: case JV_NS:
        *out = muse_jdict_get(hay.u.d, needle) != NULL;
        return true;
    case JV_UNDEF:
        *out = false;
        return true;
    default:
        return muse_jerr(c, "argument of type '%s' is not iterable", muse_jv_type_name(hay));
    }
}

/*
 * a op b for the comparison operators. == and != never fail (values of different kinds are
 * unequal); `in` follows contains; the orderings compare numbers, strings and lists as Python
 * does and fail on anything else, undefined included.
 */
static bool compare(struct jctx *c, enum jop op, struct jv a, struct jv b, bool *out) {
    switch (op) {
    case JOP_EQ: *out = muse_jv_equal(a, b); return true;
    case JOP_NE: *out = !muse_jv_equal(a, b); return true;
    case JOP_IN: return contains(c, a, b, out);
    case JOP_NOTIN:
        if (!contains(c, a, b, out)) return false;
        *out = !*out;
        return true;
    default: break;
    }
    if (a.kind == JV_UNDEF) return undefined_error(c, a);
    if (b.kind == JV_UNDEF) return undefined_error(c, b);
    int r;
    if (!muse_jv_compare(c, a, b, &r)) return false;
    switch (op) {
    case JOP_LT: *out = r < 0; break;
    case JOP_LE: *out = r <= 0; break;
    case JOP_GT: *out = r > 0; break;
    default: *out = r >= 0; break;
    }
    return true;
}

/* One bound of a slice, evaluated in sc: *present is false for an absent bound, None or undefined. */
static bool slice_index(struct jctx *c, struct jscope *sc, struct jnode *n, bool *present, int64_t *v) {
    *present = false;
    if (!n) return true;
    struct jv x;
    if (!eval(c, sc, n, &x)) return false;
    if (x.kind == JV_NONE || x.kind == JV_UNDEF) return true;
    if (x.kind != JV_INT && x.kind != JV_BOOL) return muse_jerr(c, "slice indices must be integers or None");
    *present = true;
    *v = x.kind == JV_INT ? x.u.i : x.u.b;
    return true;
}

/*
 * obj[start:stop:step] (sl is the SLICE node) with Python's clamping of out-of-range bounds and
 * negative steps: a string slices by code point into a new string, a list or tuple into a new
 * one of the same kind. Errors: a non-integer bound, step 0, undefined or unsliceable obj.
 */
static bool do_slice(struct jctx *c, struct jscope *sc, struct jv obj, struct jnode *sl, struct jv *out) {
    bool hs, he, hst;
    int64_t start = 0, stop = 0, step = 1;
    if (!slice_index(c, sc, sl->a, &hs, &start) || !slice_index(c, sc, sl->b, &he, &stop) ||
        !slice_index(c, sc, sl->c, &hst, &step))
        return false;
    if (!hst) step = 1;
    if (step == 0) return muse_jerr(c, "slice step cannot be zero");
    if (obj.kind == JV_UNDEF) return undefined_error(c, obj);
    struct jlist *items;
    bool is_str = obj.kind == JV_STR;
    if (obj.kind == JV_STR) {
        if (!muse_jv_iterate(c, obj, &items)) return false;
    } else if (obj.kind == JV_LIST) {
        items = obj.u.l;
    } else {
        return muse_jerr(c, "'%s' object is not subscriptable", muse_jv_type_name(obj));
    }
    int64_t len = (int64_t)items->n;
    if (step > 0) {
        if (!hs) start = 0;
        else if (start < 0) { start += len; if (start < 0) start = 0; }
        else if (start > len) start = len;
        if (!he) stop = len;
        else if (stop < 0) { stop += len; if (stop < 0) stop = 0; }
        else if (stop > len) stop = len;
    } else {
        if (!hs) start = len - 1;
        else if (start < 0) { start += len; if (start < 0) start = -1; }
        else if (start >= len) start = len - 1;
        if (!he) stop = -1;
        else if (stop < 0) { stop += len; if (stop < 0) stop = -1; }
        else if (stop >= len) stop = len - 1;
    }
    struct jlist *r = muse_jlist_new(c, 0);
    if (!r) return false;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (!muse_jlist_push(c, r, items->items[i])) return false;
        if (step > 0 ? step >= stop - i : step <= stop - i) break; /* the next i is past stop (and i + step may not fit) */
    }
    if (is_str) {
        struct jbuf tmp = {0};
        for (size_t i = 0; i < r->n; i++) muse_jbuf_put(&tmp, r->items[i].u.s->s, r->items[i].u.s->len);
        *out = muse_jv_strn(c, tmp.data ? tmp.data : "", tmp.len);
        muse_jbuf_free(&tmp);
        return out->kind == JV_STR;
    }
    r->tuple = obj.u.l->tuple;
    out->kind = JV_LIST;
    out->u.l = r;
    return true;
}

/*
 * Evaluate the argument expressions of the call-like node n (CALL, FILTER, TEST) left to right
 * into arena arrays: *args has n->n_args values, *kwargs n->n_kwargs (NULL when none) in the
 * order of their names n->kwnames.
 */
static bool eval_args(struct jctx *c, struct jscope *sc, struct jnode *n, struct jv **args,
                      struct jv **kwargs) {
    *args = *kwargs = NULL;
    if (n->n_args) {
        *args = muse_jarena_alloc(&c->arena, n->n_args * sizeof(struct jv));
        if (!*args) return muse_jerr(c, "out of memory");
        for (size_t i = 0; i < n->n_args; i++)
            if (!eval(c, sc, n->args[i], &(*args)[i])) return false;
    }
    if (n->n_kwargs) {
        *kwargs = muse_jarena_alloc(&c->arena, n->n_kwargs * sizeof(struct jv));
        if (!*kwargs) return muse_jerr(c, "out of memory");
        for (size_t i = 0; i < n->n_kwargs; i++)
            if (!eval(c, sc, n->kwargs[i], &(*kwargs)[i])) return false;
    }
    return true;
}

/*
 * Call macro m: its parameters are bound in a new scope over the scope m was defined in, from
 * the positional arguments, then the keyword ones, then the defaults (evaluated at the call, in
 * that new scope, so a default may use earlier parameters); a parameter with none of these is
 * undefined. The body renders into its own buffer (counted against max_output) and *out is that
 * text as a string. The caller's loop depth and error position are saved and restored.
 * Errors: too many positional arguments, an unknown or repeated keyword, max_depth nested calls.
 */
static bool call_macro(struct jctx *c, struct jmacro *m, struct jv *args, size_t n_args,
                       const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    const struct jnode *mn = m->node;
    if (n_args > mn->n_names)
        return muse_jerr(c, "macro '%s' takes not more than %zu argument(s)", mn->str, mn->n_names);
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return muse_jerr(c, "maximum recursion depth exceeded (%d nested macro calls)", c->lim.max_depth);
    }
    bool ok = false;
    struct jscope *sc = scope_new(c, m->scope);
    if (!sc) goto done;
    for (size_t i = 0; i < n_kwargs; i++) {
        size_t k;
        for (k = 0; k < mn->n_names; k++)
            if (!strcmp(mn->names[k], kwnames[i])) break;
        if (k == mn->n_names) {
            muse_jerr(c, "macro '%s' has no argument named '%s'", mn->str, kwnames[i]);
            goto done;
        }
        if (k < n_args) {
            muse_jerr(c, "macro '%s' got multiple values for argument '%s'", mn->str, kwnames[i]);
            goto done;
        }
    }
    for (size_t k = 0; k < mn->n_names; k++) {
        struct jv v;
        bool found = false;
        if (k < n_args) {
            v = args[k];
            found = true;
        }
        for (size_t i = 0; i < n_kwargs && !found; i++)
            if (!strcmp(mn->names[k], kwnames[i])) {
                v = kwargs[i];
                found = true;
            }
        if (!found) {
            if (mn->args[k]) {
                if (!eval(c, sc, mn->args[k], &v)) goto done;
            } else {
                struct jstr *nm = muse_jstr_new(c, mn->names[k], strlen(mn->names[k]));
                if (!nm) goto done;
                v = muse_jv_undef(nm);
            }
        }
        if (!scope_set(c, sc, mn->names[k], strlen(mn->names[k]), v)) goto done;
    }
    struct jbuf b = {0};
    enum jflow flow = JF_NORMAL;
    struct jnode *saved = c->cur;
    int saved_loop = c->loop_depth;
    c->loop_depth = 0;
    ok = exec_body(c, sc, mn->kids, mn->n_kids, &b, &flow);
    c->loop_depth = saved_loop;
    c->cur = saved;
    if (ok) {
        *out = muse_jv_strn(c, b.data ? b.data : "", b.len);
        ok = out->kind == JV_STR;
    }
    muse_jbuf_free(&b);
done:
    c->depth--;
    return ok;
}

/* Call any callable value (macro, builtin, method); anything else, undefined included, is an error. */
static bool call_value(struct jctx *c, struct jv fn, struct jv *args, size_t n_args,
                       const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out) {
    switch (fn.kind) {
    case JV_MACRO: return call_macro(c, fn.u.mc, args, n_args, kwnames, kwargs, n_kwargs, out);
    case JV_BUILTIN: return muse_jinja_call_builtin(c, fn.u.builtin, args, n_args, kwnames, kwargs, n_kwargs, out);
    case JV_METHOD: return muse_jinja_call_method(c, fn.u.mt, args, n_args, kwnames, kwargs, n_kwargs, out);
    case JV_UNDEF: return undefined_error(c, fn);
    default: return muse_jerr(c, "'%s' object is not callable", muse_jv_type_name(fn));
    }
}

/*
 * Evaluate the expression node n in scope sc into *out. The contracts of the header hold here
 * first: true = *out is set (a value valid to the end of the render); false = the error is
 * recorded (or a malloc failed), *out unspecified. Operands are evaluated left to right, and
 * `and`, `or`, `if ... else` evaluate only the side they need. Returns false as soon as any
 * error is on record, even one a callee recorded while returning true.
 */
static bool eval(struct jctx *c, struct jscope *sc, struct jnode *n, struct jv *out) {
    if (c->failed) return false;
    struct jnode *saved = c->cur;
    c->cur = n;
    if (++c->depth > c->lim.max_depth + 100) {
        c->depth--;
        return muse_jerr(c, "maximum recursion depth exceeded");
    }
    bool ok = true;
    switch (n->kind) {
    case JN_LIT_STR: *out = muse_jv_strn(c, n->str, n->len); ok = out->kind == JV_STR; break;
    case JN_LIT_INT: *out = muse_jv_int(n->i); break;
    case JN_LIT_FLOAT: *out = muse_jv_float(n->f); break;
    case JN_LIT_BOOL: *out = muse_jv_bool(n->i != 0); break;
    case JN_LIT_NONE: *out = muse_jv_none(); break;
    case JN_NAME: ok = lookup(c, sc, n->str, strlen(n->str), out); break;
    case JN_LIST: case JN_TUPLE: {
        struct jlist *l = muse_jlist_new(c, n->n_kids);
        if (!l) { ok = false; break; }
        for (size_t i = 0; i < n->n_kids && ok; i++) ok = eval(c, sc, n->kids[i], &l->items[i]);
        l->n = n->n_kids;
        l->tuple = n->kind == JN_TUPLE;
        out->kind = JV_LIST;
        out->u.l = l;
        break;
    }
    case JN_DICT: {
        struct jdict *d = muse_jdict_new(c, n->n_kids / 2);
        if (!d) { ok = false; break; }
        for (size_t i = 0; i + 1 < n->n_kids && ok; i += 2) {
            struct jv k, v;
            ok = eval(c, sc, n->kids[i], &k) && eval(c, sc, n->kids[i + 1], &v) &&
                 muse_jdict_set(c, d, k, v);
        }
        out->kind = JV_DICT;
        out->u.d = d;
        break;
    }
    case JN_GETATTR: {
        struct jv obj;
        ok = eval(c, sc, n->a, &obj);
        c->cur = n;
        if (ok) ok = muse_jinja_getattr(c, obj, n->str, strlen(n->str), out);
        break;
    }
    case JN_GETITEM: {
        struct jv obj, key;
        ok = eval(c, sc, n->a, &obj);
        c->cur = n;
        if (!ok) break;
        if (n->b->kind == JN_SLICE) {
            ok = do_slice(c, sc, obj, n->b, out);
        } else {
            ok = eval(c, sc, n->b, &key);
            c->cur = n;
            if (ok) ok = muse_jinja_getitem(c, obj, key, out);
        }
        break;
    }
    case JN_CALL: {
        struct jv fn, *args, *kwargs;
        ok = eval(c, sc, n->a, &fn) && eval_args(c, sc, n, &args, &kwargs);
        c->cur = n;
        if (ok) ok = call_value(c, fn, args, n->n_args, n->kwnames, kwargs, n->n_kwargs, out);
        break;
    }
    case JN_FILTER: {
        struct jv v, *args, *kwargs;
        if (n->a->kind == JN_NAME && n->a->str[0] == '\0') {
            ok = lookup(c, sc, "", 0, &v); /* placeholder of a filter/set block */
        } else {
            ok = eval(c, sc, n->a, &v);
        }
        ok = ok && eval_args(c, sc, n, &args, &kwargs);
        c->cur = n;
        if (ok) ok = muse_jinja_apply_filter(c, n->str, v, args, n->n_args, n->kwnames, kwargs, n->n_kwargs, out);
        break;
    }
    case JN_TEST: {
        struct jv v, *args, *kwargs;
        ok = eval(c, sc, n->a, &v) && eval_args(c, sc, n, &args, &kwargs);
        c->cur = n;
        bool r = false;
        if (ok) ok = muse_jinja_apply_test(c, n->str, v, args, n->n_args, &r);
        *out = muse_jv_bool(n->i ? !r : r);
        break;
    }
    case JN_NOT: {
        struct jv v;
        ok = eval(c, sc, n->a, &v);
        if (ok) *out = muse_jv_bool(!muse_jv_truthy(v)); /* v is unset when the operand failed */
        break;
    }
    case JN_NEG: case JN_POS: {
        struct jv v;
        ok = eval(c, sc, n->a, &v);
        c->cur = n;
        if (!ok) break;
        if (v.kind == JV_INT) *out = muse_jv_int(n->kind == JN_NEG ? -v.u.i : v.u.i);
        else if (v.kind == JV_FLOAT) *out = muse_jv_float(n->kind == JN_NEG ? -v.u.f : v.u.f);
        else if (v.kind == JV_BOOL) *out = muse_jv_int(n->kind == JN_NEG ? -(int64_t)v.u.b : v.u.b);
        else if (v.kind == JV_UNDEF) ok = undefined_error(c, v);
        else ok = muse_jerr(c, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', muse_jv_type_name(v));
        break;
    }
    case JN_BINOP: {
        struct jv a, b;
        ok = eval(c, sc, n->a, &a) && eval(c, sc, n->b, &b);
        c->cur = n;
        if (ok) ok = arith(c, n->op, a, b, out);
        break;
    }
    case JN_CONCAT: {
        struct jv a, b;
        ok = eval(c, sc, n->a, &a) && eval(c, sc, n->b, &b);
        c->cur = n;
        if (!ok) break;
        struct jbuf tmp = {0};
        ok = muse_jv_to_str(c, a, &tmp) && muse_jv_to_str(c, b, &tmp);
        if (ok) {
            *out = muse_jv_strn(c, tmp.data ? tmp.data : "", tmp.len);
            ok = out->kind == JV_STR;
        }
        muse_jbuf_free(&tmp);
        break;
    }
    case JN_AND: case JN_OR: {
        struct jv a;
        ok = eval(c, sc, n->a, &a);
        if (!ok) break;
        bool t = muse_jv_truthy(a);
        if ((n->kind == JN_AND && !t) || (n->kind == JN_OR && t)) *out = a;
        else ok = eval(c, sc, n->b, out);
        break;
    }
    case JN_COMPARE: {
        struct jv left;
        ok = eval(c, sc, n->a, &left);
        bool r = true;
        for (size_t i = 0; i < n->n_kids && ok && r; i++) {
            struct jv right;
            ok = eval(c, sc, n->kids[i], &right);
            c->cur = n;
            if (ok) ok = compare(c, n->ops[i], left, right, &r);
            left = right;
        }
        *out = muse_jv_bool(r);
        break;
    }
    case JN_COND: {
        struct jv cond;
        ok = eval(c, sc, n->b, &cond);
        if (!ok) break;
        if (muse_jv_truthy(cond)) ok = eval(c, sc, n->a, out);
        else if (n->c) ok = eval(c, sc, n->c, out);
        else *out = muse_jv_undef(NULL);
        break;
    }
    default:
        ok = muse_jerr(c, "internal error: statement used as an expression");
    }
    c->depth--;
    if (ok) c->cur = saved;
    return ok && !c->failed;
}

/* ---- statements ---- */

/* Bind the targets of a SET or FOR node in sc: one name takes v as it is; several unpack v, which must have exactly that many items. */
static bool assign_targets(struct jctx *c, struct jscope *sc, struct jnode *n, struct jv v) {
    if (n->n_names == 1) return scope_set(c, sc, n->names[0], strlen(n->names[0]), v);
    if (v.kind == JV_UNDEF) return undefined_error(c, v);
    struct jlist *items;
    if (!muse_jv_iterate(c, v, &items)) return false;
    if (items->n != n->n_names)
        return muse_jerr(c, items->n > n->n_names ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu)", n->n_names);
    for (size_t i = 0; i < n->n_names; i++)
        if (!scope_set(c, sc, n->names[i], strlen(n->names[i]), items->items[i])) return false;
    return true;
}

/*
 * {% for targets in iterable [if cond] %} body [{% else %} body {% endfor %}]. The iterable is
 * evaluated once and viewed as a sequence (a dict iterates its keys, a string its characters,
 * undefined nothing); a loop filter picks the items first, so loop.length and loop.last count
 * the kept ones, as in jinja2. The body runs in one child scope of sc emptied at each iteration:
 * its assignments last one iteration and never leak out. `loop` is a loop object in the arena.
 * The else body runs in sc when no item was left to iterate. Errors: a number or None as the
 * iterable, the iteration limit, and any error of the body.
 */
static bool exec_for(struct jctx *c, struct jscope *sc, struct jnode *n, struct jbuf *out) {
    struct jv seq;
    if (!eval(c, sc, n->a, &seq)) return false;
    c->cur = n;
    struct jlist *items;
    if (seq.kind == JV_NONE || seq.kind == JV_INT || seq.kind == JV_FLOAT || seq.kind == JV_BOOL)
        return muse_jerr(c, "'%s' object is not iterable", muse_jv_type_name(seq));
    if (!muse_jv_iterate(c, seq, &items)) return false;
    struct jscope *ls = scope_new(c, sc);
    if (!ls) return false;
    if (n->c) { /* loop filter */
        struct jlist *kept = muse_jlist_new(c, 0);
        if (!kept) return false;
        for (size_t i = 0; i < items->n; i++) {
            if (++c->iterations > c->lim.max_iterations)
                return muse_jerr(c, "loop iteration limit of %llu exceeded", (unsigned long long)c->lim.max_iterations);
            ls->vars = NULL;
            struct jv cond;
            if (!assign_targets(c, ls, n, items->items[i]) || !eval(c, ls, n->c, &cond)) return false;
            if (muse_jv_truthy(cond) && !muse_jlist_push(c, kept, items->items[i])) return false;
        }
        items = kept;
    }
    /* in the arena, not on this stack frame: `loop` can outlive the loop ({% set ns.l = loop %},
     * a macro defined in the body) and must stay readable for the rest of the render */
    struct jloop *loop = muse_jarena_alloc(&c->arena, sizeof(*loop));
    if (!loop) return muse_jerr(c, "out of memory");
    *loop = (struct jloop){.items = items->items, .n = items->n, .depth = ++c->loop_depth};
    struct jv loopv = {.kind = JV_LOOP};
    loopv.u.loop = loop;
    bool ok = true;
    for (size_t i = 0; i < items->n && ok; i++) {
        if (++c->iterations > c->lim.max_iterations) {
            c->cur = n;
            ok = muse_jerr(c, "loop iteration limit of %llu exceeded", (unsigned long long)c->lim.max_iterations);
            break;
        }
        loop->index0 = i;
        ls->vars = NULL;
        ok = scope_set(c, ls, "loop", 4, loopv) && assign_targets(c, ls, n, items->items[i]);
        if (!ok) break;
        enum jflow flow = JF_NORMAL;
        ok = exec_body(c, ls, n->kids, n->n_kids, out, &flow);
        if (flow == JF_BREAK) break;
    }
    c->loop_depth--;
    if (ok && items->n == 0 && n->b) {
        enum jflow flow = JF_NORMAL;
        ok = exec_body(c, sc, n->b->kids, n->b->n_kids, out, &flow);
    }
    return ok;
}

/* Run a filter chain (whose innermost operand is the "" placeholder, bound here in a child scope of sc) over text. */
static bool apply_chain(struct jctx *c, struct jscope *sc, struct jnode *chain, struct jv text, struct jv *out) {
    struct jscope *fs = scope_new(c, sc);
    if (!fs || !scope_set(c, fs, "", 0, text)) return false;
    return eval(c, fs, chain, out);
}

/*
 * Execute the statement node n in scope sc, appending its output to out. A break or continue
 * sets *flow (left alone otherwise). {% set x %} binds in sc itself, {% set ns.attr %} changes
 * the namespace in place (visible to every holder), {% macro %} binds a closure over sc, and
 * {% set %}...{% endset %} / {% filter %} blocks render into a buffer of their own first.
 */
static bool exec_stmt(struct jctx *c, struct jscope *sc, struct jnode *n, struct jbuf *out, enum jflow *flow) {
    c->cur = n;
    switch (n->kind) {
    case JN_TEXT: return emit(c, out, n->str, n->len);
    case JN_OUTPUT: {
        struct jv v;
        if (!eval(c, sc, n->a, &v)) return false;
        return emit_value(c, out, v);
    }
    case JN_IF: {
        for (struct jnode *b = n; b;) {
            struct jv cond;
            c->cur = b;
            if (!eval(c, sc, b->a, &cond)) return false;
            if (muse_jv_truthy(cond)) return exec_body(c, sc, b->kids, b->n_kids, out, flow);
            if (!b->b) return true;
            if (b->b->kind == JN_IF) {
                b = b->b;
                continue;
            }
            return exec_body(c, sc, b->b->kids, b->b->n_kids, out, flow);
        }
        return true;
    }
    case JN_FOR: return exec_for(c, sc, n, out);
    case JN_SET: {
        struct jv v;
        if (!eval(c, sc, n->a, &v)) return false;
        c->cur = n;
        if (n->i) {
            struct jv ns;
            if (!lookup(c, sc, n->str, strlen(n->str), &ns)) return false;
            if (ns.kind != JV_NS) return muse_jerr(c, "cannot assign attribute on non-namespace object");
            struct jv key = muse_jv_strn(c, n->names[0], strlen(n->names[0]));
            return key.kind == JV_STR && muse_jdict_set(c, ns.u.d, key, v);
        }
        return assign_targets(c, sc, n, v);
    }
    case JN_SET_BLOCK: case JN_FILTER_BLOCK: {
        struct jbuf b = {0};
        enum jflow f2 = JF_NORMAL;
        bool ok = exec_body(c, sc, n->kids, n->n_kids, &b, &f2);
        struct jv v = {0};
        if (ok) {
            v = muse_jv_strn(c, b.data ? b.data : "", b.len);
            ok = v.kind == JV_STR;
        }
        muse_jbuf_free(&b);
        c->cur = n;
        if (ok && n->a) ok = apply_chain(c, sc, n->a, v, &v);
        if (!ok) return false;
        if (n->kind == JN_FILTER_BLOCK) return emit_value(c, out, v);
        return scope_set(c, sc, n->names[0], strlen(n->names[0]), v);
    }
    case JN_MACRO: {
        struct jmacro *m = muse_jarena_alloc(&c->arena, sizeof(*m));
        if (!m) return muse_jerr(c, "out of memory");
        m->node = n;
        m->scope = sc;
        struct jv v = {.kind = JV_MACRO};
        v.u.mc = m;
        return scope_set(c, sc, n->str, strlen(n->str), v);
    }
    case JN_BREAK: case JN_CONTINUE:
        if (c->loop_depth == 0) return muse_jerr(c, "'%s' outside of a loop", n->kind == JN_BREAK ? "break" : "continue");
        *flow = n->kind == JN_BREAK ? JF_BREAK : JF_CONTINUE;
        return true;
    case JN_BODY: return exec_body(c, sc, n->kids, n->n_kids, out, flow);
    default: return muse_jerr(c, "internal error: expression used as a statement");
    }
}

/* Run n statements in order; stops at the first failure, or at a break/continue (left in *flow for the loop). */
static bool exec_body(struct jctx *c, struct jscope *sc, struct jnode **kids, size_t n,
                      struct jbuf *out, enum jflow *flow) {
    for (size_t i = 0; i < n; i++) {
        if (!exec_stmt(c, sc, kids[i], out, flow)) return false;
        if (*flow != JF_NORMAL) return true;
    }
    return true;
}

/* ---- public API (contracts in jinja.h) ---- */

muse_status muse_jinja_parse(const char *text, size_t len, struct muse_jinja_template **out,
                             struct muse_error *err) {
    *out = NULL;
    struct muse_jinja_template *t = calloc(1, sizeof(*t));
    if (!t) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    struct jlex_result lx;
    if (!text) text = "";
    if (!muse_jinja_lex(&t->arena, text, len, &lx, err)) goto fail;
    t->src = lx.src;
    t->src_len = lx.src_len;
    if (!muse_jinja_parse_tokens(t, &lx, err)) goto fail;
    *out = t;
    return MUSE_OK;
fail:
    muse_jinja_free(t);
    if (err && err->status == MUSE_OK) muse_error_set(err, MUSE_ERR_TEMPLATE, "template parse error");
    return err ? err->status : MUSE_ERR_TEMPLATE;
}

void muse_jinja_free(struct muse_jinja_template *tmpl) {
    if (!tmpl) return;
    muse_jarena_free(&tmpl->arena);
    free(tmpl);
}

const char *muse_jinja_error_message(const struct muse_error *err) {
    const char *m = err->msg;
    if (strncmp(m, "line ", 5) == 0) {
        const char *p = strstr(m, ": ");
        if (p) return p + 2;
    }
    return m;
}

muse_status muse_jinja_render(const struct muse_jinja_template *tmpl, const cJSON *context,
                              const struct muse_jinja_options *opts, char **out, size_t *out_len,
                              struct muse_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    struct muse_error local;
    if (!err) err = &local;
    muse_error_clear(err);
    struct jctx c = {.t = tmpl, .err = err};
    if (opts) c.lim = opts->limits;
    if (c.lim.max_depth <= 0) c.lim.max_depth = 200;
    if (!c.lim.max_iterations) c.lim.max_iterations = 1000000;
    if (!c.lim.max_output) c.lim.max_output = (size_t)64 << 20;
    if (!c.lim.max_memory) c.lim.max_memory = (size_t)512 << 20;
    c.arena.limit = c.lim.max_memory;
    if (opts && opts->now_set) {
        c.now[0] = opts->now_year; c.now[1] = opts->now_month; c.now[2] = opts->now_day;
        c.now[3] = opts->now_hour; c.now[4] = opts->now_min; c.now[5] = opts->now_sec;
    } else {
        time_t tt = time(NULL);
        struct tm tm;
        localtime_r(&tt, &tm);
        c.now[0] = tm.tm_year + 1900; c.now[1] = tm.tm_mon + 1; c.now[2] = tm.tm_mday;
        c.now[3] = tm.tm_hour; c.now[4] = tm.tm_min; c.now[5] = tm.tm_sec;
    }
    struct jbuf b = {0}; /* the output: handed to the caller on success */
    muse_status st = MUSE_OK;
    /* the context's variables, copied into the arena: the caller's cJSON is not kept */
    c.globals = scope_new(&c, NULL);
    if (!c.globals) goto fail;
    if (context && cJSON_IsObject(context)) {
        for (const cJSON *e = context->child; e; e = e->next) {
            struct jv v;
            if (!e->string) continue;
            if (!muse_jv_from_json(&c, e, &v)) goto fail;
            struct jstr *name = muse_jstr_new(&c, e->string, strlen(e->string));
            if (!name || !scope_set(&c, c.globals, name->s, name->len, v)) goto fail;
        }
    }
    enum jflow flow = JF_NORMAL;
    if (!exec_body(&c, c.globals, tmpl->root->kids, tmpl->root->n_kids, &b, &flow)) goto fail;
    *out = b.data ? b.data : strdup("");
    if (!*out) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (out_len) *out_len = b.len;
    muse_jarena_free(&c.arena);
    return MUSE_OK;
fail:
    /* no message on record: a malloc failed, or the arena refused without one being recorded */
    if (err->status == MUSE_OK) {
        if (c.arena.failed) muse_error_set(err, MUSE_ERR_TEMPLATE, "render memory limit exceeded");
        else muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    st = err->status;
    muse_jbuf_free(&b);
    muse_jarena_free(&c.arena);
    return st;
}
