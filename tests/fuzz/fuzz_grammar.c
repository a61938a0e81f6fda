/*
 * fuzz_grammar.c - libFuzzer target for the GBNF parser (text/gbnf.h) and the grammar matcher
 * (gen/grammar.h), which see untrusted grammars in `muse serve` (the `grammar` field). Any text
 * must parse or fail with a FORMAT error carrying "line L, column C", never crash. A grammar that
 * parses must print; its matcher, over a byte vocabulary with a few
 * multi-byte pieces and an end-of-generation token, must agree with itself (the cached mask ==
 * the per-token check; EOG allowed exactly when the grammar can end) along a walk driven by the
 * input's hash.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen/grammar.h"
#include "text/gbnf.h"

static const char *extra[] = {"ab", "{\"", "\":", " true", "\xC3\xA9", "12", "\n\n", "<|x|>"};
#define N_EXTRA ((int32_t)(sizeof extra / sizeof extra[0]))
#define ID_EOG (256 + N_EXTRA)
#define N_VOCAB (ID_EOG + 1)

static char bytes[256];
static const char *piece(void *user, int32_t id, size_t *len) {
    (void)user;
    if (id < 256) {
        bytes[id] = (char)id;
        *len = 1;
        return &bytes[id];
    }
    if (id < ID_EOG) {
        *len = strlen(extra[id - 256]);
        return extra[id - 256];
    }
    *len = 7;
    return "<|eot|>";
}
static bool is_eog(void *user, int32_t id) { return id == ID_EOG; }

static int32_t find(void *user, const char *text, size_t len) {
    for (int32_t i = 0; i < N_EXTRA; i++)
        if (strlen(extra[i]) == len && !memcmp(extra[i], text, len)) return 256 + i;
    return -1;
}

static struct muse_grammar_vocab *vocab;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0; /* grammars are small; the repetition limits bound the rest */
    struct muse_error err = {0};
    if (!vocab && muse_grammar_vocab_create(N_VOCAB, piece, is_eog, NULL, &vocab, &err) != MUSE_OK) abort();
    struct muse_gbnf_token_lookup lookup = {find, NULL};
    struct muse_gbnf *g = NULL;
    muse_status st = muse_gbnf_parse((const char *)data, size, NULL, &lookup, &g, &err);
    if (st != MUSE_OK) {
        if (g) abort();
        if (st == MUSE_ERR_FORMAT && !strstr(err.msg, "line ")) abort();
        return 0;
    }
    /* printing works on whatever parsed (its generated names, root_1, are llama.cpp's: not GBNF names) */
    free(muse_gbnf_print(g));
    struct muse_grammar *gr = NULL;
    struct muse_grammar_matcher *m = NULL;
    if (muse_grammar_create(g, &gr, &err) != MUSE_OK || muse_grammar_matcher_create(gr, vocab, &m, &err) != MUSE_OK) goto out;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    for (int step = 0; step < 24; step++) {
        const uint32_t *bits = NULL;
        int32_t n_allowed = 0;
        if (muse_grammar_matcher_mask(m, &bits, &n_allowed, &err) != MUSE_OK) break;
        uint32_t copy[(N_VOCAB + 31) / 32];
        memcpy(copy, bits, sizeof copy);
        int32_t count = 0, pick = -1;
        const int32_t want = n_allowed ? (int32_t)(h % (uint32_t)n_allowed) : -1;
        for (int32_t id = 0; id < N_VOCAB; id++) {
            bool ok = false;
            if (muse_grammar_matcher_allows(m, id, &ok, &err) != MUSE_OK) goto out;
            if (ok != (bool)((copy[id >> 5] >> (id & 31)) & 1)) abort();
            if (id == ID_EOG && ok != muse_grammar_matcher_can_end(m)) abort();
            if (ok && count++ == want) pick = id;
        }
        if (count != n_allowed) abort();
        if (pick < 0 || pick == ID_EOG) break;
        if (muse_grammar_matcher_accept(m, pick, &err) != MUSE_OK) {
            if (err.status == MUSE_ERR_UNSUPPORTED || err.status == MUSE_ERR_NOMEM) break;
            abort(); /* an allowed token must be accepted */
        }
        h = h * 1103515245u + 12345u;
    }
out:
    muse_grammar_matcher_free(m);
    muse_grammar_free(gr);
    muse_gbnf_free(g);
    return 0;
}
