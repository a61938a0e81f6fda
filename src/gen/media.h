/*
 * media.h - prompts with images: Muse-Glimmer's multimodal prompt path (../shared/spec/vision.md
 * §6, llama.cpp's mtmd), shared by `muse run`, `chat`, `logits`, `bench` and the server.
 *
 * A multimodal prompt is one sequence of positions: token ids, and for every image its n_tokens
 * projected rows (muse_vision_encode), framed by `<|image_start|>` and `<|image_end|>` when it
 * comes from text. Positions are plain 1-D; the rows enter the stream where token embeddings do,
 * before the weightless input RMSNorm (muse_eval_mixed). No separators, no per-row newlines.
 *
 * Text: a prompt's text marks each image with a marker string - the chat template's image part
 * renders as `<|patch|>` (the model's own template; the HF path), llama.cpp's default marker is
 * `<__media__>` - and muse_media_prompt_add_text splits the text there, tokenizes each piece (special
 * tokens parsed, BOS on the first piece only when asked) and puts `<|image_start|>` + rows +
 * `<|image_end|>` in place of each marker, as mtmd_tokenize does.
 *
 * Reuse. In the prompt's id array an image row is a negative id derived from the image's content
 * key (muse_session_image_id), so the session layer's prefix reuse (and the server's slot choice)
 * compares images by content: a follow-up turn with the same image re-evaluates nothing of it.
 * Rows themselves come from a bounded cache keyed by content (struct muse_media_cache), so a
 * follow-up turn whose KV cache had to be rebuilt does not re-run the tower either. Images whose
 * rows the KV cache already holds are never encoded at all (rows are made lazily, when an
 * evaluation needs them).
 *
 * Content key: SHA-256 of a version tag, the decoded image's width and height, the token cap the
 * rows were made with and the RGB bytes. The vision projector is the cache's own (one cache per
 * muse_vision), so two different projectors never share rows.
 *
 * Threads: a cache may be used from any number of threads (one mutex; encodes are serialised,
 * since muse_vision_encode is not reentrant, and a second request for an image being encoded waits
 * and then finds it). A prompt belongs to one thread at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sha256.h"
#include "gen/session.h"
#include "muse.h"

struct muse_tokenizer;

/* ---- encoded rows by content ----------------------------------------------------------------- */

/* The default bound of a cache: 256 MiB of rows (seven 1024 x 1024 images at the real size, 1369
 * rows of 6656 floats each). */
#define MUSE_MEDIA_CACHE_DEFAULT_BYTES ((size_t)256 << 20)

struct muse_media_cache;

/* Progress of an encode (the tower's layers), from the thread that encodes: image = the prompt's
 * image index, layer done = 1..total. As muse_progress_fn: 0 to go on, nonzero to cancel (the
 * evaluation fails with MUSE_ERR_CANCELLED). */
typedef int (*muse_media_progress_fn)(void *user, int32_t image, uint64_t done, uint64_t total);

/*
 * A cache of projected rows over vision (borrowed; must outlive the cache; its encoder is used
 * only through this cache from then on, under the cache's lock) for a text model of width n_embd.
 * Rows not pinned by a prompt are kept while they fit in max_bytes (least recently used first
 * out); 0 keeps nothing beyond the prompts that hold them. Errors: MUSE_ERR_SHAPE (the projector's
 * rows are not n_embd wide: it belongs to another model), MUSE_ERR_NOMEM.
 */
muse_status muse_media_cache_create(struct muse_vision *vision, int32_t n_embd, size_t max_bytes,
                                    struct muse_media_cache **out, struct muse_error *err);
void muse_media_cache_free(struct muse_media_cache *c); /* NULL is fine; no prompt may still pin rows */
struct muse_vision *muse_media_cache_vision(const struct muse_media_cache *c);
/* Called for every encode this cache runs (may be NULL); set before the cache is shared. */
void muse_media_cache_set_progress(struct muse_media_cache *c, muse_media_progress_fn fn, void *user);

struct muse_media_cache_stats {
    uint64_t hits;        /* rows found */
    uint64_t encodes;     /* rows made (tower runs) */
    uint64_t evictions;
    uint64_t tokens_encoded; /* merged tokens the tower produced */
    double encode_s;      /* seconds in preprocessing + the tower, all encodes */
    int32_t n_entries;
    size_t bytes;         /* rows held (pinned or not) */
};
struct muse_media_cache_stats muse_media_cache_stats(struct muse_media_cache *c);

/* The content key of an image's rows under token cap max_tokens (0 = 4096, as the projector). */
void muse_media_image_key(const struct muse_image *img, int32_t max_tokens, uint8_t key[MUSE_SHA256_SIZE]);

/* ---- prompts --------------------------------------------------------------------------------- */

struct muse_media_entry; /* a cache entry (rows of one image), pinned by the prompt that uses it */

/* One image of a prompt. */
struct muse_media_image {
    uint8_t key[MUSE_SHA256_SIZE];
    struct muse_image img;            /* the pixels (until the rows are pinned); owned when `owned` */
    bool owned;
    int32_t max_tokens;               /* as given (0 = the projector's default) */
    struct muse_image_geometry geom;  /* n_tokens rows */
    int32_t pos;                      /* index of its first row in the prompt */
    struct muse_media_entry *rows;    /* pinned rows once an evaluation needed them, else NULL */
};

/* A prompt: ids (negative at image rows) and its images, in order. Passive; zero-initialise, then
 * muse_media_prompt_add_*; free with muse_media_prompt_free. */
struct muse_media_prompt {
    int32_t *ids;
    int32_t n, cap;
    struct muse_media_image *images;
    int32_t n_images, cap_images;
};

void muse_media_prompt_free(struct muse_media_prompt *p); /* releases pins and owned pixels; zeroes */

/* Append token ids (each must be >= 0; not checked against a vocabulary here). Errors: NOMEM. */
muse_status muse_media_prompt_add_tokens(struct muse_media_prompt *p, const int32_t *ids, int32_t n,
                                         struct muse_error *err);

/*
 * Append an image's rows only (no markers: `muse logits --tokens ...,img,...`): geometry from
 * vision with token cap max_tokens (0 = default), n_tokens negative ids. img: with take, the prompt
 * owns the pixels from now on (also on error: they are freed); without, they are borrowed and must
 * stay valid until the prompt is freed. key: the image's content key when the caller has it
 * (muse_media_image_key), else NULL (computed here). Errors: those of muse_vision_geometry, NOMEM.
 */
muse_status muse_media_prompt_add_image(struct muse_media_prompt *p, const struct muse_vision *vision,
                                        struct muse_image *img, bool take, const uint8_t *key, int32_t max_tokens,
                                        struct muse_error *err);

/* Markers of an image in a prompt's text. */
#define MUSE_MEDIA_MARKER_PATCH "<|patch|>"    /* what the Muse-Glimmer chat template renders */
#define MUSE_MEDIA_MARKER_MTMD "<__media__>"   /* llama.cpp's default media marker */

/*
 * Append text with images: the text is split at every occurrence of any of the markers (the
 * leftmost first; n_markers >= 1); the k-th marker becomes `<|image_start|>` + the rows of
 * images[k] + `<|image_end|>`. Each piece is tokenized with special-token parsing; add_bos puts
 * BOS before the first piece (when the vocabulary has one). The markers must be exactly n_images
 * (else MUSE_ERR_INVALID_ARG: "the prompt has 2 image markers (<|patch|>) but 1 image"). images:
 * as in muse_media_prompt_add_image (take: all of them, also on error). With n_images = 0 this is
 * plain tokenization (markers then stay text). Errors: MUSE_ERR_MISSING (the vocabulary lacks
 * `<|image_start|>` or `<|image_end|>`), those of the tokenizer and the geometry, NOMEM.
 */
muse_status muse_media_prompt_add_text(struct muse_media_prompt *p, const struct muse_tokenizer *tok,
                                       const struct muse_vision *vision, const char *text, size_t len, bool add_bos,
                                       const char *const *markers, int n_markers, struct muse_image *images,
                                       int32_t n_images, bool take, int32_t max_tokens, struct muse_error *err);

/* The index of the image whose rows cover prompt position i, or -1 (a token). */
int32_t muse_media_prompt_image_at(const struct muse_media_prompt *p, int32_t i);

/*
 * Make sure every image with a row in [from, to) has its rows pinned: from the cache, else
 * preprocessed and encoded into it (pixels of owned images are released once pinned). The cache's
 * progress hook sees every encode. Errors: those of muse_vision_preprocess / muse_vision_encode
 * (MUSE_ERR_CANCELLED from the progress hook), NOMEM.
 */
muse_status muse_media_prompt_rows(struct muse_media_cache *c, struct muse_media_prompt *p, int32_t from, int32_t to,
                                   struct muse_error *err);

/* The pinned rows of image k ([n_tokens][n_embd_out] f32), or NULL before muse_media_prompt_rows. */
const float *muse_media_prompt_image_rows(const struct muse_media_prompt *p, int32_t k);

/*
 * Evaluate positions [from, from + n) of the prompt at the end of session s, whose n_past must be
 * `from` (positions are prompt indices): rows made as muse_media_prompt_rows, then one
 * muse_session_eval_mixed (chunked by the context's n_batch across text/image boundaries). Logits as
 * muse_session_eval. c may be NULL when the range holds no image row. Errors: MUSE_ERR_INVALID_ARG
 * (n_past != from, a range outside the prompt, rows without a cache), those of the rows and of
 * the evaluation.
 */
muse_status muse_media_eval(struct muse_session *s, struct muse_media_cache *c, struct muse_media_prompt *p,
                            int32_t from, int32_t n, float *logits, int logits_all, struct muse_error *err);
