/* buf.c - growable byte strings. */
#include "server/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool muse_srv_buf_append(struct muse_srv_buf *b, const char *s, size_t n) {
    if (n > ((size_t)-1) / 2 - b->len - 1) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool muse_srv_buf_puts(struct muse_srv_buf *b, const char *s) { return muse_srv_buf_append(b, s, strlen(s)); }

bool muse_srv_buf_printf(struct muse_srv_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return muse_srv_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = muse_srv_buf_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void muse_srv_buf_free(struct muse_srv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
