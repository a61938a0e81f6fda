/* test_channel.c - the server's Muse-Glimmer channel/ATEM parser and prompt-cache arithmetic. */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/channel.h"
#include "server/engine_iface.h"
#include "server/sched.h"
#include "test.h"

struct out {
    struct muse_srv_buf reasoning, content, calls; /* calls: "name args\n" per call */
    int n_content_events;
    bool leaked; /* a content/reasoning event carried part of a marker */
};

static void check_leak(struct out *o, const char *s, size_t n) {
    /* the bodies used below never contain '<' themselves, so any '<|' or '<atem' is a leak */
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<') o->leaked = true;
}
static void on_reasoning(void *ud, const char *s, size_t n) {
    struct out *o = ud;
    check_leak(o, s, n);
    muse_srv_buf_append(&o->reasoning, s, n);
}
static void on_content(void *ud, const char *s, size_t n) {
    struct out *o = ud;
    check_leak(o, s, n);
    o->n_content_events++;
    muse_srv_buf_append(&o->content, s, n);
}
static void on_tool(void *ud, const char *name, const char *args) {
    struct out *o = ud;
    muse_srv_buf_printf(&o->calls, "%s %s\n", name, args);
}

/* Parse text fed in pieces of `step` bytes (0 = all at once). */
static void run(const char *text, size_t step, bool parse, const cJSON *tools, struct out *o) {
    memset(o, 0, sizeof *o);
    struct muse_srv_channel *ch = muse_srv_channel_new(parse, tools, true);
    struct muse_srv_channel_sink sink = {o, on_reasoning, on_content, on_tool};
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) muse_srv_channel_feed(ch, text + i, i + step <= n ? step : n - i, &sink);
    muse_srv_channel_finish(ch, &sink);
    muse_srv_channel_free(ch);
}

static void out_free(struct out *o) {
    muse_srv_buf_free(&o->reasoning);
    muse_srv_buf_free(&o->content);
    muse_srv_buf_free(&o->calls);
}

/* Same result for every chunking from 1 byte to all at once. */
static void expect(const char *name, const char *text, bool parse, const cJSON *tools, const char *reasoning,
                   const char *content, const char *calls, bool leak_check) {
    size_t n = strlen(text);
    for (size_t step = 1; step <= n + 1; step += (step < 12 ? 1 : 7)) {
        struct out o;
        run(text, step == n + 1 ? 0 : step, parse, tools, &o);
        TEST_CONDF(!strcmp(muse_srv_buf_str(&o.reasoning), reasoning), "%s (step %zu): reasoning '%s', want '%s'", name,
                   step, muse_srv_buf_str(&o.reasoning), reasoning);
        TEST_CONDF(!strcmp(muse_srv_buf_str(&o.content), content), "%s (step %zu): content '%s', want '%s'", name, step,
                   muse_srv_buf_str(&o.content), content);
        TEST_CONDF(!strcmp(muse_srv_buf_str(&o.calls), calls), "%s (step %zu): calls '%s', want '%s'", name, step,
                   muse_srv_buf_str(&o.calls), calls);
        if (leak_check) TEST_CONDF(!o.leaked, "%s (step %zu): a marker leaked into text", name, step);
        out_free(&o);
        if (step > 40 && step < n) step = n; /* long texts: jump to all-at-once */
    }
}

int main(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"zip\":{\"type\":\"string\"},"
        "\"tags\":{\"type\":\"array\"}}}}}]");
    TEST_COND("tools json", tools != NULL);

    expect("reasoning then answer",
           " to=self<|message|>17*23 = 391.<|eom|><|start|>assistant to=user<|message|>It is 391.", true, tools,
           "17*23 = 391.", "It is 391.", "", true);
    expect("bare message is content", "<|message|>plain answer", true, NULL, "", "plain answer", "", true);
    expect("two reasoning blocks",
           " to=self<|message|>one<|eom|><|start|>assistant to=self<|message|>two<|eom|><|start|>assistant to=user<|message|>ok",
           true, NULL, "onetwo", "ok", "", true);
    /* a turn that opens with a tool call (llama.cpp #29240, omlx #2599); typed arguments */
    expect("direct tool call",
           " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_weather\">\n"
           "<atem:parameter name=\"city\">Paris</atem:parameter>\n<atem:parameter name=\"days\">3</atem:parameter>\n"
           "<atem:parameter name=\"zip\">75001</atem:parameter>\n<atem:parameter name=\"tags\">[\"a\", 1]</atem:parameter>\n"
           "</atem:invoke>\n</atem:function_calls>",
           true, tools, "", "", "get_weather {\"city\":\"Paris\",\"days\":3,\"zip\":\"75001\",\"tags\":[\"a\",1]}\n", true);
    /* a tool call after the answer's <|eom|> (llama.cpp PR #26879) and parallel calls */
    expect("answer then two calls",
           " to=self<|message|>think<|eom|><|start|>assistant to=user<|message|>Checking.<|eom|><|start|>assistant "
           "to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\"><atem:parameter "
           "name=\"city\">Oslo</atem:parameter></atem:invoke></atem:function_calls><|eom|><|start|>assistant "
           "to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\"><atem:parameter "
           "name=\"city\">Rome</atem:parameter></atem:invoke></atem:function_calls>",
           true, tools, "think", "Checking.",
           "get_weather {\"city\":\"Oslo\"}\nget_weather {\"city\":\"Rome\"}\n", true);
    /* spaces inside string values are kept; an unknown tool's numeric-looking value becomes a number */
    expect("unknown tool, untyped",
           " to=calc<|message|><atem:function_calls><atem:invoke name=\"calc\"><atem:parameter name=\"x\">42</atem:parameter>"
           "<atem:parameter name=\"s\">  two words </atem:parameter></atem:invoke></atem:function_calls>",
           true, tools, "", "", "calc {\"x\":42,\"s\":\"  two words \"}\n", true);
    /* malformed ATEM degrades to content, never an error (ExploitHunter #66) */
    {
        struct out o;
        run(" to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\"><atem:parameter=\"_background\">x"
            "</atem:parameter></atem:invoke></atem:function_calls>",
            3, true, tools, &o);
        TEST_COND("malformed ATEM: no tool call", o.calls.len == 0);
        TEST_COND("malformed ATEM: body kept as content", strstr(muse_srv_buf_str(&o.content), "_background") != NULL);
        out_free(&o);
    }
    /* an invoke echoed inside reasoning is reasoning text, not a call */
    {
        struct out o;
        run(" to=self<|message|>I could write <atem:invoke name=\"x\"> here<|eom|><|start|>assistant to=user<|message|>no",
            1, true, tools, &o);
        TEST_COND("invoke in reasoning: no call", o.calls.len == 0);
        TEST_COND("invoke in reasoning: stays reasoning",
                  !strcmp(muse_srv_buf_str(&o.reasoning), "I could write <atem:invoke name=\"x\"> here"));
        TEST_COND("invoke in reasoning: answer", !strcmp(muse_srv_buf_str(&o.content), "no"));
        out_free(&o);
    }
    /* tool_choice "none": the same message is content */
    {
        struct out o = {0};
        struct muse_srv_channel *ch = muse_srv_channel_new(true, tools, false);
        struct muse_srv_channel_sink sink = {&o, on_reasoning, on_content, on_tool};
        const char *t = " to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\">"
                        "</atem:invoke></atem:function_calls>";
        muse_srv_channel_feed(ch, t, strlen(t), &sink);
        muse_srv_channel_finish(ch, &sink);
        TEST_COND("calls disabled: no call", o.calls.len == 0);
        TEST_COND("calls disabled: content", strstr(muse_srv_buf_str(&o.content), "<atem:invoke") != NULL);
        muse_srv_channel_free(ch);
        out_free(&o);
    }
    /* headerless replies (JSON, digits) are content, verbatim (TensorSharp's content:null bug) */
    expect("headerless JSON", "{\"a\": 1}", true, NULL, "", "{\"a\": 1}", "", false);
    expect("headerless digits", "42 is the answer", true, NULL, "", "42 is the answer", "", false);
    /* raw mode: no parsing at all */
    expect("raw mode keeps headers", " to=self<|message|>x", false, NULL, "", " to=self<|message|>x", "", false);
    /* max_tokens mid-answer: held-back text that is not a marker is flushed at finish */
    expect("flush at finish", " to=user<|message|>a <|e", true, NULL, "", "a <|e", "", false);
    /* a tool call cut by max_tokens degrades to content */
    {
        struct out o;
        run(" to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\"><atem:param", 1, true,
            tools, &o);
        TEST_COND("cut tool call: no call", o.calls.len == 0);
        TEST_COND("cut tool call: content", strstr(muse_srv_buf_str(&o.content), "<atem:function_calls>") != NULL);
        out_free(&o);
    }
    /* streaming hold-back: after "hello <|eo" only "hello " may be out */
    {
        struct out o = {0};
        struct muse_srv_channel *ch = muse_srv_channel_new(true, NULL, true);
        struct muse_srv_channel_sink sink = {&o, on_reasoning, on_content, on_tool};
        const char *a = " to=user<|message|>hello <|eo";
        muse_srv_channel_feed(ch, a, strlen(a), &sink);
        TEST_CONDF(!strcmp(muse_srv_buf_str(&o.content), "hello "), "hold-back: got '%s'", muse_srv_buf_str(&o.content));
        muse_srv_channel_feed(ch, "m|>", 3, &sink);
        TEST_CONDF(!strcmp(muse_srv_buf_str(&o.content), "hello "), "after <|eom|>: got '%s'", muse_srv_buf_str(&o.content));
        muse_srv_channel_finish(ch, &sink);
        muse_srv_channel_free(ch);
        out_free(&o);
    }

    /* ATEM parser directly */
    char *name = NULL, *args = NULL;
    const char *ping = "<atem:function_calls><atem:invoke name=\"ping\"></atem:invoke></atem:function_calls>";
    TEST_COND("atem: no params",
              muse_srv_atem_parse(ping, strlen(ping), NULL, &name, &args) &&
                  !strcmp(name, "ping") && !strcmp(args, "{}"));
    free(name);
    free(args);
    const char *dup = "<atem:function_calls><atem:invoke name=\"f\"><atem:parameter name=\"a\">1</atem:parameter>"
                      "<atem:parameter name=\"a\">2</atem:parameter></atem:invoke></atem:function_calls>";
    TEST_COND("atem: duplicate parameter rejected", !muse_srv_atem_parse(dup, strlen(dup), NULL, &name, &args));
    const char *trail = "<atem:function_calls><atem:invoke name=\"f\"></atem:invoke></atem:function_calls>junk";
    TEST_COND("atem: trailing junk rejected", !muse_srv_atem_parse(trail, strlen(trail), NULL, &name, &args));

    /* prompt cache arithmetic */
    int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 9}, c[] = {7};
    TEST_COND("lcp partial", muse_srv_common_prefix(a, 5, b, 4) == 3);
    TEST_COND("lcp none", muse_srv_common_prefix(a, 5, c, 1) == 0);
    TEST_COND("lcp prefix", muse_srv_common_prefix(a, 3, a, 5) == 3);
    TEST_COND("swa: no window keeps all", muse_srv_swa_safe_keep(10000, 9000, 0, 0) == 9000);
    TEST_COND("swa: ring not wrapped", muse_srv_swa_safe_keep(4000, 100, 2048, 4352) == 100);
    /* wrapped ring of 4352 rows, window 2048: a rewind of up to 2303 positions is safe (TensorSharp) */
    TEST_COND("swa: rewind 2303 ok", muse_srv_swa_safe_keep(10000, 10000 - 2303, 2048, 4352) == 10000 - 2303);
    TEST_COND("swa: rewind 2304 restarts", muse_srv_swa_safe_keep(10000, 10000 - 2304, 2048, 4352) == 0);
    TEST_COND("swa: extending keeps all", muse_srv_swa_safe_keep(10000, 10000, 2048, 4352) == 10000);
    TEST_COND("swa: clamp", muse_srv_swa_safe_keep(50, 80, 2048, 4352) == 50);
    cJSON_Delete(tools);
    return TEST_REPORT();
}
