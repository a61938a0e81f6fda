/*
 * test_image_decode.c - muse_image_decode's semantics (stb_image with req_comp 3: alpha dropped,
 * grey replicated, 16-bit reduced to the high byte, GIF's first frame, BMP's row order; WebP through
 * libwebp) and its refusals, each one clear line and never a crash: empty data, not an image,
 * truncated files, zero size, a header announcing more pixels than the limit (refused before
 * decoding), a zlib stream inflating past its header (refused by the allocation budget), animated
 * WebP. Plus the PNG writer round trip and muse_image_load's I/O error.
 */
#include <unistd.h>

#include <webp/encode.h>

#include "image_forge.h"
#include "vision/vision.h"
#include "vision_test_util.h"

static uint8_t buf[4 << 20];

static void expect_error(const char *what, const void *data, size_t n, int64_t max_pixels, muse_status want,
                         const char *needle) {
    struct muse_image img;
    struct muse_error err = {0};
    muse_status st = muse_image_decode(data, n, max_pixels, &img, &err);
    TEST_CONDF(st == want, "%s: status %d (%s), want %d", what, st, err.msg, want);
    TEST_CONDF(err.msg[0] && !strchr(err.msg, '\n'), "%s: one non-empty line: '%s'", what, err.msg);
    TEST_CONDF(!needle || strstr(err.msg, needle), "%s: '%s' lacks '%s'", what, err.msg, needle);
    TEST_CONDF(img.rgb == NULL && img.width == 0, "%s: output not zeroed", what);
    muse_image_free(&img);
}

static bool decode(const char *what, const void *data, size_t n, struct muse_image *img) {
    struct muse_error err;
    muse_status st = muse_image_decode(data, n, 0, img, &err);
    TEST_CONDF(st == MUSE_OK, "%s: %s", what, err.msg);
    return st == MUSE_OK;
}

static void test_semantics(void) {
    struct muse_image img;
    /* RGBA: alpha dropped, not composited (a transparent magenta pixel stays magenta) */
    const uint8_t rgba[2 * 2 * 4] = {255, 0, 255, 0, 10, 20, 30, 128, 1, 2, 3, 255, 200, 100, 50, 7};
    if (decode("RGBA PNG", buf, forge_png(buf, 2, 2, 6, 8, rgba), &img)) {
        bool ok = img.width == 2 && img.height == 2 && img.channels_in_file == 4;
        for (int i = 0; i < 4; i++) ok = ok && !memcmp(img.rgb + 3 * i, rgba + 4 * i, 3);
        TEST_COND("RGBA: alpha dropped", ok);
        muse_image_free(&img);
    }
    /* grey and grey + alpha: replicated */
    const uint8_t ga[3 * 2] = {0, 9, 128, 0, 255, 77};
    if (decode("grey+alpha PNG", buf, forge_png(buf, 3, 1, 4, 8, ga), &img)) {
        TEST_COND("grey+alpha: grey replicated, alpha dropped",
                  img.channels_in_file == 2 && !memcmp(img.rgb, (uint8_t[]){0, 0, 0, 128, 128, 128, 255, 255, 255}, 9));
        muse_image_free(&img);
    }
    const uint8_t g1[4] = {5, 6, 7, 8};
    if (decode("grey PNG", buf, forge_png(buf, 2, 2, 0, 8, g1), &img)) {
        TEST_COND("grey: replicated", img.channels_in_file == 1 && img.rgb[9] == 8 && img.rgb[10] == 8 && img.rgb[11] == 8);
        muse_image_free(&img);
    }
    /* 16-bit: stb keeps the high byte */
    const uint8_t rgb16[2 * 3 * 2] = {0x12, 0x34, 0xab, 0xcd, 0xff, 0xff, 0x00, 0xff, 0x80, 0x01, 0x7f, 0xff};
    if (decode("16-bit PNG", buf, forge_png(buf, 2, 1, 2, 16, rgb16), &img)) {
        TEST_COND("16-bit: high byte", !memcmp(img.rgb, (uint8_t[]){0x12, 0xab, 0xff, 0x00, 0x80, 0x7f}, 6));
        muse_image_free(&img);
    }
    /* BMP rows are stored bottom-up */
    uint8_t rgb[4 * 3 * 3];
    for (int i = 0; i < 36; i++) rgb[i] = (uint8_t)(i * 7);
    if (decode("BMP", buf, forge_bmp(buf, 4, 3, rgb), &img)) {
        TEST_COND("BMP: top row first", img.width == 4 && img.height == 3 && !memcmp(img.rgb, rgb, 36));
        muse_image_free(&img);
    }
    /* GIF: the first frame */
    if (decode("GIF", buf, forge_gif(buf, 4, 2), &img)) {
        bool red = img.width == 4 && img.height == 2;
        for (int i = 0; i < 8; i++) red = red && img.rgb[3 * i] == 255 && img.rgb[3 * i + 1] == 0 && img.rgb[3 * i + 2] == 0;
        TEST_COND("GIF: first frame (red, not the second frame's green)", red);
        muse_image_free(&img);
    }
    /* WebP (libwebp), lossless so the pixels come back exactly; with alpha, dropped */
    uint8_t *webp = NULL;
    uint8_t rgba8[8 * 4 * 4];
    for (int i = 0; i < 8 * 4; i++) rgba8[4 * i] = (uint8_t)i, rgba8[4 * i + 1] = (uint8_t)(3 * i), rgba8[4 * i + 2] = 9,
                                                  rgba8[4 * i + 3] = (uint8_t)(100 + i);
    const size_t wn = WebPEncodeLosslessRGBA(rgba8, 8, 4, 8 * 4, &webp);
    if (wn && decode("WebP", webp, wn, &img)) {
        bool ok = img.width == 8 && img.height == 4 && img.channels_in_file == 4;
        for (int i = 0; i < 32; i++) ok = ok && !memcmp(img.rgb + 3 * i, rgba8 + 4 * i, 3);
        TEST_COND("WebP: RGB exact, alpha dropped", ok);
        muse_image_free(&img);
    }
    TEST_COND("WebP encoder available", wn > 0);
    if (wn > 40) expect_error("truncated WebP", webp, wn / 2, 0, MUSE_ERR_FORMAT, "WebP");
    WebPFree(webp);
    /* the PNG writer round trip */
    char path[256];
    snprintf(path, sizeof path, "%s/muse-test-image-%d.png", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    struct muse_image src = {4, 3, 3, rgb}, back;
    struct muse_error err;
    TEST_COND("save PNG", muse_image_save_png(&src, path, &err) == MUSE_OK);
    TEST_COND("load PNG back", muse_image_load(path, 0, &back, &err) == MUSE_OK && back.width == 4 &&
                                   !memcmp(back.rgb, rgb, 36));
    muse_image_free(&back);
    unlink(path);
    TEST_COND("missing file: I/O error naming it",
              muse_image_load(path, 0, &back, &err) == MUSE_ERR_IO && strstr(err.msg, path) && !strchr(err.msg, '\n'));
}

static void test_refusals(void) {
    expect_error("empty", "", 0, 0, MUSE_ERR_FORMAT, "empty");
    expect_error("text", "hello, world: not an image", 26, 0, MUSE_ERR_UNSUPPORTED, "PNG, JPEG");
    expect_error("TGA-like bytes", "\0\0\2\0\0\0\0\0\0\0\0\0\1\0\1\0\30\0", 18, 0, MUSE_ERR_UNSUPPORTED, "supported");
    const uint8_t px[16 * 16 * 3] = {1, 2, 3};
    const size_t n = forge_png(buf, 16, 16, 2, 8, px);
    expect_error("PNG signature only", buf, 8, 0, MUSE_ERR_FORMAT, "PNG");
    expect_error("truncated PNG", buf, n / 2, 0, MUSE_ERR_FORMAT, "PNG");
    expect_error("PNG over a tiny pixel limit", buf, n, 100, MUSE_ERR_UNSUPPORTED, "refused before decoding");
    /* zero width: stb refuses in the header */
    forge_png(buf, 0, 16, 2, 8, px);
    expect_error("zero-sized PNG", buf, n, 0, MUSE_ERR_FORMAT, NULL);
    /* a 100000 x 100000 header with a few bytes of data: refused from the header */
    uint8_t big[256];
    const size_t bn = forge_png_bomb(big, 100000, 100000, 1);
    expect_error("100000 x 100000 header", big, bn, 0, MUSE_ERR_UNSUPPORTED, "100000 x 100000");
    /* a 64 x 64 header whose zlib stream inflates to ~26 MB: refused by the allocation budget */
    const size_t zn = forge_png_bomb(buf, 64, 64, 100000);
    expect_error("zlib bomb", buf, zn, 0, MUSE_ERR_FORMAT, "decompression bomb");
    /* the JPEG golden, truncated at several points: an error or an image of the header's size, never a crash */
    char path[1024];
    size_t jn;
    char *jpg = vt_read_file(vt_golden("images/img_640x480_photo.jpg", path, sizeof path), &jn);
    TEST_COND("golden JPEG readable", jpg != NULL);
    for (size_t cut = 2; jpg && cut < jn; cut = cut * 3 + 1) {
        struct muse_image img;
        struct muse_error err = {0};
        muse_status st = muse_image_decode(jpg, cut, 0, &img, &err);
        TEST_CONDF(st == MUSE_OK ? img.width == 640 && img.height == 480 : err.msg[0] && !strchr(err.msg, '\n'),
                   "JPEG cut at %zu: status %d '%s'", cut, st, err.msg);
        muse_image_free(&img);
    }
    free(jpg);
    /* animated WebP: a VP8X header with the animation flag */
    uint8_t anim[64] = "RIFF\0\0\0\0WEBPVP8X";
    const uint32_t chunk = 10, riff = 4 + 8 + chunk;
    memcpy(anim + 4, &riff, 4);
    memcpy(anim + 16, &chunk, 4);
    anim[20] = 0x02; /* ANIMATION_FLAG */
    anim[24] = 7, anim[27] = 7; /* canvas 8 x 8 */
    expect_error("animated WebP", anim, 8 + riff, 0, MUSE_ERR_UNSUPPORTED, "animated");
    expect_error("negative limit", buf, n, -1, MUSE_ERR_INVALID_ARG, NULL);
}

int main(void) {
    test_semantics();
    test_refusals();
    return TEST_REPORT();
}
