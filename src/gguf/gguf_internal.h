/*
 * gguf_internal.h - private to src/gguf: the hidden part of struct muse_gguf and the small
 * name hash shared by the parser (duplicate detection) and the lookups.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/*
 * Open-addressing hash of names -> record index. Slots hold index + 1 (0 = empty); the
 * capacity is a power of two at least twice the number of entries, so probes terminate.
 */
struct muse_gguf_hash {
    uint32_t *slots;  /* [cap] */
    uint64_t cap;
};

struct muse_gguf_priv {
    void *map;              /* mmap'd file, or NULL when parsing caller-owned bytes */
    size_t map_size;
    struct muse_gguf_hash kv_hash;
    struct muse_gguf_hash tensor_hash;
};

/* FNV-1a over `len` bytes. */
static inline uint64_t muse_gguf_hash_bytes(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
