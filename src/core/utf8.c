/* utf8.c - well-formed UTF-8 (utf8.h). */
#include "core/utf8.h"

int muse_utf8_seq(const uint8_t *s, size_t n) {
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf; /* the range allowed for the second byte */
    if (c >= 0xc2 && c <= 0xdf) need = 2;
    else if (c == 0xe0) need = 3, lo = 0xa0; /* no overlong 3-byte forms */
    else if (c == 0xed) need = 3, hi = 0x9f; /* no surrogates */
    else if (c >= 0xe1 && c <= 0xef) need = 3;
    else if (c == 0xf0) need = 4, lo = 0x90; /* no overlong 4-byte forms */
    else if (c == 0xf4) need = 4, hi = 0x8f; /* nothing above U+10FFFF */
    else if (c >= 0xf1 && c <= 0xf3) need = 4;
    else return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        const unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) return -i;
    }
    return need;
}

size_t muse_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    for (int k; i < n && (k = muse_utf8_seq(s + i, n - i)) > 0;) i += (size_t)k;
    return i;
}
