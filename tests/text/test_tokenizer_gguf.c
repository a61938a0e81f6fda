/*
 * test_tokenizer_gguf.c - muse_tokenizer_init_from_gguf on small GGUF files written here: a good
 * file loads and tokenizes; unsupported model/pre values, bad ids, bad token_type arrays, missing
 * keys and malformed merges are refused with an error naming the key or value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "test.h"

enum { N_BYTES = 256, N_TOK = N_BYTES + 3 };

struct spec {
    const char *model, *pre;    /* NULL = key absent */
    bool tokens, types, merges;
    int64_t bos;                /* -1 = key absent */
    uint64_t n_types;           /* token_type entries written */
    const char *bad_merge;      /* replaces the merge list when set */
};

static char path[512];

/* GPT-2 byte-to-unicode form of one byte (written from its definition). */
static void byte_text(unsigned b, char *out) {
    unsigned n = 0, cp = 0;
    for (unsigned x = 0; x < 256; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
        if (x == b) {
            cp = printable ? x : 256 + n;
            break;
        }
        if (!printable) n++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

static muse_status write_file(const struct spec *s) {
    static char texts[N_BYTES][4];
    const char *tokens[N_TOK];
    int32_t types[N_TOK];
    for (unsigned b = 0; b < N_BYTES; b++) {
        byte_text(b, texts[b]);
        tokens[b] = texts[b];
        types[b] = MUSE_TOKEN_TYPE_NORMAL;
    }
    tokens[N_BYTES] = "hi";
    types[N_BYTES] = MUSE_TOKEN_TYPE_NORMAL;
    tokens[N_BYTES + 1] = "<|begin_of_text|>";
    types[N_BYTES + 1] = MUSE_TOKEN_TYPE_CONTROL;
    tokens[N_BYTES + 2] = "<|eot|>";
    types[N_BYTES + 2] = MUSE_TOKEN_TYPE_CONTROL;
    const char *merges[] = {s->bad_merge ? s->bad_merge : "h i"};
    struct muse_gguf_writer *w = NULL;
    struct muse_error err;
    muse_status st = muse_gguf_writer_open(path, &w, &err);
    if (st != MUSE_OK) return st;
    muse_gguf_writer_set_str(w, "general.architecture", "muse-glimmer");
    if (s->model) muse_gguf_writer_set_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre) muse_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->pre);
    if (s->tokens) muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, N_TOK);
    if (s->types) muse_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", MUSE_GGUF_TYPE_INT32, types, s->n_types);
    if (s->merges) muse_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    if (s->bos >= 0) muse_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos);
    muse_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if ((st = muse_gguf_writer_begin_data(w)) != MUSE_OK) {
        muse_gguf_writer_close(w, &err);
        return st;
    }
    return muse_gguf_writer_close(w, &err);
}

static struct spec good(void) {
    return (struct spec){.model = "gpt2", .pre = "llama4", .tokens = true, .types = true, .merges = true,
                         .bos = N_BYTES + 1, .n_types = N_TOK};
}

/* Load a file made from s; returns the status, the message in err, the tokenizer in *tok. */
static muse_status load(const struct spec *s, struct muse_tokenizer **tok, struct muse_error *err) {
    *tok = NULL;
    err->msg[0] = '\0';
    if (write_file(s) != MUSE_OK) return MUSE_ERR_IO;
    struct muse_gguf *g = NULL;
    muse_status st = muse_gguf_open(path, &g, err);
    if (st == MUSE_OK) st = muse_tokenizer_init_from_gguf(g, tok, err);
    muse_gguf_free(g);
    return st;
}

static void expect_error(const char *what, struct spec s, muse_status want, const char *needle) {
    struct muse_tokenizer *tok;
    struct muse_error err;
    muse_status st = load(&s, &tok, &err);
    TEST_CONDF(st == want && !tok && strstr(err.msg, needle), "%s: status %d (want %d), message '%s' (want '%s')",
               what, st, want, err.msg, needle);
    muse_tokenizer_free(tok);
}

int main(void) {
    snprintf(path, sizeof(path), "%s/muse-test-tokenizer-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    struct muse_tokenizer *tok;
    struct muse_error err;
    struct spec s = good();
    muse_status st = load(&s, &tok, &err);
    TEST_CONDF(st == MUSE_OK, "good file loads: %s", err.msg);
    if (tok) {
        int32_t ids[4];
        size_t n = 0;
        st = muse_tokenizer_encode(tok, "hi<|eot|>", 9, MUSE_TOKENIZE_ADD_BOS | MUSE_TOKENIZE_PARSE_SPECIAL, ids, 4,
                                   &n, &err);
        TEST_CONDF(st == MUSE_OK && n == 3 && ids[0] == N_BYTES + 1 && ids[1] == N_BYTES && ids[2] == N_BYTES + 2,
                   "encode through the file's merge and specials (n=%zu)", n);
        TEST_COND("add_bos read", muse_tokenizer_add_bos(tok));
        TEST_COND("eot found by text", muse_tokenizer_eot(tok) == N_BYTES + 2);
        TEST_COND("no eos key", muse_tokenizer_eos(tok) == -1);
        muse_tokenizer_free(tok);
    }

    s = good();
    s.pre = NULL;
    st = load(&s, &tok, &err);
    TEST_COND("no pre key: llama4", st == MUSE_OK && muse_tokenizer_pretok(tok) == MUSE_PRETOK_LLAMA4);
    muse_tokenizer_free(tok);
    s = good();
    s.pre = "llama-bpe";
    st = load(&s, &tok, &err);
    TEST_COND("llama-bpe", st == MUSE_OK && muse_tokenizer_pretok(tok) == MUSE_PRETOK_LLAMA3);
    muse_tokenizer_free(tok);
    s = good();
    s.types = false;
    st = load(&s, &tok, &err);
    TEST_COND("no token_type: all NORMAL", st == MUSE_OK && muse_tokenizer_token_type(tok, 0) == MUSE_TOKEN_TYPE_NORMAL);
    muse_tokenizer_free(tok);

    s = good();
    s.pre = "default";
    expect_error("pre default", s, MUSE_ERR_UNSUPPORTED, "'default'");
    s = good();
    s.pre = "qwen2";
    expect_error("pre qwen2", s, MUSE_ERR_UNSUPPORTED, "'qwen2'");
    s = good();
    s.model = "llama";
    expect_error("model llama (SPM)", s, MUSE_ERR_UNSUPPORTED, "'llama'");
    s = good();
    s.model = NULL;
    expect_error("no model", s, MUSE_ERR_MISSING, "tokenizer.ggml.model");
    s = good();
    s.tokens = false;
    expect_error("no tokens", s, MUSE_ERR_MISSING, "tokenizer.ggml.tokens");
    s = good();
    s.merges = false;
    expect_error("no merges", s, MUSE_ERR_MISSING, "tokenizer.ggml.merges");
    s = good();
    s.bos = N_TOK;
    expect_error("bos out of range", s, MUSE_ERR_FORMAT, "tokenizer.ggml.bos_token_id");
    s = good();
    s.n_types = N_TOK - 1;
    expect_error("token_type too short", s, MUSE_ERR_FORMAT, "tokenizer.ggml.token_type");
    s = good();
    s.bad_merge = "hi";
    expect_error("merge without a space", s, MUSE_ERR_FORMAT, "merge 0");
    unlink(path);
    return TEST_REPORT();
}
