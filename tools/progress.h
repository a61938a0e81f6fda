/*
 * progress.h - the one-line progress display of long work (loading a model, a long prefill):
 * redrawn in place on stderr ("\r...", at most 10 times a second), erased when the work ends,
 * and drawn only when stderr is a terminal and no quiet flag (--log-disable) was given, so logs
 * and pipes never see it.
 */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "muse.h"

struct progress {
    bool on;         /* draw at all */
    bool drawn;      /* a line is on the screen */
    int64_t t0_us;   /* when the work began */
    int64_t last_us; /* last redraw */
};

/* Begin a piece of work; on = whether to draw (cli_stderr_tty() && not quiet). */
void progress_begin(struct progress *p, bool on);
/* Redraw "muse CMD: <text>" (throttled; force draws now). */
void progress_draw(struct progress *p, bool force, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Erase the line (if one was drawn). */
void progress_end(struct progress *p);
/* Seconds since progress_begin. */
double progress_seconds(const struct progress *p);

/* A muse_progress_fn for muse_model_params: "loading FILE: 45% (4.3 of 9.7 GiB, 1.2 GiB/s)".
 * user = struct load_progress. */
struct load_progress {
    struct progress p;
    const char *file;
};
int progress_load_cb(void *user, uint64_t done, uint64_t total);

/* Evaluate a prompt in n_batch chunks through eval_chunk (muse_eval or muse_session_eval: chunking
 * at n_batch is what both do inside, so the result is the same), drawing "prompt D/T tokens (P%,
 * R tok/s, S s left)" when `show` and the prompt is longer than one chunk; logits (may be NULL) get the last
 * token's row. Stops between chunks when *stop becomes nonzero (MUSE_ERR_CANCELLED; the chunks
 * done stay evaluated). */
typedef muse_status (*prefill_fn)(void *target, const int32_t *tokens, int32_t n, float *logits, struct muse_error *err);
muse_status progress_prefill(prefill_fn eval_chunk, void *target, const int32_t *tokens, int32_t n, int32_t n_batch,
                             float *logits, bool show, volatile sig_atomic_t *stop, struct muse_error *err);
