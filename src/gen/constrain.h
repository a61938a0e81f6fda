/*
 * constrain.h - grammar-constrained sampling: a sampler (gen/sampler.h) plus a grammar matcher
 * (gen/grammar.h), in llama.cpp's order (common/sampling.cpp): sample with the usual chain; if
 * the grammar allows that token keep it (one cheap per-token check), else mask the logits with
 * the grammar's allowed tokens and sample again with the mask applied before the chain. Greedy
 * decoding gives the argmax over the allowed tokens either way.
 *
 * A constraint can be armed from the start (`muse run`, /completion) or lazily, once the
 * generated text ends with a trigger (chat: the Glimmer answer header `to=user<|message|>`,
 * so reasoning stays free and the answer is constrained).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gen/grammar.h"
#include "gen/sampler.h"
#include "muse.h"

struct muse_tokenizer;
struct muse_constraint;

enum muse_grammar_syntax {
    MUSE_GRAMMAR_GBNF,        /* GBNF text, root rule "root" */
    MUSE_GRAMMAR_JSON_SCHEMA, /* a JSON Schema (text), converted with gen/json_schema.h */
    MUSE_GRAMMAR_CHAT_JSON_SCHEMA, /* a whole chat answer with JSON under the schema (text):
                                      muse_chat_json_grammar (gen/tool_grammar.h) */
};

/*
 * Compile a grammar given as GBNF or as a JSON Schema. tok (may be NULL) resolves <TEXT> token
 * references. Errors: FORMAT ("line L, column C: ..." of the grammar, or of the schema's JSON),
 * UNSUPPORTED (a schema keyword that cannot be enforced, with its JSON pointer), NOMEM.
 */
muse_status muse_grammar_compile(enum muse_grammar_syntax syntax, const char *text, size_t len,
                                 const struct muse_tokenizer *tok, struct muse_grammar **out, struct muse_error *err);

/*
 * A constraint over grammar g. g, v and tok are borrowed and must outlive it (v built from tok;
 * one grammar may serve many constraints, each with its own matcher). triggers: NULL = armed now;
 * else a NULL-terminated list of texts, armed once the text seen ends with one of them; seed
 * (may be NULL) is text taken as already seen (the end of the prompt). Errors: NOMEM,
 * UNSUPPORTED (see muse_grammar_matcher_create).
 */
muse_status muse_constraint_create(const struct muse_grammar *g, const struct muse_grammar_vocab *v,
                                   const struct muse_tokenizer *tok, const char *const *triggers, const char *seed,
                                   struct muse_constraint **out, struct muse_error *err);
void muse_constraint_free(struct muse_constraint *c);

/* Whether the grammar is active now. */
bool muse_constraint_armed(const struct muse_constraint *c);

/*
 * Choose the next token (*tok) from logits with sampler s, constrained when armed. Does not
 * accept it (call muse_constraint_accept and muse_sampler_accept). Errors: INVALID_ARG when no
 * token the grammar allows has a logit (a dead end), those of the matcher (NOMEM, UNSUPPORTED).
 */
muse_status muse_constraint_sample(struct muse_constraint *c, struct muse_sampler *s, const float *logits, int32_t *tok,
                                   struct muse_error *err);

/*
 * Advance past token tok (generated, or forced by the caller). When armed, a token the grammar
 * refuses is INVALID_ARG (state unchanged).
 */
muse_status muse_constraint_accept(struct muse_constraint *c, int32_t tok, struct muse_error *err);

/* Whether the constrained text so far is a complete match (armed and the grammar can end). */
bool muse_constraint_complete(const struct muse_constraint *c);

/* Counters: how many tokens needed the mask (a resample) out of those sampled while armed, and
 * the milliseconds the grammar took (the checks, masks and accepts; *ms may be NULL). */
void muse_constraint_counts(const struct muse_constraint *c, uint64_t *n_sampled, uint64_t *n_masked, double *ms);
