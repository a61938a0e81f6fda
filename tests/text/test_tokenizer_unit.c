/*
 * Unit tests of the tokenizer on small hand-made vocabularies (no GGUF needed): merge order,
 * special-token partition, BOS, buffer sizes, invalid UTF-8 round trips, the pre-tokenizer's
 * splits, decoding flags and the streaming detokenizer.
 */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "test.h"

// ---- a tiny vocabulary builder ----------------------------------------------------------------

#define MAX_TOK 600
struct vb {
    char *texts[MAX_TOK];
    uint32_t lens[MAX_TOK];
    int32_t types[MAX_TOK];
    int n;
    char *merges[64];
    uint32_t merge_lens[64];
    int n_merges;
};

/* GPT-2 bytes_to_unicode, written from its definition (not from muse's table). */
static unsigned byte_cp(unsigned b) {
    unsigned n = 0;
    for (unsigned x = 0; x < 256; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
        if (x == b) return printable ? x : 256 + n;
        if (!printable) n++;
    }
    return 0;
}

/* Byte-to-unicode text of raw bytes (as a GGUF stores NORMAL tokens); malloc'd. */
static char *encode_bytes(const char *raw, size_t n, uint32_t *len) {
    char *s = malloc(n * 2 + 1), *o = s;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = byte_cp((uint8_t)raw[i]);
        if (cp < 0x80) *o++ = (char)cp;
        else {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *len = (uint32_t)(o - s);
    *o = '\0';
    return s;
}

static int add_tok(struct vb *v, const char *raw, size_t n, int type) {
    if (type == MUSE_TOKEN_TYPE_NORMAL) {
        v->texts[v->n] = encode_bytes(raw, n, &v->lens[v->n]);
    } else {
        v->texts[v->n] = malloc(n + 1);
        memcpy(v->texts[v->n], raw, n);
        v->lens[v->n] = (uint32_t)n;
    }
    v->types[v->n] = type;
    return v->n++;
}

static void add_merge(struct vb *v, const char *l, const char *r) {
    uint32_t ll, rl;
    char *a = encode_bytes(l, strlen(l), &ll), *b = encode_bytes(r, strlen(r), &rl);
    char *m = malloc(ll + rl + 2);
    memcpy(m, a, ll);
    m[ll] = ' ';
    memcpy(m + ll + 1, b, rl);
    v->merges[v->n_merges] = m;
    v->merge_lens[v->n_merges++] = ll + 1 + rl;
    free(a);
    free(b);
}

static void vb_init(struct vb *v) {
    memset(v, 0, sizeof(*v));
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        add_tok(v, &c, 1, MUSE_TOKEN_TYPE_NORMAL);
    }
}

static void vb_free(struct vb *v) {
    for (int i = 0; i < v->n; i++) free(v->texts[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
}

static struct muse_tokenizer *vb_build_pre(struct vb *v, int bos, bool add_bos, enum muse_pretok pre) {
    struct muse_tokenizer_vocab voc = {
        .n_tokens = v->n, .tokens = (const char *const *)v->texts, .token_lens = v->lens, .token_types = v->types,
        .n_merges = v->n_merges, .merges = (const char *const *)v->merges, .merge_lens = v->merge_lens,
        .pretok = pre, .bos_id = bos, .eos_id = -1, .eot_id = -1, .eom_id = -1, .add_bos = add_bos};
    struct muse_tokenizer *tok = NULL;
    struct muse_error err;
    muse_status st = muse_tokenizer_init(&voc, &tok, &err);
    TEST_CONDF(st == MUSE_OK, "init: %s", err.msg);
    return tok;
}

static struct muse_tokenizer *vb_build(struct vb *v, int bos, bool add_bos) {
    return vb_build_pre(v, bos, add_bos, MUSE_PRETOK_LLAMA4);
}

/* Encode and compare with the expected ids. */
static void check_ids(const struct muse_tokenizer *tok, const char *what, const char *text, size_t len,
                      unsigned flags, const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    struct muse_error err;
    muse_status st = muse_tokenizer_encode_alloc(tok, text, len, flags, &ids, &n, &err);
    bool same = st == MUSE_OK && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof(int32_t)) == 0);
    if (!same) {
        fprintf(stderr, "  %s: got", what);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    TEST_CONDF(same, "%s", what);
    free(ids);
}
#define CHECK_IDS(tok, what, text, flags, ...) do { \
    const int32_t want_[] = {__VA_ARGS__}; \
    check_ids(tok, what, text, strlen(text), flags, want_, sizeof(want_) / sizeof(want_[0])); \
} while (0)

// ---- tests --------------------------------------------------------------------------------------

static void test_merge_order(void) {
    struct vb v;
    vb_init(&v);
    int ab = add_tok(&v, "ab", 2, MUSE_TOKEN_TYPE_NORMAL);
    int bc = add_tok(&v, "bc", 2, MUSE_TOKEN_TYPE_NORMAL);
    int aa = add_tok(&v, "aa", 2, MUSE_TOKEN_TYPE_NORMAL);
    int sp_x = add_tok(&v, " x", 2, MUSE_TOKEN_TYPE_NORMAL);
    add_merge(&v, "b", "c"); /* rank 0 wins over "a b" */
    add_merge(&v, "a", "b");
    add_merge(&v, "a", "a");
    add_merge(&v, " ", "x");
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    CHECK_IDS(tok, "lowest rank first: abc -> a bc", "abc", 0, 'a', bc);
    CHECK_IDS(tok, "abd -> ab d", "abd", 0, ab, 'd');
    CHECK_IDS(tok, "ties go leftmost: aaa -> aa a", "aaa", 0, aa, 'a');
    CHECK_IDS(tok, "aaaa -> aa aa", "aaaa", 0, aa, aa);
    CHECK_IDS(tok, "byte-encoded space merge", "a x", 0, 'a', sp_x);
    CHECK_IDS(tok, "empty text", "", 0);
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* A merge whose result is not a token: the intermediate still merges further (llama.cpp keys
 * merges by string), and a final non-token symbol falls back to its bytes. */
static void test_synthetic_symbols(void) {
    struct vb v;
    vb_init(&v);
    int xyz = add_tok(&v, "xyz", 3, MUSE_TOKEN_TYPE_NORMAL);
    add_merge(&v, "x", "y"); /* "xy" is not a token */
    add_merge(&v, "xy", "z");
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    CHECK_IDS(tok, "through a non-token intermediate", "xyz", 0, xyz);
    CHECK_IDS(tok, "non-token final symbol falls back to bytes", "xy", 0, 'x', 'y');
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* llama3 (llama-bpe) ignores merges when the whole piece is a token; llama4 does not. */
static void test_ignore_merges(void) {
    struct vb v;
    vb_init(&v);
    int ab = add_tok(&v, "ab", 2, MUSE_TOKEN_TYPE_NORMAL);
    int abc = add_tok(&v, "abc", 3, MUSE_TOKEN_TYPE_NORMAL);
    add_merge(&v, "a", "b"); /* no merge reaches "abc" */
    struct muse_tokenizer *t4 = vb_build_pre(&v, -1, false, MUSE_PRETOK_LLAMA4);
    struct muse_tokenizer *t3 = vb_build_pre(&v, -1, false, MUSE_PRETOK_LLAMA3);
    struct muse_tokenizer *t2 = vb_build_pre(&v, -1, false, MUSE_PRETOK_GPT2);
    if (t4 && t3 && t2) {
        CHECK_IDS(t4, "llama4: BPE only", "abc", 0, ab, 'c');
        CHECK_IDS(t3, "llama3: whole-piece token", "abc", 0, abc);
        CHECK_IDS(t2, "gpt2: BPE only", "abc", 0, ab, 'c');
    }
    muse_tokenizer_free(t4);
    muse_tokenizer_free(t3);
    muse_tokenizer_free(t2);
    vb_free(&v);
}

static void test_specials(void) {
    struct vb v;
    vb_init(&v);
    int bos = add_tok(&v, "<|begin_of_text|>", 17, MUSE_TOKEN_TYPE_CONTROL);
    int eot = add_tok(&v, "<|eot|>", 7, MUSE_TOKEN_TYPE_CONTROL);
    int start = add_tok(&v, "<|start|>", 9, MUSE_TOKEN_TYPE_CONTROL);
    int ab = add_tok(&v, "AB", 2, MUSE_TOKEN_TYPE_CONTROL);
    int bcd = add_tok(&v, "BCD", 3, MUSE_TOKEN_TYPE_CONTROL);
    int word = add_tok(&v, "zork", 4, MUSE_TOKEN_TYPE_USER_DEFINED);
    int unused = add_tok(&v, "[PAD1]", 6, MUSE_TOKEN_TYPE_UNUSED);
    struct muse_tokenizer *tok = vb_build(&v, bos, true);
    if (!tok) return;
    const unsigned S = MUSE_TOKENIZE_PARSE_SPECIAL;
    CHECK_IDS(tok, "special text stays text without PARSE_SPECIAL", "<|eot|>", 0, '<', '|', 'e', 'o', 't', '|', '>');
    CHECK_IDS(tok, "special with PARSE_SPECIAL", "hi<|eot|>", S, 'h', 'i', eot);
    CHECK_IDS(tok, "chat marker only with PARSE_SPECIAL", "<|start|>", 0, '<', '|', 's', 't', 'a', 'r', 't', '|', '>');
    CHECK_IDS(tok, "chat marker with PARSE_SPECIAL", "<|start|>x", S, start, 'x');
    CHECK_IDS(tok, "USER_DEFINED always matched", "a zork", 0, 'a', ' ', word);
    /* longest text first, as llama.cpp: BCD (3) is taken before AB (2) */
    CHECK_IDS(tok, "longest first", "ABCD", S, 'A', bcd);
    CHECK_IDS(tok, "both when disjoint", "ABBCD", S, ab, bcd);
    CHECK_IDS(tok, "adjacent repeats", "<|eot|><|eot|>", S, eot, eot);
    CHECK_IDS(tok, "BOS", "x", MUSE_TOKENIZE_ADD_BOS, bos, 'x');
    CHECK_IDS(tok, "BOS on empty text", "", MUSE_TOKENIZE_ADD_BOS, bos);
    CHECK_IDS(tok, "partial special is text", "<|eot|", S, '<', '|', 'e', 'o', 't', '|');
    TEST_COND("add_bos flag", muse_tokenizer_add_bos(tok));
    TEST_COND("is_control", muse_tokenizer_is_control(tok, eot) && !muse_tokenizer_is_control(tok, 'a'));
    TEST_COND("eot found by text", muse_tokenizer_eot(tok) == eot && muse_tokenizer_eom(tok) == -1);
    TEST_COND("is_eog", muse_tokenizer_is_eog(tok, eot) && !muse_tokenizer_is_eog(tok, start));
    TEST_COND("find special", muse_tokenizer_find(tok, "<|start|>", 9) == start);
    TEST_COND("find normal", muse_tokenizer_find(tok, " ", 1) == ' ');
    TEST_COND("find absent", muse_tokenizer_find(tok, "nope", 4) == -1);
    size_t len;
    const char *t = muse_tokenizer_token_text(tok, ' ', &len);
    TEST_COND("token text is byte-to-unicode form", t && len == 2 && memcmp(t, "\xc4\xa0", 2) == 0);
    t = muse_tokenizer_token_bytes(tok, ' ', &len);
    TEST_COND("token bytes are raw", t && len == 1 && t[0] == ' ');
    TEST_COND("token text out of range", muse_tokenizer_token_text(tok, v.n, NULL) == NULL);

    /* decode flags */
    int32_t ids[] = {bos, 'h', 'i', start, eot, unused, word};
    char *out;
    muse_tokenizer_decode_alloc(tok, ids, 7, 0, &out, &len, NULL);
    TEST_CONDF(out && strcmp(out, "hi<|start|>zork") == 0, "decode hides CONTROL, keeps markers: '%s'", out);
    free(out);
    muse_tokenizer_decode_alloc(tok, ids, 7, MUSE_DECODE_SPECIAL, &out, &len, NULL);
    TEST_CONDF(out && strcmp(out, "<|begin_of_text|>hi<|start|><|eot|>zork") == 0, "decode with SPECIAL: '%s'", out);
    free(out);
    int32_t bad = v.n;
    struct muse_error err;
    TEST_COND("decode rejects bad id",
              muse_tokenizer_decode_alloc(tok, &bad, 1, 0, &out, &len, &err) == MUSE_ERR_INVALID_ARG);
    muse_tokenizer_free(tok);
    vb_free(&v);
}

static void test_capacity(void) {
    struct vb v;
    vb_init(&v);
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    int32_t buf[4];
    size_t n = 0;
    struct muse_error err;
    muse_status st = muse_tokenizer_encode(tok, "hello", 5, 0, NULL, 0, &n, &err);
    TEST_COND("size query", st == MUSE_ERR_INVALID_ARG && n == 5 && strstr(err.msg, "need 5"));
    st = muse_tokenizer_encode(tok, "hello", 5, 0, buf, 4, &n, &err);
    TEST_COND("too small", st == MUSE_ERR_INVALID_ARG && n == 5 && buf[3] == 'l');
    int32_t exact[5];
    st = muse_tokenizer_encode(tok, "hello", 5, 0, exact, 5, &n, &err);
    TEST_COND("exact fits", st == MUSE_OK && n == 5 && exact[4] == 'o');
    char dec[3];
    st = muse_tokenizer_decode(tok, exact, 5, 0, dec, 3, &n, &err);
    TEST_COND("decode too small", st == MUSE_ERR_INVALID_ARG && n == 5 && memcmp(dec, "hel", 3) == 0);
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* Any bytes round-trip: invalid UTF-8 forms its own pieces, and every byte is a token. */
static void test_invalid_utf8(void) {
    struct vb v;
    vb_init(&v);
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    static const char *const texts[] = {
        "\xff", "abc\xfe\xff def", "\xc3", "\xc3(", "\xe2\x82", "\xed\xa0\x80 lone surrogate", "\xf4\x90\x80\x80",
        "caf\xc3\xa9\x80\x80", "\xc0\xaf", "x\0y\0", "\xe2\x82\xac\xe2\x82",
    };
    static const size_t lens[] = {1, 9, 1, 2, 2, 18, 4, 7, 2, 4, 5};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        int32_t *ids = NULL;
        size_t n = 0, m = 0;
        char *back = NULL;
        muse_status st = muse_tokenizer_encode_alloc(tok, texts[i], lens[i], 0, &ids, &n, NULL);
        if (st == MUSE_OK) st = muse_tokenizer_decode_alloc(tok, ids, n, 0, &back, &m, NULL);
        TEST_CONDF(st == MUSE_OK && m == lens[i] && memcmp(back, texts[i], m) == 0, "round trip of invalid text %zu", i);
        /* with only byte tokens, ids are exactly the bytes */
        bool bytes = n == lens[i];
        for (size_t j = 0; bytes && j < n; j++) bytes = ids[j] == (uint8_t)texts[i][j];
        TEST_CONDF(bytes, "byte ids for text %zu", i);
        free(ids);
        free(back);
    }
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* Collect the pieces of the llama4 split as "a|b|c". */
struct pieces {
    char buf[512];
    size_t n;
};

static muse_status collect(void *ctx, const uint8_t *text, size_t s, size_t e) {
    struct pieces *p = ctx;
    if (p->n) p->buf[p->n++] = '|';
    memcpy(p->buf + p->n, text + s, e - s);
    p->n += e - s;
    p->buf[p->n] = '\0';
    return MUSE_OK;
}

static void check_split(const struct muse_tokenizer *tok, const char *text, const char *want) {
    struct pieces p = {.n = 0};
    p.buf[0] = '\0';
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(tok->re, NULL);
    muse_status st = muse_tok_pretok_split(tok, md, (const uint8_t *)text, strlen(text), collect, &p, NULL);
    pcre2_match_data_free(md);
    TEST_CONDF(st == MUSE_OK && strcmp(p.buf, want) == 0, "split '%s': got '%s', want '%s'", text, p.buf, want);
}

static void test_pretok(void) {
    struct vb v;
    vb_init(&v);
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    check_split(tok, "Hello world", "Hello| world");
    check_split(tok, "don't", "don't");               /* the contraction stays on the word */
    check_split(tok, "DON'T", "DON'T");               /* case-insensitive contraction */
    check_split(tok, "helloWORLD", "hello|WORLD");    /* lower then upper splits */
    check_split(tok, "HELLOworld", "HELLOworld");     /* upper* lower+ is one word */
    check_split(tok, "12345", "123|45");
    check_split(tok, "  hi", " | hi");                /* \s+(?!\S) leaves the last space to the word */
    check_split(tok, "a\n\nb", "a|\n\n|b");
    check_split(tok, "x!!!\n", "x|!!!\n");
    check_split(tok, "path/to", "path|/to");
    check_split(tok, "end.  ", "end|.|  ");
    check_split(tok, "caf\xc3\xa9", "caf\xc3\xa9");   /* é is a lowercase letter */
    check_split(tok, "e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9"); /* a combining mark stays in the word */
    check_split(tok, "\xe2\x85\xab\xe2\x85\xab", "\xe2\x85\xab\xe2\x85\xab"); /* Ⅻ is Nl: a number, grouped */
    check_split(tok, "a\xc2\xa0" "b", "a|\xc2\xa0" "b"); /* NBSP is White_Space */
    check_split(tok, "a\xe2\x80\x8b" "b", "a|\xe2\x80\x8b" "b"); /* ZWSP is not: punctuation-like prefix */
    check_split(tok, "ab\xff" "cd", "ab|\xff|cd");    /* invalid byte: its own piece */
    /* Unicode 15.0 additions that PCRE2 10.42's tables lack (tokenizer_unicode.h) */
    check_split(tok, "\xe4\xb8\xad\xf0\xb1\x8d\x90", "\xe4\xb8\xad\xf0\xb1\x8d\x90"); /* 中 + U+31350 (Lo) */
    check_split(tok, "\xf0\x9d\x8b\x80\xf0\x9d\x8b\x81\xf0\x9d\x8b\x82\xf0\x9d\x8b\x83",
                "\xf0\x9d\x8b\x80\xf0\x9d\x8b\x81\xf0\x9d\x8b\x82|\xf0\x9d\x8b\x83"); /* Kaktovik digits (No) */
    check_split(tok, "ka\xe0\xb3\xb3", "ka\xe0\xb3\xb3"); /* U+0CF3 (Mc) stays in the word */
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* The llama3 and gpt2 patterns. */
static void test_other_pretoks(void) {
    struct vb v;
    vb_init(&v);
    struct muse_tokenizer *t3 = vb_build_pre(&v, -1, false, MUSE_PRETOK_LLAMA3);
    struct muse_tokenizer *t2 = vb_build_pre(&v, -1, false, MUSE_PRETOK_GPT2);
    if (t3 && t2) {
        check_split(t2, "12345", "12345");            /* gpt2: \p{N}+ */
        check_split(t3, "12345", "123|45");           /* llama3: \p{N}{1,3} */
        check_split(t2, "don't", "don|'t");           /* contractions are separate pieces */
        check_split(t3, "DON'T", "DON|'T");           /* llama3's are case-insensitive */
        check_split(t2, "DON'T", "DON|'|T");          /* gpt2's are not */
        check_split(t3, "helloWORLD", "helloWORLD");  /* no case split: \p{L}+ */
        check_split(t2, " 42x", " 42|x");
    }
    muse_tokenizer_free(t3);
    muse_tokenizer_free(t2);
    vb_free(&v);
}

static void test_detok(void) {
    struct vb v;
    vb_init(&v);
    int eot = add_tok(&v, "<|eot|>", 7, MUSE_TOKEN_TYPE_CONTROL);
    int e_acute = add_tok(&v, "\xc3\xa9", 2, MUSE_TOKEN_TYPE_NORMAL);
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    if (!tok) return;
    struct muse_detok *d = muse_detok_init(tok, 0);
    const char *t;
    size_t n;
    muse_detok_push(d, 'a', &t, &n);
    TEST_COND("ascii passes", n == 1 && t[0] == 'a');
    muse_detok_push(d, 0xe2, &t, &n);
    TEST_COND("first byte of € held", n == 0);
    muse_detok_push(d, 0x82, &t, &n);
    TEST_COND("second byte of € held", n == 0);
    muse_detok_push(d, 0xac, &t, &n);
    TEST_COND("€ completes", n == 3 && memcmp(t, "\xe2\x82\xac", 3) == 0);
    muse_detok_push(d, e_acute, &t, &n);
    TEST_COND("whole char token", n == 2 && memcmp(t, "\xc3\xa9", 2) == 0);
    muse_detok_push(d, 0xff, &t, &n);
    TEST_COND("invalid byte -> U+FFFD", n == 3 && memcmp(t, "\xef\xbf\xbd", 3) == 0);
    muse_detok_push(d, 0xc3, &t, &n);
    TEST_COND("lead byte held", n == 0);
    muse_detok_push(d, 'x', &t, &n);
    TEST_COND("broken sequence -> U+FFFD then x", n == 4 && memcmp(t, "\xef\xbf\xbdx", 4) == 0);
    muse_detok_push(d, eot, &t, &n);
    TEST_COND("control hidden", n == 0);
    muse_detok_push(d, 0xf0, &t, &n);
    muse_detok_push(d, 0x9f, &t, &n);
    muse_detok_flush(d, &t, &n);
    TEST_COND("flush of incomplete -> one U+FFFD", n == 3 && memcmp(t, "\xef\xbf\xbd", 3) == 0);
    muse_detok_flush(d, &t, &n);
    TEST_COND("second flush is empty", n == 0);
    TEST_COND("bad id", muse_detok_push(d, -1, &t, &n) == MUSE_ERR_INVALID_ARG);
    muse_detok_free(d);

    d = muse_detok_init(tok, MUSE_DECODE_SPECIAL);
    muse_detok_push(d, eot, &t, &n);
    TEST_COND("control shown with SPECIAL", n == 7 && memcmp(t, "<|eot|>", 7) == 0);
    muse_detok_free(d);
    muse_tokenizer_free(tok);
    vb_free(&v);
}

/* A 12 MB whitespace run exceeds PCRE2's default match limit (10M); the split must retry with
 * bigger limits instead of failing. Skipped under sanitizers (memory). */
static void test_huge_run(void) {
    if (getenv("MUSE_SANITIZER")) return;
    struct vb v;
    vb_init(&v);
    struct muse_tokenizer *tok = vb_build(&v, -1, false);
    size_t len = (size_t)12 << 20;
    char *s = malloc(len);
    if (tok && s) {
        memset(s, ' ', len);
        int32_t *ids = NULL;
        size_t n = 0;
        struct muse_error err;
        muse_status st = muse_tokenizer_encode_alloc(tok, s, len, 0, &ids, &n, &err);
        TEST_CONDF(st == MUSE_OK && n == len && ids[0] == ' ' && ids[len - 1] == ' ', "12 MB of spaces: %s",
                   st == MUSE_OK ? "ok" : err.msg);
        free(ids);
    }
    free(s);
    muse_tokenizer_free(tok);
    vb_free(&v);
}

static void test_errors(void) {
    struct muse_error err;
    enum muse_pretok p;
    TEST_COND("pre llama4", muse_pretok_from_name("llama4", 6, &p, &err) == MUSE_OK && p == MUSE_PRETOK_LLAMA4);
    TEST_COND("pre llama-bpe", muse_pretok_from_name("llama-bpe", 9, &p, &err) == MUSE_OK && p == MUSE_PRETOK_LLAMA3);
    TEST_COND("pre unknown names the value",
              muse_pretok_from_name("qwen2", 5, &p, &err) == MUSE_ERR_UNSUPPORTED && strstr(err.msg, "'qwen2'"));
    struct vb v;
    vb_init(&v);
    v.merges[0] = strdup("abc");
    v.merge_lens[0] = 3;
    v.n_merges = 1;
    struct muse_tokenizer_vocab voc = {
        .n_tokens = v.n, .tokens = (const char *const *)v.texts, .token_lens = v.lens, .token_types = v.types,
        .n_merges = 1, .merges = (const char *const *)v.merges, .merge_lens = v.merge_lens, .bos_id = -1,
        .eos_id = -1, .eot_id = -1, .eom_id = -1};
    struct muse_tokenizer *tok = NULL;
    TEST_COND("merge without space", muse_tokenizer_init(&voc, &tok, &err) == MUSE_ERR_FORMAT && !tok);
    voc.n_merges = 0;
    voc.bos_id = 100000;
    TEST_COND("bos out of range", muse_tokenizer_init(&voc, &tok, &err) == MUSE_ERR_INVALID_ARG && !tok);
    vb_free(&v);
}

int main(void) {
    test_merge_order();
    test_synthetic_symbols();
    test_ignore_merges();
    test_specials();
    test_capacity();
    test_invalid_utf8();
    test_pretok();
    test_other_pretoks();
    test_detok();
    test_huge_run();
    test_errors();
    return TEST_REPORT();
}
