/*
 * vision.h - the inside of the Muse-Glimmer vision path (../shared/spec/vision.md): the mmproj's
 * hyperparameters and tensor table, the weight views, the preprocessing helpers and the tower's
 * geometry (window permutation, pixel-shuffle gather). The public API is in include/muse.h
 * (muse_vision_*, muse_image_*); this header is for the files of src/vision, the CLI's `info`,
 * the synthetic writer and the tests.
 *
 * Files: vision_hparams.c (clip.* keys), vision_tensors.c (the tensor table, bound by model/tensors.c),
 * vision_load.c (muse_vision_load and the facts), image_decode.c (stb_image / libwebp),
 * image_resize.c (Pillow's Lanczos-3), vision_preprocess.c (grid, geometry, normalisation,
 * permutations), vision_encode.c (the tower and adapter as a program of layer ops, run by the
 * device; its window attention is the backend's, kernels/win_attn.c).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "gguf/gguf.h"
#include "model/tensors.h"
#include "muse.h"

#define MUSE_VISION_PROJECTOR "muse-glimmer"
#define MUSE_VISION_MAX_LAYERS 1024
#define MUSE_VISION_DEFAULT_MAX_TOKENS 4096 /* llama.cpp's set_limit_image_tokens(1, 4096) */
#define MUSE_VISION_SPARSE_FACTOR 4         /* every 4th layer (and the last) is global */
#define MUSE_VISION_ROPE_THETA 10000.0f     /* hard-coded in llama.cpp, not in the file */

/* ---- hyperparameters (vision_hparams.c) -------------------------------------------------------- */

struct muse_vision_hparams {
    uint32_t n_layer;          /* clip.vision.block_count */
    uint32_t n_embd;           /* clip.vision.embedding_length */
    uint32_t n_ff;             /* clip.vision.feed_forward_length */
    uint32_t n_head;           /* clip.vision.attention.head_count */
    uint32_t head_dim;         /* n_embd / n_head (a multiple of 4: two RoPE halves of pairs) */
    uint32_t patch_size;       /* clip.vision.patch_size */
    uint32_t n_merge;          /* clip.vision.spatial_merge_size (default 2; only 2 is supported) */
    uint32_t image_size;       /* clip.vision.image_size: nominal, unused by preprocessing */
    uint32_t projection_dim;   /* clip.vision.projection_dim: informative (the graph uses mm.2's rows) */
    float eps;                 /* clip.vision.attention.layer_norm_epsilon */
    float rope_theta;          /* 10000 */
    float image_mean[3];
    float image_std[3];
    /* from the tensors (vision_tensors.c) */
    uint32_t n_pos;            /* rows of v.position_embd.weight */
    uint32_t window_side;      /* sqrt(n_pos): the position table's side and the window side, in patches */
    uint32_t n_mm0, n_mm1;     /* widths of the adapter's hidden layers (mm.0 / mm.1 rows) */
    uint32_t n_embd_out;       /* mm.2 rows: the text model's n_embd */
};

/* Whether layer il attends globally (llama.cpp: il == n_layer - 1 || (il + 1) % 4 == 0). */
bool muse_vision_layer_is_global(const struct muse_vision_hparams *hp, uint32_t il);

/* n_embd * n_merge^2: the width of a pixel-shuffled (merged) token, the adapter's input. */
uint32_t muse_vision_n_embd_merged(const struct muse_vision_hparams *hp);

/*
 * Read the clip.* keys of a parsed mmproj into hp (the tensor-derived fields stay 0). Errors, one
 * line each: MUSE_ERR_UNSUPPORTED (not a clip file: a Muse-Glimmer text model or a drafter is
 * named as such; another projector type; spatial_merge_size != 2; a head_dim that is not a
 * multiple of 4), MUSE_ERR_MISSING (a required key, named), MUSE_ERR_FORMAT (a key of the wrong
 * type or out of range).
 */
muse_status muse_vision_hparams_load(const struct muse_gguf *g, struct muse_vision_hparams *hp, struct muse_error *err);

/* ---- weights and the tensor table (vision_tensors.c) ------------------------------------------- */

struct muse_vision_layer {
    struct muse_weight ln1_w, ln1_b;      /* [n_embd] F32 */
    struct muse_weight q, k, v, o;        /* [n_embd] -> [n_embd], any matmul type */
    struct muse_weight q_b, k_b, v_b, o_b;/* [n_embd] F32 */
    struct muse_weight ln2_w, ln2_b;      /* [n_embd] F32 */
    struct muse_weight up, up_b;          /* [n_embd] -> [n_ff], bias [n_ff] */
    struct muse_weight down, down_b;      /* [n_ff] -> [n_embd], bias [n_embd] */
};

struct muse_vision_weights {
    struct muse_weight patch;             /* conv kernel as a matrix: [3*p*p] -> [n_embd], F32 (converted at load) */
    struct muse_weight patch_b;           /* [n_embd] F32, optional (absent in Muse-Glimmer files) */
    struct muse_weight pos;               /* [n_embd][n_pos] F32 (converted at load): row y*side + x */
    struct muse_weight pre_ln_w, pre_ln_b, post_ln_w, post_ln_b; /* [n_embd] F32 */
    struct muse_weight mm0, mm1, mm2;     /* adapter: merged -> n_mm0 -> n_mm1 -> n_embd_out, no biases */
    struct muse_vision_layer *layers;     /* [n_layer] */
    float *owned;                         /* F32 copies of the patch kernel / position table when the file's are F16/BF16 */
};

/* The dimension ids of the tensor table muse_vision_table: the first ones follow from the keys,
 * POS .. OUT are bound by the first tensor that has them and must agree everywhere else. */
enum muse_vision_dim {
    MUSE_VISION_DIM_NONE = 0,
    MUSE_VISION_DIM_ONE,      /* 1 */
    MUSE_VISION_DIM_EMBD,     /* n_embd */
    MUSE_VISION_DIM_FF,       /* n_ff */
    MUSE_VISION_DIM_PATCH,    /* patch_size */
    MUSE_VISION_DIM_RGB,      /* 3 */
    MUSE_VISION_DIM_MERGED,   /* n_embd * n_merge^2 */
    MUSE_VISION_DIM_POS,      /* position-table rows (bound) */
    MUSE_VISION_DIM_MM0,      /* mm.0 rows (bound) */
    MUSE_VISION_DIM_MM1,      /* mm.1 rows (bound) */
    MUSE_VISION_DIM_OUT,      /* mm.2 rows = the text model's n_embd (bound) */
    MUSE_VISION_DIM_COUNT
};

/* The tensors of an mmproj (spec 3.3) in file order, binding into struct muse_vision_weights /
 * muse_vision_layer: a table of model/tensors.h, bound in table order (each per-layer entry for
 * every layer at once). */
extern const struct muse_tensor_table muse_vision_table;

/* dims[MUSE_VISION_DIM_COUNT] from the keys of hp; the bound dimensions (POS .. OUT) are 0. */
void muse_vision_dims(int64_t *dims, const struct muse_vision_hparams *hp);

/*
 * Bind every tensor of the table to w (views into g, which must outlive w), checking presence,
 * shape, type and block alignment, and fill hp's tensor-derived fields (n_pos, window_side,
 * n_mm0, n_mm1, n_embd_out). A tensor in the file that the table does not know is an error too
 * (muse would otherwise silently ignore a part of the model). Errors (one line, naming the
 * tensor): MUSE_ERR_MISSING, MUSE_ERR_SHAPE (shape, type or block alignment: expected vs found),
 * MUSE_ERR_UNSUPPORTED (an unknown tensor), MUSE_ERR_NOMEM. On error w holds nothing to free.
 */
muse_status muse_vision_weights_bind(const struct muse_gguf *g, struct muse_vision_hparams *hp,
                                     struct muse_vision_weights *w, struct muse_error *err);
void muse_vision_weights_free(struct muse_vision_weights *w);

/* ---- images (image_decode.c, image_resize.c) --------------------------------------------------- */

/* The formats muse decodes, for messages. */
#define MUSE_IMAGE_FORMATS "PNG, JPEG, GIF (first frame), BMP, WebP"

/* Pillow's Lanczos-3 coefficients for one axis (spec 4.5): out pixel i reads in[bounds[2i] ..
 * bounds[2i] + bounds[2i+1]) with the Q22 weights k[i * ksize ..]. */
struct muse_lanczos_axis {
    int32_t ksize;
    int32_t *bounds;   /* [out][2]: first input index, count */
    int32_t *k;        /* [out][ksize] */
};
muse_status muse_lanczos_axis_init(int32_t in_size, int32_t out_size, struct muse_lanczos_axis *ax,
                                   struct muse_error *err);
void muse_lanczos_axis_free(struct muse_lanczos_axis *ax);

/* ---- preprocessing and geometry (vision_preprocess.c) ------------------------------------------ */

/* The preprocessing constants of an mmproj (a subset of the hyperparameters). */
struct muse_vision_prep {
    int32_t patch_size;
    int32_t n_merge;
    int32_t window_side;
    float mean[3], std[3];
};

void muse_vision_prep_from_hparams(const struct muse_vision_hparams *hp, struct muse_vision_prep *p);

/* muse_vision_geometry's body for explicit constants. max_tokens 0 = the default 4096. */
muse_status muse_vision_prep_geometry(const struct muse_vision_prep *p, int32_t src_w, int32_t src_h, int32_t max_tokens,
                                      struct muse_image_geometry *out, struct muse_error *err);

/* muse_vision_preprocess's body for explicit constants. */
muse_status muse_vision_prep_image(const struct muse_vision_prep *p, const struct muse_image *img, int32_t max_tokens,
                                   struct muse_vision_input *out, struct muse_error *err);

/*
 * The window permutation of a grid_w x grid_h patch grid with windows of side `win` (spec 5.3):
 * sp_perm[i] = the raster index of the i-th patch in window order (windows in raster order,
 * raster inside a window, edge windows clipped); seg[s] .. seg[s + 1] = the rows of window s
 * (seg has n_seg + 1 entries, seg[0] = 0). inv_perm may be NULL. Arrays sized by the caller:
 * sp_perm/inv_perm [grid_w * grid_h], seg [muse_vision_n_windows(...) + 1]. Returns n_seg.
 */
int32_t muse_vision_window_perm(int32_t grid_w, int32_t grid_h, int32_t win, int32_t *sp_perm, int32_t *inv_perm,
                                int32_t *seg);
int32_t muse_vision_n_windows(int32_t grid_w, int32_t grid_h, int32_t win);

/* The pixel-shuffle gather (spec 5.6): ds[o * f * f + ry * f + rx] = raster index of the patch
 * (f*oy + ry, f*ox + rx) for merged token o = oy * (grid_w / f) + ox. ds [grid_w * grid_h]. */
void muse_vision_shuffle_perm(int32_t grid_w, int32_t grid_h, int32_t f, int32_t *ds);

/* ---- the encoder (vision_encode.c) -------------------------------------------------------------- */

/* The loaded object behind the public struct muse_vision. */
struct muse_vision {
    struct muse_gguf *gguf;
    struct muse_vision_hparams hp;
    struct muse_vision_weights w;
    struct muse_vision_params params;
    struct muse_device *dev;   /* shared with the text context of the same kind and threads */
    int32_t n_threads;         /* the device's */
    int32_t chunk;             /* activation rows per matmul step (the device's n_batch) */
};

/* Replace the progress hook of muse_vision_params (the media cache routes it per encode). Not while
 * an encode runs. */
void muse_vision_set_progress(struct muse_vision *v, muse_progress_fn fn, void *user);
