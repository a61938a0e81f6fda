/*
 * muse.h - public API of libmuse, a C11 inference engine for Muse-Glimmer GGUF models.
 *
 * Conventions (see DEVELOPERS.md and ../shared/STYLE.md):
 *   - Every function that can fail returns a muse_status (0 = ok, negative = error) or NULL;
 *     a human-readable message is available through the object or error record it names.
 *   - The library never prints and never exits; only the tools in tools/ do.
 *   - Objects with invariants are opaque; options travel in params structs by value.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSE_VERSION_MAJOR 0
#define MUSE_VERSION_MINOR 1
#define MUSE_VERSION_PATCH 0

/* Status codes. 0 is success; every error is negative. */
enum muse_status {
    MUSE_OK              =  0,
    MUSE_ERR_INVALID_ARG = -1,  /* a caller passed a bad argument or option */
    MUSE_ERR_IO          = -2,  /* open/read/write/mmap failed */
    MUSE_ERR_FORMAT      = -3,  /* a file or request is malformed (truncated, hostile, inconsistent) */
    MUSE_ERR_UNSUPPORTED = -4,  /* well-formed but not supported (unknown type, architecture) */
    MUSE_ERR_NOMEM       = -5,  /* allocation failed */
    MUSE_ERR_MISSING     = -6,  /* a required key, tensor or token is absent */
    MUSE_ERR_SHAPE       = -7,  /* a tensor has the wrong shape or type */
    MUSE_ERR_CONTEXT     = -8,  /* input longer than the context */
    MUSE_ERR_CANCELLED   = -9,  /* the caller cancelled the operation */
    MUSE_ERR_TEMPLATE    = -10, /* a chat template failed to parse or raised an error */
    MUSE_ERR_INTERNAL    = -11, /* a bug in muse */
    MUSE_STATUS_COUNT    = 12
};
typedef enum muse_status muse_status;

/* A short constant description of a status ("ok", "i/o error", ...). Never NULL. */
const char *muse_status_str(muse_status status);

/* "MAJOR.MINOR.PATCH"; a constant string. */
const char *muse_version(void);

/*
 * An error record: a status plus a one-line message. Functions that take a
 * `struct muse_error *err` fill it on failure (err may be NULL when the caller
 * does not want the message). The message never ends in a newline.
 */
struct muse_error {
    muse_status status;
    char msg[512];
};


/* ---- models and contexts (the text forward) ------------------------------------------------
 * A muse_model is the read-only part (hyperparameters + weights as views into the mmap'd GGUF);
 * it may be shared by any number of contexts and threads. A muse_context is one sequence: its
 * KV cache, its run state (planned once at creation) and its backend; use one context from one
 * thread at a time.
 */
struct muse_model;
struct muse_context;

struct muse_model_params {
    int32_t reserved;             /* no options yet; keep the struct for ABI stability */
};

/* Defaults for muse_model_load. */
struct muse_model_params muse_model_default_params(void);

/*
 * mmap and load a Muse-Glimmer text GGUF. On success *out owns a new model (free with
 * muse_model_free). Errors: MUSE_ERR_IO (open/mmap), MUSE_ERR_FORMAT (malformed file or
 * metadata), MUSE_ERR_UNSUPPORTED (another architecture: a vision projector or a DFlash
 * drafter is named as such), MUSE_ERR_MISSING (a required key or tensor, named),
 * MUSE_ERR_SHAPE (a tensor with the wrong shape or type: names the tensor, the expected and the
 * found shape), MUSE_ERR_NOMEM. err may be NULL.
 */
muse_status muse_model_load(const char *path, struct muse_model_params params, struct muse_model **out,
                            struct muse_error *err);

/* Free a model (NULL is fine). Every context made from it must be freed first. */
void muse_model_free(struct muse_model *model);

/* Model facts (thread-safe, never fail): vocabulary size (rows of token_embd), training context
 * length, layer count, embedding width. */
int32_t muse_model_n_vocab(const struct muse_model *model);
int32_t muse_model_n_ctx_train(const struct muse_model *model);
int32_t muse_model_n_layer(const struct muse_model *model);
int32_t muse_model_n_embd(const struct muse_model *model);
/* Special token ids from the file; -1 when absent. */
int32_t muse_model_token_bos(const struct muse_model *model);
int32_t muse_model_token_eos(const struct muse_model *model);
int32_t muse_model_token_eot(const struct muse_model *model);
/* Whether generation stops at `token`: EOS and EOT do, EOM (<|eom|>) does not. */
int muse_model_token_is_stop(const struct muse_model *model, int32_t token);
/* A one-line description ("muse-glimmer 30B, 52 layers, ..."), written into buf (always NUL-terminated). */
void muse_model_desc(const struct muse_model *model, char *buf, size_t size);

enum muse_kv_type {
    MUSE_KV_TYPE_F16  = 0,        /* llama.cpp's default */
    MUSE_KV_TYPE_F32  = 1,        /* for exact checks */
    MUSE_KV_TYPE_Q8_0 = 2,        /* half the memory of f16 (approximates llama.cpp's flash-attention path) */
    MUSE_KV_TYPE_COUNT
};

/* "f16", "f32", "q8_0" <-> enum muse_kv_type; from_name returns -1 when unknown. */
int muse_kv_type_from_name(const char *name);
const char *muse_kv_type_name(enum muse_kv_type type);

/*
 * Per-layer trace hook: called for every layer il (0..n_layer-1) with the residual entering it,
 * and once with il = n_layer for the residual entering the output norm, for every token whose
 * position is < trace_n_pos. sum and sumsq are accumulated in double; first holds x[0..3].
 */
typedef void (*muse_layer_trace_fn)(void *user, int32_t pos, int32_t il, double sum, double sumsq,
                                    const float first[4]);

/*
 * Layer-input capture hook (DFlash feature capture, debugging): called at the top of every layer
 * il (0..n_layer-1) of every micro-batch with the residual entering it (`t_layer_inp`; for
 * layer 0 the normed embedding), x = [n_tokens][n_embd] f32 for positions pos[0..n_tokens).
 * The pointers are valid only during the call.
 */
typedef void (*muse_layer_capture_fn)(void *user, int32_t il, const int32_t *pos, int32_t n_tokens,
                                      const float *x);

struct muse_context_params {
    uint32_t n_ctx;               /* positions; 0 = min(4096, the model's context_length) */
    uint32_t n_batch;             /* most tokens per forward (prompt chunk); default 512 */
    uint32_t n_threads;           /* 0 = the backend's choice; the ref backend uses 1 */
    enum muse_kv_type kv_type;    /* default MUSE_KV_TYPE_F16 */
    const char *backend;          /* "ref", "cpu", ...; NULL = the default backend */
    int swa_full;                 /* nonzero: sliding-window layers keep the whole context */
    muse_layer_trace_fn trace;    /* NULL = no trace */
    void *trace_user;
    int32_t trace_n_pos;          /* trace positions 0..trace_n_pos-1 */
    muse_layer_capture_fn capture; /* NULL = none */
    void *capture_user;
};

/* Defaults for muse_context_create. */
struct muse_context_params muse_context_default_params(void);

/*
 * Create a context (KV cache, run state, backend scratch: all allocated here, nothing later).
 * The model must outlive it. Errors: MUSE_ERR_INVALID_ARG (unknown backend, n_ctx larger than
 * the model's context_length, bad KV type), MUSE_ERR_NOMEM.
 */
muse_status muse_context_create(struct muse_model *model, struct muse_context_params params, struct muse_context **out,
                                struct muse_error *err);

void muse_context_free(struct muse_context *ctx);

/* Context size in positions (as resolved at creation). */
uint32_t muse_context_n_ctx(const struct muse_context *ctx);
/* Threads the backend uses (as resolved at creation). */
uint32_t muse_context_n_threads(const struct muse_context *ctx);
/* Tokens stored in the KV cache (the position the next token gets). */
int32_t muse_context_n_past(const struct muse_context *ctx);
/* Name of the backend in use ("ref", ...). */
const char *muse_context_backend(const struct muse_context *ctx);

/*
 * Evaluate n_tokens tokens at positions n_past, n_past+1, ... (chunked by n_batch; every chunk
 * goes through the same code, so a prompt and single-token decoding are the same path).
 * logits: NULL for none; else, with logits_all, [n_tokens][n_vocab] (a row per token), without
 * it [n_vocab] for the last token only. Values are the model's final outputs (after the logit
 * scale and the tanh softcap). Errors: MUSE_ERR_INVALID_ARG (a token id out of range, n_tokens
 * < 1), MUSE_ERR_CONTEXT (n_past + n_tokens > n_ctx; nothing is evaluated: never a truncation).
 */
muse_status muse_eval(struct muse_context *ctx, const int32_t *tokens, int32_t n_tokens, float *logits, int logits_all,
                      struct muse_error *err);

/*
 * Like muse_eval, with embedding rows instead of token ids (image rows from a vision projector):
 * embd = [n_tokens][n_embd] f32, used in place of token_embd rows; the weightless embedding
 * RMSNorm is still applied, as llama.cpp does. n_embd = muse_model_n_embd(model).
 */
muse_status muse_eval_embd(struct muse_context *ctx, const float *embd, int32_t n_tokens, float *logits,
                           int logits_all, struct muse_error *err);

/* Forget every token (n_past = 0). Cannot fail. */
void muse_kv_clear(struct muse_context *ctx);

/*
 * Roll back to the first n_keep tokens. Errors: MUSE_ERR_INVALID_ARG when n_keep > n_past or a
 * sliding-window layer no longer holds what position n_keep needs (then clear and re-prefill).
 */
muse_status muse_kv_truncate(struct muse_context *ctx, int32_t n_keep, struct muse_error *err);


/* ---- images and the vision projector (mmproj) ------------------------------------------------
 * The image path of Muse-Glimmer (docs/vision.md, ../shared/spec/vision.md), as llama.cpp's mtmd
 * computes it: decode (stb_image semantics) -> grid search -> Pillow-exact Lanczos-3 resize ->
 * normalise -> the ViT tower of the mmproj file -> pixel shuffle -> adapter. The result is
 * n_tokens rows of n_embd_out floats (the text model's n_embd), to be evaluated with
 * muse_eval_embd between the tokens <|image_start|> and <|image_end|>.
 *
 *   struct muse_image img;            muse_image_load(path, 0, &img, &err);
 *   struct muse_vision_input in;      muse_vision_preprocess(vision, &img, 0, &in, &err);
 *   float *rows = malloc(in.geom.n_tokens * n_embd_out * sizeof(float));
 *   muse_vision_encode(vision, &in, rows, &err);
 *   muse_vision_input_free(&in); muse_image_free(&img);
 *
 * Thread-safety: the image functions are pure (any thread). A muse_vision is read-only after
 * loading except for its encoder (thread pool and scratch): muse_vision_encode must not run
 * concurrently on the same object; every other muse_vision_* query may.
 */

/* A decoded image: 8-bit RGB, interleaved, row-major, top row first. Passive data; rgb is owned by
 * the struct (malloc'd by the library, released by muse_image_free). */
struct muse_image {
    int32_t width;
    int32_t height;
    int32_t channels_in_file;     /* what the file holds: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA */
    uint8_t *rgb;                 /* [height][width][3] */
};

/* The default decompression-bomb limit of muse_image_decode: 2^26 pixels (8192 x 8192, 192 MiB as
 * RGB). Images with more pixels are refused from their header, before any pixel is allocated. */
#define MUSE_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)1 << 26)

/*
 * Decode an image file held in memory: PNG (8/16-bit; 16-bit reduced as stb_image does), JPEG
 * (baseline and progressive), GIF (the first frame), BMP, with stb_image's semantics and
 * req_comp = 3 (what llama.cpp's mtmd calls): alpha is dropped, not composited; grey is
 * replicated; no EXIF orientation. WebP (static, through libwebp) too, alpha dropped likewise.
 * max_pixels: refuse images with more than this many pixels (0 = MUSE_IMAGE_MAX_PIXELS_DEFAULT);
 * the size is read from the header first and nothing is decoded past the limit; the decoder's own
 * allocations are capped to what an image of that size needs (a zlib bomb fails instead of
 * growing). On success *out owns a new pixel buffer (free with muse_image_free); on error *out is
 * zeroed. Errors: MUSE_ERR_FORMAT (empty, truncated or corrupt data, zero size),
 * MUSE_ERR_UNSUPPORTED (not one of the formats above, animated WebP, more pixels than max_pixels),
 * MUSE_ERR_INVALID_ARG, MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_image_decode(const void *data, size_t size, int64_t max_pixels, struct muse_image *out,
                              struct muse_error *err);

/* Read a file and muse_image_decode it. Adds MUSE_ERR_IO (the message names the file). */
muse_status muse_image_load(const char *path, int64_t max_pixels, struct muse_image *out, struct muse_error *err);

/* Release an image's pixels and zero the struct (NULL or a zeroed struct are fine). */
void muse_image_free(struct muse_image *img);

/*
 * Resize to width x height with Pillow's Image.resize(..., LANCZOS) arithmetic, bit for bit (Q22
 * fixed-point Lanczos-3, horizontal pass first, a pass whose size is unchanged is skipped; the same
 * size is a copy). *out owns a new buffer. Errors: MUSE_ERR_INVALID_ARG (sizes < 1),
 * MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_image_resize(const struct muse_image *src, int32_t width, int32_t height, struct muse_image *out,
                              struct muse_error *err);

/* Write an image as an 8-bit RGB PNG (stb_image_write). Errors: MUSE_ERR_IO, MUSE_ERR_INVALID_ARG. */
muse_status muse_image_save_png(const struct muse_image *img, const char *path, struct muse_error *err);

/*
 * llama.cpp's muse_glimmer_grid_size (spec 4.2): the merged-token grid cols x rows for an
 * img_w x img_h image, cells of `cell` pixels (patch_size * n_merge = 28) and at most max_tokens
 * tokens (the grid never grows to fill the cap; when no floor/ceil candidate fits, rounding may
 * exceed it). The resized image is (cols * cell) x (rows * cell). Pure; inputs must be >= 1.
 */
void muse_image_grid(int32_t img_w, int32_t img_h, int32_t cell, int32_t max_tokens, int32_t *cols, int32_t *rows);

struct muse_vision;

/* Stage hook (tests, debugging): called by muse_vision_encode with each intermediate result,
 * data = [n_rows][n_cols] f32, valid only during the call. Stages: "after_posemb" (raster order),
 * "after_pre_ln" (window order), "layer<i>_out_window_order" (the residual after block i),
 * "after_post_ln_window_order", "after_inv_perm" (raster), "pixel_shuffle", "adapter0", "adapter1"
 * (after their GELU), "projected". Called from the thread that runs muse_vision_encode. */
typedef void (*muse_vision_stage_fn)(void *user, const char *stage, const float *data, int64_t n_rows,
                                     int64_t n_cols);

/* Progress hook: called after each tower layer (layer = 1 .. n_layer) from the encoding thread;
 * returning 0 cancels the encode (MUSE_ERR_CANCELLED). */
typedef int (*muse_vision_progress_fn)(void *user, int32_t layer, int32_t n_layer);

struct muse_vision_params {
    const char *backend;          /* "cpu" (threads + SIMD, default) or "ref" (the plain-C oracle, 1 thread) */
    uint32_t n_threads;           /* 0 = physical cores (ref: 1) */
    muse_vision_stage_fn stage;   /* NULL = none */
    void *stage_user;
    muse_vision_progress_fn progress; /* NULL = none */
    void *progress_user;
};

/* Defaults for muse_vision_load. */
struct muse_vision_params muse_vision_default_params(void);

/*
 * mmap and load a Muse-Glimmer vision projector (an mmproj GGUF: general.architecture = 'clip',
 * clip.projector_type = 'muse-glimmer'), and create its encoder (backend, thread pool). Weights stay
 * in the mapping in their stored types (quantized matrices are multiplied as they are); only the
 * small patch kernel and position table are converted to F32 when stored as F16/BF16.
 * On success *out owns a new object (muse_vision_free). Errors, one line each: MUSE_ERR_IO,
 * MUSE_ERR_FORMAT (malformed file or key), MUSE_ERR_UNSUPPORTED (a text model or another projector
 * type is named as such; an unknown tensor; spatial_merge_size != 2), MUSE_ERR_MISSING (a required
 * key or tensor, named), MUSE_ERR_SHAPE (a tensor's shape, type or block alignment: expected and
 * found), MUSE_ERR_INVALID_ARG (unknown backend), MUSE_ERR_NOMEM.
 */
muse_status muse_vision_load(const char *path, struct muse_vision_params params, struct muse_vision **out,
                             struct muse_error *err);

/* Free (NULL is fine). */
void muse_vision_free(struct muse_vision *vision);

/* The projector's hyperparameters, as used (passive data). */
struct muse_vision_info {
    int32_t n_layer, n_embd, n_ff, n_head, head_dim;
    int32_t n_global_layers;      /* layers attending over the whole image; the others attend per window */
    int32_t patch_size;           /* pixels per patch side */
    int32_t n_merge;              /* pixel-shuffle factor (2) */
    int32_t window_side;          /* patches per window side = the position table's side */
    int32_t n_embd_merged;        /* n_embd * n_merge^2: the adapter's input width */
    int32_t n_mm0, n_mm1;         /* the adapter's hidden widths */
    int32_t n_embd_out;           /* width of the output rows: the text model's n_embd */
    int32_t image_size;           /* clip.vision.image_size (nominal; preprocessing ignores it) */
    int32_t default_max_tokens;   /* 4096 */
    float eps;
    float image_mean[3], image_std[3];
    int32_t n_threads;            /* the encoder's threads */
    const char *backend;          /* "cpu" or "ref" */
};
void muse_vision_get_info(const struct muse_vision *vision, struct muse_vision_info *out);

/* The width of muse_vision_encode's rows (mm.2's rows; equals the text model's n_embd). */
int32_t muse_vision_n_embd_out(const struct muse_vision *vision);

/* What preprocessing does with an image of src_w x src_h pixels. */
struct muse_image_geometry {
    int32_t src_w, src_h;
    int32_t target_w, target_h;   /* the resized image */
    int32_t grid_tok_cols, grid_tok_rows; /* merged tokens per row / column */
    int32_t n_tokens;             /* grid_tok_cols * grid_tok_rows: the rows muse_vision_encode writes */
    int32_t patches_w, patches_h; /* target / patch_size */
    int32_t n_windows;            /* attention windows of the windowed layers */
    int32_t resampled;            /* nonzero when the size changes (else the resize is a copy) */
};

/*
 * The geometry for an image of src_w x src_h with at most max_tokens merged tokens (0 = 4096,
 * llama.cpp's default; --image-max-tokens). Errors: MUSE_ERR_INVALID_ARG (sizes < 1, max_tokens <
 * 0, a grid too large for int32). Thread-safe.
 */
muse_status muse_vision_geometry(const struct muse_vision *vision, int32_t src_w, int32_t src_h, int32_t max_tokens,
                                 struct muse_image_geometry *out, struct muse_error *err);

/* The token count of muse_vision_geometry, or -1 on bad arguments. */
int32_t muse_vision_n_tokens(const struct muse_vision *vision, int32_t src_w, int32_t src_h, int32_t max_tokens);

/* A preprocessed image: passive data owned by the struct (muse_vision_input_free). */
struct muse_vision_input {
    struct muse_image_geometry geom;
    struct muse_image resized;    /* the resized RGB, target_w x target_h */
    float *pixels;                /* [3][target_h][target_w], planar, (u/255 - mean) / std in f32 */
};

/*
 * Grid search, Lanczos resize and normalisation of img for this projector (max_tokens as in
 * muse_vision_geometry). On success *out owns its buffers; on error it is zeroed. Errors as
 * muse_vision_geometry, plus MUSE_ERR_NOMEM. Thread-safe.
 */
muse_status muse_vision_preprocess(const struct muse_vision *vision, const struct muse_image *img, int32_t max_tokens,
                                   struct muse_vision_input *out, struct muse_error *err);

void muse_vision_input_free(struct muse_vision_input *in);

/*
 * Run the tower and the adapter on a preprocessed image: out = [in->geom.n_tokens][n_embd_out]
 * f32 rows in raster order of merged tokens (caller-allocated). Allocates the activations for this
 * image (about (4 * n_patches * n_embd + a few chunk buffers) floats) and frees them before
 * returning. Not reentrant per object. Errors: MUSE_ERR_INVALID_ARG (an input whose geometry does
 * not fit this projector), MUSE_ERR_NOMEM, MUSE_ERR_CANCELLED (the progress hook said stop).
 */
muse_status muse_vision_encode(struct muse_vision *vision, const struct muse_vision_input *in, float *out,
                               struct muse_error *err);

#ifdef __cplusplus
}
#endif
