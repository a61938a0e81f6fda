/*
 * grammar.h - constrained decoding: a GBNF grammar (text/gbnf.h) run as llama.cpp runs it, as a
 * set of pushdown stacks advanced one code point at a time, and the per-token mask it implies.
 *
 * Three objects:
 *   muse_grammar          the compiled rules (character classes as ASCII bitmaps + ranges);
 *                         immutable, shareable across threads;
 *   muse_grammar_vocab    the vocabulary's token pieces as a byte trie, plus which tokens end
 *                         generation; immutable, shareable; build once per tokenizer;
 *   muse_grammar_matcher  one sequence's state (the stack set and a partial UTF-8 character) with
 *                         its caches; one thread at a time.
 *
 * Semantics are llama.cpp's (src/llama-grammar.cpp at 0c1e570): a token is allowed when its
 * piece, decoded as UTF-8 from the pending partial character, can be consumed by some stack (a
 * piece may end inside a character when the grammar can continue it); end-of-generation tokens
 * are allowed exactly when some stack is empty (the grammar can end) and leave the state as is;
 * <[ID]> elements match the whole token at a token boundary; tokens with an empty piece (or one
 * starting with NUL) are never allowed; pieces are read up to their first NUL.
 *
 * Speed: states (stack sets) are interned, so a transition on a code point is a table lookup
 * after its first use; the mask walks the trie once per state with those transitions, pruning a
 * subtree as soon as its prefix is refused, and is cached per state. See docs/perf.md.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"
#include "text/gbnf.h"

struct muse_tokenizer;
struct muse_grammar;
struct muse_grammar_vocab;
struct muse_grammar_matcher;

/* ---- grammar ----------------------------------------------------------------------------- */

/* Compile parsed rules (copied; gbnf may be freed afterwards). Errors: NOMEM. */
muse_status muse_grammar_create(const struct muse_gbnf *gbnf, struct muse_grammar **out, struct muse_error *err);

/*
 * Parse GBNF text (muse_gbnf_parse: root NULL = "root"; vocab may be NULL, else <TEXT> tokens
 * are looked up in it) and compile it. Errors: those of muse_gbnf_parse (FORMAT with the line
 * and column) and NOMEM.
 */
muse_status muse_grammar_from_text(const char *text, size_t len, const char *root, const struct muse_tokenizer *vocab,
                                   struct muse_grammar **out, struct muse_error *err);

void muse_grammar_free(struct muse_grammar *g);

/* ---- vocabulary ---------------------------------------------------------------------------- */

/* The bytes of token id (*len of them; NULL or 0 = an empty piece). Called only during create. */
typedef const char *(*muse_grammar_piece_fn)(void *user, int32_t id, size_t *len);
/* Whether token id ends generation (allowed only where the grammar can end). */
typedef bool (*muse_grammar_eog_fn)(void *user, int32_t id);

/*
 * Build the trie of n_vocab pieces (copied). Errors: INVALID_ARG (n_vocab < 1), NOMEM.
 * The 202K-token o200k vocabulary takes about 100 ms and 20 MB.
 */
muse_status muse_grammar_vocab_create(int32_t n_vocab, muse_grammar_piece_fn piece, muse_grammar_eog_fn is_eog, void *user,
                                      struct muse_grammar_vocab **out, struct muse_error *err);

/* The same over a tokenizer: pieces as muse_tokenizer_token_bytes, end of generation as
 * muse_tokenizer_is_eog (EOS, EOT). The tokenizer may be freed afterwards. */
muse_status muse_grammar_vocab_from_tokenizer(const struct muse_tokenizer *tok, struct muse_grammar_vocab **out,
                                              struct muse_error *err);

void muse_grammar_vocab_free(struct muse_grammar_vocab *v);
int32_t muse_grammar_vocab_n(const struct muse_grammar_vocab *v);

/* ---- matcher ------------------------------------------------------------------------------- */

/*
 * A new matcher at the grammar's start. g and v are borrowed and must outlive it.
 * Errors: NOMEM, UNSUPPORTED (the start state is too large, see below).
 */
muse_status muse_grammar_matcher_create(const struct muse_grammar *g, const struct muse_grammar_vocab *v,
                                        struct muse_grammar_matcher **out, struct muse_error *err);
void muse_grammar_matcher_free(struct muse_grammar_matcher *m);

/* Back to the start state (keeps the caches). */
void muse_grammar_matcher_reset(struct muse_grammar_matcher *m);

/* Whether the text so far is a complete match (end-of-generation tokens are allowed). */
bool muse_grammar_matcher_can_end(const struct muse_grammar_matcher *m);

/*
 * Whether the grammar allows token id next (*ok). Cheap: walks only that token's bytes.
 * Errors (matcher unchanged): INVALID_ARG (id out of range), NOMEM, UNSUPPORTED (the grammar's
 * state space outgrew the matcher's limits: a pathological grammar).
 */
muse_status muse_grammar_matcher_allows(struct muse_grammar_matcher *m, int32_t id, bool *ok, struct muse_error *err);

/*
 * The allowed tokens of the current state as a bitset: bit (id & 31) of (*bits)[id >> 5]; owned
 * by the matcher, valid until its next call. Cached per state. *n_allowed (may be NULL) gets
 * the count. Errors as muse_grammar_matcher_allows.
 */
muse_status muse_grammar_matcher_mask(struct muse_grammar_matcher *m, const uint32_t **bits, int32_t *n_allowed,
                                      struct muse_error *err);

/* Whether the mask of the current state is already cached (so muse_grammar_matcher_mask is cheap). */
bool muse_grammar_matcher_mask_cached(const struct muse_grammar_matcher *m);

/*
 * Advance past token id. Errors (matcher unchanged): INVALID_ARG when the grammar does not allow
 * it (or id is out of range), NOMEM, UNSUPPORTED.
 */
muse_status muse_grammar_matcher_accept(struct muse_grammar_matcher *m, int32_t id, struct muse_error *err);

/*
 * Advance past text as if it were one token's piece (llama.cpp's llama_grammar_accept_str): for
 * tests, and to feed text the prompt already holds. Errors as accept (INVALID_ARG: refused).
 */
muse_status muse_grammar_matcher_accept_text(struct muse_grammar_matcher *m, const char *text, size_t len,
                                             struct muse_error *err);

/* Counters for tests and benchmarks. */
struct muse_grammar_stats {
    uint64_t n_stacks;      /* interned stacks */
    uint64_t n_states;      /* interned stack sets */
    uint64_t n_masks;       /* masks computed by a trie walk */
    uint64_t n_mask_hits;   /* masks served from the cache */
    uint64_t n_nodes_walked;/* trie nodes visited by all walks */
    size_t bytes;           /* memory held by the caches */
};
void muse_grammar_matcher_stats(const struct muse_grammar_matcher *m, struct muse_grammar_stats *out);
