/*
 * sha256.h - SHA-256 (FIPS 180-4) over a byte buffer, for content hashes (image cache keys, the
 * vision goldens' SHA-256 of resized pixels). Pure and thread-safe.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define MUSE_SHA256_SIZE 32

/* Incremental state; init, update any number of times, final. */
struct muse_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t block[64];
    size_t fill;
};

void muse_sha256_init(struct muse_sha256 *s);
void muse_sha256_update(struct muse_sha256 *s, const void *data, size_t size);
void muse_sha256_final(struct muse_sha256 *s, uint8_t out[MUSE_SHA256_SIZE]);

/* One-shot digest of data[0..size). */
void muse_sha256(const void *data, size_t size, uint8_t out[MUSE_SHA256_SIZE]);

/* The digest as 64 lowercase hex digits and a NUL in hex[65]. */
void muse_sha256_hex(const uint8_t digest[MUSE_SHA256_SIZE], char hex[2 * MUSE_SHA256_SIZE + 1]);
