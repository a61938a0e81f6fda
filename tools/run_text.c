/* run_text.c - prompt tokenization and streaming detokenization for `muse run` (run_text.h). */
#include "run_text.h"

#include <stdlib.h>

#include "core/error.h"

/* The tokenizer (branch tok) is not part of this build yet: text is reported as unavailable. */
struct run_text {
    int unused;
};

muse_status run_text_open(const char *path, struct run_text **out, struct muse_error *err) {
    (void)path;
    *out = NULL;
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "text prompts need the tokenizer, which is not in this build yet: pass --tokens IDS");
}

void run_text_close(struct run_text *rt) { free(rt); }

muse_status run_text_encode_prompt(struct run_text *rt, const char *text, const char *file, int32_t **ids, int *n_ids,
                                   struct muse_error *err) {
    (void)rt, (void)text, (void)file, (void)ids, (void)n_ids;
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "text prompts need the tokenizer");
}

void run_text_print_token(struct run_text *rt, int32_t id, FILE *f) {
    (void)rt;
    fprintf(f, " %d", id);
}

void run_text_flush(struct run_text *rt, FILE *f) { (void)rt, (void)f; }
