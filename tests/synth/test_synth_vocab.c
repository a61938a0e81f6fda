/*
 * test_synth_vocab.c - the vocabulary of synthetic files (synth/synth.h) through muse's own
 * tokenizer: it loads, English becomes multi-byte tokens, text round-trips, the chat markers and
 * stop tokens are where tokenizer-and-chat.md §2 puts them (real ids for the real vocabulary size).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "synth/synth.h"
#include "test.h"

static const char english[] =
    "The government said on Monday that the new system would help people find work, "
    "and that more information about the program will be available next week.";

static void check_tokenizer(const char *what, int32_t n_vocab, const char *types) {
    struct muse_synth_config cfg;
    struct muse_error err;
    muse_synth_preset("tiny", &cfg, &err);
    cfg.n_layer = 1;
    cfg.n_vocab = n_vocab;
    if (types) muse_synth_parse_types(types, &cfg, &err);
    char path[512];
    snprintf(path, sizeof(path), "%s/muse-test-synth-vocab-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    TEST_CONDF(muse_synth_write(&cfg, path, NULL, NULL, &err) == MUSE_OK, "%s: write: %s", what, err.msg);
    struct muse_gguf *g = NULL;
    struct muse_tokenizer *tok = NULL;
    TEST_CONDF(muse_gguf_open(path, &g, &err) == MUSE_OK, "%s: open: %s", what, err.msg);
    if (g) TEST_CONDF(muse_tokenizer_init_from_gguf(g, &tok, &err) == MUSE_OK, "%s: tokenizer loads: %s", what, err.msg);
    if (!tok) goto done;
    TEST_CONDF(muse_tokenizer_n_vocab(tok) == n_vocab, "%s: n_vocab", what);

    /* English compresses into multi-byte tokens and round-trips */
    int32_t *ids = NULL;
    size_t n = 0;
    TEST_COND("encode", muse_tokenizer_encode_alloc(tok, english, strlen(english), 0, &ids, &n, &err) == MUSE_OK);
    TEST_CONDF(n > 0 && n * 3 < strlen(english), "%s: %zu bytes -> %zu tokens (< 1/3)", what, strlen(english), n);
    char *text = NULL;
    size_t len = 0;
    TEST_COND("decode", muse_tokenizer_decode_alloc(tok, ids, n, 0, &text, &len, &err) == MUSE_OK);
    TEST_CONDF(text && len == strlen(english) && !memcmp(text, english, len), "%s: round trip", what);
    free(ids);
    free(text);
    ids = NULL;
    text = NULL;
    /* " the" is one token */
    TEST_CONDF(muse_tokenizer_encode_alloc(tok, " the", 4, 0, &ids, &n, &err) == MUSE_OK && n == 1, "%s: ' the' 1 token",
               what);
    free(ids);
    ids = NULL;

    /* special tokens: ids, BOS added, chat markers matched, stop set {EOS, EOT} without EOM */
    bool real = n_vocab >= MUSE_SYNTH_REAL_VOCAB;
    int32_t base = real ? 200000 : n_vocab - 12;
    int32_t bos = muse_tokenizer_bos(tok), eos = muse_tokenizer_eos(tok), eot = muse_tokenizer_eot(tok);
    int32_t eom = muse_tokenizer_find(tok, "<|eom|>", 7), start = muse_tokenizer_find(tok, "<|start|>", 9);
    int32_t message = muse_tokenizer_find(tok, "<|message|>", 11), patch = muse_tokenizer_find(tok, "<|patch|>", 9);
    TEST_CONDF(bos == base && eos == base + 1, "%s: bos %d eos %d", what, bos, eos);
    TEST_CONDF(real ? (eom == 200007 && eot == 200008 && start == 200022 && message == 200023 && patch == 200092)
                    : (eom == base + 2 && eot == base + 3 && start == base + 5 && message == base + 6 && patch == base + 10),
               "%s: eom %d eot %d start %d message %d patch %d", what, eom, eot, start, message, patch);
    TEST_CONDF(muse_tokenizer_is_eog(tok, eos) && muse_tokenizer_is_eog(tok, eot) && !muse_tokenizer_is_eog(tok, eom),
               "%s: stop set {eos, eot}, not eom", what);
    const char chat[] = "<|start|>user<|message|>Hello<|eot|>";
    TEST_COND("encode chat", muse_tokenizer_encode_alloc(tok, chat, strlen(chat),
                                                        MUSE_TOKENIZE_ADD_BOS | MUSE_TOKENIZE_PARSE_SPECIAL, &ids, &n,
                                                        &err) == MUSE_OK);
    TEST_CONDF(n >= 5 && ids[0] == bos && ids[1] == start && ids[n - 1] == eot, "%s: chat markers as ids", what);
    bool has_message = false;
    for (size_t i = 0; i < n; i++) has_message |= ids[i] == message;
    TEST_CONDF(has_message, "%s: <|message|> matched", what);
    free(ids);
done:
    muse_tokenizer_free(tok);
    muse_gguf_free(g);
    unlink(path);
}

int main(void) {
    check_tokenizer("vocab 1000", 1000, NULL);
    check_tokenizer("vocab 8192", 8192, NULL);
    /* the real size: special tokens at their real ids; cheap IQ1_S matrices keep the file ~20 MB */
    check_tokenizer("vocab 202048", MUSE_SYNTH_REAL_VOCAB, "*=iq1_s");
    return TEST_REPORT();
}
