/* json_schema.c - JSON Schema -> GBNF (json_schema.h): the schema walk, into a rule set (gbnf_rules.c);
 * patterns: json_regex.c; bounded integers: json_schema_int.c. */
#include "gen/json_schema.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>

#include "core/error.h"
#include "core/utf8.h"
#include "gen/gbnf_buf.h"
#include "gen/gbnf_rules.h"
#include "gen/json_regex.h"
#include "gen/json_schema_int.h"

#define MAX_DEPTH 128   /* nested schemas */
#define MAX_COUNT 100000 /* the largest minItems / maxItems / minLength / maxLength accepted */

/* ---- primitives (llama.cpp's, except `char`: no \u escapes of UTF-16 surrogates) ---------- */

struct prim {
    const char *name, *body, *deps[6];
};

static const struct prim prims[] = {
    {"boolean", "(\"true\" | \"false\")", {NULL}},
    {"decimal-part", "[0-9]{1,16}", {NULL}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {NULL}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?", {"integral-part", "decimal-part", NULL}},
    {"integer", "(\"-\"? integral-part)", {"integral-part", NULL}},
    {"value", "object | array | string | number | boolean | null", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space \"}\"", {"string", "value", NULL}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value", NULL}},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"", {NULL}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))", {NULL}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char", NULL}},
    {"null", "\"null\"", {NULL}},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {NULL}},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", {NULL}},
    {"date-time", "date \"T\" time", {"date", "time", NULL}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date", NULL}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time", NULL}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time", NULL}},
};
#define N_PRIMS (sizeof prims / sizeof prims[0])

static const char SPACE_RULE[] = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

static const struct prim *find_prim(const char *name) {
    for (size_t i = 0; i < N_PRIMS; i++)
        if (!strcmp(prims[i].name, name)) return &prims[i];
    return NULL;
}

static bool is_reserved(const char *name) { return !strcmp(name, "root") || find_prim(name); }

/* ---- the converter ------------------------------------------------------------------------ */

struct conv {
    struct muse_gbnf_rules *r;
    const cJSON *doc;
    struct muse_error *err;
    muse_status st;
    const char *resolving[MAX_DEPTH]; /* $refs being converted (a cycle stops at them) */
    int n_resolving;
    int depth;
};

static void cfail(struct conv *c, muse_status st, const char *path, const char *fmt, ...) MUSE_PRINTF(4, 5);
static void cfail(struct conv *c, muse_status st, const char *path, const char *fmt, ...) {
    if (c->st != MUSE_OK) return;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->st = muse_error_set(c->err, st, "JSON schema at %s: %s", path[0] ? path : "#", what);
}

static void cnomem(struct conv *c) {
    if (c->st != MUSE_OK) return;
    c->st = muse_error_set(c->err, MUSE_ERR_NOMEM, "JSON schema: out of memory");
}

static const char *add_rule(struct conv *c, const char *name, const char *body) {
    if (c->st != MUSE_OK || !body) {
        if (!body) cnomem(c);
        return NULL;
    }
    const char *n = muse_gbnf_rules_add(c->r, name, body);
    if (!n) cnomem(c);
    return n;
}

static const char *add_prim(struct conv *c, const char *name) {
    const struct prim *p = find_prim(name);
    const char *n = add_rule(c, name, p->body);
    for (int i = 0; n && i < 6 && p->deps[i]; i++)
        if (!muse_gbnf_rules_has(c->r, p->deps[i]) && !add_prim(c, p->deps[i])) return NULL;
    return n;
}

static const char *visit(struct conv *c, const cJSON *s, const char *name, const char *path);

static bool has(const cJSON *s, const char *key) { return cJSON_GetObjectItemCaseSensitive(s, key) != NULL; }
static const cJSON *get(const cJSON *s, const char *key) { return cJSON_GetObjectItemCaseSensitive(s, key); }

/* A JSON value as compact JSON text (malloc'd), as the literal a const/enum generates. */
static char *dump(const cJSON *v) { return cJSON_PrintUnformatted(v); }

static char *literal_of_value(const cJSON *v) {
    char *j = dump(v);
    if (!j) return NULL;
    char *lit = muse_gbnf_literal(j, strlen(j));
    free(j);
    return lit;
}

static void path_join(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path[0] ? path : "#", a, b ? "/" : "", b ? b : "");
}

/* Keywords that constrain what we cannot generate: always an error. */
static const char *const unsupported[] = {
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "minProperties", "maxProperties", "multipleOf",
    "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef",
};

/* Keywords that carry no constraint (ignored wherever they are). */
static bool is_annotation(const char *k) {
    static const char *const ann[] = {
        "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding", "contentSchema",
        "nullable", "discriminator", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "strict",
    };
    if (!strncmp(k, "x-", 2)) return true;
    for (size_t i = 0; i < sizeof ann / sizeof ann[0]; i++)
        if (!strcmp(k, ann[i])) return true;
    return false;
}

static bool check_unsupported(struct conv *c, const cJSON *s, const char *path) {
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (has(s, unsupported[i])) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "'%s' is not supported (it cannot be enforced by a grammar)", unsupported[i]);
            return false;
        }
    const cJSON *u = get(s, "uniqueItems");
    if (u && !cJSON_IsFalse(u)) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "'uniqueItems' is not supported (it cannot be enforced by a grammar)");
        return false;
    }
    u = get(s, "unevaluatedProperties");
    if (u && !cJSON_IsFalse(u)) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "'unevaluatedProperties' other than false is not supported");
        return false;
    }
    return true;
}

/* Only annotations and the keys in `allowed` next to `what`: else an error. */
static bool only_siblings(struct conv *c, const cJSON *s, const char *what, const char *const *allowed, const char *path) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (is_annotation(k->string) || !strcmp(k->string, what)) continue;
        bool ok = false;
        for (int i = 0; allowed && allowed[i]; i++) ok |= !strcmp(k->string, allowed[i]);
        if (!ok && !strcmp(k->string, "uniqueItems") && cJSON_IsFalse(k)) ok = true;
        if (!ok) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "'%s' next to '%s' is not supported", k->string, what);
            return false;
        }
    }
    return true;
}

/* ---- repetitions ----------------------------------------------------------------------- */

/* item{min,max} appended to b (muse_gbnf_repeat: large counts become a chain of rules). */
static void repeat_braces(struct conv *c, struct gbuf *b, const char *item, long long min, long long max, const char *base) {
    char *rep = muse_gbnf_repeat(c->r, item, min, max, base);
    if (!rep) {
        cnomem(c);
        return;
    }
    gbuf_puts(b, rep);
    free(rep);
}

/* llama.cpp's build_repetition (with the large-count split above). */
static void build_repetition(struct conv *c, struct gbuf *b, const char *item, long long min, long long max, const char *sep,
                             const char *base) {
    if (max == 0) return;
    if (min == 0 && max == 1) {
        gbuf_printf(b, "%s?", item);
        return;
    }
    if (!sep) {
        if (min == 1 && max < 0) gbuf_printf(b, "%s+", item);
        else if (min == 0 && max < 0) gbuf_printf(b, "%s*", item);
        else repeat_braces(c, b, item, min, max, base);
        return;
    }
    struct gbuf inner = {0}, rest = {0};
    gbuf_printf(&inner, "(%s %s)", sep, item);
    if (!gbuf_str(&inner)) {
        b->oom = true;
        return;
    }
    build_repetition(c, &rest, inner.s, min == 0 ? 0 : min - 1, max < 0 ? -1 : max - 1, NULL, base);
    if (min == 0) gbuf_putc(b, '(');
    gbuf_puts(b, item);
    if (rest.n) {
        gbuf_putc(b, ' ');
        gbuf_puts(b, gbuf_str(&rest) ? rest.s : "");
    }
    if (min == 0) gbuf_puts(b, ")?");
    if (rest.oom) b->oom = true;
    gbuf_free(&inner);
    gbuf_free(&rest);
}

/* A bound of an integer schema: *v rounded inwards; false (after an error) when not a number. */
static bool int_bound(struct conv *c, const cJSON *s, const char *key, bool round_up, int64_t *v, const char *path) {
    const cJSON *x = get(s, key);
    if (!cJSON_IsNumber(x)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'%s' must be a number", key);
        return false;
    }
    double d = round_up ? ceil(x->valuedouble) : floor(x->valuedouble);
    if (!(d > -9.2e18 && d < 9.2e18)) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "'%s' %g is outside the 64-bit integers", key, x->valuedouble);
        return false;
    }
    *v = (int64_t)d;
    return true;
}

/* ---- schema kinds ------------------------------------------------------------------------ */

static const char *visit_integer(struct conv *c, const cJSON *s, const char *rule_name, const char *path) {
    int64_t lo = INT64_MIN, hi = INT64_MAX, v;
    if (has(s, "minimum")) {
        if (!int_bound(c, s, "minimum", true, &v, path)) return NULL;
        lo = v;
    }
    if (has(s, "exclusiveMinimum")) {
        if (!int_bound(c, s, "exclusiveMinimum", false, &v, path)) return NULL;
        if (v + 1 > lo) lo = v + 1;
    }
    if (has(s, "maximum")) {
        if (!int_bound(c, s, "maximum", false, &v, path)) return NULL;
        hi = v;
    }
    if (has(s, "exclusiveMaximum")) {
        if (!int_bound(c, s, "exclusiveMaximum", true, &v, path)) return NULL;
        if (v - 1 < hi) hi = v - 1;
    }
    if (lo == INT64_MIN && hi == INT64_MAX) return add_rule(c, rule_name, add_prim(c, "integer"));
    if (lo > hi) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "no integer lies within the bounds");
        return NULL;
    }
    /* the generator needs -lo / -hi: keep clear of INT64_MIN */
    if (lo < -INT64_MAX || hi < -INT64_MAX) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "integer bounds beyond +-(2^63-1) are not supported");
        return NULL;
    }
    struct gbuf b = {0};
    gbuf_putc(&b, '(');
    muse_json_int_range(&b, lo, hi, 16, true);
    gbuf_putc(&b, ')');
    const char *n = add_rule(c, rule_name, gbuf_str(&b));
    gbuf_free(&b);
    return n;
}

/* minLength etc.: a non-negative integer (or absent: def). */
static bool get_count(struct conv *c, const cJSON *s, const char *key, long long def, long long *out, const char *path) {
    const cJSON *x = get(s, key);
    *out = def;
    if (!x) return true;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'%s' must be a non-negative integer", key);
        return false;
    }
    /* a count past the limit would take a chain of count / 2000 rules (and as many expansions in
     * the parser): seconds of work for an untrusted schema (found by fuzz_json_schema) */
    if (x->valuedouble > MAX_COUNT) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "'%s' %.0f is more than muse's limit of %d", key, x->valuedouble, MAX_COUNT);
        return false;
    }
    *out = (long long)x->valuedouble;
    return true;
}

/* A known string format: "uuid", "date", "time", "date-time"; NULL otherwise (an annotation). */
static const char *known_format(const cJSON *s) {
    const cJSON *f = get(s, "format");
    if (!cJSON_IsString(f)) return NULL;
    const char *v = f->valuestring;
    if (!strcmp(v, "date") || !strcmp(v, "time") || !strcmp(v, "date-time")) return v;
    if (!strcmp(v, "uuid") || (!strncmp(v, "uuid", 4) && v[4] >= '1' && v[4] <= '5' && !v[5])) return "uuid";
    return NULL;
}

static const char *visit_string(struct conv *c, const cJSON *s, const char *rule_name, const char *path) {
    long long min, max;
    if (!get_count(c, s, "minLength", 0, &min, path) || !get_count(c, s, "maxLength", -1, &max, path)) return NULL;
    bool lengths = has(s, "minLength") || has(s, "maxLength");
    const cJSON *pat = get(s, "pattern");
    const char *fmt = known_format(s);
    if (pat) {
        if (!cJSON_IsString(pat)) {
            cfail(c, MUSE_ERR_FORMAT, path, "'pattern' must be a string");
            return NULL;
        }
        if (lengths || fmt) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "'pattern' together with '%s' is not supported",
                  fmt ? "format" : "minLength/maxLength");
            return NULL;
        }
        char *body = NULL;
        char ppath[300];
        path_join(ppath, sizeof ppath, path, "pattern", NULL);
        muse_status st = muse_json_regex_to_gbnf(c->r, pat->valuestring, rule_name, &body, c->err);
        if (st != MUSE_OK) {
            c->st = st;
            muse_error_prefix(c->err, "JSON schema at %s: ", ppath);
            return NULL;
        }
        struct gbuf b = {0};
        gbuf_printf(&b, "\"\\\"\" (%s) \"\\\"\"", body);
        free(body);
        const char *n = add_rule(c, rule_name, gbuf_str(&b));
        gbuf_free(&b);
        return n;
    }
    if (fmt) {
        if (lengths) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "'format' together with minLength/maxLength is not supported");
            return NULL;
        }
        if (!strcmp(fmt, "uuid")) return add_rule(c, rule_name, add_prim(c, "uuid"));
        char prim[32];
        snprintf(prim, sizeof prim, "%s-string", fmt);
        return add_rule(c, rule_name, add_prim(c, prim));
    }
    if (lengths) {
        if (max >= 0 && max < min) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "maxLength is below minLength");
            return NULL;
        }
        const char *ch = add_prim(c, "char");
        if (!ch) return NULL;
        struct gbuf b = {0};
        gbuf_puts(&b, "\"\\\"\" ");
        build_repetition(c, &b, ch, min, max, NULL, rule_name);
        gbuf_puts(&b, " \"\\\"\"");
        const char *n = add_rule(c, rule_name, gbuf_str(&b));
        gbuf_free(&b);
        return n;
    }
    return add_rule(c, rule_name, add_prim(c, "string"));
}

static const char *visit_array(struct conv *c, const cJSON *s, const char *name, const char *rule_name, const char *path) {
    long long min, max;
    if (!get_count(c, s, "minItems", 0, &min, path) || !get_count(c, s, "maxItems", -1, &max, path)) return NULL;
    if (max >= 0 && max < min) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "maxItems is below minItems");
        return NULL;
    }
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
    const cJSON *tuple = cJSON_IsArray(prefix) ? prefix : cJSON_IsArray(items) ? items : NULL;
    const cJSON *rest = tuple == prefix ? items : NULL; /* items after prefixItems (2020-12) */
    if (prefix && !cJSON_IsArray(prefix)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'prefixItems' must be an array of schemas");
        return NULL;
    }
    char sub[300], p[300];
    snprintf(sub, sizeof sub, "%s%s", name, name[0] ? "-" : "");
    if (tuple) {
        int k = cJSON_GetArraySize(tuple);
        bool open_rest = rest && !cJSON_IsFalse(rest);
        if (!open_rest && min > k) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "minItems above the number of tuple items is not supported");
            return NULL;
        }
        if (max >= 0 && max < k) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "maxItems below the number of tuple items is not supported");
            return NULL;
        }
        struct gbuf b = {0};
        gbuf_puts(&b, "\"[\" space ");
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, tuple) {
            char nm[340], idx[16];
            snprintf(nm, sizeof nm, "%stuple-%d", sub, i);
            snprintf(idx, sizeof idx, "%d", i);
            path_join(p, sizeof p, path, tuple == prefix ? "prefixItems" : "items", idx);
            const char *r = visit(c, it, nm, p);
            if (!r) {
                gbuf_free(&b);
                return NULL;
            }
            gbuf_printf(&b, "%s%s", i ? " \",\" space " : "", r);
            i++;
        }
        if (open_rest) {
            char nm[340];
            snprintf(nm, sizeof nm, "%sitem", sub);
            path_join(p, sizeof p, path, "items", NULL);
            const char *r = visit(c, rest, nm, p);
            if (!r) {
                gbuf_free(&b);
                return NULL;
            }
            struct gbuf item = {0};
            gbuf_printf(&item, "(\",\" space %s)", r);
            gbuf_putc(&b, ' ');
            long long more_min = min > k ? min - k : 0, more_max = max < 0 ? -1 : max - k;
            if (k == 0) { /* no prefix: a plain list */
                b.n = 0;
                gbuf_puts(&b, "\"[\" space ");
                build_repetition(c, &b, r, min, max, "\",\" space", rule_name);
            } else {
                build_repetition(c, &b, gbuf_str(&item) ? item.s : "", more_min, more_max, NULL, rule_name);
            }
            gbuf_free(&item);
        }
        gbuf_puts(&b, " space \"]\"");
        const char *n = add_rule(c, rule_name, gbuf_str(&b));
        gbuf_free(&b);
        return n;
    }
    if (!items || cJSON_IsTrue(items) || (cJSON_IsObject(items) && !items->child)) {
        if (min == 0 && max < 0) return add_rule(c, rule_name, add_prim(c, "array"));
    }
    char nm[340];
    snprintf(nm, sizeof nm, "%sitem", sub);
    path_join(p, sizeof p, path, "items", NULL);
    const char *r = items ? visit(c, items, nm, p) : add_prim(c, "value");
    if (!r) return NULL;
    struct gbuf b = {0};
    gbuf_puts(&b, "\"[\" space ");
    build_repetition(c, &b, r, min, max, "\",\" space", rule_name);
    gbuf_puts(&b, " space \"]\"");
    const char *n = add_rule(c, rule_name, gbuf_str(&b));
    gbuf_free(&b);
    return n;
}

/* One property of an object rule under construction. */
struct prop {
    const char *name;     /* the property name (borrowed from the schema) */
    const cJSON *schema;
    const char *path;
    bool required;
    char *kv;             /* its NAME-kv rule (owned copy) */
};

/* llama.cpp's _not_strings: a JSON string that is none of names[0..n) (a trie of code points). */
struct trie_node {
    uint32_t cp;
    int first_child, next;
    bool end;
};

struct trie {
    struct trie_node *n;
    int count, cap;
    bool oom;
};

static int trie_new(struct trie *t, uint32_t cp) {
    if (t->count == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        struct trie_node *nn = realloc(t->n, (size_t)cap * sizeof *nn);
        if (!nn) {
            t->oom = true;
            return -1;
        }
        t->n = nn;
        t->cap = cap;
    }
    t->n[t->count] = (struct trie_node){cp, -1, -1, false};
    return t->count++;
}

static uint32_t next_cp(const unsigned char **p) {
    const unsigned char *s = *p;
    uint32_t c = s[0];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c >= 0x80) c &= (0xFFu >> (len + 1));
    for (int i = 1; i < len && s[i]; i++) c = (c << 6) | (s[i] & 0x3F);
    for (int i = 0; i < len && **p; i++) (*p)++;
    return c;
}

static void trie_add(struct trie *t, const char *s) {
    int node = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p && !t->oom) {
        uint32_t cp = next_cp(&p);
        int ch = t->n[node].first_child, last = -1;
        while (ch >= 0 && t->n[ch].cp != cp) {
            last = ch;
            ch = t->n[ch].next;
        }
        if (ch < 0) {
            ch = trie_new(t, cp);
            if (ch < 0) return;
            if (last >= 0) t->n[last].next = ch;
            else t->n[node].first_child = ch;
        }
        node = ch;
    }
    t->n[node].end = true;
}

static void not_strings_visit(struct trie *t, int idx, const char *char_rule, struct gbuf *b) {
    struct gbuf rejects = {0};
    bool first = true;
    for (int ch = t->n[idx].first_child; ch >= 0; ch = t->n[ch].next) {
        gbuf_put_gbnf_char(&rejects, t->n[ch].cp, true);
        if (!first) gbuf_puts(b, " | ");
        first = false;
        gbuf_putc(b, '[');
        gbuf_put_gbnf_char(b, t->n[ch].cp, true);
        gbuf_putc(b, ']');
        if (t->n[ch].first_child >= 0) {
            gbuf_puts(b, " (");
            not_strings_visit(t, ch, char_rule, b);
            gbuf_putc(b, ')');
        } else {
            gbuf_printf(b, " %s+", char_rule);
        }
    }
    if (t->n[idx].first_child >= 0) gbuf_printf(b, " | [^\"%s] %s*", gbuf_str(&rejects) ? rejects.s : "", char_rule);
    gbuf_free(&rejects);
}

/* llama.cpp's get_recursive_refs: optional kv rules ks[0..n) in order, each at most once. */
static void recursive_refs(struct conv *c, struct gbuf *b, const char **kv, const char **key, int n,
                           bool first_is_optional, const char *name, const char *sep) {
    bool star = !strcmp(key[0], "*");
    if (first_is_optional) gbuf_printf(b, "( \",\" space %s )%s", kv[0], star ? "*" : "?");
    else if (star) gbuf_printf(b, "%s ( \",\" space %s )*", kv[0], kv[0]);
    else gbuf_puts(b, kv[0]);
    if (n > 1) {
        struct gbuf rest = {0};
        recursive_refs(c, &rest, kv + 1, key + 1, n - 1, true, name, sep);
        char nm[400];
        snprintf(nm, sizeof nm, "%s%s%s-rest", name, sep, key[0]);
        const char *rn = add_rule(c, nm, gbuf_str(&rest));
        gbuf_printf(b, " %s", rn ? rn : "");
        gbuf_free(&rest);
    }
}

static const char *build_object(struct conv *c, struct prop *props, int n_props, const cJSON *additional, const char *name,
                                const char *rule_name, const char *path) {
    const char *sep = name[0] ? "-" : "";
    for (int i = 0; i < n_props; i++) {
        char nm[400];
        snprintf(nm, sizeof nm, "%s%s%s", name, sep, props[i].name);
        const char *r = visit(c, props[i].schema, nm, props[i].path);
        if (!r) return NULL;
        char *key = NULL;
        cJSON *js = cJSON_CreateString(props[i].name);
        char *kj = js ? dump(js) : NULL;
        cJSON_Delete(js);
        key = kj ? muse_gbnf_literal(kj, strlen(kj)) : NULL;
        free(kj);
        struct gbuf kv = {0};
        gbuf_printf(&kv, "%s space \":\" space %s", key ? key : "", r);
        free(key);
        char kvn[420];
        snprintf(kvn, sizeof kvn, "%s-kv", nm);
        const char *k = key || !kv.oom ? add_rule(c, kvn, gbuf_str(&kv)) : NULL;
        gbuf_free(&kv);
        if (!k || !(props[i].kv = strdup(k))) {
            cnomem(c);
            return NULL;
        }
    }
    char *add_kv = NULL;
    if (additional) {
        char sub[360], p[300];
        snprintf(sub, sizeof sub, "%s%sadditional", name, sep);
        const char *value;
        if (cJSON_IsTrue(additional) || (cJSON_IsObject(additional) && !additional->child)) {
            value = add_prim(c, "value");
        } else {
            char nm[380];
            snprintf(nm, sizeof nm, "%s-value", sub);
            path_join(p, sizeof p, path, "additionalProperties", NULL);
            value = visit(c, additional, nm, p);
        }
        if (!value) return NULL;
        const char *key_rule;
        if (!n_props) {
            key_rule = add_prim(c, "string");
        } else {
            const char *ch = add_prim(c, "char");
            struct trie t = {0};
            if (!ch || trie_new(&t, 0) < 0) {
                free(t.n);
                cnomem(c);
                return NULL;
            }
            for (int i = 0; i < n_props; i++) trie_add(&t, props[i].name);
            struct gbuf b = {0};
            gbuf_puts(&b, "[\"] ( ");
            not_strings_visit(&t, 0, ch, &b);
            gbuf_printf(&b, " )%s [\"]", t.n[0].end ? "" : "?");
            char nm[380];
            snprintf(nm, sizeof nm, "%s-k", sub);
            key_rule = t.oom ? NULL : add_rule(c, nm, gbuf_str(&b));
            free(t.n);
            gbuf_free(&b);
            if (!key_rule) {
                cnomem(c);
                return NULL;
            }
        }
        struct gbuf kv = {0};
        gbuf_printf(&kv, "%s \":\" space %s", key_rule, value);
        char nm[380];
        snprintf(nm, sizeof nm, "%s-kv", sub);
        const char *k = add_rule(c, nm, gbuf_str(&kv));
        gbuf_free(&kv);
        if (!k || !(add_kv = strdup(k))) {
            cnomem(c);
            return NULL;
        }
    }
    /* required first (in schema order), then the optional ones, "*" (additional) last */
    int n_req = 0, n_opt = 0;
    const char **req = malloc(((size_t)n_props + 1) * sizeof *req), **opt = malloc(((size_t)n_props + 1) * sizeof *opt);
    const char **opt_key = malloc(((size_t)n_props + 1) * sizeof *opt_key);
    if (!req || !opt || !opt_key) {
        free(req);
        free(opt);
        free(opt_key);
        free(add_kv);
        cnomem(c);
        return NULL;
    }
    for (int i = 0; i < n_props; i++) {
        if (props[i].required) req[n_req++] = props[i].kv;
        else {
            opt_key[n_opt] = props[i].name;
            opt[n_opt++] = props[i].kv;
        }
    }
    if (add_kv) {
        opt_key[n_opt] = "*";
        opt[n_opt++] = add_kv;
    }
    struct gbuf b = {0};
    if (!n_req && !n_opt) {
        gbuf_puts(&b, "\"{\" space \"}\"");
    } else {
        gbuf_puts(&b, "\"{\" space ");
        for (int i = 0; i < n_req; i++) gbuf_printf(&b, "%s%s", i ? " \",\" space " : "", req[i]);
        if (n_opt) {
            gbuf_puts(&b, " (");
            if (n_req) gbuf_puts(&b, " \",\" space ( ");
            for (int i = 0; i < n_opt; i++) {
                if (i) gbuf_puts(&b, " | ");
                recursive_refs(c, &b, opt + i, opt_key + i, n_opt - i, false, name, sep);
            }
            if (n_req) gbuf_puts(&b, " )");
            gbuf_puts(&b, " )?");
        }
        gbuf_puts(&b, " space \"}\"");
    }
    free(req);
    free(opt);
    free(opt_key);
    free(add_kv);
    const char *n = add_rule(c, rule_name, gbuf_str(&b));
    gbuf_free(&b);
    return n;
}

static void free_props(struct prop *props, int n) {
    for (int i = 0; i < n; i++) {
        free(props[i].kv);
        free((char *)props[i].path);
    }
    free(props);
}

/* Collect properties of an object schema (appending); required from `s`. */
static bool collect_props(struct conv *c, const cJSON *s, struct prop **props, int *n, const char *path) {
    const cJSON *pr = get(s, "properties"), *req = get(s, "required"), *it;
    if (pr && !cJSON_IsObject(pr)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'properties' must be an object");
        return false;
    }
    if (req && !cJSON_IsArray(req)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'required' must be an array of strings");
        return false;
    }
    cJSON_ArrayForEach(it, pr) {
        int dup = -1;
        for (int i = 0; i < *n; i++)
            if (!strcmp((*props)[i].name, it->string)) dup = i;
        bool required = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, req) required |= cJSON_IsString(r) && !strcmp(r->valuestring, it->string);
        if (dup >= 0) {
            if (!cJSON_Compare((*props)[dup].schema, it, true)) {
                cfail(c, MUSE_ERR_UNSUPPORTED, path, "property '%s' has two different schemas in allOf", it->string);
                return false;
            }
            (*props)[dup].required |= required;
            continue;
        }
        struct prop *np = realloc(*props, ((size_t)*n + 1) * sizeof *np);
        if (!np) {
            cnomem(c);
            return false;
        }
        *props = np;
        char p[300];
        path_join(p, sizeof p, path, "properties", it->string);
        np[*n] = (struct prop){it->string, it, strdup(p), required, NULL};
        if (!np[*n].path) {
            cnomem(c);
            return false;
        }
        (*n)++;
    }
    cJSON_ArrayForEach(it, req) {
        if (!cJSON_IsString(it)) {
            cfail(c, MUSE_ERR_FORMAT, path, "'required' must be an array of strings");
            return false;
        }
        bool found = false;
        for (int i = 0; i < *n; i++)
            if (!strcmp((*props)[i].name, it->valuestring)) {
                (*props)[i].required = true;
                found = true;
            }
        if (!found) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "required property '%s' has no schema in 'properties'", it->valuestring);
            return false;
        }
    }
    return true;
}

static const char *visit_object(struct conv *c, const cJSON *s, const char *name, const char *rule_name, const char *path) {
    struct prop *props = NULL;
    int n = 0;
    if (!collect_props(c, s, &props, &n, path)) {
        free_props(props, n);
        return NULL;
    }
    const cJSON *add = get(s, "additionalProperties");
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add)) {
        free_props(props, n);
        cfail(c, MUSE_ERR_FORMAT, path, "'additionalProperties' must be a boolean or a schema");
        return NULL;
    }
    /* absent: none when there are properties (llama.cpp's default), else any */
    static const cJSON any_value = {.type = cJSON_True};
    if (!add) add = has(s, "properties") ? NULL : &any_value;
    else if (cJSON_IsFalse(add)) add = NULL;
    bool add_any = add && (cJSON_IsTrue(add) || (cJSON_IsObject(add) && !add->child));
    const char *r;
    if (!n && add_any) r = add_rule(c, rule_name, add_prim(c, "object"));
    else r = build_object(c, props, n, add, name, rule_name, path);
    free_props(props, n);
    return r;
}

/* JSON type of a value, as a schema type name. */
static const char *json_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9e15 ? "integer" : "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsArray(v)) return "array";
    return "object";
}

static bool type_admits(const char *type, const cJSON *v) {
    if (!type) return true;
    const char *t = json_type(v);
    return !strcmp(type, t) || (!strcmp(type, "number") && !strcmp(t, "integer"));
}

static const char *visit_enum(struct conv *c, const cJSON *s, const char *rule_name, const char *type, const char *path) {
    const cJSON *cst = get(s, "const"), *en = get(s, "enum"), *v;
    struct gbuf b = {0};
    int count = 0;
    if (cst) {
        if (type_admits(type, cst)) {
            char *lit = literal_of_value(cst);
            gbuf_puts(&b, lit ? lit : "");
            if (!lit) b.oom = true;
            free(lit);
            count++;
        }
    } else {
        if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) {
            cfail(c, MUSE_ERR_FORMAT, path, "'enum' must be a non-empty array");
            return NULL;
        }
        gbuf_putc(&b, '(');
        cJSON_ArrayForEach(v, en) {
            if (!type_admits(type, v)) continue;
            char *lit = literal_of_value(v);
            gbuf_printf(&b, "%s%s", count ? " | " : "", lit ? lit : "");
            if (!lit) b.oom = true;
            free(lit);
            count++;
        }
        gbuf_putc(&b, ')');
    }
    if (!count) {
        gbuf_free(&b);
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "no value of '%s' has the schema's type", cst ? "const" : "enum");
        return NULL;
    }
    const char *n = add_rule(c, rule_name, gbuf_str(&b));
    gbuf_free(&b);
    return n;
}

/* Resolve a local $ref ("#", "#/a/b~1c/0") in the document; NULL after an error. */
static const cJSON *resolve_pointer(struct conv *c, const char *ref, const char *path) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/')) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "$ref '%s': only references into the same document (#/...) are supported", ref);
        return NULL;
    }
    const cJSON *t = c->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (cJSON_IsObject(t)) {
            t = cJSON_GetObjectItemCaseSensitive(t, tok);
        } else if (cJSON_IsArray(t)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            t = *end || idx < 0 ? NULL : cJSON_GetArrayItem(t, (int)idx);
        } else {
            t = NULL;
        }
        if (!t) {
            cfail(c, MUSE_ERR_FORMAT, path, "cannot resolve $ref '%s' ('%s' not found)", ref, tok);
            return NULL;
        }
    }
    return t;
}

static const char *visit_ref(struct conv *c, const cJSON *s, const char *rule_name, const char *path) {
    const cJSON *ref = get(s, "$ref");
    static const char *const allowed[] = {NULL};
    if (!only_siblings(c, s, "$ref", allowed, path)) return NULL;
    if (!cJSON_IsString(ref)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'$ref' must be a string");
        return NULL;
    }
    const char *frag = strchr(ref->valuestring, '#');
    char ref_name[300];
    snprintf(ref_name, sizeof ref_name, "ref%s", frag ? frag + 1 : ref->valuestring);
    const cJSON *target = resolve_pointer(c, ref->valuestring, path);
    if (!target) return NULL;
    /* the rule name the target gets (as add_rule will escape it) */
    struct gbuf esc = {0};
    bool run = false;
    for (const char *p = ref_name; *p; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-';
        if (ok) gbuf_putc(&esc, *p);
        else if (!run) gbuf_putc(&esc, '-');
        run = !ok;
    }
    const char *esc_name = gbuf_str(&esc);
    if (!esc_name) {
        cnomem(c);
        return NULL;
    }
    bool busy = muse_gbnf_rules_has(c->r, esc_name);
    for (int i = 0; i < c->n_resolving && !busy; i++) busy = !strcmp(c->resolving[i], ref->valuestring);
    const char *target_rule = NULL;
    char *keep = strdup(esc_name);
    gbuf_free(&esc);
    if (!keep) {
        cnomem(c);
        return NULL;
    }
    if (busy) {
        target_rule = keep;
    } else {
        if (c->n_resolving == MAX_DEPTH) {
            free(keep);
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "$refs nested too deep");
            return NULL;
        }
        c->resolving[c->n_resolving++] = ref->valuestring;
        target_rule = visit(c, target, keep, ref->valuestring);
        c->n_resolving--;
    }
    const char *n = target_rule ? add_rule(c, rule_name, target_rule) : NULL;
    free(keep);
    return n;
}

/* Is s (resolving $refs) an object schema allOf can merge? */
static const cJSON *deref(struct conv *c, const cJSON *s, const char *path) {
    for (int hops = 0; cJSON_IsObject(s) && has(s, "$ref"); hops++) {
        if (hops > MAX_DEPTH) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "$ref cycle in allOf");
            return NULL;
        }
        const cJSON *r = get(s, "$ref");
        if (!cJSON_IsString(r)) {
            cfail(c, MUSE_ERR_FORMAT, path, "'$ref' must be a string");
            return NULL;
        }
        s = resolve_pointer(c, r->valuestring, path);
    }
    return s;
}

static bool only_annotations(const cJSON *s) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) if (!is_annotation(k->string)) return false;
    return true;
}

static const char *visit_all_of(struct conv *c, const cJSON *s, const char *name, const char *rule_name, const char *path) {
    const cJSON *all = get(s, "allOf");
    if (!cJSON_IsArray(all) || !cJSON_GetArraySize(all)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'allOf' must be a non-empty array of schemas");
        return NULL;
    }
    /* components: the allOf entries and the schema's own keywords */
    cJSON *self = cJSON_Duplicate(s, true);
    if (!self) {
        cnomem(c);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(self, "allOf");
    /* {"type": T, "allOf": [...]}: T applies to the merged result */
    const char *self_type = NULL;
    const cJSON *st = get(self, "type"), *k;
    bool type_only = cJSON_IsString(st);
    cJSON_ArrayForEach(k, self) type_only &= is_annotation(k->string) || !strcmp(k->string, "type");
    if (type_only) self_type = st->valuestring;
    struct prop *props = NULL;
    int n = 0, n_enum = 0, n_obj = 0;
    cJSON *enum_vals = cJSON_CreateArray();
    const char *r = NULL;
    const cJSON *closed[MAX_DEPTH];
    int n_closed = 0;
    int i = -1;
    for (const cJSON *comp = self; comp && c->st == MUSE_OK; comp = (++i < cJSON_GetArraySize(all)) ? cJSON_GetArrayItem(all, i) : NULL) {
        char p[300], idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (comp == self) snprintf(p, sizeof p, "%s", path);
        else path_join(p, sizeof p, path, "allOf", idx);
        if (comp == self && type_only) continue;
        const cJSON *t = deref(c, comp, p);
        if (!t) break;
        if (cJSON_IsTrue(t) || (cJSON_IsObject(t) && only_annotations(t))) continue;
        const cJSON *ty = get(t, "type");
        if (cJSON_IsObject(t) && (has(t, "enum") || has(t, "const"))) {
            const cJSON *vals = has(t, "const") ? NULL : get(t, "enum"), *v;
            cJSON *mine = cJSON_CreateArray();
            if (vals) cJSON_ArrayForEach(v, vals) cJSON_AddItemToArray(mine, cJSON_Duplicate(v, true));
            else cJSON_AddItemToArray(mine, cJSON_Duplicate(get(t, "const"), true));
            if (!n_enum) {
                cJSON_Delete(enum_vals);
                enum_vals = mine;
            } else { /* intersect */
                cJSON *keep = cJSON_CreateArray();
                cJSON_ArrayForEach(v, enum_vals) {
                    const cJSON *w;
                    bool in = false;
                    cJSON_ArrayForEach(w, mine) in |= cJSON_Compare(v, w, true);
                    if (in) cJSON_AddItemToArray(keep, cJSON_Duplicate(v, true));
                }
                cJSON_Delete(enum_vals);
                cJSON_Delete(mine);
                enum_vals = keep;
            }
            n_enum++;
            continue;
        }
        bool objectish = cJSON_IsObject(t) && (has(t, "properties") || has(t, "additionalProperties") ||
                                               (cJSON_IsString(ty) && !strcmp(ty->valuestring, "object")));
        if (!objectish || has(t, "anyOf") || has(t, "oneOf") || has(t, "allOf") || (ty && !cJSON_IsString(ty))) {
            cfail(c, MUSE_ERR_UNSUPPORTED, p, "allOf is supported for objects (merged) and enums (intersected) only");
            break;
        }
        static const char *const obj_keys[] = {"type", "properties", "required", "additionalProperties", NULL};
        if (!check_unsupported(c, t, p) || !only_siblings(c, t, "type", obj_keys, p)) break;
        if (!collect_props(c, t, &props, &n, p)) break;
        const cJSON *add = get(t, "additionalProperties");
        if (add && !cJSON_IsTrue(add) && n_closed < MAX_DEPTH) closed[n_closed++] = t;
        n_obj++;
    }
    if (c->st == MUSE_OK && self_type && n_obj && strcmp(self_type, "object"))
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "allOf of objects under \"type\": \"%s\"", self_type);
    if (c->st == MUSE_OK && n_enum && n_obj) cfail(c, MUSE_ERR_UNSUPPORTED, path, "allOf mixing objects and enums is not supported");
    /* a component closed by additionalProperties must declare every merged property */
    for (int k = 0; k < n_closed && c->st == MUSE_OK; k++) {
        const cJSON *pr = get(closed[k], "properties");
        for (int j = 0; j < n && c->st == MUSE_OK; j++)
            if (!cJSON_GetObjectItemCaseSensitive(pr, props[j].name))
                cfail(c, MUSE_ERR_UNSUPPORTED, path,
                      "allOf: property '%s' is excluded by another part's additionalProperties", props[j].name);
    }
    if (c->st == MUSE_OK) {
        if (n_enum) {
            if (!cJSON_GetArraySize(enum_vals)) {
                cfail(c, MUSE_ERR_UNSUPPORTED, path, "allOf: the enums have no value in common");
            } else {
                cJSON *tmp = cJSON_CreateObject();
                cJSON_AddItemToObject(tmp, "enum", enum_vals);
                enum_vals = NULL;
                r = visit_enum(c, tmp, rule_name, self_type, path);
                cJSON_Delete(tmp);
            }
        } else if (n_obj) {
            r = build_object(c, props, n, NULL, name, rule_name, path);
        } else { /* nothing but annotations in allOf: the schema without it */
            r = visit(c, self, name, path);
        }
    }
    cJSON_Delete(enum_vals);
    free_props(props, n);
    cJSON_Delete(self);
    return c->st == MUSE_OK ? r : NULL;
}

static const char *visit_any_of(struct conv *c, const cJSON *s, const char *key, const char *name, const char *rule_name,
                                const char *path) {
    const cJSON *alts = get(s, key), *it;
    static const char *const allowed[] = {"type", NULL};
    if (!only_siblings(c, s, key, allowed, path)) return NULL;
    if (!cJSON_IsArray(alts) || !cJSON_GetArraySize(alts)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'%s' must be a non-empty array of schemas", key);
        return NULL;
    }
    struct gbuf b = {0};
    int i = 0;
    cJSON_ArrayForEach(it, alts) {
        char nm[340], p[300], idx[16];
        snprintf(nm, sizeof nm, "%s%s%d", name, name[0] ? "-" : "alternative-", i);
        snprintf(idx, sizeof idx, "%d", i);
        path_join(p, sizeof p, path, key, idx);
        const char *r = visit(c, it, nm, p);
        if (!r) {
            gbuf_free(&b);
            return NULL;
        }
        gbuf_printf(&b, "%s%s", i ? " | " : "", r);
        i++;
    }
    const char *n = add_rule(c, rule_name, gbuf_str(&b));
    gbuf_free(&b);
    return n;
}

static bool has_bounds(const cJSON *s) {
    return has(s, "minimum") || has(s, "maximum") || has(s, "exclusiveMinimum") || has(s, "exclusiveMaximum");
}

static const char *visit(struct conv *c, const cJSON *s, const char *name, const char *path) {
    if (c->st != MUSE_OK) return NULL;
    if (c->depth >= MAX_DEPTH) {
        cfail(c, MUSE_ERR_UNSUPPORTED, path, "schemas nested more than %d deep", MAX_DEPTH);
        return NULL;
    }
    char rule_name[340];
    snprintf(rule_name, sizeof rule_name, "%s%s", name[0] ? name : "root", is_reserved(name) ? "-" : "");
    if (cJSON_IsBool(s)) {
        if (cJSON_IsFalse(s)) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path, "the schema false matches nothing");
            return NULL;
        }
        return add_rule(c, rule_name, add_prim(c, "value"));
    }
    if (!cJSON_IsObject(s)) {
        cfail(c, MUSE_ERR_FORMAT, path, "a schema must be an object or a boolean");
        return NULL;
    }
    if (!check_unsupported(c, s, path)) return NULL;
    c->depth++;
    const char *r = NULL;
    const cJSON *type = get(s, "type");
    if (has(s, "$ref")) {
        r = visit_ref(c, s, rule_name, path);
    } else if (has(s, "oneOf") || has(s, "anyOf")) {
        r = visit_any_of(c, s, has(s, "oneOf") ? "oneOf" : "anyOf", name, rule_name, path);
    } else if (cJSON_IsArray(type)) {
        /* {"type": [A, B], ...} = {"anyOf": [{"type": A, ...}, {"type": B, ...}]} */
        if (!cJSON_GetArraySize(type)) {
            cfail(c, MUSE_ERR_FORMAT, path, "'type' must not be an empty array");
        } else {
            cJSON *alt = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(alt, "anyOf");
            const cJSON *t;
            cJSON_ArrayForEach(t, type) {
                cJSON *one = cJSON_Duplicate(s, true);
                if (one) cJSON_ReplaceItemInObjectCaseSensitive(one, "type", cJSON_Duplicate(t, true));
                cJSON_AddItemToArray(arr, one);
            }
            r = visit_any_of(c, alt, "anyOf", name, rule_name, path);
            cJSON_Delete(alt);
        }
    } else if (type && !cJSON_IsString(type)) {
        cfail(c, MUSE_ERR_FORMAT, path, "'type' must be a string or an array of strings");
    } else if (has(s, "const") || has(s, "enum")) {
        r = visit_enum(c, s, rule_name, type ? type->valuestring : NULL, path);
    } else if (has(s, "allOf")) {
        r = visit_all_of(c, s, name, rule_name, path);
    } else {
        const char *t = type ? type->valuestring : "";
        const cJSON *add = get(s, "additionalProperties");
        bool objectish = has(s, "properties") || (add && !cJSON_IsTrue(add)) || has(s, "required");
        if (!t[0]) { /* no type: the structural keywords decide */
            if (objectish) t = "object";
            else if (has(s, "items") || has(s, "prefixItems") || has(s, "minItems") || has(s, "maxItems")) t = "array";
            else if (has(s, "pattern") || has(s, "minLength") || has(s, "maxLength") || known_format(s)) t = "string";
        }
        if (has_bounds(s) && strcmp(t, "integer")) {
            cfail(c, MUSE_ERR_UNSUPPORTED, path,
                  "minimum/maximum are supported for \"type\": \"integer\" only (as llama.cpp); not for %s",
                  t[0] ? t : "an untyped schema");
        } else if (!strcmp(t, "object")) {
            r = visit_object(c, s, name, rule_name, path);
        } else if (!strcmp(t, "array")) {
            r = visit_array(c, s, name, rule_name, path);
        } else if (!strcmp(t, "string")) {
            r = visit_string(c, s, rule_name, path);
        } else if (!strcmp(t, "integer")) {
            r = visit_integer(c, s, rule_name, path);
        } else if (!strcmp(t, "number") || !strcmp(t, "boolean") || !strcmp(t, "null")) {
            r = add_rule(c, rule_name, add_prim(c, t));
        } else if (!t[0]) {
            r = add_rule(c, rule_name, add_prim(c, "value"));
        } else {
            cfail(c, MUSE_ERR_FORMAT, path, "unknown type '%s'", t);
        }
    }
    c->depth--;
    return c->st == MUSE_OK ? r : NULL;
}

/* ---- public ------------------------------------------------------------------------------ */

muse_status muse_gbnf_rules_add_schema(struct muse_gbnf_rules *r, const cJSON *schema, const cJSON *doc, const char *name,
                                       const char **rule, struct muse_error *err) {
    struct conv c = {0};
    c.r = r;
    c.doc = doc ? doc : schema;
    c.err = err;
    if (!muse_gbnf_rules_has(r, "space") && !muse_gbnf_rules_add(r, "space", SPACE_RULE)) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    const char *n = visit(&c, schema, name ? name : "", "#");
    if (c.st != MUSE_OK) return c.st;
    if (!n) return muse_error_set(err, MUSE_ERR_NOMEM, "JSON schema: out of memory");
    *rule = n;
    return MUSE_OK;
}

muse_status muse_json_schema_to_gbnf_json(const cJSON *schema, char **gbnf, struct muse_error *err) {
    *gbnf = NULL;
    struct muse_gbnf_rules *r = muse_gbnf_rules_create();
    if (!r) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    const char *root = NULL;
    muse_status st = muse_gbnf_rules_add_schema(r, schema, NULL, "", &root, err);
    if (st == MUSE_OK && strcmp(root, "root")) { /* e.g. a $ref at the top: root ::= ref-... */
        if (!muse_gbnf_rules_has(r, "root") && !muse_gbnf_rules_add(r, "root", root)) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    if (st == MUSE_OK && !(*gbnf = muse_gbnf_rules_format(r))) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_gbnf_rules_free(r);
    return st;
}

muse_status muse_json_schema_to_gbnf(const char *text, size_t len, char **gbnf, struct muse_error *err) {
    *gbnf = NULL;
    /* strings of the schema become GBNF literals, which are UTF-8 */
    const size_t bad = muse_utf8_valid_prefix((const uint8_t *)text, len);
    if (bad < len) return muse_error_set(err, MUSE_ERR_FORMAT, "JSON schema: invalid UTF-8 at byte %zu", bad);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        unsigned line = 1, col = 1;
        for (size_t i = 0; i < off && i < len; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else if ((text[i] & 0xC0) != 0x80) {
                col++;
            }
        }
        return muse_error_set(err, MUSE_ERR_FORMAT, "JSON schema: invalid JSON at line %u, column %u", line, col);
    }
    muse_status st = muse_json_schema_to_gbnf_json(j, gbnf, err);
    cJSON_Delete(j);
    return st;
}
