/* spec_opts.c - the speculative decoding flags of run, chat, serve and bench (spec_opts.h). */
#include "spec_opts.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

void spec_opts_init(struct spec_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = muse_spec_default_params();
    const char *env = getenv("MUSE_DRAFT_MODEL");
    if (env && *env) o->draft_path = env;
}

#define O(dst) ((struct spec_opts *)(dst))

static int set_model(void *d, const char *f, const char *v) {
    if (muse_tp_size() > 1) { /* the drafter reads the target's feature rows, not split yet */
        cli_err("%s: speculative decoding (DFlash) is not supported under --tp yet (docs/tensor-parallel.md)", f);
        return -1;
    }
    (void)f;
    O(d)->draft_path = v;
    return 0;
}

static int set_n_max(void *d, const char *f, const char *v) {
    int64_t n;
    if (!cli_parse_int(f, v, 0, 255, &n)) return -1;
    O(d)->sp.n_max = (int32_t)n;
    return 0;
}

static int set_p_min(void *d, const char *f, const char *v) {
    double x;
    if (!cli_parse_float(f, v, &x)) return -1;
    if (!(x >= 0 && x <= 1)) {
        cli_err("bad value for %s: '%s' (expected a probability 0..1)", f, v);
        return -1;
    }
    O(d)->sp.p_min = (float)x;
    return 0;
}

static int set_type(void *d, const char *f, const char *v) {
    (void)d;
    if (strcmp(v, "draft-dflash")) {
        cli_err("bad value for %s: '%s' (muse speculates with a DFlash drafter only: draft-dflash)", f, v);
        return -1;
    }
    return 0;
}

static int set_kv(void *d, const char *f, const char *v) {
    int k = muse_kv_type_from_name(v);
    if (k < 0) {
        cli_err("bad value for %s: '%s' (expected f16, f32 or q8_0)", f, v);
        return -1;
    }
    O(d)->sp.ring_type = (enum muse_kv_type)k;
    return 0;
}

static int set_no_governor(void *d, const char *f, const char *v) {
    (void)f;
    (void)v;
    O(d)->sp.governor = false;
    return 0;
}

static int set_no_shadow(void *d, const char *f, const char *v) {
    (void)f;
    (void)v;
    O(d)->sp.shadow_probe = false;
    return 0;
}

static int set_no_carry(void *d, const char *f, const char *v) {
    (void)f;
    (void)v;
    O(d)->sp.carry = false;
    return 0;
}

static int set_no_budget(void *d, const char *f, const char *v) {
    (void)f;
    (void)v;
    O(d)->sp.shadow_budget = false;
    return 0;
}

static const struct cli_opt rows[] = {
    {"-md|--draft-model|--model-draft|--spec-draft-model", "FILE",
     "DFlash drafter GGUF for the model (env MUSE_DRAFT_MODEL); the output is unchanged", set_model},
    {"--spec-draft-n-max", "N", "drafts per step at most (default 3, as llama.cpp; at most the\n"
                                "drafter's block size - 1; 0: none)", set_n_max},
    {"--spec-draft-p-min|--draft-p-min", "P", "keep drafts while each row's top-10 probability is >= P (llama.cpp's\n"
                                              "gate; default: an adaptive floor on the cumulative confidence)", set_p_min},
    {"--spec-type", "T", "accepted for llama.cpp's command lines: draft-dflash only", set_type},
    {"--draft-kv", "T", "the drafter's KV ring: f16 (default), f32 or q8_0", set_kv},
    {"--no-spec-governor", NULL, "draft on every step (by default a cost governor parks drafting\n"
                                 "when it does not pay)", set_no_governor},
    {"--no-spec-shadow", NULL, "the governor's probe rounds verify drafts from their first step (by\n"
                               "default they first check 4 first drafts without verifying them)", set_no_shadow},
    {"--no-spec-budget", NULL, "a lost shadow round parks the model card's 16, 32, 64 steps only (by\n"
                               "default at least as long as keeps its cost within 2% of decode time)", set_no_budget},
    {"--no-spec-carry", NULL, "each request starts the governor afresh (the model card's reset; by\n"
                              "default a request starts from the last one's verdict)", set_no_carry},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

int spec_opts_parse(struct spec_opts *o, int argc, char **argv, int *i) { return cli_opts_parse(rows, N_ROWS, o, argc, argv, i); }

void spec_opts_usage(FILE *f) {
    fprintf(f, "speculative decoding (docs/speculative.md):\n");
    cli_opts_usage(f, rows, N_ROWS);
}

bool spec_opts_load(const struct spec_opts *o, const char *cmd, const struct muse_model *model, struct muse_drafter **out) {
    struct muse_error err;
    *out = NULL;
    if (!o->draft_path) return true;
    if (muse_drafter_load(o->draft_path, model, muse_drafter_default_params(), out, &err)) {
        (void)cmd;
        cli_err("%s", err.msg);
        return false;
    }
    return true;
}

void spec_opts_summary(const struct muse_spec *sp, bool verbose, char *buf, size_t size) {
    buf[0] = 0;
    if (!sp) return;
    const struct muse_spec_stats s = muse_spec_stats(sp);
    int n = snprintf(buf, size, "speculative: %llu accepted of %llu drafted tokens (%.1f%%), %.2f tokens per model step",
                     (unsigned long long)s.n_accepted, (unsigned long long)s.n_drafted,
                     s.n_drafted ? 100.0 * (double)s.n_accepted / (double)s.n_drafted : 0.0,
                     s.n_steps_spec ? (double)s.n_emitted_spec / (double)s.n_steps_spec : 0.0);
    if (!verbose || n <= 0 || (size_t)n >= size) return;
    n += snprintf(buf + n, size - (size_t)n, " (%llu verify steps; %llu plain steps: %llu parked, %llu shadow; %llu gated out)",
                  (unsigned long long)s.n_steps_spec, (unsigned long long)s.n_steps_plain, (unsigned long long)s.n_steps_parked,
                  (unsigned long long)s.n_steps_shadow, (unsigned long long)s.n_steps_gated);
    if (s.n_floor_steps[0] + s.n_floor_steps[1] + s.n_floor_steps[2] + s.n_floor_steps[3] > 0 && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "; verify steps per floor: %.2f %llu, %.2f %llu, %.2f %llu, %.2f %llu",
                 (double)muse_spec_floors[0], (unsigned long long)s.n_floor_steps[0], (double)muse_spec_floors[1],
                 (unsigned long long)s.n_floor_steps[1], (double)muse_spec_floors[2], (unsigned long long)s.n_floor_steps[2],
                 (double)muse_spec_floors[3], (unsigned long long)s.n_floor_steps[3]);
}
