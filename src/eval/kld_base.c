/* kld_base.c - writer and reader of the KL-divergence base file (kld_base.h). */
#include "eval/kld_base.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "eval/perplexity.h"

#define KLD_MAGIC "_logits_"
#define KLD_HEADER_BYTES 20 /* magic + n_ctx + n_vocab + n_chunk */

struct muse_kld_base {
    FILE *f;
    int writing;
    struct muse_kld_base_info info;
    int32_t *tokens;      /* [n_chunk * n_ctx] */
    int32_t chunks_done;  /* chunks written or read so far */
    size_t chunk_values;  /* uint16 values per chunk: n_scored * row_len */
};

const struct muse_kld_base_info *muse_kld_base_info(const struct muse_kld_base *b) { return &b->info; }

static void base_free(struct muse_kld_base *b) {
    if (!b) return;
    if (b->f) fclose(b->f);
    free(b->tokens);
    free(b);
}

/* sizes a header may hold: returns the uint16 values per chunk, 0 when out of range */
static size_t chunk_values(int32_t n_ctx, int32_t n_vocab) {
    if (n_ctx < 4 || n_vocab < 1) return 0;
    return (size_t)muse_ppl_n_scored(n_ctx) * (size_t)muse_kld_row_len(n_vocab);
}

static void put_i32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

static int32_t get_i32(const uint8_t *p) {
    uint32_t u = 0;
    for (int i = 0; i < 4; i++) u |= (uint32_t)p[i] << (8 * i);
    return (int32_t)u;
}

muse_status muse_kld_base_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                                 const int32_t *tokens, struct muse_kld_base **out, struct muse_error *err) {
    muse_status st;
    *out = NULL;
    if (!chunk_values(n_ctx, n_vocab) || n_chunk < 1 || (int64_t)n_chunk * n_ctx > INT32_MAX)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad base-file sizes (n_ctx %d, n_vocab %d, %d chunks)", n_ctx,
                              n_vocab, n_chunk);
    struct muse_kld_base *b = calloc(1, sizeof *b);
    if (!b) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    b->writing = 1;
    b->info = (struct muse_kld_base_info){n_ctx, n_vocab, n_chunk, tokens};
    b->chunk_values = chunk_values(n_ctx, n_vocab);
    if (!(b->f = fopen(path, "wb"))) {
        st = muse_error_set(err, MUSE_ERR_IO, "cannot create %s", path);
        goto fail;
    }
    uint8_t h[KLD_HEADER_BYTES];
    memcpy(h, KLD_MAGIC, 8);
    put_i32(h + 8, n_ctx);
    put_i32(h + 12, n_vocab);
    put_i32(h + 16, n_chunk);
    const size_t n_tok = (size_t)n_chunk * (size_t)n_ctx;
    if (fwrite(h, 1, sizeof h, b->f) != sizeof h || fwrite(tokens, sizeof(int32_t), n_tok, b->f) != n_tok) {
        st = muse_error_set(err, MUSE_ERR_IO, "cannot write %s", path);
        goto fail;
    }
    b->info.tokens = NULL; /* a writer keeps no tokens */
    *out = b;
    return MUSE_OK;
fail:
    base_free(b);
    return st;
}

muse_status muse_kld_base_open_stream(FILE *file, uint64_t size, struct muse_kld_base **out, struct muse_error *err) {
    muse_status st;
    *out = NULL;
    struct muse_kld_base *b = calloc(1, sizeof *b);
    if (!b) {
        fclose(file);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    b->f = file;
    uint8_t h[KLD_HEADER_BYTES];
    if (size < sizeof h || fread(h, 1, sizeof h, b->f) != sizeof h || memcmp(h, KLD_MAGIC, 8) != 0) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "not a base file of log-probabilities (no \"_logits_\" header)");
        goto fail;
    }
    struct muse_kld_base_info *in = &b->info;
    in->n_ctx = get_i32(h + 8);
    in->n_vocab = get_i32(h + 12);
    in->n_chunk = get_i32(h + 16);
    b->chunk_values = chunk_values(in->n_ctx, in->n_vocab);
    if (!b->chunk_values || in->n_chunk < 1 || (int64_t)in->n_chunk * in->n_ctx > INT32_MAX) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "bad sizes in the header (n_ctx %d, n_vocab %d, %d chunks)", in->n_ctx,
                            in->n_vocab, in->n_chunk);
        goto fail;
    }
    /* the length the header announces, in 64 bits (no overflow: each factor is < 2^31) */
    const uint64_t n_tok = (uint64_t)in->n_chunk * (uint64_t)in->n_ctx;
    const uint64_t need = sizeof h + 4 * n_tok + 2 * (uint64_t)in->n_chunk * (uint64_t)b->chunk_values;
    if (size != need) {
        st = muse_error_set(err, MUSE_ERR_FORMAT,
                            "%s: %llu bytes, but its header (n_ctx %d, n_vocab %d, %d chunks) needs %llu",
                            size < need ? "truncated" : "trailing bytes", (unsigned long long)size, in->n_ctx,
                            in->n_vocab, in->n_chunk, (unsigned long long)need);
        goto fail;
    }
    if (!(b->tokens = malloc(sizeof(int32_t) * (size_t)n_tok))) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory (%llu tokens)", (unsigned long long)n_tok);
        goto fail;
    }
    uint8_t buf[4096];
    for (uint64_t i = 0; i < n_tok;) {
        const size_t n = n_tok - i < sizeof buf / 4 ? (size_t)(n_tok - i) : sizeof buf / 4;
        if (fread(buf, 4, n, b->f) != n) {
            st = muse_error_set(err, MUSE_ERR_IO, "cannot read the tokens");
            goto fail;
        }
        for (size_t k = 0; k < n; k++, i++) {
            const int32_t t = get_i32(buf + 4 * k);
            if (t < 0 || t >= in->n_vocab) {
                st = muse_error_set(err, MUSE_ERR_FORMAT, "token %d at index %llu is outside the vocabulary (%d)", t,
                                    (unsigned long long)i, in->n_vocab);
                goto fail;
            }
            b->tokens[i] = t;
        }
    }
    in->tokens = b->tokens;
    *out = b;
    return MUSE_OK;
fail:
    base_free(b);
    return st;
}

muse_status muse_kld_base_open(const char *path, struct muse_kld_base **out, struct muse_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return muse_error_set(err, MUSE_ERR_IO, "cannot open %s", path);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return muse_error_set(err, MUSE_ERR_IO, "%s is not a regular file", path);
    }
    muse_status st = muse_kld_base_open_stream(f, (uint64_t)sb.st_size, out, err);
    if (st) muse_error_prefix(err, "%s: ", path);
    return st;
}

muse_status muse_kld_base_write_chunk(struct muse_kld_base *b, const uint16_t *rows, struct muse_error *err) {
    if (!b->writing || b->chunks_done >= b->info.n_chunk)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "base file: no chunk left to write");
    if (fwrite(rows, sizeof(uint16_t), b->chunk_values, b->f) != b->chunk_values)
        return muse_error_set(err, MUSE_ERR_IO, "cannot write the base file (disk full?)");
    b->chunks_done++;
    return MUSE_OK;
}

muse_status muse_kld_base_read_chunk(struct muse_kld_base *b, uint16_t *rows, struct muse_error *err) {
    if (b->writing || b->chunks_done >= b->info.n_chunk)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "base file: no chunk left to read");
    if (fread(rows, sizeof(uint16_t), b->chunk_values, b->f) != b->chunk_values)
        return muse_error_set(err, MUSE_ERR_IO, "cannot read chunk %d of the base file", b->chunks_done + 1);
    b->chunks_done++;
    return MUSE_OK;
}

muse_status muse_kld_base_close(struct muse_kld_base *b, struct muse_error *err) {
    if (!b) return MUSE_OK;
    muse_status st = MUSE_OK;
    if (b->writing) {
        const int short_file = b->chunks_done < b->info.n_chunk;
        const int bad = fclose(b->f) != 0;
        b->f = NULL;
        if (bad) st = muse_error_set(err, MUSE_ERR_IO, "cannot write the base file (disk full?)");
        else if (short_file)
            st = muse_error_set(err, MUSE_ERR_IO, "base file closed after %d of %d chunks", b->chunks_done,
                                b->info.n_chunk);
    }
    base_free(b);
    return st;
}
