/*
 * fuzz_output_parser.c - libFuzzer target for the engine's output parser (text/output_parser.h),
 * which sees untrusted model output in `muse chat` and `muse serve`. Arbitrary text must never
 * crash it; the result must not depend on how the text is split (input[0] picks the chunk size,
 * the rest is the text); every tool call carries a JSON object and an id with the given prefix;
 * with tool calls off no call is ever emitted. Also runs the ATEM parser on the raw bytes.
 */
#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/output_parser.h"

struct buf {
    char *d;
    size_t n, cap;
};

struct out {
    struct buf r, c, t; /* reasoning, content, tool calls (name + arguments each) */
    int calls;
};

static void put(struct buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *d = realloc(b->d, cap);
        if (!d) abort();
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
}

static void on_event(void *user, const struct muse_output_event *ev) {
    struct out *o = user;
    if (ev->kind == MUSE_OUTPUT_TOOL_CALL) {
        cJSON *js = cJSON_Parse(ev->arguments);
        if (!cJSON_IsObject(js)) abort(); /* arguments are always a JSON object */
        cJSON_Delete(js);
        if (strncmp(ev->id, "fz_", 3) != 0 || !ev->name[0]) abort();
        o->calls++;
        put(&o->t, ev->name, strlen(ev->name) + 1);
        put(&o->t, ev->arguments, strlen(ev->arguments) + 1);
        return;
    }
    put(ev->kind == MUSE_OUTPUT_REASONING ? &o->r : &o->c, ev->text, ev->len);
}

static bool same(const struct buf *a, const struct buf *b) {
    return a->n == b->n && (!a->n || !memcmp(a->d, b->d, a->n));
}

static void run(const char *text, size_t n, size_t step, bool no_calls, struct out *o) {
    struct muse_output_parser_params pp = {.no_tool_calls = no_calls, .id_prefix = "fz_", .callback = on_event, .user = o};
    struct muse_output_parser *p = NULL;
    if (muse_output_parser_create(&pp, &p, NULL) != MUSE_OK) return;
    for (size_t i = 0; i < n; i += step) muse_output_parser_feed(p, text + i, i + step <= n ? step : n - i);
    muse_output_parser_finish(p);
    if (cJSON_GetArraySize(muse_output_parser_tool_calls(p)) != o->calls) abort();
    muse_output_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t step = (size_t)(data[0] % 16) + 1;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    struct out a = {0}, b = {0}, c = {0};
    run(text, n, n ? n : 1, false, &a);
    run(text, n, step, false, &b);
    run(text, n, step, true, &c);
    if (!same(&a.r, &b.r) || !same(&a.c, &b.c) || !same(&a.t, &b.t)) abort();
    if (c.calls != 0) abort(); /* tool calls off: never a call */
    char *name = NULL, *args = NULL;
    muse_atem_parse(text, n, NULL, &name, &args);
    free(name);
    free(args);
    struct out *all[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) free(all[i]->r.d), free(all[i]->c.d), free(all[i]->t.d);
    return 0;
}
