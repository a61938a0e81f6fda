/*
 * cli.h - the muse command-line tool: one file per subcommand (tools/cmd_<name>.c), each
 * exporting `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name) that
 * returns the process exit status: 0 ok, 1 error (one clear line on stderr), 2 usage.
 */
#pragma once

int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_synth_mmproj(int argc, char **argv); /* `muse synth --mmproj` (cmd_synth_mmproj.c) */

/* Shared option helpers for the subcommands (tools/cli_util.c). */
#include <stdbool.h>
#include <stdint.h>
/* Parse a decimal integer in [lo, hi]; on failure prints "muse: bad value for OPT: VAL" and returns false. */
bool cli_parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_float(const char *opt, const char *val, double *out);
/* "1,2,3" -> a malloc'd int32 array; prints an error and returns false on bad input. */
bool cli_parse_ids(const char *opt, const char *val, int32_t **ids, int *n_ids);
/* The value after argv[*i] (advancing *i) or NULL with a usage message when missing. */
const char *cli_next(int argc, char **argv, int *i);
