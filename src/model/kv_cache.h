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

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "model/hparams.h"
#include "model/tp.h"

/*
 * A pool of full-attention cells shared by the caches of one context (paged caches): each cache
 * takes cells in blocks as its sequence grows and gives them back when it shrinks, so sequences
 * that reserve n_ctx positions of address space each hold memory only for what they store.
 */
struct muse_kv_pool {
    _Atomic int64_t used; /* cells taken */
    int64_t total;        /* cells there are */
};

struct muse_kv_cache {
    uint32_t n_layer;
    uint32_t n_ctx;               /* positions 0..n_ctx-1 */
    uint32_t n_batch;             /* most tokens per forward call the ring is sized for */
    enum muse_type type;          /* F16, F32 or Q8_0 */
    int32_t n_past;               /* positions 0..n_past-1 have been stored */
    int32_t n_high;               /* most positions stored since creation or the last clear: the
                                     rows beyond are still zero, so a clear zeroes only these */
    int32_t n_ahead;              /* a stopped batch (muse_context_set_abort) wrote the rings up to
                                     here, beyond n_past: rollbacks are checked from here
                                     (muse_kv_cache_truncate); 0 once n_past has caught up,
                                     on a clear and on a checkpoint's restore */
    struct muse_kv_layer *layers; /* [n_layer] */
    uint32_t *n_swa;              /* [n_layer] window of each layer, 0 for full layers */
    struct muse_buffer *mem;      /* the storage, owned by the device */
    void *buf;                    /* its base (muse_buffer_base): every layer points into it */
    size_t size;                  /* bytes of buf */
    /* a cache split between two devices (-ngl): layers split.. live in mem_hi (buf_hi) */
    uint32_t split;               /* n_layer when not split */
    struct muse_buffer *mem_hi;
    void *buf_hi;
    struct muse_kv_checkpoint *checkpoints; /* live checkpoints of this cache (a list through ->next) */
    /* paged (made with a pool): full layers' rows in a reserved buffer, each array page-aligned;
     * rows 0..n_commit-1 of every full layer may hold memory, those above read as zero */
    struct muse_kv_pool *pool;    /* borrowed; NULL: not paged */
    uint32_t block;               /* cells per block: whole pages of every full layer's rows */
    int32_t n_commit;             /* a multiple of block, >= n_past; the cells taken from the pool */
    /* tensor parallel: rank 0's caches send every change (clear, truncate, reserve, checkpoints)
     * to the other ranks as (context tp_ctx, sequence tp_seq) commands; NULL: none */
    struct muse_tp *tp;
    int32_t tp_ctx, tp_seq;
};

/*
 * Create an empty cache for `hp` with n_ctx positions and batches of at most n_batch tokens, its
 * storage a buffer of device dev.
 * swa_full: give SWA layers n_ctx cells too (like llama.cpp --swa-full). The type must be
 * F16, F32 or Q8_0 (Q8_0 needs head sizes that are multiples of 32). Errors: INVALID_ARG, NOMEM.
 * Free with muse_kv_cache_free.
 */
muse_status muse_kv_cache_create(struct muse_device *dev, const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch,
                                 enum muse_type type, bool swa_full, struct muse_kv_pool *pool, struct muse_kv_cache **out,
                                 struct muse_error *err);

/* muse_kv_cache_create with layers split..n_layer-1 in a buffer of dev_hi (a model split between
 * a GPU and the cpu, -ngl: docs/vulkan.md "Partial offload"); dev_hi NULL or split >= n_layer:
 * one buffer of dev. Both devices must keep caches of `type`. */
muse_status muse_kv_cache_create_split(struct muse_device *dev, struct muse_device *dev_hi, uint32_t split,
                                       const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch, enum muse_type type,
                                       bool swa_full, struct muse_kv_pool *pool, struct muse_kv_cache **out,
                                       struct muse_error *err);

/*
 * Paged caches: take the pool's cells for holding n_pos positions (in blocks). Errors:
 * MUSE_ERR_CONTEXT when the pool has not enough left (nothing taken). Without a pool: MUSE_OK.
 * Cells go back when n_past drops (truncate, restore, clear: the pages above are given back and
 * read as zero) and when the cache is freed.
 */
muse_status muse_kv_cache_reserve(struct muse_kv_cache *kv, int32_t n_pos, struct muse_error *err);
/* The cells n_pos positions would take beyond what kv holds (0 without a pool). */
int64_t muse_kv_cache_need(const struct muse_kv_cache *kv, int32_t n_pos);
/* Take n cells of pool p at once (false, nothing taken, when fewer are left). */
bool muse_kv_pool_take(struct muse_kv_pool *p, int64_t n);

/* Free the cache (NULL is fine); its checkpoints stay to be freed by their owners, detached. */
void muse_kv_cache_free(struct muse_kv_cache *kv);

/* Forget every position (n_past = 0) and zero the storage written so far (the rows of positions
 * below n_high; a large cache that was never filled costs nothing). Every checkpoint goes stale. */
void muse_kv_cache_clear(struct muse_kv_cache *kv);

/*
 * Keep only positions 0..n_keep-1 (a rollback): moves n_past, copies nothing. Legal exactly when
 * muse_kv_cache_can_truncate(kv, max(kv->n_past, kv->n_ahead), n_keep); otherwise fails with MUSE_ERR_INVALID_ARG and
 * changes nothing (the caller restores a checkpoint, or clears and re-prefills). Also INVALID_ARG
 * for n_keep < 0 or n_keep > n_past. Checkpoints taken above n_keep go stale.
 */
muse_status muse_kv_cache_truncate(struct muse_kv_cache *kv, int32_t n_keep, struct muse_error *err);

/*
 * The rollback rule of one sliding-window ring, pure: a ring of n_cells cells holding the last
 * positions of a cache with n_past positions, read through a window of n_swa keys, can roll back
 * to n_keep positions when
 *   - n_keep == 0 (nothing is needed), or n_swa <= 0 (not a sliding-window layer), or
 *   - n_past <= n_cells (the ring has not wrapped: every row is still there), or
 *   - n_past - n_keep <= n_cells - n_swa + 1.
 * Why the last bound: the ring holds positions [n_past - n_cells, n_past); the next token, at
 * position n_keep, reads keys n_keep - n_swa + 1 .. n_keep, so n_keep - n_swa + 1 >= n_past - n_cells.
 * Rows of the dropped positions are overwritten before anything reads them (a batch stores its
 * keys first, and a query never reads a position above its own), and the rows a batch of at most
 * n_cells - n_swa tokens overwrites are older than any of its queries' windows. With the ring sized
 * n_swa + n_batch, any rollback of at most n_batch + 1 positions is legal, wrapped or not.
 */
bool muse_kv_ring_can_truncate(int64_t n_past, int64_t n_keep, int64_t n_swa, int64_t n_cells);

/* Whether a cache holding n_past positions could roll back to n_keep: the ring rule for every
 * sliding-window layer (full layers always can). Pure: n_past need not be kv->n_past, and rows a
 * stopped batch wrote beyond it (n_ahead) are not counted - the question is about rings that hold
 * exactly positions below n_past, as after a checkpoint's restore at n_past. */
bool muse_kv_cache_can_truncate(const struct muse_kv_cache *kv, int32_t n_past, int32_t n_keep);

/*
 * A checkpoint of `kv` (include/muse.h documents the public side: muse_kv_checkpoint_save,
 * _restore, _pos, _size, _free). It copies only the sliding-window rings: a full layer's rows
 * below the checkpoint's position are never rewritten while n_past stays at or above it, which
 * the cache enforces by marking its checkpoints stale whenever n_past drops below their position
 * (truncate, clear, restore). The checkpoint is linked into kv's list until freed; freeing kv
 * first detaches it (its save/restore then fail). *out starts empty (position -1). Errors: NOMEM.
 */
muse_status muse_kv_cache_checkpoint_create(struct muse_kv_cache *kv, struct muse_kv_checkpoint **out,
                                            struct muse_error *err);

/* Store one token's k [n_embd_k] and v [n_embd_v] (f32) of layer il at position pos, converting to the cache type. */
void muse_kv_cache_store(struct muse_kv_cache *kv, uint32_t il, int32_t pos, const float *k, const float *v);
