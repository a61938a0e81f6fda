/*
 * forward.h - the Muse-Glimmer text forward (text-model.md section 5) as a program of layer ops
 * (backend/program.h), built once per context and run by its device (backend/device.h) over a
 * batch of rows from one or more sequences.
 *
 * The program's activation buffers live in the device's workspace; the KV cache is per sequence
 * (kv_cache.h) and bound per run (struct muse_prog_run: each row's sequence and position). A run
 * embeds every row (a token, or an injected row), runs every layer (each row's K/V stored into
 * its sequence's cache at its position; attention over its own sequence), then the head for the
 * output rows (first_out..n-1).
 */
#pragma once

#include "backend/program.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "muse.h"

/*
 * Build the text program for batches of up to n_batch rows into *p (free with
 * muse_program_free). Binds: MUSE_BUF_LOGITS [n_out][n_vocab]; with embeddings also
 * MUSE_BUF_EMBD [n_rows][n_embd], every row's final hidden state (rms(x) * output_norm, the head's
 * input); OBSERVE layers 0..n_layer over the residual. Errors: NOMEM.
 */
muse_status muse_text_program_build(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                    bool embeddings, struct muse_program *p, struct muse_error *err);

/*
 * The program of layers il0..il1-1 only (muse_text_program_build: 0..n_layer), for a model split
 * between two devices (-ngl, docs/vulkan.md "Partial offload"). il0 > 0: every row comes in as an
 * injected row (muse_prog_run embd), the residual entering layer il0, not normed again.
 * il1 < n_layer: no head and no embeddings; the run's output is the residual entering layer il1,
 * the feature rows of OBSERVE il1. Ops keep the model's layer numbers (the KV layer arrays).
 * Errors: INVALID_ARG (an empty or out-of-range span), NOMEM.
 */
muse_status muse_text_program_build_layers(const struct muse_hparams *hp, const struct muse_weights *w, int32_t n_batch,
                                           bool embeddings, uint32_t il0, uint32_t il1, struct muse_program *p,
                                           struct muse_error *err);

/* Largest matmul input dimension of the model (for device planning). */
int64_t muse_weights_max_ne0(const struct muse_hparams *hp, const struct muse_weights *w);
