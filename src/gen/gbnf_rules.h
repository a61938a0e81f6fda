/*
 * gbnf_rules.h - a GBNF grammar under construction: named rules with GBNF bodies, written out as
 * text for the parser (text/gbnf.h). The JSON Schema converter (json_schema.c), its pattern
 * converter (json_regex.c) and the tool-call grammar (tool_grammar.c) build into one of these.
 * Rule names follow llama.cpp's json-schema-to-grammar (_add_rule). One thread at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct muse_gbnf_rules;

/* NULL on NOMEM. */
struct muse_gbnf_rules *muse_gbnf_rules_create(void);
void muse_gbnf_rules_free(struct muse_gbnf_rules *r);

/*
 * Add rule NAME ::= BODY; NAME's characters outside [a-zA-Z0-9-] become '-', and a name already
 * holding another body gets a numeric suffix (llama.cpp's _add_rule). Returns the name used,
 * owned by r; NULL on NOMEM.
 */
const char *muse_gbnf_rules_add(struct muse_gbnf_rules *r, const char *name, const char *body);

/* Whether a rule of exactly this name is present. */
bool muse_gbnf_rules_has(const struct muse_gbnf_rules *r, const char *name);

/* The grammar text: one "NAME ::= BODY" line per rule, sorted by name. malloc'd; NULL on NOMEM. */
char *muse_gbnf_rules_format(const struct muse_gbnf_rules *r);

/* Literal text as a GBNF string ("..." with \r \n \" \\ escaped). malloc'd; NULL on NOMEM. */
char *muse_gbnf_literal(const char *text, size_t len);

/*
 * item{min,max} (max < 0: unbounded) as GBNF text. Counts above the parser's limit of 2000 are
 * split into exact chunks (x{m,n} = x{m} x{0,n-m}; x{0,r} = x{2000} x{0,r-2000} | x{0,1999}, an
 * unambiguous chain of rules named BASE-upto-N added to r). malloc'd; NULL on NOMEM.
 */
char *muse_gbnf_repeat(struct muse_gbnf_rules *r, const char *item, long long min, long long max, const char *base);
