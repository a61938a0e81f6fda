/* media_opts.c - the image options of run, chat, logits, bench and serve (media_opts.h). */
#include "media_opts.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/error.h"

#define O(dst) ((struct media_opts *)(dst))

/* Images under tensor parallelism are not done yet: refused before anything is loaded or printed. */
static bool tp_refuses(const char *f) {
    if (muse_tp_size() == 1) return false;
    cli_err("%s: images are not supported under --tp yet (text only; docs/tensor-parallel.md)", f);
    return true;
}

static int set_mmproj(void *d, const char *f, const char *v) {
    if (tp_refuses(f)) return -1;
    O(d)->mmproj = v;
    return 0;
}

static int set_image(void *d, const char *f, const char *v) {
    if (tp_refuses(f)) return -1;
    const char **a = realloc(O(d)->images, sizeof *a * (size_t)(O(d)->n_images + 1));
    if (!a) {
        cli_err("out of memory");
        return -1;
    }
    a[O(d)->n_images++] = v;
    O(d)->images = a;
    return 0;
}

static int set_max_tokens(void *d, const char *f, const char *v) {
    return cli_parse_int(f, v, 1, 1 << 20, &O(d)->max_tokens) ? 0 : -1;
}

static int set_min_tokens(void *d, const char *f, const char *v) {
    int64_t n;
    (void)d; /* llama.cpp's flag; Muse-Glimmer's preprocessor never grows an image to a minimum (spec 3.2) */
    return cli_parse_int(f, v, 1, 1 << 20, &n) ? 0 : -1;
}

static int set_no_mmproj(void *d, const char *f, const char *v) {
    (void)f, (void)v;
    O(d)->no_mmproj = true;
    return 0;
}

static const struct cli_opt rows[] = {
    {"--mmproj", "FILE", "the vision projector GGUF (default: the one *mmproj*.gguf beside the model,\n"
                         "looked for when an image is given)", set_mmproj},
    {"--image", "FILE", "an image for the prompt (PNG, JPEG, GIF, BMP, WebP); repeat for several. Each\n"
                        "takes the place of one <__media__> marker in the prompt (llama.cpp's), else\n"
                        "they go before the text", set_image},
    {"--image-max-tokens", "N", "at most N merged tokens per image (default 4096, as llama.cpp)", set_max_tokens},
    {"--image-min-tokens", "N", "accepted for llama.cpp compatibility: this projector has no minimum", set_min_tokens},
    {"--no-mmproj", NULL, "load no vision projector (images are refused)", set_no_mmproj},
};

void media_opts_init(struct media_opts *o) { memset(o, 0, sizeof *o); }

void media_opts_free(struct media_opts *o) {
    free(o->images);
    memset(o, 0, sizeof *o);
}

int media_opts_parse(struct media_opts *o, int argc, char **argv, int *i) {
    return cli_opts_parse(rows, sizeof rows / sizeof rows[0], o, argc, argv, i);
}

void media_opts_usage(FILE *f) {
    fprintf(f, "images:\n");
    cli_opts_usage(f, rows, sizeof rows / sizeof rows[0]);
}

char *media_find_mmproj(const char *model_path, struct muse_error *err) {
    const char *slash = strrchr(model_path, '/');
    char *dir = slash ? strndup(model_path, (size_t)(slash - model_path) + (slash == model_path)) : strdup(".");
    if (!dir) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory"), NULL;
    DIR *d = opendir(dir);
    char *found = NULL;
    int n = 0;
    char names[256] = "";
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") || !strstr(e->d_name, "mmproj")) continue;
        if (++n == 1) {
            size_t cap = strlen(dir) + len + 2;
            if ((found = malloc(cap))) snprintf(found, cap, "%s/%s", dir, e->d_name);
        }
        if (strlen(names) + len + 3 < sizeof names) {
            if (n > 1) strcat(names, ", ");
            strcat(names, e->d_name);
        }
    }
    if (d) closedir(d);
    if (n != 1) {
        free(found);
        found = NULL;
        if (n == 0)
            muse_error_set(err, MUSE_ERR_MISSING,
                           "an image needs the model's vision projector: give --mmproj FILE (no *mmproj*.gguf in %s)", dir);
        else
            muse_error_set(err, MUSE_ERR_INVALID_ARG, "%d vision projectors beside the model (%s): choose one with --mmproj",
                           n, names);
    } else if (!found) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    free(dir);
    return found;
}

void media_close(struct media_ctx *m) {
    muse_media_cache_free(m->cache);
    muse_vision_free(m->vision);
    for (int k = 0; k < m->n_images; k++) muse_image_free(&m->images[k]);
    free(m->images);
    free(m->mmproj_path);
    memset(m, 0, sizeof *m);
}

bool media_make_cache(struct media_ctx *m, const struct muse_model *model) {
    struct muse_error err;
    if (m->cache || !m->vision) return true;
    if (muse_media_cache_create(m->vision, muse_model_n_embd(model), MUSE_MEDIA_CACHE_DEFAULT_BYTES, &m->cache, &err)) {
        cli_err("%s: %s", m->mmproj_path, err.msg);
        return false;
    }
    return true;
}

bool media_load_vision(struct media_ctx *m, const char *mmproj, const char *model_path, const struct muse_model *model,
                       uint32_t n_threads, const char *backend, bool quiet) {
    struct muse_error err;
    if (m->vision) return true;
    free(m->mmproj_path);
    if (mmproj) {
        m->mmproj_path = strdup(mmproj);
    } else {
        if (!(m->mmproj_path = media_find_mmproj(model_path, &err))) {
            cli_err("%s", err.msg);
            return false;
        }
        if (!quiet) cli_err("using the vision projector %s (found beside the model; --mmproj FILE to choose)", m->mmproj_path);
    }
    struct muse_vision_params vp = muse_vision_default_params();
    vp.n_threads = n_threads;
    vp.backend = backend;
    if (!m->mmproj_path) {
        cli_err("out of memory");
        return false;
    }
    if (muse_vision_load(m->mmproj_path, vp, &m->vision, &err)) {
        cli_err("%s", err.msg);
        goto fail;
    }
    if (model && !media_make_cache(m, model)) goto fail;
    return true;
fail:
    muse_vision_free(m->vision);
    m->vision = NULL;
    free(m->mmproj_path);
    m->mmproj_path = NULL;
    return false;
}

bool media_open(const struct media_opts *o, const char *model_path, const struct muse_model *model, uint32_t n_threads,
                const char *backend, bool need_vision, bool quiet, struct media_ctx *m) {
    struct muse_error err;
    memset(m, 0, sizeof *m);
    m->max_tokens = (int32_t)o->max_tokens;
    need_vision = need_vision || o->n_images > 0;
    if (o->no_mmproj && (o->n_images > 0 || o->mmproj)) {
        cli_err("--no-mmproj cannot be combined with %s", o->mmproj ? "--mmproj" : "--image");
        return false;
    }
    if ((o->mmproj || (need_vision && !o->no_mmproj)) &&
        !media_load_vision(m, o->mmproj, model_path, model, n_threads, backend, quiet))
        goto fail;
    if (o->n_images > 0) {
        if (!(m->images = calloc((size_t)o->n_images, sizeof *m->images))) {
            cli_err("out of memory");
            goto fail;
        }
        for (; m->n_images < o->n_images; m->n_images++)
            if (muse_image_load(o->images[m->n_images], 0, &m->images[m->n_images], &err)) {
                cli_err("%s", err.msg);
                goto fail;
            }
    }
    return true;
fail:
    media_close(m);
    return false;
}
