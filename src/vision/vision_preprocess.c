/*
 * vision_preprocess.c - from a decoded image to the tower's input (spec 4): llama.cpp's grid search
 * (muse_glimmer_grid_size, all in double), the Lanczos resize, the normalisation to planar f32, and
 * the index maps of the tower (the window permutation of spec 5.3 and the pixel-shuffle gather of
 * spec 5.6).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "vision/vision.h"

// ---- the grid ------------------------------------------------------------------------------------

void muse_image_grid(int32_t img_w, int32_t img_h, int32_t cell, int32_t max_tokens, int32_t *cols, int32_t *rows) {
    double nph = (double)img_h / cell, npw = (double)img_w / cell;
    const double ratio = nph > 0.0 ? npw / nph : 1.0;
    if (nph * npw > (double)max_tokens) { /* only shrinks: never grows to fill the budget */
        nph = sqrt((double)max_tokens / ratio);
        npw = nph * ratio;
    }
    const int64_t hs[2] = {(int64_t)floor(nph), (int64_t)ceil(nph)};
    const int64_t ws[2] = {(int64_t)floor(npw), (int64_t)ceil(npw)};
    const double target_ar = (double)img_h / (double)img_w;
    int64_t best_h = -1, best_w = -1;
    double best_d = 0.0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const int64_t h = hs[a], w = ws[b];
            if (h < 1 || w < 1 || h * w > max_tokens) continue;
            const double d = fabs((double)h / (double)w - target_ar);
            if (best_h < 0 || d < best_d || (d == best_d && h * w > best_h * best_w)) { /* ties: more tokens */
                best_h = h;
                best_w = w;
                best_d = d;
            }
        }
    if (best_h < 0) { /* nothing fits under the cap: round and clamp (may exceed it) */
        best_h = lround(nph);
        best_w = lround(npw);
        if (best_h < 1) best_h = 1;
        if (best_w < 1) best_w = 1;
    }
    *cols = best_w > INT32_MAX ? INT32_MAX : (int32_t)best_w;
    *rows = best_h > INT32_MAX ? INT32_MAX : (int32_t)best_h;
}

// ---- index maps --------------------------------------------------------------------------------------

int32_t muse_vision_n_windows(int32_t grid_w, int32_t grid_h, int32_t win) {
    return ((grid_w + win - 1) / win) * ((grid_h + win - 1) / win);
}

int32_t muse_vision_window_perm(int32_t grid_w, int32_t grid_h, int32_t win, int32_t *sp_perm, int32_t *inv_perm,
                                int32_t *seg) {
    const int32_t nwin_h = (grid_h + win - 1) / win, nwin_w = (grid_w + win - 1) / win;
    int32_t i = 0, n_seg = 0;
    seg[0] = 0;
    for (int32_t wy = 0; wy < nwin_h; wy++)
        for (int32_t wx = 0; wx < nwin_w; wx++) {
            const int32_t y1 = (wy + 1) * win < grid_h ? (wy + 1) * win : grid_h;
            const int32_t x1 = (wx + 1) * win < grid_w ? (wx + 1) * win : grid_w;
            for (int32_t gy = wy * win; gy < y1; gy++)
                for (int32_t gx = wx * win; gx < x1; gx++) {
                    const int32_t t = gy * grid_w + gx;
                    sp_perm[i] = t;
                    if (inv_perm) inv_perm[t] = i;
                    i++;
                }
            seg[++n_seg] = i; /* never empty: every window of the ceil-divided grid holds a patch */
        }
    return n_seg;
}

void muse_vision_shuffle_perm(int32_t grid_w, int32_t grid_h, int32_t f, int32_t *ds) {
    int32_t i = 0;
    for (int32_t oy = 0; oy < grid_h / f; oy++)
        for (int32_t ox = 0; ox < grid_w / f; ox++)
            for (int32_t ry = 0; ry < f; ry++)
                for (int32_t rx = 0; rx < f; rx++) ds[i++] = (oy * f + ry) * grid_w + (ox * f + rx);
}

// ---- geometry and preprocessing ------------------------------------------------------------------

/* Patches per image side at most: keeps every product of the tower's sizes far inside int64 and
 * every index inside int32 (2^15 patches per side is 458,752 pixels at patch 14). */
#define MAX_PATCHES_SIDE (1 << 15)

muse_status muse_vision_prep_geometry(const struct muse_vision_prep *p, int32_t src_w, int32_t src_h, int32_t max_tokens,
                                      struct muse_image_geometry *out, struct muse_error *err) {
    memset(out, 0, sizeof *out);
    if (src_w < 1 || src_h < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "image size %d x %d", src_w, src_h);
    if (max_tokens < 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "max_tokens must be >= 0 (0 = default)");
    if (!max_tokens) max_tokens = MUSE_VISION_DEFAULT_MAX_TOKENS;
    const int32_t cell = p->patch_size * p->n_merge;
    int32_t cols, rows;
    muse_image_grid(src_w, src_h, cell, max_tokens, &cols, &rows);
    if ((int64_t)cols * p->n_merge > MAX_PATCHES_SIDE || (int64_t)rows * p->n_merge > MAX_PATCHES_SIDE ||
        (int64_t)cols * rows * p->n_merge * p->n_merge > INT32_MAX / 4)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "image grid %d x %d tokens is too large", cols, rows);
    out->src_w = src_w;
    out->src_h = src_h;
    out->grid_tok_cols = cols;
    out->grid_tok_rows = rows;
    out->n_tokens = cols * rows;
    out->target_w = cols * cell;
    out->target_h = rows * cell;
    out->patches_w = cols * p->n_merge;
    out->patches_h = rows * p->n_merge;
    out->n_windows = muse_vision_n_windows(out->patches_w, out->patches_h, p->window_side > 0 ? p->window_side : 1);
    out->resampled = out->target_w != src_w || out->target_h != src_h;
    return MUSE_OK;
}

muse_status muse_vision_prep_image(const struct muse_vision_prep *p, const struct muse_image *img, int32_t max_tokens,
                                   struct muse_vision_input *out, struct muse_error *err) {
    memset(out, 0, sizeof *out);
    if (!img || !img->rgb) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no image");
    muse_status st = muse_vision_prep_geometry(p, img->width, img->height, max_tokens, &out->geom, err);
    if (st) return st;
    if ((st = muse_image_resize(img, out->geom.target_w, out->geom.target_h, &out->resized, err))) goto fail;
    const size_t plane = (size_t)out->geom.target_w * (size_t)out->geom.target_h;
    out->pixels = malloc(sizeof(float) * 3 * plane);
    if (!out->pixels) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %d x %d image", out->geom.target_w,
                            out->geom.target_h);
        goto fail;
    }
    /* (u / 255 - mean) / std in f32, interleaved RGB -> planar [c][y][x] (llama.cpp's inp_raw) */
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int u = 0; u < 256; u++) lut[c][u] = ((float)u / 255.0f - p->mean[c]) / p->std[c];
    const uint8_t *rgb = out->resized.rgb;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) out->pixels[(size_t)c * plane + i] = lut[c][rgb[3 * i + (size_t)c]];
    return MUSE_OK;
fail:
    muse_vision_input_free(out);
    return st;
}

void muse_vision_input_free(struct muse_vision_input *in) {
    if (!in) return;
    muse_image_free(&in->resized);
    free(in->pixels);
    memset(in, 0, sizeof *in);
}
