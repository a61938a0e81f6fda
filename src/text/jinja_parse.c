/*
 * jinja_parse.c - recursive-descent parser from tokens to the AST (struct jnode), following
 * jinja2's grammar and operator precedence (condexpr < or < and < not < compare < + - < ~ <
 * * / // % < ** < unary - + < primary with postfix, filters and tests).
 */
#include <stdio.h>
#include <string.h>

#include "text/jinja_impl.h"

#define MAX_PARSE_DEPTH 200

struct parser {
    struct muse_jinja_template *t;
    const struct jtok *toks;
    size_t n, pos;
    struct muse_error *err;
    bool failed;
    int depth;
};

struct nvec {
    struct jnode **v;
    size_t n, cap;
};

static bool pfail(struct parser *P, size_t off, const char *fmt, const char *arg) {
    if (P->failed) return false;
    P->failed = true;
    int line, col;
    muse_jinja_line_col(P->t->src, P->t->src_len, off, &line, &col);
    char msg[300];
    snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
    muse_error_set(P->err, MUSE_ERR_TEMPLATE, "line %d, column %d: %s", line, col, msg);
    return false;
}

static const struct jtok *cur(struct parser *P) { return &P->toks[P->pos]; }
static const struct jtok *peek(struct parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->toks[i < P->n ? i : P->n - 1];
}
static void adv(struct parser *P) { if (P->pos + 1 < P->n) P->pos++; }

static bool is_op(const struct jtok *t, const char *op) {
    return t->kind == JT_OP && strcmp(t->s, op) == 0;
}
static bool is_name(const struct jtok *t, const char *name) {
    return t->kind == JT_NAME && strcmp(t->s, name) == 0;
}

static const char *tok_desc(const struct jtok *t) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_END: return "end of print statement";
    case JT_NAME: case JT_OP: return t->s;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    default: return "token";
    }
}

static bool expect_op(struct parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char msg[80];
        snprintf(msg, sizeof(msg), "expected '%s', got '%%s'", op);
        return pfail(P, cur(P)->off, msg, tok_desc(cur(P)));
    }
    adv(P);
    return true;
}

static struct jnode *node(struct parser *P, enum jnode_kind kind, size_t off) {
    struct jnode *n = muse_jarena_alloc(&P->t->arena, sizeof(*n));
    if (!n) {
        if (!P->failed) muse_error_set(P->err, MUSE_ERR_NOMEM, "out of memory");
        P->failed = true;
        return NULL;
    }
    n->kind = kind;
    n->off = off;
    return n;
}

static bool nvec_push(struct parser *P, struct nvec *v, struct jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        struct jnode **d = muse_jarena_alloc(&P->t->arena, cap * sizeof(*d));
        if (!d) {
            if (!P->failed) muse_error_set(P->err, MUSE_ERR_NOMEM, "out of memory");
            P->failed = true;
            return false;
        }
        if (v->n) memcpy(d, v->v, v->n * sizeof(*d));
        v->v = d;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

static const char **names_alloc(struct parser *P, size_t n) {
    const char **d = muse_jarena_alloc(&P->t->arena, (n ? n : 1) * sizeof(*d));
    if (!d) {
        if (!P->failed) muse_error_set(P->err, MUSE_ERR_NOMEM, "out of memory");
        P->failed = true;
    }
    return d;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);

/* call arguments after '(' : positional then name=value; fills args/kwargs of n. */
static bool parse_call_args(struct parser *P, struct jnode *n) {
    if (!expect_op(P, "(")) return false;
    struct nvec args = {0}, kwv = {0};
    const char *kwn[64];
    size_t nkw = 0;
    while (!is_op(cur(P), ")")) {
        if (args.n + nkw > 0 && !expect_op(P, ",")) return false;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
            if (nkw >= 64) return pfail(P, cur(P)->off, "too many keyword arguments", NULL);
            kwn[nkw++] = cur(P)->s;
            adv(P);
            adv(P);
            struct jnode *v = parse_expr(P);
            if (!v || !nvec_push(P, &kwv, v)) return false;
        } else {
            if (is_op(cur(P), "*") || is_op(cur(P), "**"))
                return pfail(P, cur(P)->off, "*args / **kwargs in calls are not supported", NULL);
            if (nkw) return pfail(P, cur(P)->off, "positional argument after keyword argument", NULL);
            struct jnode *v = parse_expr(P);
            if (!v || !nvec_push(P, &args, v)) return false;
        }
    }
    adv(P);
    n->args = args.v;
    n->n_args = args.n;
    n->kwargs = kwv.v;
    n->n_kwargs = nkw;
    if (nkw) {
        n->kwnames = names_alloc(P, nkw);
        if (!n->kwnames) return false;
        memcpy(n->kwnames, kwn, nkw * sizeof(*kwn));
    }
    return true;
}

static struct jnode *parse_tuple_or_expr(struct parser *P, bool explicit_parens);

static struct jnode *parse_primary(struct parser *P) {
    const struct jtok *t = cur(P);
    struct jnode *n = NULL;
    switch (t->kind) {
    case JT_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            n = node(P, JN_LIT_BOOL, t->off);
            if (n) n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = node(P, JN_LIT_NONE, t->off);
        } else {
            n = node(P, JN_NAME, t->off);
            if (n) {
                n->str = t->s;
                n->len = t->len;
            }
        }
        adv(P);
        return n;
    case JT_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, k = P->pos;
        while (k < P->n && P->toks[k].kind == JT_STRING) total += P->toks[k++].len;
        n = node(P, JN_LIT_STR, t->off);
        if (!n) return NULL;
        char *s = muse_jarena_alloc(&P->t->arena, total + 1);
        if (!s) {
            if (!P->failed) muse_error_set(P->err, MUSE_ERR_NOMEM, "out of memory");
            P->failed = true;
            return NULL;
        }
        size_t o = 0;
        while (cur(P)->kind == JT_STRING) {
            memcpy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            adv(P);
        }
        s[o] = '\0';
        n->str = s;
        n->len = o;
        return n;
    }
    case JT_INT:
        n = node(P, JN_LIT_INT, t->off);
        if (n) n->i = t->i;
        adv(P);
        return n;
    case JT_FLOAT:
        n = node(P, JN_LIT_FLOAT, t->off);
        if (n) n->f = t->f;
        adv(P);
        return n;
    case JT_OP:
        if (is_op(t, "(")) {
            adv(P);
            return parse_tuple_or_expr(P, true);
        }
        if (is_op(t, "[")) {
            n = node(P, JN_LIST, t->off);
            if (!n) return NULL;
            adv(P);
            struct nvec items = {0};
            while (!is_op(cur(P), "]")) {
                if (items.n && !expect_op(P, ",")) return NULL;
                if (is_op(cur(P), "]")) break;
                struct jnode *e = parse_expr(P);
                if (!e || !nvec_push(P, &items, e)) return NULL;
            }
            adv(P);
            n->kids = items.v;
            n->n_kids = items.n;
            return n;
        }
        if (is_op(t, "{")) {
            n = node(P, JN_DICT, t->off);
            if (!n) return NULL;
            adv(P);
            struct nvec items = {0};
            while (!is_op(cur(P), "}")) {
                if (items.n && !expect_op(P, ",")) return NULL;
                if (is_op(cur(P), "}")) break;
                struct jnode *k = parse_expr(P);
                if (!k || !expect_op(P, ":")) return NULL;
                struct jnode *v = parse_expr(P);
                if (!v || !nvec_push(P, &items, k) || !nvec_push(P, &items, v)) return NULL;
            }
            adv(P);
            n->kids = items.v;
            n->n_kids = items.n;
            return n;
        }
        break;
    default:
        break;
    }
    pfail(P, t->off, "unexpected '%s'", tok_desc(t));
    return NULL;
}

/* '(' already consumed when explicit_parens. */
static struct jnode *parse_tuple_or_expr(struct parser *P, bool explicit_parens) {
    size_t off = cur(P)->off;
    struct nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(P), ",")) break;
            adv(P);
            is_tuple = true;
        }
        if (explicit_parens && is_op(cur(P), ")")) break;
        if (!explicit_parens && items.n &&
            (cur(P)->kind == JT_BLOCK_END || cur(P)->kind == JT_VAR_END))
            break;
        struct jnode *e = parse_expr(P);
        if (!e || !nvec_push(P, &items, e)) return NULL;
    }
    if (explicit_parens && !expect_op(P, ")")) return NULL;
    if (!is_tuple && items.n == 1) return items.v[0];
    if (!is_tuple && !explicit_parens) return pfail(P, off, "expected an expression", NULL), NULL;
    struct jnode *n = node(P, JN_TUPLE, off);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static struct jnode *parse_subscript(struct parser *P, struct jnode *obj) {
    const struct jtok *t = cur(P);
    if (is_op(t, ".")) {
        adv(P);
        const struct jtok *a = cur(P);
        if (a->kind == JT_NAME) {
            struct jnode *n = node(P, JN_GETATTR, a->off);
            if (!n) return NULL;
            n->a = obj;
            n->str = a->s;
            n->len = a->len;
            adv(P);
            return n;
        }
        if (a->kind == JT_INT) {
            struct jnode *n = node(P, JN_GETITEM, a->off), *k = node(P, JN_LIT_INT, a->off);
            if (!n || !k) return NULL;
            k->i = a->i;
            n->a = obj;
            n->b = k;
            adv(P);
            return n;
        }
        pfail(P, a->off, "expected name or number after '.'", NULL);
        return NULL;
    }
    /* '[' */
    adv(P);
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (is_op(cur(P), ":")) {
            slice = true;
            if (++np > 2) return pfail(P, cur(P)->off, "invalid slice", NULL), NULL;
            adv(P);
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[np]) return pfail(P, cur(P)->off, "expected ']'", NULL), NULL;
        parts[np] = parse_expr(P);
        if (!parts[np]) return NULL;
    }
    adv(P);
    struct jnode *n = node(P, JN_GETITEM, t->off);
    if (!n) return NULL;
    n->a = obj;
    if (slice) {
        struct jnode *s = node(P, JN_SLICE, t->off);
        if (!s) return NULL;
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
        n->b = s;
    } else {
        if (!parts[0]) return pfail(P, t->off, "expected an index", NULL), NULL;
        n->b = parts[0];
    }
    return n;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n) {
    while (n) {
        const struct jtok *t = cur(P);
        if (is_op(t, ".") || is_op(t, "[")) {
            n = parse_subscript(P, n);
        } else if (is_op(t, "(")) {
            struct jnode *c = node(P, JN_CALL, t->off);
            if (!c) return NULL;
            c->a = n;
            if (!parse_call_args(P, c)) return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *n) {
    while (n && is_op(cur(P), "|")) {
        adv(P);
        const struct jtok *name = cur(P);
        if (name->kind != JT_NAME) return pfail(P, name->off, "expected a filter name", NULL), NULL;
        struct jnode *f = node(P, JN_FILTER, name->off);
        if (!f) return NULL;
        f->str = name->s;
        f->a = n;
        adv(P);
        if (is_op(cur(P), "(") && !parse_call_args(P, f)) return NULL;
        n = f;
    }
    return n;
}

static struct jnode *parse_test(struct parser *P, struct jnode *n) {
    adv(P); /* 'is' */
    bool neg = false;
    if (is_name(cur(P), "not")) {
        neg = true;
        adv(P);
    }
    const struct jtok *name = cur(P);
    if (name->kind != JT_NAME) return pfail(P, name->off, "expected a test name", NULL), NULL;
    struct jnode *t = node(P, JN_TEST, name->off);
    if (!t) return NULL;
    t->str = name->s;
    t->a = n;
    t->i = neg;
    adv(P);
    const struct jtok *c = cur(P);
    if (is_op(c, "(")) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return pfail(P, c->off, "You cannot chain multiple tests with is", NULL), NULL;
        struct jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        t->args = muse_jarena_alloc(&P->t->arena, sizeof(struct jnode *));
        if (!t->args) return P->failed = true, NULL;
        t->args[0] = arg;
        t->n_args = 1;
    }
    return t;
}

static struct jnode *parse_filter_expr(struct parser *P, struct jnode *n) {
    while (n) {
        const struct jtok *t = cur(P);
        if (is_op(t, "|")) n = parse_filter(P, n);
        else if (is_name(t, "is")) n = parse_test(P, n);
        else if (is_op(t, "(")) n = parse_postfix(P, n);
        else break;
    }
    return n;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter) {
    if (++P->depth > MAX_PARSE_DEPTH) return pfail(P, cur(P)->off, "expression nested too deeply", NULL), NULL;
    const struct jtok *t = cur(P);
    struct jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(P);
        n = node(P, t->s[0] == '-' ? JN_NEG : JN_POS, t->off);
        if (n) n->a = parse_unary(P, false);
        if (n && !n->a) n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static struct jnode *binop(struct parser *P, enum jop op, size_t off, struct jnode *a, struct jnode *b) {
    if (!a || !b) return NULL;
    struct jnode *n = node(P, JN_BINOP, off);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *P) {
    struct jnode *n = parse_unary(P, true);
    while (n && is_op(cur(P), "**")) {
        size_t off = cur(P)->off;
        adv(P);
        n = binop(P, JOP_POW, off, n, parse_unary(P, true));
    }
    return n;
}

static struct jnode *parse_math2(struct parser *P) {
    struct jnode *n = parse_pow(P);
    for (;;) {
        const struct jtok *t = cur(P);
        enum jop op;
        if (is_op(t, "*")) op = JOP_MUL;
        else if (is_op(t, "/")) op = JOP_DIV;
        else if (is_op(t, "//")) op = JOP_FLOORDIV;
        else if (is_op(t, "%")) op = JOP_MOD;
        else break;
        if (!n) return NULL;
        adv(P);
        n = binop(P, op, t->off, n, parse_pow(P));
    }
    return n;
}

static struct jnode *parse_concat(struct parser *P) {
    struct jnode *n = parse_math2(P);
    while (n && is_op(cur(P), "~")) {
        size_t off = cur(P)->off;
        adv(P);
        struct jnode *c = node(P, JN_CONCAT, off);
        if (!c) return NULL;
        c->a = n;
        c->b = parse_math2(P);
        if (!c->b) return NULL;
        n = c;
    }
    return n;
}

static struct jnode *parse_math1(struct parser *P) {
    struct jnode *n = parse_concat(P);
    for (;;) {
        const struct jtok *t = cur(P);
        enum jop op;
        if (is_op(t, "+")) op = JOP_ADD;
        else if (is_op(t, "-")) op = JOP_SUB;
        else break;
        if (!n) return NULL;
        adv(P);
        n = binop(P, op, t->off, n, parse_concat(P));
    }
    return n;
}

static struct jnode *parse_compare(struct parser *P) {
    struct jnode *first = parse_math1(P);
    if (!first) return NULL;
    struct nvec rest = {0};
    enum jop ops[32];
    size_t off = cur(P)->off;
    for (;;) {
        const struct jtok *t = cur(P);
        enum jop op;
        if (is_op(t, "==")) op = JOP_EQ;
        else if (is_op(t, "!=")) op = JOP_NE;
        else if (is_op(t, "<")) op = JOP_LT;
        else if (is_op(t, "<=")) op = JOP_LE;
        else if (is_op(t, ">")) op = JOP_GT;
        else if (is_op(t, ">=")) op = JOP_GE;
        else if (is_name(t, "in")) op = JOP_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = JOP_NOTIN;
            adv(P);
        } else break;
        adv(P);
        if (rest.n >= 32) return pfail(P, t->off, "comparison chain too long", NULL), NULL;
        ops[rest.n] = op;
        struct jnode *e = parse_math1(P);
        if (!e || !nvec_push(P, &rest, e)) return NULL;
    }
    if (!rest.n) return first;
    struct jnode *n = node(P, JN_COMPARE, off);
    if (!n) return NULL;
    n->a = first;
    n->kids = rest.v;
    n->n_kids = rest.n;
    n->ops = muse_jarena_alloc(&P->t->arena, rest.n * sizeof(enum jop));
    if (!n->ops) return P->failed = true, NULL;
    memcpy(n->ops, ops, rest.n * sizeof(enum jop));
    return n;
}

static struct jnode *parse_not(struct parser *P) {
    if (is_name(cur(P), "not")) {
        size_t off = cur(P)->off;
        adv(P);
        if (++P->depth > MAX_PARSE_DEPTH) return pfail(P, off, "expression nested too deeply", NULL), NULL;
        struct jnode *n = node(P, JN_NOT, off);
        if (n) n->a = parse_not(P);
        P->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P) {
    struct jnode *n = parse_not(P);
    while (n && is_name(cur(P), "and")) {
        struct jnode *a = node(P, JN_AND, cur(P)->off);
        adv(P);
        if (!a) return NULL;
        a->a = n;
        a->b = parse_not(P);
        if (!a->b) return NULL;
        n = a;
    }
    return n;
}

static struct jnode *parse_or(struct parser *P) {
    struct jnode *n = parse_and(P);
    while (n && is_name(cur(P), "or")) {
        struct jnode *o = node(P, JN_OR, cur(P)->off);
        adv(P);
        if (!o) return NULL;
        o->a = n;
        o->b = parse_and(P);
        if (!o->b) return NULL;
        n = o;
    }
    return n;
}

static struct jnode *parse_expr(struct parser *P) {
    if (++P->depth > MAX_PARSE_DEPTH) return pfail(P, cur(P)->off, "expression nested too deeply", NULL), NULL;
    struct jnode *n = parse_or(P);
    while (n && is_name(cur(P), "if")) {
        struct jnode *c = node(P, JN_COND, cur(P)->off);
        adv(P);
        if (!c) return NULL;
        c->a = n;
        c->b = parse_or(P);
        if (!c->b) return NULL;
        if (is_name(cur(P), "else")) {
            adv(P);
            c->c = parse_expr(P);
            if (!c->c) return NULL;
        }
        n = c;
    }
    P->depth--;
    return n;
}

/* ---- statements ---- */

static bool expect_block_end(struct parser *P) {
    if (cur(P)->kind != JT_BLOCK_END)
        return pfail(P, cur(P)->off, "expected end of statement block, got '%s'", tok_desc(cur(P)));
    adv(P);
    return true;
}

/* Parse statements until a block tag whose name is one of `ends` (not consumed). */
static struct jnode *parse_body(struct parser *P, const char *const *ends, const char *opener);

static bool at_end_tag(struct parser *P, const char *const *ends) {
    if (cur(P)->kind != JT_BLOCK_BEGIN) return false;
    const struct jtok *n = peek(P, 1);
    if (n->kind != JT_NAME) return false;
    for (size_t i = 0; ends && ends[i]; i++)
        if (!strcmp(n->s, ends[i])) return true;
    return false;
}

/* Targets of for/set: NAME (',' NAME)*. */
static bool parse_targets(struct parser *P, struct jnode *n) {
    const char *names[16];
    size_t k = 0;
    for (;;) {
        if (cur(P)->kind != JT_NAME) return pfail(P, cur(P)->off, "expected a variable name, got '%s'", tok_desc(cur(P)));
        if (k >= 16) return pfail(P, cur(P)->off, "too many targets", NULL);
        names[k++] = cur(P)->s;
        adv(P);
        if (!is_op(cur(P), ",")) break;
        adv(P);
    }
    n->names = names_alloc(P, k);
    if (!n->names) return false;
    memcpy(n->names, names, k * sizeof(*names));
    n->n_names = k;
    return true;
}

static struct jnode *parse_if(struct parser *P, size_t off) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct jnode *n = node(P, JN_IF, off);
    if (!n || !(n->a = parse_tuple_or_expr(P, false)) || !expect_block_end(P)) return NULL;
    struct jnode *body = parse_body(P, ends, "if");
    if (!body) return NULL;
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    adv(P); /* BLOCK_BEGIN */
    const struct jtok *kw = cur(P);
    adv(P);
    if (!strcmp(kw->s, "elif")) {
        n->b = parse_if(P, kw->off);
        return n->b ? n : NULL;
    }
    if (!strcmp(kw->s, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (!expect_block_end(P)) return NULL;
        n->b = parse_body(P, ends2, "if");
        if (!n->b) return NULL;
        adv(P);
        adv(P);
    }
    return expect_block_end(P) ? n : NULL;
}

static struct jnode *parse_for(struct parser *P, size_t off) {
    struct jnode *n = node(P, JN_FOR, off);
    if (!n || !parse_targets(P, n)) return NULL;
    if (!is_name(cur(P), "in")) return pfail(P, cur(P)->off, "expected 'in', got '%s'", tok_desc(cur(P))), NULL;
    adv(P);
    /* the iterable: a tuple of or-expressions (no inline if: that is the loop filter) */
    struct jnode *it = parse_or(P);
    if (!it) return NULL;
    if (is_op(cur(P), ",")) {
        struct nvec items = {0};
        nvec_push(P, &items, it);
        while (is_op(cur(P), ",")) {
            adv(P);
            if (cur(P)->kind == JT_BLOCK_END || is_name(cur(P), "if")) break;
            struct jnode *e = parse_or(P);
            if (!e || !nvec_push(P, &items, e)) return NULL;
        }
        it = node(P, JN_TUPLE, off);
        if (!it) return NULL;
        it->kids = items.v;
        it->n_kids = items.n;
    }
    n->a = it;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(n->c = parse_expr(P))) return NULL;
    }
    if (is_name(cur(P), "recursive")) return pfail(P, cur(P)->off, "recursive for loops are not supported", NULL), NULL;
    if (!expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    struct jnode *body = parse_body(P, ends, "for");
    if (!body) return NULL;
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    adv(P);
    if (is_name(cur(P), "else")) {
        adv(P);
        if (!expect_block_end(P)) return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        if (!(n->b = parse_body(P, ends2, "for"))) return NULL;
        adv(P);
    }
    adv(P); /* endfor */
    return expect_block_end(P) ? n : NULL;
}

/* A filter chain applied to a placeholder name "" (for set blocks and filter blocks). */
static struct jnode *parse_filter_chain(struct parser *P, size_t off, bool leading_pipe) {
    struct jnode *ph = node(P, JN_NAME, off);
    if (!ph) return NULL;
    ph->str = "";
    if (!leading_pipe) {
        /* `{% filter name(args) | other %}`: fake a leading pipe */
        const struct jtok *name = cur(P);
        if (name->kind != JT_NAME) return pfail(P, name->off, "expected a filter name", NULL), NULL;
        struct jnode *f = node(P, JN_FILTER, name->off);
        if (!f) return NULL;
        f->str = name->s;
        f->a = ph;
        adv(P);
        if (is_op(cur(P), "(") && !parse_call_args(P, f)) return NULL;
        ph = f;
    }
    return parse_filter(P, ph);
}

static struct jnode *parse_set(struct parser *P, size_t off) {
    struct jnode *n = node(P, JN_SET, off);
    if (!n) return NULL;
    if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), ".")) {
        n->str = cur(P)->s;
        adv(P);
        adv(P);
        if (cur(P)->kind != JT_NAME) return pfail(P, cur(P)->off, "expected an attribute name", NULL), NULL;
        n->names = names_alloc(P, 1);
        if (!n->names) return NULL;
        n->names[0] = cur(P)->s;
        n->n_names = 1;
        n->i = 1;
        adv(P);
    } else if (!parse_targets(P, n)) {
        return NULL;
    }
    if (is_op(cur(P), "=")) {
        adv(P);
        if (!(n->a = parse_tuple_or_expr(P, false))) return NULL;
        return expect_block_end(P) ? n : NULL;
    }
    if (n->i || n->n_names != 1) return pfail(P, cur(P)->off, "expected '='", NULL), NULL;
    n->kind = JN_SET_BLOCK;
    if (is_op(cur(P), "|") && !(n->a = parse_filter_chain(P, off, true))) return NULL;
    if (!expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    struct jnode *body = parse_body(P, ends, "set");
    if (!body) return NULL;
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    adv(P);
    adv(P);
    return expect_block_end(P) ? n : NULL;
}

static struct jnode *parse_macro(struct parser *P, size_t off) {
    struct jnode *n = node(P, JN_MACRO, off);
    if (!n) return NULL;
    if (cur(P)->kind != JT_NAME) return pfail(P, cur(P)->off, "expected a macro name", NULL), NULL;
    n->str = cur(P)->s;
    n->len = cur(P)->len;
    adv(P);
    if (!expect_op(P, "(")) return NULL;
    const char *names[64];
    struct jnode *defs[64];
    size_t k = 0;
    while (!is_op(cur(P), ")")) {
        if (k && !expect_op(P, ",")) return NULL;
        if (cur(P)->kind != JT_NAME) return pfail(P, cur(P)->off, "expected a parameter name", NULL), NULL;
        if (k >= 64) return pfail(P, cur(P)->off, "too many macro parameters", NULL), NULL;
        names[k] = cur(P)->s;
        defs[k] = NULL;
        adv(P);
        if (is_op(cur(P), "=")) {
            adv(P);
            if (!(defs[k] = parse_expr(P))) return NULL;
        }
        k++;
    }
    adv(P);
    if (!expect_block_end(P)) return NULL;
    n->names = names_alloc(P, k);
    n->args = muse_jarena_alloc(&P->t->arena, (k ? k : 1) * sizeof(struct jnode *));
    if (!n->names || !n->args) return P->failed = true, NULL;
    memcpy(n->names, names, k * sizeof(*names));
    memcpy(n->args, defs, k * sizeof(*defs));
    n->n_names = n->n_args = k;
    static const char *const ends[] = {"endmacro", NULL};
    struct jnode *body = parse_body(P, ends, "macro");
    if (!body) return NULL;
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    adv(P);
    adv(P);
    if (cur(P)->kind == JT_NAME) adv(P); /* {% endmacro name %} */
    return expect_block_end(P) ? n : NULL;
}

static struct jnode *parse_statement(struct parser *P) {
    const struct jtok *open = cur(P);
    adv(P);
    const struct jtok *kw = cur(P);
    if (kw->kind != JT_NAME) return pfail(P, kw->off, "expected a statement name", NULL), NULL;
    adv(P);
    const char *k = kw->s;
    if (!strcmp(k, "if")) return parse_if(P, open->off);
    if (!strcmp(k, "for")) return parse_for(P, open->off);
    if (!strcmp(k, "set")) return parse_set(P, open->off);
    if (!strcmp(k, "macro")) return parse_macro(P, open->off);
    if (!strcmp(k, "break") || !strcmp(k, "continue")) {
        struct jnode *n = node(P, k[0] == 'b' ? JN_BREAK : JN_CONTINUE, open->off);
        return n && expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "filter")) {
        struct jnode *n = node(P, JN_FILTER_BLOCK, open->off);
        if (!n || !(n->a = parse_filter_chain(P, open->off, false)) || !expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        struct jnode *body = parse_body(P, ends, "filter");
        if (!body) return NULL;
        n->kids = body->kids;
        n->n_kids = body->n_kids;
        adv(P);
        adv(P);
        return expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "generation")) {
        if (!expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        struct jnode *body = parse_body(P, ends, "generation");
        if (!body) return NULL;
        adv(P);
        adv(P);
        return expect_block_end(P) ? body : NULL;
    }
    return pfail(P, kw->off, "unknown or unsupported statement '%s'", k), NULL;
}

static struct jnode *parse_body(struct parser *P, const char *const *ends, const char *opener) {
    struct jnode *body = node(P, JN_BODY, cur(P)->off);
    if (!body) return NULL;
    struct nvec kids = {0};
    for (;;) {
        const struct jtok *t = cur(P);
        if (t->kind == JT_EOF) {
            if (ends) {
                return pfail(P, t->off, "unexpected end of template: the '%s' block is not closed", opener), NULL;
            }
            break;
        }
        if (at_end_tag(P, ends)) break;
        struct jnode *n = NULL;
        if (t->kind == JT_TEXT) {
            n = node(P, JN_TEXT, t->off);
            if (n) {
                n->str = t->s;
                n->len = t->len;
            }
            adv(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            adv(P);
            n = node(P, JN_OUTPUT, t->off);
            if (n && !(n->a = parse_tuple_or_expr(P, false))) return NULL;
            if (n && cur(P)->kind != JT_VAR_END)
                return pfail(P, cur(P)->off, "expected end of print statement, got '%s'", tok_desc(cur(P))), NULL;
            adv(P);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            const struct jtok *kw = peek(P, 1);
            if (kw->kind == JT_NAME && (!strncmp(kw->s, "end", 3) || !strcmp(kw->s, "else") || !strcmp(kw->s, "elif")))
                return pfail(P, kw->off, "unexpected '%s'", kw->s), NULL;
            n = parse_statement(P);
        } else {
            return pfail(P, t->off, "unexpected '%s'", tok_desc(t)), NULL;
        }
        if (!n || !nvec_push(P, &kids, n)) return NULL;
    }
    body->kids = kids.v;
    body->n_kids = kids.n;
    return body;
}

bool muse_jinja_parse_tokens(struct muse_jinja_template *t, const struct jlex_result *lx,
                             struct muse_error *err) {
    struct parser P = {.t = t, .toks = lx->toks, .n = lx->n, .err = err};
    t->root = parse_body(&P, NULL, NULL);
    if (t->root && cur(&P)->kind != JT_EOF) {
        pfail(&P, cur(&P)->off, "unexpected '%s'", tok_desc(cur(&P)));
        t->root = NULL;
    }
    return t->root != NULL && !P.failed;
}
