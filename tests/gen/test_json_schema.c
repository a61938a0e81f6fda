/*
 * test_json_schema.c - JSON Schema -> GBNF (gen/json_schema.h): for each schema, JSON texts the
 * resulting grammar must accept and texts it must refuse; unsupported keywords and bad input give
 * errors naming the keyword and where it is.
 */
#include <string.h>

#include "gen/grammar.h"
#include "gen/json_schema.h"
#include "test.h"

static char byte_piece[256];
static const char *piece(void *user, int32_t id, size_t *len) {
    (void)user;
    byte_piece[id] = (char)id;
    *len = 1;
    return &byte_piece[id];
}
static bool no_eog(void *user, int32_t id) { return false; }
static struct muse_grammar_vocab *vocab;

static int full_match(const struct muse_grammar *g, const char *s) {
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    if (muse_grammar_matcher_create(g, vocab, &m, &err) != MUSE_OK) return -1;
    int ok = muse_grammar_matcher_accept_text(m, s, strlen(s), &err) == MUSE_OK && muse_grammar_matcher_can_end(m);
    muse_grammar_matcher_free(m);
    return ok;
}

struct jcase {
    const char *schema;
    const char *accept[6];
    const char *reject[6];
};

static const struct jcase cases[] = {
    {"{}", {"{}", "1", "\"s\"", "[1, {\"a\": null}]", "true"}, {"", "{", "tru"}},
    {"{\"type\": \"object\"}", {"{}", "{\"a\": [1]}"}, {"[]", "1"}},
    {"{\"type\": \"integer\"}", {"0", "-12", "42"}, {"1.5", "\"1\"", "01"}},
    {"{\"type\": \"number\"}", {"0", "-1.5", "2e10", "3.25E-2"}, {"1.", "\"x\"", "+1"}},
    {"{\"type\": \"boolean\"}", {"true", "false"}, {"null", "1"}},
    {"{\"type\": \"null\"}", {"null"}, {"0"}},
    {"{\"type\": [\"string\", \"null\"]}", {"null", "\"x\""}, {"1"}},
    {"{\"type\": \"string\"}", {"\"\"", "\"a b\"", "\"q\\\"\\n\\u00e9\""}, {"\"a", "\"a\nb\"", "1"}},
    {"{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}", {"\"ab\"", "\"abc\""}, {"\"a\"", "\"abcd\""}},
    {"{\"enum\": [\"red\", 1, null, {\"a\": 1}]}", {"\"red\"", "1", "null", "{\"a\":1}"}, {"\"blue\"", "2"}},
    {"{\"const\": \"x\"}", {"\"x\""}, {"\"y\""}},
    {"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"}},"
     " \"required\": [\"name\"]}",
     {"{\"name\": \"A\"}", "{\"name\": \"A\", \"age\": 3}", "{ \"name\" : \"A\" }"},
     {"{}", "{\"age\": 3}", "{\"name\": 1}", "{\"name\": \"A\", \"x\": 1}"}},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": true}",
     {"{\"a\": 1, \"zz\": [true]}", "{}"}, {"{\"a\": \"s\"}"}},
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}", {"{\"k\": 1, \"j\": 2}"}, {"{\"k\": \"v\"}"}},
    {"{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1, \"maxItems\": 3}",
     {"[1]", "[1, 2, 3]"}, {"[]", "[1, 2, 3, 4]", "[\"a\"]"}},
    {"{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}",
     {"[\"a\", 1]"}, {"[1, \"a\"]", "[\"a\"]"}},
    {"{\"type\": \"string\", \"pattern\": \"^[a-c]+-\\\\d{2}$\"}", {"\"ab-12\"", "\"c-00\""}, {"\"ab-1\"", "\"d-12\""}},
    {"{\"type\": \"string\", \"pattern\": \"^(foo|ba?r)*$\"}", {"\"\"", "\"foobrbar\""}, {"\"fo\"", "\"baa\""}},
    {"{\"type\": \"string\", \"format\": \"date\"}", {"\"2024-02-29\""}, {"\"2024-13-01\"", "\"24-01-01\""}},
    {"{\"type\": \"string\", \"format\": \"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""}},
    {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 12}", {"5", "9", "12"}, {"4", "13", "-5", "100"}},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": 0}", {"1", "1000"}, {"0", "-1"}},
    {"{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 1}]}", {"1", "\"a\""}, {"\"ab\"", "null"}},
    {"{\"oneOf\": [{\"const\": 1}, {\"const\": 2}]}", {"1", "2"}, {"3"}},
    {"{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]},"
     " {\"properties\": {\"b\": {\"type\": \"string\"}}, \"required\": [\"b\"]}]}",
     {"{\"a\": 1, \"b\": \"x\"}"}, {"{\"a\": 1}", "{\"b\": \"x\"}"}},
    {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"},"
     " \"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": [\"v\", \"next\"]}},"
     " \"$ref\": \"#/$defs/node\"}",
     {"{\"v\": 1, \"next\": null}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}"}, {"{\"v\": 1}", "{\"v\": 1, \"next\": 3}"}},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"description\": \"ignored\", \"title\": \"t\"}}}",
     {"{}", "{\"a\": \"x\"}"}, {"{\"a\": 1}"}},
};

static void test_cases(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct jcase *c = &cases[i];
        char *gbnf = NULL;
        struct muse_error err = {0};
        muse_status st = muse_json_schema_to_gbnf(c->schema, strlen(c->schema), &gbnf, &err);
        TEST_CONDF(st == MUSE_OK, "schema converts: %s (%s)", c->schema, err.msg);
        if (st != MUSE_OK) continue;
        struct muse_grammar *g = NULL;
        st = muse_grammar_from_text(gbnf, strlen(gbnf), NULL, NULL, &g, &err);
        TEST_CONDF(st == MUSE_OK, "grammar of %s compiles (%s)\n%s", c->schema, err.msg, gbnf);
        if (st == MUSE_OK) {
            for (int k = 0; k < 6 && c->accept[k]; k++)
                TEST_CONDF(full_match(g, c->accept[k]) == 1, "%s accepts %s", c->schema, c->accept[k]);
            for (int k = 0; k < 6 && c->reject[k]; k++)
                TEST_CONDF(full_match(g, c->reject[k]) == 0, "%s rejects %s", c->schema, c->reject[k]);
        }
        muse_grammar_free(g);
        free(gbnf);
    }
}

struct jbad {
    const char *schema;
    muse_status st;
    const char *msg;
};

static const struct jbad bads[] = {
    {"{\"type\": \"string\",", MUSE_ERR_FORMAT, "line 1"},
    {"{\"not\": {\"type\": \"string\"}}", MUSE_ERR_UNSUPPORTED, "not"},
    {"{\"type\": \"array\", \"uniqueItems\": true}", MUSE_ERR_UNSUPPORTED, "uniqueItems"},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"multipleOf\": 3}}}", MUSE_ERR_UNSUPPORTED, "/properties/a"},
    {"{\"$ref\": \"https://example.com/s.json\"}", MUSE_ERR_UNSUPPORTED, "$ref"},
    {"{\"$ref\": \"#/$defs/missing\"}", 0, "missing"},
    {"{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", MUSE_ERR_UNSUPPORTED, "pattern"},
    {"{\"type\": \"wat\"}", 0, "wat"},
    /* counts past muse's limit: refused at once (32222222 took 20 s of rule chaining under the fuzzer) */
    {"{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"maxItems\": 32222222}", MUSE_ERR_UNSUPPORTED,
     "'maxItems' 32222222 is more than muse's limit of 100000"},
    {"{\"type\": \"string\", \"minLength\": 100001}", MUSE_ERR_UNSUPPORTED, "minLength"},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        char *gbnf = NULL;
        struct muse_error err = {0};
        muse_status st = muse_json_schema_to_gbnf(bads[i].schema, strlen(bads[i].schema), &gbnf, &err);
        const bool st_ok = bads[i].st ? st == bads[i].st : st != MUSE_OK;
        TEST_CONDF(st_ok && !gbnf && strstr(err.msg, bads[i].msg), "bad schema %s -> error with '%s' (got %d: %s)",
                   bads[i].schema, bads[i].msg, st, err.msg);
        free(gbnf);
    }
}

int main(void) {
    struct muse_error err = {0};
    if (muse_grammar_vocab_create(256, piece, no_eog, NULL, &vocab, &err) != MUSE_OK) return 1;
    test_cases();
    test_errors();
    muse_grammar_vocab_free(vocab);
    return TEST_REPORT();
}
