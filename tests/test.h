/*
 * test.h - the whole test "framework" (after redis testhelp.h): TEST_COND counts and reports,
 * TEST_REPORT prints "N passed, N failed" and returns the exit status for main().
 */
#pragma once

#include <stdio.h>
#include <stdlib.h>

static int test_n_passed, test_n_failed;

#define TEST_COND(descr, cond) do { \
    if (cond) { test_n_passed++; } \
    else { test_n_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, descr); } \
} while (0)

/* Like TEST_COND but with a printf-formatted description (evaluated only on failure). */
#define TEST_CONDF(cond, ...) do { \
    if (cond) { test_n_passed++; } \
    else { test_n_failed++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

#define TEST_REPORT() ( \
    printf("%s: %d passed, %d failed\n", __FILE__, test_n_passed, test_n_failed), \
    test_n_failed ? 1 : 0)

/* Path of ../shared (the specs, data and goldens): $MUSE_SHARED or "../shared". */
static inline const char *test_shared_dir(void) {
    const char *s = getenv("MUSE_SHARED");
    return s ? s : "../shared";
}
