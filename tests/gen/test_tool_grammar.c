/*
 * test_tool_grammar.c - the grammar of a forced ATEM tool call (gen/tool_grammar.h): the call the
 * chat template itself renders is accepted (with and without a reasoning block, optional
 * parameters left out), calls of another tool, a missing required parameter, a wrong-typed value,
 * an unknown parameter and text after the call are refused; unenforceable schemas are errors.
 */
#include <cJSON.h>
#include <string.h>

#include "gen/grammar.h"
#include "gen/tool_grammar.h"
#include "test.h"
#include "text/gbnf.h"

/* bytes 0..255, then the special tokens */
static const char *specials[] = {"<|message|>", "<|eom|>", "<|start|>", "<|eot|>"};
#define N_SPECIAL 4
#define N_VOCAB (256 + N_SPECIAL)
static char bytes[256];
static const char *piece(void *user, int32_t id, size_t *len) {
    if (id < 256) {
        bytes[id] = (char)id;
        *len = 1;
        return &bytes[id];
    }
    *len = strlen(specials[id - 256]);
    return specials[id - 256];
}
static bool is_eog(void *user, int32_t id) { return id == 256 + 3; }
static int32_t find(void *user, const char *text, size_t len) {
    for (int i = 0; i < N_SPECIAL; i++)
        if (strlen(specials[i]) == len && !memcmp(specials[i], text, len)) return 256 + i;
    return -1;
}

static struct muse_grammar_vocab *vocab;

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 8}, \"days\": {\"type\": \"integer\"},"
    " \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\", \"days\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}},"
    " \"required\": [\"a\"]}}}]";

/* Feed text where specials written as <|...|> are their tokens; 1 = accepted and complete. */
static int feed(const struct muse_grammar *g, const char *text) {
    struct muse_grammar_matcher *m = NULL;
    struct muse_error err = {0};
    if (muse_grammar_matcher_create(g, vocab, &m, &err) != MUSE_OK) return -1;
    int ok = 1;
    for (const char *p = text; *p && ok;) {
        int32_t id = -1;
        size_t n = 1;
        for (int i = 0; i < N_SPECIAL; i++)
            if (!strncmp(p, specials[i], strlen(specials[i]))) id = 256 + i, n = strlen(specials[i]);
        if (id < 0) id = (unsigned char)*p;
        ok = muse_grammar_matcher_accept(m, id, &err) == MUSE_OK;
        p += n;
    }
    if (ok) ok = muse_grammar_matcher_can_end(m);
    muse_grammar_matcher_free(m);
    return ok;
}

/* GBNF text -> grammar over the test vocabulary (NULL after printing why). */
static struct muse_grammar *compile(char *gbnf, struct muse_error *err);

static struct muse_grammar *build(const cJSON *tools, const char *name) {
    char *gbnf = NULL;
    struct muse_error err = {0};
    if (muse_tool_call_grammar(tools, name, &gbnf, &err) != MUSE_OK) {
        fprintf(stderr, "tool grammar: %s\n", err.msg);
        return NULL;
    }
    return compile(gbnf, &err);
}

static struct muse_grammar *compile(char *gbnf, struct muse_error *err0) {
    struct muse_error *err = err0;
    struct muse_gbnf_token_lookup lk = {find, NULL};
    struct muse_gbnf *pg = NULL;
    struct muse_grammar *g = NULL;
    if (muse_gbnf_parse(gbnf, strlen(gbnf), NULL, &lk, &pg, err) != MUSE_OK || muse_grammar_create(pg, &g, err) != MUSE_OK)
        fprintf(stderr, "grammar does not compile: %s\n%s\n", err->msg, gbnf);
    muse_gbnf_free(pg);
    free(gbnf);
    return g;
}

#define CALL(name, params) \
    " to=" name "<|message|><atem:function_calls>\n<atem:invoke name=\"" name "\">\n" params "</atem:invoke>\n</atem:function_calls>"
#define P(k, v) "<atem:parameter name=\"" k "\">" v "</atem:parameter>\n"

int main(void) {
    struct muse_error err = {0};
    if (muse_grammar_vocab_create(N_VOCAB, piece, is_eog, NULL, &vocab, &err) != MUSE_OK) return 1;
    cJSON *tools = cJSON_Parse(TOOLS);
    struct muse_grammar *any = build(tools, NULL), *add = build(tools, "add");
    TEST_COND("grammars build", any && add);
    if (any && add) {
        TEST_COND("a full call", feed(any, CALL("get_weather", P("city", "Paris") P("days", "3") P("unit", "c"))) == 1);
        TEST_COND("optional left out", feed(any, CALL("get_weather", P("city", "Paris") P("days", "3"))) == 1);
        TEST_COND("after reasoning",
                  feed(any, " to=self<|message|>Need the tool; 1 < 2.<|eom|><|start|>assistant" CALL("add", P("a", "-1.5"))) == 1);
        TEST_COND("a JSON array value", feed(any, CALL("add", P("a", "2") P("b", "[1, 2]"))) == 1);
        TEST_COND("required missing", feed(any, CALL("get_weather", P("city", "Paris"))) == 0);
        TEST_COND("integer as text", feed(any, CALL("get_weather", P("city", "Paris") P("days", "three"))) == 0);
        TEST_COND("enum outside", feed(any, CALL("get_weather", P("city", "Paris") P("days", "3") P("unit", "k"))) == 0);
        TEST_COND("string too long", feed(any, CALL("get_weather", P("city", "Parisianos") P("days", "3"))) == 0);
        TEST_COND("unknown parameter", feed(any, CALL("add", P("a", "1") P("c", "1"))) == 0);
        TEST_COND("unknown tool", feed(any, CALL("sub", P("a", "1"))) == 0);
        TEST_COND("an answer instead", feed(any, " to=user<|message|>Hello") == 0);
        TEST_COND("'<|' in reasoning", feed(any, " to=self<|message|>a <|x<|eom|><|start|>assistant" CALL("add", P("a", "1"))) == 0);
        TEST_COND("named: that tool", feed(add, CALL("add", P("a", "1"))) == 1);
        TEST_COND("named: not another", feed(add, CALL("get_weather", P("city", "P") P("days", "3"))) == 0);
        TEST_COND("text after the call", feed(add, CALL("add", P("a", "1")) "x") == 0);
    }
    /* a whole chat answer with JSON under a schema (muse_chat_json_grammar) */
    static const char schema[] = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, "
                                 "\"required\": [\"n\"]}";
    char *jg = NULL;
    TEST_COND("chat JSON grammar", muse_chat_json_grammar(schema, strlen(schema), &jg, &err) == MUSE_OK && jg);
    struct muse_grammar *cj = jg ? compile(jg, &err) : NULL;
    TEST_COND("chat JSON grammar compiles", cj != NULL);
    if (cj) {
        TEST_COND("header then JSON", feed(cj, " to=user<|message|>{\"n\": 42}") == 1);
        TEST_COND("reasoning, header, JSON",
                  feed(cj, " to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>{\"n\": -7}") == 1);
        TEST_COND("no header: refused", feed(cj, "{\"n\": 42}") == 0);
        TEST_COND("text instead of JSON", feed(cj, " to=user<|message|>Hello") == 0);
        TEST_COND("JSON outside the schema", feed(cj, " to=user<|message|>{\"m\": 1}") == 0);
        TEST_COND("a tool call instead", feed(cj, CALL("add", P("a", "1"))) == 0);
    }
    muse_grammar_free(cj);
    TEST_COND("not JSON", muse_chat_json_grammar("{x", 2, &jg, &err) == MUSE_ERR_FORMAT && !jg);
    char *gbnf = NULL;
    TEST_COND("no such tool", muse_tool_call_grammar(tools, "nope", &gbnf, &err) == MUSE_ERR_INVALID_ARG && !gbnf);
    cJSON *bad = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\","
                             " \"properties\": {\"s\": {\"type\": \"string\", \"pattern\": \"^a$\"}}}}}]");
    TEST_COND("pattern on a raw string is refused",
              muse_tool_call_grammar(bad, NULL, &gbnf, &err) == MUSE_ERR_UNSUPPORTED && strstr(err.msg, "'s'"));
    cJSON_Delete(bad);
    bad = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\","
                      " \"properties\": {\"n\": {\"type\": \"array\", \"uniqueItems\": true}}}}}]");
    TEST_COND("unsupported keyword in a parameter", muse_tool_call_grammar(bad, NULL, &gbnf, &err) == MUSE_ERR_UNSUPPORTED);
    cJSON_Delete(bad);
    muse_grammar_free(any);
    muse_grammar_free(add);
    cJSON_Delete(tools);
    muse_grammar_vocab_free(vocab);
    return TEST_REPORT();
}
