/*
 * json_schema.h - JSON Schema -> GBNF (text/gbnf.h), with llama.cpp's coverage and rule names
 * (common/json-schema-to-grammar.cpp at 0c1e570), and a clear error for whatever it cannot
 * enforce instead of a silent pass: a grammar from this converter only generates JSON that the
 * schema accepts.
 *
 * Covered: type (also arrays of types), properties / required / additionalProperties (absent =
 * no extra properties, llama.cpp's default), enum / const, items / prefixItems (tuples) /
 * minItems / maxItems, minLength / maxLength, pattern (a regex subset, below), format date /
 * time / date-time / uuid (other formats are annotations), integer minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum, anyOf / oneOf, allOf of objects (merged) or enums
 * (intersected), local $ref (#, #/$defs/..., #/definitions/..., any JSON pointer; recursion ok).
 * Annotations (title, description, default, examples, $schema, $id, $comment, deprecated, ...)
 * are ignored.
 * Errors (MUSE_ERR_UNSUPPORTED, naming the keyword and its JSON pointer): not, if/then/else,
 * uniqueItems, contains, patternProperties, propertyNames, dependent*, min/maxProperties,
 * multipleOf, unevaluated*, bounds on non-integer numbers, remote $ref, anyOf next to other
 * constraints, a required property without a schema, pattern or format combined with lengths,
 * contradictory bounds, schema `false`.
 *
 * Patterns: ECMA/Python regexes of literals, escapes (\d \w \s and negations, \t \n \r \f \v,
 * \xHH, \uHHHH, escaped punctuation), classes with ranges and negation, ., groups ((?:...) and
 * named ones), alternation, * + ? {m} {m,} {m,n} (lazy ? suffix ignored), ^ at the start and $ at
 * the end. A full match of the pattern is generated (a subset of what `search` accepts), written
 * as valid JSON string content (quotes, backslashes and control characters escaped; negated
 * classes, \D \W \S and . generate no control characters). Lookaround, backreferences, flags and
 * word boundaries are errors.
 *
 * Whitespace: llama.cpp's `space ::= | " " | "\n"{1,2} [ \t]{0,20}` after `{ [ , :`.
 */
#pragma once

#include <stddef.h>

#include "gen/gbnf_rules.h"
#include "muse.h"

struct cJSON;

/*
 * Add the rules of a schema (a JSON object or boolean). name: the rule for the schema itself
 * ("" = "root"); sub-rules are named after it (NAME-PROP, NAME-item, ...). *rule receives the
 * name to reference (owned by r). $refs resolve against `doc` (the whole document; NULL = the
 * schema itself). Errors: UNSUPPORTED / FORMAT with "JSON schema at POINTER: ...", NOMEM.
 */
muse_status muse_gbnf_rules_add_schema(struct muse_gbnf_rules *r, const struct cJSON *schema, const struct cJSON *doc,
                                       const char *name, const char **rule, struct muse_error *err);

/*
 * Convert a JSON Schema given as text (len bytes) to GBNF text (*gbnf malloc'd, root rule
 * "root"). Errors: FORMAT for text that is not JSON ("line L, column C"), those of
 * muse_gbnf_rules_add_schema.
 */
muse_status muse_json_schema_to_gbnf(const char *text, size_t len, char **gbnf, struct muse_error *err);

/* The same from a parsed schema. */
muse_status muse_json_schema_to_gbnf_json(const struct cJSON *schema, char **gbnf, struct muse_error *err);
