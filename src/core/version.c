/*
 * version.c - muse_version and muse_build_commit (include/muse.h). The commit comes from
 * muse_commit.h, which the Makefile writes into $(BUILD)/gen from scripts/commit.sh (git, or the
 * COMMIT file a `git archive` tarball carries) and rewrites only when the commit changes.
 */
#include "muse.h"

#if __has_include("muse_commit.h")
#include "muse_commit.h"
#endif
#ifndef MUSE_BUILD_COMMIT
#define MUSE_BUILD_COMMIT "unknown"
#endif

#define STR2(x) #x
#define STR(x) STR2(x)

const char *muse_version(void) { return STR(MUSE_VERSION_MAJOR) "." STR(MUSE_VERSION_MINOR) "." STR(MUSE_VERSION_PATCH); }

const char *muse_build_commit(void) { return MUSE_BUILD_COMMIT; }
