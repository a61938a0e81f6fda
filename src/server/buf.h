/* buf.h - a growable byte string for the server (always NUL-terminated when non-empty). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct muse_srv_buf {
    char *p;    /* [cap]; NULL until the first append */
    size_t len; /* bytes used, excluding the terminating NUL */
    size_t cap;
};

/* Append n bytes; false on allocation failure (the buffer is unchanged then). */
bool muse_srv_buf_append(struct muse_srv_buf *b, const char *s, size_t n);
/* Append a NUL-terminated string. */
bool muse_srv_buf_puts(struct muse_srv_buf *b, const char *s);
/* printf-style append. */
bool muse_srv_buf_printf(struct muse_srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Free the storage and reset to empty. */
void muse_srv_buf_free(struct muse_srv_buf *b);
/* The contents as a C string ("" when empty); valid until the next append. */
static inline const char *muse_srv_buf_str(const struct muse_srv_buf *b) { return b->p ? b->p : ""; }
