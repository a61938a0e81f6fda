/*
 * fuzz_jinja.c - libFuzzer target for the chat-template engine: the input is template source;
 * when it parses, it is rendered over a small conversation with tight limits. Any crash,
 * sanitizer report or hang is a bug (errors are fine). Seeds: tests/fuzz/seed_jinja.sh copies
 * the golden chat templates; tests/fuzz/seeds/jinja/ holds a few hand-written ones.
 */
#include <stdint.h>
#include <stdlib.h>

#include "text/jinja.h"

static const char context_json[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi \\u00e9\"}, {\"type\": \"image\"}]},"
    " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r\", \"tool_calls\": [{\"id\": \"c1\","
    " \"type\": \"function\", \"function\": {\"name\": \"ns.f\", \"arguments\": {\"a\": [1, 2.5, true, null], \"b\": \"x\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"ok\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"ns.f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"documents\": null}";

static cJSON *context;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!context) context = cJSON_Parse(context_json);
    struct muse_jinja_template *t = NULL;
    struct muse_error err;
    if (muse_jinja_parse((const char *)data, size, &t, &err) != MUSE_OK) return 0;
    struct muse_jinja_options o = {0};
    o.limits.max_depth = 64;
    o.limits.max_iterations = 20000;
    o.limits.max_output = 1 << 20;
    o.limits.max_memory = 64 << 20;
    o.now_set = true;
    o.now_year = 2026;
    o.now_month = 11;
    o.now_day = 29;
    char *out = NULL;
    size_t len;
    muse_jinja_render(t, context, &o, &out, &len, &err);
    free(out);
    muse_jinja_free(t);
    return 0;
}
