/*
 * sampler.h - token sampling from a logits row, in llama.cpp's default chain order:
 * penalties (repeat / presence / frequency over the last repeat_last_n tokens) -> top-k ->
 * top-p -> min-p -> temperature -> random draw. temperature <= 0 means greedy (argmax after
 * the penalties; ties to the lower id). The model card recommends temperature 1.0,
 * top_p 0.95, top_k 64 for chat.
 *
 * A sampler owns its scratch (sized for n_vocab at creation) and its RNG; one sampler per
 * sequence, used from one thread at a time.
 */
#pragma once

#include <stdint.h>

#include "muse.h"

struct muse_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0 or >= n_vocab: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; logit > 0 is divided by it, logit <= 0 multiplied */
    int32_t repeat_last_n;   /* tokens of history the penalties look at (0: off) */
    float presence_penalty;  /* subtracted once from every token seen in the window (0: off) */
    float frequency_penalty; /* subtracted per occurrence in the window (0: off) */
    uint64_t seed;           /* RNG seed: the same seed and inputs give the same tokens */
};

/* Greedy, no penalties, repeat_last_n 64 (what `muse run` uses unless told otherwise). */
struct muse_sampler_params muse_sampler_default_params(void);

struct muse_sampler;

/* Create a sampler for rows of n_vocab logits. Errors: INVALID_ARG (bad values), NOMEM. */
muse_status muse_sampler_create(struct muse_sampler_params params, int32_t n_vocab, struct muse_sampler **out,
                                struct muse_error *err);
void muse_sampler_free(struct muse_sampler *s);

/* Record a token of the sequence (prompt or generated) for the penalties. */
void muse_sampler_accept(struct muse_sampler *s, int32_t token);

/* Forget the history and reseed the RNG with params.seed. */
void muse_sampler_reset(struct muse_sampler *s);

/*
 * Choose the next token from logits [n_vocab] (not modified). Does not call accept: the caller
 * accepts the token it keeps. Never fails; all-NaN rows give token 0.
 */
int32_t muse_sampler_sample(struct muse_sampler *s, const float *logits);

/*
 * The same over the tokens whose bit is set in allowed (bit id & 31 of allowed[id >> 5]; the
 * others count as logit -inf, removed before the penalties and truncations, as llama.cpp's
 * grammar sampler does when it runs first). Returns -1 when no allowed token has a logit.
 * Used by grammar-constrained decoding (gen/constrain.h).
 */
int32_t muse_sampler_sample_masked(struct muse_sampler *s, const float *logits, const uint32_t *allowed);
