/*
 * test_quantize_cancel.c - muse_quantize's progress callback (muse.h: user first, 0 goes on,
 * nonzero cancels): every tensor reported once, in order, with its index and count; a nonzero
 * answer mid-way fails the run with MUSE_ERR_CANCELLED and leaves no output file (neither a new
 * one nor the one it truncated); a cancelled dry run fails the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "muse.h"
#include "synth/synth.h"
#include "test.h"

struct seen {
    int calls, stop_at, last_index, n_tensors;
    bool in_order;
};

static int on_tensor(void *user, const struct muse_quantize_tensor *t) {
    struct seen *s = user;
    s->in_order &= t->index == s->calls && t->name && t->type_in && t->type_out;
    s->calls++;
    s->last_index = t->index;
    s->n_tensors = t->n_tensors;
    return s->stop_at >= 0 && s->calls >= s->stop_at;
}

static muse_status quantize(const char *in, const char *out, int dry_run, struct seen *s, struct muse_error *err) {
    struct muse_quantize_params p = muse_quantize_default_params();
    p.type = "Q8_0";
    p.n_threads = 1;
    p.dry_run = dry_run;
    p.progress = on_tensor;
    p.progress_user = s;
    s->calls = 0;
    s->in_order = true;
    return muse_quantize(in, out, &p, NULL, err);
}

int main(void) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/muse-test-qcancel-in-%d.gguf", tmp, (int)getpid());
    snprintf(out, sizeof out, "%s/muse-test-qcancel-out-%d.gguf", tmp, (int)getpid());
    struct muse_synth_config cfg;
    struct muse_error err;
    muse_synth_preset("tiny", &cfg, &err);
    cfg.n_layer = 2;
    if (muse_synth_parse_types("*=f16", &cfg, &err) || muse_synth_write(&cfg, in, NULL, NULL, &err)) {
        TEST_CONDF(0, "synth: %s", err.msg);
        return TEST_REPORT();
    }

    /* a whole run: every tensor once, in order */
    struct seen s = {.stop_at = -1};
    TEST_CONDF(quantize(in, out, 0, &s, &err) == MUSE_OK, "full run: %s", err.msg);
    TEST_CONDF(s.in_order && s.calls == s.n_tensors && s.n_tensors > 4, "full run: %d calls for %d tensors", s.calls,
               s.n_tensors);
    TEST_COND("full run writes the file", access(out, F_OK) == 0);
    const int n = s.n_tensors;

    /* cancelled after the third tensor: the file it truncated is gone, no further call */
    s.stop_at = 3;
    muse_status st = quantize(in, out, 0, &s, &err);
    TEST_CONDF(st == MUSE_ERR_CANCELLED && strstr(err.msg, "cancelled"), "cancelled run: status %d (%s)", st, err.msg);
    TEST_CONDF(s.calls == 3 && s.last_index == 2, "cancelled run: %d calls, last index %d", s.calls, s.last_index);
    TEST_COND("cancelled run removes its output", access(out, F_OK) != 0);

    /* cancelled on the last tensor (everything written, the file not yet closed): still removed */
    s.stop_at = n;
    st = quantize(in, out, 0, &s, &err);
    TEST_CONDF(st == MUSE_ERR_CANCELLED && s.calls == n, "cancelled at the last tensor: status %d, %d calls", st,
               s.calls);
    TEST_COND("cancelled at the last tensor: no output", access(out, F_OK) != 0);

    /* a dry run reports the plan the same way and can be cancelled too */
    s.stop_at = -1;
    TEST_CONDF(quantize(in, NULL, 1, &s, &err) == MUSE_OK && s.calls == n && s.in_order, "dry run: %d calls", s.calls);
    s.stop_at = 1;
    TEST_CONDF(quantize(in, NULL, 1, &s, &err) == MUSE_ERR_CANCELLED && s.calls == 1, "cancelled dry run: %d calls",
               s.calls);

    unlink(in);
    unlink(out);
    return TEST_REPORT();
}
