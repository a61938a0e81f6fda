/*
 * tokenizer_gguf.c - muse_tokenizer_init_from_gguf: read the `tokenizer.ggml.*` keys into a
 * muse_tokenizer_vocab and build the tokenizer from it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"

/* A string array key as parallel pointer/length arrays (malloc'd; the strings stay in the gguf). */
static muse_status string_array(const struct muse_gguf *g, const char *key, const char ***strs, uint32_t **lens,
                                uint64_t *count, struct muse_error *err) {
    const struct muse_gguf_value *arr;
    muse_status st = muse_gguf_get_arr(g, key, &arr, err);
    if (st != MUSE_OK) return st;
    if (arr->v.arr.elem_type != MUSE_GGUF_TYPE_STRING || !arr->v.arr.strs)
        return muse_error_set(err, MUSE_ERR_FORMAT, "%s: expected an array of strings, got %s", key,
                              muse_gguf_type_name(arr->v.arr.elem_type));
    uint64_t n = arr->v.arr.count;
    if (n > INT32_MAX / 2) return muse_error_set(err, MUSE_ERR_FORMAT, "%s: too many entries (%llu)", key, (unsigned long long)n);
    *strs = malloc((n ? n : 1) * sizeof(char *));
    *lens = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!*strs || !*lens) {
        free(*strs);
        free(*lens);
        *strs = NULL;
        *lens = NULL;
        return muse_error_set(err, MUSE_ERR_NOMEM, "%s: out of memory", key);
    }
    for (uint64_t i = 0; i < n; i++) {
        const struct muse_gguf_str *s = &arr->v.arr.strs[i];
        if (s->len > UINT32_MAX / 2) {
            free(*strs);
            free(*lens);
            *strs = NULL;
            *lens = NULL;
            return muse_error_set(err, MUSE_ERR_FORMAT, "%s[%llu]: string too long", key, (unsigned long long)i);
        }
        (*strs)[i] = s->data;
        (*lens)[i] = (uint32_t)s->len;
    }
    *count = n;
    return MUSE_OK;
}

/* An optional token id key: -1 when absent; an error when present but not a valid id. */
static muse_status token_id(const struct muse_gguf *g, const char *key, int32_t n_vocab, int32_t *out,
                            struct muse_error *err) {
    uint32_t v;
    *out = -1;
    muse_status st = muse_gguf_get_u32(g, key, &v, err);
    if (st == MUSE_ERR_MISSING) return MUSE_OK;
    if (st != MUSE_OK) return st;
    if (v >= (uint32_t)n_vocab)
        return muse_error_set(err, MUSE_ERR_FORMAT, "%s = %u is out of range (n_vocab %d)", key, v, n_vocab);
    *out = (int32_t)v;
    return MUSE_OK;
}

muse_status muse_tokenizer_init_from_gguf(const struct muse_gguf *g, struct muse_tokenizer **out,
                                          struct muse_error *err) {
    struct muse_tokenizer_vocab v = {.bos_id = -1, .eos_id = -1, .eot_id = -1, .eom_id = -1};
    const char **tokens = NULL, **merges = NULL;
    uint32_t *token_lens = NULL, *merge_lens = NULL;
    int32_t *types = NULL;
    uint64_t n_tokens = 0, n_merges = 0;
    char name[64];
    muse_status st;
    *out = NULL;

    st = muse_gguf_get_str(g, "tokenizer.ggml.model", name, sizeof(name), err);
    if (st != MUSE_OK) goto fail;
    if (strcmp(name, "gpt2") != 0) {
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                            "unsupported tokenizer.ggml.model '%s' (muse supports byte-level BPE, 'gpt2')", name);
        goto fail;
    }
    /* Muse-Glimmer files carry "llama4"; a file without the key gets the Muse pre-tokenizer too */
    v.pretok = MUSE_PRETOK_LLAMA4;
    st = muse_gguf_get_str(g, "tokenizer.ggml.pre", name, sizeof(name), err);
    if (st == MUSE_OK) st = muse_pretok_from_name(name, strlen(name), &v.pretok, err);
    else if (st == MUSE_ERR_MISSING) st = MUSE_OK;
    if (st != MUSE_OK) goto fail;

    st = string_array(g, "tokenizer.ggml.tokens", &tokens, &token_lens, &n_tokens, err);
    if (st != MUSE_OK) goto fail;
    if (n_tokens == 0) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "tokenizer.ggml.tokens is empty");
        goto fail;
    }
    v.n_tokens = (int32_t)n_tokens;
    v.tokens = tokens;
    v.token_lens = token_lens;

    const struct muse_gguf_value *tt;
    st = muse_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt, err);
    if (st == MUSE_OK) {
        enum muse_gguf_type et = tt->v.arr.elem_type;
        if (et == MUSE_GGUF_TYPE_STRING || et == MUSE_GGUF_TYPE_FLOAT32 || et == MUSE_GGUF_TYPE_FLOAT64 ||
            et == MUSE_GGUF_TYPE_BOOL || tt->v.arr.count != n_tokens) {
            st = muse_error_set(err, MUSE_ERR_FORMAT,
                                "tokenizer.ggml.token_type: expected %llu integers, got %llu of type %s",
                                (unsigned long long)n_tokens, (unsigned long long)tt->v.arr.count,
                                muse_gguf_type_name(et));
            goto fail;
        }
        types = malloc(n_tokens * sizeof(int32_t));
        if (!types) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        for (uint64_t i = 0; i < n_tokens; i++) {
            int64_t t = muse_gguf_arr_i64(tt, i);
            types[i] = t >= 0 && t < MUSE_TOKEN_TYPE_COUNT ? (int32_t)t : MUSE_TOKEN_TYPE_UNDEFINED;
        }
        v.token_types = types;
    } else if (st != MUSE_ERR_MISSING) {
        goto fail;
    }

    st = string_array(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merges, err);
    if (st != MUSE_OK) goto fail;
    v.n_merges = (int64_t)n_merges;
    v.merges = merges;
    v.merge_lens = merge_lens;

    if ((st = token_id(g, "tokenizer.ggml.bos_token_id", v.n_tokens, &v.bos_id, err)) != MUSE_OK ||
        (st = token_id(g, "tokenizer.ggml.eos_token_id", v.n_tokens, &v.eos_id, err)) != MUSE_OK ||
        (st = token_id(g, "tokenizer.ggml.eot_token_id", v.n_tokens, &v.eot_id, err)) != MUSE_OK ||
        (st = token_id(g, "tokenizer.ggml.eom_token_id", v.n_tokens, &v.eom_id, err)) != MUSE_OK)
        goto fail;
    bool add_bos = false; /* llama.cpp's default for BPE vocabularies */
    st = muse_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, err);
    if (st != MUSE_OK && st != MUSE_ERR_MISSING) goto fail;
    v.add_bos = add_bos;

    st = muse_tokenizer_init(&v, out, err);
fail:
    free(tokens);
    free(token_lens);
    free(merges);
    free(merge_lens);
    free(types);
    return st;
}
