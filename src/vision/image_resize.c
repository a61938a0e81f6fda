/*
 * image_resize.c - Pillow's Image.resize((W, H), Image.LANCZOS) on 8-bit RGB, bit for bit
 * (spec 4.5; Pillow src/libImaging/Resample.c, which llama.cpp's resize_pillow reproduces).
 *
 * Coefficients in double, normalised per output pixel, then Q22 fixed point by adding +-0.5 and
 * truncating (a C cast, not round()); pixels accumulate in int32 from a rounding bias of 2^21 and
 * are clamped to [0, 255] after an arithmetic shift by 22. The horizontal pass runs first into an
 * intermediate u8 image W x H0, then the vertical one; a pass whose size does not change is
 * skipped (not run as an identity filter), and the same size is a plain copy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "vision/vision.h"

#define PRECISION_BITS 22 /* 32 - 8 - 2 */
#define LANCZOS_SUPPORT 3.0

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos(double x) {
    if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3.0);
    return 0.0;
}

muse_status muse_lanczos_axis_init(int32_t in_size, int32_t out_size, struct muse_lanczos_axis *ax,
                                   struct muse_error *err) {
    memset(ax, 0, sizeof *ax);
    if (in_size < 1 || out_size < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "resize: sizes must be >= 1");
    const double scale = (double)in_size / out_size;
    const double fs = scale > 1.0 ? scale : 1.0; /* widen the filter only when downscaling */
    const double support = LANCZOS_SUPPORT * fs;
    const double ss = 1.0 / fs;
    const int64_t ksize = (int64_t)ceil(support) * 2 + 1;
    double *w = malloc(sizeof(double) * (size_t)ksize);
    ax->bounds = malloc(sizeof(int32_t) * 2 * (size_t)out_size);
    ax->k = malloc(sizeof(int32_t) * (size_t)ksize * (size_t)out_size);
    if (!w || !ax->bounds || !ax->k) {
        free(w);
        muse_lanczos_axis_free(ax);
        return muse_error_set(err, MUSE_ERR_NOMEM, "resize: out of memory for the filter coefficients");
    }
    ax->ksize = (int32_t)ksize;
    for (int32_t xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale;
        int32_t xmin = (int32_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int32_t xmax = (int32_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        const int32_t n = xmax - xmin;
        double ww = 0.0;
        for (int32_t x = 0; x < n; x++) {
            w[x] = lanczos((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = ax->k + (size_t)xx * (size_t)ksize;
        for (int32_t x = 0; x < ksize; x++) {
            double v = x < n ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = (int32_t)(v * (1 << PRECISION_BITS) + (v < 0 ? -0.5 : 0.5));
        }
        ax->bounds[2 * xx] = xmin;
        ax->bounds[2 * xx + 1] = n;
    }
    free(w);
    return MUSE_OK;
}

void muse_lanczos_axis_free(struct muse_lanczos_axis *ax) {
    free(ax->bounds);
    free(ax->k);
    memset(ax, 0, sizeof *ax);
}

static uint8_t clip8(int32_t acc) {
    const int32_t v = acc >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* out [h][out_w][3] from in [h][in_w][3] along x. */
static void pass_horizontal(const uint8_t *in, int32_t in_w, int32_t h, const struct muse_lanczos_axis *ax, uint8_t *out,
                            int32_t out_w) {
    for (int32_t y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * in_w * 3;
        uint8_t *dst = out + (size_t)y * out_w * 3;
        for (int32_t xx = 0; xx < out_w; xx++) {
            const int32_t xmin = ax->bounds[2 * xx], n = ax->bounds[2 * xx + 1];
            const int32_t *k = ax->k + (size_t)xx * ax->ksize;
            int32_t a0 = 1 << (PRECISION_BITS - 1), a1 = a0, a2 = a0;
            for (int32_t x = 0; x < n; x++) {
                const uint8_t *p = row + (size_t)(xmin + x) * 3;
                a0 += p[0] * k[x];
                a1 += p[1] * k[x];
                a2 += p[2] * k[x];
            }
            dst[3 * xx] = clip8(a0);
            dst[3 * xx + 1] = clip8(a1);
            dst[3 * xx + 2] = clip8(a2);
        }
    }
}

/* out [out_h][w][3] from in [in_h][w][3] along y. */
static void pass_vertical(const uint8_t *in, int32_t w, const struct muse_lanczos_axis *ax, uint8_t *out, int32_t out_h) {
    const size_t stride = (size_t)w * 3;
    for (int32_t yy = 0; yy < out_h; yy++) {
        const int32_t ymin = ax->bounds[2 * yy], n = ax->bounds[2 * yy + 1];
        const int32_t *k = ax->k + (size_t)yy * ax->ksize;
        uint8_t *dst = out + (size_t)yy * stride;
        for (size_t i = 0; i < stride; i++) {
            int32_t acc = 1 << (PRECISION_BITS - 1);
            for (int32_t y = 0; y < n; y++) acc += in[(size_t)(ymin + y) * stride + i] * k[y];
            dst[i] = clip8(acc);
        }
    }
}

muse_status muse_image_resize(const struct muse_image *src, int32_t width, int32_t height, struct muse_image *out,
                              struct muse_error *err) {
    memset(out, 0, sizeof *out);
    if (!src || !src->rgb || src->width < 1 || src->height < 1 || width < 1 || height < 1)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "resize: sizes must be >= 1");
    const size_t n_out = (size_t)width * (size_t)height * 3;
    uint8_t *dst = malloc(n_out), *tmp = NULL;
    struct muse_lanczos_axis ax = {0}, ay = {0};
    muse_status st = MUSE_ERR_NOMEM;
    if (!dst) goto nomem;
    const bool need_h = width != src->width, need_v = height != src->height;
    if (!need_h && !need_v) {
        memcpy(dst, src->rgb, n_out);
    } else {
        const uint8_t *cur = src->rgb;
        if (need_h) {
            if ((st = muse_lanczos_axis_init(src->width, width, &ax, err))) goto fail;
            uint8_t *h_out = need_v ? (tmp = malloc((size_t)width * (size_t)src->height * 3)) : dst;
            if (!h_out) goto nomem;
            pass_horizontal(cur, src->width, src->height, &ax, h_out, width);
            cur = h_out;
        }
        if (need_v) {
            if ((st = muse_lanczos_axis_init(src->height, height, &ay, err))) goto fail;
            pass_vertical(cur, width, &ay, dst, height);
        }
    }
    muse_lanczos_axis_free(&ax);
    muse_lanczos_axis_free(&ay);
    free(tmp);
    out->width = width;
    out->height = height;
    out->channels_in_file = src->channels_in_file;
    out->rgb = dst;
    return MUSE_OK;
nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "resize: out of memory for a %d x %d image", width, height);
fail:
    muse_lanczos_axis_free(&ax);
    muse_lanczos_axis_free(&ay);
    free(tmp);
    free(dst);
    return st;
}
