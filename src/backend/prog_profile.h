/* prog_profile.h - MUSE_PROFILE=1: where a program's time goes, stretch by stretch
 * (docs/cpu-backend.md "Benchmarks"). Thread 0 of the program interpreter reads the clock after every barrier
 * and adds the time since the last one to the stretch of ops between them, labelled by its ops
 * (a matmul by its weights' names without the layer number, type and shape) and the run's row
 * count; the table is printed on stderr when the process exits. Off (one branch per barrier)
 * unless the variable is set. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "backend/program.h"

/* Whether MUSE_PROFILE is set to something other than "0" (read once). */
bool muse_prof_enabled(void);
int64_t muse_prof_now_ns(void);
/* ns of wall time spent in ops i0 .. i1 of p with n_rows rows */
void muse_prof_add(const struct muse_program *p, int32_t i0, int32_t i1, int32_t n_rows, int64_t ns);
