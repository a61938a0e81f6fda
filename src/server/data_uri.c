/* data_uri.c - base64 data: URIs (data_uri.h). */
#include "server/data_uri.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static int b64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

muse_status muse_srv_data_uri_decode(const char *url, uint8_t **bytes, size_t *n, struct muse_error *err) {
    *bytes = NULL;
    *n = 0;
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "remote image URLs are not fetched (this server fetches nothing): send the image inline "
                              "as a data: URI (data:image/png;base64,...)");
    const char *comma = strncmp(url, "data:", 5) ? NULL : strchr(url, ',');
    if (!comma)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "image_url.url must be a data: URI (data:image/png;base64,...)");
    if (comma - url < 12 || memcmp(comma - 7, ";base64", 7))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "the data: URI must be base64 (data:image/png;base64,...)");
    const char *s = comma + 1;
    const size_t len = strlen(s);
    uint8_t *out = malloc(len / 4 * 3 + 3);
    if (!out) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %zu-byte data: URI", len);
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0, i = 0;
    for (; i < len && s[i] != '='; i++) {
        if (is_space(s[i])) continue;
        const int v = b64_value(s[i]);
        if (v < 0) {
            free(out);
            return muse_error_set(err, MUSE_ERR_FORMAT, "the data: URI is not valid base64 (byte %zu)", i);
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    for (; i < len; i++)
        if (s[i] != '=' && !is_space(s[i])) {
            free(out);
            return muse_error_set(err, MUSE_ERR_FORMAT, "the data: URI is not valid base64 (data after the padding)");
        }
    *bytes = out;
    *n = o;
    return MUSE_OK;
}
