/* json_regex.h - a JSON Schema `pattern` -> GBNF (internal to the JSON Schema converter; the
 * subset it takes is listed in json_schema.h). */
#pragma once

#include "gen/gbnf_rules.h"
#include "muse.h"

/*
 * The GBNF body matching the JSON string content of the full matches of regex `pattern` (no
 * quotes around); sub-rules go into r named NAME-N. Errors: UNSUPPORTED (a construct outside the
 * subset), FORMAT (not a regex), each naming the position in the pattern. *body malloc'd.
 */
muse_status muse_json_regex_to_gbnf(struct muse_gbnf_rules *r, const char *pattern, const char *name, char **body,
                                    struct muse_error *err);
