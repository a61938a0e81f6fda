/*
 * test_grammar.c - GBNF parsing (text/gbnf.h) and the grammar matcher (gen/grammar.h):
 * accept / reject suites per construct, line:column errors, the per-token mask agreeing with the
 * per-token check on every state met, end-of-generation handling, partial UTF-8 pieces.
 */
#include <string.h>

#include "gen/grammar.h"
#include "test.h"
#include "text/gbnf.h"

/* A small vocabulary: ids 0..255 are the single bytes, then multi-byte pieces, then an EOG. */
static const char *extra[] = {
    "ab", "abc", "{\"", "\":", " true", "\xC3\xA9" /* é */, "\xC3" /* lead byte alone */, "\xA9", "12", "a1",
    "hello", " world", "\n\n", "",
};
#define N_EXTRA ((int32_t)(sizeof extra / sizeof extra[0]))
#define ID_EOG (256 + N_EXTRA)
#define N_VOCAB (ID_EOG + 1)

static char byte_piece[256];
static const char *piece(void *user, int32_t id, size_t *len) {
    (void)user;
    if (id < 256) {
        byte_piece[id] = (char)id;
        *len = 1;
        return &byte_piece[id];
    }
    if (id < ID_EOG) {
        *len = strlen(extra[id - 256]);
        return extra[id - 256];
    }
    *len = 7;
    return "<|eot|>";
}
static bool is_eog(void *user, int32_t id) { return id == ID_EOG; }

static struct muse_grammar_vocab *vocab;

static int32_t find_id(const char *s) {
    if (strlen(s) == 1) return (unsigned char)s[0];
    for (int32_t i = 0; i < N_EXTRA; i++)
        if (!strcmp(extra[i], s)) return 256 + i;
    return -1;
}

static struct muse_grammar *compile(const char *text) {
    struct muse_grammar *g = NULL;
    struct muse_error err = {0};
    if (muse_grammar_from_text(text, strlen(text), NULL, NULL, &g, &err) != MUSE_OK) {
        fprintf(stderr, "grammar did not compile: %s\n  %s\n", err.msg, text);
        return NULL;
    }
    return g;
}

/* Whether the whole of s is a complete match (fed as one text piece). */
static int full_match(const struct muse_grammar *g, const char *s) {
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    if (muse_grammar_matcher_create(g, vocab, &m, &err) != MUSE_OK) return -1;
    int ok = muse_grammar_matcher_accept_text(m, s, strlen(s), &err) == MUSE_OK && muse_grammar_matcher_can_end(m);
    muse_grammar_matcher_free(m);
    return ok;
}

/* Whether s is a prefix of some match (accepted, maybe not complete). */
static int prefix_ok(const struct muse_grammar *g, const char *s) {
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    if (muse_grammar_matcher_create(g, vocab, &m, &err) != MUSE_OK) return -1;
    int ok = muse_grammar_matcher_accept_text(m, s, strlen(s), &err) == MUSE_OK;
    muse_grammar_matcher_free(m);
    return ok;
}

struct suite {
    const char *grammar;
    const char *accept[8];
    const char *reject[8];
};

static const struct suite suites[] = {
    {"root ::= \"abc\"", {"abc"}, {"ab", "abcd", "", "abd"}},
    {"root ::= \"a\" | \"b\" | \"cd\"", {"a", "b", "cd"}, {"c", "ab", "d"}},
    {"root ::= (\"a\" | \"b\")* \"c\"", {"c", "ac", "babac"}, {"", "ab", "ca"}},
    {"root ::= \"x\"+", {"x", "xxxx"}, {"", "xy"}},
    {"root ::= \"x\"? \"y\"", {"y", "xy"}, {"xxy", "x"}},
    {"root ::= [a-c]{2,3}", {"ab", "cca", "abc"}, {"a", "abca", "ad"}},
    {"root ::= [0-9]{3}", {"123", "000"}, {"12", "1234"}},
    {"root ::= \"z\"{2,}", {"zz", "zzzzzz"}, {"z", ""}},
    {"root ::= \"q\"{0,2}", {"", "q", "qq"}, {"qqq"}},
    {"root ::= [^a-y\\n]+", {"z", "Z!", "\xC3\xA9"}, {"a", "zy", "\n"}},
    {"root ::= [a-zA-Z_] [a-zA-Z0-9_]*", {"x", "_a9", "Foo_1"}, {"9a", "a-b"}},
    {"root ::= .", {"a", "\xC3\xA9", "\xE2\x82\xAC"}, {"", "ab"}},
    {"root ::= \"\\x41\\u00e9\\t\\\"\\\\\"", {"A\xC3\xA9\t\"\\"}, {"A"}},
    {"root ::= [\\[\\]\\-]+", {"[", "]-[", "-"}, {"a"}},
    /* references defined later, comments, newlines after | and inside groups */
    {"# a comment\nroot ::= item (\",\" item)* # trailing\nitem ::= \"a\" |\n  \"bb\"\n", {"a", "a,bb,a"}, {"a,", ",a"}},
    {"root ::= (\n  \"a\"\n  | \"b\"\n)", {"a", "b"}, {"ab"}},
    /* nested recursion */
    {"root ::= \"(\" root \")\" | \"x\"", {"x", "(x)", "(((x)))"}, {"((x)", "()"}},
    /* the empty alternative */
    {"root ::= \"a\" | ", {"a", ""}, {"b"}},
};

static void test_suites(void) {
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        const struct suite *s = &suites[i];
        struct muse_grammar *g = compile(s->grammar);
        TEST_CONDF(g != NULL, "compiles: %s", s->grammar);
        if (!g) continue;
        for (int k = 0; k < 8 && s->accept[k]; k++)
            TEST_CONDF(full_match(g, s->accept[k]) == 1, "%s accepts '%s'", s->grammar, s->accept[k]);
        for (int k = 0; k < 8 && s->reject[k]; k++)
            TEST_CONDF(full_match(g, s->reject[k]) == 0, "%s rejects '%s'", s->grammar, s->reject[k]);
        muse_grammar_free(g);
    }
    /* the empty string: suites with "" in accept are listed as accept[k] = "" which stops the loop */
    struct muse_grammar *g = compile("root ::= \"q\"{0,2}");
    TEST_COND("x{0,2} accepts the empty string", g && full_match(g, "") == 1);
    muse_grammar_free(g);
    g = compile("root ::= \"abc\" \"def\"");
    TEST_COND("prefix of a match is accepted as a prefix", g && prefix_ok(g, "abcd") == 1 && prefix_ok(g, "abx") == 0);
    muse_grammar_free(g);
}

struct bad {
    const char *grammar;
    const char *msg; /* substring of the error */
};

static const struct bad bads[] = {
    {"root ::= \"abc", "line 1, column"},
    {"root ::= foo", "line 1, column 10"},
    {"x ::= \"a\"", "root"},
    {"root ::= \"a\"\nfoo ::= [a-", "line 2, column"},
    {"root ::= \"a\" |\n  (\"b\"", "line 2"},
    {"root ::= root \"a\"", "recursion"},
    {"root ::= \"a\"{3,1}", "line 1"},
    {"root ::= \"a\"{5000}", "line 1"},
    {"root ::= \"\\xZZ\"", "line 1"},
    {"root := \"a\"", "line 1"},
    {"root ::= <hello>", "line 1"},
    {"", "no rules"},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        struct muse_gbnf *g = NULL;
        struct muse_error err = {0};
        muse_status st = muse_gbnf_parse(bads[i].grammar, strlen(bads[i].grammar), NULL, NULL, &g, &err);
        TEST_CONDF(st == MUSE_ERR_FORMAT && !g && strstr(err.msg, bads[i].msg),
                   "bad grammar '%s' -> FORMAT with '%s' (got %d: %s)", bads[i].grammar, bads[i].msg, st, err.msg);
        muse_gbnf_free(g);
    }
    /* another root name */
    struct muse_gbnf *g = NULL;
    struct muse_error err = {0};
    TEST_COND("root name can be chosen", muse_gbnf_parse("start ::= \"a\"", 13, "start", NULL, &g, &err) == MUSE_OK);
    char *txt = g ? muse_gbnf_print(g) : NULL;
    TEST_COND("print writes the rules", txt && strstr(txt, "start ::= "));
    free(txt);
    muse_gbnf_free(g);
}

/* The mask equals allows() for every token, on every state a walk through the texts meets. */
static void check_mask_states(const char *grammar, const char *const *texts, int n_texts) {
    struct muse_grammar *g = compile(grammar);
    if (!g) {
        TEST_COND("mask grammar compiles", 0);
        return;
    }
    struct muse_error err = {0};
    int bad = 0, states = 0;
    for (int t = 0; t < n_texts; t++) {
        struct muse_grammar_matcher *m = NULL;
        if (muse_grammar_matcher_create(g, vocab, &m, &err) != MUSE_OK) {
            bad++;
            break;
        }
        const char *s = texts[t];
        size_t n = strlen(s);
        for (size_t pos = 0;;) {
            const uint32_t *bits = NULL;
            int32_t n_allowed = -1;
            if (muse_grammar_matcher_mask(m, &bits, &n_allowed, &err) != MUSE_OK) {
                bad++;
                break;
            }
            int32_t count = 0;
            for (int32_t id = 0; id < N_VOCAB; id++) {
                bool ok = false;
                const bool bit = (bits[id >> 5] >> (id & 31)) & 1;
                /* bits may be invalidated by allows (caches): re-fetch afterwards */
                if (muse_grammar_matcher_allows(m, id, &ok, &err) != MUSE_OK) bad++;
                muse_grammar_matcher_mask(m, &bits, NULL, &err);
                if (ok != bit) {
                    if (bad < 5) fprintf(stderr, "  state at '%.*s': token %d mask %d allows %d\n", (int)pos, s, id, bit, ok);
                    bad++;
                }
                count += ok;
                if (id == ID_EOG && ok != muse_grammar_matcher_can_end(m)) bad++;
                if (id == 0 && ok) bad++;                  /* NUL piece */
                if (id == find_id("") && ok) bad++;        /* empty piece */
            }
            if (count != n_allowed) bad++;
            states++;
            if (pos >= n) break;
            /* advance by the longest allowed piece that is a prefix of the rest */
            int32_t best = -1;
            size_t best_len = 0;
            for (int32_t id = 1; id < ID_EOG; id++) {
                size_t len = 0;
                const char *p = piece(NULL, id, &len);
                bool ok = false;
                if (len > best_len && len <= n - pos && !memcmp(p, s + pos, len) &&
                    muse_grammar_matcher_allows(m, id, &ok, &err) == MUSE_OK && ok) {
                    best = id;
                    best_len = len;
                }
            }
            if (best < 0 || muse_grammar_matcher_accept(m, best, &err) != MUSE_OK) {
                fprintf(stderr, "  '%s' stuck at %zu\n", s, pos);
                bad++;
                break;
            }
            pos += best_len;
        }
        TEST_CONDF(muse_grammar_matcher_can_end(m), "'%s' ends complete", s);
        /* a refused token leaves the matcher as it was */
        TEST_COND("accepting a refused token is INVALID_ARG", muse_grammar_matcher_accept(m, 0, &err) == MUSE_ERR_INVALID_ARG);
        TEST_COND("still complete after the refusal", muse_grammar_matcher_can_end(m));
        muse_grammar_matcher_free(m);
    }
    TEST_CONDF(bad == 0 && states > 0, "mask == allows on %d states of %s (%d mismatches)", states, grammar, bad);
    muse_grammar_free(g);
}

static void test_masks(void) {
    static const char *json_g =
        "root ::= object\n"
        "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
        "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
        "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
        "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
        "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
        "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    static const char *json_texts[] = {
        "{\"a\": true}", "{\"abc\":[1, 2.5, \"h\xC3\xA9llo\"], \"x\": {\"y\": null}}", "{}",
    };
    check_mask_states(json_g, json_texts, 3);
    static const char *utf_texts[] = {"\xC3\xA9\xC3\xA9", "a\xC3\xA9"};
    check_mask_states("root ::= [a\\u00e9]+", utf_texts, 2);
    static const char *words[] = {"hello world", "hello"};
    check_mask_states("root ::= \"hello\" (\" world\")?", words, 2);
}

static void test_partial_utf8(void) {
    /* "é" split over two tokens: the lead byte is allowed where é can follow, not where only ASCII can */
    struct muse_grammar *g = compile("root ::= \"\\u00e9\" \"!\"");
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    TEST_COND("matcher", g && muse_grammar_matcher_create(g, vocab, &m, &err) == MUSE_OK);
    if (!m) {
        muse_grammar_free(g);
        return;
    }
    bool ok = false;
    muse_grammar_matcher_allows(m, find_id("\xC3"), &ok, &err);
    TEST_COND("lead byte of é allowed", ok);
    muse_grammar_matcher_allows(m, 0xC4, &ok, &err);
    TEST_COND("another lead byte refused", !ok);
    TEST_COND("accept lead byte", muse_grammar_matcher_accept(m, find_id("\xC3"), &err) == MUSE_OK);
    muse_grammar_matcher_allows(m, '!', &ok, &err);
    TEST_COND("'!' refused inside a character", !ok);
    muse_grammar_matcher_allows(m, find_id("\xA9"), &ok, &err);
    TEST_COND("the continuation byte allowed", ok);
    TEST_COND("accept continuation", muse_grammar_matcher_accept(m, 0xA9, &err) == MUSE_OK);
    TEST_COND("not complete yet", !muse_grammar_matcher_can_end(m));
    TEST_COND("accept !", muse_grammar_matcher_accept(m, '!', &err) == MUSE_OK && muse_grammar_matcher_can_end(m));
    TEST_COND("EOG accepted at the end", muse_grammar_matcher_accept(m, ID_EOG, &err) == MUSE_OK);
    muse_grammar_matcher_reset(m);
    TEST_COND("reset: EOG refused at the start", muse_grammar_matcher_accept(m, ID_EOG, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("out of range id", muse_grammar_matcher_accept(m, N_VOCAB, &err) == MUSE_ERR_INVALID_ARG);
    struct muse_grammar_stats st;
    muse_grammar_matcher_stats(m, &st);
    TEST_COND("stats count states", st.n_states > 0 && st.n_stacks > 0);
    muse_grammar_matcher_free(m);
    muse_grammar_free(g);
}

static void test_token_elems(void) {
    char text[128];
    snprintf(text, sizeof text, "root ::= \"a\" <[%d]> !<[%d]> \"b\"", find_id("hello"), find_id("x"));
    struct muse_grammar *g = compile(text);
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    TEST_COND("token grammar", g && muse_grammar_matcher_create(g, vocab, &m, &err) == MUSE_OK);
    if (!m) {
        muse_grammar_free(g);
        return;
    }
    TEST_COND("a", muse_grammar_matcher_accept(m, 'a', &err) == MUSE_OK);
    bool ok = true;
    muse_grammar_matcher_allows(m, 'h', &ok, &err);
    TEST_COND("the text of the token is not the token", !ok);
    TEST_COND("the token itself", muse_grammar_matcher_accept(m, find_id("hello"), &err) == MUSE_OK);
    muse_grammar_matcher_allows(m, 'x', &ok, &err);
    TEST_COND("!<[x]> refuses x", !ok);
    TEST_COND("!<[x]> takes y", muse_grammar_matcher_accept(m, 'y', &err) == MUSE_OK);
    TEST_COND("then b", muse_grammar_matcher_accept(m, 'b', &err) == MUSE_OK && muse_grammar_matcher_can_end(m));
    muse_grammar_matcher_free(m);
    muse_grammar_free(g);
}

int main(void) {
    struct muse_error err = {0};
    if (muse_grammar_vocab_create(N_VOCAB, piece, is_eog, NULL, &vocab, &err) != MUSE_OK) {
        fprintf(stderr, "vocab: %s\n", err.msg);
        return 1;
    }
    TEST_COND("vocab size", muse_grammar_vocab_n(vocab) == N_VOCAB);
    test_suites();
    test_errors();
    test_masks();
    test_partial_utf8();
    test_token_elems();
    muse_grammar_vocab_free(vocab);
    return TEST_REPORT();
}
