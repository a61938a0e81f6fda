/*
 * tokenizer_encode.c - muse_tokenizer_encode: special-token partition, pre-tokenizer pieces,
 * byte-level BPE per piece.
 *
 * All scratch is per call (struct enc), so concurrent encodes on one tokenizer never share
 * mutable state; the piece cache lives in that scratch too.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer_impl.h"

// ---- per-call state --------------------------------------------------------------------------

/* A candidate merge of the symbols at `pos` and next[pos]. */
struct bigram {
    uint64_t key;       /* rank << 32 | pos: lowest rank first, then leftmost */
    int32_t right_pos;
    int32_t left, right, result;
};

/* Piece cache: a direct-mapped table from piece bytes to the ids BPE gave them. */
#define CACHE_MAX_SLOTS 4096u
#define CACHE_MAX_PIECE 32u
#define CACHE_MAX_IDS 12u
struct cache_slot {
    uint8_t len;        /* piece length, 0 = empty slot */
    uint8_t n_ids;
    uint8_t bytes[CACHE_MAX_PIECE];
    int32_t ids[CACHE_MAX_IDS];
};

struct enc {
    const struct muse_tokenizer *tok;
    int32_t *out;
    size_t cap, n;
    /* BPE scratch, sized for the longest piece seen so far */
    size_t scratch_n;
    int32_t *sym, *next, *prev;     /* [scratch_n] */
    struct bigram *heap;            /* [heap_cap], grown on demand */
    size_t heap_cap;
    bool nomem;                     /* a heap growth failed */
    struct cache_slot *cache;       /* [cache_mask + 1] or NULL */
    uint64_t cache_mask;
};

static inline void emit(struct enc *e, int32_t id) {
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

static muse_status reserve(struct enc *e, size_t n) {
    if (n <= e->scratch_n) return MUSE_OK;
    size_t cap = e->scratch_n ? e->scratch_n : 64;
    while (cap < n) cap *= 2;
    int32_t *sym = realloc(e->sym, cap * sizeof(int32_t));
    if (sym) e->sym = sym;
    int32_t *next = realloc(e->next, cap * sizeof(int32_t));
    if (next) e->next = next;
    int32_t *prev = realloc(e->prev, cap * sizeof(int32_t));
    if (prev) e->prev = prev;
    if (!sym || !next || !prev) return MUSE_ERR_NOMEM;
    e->scratch_n = cap;
    return MUSE_OK;
}

// ---- BPE ------------------------------------------------------------------------------------------

/*
 * A min-heap of bigrams; stale entries are dropped at pop time. It never holds more than 2n
 * entries (n-1 initial pairs; each merge pops one and pushes at most two, so after k pops with
 * m <= k merges the size is n-1 + 2m - k), and usually far fewer (a run of a character with no
 * merges has none), so it grows on demand instead of being sized for the worst case.
 */
static bool heap_grow(struct enc *e) {
    size_t cap = e->heap_cap ? e->heap_cap * 2 : 256;
    struct bigram *h = realloc(e->heap, cap * sizeof(struct bigram));
    if (!h) return false;
    e->heap = h;
    e->heap_cap = cap;
    return true;
}

static inline void heap_push(struct bigram *h, size_t *n, struct bigram b) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= b.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static inline struct bigram heap_pop(struct bigram *h, size_t *n) {
    struct bigram top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static inline void try_pair(struct enc *e, size_t *hn, int32_t pos) {
    if (pos < 0) return;
    int32_t right = e->next[pos];
    if (right < 0) return;
    const struct muse_tok_merge *m = muse_tok_find_merge(e->tok, e->sym[pos], e->sym[right]);
    if (!m) return;
    if (*hn == e->heap_cap && !heap_grow(e)) {
        e->nomem = true;
        return;
    }
    heap_push(e->heap, hn,
              (struct bigram){.key = (uint64_t)m->rank << 32 | (uint32_t)pos,
                              .right_pos = right, .left = e->sym[pos], .right = e->sym[right], .result = m->result});
}

/* Emit a final symbol: a token, or (synthetic merge symbol) its single-byte tokens. */
static inline void emit_sym(struct enc *e, int32_t s) {
    const struct muse_tokenizer *tok = e->tok;
    if (s < tok->n_vocab) {
        emit(e, s);
        return;
    }
    for (uint64_t i = tok->sym_off[s]; i < tok->sym_off[s + 1]; i++) {
        int32_t b = tok->byte_sym[tok->sym_blob[i]];
        if (b < tok->n_vocab) emit(e, b);
    }
}

/* BPE over bytes p[0..n): lowest merge rank first, leftmost on ties (llama.cpp / HF). */
static muse_status bpe(struct enc *e, const uint8_t *p, size_t n) {
    const struct muse_tokenizer *tok = e->tok;
    if (n == 1) {
        emit_sym(e, tok->byte_sym[p[0]]);
        return MUSE_OK;
    }
    if (n > INT32_MAX) return MUSE_ERR_INVALID_ARG; /* positions are 32-bit */
    if (reserve(e, n) != MUSE_OK) return MUSE_ERR_NOMEM;
    int32_t *sym = e->sym, *next = e->next, *prev = e->prev;
    for (size_t i = 0; i < n; i++) {
        sym[i] = tok->byte_sym[p[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(e, &hn, (int32_t)i);
    while (hn) {
        struct bigram b = heap_pop(e->heap, &hn);
        int32_t pos = (int32_t)(uint32_t)b.key;
        /* stale: a side was merged since (symbols only grow, so equal ids mean unchanged) */
        if (sym[pos] != b.left || next[pos] != b.right_pos || sym[b.right_pos] != b.right) continue;
        int32_t r = b.right_pos;
        sym[pos] = b.result;
        sym[r] = -1;
        next[pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = pos;
        try_pair(e, &hn, prev[pos]);
        try_pair(e, &hn, pos);
    }
    if (e->nomem) return MUSE_ERR_NOMEM;
    for (int32_t i = 0; i >= 0; i = next[i]) emit_sym(e, sym[i]);
    return MUSE_OK;
}

static muse_status piece_fn(void *ctx, const uint8_t *text, size_t start, size_t end) {
    struct enc *e = ctx;
    const uint8_t *p = text + start;
    size_t n = end - start;
    if (e->tok->ignore_merges) {
        int32_t id = muse_tok_find_sym(e->tok, p, n);
        if (id >= 0 && id < e->tok->n_vocab) {
            emit(e, id);
            return MUSE_OK;
        }
    }
    if (!e->cache || n > CACHE_MAX_PIECE || n < 2) return bpe(e, p, n);
    struct cache_slot *c = &e->cache[muse_tok_hash_bytes(p, n) & e->cache_mask];
    if (c->len == n && memcmp(c->bytes, p, n) == 0) {
        for (unsigned i = 0; i < c->n_ids; i++) emit(e, c->ids[i]);
        return MUSE_OK;
    }
    size_t before = e->n;
    muse_status st = bpe(e, p, n);
    size_t got = e->n - before;
    if (st == MUSE_OK && got <= CACHE_MAX_IDS && e->n <= e->cap) {
        c->len = (uint8_t)n;
        c->n_ids = (uint8_t)got;
        memcpy(c->bytes, p, n);
        memcpy(c->ids, e->out + before, got * sizeof(int32_t));
    }
    return st;
}

// ---- special-token partition ----------------------------------------------------------------------

/* A special token found in the text: (index in tok->specials, byte position). */
struct occ {
    uint64_t key; /* index << 32 | pos: the processing order (longest text first, then leftmost) */
};

static int cmp_occ(const void *a, const void *b) {
    uint64_t x = ((const struct occ *)a)->key, y = ((const struct occ *)b)->key;
    return x < y ? -1 : x > y;
}

static int32_t find_special(const struct muse_tokenizer *tok, const uint8_t *s, size_t len) {
    uint64_t h = muse_tok_hash_bytes(s, len) & tok->special_hash_mask;
    for (;;) {
        uint32_t slot = tok->special_hash[h];
        if (!slot) return -1;
        int32_t id = tok->specials[slot - 1];
        if (tok->text_off[id + 1] - tok->text_off[id] - 1 == len && memcmp(tok->text_blob + tok->text_off[id], s, len) == 0)
            return (int32_t)slot - 1;
        h = (h + 1) & tok->special_hash_mask;
    }
}

/*
 * Find the special tokens to split out, with llama.cpp's semantics: tokens are taken in order of
 * decreasing text length, each at its leftmost non-overlapping occurrences that lie wholly in
 * text not yet claimed by a longer token. Returns the taken occurrences sorted by position in
 * *taken (malloc'd; NULL when none).
 */
static muse_status find_specials(const struct muse_tokenizer *tok, const uint8_t *text, size_t len, bool all,
                                 struct occ **taken, size_t *n_taken) {
    struct occ *occ = NULL;
    uint8_t *claimed = NULL;
    size_t n = 0, cap = 0;
    *taken = NULL;
    *n_taken = 0;
    for (size_t pos = 0; pos < len; pos++) {
        if (!tok->special_first[text[pos]]) continue;
        for (int32_t l = 0; l < tok->n_special_lens; l++) {
            size_t sl = tok->special_lens[l];
            if (sl > len - pos) continue;
            int32_t i = find_special(tok, text + pos, sl);
            if (i < 0 || (!all && !tok->special_always[i])) continue;
            if (pos > UINT32_MAX) break; /* positions are 32-bit in the key; such texts get no specials beyond 4 GiB */
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                struct occ *p = realloc(occ, cap * sizeof(*occ));
                if (!p) goto nomem;
                occ = p;
            }
            occ[n++].key = (uint64_t)i << 32 | pos;
        }
    }
    if (!n) return MUSE_OK;
    qsort(occ, n, sizeof(*occ), cmp_occ);
    claimed = calloc(len, 1);
    if (!claimed) goto nomem;
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        int32_t i = (int32_t)(occ[j].key >> 32);
        size_t pos = (uint32_t)occ[j].key;
        int32_t id = tok->specials[i];
        size_t sl = (size_t)(tok->text_off[id + 1] - tok->text_off[id] - 1);
        if (memchr(claimed + pos, 1, sl)) continue;
        memset(claimed + pos, 1, sl);
        occ[k++] = occ[j];
    }
    free(claimed);
    /* re-key the taken ones as pos << 32 | index and sort them by position */
    for (size_t j = 0; j < k; j++) occ[j].key = occ[j].key << 32 | occ[j].key >> 32;
    qsort(occ, k, sizeof(*occ), cmp_occ);
    *taken = occ;
    *n_taken = k;
    return MUSE_OK;
nomem:
    free(occ);
    free(claimed);
    return MUSE_ERR_NOMEM;
}

// ---- encode ---------------------------------------------------------------------------------------

static muse_status encode_text(struct enc *e, pcre2_match_data *md, const uint8_t *text, size_t len,
                               struct muse_error *err) {
    if (!len) return MUSE_OK;
    muse_status st = muse_tok_pretok_split(e->tok, md, text, len, piece_fn, e, err);
    if (st == MUSE_ERR_INVALID_ARG) muse_error_set(err, st, "tokenize: a pre-tokenizer piece longer than 2 GiB");
    return st;
}

muse_status muse_tokenizer_encode(const struct muse_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                  int32_t *out, size_t capacity, size_t *n_out, struct muse_error *err) {
    struct enc e = {.tok = tok, .out = out, .cap = out ? capacity : 0};
    struct occ *taken = NULL;
    size_t n_taken = 0;
    pcre2_match_data *md = NULL;
    muse_status st = MUSE_ERR_NOMEM;
    const uint8_t *t = (const uint8_t *)text;
    if (n_out) *n_out = 0;
    if (!text && len) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tokenize: NULL text");

    if ((flags & MUSE_TOKENIZE_ADD_BOS) && tok->bos >= 0) emit(&e, tok->bos);
    bool all = (flags & MUSE_TOKENIZE_PARSE_SPECIAL) != 0;
    if (len && tok->n_specials && (all || tok->any_special_always) &&
        find_specials(tok, t, len, all, &taken, &n_taken) != MUSE_OK)
        goto fail;
    md = pcre2_match_data_create_from_pattern(tok->re, NULL);
    if (!md) goto fail;
    /* the cache pays for itself from a few hundred bytes on; about one slot per 8 bytes of text
     * (a piece is ~4 bytes and the common ones repeat), at most 4096 slots (~340 KB) */
    if (len >= 256) {
        size_t slots = 32;
        while (slots < CACHE_MAX_SLOTS && slots * 8 < len) slots *= 2;
        e.cache = calloc(slots, sizeof(struct cache_slot));
        if (!e.cache) goto fail;
        e.cache_mask = slots - 1;
    }
    size_t pos = 0;
    for (size_t j = 0; j < n_taken; j++) {
        size_t at = taken[j].key >> 32;
        int32_t id = tok->specials[(uint32_t)taken[j].key];
        if ((st = encode_text(&e, md, t + pos, at - pos, err)) != MUSE_OK) goto fail;
        emit(&e, id);
        pos = at + (size_t)(tok->text_off[id + 1] - tok->text_off[id] - 1);
    }
    if ((st = encode_text(&e, md, t + pos, len - pos, err)) != MUSE_OK) goto fail;

    if (n_out) *n_out = e.n;
    if (e.n > e.cap)
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "tokenize: output buffer too small (need %zu ids, have %zu)",
                            e.n, capacity);
    else
        st = MUSE_OK;
fail:
    if (st == MUSE_ERR_NOMEM) muse_error_set(err, st, "tokenize: out of memory");
    free(taken);
    free(e.cache);
    free(e.sym);
    free(e.next);
    free(e.prev);
    free(e.heap);
    if (md) pcre2_match_data_free(md);
    return st;
}

muse_status muse_tokenizer_encode_alloc(const struct muse_tokenizer *tok, const char *text, size_t len,
                                        unsigned flags, int32_t **ids, size_t *n_ids, struct muse_error *err) {
    *ids = NULL;
    *n_ids = 0;
    /* a piece of n bytes gives at most n ids; guess generously, retry once with the exact size */
    size_t cap = len / 2 + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *buf = malloc(cap * sizeof(int32_t));
        if (!buf) return muse_error_set(err, MUSE_ERR_NOMEM, "tokenize: out of memory");
        size_t n = 0;
        muse_status st = muse_tokenizer_encode(tok, text, len, flags, buf, cap, &n, err);
        if (st == MUSE_OK) {
            *ids = buf;
            *n_ids = n;
            return MUSE_OK;
        }
        free(buf);
        if (n <= cap) return st; /* a real error, not the size */
        cap = n;
    }
    return muse_error_set(err, MUSE_ERR_INTERNAL, "tokenize: size changed between calls");
}
