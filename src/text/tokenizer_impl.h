/*
 * tokenizer_impl.h - internals shared by the tokenizer_*.c files (not a public contract).
 *
 * Symbols: BPE runs in "symbol id" space. Symbol ids 0..n_vocab-1 are the vocabulary tokens
 * (looked up by their decoded bytes); ids n_vocab..n_sym-1 are strings that occur as a merge
 * side or result but are not tokens (llama.cpp keys merges by string, so such merges can still
 * fire; at the end such a symbol falls back to its single-byte tokens, as in llama.cpp).
 */
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

/* One slot of the merge table: (left symbol, right symbol) -> (rank, merged symbol). */
struct muse_tok_merge {
    uint64_t key;     /* muse_tok_merge_key(left, right); 0 = empty slot */
    uint32_t rank;
    int32_t result;
};

/* One slot of the symbol table (bytes -> symbol id). */
struct muse_tok_sym_slot {
    uint64_t head;    /* first 8 bytes of the string, zero-padded */
    uint32_t id1;     /* symbol id + 1; 0 = empty slot */
    uint32_t meta;    /* hash bits << 8 | min(length, 255) */
};

struct muse_tokenizer {
    int32_t n_vocab;
    int32_t n_sym;                  /* n_vocab + synthetic merge symbols */
    uint8_t *types;                 /* [n_vocab] enum muse_token_type */
    uint8_t *always_render;         /* [n_vocab] chat markers rendered without MUSE_DECODE_SPECIAL */

    char *text_blob;                /* token texts as stored, each NUL-terminated */
    uint64_t *text_off;             /* [n_vocab + 1] */

    uint8_t *sym_blob;              /* decoded bytes of every symbol (tokens, then synthetic) */
    uint64_t *sym_off;              /* [n_sym + 1] */
    uint8_t *decodable;             /* [n_vocab] 1 = text is valid byte-to-unicode form */

    struct muse_tok_sym_slot *sym_hash; /* [sym_hash_mask + 1] open addressing, key = bytes */
    uint32_t sym_hash_mask;

    struct muse_tok_merge *merges;  /* [merge_mask + 1] open addressing */
    uint64_t merge_mask;
    int64_t n_merges;

    int32_t byte_sym[256];          /* symbol of each single byte, -1 if the vocab lacks it */

    int32_t *specials;              /* [n_specials] CONTROL/USER_DEFINED/UNKNOWN ids, longest text first */
    uint8_t *special_always;        /* [n_specials] 1 = matched even without PARSE_SPECIAL */
    int32_t n_specials;
    bool any_special_always;
    uint8_t special_first[256];     /* 1 = some special text starts with this byte */
    uint32_t *special_hash;         /* [special_hash_mask + 1] index into specials + 1; key = text */
    uint32_t special_hash_mask;
    uint32_t *special_lens;         /* [n_special_lens] distinct text lengths, descending */
    int32_t n_special_lens;

    enum muse_pretok pretok;
    bool ignore_merges;             /* llama3: a piece that is a token is emitted whole (llama.cpp) */
    pcre2_code *re;
    bool jit;

    int32_t bos, eos, eot, eom;
    bool add_bos;
};

/* FNV-1a over bytes, then a final mix (hash tables of byte strings). */
static inline uint64_t muse_tok_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static inline uint64_t muse_tok_hash_pair(uint64_t key) {
    key *= 0x9e3779b97f4a7c15ull;
    return key ^ (key >> 29);
}

/* Never 0 (left + 1 >= 1), so that a zeroed table is empty. */
static inline uint64_t muse_tok_merge_key(int32_t left, int32_t right) {
    return (uint64_t)((uint32_t)left + 1) << 32 | (uint32_t)right;
}

/* The merge of (left, right), or NULL. */
static inline const struct muse_tok_merge *muse_tok_find_merge(const struct muse_tokenizer *tok, int32_t left,
                                                              int32_t right) {
    uint64_t key = muse_tok_merge_key(left, right);
    uint64_t i = muse_tok_hash_pair(key) & tok->merge_mask;
    for (;;) {
        const struct muse_tok_merge *m = &tok->merges[i];
        if (m->key == key) return m;
        if (!m->key) return NULL;
        i = (i + 1) & tok->merge_mask;
    }
}

/* Symbol id of exactly these bytes, or -1. */
int32_t muse_tok_find_sym(const struct muse_tokenizer *tok, const uint8_t *bytes, size_t len);

/* ---- pre-tokenizer (tokenizer_pretok.c) ---- */

/* Compile the split regex of tok->pretok into tok->re (JIT when available). */
muse_status muse_tok_pretok_compile(struct muse_tokenizer *tok, struct muse_error *err);

/* Called for each piece [start, end) of the text, in order. Returns MUSE_OK to continue. */
typedef muse_status (*muse_tok_piece_fn)(void *ctx, const uint8_t *text, size_t start, size_t end);

/*
 * Split text[0..len) with the pre-tokenizer and call fn for every piece (matches and the
 * unmatched stretches between them, which contain only invalid UTF-8). md is per-call scratch
 * from pcre2_match_data_create_from_pattern.
 */
muse_status muse_tok_pretok_split(const struct muse_tokenizer *tok, pcre2_match_data *md, const uint8_t *text,
                                  size_t len, muse_tok_piece_fn fn, void *ctx, struct muse_error *err);
