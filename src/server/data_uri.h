/*
 * data_uri.h - the bytes of a base64 `data:` URI (RFC 2397), as OpenAI clients send images in
 * image_url content parts. Untrusted input: fuzzed by tests/fuzz/fuzz_data_uri.c.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "muse.h"

/*
 * Decode url = "data:[<mediatype>][;params];base64,<payload>" (the payload in the standard or the
 * URL-safe alphabet, '=' padding optional, ASCII whitespace skipped). On success *bytes is a
 * malloc'd buffer of *n bytes (the caller frees it). Errors, one line each: MUSE_ERR_UNSUPPORTED
 * (an http(s) URL: nothing is fetched; another scheme; a data: URI that is not base64),
 * MUSE_ERR_FORMAT (a character outside base64, data after the padding), MUSE_ERR_NOMEM.
 */
muse_status muse_srv_data_uri_decode(const char *url, uint8_t **bytes, size_t *n, struct muse_error *err);
