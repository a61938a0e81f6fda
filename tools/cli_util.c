#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        fprintf(stderr, "muse: bad value for %s: '%s' (expected an integer in %lld..%lld)\n", opt, val,
                (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *opt, const char *val, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end) {
        fprintf(stderr, "muse: bad value for %s: '%s' (expected a number)\n", opt, val);
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
            fprintf(stderr, "muse: bad value for %s: '%s' (expected comma-separated token ids)\n", opt, val);
            free(out);
            return false;
        }
        out[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "muse: %s needs at least one token id\n", opt);
        free(out);
        return false;
    }
    *ids = out;
    *n_ids = n;
    return true;
}

const char *cli_next(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "muse: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
