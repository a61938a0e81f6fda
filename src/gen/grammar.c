/*
 * grammar.c - the grammar engine (grammar.h): compiled classes, the token trie, interned stacks
 * and stack sets, code-point transitions, the trie walk that computes a state's mask.
 *
 * Stacks are persistent lists interned as (top element, parent stack) -> id, id 0 being the empty
 * stack, so pushing and popping is a hash lookup and equal stacks share one id. The closure of a
 * stack (expanding rule references until a terminal or the empty stack is on top: llama.cpp's
 * llama_grammar_advance_stack) is memoized per stack. A state is a sorted set of closed stacks,
 * interned too; its transition on a code point is memoized (an array for ASCII, a hash table
 * otherwise), and so is its mask. The trie walk keeps, per depth, the state after the bytes so
 * far plus the UTF-8 decoder's partial character, decoding exactly as llama.cpp's decode_utf8.
 */
#include "gen/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"

#define MAX_STACKS (1u << 22)      /* interned stacks per matcher */
#define MAX_POOL (1u << 24)        /* stack ids held by closures and states */
#define MAX_MASK_BYTES (64u << 20) /* cached masks per matcher; beyond that the cache restarts */
/* Parses alive at once in one state. An ambiguous grammar can double them per character (x* x
 * with x recursive); llama.cpp grows without bound, here that is an error instead. */
#define MAX_STATE_STACKS 2048u
#define UNKNOWN (-2)
#define DEAD (-1)

/* ---- compiled grammar -------------------------------------------------------------------- */

struct cls {
    uint32_t ascii[4]; /* the answer for code points < 128 (negation applied) */
    uint32_t r_off;    /* ranges[2 * r_off ...]: [lo, hi] per element of the class */
    uint32_t n_r;
    uint32_t next;     /* the element after the class */
    uint8_t neg, any;
};

struct muse_grammar {
    struct muse_gbnf_elem *elems;
    uint32_t n_elems;
    uint32_t *rule_off;
    uint32_t n_rules, root;
    int32_t *cls_of;   /* [n_elems] class of a class-start element, else -1 */
    struct cls *cls;
    uint32_t n_cls;
    uint32_t *ranges;  /* [2 * n_ranges] */
};

static bool is_end(uint32_t t) { return t == MUSE_GBNF_END || t == MUSE_GBNF_ALT; }
static bool is_tok(uint32_t t) { return t == MUSE_GBNF_TOKEN || t == MUSE_GBNF_TOKEN_NOT; }

void muse_grammar_free(struct muse_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->rule_off);
    free(g->cls_of);
    free(g->cls);
    free(g->ranges);
    free(g);
}

muse_status muse_grammar_create(const struct muse_gbnf *gbnf, struct muse_grammar **out, struct muse_error *err) {
    *out = NULL;
    struct muse_grammar *g = calloc(1, sizeof *g);
    if (!g) goto nomem;
    g->n_elems = gbnf->n_elems;
    g->n_rules = gbnf->n_rules;
    g->root = gbnf->root;
    g->elems = malloc((size_t)g->n_elems * sizeof *g->elems);
    g->rule_off = malloc((size_t)g->n_rules * sizeof *g->rule_off);
    g->cls_of = malloc((size_t)g->n_elems * sizeof *g->cls_of);
    if (!g->elems || !g->rule_off || !g->cls_of) goto nomem;
    memcpy(g->elems, gbnf->elems, (size_t)g->n_elems * sizeof *g->elems);
    memcpy(g->rule_off, gbnf->rule_off, (size_t)g->n_rules * sizeof *g->rule_off);
    uint32_t n_cls = 0, n_ranges = 0;
    for (uint32_t i = 0; i < g->n_elems; i++) {
        uint32_t t = g->elems[i].type;
        g->cls_of[i] = -1;
        if (t == MUSE_GBNF_CHAR || t == MUSE_GBNF_CHAR_NOT || t == MUSE_GBNF_CHAR_ANY) g->cls_of[i] = (int32_t)n_cls++;
        if (t == MUSE_GBNF_CHAR || t == MUSE_GBNF_CHAR_NOT || t == MUSE_GBNF_CHAR_ALT) n_ranges++;
    }
    g->cls = calloc(n_cls ? n_cls : 1, sizeof *g->cls);
    g->ranges = malloc(2 * (size_t)(n_ranges ? n_ranges : 1) * sizeof *g->ranges);
    if (!g->cls || !g->ranges) goto nomem;
    g->n_cls = n_cls;
    uint32_t nr = 0;
    for (uint32_t i = 0; i < g->n_elems; i++) {
        if (g->cls_of[i] < 0) continue;
        struct cls *c = &g->cls[g->cls_of[i]];
        c->neg = g->elems[i].type == MUSE_GBNF_CHAR_NOT;
        c->r_off = nr;
        uint32_t k = i;
        /* llama.cpp's llama_grammar_match_char walk: a range when RNG_UPPER follows, ANY, or one char */
        do {
            if (g->elems[k + 1].type == MUSE_GBNF_CHAR_RNG_UPPER) {
                g->ranges[2 * nr] = g->elems[k].value;
                g->ranges[2 * nr + 1] = g->elems[k + 1].value;
                nr++;
                k += 2;
            } else if (g->elems[k].type == MUSE_GBNF_CHAR_ANY) {
                c->any = 1;
                k += 1;
            } else {
                g->ranges[2 * nr] = g->ranges[2 * nr + 1] = g->elems[k].value;
                nr++;
                k += 1;
            }
        } while (g->elems[k].type == MUSE_GBNF_CHAR_ALT);
        c->n_r = nr - c->r_off;
        c->next = k;
        for (uint32_t cp = 0; cp < 128; cp++) {
            bool found = c->any;
            for (uint32_t r = c->r_off; r < nr && !found; r++) found = g->ranges[2 * r] <= cp && cp <= g->ranges[2 * r + 1];
            if (found != (bool)c->neg || c->any) c->ascii[cp >> 5] |= 1u << (cp & 31);
        }
    }
    *out = g;
    return MUSE_OK;
nomem:
    muse_grammar_free(g);
    return muse_error_set(err, MUSE_ERR_NOMEM, "grammar: out of memory");
}

struct lookup_ctx {
    const struct muse_tokenizer *tok;
};

static int32_t tok_find(void *user, const char *text, size_t len) {
    const struct lookup_ctx *c = user;
    int32_t ids[2];
    size_t n = 0;
    muse_status st = muse_tokenizer_encode(c->tok, text, len, MUSE_TOKENIZE_PARSE_SPECIAL, ids, 2, &n, NULL);
    return st == MUSE_OK && n == 1 ? ids[0] : -1;
}

muse_status muse_grammar_from_text(const char *text, size_t len, const char *root, const struct muse_tokenizer *vocab,
                                   struct muse_grammar **out, struct muse_error *err) {
    *out = NULL;
    struct lookup_ctx ctx = {vocab};
    struct muse_gbnf_token_lookup lk = {tok_find, &ctx};
    struct muse_gbnf *gbnf = NULL;
    muse_status st = muse_gbnf_parse(text, len, root, vocab ? &lk : NULL, &gbnf, err);
    if (st != MUSE_OK) return st;
    st = muse_grammar_create(gbnf, out, err);
    muse_gbnf_free(gbnf);
    return st;
}

static bool cls_match(const struct muse_grammar *g, const struct cls *c, uint32_t cp) {
    if (cp < 128) return (c->ascii[cp >> 5] >> (cp & 31)) & 1;
    if (c->any) return true;
    const uint32_t *r = g->ranges + 2 * (size_t)c->r_off;
    bool found = false;
    for (uint32_t i = 0; i < c->n_r && !found; i++) found = r[2 * i] <= cp && cp <= r[2 * i + 1];
    return found != (bool)c->neg;
}

/* llama.cpp's llama_grammar_match_partial_char: could the partial character (value, n_remain)
 * complete to something the class takes? Negated classes answer no on any overlap. */
static bool cls_match_partial(const struct muse_grammar *g, const struct cls *c, uint32_t value, int n_remain) {
    if (n_remain < 0 || (n_remain == 1 && value < 2)) return false;
    uint32_t low = value << (n_remain * 6);
    uint32_t high = low | ((1u << (n_remain * 6)) - 1);
    if (low == 0) {
        if (n_remain == 2) low = 1u << 11;
        else if (n_remain == 3) low = 1u << 16;
    }
    if (c->any) return true;
    const uint32_t *r = g->ranges + 2 * (size_t)c->r_off;
    for (uint32_t i = 0; i < c->n_r; i++)
        if (r[2 * i] <= high && low <= r[2 * i + 1]) return !c->neg;
    return c->neg;
}

/* ---- vocabulary trie --------------------------------------------------------------------- */

enum { TF_EOG = 1, TF_NEVER = 2, TF_DECODES = 4 };

struct tnode {
    uint32_t end;     /* preorder index after the subtree */
    uint32_t tok_off; /* tokens ending here: toks[tok_off .. tok_off + n_tok) */
    uint16_t n_tok;
    uint16_t depth;   /* 1 for the first byte (the root is 0) */
    uint8_t byte;
};

struct muse_grammar_vocab {
    int32_t n_vocab;
    char *bytes;         /* all pieces, each cut at its first NUL */
    size_t *piece_off;   /* [n_vocab] */
    uint32_t *piece_len; /* [n_vocab] */
    uint8_t *flags;      /* [n_vocab] TF_* */
    struct tnode *nodes;
    uint32_t n_nodes;
    int32_t *toks;       /* trie token lists, in piece order */
    uint32_t max_depth;
    int32_t *eog;        /* ids of the end-of-generation tokens */
    int32_t n_eog;
};

void muse_grammar_vocab_free(struct muse_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->piece_off);
    free(v->piece_len);
    free(v->flags);
    free(v->nodes);
    free(v->toks);
    free(v->eog);
    free(v);
}

int32_t muse_grammar_vocab_n(const struct muse_grammar_vocab *v) { return v->n_vocab; }

static const struct muse_grammar_vocab *sort_vocab; /* qsort has no context argument */

static int cmp_piece(const void *pa, const void *pb) {
    const struct muse_grammar_vocab *v = sort_vocab;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->piece_len[a], lb = v->piece_len[b];
    int c = memcmp(v->bytes + v->piece_off[a], v->bytes + v->piece_off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The decoder's lead-byte table (llama.cpp decode_utf8): sequence length by high nibble, 0 = invalid. */
static const int8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};

/* Does the piece decode (from a clean start) to at least one code point before any invalid byte? */
static bool decodes(const unsigned char *s, uint32_t n) {
    uint32_t i = 0;
    bool any = false;
    while (i < n) {
        int len = utf8_len[s[i] >> 4];
        if (!len) return false;
        if (i + (uint32_t)len > n) return any;
        i += (uint32_t)len;
        any = true;
    }
    return any;
}

muse_status muse_grammar_vocab_create(int32_t n_vocab, muse_grammar_piece_fn piece, muse_grammar_eog_fn is_eog, void *user,
                                      struct muse_grammar_vocab **out, struct muse_error *err) {
    *out = NULL;
    if (n_vocab < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: vocabulary size %d", n_vocab);
    struct muse_grammar_vocab *v = calloc(1, sizeof *v);
    int32_t *order = NULL;
    uint32_t *open = NULL;
    if (!v) goto nomem;
    v->n_vocab = n_vocab;
    v->piece_off = malloc((size_t)n_vocab * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)n_vocab * sizeof *v->piece_len);
    v->flags = calloc((size_t)n_vocab, 1);
    order = malloc((size_t)n_vocab * sizeof *order);
    if (!v->piece_off || !v->piece_len || !v->flags || !order) goto nomem;
    size_t total = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *s = piece(user, id, &len);
        if (!s) len = 0;
        len = s ? strnlen(s, len) : 0;
        if (len > 65535) len = 65535;
        v->piece_len[id] = (uint32_t)len;
        v->piece_off[id] = total;
        total += len;
    }
    if (!(v->bytes = malloc(total ? total : 1))) goto nomem;
    int32_t n_trie = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *s = piece(user, id, &len);
        if (v->piece_len[id]) memcpy(v->bytes + v->piece_off[id], s, v->piece_len[id]);
        bool eog = is_eog && is_eog(user, id);
        if (eog) {
            v->flags[id] |= TF_EOG;
            v->n_eog++;
        } else if (!v->piece_len[id]) {
            v->flags[id] |= TF_NEVER;
        } else {
            if (decodes((const unsigned char *)v->bytes + v->piece_off[id], v->piece_len[id])) v->flags[id] |= TF_DECODES;
            order[n_trie++] = id;
        }
    }
    if (!(v->eog = malloc((size_t)(v->n_eog ? v->n_eog : 1) * sizeof *v->eog))) goto nomem;
    v->n_eog = 0;
    for (int32_t id = 0; id < n_vocab; id++)
        if (v->flags[id] & TF_EOG) v->eog[v->n_eog++] = id;
    sort_vocab = v;
    qsort(order, (size_t)n_trie, sizeof *order, cmp_piece);
    sort_vocab = NULL;
    /* nodes: one per distinct prefix, in preorder (= the sorted order of the pieces) */
    uint64_t n_nodes = 1;
    uint32_t max_len = 0;
    for (int32_t k = 0; k < n_trie; k++) {
        uint32_t len = v->piece_len[order[k]], lcp = 0;
        if (k > 0) {
            uint32_t lp = v->piece_len[order[k - 1]];
            const char *a = v->bytes + v->piece_off[order[k - 1]], *b = v->bytes + v->piece_off[order[k]];
            while (lcp < lp && lcp < len && a[lcp] == b[lcp]) lcp++;
        }
        n_nodes += len - lcp;
        if (len > max_len) max_len = len;
    }
    if (n_nodes >= UINT32_MAX) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: vocabulary too large");
    v->nodes = calloc(n_nodes, sizeof *v->nodes);
    v->toks = malloc((size_t)(n_trie ? n_trie : 1) * sizeof *v->toks);
    open = malloc((size_t)(max_len + 1) * sizeof *open); /* open[d]: the node at depth d on the current path */
    if (!v->nodes || !v->toks || !open) goto nomem;
    memcpy(v->toks, order, (size_t)n_trie * sizeof *order);
    v->max_depth = max_len;
    uint32_t n = 1;
    open[0] = 0;
    uint32_t depth = 0; /* depth of the current path */
    for (int32_t k = 0; k < n_trie; k++) {
        uint32_t len = v->piece_len[order[k]], lcp = 0;
        const unsigned char *b = (const unsigned char *)v->bytes + v->piece_off[order[k]];
        if (k > 0) {
            uint32_t lp = v->piece_len[order[k - 1]];
            const char *a = v->bytes + v->piece_off[order[k - 1]];
            while (lcp < lp && lcp < len && (unsigned char)a[lcp] == b[lcp]) lcp++;
        }
        for (uint32_t d = depth; d > lcp; d--) v->nodes[open[d]].end = n; /* close the old path below lcp */
        depth = lcp;
        for (uint32_t d = lcp + 1; d <= len; d++) {
            struct tnode *nd = &v->nodes[n];
            nd->byte = b[d - 1];
            nd->depth = (uint16_t)d;
            nd->tok_off = (uint32_t)k;
            open[d] = n++;
            depth = d;
        }
        struct tnode *last = &v->nodes[open[len]];
        if (!last->n_tok) last->tok_off = (uint32_t)k;
        if (last->n_tok < UINT16_MAX) last->n_tok++;
    }
    for (uint32_t d = depth; d > 0; d--) v->nodes[open[d]].end = n;
    v->nodes[0].end = n;
    v->n_nodes = n;
    free(order);
    free(open);
    *out = v;
    return MUSE_OK;
nomem:
    free(order);
    free(open);
    muse_grammar_vocab_free(v);
    return muse_error_set(err, MUSE_ERR_NOMEM, "grammar: out of memory");
}

static const char *tokenizer_piece(void *user, int32_t id, size_t *len) {
    return muse_tokenizer_token_bytes(user, id, len);
}

static bool tokenizer_eog(void *user, int32_t id) { return muse_tokenizer_is_eog(user, id); }

muse_status muse_grammar_vocab_from_tokenizer(const struct muse_tokenizer *tok, struct muse_grammar_vocab **out,
                                              struct muse_error *err) {
    return muse_grammar_vocab_create(muse_tokenizer_n_vocab(tok), tokenizer_piece, tokenizer_eog, (void *)tok, out, err);
}

/* ---- matcher state ----------------------------------------------------------------------- */

struct stk {
    uint32_t pos;    /* top element (UINT32_MAX for the empty stack, id 0) */
    uint32_t parent; /* the stack below */
};

struct state {
    uint32_t off, n;  /* stack ids in set_pool[off .. off + n), sorted */
    int32_t *ascii;   /* [128] transitions (lazy; UNKNOWN / DEAD / state id) */
    uint32_t *mask;   /* cached mask (lazy) */
    uint32_t hash;
    uint8_t can_end;  /* holds the empty stack */
    uint8_t has_tok;  /* holds a stack with a token element on top */
};

struct tr_entry {
    uint32_t state, cp;
    int32_t to; /* UNKNOWN marks an empty slot */
};

struct wst { /* the walk's state after some bytes of a piece */
    int32_t state;
    uint32_t value;
    int8_t n_remain;
    uint8_t cont; /* still completing the matcher's pending character */
};

struct muse_grammar_matcher {
    const struct muse_grammar *g;
    const struct muse_grammar_vocab *v;
    muse_status status; /* sticky error of the current operation */
    struct muse_error *err;

    struct stk *stk;
    uint32_t n_stk, cap_stk;
    uint32_t *stk_hash, stk_hash_cap; /* stack id + 1 */
    uint32_t *clo_off, *clo_n;        /* [cap_stk] memoized closures (clo_n UINT32_MAX: not yet) */
    uint32_t *seen;                   /* [cap_stk] stamps of the closure walk */
    uint32_t *uni;                    /* [cap_stk] stamps of set unions */
    uint32_t seen_stamp, uni_stamp;

    uint32_t *pool;                   /* closures and state contents */
    uint32_t n_pool, cap_pool;

    struct state *st;
    uint32_t n_st, cap_st;
    uint32_t *st_hash, st_hash_cap;   /* state id + 1 */

    struct tr_entry *tr;              /* non-ASCII transitions */
    uint32_t n_tr, tr_cap;

    uint32_t *todo, n_todo, cap_todo; /* closure work list */
    uint32_t *acc, n_acc, cap_acc;    /* set being built */

    int32_t start, cur;               /* start and current state */
    uint32_t pvalue;                  /* pending partial character */
    int pn_remain;

    struct wst *walk;                 /* [max_depth + 1] */
    uint32_t *tmp_mask;               /* an uncached mask */
    size_t n_words;
    size_t mask_bytes;  /* cached masks */
    size_t table_bytes; /* ASCII transition tables */
    struct muse_grammar_stats stats;
};

static void set_fail(struct muse_grammar_matcher *m, muse_status st, const char *what) {
    if (m->status != MUSE_OK) return;
    m->status = muse_error_set(m->err, st, "grammar: %s", what);
}

static bool grow(struct muse_grammar_matcher *m, void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) {
        set_fail(m, MUSE_ERR_NOMEM, "out of memory");
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

static uint32_t mix(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

/* ---- stacks ------------------------------------------------------------------------------ */

static bool stk_rehash(struct muse_grammar_matcher *m, uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) {
        set_fail(m, MUSE_ERR_NOMEM, "out of memory");
        return false;
    }
    for (uint32_t id = 1; id < m->n_stk; id++) {
        uint32_t k = mix(m->stk[id].pos, m->stk[id].parent) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = id + 1;
    }
    free(m->stk_hash);
    m->stk_hash = h;
    m->stk_hash_cap = cap;
    return true;
}

/* The stack `pos` on top of `parent` (interned). UINT32_MAX on failure (status set). */
static uint32_t stk_push(struct muse_grammar_matcher *m, uint32_t pos, uint32_t parent) {
    uint32_t k = mix(pos, parent) & (m->stk_hash_cap - 1);
    for (;; k = (k + 1) & (m->stk_hash_cap - 1)) {
        uint32_t e = m->stk_hash[k];
        if (!e) break;
        if (m->stk[e - 1].pos == pos && m->stk[e - 1].parent == parent) return e - 1;
    }
    if (m->n_stk >= MAX_STACKS) {
        set_fail(m, MUSE_ERR_UNSUPPORTED, "the grammar is too complex (over 4M parser stacks)");
        return UINT32_MAX;
    }
    uint32_t cap = m->cap_stk;
    if (m->n_stk + 1 > cap) {
        uint32_t c = cap;
        if (!grow(m, (void **)&m->stk, &c, m->n_stk + 1, sizeof *m->stk)) return UINT32_MAX;
        uint32_t c2 = cap, c3 = cap, c4 = cap, c5 = cap;
        if (!grow(m, (void **)&m->clo_off, &c2, c, sizeof *m->clo_off) || !grow(m, (void **)&m->clo_n, &c3, c, sizeof *m->clo_n) ||
            !grow(m, (void **)&m->seen, &c4, c, sizeof *m->seen) || !grow(m, (void **)&m->uni, &c5, c, sizeof *m->uni))
            return UINT32_MAX;
        for (uint32_t i = cap; i < c; i++) {
            m->clo_n[i] = UINT32_MAX;
            m->seen[i] = m->uni[i] = 0;
        }
        m->cap_stk = c;
    }
    uint32_t id = m->n_stk++;
    m->stats.n_stacks = m->n_stk;
    m->stk[id].pos = pos;
    m->stk[id].parent = parent;
    if (2 * (m->n_stk + 1) > m->stk_hash_cap) {
        if (!stk_rehash(m, m->stk_hash_cap * 2)) return UINT32_MAX;
        return id;
    }
    m->stk_hash[k] = id + 1;
    return id;
}

static bool pool_add(struct muse_grammar_matcher *m, uint32_t id) {
    if (m->n_pool >= MAX_POOL) {
        set_fail(m, MUSE_ERR_UNSUPPORTED, "the grammar is too complex (its states hold over 16M stacks)");
        return false;
    }
    if (!grow(m, (void **)&m->pool, &m->cap_pool, m->n_pool + 1, sizeof *m->pool)) return false;
    m->pool[m->n_pool++] = id;
    return true;
}

static bool todo_add(struct muse_grammar_matcher *m, uint32_t id) {
    if (!grow(m, (void **)&m->todo, &m->cap_todo, m->n_todo + 1, sizeof *m->todo)) return false;
    m->todo[m->n_todo++] = id;
    return true;
}

/*
 * The closure of stack s: every stack reached by expanding rule references on top, keeping those
 * with a terminal or nothing on top (llama_grammar_advance_stack). Memoized; the ids are
 * pool[clo_off[s] .. + clo_n[s]). False on failure.
 */
static bool closure(struct muse_grammar_matcher *m, uint32_t s) {
    if (m->clo_n[s] != UINT32_MAX) return true;
    const struct muse_grammar *g = m->g;
    if (++m->seen_stamp == 0) {
        memset(m->seen, 0, (size_t)m->cap_stk * sizeof *m->seen);
        m->seen_stamp = 1;
    }
    uint32_t stamp = m->seen_stamp, off = m->n_pool;
    m->n_todo = 0;
    if (!todo_add(m, s)) return false;
    while (m->n_todo) {
        uint32_t t = m->todo[--m->n_todo];
        if (m->seen[t] == stamp) continue;
        m->seen[t] = stamp;
        uint32_t pos = m->stk[t].pos;
        if (t == 0 || g->elems[pos].type != MUSE_GBNF_RULE_REF) {
            if (!pool_add(m, t)) return false;
            continue;
        }
        uint32_t parent = m->stk[t].parent;
        uint32_t after = parent;
        if (!is_end(g->elems[pos + 1].type)) after = stk_push(m, pos + 1, parent);
        if (after == UINT32_MAX) return false;
        uint32_t a = g->rule_off[g->elems[pos].value];
        for (;;) {
            uint32_t next = after;
            if (!is_end(g->elems[a].type)) next = stk_push(m, a, after);
            if (next == UINT32_MAX || !todo_add(m, next)) return false;
            while (!is_end(g->elems[a].type)) a++;
            if (g->elems[a].type != MUSE_GBNF_ALT) break;
            a++;
        }
    }
    m->clo_off[s] = off;
    m->clo_n[s] = m->n_pool - off;
    return true;
}

/* ---- states ------------------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static bool acc_begin(struct muse_grammar_matcher *m) {
    m->n_acc = 0;
    if (++m->uni_stamp == 0) {
        memset(m->uni, 0, (size_t)m->cap_stk * sizeof *m->uni);
        m->uni_stamp = 1;
    }
    return true;
}

static bool acc_add(struct muse_grammar_matcher *m, uint32_t id) {
    if (m->uni[id] == m->uni_stamp) return true;
    m->uni[id] = m->uni_stamp;
    if (!grow(m, (void **)&m->acc, &m->cap_acc, m->n_acc + 1, sizeof *m->acc)) return false;
    m->acc[m->n_acc++] = id;
    return true;
}

/* Add the closure of stack s to the set being built. */
static bool acc_closure(struct muse_grammar_matcher *m, uint32_t s) {
    if (!closure(m, s)) return false;
    for (uint32_t i = 0; i < m->clo_n[s]; i++)
        if (!acc_add(m, m->pool[m->clo_off[s] + i])) return false;
    return true;
}

static bool st_rehash(struct muse_grammar_matcher *m, uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) {
        set_fail(m, MUSE_ERR_NOMEM, "out of memory");
        return false;
    }
    for (uint32_t id = 0; id < m->n_st; id++) {
        uint32_t k = m->st[id].hash & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = id + 1;
    }
    free(m->st_hash);
    m->st_hash = h;
    m->st_hash_cap = cap;
    return true;
}

/* The state holding the stacks built in acc (sorted here): DEAD when empty, UNKNOWN on failure. */
static int32_t acc_intern(struct muse_grammar_matcher *m) {
    if (m->status != MUSE_OK) return UNKNOWN;
    if (!m->n_acc) return DEAD;
    if (m->n_acc > MAX_STATE_STACKS) {
        set_fail(m, MUSE_ERR_UNSUPPORTED, "the grammar is too ambiguous (over 2048 parses alive at once)");
        return UNKNOWN;
    }
    qsort(m->acc, m->n_acc, sizeof *m->acc, cmp_u32);
    uint32_t h = 0x811C9DC5u ^ m->n_acc;
    for (uint32_t i = 0; i < m->n_acc; i++) h = mix(h, m->acc[i]);
    for (uint32_t k = h & (m->st_hash_cap - 1);; k = (k + 1) & (m->st_hash_cap - 1)) {
        uint32_t e = m->st_hash[k];
        if (!e) break;
        const struct state *s = &m->st[e - 1];
        if (s->hash == h && s->n == m->n_acc && !memcmp(m->pool + s->off, m->acc, m->n_acc * sizeof *m->acc))
            return (int32_t)(e - 1);
    }
    if (m->n_st >= (uint32_t)INT32_MAX / 2) {
        set_fail(m, MUSE_ERR_UNSUPPORTED, "the grammar is too complex (too many states)");
        return UNKNOWN;
    }
    if (!grow(m, (void **)&m->st, &m->cap_st, m->n_st + 1, sizeof *m->st)) return UNKNOWN;
    struct state *s = &m->st[m->n_st];
    memset(s, 0, sizeof *s);
    s->off = m->n_pool;
    s->n = m->n_acc;
    s->hash = h;
    for (uint32_t i = 0; i < m->n_acc; i++) {
        uint32_t id = m->acc[i];
        if (!pool_add(m, id)) return UNKNOWN;
        if (id == 0) m->st[m->n_st].can_end = 1;
        else if (is_tok(m->g->elems[m->stk[id].pos].type)) m->st[m->n_st].has_tok = 1;
    }
    int32_t id = (int32_t)m->n_st++;
    m->stats.n_states = m->n_st;
    if (2 * (m->n_st + 1) > m->st_hash_cap) {
        if (!st_rehash(m, m->st_hash_cap * 2)) return UNKNOWN;
    } else {
        uint32_t k = h & (m->st_hash_cap - 1);
        while (m->st_hash[k]) k = (k + 1) & (m->st_hash_cap - 1);
        m->st_hash[k] = (uint32_t)id + 1;
    }
    return id;
}

/* The state after code point cp from state s (computed). */
static int32_t step_compute(struct muse_grammar_matcher *m, int32_t s, uint32_t cp) {
    const struct muse_grammar *g = m->g;
    acc_begin(m);
    uint32_t off = m->st[s].off, n = m->st[s].n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = m->pool[off + i];
        if (id == 0) continue;
        int32_t c = g->cls_of[m->stk[id].pos];
        if (c < 0 || !cls_match(g, &g->cls[c], cp)) continue; /* token elements take no characters */
        uint32_t next = g->cls[c].next, parent = m->stk[id].parent, ns = parent;
        if (!is_end(g->elems[next].type)) ns = stk_push(m, next, parent);
        if (ns == UINT32_MAX || !acc_closure(m, ns)) return UNKNOWN;
    }
    return acc_intern(m);
}

static bool tr_rehash(struct muse_grammar_matcher *m, uint32_t cap) {
    struct tr_entry *t = malloc((size_t)cap * sizeof *t);
    if (!t) {
        set_fail(m, MUSE_ERR_NOMEM, "out of memory");
        return false;
    }
    for (uint32_t i = 0; i < cap; i++) t[i].to = UNKNOWN;
    for (uint32_t i = 0; i < m->tr_cap; i++) {
        if (m->tr[i].to == UNKNOWN) continue;
        uint32_t k = mix(m->tr[i].state, m->tr[i].cp) & (cap - 1);
        while (t[k].to != UNKNOWN) k = (k + 1) & (cap - 1);
        t[k] = m->tr[i];
    }
    free(m->tr);
    m->tr = t;
    m->tr_cap = cap;
    return true;
}

/* The state after code point cp from state s: DEAD when nothing takes it, UNKNOWN on failure. */
static int32_t step(struct muse_grammar_matcher *m, int32_t s, uint32_t cp) {
    if (cp < 128) {
        int32_t *t = m->st[s].ascii;
        if (t && t[cp] != UNKNOWN) return t[cp];
        if (!t) {
            if (!(t = malloc(128 * sizeof *t))) {
                set_fail(m, MUSE_ERR_NOMEM, "out of memory");
                return UNKNOWN;
            }
            for (int i = 0; i < 128; i++) t[i] = UNKNOWN;
            m->st[s].ascii = t;
            m->table_bytes += 128 * sizeof *t;
        }
        int32_t r = step_compute(m, s, cp);
        if (r != UNKNOWN) m->st[s].ascii[cp] = r;
        return r;
    }
    uint32_t k = mix((uint32_t)s, cp) & (m->tr_cap - 1);
    for (;; k = (k + 1) & (m->tr_cap - 1)) {
        const struct tr_entry *e = &m->tr[k];
        if (e->to == UNKNOWN) break;
        if (e->state == (uint32_t)s && e->cp == cp) return e->to;
    }
    int32_t r = step_compute(m, s, cp);
    if (r == UNKNOWN) return r;
    if (2 * (m->n_tr + 1) > m->tr_cap) {
        if (!tr_rehash(m, m->tr_cap * 2)) return UNKNOWN;
        k = mix((uint32_t)s, cp) & (m->tr_cap - 1);
        while (m->tr[k].to != UNKNOWN) k = (k + 1) & (m->tr_cap - 1);
    }
    m->tr[k].state = (uint32_t)s;
    m->tr[k].cp = cp;
    m->tr[k].to = r;
    m->n_tr++;
    return r;
}

/* Could a character starting (value, n_remain) continue some stack of state s? */
static bool partial_ok(struct muse_grammar_matcher *m, int32_t s, uint32_t value, int n_remain) {
    const struct muse_grammar *g = m->g;
    uint32_t off = m->st[s].off, n = m->st[s].n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = m->pool[off + i];
        if (id == 0) continue;
        int32_t c = g->cls_of[m->stk[id].pos];
        if (c >= 0 && cls_match_partial(g, &g->cls[c], value, n_remain)) return true;
    }
    return false;
}

/* ---- walking bytes ----------------------------------------------------------------------- */

/*
 * One byte of a piece, as llama.cpp's decode_utf8 consumes it: the matcher's pending character
 * is completed first (continuation bytes checked), later sequences take their continuation bytes
 * unchecked. Returns false when the piece (and any longer one) is refused.
 */
static inline bool wstep(struct muse_grammar_matcher *m, const struct wst *in, uint8_t b, struct wst *out) {
    uint32_t value;
    int n_remain;
    if (in->cont) {
        if ((b >> 6) != 2) return false;
        value = (in->value << 6) | (b & 0x3F);
        n_remain = in->n_remain - 1;
    } else if (in->n_remain == 0) {
        int len = utf8_len[b >> 4];
        if (!len) return false;
        n_remain = len - 1;
        value = b & ((1u << (7 - n_remain)) - 1);
    } else {
        value = (in->value << 6) + (b & 0x3F);
        n_remain = in->n_remain - 1;
    }
    int32_t s = in->state;
    if (n_remain == 0) {
        s = step(m, s, value);
        if (s < 0) return false;
    }
    out->state = s;
    out->value = value;
    out->n_remain = (int8_t)n_remain;
    out->cont = in->cont && n_remain > 0;
    return true;
}

/* Is a piece that ended in walk state w allowed? */
static inline bool wend_ok(struct muse_grammar_matcher *m, const struct wst *w) {
    return w->n_remain == 0 || partial_ok(m, w->state, w->value, w->n_remain);
}

static struct wst walk_start(const struct muse_grammar_matcher *m) {
    struct wst w = {m->cur, m->pvalue, (int8_t)m->pn_remain, (uint8_t)(m->pn_remain > 0)};
    if (m->pn_remain < 0) w.n_remain = 0; /* an invalid pending sequence decodes as a clean start */
    return w;
}

/* Does the piece of token id decode to at least one code point from the pending partial? */
static bool piece_decodes(const struct muse_grammar_matcher *m, int32_t id) {
    const struct muse_grammar_vocab *v = m->v;
    if (m->pn_remain <= 0) return v->flags[id] & TF_DECODES;
    const unsigned char *p = (const unsigned char *)v->bytes + v->piece_off[id];
    uint32_t n = v->piece_len[id];
    int rem = m->pn_remain;
    uint32_t i = 0;
    for (; i < n && rem > 0; i++, rem--)
        if ((p[i] >> 6) != 2) return false;
    if (rem == 0) return i > 0 ? true : false;
    return false;
}

/* Whether a token element on top of some stack of state s takes token id. */
static bool token_elem_ok(const struct muse_grammar_matcher *m, int32_t s, int32_t id) {
    if (!m->st[s].has_tok || !piece_decodes(m, id)) return false;
    const struct muse_grammar *g = m->g;
    for (uint32_t i = 0; i < m->st[s].n; i++) {
        uint32_t sid = m->pool[m->st[s].off + i];
        if (!sid) continue;
        const struct muse_gbnf_elem *e = &g->elems[m->stk[sid].pos];
        if ((e->type == MUSE_GBNF_TOKEN && e->value == (uint32_t)id) || (e->type == MUSE_GBNF_TOKEN_NOT && e->value != (uint32_t)id))
            return true;
    }
    return false;
}

static bool allows(struct muse_grammar_matcher *m, int32_t id) {
    const struct muse_grammar_vocab *v = m->v;
    if (v->flags[id] & TF_EOG) return m->st[m->cur].can_end;
    if (v->flags[id] & TF_NEVER) return false;
    if (token_elem_ok(m, m->cur, id)) return true;
    struct wst w = walk_start(m);
    const unsigned char *p = (const unsigned char *)v->bytes + v->piece_off[id];
    for (uint32_t i = 0; i < v->piece_len[id]; i++)
        if (!wstep(m, &w, p[i], &w)) return false;
    return wend_ok(m, &w);
}

/* The trie walk: bits |= every token whose piece the state allows. */
static void walk_trie(struct muse_grammar_matcher *m, uint32_t *bits) {
    const struct muse_grammar_vocab *v = m->v;
    const struct tnode *nodes = v->nodes;
    struct wst *ws = m->walk;
    ws[0] = walk_start(m);
    uint32_t i = 1, n = v->n_nodes;
    uint64_t visited = 0;
    while (i < n) {
        const struct tnode *nd = &nodes[i];
        visited++;
        if (!wstep(m, &ws[nd->depth - 1], nd->byte, &ws[nd->depth])) {
            if (m->status != MUSE_OK) break;
            i = nd->end;
            continue;
        }
        if (nd->n_tok && wend_ok(m, &ws[nd->depth]))
            for (uint32_t k = 0; k < nd->n_tok; k++) {
                int32_t id = v->toks[nd->tok_off + k];
                bits[id >> 5] |= 1u << (id & 31);
            }
        i++;
    }
    m->stats.n_nodes_walked += visited;
}

static void compute_mask(struct muse_grammar_matcher *m, uint32_t *bits) {
    const struct muse_grammar_vocab *v = m->v;
    memset(bits, 0, m->n_words * sizeof *bits);
    const struct state *s = &m->st[m->cur];
    if (s->can_end)
        for (int32_t k = 0; k < v->n_eog; k++) bits[v->eog[k] >> 5] |= 1u << (v->eog[k] & 31);
    if (s->has_tok) {
        bool any_not = false;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t sid = m->pool[s->off + i];
            if (sid && m->g->elems[m->stk[sid].pos].type == MUSE_GBNF_TOKEN_NOT) any_not = true;
        }
        if (any_not) { /* some token but one: every token is a candidate */
            for (int32_t id = 0; id < v->n_vocab; id++)
                if (!(v->flags[id] & (TF_EOG | TF_NEVER)) && token_elem_ok(m, m->cur, id)) bits[id >> 5] |= 1u << (id & 31);
        } else { /* only <[ID]> elements: their ids */
            for (uint32_t i = 0; i < s->n; i++) {
                uint32_t sid = m->pool[s->off + i];
                if (!sid) continue;
                const struct muse_gbnf_elem *e = &m->g->elems[m->stk[sid].pos];
                if (e->type != MUSE_GBNF_TOKEN || e->value >= (uint32_t)v->n_vocab) continue;
                int32_t id = (int32_t)e->value;
                if (!(v->flags[id] & (TF_EOG | TF_NEVER)) && piece_decodes(m, id)) bits[id >> 5] |= 1u << (id & 31);
            }
        }
    }
    walk_trie(m, bits);
    m->stats.n_masks++;
}

/* ---- public matcher API ------------------------------------------------------------------ */

void muse_grammar_matcher_free(struct muse_grammar_matcher *m) {
    if (!m) return;
    for (uint32_t i = 0; i < m->n_st; i++) {
        free(m->st[i].ascii);
        free(m->st[i].mask);
    }
    free(m->stk);
    free(m->stk_hash);
    free(m->clo_off);
    free(m->clo_n);
    free(m->seen);
    free(m->uni);
    free(m->pool);
    free(m->st);
    free(m->st_hash);
    free(m->tr);
    free(m->todo);
    free(m->acc);
    free(m->walk);
    free(m->tmp_mask);
    free(m);
}

static muse_status begin(struct muse_grammar_matcher *m, struct muse_error *err) {
    m->status = MUSE_OK;
    m->err = err;
    return MUSE_OK;
}

muse_status muse_grammar_matcher_create(const struct muse_grammar *g, const struct muse_grammar_vocab *v,
                                        struct muse_grammar_matcher **out, struct muse_error *err) {
    *out = NULL;
    struct muse_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return muse_error_set(err, MUSE_ERR_NOMEM, "grammar: out of memory");
    begin(m, err);
    m->g = g;
    m->v = v;
    m->n_words = ((size_t)v->n_vocab + 31) / 32;
    m->walk = malloc(((size_t)v->max_depth + 2) * sizeof *m->walk);
    m->tmp_mask = malloc(m->n_words * sizeof *m->tmp_mask);
    m->stk_hash_cap = m->st_hash_cap = 1024;
    m->stk_hash = calloc(m->stk_hash_cap, sizeof *m->stk_hash);
    m->st_hash = calloc(m->st_hash_cap, sizeof *m->st_hash);
    if (!m->walk || !m->tmp_mask || !m->stk_hash || !m->st_hash || !tr_rehash(m, 1024)) goto nomem;
    /* stack 0: the empty stack */
    uint32_t c = 0;
    if (!grow(m, (void **)&m->stk, &c, 64, sizeof *m->stk)) goto nomem;
    m->cap_stk = c;
    m->clo_off = calloc(c, sizeof *m->clo_off);
    m->clo_n = malloc(c * sizeof *m->clo_n);
    m->seen = calloc(c, sizeof *m->seen);
    m->uni = calloc(c, sizeof *m->uni);
    if (!m->clo_off || !m->clo_n || !m->seen || !m->uni) goto nomem;
    for (uint32_t i = 0; i < c; i++) m->clo_n[i] = UINT32_MAX;
    m->stk[0].pos = UINT32_MAX;
    m->stk[0].parent = 0;
    m->n_stk = 1;
    /* the start: each alternative of the root on an empty stack, closed */
    acc_begin(m);
    uint32_t a = g->rule_off[g->root];
    for (;;) {
        uint32_t s = 0;
        if (!is_end(g->elems[a].type)) s = stk_push(m, a, 0);
        if (s == UINT32_MAX || !acc_closure(m, s)) break;
        while (!is_end(g->elems[a].type)) a++;
        if (g->elems[a].type != MUSE_GBNF_ALT) break;
        a++;
    }
    m->start = acc_intern(m);
    if (m->status != MUSE_OK || m->start < 0) {
        muse_status st = m->status != MUSE_OK ? m->status : muse_error_set(err, MUSE_ERR_INTERNAL, "grammar: empty start");
        muse_grammar_matcher_free(m);
        return st;
    }
    m->cur = m->start;
    *out = m;
    return MUSE_OK;
nomem:
    muse_grammar_matcher_free(m);
    return muse_error_set(err, MUSE_ERR_NOMEM, "grammar: out of memory");
}

void muse_grammar_matcher_reset(struct muse_grammar_matcher *m) {
    m->cur = m->start;
    m->pvalue = 0;
    m->pn_remain = 0;
}

bool muse_grammar_matcher_can_end(const struct muse_grammar_matcher *m) { return m->st[m->cur].can_end; }

muse_status muse_grammar_matcher_allows(struct muse_grammar_matcher *m, int32_t id, bool *ok, struct muse_error *err) {
    *ok = false;
    if (id < 0 || id >= m->v->n_vocab) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: token %d out of range", id);
    begin(m, err);
    if (m->pn_remain == 0 && m->st[m->cur].mask) {
        *ok = (m->st[m->cur].mask[id >> 5] >> (id & 31)) & 1;
        return MUSE_OK;
    }
    bool r = allows(m, id);
    if (m->status != MUSE_OK) return m->status;
    *ok = r;
    return MUSE_OK;
}

bool muse_grammar_matcher_mask_cached(const struct muse_grammar_matcher *m) {
    return m->pn_remain == 0 && m->st[m->cur].mask != NULL;
}

static int32_t popcount_bits(const uint32_t *bits, size_t n) {
    int32_t c = 0;
    for (size_t i = 0; i < n; i++) c += __builtin_popcount(bits[i]);
    return c;
}

static void drop_masks(struct muse_grammar_matcher *m) {
    for (uint32_t i = 0; i < m->n_st; i++) {
        if (m->st[i].mask) m->mask_bytes -= m->n_words * sizeof(uint32_t);
        free(m->st[i].mask);
        m->st[i].mask = NULL;
    }
}

muse_status muse_grammar_matcher_mask(struct muse_grammar_matcher *m, const uint32_t **bits, int32_t *n_allowed,
                                      struct muse_error *err) {
    begin(m, err);
    if (m->pn_remain == 0 && m->st[m->cur].mask) {
        m->stats.n_mask_hits++;
        *bits = m->st[m->cur].mask;
        if (n_allowed) *n_allowed = popcount_bits(*bits, m->n_words);
        return MUSE_OK;
    }
    uint32_t *dst = m->tmp_mask;
    if (m->pn_remain == 0) {
        if (m->mask_bytes + m->n_words * sizeof *dst > MAX_MASK_BYTES) drop_masks(m);
        dst = malloc(m->n_words * sizeof *dst);
        if (!dst) return muse_error_set(err, MUSE_ERR_NOMEM, "grammar: out of memory");
    }
    compute_mask(m, dst);
    if (m->status != MUSE_OK) {
        if (dst != m->tmp_mask) free(dst);
        return m->status;
    }
    if (dst != m->tmp_mask) {
        m->st[m->cur].mask = dst; /* cur may have moved (st realloc'd): index again */
        m->mask_bytes += m->n_words * sizeof *dst;
    }
    *bits = dst;
    if (n_allowed) *n_allowed = popcount_bits(dst, m->n_words);
    return MUSE_OK;
}

/*
 * The state after consuming piece p[0..n) (a token's, or text) from the current one, as llama.cpp
 * accepts it: stacks with a token element on top take `tok_id` (-1: none); the other non-empty
 * stacks take the code points. *pv / *pn receive the new partial character. UNKNOWN on failure,
 * DEAD when nothing survives.
 */
static int32_t advance(struct muse_grammar_matcher *m, int32_t tok_id, const unsigned char *p, uint32_t n, uint32_t *pv,
                       int *pn) {
    const struct muse_grammar *g = m->g;
    /* decode from the pending partial (llama.cpp decode_utf8) */
    uint32_t value = m->pvalue;
    int rem = m->pn_remain > 0 ? m->pn_remain : 0;
    uint32_t i = 0;
    /* code points are consumed one by one from the char-only part of the current state */
    acc_begin(m);
    const struct state *cs = &m->st[m->cur];
    for (uint32_t k = 0; k < cs->n; k++) {
        uint32_t id = m->pool[cs->off + k];
        if (id && !is_tok(g->elems[m->stk[id].pos].type) && !acc_add(m, id)) return UNKNOWN;
    }
    int32_t s = acc_intern(m);
    if (s == UNKNOWN) return UNKNOWN;
    bool any_cp = false;
    if (rem > 0) {
        while (i < n && rem > 0) {
            if ((p[i] >> 6) != 2) return DEAD;
            value = (value << 6) + (p[i] & 0x3F);
            i++;
            rem--;
        }
        if (rem == 0) {
            any_cp = true;
            if (s >= 0) s = step(m, s, value);
        }
    }
    while (i < n) {
        int len = utf8_len[p[i] >> 4];
        if (!len) return DEAD;
        rem = len - 1;
        value = p[i] & ((1u << (7 - rem)) - 1);
        i++;
        while (i < n && rem > 0) {
            value = (value << 6) + (p[i] & 0x3F);
            i++;
            rem--;
        }
        if (rem == 0) {
            any_cp = true;
            if (s >= 0) s = step(m, s, value);
        }
    }
    if (s == UNKNOWN) return UNKNOWN;
    (void)any_cp;
    *pv = value;
    *pn = rem;
    /* union with the token elements that take the token */
    cs = &m->st[m->cur];
    acc_begin(m);
    if (s >= 0)
        for (uint32_t k = 0; k < m->st[s].n; k++)
            if (!acc_add(m, m->pool[m->st[s].off + k])) return UNKNOWN;
    if (tok_id >= 0 && cs->has_tok) {
        for (uint32_t k = 0; k < m->st[m->cur].n; k++) {
            uint32_t id = m->pool[m->st[m->cur].off + k];
            if (!id) continue;
            uint32_t pos = m->stk[id].pos;
            const struct muse_gbnf_elem *e = &g->elems[pos];
            bool hit = (e->type == MUSE_GBNF_TOKEN && e->value == (uint32_t)tok_id) ||
                       (e->type == MUSE_GBNF_TOKEN_NOT && e->value != (uint32_t)tok_id);
            if (!hit) continue;
            uint32_t parent = m->stk[id].parent, ns = parent;
            if (!is_end(g->elems[pos + 1].type)) ns = stk_push(m, pos + 1, parent);
            if (ns == UINT32_MAX || !acc_closure(m, ns)) return UNKNOWN;
        }
    }
    return acc_intern(m);
}

muse_status muse_grammar_matcher_accept(struct muse_grammar_matcher *m, int32_t id, struct muse_error *err) {
    if (id < 0 || id >= m->v->n_vocab) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: token %d out of range", id);
    begin(m, err);
    const struct muse_grammar_vocab *v = m->v;
    bool ok = false;
    muse_status st = muse_grammar_matcher_allows(m, id, &ok, err);
    if (st != MUSE_OK) return st;
    if (!ok) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: token %d is not allowed here", id);
    if (v->flags[id] & TF_EOG) return MUSE_OK; /* the state stays (llama.cpp) */
    uint32_t pv = 0;
    int pn = 0;
    int32_t s = advance(m, id, (const unsigned char *)v->bytes + v->piece_off[id], v->piece_len[id], &pv, &pn);
    if (s == UNKNOWN) return m->status;
    if (s == DEAD) return muse_error_set(err, MUSE_ERR_INTERNAL, "grammar: token %d allowed but not accepted", id);
    m->cur = s;
    m->pvalue = pv;
    m->pn_remain = pn;
    return MUSE_OK;
}

muse_status muse_grammar_matcher_accept_text(struct muse_grammar_matcher *m, const char *text, size_t len,
                                             struct muse_error *err) {
    begin(m, err);
    len = strnlen(text, len);
    if (len > UINT32_MAX) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: text too long");
    if (len == 0) return MUSE_OK; /* nothing to consume */
    uint32_t pv = 0;
    int pn = 0;
    int32_t s = advance(m, -1, (const unsigned char *)text, (uint32_t)len, &pv, &pn);
    if (s == UNKNOWN) return m->status;
    if (s == DEAD) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: the text does not match");
    m->cur = s;
    m->pvalue = pv;
    m->pn_remain = pn;
    return MUSE_OK;
}

void muse_grammar_matcher_stats(const struct muse_grammar_matcher *m, struct muse_grammar_stats *out) {
    *out = m->stats;
    out->bytes = m->mask_bytes + m->table_bytes + (size_t)m->cap_stk * (sizeof(struct stk) + 4 * sizeof(uint32_t)) +
                 (size_t)m->cap_pool * sizeof(uint32_t) + (size_t)m->cap_st * sizeof(struct state) +
                 (size_t)m->tr_cap * sizeof(struct tr_entry);
}
