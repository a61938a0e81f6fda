/*
 * fuzz_server_wire.c - libFuzzer target for the server's checks of untrusted request bytes
 * (server/wire.h): the request-head framing check that runs on every new connection's peeked
 * bytes, and the lone-surrogate repair that runs on every JSON body before cJSON. Invariants: the
 * head check never reads past n and reports a head within the bytes and the limit; it decides the
 * same on any longer prefix once complete; the repair keeps the length, is idempotent, and never
 * turns JSON that cJSON accepts into JSON it rejects.
 */
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    size_t max_head = 64 + (size ? data[0] : 0) * 4;
    struct muse_srv_head h, h2;
    enum muse_srv_head_verdict v = muse_srv_head_check(p, size, max_head, 1u << 20, &h);
    if (v == MUSE_SRV_HEAD_OK) {
        if (h.head_len > size || h.head_len > max_head) abort();
        /* once complete, the bytes after the head (a body) never change the verdict */
        if (muse_srv_head_check(p, h.head_len, max_head, 1u << 20, &h2) != MUSE_SRV_HEAD_OK || h2.head_len != h.head_len)
            abort();
    } else if (v != MUSE_SRV_HEAD_INCOMPLETE && !h.why) {
        abort();
    }

    char *a = malloc(size + 1), *b = malloc(size + 1);
    if (!a || !b) abort();
    memcpy(a, data, size);
    a[size] = 0;
    muse_srv_json_fix_surrogates(a, size);
    memcpy(b, a, size + 1);
    if (muse_srv_json_fix_surrogates(b, size) != 0 || memcmp(a, b, size)) abort(); /* idempotent */
    cJSON *orig = cJSON_ParseWithLength(p, size);
    cJSON *fixed = cJSON_ParseWithLength(a, size);
    if (orig && !fixed) abort();
    cJSON_Delete(orig);
    cJSON_Delete(fixed);
    free(a);
    free(b);
    return 0;
}
