/*
 * kv_cache.h - the per-sequence KV cache of the Muse-Glimmer text model (text-model.md section 6).
 *
 * One muse_kv_layer per layer. Full-attention layers hold the whole context (n_ctx cells,
 * position p in cell p); sliding-window layers hold a ring of min(n_ctx, n_swa + n_batch)
 * cells (position p in cell p % n_cells), which is always enough for a batch of at most
 * n_batch tokens to see its whole window. The storage is one allocation made at creation;
 * nothing is allocated per token. Not thread-safe: one sequence, one user at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/hparams.h"

struct muse_kv_cache {
    uint32_t n_layer;
    uint32_t n_ctx;               /* positions 0..n_ctx-1 */
    uint32_t n_batch;             /* most tokens per forward call the ring is sized for */
    enum muse_type type;          /* F16, F32 or Q8_0 */
    int32_t n_past;               /* positions 0..n_past-1 have been stored */
    struct muse_kv_layer *layers; /* [n_layer] */
    uint32_t *n_swa;              /* [n_layer] window of each layer, 0 for full layers */
    void *buf;                    /* the storage every layer points into */
    size_t size;                  /* bytes of buf */
};

/*
 * Create an empty cache for `hp` with n_ctx positions and batches of at most n_batch tokens.
 * swa_full: give SWA layers n_ctx cells too (like llama.cpp --swa-full). The type must be
 * F16, F32 or Q8_0 (Q8_0 needs head sizes that are multiples of 32). Errors: INVALID_ARG, NOMEM.
 * Free with muse_kv_cache_free.
 */
muse_status muse_kv_cache_create(const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch, enum muse_type type,
                                 bool swa_full, struct muse_kv_cache **out, struct muse_error *err);

void muse_kv_cache_free(struct muse_kv_cache *kv);

/* Forget every position (n_past = 0) and zero the storage. */
void muse_kv_cache_clear(struct muse_kv_cache *kv);

/*
 * Keep only positions 0..n_keep-1 (a rollback). Fails with MUSE_ERR_INVALID_ARG when a
 * sliding-window ring no longer holds the window that position n_keep needs (the caller must
 * then clear and re-prefill) or n_keep > n_past.
 */
muse_status muse_kv_cache_truncate(struct muse_kv_cache *kv, int32_t n_keep, struct muse_error *err);

/*
 * Copy the contents of `src` into `dst` (made with the same hparams, n_ctx, n_batch, type and
 * swa_full): an explicit, O(size) copy. Errors: INVALID_ARG when the layouts differ.
 */
muse_status muse_kv_cache_copy(struct muse_kv_cache *dst, const struct muse_kv_cache *src, struct muse_error *err);

/* Store one token's k [n_embd_k] and v [n_embd_v] (f32) of layer il at position pos, converting to the cache type. */
void muse_kv_cache_store(struct muse_kv_cache *kv, uint32_t il, int32_t pos, const float *k, const float *v);
