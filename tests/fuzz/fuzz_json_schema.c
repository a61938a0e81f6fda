/*
 * fuzz_json_schema.c - libFuzzer target for JSON Schema -> GBNF (gen/json_schema.h) and its
 * regex subset (json_regex.c), which see untrusted schemas in `muse serve` (response_format,
 * json_schema). Any bytes must convert or fail with an error, never crash; whatever converts
 * must be GBNF the parser accepts (but for its size limits and left recursion, below) and the
 * matcher compiles.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen/grammar.h"
#include "gen/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    struct muse_error err = {0};
    char *gbnf = NULL;
    muse_status st = muse_json_schema_to_gbnf((const char *)data, size, &gbnf, &err);
    if (st != MUSE_OK) {
        if (gbnf || !err.msg[0]) abort();
        return 0;
    }
    struct muse_grammar *g = NULL;
    st = muse_grammar_from_text(gbnf, strlen(gbnf), NULL, NULL, &g, &err);
    /* the parser's own limits (size) may refuse a huge expansion, and a pattern repeating something
     * that can be empty, (a?)*, is left recursion (refused by llama.cpp too); anything else is a
     * converter bug */
    if (st != MUSE_OK && !(st == MUSE_ERR_FORMAT && (strstr(err.msg, "too large") || strstr(err.msg, "more than") ||
                                                     strstr(err.msg, "left recursion"))))
        abort();
    muse_grammar_free(g);
    free(gbnf);
    return 0;
}
