/*
 * sampler.h - the server's sampling chain over one row of logits: repetition penalties
 * (presence/frequency over the tokens generated so far), then greedy (temperature 0) or
 * top-k -> temperature -> softmax -> top-p -> min-p -> a draw from a seeded RNG.
 * Used by the real-engine adapter until libmuse has a sampler of its own.
 */
#pragma once

#include <stdint.h>

#include "server/engine_iface.h"

struct muse_srv_sampler_scratch {
    struct cand *cand; /* [n_vocab] (logit, id) candidates */
    float *p;     /* [n_vocab] */
    int32_t *hist;/* [cap_hist] sorted copy of the history */
    int cap_hist;
};

/*
 * Pick a token from logits[n_vocab] (modified in place by the penalties). When n_probs > 0,
 * probs[0..n_probs) gets the top-n_probs of softmax(logits) before sampling (descending).
 * *rng is advanced. Returns MUSE_ERR_NOMEM when a scratch buffer cannot grow.
 */
muse_status muse_srv_sample(float *logits, int n_vocab, const struct muse_srv_sampling *sp, const int32_t *history,
                            int n_history, uint64_t *rng, int n_probs, struct muse_srv_prob *probs,
                            struct muse_srv_sampler_scratch *scratch, int32_t *tok);
void muse_srv_sampler_scratch_free(struct muse_srv_sampler_scratch *s);
