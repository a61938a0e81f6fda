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

int spec_opts_parse(struct spec_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int64_t n;
    double x;
    if (!strcmp(a, "--draft-model") || !strcmp(a, "-md") || !strcmp(a, "--model-draft") || !strcmp(a, "--spec-draft-model")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        o->draft_path = v;
        return 1;
    }
    if (!strcmp(a, "--spec-draft-n-max")) {
        if (!(v = cli_next(argc, argv, i)) || !cli_parse_int(a, v, 0, 255, &n)) return -1;
        o->sp.n_max = (int32_t)n;
        return 1;
    }
    if (!strcmp(a, "--spec-draft-p-min") || !strcmp(a, "--draft-p-min")) {
        if (!(v = cli_next(argc, argv, i)) || !cli_parse_float(a, v, &x)) return -1;
        if (!(x >= 0 && x <= 1)) {
            fprintf(stderr, "muse: bad value for %s: '%s' (a probability 0..1)\n", a, v);
            return -1;
        }
        o->sp.p_min = (float)x;
        return 1;
    }
    if (!strcmp(a, "--spec-type")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        if (strcmp(v, "draft-dflash")) {
            fprintf(stderr, "muse: bad value for --spec-type: '%s' (muse speculates with a DFlash drafter only: draft-dflash)\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--draft-kv")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        int k = muse_kv_type_from_name(v);
        if (k < 0) {
            fprintf(stderr, "muse: bad value for --draft-kv: '%s' (expected f16, f32 or q8_0)\n", v);
            return -1;
        }
        o->sp.ring_type = (enum muse_kv_type)k;
        return 1;
    }
    if (!strcmp(a, "--no-spec-governor")) {
        o->sp.governor = false;
        return 1;
    }
    return 0;
}

void spec_opts_usage(FILE *f) {
    fprintf(f,
            "speculative decoding (docs/speculative.md):\n"
            "  --draft-model FILE   DFlash drafter GGUF for the model (also -md, --model-draft,\n"
            "                       --spec-draft-model; env MUSE_DRAFT_MODEL); output is unchanged\n"
            "  --spec-draft-n-max N drafts per step at most (default 3, as llama.cpp; at most the drafter's\n"
            "                       block size - 1; 0: none)\n"
            "  --spec-draft-p-min P keep drafts while each row's top-10 probability is >= P (llama.cpp's gate;\n"
            "                       default: an adaptive floor on the cumulative confidence)\n"
            "  --draft-kv T         the drafter's KV ring: f16 (default), f32 or q8_0\n"
            "  --no-spec-governor   draft on every step (by default a cost governor parks drafting when it\n"
            "                       does not pay)\n");
}

bool spec_opts_load(const struct spec_opts *o, const char *cmd, const struct muse_model *model, struct muse_drafter **out) {
    struct muse_error err;
    *out = NULL;
    if (!o->draft_path) return true;
    if (muse_drafter_load(o->draft_path, model, muse_drafter_default_params(), out, &err)) {
        fprintf(stderr, "muse %s: %s\n", cmd, err.msg);
        return false;
    }
    return true;
}

void spec_opts_summary(const struct muse_spec *sp, char *buf, size_t size) {
    buf[0] = 0;
    if (!sp || !muse_spec_has_drafter(sp)) return;
    const struct muse_spec_stats s = muse_spec_stats(sp);
    int n = snprintf(buf, size,
             "speculative: %llu verify steps, %llu drafted, %llu accepted (%.1f%%), %.2f tokens per verify step; "
             "%llu plain steps (%llu parked), %llu gated out",
             (unsigned long long)s.n_steps_spec, (unsigned long long)s.n_drafted, (unsigned long long)s.n_accepted,
             s.n_drafted ? 100.0 * (double)s.n_accepted / (double)s.n_drafted : 0.0,
             s.n_steps_spec ? (double)s.n_emitted_spec / (double)s.n_steps_spec : 0.0, (unsigned long long)s.n_steps_plain,
             (unsigned long long)s.n_steps_parked, (unsigned long long)s.n_steps_gated);
    if (s.n_floor_steps[0] + s.n_floor_steps[1] + s.n_floor_steps[2] + s.n_floor_steps[3] > 0 && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "; verify steps per floor: %.2f %llu, %.2f %llu, %.2f %llu, %.2f %llu",
                 (double)muse_spec_floors[0], (unsigned long long)s.n_floor_steps[0], (double)muse_spec_floors[1],
                 (unsigned long long)s.n_floor_steps[1], (double)muse_spec_floors[2], (unsigned long long)s.n_floor_steps[2],
                 (double)muse_spec_floors[3], (unsigned long long)s.n_floor_steps[3]);
}
