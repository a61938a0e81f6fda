/* cli_util.c - messages, value parsers and the option-table engine shared by the subcommands (cli.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static char prog_buf[64] = "muse";
const char *cli_prog = prog_buf;

void cli_set_prog(const char *subcommand) { snprintf(prog_buf, sizeof prog_buf, "muse %s", subcommand); }

void cli_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_usage_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", cli_prog);
    va_end(ap);
    return 2;
}

int cli_unknown(const char *arg) { return cli_usage_err("unknown option '%s'", arg); }

bool cli_parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        cli_err("bad value for %s: '%s' (expected an integer in %lld..%lld)", opt, val, (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *opt, const char *val, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v)) {
        cli_err("bad value for %s: '%s' (expected a number)", opt, val);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_ids(const char *opt, const char *val, int32_t **ids, int *n_ids) {
    size_t cap = 1;
    for (const char *p = val; *p; p++) cap += *p == ',';
    int32_t *out = malloc(cap * sizeof(int32_t));
    if (!out) return false;
    int n = 0;
    const char *p = val;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            cli_err("bad value for %s: '%s' (expected comma-separated token ids)", opt, val);
            free(out);
            return false;
        }
        out[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        cli_err("%s needs at least one token id", opt);
        free(out);
        return false;
    }
    *ids = out;
    *n_ids = n;
    return true;
}

void cli_print_ids(FILE *f, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
}

const char *cli_next(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_err("option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

char *cli_read_file(const char *path, size_t *len) {
    const bool std_in = !strcmp(path, "-");
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    const bool bad = ferror(f);
    if (!std_in) fclose(f);
    if (b && bad) {
        free(b);
        errno = EIO;
        return NULL;
    }
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

// ---- option tables ----------------------------------------------------------------------------

/* Whether `word` is one of the '|'-separated items of list[0..len). */
static bool in_list(const char *list, size_t len, const char *word) {
    const size_t wl = strlen(word);
    const char *p = list, *end = list + len;
    while (p < end) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        const char *e = bar ? bar : end;
        if ((size_t)(e - p) == wl && !memcmp(p, word, wl)) return true;
        p = e + 1;
    }
    return false;
}

const struct cli_opt *cli_opt_find(const struct cli_opt *table, size_t n, const char *arg) {
    if (arg[0] != '-') return NULL;
    for (size_t k = 0; k < n; k++)
        if (in_list(table[k].names, strlen(table[k].names), arg)) return &table[k];
    return NULL;
}

int cli_opts_parse(const struct cli_opt *table, size_t n, void *dst, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const struct cli_opt *o = cli_opt_find(table, n, a);
    if (!o) return 0;
    const char *val = NULL;
    if (o->arg && o->arg[0] == '[') { /* an optional value: "[on|off|auto]" */
        const char *close = strchr(o->arg, ']');
        size_t len = close ? (size_t)(close - o->arg - 1) : strlen(o->arg + 1);
        if (*i + 1 < argc && in_list(o->arg + 1, len, argv[*i + 1])) val = argv[++*i];
    } else if (o->arg) {
        if (!(val = cli_next(argc, argv, i))) return -1;
    }
    return o->set(dst, a, val) < 0 ? -1 : 1;
}

#define HELP_COL 26

void cli_opts_usage(FILE *f, const struct cli_opt *table, size_t n) {
    for (size_t k = 0; k < n; k++) {
        const struct cli_opt *o = &table[k];
        if (!o->help) continue; /* undocumented (a test hook) */
        char head[160];
        int w = snprintf(head, sizeof head, "  ");
        for (const char *p = o->names; *p && w < (int)sizeof head - 4;) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            w += snprintf(head + w, sizeof head - (size_t)w, "%s%.*s", p == o->names ? "" : ", ", (int)len, p);
            p += len + (bar ? 1 : 0);
        }
        if (o->arg && w < (int)sizeof head) w += snprintf(head + w, sizeof head - (size_t)w, " %s", o->arg);
        fputs(head, f);
        if (w >= HELP_COL - 1) {
            fputc('\n', f);
            w = 0;
        }
        for (const char *p = o->help; *p;) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            fprintf(f, "%*s%.*s\n", HELP_COL - w, "", (int)len, p);
            w = 0;
            p += len + (nl ? 1 : 0);
        }
    }
}

bool cli_stderr_tty(void) { return isatty(STDERR_FILENO); }
