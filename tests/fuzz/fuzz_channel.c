/*
 * fuzz_channel.c - libFuzzer target for the server's output parser (src/server/channel.c), which
 * sees untrusted model output: arbitrary text must never crash it, and the result must not depend
 * on how the text is split into chunks (input[0] picks the chunk size; the rest is the text).
 * Also runs the ATEM tool-call parser on the raw bytes.
 */
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/channel.h"

struct out {
    struct muse_srv_buf r, c, t;
};

static void on_r(void *ud, const char *s, size_t n) { muse_srv_buf_append(&((struct out *)ud)->r, s, n); }
static void on_c(void *ud, const char *s, size_t n) { muse_srv_buf_append(&((struct out *)ud)->c, s, n); }
static void on_t(void *ud, const char *name, const char *args) {
    struct out *o = ud;
    muse_srv_buf_puts(&o->t, name);
    muse_srv_buf_puts(&o->t, args);
    cJSON *js = cJSON_Parse(args);
    if (!cJSON_IsObject(js)) abort(); /* arguments are always a JSON object */
    cJSON_Delete(js);
}

static void run(const char *text, size_t n, size_t step, struct out *o) {
    struct muse_srv_channel *ch = muse_srv_channel_new(true, NULL, true);
    struct muse_srv_channel_sink sink = {o, on_r, on_c, on_t};
    for (size_t i = 0; i < n; i += step) muse_srv_channel_feed(ch, text + i, i + step <= n ? step : n - i, &sink);
    muse_srv_channel_finish(ch, &sink);
    muse_srv_channel_free(ch);
}

static int same(const struct muse_srv_buf *a, const struct muse_srv_buf *b) {
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t step = (size_t)(data[0] % 16) + 1;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    struct out a = {0}, b = {0};
    run(text, n, n ? n : 1, &a);
    run(text, n, step, &b);
    if (!same(&a.r, &b.r) || !same(&a.c, &b.c) || !same(&a.t, &b.t)) abort();
    char *name = NULL, *args = NULL;
    muse_srv_atem_parse(text, n, NULL, &name, &args);
    free(name);
    free(args);
    muse_srv_buf_free(&a.r), muse_srv_buf_free(&a.c), muse_srv_buf_free(&a.t);
    muse_srv_buf_free(&b.r), muse_srv_buf_free(&b.c), muse_srv_buf_free(&b.t);
    return 0;
}
