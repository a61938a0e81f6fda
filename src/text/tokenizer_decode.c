/*
 * tokenizer_decode.c - ids back to bytes (muse_tokenizer_decode) and the streaming detokenizer
 * that only ever hands out whole, valid UTF-8 characters (muse_detok).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "text/tokenizer_impl.h"

/* The bytes `id` contributes to decoded text under `flags` (len 0 = nothing). id is in range. */
static const uint8_t *piece(const struct muse_tokenizer *tok, int32_t id, unsigned flags, size_t *len) {
    uint8_t t = tok->types[id];
    *len = 0;
    if (t == MUSE_TOKEN_TYPE_UNUSED) return NULL;
    if ((t == MUSE_TOKEN_TYPE_CONTROL || t == MUSE_TOKEN_TYPE_UNKNOWN) && !(flags & MUSE_DECODE_SPECIAL) &&
        !tok->always_render[id])
        return NULL;
    *len = (size_t)(tok->sym_off[id + 1] - tok->sym_off[id]);
    return tok->sym_blob + tok->sym_off[id];
}

muse_status muse_tokenizer_decode(const struct muse_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                  unsigned flags, char *out, size_t capacity, size_t *n_out, struct muse_error *err) {
    size_t n = 0;
    if (n_out) *n_out = 0;
    if (!out) capacity = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "detokenize: token id %d out of range (n_vocab %d)",
                                  ids[i], tok->n_vocab);
        size_t len;
        const uint8_t *p = piece(tok, ids[i], flags, &len);
        if (len && n < capacity) memcpy(out + n, p, len <= capacity - n ? len : capacity - n);
        n += len;
    }
    if (n_out) *n_out = n;
    if (n > capacity)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "detokenize: output buffer too small (need %zu bytes, have %zu)",
                              n, capacity);
    return MUSE_OK;
}

muse_status muse_tokenizer_decode_alloc(const struct muse_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                        unsigned flags, char **text, size_t *len, struct muse_error *err) {
    size_t n = 0;
    *text = NULL;
    *len = 0;
    muse_status st = muse_tokenizer_decode(tok, ids, n_ids, flags, NULL, 0, &n, err);
    if (st != MUSE_OK && n == 0) return st; /* a bad id */
    char *buf = malloc(n + 1);
    if (!buf) return muse_error_set(err, MUSE_ERR_NOMEM, "detokenize: out of memory");
    st = muse_tokenizer_decode(tok, ids, n_ids, flags, buf, n, &n, err);
    if (st != MUSE_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return MUSE_OK;
}

// ---- streaming detokenizer --------------------------------------------------------------------

struct muse_detok {
    const struct muse_tokenizer *tok;
    unsigned flags;
    uint8_t held[4];    /* an incomplete character from earlier pushes */
    size_t n_held;
    uint8_t *buf;       /* output of the last call */
    size_t cap;
};

struct muse_detok *muse_detok_init(const struct muse_tokenizer *tok, unsigned flags) {
    struct muse_detok *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->tok = tok;
    d->flags = flags;
    return d;
}

void muse_detok_free(struct muse_detok *d) {
    if (!d) return;
    free(d->buf);
    free(d);
}

void muse_detok_reset(struct muse_detok *d) { d->n_held = 0; }

static const uint8_t replacement[3] = {0xef, 0xbf, 0xbd}; /* U+FFFD */

/*
 * Append the valid text of held + p[0..n) to d->buf (invalid subparts as U+FFFD); an incomplete
 * character at the end is kept in d->held unless `final`.
 */
static muse_status feed(struct muse_detok *d, const uint8_t *p, size_t n, bool final, size_t *out_len) {
    size_t total = d->n_held + n;
    /* worst case: every byte becomes a 3-byte U+FFFD */
    if (total * 3 + 1 > d->cap) {
        size_t cap = total * 3 + 64;
        uint8_t *b = realloc(d->buf, cap);
        if (!b) return MUSE_ERR_NOMEM;
        d->buf = b;
        d->cap = cap;
    }
    /* held bytes are at most 3: join them with the start of p in a small window when needed */
    uint8_t win[8];
    size_t o = 0, i = 0;
    while (i < total) {
        const uint8_t *s;
        size_t avail;
        if (i < d->n_held) {
            size_t k = 0;
            for (size_t j = i; j < d->n_held && k < 4; j++) win[k++] = d->held[j];
            for (size_t j = 0; j < n && k < 4; j++) win[k++] = p[j];
            s = win;
            avail = k;
        } else {
            s = p + (i - d->n_held);
            avail = total - i;
        }
        int r = muse_utf8_seq(s, avail);
        if (r > 0) {
            memcpy(d->buf + o, s, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
        } else if (r < 0) {
            memcpy(d->buf + o, replacement, 3);
            o += 3;
            i += (size_t)-r;
        } else if (final) {
            memcpy(d->buf + o, replacement, 3);
            o += 3;
            i = total;
        } else {
            uint8_t keep[4];
            size_t k = 0;
            for (size_t j = 0; j < avail && k < 4; j++) keep[k++] = s[j];
            memcpy(d->held, keep, k);
            d->n_held = k;
            *out_len = o;
            return MUSE_OK;
        }
    }
    d->n_held = 0;
    *out_len = o;
    return MUSE_OK;
}

muse_status muse_detok_push(struct muse_detok *d, int32_t id, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (id < 0 || id >= d->tok->n_vocab) return MUSE_ERR_INVALID_ARG;
    size_t n;
    const uint8_t *p = piece(d->tok, id, d->flags, &n);
    size_t o;
    muse_status st = feed(d, p ? p : (const uint8_t *)"", n, false, &o);
    if (st != MUSE_OK) return st;
    *text = (const char *)d->buf;
    *len = o;
    return MUSE_OK;
}

muse_status muse_detok_flush(struct muse_detok *d, const char **text, size_t *len) {
    size_t o;
    *text = "";
    *len = 0;
    muse_status st = feed(d, (const uint8_t *)"", 0, true, &o);
    if (st != MUSE_OK) return st;
    *text = (const char *)d->buf;
    *len = o;
    return MUSE_OK;
}
