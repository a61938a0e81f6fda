/*
 * wire.h - checks of untrusted request bytes that the server does itself, before libmicrohttpd or
 * cJSON sees them: the request head's framing (gate.c runs it on the bytes it peeked, so that a
 * malformed Content-Length gets one clean answer instead of libmicrohttpd 0.9.75's doubled error
 * block) and the repair of lone UTF-16 surrogate escapes in JSON text (cJSON rejects "\ud800").
 * Pure functions: no I/O, no allocation; fuzzed by tests/fuzz/fuzz_server_wire.c.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum muse_srv_head_verdict {
    MUSE_SRV_HEAD_INCOMPLETE = 0, /* the header block has not ended yet: read more */
    MUSE_SRV_HEAD_OK,             /* complete, framing acceptable: hand it to the HTTP layer */
    MUSE_SRV_HEAD_BAD,            /* 400: malformed framing (Content-Length, both framings, NUL...) */
    MUSE_SRV_HEAD_TOO_LARGE,      /* 431: the header block is longer than max_head */
    MUSE_SRV_HEAD_BODY_TOO_LARGE, /* 413: Content-Length above max_body (or above 2^64) */
    MUSE_SRV_HEAD_UNSUPPORTED,    /* 501: a Transfer-Encoding other than "chunked" */
};

struct muse_srv_head {
    size_t head_len;         /* bytes of the header block, its empty line included (OK only) */
    bool chunked;            /* Transfer-Encoding: chunked */
    bool has_length;         /* a Content-Length was given */
    uint64_t content_length; /* its value (has_length) */
    const char *why;         /* a static one-line reason for any verdict but OK/INCOMPLETE */
};

/*
 * Look at the first n bytes a client sent on a new connection. Lines end in CRLF or LF; the block
 * ends at the first empty line after the request line. Only the framing headers are judged
 * (Content-Length: 1*DIGIT, repeated only with the same value; Transfer-Encoding: "chunked"; never
 * both; no NUL byte in the block); everything else is left to the HTTP layer. A block not ended
 * within max_head bytes is TOO_LARGE. *out is always written.
 */
enum muse_srv_head_verdict muse_srv_head_check(const char *p, size_t n, size_t max_head, uint64_t max_body,
                                               struct muse_srv_head *out);

/*
 * Rewrite, in place, every \uXXXX escape inside a JSON string that is a lone UTF-16 surrogate (a
 * high one not followed by a \u low one, or a low one on its own) to \ufffd (U+FFFD), as RFC 8259
 * readers such as Python's do. Same length, so the text stays where it is; valid pairs and every
 * other byte are untouched. Returns how many escapes were rewritten. Malformed JSON stays malformed.
 */
size_t muse_srv_json_fix_surrogates(char *p, size_t n);
