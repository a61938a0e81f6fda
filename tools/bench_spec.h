/*
 * bench_spec.h - `muse bench --draft-model D`: greedy generation with and without speculative
 * decoding (src/speculative/spec.h), alternating plain and speculative runs, llama-bench style.
 *
 * Two tests after the usual ones: "tgN plain" and "tgN spec": N tokens generated greedily from the
 * same prompt (its evaluation not timed) through the same loop, without and with the drafter; the
 * runs alternate (plain, spec, plain, spec ...) after one warm-up of each, so a shared, noisy
 * machine slows both alike. Stop tokens do not end a run (as llama-bench). Reported per test: t/s
 * (mean +- stddev, and the median), and for spec the drafts verified and accepted, the acceptance
 * rate, the mean accepted length (tokens emitted per verify step, the bonus token included), the
 * steps the governor parked, and the speedup (median spec / median plain t/s).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "muse.h"
#include "speculative/spec.h"

#define BENCH_SPEC_MAX_REPS 100

struct bench_spec_result {
    char test[64];
    int n_gen, n_prompt, reps;
    double samples_ns[BENCH_SPEC_MAX_REPS], samples_ts[BENCH_SPEC_MAX_REPS];
    double avg_ts, stddev_ts, median_ts, avg_ns, stddev_ns;
    bool spec;
    struct muse_spec_stats stats; /* the timed runs together */
};

/*
 * Run both tests on ctx (a context of model; cleared first; its KV state is the loop's from then on) with drafter d
 * and params; prompt[0..n_prompt) is the prompt. out[0] = plain, out[1] = spec. Returns false
 * after printing "muse bench: <message>".
 */
bool bench_spec_run(const struct muse_model *model, struct muse_context *ctx, const struct muse_drafter *d, struct muse_spec_params params, const int32_t *prompt,
                    int n_prompt, int n_gen, int reps, struct bench_spec_result out[2]);

/* Speedup of out[1] over out[0]: median t/s ratio. */
double bench_spec_speedup(const struct bench_spec_result out[2]);
