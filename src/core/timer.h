/* timer.h - monotonic wall clock. */
#pragma once

#include <stdint.h>
#include <time.h>

/* Microseconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
static inline int64_t muse_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
