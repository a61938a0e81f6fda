/*
 * cli.h - the muse command-line tool: one file per subcommand (tools/cmd_<name>.c), each
 * exporting `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name) that
 * returns the process exit status: 0 ok, 1 error (one clear line on stderr), 2 usage (one line
 * naming the problem and "see 'muse CMD --help'"; the usage text itself only on --help).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_draft(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_synth_dflash(int argc, char **argv); /* `muse synth --dflash` (cmd_synth_dflash.c) */
int cmd_image(int argc, char **argv);
int cmd_synth_mmproj(int argc, char **argv); /* `muse synth --mmproj` (cmd_synth_mmproj.c) */

/* ---- messages: one prefix style, "muse CMD: ..." (tools/cli_util.c) ---- */

/* The prefix of every message, "muse run" (set by main before dispatching; "muse" before). */
extern const char *cli_prog;
void cli_set_prog(const char *subcommand);
/* "muse CMD: <message>\n" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "muse CMD: <message> (see 'muse CMD --help')\n" on stderr; returns 2 (the usage exit status). */
int cli_usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "muse CMD: unknown option 'ARG' (see 'muse CMD --help')"; returns 2. */
int cli_unknown(const char *arg);

/* ---- values ---- */

/* Parse a decimal integer in [lo, hi]; on failure prints "muse CMD: bad value for OPT: 'VAL'
 * (expected an integer in LO..HI)" and returns false. */
bool cli_parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out);
/* A finite number (NaN and infinities are refused). */
bool cli_parse_float(const char *opt, const char *val, double *out);
/* "1,2,3" -> a malloc'd int32 array; prints an error and returns false on bad input. */
bool cli_parse_ids(const char *opt, const char *val, int32_t **ids, int *n_ids);
/* Token ids as every muse command writes them: comma-separated, the form --tokens and --ids read. */
void cli_print_ids(FILE *f, const int32_t *ids, size_t n);
/* The value after argv[*i] (advancing *i) or NULL after "option X needs a value". */
const char *cli_next(int argc, char **argv, int *i);
/* The contents of a file, "-" = standard input, NUL-terminated (len excludes the NUL); NULL with
 * errno set on failure. */
char *cli_read_file(const char *path, size_t *len);

/* ---- option tables ----
 * A command's options are rows: spellings, a value placeholder, help text and a setter. Shared
 * groups (model_opts.c, sampling_opts.c) and commands parse with the same loop and print --help
 * from the same rows, so an alias or a new flag is one row. */
struct cli_opt {
    const char *names; /* '|'-separated spellings, "-c|--ctx-size"; --help shows them all */
    const char *arg;   /* value placeholder ("N"), NULL for a switch; "[a|b|c]": an optional value,
                          taken when the next argument is one of the words */
    const char *help;  /* help text; '\n' continues it on the next line, in the help column */
    /* Store the value (NULL for a switch or an absent optional value); 0 ok, -1 after an error
     * message (cli_err / cli_parse_*). */
    int (*set)(void *dst, const char *flag, const char *val);
};

/* The row of `table` that spells `arg`, or NULL. */
const struct cli_opt *cli_opt_find(const struct cli_opt *table, size_t n, const char *arg);
/* If argv[*i] is an option of the table: consume it and its value, call its setter, return 1
 * (or -1 after an error); 0 when not one of them. */
int cli_opts_parse(const struct cli_opt *table, size_t n, void *dst, int argc, char **argv, int *i);
/* The table's --help lines: "  -c, --ctx-size N        help". */
void cli_opts_usage(FILE *f, const struct cli_opt *table, size_t n);

/* Whether informational stderr output (progress lines) may be drawn: stderr is a terminal. */
bool cli_stderr_tty(void);
