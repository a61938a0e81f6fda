/*
 * jinja_builtins.h - helpers shared by jinja_builtins.c and jinja_filters.c (internal).
 */
#pragma once

#include "text/jinja_impl.h"

/* The argument at position `pos`, else the keyword argument `name` (may be NULL), else NULL. */
struct jv *muse_jarg(struct jv *args, size_t n_args, const char **kwnames, struct jv *kwargs,
                     size_t n_kwargs, size_t pos, const char *name);
/* *out = v's string, or an error naming `what` when v is missing or not a string. */
bool muse_jarg_str(struct jctx *c, struct jv *v, const char *what, struct jstr **out);
bool muse_jlist_value(struct jctx *c, struct jlist *l, struct jv *out);
/* Python str.strip/lstrip/rstrip (which: 1 left, 2 right, 3 both; chars NULL = whitespace). */
bool muse_jstrip(struct jctx *c, struct jstr *s, struct jstr *chars, int which, struct jv *out);
/* Python str.replace (count < 0: all). */
bool muse_jreplace(struct jctx *c, struct jstr *s, struct jstr *old, struct jstr *new_, int64_t count,
                   struct jv *out);
/* Case mapping: 0 lower, 1 upper, 2 capitalize-first, 3 title, 4 swapcase. */
bool muse_jcase(struct jctx *c, struct jstr *s, int mode, struct jv *out);
/* Python str.split (sep NULL = whitespace runs; maxsplit < 0 = unlimited). */
bool muse_jsplit(struct jctx *c, struct jstr *s, struct jstr *sep, int64_t maxsplit, struct jv *out);
/* Python's `str % args` (%s %d %i %r %%); args a tuple or a single value. */
bool muse_jinja_percent_format(struct jctx *c, struct jv fmt, struct jv args, struct jv *out);
