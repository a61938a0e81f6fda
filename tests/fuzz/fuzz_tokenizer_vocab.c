/*
 * fuzz_tokenizer_vocab.c - libFuzzer target for the vocabulary loader (muse_tokenizer_init): the
 * input is a made-up vocabulary, one entry per line:
 *   "T<type digit><text>"   a token (type 0-9, so invalid types too; any bytes as text)
 *   "M<left> <right>"       a merge (or anything else after M: bad merges must be refused)
 *   "P<digit>"              the pre-tokenizer (0-2; others out of range)
 *   "B<digits>"             a BOS id (possibly out of range)
 *   "X<text>"               text to encode
 * The loader must refuse bad vocabularies with an error and no leak, and a loaded tokenizer must
 * encode any text (ids in range), decode every id, and stream without crashing.
 */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

enum { MAX_ENTRIES = 512 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *tokens[MAX_ENTRIES], *merges[MAX_ENTRIES];
    uint32_t token_lens[MAX_ENTRIES], merge_lens[MAX_ENTRIES];
    int32_t types[MAX_ENTRIES];
    int n_tokens = 0, n_merges = 0;
    struct muse_tokenizer_vocab v = {.bos_id = -1, .eos_id = -1, .eot_id = -1, .eom_id = -1};
    const char *text = "Hello, world! 123 don't <|eot|>";
    size_t text_len = strlen(text);
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        size_t n = (size_t)(e - p);
        if (n >= 2 && p[0] == 'T' && n_tokens < MAX_ENTRIES) {
            types[n_tokens] = p[1] - '0';
            tokens[n_tokens] = p + 2;
            token_lens[n_tokens++] = (uint32_t)(n - 2);
        } else if (n >= 1 && p[0] == 'M' && n_merges < MAX_ENTRIES) {
            merges[n_merges] = p + 1;
            merge_lens[n_merges++] = (uint32_t)(n - 1);
        } else if (n == 2 && p[0] == 'P') {
            v.pretok = (enum muse_pretok)(p[1] - '0');
        } else if (n >= 2 && p[0] == 'B') {
            int bos = 0; /* digits within the line only: the input is not NUL-terminated */
            for (size_t i = 1; i < n && p[i] >= '0' && p[i] <= '9'; i++) bos = (bos * 10 + (p[i] - '0')) % 1000;
            v.bos_id = bos;
        } else if (n >= 1 && p[0] == 'X') {
            text = p + 1;
            text_len = n - 1;
        }
        p = nl ? nl + 1 : end;
    }
    v.n_tokens = n_tokens;
    v.tokens = tokens;
    v.token_lens = token_lens;
    v.token_types = types;
    v.n_merges = n_merges;
    v.merges = merges;
    v.merge_lens = merge_lens;
    v.add_bos = true;
    struct muse_tokenizer *tok = NULL;
    struct muse_error err;
    if (muse_tokenizer_init(&v, &tok, &err) != MUSE_OK) {
        if (tok || err.msg[0] == '\0') abort(); /* errors come with a message and no object */
        return 0;
    }
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (muse_tokenizer_encode_alloc(tok, text, text_len, flags, &ids, &n, &err) != MUSE_OK) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= n_tokens) abort();
        char *out = NULL;
        size_t len = 0;
        if (muse_tokenizer_decode_alloc(tok, ids, n, flags & 1 ? MUSE_DECODE_SPECIAL : 0, &out, &len, &err) != MUSE_OK)
            abort();
        free(out);
        free(ids);
    }
    struct muse_detok *d = muse_detok_init(tok, 0);
    for (int32_t id = 0; id < n_tokens; id++) {
        const char *t;
        size_t len;
        size_t tl;
        if (muse_detok_push(d, id, &t, &len) != MUSE_OK) abort();
        if (!muse_tokenizer_token_text(tok, id, &tl) || !muse_tokenizer_token_bytes(tok, id, &tl)) abort();
    }
    muse_detok_free(d);
    muse_tokenizer_free(tok);
    return 0;
}
