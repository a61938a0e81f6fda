/*
 * jinja_impl.h - internals shared by the jinja_*.c files (lexer, parser, values, interpreter,
 * builtins). Not part of the engine API; include text/jinja.h instead.
 *
 * The functions here are library symbols, so they carry the muse_ prefix before the name of
 * their family: muse_jarena_* (the arena), muse_jbuf_* (byte buffers), muse_jv_* / muse_jstr_* /
 * muse_jlist_* / muse_jdict_* (values), muse_jinja_* (lexer, parser, interpreter entry points),
 * muse_jerr (render errors). What they promise about memory, errors and limits is written once,
 * at the top of jinja_eval.c.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "text/jinja.h"

/*
 * ---- arena: every AST node and every render-time value lives in one ----
 * A template's arena holds its AST and normalized source for the template's life; a render's
 * holds every value it creates until the render returns. Allocations are never freed one by
 * one; muse_jarena_free releases them all at once.
 */

struct jarena_chunk;
struct jarena {
    struct jarena_chunk *head;
    size_t used;   /* bytes handed out so far */
    size_t limit;  /* 0 = unlimited */
    bool failed;   /* an allocation failed or hit the limit */
};

/* size bytes, zeroed, 16-byte aligned; NULL when malloc fails or `limit` would be passed, after
 * which a->failed stays set and every later call returns NULL (records no error: callers do). */
void *muse_jarena_alloc(struct jarena *a, size_t size);
void muse_jarena_free(struct jarena *a);

/*
 * ---- growable byte buffer (malloc'd) ----
 * Zero-initialize ({0}), append, then either take data (NUL-terminated, len bytes, NULL while
 * nothing was appended; the new owner frees it) or muse_jbuf_free it. A failed append (malloc, or `limit`) sets `failed`:
 * later appends do nothing and return false, so a sequence of appends needs one check at the
 * end. Buffers record no render error themselves.
 */

struct jbuf {
    char *data;
    size_t len, cap;
    size_t limit;  /* 0 = unlimited */
    bool failed;
};

bool muse_jbuf_put(struct jbuf *b, const char *s, size_t n);
bool muse_jbuf_putc(struct jbuf *b, char c);
bool muse_jbuf_printf(struct jbuf *b, const char *fmt, ...) MUSE_PRINTF(2, 3); /* at most 511 bytes */
void muse_jbuf_free(struct jbuf *b);

/* ---- tokens ---- */

enum jtok_kind {
    JT_EOF, JT_TEXT, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_VAR_BEGIN, JT_VAR_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
};

struct jtok {
    enum jtok_kind kind;
    const char *s;   /* text / name / operator / decoded string (NUL-terminated) */
    size_t len;
    int64_t i;
    double f;
    size_t off;      /* byte offset in the normalized source, for line:column */
};

struct jlex_result {
    struct jtok *toks;
    size_t n;
    char *src;       /* normalized source (arena) */
    size_t src_len;
};

/* Tokenize `text` into the arena. On error fills err (with line:column) and returns false. */
bool muse_jinja_lex(struct jarena *a, const char *text, size_t len, struct jlex_result *out,
                    struct muse_error *err);
/* 1-based line and column of byte `off` of `src`. */
void muse_jinja_line_col(const char *src, size_t src_len, size_t off, int *line, int *col);

/* ---- AST ---- */

enum jnode_kind {
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_FILTER_BLOCK,
    JN_BREAK, JN_CONTINUE, JN_BODY,
    /* expressions */
    JN_LIT_STR, JN_LIT_INT, JN_LIT_FLOAT, JN_LIT_BOOL, JN_LIT_NONE, JN_NAME, JN_LIST, JN_TUPLE,
    JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_NOT, JN_NEG,
    JN_POS, JN_BINOP, JN_AND, JN_OR, JN_COMPARE, JN_COND, JN_CONCAT,
};

enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
};

/*
 * One generic node. Field use by kind:
 *   TEXT/LIT_STR/NAME: str,len. LIT_INT: i. LIT_FLOAT: f. LIT_BOOL: i.
 *   OUTPUT: a. IF: a=cond, kids=then body, b=else (an IF for elif, or a BODY).
 *   FOR: names=targets, a=iterable, c=filter cond (or NULL), kids=body, b=else BODY.
 *   SET: names=targets (ns attr: str=namespace name, names[0]=attr, i=1), a=value.
 *   SET_BLOCK: names[0]=target, kids=body, a=filter chain applied to a JN_NAME "" placeholder.
 *   MACRO: str=name, names=params, kids=body, args=defaults (NULL entries = none).
 *   FILTER_BLOCK: a=filter chain (innermost target placeholder), kids=body.
 *   BODY: kids.
 *   LIST/TUPLE: kids. DICT: kids = key,value,key,value...
 *   GETATTR: a=obj, str=attr. GETITEM: a=obj, b=index. SLICE: a=start, b=stop, c=step (NULL ok).
 *   CALL: a=callee, args (positional), kwnames+kwargs.
 *   FILTER / TEST: str=name, a=operand, args, kwnames+kwargs; TEST: i=1 when negated.
 *   NOT/NEG/POS: a. BINOP/CONCAT: op, a, b. AND/OR: a, b.
 *   COMPARE: a = first operand, kids = further operands, ops = their operators.
 *   COND: a=then value, b=cond, c=else (NULL = undefined).
 */
struct jnode {
    enum jnode_kind kind;
    size_t off;
    const char *str;
    size_t len;
    int64_t i;
    double f;
    enum jop op;
    struct jnode *a, *b, *c;
    struct jnode **kids;
    size_t n_kids;
    struct jnode **args;
    size_t n_args;
    const char **kwnames;
    struct jnode **kwargs;
    size_t n_kwargs;
    const char **names;
    size_t n_names;
    enum jop *ops;
};

struct muse_jinja_template {
    struct jarena arena;
    char *src;
    size_t src_len;
    struct jnode *root; /* a BODY */
};

bool muse_jinja_parse_tokens(struct muse_jinja_template *t, const struct jlex_result *lx,
                             struct muse_error *err);

/* ---- values ---- */

enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS,
    JV_MACRO, JV_BUILTIN, JV_METHOD, JV_LOOP,
};

struct jstr {
    size_t len;
    char s[];  /* NUL-terminated */
};

struct jv;
struct jlist {
    struct jv *items;
    size_t n, cap;
    bool tuple;
    bool gen;  /* a generator (map/select/items/... results): no len, no JSON, always true */
};

struct jdict {
    struct jv *keys, *vals;
    size_t n, cap;
};

struct jloop;
struct jmethod;
struct jscope;
struct jmacro {
    const struct jnode *node;
    struct jscope *scope;  /* the scope the macro was defined in */
};

struct jv {
    enum jv_kind kind;
    unsigned char safe;  /* STR only: 1 = markupsafe.Markup (|safe, |escape): `+` escapes the other side */
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr *s;         /* STR; UNDEF: the missing name (may be NULL) */
        struct jlist *l;
        struct jdict *d;        /* DICT, NS */
        struct jmacro *mc;      /* MACRO */
        int builtin;            /* BUILTIN */
        struct jmethod *mt;
        struct jloop *loop;
    } u;
};

/* Whether v is a Markup string. */
#define JV_SAFE(v) ((v).kind == JV_STR && (v).safe)

struct jmethod {
    struct jv self;
    const char *name;
};

struct jloop {
    struct jv *items;   /* the (filtered) sequence */
    size_t n, index0;
    int depth;
};

/* ---- render state ---- */

struct jscope_var {
    const char *name;
    size_t len;
    struct jv val;
    struct jscope_var *next;
};

struct jscope {
    struct jscope *parent;
    struct jscope_var *vars;
};

enum jflow { JF_NORMAL, JF_BREAK, JF_CONTINUE };

struct jctx {
    const struct muse_jinja_template *t;
    struct jarena arena;
    struct muse_jinja_limits lim;
    struct muse_error *err;
    int depth;
    uint64_t iterations;
    size_t output_total;  /* bytes written to all buffers (limit check) */
    struct jscope *globals;
    struct jnode *cur;    /* the node being evaluated, for error positions */
    int loop_depth;
    int now[6];           /* y m d H M S */
    bool failed;
};

/*
 * Record a render error at ctx->cur: "line L, column C: message" in c->err with
 * MUSE_ERR_TEMPLATE, and c->failed set. The first error wins: later calls change nothing.
 * Always returns false, so `return muse_jerr(c, ...);` reports and unwinds in one step.
 */
bool muse_jerr(struct jctx *c, const char *fmt, ...) MUSE_PRINTF(2, 3);

/*
 * values: construction. Values are passed by value and copied shallowly; what they point to
 * (strings, lists, dicts) is in the render arena and lives until the render ends. Constructors
 * that allocate take the render context, copy their input (s need not outlive the call), and
 * on failure record "out of memory" with muse_jerr.
 */
struct jv muse_jv_undef(struct jstr *name);
struct jv muse_jv_none(void);
struct jv muse_jv_bool(bool b);
struct jv muse_jv_int(int64_t i);
struct jv muse_jv_float(double f);
struct jv muse_jv_str(struct jstr *s);
struct jstr *muse_jstr_new(struct jctx *c, const char *s, size_t len); /* NULL on OOM (error set) */
struct jv muse_jv_strn(struct jctx *c, const char *s, size_t len);     /* UNDEF kind on OOM */
struct jlist *muse_jlist_new(struct jctx *c, size_t cap);
bool muse_jlist_push(struct jctx *c, struct jlist *l, struct jv v);
struct jdict *muse_jdict_new(struct jctx *c, size_t cap);
/* Set key to val: an equal key's value is replaced in place, a new key appended (insertion order). */
bool muse_jdict_set(struct jctx *c, struct jdict *d, struct jv key, struct jv val);
/* The value slot of key in d, or NULL. The slot is live until d next grows (muse_jdict_set of a
 * new key may move the arrays; the old slot then stays readable but stale). */
struct jv *muse_jdict_get(const struct jdict *d, struct jv key);
struct jv *muse_jdict_get_str(const struct jdict *d, const char *key, size_t len);
/* A deep copy of JSON j (null -> None; integral numbers within int64 -> int; objects keep their key order). */
bool muse_jv_from_json(struct jctx *c, const cJSON *j, struct jv *out);

/* values: Python semantics */
bool muse_jv_truthy(struct jv v);
bool muse_jv_equal(struct jv a, struct jv b);
bool muse_jv_is_str(struct jv v, const char *s);
/* Python ordering for numbers, strings and lists: *res = -1/0/1; false on unorderable. */
bool muse_jv_compare(struct jctx *c, struct jv a, struct jv b, int *res);
/* str(v) appended to b (undefined -> ""). false on error (e.g. a value with no str). */
bool muse_jv_to_str(struct jctx *c, struct jv v, struct jbuf *b);
/* str(v) as a new string value. */
bool muse_jv_stringify(struct jctx *c, struct jv v, struct jv *out);
/* repr(v) appended to b. */
bool muse_jv_repr(struct jctx *c, struct jv v, struct jbuf *b);
/* json.dumps(v, ensure_ascii, indent (NULL = none), separators, sort_keys). */
struct jjson_opts {
    bool ensure_ascii;
    const char *indent;  /* NULL: no indent */
    const char *item_sep, *key_sep;
    bool sort_keys;
};
bool muse_jv_to_json(struct jctx *c, struct jv v, const struct jjson_opts *o, struct jbuf *b);
const char *muse_jv_type_name(struct jv v);
/* markupsafe.escape of s appended to b. */
void muse_jhtml_escape(struct jbuf *b, const char *s, size_t n);
/* UTF-8 helpers */
size_t muse_jutf8_len(const char *s, size_t n);                /* code points */
size_t muse_jutf8_offset(const char *s, size_t n, size_t cp);  /* byte offset of code point cp */
bool muse_jis_space_at(const char *s, size_t n, size_t pos, size_t *clen); /* Python whitespace */
bool muse_jrstrip_len(const char *s, size_t n, size_t *out_n);  /* helper: len after rstrip */
/* Sequence view: items of a list/tuple, characters of a string, keys of a dict. */
bool muse_jv_iterate(struct jctx *c, struct jv v, struct jlist **out);

/* builtins (jinja_builtins.c) */
enum jbuiltin_id {
    JB_RANGE, JB_NAMESPACE, JB_RAISE, JB_STRFTIME, JB_DICT, JB_COUNT_
};
bool muse_jinja_call_builtin(struct jctx *c, int id, struct jv *args, size_t n_args,
                             const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out);
bool muse_jinja_call_method(struct jctx *c, struct jmethod *m, struct jv *args, size_t n_args,
                            const char **kwnames, struct jv *kwargs, size_t n_kwargs, struct jv *out);
bool muse_jinja_apply_filter(struct jctx *c, const char *name, struct jv v, struct jv *args,
                             size_t n_args, const char **kwnames, struct jv *kwargs, size_t n_kwargs,
                             struct jv *out);
bool muse_jinja_apply_test(struct jctx *c, const char *name, struct jv v, struct jv *args,
                           size_t n_args, bool *out);
/* a.name on a value: a method object when `name` is a method of v's type, else a key lookup. */
bool muse_jinja_getattr(struct jctx *c, struct jv v, const char *name, size_t len, struct jv *out);
bool muse_jinja_getitem(struct jctx *c, struct jv v, struct jv key, struct jv *out);
