/* progress.c - progress lines for model loading and long prefills (progress.h). */
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/error.h"
#include "core/timer.h"

void progress_begin(struct progress *p, bool on) {
    memset(p, 0, sizeof *p);
    p->on = on;
    p->t0_us = muse_time_us();
}

void progress_draw(struct progress *p, bool force, const char *fmt, ...) {
    if (!p->on) return;
    const int64_t now = muse_time_us();
    if (!force && p->drawn && now - p->last_us < 100000) return;
    p->last_us = now;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\r\033[K%s: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    p->drawn = true;
}

void progress_end(struct progress *p) {
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}

double progress_seconds(const struct progress *p) { return (double)(muse_time_us() - p->t0_us) / 1e6; }

int progress_load_cb(void *user, uint64_t done, uint64_t total) {
    struct load_progress *lp = user;
    const double s = progress_seconds(&lp->p), gib = 1024.0 * 1024.0 * 1024.0;
    const char *base = strrchr(lp->file, '/');
    progress_draw(&lp->p, done == total, "loading %s: %3.0f%% (%.2f of %.2f GiB, %.2f GiB/s)", base ? base + 1 : lp->file,
                  total ? 100.0 * (double)done / (double)total : 100.0, (double)done / gib, (double)total / gib,
                  s > 0 ? (double)done / gib / s : 0.0);
    return 0;
}

muse_status progress_prefill(prefill_fn eval_chunk, void *target, const int32_t *tokens, int32_t n, int32_t n_batch,
                             float *logits, bool show, volatile sig_atomic_t *stop, struct muse_error *err) {
    struct progress p;
    progress_begin(&p, show && n > n_batch);
    muse_status st = MUSE_OK;
    if (n_batch < 1) n_batch = n;
    for (int32_t done = 0; done < n;) {
        if (stop && *stop) {
            st = muse_error_set(err, MUSE_ERR_CANCELLED, "interrupted after %d of %d prompt tokens", done, n);
            break;
        }
        const int32_t k = n - done < n_batch ? n - done : n_batch;
        if ((st = eval_chunk(target, tokens + done, k, done + k == n ? logits : NULL, err))) break;
        done += k;
        const double s = progress_seconds(&p), rate = s > 0 ? done / s : 0.0;
        progress_draw(&p, false, "prompt %d/%d tokens (%.0f%%, %.1f tok/s, %.0f s left)", done, n, 100.0 * done / n, rate,
                      rate > 0 ? (n - done) / rate : 0.0);
    }
    progress_end(&p);
    return st;
}
