/*
 * sampling_opts.h - the sampling flags shared by `muse run`, `muse chat` and `muse serve`
 * (--temp/--temperature, --top-k, --top-p, --min-p, the penalties, -s/--seed): one table of spellings,
 * one parser, each command's defaults and usage lines. The pattern of model_opts.h.
 *
 * Which spellings a command accepts is a column of the table in sampling_opts.c, so an alias
 * (llama.cpp's --temp, -s ...) is one row there; a spelling a command does not accept is left
 * to the command (it reports it as unknown).
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "gen/sampler.h"

/* The command parsing (a bit each: the spelling table's `commands` column is a mask of them). */
enum sampling_cmd {
    SAMPLING_RUN = 1u << 0,   /* greedy by default; every flag, penalties included */
    SAMPLING_CHAT = 1u << 1,  /* the model card's settings by default */
    SAMPLING_SERVE = 1u << 2, /* the model card's settings; values are request defaults (see below) */
};

struct sampling_opts {
    enum sampling_cmd cmd;
    struct muse_sampler_params sp; /* serve uses temperature, top_k, top_p and min_p */
    /* run and chat: constrained decoding (llama.cpp's spellings); at most one of them */
    const char *grammar;          /* --grammar GBNF */
    const char *grammar_file;     /* --grammar-file PATH */
    const char *json_schema;      /* -j/--json-schema SCHEMA */
    const char *json_schema_file; /* -jf/--json-schema-file PATH */
};

struct muse_error;
struct muse_grammar;
struct muse_tokenizer;

/*
 * The grammar the flags ask for (*out NULL when none): reads the file, converts a schema,
 * compiles against tok. Returns false with err set to "FLAG: ..." (the grammar's line and
 * column, the schema keyword and its JSON pointer, or the unreadable file); err->status is
 * MUSE_ERR_INVALID_ARG when the text given on the command line (--grammar, --json-schema) does
 * not compile: a bad value, which the commands report with exit status 2.
 */
bool sampling_opts_grammar(const struct sampling_opts *o, const struct muse_tokenizer *tok, struct muse_grammar **out,
                           struct muse_error *err);

/*
 * The defaults of cmd. run: muse_sampler_default_params() (greedy, no penalties). chat and
 * serve: the model card's temperature 1.0, top-p 0.95, top-k 64 (min-p 0, no penalties). The
 * seed is random (time and clock) unless --seed gives one.
 */
void sampling_opts_init(struct sampling_opts *o, enum sampling_cmd cmd);

/*
 * If argv[*i] is a sampling flag o->cmd accepts, consume it and its value and return 1; return 0
 * when it is not one; -1 after printing "muse CMD: bad value for FLAG: 'V' (expected ...)" (or a
 * missing value) on stderr. Every command checks the same domains, named in the message:
 * temperature 0..100, top-k 0..2^30, top-p and min-p 0..1, repeat penalty > 0 and <= 100,
 * repeat-last-n 0..2^20, presence and frequency penalties -2..2 (OpenAI's), seed -1..2^63-1
 * (-1 = random, llama.cpp's default); NaN and infinities are refused.
 */
int sampling_opts_parse(struct sampling_opts *o, int argc, char **argv, int *i);

/* The usage lines of cmd's sampling flags (each command's own wording and layout). */
void sampling_opts_usage(FILE *f, enum sampling_cmd cmd);
