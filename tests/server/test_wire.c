/* test_wire.c - the server's request-head framing checks and the JSON lone-surrogate repair (wire.h). */
#include <string.h>

#include "server/wire.h"
#include "test.h"

#define MAXH 1024
#define MAXB 4096

static enum muse_srv_head_verdict check(const char *s, struct muse_srv_head *h) {
    return muse_srv_head_check(s, strlen(s), MAXH, MAXB, h);
}

static void heads(void) {
    struct muse_srv_head h;
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    TEST_COND("a plain GET", check(get, &h) == MUSE_SRV_HEAD_OK && h.head_len == strlen(get) && !h.has_length);
    TEST_COND("bare LF line ends", check("GET / HTTP/1.1\nHost: x\n\n", &h) == MUSE_SRV_HEAD_OK && h.head_len == 24);
    TEST_COND("body bytes after the head are not counted",
              check("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &h) == MUSE_SRV_HEAD_OK && h.has_length &&
                  h.content_length == 3 && h.head_len == 38);
    TEST_COND("leading empty lines are skipped", check("\r\n\r\nGET / HTTP/1.1\r\n\r\n", &h) == MUSE_SRV_HEAD_OK);
    /* the stalled client of issue 18: it never sends the empty line */
    TEST_COND("incomplete", check("GET /health HTTP/1.1\r\nHost: x\r\n", &h) == MUSE_SRV_HEAD_INCOMPLETE);
    TEST_COND("incomplete mid-line", check("GET /health HT", &h) == MUSE_SRV_HEAD_INCOMPLETE);
    TEST_COND("nothing yet", muse_srv_head_check("", 0, MAXH, MAXB, &h) == MUSE_SRV_HEAD_INCOMPLETE);

    static const struct {
        const char *cl;
        enum muse_srv_head_verdict want;
    } lengths[] = {
        {"1e20", MUSE_SRV_HEAD_BAD},
        {"-1", MUSE_SRV_HEAD_BAD},
        {"", MUSE_SRV_HEAD_BAD},
        {"0x10", MUSE_SRV_HEAD_BAD},
        {"5, 5", MUSE_SRV_HEAD_BAD},
        {"4096", MUSE_SRV_HEAD_OK},
        {"  7  ", MUSE_SRV_HEAD_OK},
        {"4097", MUSE_SRV_HEAD_BODY_TOO_LARGE},
        {"18446744073709551615", MUSE_SRV_HEAD_BODY_TOO_LARGE},
        {"18446744073709551616", MUSE_SRV_HEAD_BODY_TOO_LARGE},
        {"99999999999999999999999", MUSE_SRV_HEAD_BODY_TOO_LARGE},
    };
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n", lengths[i].cl);
        enum muse_srv_head_verdict v = check(buf, &h);
        TEST_CONDF(v == lengths[i].want, "Content-Length '%s': verdict %d, want %d", lengths[i].cl, v, lengths[i].want);
        if (v != MUSE_SRV_HEAD_OK) TEST_CONDF(h.why && h.why[0], "Content-Length '%s' has a reason", lengths[i].cl);
    }
    TEST_COND("the same length twice", check("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n", &h) == MUSE_SRV_HEAD_OK);
    TEST_COND("two different lengths", check("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", &h) == MUSE_SRV_HEAD_BAD);
    TEST_COND("chunked", check("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &h) == MUSE_SRV_HEAD_OK && h.chunked);
    TEST_COND("gzip transfer coding", check("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &h) == MUSE_SRV_HEAD_UNSUPPORTED);
    TEST_COND("both framings", check("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", &h) == MUSE_SRV_HEAD_BAD);
    TEST_COND("space before the colon", check("POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n", &h) == MUSE_SRV_HEAD_BAD);
    TEST_COND("a folded framing header", check("POST / HTTP/1.1\r\nContent-Length: 5\r\n 6\r\n\r\n", &h) == MUSE_SRV_HEAD_BAD);
    TEST_COND("a folded other header is the HTTP layer's business",
              check("GET / HTTP/1.1\r\nX-A: 5\r\n 6\r\n\r\n", &h) == MUSE_SRV_HEAD_OK);
    TEST_COND("a NUL byte", muse_srv_head_check("GET / HTTP/1.1\r\nX: \0\r\n\r\n", 22, MAXH, MAXB, &h) == MUSE_SRV_HEAD_BAD);

    char big[MAXH + 64];
    memset(big, 'a', sizeof big);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    TEST_COND("an endless head", muse_srv_head_check(big, MAXH, MAXH, MAXB, &h) == MUSE_SRV_HEAD_TOO_LARGE);
    memcpy(big + MAXH + 10, "\r\n\r\n", 4);
    TEST_COND("a head ending past the limit", muse_srv_head_check(big, MAXH + 14, MAXH, MAXB, &h) == MUSE_SRV_HEAD_TOO_LARGE);
    TEST_COND("a short peek of a long head is only incomplete", muse_srv_head_check(big, 100, MAXH, MAXB, &h) == MUSE_SRV_HEAD_INCOMPLETE);
}

static void fix(const char *in, const char *want, size_t want_fixed) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", in);
    size_t n = muse_srv_json_fix_surrogates(buf, strlen(buf));
    TEST_CONDF(!strcmp(buf, want) && n == want_fixed, "fix(%s) = %s (%zu), want %s (%zu)", in, buf, n, want, want_fixed);
}

static void surrogates(void) {
    fix("{\"a\":\"x\\ud800y\"}", "{\"a\":\"x\\ufffdy\"}", 1);
    fix("{\"a\":\"\\uDC00\"}", "{\"a\":\"\\ufffd\"}", 1);
    fix("{\"a\":\"\\ud83d\\ude00\"}", "{\"a\":\"\\ud83d\\ude00\"}", 0);          /* a valid pair */
    fix("{\"a\":\"\\ud83d\\u0041\"}", "{\"a\":\"\\ufffd\\u0041\"}", 1);          /* high + not low */
    fix("{\"a\":\"\\ud83d\\ud83d\\ude00\"}", "{\"a\":\"\\ufffd\\ud83d\\ude00\"}", 1);
    fix("{\"a\":\"\\\\ud800\"}", "{\"a\":\"\\\\ud800\"}", 0);                    /* an escaped backslash, then text */
    fix("{\"\\ud800\":1}", "{\"\\ufffd\":1}", 1);                                 /* keys are strings too */
    fix("{\"a\":\"\\\"\\ud800\"}", "{\"a\":\"\\\"\\ufffd\"}", 1);                /* after an escaped quote */
    fix("{\"a\":\"\\ud8\"}", "{\"a\":\"\\ud8\"}", 0);                             /* truncated: left to the parser */
    fix("\"\\ud800", "\"\\ufffd", 1);
    fix("ud800 \\ud800", "ud800 \\ud800", 0);                                     /* outside strings */
}

int main(void) {
    heads();
    surrogates();
    return TEST_REPORT();
}
