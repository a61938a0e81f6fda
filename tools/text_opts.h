/*
 * text_opts.h - the prompt-text options of `muse run` and `muse chat` that llama.cpp scripts pass:
 * -r/--reverse-prompt (stop strings), -e/--escape and --no-escape (escape sequences in -p and -r),
 * and the stop-string matcher both commands stream their text through.
 *
 * Escapes (as llama.cpp's common arguments, on by default): \n \r \t \' \" \\ and \xHH (two hex
 * digits) in -p TEXT and in every -r TEXT; any other backslash pair is kept as written. A prompt
 * read from a file (-f) is used as it is (llama.cpp also unescapes -f; muse keeps files verbatim).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define TEXT_OPTS_MAX_STOPS 16

struct text_opts {
    const char *stops[TEXT_OPTS_MAX_STOPS]; /* -r values as given (argv) */
    int n_stops;
    bool no_escape;                         /* --no-escape (-e is the default) */
};

void text_opts_init(struct text_opts *o);

/* If argv[*i] is one of the options, consume it (and its value) and return 1; 0 when it is not;
 * -1 after printing an error (a missing or empty value, too many -r). */
int text_opts_parse(struct text_opts *o, int argc, char **argv, int *i);

/* The usage lines. */
void text_opts_usage(FILE *f);

/* Unescape s in place (the rules above); returns its new length (s stays NUL-terminated; a \x00
 * makes a NUL inside, so the length is what counts). */
size_t text_unescape(char *s);

/* A copy of TEXT with the escapes processed unless --no-escape (NULL for NULL); the caller frees it.
 * NULL with text non-NULL: out of memory. */
char *text_opts_prompt(const struct text_opts *o, const char *text);

/*
 * The stop-string matcher: text goes in piece by piece; what cannot be the start of a stop string
 * comes out at once, a possible start is held back until it is decided. When a stop string
 * completes, the text before it comes out (and the stop string itself when keep_stop: `muse run`
 * prints it, as llama-completion does; `muse chat` does not keep it in the answer) and the matcher
 * reports the hit; whatever was fed after it is dropped.
 */
struct stop_match;
typedef void (*stop_emit_fn)(void *user, const char *s, size_t n);

/* NULL when o has no -r (then nothing is held back: callers write directly), or out of memory
 * (*oom set). */
struct stop_match *stop_match_create(const struct text_opts *o, bool keep_stop, bool *oom);
void stop_match_free(struct stop_match *m);
/* Feed n bytes; emits what is decided. Returns true when a stop string completed (the text after
 * it, in this piece or later ones, is never emitted). */
bool stop_match_feed(struct stop_match *m, const char *s, size_t n, stop_emit_fn emit, void *user);
/* A piece matched only as a whole (a control token's text): true, the hit recorded, when it is
 * one of the stop strings. Call after stop_match_flush (nothing held back). */
bool stop_match_whole(struct stop_match *m, const char *s, size_t n);
/* Emit what is held back (the end of the output: a partial stop string is text after all). */
void stop_match_flush(struct stop_match *m, stop_emit_fn emit, void *user);
/* The stop string that matched, or NULL. */
const char *stop_match_hit(const struct stop_match *m);

/* s for a one-line message: newlines, tabs, quotes, backslashes and control bytes as escapes
 * (the form -r takes), cut to fit buf (cap >= 6). Returns buf. */
const char *text_show(const char *s, char *buf, size_t cap);
