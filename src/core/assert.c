#include "core/assert.h"

#include <stdio.h>
#include <stdlib.h>

/* The one-time hook is process-wide by nature (it replaces abort reporting). */
static muse_abort_hook abort_hook;

void muse_set_abort_hook(muse_abort_hook hook) {
    abort_hook = hook;
}

noreturn void muse_abort(const char *file, int line, const char *msg) {
    if (abort_hook) {
        abort_hook(file, line, msg);
    } else {
        fprintf(stderr, "muse: internal error at %s:%d: assertion failed: %s\n", file, line, msg);
        fflush(stderr);
    }
    abort();
}
