/* sampling_opts.c - the sampling flags of `muse run`, `muse chat` and `muse serve` (sampling_opts.h). */
#include "sampling_opts.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/error.h"
#include "gen/constrain.h"

/* What a flag sets: one member of struct muse_sampler_params, and the values it takes. */
enum field_kind { FIELD_FLOAT, FIELD_INT32, FIELD_SEED };

struct field {
    enum field_kind kind;
    size_t offset;  /* of the member in struct muse_sampler_params */
    double lo, hi;  /* the values every command accepts (inclusive; lo_open: lo excluded) */
    bool lo_open;
    const char *arg, *help; /* placeholder and help; the default is the command's (usage) */
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
    F_SEED,
    F_COUNT
};

#define AT(member) offsetof(struct muse_sampler_params, member)
static const struct field fields[F_COUNT] = {
    [F_TEMPERATURE] = {FIELD_FLOAT, AT(temperature), 0, 100, false, "T", "temperature, 0..100; 0 = greedy"},
    [F_TOP_K] = {FIELD_INT32, AT(top_k), 0, 1 << 30, false, "K", "keep the K most likely tokens; 0 = off"},
    [F_TOP_P] = {FIELD_FLOAT, AT(top_p), 0, 1, false, "P", "nucleus: smallest set with probability >= P, 0..1; 1 = off"},
    [F_MIN_P] = {FIELD_FLOAT, AT(min_p), 0, 1, false, "P", "drop tokens below P x the top probability, 0..1; 0 = off"},
    [F_REPEAT_PENALTY] = {FIELD_FLOAT, AT(repeat_penalty), 0, 100, true, "R", "penalize repeated tokens, > 0 and <= 100; 1 = off"},
    [F_REPEAT_LAST_N] = {FIELD_INT32, AT(repeat_last_n), 0, 1 << 20, false, "N", "tokens of history the penalties look at (default 64)"},
    [F_PRESENCE] = {FIELD_FLOAT, AT(presence_penalty), -2, 2, false, "P", "presence penalty, -2..2; 0 = off"},
    [F_FREQUENCY] = {FIELD_FLOAT, AT(frequency_penalty), -2, 2, false, "P", "frequency penalty, -2..2; 0 = off"},
    [F_SEED] = {FIELD_SEED, AT(seed), -1, (double)INT64_MAX, false, "N", "RNG seed; -1 = random (default; printed at the end)"},
};
#undef AT

/* The spellings, and the commands that accept each (an alias is one more row). serve takes only
 * what its request defaults carry (the server's options are its own). */
#define ALL (SAMPLING_RUN | SAMPLING_CHAT | SAMPLING_SERVE)
#define GEN (SAMPLING_RUN | SAMPLING_CHAT)
static const struct spelling {
    const char *flag;
    enum field_id field;
    unsigned commands;
} spellings[] = {
    {"--temp", F_TEMPERATURE, ALL},
    {"--temperature", F_TEMPERATURE, ALL},
    {"--top-k", F_TOP_K, ALL},
    {"--top-p", F_TOP_P, ALL},
    {"--min-p", F_MIN_P, ALL},
    {"--repeat-penalty", F_REPEAT_PENALTY, GEN},
    {"--repeat-last-n", F_REPEAT_LAST_N, GEN},
    {"--presence-penalty", F_PRESENCE, GEN},
    {"--frequency-penalty", F_FREQUENCY, GEN},
    {"-s", F_SEED, GEN},
    {"--seed", F_SEED, GEN},
};
#undef ALL
#undef GEN

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

/* The grammar flags of run and chat (a value each). */
static const char **grammar_slot(struct sampling_opts *o, const char *a) {
    if (o->cmd == SAMPLING_SERVE) return NULL;
    if (!strcmp(a, "--grammar")) return &o->grammar;
    if (!strcmp(a, "--grammar-file")) return &o->grammar_file;
    if (!strcmp(a, "-j") || !strcmp(a, "--json-schema")) return &o->json_schema;
    if (!strcmp(a, "-jf") || !strcmp(a, "--json-schema-file")) return &o->json_schema_file;
    return NULL;
}

int sampling_opts_parse(struct sampling_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    const char **slot = grammar_slot(o, a);
    if (slot) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        if ((o->grammar || o->grammar_file || o->json_schema || o->json_schema_file) && !*slot) {
            cli_err("--grammar, --grammar-file, --json-schema and --json-schema-file exclude each other");
            return -1;
        }
        *slot = v;
        return 1;
    }
    const struct spelling *s = NULL;
    for (size_t k = 0; k < sizeof spellings / sizeof spellings[0] && !s; k++)
        if ((spellings[k].commands & o->cmd) && !strcmp(a, spellings[k].flag)) s = &spellings[k];
    if (!s) return 0;
    const struct field *f = &fields[s->field];
    char *dst = (char *)&o->sp + f->offset;
    if (!(v = cli_next(argc, argv, i))) return -1;
    if (f->kind == FIELD_FLOAT) {
        double d;
        if (!cli_parse_float(a, v, &d)) return -1;
        if (d < f->lo || d > f->hi || (f->lo_open && d == f->lo)) {
            cli_err("bad value for %s: '%s' (expected a number %s %g and <= %g)", a, v, f->lo_open ? ">" : ">=", f->lo, f->hi);
            return -1;
        }
        *(float *)dst = (float)d;
        return 1;
    }
    int64_t n;
    if (!cli_parse_int(a, v, (int64_t)f->lo, f->kind == FIELD_SEED ? INT64_MAX : (int64_t)f->hi, &n)) return -1;
    if (f->kind == FIELD_INT32) *(int32_t *)dst = (int32_t)n;
    else if (n >= 0) *(uint64_t *)dst = (uint64_t)n; /* -1 keeps the random seed (llama.cpp's default) */
    return 1;
}

void sampling_opts_usage(FILE *f, enum sampling_cmd cmd) {
    switch (cmd) {
    case SAMPLING_RUN:
        fprintf(f, "sampling (llama.cpp order: penalties, top-k, top-p, min-p, temperature); defaults: greedy\n"
                   "(temperature 0, everything off); the model card recommends --temp 1.0 --top-k 64 --top-p 0.95:\n");
        break;
    case SAMPLING_CHAT:
        fprintf(f, "sampling (llama.cpp order); defaults: the model card's --temp 1.0 --top-k 64 --top-p 0.95,\n"
                   "min-p 0, no penalties:\n");
        break;
    case SAMPLING_SERVE:
        fprintf(f, "sampling defaults for requests that omit them (the model card's 1.0 / 64 / 0.95, min-p 0):\n");
        break;
    }
    if (cmd != SAMPLING_SERVE) {
        static const struct cli_opt rows[] = {
            {"--grammar", "GBNF", "constrain the output to a GBNF grammar (llama.cpp's syntax; root rule `root`)", NULL},
            {"--grammar-file", "PATH", "the same, read from a file", NULL},
            {"-j|--json-schema", "SCHEMA", "constrain the output to JSON valid under a JSON Schema", NULL},
            {"-jf|--json-schema-file", "PATH", "the same, read from a file", NULL},
        };
        cli_opts_usage(f, rows, sizeof rows / sizeof rows[0]);
    }
    for (int id = 0; id < F_COUNT; id++) {
        char names[96] = "";
        size_t w = 0;
        for (size_t k = 0; k < sizeof spellings / sizeof spellings[0]; k++)
            if (spellings[k].field == (enum field_id)id && (spellings[k].commands & cmd))
                w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", w ? "|" : "", spellings[k].flag);
        if (!w) continue;
        struct cli_opt row = {names, fields[id].arg, fields[id].help, NULL};
        cli_opts_usage(f, &row, 1);
    }
}

bool sampling_opts_grammar(const struct sampling_opts *o, const struct muse_tokenizer *tok, struct muse_grammar **out,
                           struct muse_error *err) {
    *out = NULL;
    const char *text = o->grammar ? o->grammar : o->json_schema;
    const char *path = o->grammar_file ? o->grammar_file : o->json_schema_file;
    const char *flag = o->grammar ? "--grammar" : o->grammar_file ? "--grammar-file" : o->json_schema ? "--json-schema"
                                                                                                    : "--json-schema-file";
    if (!text && !path) return true;
    const enum muse_grammar_syntax syntax = o->grammar || o->grammar_file ? MUSE_GRAMMAR_GBNF : MUSE_GRAMMAR_JSON_SCHEMA;
    char *buf = NULL;
    size_t len = text ? strlen(text) : 0;
    if (path && !(buf = cli_read_file(path, &len))) {
        muse_error_set(err, MUSE_ERR_IO, "%s: cannot read '%s'", flag, path);
        return false;
    }
    struct muse_error e = {0};
    muse_status st = muse_grammar_compile(syntax, buf ? buf : text, len, tok, out, &e);
    free(buf);
    if (st != MUSE_OK) {
        /* the text on the command line is a bad value (usage); a file's text is the file's error */
        muse_error_set(err, st == MUSE_ERR_NOMEM ? st : text ? MUSE_ERR_INVALID_ARG : MUSE_ERR_FORMAT, "%s: %s", flag,
                       e.msg);
        return false;
    }
    return true;
}
