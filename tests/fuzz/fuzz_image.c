/*
 * libFuzzer target for the image path: decode arbitrary bytes (PNG, JPEG, GIF, BMP, WebP) under a
 * small pixel limit, and when they decode, run the preprocessing (grid, Lanczos resize,
 * normalisation) with constants taken from the first input byte (patch size 1..16, token cap
 * 1..64), then check the geometry's invariants and read every output value, so that a bad size,
 * a short buffer or a non-finite value trips ASan/UBSan or the checks.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vision.h"

#define MAX_PIXELS (1 << 18)

volatile float fuzz_image_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t knob = data[0];
    /* an exact-size copy so that reads past the end are caught */
    uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    struct muse_image img;
    struct muse_error err;
    if (muse_image_decode(copy, size - 1, MAX_PIXELS, &img, &err) == MUSE_OK) {
        if (img.width < 1 || img.height < 1 || (int64_t)img.width * img.height > MAX_PIXELS || !img.rgb) abort();
        const struct muse_vision_prep p = {1 + (knob & 15), 2, 1 + (knob >> 6), {0.5f, 0.4f, 0.3f}, {0.5f, 0.25f, 2.0f}};
        const int32_t cap = 1 + ((knob >> 4) & 3) * 21;
        struct muse_vision_input in;
        if (muse_vision_prep_image(&p, &img, cap, &in, &err) == MUSE_OK) {
            const struct muse_image_geometry *g = &in.geom;
            const int32_t cell = p.patch_size * p.n_merge;
            if (g->target_w != g->grid_tok_cols * cell || g->target_h != g->grid_tok_rows * cell ||
                g->n_tokens != g->grid_tok_cols * g->grid_tok_rows || g->n_tokens < 1 ||
                (g->n_tokens > cap && g->grid_tok_cols > 1 && g->grid_tok_rows > 1))
                abort();
            float s = 0;
            const size_t n = (size_t)3 * g->target_w * g->target_h;
            for (size_t i = 0; i < n; i++) {
                if (!isfinite(in.pixels[i])) abort();
                s += in.pixels[i];
            }
            fuzz_image_sink = s;
            muse_vision_input_free(&in);
        }
        muse_image_free(&img);
    }
    free(copy);
    return 0;
}
