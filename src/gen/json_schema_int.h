/* json_schema_int.h - GBNF for integers within bounds (internal to the JSON Schema converter). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gen/gbnf_buf.h"

/*
 * Append to b an alternation matching the decimal integers in [min_value, max_value] (INT64_MIN /
 * INT64_MAX: unbounded on that side), as llama.cpp's build_min_max_int: decimals_left digits at most
 * (16 at the top), top_level for the outermost call.
 */
void muse_json_int_range(struct gbuf *b, int64_t min_value, int64_t max_value, int decimals_left, bool top_level);
