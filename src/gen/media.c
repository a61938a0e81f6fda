/*
 * media.c - prompts with images: the rows cache, prompt building from text and markers, and the
 * evaluation of a prompt range through the session (the contract: media.h).
 *
 * The cache is a short list (tens of entries at most: an entry is megabytes) under one mutex; each
 * entry carries a pin count (prompts holding its rows) and a last-use tick for LRU eviction of the
 * unpinned ones. Encoding runs under a second mutex (one tower run at a time per projector)
 * without the list's lock held, so hits never wait for an encode of another image.
 */
#include "gen/media.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "muse.h"
#include "text/tokenizer.h"
#include "vision/vision.h"

#define LLAMA_DEFAULT_MAX_TOKENS 4096 /* llama.cpp's image token cap (muse_vision_info.default_max_tokens) */

struct muse_media_entry {
    struct muse_media_cache *c;
    uint8_t key[MUSE_SHA256_SIZE];
    float *rows;                      /* [n_rows][n_embd_out] */
    int32_t n_rows;
    size_t bytes;
    int32_t pins;
    uint64_t used;                    /* LRU tick */
    struct muse_media_entry *next;
};

struct muse_media_cache {
    struct muse_vision *v;
    size_t max_bytes;
    pthread_mutex_t mu;               /* the list, the counters */
    pthread_mutex_t enc_mu;           /* the encoder (and progress routing) */
    struct muse_media_entry *head;
    uint64_t tick;
    struct muse_media_cache_stats st;
    muse_media_progress_fn progress;
    void *progress_user;
    int32_t cur_image;                /* the prompt image being encoded (for progress) */
};

// ---- the cache ------------------------------------------------------------------------------------

muse_status muse_media_cache_create(struct muse_vision *vision, int32_t n_embd, size_t max_bytes,
                                    struct muse_media_cache **out, struct muse_error *err) {
    *out = NULL;
    if (muse_vision_n_embd_out(vision) != n_embd)
        return muse_error_set(err, MUSE_ERR_SHAPE,
                              "the vision projector makes rows of %d floats but the text model's embedding is %d wide: "
                              "they do not belong together",
                              muse_vision_n_embd_out(vision), n_embd);
    struct muse_media_cache *c = calloc(1, sizeof *c);
    if (!c) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the image cache");
    c->v = vision;
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->enc_mu, NULL);
    *out = c;
    return MUSE_OK;
}

void muse_media_cache_free(struct muse_media_cache *c) {
    if (!c) return;
    for (struct muse_media_entry *e = c->head, *n; e; e = n) {
        n = e->next;
        free(e->rows);
        free(e);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->enc_mu);
    free(c);
}

struct muse_vision *muse_media_cache_vision(const struct muse_media_cache *c) { return c->v; }

void muse_media_cache_set_progress(struct muse_media_cache *c, muse_media_progress_fn fn, void *user) {
    c->progress = fn;
    c->progress_user = user;
}

struct muse_media_cache_stats muse_media_cache_stats(struct muse_media_cache *c) {
    pthread_mutex_lock(&c->mu);
    struct muse_media_cache_stats s = c->st;
    pthread_mutex_unlock(&c->mu);
    return s;
}

void muse_media_image_key(const struct muse_image *img, int32_t max_tokens, uint8_t key[MUSE_SHA256_SIZE]) {
    static const char tag[] = "muse-media-rows/1";
    const int32_t cap = max_tokens > 0 ? max_tokens : LLAMA_DEFAULT_MAX_TOKENS;
    uint8_t hdr[12];
    const int32_t v[3] = {img->width, img->height, cap};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) hdr[4 * i + b] = (uint8_t)((uint32_t)v[i] >> (8 * b));
    struct muse_sha256 h;
    muse_sha256_init(&h);
    muse_sha256_update(&h, tag, sizeof tag);
    muse_sha256_update(&h, hdr, sizeof hdr);
    if (img->rgb) muse_sha256_update(&h, img->rgb, (size_t)img->width * (size_t)img->height * 3);
    muse_sha256_final(&h, key);
}

/* Evict least recently used unpinned entries while the cache holds more than max_bytes. Under mu. */
static void evict(struct muse_media_cache *c) {
    while (c->st.bytes > c->max_bytes) {
        struct muse_media_entry **victim = NULL;
        for (struct muse_media_entry **pp = &c->head; *pp; pp = &(*pp)->next)
            if ((*pp)->pins == 0 && (!victim || (*pp)->used < (*victim)->used)) victim = pp;
        if (!victim) return; /* everything left is pinned */
        struct muse_media_entry *e = *victim;
        *victim = e->next;
        c->st.bytes -= e->bytes;
        c->st.n_entries--;
        c->st.evictions++;
        free(e->rows);
        free(e);
    }
}

/* Find and pin an entry; NULL when absent. Under mu. */
static struct muse_media_entry *find_pin(struct muse_media_cache *c, const uint8_t key[MUSE_SHA256_SIZE]) {
    for (struct muse_media_entry *e = c->head; e; e = e->next)
        if (!memcmp(e->key, key, MUSE_SHA256_SIZE)) {
            e->pins++;
            e->used = ++c->tick;
            return e;
        }
    return NULL;
}

static void unpin(struct muse_media_entry *e) {
    struct muse_media_cache *c = e->c;
    pthread_mutex_lock(&c->mu);
    e->pins--;
    evict(c);
    pthread_mutex_unlock(&c->mu);
}

static int vision_progress(void *user, uint64_t done, uint64_t total) {
    struct muse_media_cache *c = user;
    return c->progress ? c->progress(c->progress_user, c->cur_image, done, total) : 0;
}

/* The pinned rows of im: a hit, or preprocess + encode + insert (pinned). index: for progress. */
static muse_status get_rows(struct muse_media_cache *c, struct muse_media_image *im, int32_t index,
                            struct muse_error *err) {
    pthread_mutex_lock(&c->mu);
    struct muse_media_entry *e = find_pin(c, im->key);
    if (e) c->st.hits++;
    pthread_mutex_unlock(&c->mu);
    if (e) {
        im->rows = e;
        return MUSE_OK;
    }
    pthread_mutex_lock(&c->enc_mu);
    pthread_mutex_lock(&c->mu); /* another thread may have made it while we waited */
    e = find_pin(c, im->key);
    if (e) c->st.hits++;
    pthread_mutex_unlock(&c->mu);
    if (e) {
        pthread_mutex_unlock(&c->enc_mu);
        im->rows = e;
        return MUSE_OK;
    }
    muse_status st = MUSE_OK;
    struct muse_vision_input in = {0};
    const int32_t n_out = muse_vision_n_embd_out(c->v);
    const int64_t t0 = muse_time_us();
    if (!im->img.rgb) {
        st = muse_error_set(err, MUSE_ERR_INTERNAL, "image %d: pixels released before its rows were made", index + 1);
        goto out;
    }
    if ((st = muse_vision_preprocess(c->v, &im->img, im->max_tokens, &in, err)) != MUSE_OK) goto out;
    if (!(e = calloc(1, sizeof *e)) ||
        !(e->rows = malloc((size_t)in.geom.n_tokens * (size_t)n_out * sizeof(float)))) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the rows of image %d (%d x %d floats)", index + 1,
                            in.geom.n_tokens, n_out);
        goto out;
    }
    c->cur_image = index;
    muse_vision_set_progress(c->v, vision_progress, c);
    st = muse_vision_encode(c->v, &in, e->rows, err);
    muse_vision_set_progress(c->v, NULL, NULL);
    if (st != MUSE_OK) goto out;
    memcpy(e->key, im->key, MUSE_SHA256_SIZE);
    e->c = c;
    e->n_rows = in.geom.n_tokens;
    e->bytes = (size_t)in.geom.n_tokens * (size_t)n_out * sizeof(float) + sizeof *e;
    e->pins = 1;
    pthread_mutex_lock(&c->mu);
    e->used = ++c->tick;
    e->next = c->head;
    c->head = e;
    c->st.bytes += e->bytes;
    c->st.n_entries++;
    c->st.encodes++;
    c->st.tokens_encoded += (uint64_t)e->n_rows;
    c->st.encode_s += (double)(muse_time_us() - t0) / 1e6;
    evict(c);
    pthread_mutex_unlock(&c->mu);
    im->rows = e;
    e = NULL;
out:
    pthread_mutex_unlock(&c->enc_mu);
    if (e) free(e->rows);
    free(e);
    muse_vision_input_free(&in);
    return st;
}

// ---- prompts --------------------------------------------------------------------------------------

static void image_release_pixels(struct muse_media_image *im) {
    if (im->owned) muse_image_free(&im->img);
    memset(&im->img, 0, sizeof im->img);
}

void muse_media_prompt_free(struct muse_media_prompt *p) {
    if (!p) return;
    for (int32_t k = 0; k < p->n_images; k++) {
        if (p->images[k].rows) unpin(p->images[k].rows);
        image_release_pixels(&p->images[k]);
    }
    free(p->images);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

static muse_status grow_ids(struct muse_media_prompt *p, int64_t more, struct muse_error *err) {
    if ((int64_t)p->n + more > INT32_MAX / 2) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the prompt is too long");
    if (p->n + more <= p->cap) return MUSE_OK;
    int32_t cap = p->cap ? p->cap : 256;
    while (cap < p->n + more) cap *= 2;
    int32_t *ids = realloc(p->ids, sizeof *ids * (size_t)cap);
    if (!ids) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a prompt of %lld positions",
                                    (long long)(p->n + more));
    p->ids = ids;
    p->cap = cap;
    return MUSE_OK;
}

muse_status muse_media_prompt_add_tokens(struct muse_media_prompt *p, const int32_t *ids, int32_t n,
                                         struct muse_error *err) {
    muse_status st = grow_ids(p, n, err);
    if (st != MUSE_OK) return st;
    if (n > 0) memcpy(p->ids + p->n, ids, sizeof *ids * (size_t)n);
    p->n += n;
    return MUSE_OK;
}

muse_status muse_media_prompt_add_image(struct muse_media_prompt *p, const struct muse_vision *vision,
                                        struct muse_image *img, bool take, const uint8_t *key, int32_t max_tokens,
                                        struct muse_error *err) {
    struct muse_media_image im = {.img = *img, .owned = take, .max_tokens = max_tokens, .pos = p->n};
    if (take) memset(img, 0, sizeof *img); /* the prompt's now */
    muse_status st = muse_vision_geometry(vision, im.img.width, im.img.height, max_tokens, &im.geom, err);
    if (st == MUSE_OK) st = grow_ids(p, im.geom.n_tokens, err);
    if (st == MUSE_OK && p->n_images == p->cap_images) {
        int32_t cap = p->cap_images ? 2 * p->cap_images : 4;
        struct muse_media_image *a = realloc(p->images, sizeof *a * (size_t)cap);
        if (!a) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        else p->images = a, p->cap_images = cap;
    }
    if (st != MUSE_OK) {
        image_release_pixels(&im);
        return st;
    }
    if (key) memcpy(im.key, key, MUSE_SHA256_SIZE);
    else muse_media_image_key(&im.img, max_tokens, im.key);
    for (int32_t r = 0; r < im.geom.n_tokens; r++) p->ids[p->n + r] = muse_session_image_id(im.key, r);
    p->n += im.geom.n_tokens;
    p->images[p->n_images++] = im;
    return MUSE_OK;
}

/* The leftmost occurrence of any marker in text[from..len): its offset (len when none), *mlen its length. */
static size_t next_marker(const char *text, size_t len, size_t from, const char *const *markers, int n_markers,
                          size_t *mlen) {
    size_t best = len;
    for (int m = 0; m < n_markers; m++) {
        const size_t ml = strlen(markers[m]);
        if (!ml || ml > len - from) continue;
        for (size_t i = from; i + ml <= len && i < best; i++)
            if (text[i] == markers[m][0] && !memcmp(text + i, markers[m], ml)) {
                best = i;
                *mlen = ml;
                break;
            }
    }
    return best;
}

static muse_status add_piece(struct muse_media_prompt *p, const struct muse_tokenizer *tok, const char *text,
                             size_t len, bool bos, struct muse_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = MUSE_TOKENIZE_PARSE_SPECIAL | (bos ? MUSE_TOKENIZE_ADD_BOS : 0);
    if (len == 0 && !bos) return MUSE_OK;
    muse_status st = muse_tokenizer_encode_alloc(tok, text, len, flags, &ids, &n, err);
    if (st == MUSE_OK && n > INT32_MAX / 2) st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "the prompt is too long");
    if (st == MUSE_OK) st = muse_media_prompt_add_tokens(p, ids, (int32_t)n, err);
    free(ids);
    return st;
}

muse_status muse_media_prompt_add_text(struct muse_media_prompt *p, const struct muse_tokenizer *tok,
                                       const struct muse_vision *vision, const char *text, size_t len, bool add_bos,
                                       const char *const *markers, int n_markers, struct muse_image *images,
                                       int32_t n_images, bool take, int32_t max_tokens, struct muse_error *err) {
    muse_status st = MUSE_OK;
    int32_t k = 0;
    if (n_images == 0) return add_piece(p, tok, text, len, add_bos, err);
    size_t mlen = 0;
    int64_t n_found = 0;
    for (size_t at = 0; (at = next_marker(text, len, at, markers, n_markers, &mlen)) < len; at += mlen) n_found++;
    if (n_found != n_images) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "the prompt has %lld image marker%s (%s) but %d image%s",
                            (long long)n_found, n_found == 1 ? "" : "s", markers[0], n_images, n_images == 1 ? "" : "s");
        goto fail;
    }
    const int32_t img_start = muse_tokenizer_find(tok, "<|image_start|>", 15);
    const int32_t img_end = muse_tokenizer_find(tok, "<|image_end|>", 13);
    if (img_start < 0 || img_end < 0) {
        st = muse_error_set(err, MUSE_ERR_MISSING, "the model's vocabulary has no %s token: it cannot read images",
                            img_start < 0 ? "<|image_start|>" : "<|image_end|>");
        goto fail;
    }
    size_t pos = 0;
    for (; k < n_images; k++) {
        size_t at = next_marker(text, len, pos, markers, n_markers, &mlen);
        if ((st = add_piece(p, tok, text + pos, at - pos, add_bos && pos == 0, err)) != MUSE_OK) goto fail;
        if ((st = muse_media_prompt_add_tokens(p, &img_start, 1, err)) != MUSE_OK) goto fail;
        st = muse_media_prompt_add_image(p, vision, &images[k], take, NULL, max_tokens, err);
        if (st != MUSE_OK) {
            muse_error_prefix(err, "image %d: ", k + 1);
            k++; /* consumed */
            goto fail;
        }
        if ((st = muse_media_prompt_add_tokens(p, &img_end, 1, err)) != MUSE_OK) {
            k++;
            goto fail;
        }
        pos = at + mlen;
    }
    return add_piece(p, tok, text + pos, len - pos, false, err);
fail:
    for (; take && k < n_images; k++) muse_image_free(&images[k]);
    return st;
}

int32_t muse_media_prompt_image_at(const struct muse_media_prompt *p, int32_t i) {
    for (int32_t k = 0; k < p->n_images; k++)
        if (i >= p->images[k].pos && i < p->images[k].pos + p->images[k].geom.n_tokens) return k;
    return -1;
}

muse_status muse_media_prompt_rows(struct muse_media_cache *c, struct muse_media_prompt *p, int32_t from, int32_t to,
                                   struct muse_error *err) {
    for (int32_t k = 0; k < p->n_images; k++) {
        struct muse_media_image *im = &p->images[k];
        if (im->rows || im->pos >= to || im->pos + im->geom.n_tokens <= from) continue;
        if (!c) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the prompt has an image but no vision projector is loaded");
        muse_status st = get_rows(c, im, k, err);
        if (st != MUSE_OK) return st;
        if (im->rows->n_rows != im->geom.n_tokens) /* a key collision or a projector mismatch: never silently */
            return muse_error_set(err, MUSE_ERR_INTERNAL, "image %d: cached rows have %d tokens, expected %d", k + 1,
                                  im->rows->n_rows, im->geom.n_tokens);
        if (im->owned) image_release_pixels(im);
    }
    return MUSE_OK;
}

const float *muse_media_prompt_image_rows(const struct muse_media_prompt *p, int32_t k) {
    return k >= 0 && k < p->n_images && p->images[k].rows ? p->images[k].rows->rows : NULL;
}

muse_status muse_media_eval(struct muse_session *s, struct muse_media_cache *c, struct muse_media_prompt *p,
                            int32_t from, int32_t n, float *logits, int logits_all, struct muse_error *err) {
    if (from < 0 || n < 1 || from > p->n - n)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "positions %d..%d are outside the prompt (%d)", from, from + n,
                              p->n);
    if (muse_session_n_past(s) != from)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the session holds %d positions, not the prompt's first %d",
                              muse_session_n_past(s), from);
    bool any = false;
    for (int32_t k = 0; k < p->n_images && !any; k++)
        any = p->images[k].pos < from + n && p->images[k].pos + p->images[k].geom.n_tokens > from;
    if (!any) return muse_session_eval(s, p->ids + from, n, logits, logits_all, err);
    /* the tower may take a while: batched sessions do not wait for this one meanwhile */
    struct muse_stepper *stp = muse_session_stepper(s);
    const bool joined = stp && muse_stepper_leave(stp, muse_session_seq(s));
    muse_status st = muse_media_prompt_rows(c, p, from, from + n, err);
    if (joined) muse_stepper_join(stp, muse_session_seq(s));
    if (st != MUSE_OK) return st;
    const float **rows = calloc((size_t)n, sizeof *rows);
    if (!rows) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    const size_t n_out = (size_t)muse_vision_n_embd_out(muse_media_cache_vision(c));
    for (int32_t k = 0; k < p->n_images; k++) {
        const struct muse_media_image *im = &p->images[k];
        for (int32_t r = 0; r < im->geom.n_tokens; r++) {
            const int32_t i = im->pos + r - from;
            if (i >= 0 && i < n) rows[i] = im->rows->rows + (size_t)r * n_out;
        }
    }
    st = muse_session_eval_mixed(s, p->ids + from, rows, n, logits, logits_all, err);
    free(rows);
    return st;
}
