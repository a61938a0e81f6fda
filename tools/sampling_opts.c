/* sampling_opts.c - the sampling flags of `muse run`, `muse chat` and `muse serve` (sampling_opts.h). */
#include "sampling_opts.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* What a flag sets: one member of struct muse_sampler_params, and the values it takes. */
enum field_kind { FIELD_FLOAT, FIELD_INT32, FIELD_UINT64 };

struct field {
    enum field_kind kind;
    size_t offset;             /* of the member in struct muse_sampler_params */
    int64_t lo, hi;            /* integers: the range every command accepts (numbers: any) */
    double serve_lo, serve_hi; /* in serve: the domain of the request field it stands in for (+-INFINITY: none) */
};

enum field_id {
    F_TEMPERATURE,
    F_TOP_K,
    F_TOP_P,
    F_MIN_P,
    F_REPEAT_PENALTY,
    F_REPEAT_LAST_N,
    F_PRESENCE,
    F_FREQUENCY,
    F_SEED
};

#define AT(member) offsetof(struct muse_sampler_params, member)
static const struct field fields[] = {
    [F_TEMPERATURE] = {FIELD_FLOAT, AT(temperature), 0, 0, 0, INFINITY},
    [F_TOP_K] = {FIELD_INT32, AT(top_k), 0, INT32_MAX, 0, 1 << 30},
    [F_TOP_P] = {FIELD_FLOAT, AT(top_p), 0, 0, 0, 1},
    [F_MIN_P] = {FIELD_FLOAT, AT(min_p), 0, 0, 0, 1},
    [F_REPEAT_PENALTY] = {FIELD_FLOAT, AT(repeat_penalty), 0, 0, -INFINITY, INFINITY},
    [F_REPEAT_LAST_N] = {FIELD_INT32, AT(repeat_last_n), 0, 1 << 20, -INFINITY, INFINITY},
    [F_PRESENCE] = {FIELD_FLOAT, AT(presence_penalty), 0, 0, -INFINITY, INFINITY},
    [F_FREQUENCY] = {FIELD_FLOAT, AT(frequency_penalty), 0, 0, -INFINITY, INFINITY},
    [F_SEED] = {FIELD_UINT64, AT(seed), 0, INT64_MAX, -INFINITY, INFINITY},
};
#undef AT

/* The spellings, and the commands that accept each (an alias is one more row). */
#define ALL (SAMPLING_RUN | SAMPLING_CHAT | SAMPLING_SERVE)
static const struct spelling {
    const char *flag;
    enum field_id field;
    unsigned commands;
} spellings[] = {
    {"--temperature", F_TEMPERATURE, ALL},
    {"--temp", F_TEMPERATURE, SAMPLING_SERVE},
    {"--top-k", F_TOP_K, ALL},
    {"--top-p", F_TOP_P, ALL},
    {"--min-p", F_MIN_P, ALL},
    {"--repeat-penalty", F_REPEAT_PENALTY, SAMPLING_RUN},
    {"--repeat-last-n", F_REPEAT_LAST_N, SAMPLING_RUN},
    {"--presence-penalty", F_PRESENCE, SAMPLING_RUN},
    {"--frequency-penalty", F_FREQUENCY, SAMPLING_RUN},
    {"--seed", F_SEED, SAMPLING_RUN | SAMPLING_CHAT},
};
#undef ALL

void sampling_opts_init(struct sampling_opts *o, enum sampling_cmd cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->sp = muse_sampler_default_params();
    if (cmd != SAMPLING_RUN) { /* the model card's settings */
        o->sp.temperature = 1.0f;
        o->sp.top_k = 64;
        o->sp.top_p = 0.95f;
    }
    o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
}

int sampling_opts_parse(struct sampling_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    const struct spelling *s = NULL;
    for (size_t k = 0; k < sizeof spellings / sizeof spellings[0] && !s; k++)
        if ((spellings[k].commands & o->cmd) && !strcmp(a, spellings[k].flag)) s = &spellings[k];
    if (!s) return 0;
    const struct field *f = &fields[s->field];
    const bool serve = o->cmd == SAMPLING_SERVE;
    char *dst = (char *)&o->sp + f->offset;
    if (!(v = cli_next(argc, argv, i))) return -1;
    if (f->kind == FIELD_FLOAT) {
        double d;
        if (!cli_parse_float(a, v, &d)) return -1;
        if (serve && (d < f->serve_lo || d > f->serve_hi)) { /* NaN passes, as the sampler takes it */
            if (isinf(f->serve_hi))
                fprintf(stderr, "muse: bad value for %s: '%s' (expected a number >= %g)\n", a, v, f->serve_lo);
            else
                fprintf(stderr, "muse: bad value for %s: '%s' (expected a number in %g..%g)\n", a, v, f->serve_lo,
                        f->serve_hi);
            return -1;
        }
        *(float *)dst = (float)d;
        return 1;
    }
    int64_t lo = f->lo, hi = f->hi, n;
    if (serve && isfinite(f->serve_hi)) {
        lo = (int64_t)f->serve_lo;
        hi = (int64_t)f->serve_hi;
    }
    if (!cli_parse_int(a, v, lo, hi, &n)) return -1;
    if (f->kind == FIELD_INT32)
        *(int32_t *)dst = (int32_t)n;
    else
        *(uint64_t *)dst = (uint64_t)n;
    return 1;
}

void sampling_opts_usage(FILE *f, enum sampling_cmd cmd) {
    switch (cmd) {
    case SAMPLING_RUN:
        fprintf(f, "sampling (llama.cpp order: penalties, top-k, top-p, min-p, temperature):\n"
                   "  --temperature T        0 = greedy (default); the model card recommends 1.0\n"
                   "  --top-k K              0 = off (default); recommended 64\n"
                   "  --top-p P              1 = off (default); recommended 0.95\n"
                   "  --min-p P              0 = off (default)\n"
                   "  --repeat-penalty R     1 = off (default)\n"
                   "  --repeat-last-n N      history the penalties look at (default 64)\n"
                   "  --presence-penalty P   0 = off (default)\n"
                   "  --frequency-penalty P  0 = off (default)\n"
                   "  --seed N               RNG seed (default: random, printed at the end)\n");
        break;
    case SAMPLING_CHAT:
        fprintf(f, "  --temperature T, --top-k K, --top-p P, --min-p P, --seed N\n"
                   "                         sampling (default: the model card's 1.0 / 64 / 0.95; --temperature 0 = "
                   "greedy)\n");
        break;
    case SAMPLING_SERVE:
        fprintf(f, "  --temperature T, --top-p P, --top-k K, --min-p P\n"
                   "                      sampling defaults for requests that omit them (default 1.0, 0.95, 64, 0)\n");
        break;
    }
}
