/* error.h - the internal side of muse_status / struct muse_error. */
#pragma once

#include "muse.h"

#if defined(__GNUC__)
#define MUSE_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define MUSE_PRINTF(fmt_idx, arg_idx)
#endif

/*
 * Record `status` and a printf-formatted one-line message in `err` (which may be NULL)
 * and return `status`, so that callers can write `return muse_error_set(err, ...)`.
 */
muse_status muse_error_set(struct muse_error *err, muse_status status, const char *fmt, ...)
    MUSE_PRINTF(3, 4);

/* Clear `err` to MUSE_OK with an empty message. err may be NULL. */
void muse_error_clear(struct muse_error *err);

/*
 * Prefix the message already in `err` with printf-formatted context ("loading X: "), keeping
 * the status. Returns err->status (MUSE_ERR_INTERNAL when err is NULL).
 */
muse_status muse_error_prefix(struct muse_error *err, const char *fmt, ...) MUSE_PRINTF(2, 3);
