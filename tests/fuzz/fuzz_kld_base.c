/*
 * libFuzzer target for the KL-divergence base-file reader (src/eval/kld_base.h): open arbitrary
 * bytes as a base file; when they are accepted, walk the tokens (each must be inside the
 * vocabulary, as the reader promises) and read every chunk's rows, so that a size the header
 * lies about trips ASan or the reader's own checks, never the caller.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "eval/kld_base.h"
#include "eval/perplexity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return 0;
    struct muse_kld_base *b = NULL;
    if (muse_kld_base_open_stream(f, size, &b, NULL) != MUSE_OK) return 0;
    const struct muse_kld_base_info *in = muse_kld_base_info(b);
    for (int64_t i = 0; i < (int64_t)in->n_chunk * in->n_ctx; i++)
        if (in->tokens[i] < 0 || in->tokens[i] >= in->n_vocab) abort();
    const size_t n = (size_t)muse_ppl_n_scored(in->n_ctx) * (size_t)muse_kld_row_len(in->n_vocab);
    uint16_t *rows = malloc(n * sizeof(uint16_t));
    for (int32_t c = 0; rows && c < in->n_chunk; c++)
        if (muse_kld_base_read_chunk(b, rows, NULL) != MUSE_OK) abort(); /* the size was checked up front */
    free(rows);
    muse_kld_base_close(b, NULL);
    return 0;
}
