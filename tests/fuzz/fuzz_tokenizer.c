/*
 * fuzz_tokenizer.c - libFuzzer target: tokenize arbitrary bytes and check the round trips.
 *   input[0] bit 0: PARSE_SPECIAL; bit 1: use the golden o200k vocabulary
 *   ($MUSE_SHARED/golden/tokenizer/o200k-muse-vocab.gguf, when it loads) instead of the small
 *   hand-made one; the rest is the text.
 *   - encode never fails on any bytes; every id is in range;
 *   - decode(encode(x)) == x (with MUSE_DECODE_SPECIAL when specials were parsed);
 *   - the streaming detokenizer emits valid UTF-8, and exactly x when x is valid UTF-8.
 * The vocabulary is small and hand-made (bytes, a few merges incl. multi-byte characters,
 * CONTROL/USER_DEFINED specials), so each run is fast and every code path is reachable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "gguf/gguf.h"

static struct muse_tokenizer *small_tok, *big_tok;
static int loaded;

static void load_big(void) {
    const char *shared = getenv("MUSE_SHARED") ? getenv("MUSE_SHARED") : "../shared";
    char path[1024];
    snprintf(path, sizeof(path), "%s/golden/tokenizer/o200k-muse-vocab.gguf", shared);
    struct muse_gguf *g = NULL;
    if (muse_gguf_open(path, &g, NULL) == MUSE_OK) muse_tokenizer_init_from_gguf(g, &big_tok, NULL);
    muse_gguf_free(g);
}

static unsigned byte_cp(unsigned b) {
    unsigned n = 0;
    for (unsigned x = 0; x < 256; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
        if (x == b) return printable ? x : 256 + n;
        if (!printable) n++;
    }
    return 0;
}

/* Byte-to-unicode form of raw bytes into out; returns the length. */
static uint32_t enc(const char *raw, size_t n, char *out) {
    char *o = out;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = byte_cp((uint8_t)raw[i]);
        if (cp < 0x80) *o++ = (char)cp;
        else {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    return (uint32_t)(o - out);
}

static void build(void) {
    static const char *const pairs[][2] = {
        {"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {"in", "g"}, {"e", "r"}, {" ", "a"},
        {"\xc3", "\xa9"}, {"\xe2", "\x82"}, {"\xe2\x82", "\xac"}, {"a", "a"}, {"aa", "aa"}, {"1", "2"},
        {"12", "3"}, {" ", " "}, {"\n", "\n"}, {"'", "s"}, {"x", "y"}, {"xy", "z"},
    };
    enum { NP = sizeof(pairs) / sizeof(pairs[0]) };
    static char tokbuf[256 + NP + 3][64];
    static char mbuf[NP][64];
    static const char *tokens[256 + NP + 3], *merges[NP];
    static uint32_t tlens[256 + NP + 3], mlens[NP];
    static int32_t types[256 + NP + 3];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        tlens[n] = enc(&c, 1, tokbuf[n]);
        types[n++] = MUSE_TOKEN_TYPE_NORMAL;
    }
    for (int i = 0; i < NP; i++) {
        char raw[64];
        size_t l = strlen(pairs[i][0]), r = strlen(pairs[i][1]);
        memcpy(raw, pairs[i][0], l);
        memcpy(raw + l, pairs[i][1], r);
        /* "xy" is deliberately not a token: a merge through a non-token intermediate */
        if (strcmp(pairs[i][0], "x") != 0) {
            tlens[n] = enc(raw, l + r, tokbuf[n]);
            types[n++] = MUSE_TOKEN_TYPE_NORMAL;
        }
        uint32_t a = enc(pairs[i][0], l, mbuf[i]);
        mbuf[i][a] = ' ';
        mlens[i] = a + 1 + enc(pairs[i][1], r, mbuf[i] + a + 1);
    }
    static const char *const specials[] = {"<|eot|>", "<|start|>", "zork"};
    for (int i = 0; i < 3; i++) {
        tlens[n] = (uint32_t)strlen(specials[i]);
        memcpy(tokbuf[n], specials[i], tlens[n]);
        types[n++] = i < 2 ? MUSE_TOKEN_TYPE_CONTROL : MUSE_TOKEN_TYPE_USER_DEFINED;
    }
    for (int i = 0; i < n; i++) tokens[i] = tokbuf[i];
    for (int i = 0; i < NP; i++) merges[i] = mbuf[i];
    struct muse_tokenizer_vocab v = {
        .n_tokens = n, .tokens = tokens, .token_lens = tlens, .token_types = types, .n_merges = NP,
        .merges = merges, .merge_lens = mlens, .pretok = MUSE_PRETOK_LLAMA4, .bos_id = -1, .eos_id = -1,
        .eot_id = -1, .eom_id = -1};
    if (muse_tokenizer_init(&v, &small_tok, NULL) != MUSE_OK) abort();
}

static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], need, cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) need = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) need = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) need = 3, cp = c & 0x07;
        else return 0;
        for (unsigned k = 1; k <= need; k++) {
            if (i + k >= n || (s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += need + 1;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        build();
        load_big();
        loaded = 1;
    }
    if (size == 0) return 0;
    const struct muse_tokenizer *tok = data[0] & 2 && big_tok ? big_tok : small_tok;
    unsigned flags = data[0] & 1 ? MUSE_TOKENIZE_PARSE_SPECIAL : 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (muse_tokenizer_encode_alloc(tok, text, len, flags, &ids, &n, NULL) != MUSE_OK) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= muse_tokenizer_n_vocab(tok)) abort();
    unsigned dflags = flags ? MUSE_DECODE_SPECIAL : 0;
    char *back = NULL;
    size_t blen = 0;
    if (muse_tokenizer_decode_alloc(tok, ids, n, dflags, &back, &blen, NULL) != MUSE_OK) abort();
    if (blen != len || memcmp(back, text, len) != 0) abort();

    struct muse_detok *d = muse_detok_init(tok, dflags);
    if (!d) abort();
    char *stream = malloc(len * 3 + 16);
    size_t sn = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *t;
        size_t tl;
        if (i < n ? muse_detok_push(d, ids[i], &t, &tl) : muse_detok_flush(d, &t, &tl)) abort();
        memcpy(stream + sn, t, tl);
        sn += tl;
    }
    if (!valid_utf8((const uint8_t *)stream, sn)) abort();
    if (valid_utf8(data + 1, len) && (sn != len || memcmp(stream, text, len) != 0)) abort();
    muse_detok_free(d);
    free(stream);
    free(back);
    free(ids);
    return 0;
}
