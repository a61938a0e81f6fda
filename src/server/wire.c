/* wire.c - request-head framing checks and the JSON lone-surrogate repair (contract: wire.h). */
#include "server/wire.h"

#include <string.h>
#include <strings.h>

static bool name_is(const char *name, size_t len, const char *want) {
    return len == strlen(want) && !strncasecmp(name, want, len);
}

static void trim(const char **s, size_t *len) {
    while (*len && (**s == ' ' || **s == '\t')) (*s)++, (*len)--;
    while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t')) (*len)--;
}

static enum muse_srv_head_verdict verdict(struct muse_srv_head *out, enum muse_srv_head_verdict v, const char *why) {
    out->why = why;
    return v;
}

enum muse_srv_head_verdict muse_srv_head_check(const char *p, size_t n, size_t max_head, uint64_t max_body,
                                               struct muse_srv_head *out) {
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < n && i < max_head && (p[i] == '\r' || p[i] == '\n')) i++; /* empty lines before the request line */
    bool first = true, te_seen = false;
    int prev = 0; /* the previous header line: 0 other, 1 a framing header (an obs-fold may not continue it) */
    for (;;) {
        size_t j = i;
        while (j < n && p[j] != '\n') {
            if (!p[j]) return verdict(out, MUSE_SRV_HEAD_BAD, "a NUL byte in the request head");
            j++;
        }
        if (j >= n) {
            if (n >= max_head) return verdict(out, MUSE_SRV_HEAD_TOO_LARGE, "the request head is too large");
            return verdict(out, MUSE_SRV_HEAD_INCOMPLETE, NULL);
        }
        if (j + 1 > max_head) return verdict(out, MUSE_SRV_HEAD_TOO_LARGE, "the request head is too large");
        const char *line = p + i;
        size_t len = j - i;
        if (len && line[len - 1] == '\r') len--;
        i = j + 1;
        if (!len) {
            if (first) continue; /* only reached when max_head cut the leading empty lines: read on */
            break;
        }
        if (first) {
            first = false;
            continue; /* the request line is the HTTP layer's to judge */
        }
        if (line[0] == ' ' || line[0] == '\t') {
            if (prev) return verdict(out, MUSE_SRV_HEAD_BAD, "a framing header continued on a folded line");
            continue;
        }
        const char *colon = memchr(line, ':', len);
        prev = 0;
        if (!colon) continue;
        size_t name_len = (size_t)(colon - line);
        if (memchr(line, ' ', name_len) || memchr(line, '\t', name_len))
            return verdict(out, MUSE_SRV_HEAD_BAD, "whitespace in a header name");
        const char *v = colon + 1;
        size_t vlen = len - name_len - 1;
        trim(&v, &vlen);
        if (name_is(line, name_len, "content-length")) {
            prev = 1;
            if (!vlen) return verdict(out, MUSE_SRV_HEAD_BAD, "an empty Content-Length");
            uint64_t x = 0;
            bool overflow = false;
            for (size_t k = 0; k < vlen; k++) {
                if (v[k] < '0' || v[k] > '9') return verdict(out, MUSE_SRV_HEAD_BAD, "Content-Length is not a decimal number");
                unsigned d = (unsigned)(v[k] - '0');
                if (x > (UINT64_MAX - d) / 10) overflow = true;
                else x = x * 10 + d;
            }
            if (overflow) return verdict(out, MUSE_SRV_HEAD_BODY_TOO_LARGE, "Content-Length is larger than any body");
            if (out->has_length && out->content_length != x)
                return verdict(out, MUSE_SRV_HEAD_BAD, "two different Content-Length values");
            out->has_length = true;
            out->content_length = x;
        } else if (name_is(line, name_len, "transfer-encoding")) {
            prev = 1;
            if (vlen != 7 || strncasecmp(v, "chunked", 7))
                return verdict(out, MUSE_SRV_HEAD_UNSUPPORTED, "only Transfer-Encoding: chunked is supported");
            if (te_seen) return verdict(out, MUSE_SRV_HEAD_BAD, "Transfer-Encoding given twice");
            te_seen = true;
            out->chunked = true;
        }
    }
    if (out->chunked && out->has_length)
        return verdict(out, MUSE_SRV_HEAD_BAD, "both Content-Length and Transfer-Encoding");
    if (out->has_length && out->content_length > max_body)
        return verdict(out, MUSE_SRV_HEAD_BODY_TOO_LARGE, "the request body is larger than --max-body");
    out->head_len = i;
    return MUSE_SRV_HEAD_OK;
}

/* The value of 4 hex digits at p (n >= 4), or -1. */
static long hex4(const char *p) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

size_t muse_srv_json_fix_surrogates(char *p, size_t n) {
    size_t fixed = 0;
    bool in_string = false;
    for (size_t i = 0; i < n;) {
        if (!in_string) {
            in_string = p[i] == '"';
            i++;
            continue;
        }
        if (p[i] == '"') {
            in_string = false;
            i++;
            continue;
        }
        if (p[i] != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n) break;
        if (p[i + 1] != 'u' || i + 6 > n) {
            i += 2; /* \" \\ \n ... (or a truncated \u, left for the parser to reject) */
            continue;
        }
        long v = hex4(p + i + 2);
        if (v >= 0xd800 && v <= 0xdbff && i + 12 <= n && p[i + 6] == '\\' && p[i + 7] == 'u') {
            long lo = hex4(p + i + 8);
            if (lo >= 0xdc00 && lo <= 0xdfff) {
                i += 12; /* a valid pair */
                continue;
            }
        }
        if (v >= 0xd800 && v <= 0xdfff) {
            memcpy(p + i + 2, "fffd", 4);
            fixed++;
        }
        i += 6;
    }
    return fixed;
}
