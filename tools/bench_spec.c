/* bench_spec.c - plain vs speculative greedy generation for `muse bench` (bench_spec.h). */
#include "bench_spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "gen/session.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stats(struct bench_spec_result *r) {
    double s = 0, sn = 0, v = 0, vn = 0, sorted[BENCH_SPEC_MAX_REPS];
    for (int i = 0; i < r->reps; i++) s += r->samples_ts[i], sn += r->samples_ns[i];
    r->avg_ts = s / r->reps;
    r->avg_ns = sn / r->reps;
    for (int i = 0; i < r->reps; i++) {
        v += (r->samples_ts[i] - r->avg_ts) * (r->samples_ts[i] - r->avg_ts);
        vn += (r->samples_ns[i] - r->avg_ns) * (r->samples_ns[i] - r->avg_ns);
    }
    r->stddev_ts = r->reps > 1 ? sqrt(v / (r->reps - 1)) : 0;
    r->stddev_ns = r->reps > 1 ? sqrt(vn / (r->reps - 1)) : 0;
    memcpy(sorted, r->samples_ts, sizeof(double) * (size_t)r->reps);
    qsort(sorted, (size_t)r->reps, sizeof(double), cmp_double);
    r->median_ts = r->reps % 2 ? sorted[r->reps / 2] : (sorted[r->reps / 2 - 1] + sorted[r->reps / 2]) / 2;
}

/* One run: clear, prompt (untimed), n_gen greedy tokens (timed). Nanoseconds, or -1. */
static double run_once(struct muse_gen *g, struct muse_sampler *smp, const int32_t *prompt, int n_prompt, int n_gen) {
    struct muse_error err;
    muse_gen_clear(g);
    muse_sampler_reset(smp);
    if (muse_gen_eval(g, prompt, n_prompt, &err)) {
        cli_err("%s", err.msg);
        return -1;
    }
    muse_gen_begin(g, smp);
    const int64_t t0 = muse_time_us();
    for (int i = 0; i < n_gen; i++) {
        int32_t t;
        if (muse_gen_sample(g, &t, NULL, &err) || (i + 1 < n_gen && muse_gen_advance(g, t, n_gen - i - 1, &err))) {
            cli_err("%s", err.msg);
            return -1;
        }
    }
    return (double)(muse_time_us() - t0) * 1e3;
}

bool bench_spec_run(const struct muse_model *model, struct muse_context *ctx, const struct muse_drafter *d, struct muse_spec_params params, const int32_t *prompt,
                    int n_prompt, int n_gen, int reps, struct bench_spec_result out[2]) {
    struct muse_error err;
    struct muse_session *ses = NULL;
    struct muse_gen *g[2] = {NULL, NULL}; /* plain, and with speculative decoding plugged in */
    struct muse_spec *sp = NULL;
    struct muse_sampler *smp = NULL;
    bool ok = false;
    struct muse_session_params ps = {.n_checkpoints = 0};
    if (muse_session_create(ctx, ps, &ses, &err) || muse_gen_create(ses, &g[0], &err) ||
        muse_gen_create(ses, &g[1], &err) || muse_spec_create(g[1], d, params, &sp, &err) ||
        muse_sampler_create(muse_sampler_default_params(), muse_model_n_vocab(model), &smp, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        memset(&out[k], 0, sizeof out[k]);
        snprintf(out[k].test, sizeof out[k].test, "tg%d %s", n_gen, k ? "spec" : "plain");
        out[k].n_gen = n_gen;
        out[k].n_prompt = n_prompt;
        out[k].reps = reps;
        out[k].spec = k == 1;
        if (run_once(g[k], smp, prompt, n_prompt, n_gen) < 0) goto done; /* warm-up */
    }
    muse_spec_stats_reset(sp);
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) { /* alternating */
            const double ns = run_once(g[k], smp, prompt, n_prompt, n_gen);
            if (ns < 0) goto done;
            out[k].samples_ns[r] = ns;
            out[k].samples_ts[r] = n_gen / (ns * 1e-9);
        }
    for (int k = 0; k < 2; k++) stats(&out[k]);
    out[1].stats = muse_spec_stats(sp);
    ok = true;
done:
    muse_sampler_free(smp);
    muse_spec_free(sp);
    muse_gen_free(g[1]);
    muse_gen_free(g[0]);
    muse_session_free(ses);
    return ok;
}

double bench_spec_speedup(const struct bench_spec_result out[2]) {
    return out[0].median_ts > 0 ? out[1].median_ts / out[0].median_ts : 0;
}
