/*
 * utf8.h - the one rule for well-formed UTF-8 (Unicode's table 3-7: no overlong forms, no
 * surrogates, nothing above U+10FFFF). The tokenizer's detokenizer, the server's stream and its
 * logprobs, and the JSON Schema converter all decide with it.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * The character at s[0..n), n >= 1: >0 = a whole well-formed character of that many bytes;
 * 0 = a well-formed but incomplete prefix that runs to the end of s (more bytes may complete it);
 * <0 = ill-formed: -k, where k is the length of the maximal subpart (Unicode's "maximal subpart"
 * rule, as Python's "replace" error handler counts it: one U+FFFD per -k bytes).
 */
int muse_utf8_seq(const uint8_t *s, size_t n);

/* Offset of the first byte of s[0..n) that does not start a whole well-formed character, or n. */
size_t muse_utf8_valid_prefix(const uint8_t *s, size_t n);
