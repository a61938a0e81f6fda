#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[MUSE_STATUS_COUNT] = {
    "ok", "invalid argument", "i/o error", "malformed input", "unsupported",
    "out of memory", "missing", "wrong shape", "context overflow", "cancelled",
    "template error", "internal error",
};

const char *muse_status_str(muse_status status) {
    int i = -(int)status;
    if (i < 0 || i >= MUSE_STATUS_COUNT) return "unknown status";
    return status_names[i];
}

muse_status muse_error_set(struct muse_error *err, muse_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return status;
}

void muse_error_clear(struct muse_error *err) {
    if (err) {
        err->status = MUSE_OK;
        err->msg[0] = '\0';
    }
}

muse_status muse_error_prefix(struct muse_error *err, const char *fmt, ...) {
    if (!err) return MUSE_ERR_INTERNAL;
    char prefix[256], old[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    size_t n = strlen(prefix);
    if (n >= sizeof(err->msg)) n = sizeof(err->msg) - 1;
    memcpy(err->msg, prefix, n);
    size_t m = strnlen(old, sizeof(old) - 1);
    if (m > sizeof(err->msg) - 1 - n) m = sizeof(err->msg) - 1 - n;
    memcpy(err->msg + n, old, m);
    err->msg[n + m] = '\0';
    return err->status;
}
