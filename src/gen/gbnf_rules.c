/* gbnf_rules.c - a GBNF grammar under construction (gbnf_rules.h). */
#include "gen/gbnf_rules.h"

#include "gen/gbnf_buf.h"

#define MAX_REP 2000 /* the GBNF parser's repetition limit */

struct rule {
    char *name, *body;
};

struct muse_gbnf_rules {
    struct rule *r;
    size_t n, cap;
};

struct muse_gbnf_rules *muse_gbnf_rules_create(void) { return calloc(1, sizeof(struct muse_gbnf_rules)); }

void muse_gbnf_rules_free(struct muse_gbnf_rules *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->r[i].name);
        free(r->r[i].body);
    }
    free(r->r);
    free(r);
}

static struct rule *find_rule(const struct muse_gbnf_rules *r, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->r[i].name, name)) return &r->r[i];
    return NULL;
}

bool muse_gbnf_rules_has(const struct muse_gbnf_rules *r, const char *name) { return find_rule(r, name) != NULL; }

/* Set NAME (already escaped) to BODY, replacing its body when present. The stored name; NULL on NOMEM. */
static const char *put_rule(struct muse_gbnf_rules *r, const char *name, const char *body) {
    struct rule *e = find_rule(r, name);
    char *b = strdup(body);
    if (!b) return NULL;
    if (e) {
        free(e->body);
        e->body = b;
        return e->name;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        struct rule *nr = realloc(r->r, cap * sizeof *nr);
        if (!nr) {
            free(b);
            return NULL;
        }
        r->r = nr;
        r->cap = cap;
    }
    char *n = strdup(name);
    if (!n) {
        free(b);
        return NULL;
    }
    r->r[r->n].name = n;
    r->r[r->n].body = b;
    return r->r[r->n++].name;
}

const char *muse_gbnf_rules_add(struct muse_gbnf_rules *r, const char *name, const char *body) {
    struct gbuf esc = {0};
    bool run = false; /* llama.cpp replaces each run of [^a-zA-Z0-9-] by one '-' */
    for (const char *p = name; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        if (ok) gbuf_putc(&esc, ch);
        else if (!run) gbuf_putc(&esc, '-');
        run = !ok;
    }
    const char *e = gbuf_str(&esc);
    const char *out = NULL;
    if (e) {
        struct rule *have = find_rule(r, e);
        if (!have || !strcmp(have->body, body)) {
            out = put_rule(r, e, body);
        } else {
            char key[600];
            for (int i = 0;; i++) {
                snprintf(key, sizeof key, "%.580s%d", e, i);
                have = find_rule(r, key);
                if (!have || !strcmp(have->body, body)) break;
            }
            out = put_rule(r, key, body);
        }
    }
    gbuf_free(&esc);
    return out;
}

static int cmp_rule(const void *a, const void *b) {
    return strcmp(((const struct rule *)a)->name, ((const struct rule *)b)->name);
}

char *muse_gbnf_rules_format(const struct muse_gbnf_rules *r) {
    struct rule *sorted = malloc((r->n ? r->n : 1) * sizeof *sorted);
    if (!sorted) return NULL;
    memcpy(sorted, r->r, r->n * sizeof *sorted);
    qsort(sorted, r->n, sizeof *sorted, cmp_rule);
    struct gbuf b = {0};
    for (size_t i = 0; i < r->n; i++) gbuf_printf(&b, "%s ::= %s\n", sorted[i].name, sorted[i].body);
    free(sorted);
    return gbuf_take(&b);
}

char *muse_gbnf_literal(const char *text, size_t len) {
    struct gbuf b = {0};
    gbuf_putc(&b, '"');
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '\r') gbuf_puts(&b, "\\r");
        else if (c == '\n') gbuf_puts(&b, "\\n");
        else if (c == '"') gbuf_puts(&b, "\\\"");
        else if (c == '\\') gbuf_puts(&b, "\\\\");
        else if (c == 0) gbuf_puts(&b, "\\x00");
        else gbuf_putc(&b, c);
    }
    gbuf_putc(&b, '"');
    return gbuf_take(&b);
}

char *muse_gbnf_repeat(struct muse_gbnf_rules *r, const char *item, long long min, long long max, const char *base) {
    struct gbuf b = {0};
    if (min <= MAX_REP && (max < 0 || max <= MAX_REP)) {
        if (max < 0) gbuf_printf(&b, "%s{%lld,}", item, min);
        else gbuf_printf(&b, "%s{%lld,%lld}", item, min, max);
        return gbuf_take(&b);
    }
    long long fixed = min;
    bool first = true;
    while (fixed > 0) {
        long long k = fixed > MAX_REP ? MAX_REP : fixed;
        gbuf_printf(&b, "%s%s{%lld}", first ? "" : " ", item, k);
        first = false;
        fixed -= k;
    }
    if (max < 0) {
        gbuf_printf(&b, "%s%s*", first ? "" : " ", item);
        return gbuf_take(&b);
    }
    long long span = max - min;
    if (span == 0) return gbuf_take(&b);
    /* x{0,span} for span > 2000: a chain of rules, innermost first */
    long long lo = span % MAX_REP ? span % MAX_REP : MAX_REP; /* the last link's own x{0,lo} */
    struct gbuf t = {0};
    gbuf_printf(&t, "%s{0,%lld}", item, lo);
    for (long long have = lo; have < span; have += MAX_REP) {
        struct gbuf body = {0};
        gbuf_printf(&body, "%s{%d} %s | %s{0,%d}", item, MAX_REP, gbuf_str(&t) ? gbuf_str(&t) : "", item, MAX_REP - 1);
        char nm[320];
        snprintf(nm, sizeof nm, "%.280s-upto-%lld", base, have + MAX_REP);
        const char *body_text = gbuf_str(&body);
        const char *inner = body_text ? muse_gbnf_rules_add(r, nm, body_text) : NULL;
        gbuf_free(&body);
        gbuf_free(&t);
        if (!inner) {
            gbuf_free(&b);
            return NULL;
        }
        gbuf_puts(&t, inner);
    }
    gbuf_printf(&b, "%s%s", first ? "" : " ", gbuf_str(&t) ? gbuf_str(&t) : "");
    if (t.oom) b.oom = true;
    gbuf_free(&t);
    return gbuf_take(&b);
}
