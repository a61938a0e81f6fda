/*
 * line_edit.h - the input line of `muse chat`: libedit (emacs keys, arrows, Ctrl-R search, ~/.editrc)
 * with a persisted history when standard input and output are a terminal; plain getline otherwise
 * (pipes, tests). Multi-line input is the caller's (a trailing backslash, or a """ block).
 *
 * History file: $MUSE_HISTORY when set (empty = none), else ~/.muse_history; the last 1000
 * lines, saved after every line so a killed session keeps them.
 *
 * Ctrl-C: the caller installs a SIGINT handler without SA_RESTART that sets a flag, and gives the
 * flag to line_edit_watch; a read returns LINE_INTERRUPT (the line being typed is discarded;
 * *had_text says whether there was any) when the flag is set before it waits for a key or while
 * it waits. The terminal reader checks the flag and waits with the signal blocked in between
 * (ppoll), so a Ctrl-C is never lost between the check and the wait. The caller clears the flag.
 */
#pragma once

#include <signal.h>
#include <stdbool.h>

struct line_edit;

enum line_status { LINE_OK, LINE_EOF, LINE_INTERRUPT };

/* prog: the name libedit reads ~/.editrc sections by. Never fails: falls back to getline. */
struct line_edit *line_edit_open(const char *prog);
void line_edit_close(struct line_edit *le);
/* Interrupt reads when *flag becomes non-zero (set by the handler of signal sig). */
void line_edit_watch(struct line_edit *le, volatile sig_atomic_t *flag, int sig);
/* Whether the line editor (libedit) is in use. */
bool line_edit_is_tty(const struct line_edit *le);
/* Print `prompt` and read a line (no trailing newline); *line is owned by le, valid until the next
 * call. had_text (may be NULL): LINE_INTERRUPT discarded a non-empty line. */
enum line_status line_edit_read(struct line_edit *le, const char *prompt, const char **line, bool *had_text);
/* Add a line to the history (and save the file). Empty lines are not added. */
void line_edit_add_history(struct line_edit *le, const char *line);
