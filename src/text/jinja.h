/*
 * jinja.h - a Jinja2-subset template engine for chat templates.
 *
 * Renders chat templates the way Hugging Face transformers does with Python jinja2
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, the globals
 * raise_exception / strftime_now / namespace / range, transformers' `tojson`). See docs/chat.md.
 *
 * Usage: parse once, render many times (a parsed template is immutable, so several threads may
 * render the same template at once, each with its own context and output).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "muse.h"

struct muse_jinja_template;

/* Resource limits for one render; a field left 0 takes its default. */
struct muse_jinja_limits {
    int max_depth;                /* macro call / expression nesting depth (default 200) */
    uint64_t max_iterations;      /* loop iterations over the whole render (default 1,000,000) */
    size_t max_output;            /* bytes of rendered text, incl. captured blocks (default 64 MiB) */
    size_t max_memory;            /* bytes of render-time values (default 512 MiB) */
};

struct muse_jinja_options {
    struct muse_jinja_limits limits;
    /* The time strftime_now() formats (naive local time). When now_set is false, the current
     * local time is used. */
    bool now_set;
    int now_year, now_month, now_day, now_hour, now_min, now_sec;
};

/*
 * Parse template source `text` (`len` bytes, UTF-8, need not be NUL-terminated) into *out.
 * Returns MUSE_OK, or MUSE_ERR_TEMPLATE with "line L, column C: message" in err on a syntax
 * error, or MUSE_ERR_NOMEM. The caller owns *out and frees it with muse_jinja_free.
 */
muse_status muse_jinja_parse(const char *text, size_t len, struct muse_jinja_template **out,
                             struct muse_error *err);

/*
 * Render `tmpl` with the variables of the JSON object `context` (NULL = no variables; JSON null
 * becomes None, objects keep their key order). `opts` may be NULL for the defaults. On success
 * *out is a malloc'd NUL-terminated string (caller frees) of *out_len bytes. On failure returns
 * MUSE_ERR_TEMPLATE with "line L, column C: message" in err (a raise_exception() message is kept
 * verbatim after that prefix; see muse_jinja_error_message) or MUSE_ERR_NOMEM; *out is NULL.
 * Thread-safety: tmpl is only read.
 */
muse_status muse_jinja_render(const struct muse_jinja_template *tmpl, const cJSON *context,
                              const struct muse_jinja_options *opts, char **out, size_t *out_len,
                              struct muse_error *err);

/* The message of a template error without its "line L, column C: " prefix (points into err). */
const char *muse_jinja_error_message(const struct muse_error *err);

/* Free a parsed template. NULL is allowed. */
void muse_jinja_free(struct muse_jinja_template *tmpl);
