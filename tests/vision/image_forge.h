/*
 * image_forge.h - hand-made image files for the decoder tests and the fuzzer's seeds: PNG of any
 * colour type / bit depth (zlib stored blocks, or a fixed-Huffman stream of runs for zlib bombs),
 * a 24-bit BMP, a two-frame GIF (LZW with a clear code every two pixels, so codes stay 3 bits).
 * Each writes into a caller buffer and returns the byte count.
 */
#pragma once

#include <stdint.h>
#include <string.h>

static uint32_t forge_crc32(const uint8_t *p, size_t n, uint32_t crc) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return ~crc;
}

static void forge_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG chunk at out: length, type, data, CRC. */
static size_t forge_chunk(uint8_t *out, const char *type, const uint8_t *data, size_t n) {
    forge_be32(out, (uint32_t)n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    forge_be32(out + 8 + n, forge_crc32(out + 4, n + 4, 0));
    return n + 12;
}

/* zlib stream of raw with stored blocks. */
static size_t forge_zlib_stored(uint8_t *out, const uint8_t *raw, size_t n) {
    size_t o = 0;
    out[o++] = 0x78, out[o++] = 0x01;
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    size_t i = 0;
    do {
        const size_t len = n - i < 65535 ? n - i : 65535;
        out[o++] = i + len == n ? 1 : 0;
        out[o++] = (uint8_t)len, out[o++] = (uint8_t)(len >> 8);
        out[o++] = (uint8_t)~len, out[o++] = (uint8_t)(~len >> 8);
        memcpy(out + o, raw + i, len);
        o += len, i += len;
    } while (i < n);
    forge_be32(out + o, b << 16 | a);
    return o + 4;
}

/*
 * A PNG: w x h, colour type ct (0 grey, 2 RGB, 4 grey+alpha, 6 RGBA), depth 8 or 16; px holds the
 * samples of each row (filter bytes are added here), big-endian for 16 bits.
 */
static size_t forge_png(uint8_t *out, uint32_t w, uint32_t h, int ct, int depth, const uint8_t *px) {
    static const int chans[7] = {1, 0, 3, 0, 2, 0, 4};
    const size_t row = (size_t)w * chans[ct] * (depth / 8);
    static uint8_t raw[1 << 20], z[(1 << 20) + 4096];
    for (uint32_t y = 0; y < h; y++) {
        raw[y * (row + 1)] = 0;
        memcpy(raw + y * (row + 1) + 1, px + y * row, row);
    }
    size_t o = 8;
    memcpy(out, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13];
    forge_be32(ihdr, w), forge_be32(ihdr + 4, h);
    ihdr[8] = (uint8_t)depth, ihdr[9] = (uint8_t)ct, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    o += forge_chunk(out + o, "IHDR", ihdr, 13);
    o += forge_chunk(out + o, "IDAT", z, forge_zlib_stored(z, raw, (row + 1) * h));
    return o + forge_chunk(out + o, "IEND", NULL, 0);
}

/* A PNG whose header says w x h RGB 8-bit and whose IDAT is a fixed-Huffman zlib stream inflating
 * to n_runs * 258 + 1 zero bytes (a decompression bomb when that exceeds h * (3w + 1)). */
static size_t forge_png_bomb(uint8_t *out, uint32_t w, uint32_t h, uint32_t n_runs) {
    static uint8_t z[1 << 21];
    size_t o = 8, zn = 0;
    uint32_t bits = 0;
    int nb = 0;
#define PUT(v, n)                                                   \
    do {                                                            \
        bits |= (uint32_t)(v) << nb, nb += (n);                     \
        while (nb >= 8) z[zn++] = (uint8_t)bits, bits >>= 8, nb -= 8; \
    } while (0)
/* Huffman codes go most significant bit first */
#define PUTH(code, n)                                  \
    do {                                               \
        for (int k_ = (n) - 1; k_ >= 0; k_--) PUT(((code) >> k_) & 1, 1); \
    } while (0)
    z[zn++] = 0x78, z[zn++] = 0x01;
    PUT(1, 1);                                /* BFINAL */
    PUT(1, 2);                                /* fixed Huffman */
    PUTH(0x30, 8);                            /* literal 0 */
    for (uint32_t i = 0; i < n_runs; i++) {
        PUTH(0xc5, 8);                        /* length code 285 = 258 */
        PUTH(0, 5);                           /* distance code 0 = 1 */
    }
    PUTH(0, 7);                               /* end of block (256) */
    if (nb) z[zn++] = (uint8_t)bits;
    forge_be32(z + zn, 1), zn += 4;           /* a wrong adler: never reached */
#undef PUT
#undef PUTH
    memcpy(out, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13];
    forge_be32(ihdr, w), forge_be32(ihdr + 4, h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    o += forge_chunk(out + o, "IHDR", ihdr, 13);
    o += forge_chunk(out + o, "IDAT", z, zn);
    return o + forge_chunk(out + o, "IEND", NULL, 0);
}

/* A 24-bit bottom-up BMP of w x h from top-down RGB rows. */
static size_t forge_bmp(uint8_t *out, uint32_t w, uint32_t h, const uint8_t *rgb) {
    const uint32_t row = (w * 3 + 3) & ~3u, size = 54 + row * h;
    memset(out, 0, size);
    out[0] = 'B', out[1] = 'M';
    memcpy(out + 2, &size, 4);
    out[10] = 54, out[14] = 40;
    memcpy(out + 18, &w, 4);
    memcpy(out + 22, &h, 4);
    out[26] = 1, out[28] = 24;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = rgb + ((size_t)(h - 1 - y) * w + x) * 3;
            uint8_t *d = out + 54 + y * row + x * 3;
            d[0] = p[2], d[1] = p[1], d[2] = p[0];
        }
    return size;
}

/* A GIF89a of w x h (w * h even, <= 256) with two frames: all colour 1 (red), then all colour 2 (green). */
static size_t forge_gif(uint8_t *out, uint16_t w, uint16_t h) {
    size_t o = 0;
    memcpy(out, "GIF89a", 6), o = 6;
    out[o++] = (uint8_t)w, out[o++] = (uint8_t)(w >> 8), out[o++] = (uint8_t)h, out[o++] = (uint8_t)(h >> 8);
    out[o++] = 0xf1, out[o++] = 0, out[o++] = 0; /* global table of 4 colours */
    static const uint8_t pal[12] = {0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255};
    memcpy(out + o, pal, 12), o += 12;
    for (int f = 1; f <= 2; f++) {
        out[o++] = 0x2c;
        memset(out + o, 0, 4), o += 4;
        out[o++] = (uint8_t)w, out[o++] = (uint8_t)(w >> 8), out[o++] = (uint8_t)h, out[o++] = (uint8_t)(h >> 8);
        out[o++] = 0;
        out[o++] = 2; /* LZW minimum code size: clear = 4, end = 5, 3-bit codes */
        uint8_t data[512];
        size_t dn = 0;
        uint32_t bits = 0;
        int nb = 0;
#define EMIT(c)                                                       \
    do {                                                              \
        bits |= (uint32_t)(c) << nb, nb += 3;                         \
        while (nb >= 8) data[dn++] = (uint8_t)bits, bits >>= 8, nb -= 8; \
    } while (0)
        for (int i = 0; i < w * h; i += 2) {
            EMIT(4);
            EMIT(f);
            EMIT(f);
        }
        EMIT(5);
#undef EMIT
        if (nb) data[dn++] = (uint8_t)bits;
        for (size_t i = 0; i < dn; i += 255) {
            const size_t len = dn - i < 255 ? dn - i : 255;
            out[o++] = (uint8_t)len;
            memcpy(out + o, data + i, len), o += len;
        }
        out[o++] = 0;
    }
    out[o++] = 0x3b;
    return o;
}
