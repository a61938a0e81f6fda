/*
 * gbnf.h - the GBNF grammar language (llama.cpp's grammars/README.md) parsed into rules of
 * elements: a pure function over text, with line:column errors. The grammar engine that walks
 * these rules while tokens are sampled lives in src/gen/grammar.h.
 *
 * The language, as llama.cpp 0c1e570 (src/llama-grammar.cpp) reads it:
 *   rule      ::= NAME ws "::=" ws alternates (newline | end)      NAME = [a-zA-Z0-9-]+
 *   alternates: sequence ("|" sequence)*; a newline may follow "|" (and anything inside "(...)")
 *   sequence of items, each optionally followed by * + ? {m} {m,} {m,n}:
 *     "literal"          code points, escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-
 *     [abc] [a-z] [^...] a character class (ranges, negation; the same escapes)
 *     .                  any code point
 *     NAME               a reference to a rule (defined anywhere in the file)
 *     ( alternates )     a group (becomes a generated rule NAME_N)
 *     <[ID]> <TEXT>      one token by id, or the token whose text is TEXT (needs a lookup);
 *     !<[ID]> !<TEXT>    any token but that one
 *   comments run from # to the end of the line. The rule named by `root` ("root") is the start.
 * Repetitions are rewritten into generated rules exactly as llama.cpp does (x{m,n} -> m copies
 * and n-m nested optional rules), with its limits: a count above 2000 is an error for the
 * minimum and means "unbounded" for the maximum, and a repetition whose rewrite would take more
 * than 2000 rule copies is refused. Undefined rules, a missing root and left recursion (through
 * nullable prefixes too) are errors. Beyond llama.cpp: {m,n} with n < m is an error (llama.cpp
 * loops), and a grammar is capped at MUSE_GBNF_MAX_ELEMS elements after the rewrite.
 *
 * Text is bytes of UTF-8; parsing stops at len or at the first NUL (as llama.cpp's C strings).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "muse.h"

/* Element types (the numbering of llama.cpp's llama_gretype, so dumps compare easily). */
enum muse_gbnf_type {
    MUSE_GBNF_END = 0,            /* end of a rule */
    MUSE_GBNF_ALT = 1,            /* start of the next alternative */
    MUSE_GBNF_RULE_REF = 2,       /* value: rule id */
    MUSE_GBNF_CHAR = 3,           /* value: code point (start of a positive class) */
    MUSE_GBNF_CHAR_NOT = 4,       /* value: code point (start of a negated class) */
    MUSE_GBNF_CHAR_RNG_UPPER = 5, /* value: inclusive upper bound of the range begun just before */
    MUSE_GBNF_CHAR_ALT = 6,       /* value: another code point of the class */
    MUSE_GBNF_CHAR_ANY = 7,       /* `.` */
    MUSE_GBNF_TOKEN = 8,          /* value: token id */
    MUSE_GBNF_TOKEN_NOT = 9,      /* value: token id */
    MUSE_GBNF_TYPE_COUNT = 10
};

struct muse_gbnf_elem {
    uint32_t type;  /* enum muse_gbnf_type */
    uint32_t value;
};

#define MUSE_GBNF_MAX_ELEMS (1u << 22)

/*
 * A parsed grammar: n_rules rules, rule r = elems[rule_off[r]] ... up to and including its END;
 * alternatives are separated by ALT. Every rule is defined (non-empty), every RULE_REF is in
 * range. names[r] is the rule's name (generated rules are "PARENT_N"). Immutable once built.
 */
struct muse_gbnf {
    uint32_t n_rules;
    uint32_t root;                  /* the start rule */
    uint32_t *rule_off;             /* [n_rules] */
    struct muse_gbnf_elem *elems;   /* [n_elems] */
    uint32_t n_elems;
    char **names;                   /* [n_rules] NUL-terminated */
};

/*
 * Resolves the text of <TEXT> (the whole "<TEXT>", brackets included, as llama.cpp tokenizes it
 * with special tokens on) to the one token it is; returns the id, or -1 when it is not exactly
 * one token. NULL lookup: <TEXT> is an error (<[ID]> always works).
 */
struct muse_gbnf_token_lookup {
    int32_t (*find)(void *user, const char *text, size_t len);
    void *user;
};

/*
 * Parse a grammar. root: the start rule's name (NULL = "root"). On success *out owns a new
 * grammar (free with muse_gbnf_free). Errors: MUSE_ERR_FORMAT with "line L, column C: WHAT"
 * (column in code points, both from 1) for syntax errors, undefined rules (at their first use),
 * a missing root, left recursion (at the rule's definition) and limits; MUSE_ERR_NOMEM.
 * Thread-safe (no shared state); lookup->find is called from the calling thread.
 */
muse_status muse_gbnf_parse(const char *text, size_t len, const char *root, const struct muse_gbnf_token_lookup *lookup,
                            struct muse_gbnf **out, struct muse_error *err);

void muse_gbnf_free(struct muse_gbnf *g);

/*
 * Write the rules in GBNF form (llama.cpp's print layout: one "name ::= ..." line per rule, in
 * id order; generated rules included) into a new malloc'd NUL-terminated string. NULL on NOMEM.
 */
char *muse_gbnf_print(const struct muse_gbnf *g);
