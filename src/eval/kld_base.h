/*
 * kld_base.h - the base file of a KL-divergence run: a base model's log-probs over the scored rows
 * of every chunk, in llama.cpp's --kl-divergence-base format, so that llama-perplexity reads
 * muse's files and the other way round (docs/perplexity.md). Rows are encoded by
 * muse_kld_pack_row (perplexity.h).
 *
 * Layout, little-endian: "_logits_" (8 bytes), int32 n_ctx, int32 n_vocab, int32 n_chunk,
 * int32 tokens[n_chunk * n_ctx] (the evaluated tokens, before the BOS substitution), then for
 * each chunk muse_ppl_n_scored(n_ctx) rows of muse_kld_row_len(n_vocab) uint16.
 * A handle is a writer or a reader of one file; use it from one thread at a time.
 */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "muse.h"

struct muse_kld_base;

/* What a base file holds. tokens: [n_chunk * n_ctx], owned by the handle. */
struct muse_kld_base_info {
    int32_t n_ctx, n_vocab, n_chunk;
    const int32_t *tokens;
};

/*
 * Create `path` and write the header and tokens ([n_chunk * n_ctx]) for n_chunk chunks.
 * Errors: MUSE_ERR_INVALID_ARG (bad sizes), MUSE_ERR_IO, MUSE_ERR_NOMEM.
 */
muse_status muse_kld_base_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                                 const int32_t *tokens, struct muse_kld_base **out, struct muse_error *err);

/*
 * Open a base file for reading: checks the magic, the sizes (n_ctx >= 4, n_vocab >= 1, n_chunk >= 1),
 * that every token id is inside the vocabulary, and that the file's length is exactly what the
 * header announces (a truncated file is named as such). Errors: MUSE_ERR_IO, MUSE_ERR_FORMAT,
 * MUSE_ERR_NOMEM.
 */
muse_status muse_kld_base_open(const char *path, struct muse_kld_base **out, struct muse_error *err);

/* The same, over an open stream of `size` bytes positioned at its start (the fuzz target's entry;
 * the handle takes the stream and closes it). */
muse_status muse_kld_base_open_stream(FILE *file, uint64_t size, struct muse_kld_base **out, struct muse_error *err);

const struct muse_kld_base_info *muse_kld_base_info(const struct muse_kld_base *b);

/* Append (writer) or read the next (reader) chunk's rows: [muse_ppl_n_scored(n_ctx)][row_len].
 * Errors: MUSE_ERR_IO, MUSE_ERR_INVALID_ARG (more chunks than the header holds). */
muse_status muse_kld_base_write_chunk(struct muse_kld_base *b, const uint16_t *rows, struct muse_error *err);
muse_status muse_kld_base_read_chunk(struct muse_kld_base *b, uint16_t *rows, struct muse_error *err);

/* Close (NULL is fine). For a writer, reports a failed flush and a file with fewer chunks than its
 * header announces (MUSE_ERR_IO); the handle is freed in every case. */
muse_status muse_kld_base_close(struct muse_kld_base *b, struct muse_error *err);
