/*
 * run_text.h - text in and out for `muse run`: tokenizing the prompt and streaming generated
 * tokens as UTF-8, over the model's own tokenizer (src/text/tokenizer.h).
 */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "muse.h"

struct run_text;

/* Load the tokenizer of the GGUF at `path`. Error: a message saying why text is unavailable. */
muse_status run_text_open(const char *path, struct run_text **out, struct muse_error *err);
void run_text_close(struct run_text *rt);

/* Tokenize `text` (or the contents of `file` when text is NULL; "-" = standard input), adding BOS
 * as the model file asks. */
muse_status run_text_encode_prompt(struct run_text *rt, const char *text, const char *file, int32_t **ids, int *n_ids,
                                   struct muse_error *err);

/* The tokenizer (owned by rt; NULL when rt is NULL). */
struct muse_tokenizer *run_text_tokenizer(struct run_text *rt);

/* Stream one generated token (incomplete UTF-8 is held back until it completes). */
void run_text_print_token(struct run_text *rt, int32_t id, FILE *f);
/* Print whatever is held back. */
void run_text_flush(struct run_text *rt, FILE *f);
/* The same as text: the bytes a token completes (*n = 0: none yet), valid until the next call;
 * then what is held back at the end. */
void run_text_piece(struct run_text *rt, int32_t id, const char **s, size_t *n);
void run_text_flush_piece(struct run_text *rt, const char **s, size_t *n);
