/*
 * line_edit.h - the input line of `muse chat`: libedit (emacs keys, arrows, Ctrl-R search, ~/.editrc)
 * with a persisted history when standard input and output are a terminal; plain getline otherwise
 * (pipes, tests). Multi-line input is the caller's (a trailing backslash, or a """ block).
 *
 * History file: $MUSE_HISTORY when set (empty = none), else ~/.muse_history; the last 1000
 * lines, saved after every line so a killed session keeps them.
 *
 * Ctrl-C: the caller installs a SIGINT handler without SA_RESTART; a read it interrupts returns
 * LINE_INTERRUPT (the line being typed is discarded; *had_text says whether there was any).
 */
#pragma once

#include <stdbool.h>

struct line_edit;

enum line_status { LINE_OK, LINE_EOF, LINE_INTERRUPT };

/* prog: the name libedit reads ~/.editrc sections by. Never fails: falls back to getline. */
struct line_edit *line_edit_open(const char *prog);
void line_edit_close(struct line_edit *le);
/* Whether the line editor (libedit) is in use. */
bool line_edit_is_tty(const struct line_edit *le);
/* Print `prompt` and read a line (no trailing newline); *line is owned by le, valid until the next
 * call. had_text (may be NULL): LINE_INTERRUPT discarded a non-empty line. */
enum line_status line_edit_read(struct line_edit *le, const char *prompt, const char **line, bool *had_text);
/* Add a line to the history (and save the file). Empty lines are not added. */
void line_edit_add_history(struct line_edit *le, const char *line);
