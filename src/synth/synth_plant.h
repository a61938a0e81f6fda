/*
 * synth_plant.h - a synthetic target + DFlash drafter pair whose drafts are accepted, for the tests
 * and benchmarks of speculative decoding (`muse synth --cycle L`, `muse synth --dflash --copy`).
 * Random drafters accept nothing; a trained pair is not always at hand; this one is built by hand.
 *
 * The target (rewritten from a `muse synth` file): a bigram model with a planted structure. Every
 * token embedding is [c, 0, 0, content(t), 0...] with c = 1 and content(t) ~ N(0, 1) in m
 * dimensions (m: `content`); the LM head row of succ(t) is content(t) (so the residual of a token
 * votes for its successor), where succ cycles through the normal tokens in cycles of `period`
 * tokens; control tokens have no content and a head row of -4 on dimension 0, so they never win
 * (except EOS when `stop_in_cycle` makes it the last token of the first
 * cycle: the first period - 1 normal tokens, then EOS). The layers keep their random
 * weights but their post-norm weights become `noise` x (1 + N(0, 0.1)): each layer adds a
 * context-dependent vector of RMS about `noise` to the residual. With noise 0 the greedy text from
 * any token walks its cycle forever (period `period`); with noise it now and then jumps elsewhere.
 * The keys muse.synth.plant.period / .content record the structure for the drafter.
 *
 * The drafter (rewritten from a `muse synth --dflash` file for that target, with target layer 0
 * among its target layers): it predicts by copying. Context keys get a constant direction (fc maps
 * the embedding's dimension 0 to g's dimension 1, which token embeddings never have), so the block
 * rows' keys are zero; every query head of layer 0 asks, through NeoX RoPE, for the context key
 * exactly D = period + 1 positions back, and the value copies that position's content into the
 * row's residual; the borrowed LM head turns content(x) into succ(x). So draft row r proposes
 * succ(token at P + r - D) = the token at P + r when the text is periodic - correct for rows
 * 1..period, wrong beyond (the key it needs is not in the ring yet). Other heads, layers and every
 * FFN contribute nothing (their output projections are zero). Acceptance is high on periodic
 * stretches, partial after a noise jump (the copy source predates it) and nil early on.
 *
 * Matrices that get values need a type with a quantizer (f32, f16, bf16, q8_0): the target's
 * token_embd and output, the drafter's fc and layer-0 attn_q/k/v/output; zeros fit any type.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "muse.h"

struct muse_synth_plant_config {
    int32_t period;      /* cycle length L >= 2 */
    float noise;         /* post-norm weight scale (0: exactly periodic greedy text) */
    int32_t content;     /* content dimensions m; 0 = min(n_embd - 3, max(16, n_embd / 2)) */
    bool stop_in_cycle;  /* EOS ends the first cycle */
    uint64_t seed;
};

/* Rewrite the target at `in` into `out` (may be the same path). Errors: MUSE_ERR_IO, FORMAT,
 * INVALID_ARG (period < 2, content too wide, a type without a quantizer). */
muse_status muse_synth_plant_target(const char *in, const char *out, const struct muse_synth_plant_config *cfg,
                                    struct muse_error *err);

/* Rewrite the drafter at `in` (made for `target`, a planted target) into `out` (may be `in`).
 * Errors: also INVALID_ARG when the target is not planted, the drafter has no target layer 0, its
 * window cannot reach period + 1 positions back, or its KV width is narrower than the content. */
muse_status muse_synth_plant_drafter(const char *target, const char *in, const char *out, struct muse_error *err);
