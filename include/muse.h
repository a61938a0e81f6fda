/*
 * muse.h - public API of libmuse, a C11 inference engine for Muse-Glimmer GGUF models.
 *
 * Conventions (see DEVELOPERS.md and ../shared/STYLE.md):
 *   - Every function that can fail returns a muse_status (0 = ok, negative = error) or NULL;
 *     a human-readable message is available through the object or error record it names.
 *   - The library never prints and never exits; only the tools in tools/ do.
 *   - Objects with invariants are opaque; options travel in params structs by value.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSE_VERSION_MAJOR 0
#define MUSE_VERSION_MINOR 1
#define MUSE_VERSION_PATCH 0

/* Status codes. 0 is success; every error is negative. */
enum muse_status {
    MUSE_OK              =  0,
    MUSE_ERR_INVALID_ARG = -1,  /* a caller passed a bad argument or option */
    MUSE_ERR_IO          = -2,  /* open/read/write/mmap failed */
    MUSE_ERR_FORMAT      = -3,  /* a file or request is malformed (truncated, hostile, inconsistent) */
    MUSE_ERR_UNSUPPORTED = -4,  /* well-formed but not supported (unknown type, architecture) */
    MUSE_ERR_NOMEM       = -5,  /* allocation failed */
    MUSE_ERR_MISSING     = -6,  /* a required key, tensor or token is absent */
    MUSE_ERR_SHAPE       = -7,  /* a tensor has the wrong shape or type */
    MUSE_ERR_CONTEXT     = -8,  /* input longer than the context */
    MUSE_ERR_CANCELLED   = -9,  /* the caller cancelled the operation */
    MUSE_ERR_TEMPLATE    = -10, /* a chat template failed to parse or raised an error */
    MUSE_ERR_INTERNAL    = -11, /* a bug in muse */
    MUSE_STATUS_COUNT    = 12
};
typedef enum muse_status muse_status;

/* A short constant description of a status ("ok", "i/o error", ...). Never NULL. */
const char *muse_status_str(muse_status status);

/* "MAJOR.MINOR.PATCH"; a constant string. */
const char *muse_version(void);

/*
 * An error record: a status plus a one-line message. Functions that take a
 * `struct muse_error *err` fill it on failure (err may be NULL when the caller
 * does not want the message). The message never ends in a newline.
 */
struct muse_error {
    muse_status status;
    char msg[512];
};

#ifdef __cplusplus
}
#endif
