/*
 * test_output_parser.c - the Muse-Glimmer output parser against the traps checklist of
 * spec/tokenizer-and-chat.md section 6, each in batch mode and in streaming mode (fed 1, 2, 3, 5
 * and 11 bytes at a time). Streaming checks: the deltas add up to the batch result and, at every
 * moment, what was streamed is a prefix of the final text (so no partial marker or header ever
 * reached the client and was taken back).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/output_parser.h"
#include "test.h"

struct collect {
    char reasoning[8192], content[8192];
    size_t nr, nc;
    int calls;
    char names[4][64], args[4][512], ids[4][64];
    const char *want_reasoning, *want_content; /* for the prefix check; NULL = skip */
    bool prefix_ok;
};

static void on_event(void *user, const struct muse_output_event *ev) {
    struct collect *c = user;
    if (ev->kind == MUSE_OUTPUT_TOOL_CALL) {
        if (c->calls < 4) {
            snprintf(c->names[c->calls], 64, "%s", ev->name);
            snprintf(c->args[c->calls], 512, "%s", ev->arguments);
            snprintf(c->ids[c->calls], 64, "%s", ev->id);
        }
        c->calls++;
        return;
    }
    bool r = ev->kind == MUSE_OUTPUT_REASONING;
    char *dst = r ? c->reasoning : c->content;
    size_t *n = r ? &c->nr : &c->nc;
    if (*n + ev->len < sizeof(c->content)) {
        memcpy(dst + *n, ev->text, ev->len);
        *n += ev->len;
        dst[*n] = '\0';
    }
    const char *want = r ? c->want_reasoning : c->want_content;
    if (want && (strlen(want) < *n || memcmp(want, dst, *n) != 0)) c->prefix_ok = false;
}

struct expect {
    const char *name;
    const char *output;
    const char *reasoning;
    const char *content;
    int n_calls;
    const char *call_name[2];
    const char *call_args[2];
    bool ended;
};

static void run_one(const struct expect *e, const cJSON *tools, size_t chunk) {
    struct collect c = {.want_reasoning = e->reasoning, .want_content = e->content, .prefix_ok = true};
    struct muse_output_parser_params pp = {.tools = tools, .callback = on_event, .user = &c};
    struct muse_output_parser *p = NULL;
    struct muse_error err;
    TEST_COND("parser created", muse_output_parser_create(&pp, &p, &err) == MUSE_OK);
    if (!p) return;
    size_t n = strlen(e->output);
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        muse_output_parser_feed(p, e->output + i, k);
    }
    muse_output_parser_finish(p);
    size_t rl, cl;
    const char *r = muse_output_parser_reasoning(p, &rl), *ct = muse_output_parser_content(p, &cl);
    TEST_CONDF(!strcmp(r, e->reasoning), "%s (chunk %zu): reasoning '%s', want '%s'", e->name, chunk, r, e->reasoning);
    TEST_CONDF(!strcmp(ct, e->content), "%s (chunk %zu): content '%s', want '%s'", e->name, chunk, ct, e->content);
    TEST_CONDF(!strcmp(c.reasoning, r) && !strcmp(c.content, ct), "%s (chunk %zu): deltas do not add up", e->name, chunk);
    TEST_CONDF(c.prefix_ok, "%s (chunk %zu): streamed text was not a prefix of the result (leak)", e->name, chunk);
    TEST_CONDF(c.calls == e->n_calls, "%s (chunk %zu): %d tool calls, want %d", e->name, chunk, c.calls, e->n_calls);
    const cJSON *calls = muse_output_parser_tool_calls(p);
    TEST_CONDF(cJSON_GetArraySize(calls) == e->n_calls, "%s: result has %d calls", e->name, cJSON_GetArraySize(calls));
    for (int i = 0; i < e->n_calls && i < c.calls && i < 2; i++) {
        TEST_CONDF(!strcmp(c.names[i], e->call_name[i]), "%s: call %d name '%s', want '%s'", e->name, i, c.names[i], e->call_name[i]);
        TEST_CONDF(!strcmp(c.args[i], e->call_args[i]), "%s: call %d args %s, want %s", e->name, i, c.args[i], e->call_args[i]);
    }
    TEST_CONDF(muse_output_parser_turn_ended(p) == e->ended, "%s: turn_ended %d", e->name, muse_output_parser_turn_ended(p));
    const bool cut = strstr(e->name, "tool call cut") != NULL;
    TEST_CONDF(muse_output_parser_cut_tool_call(p) == cut, "%s: cut_tool_call %d", e->name, muse_output_parser_cut_tool_call(p));
    muse_output_parser_free(p);
}

#define ATEM1(fn, body) "<atem:function_calls>\n<atem:invoke name=\"" fn "\">\n" body "</atem:invoke>\n</atem:function_calls>"
#define PARAM(k, v) "<atem:parameter name=\"" k "\">" v "</atem:parameter>\n"

static const struct expect cases[] = {
    {"reasoning then answer",
     " to=self<|message|>17*23 = 391.<|eom|><|start|>assistant to=user<|message|>17 \xc3\x97 23 = **391**.<|eot|>",
     "17*23 = 391.", "17 \xc3\x97 23 = **391**.", 0, {0}, {0}, true},
    {"direct tool call without reasoning (llama.cpp #29240)",
     " to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Paris")) "<|eot|>",
     "", "", 1, {"get_weather"}, {"{\"city\":\"Paris\"}"}, true},
    {"tool call after <|eom|> following the answer (PR #26879)",
     " to=self<|message|>Need weather.<|eom|><|start|>assistant to=user<|message|>Let me check.<|eom|>"
     "<|start|>assistant to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Oslo")) "<|eot|>",
     "Need weather.", "Let me check.", 1, {"get_weather"}, {"{\"city\":\"Oslo\"}"}, true},
    {"parallel calls chained with <|eom|>",
     " to=self<|message|>Two things.<|eom|><|start|>assistant to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Oslo"))
     "<|eom|><|start|>assistant to=calendar.create_event<|message|>" ATEM1("calendar.create_event", PARAM("title", "Sync")) "<|eot|>",
     "Two things.", "", 2, {"get_weather", "calendar.create_event"}, {"{\"city\":\"Oslo\"}", "{\"title\":\"Sync\"}"}, true},
    {"header leaking into reasoning (osaurus #2354)",
     " to=self<|message|>I will call the tool. to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Rome")) "<|eot|>",
     "I will call the tool.", "", 1, {"get_weather"}, {"{\"city\":\"Rome\"}"}, true},
    {"headerless JSON reply (TensorSharp 422)", "{\"answer\": 42}<|eot|>", "", "{\"answer\": 42}", 0, {0}, {0}, true},
    {"headerless digit reply cut by max_tokens", "42 is the answer", "", "42 is the answer", 0, {0}, {0}, false},
    {"headerless text", "Hello there, friend.<|eot|>", "", "Hello there, friend.", 0, {0}, {0}, true},
    {"malformed parameter tag degrades to content (ExploitHunter #66)",
     " to=fn<|message|><atem:function_calls>\n<atem:invoke name=\"fn\">\n<atem:parameter=\"_background\">x</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>",
     "", "<atem:function_calls>\n<atem:invoke name=\"fn\">\n<atem:parameter=\"_background\">x</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
     0, {0}, {0}, true},
    {"max_tokens inside reasoning flushes it", " to=self<|message|>a long thought that never", "a long thought that never", "", 0, {0}, {0}, false},
    {"max_tokens on a partial marker flushes the held text", " to=user<|message|>partial answer <|eo", "", "partial answer <|eo", 0, {0}, {0}, false},
    {"invoke echoed inside reasoning is text",
     " to=self<|message|>Format: <atem:invoke name=\"x\"> ok<|eom|><|start|>assistant to=user<|message|>Done.<|eot|>",
     "Format: <atem:invoke name=\"x\"> ok", "Done.", 0, {0}, {0}, true},
    {"bare <|message|> answer", "<|message|>hi<|eot|>", "", "hi", 0, {0}, {0}, true},
    {"headerless ATEM call", ATEM1("get_weather", PARAM("city", "Paris")) "<|eot|>", "", "", 1, {"get_weather"}, {"{\"city\":\"Paris\"}"}, true},
    {"several reasoning blocks", " to=self<|message|>one <|eom|><|start|>assistant to=self<|message|>two<|eom|><|start|>assistant to=user<|message|>three<|eot|>",
     "one two", "three", 0, {0}, {0}, true},
    {"text that only looks like markers", " to=user<|message|>a <| b |> <|eomx to= c<|eot|>", "", "a <| b |> <|eomx to= c", 0, {0}, {0}, true},
    {"answer ending in <|end_of_text|>", " to=user<|message|>bye<|end_of_text|>", "", "bye", 0, {0}, {0}, true},
    /* a tool call cut by max_tokens is dropped: never markup in the content (issue 32 item 5) */
    {"tool call cut by max_tokens",
     " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:param",
     "", "", 0, {0}, {0}, false},
    {"headerless tool call cut by max_tokens", "<atem:function_calls>\n<atem:invoke name=\"get_weather\">", "", "", 0,
     {0}, {0}, false},
    {"answer, then a tool call cut by max_tokens",
     " to=user<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n<atem:inv",
     "", "Checking.", 0, {0}, {0}, false},
    /* complete but for its end marker (a stop string, max_tokens right after it): still a call */
    {"tool call without its end marker", " to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Paris")), "", "",
     1, {"get_weather"}, {"{\"city\":\"Paris\"}"}, false},
    /* streaming must decide headers exactly as batch does (found by fuzz_output_parser): */
    /* a header with a trailing word that starts with 't' after the recipient */
    {"header with a trailing t-word", " to=self tail<|message|>thought<|eom|><|start|>assistant to=user<|message|>ok<|eot|>",
     "thought", "ok", 0, {0}, {0}, true},
    /* "to=" glued to earlier text is no header, even when that text was already streamed */
    {"to= glued to a word is text", "Reply:x\"to=user<|message|>ok<|eot|>", "", "Reply:x\"to=userok", 0, {0}, {0}, true},
    /* "assistant to=user" after text is the next message's header, with the blanks before it */
    {"role word and header after text", "Sure. assistant to=user<|message|>ok<|eot|>", "", "Sure.ok", 0, {0}, {0}, true},
};

static void test_typed_arguments(void) {
    const char *tools_json =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"},\"year\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
        "\"include_hourly\":{\"type\":\"boolean\"},\"tags\":{\"type\":\"array\"},\"when\":{\"type\":\"object\"},"
        "\"location\":{\"type\":[\"string\",\"null\"]},\"big\":{\"type\":\"integer\"}}}}}]";
    cJSON *tools = cJSON_Parse(tools_json);
    struct expect e = {
        "typed arguments with a schema",
        " to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "  Oslo ") PARAM("year", "2026") PARAM("days", "2")
                                           PARAM("include_hourly", "true") PARAM("tags", "[\"work\", \"weekly\"]")
                                           PARAM("when", "{\"date\": \"2026-12-01\", \"duration_minutes\": 30}")
                                           PARAM("location", "null") PARAM("big", "9007199254740993")) "<|eot|>",
        "", "", 1, {"get_weather"},
        {"{\"city\":\"  Oslo \",\"year\":\"2026\",\"days\":2,\"include_hourly\":true,\"tags\":[\"work\", \"weekly\"],"
         "\"when\":{\"date\": \"2026-12-01\", \"duration_minutes\": 30},\"location\":\"null\",\"big\":9007199254740993}"},
        true};
    run_one(&e, tools, 1000);
    run_one(&e, tools, 1);
    /* without a schema: JSON-looking values are typed, the rest are strings */
    struct expect u = {
        "untyped arguments",
        " to=f<|message|>" ATEM1("f", PARAM("n", "2") PARAM("s", "  2 ") PARAM("b", "false") PARAM("t", "hello world")
                                 PARAM("l", "[1, 2]") PARAM("q", "\"quoted\"")) "<|eot|>",
        "", "", 1, {"f"}, {"{\"n\":2,\"s\":\"  2 \",\"b\":false,\"t\":\"hello world\",\"l\":[1, 2],\"q\":\"\\\"quoted\\\"\"}"}, true};
    run_one(&u, NULL, 1000);
    /* the arguments are valid JSON */
    char *name = NULL, *args = NULL;
    const char *body = ATEM1("get_weather", PARAM("tags", "[\"a\"]") PARAM("days", "3"));
    TEST_COND("atem parse ok", muse_atem_parse(body, strlen(body), tools, &name, &args) == MUSE_OK);
    cJSON *parsed = args ? cJSON_Parse(args) : NULL;
    TEST_COND("arguments parse as JSON", parsed && cJSON_IsArray(cJSON_GetObjectItem(parsed, "tags")) &&
                                              cJSON_GetObjectItem(parsed, "days")->valueint == 3);
    cJSON_Delete(parsed);
    free(name);
    free(args);
    /* a function the tools array does not describe: JSON-looking values are typed, spaces kept */
    struct expect unknown = {
        "unknown tool beside a schema",
        " to=calc<|message|>" ATEM1("calc", PARAM("x", "42") PARAM("s", "  two words ")) "<|eot|>",
        "", "", 1, {"calc"}, {"{\"x\":42,\"s\":\"  two words \"}"}, true};
    run_one(&unknown, tools, 1000);
    run_one(&unknown, tools, 3);
    const char *bad[] = {
        "<atem:function_calls>\n<atem:invoke name=\"f\">\n",  /* truncated */
        "<atem:invoke name=\"f\"></atem:invoke>",             /* no function_calls */
        ATEM1("f", PARAM("k", "v")) "trailing",                 /* junk after */
        "<atem:function_calls><atem:invoke name=\"\"></atem:invoke></atem:function_calls>", /* empty name */
        ATEM1("f", PARAM("a", "1") PARAM("a", "2")),          /* a parameter twice: ambiguous */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        name = args = NULL;
        TEST_CONDF(muse_atem_parse(bad[i], strlen(bad[i]), NULL, &name, &args) == MUSE_ERR_FORMAT, "bad ATEM %zu rejected", i);
        TEST_COND("no outputs on failure", !name && !args);
    }
    cJSON_Delete(tools);
}

static void test_token_mode(void) {
    /* with token ids, only special tokens are markers: literal "<|eot|>" text stays content */
    struct collect c = {.prefix_ok = true};
    struct muse_output_parser_params pp = {.callback = on_event, .user = &c, .id_prefix = "call_t7_", .first_call_index = 5};
    struct muse_output_parser *p;
    TEST_COND("create", muse_output_parser_create(&pp, &p, NULL) == MUSE_OK);
    struct { const char *t; bool sp; } toks[] = {
        {" to", false}, {"=user", false}, {"<|message|>", true}, {"write ", false}, {"<|eot|>", false},
        {" literally", false}, {"<|eom|>", true}, {"<|start|>", true}, {"assistant", false}, {" to=f", false},
        {"<|message|>", true}, {ATEM1("f", PARAM("a", "1")), false}, {"<|eot|>", true}, {"ignored after the turn", false},
    };
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++)
        muse_output_parser_feed_token(p, toks[i].t, strlen(toks[i].t), toks[i].sp);
    muse_output_parser_finish(p);
    TEST_CONDF(!strcmp(muse_output_parser_content(p, NULL), "write <|eot|> literally"), "token mode content '%s'", muse_output_parser_content(p, NULL));
    TEST_COND("token mode: one call", c.calls == 1 && !strcmp(c.args[0], "{\"a\":1}"));
    TEST_CONDF(!strcmp(c.ids[0], "call_t7_5"), "call id '%s' uses the prefix and first index", c.ids[0]);
    TEST_COND("turn ended", muse_output_parser_turn_ended(p));
    muse_output_parser_free(p);
}

static void test_raw_mode(void) {
    struct muse_output_parser_params pp = {.raw = true};
    struct muse_output_parser *p;
    TEST_COND("create raw", muse_output_parser_create(&pp, &p, NULL) == MUSE_OK);
    const char *out = " to=self<|message|>r<|eom|><|start|>assistant to=user<|message|>c<|eot|>";
    muse_output_parser_feed(p, out, strlen(out));
    muse_output_parser_finish(p);
    TEST_CONDF(!strcmp(muse_output_parser_content(p, NULL), " to=self<|message|>r<|eom|><|start|>assistant to=user<|message|>c"),
               "raw mode keeps headers verbatim: '%s'", muse_output_parser_content(p, NULL));
    TEST_COND("raw mode: no reasoning", muse_output_parser_reasoning(p, NULL)[0] == '\0');
    muse_output_parser_free(p);
}

static void test_garbage(void) {
    /* arbitrary bytes never crash and never lose text into nowhere silently beyond markers */
    unsigned seed = 12345;
    const char *pieces[] = {"<|", "start|>", "<|message|>", "<|eom|>", "<|eot|>", " to=", "self", "user", "fn",
                            "<atem:function_calls>", "<atem:invoke name=\"f\">", "</atem:invoke>", "x", "\n", "<", "|>"};
    for (int round = 0; round < 300; round++) {
        struct muse_output_parser *p;
        if (muse_output_parser_create(NULL, &p, NULL) != MUSE_OK) break;
        for (int k = 0; k < 40; k++) {
            seed = seed * 1103515245u + 12345u;
            const char *s = pieces[(seed >> 16) % (sizeof(pieces) / sizeof(pieces[0]))];
            muse_output_parser_feed(p, s, strlen(s));
        }
        muse_output_parser_finish(p);
        muse_output_parser_free(p);
    }
    TEST_COND("random marker soup survived", true);
}

/* tool_choice "none" (the server): calls are content, streamed; reasoning is still extracted */
static void test_no_tool_calls(void) {
    static const char out[] =
        " to=self<|message|>Use the tool.<|eom|><|start|>assistant to=get_weather<|message|>" ATEM1("get_weather", PARAM("city", "Oslo")) "<|eot|>";
    static const char headerless[] = ATEM1("get_weather", PARAM("city", "Oslo")) "<|eot|>";
    static const size_t chunks[] = {100000, 1, 4};
    for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
        for (int h = 0; h < 2; h++) {
            const char *text = h ? headerless : out;
            const char *want_c = ATEM1("get_weather", PARAM("city", "Oslo"));
            struct collect c = {.want_reasoning = h ? "" : "Use the tool.", .want_content = want_c, .prefix_ok = true};
            struct muse_output_parser_params pp = {.no_tool_calls = true, .callback = on_event, .user = &c};
            struct muse_output_parser *p;
            if (muse_output_parser_create(&pp, &p, NULL) != MUSE_OK) return;
            size_t n = strlen(text);
            for (size_t i = 0; i < n; i += chunks[k]) muse_output_parser_feed(p, text + i, n - i < chunks[k] ? n - i : chunks[k]);
            /* before the end: the call's text already streamed as content (nothing waits for a call) */
            TEST_CONDF(c.nc == strlen(want_c), "calls off (%s, chunk %zu): %zu content bytes streamed before finish",
                       h ? "headerless" : "header", chunks[k], c.nc);
            muse_output_parser_finish(p);
            TEST_CONDF(c.calls == 0 && cJSON_GetArraySize(muse_output_parser_tool_calls(p)) == 0,
                       "calls off (%s, chunk %zu): no call", h ? "headerless" : "header", chunks[k]);
            TEST_CONDF(!strcmp(muse_output_parser_content(p, NULL), want_c) && c.prefix_ok,
                       "calls off (%s, chunk %zu): content '%s'", h ? "headerless" : "header", chunks[k], muse_output_parser_content(p, NULL));
            TEST_CONDF(!strcmp(muse_output_parser_reasoning(p, NULL), h ? "" : "Use the tool."),
                       "calls off (%s, chunk %zu): reasoning kept", h ? "headerless" : "header", chunks[k]);
            muse_output_parser_free(p);
        }
    }
}

/* What has been streamed at each moment: a partial marker is held, and flushed at finish. */
static void test_holdback(void) {
    struct collect c = {.prefix_ok = true};
    struct muse_output_parser_params pp = {.callback = on_event, .user = &c};
    struct muse_output_parser *p;
    if (muse_output_parser_create(&pp, &p, NULL) != MUSE_OK) return;
    const char *a = " to=user<|message|>hello <|eo";
    muse_output_parser_feed(p, a, strlen(a));
    TEST_CONDF(!strcmp(c.content, "hello"), "hold-back: '%s' streamed after a partial <|eom|>", c.content);
    muse_output_parser_feed(p, "m|><|start|>assistant to", 24);
    TEST_CONDF(!strcmp(c.content, "hello "), "after <|eom|>: '%s'", c.content);
    muse_output_parser_feed(p, "=user<|message|>world <atem:func", 32);
    /* inside an answer an ATEM tag is text (spec 4.3), so it streams at once */
    TEST_CONDF(!strcmp(c.content, "hello world <atem:func"), "ATEM text in an answer streams: '%s'", c.content);
    muse_output_parser_feed(p, " to=", 4);
    TEST_CONDF(!strcmp(c.content, "hello world <atem:func"), "a possible header is held: '%s'", c.content);
    muse_output_parser_finish(p); /* max_tokens: flush */
    TEST_CONDF(!strcmp(c.content, "hello world <atem:func to="), "finish flushes held text: '%s'", c.content);
    TEST_COND("cut off: turn not ended", !muse_output_parser_turn_ended(p));
    muse_output_parser_free(p);
}

/* Parallel calls get consecutive ids under one prefix; another prefix gives other ids. */
static void test_call_ids(void) {
    const char *out = " to=f<|message|>" ATEM1("f", "") "<|eom|><|start|>assistant to=g<|message|>" ATEM1("g", "") "<|eot|>";
    const char *want[2][2] = {{"call_00000000000000a1_0", "call_00000000000000a1_1"}, {"call_00000000000000a2_0", "call_00000000000000a2_1"}};
    const char *prefixes[2] = {"call_00000000000000a1_", "call_00000000000000a2_"};
    for (int k = 0; k < 2; k++) {
        struct collect c = {.prefix_ok = true};
        struct muse_output_parser_params pp = {.id_prefix = prefixes[k], .callback = on_event, .user = &c};
        struct muse_output_parser *p;
        if (muse_output_parser_create(&pp, &p, NULL) != MUSE_OK) return;
        muse_output_parser_feed(p, out, strlen(out));
        muse_output_parser_finish(p);
        TEST_CONDF(c.calls == 2 && !strcmp(c.ids[0], want[k][0]) && !strcmp(c.ids[1], want[k][1]) &&
                       !strcmp(c.names[0], "f") && !strcmp(c.names[1], "g") && !strcmp(c.args[0], "{}"),
                   "ids %s %s", c.ids[0], c.ids[1]);
        const cJSON *calls = muse_output_parser_tool_calls(p);
        const cJSON *id1 = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "id");
        TEST_COND("result ids match the events", cJSON_IsString(id1) && !strcmp(id1->valuestring, want[k][1]));
        muse_output_parser_free(p);
    }
}

int main(void) {
    /* a name or key with a NUL byte is malformed, not a call named by its prefix (fuzz_output_parser) */
    {
        static const char nul_name[] = "<atem:function_calls><atem:invoke name=\"\0)f\"></atem:invoke></atem:function_calls>";
        static const char nul_key[] = "<atem:function_calls><atem:invoke name=\"f\"><atem:parameter name=\"a\0b\">1"
                                      "</atem:parameter></atem:invoke></atem:function_calls>";
        char *nm = NULL, *args = NULL;
        TEST_COND("NUL in a function name refused",
                  muse_atem_parse(nul_name, sizeof nul_name - 1, NULL, &nm, &args) == MUSE_ERR_FORMAT && !nm && !args);
        TEST_COND("NUL in a parameter name refused",
                  muse_atem_parse(nul_key, sizeof nul_key - 1, NULL, &nm, &args) == MUSE_ERR_FORMAT && !nm && !args);
    }

    static const size_t chunks[] = {100000, 1, 2, 3, 5, 11};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) run_one(&cases[i], NULL, chunks[k]);
    test_typed_arguments();
    test_token_mode();
    test_raw_mode();
    test_no_tool_calls();
    test_holdback();
    test_call_ids();
    test_garbage();
    return TEST_REPORT();
}
