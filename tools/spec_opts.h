/*
 * spec_opts.h - the speculative decoding flags shared by `muse run`, `muse chat`, `muse serve` and
 * `muse bench` (docs/speculative.md): the DFlash drafter and how much it may draft. One parser,
 * one usage text, the pattern of model_opts.h and sampling_opts.h.
 *
 *   --draft-model FILE   (also llama.cpp's -md, --model-draft, --spec-draft-model; env MUSE_DRAFT_MODEL)
 *   --spec-draft-n-max N drafts per step at most (llama.cpp's flag and default, 3)
 *   --spec-draft-p-min P llama.cpp's per-row confidence gate (also --draft-p-min); without it the
 *                        adaptive floor (src/speculative/governor.h) gates
 *   --spec-type T        accepted for llama.cpp's command lines: only draft-dflash
 *   --draft-kv T         the drafter's ring type (f16 default, f32, q8_0)
 *   --no-spec-governor   speculate on every step (measurements; the cost governor is on by default)
 *   --no-spec-shadow     the governor's probe rounds without their shadow drafts (measurements)
 *   --no-spec-budget     lost shadow rounds park the card's 16, 32, 64 steps only (measurements)
 *   --no-spec-carry      the governor reset per request (the model card's rule; measurements)
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "muse.h"
#include "speculative/spec.h"

struct spec_opts {
    const char *draft_path;      /* NULL: no drafter (plain decoding) */
    struct muse_spec_params sp;  /* n_max, p_min, governor, ring_type */
};

/* Defaults; the drafter path from MUSE_DRAFT_MODEL when set (non-empty). */
void spec_opts_init(struct spec_opts *o);

/* If argv[*i] is a speculative flag, consume it (and its value) and return 1; 0 when it is not
 * one; -1 after printing "muse CMD: bad value for FLAG ..." (or a missing value) on stderr. One
 * struct cli_opt table (cli.h), so --help lists every spelling. */
int spec_opts_parse(struct spec_opts *o, int argc, char **argv, int *i);

/* The usage lines of the flags. */
void spec_opts_usage(FILE *f);

/* Load the drafter for model when a path was given (*out NULL otherwise); on failure print
 * "muse CMD: <message>" (CMD: cli_prog; `cmd` is kept for the callers) and return false. */
bool spec_opts_load(const struct spec_opts *o, const char *cmd, const struct muse_model *model, struct muse_drafter **out);

/* One stderr-style summary of a run's speculation into buf ("" when sp is NULL: no drafter), in plain
 * words: "speculative: A accepted of D drafted tokens (x%), T tokens per model step"; verbose (-v)
 * adds the step counts (verify, plain, parked, shadow, gated out, per floor). */
void spec_opts_summary(const struct muse_spec *sp, bool verbose, char *buf, size_t size);
