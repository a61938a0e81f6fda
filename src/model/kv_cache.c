/* kv_cache.c - per-sequence KV cache (kv_cache.h): storage, rollback and ring checkpoints. */
#include "model/kv_cache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "kernels/types.h"

/* A checkpoint: the bytes of every ring layer's k then v, in layer order, taken at n_past = pos. */
struct muse_kv_checkpoint {
    struct muse_kv_cache *kv;        /* the cache it belongs to; NULL once that cache is freed */
    struct muse_kv_checkpoint *next; /* kv's list of live checkpoints */
    int32_t pos;                     /* n_past at the save; -1 = empty or stale */
    size_t size;                     /* bytes of buf */
    void *buf;
    struct muse_tp *tp;              /* tensor parallel: rank 0's checkpoint tp_id, mirrored by the others */
    int32_t tp_id;
};

/* Tensor parallel: the other ranks do the same to their copy of this cache (kv_cache.h). */
static void mirror(const struct muse_kv_cache *kv, enum muse_tp_op op, int32_t a) {
    if (kv->tp) muse_tp_command(kv->tp, op, kv->tp_ctx, kv->tp_seq, a);
}

void muse_kv_cache_free(struct muse_kv_cache *kv) {
    if (!kv) return;
    if (kv->pool) atomic_fetch_sub(&kv->pool->used, kv->n_commit);
    for (struct muse_kv_checkpoint *ck = kv->checkpoints; ck; ck = ck->next) ck->kv = NULL, ck->pos = -1;
    muse_buffer_free(kv->mem);
    muse_buffer_free(kv->mem_hi);
    free(kv->layers);
    free(kv->n_swa);
    free(kv);
}

/* A layer that holds every position (full attention, or a window as long as the context): the
 * layers a paged cache pages. */
static bool holds_all(const struct muse_kv_cache *kv, uint32_t il) { return kv->layers[il].n_cells == kv->n_ctx; }

static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The buffer holding layer il's arrays, and the offset of p (one of them) inside it. */
static struct muse_buffer *layer_buf(const struct muse_kv_cache *kv, uint32_t il, const void *p, size_t *off) {
    const bool hi = kv->mem_hi && il >= kv->split;
    *off = (size_t)((const uint8_t *)p - (const uint8_t *)(hi ? kv->buf_hi : kv->buf));
    return hi ? kv->mem_hi : kv->mem;
}

muse_status muse_kv_cache_create(struct muse_device *dev, const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch,
                                 enum muse_type type, bool swa_full, struct muse_kv_pool *pool, struct muse_kv_cache **out,
                                 struct muse_error *err) {
    return muse_kv_cache_create_split(dev, NULL, hp->n_layer, hp, n_ctx, n_batch, type, swa_full, pool, out, err);
}

muse_status muse_kv_cache_create_split(struct muse_device *dev, struct muse_device *dev_hi, uint32_t split,
                                       const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch, enum muse_type type,
                                       bool swa_full, struct muse_kv_pool *pool, struct muse_kv_cache **out,
                                       struct muse_error *err) {
    struct muse_kv_cache *kv = NULL;
    muse_status st;
    *out = NULL;
    if (!dev_hi || split >= hp->n_layer) dev_hi = NULL, split = hp->n_layer;
    if (dev_hi && (st = muse_device_check_kv(dev_hi, type, err))) return st;
    if (type != MUSE_TYPE_F16 && type != MUSE_TYPE_F32 && type != MUSE_TYPE_Q8_0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache type must be f16, f32 or q8_0");
    if (n_ctx == 0 || n_batch == 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache needs n_ctx and n_batch > 0");
    if ((st = muse_device_check_kv(dev, type, err))) return st;
    kv = calloc(1, sizeof *kv);
    if (!kv) goto nomem;
    kv->n_layer = hp->n_layer;
    kv->n_ctx = n_ctx;
    kv->n_batch = n_batch;
    kv->type = type;
    kv->layers = calloc(hp->n_layer, sizeof *kv->layers);
    kv->n_swa = calloc(hp->n_layer, sizeof *kv->n_swa);
    if (!kv->layers || !kv->n_swa) goto nomem;

    const int64_t block = muse_type_layouts[type].block_size;
    const size_t page = 4096, align = pool ? page : 64; /* paged: every array on its own pages */
    size_t cells_per_block = 1; /* paged: the fewest cells that fill whole pages of every full array */
    size_t total = 0, total_hi = 0;
    kv->split = split;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        const int64_t hd = muse_hparams_head_dim_k(hp, il);
        if (il == split) total_hi = total, total = 0; /* the low layers' bytes; the high ones' from here */
        if (hd % block) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache type %s needs head sizes that are multiples of %lld (layer %u has %lld)",
                                muse_type_layouts[type].name, (long long)block, il, (long long)hd);
            goto fail;
        }
        uint64_t cells = n_ctx;
        if (hp->is_swa[il]) {
            kv->n_swa[il] = hp->n_swa;
            if (!swa_full && (uint64_t)hp->n_swa + n_batch < cells) cells = (uint64_t)hp->n_swa + n_batch;
        }
        l->type = type;
        l->n_cells = (uint32_t)cells;
        l->n_embd_k = (int32_t)muse_hparams_n_embd_k_gqa(hp, il);
        l->n_embd_v = (int32_t)muse_hparams_n_embd_v_gqa(hp, il);
        l->k_row_size = muse_type_row_size(type, l->n_embd_k);
        l->v_row_size = muse_type_row_size(type, l->n_embd_v);
        const size_t rows[2] = {l->k_row_size, l->v_row_size};
        for (int h = 0; h < 2; h++) {
            uint64_t bytes = cells * rows[h];
            if (bytes > SIZE_MAX - total - 2 * page) goto nomem;
            total = (total + (size_t)bytes + align - 1) / align * align;
            if (pool && cells == n_ctx) { /* a full layer's array: blocks of whole pages */
                const size_t need = page / gcd_size(rows[h], page);
                cells_per_block = cells_per_block / gcd_size(cells_per_block, need) * need;
            }
        }
    }
    if (dev_hi) { /* total: the high layers' bytes, total_hi: the low ones' (swapped into place) */
        const size_t t = total;
        total = total_hi, total_hi = t;
    }
    kv->size = total;
    if (pool) {
        kv->pool = pool;
        kv->block = (uint32_t)(cells_per_block * ((16 + cells_per_block - 1) / cells_per_block)); /* at least 16 */
        if (muse_device_alloc_lazy(dev, total, &kv->mem, err)) goto nomem;
        if (dev_hi && muse_device_alloc_lazy(dev_hi, total_hi, &kv->mem_hi, err)) goto nomem;
    } else if (muse_device_alloc(dev, total, &kv->mem, err) || (dev_hi && muse_device_alloc(dev_hi, total_hi, &kv->mem_hi, err))) {
        goto nomem;
    }
    kv->buf = muse_buffer_base(kv->mem); /* a device with its own memory: an address it resolves (device.h) */
    if (dev_hi) kv->buf_hi = muse_buffer_base(kv->mem_hi);
    size_t off = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        if (il == split) off = 0; /* the high layers: from the start of their own buffer */
        uint8_t *base = il < split ? kv->buf : kv->buf_hi;
        l->k = base + off;
        off = (off + (size_t)l->n_cells * l->k_row_size + align - 1) / align * align;
        l->v = base + off;
        off = (off + (size_t)l->n_cells * l->v_row_size + align - 1) / align * align;
    }
    *out = kv;
    return MUSE_OK;
nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the KV cache (%u positions)", n_ctx);
fail:
    muse_kv_cache_free(kv);
    return st;
}

/*
 * Every n_past decrease goes through here: checkpoints above the new n_past go stale, because
 * the positions between would be rewritten by what is evaluated next, and their copy of the
 * rings would then sit on top of full-layer rows that no longer match.
 */
static void lower_n_past(struct muse_kv_cache *kv, int32_t n_past) {
    kv->n_past = n_past;
    for (struct muse_kv_checkpoint *ck = kv->checkpoints; ck; ck = ck->next)
        if (ck->pos > n_past) ck->pos = -1;
    if (!kv->pool) return;
    /* paged: the blocks above n_past go back to the pool, their pages to the system (zero again) */
    const int32_t keep = (int32_t)(((int64_t)n_past + kv->block - 1) / kv->block * kv->block);
    if (keep >= kv->n_commit) return;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        if (!holds_all(kv, il)) continue;
        const struct muse_kv_layer *l = &kv->layers[il];
        const size_t n = (size_t)(kv->n_commit - keep);
        size_t ko, vo;
        struct muse_buffer *m = layer_buf(kv, il, l->k, &ko);
        layer_buf(kv, il, l->v, &vo);
        muse_buffer_release(m, ko + (size_t)keep * l->k_row_size, n * l->k_row_size);
        muse_buffer_release(m, vo + (size_t)keep * l->v_row_size, n * l->v_row_size);
    }
    atomic_fetch_sub(&kv->pool->used, kv->n_commit - keep);
    kv->n_commit = keep;
}

bool muse_kv_pool_take(struct muse_kv_pool *p, int64_t n) {
    if (n <= 0) return true;
    if (atomic_fetch_add(&p->used, n) + n <= p->total) return true;
    atomic_fetch_sub(&p->used, n);
    return false;
}

int64_t muse_kv_cache_need(const struct muse_kv_cache *kv, int32_t n_pos) {
    if (!kv->pool) return 0;
    const int64_t want = ((int64_t)n_pos + kv->block - 1) / kv->block * kv->block;
    return want > kv->n_commit ? want - kv->n_commit : 0;
}

muse_status muse_kv_cache_reserve(struct muse_kv_cache *kv, int32_t n_pos, struct muse_error *err) {
    const int64_t need = muse_kv_cache_need(kv, n_pos);
    if (need == 0) return MUSE_OK;
    if (!muse_kv_pool_take(kv->pool, need))
        return muse_error_set(err, MUSE_ERR_CONTEXT,
                              "the KV pool is full: %lld of its %lld cells are in use and "
                              "%d more positions do not fit (a larger pool: more memory, or fewer/shorter sequences)",
                              (long long)atomic_load(&kv->pool->used), (long long)kv->pool->total, n_pos - kv->n_past);
    kv->n_commit += (int32_t)need;
    mirror(kv, MUSE_TP_SEQ_RESERVE, n_pos);
    return MUSE_OK;
}

void muse_kv_cache_clear(struct muse_kv_cache *kv) {
    mirror(kv, MUSE_TP_SEQ_CLEAR, 0);
    lower_n_past(kv, 0);
    /* position p lives in cell p (full layers) or p % n_cells (rings): cells below min(n_high,
     * n_cells) are all that was ever written; the rest is still calloc's zeros */
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        if (kv->pool && holds_all(kv, il)) continue; /* paged full layers: given back, zero already */
        size_t cells = (uint32_t)kv->n_high < l->n_cells ? (size_t)kv->n_high : l->n_cells, ko, vo;
        struct muse_buffer *m = layer_buf(kv, il, l->k, &ko);
        layer_buf(kv, il, l->v, &vo);
        muse_buffer_zero(m, ko, cells * l->k_row_size);
        muse_buffer_zero(m, vo, cells * l->v_row_size);
    }
    kv->n_high = 0;
    kv->n_ahead = 0;
}

/* A sliding-window layer whose ring can wrap (fewer cells than positions): what a checkpoint copies. */
static bool is_ring(const struct muse_kv_cache *kv, uint32_t il) {
    return kv->n_swa[il] && kv->layers[il].n_cells < kv->n_ctx;
}

bool muse_kv_ring_can_truncate(int64_t n_past, int64_t n_keep, int64_t n_swa, int64_t n_cells) {
    if (n_keep == 0 || n_swa <= 0 || n_past <= n_cells) return true;
    return n_past - n_keep <= n_cells - n_swa + 1;
}

bool muse_kv_cache_can_truncate(const struct muse_kv_cache *kv, int32_t n_past, int32_t n_keep) {
    for (uint32_t il = 0; il < kv->n_layer; il++)
        if (is_ring(kv, il) && !muse_kv_ring_can_truncate(n_past, n_keep, kv->n_swa[il], kv->layers[il].n_cells))
            return false;
    return true;
}

muse_status muse_kv_cache_truncate(struct muse_kv_cache *kv, int32_t n_keep, struct muse_error *err) {
    if (n_keep < 0 || n_keep > kv->n_past)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "cannot keep %d positions: the cache holds %d", n_keep, kv->n_past);
    /* a stopped batch wrote the rings up to n_ahead: the rollback is checked from there */
    if (!muse_kv_cache_can_truncate(kv, kv->n_ahead > kv->n_past ? kv->n_ahead : kv->n_past, n_keep))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "cannot roll back from %d to %d positions: the sliding-window rings no longer hold them "
                              "(restore a checkpoint, or clear and re-prefill)",
                              kv->n_past, n_keep);
    mirror(kv, MUSE_TP_SEQ_TRUNCATE, n_keep);
    lower_n_past(kv, n_keep);
    return MUSE_OK;
}

// ---- checkpoints ------------------------------------------------------------------------------

muse_status muse_kv_cache_checkpoint_create(struct muse_kv_cache *kv, struct muse_kv_checkpoint **out,
                                            struct muse_error *err) {
    *out = NULL;
    struct muse_kv_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    for (uint32_t il = 0; il < kv->n_layer; il++)
        if (is_ring(kv, il)) ck->size += (size_t)kv->layers[il].n_cells * (kv->layers[il].k_row_size + kv->layers[il].v_row_size);
    if (ck->size && !(ck->buf = malloc(ck->size))) {
        size_t size = ck->size;
        free(ck);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a KV checkpoint (%zu bytes)", size);
    }
    ck->kv = kv;
    ck->pos = -1;
    ck->next = kv->checkpoints;
    kv->checkpoints = ck;
    if (muse_tp_live(kv->tp)) {
        ck->tp = kv->tp;
        ck->tp_id = muse_tp_next_id(kv->tp, true);
        mirror(kv, MUSE_TP_CK_CREATE, ck->tp_id);
    }
    *out = ck;
    return MUSE_OK;
}

void muse_kv_checkpoint_free(struct muse_kv_checkpoint *ck) {
    if (!ck) return;
    if (ck->tp) muse_tp_command(ck->tp, MUSE_TP_CK_FREE, -1, -1, ck->tp_id);
    if (ck->kv)
        for (struct muse_kv_checkpoint **p = &ck->kv->checkpoints; *p; p = &(*p)->next)
            if (*p == ck) {
                *p = ck->next;
                break;
            }
    free(ck->buf);
    free(ck);
}

/* Copy every ring into (save) or out of (restore) the checkpoint's buffer. */
static void ring_copy(struct muse_kv_checkpoint *ck, bool save) {
    struct muse_kv_cache *kv = ck->kv;
    uint8_t *p = ck->buf;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        if (!is_ring(kv, il)) continue;
        struct muse_kv_layer *l = &kv->layers[il];
        size_t nk = (size_t)l->n_cells * l->k_row_size, nv = (size_t)l->n_cells * l->v_row_size, ko, vo;
        struct muse_buffer *m = layer_buf(kv, il, l->k, &ko);
        layer_buf(kv, il, l->v, &vo);
        if (save) {
            muse_buffer_read(m, ko, p, nk);
            muse_buffer_read(m, vo, p + nk, nv);
        } else {
            muse_buffer_write(m, ko, p, nk);
            muse_buffer_write(m, vo, p + nk, nv);
        }
        p += nk + nv;
    }
}

muse_status muse_kv_checkpoint_save(struct muse_kv_checkpoint *ck, struct muse_error *err) {
    if (!ck || !ck->kv) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV checkpoint without its context");
    if (ck->tp) muse_tp_command(ck->tp, MUSE_TP_CK_SAVE, -1, -1, ck->tp_id);
    ring_copy(ck, true);
    ck->pos = ck->kv->n_past;
    return MUSE_OK;
}

muse_status muse_kv_checkpoint_restore(struct muse_kv_checkpoint *ck, struct muse_error *err) {
    if (!ck || !ck->kv) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV checkpoint without its context");
    if (ck->pos < 0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV checkpoint is empty or stale (the context rolled back below it)");
    MUSE_ASSERT(ck->pos <= ck->kv->n_past); /* a drop below pos would have made it stale */
    if (ck->tp) muse_tp_command(ck->tp, MUSE_TP_CK_RESTORE, -1, -1, ck->tp_id);
    ring_copy(ck, false);
    lower_n_past(ck->kv, ck->pos);
    ck->kv->n_ahead = 0; /* every ring cell was rewritten: what a stopped batch wrote is gone */
    return MUSE_OK;
}

int32_t muse_kv_checkpoint_pos(const struct muse_kv_checkpoint *ck) { return ck ? ck->pos : -1; }

size_t muse_kv_checkpoint_size(const struct muse_kv_checkpoint *ck) { return ck ? ck->size : 0; }

void muse_kv_cache_store(struct muse_kv_cache *kv, uint32_t il, int32_t pos, const float *k, const float *v) {
    MUSE_ASSERT(il < kv->n_layer && pos >= 0 && (uint32_t)pos < kv->n_ctx);
    muse_kv_layer_store(&kv->layers[il], pos, k, v);
}
