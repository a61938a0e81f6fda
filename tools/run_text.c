/* run_text.c - prompt tokenization and streaming detokenization for `muse run` (run_text.h). */
#include "run_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "core/error.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"

struct run_text {
    struct muse_tokenizer *tok;
    struct muse_detok *detok;
};

muse_status run_text_open(const char *path, struct run_text **out, struct muse_error *err) {
    struct muse_gguf *g = NULL;
    muse_status st;
    *out = NULL;
    struct run_text *rt = calloc(1, sizeof *rt);
    if (!rt) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if ((st = muse_gguf_open(path, &g, err))) goto fail;
    if ((st = muse_tokenizer_init_from_gguf(g, &rt->tok, err))) {
        muse_error_prefix(err, "the model's tokenizer: ");
        goto fail;
    }
    muse_gguf_free(g);
    g = NULL;
    rt->detok = muse_detok_init(rt->tok, 0);
    if (!rt->detok) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    *out = rt;
    return MUSE_OK;
fail:
    muse_gguf_free(g);
    run_text_close(rt);
    return st;
}

void run_text_close(struct run_text *rt) {
    if (!rt) return;
    muse_detok_free(rt->detok);
    muse_tokenizer_free(rt->tok);
    free(rt);
}

struct muse_tokenizer *run_text_tokenizer(struct run_text *rt) { return rt ? rt->tok : NULL; }

muse_status run_text_encode_prompt(struct run_text *rt, const char *text, const char *file, int32_t **ids, int *n_ids,
                                   struct muse_error *err) {
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    muse_status st;
    if (!rt) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "text prompts need the model's tokenizer");
    if (!text) {
        if (!(owned = cli_read_file(file, &len)))
            return muse_error_set(err, MUSE_ERR_IO, "cannot read %s: %s", strcmp(file, "-") ? file : "standard input",
                                  strerror(errno));
        text = owned;
    }
    /* a raw completion prompt: BOS as the file asks, special-token texts parsed like llama.cpp's CLI */
    unsigned flags = MUSE_TOKENIZE_PARSE_SPECIAL | (muse_tokenizer_add_bos(rt->tok) ? MUSE_TOKENIZE_ADD_BOS : 0);
    size_t n = 0;
    st = muse_tokenizer_encode_alloc(rt->tok, text, len, flags, ids, &n, err);
    free(owned);
    if (st) return st;
    if (n == 0 || n > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the prompt is empty");
    }
    *n_ids = (int)n;
    return MUSE_OK;
}

void run_text_piece(struct run_text *rt, int32_t id, const char **s, size_t *n) {
    *s = NULL;
    *n = 0;
    if (muse_detok_push(rt->detok, id, s, n) != MUSE_OK) *n = 0;
}

void run_text_flush_piece(struct run_text *rt, const char **s, size_t *n) {
    *s = NULL;
    *n = 0;
    if (muse_detok_flush(rt->detok, s, n) != MUSE_OK) *n = 0;
}

void run_text_print_token(struct run_text *rt, int32_t id, FILE *f) {
    const char *s;
    size_t n;
    run_text_piece(rt, id, &s, &n);
    if (n) fwrite(s, 1, n, f);
}

void run_text_flush(struct run_text *rt, FILE *f) {
    const char *s;
    size_t n;
    run_text_flush_piece(rt, &s, &n);
    if (n) fwrite(s, 1, n, f);
}
