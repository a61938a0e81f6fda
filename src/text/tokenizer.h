/*
 * tokenizer.h - byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`) with the llama4
 * (GPT-4o / o200k) pre-tokenizer, exact to tiktoken, plus decoding and a streaming detokenizer.
 *
 * Pipeline of muse_tokenizer_encode (see docs/tokenizer.md and spec/tokenizer-and-chat.md §2):
 *   1. special-token partition (only with MUSE_TOKENIZE_PARSE_SPECIAL, plus USER_DEFINED tokens
 *      from the file, which are always matched): longest token text first, exact bytes;
 *   2. pre-tokenizer: the pre-type's split regex run by PCRE2 (UTF + UCP, JIT) with true Unicode
 *      properties; bytes that are not valid UTF-8 are never matched and form their own pieces;
 *   3. byte-level BPE per piece with the GGUF merge ranks (lowest rank first, leftmost on ties);
 *   4. optional BOS (MUSE_TOKENIZE_ADD_BOS) in front.
 *
 * Token ids are int32_t in [0, n_vocab). A muse_tokenizer is immutable after init: every
 * function taking a `const struct muse_tokenizer *` is safe to call from many threads at once
 * (encode allocates its own per-call scratch). A muse_detok is one stream: one thread at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"

struct muse_gguf;
struct muse_tokenizer;

/* Token types, as stored in `tokenizer.ggml.token_type` (llama.cpp's llama_token_type). */
enum muse_token_type {
    MUSE_TOKEN_TYPE_UNDEFINED    = 0,
    MUSE_TOKEN_TYPE_NORMAL       = 1,
    MUSE_TOKEN_TYPE_UNKNOWN      = 2,
    MUSE_TOKEN_TYPE_CONTROL      = 3,
    MUSE_TOKEN_TYPE_USER_DEFINED = 4,
    MUSE_TOKEN_TYPE_UNUSED       = 5,
    MUSE_TOKEN_TYPE_BYTE         = 6,
    MUSE_TOKEN_TYPE_COUNT        = 7
};

/* Pre-tokenizer split patterns (`tokenizer.ggml.pre`). */
enum muse_pretok {
    MUSE_PRETOK_LLAMA4 = 0, /* "llama4", "gpt-4o": the o200k pattern */
    MUSE_PRETOK_LLAMA3 = 1, /* "llama-bpe", "llama3": the cl100k-style Llama-3 pattern */
    MUSE_PRETOK_GPT2   = 2, /* "gpt2": the original GPT-2 pattern */
    MUSE_PRETOK_COUNT  = 3
};

/*
 * The vocabulary as plain arrays (what the GGUF holds). Nothing here is retained by
 * muse_tokenizer_init: it copies what it needs, so the arrays may be freed afterwards.
 * Strings are byte strings with explicit lengths (they need not be NUL-terminated).
 */
struct muse_tokenizer_vocab {
    int32_t n_tokens;
    const char *const *tokens;      /* [n_tokens] token texts, NORMAL ones in GPT-2 byte-to-unicode form */
    const uint32_t *token_lens;     /* [n_tokens] byte lengths */
    const int32_t *token_types;     /* [n_tokens] enum muse_token_type; NULL = all NORMAL */
    int64_t n_merges;
    const char *const *merges;      /* [n_merges] "LEFT RIGHT" in rank order (index = rank) */
    const uint32_t *merge_lens;     /* [n_merges] byte lengths */
    enum muse_pretok pretok;
    int32_t bos_id, eos_id, eot_id, eom_id; /* -1 = none */
    bool add_bos;
};

/*
 * Map a `tokenizer.ggml.pre` value (length len) to a pre-tokenizer. Returns MUSE_OK or
 * MUSE_ERR_UNSUPPORTED with a message naming the value and the supported ones.
 */
muse_status muse_pretok_from_name(const char *name, size_t len, enum muse_pretok *out, struct muse_error *err);

/*
 * Build a tokenizer from plain arrays. On success *out owns a new tokenizer (free with
 * muse_tokenizer_free). Errors: MUSE_ERR_INVALID_ARG (bad counts, ids out of range),
 * MUSE_ERR_FORMAT (a merge without a space), MUSE_ERR_UNSUPPORTED (PCRE2 without Unicode
 * support), MUSE_ERR_NOMEM. Ids equal to -1 mean "absent"; eot/eom default to the tokens whose
 * text is `<|eot|>` / `<|eom|>` when absent. Thread-safety: none needed (builds a new object).
 */
muse_status muse_tokenizer_init(const struct muse_tokenizer_vocab *vocab, struct muse_tokenizer **out,
                                struct muse_error *err);

/*
 * Build a tokenizer from a parsed GGUF (`tokenizer.ggml.*` keys). Requires model "gpt2" and a
 * supported pre value (else MUSE_ERR_UNSUPPORTED naming the value); tokens, merges and, when
 * present, token_type, bos/eos/eot/eom ids and add_bos_token. The gguf may be freed afterwards.
 */
muse_status muse_tokenizer_init_from_gguf(const struct muse_gguf *gguf, struct muse_tokenizer **out,
                                          struct muse_error *err);

/* Free a tokenizer (NULL is fine). No muse_detok made from it may be used afterwards. */
void muse_tokenizer_free(struct muse_tokenizer *tok);

/* ---- encode ------------------------------------------------------------------------------ */

enum muse_tokenize_flags {
    MUSE_TOKENIZE_ADD_BOS       = 1 << 0, /* prepend the BOS id (if the vocab has one) */
    MUSE_TOKENIZE_PARSE_SPECIAL = 1 << 1, /* match CONTROL token texts (`<|eot|>`, `<|start|>`, ...) in the text */
};

/*
 * Tokenize `len` bytes at `text` (any bytes: NULs and invalid UTF-8 are fine) into `out`
 * (capacity ids). *n_out receives the number of ids the text needs. If that exceeds capacity,
 * nothing beyond capacity is written and MUSE_ERR_INVALID_ARG is returned with a message
 * "output buffer too small (need N ids)"; call again with a larger buffer (out may be NULL when
 * capacity is 0, to ask for the size). Other errors: MUSE_ERR_NOMEM, MUSE_ERR_INVALID_ARG (a
 * single pre-tokenizer piece over 2 GiB), MUSE_ERR_INTERNAL (a PCRE2 match failure).
 * Thread-safe: concurrent calls on one tokenizer are fine.
 */
muse_status muse_tokenizer_encode(const struct muse_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                  int32_t *out, size_t capacity, size_t *n_out, struct muse_error *err);

/* Like muse_tokenizer_encode, but *ids is a new malloc'd array of *n_ids ids (caller frees). */
muse_status muse_tokenizer_encode_alloc(const struct muse_tokenizer *tok, const char *text, size_t len,
                                        unsigned flags, int32_t **ids, size_t *n_ids, struct muse_error *err);

/* The file's `tokenizer.ggml.add_bos_token`: whether a prompt should be encoded with
 * MUSE_TOKENIZE_ADD_BOS (encode itself adds BOS only when the flag is given). */
bool muse_tokenizer_add_bos(const struct muse_tokenizer *tok);

/* ---- vocabulary ---------------------------------------------------------------------------- */

int32_t muse_tokenizer_n_vocab(const struct muse_tokenizer *tok);
int32_t muse_tokenizer_bos(const struct muse_tokenizer *tok); /* -1 when absent */
int32_t muse_tokenizer_eos(const struct muse_tokenizer *tok); /* -1 when absent */
int32_t muse_tokenizer_eot(const struct muse_tokenizer *tok); /* -1 when absent */
int32_t muse_tokenizer_eom(const struct muse_tokenizer *tok); /* -1 when absent */
enum muse_pretok muse_tokenizer_pretok(const struct muse_tokenizer *tok);

/* The type of `id` (MUSE_TOKEN_TYPE_UNDEFINED for an id out of range). */
enum muse_token_type muse_tokenizer_token_type(const struct muse_tokenizer *tok, int32_t id);
/* CONTROL tokens: BOS/EOS/EOT/EOM and the other `<|...|>` markers of the file. */
bool muse_tokenizer_is_control(const struct muse_tokenizer *tok, int32_t id);
/* End of generation: EOS or EOT (never EOM; spec §2.3). */
bool muse_tokenizer_is_eog(const struct muse_tokenizer *tok, int32_t id);

/*
 * The token's text as stored in the vocabulary (NORMAL tokens in byte-to-unicode form, e.g.
 * "Ġthe"); NUL-terminated, owned by the tokenizer. *len (may be NULL) gets its length.
 * NULL for an id out of range.
 */
const char *muse_tokenizer_token_text(const struct muse_tokenizer *tok, int32_t id, size_t *len);

/*
 * The bytes the token stands for in decoded text (" the"; for CONTROL / USER_DEFINED tokens
 * their text; for UNUSED tokens nothing). Not NUL-terminated; owned by the tokenizer.
 * NULL for an id out of range.
 */
const char *muse_tokenizer_token_bytes(const struct muse_tokenizer *tok, int32_t id, size_t *len);

/* The id of the token whose text is exactly text[0..len) (e.g. "<|start|>"), or -1. */
int32_t muse_tokenizer_find(const struct muse_tokenizer *tok, const char *text, size_t len);

/* ---- decode ---------------------------------------------------------------------------------- */

enum muse_decode_flags {
    /* Render CONTROL tokens (`<|eot|>`, BOS, ...) as their text. Without it they produce nothing,
     * except the chat markers `<|start|>` and `<|message|>` (and `<|channel|>`, `<|constrain|>`)
     * which are always rendered, as in llama.cpp (spec §2.3). */
    MUSE_DECODE_SPECIAL = 1 << 0,
};

/*
 * Decode ids to bytes: byte-level inverse of encode, so that decode(encode(x)) == x for any
 * bytes x (without special tokens). Output is the raw bytes (may be invalid UTF-8 if the ids
 * split a character; use muse_detok for text output). Capacity/n_out as in encode (in bytes).
 * Errors: MUSE_ERR_INVALID_ARG (an id out of range, or the buffer too small).
 */
muse_status muse_tokenizer_decode(const struct muse_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                  unsigned flags, char *out, size_t capacity, size_t *n_out, struct muse_error *err);

/* Like muse_tokenizer_decode into a new malloc'd, NUL-terminated buffer (*len excludes the NUL). */
muse_status muse_tokenizer_decode_alloc(const struct muse_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                        unsigned flags, char **text, size_t *len, struct muse_error *err);

/*
 * Streaming detokenizer: push ids one at a time as they are generated; each push returns the
 * newly completed text. It never returns part of a UTF-8 character: an incomplete sequence at
 * the end is held back until the next token completes it. Bytes that cannot become valid UTF-8
 * are returned as U+FFFD (one per maximal invalid subsequence, like Python's "replace"), so the
 * output is always valid UTF-8. muse_detok_flush returns what is held back (as U+FFFD).
 */
struct muse_detok;

/* New stream over `tok` (which must outlive it) with muse_decode_flags. NULL on NOMEM. */
struct muse_detok *muse_detok_init(const struct muse_tokenizer *tok, unsigned flags);
void muse_detok_free(struct muse_detok *d);
/* Forget held-back bytes (start a new stream). */
void muse_detok_reset(struct muse_detok *d);

/*
 * Push one id. *text and *len receive the completed text (possibly empty), valid until the next
 * call on d. Errors: MUSE_ERR_INVALID_ARG (id out of range; the stream is unchanged), NOMEM.
 */
muse_status muse_detok_push(struct muse_detok *d, int32_t id, const char **text, size_t *len);

/* End of stream: the held-back bytes as text (U+FFFD for an incomplete character); resets d. */
muse_status muse_detok_flush(struct muse_detok *d, const char **text, size_t *len);
