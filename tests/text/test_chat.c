/*
 * test_chat.c - the Muse-Glimmer conversation format: the built-in template is the reference
 * file, the spec's rendered examples (spec/tokenizer-and-chat.md 3.4), reasoning strength and its
 * reasoning_effort alias, system prompt option, parser -> history round trip (a rendered history
 * extends the previous prompt + completion exactly, which is what KV-cache reuse relies on).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/glimmer_template.h"
#include "text/chat.h"
#include "text/output_parser.h"
#include "test.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = '\0';
    *len = (size_t)n;
    return b;
}

static struct muse_chat_options opts_at(int y, int m, int d) {
    struct muse_chat_options o = {0};
    o.jinja.now_set = true;
    o.jinja.now_year = y;
    o.jinja.now_month = m;
    o.jinja.now_day = d;
    return o;
}

static char *render(struct muse_chat *c, const struct muse_chat_options *o, bool gen, muse_status *st) {
    char *out = NULL;
    size_t len;
    struct muse_error err;
    *st = muse_chat_render(c, o, gen, &out, &len, &err);
    if (*st != MUSE_OK) fprintf(stderr, "render: %s\n", err.msg);
    return out;
}

static void test_builtin_is_reference(void) {
    char path[512];
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/golden/chat/templates/muse-glimmer.jinja", test_shared_dir());
    char *ref = slurp(path, &len);
    TEST_COND("reference template readable", ref != NULL);
    TEST_COND("built-in template == golden muse-glimmer.jinja (re-run scripts/embed_chat_template.sh)",
              ref && len == muse_glimmer_chat_template_len && !memcmp(ref, muse_glimmer_chat_template, len));
    free(ref);
}

static void test_spec_examples(void) {
    struct muse_chat *c;
    muse_status st;
    TEST_COND("create", muse_chat_create(NULL, 0, &c, NULL) == MUSE_OK);
    /* (a) one user message, no system, default strength, date 2026-09-20 */
    muse_chat_add(c, "user", "What is 17 * 23?", NULL);
    struct muse_chat_options o = opts_at(2026, 9, 20);
    char *out = render(c, &o, true, &st);
    const char *want_a =
        "<|begin_of_text|><|start|>system<|message|>You are a helpful AI assistant.\n"
        "Knowledge cutoff: 2026-01-04.\nCurrent date: 2026-09-20.\n\nReasoning strength: high.\n\n"
        "# Valid recipients: \"self\", \"user\".<|eot|><|start|>user<|message|>What is 17 * 23?<|eot|><|start|>assistant";
    TEST_CONDF(st == MUSE_OK && !strcmp(out, want_a), "spec example (a):\n%s", out ? out : "");
    free(out);
    /* (b) system message, reasoning_strength=low */
    muse_chat_reset(c);
    TEST_COND("reset empties", muse_chat_n_messages(c) == 0);
    muse_chat_add(c, "system", "You are terse.", NULL);
    muse_chat_add(c, "user", "Hi", NULL);
    o.reasoning = "LOW";
    out = render(c, &o, true, &st);
    const char *want_b = "<|begin_of_text|><|start|>system<|message|>You are terse.\n\nReasoning strength: low.\n\n"
                         "# Valid recipients: \"self\", \"user\".<|eot|><|start|>user<|message|>Hi<|eot|><|start|>assistant";
    TEST_CONDF(st == MUSE_OK && !strcmp(out, want_b), "spec example (b):\n%s", out ? out : "");
    free(out);
    /* the same through the reasoning_effort alias (vLLM PR #54186) */
    o.reasoning = NULL;
    cJSON *extra = cJSON_Parse("{\"reasoning_effort\": \"low\"}");
    o.extra = extra;
    out = render(c, &o, true, &st);
    TEST_CONDF(st == MUSE_OK && !strcmp(out, want_b), "reasoning_effort alias:\n%s", out ? out : "");
    free(out);
    cJSON_Delete(extra);
    o.extra = NULL;
    o.reasoning = "off";
    char *bad = NULL;
    size_t bl;
    struct muse_error err;
    TEST_COND("'off' is not a reasoning strength", muse_chat_render(c, &o, true, &bad, &bl, &err) == MUSE_ERR_INVALID_ARG && !bad);
    o.reasoning = NULL;
    /* (d) tools: the recipients line names the tool namespace, the schema line is tojson */
    muse_chat_reset(c);
    muse_chat_add(c, "user", "Weather in Paris?", NULL);
    cJSON *tools = cJSON_Parse(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather for a city.\","
        " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}]");
    o.tools = tools;
    out = render(c, &o, true, &st);
    TEST_COND("spec (d): schema line",
              st == MUSE_OK && strstr(out, "\n{\"name\": \"get_weather\", \"description\": \"Get the current weather for a city.\", "
                                           "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
                                           "\"required\": [\"city\"]}}\n\nHere's an example"));
    TEST_COND("spec (d): recipients and tail",
              out && strstr(out, "</atem:function_calls>\n\n# Valid recipients: \"self\", \"get_weather.*\", \"user\".<|eot|>"
                                 "<|start|>user<|message|>Weather in Paris?<|eot|><|start|>assistant"));
    TEST_COND("spec (d): tool metadata", out && strstr(out, "// Tool metadata\n{\"name\": \"get_weather\", \"description\": \"\"}\n// Function schemas\n"));
    free(out);
    o.tools = NULL;
    cJSON_Delete(tools);
    /* system prompt option: used when the history has none, never duplicated */
    o.system_prompt = "Be brief.";
    out = render(c, &o, true, &st);
    const char *want_sys = "<|begin_of_text|><|start|>system<|message|>Be brief.\n\nReasoning strength: high.";
    TEST_CONDF(st == MUSE_OK && !strncmp(out, want_sys, strlen(want_sys)), "system option used: %s", out);
    free(out);
    muse_chat_reset(c);
    muse_chat_add(c, "system", "Own system.", NULL);
    out = render(c, &o, false, &st);
    TEST_COND("history system wins", st == MUSE_OK && strstr(out, "Own system.") && !strstr(out, "Be brief."));
    free(out);
    muse_chat_free(c);
}

/* Render, "generate" `completion`, parse it into the history, add a user/tool turn, render again:
 * the new prompt must start with prompt + completion. */
static void roundtrip(const char *completion, const char *next_role, const char *next_content, const char *what) {
    struct muse_chat *c;
    muse_status st;
    muse_chat_create(NULL, 0, &c, NULL);
    muse_chat_add(c, "user", "Weather in Oslo?", NULL);
    struct muse_chat_options o = opts_at(2026, 11, 29);
    char *p1 = render(c, &o, true, &st);
    struct muse_output_parser *p;
    muse_output_parser_create(NULL, &p, NULL);
    muse_output_parser_feed(p, completion, strlen(completion));
    muse_output_parser_finish(p);
    TEST_COND("add parsed", muse_chat_add_parsed(c, p, NULL) == MUSE_OK);
    muse_output_parser_free(p);
    if (!strcmp(next_role, "tool")) {
        cJSON *m = cJSON_Parse("{\"role\": \"tool\", \"name\": \"get_weather\", \"content\": \"sunny\"}");
        muse_chat_add_json(c, m, NULL);
        cJSON_Delete(m);
    } else {
        muse_chat_add(c, next_role, next_content, NULL);
    }
    char *p2 = render(c, &o, true, &st);
    size_t n1 = strlen(p1), nc = strlen(completion);
    TEST_CONDF(st == MUSE_OK && strlen(p2) > n1 + nc && !memcmp(p2, p1, n1) && !memcmp(p2 + n1, completion, nc),
               "%s: next prompt extends prompt + completion\n%s", what, p2 ? p2 + (n1 > 40 ? n1 - 40 : 0) : "");
    free(p1);
    free(p2);
    muse_chat_free(c);
}

static void test_roundtrips(void) {
    roundtrip(" to=self<|message|>Easy.<|eom|><|start|>assistant to=user<|message|>It is sunny.<|eot|>", "user", "Thanks!",
              "reasoning + answer");
    roundtrip(" to=self<|message|>Need the tool.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
              "<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">Oslo</atem:parameter>\n"
              "<atem:parameter name=\"days\">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>",
              "tool", NULL, "tool call + result");
}

static void test_json_string_arguments_raise(void) {
    struct muse_chat *c;
    muse_chat_create(NULL, 0, &c, NULL);
    cJSON *m = cJSON_Parse("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", "
                           "\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}]}");
    muse_chat_add(c, "user", "x", NULL);
    muse_chat_add_json(c, m, NULL);
    cJSON_Delete(m);
    char *out = NULL;
    size_t len;
    struct muse_error err;
    muse_status st = muse_chat_render(c, NULL, false, &out, &len, &err);
    TEST_CONDF(st == MUSE_ERR_TEMPLATE && strstr(err.msg, "requires tool_call.function.arguments to be a dict"),
               "JSON-string arguments raise: %s", err.msg);
    free(out);
    struct muse_chat *bad = NULL;
    TEST_COND("a broken file template is a parse error", muse_chat_create("{% if %}", 8, &bad, &err) == MUSE_ERR_TEMPLATE && !bad);
    TEST_COND("non-object message refused", muse_chat_add_json(c, NULL, &err) == MUSE_ERR_INVALID_ARG);
    muse_chat_free(c);
    TEST_COND("common prefix", muse_chat_common_prefix("abcd", 4, "abxy", 4) == 2 && muse_chat_common_prefix("ab", 2, "ab", 2) == 2);
}

int main(void) {
    test_builtin_is_reference();
    test_spec_examples();
    test_roundtrips();
    test_json_string_arguments_raise();
    return TEST_REPORT();
}
