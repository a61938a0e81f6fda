/*
 * tokenizer_vocab.c - building a muse_tokenizer from plain vocabulary arrays: the GPT-2 byte
 * table, the symbol hash (bytes -> id), the merge table ((left, right) -> rank, result), the
 * special-token list, and the accessors.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/error.h"
#include "text/tokenizer_impl.h"

// ---- GPT-2 bytes_to_unicode -----------------------------------------------------------------

/* Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to the same code point; the other 68 bytes map
 * to U+0100.. in increasing byte order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'). */
static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

#define CP_TABLE 0x144 /* code points 0..0x143 cover the whole table */

/* cp_to_byte[cp] = byte, or -1. */
static void build_cp_to_byte(int16_t cp_to_byte[CP_TABLE]) {
    for (int i = 0; i < CP_TABLE; i++) cp_to_byte[i] = -1;
    int next = 0x100;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_is_self(b)) cp_to_byte[b] = (int16_t)b;
        else cp_to_byte[next++] = (int16_t)b;
    }
}

/*
 * Decode byte-to-unicode text into raw bytes at out (at most n bytes). Returns the byte count,
 * or -1 when the text is not valid UTF-8 or holds a code point outside the table.
 */
static int64_t unicode_to_bytes(const int16_t cp_to_byte[CP_TABLE], const uint8_t *s, size_t n, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned c = s[i], cp;
        if (c < 0x80) {
            cp = c;
            i++;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < n && (s[i + 1] & 0xc0) == 0x80) {
            cp = (c & 0x1fu) << 6 | (s[i + 1] & 0x3fu);
            if (cp < 0x80) return -1;
            i += 2;
        } else {
            return -1; /* 3- and 4-byte sequences are all outside the table */
        }
        if (cp >= CP_TABLE || cp_to_byte[cp] < 0) return -1;
        out[o++] = (uint8_t)cp_to_byte[cp];
    }
    return (int64_t)o;
}

// ---- symbol table ------------------------------------------------------------------------------

static const uint8_t *sym_bytes(const struct muse_tokenizer *tok, int32_t id, size_t *len) {
    *len = (size_t)(tok->sym_off[id + 1] - tok->sym_off[id]);
    return tok->sym_blob + tok->sym_off[id];
}

/* Short strings dominate: a plain loop beats a memcmp call. */
static inline bool bytes_eq(const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* The first 8 bytes of a string, zero-padded (a slot keeps them inline). */
static inline uint64_t head8(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    memcpy(&v, p, n < 8 ? n : 8);
    return v;
}

/* A slot's check word: 24 bits of hash and the length (255 = 255 or more). */
static inline uint32_t slot_meta(uint64_t h, size_t len) {
    return (uint32_t)(h >> 40) << 8 | (uint32_t)(len < 255 ? len : 255);
}

/*
 * Slots keep the hash tag, the length and the first 8 bytes inline, so a lookup of a string of
 * up to 8 bytes (most tokens) costs one cache miss; longer ones are verified against the blob.
 * (Measured on the 200k-token vocabulary: id-only slots spent ~70% of the load in the two
 * dependent misses on sym_off and sym_blob.)
 */
static int32_t find_sym_h(const struct muse_tokenizer *tok, const uint8_t *bytes, size_t len, uint64_t h) {
    uint32_t meta = slot_meta(h, len);
    uint64_t head = head8(bytes, len);
    for (uint64_t i = h & tok->sym_hash_mask;; i = (i + 1) & tok->sym_hash_mask) {
        const struct muse_tok_sym_slot *sl = &tok->sym_hash[i];
        if (!sl->id1) return -1;
        if (sl->meta != meta || sl->head != head) continue;
        int32_t id = (int32_t)sl->id1 - 1;
        if (len <= 8) return id;
        if (tok->sym_off[id + 1] - tok->sym_off[id] == len && bytes_eq(tok->sym_blob + tok->sym_off[id], bytes, len))
            return id;
    }
}

int32_t muse_tok_find_sym(const struct muse_tokenizer *tok, const uint8_t *bytes, size_t len) {
    return find_sym_h(tok, bytes, len, muse_tok_hash_bytes(bytes, len));
}

/* Put id (whose bytes are already in sym_blob) in the hash; an equal string is replaced
 * (llama.cpp's token_to_id[text] = id: the last duplicate wins). */
static void sym_hash_put(struct muse_tokenizer *tok, int32_t id, uint64_t h) {
    size_t len;
    const uint8_t *bytes = sym_bytes(tok, id, &len);
    uint32_t meta = slot_meta(h, len);
    uint64_t head = head8(bytes, len);
    uint64_t i = h & tok->sym_hash_mask;
    for (;; i = (i + 1) & tok->sym_hash_mask) {
        const struct muse_tok_sym_slot *sl = &tok->sym_hash[i];
        if (!sl->id1) break;
        if (sl->meta != meta || sl->head != head) continue;
        int32_t o = (int32_t)sl->id1 - 1;
        if (len <= 8 ||
            (tok->sym_off[o + 1] - tok->sym_off[o] == len && bytes_eq(tok->sym_blob + tok->sym_off[o], bytes, len)))
            break;
    }
    tok->sym_hash[i] = (struct muse_tok_sym_slot){.head = head, .id1 = (uint32_t)id + 1, .meta = meta};
}

/*
 * A zeroed table for random access. Big ones are 2 MiB aligned and advised as huge pages:
 * the symbol and merge tables are 8-16 MiB each and probing them at random missed the TLB on
 * nearly every lookup (prefetches stalled on page walks; the load took ~30% longer).
 * Free with free().
 */
static void *table_calloc(size_t n, size_t size) {
    const size_t huge = (size_t)2 << 20;
    size_t bytes = n * size;
    if (bytes < huge) return calloc(n, size);
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); /* only advice: failure just means small pages */
#endif
    memset(p, 0, bytes);
    return p;
}

static uint64_t next_pow2(uint64_t x) {
    uint64_t p = 16;
    while (p < x) p <<= 1;
    return p;
}

/* Growable storage for synthetic symbols during init. */
struct sym_store {
    uint64_t blob_cap;  /* bytes allocated in tok->sym_blob */
    int64_t off_cap;    /* entries allocated in tok->sym_off */
};

/* (Re)build the hash with `cap` slots. Hashes are computed a batch ahead and their slots
 * prefetched: the table is bigger than the caches and the load is latency-bound. */
static muse_status sym_hash_resize(struct muse_tokenizer *tok, uint64_t cap) {
    struct muse_tok_sym_slot *h = table_calloc(cap, sizeof(*h));
    if (!h) return MUSE_ERR_NOMEM;
    free(tok->sym_hash);
    tok->sym_hash = h;
    tok->sym_hash_mask = (uint32_t)(cap - 1);
    /* insert in id order so that later duplicates still win */
    enum { BATCH = 32 };
    uint64_t hashes[BATCH];
    for (int32_t id0 = 0; id0 < tok->n_sym; id0 += BATCH) {
        int32_t n = tok->n_sym - id0 < BATCH ? tok->n_sym - id0 : BATCH;
        for (int32_t k = 0; k < n; k++) {
            size_t len;
            const uint8_t *b = sym_bytes(tok, id0 + k, &len);
            hashes[k] = muse_tok_hash_bytes(b, len);
            __builtin_prefetch(&tok->sym_hash[hashes[k] & tok->sym_hash_mask]);
        }
        for (int32_t k = 0; k < n; k++) {
            int32_t id = id0 + k;
            if (id >= tok->n_vocab || tok->decodable[id]) sym_hash_put(tok, id, hashes[k]);
        }
    }
    return MUSE_OK;
}

/* The symbol id of these bytes (hash h), creating a synthetic symbol when absent (-1 on NOMEM). */
static int32_t sym_intern(struct muse_tokenizer *tok, struct sym_store *st, const uint8_t *bytes, size_t len,
                          uint64_t h) {
    int32_t id = find_sym_h(tok, bytes, len, h);
    if (id >= 0) return id;
    if (tok->n_sym == INT32_MAX - 1) return -1;
    if ((uint64_t)(tok->n_sym + 1) * 2 > (uint64_t)tok->sym_hash_mask + 1 &&
        sym_hash_resize(tok, ((uint64_t)tok->sym_hash_mask + 1) * 2) != MUSE_OK)
        return -1;
    if (tok->n_sym + 2 > st->off_cap) {
        int64_t cap = st->off_cap * 2;
        uint64_t *p = realloc(tok->sym_off, (size_t)cap * sizeof(uint64_t));
        if (!p) return -1;
        tok->sym_off = p;
        st->off_cap = cap;
    }
    uint64_t end = tok->sym_off[tok->n_sym];
    if (end + len > st->blob_cap) {
        uint64_t cap = st->blob_cap * 2 + len;
        uint8_t *p = realloc(tok->sym_blob, cap);
        if (!p) return -1;
        tok->sym_blob = p;
        st->blob_cap = cap;
    }
    memcpy(tok->sym_blob + end, bytes, len);
    id = tok->n_sym++;
    tok->sym_off[tok->n_sym] = end + len;
    sym_hash_put(tok, id, h);
    return id;
}

/* A merge decoded to bytes, waiting for its lookups (see load_merges). */
struct pending_merge {
    int64_t rank;
    size_t off, nl, nr;       /* bytes at buf + off: left (nl) then right (nr) */
    uint64_t hl, hr, hlr;     /* hashes of left, right, left+right */
    uint64_t key;             /* after lookup: the merge key and the merged symbol */
    int32_t result;
};

/*
 * Fill the merge table from "LEFT RIGHT" strings (split at the first space after the first
 * byte, as llama.cpp). Batched like sym_hash_resize: decode and hash MERGE_BATCH merges and
 * prefetch their slots, then look them up.
 */
static muse_status load_merges(struct muse_tokenizer *tok, struct sym_store *store,
                               const struct muse_tokenizer_vocab *v, const int16_t cp_to_byte[CP_TABLE],
                               struct muse_error *err) {
    enum { MERGE_BATCH = 32 };
    struct pending_merge pm[MERGE_BATCH];
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    muse_status st = MUSE_ERR_NOMEM;
    tok->n_merges = v->n_merges;
    tok->merge_mask = next_pow2((uint64_t)v->n_merges * 2 + 16) - 1;
    tok->merges = table_calloc(tok->merge_mask + 1, sizeof(struct muse_tok_merge)); /* key 0 = empty */
    if (!tok->merges) goto fail;
    for (int64_t r0 = 0; r0 < v->n_merges; r0 += MERGE_BATCH) {
        int64_t r1 = v->n_merges - r0 < MERGE_BATCH ? v->n_merges : r0 + MERGE_BATCH;
        size_t need = 0;
        for (int64_t r = r0; r < r1; r++) need += v->merge_lens[r];
        if (need > buf_cap) {
            uint8_t *p = realloc(buf, need);
            if (!p) goto fail;
            buf = p;
            buf_cap = need;
        }
        int np = 0;
        size_t off = 0;
        for (int64_t r = r0; r < r1; r++) {
            const char *s = v->merges[r];
            uint32_t len = v->merge_lens[r];
            const char *sp = len > 1 && s ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp) {
                st = muse_error_set(err, MUSE_ERR_FORMAT, "tokenizer: merge %lld has no space separator",
                                    (long long)r);
                goto fail;
            }
            size_t ln = (size_t)(sp - s), rn = len - ln - 1;
            int64_t lb = unicode_to_bytes(cp_to_byte, (const uint8_t *)s, ln, buf + off);
            int64_t rb = lb < 0 ? -1 : unicode_to_bytes(cp_to_byte, (const uint8_t *)sp + 1, rn, buf + off + lb);
            if (lb <= 0 || rb <= 0) continue; /* a side outside the byte table can never match a symbol */
            struct pending_merge *m = &pm[np++];
            *m = (struct pending_merge){.rank = r, .off = off, .nl = (size_t)lb, .nr = (size_t)rb};
            m->hl = muse_tok_hash_bytes(buf + off, m->nl);
            m->hr = muse_tok_hash_bytes(buf + off + lb, m->nr);
            m->hlr = muse_tok_hash_bytes(buf + off, m->nl + m->nr);
            __builtin_prefetch(&tok->sym_hash[m->hl & tok->sym_hash_mask]);
            __builtin_prefetch(&tok->sym_hash[m->hr & tok->sym_hash_mask]);
            __builtin_prefetch(&tok->sym_hash[m->hlr & tok->sym_hash_mask]);
            off += m->nl + m->nr;
        }
        /* look the symbols up and prefetch the merge slot, then insert in rank order */
        for (int k = 0; k < np; k++) {
            struct pending_merge *m = &pm[k];
            const uint8_t *b = buf + m->off;
            int32_t left = sym_intern(tok, store, b, m->nl, m->hl);
            int32_t right = left < 0 ? -1 : sym_intern(tok, store, b + m->nl, m->nr, m->hr);
            m->result = right < 0 ? -1 : sym_intern(tok, store, b, m->nl + m->nr, m->hlr);
            if (m->result < 0) goto fail;
            m->key = muse_tok_merge_key(left, right);
            __builtin_prefetch(&tok->merges[muse_tok_hash_pair(m->key) & tok->merge_mask]);
        }
        for (int k = 0; k < np; k++) {
            const struct pending_merge *m = &pm[k];
            uint64_t i = muse_tok_hash_pair(m->key) & tok->merge_mask;
            while (tok->merges[i].key && tok->merges[i].key != m->key) i = (i + 1) & tok->merge_mask;
            if (tok->merges[i].key == m->key) continue; /* duplicate pair: the lowest rank stays */
            tok->merges[i] = (struct muse_tok_merge){.key = m->key, .rank = (uint32_t)m->rank, .result = m->result};
        }
    }
    st = MUSE_OK;
fail:
    free(buf);
    if (st == MUSE_ERR_NOMEM) muse_error_set(err, st, "tokenizer: out of memory");
    return st;
}

// ---- init ----------------------------------------------------------------------------------------

muse_status muse_pretok_from_name(const char *name, size_t len, enum muse_pretok *out, struct muse_error *err) {
    static const struct { const char *name; enum muse_pretok pretok; } names[] = {
        {"llama4", MUSE_PRETOK_LLAMA4},    {"gpt-4o", MUSE_PRETOK_LLAMA4},
        {"llama-bpe", MUSE_PRETOK_LLAMA3}, {"llama3", MUSE_PRETOK_LLAMA3},
        {"gpt2", MUSE_PRETOK_GPT2},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) {
            *out = names[i].pretok;
            return MUSE_OK;
        }
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "unsupported tokenizer.ggml.pre '%.*s' (supported: llama4, gpt-4o, llama-bpe, llama3, gpt2)",
                          (int)(len > 64 ? 64 : len), name);
}

static bool is_chat_marker(const char *s, size_t n) {
    static const char *const markers[] = {"<|start|>", "<|message|>", "<|channel|>", "<|constrain|>"};
    for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
        if (strlen(markers[i]) == n && memcmp(markers[i], s, n) == 0) return true;
    return false;
}

/* Parse "<0xXX>" (BYTE tokens); -1 if not of that form. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const struct muse_tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx = tok->text_off[x + 1] - tok->text_off[x], ly = tok->text_off[y + 1] - tok->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static muse_status build_specials(struct muse_tokenizer *tok) {
    int32_t n = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint8_t t = tok->types[id];
        if ((t == MUSE_TOKEN_TYPE_CONTROL || t == MUSE_TOKEN_TYPE_USER_DEFINED || t == MUSE_TOKEN_TYPE_UNKNOWN) &&
            tok->text_off[id + 1] - tok->text_off[id] > 1)
            n++;
    }
    tok->specials = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    tok->special_always = malloc((size_t)(n ? n : 1));
    if (!tok->specials || !tok->special_always) return MUSE_ERR_NOMEM;
    n = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint8_t t = tok->types[id];
        if ((t == MUSE_TOKEN_TYPE_CONTROL || t == MUSE_TOKEN_TYPE_USER_DEFINED || t == MUSE_TOKEN_TYPE_UNKNOWN) &&
            tok->text_off[id + 1] - tok->text_off[id] > 1)
            tok->specials[n++] = id;
    }
    tok->n_specials = n;
    qsort_r(tok->specials, (size_t)n, sizeof(int32_t), cmp_special, tok);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = tok->specials[i];
        const char *s = tok->text_blob + tok->text_off[id];
        size_t len = (size_t)(tok->text_off[id + 1] - tok->text_off[id] - 1);
        /* USER_DEFINED tokens of the file are plain added words (HF and llama.cpp match them
         * always); the chat markers are matched only with PARSE_SPECIAL so that raw user text
         * cannot inject a message boundary (muse's prompt builder inserts them as ids). */
        tok->special_always[i] = tok->types[id] == MUSE_TOKEN_TYPE_USER_DEFINED && !is_chat_marker(s, len);
        tok->any_special_always |= tok->special_always[i];
        tok->special_first[(uint8_t)s[0]] = 1;
    }
    /* text -> position in `specials` (the first, i.e. lowest id, of equal texts), and the
     * distinct lengths, so that a scan tries each length once per candidate position */
    tok->special_hash_mask = (uint32_t)next_pow2((uint64_t)n * 2 + 16) - 1;
    tok->special_hash = calloc((size_t)tok->special_hash_mask + 1, sizeof(uint32_t));
    tok->special_lens = malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (!tok->special_hash || !tok->special_lens) return MUSE_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = tok->specials[i];
        const uint8_t *s = (const uint8_t *)tok->text_blob + tok->text_off[id];
        uint32_t len = (uint32_t)(tok->text_off[id + 1] - tok->text_off[id] - 1);
        if (tok->n_special_lens == 0 || tok->special_lens[tok->n_special_lens - 1] != len)
            tok->special_lens[tok->n_special_lens++] = len;
        uint64_t h = muse_tok_hash_bytes(s, len) & tok->special_hash_mask;
        for (;;) {
            uint32_t slot = tok->special_hash[h];
            if (!slot) {
                tok->special_hash[h] = (uint32_t)i + 1;
                break;
            }
            int32_t o = tok->specials[slot - 1];
            if (tok->text_off[o + 1] - tok->text_off[o] - 1 == len && memcmp(tok->text_blob + tok->text_off[o], s, len) == 0)
                break;
            h = (h + 1) & tok->special_hash_mask;
        }
    }
    return MUSE_OK;
}

static int32_t find_text(const struct muse_tokenizer *tok, const char *text, size_t len) {
    for (int32_t id = 0; id < tok->n_vocab; id++)
        if (tok->text_off[id + 1] - tok->text_off[id] - 1 == len &&
            memcmp(tok->text_blob + tok->text_off[id], text, len) == 0)
            return id;
    return -1;
}

muse_status muse_tokenizer_init(const struct muse_tokenizer_vocab *v, struct muse_tokenizer **out,
                                struct muse_error *err) {
    struct muse_tokenizer *tok = NULL;
    uint8_t *tmp = NULL;
    muse_status st = MUSE_ERR_NOMEM;
    *out = NULL;
    if (!v || v->n_tokens <= 0 || v->n_tokens >= INT32_MAX / 2 || !v->tokens || !v->token_lens ||
        v->n_merges < 0 || (v->n_merges > 0 && (!v->merges || !v->merge_lens)) || v->pretok < 0 ||
        v->pretok >= MUSE_PRETOK_COUNT)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tokenizer: bad vocabulary arguments");
    const int32_t special_ids[4] = {v->bos_id, v->eos_id, v->eot_id, v->eom_id};
    for (int i = 0; i < 4; i++)
        if (special_ids[i] < -1 || special_ids[i] >= v->n_tokens)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tokenizer: special token id %d out of range (n_vocab %d)",
                                  special_ids[i], v->n_tokens);

    tok = calloc(1, sizeof(*tok));
    if (!tok) goto fail;
    const int32_t n = v->n_tokens;
    tok->n_vocab = tok->n_sym = n;
    tok->pretok = v->pretok;
    tok->ignore_merges = v->pretok == MUSE_PRETOK_LLAMA3;
    tok->add_bos = v->add_bos;
    tok->bos = v->bos_id;
    tok->eos = v->eos_id;
    tok->types = malloc((size_t)n);
    tok->always_render = calloc((size_t)n, 1);
    tok->decodable = calloc((size_t)n, 1);
    tok->text_off = malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (!tok->types || !tok->always_render || !tok->decodable || !tok->text_off) goto fail;

    uint64_t total = 0;
    uint32_t max_len = 0;
    for (int32_t id = 0; id < n; id++) {
        int32_t t = v->token_types ? v->token_types[id] : MUSE_TOKEN_TYPE_NORMAL;
        if (t < 0 || t >= MUSE_TOKEN_TYPE_COUNT) t = MUSE_TOKEN_TYPE_UNDEFINED; /* unknown types: treat as plain */
        tok->types[id] = (uint8_t)t;
        if (v->token_lens[id] > 0 && !v->tokens[id]) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "tokenizer: token %d has no text", id);
            goto fail;
        }
        tok->text_off[id] = total;
        total += (uint64_t)v->token_lens[id] + 1;
        if (v->token_lens[id] > max_len) max_len = v->token_lens[id];
    }
    tok->text_off[n] = total;
    tok->text_blob = malloc(total);
    struct sym_store store = {.blob_cap = total + 256, .off_cap = (int64_t)n + 1 + 1024};
    tok->sym_blob = malloc(store.blob_cap);
    tok->sym_off = malloc((size_t)store.off_cap * sizeof(uint64_t));
    size_t tmp_cap = (size_t)max_len * 2 + 16;
    tmp = malloc(tmp_cap);
    if (!tok->text_blob || !tok->sym_blob || !tok->sym_off || !tmp) goto fail;

    int16_t cp_to_byte[CP_TABLE];
    build_cp_to_byte(cp_to_byte);
    uint64_t sym_end = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *s = v->tokens[id];
        uint32_t len = v->token_lens[id];
        char *dst = tok->text_blob + tok->text_off[id];
        if (len) memcpy(dst, s, len);
        dst[len] = '\0';
        tok->sym_off[id] = sym_end;
        uint8_t t = tok->types[id];
        if (t == MUSE_TOKEN_TYPE_UNUSED) continue; /* decodes to nothing */
        if (t == MUSE_TOKEN_TYPE_BYTE && parse_byte_token(s, len) >= 0) {
            tok->sym_blob[sym_end++] = (uint8_t)parse_byte_token(s, len);
            continue;
        }
        int64_t nb = -1;
        if (t == MUSE_TOKEN_TYPE_NORMAL || t == MUSE_TOKEN_TYPE_UNDEFINED)
            nb = unicode_to_bytes(cp_to_byte, (const uint8_t *)s, len, tok->sym_blob + sym_end);
        if (nb > 0 || (nb == 0 && len == 0)) {
            tok->decodable[id] = 1;
            sym_end += (uint64_t)nb;
        } else {
            /* special and added tokens, and NORMAL text outside the byte table, decode verbatim */
            memcpy(tok->sym_blob + sym_end, s, len);
            sym_end += len;
            if (t == MUSE_TOKEN_TYPE_USER_DEFINED || is_chat_marker(s, len)) tok->always_render[id] = 1;
            /* special tokens are also found by their text when a merge produces it (llama.cpp
             * keys token_to_id by the stored text, whatever the type) */
            tok->decodable[id] = unicode_to_bytes(cp_to_byte, (const uint8_t *)s, len, tmp) == (int64_t)len &&
                                 memcmp(tmp, s, len) == 0 && len > 0;
        }
    }
    tok->sym_off[n] = sym_end;

    /* load factor <= 0.5 for both tables: sizing them for ~0.8 (half the memory) measured slower,
     * 64-84 ms vs 60-67 ms CPU for the whole load (more probes; the tables miss the caches anyway) */
    st = sym_hash_resize(tok, next_pow2((uint64_t)n * 2 + 512));
    if (st != MUSE_OK) goto fail;
    st = MUSE_ERR_NOMEM;

    /* single bytes: every piece starts as bytes; a vocab without some byte gets a synthetic one */
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        tok->byte_sym[b] = sym_intern(tok, &store, &byte, 1, muse_tok_hash_bytes(&byte, 1));
        if (tok->byte_sym[b] < 0) goto fail;
    }

    st = load_merges(tok, &store, v, cp_to_byte, err);
    if (st != MUSE_OK) goto fail;
    st = build_specials(tok);
    if (st != MUSE_OK) goto fail;
    tok->eot = v->eot_id >= 0 ? v->eot_id : find_text(tok, "<|eot|>", 7);
    tok->eom = v->eom_id >= 0 ? v->eom_id : find_text(tok, "<|eom|>", 7);

    st = muse_tok_pretok_compile(tok, err);
    if (st != MUSE_OK) goto fail;
    free(tmp);
    *out = tok;
    return MUSE_OK;

fail:
    free(tmp);
    muse_tokenizer_free(tok);
    if (st == MUSE_ERR_NOMEM) muse_error_set(err, st, "tokenizer: out of memory");
    return st;
}

void muse_tokenizer_free(struct muse_tokenizer *tok) {
    if (!tok) return;
    if (tok->re) pcre2_code_free(tok->re);
    free(tok->types);
    free(tok->always_render);
    free(tok->text_blob);
    free(tok->text_off);
    free(tok->sym_blob);
    free(tok->sym_off);
    free(tok->decodable);
    free(tok->sym_hash);
    free(tok->merges);
    free(tok->specials);
    free(tok->special_always);
    free(tok->special_hash);
    free(tok->special_lens);
    free(tok);
}

// ---- accessors ----------------------------------------------------------------------------------

int32_t muse_tokenizer_n_vocab(const struct muse_tokenizer *tok) { return tok->n_vocab; }
int32_t muse_tokenizer_bos(const struct muse_tokenizer *tok) { return tok->bos; }
int32_t muse_tokenizer_eos(const struct muse_tokenizer *tok) { return tok->eos; }
int32_t muse_tokenizer_eot(const struct muse_tokenizer *tok) { return tok->eot; }
int32_t muse_tokenizer_eom(const struct muse_tokenizer *tok) { return tok->eom; }
bool muse_tokenizer_add_bos(const struct muse_tokenizer *tok) { return tok->add_bos; }
enum muse_pretok muse_tokenizer_pretok(const struct muse_tokenizer *tok) { return tok->pretok; }

enum muse_token_type muse_tokenizer_token_type(const struct muse_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->n_vocab) return MUSE_TOKEN_TYPE_UNDEFINED;
    return (enum muse_token_type)tok->types[id];
}

bool muse_tokenizer_is_control(const struct muse_tokenizer *tok, int32_t id) {
    return muse_tokenizer_token_type(tok, id) == MUSE_TOKEN_TYPE_CONTROL;
}

bool muse_tokenizer_is_eog(const struct muse_tokenizer *tok, int32_t id) {
    return id >= 0 && (id == tok->eos || id == tok->eot);
}

const char *muse_tokenizer_token_text(const struct muse_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) return NULL;
    if (len) *len = (size_t)(tok->text_off[id + 1] - tok->text_off[id] - 1);
    return tok->text_blob + tok->text_off[id];
}

const char *muse_tokenizer_token_bytes(const struct muse_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) return NULL;
    size_t n;
    const uint8_t *b = sym_bytes(tok, id, &n);
    if (len) *len = n;
    return (const char *)b;
}

int32_t muse_tokenizer_find(const struct muse_tokenizer *tok, const char *text, size_t len) {
    /* specials are few and matched by stored text; everything else by its decoded bytes */
    for (int32_t i = 0; i < tok->n_specials; i++) {
        int32_t id = tok->specials[i];
        if (tok->text_off[id + 1] - tok->text_off[id] - 1 == len &&
            memcmp(tok->text_blob + tok->text_off[id], text, len) == 0)
            return id;
    }
    int32_t id = muse_tok_find_sym(tok, (const uint8_t *)text, len);
    return id < tok->n_vocab ? id : -1;
}
