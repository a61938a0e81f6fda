/*
 * media_opts.h - the image options shared by `muse run`, `chat`, `logits`, `bench` and `serve`
 * (--mmproj FILE, --image FILE (repeatable), --image-max-tokens N, --no-mmproj) and opening them:
 * finding the vision projector (the one given, else the one `*mmproj*.gguf` beside the model when
 * an image needs it; the file used is said on stderr), loading it with the model's threads and
 * backend, the rows cache over it (src/gen/media.h), and decoding the images.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gen/media.h"
#include "muse.h"

struct media_opts {
    const char *mmproj;   /* --mmproj, or NULL */
    const char **images;  /* --image, in order (the strings are argv's) */
    int n_images;
    int64_t max_tokens;   /* --image-max-tokens (0 = the projector's 4096) */
    bool no_mmproj;       /* --no-mmproj: never look for or load a projector */
};

void media_opts_init(struct media_opts *o);
void media_opts_free(struct media_opts *o); /* the images array */

/* As model_opts_parse: 1 consumed, 0 not one of them, -1 after an error message. */
int media_opts_parse(struct media_opts *o, int argc, char **argv, int *i);
void media_opts_usage(FILE *f);

/* What media_open made. Zero-initialise; media_close releases all. */
struct media_ctx {
    char *mmproj_path;            /* the projector used, or NULL (none loaded) */
    struct muse_vision *vision;
    struct muse_media_cache *cache;
    struct muse_image *images;    /* [n_images] decoded --image files */
    int n_images;
    int32_t max_tokens;
};

/* model may be NULL in media_open / media_load_vision: the projector and images are loaded, the
 * rows cache (which needs the model's width) is made later by media_make_cache (false after
 * printing the error: the projector belongs to a model of another width). */
bool media_make_cache(struct media_ctx *m, const struct muse_model *model);

/*
 * Load the projector when one is given, or when need_vision (an image will be used) by discovery
 * beside model_path (one `*mmproj*.gguf` in the model's directory; none or several: an error that
 * says so), then create the rows cache for the model's width and decode every --image. n_threads
 * / backend as the model's context (0 / NULL: defaults). quiet: no "using ..." note. On failure
 * prints "muse CMD: <message>" and returns false (m is then closed).
 */
bool media_open(const struct media_opts *o, const char *model_path, const struct muse_model *model, uint32_t n_threads,
                const char *backend, bool need_vision, bool quiet, struct media_ctx *m);
void media_close(struct media_ctx *m);

/* Load the projector into m (no-op when loaded): mmproj, or when NULL the one beside the model
 * (named on stderr unless quiet), and its rows cache. False after printing the error. */
bool media_load_vision(struct media_ctx *m, const char *mmproj, const char *model_path, const struct muse_model *model,
                       uint32_t n_threads, const char *backend, bool quiet);

/*
 * Find the projector beside a model: returns a malloc'd path, or NULL with a message in err
 * (MUSE_ERR_MISSING: none; MUSE_ERR_INVALID_ARG: several, named).
 */
char *media_find_mmproj(const char *model_path, struct muse_error *err);
