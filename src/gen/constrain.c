/* constrain.c - grammar-constrained sampling with lazy arming (constrain.h). */
#include "gen/constrain.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "gen/json_schema.h"
#include "gen/tool_grammar.h"
#include "text/tokenizer.h"

#define TAIL_CAP 128 /* bytes of recent text kept to spot a trigger (triggers are shorter) */

struct muse_constraint {
    const struct muse_tokenizer *tok;
    struct muse_grammar_matcher *m;
    char **triggers; /* NULL-terminated copies; NULL = armed from the start */
    bool armed;
    char tail[TAIL_CAP];
    size_t n_tail;
    uint64_t n_sampled, n_masked;
    int64_t us; /* time spent in sample (beyond the plain draw) and accept */
};

muse_status muse_grammar_compile(enum muse_grammar_syntax syntax, const char *text, size_t len,
                                 const struct muse_tokenizer *tok, struct muse_grammar **out, struct muse_error *err) {
    *out = NULL;
    if (syntax == MUSE_GRAMMAR_GBNF) return muse_grammar_from_text(text, len, NULL, tok, out, err);
    char *gbnf = NULL;
    muse_status st = syntax == MUSE_GRAMMAR_CHAT_JSON_SCHEMA ? muse_chat_json_grammar(text, len, &gbnf, err)
                                                             : muse_json_schema_to_gbnf(text, len, &gbnf, err);
    if (st != MUSE_OK) return st;
    st = muse_grammar_from_text(gbnf, strlen(gbnf), NULL, tok, out, err);
    free(gbnf);
    return st;
}

void muse_constraint_free(struct muse_constraint *c) {
    if (!c) return;
    muse_grammar_matcher_free(c->m);
    if (c->triggers)
        for (char **t = c->triggers; *t; t++) free(*t);
    free(c->triggers);
    free(c);
}

static void tail_add(struct muse_constraint *c, const char *s, size_t n) {
    if (n >= TAIL_CAP) {
        memcpy(c->tail, s + n - TAIL_CAP, TAIL_CAP);
        c->n_tail = TAIL_CAP;
        return;
    }
    if (c->n_tail + n > TAIL_CAP) {
        const size_t drop = c->n_tail + n - TAIL_CAP;
        memmove(c->tail, c->tail + drop, c->n_tail - drop);
        c->n_tail -= drop;
    }
    memcpy(c->tail + c->n_tail, s, n);
    c->n_tail += n;
}

static bool tail_hits(const struct muse_constraint *c) {
    for (char **t = c->triggers; *t; t++) {
        const size_t n = strlen(*t);
        if (n && n <= c->n_tail && !memcmp(c->tail + c->n_tail - n, *t, n)) return true;
    }
    return false;
}

muse_status muse_constraint_create(const struct muse_grammar *g, const struct muse_grammar_vocab *v,
                                   const struct muse_tokenizer *tok, const char *const *triggers, const char *seed,
                                   struct muse_constraint **out, struct muse_error *err) {
    *out = NULL;
    muse_status st = MUSE_ERR_NOMEM;
    struct muse_constraint *c = calloc(1, sizeof *c);
    if (!c) goto fail;
    c->tok = tok;
    st = muse_grammar_matcher_create(g, v, &c->m, err);
    if (st != MUSE_OK) goto fail_set;
    st = MUSE_ERR_NOMEM;
    if (triggers) {
        size_t n = 0;
        while (triggers[n]) n++;
        c->triggers = calloc(n + 1, sizeof *c->triggers);
        if (!c->triggers) goto fail;
        for (size_t i = 0; i < n; i++)
            if (!(c->triggers[i] = strdup(triggers[i]))) goto fail;
        if (seed) tail_add(c, seed, strlen(seed));
        c->armed = tail_hits(c);
    } else {
        c->armed = true;
    }
    *out = c;
    return MUSE_OK;
fail:
    muse_error_set(err, st, "grammar: out of memory");
fail_set:
    muse_constraint_free(c);
    return st;
}

bool muse_constraint_armed(const struct muse_constraint *c) { return c->armed; }

bool muse_constraint_complete(const struct muse_constraint *c) {
    return c->armed && muse_grammar_matcher_can_end(c->m);
}

void muse_constraint_counts(const struct muse_constraint *c, uint64_t *n_sampled, uint64_t *n_masked, double *ms) {
    *n_sampled = c->n_sampled;
    *n_masked = c->n_masked;
    if (ms) *ms = (double)c->us / 1000.0;
}

muse_status muse_constraint_sample(struct muse_constraint *c, struct muse_sampler *s, const float *logits, int32_t *tok,
                                   struct muse_error *err) {
    *tok = muse_sampler_sample(s, logits);
    if (!c->armed) return MUSE_OK;
    const int64_t t0 = muse_time_us();
    c->n_sampled++;
    bool ok = false;
    muse_status st = muse_grammar_matcher_allows(c->m, *tok, &ok, err);
    if (st != MUSE_OK || ok) {
        c->us += muse_time_us() - t0;
        return st;
    }
    /* resample with the grammar applied first (llama.cpp's rejection path) */
    c->n_masked++;
    const uint32_t *bits = NULL;
    int32_t n_allowed = 0;
    st = muse_grammar_matcher_mask(c->m, &bits, &n_allowed, err);
    c->us += muse_time_us() - t0; /* the second draw is the sampler's own cost */
    if (st != MUSE_OK) return st;
    const int32_t t = n_allowed ? muse_sampler_sample_masked(s, logits, bits) : -1;
    if (t < 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "grammar: no token can continue the output here");
    *tok = t;
    return MUSE_OK;
}

muse_status muse_constraint_accept(struct muse_constraint *c, int32_t tok, struct muse_error *err) {
    if (c->armed) {
        const int64_t t0 = muse_time_us();
        muse_status st = muse_grammar_matcher_accept(c->m, tok, err);
        c->us += muse_time_us() - t0;
        return st;
    }
    size_t n = 0;
    const char *p = muse_tokenizer_token_bytes(c->tok, tok, &n);
    if (p && n) tail_add(c, p, n);
    c->armed = tail_hits(c);
    return MUSE_OK;
}
