/*
 * tokenizer_pretok.c - the pre-tokenizer: split text into pieces with the pre-type's regex, run
 * by PCRE2 with true Unicode properties (UTF + UCP; JIT when the library has it).
 *
 * Why PCRE2 and not a collapsed-string approximation as in llama.cpp: tiktoken (the reference
 * the model was trained with) applies the pattern with Unicode categories; llama.cpp's
 * approximation splits words at combining marks and ignores case inside non-ASCII words (see
 * docs/tokenizer.md). PCRE2 and tiktoken's fancy-regex are both backtracking, leftmost-first
 * engines, so the alternation behaves the same.
 *
 * `\s` is spelled out as the Unicode White_Space property (what Rust's regex, under tiktoken,
 * uses): PCRE2's UCP `\s` is a different set in some versions (U+0085, U+180E).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer_impl.h"
#include "text/tokenizer_unicode.h"

/* Unicode White_Space, as the inside of a character class. */
#define WS_CLASS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/*
 * Class contents. The system PCRE2 (10.42) has Unicode 14 tables; tiktoken's Rust regex has
 * Unicode 15, so the letters, marks and digits added in 15.0 (CJK Extension H, Kawi, Nag
 * Mundari, Kaktovik numerals, ...) are appended from the generated tokenizer_unicode.h.
 */
#define CL "\\p{L}" MUSE_TOK_EXTRA_L
#define CN "\\p{N}" MUSE_TOK_EXTRA_N
#define CUP "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}" MUSE_TOK_EXTRA_UPPER
#define CLO "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}" MUSE_TOK_EXTRA_LOWER

/* The patterns as published (tiktoken / HF tokenizer.json), `\s`/`\S` expanded at compile time. */
static const char *const patterns[MUSE_PRETOK_COUNT] = {
    [MUSE_PRETOK_LLAMA4] =
        "[^\\r\\n" CL CN "]?[" CUP "]*[" CLO "]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|[^\\r\\n" CL CN "]?[" CUP "]+[" CLO "]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|[" CN "]{1,3}"
        "| ?[^\\s" CL CN "]+[\\r\\n/]*"
        "|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)"
        "|\\s+",
    [MUSE_PRETOK_LLAMA3] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
        "|[^\\r\\n" CL CN "]?[" CL "]+"
        "|[" CN "]{1,3}"
        "| ?[^\\s" CL CN "]+[\\r\\n]*"
        "|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)"
        "|\\s+",
    [MUSE_PRETOK_GPT2] =
        "'s|'t|'re|'ve|'m|'ll|'d"
        "| ?[" CL "]+"
        "| ?[" CN "]+"
        "| ?[^\\s" CL CN "]+"
        "|\\s+(?!\\S)"
        "|\\s+",
};

/* Expand `\s` / `\S` (inside or outside a class) into explicit White_Space classes. */
static char *expand_pattern(const char *p) {
    size_t cap = strlen(p) * 8 + 1;
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; p[i]; i++) {
        if (p[i] == '\\' && (p[i + 1] == 's' || p[i + 1] == 'S')) {
            const char *s = in_class ? WS_CLASS : p[i + 1] == 's' ? "[" WS_CLASS "]" : "[^" WS_CLASS "]";
            size_t n = strlen(s);
            memcpy(o, s, n);
            o += n;
            i++;
            continue;
        }
        if (p[i] == '\\' && p[i + 1]) {
            *o++ = p[i++];
            *o++ = p[i];
            continue;
        }
        if (p[i] == '[' && !in_class) in_class = true;
        else if (p[i] == ']' && in_class) in_class = false;
        *o++ = p[i];
    }
    *o = '\0';
    return out;
}

muse_status muse_tok_pretok_compile(struct muse_tokenizer *tok, struct muse_error *err) {
    uint32_t unicode = 0;
    if (pcre2_config(PCRE2_CONFIG_UNICODE, &unicode) < 0 || !unicode)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tokenizer: PCRE2 was built without Unicode support");
    char *pat = expand_pattern(patterns[tok->pretok]);
    if (!pat) return muse_error_set(err, MUSE_ERR_NOMEM, "tokenizer: out of memory");
    int code;
    PCRE2_SIZE off;
    tok->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                            &code, &off, NULL);
    free(pat);
    if (!tok->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return muse_error_set(err, MUSE_ERR_INTERNAL, "tokenizer: split regex does not compile at %zu: %s",
                              (size_t)off, (const char *)msg);
    }
    /* Without JIT the interpreter gives the same pieces, only slower. */
    tok->jit = pcre2_jit_compile(tok->re, PCRE2_JIT_COMPLETE) == 0;
    return MUSE_OK;
}

/*
 * Resources for long matches, created only when the default ones run out (per call, so that
 * concurrent encodes share nothing). The default JIT stack (32 KiB on the machine stack) is
 * exhausted by a whitespace run of some hundred KB (`\s+(?!\S)` backtracks over it).
 */
struct big_match {
    pcre2_jit_stack *jit_stack;
    pcre2_match_context *mctx;
};

/* One match from `start`. On a resource limit: JIT with a 1 GiB (virtual) stack, then the
 * interpreter without match/depth limits and a 4 GiB heap limit. */
static int match_at(const struct muse_tokenizer *tok, pcre2_match_data *md, const uint8_t *text, size_t len,
                    size_t start, struct big_match *big) {
    int rc = pcre2_match(tok->re, (PCRE2_SPTR)text, len, start, 0, md, big->mctx);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT && rc != PCRE2_ERROR_MATCHLIMIT && rc != PCRE2_ERROR_DEPTHLIMIT &&
        rc != PCRE2_ERROR_HEAPLIMIT)
        return rc;
    if (!big->mctx) {
        big->mctx = pcre2_match_context_create(NULL);
        if (!big->mctx) return PCRE2_ERROR_NOMEMORY;
        pcre2_set_match_limit(big->mctx, UINT32_MAX);
        pcre2_set_depth_limit(big->mctx, UINT32_MAX);
        pcre2_set_heap_limit(big->mctx, 4u << 20); /* KiB */
        if (tok->jit) {
            big->jit_stack = pcre2_jit_stack_create(1 << 20, (size_t)1 << 30, NULL);
            if (big->jit_stack) pcre2_jit_stack_assign(big->mctx, NULL, big->jit_stack);
        }
        rc = pcre2_match(tok->re, (PCRE2_SPTR)text, len, start, 0, md, big->mctx);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    }
    return pcre2_match(tok->re, (PCRE2_SPTR)text, len, start, PCRE2_NO_JIT, md, big->mctx);
}

muse_status muse_tok_pretok_split(const struct muse_tokenizer *tok, pcre2_match_data *md, const uint8_t *text,
                                  size_t len, muse_tok_piece_fn fn, void *ctx, struct muse_error *err) {
    struct big_match big = {0};
    muse_status st = MUSE_OK;
    size_t pos = 0, done = 0; /* done: end of the last piece handed out */
    while (pos < len) {
        int rc = match_at(tok, md, text, len, pos, &big);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            st = muse_error_set(err, rc == PCRE2_ERROR_NOMEMORY ? MUSE_ERR_NOMEM : MUSE_ERR_INTERNAL,
                                "tokenizer: regex match failed at byte %zu: %s", pos, (const char *)msg);
            goto done;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e <= s) { /* no alternative matches empty, but never loop on one */
            pos = s + 1;
            continue;
        }
        if (s > done && (st = fn(ctx, text, done, s)) != MUSE_OK) goto done; /* invalid UTF-8 stretch */
        if ((st = fn(ctx, text, s, e)) != MUSE_OK) goto done;
        done = pos = e;
    }
    if (done < len) st = fn(ctx, text, done, len);
done:
    if (big.mctx) pcre2_match_context_free(big.mctx);
    if (big.jit_stack) pcre2_jit_stack_free(big.jit_stack);
    return st;
}
