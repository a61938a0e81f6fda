/*
 * image_decode.c - image files to RGB (muse_image_decode / muse_image_load / muse_image_save_png).
 *
 * stb_image (Debian's libstb-dev header; its implementation is compiled here with the formats muse
 * accepts and an allocation budget) decodes PNG, JPEG, GIF (first frame) and BMP exactly as
 * llama.cpp's mtmd does: stbi_load_from_memory(..., req_comp = 3), so alpha is dropped (not
 * composited), grey is replicated, 16-bit PNG is reduced by stb (the high byte). libwebp decodes
 * static WebP (stb has no WebP; llama.cpp does not read it), alpha dropped likewise.
 *
 * Decompression bombs: the header is read first (stbi_info_from_memory / WebPGetFeatures) and an
 * image with more than max_pixels pixels is refused before anything is decoded; then every
 * allocation stb makes is charged to a per-thread budget sized from that header (32 bytes per
 * pixel plus twice the input: enough for interlaced 16-bit RGBA with stb's intermediate copies), so a
 * zlib stream that inflates past what its IHDR announces fails instead of growing without bound.
 * The formats stb also knows (TGA, PSD, HDR, PIC, PNM) are compiled out: less attack surface.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "vision/vision.h"

#include <webp/decode.h>

// ---- stb_image with a budget ---------------------------------------------------------------------

/* The budget of the decode running on this thread: bytes left, and whether it ran out. */
static _Thread_local struct {
    size_t left;
    int exceeded;
} stb_budget;

/* Every block carries its size in a 16-byte header so that free/realloc can refund it. */
#define BUDGET_HDR 16

static void *budget_malloc(size_t size) {
    if (size > stb_budget.left || size > SIZE_MAX - BUDGET_HDR) {
        stb_budget.exceeded = 1;
        return NULL;
    }
    /* zeroed: stb 2.27 leaves its JPEG decoder state (Huffman tables included) uninitialized, and a
     * scan that uses a table the file never defined then indexes past it (2.28 zeroes the state) */
    unsigned char *p = calloc(1, size + BUDGET_HDR);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    stb_budget.left -= size;
    return p + BUDGET_HDR;
}

static void budget_free(void *ptr) {
    if (!ptr) return;
    unsigned char *p = (unsigned char *)ptr - BUDGET_HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    stb_budget.left += size;
    free(p);
}

static void *budget_realloc(void *ptr, size_t size) {
    if (!ptr) return budget_malloc(size);
    unsigned char *p = (unsigned char *)ptr - BUDGET_HDR;
    size_t old;
    memcpy(&old, p, sizeof old);
    if (size > old && (size - old > stb_budget.left || size > SIZE_MAX - BUDGET_HDR)) {
        stb_budget.exceeded = 1;
        return NULL;
    }
    unsigned char *q = realloc(p, size + BUDGET_HDR);
    if (!q) return NULL;
    if (size > old) memset(q + BUDGET_HDR + old, 0, size - old);
    memcpy(q, &size, sizeof size);
    stb_budget.left = stb_budget.left + old - size;
    return q + BUDGET_HDR;
}

/* stb declares static functions this file never calls (they are reported at the end of the file,
 * outside any push/pop): file-wide */
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_GIF
#define STBI_ONLY_BMP
#define STBI_MALLOC(sz) budget_malloc(sz)
#define STBI_REALLOC(p, newsz) budget_realloc(p, newsz)
#define STBI_FREE(p) budget_free(p)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#ifdef __clang__
/* The fuzz build's UBSan reports arithmetic UB inside stb 2.27's decoders that its later versions
 * fixed and that muse cannot patch (the header is Debian's): shifts past 31 bits in the JPEG bit
 * reader when a corrupt stream underruns it, signed overflows in corrupt progressive JPEG
 * coefficients, and `NULL + 0` / `memcpy(NULL, p, 0)` for a zero-length first PNG IDAT. On x86 they
 * yield garbage pixels for garbage input, nothing else; these checks are lifted for stb's functions
 * only (muse's own code keeps them) and ASan still checks every memory access stb makes. */
#pragma clang attribute push(__attribute__((no_sanitize("pointer-overflow", "nonnull-attribute", "shift", \
                                                        "signed-integer-overflow"))), apply_to = function)
#endif
#include <stb_image.h>
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC diagnostic pop

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

// ---- format sniffing ------------------------------------------------------------------------------

enum image_format { FMT_NONE, FMT_PNG, FMT_JPEG, FMT_GIF, FMT_BMP, FMT_WEBP };
static const char *const format_names[] = {"?", "PNG", "JPEG", "GIF", "BMP", "WebP"};

static enum image_format sniff(const unsigned char *p, size_t n) {
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return FMT_PNG;
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return FMT_JPEG;
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6))) return FMT_GIF;
    if (n >= 2 && p[0] == 'B' && p[1] == 'M') return FMT_BMP;
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return FMT_WEBP;
    return FMT_NONE;
}

static muse_status check_size(const char *fmt, int64_t w, int64_t h, int64_t max_pixels, struct muse_error *err) {
    if (w <= 0 || h <= 0)
        return muse_error_set(err, MUSE_ERR_FORMAT, "%s image has zero size (%lld x %lld)", fmt, (long long)w,
                              (long long)h);
    if (w > max_pixels / h)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "%s image is %lld x %lld = %.0f pixels, more than the limit of %lld (refused before "
                              "decoding)", fmt, (long long)w, (long long)h, (double)w * (double)h, (long long)max_pixels);
    return MUSE_OK;
}

// ---- decoders -------------------------------------------------------------------------------------

static uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t le16(const unsigned char *p) { return (uint32_t)p[1] << 8 | p[0]; }
static uint32_t be32(const unsigned char *p) { return be16(p) << 16 | be16(p + 2); }
static uint32_t le32(const unsigned char *p) { return le16(p + 2) << 16 | le16(p); }

/* The image size from the header, read here rather than by stb: stb's own header readers refuse
 * huge sizes with messages like "unknown image type", and the limit must be checked first. False
 * when the header cannot be read this simply (stb then decides). */
static bool header_size(enum image_format fmt, const unsigned char *p, size_t n, int64_t *w, int64_t *h) {
    switch (fmt) {
    case FMT_PNG: /* IHDR is the first chunk */
        if (n < 24 || memcmp(p + 12, "IHDR", 4)) return false;
        *w = be32(p + 16), *h = be32(p + 20);
        return true;
    case FMT_GIF: /* the logical screen */
        if (n < 10) return false;
        *w = le16(p + 6), *h = le16(p + 8);
        return true;
    case FMT_BMP:
        if (n < 26) return false;
        if (le32(p + 14) == 12) {
            *w = le16(p + 18), *h = le16(p + 20);
        } else {
            *w = (int32_t)le32(p + 18), *h = (int32_t)le32(p + 22);
            if (*h < 0) *h = -*h; /* top-down rows */
        }
        return true;
    case FMT_JPEG: /* the first SOFn segment */
        for (size_t i = 2; i + 4 <= n;) {
            if (p[i] != 0xff) return false;
            const unsigned m = p[i + 1];
            if (m == 0xff) {
                i++;
                continue;
            }
            if (m == 0xd8 || m == 0x01 || (m >= 0xd0 && m <= 0xd7)) {
                i += 2;
                continue;
            }
            if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
                if (i + 9 > n) return false;
                *h = be16(p + i + 5), *w = be16(p + i + 7);
                return true;
            }
            i += 2 + be16(p + i + 2);
        }
        return false;
    default: return false;
    }
}

/* The tables of a DHT segment whose length field is at p[i]: false when one has more than 256
 * codes. Bytes past the end count as 0, as stb reads them. */
static bool dht_ok(const unsigned char *p, size_t n, size_t i) {
    if (i + 2 > n) return true;
    const size_t len = be16(p + i);
    size_t q = i + 2, left = len >= 2 ? len - 2 : 0;
    while (left > 0 && q < n) {
        size_t count = 0;
        for (size_t k = 1; k <= 16; k++) count += q + k < n ? p[q + k] : 0;
        if (count > 256) return false;
        q += 17 + count;
        left = left > 17 + count ? left - 17 - count : 0;
    }
    return true;
}

/*
 * stb_image 2.27 builds its Huffman tables without checking that a DHT segment's 16 code counts sum
 * to at most 256 (the symbol array's size), so a hostile JPEG writes past the table (fixed in stb
 * 2.28; Debian 12 ships 2.27). Every table stb could read is checked first, following stb's own
 * walk: up to the frame header (SOF0-2) it skips stray bytes between segments and steps over
 * segments by their lengths; between the frame header and the first scan a stray byte ends its
 * parse; from the first scan on (entropy-coded data, where progressive files define tables between
 * scans and a real marker is the only source of an FF C4 pair) every FF C4 pair is checked.
 * False when a table is bad.
 */
static bool jpeg_tables_ok(const unsigned char *p, size_t n) {
    enum { HEADER, FRAME } phase = HEADER;
    size_t i = 2; /* after SOI */
    while (i < n) {
        if (p[i] != 0xff) {
            if (phase == FRAME) return true; /* stb: "expected marker" */
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && p[j] == 0xff) j++;
        if (j >= n) return true;
        const unsigned m = p[j];
        i = j + 1;
        if (m == 0xda) { /* SOS: from here on, every FF C4 pair */
            for (size_t k = i; k + 1 < n; k++)
                if (p[k] == 0xff && p[k + 1] == 0xc4 && !dht_ok(p, n, k + 2)) return false;
            return true;
        }
        if (m == 0xd9) return true;
        if (m == 0xc4 && !dht_ok(p, n, i)) return false;
        if (m == 0xc0 || m == 0xc1 || m == 0xc2) phase = FRAME;
        else if (m != 0xc4 && m != 0xdb && m != 0xdd && m != 0xdc && m != 0xfe && (m < 0xe0 || m > 0xef))
            return true; /* stb: "unknown marker" */
        if (i + 2 > n) return true;
        i += be16(p + i);
    }
    return true;
}

static muse_status decode_stb(const unsigned char *data, size_t size, enum image_format fmt, int64_t max_pixels,
                              struct muse_image *out, struct muse_error *err) {
    const char *fname = format_names[fmt];
    if (size > INT32_MAX) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "%s data of %zu bytes is too large", fname, size);
    if (fmt == FMT_JPEG && !jpeg_tables_ok(data, size))
        return muse_error_set(err, MUSE_ERR_FORMAT, "cannot decode the JPEG image: a Huffman table has more than 256 codes");
    int64_t w = 0, h = 0;
    if (!header_size(fmt, data, size, &w, &h)) {
        int iw = 0, ih = 0, comp = 0;
        stb_budget.left = 2 * size + (1u << 20); /* the header readers allocate their decoder state */
        stb_budget.exceeded = 0;
        if (!stbi_info_from_memory(data, (int)size, &iw, &ih, &comp))
            return muse_error_set(err, MUSE_ERR_FORMAT, "cannot read the %s header: %s", fname, stbi_failure_reason());
        w = iw, h = ih;
    }
    muse_status st = check_size(fname, w, h, max_pixels, err);
    if (st) return st;
    stb_budget.left = (size_t)w * (size_t)h * 32 + 2 * size + (1u << 20);
    stb_budget.exceeded = 0;
    int w2 = 0, h2 = 0, comp2 = 0;
    unsigned char *px = stbi_load_from_memory(data, (int)size, &w2, &h2, &comp2, 3);
    if (!px) {
        if (stb_budget.exceeded)
            return muse_error_set(err, MUSE_ERR_FORMAT,
                                  "%s data needs more memory than a %lld x %lld image does (a decompression bomb?)",
                                  fname, (long long)w, (long long)h);
        return muse_error_set(err, MUSE_ERR_FORMAT, "cannot decode the %s image: %s", fname, stbi_failure_reason());
    }
    if (w2 != w || h2 != h) { /* the header and the decode disagree: never trust either */
        stbi_image_free(px);
        return muse_error_set(err, MUSE_ERR_FORMAT, "%s image decodes to %d x %d but its header says %lld x %lld", fname,
                              w2, h2, (long long)w, (long long)h);
    }
    const size_t n = (size_t)w * (size_t)h * 3;
    out->rgb = malloc(n);
    if (!out->rgb) {
        stbi_image_free(px);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %d x %d image", w2, h2);
    }
    memcpy(out->rgb, px, n);
    stbi_image_free(px);
    out->width = w2;
    out->height = h2;
    out->channels_in_file = comp2;
    return MUSE_OK;
}

static muse_status decode_webp(const unsigned char *data, size_t size, int64_t max_pixels, struct muse_image *out,
                               struct muse_error *err) {
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK)
        return muse_error_set(err, MUSE_ERR_FORMAT, "cannot read the WebP header");
    if (f.has_animation)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "animated WebP is not supported (only still images)");
    muse_status st = check_size("WebP", f.width, f.height, max_pixels, err);
    if (st) return st;
    const size_t stride = (size_t)f.width * 3, n = stride * (size_t)f.height;
    out->rgb = malloc(n);
    if (!out->rgb) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a %d x %d image", f.width, f.height);
    if (!WebPDecodeRGBInto(data, size, out->rgb, n, (int)stride)) {
        free(out->rgb);
        out->rgb = NULL;
        return muse_error_set(err, MUSE_ERR_FORMAT, "cannot decode the WebP image (truncated or corrupt)");
    }
    out->width = f.width;
    out->height = f.height;
    out->channels_in_file = f.has_alpha ? 4 : 3;
    return MUSE_OK;
}

muse_status muse_image_decode(const void *data, size_t size, int64_t max_pixels, struct muse_image *out,
                              struct muse_error *err) {
    memset(out, 0, sizeof *out);
    if (max_pixels < 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "max_pixels must be >= 0");
    if (!max_pixels) max_pixels = MUSE_IMAGE_MAX_PIXELS_DEFAULT;
    if (!data || !size) return muse_error_set(err, MUSE_ERR_FORMAT, "empty image data");
    const enum image_format fmt = sniff(data, size);
    switch (fmt) {
    case FMT_NONE:
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "not an image in a supported format (%s)", MUSE_IMAGE_FORMATS);
    case FMT_WEBP: return decode_webp(data, size, max_pixels, out, err);
    default: return decode_stb(data, size, fmt, max_pixels, out, err);
    }
}

muse_status muse_image_load(const char *path, int64_t max_pixels, struct muse_image *out, struct muse_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return muse_error_set(err, MUSE_ERR_IO, "cannot open image '%s'", path);
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    muse_status st = MUSE_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            unsigned char *b = realloc(buf, cap);
            if (!b) {
                st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory reading image '%s'", path);
                break;
            }
            buf = b;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = muse_error_set(err, MUSE_ERR_IO, "cannot read image '%s'", path);
            break;
        }
    }
    fclose(f);
    if (!st) {
        st = muse_image_decode(buf, n, max_pixels, out, err);
        if (st) muse_error_prefix(err, "%s: ", path);
    }
    free(buf);
    return st;
}

void muse_image_free(struct muse_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

// ---- PNG output --------------------------------------------------------------------------------------

static void write_to_file(void *ctx, void *data, int size) {
    FILE **f = ctx;
    if (*f && fwrite(data, 1, (size_t)size, *f) != (size_t)size) {
        fclose(*f);
        *f = NULL;
    }
}

muse_status muse_image_save_png(const struct muse_image *img, const char *path, struct muse_error *err) {
    if (!img || !img->rgb || img->width < 1 || img->height < 1 || img->width > INT32_MAX / 3)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "no image to write");
    FILE *f = fopen(path, "wb");
    if (!f) return muse_error_set(err, MUSE_ERR_IO, "cannot create '%s'", path);
    const int ok = stbi_write_png_to_func(write_to_file, &f, img->width, img->height, 3, img->rgb, img->width * 3);
    if (!f || fclose(f) != 0 || !ok) return muse_error_set(err, MUSE_ERR_IO, "cannot write PNG '%s'", path);
    return MUSE_OK;
}
