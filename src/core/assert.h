/*
 * assert.h - MUSE_ASSERT: for muse's own invariants only, never for input (files, HTTP,
 * prompts): bad input is an error value. Stays on in release builds.
 */
#pragma once

#include <stdnoreturn.h>

/* Report file:line and the failed expression through the abort hook, then abort(). */
noreturn void muse_abort(const char *file, int line, const char *msg);

/* Replace the default hook (prints to stderr). The hook may not return; if it does, abort() follows. */
typedef void (*muse_abort_hook)(const char *file, int line, const char *msg);
void muse_set_abort_hook(muse_abort_hook hook);

#define MUSE_ASSERT(x) \
    do { if (!(x)) muse_abort(__FILE__, __LINE__, #x); } while (0)
