/*
 * bench_grammar.c - the cost of grammar-constrained sampling per token on a real vocabulary.
 *
 *   build/bench/bench_grammar VOCAB.gguf GRAMMAR.gbnf TARGET.txt [--repeat N] [--fresh]
 *
 * Generates TARGET under GRAMMAR the way a sampler would: at every step the full mask of allowed
 * tokens is computed (muse_grammar_matcher_mask), then the longest allowed token that is a prefix
 * of the rest of TARGET is accepted. Prints the vocabulary build time, and per step the mask time
 * (median, mean, max over the steps; first pass = states met for the first time, as in one
 * generation; later passes = the same steps with every state cached). --fresh: a new matcher per
 * pass (no warm caches across passes). GRAMMAR may also be "json:SCHEMA.json" (converted first).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "gen/grammar.h"
#include "gen/json_schema.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) s[n] = 0;
    *len = (size_t)n;
    return s;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s VOCAB.gguf GRAMMAR.gbnf|json:SCHEMA.json TARGET.txt [--repeat N] [--fresh]\n", argv[0]);
        return 2;
    }
    int repeat = 2;
    bool fresh = false;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fresh")) fresh = true;
    }
    struct muse_error err = {0};
    struct muse_gguf *gg = NULL;
    struct muse_tokenizer *tok = NULL;
    if (muse_gguf_open(argv[1], &gg, &err) != MUSE_OK || muse_tokenizer_init_from_gguf(gg, &tok, &err) != MUSE_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    muse_gguf_free(gg);
    int64_t t0 = muse_time_us();
    struct muse_grammar_vocab *gv = NULL;
    if (muse_grammar_vocab_from_tokenizer(tok, &gv, &err) != MUSE_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("vocab: %d tokens, trie built in %.1f ms\n", muse_grammar_vocab_n(gv), (muse_time_us() - t0) / 1000.0);
    size_t glen = 0, tlen = 0;
    char *gtext = NULL;
    if (!strncmp(argv[2], "json:", 5)) {
        size_t slen = 0;
        char *schema = slurp(argv[2] + 5, &slen);
        if (!schema || muse_json_schema_to_gbnf(schema, slen, &gtext, &err) != MUSE_OK) {
            fprintf(stderr, "%s\n", schema ? err.msg : "cannot read schema");
            return 1;
        }
        glen = strlen(gtext);
        free(schema);
    } else {
        gtext = slurp(argv[2], &glen);
    }
    char *target = slurp(argv[3], &tlen);
    if (!gtext || !target) {
        fprintf(stderr, "cannot read inputs\n");
        return 1;
    }
    struct muse_grammar *g = NULL;
    if (muse_grammar_from_text(gtext, glen, NULL, tok, &g, &err) != MUSE_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct muse_grammar_matcher *m = NULL;
    double *times = malloc((tlen + 1) * sizeof *times);
    for (int pass = 0; pass < repeat; pass++) {
        if (!m || fresh) {
            muse_grammar_matcher_free(m);
            m = NULL;
            if (muse_grammar_matcher_create(g, gv, &m, &err) != MUSE_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        }
        muse_grammar_matcher_reset(m);
        size_t pos = 0;
        int steps = 0;
        double allowed_sum = 0;
        while (pos < tlen) {
            const uint32_t *bits = NULL;
            int32_t n_allowed = 0;
            int64_t a = muse_time_us();
            if (muse_grammar_matcher_mask(m, &bits, &n_allowed, &err) != MUSE_OK) {
                fprintf(stderr, "mask: %s\n", err.msg);
                return 1;
            }
            times[steps++] = (muse_time_us() - a) / 1000.0;
            allowed_sum += n_allowed;
            /* the longest allowed token that is a prefix of the rest */
            int32_t best = -1;
            size_t best_len = 0;
            for (int32_t id = 0; id < muse_grammar_vocab_n(gv); id++) {
                if (!((bits[id >> 5] >> (id & 31)) & 1)) continue;
                size_t len = 0;
                const char *p = muse_tokenizer_token_bytes(tok, id, &len);
                if (len > best_len && len <= tlen - pos && !memcmp(p, target + pos, len)) {
                    best = id;
                    best_len = len;
                }
            }
            if (best < 0) {
                fprintf(stderr, "step %d: no allowed token continues the target at byte %zu\n", steps, pos);
                return 1;
            }
            if (muse_grammar_matcher_accept(m, best, &err) != MUSE_OK) {
                fprintf(stderr, "accept: %s\n", err.msg);
                return 1;
            }
            pos += best_len;
        }
        double sum = 0, mx = 0;
        for (int i = 0; i < steps; i++) {
            sum += times[i];
            mx = times[i] > mx ? times[i] : mx;
        }
        qsort(times, (size_t)steps, sizeof *times, cmp_d);
        struct muse_grammar_stats st;
        muse_grammar_matcher_stats(m, &st);
        printf("pass %d: %d steps, mask ms median %.3f mean %.3f max %.3f; allowed mean %.0f; can end: %s; "
               "states %llu stacks %llu walks %llu hits %llu nodes/walk %.0f cache %.1f MB\n",
               pass + 1, steps, times[steps / 2], sum / steps, mx, allowed_sum / steps,
               muse_grammar_matcher_can_end(m) ? "yes" : "no", (unsigned long long)st.n_states,
               (unsigned long long)st.n_stacks, (unsigned long long)st.n_masks, (unsigned long long)st.n_mask_hits,
               st.n_masks ? (double)st.n_nodes_walked / (double)st.n_masks : 0.0, st.bytes / 1e6);
    }
    muse_grammar_matcher_free(m);
    muse_grammar_free(g);
    muse_grammar_vocab_free(gv);
    muse_tokenizer_free(tok);
    free(times);
    free(target);
    free(gtext);
    return 0;
}
