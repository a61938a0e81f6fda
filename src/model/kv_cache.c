/* kv_cache.c - per-sequence KV cache (kv_cache.h). */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/types.h"

void muse_kv_cache_free(struct muse_kv_cache *kv) {
    if (!kv) return;
    free(kv->buf);
    free(kv->layers);
    free(kv->n_swa);
    free(kv);
}

muse_status muse_kv_cache_create(const struct muse_hparams *hp, uint32_t n_ctx, uint32_t n_batch, enum muse_type type,
                                 bool swa_full, struct muse_kv_cache **out, struct muse_error *err) {
    struct muse_kv_cache *kv = NULL;
    muse_status st;
    *out = NULL;
    if (type != MUSE_TYPE_F16 && type != MUSE_TYPE_F32 && type != MUSE_TYPE_Q8_0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache type must be f16, f32 or q8_0");
    if (n_ctx == 0 || n_batch == 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache needs n_ctx and n_batch > 0");
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
    size_t total = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        const int64_t hd = muse_hparams_head_dim_k(hp, il);
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
        uint64_t bytes = cells * (l->k_row_size + l->v_row_size);
        if (bytes > SIZE_MAX - total - 64) goto nomem;
        total += (size_t)bytes;
        total = (total + 63) & ~(size_t)63;
    }
    kv->size = total;
    kv->buf = calloc(1, total ? total : 1);
    if (!kv->buf) goto nomem;
    uint8_t *p = kv->buf;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct muse_kv_layer *l = &kv->layers[il];
        l->k = p;
        p += (size_t)l->n_cells * l->k_row_size;
        l->v = p;
        p += (size_t)l->n_cells * l->v_row_size;
        p = (uint8_t *)kv->buf + (((size_t)(p - (uint8_t *)kv->buf) + 63) & ~(size_t)63);
    }
    *out = kv;
    return MUSE_OK;
nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the KV cache (%u positions)", n_ctx);
fail:
    muse_kv_cache_free(kv);
    return st;
}

void muse_kv_cache_clear(struct muse_kv_cache *kv) {
    kv->n_past = 0;
    memset(kv->buf, 0, kv->size);
}

muse_status muse_kv_cache_truncate(struct muse_kv_cache *kv, int32_t n_keep, struct muse_error *err) {
    if (n_keep < 0 || n_keep > kv->n_past)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "cannot keep %d positions: the cache holds %d", n_keep, kv->n_past);
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        /* the ring holds positions n_past - n_cells .. n_past - 1; position n_keep needs n_keep - n_swa + 1 .. */
        int64_t oldest = (int64_t)kv->n_past - kv->layers[il].n_cells;
        int64_t need = kv->n_swa[il] ? (int64_t)n_keep - kv->n_swa[il] + 1 : 0;
        if (need < 0) need = 0;
        if (need < oldest && n_keep > 0)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                  "cannot roll back from %d to %d positions: the sliding-window cache of layer %u no longer "
                                  "holds them (clear and re-prefill)",
                                  kv->n_past, n_keep, il);
    }
    kv->n_past = n_keep;
    return MUSE_OK;
}

muse_status muse_kv_cache_copy(struct muse_kv_cache *dst, const struct muse_kv_cache *src, struct muse_error *err) {
    if (dst->n_layer != src->n_layer || dst->size != src->size || dst->type != src->type || dst->n_ctx != src->n_ctx)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache copy between different layouts");
    for (uint32_t il = 0; il < src->n_layer; il++)
        if (dst->layers[il].n_cells != src->layers[il].n_cells)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "KV cache copy between different layouts");
    memcpy(dst->buf, src->buf, src->size);
    dst->n_past = src->n_past;
    return MUSE_OK;
}

static void store_row(enum muse_type type, const float *x, void *dst, int32_t n) {
    if (type == MUSE_TYPE_F32) {
        memcpy(dst, x, sizeof(float) * (size_t)n);
    } else if (type == MUSE_TYPE_F16) {
        uint16_t *h = dst;
        for (int32_t i = 0; i < n; i++) h[i] = muse_fp32_to_fp16(x[i]);
    } else {
        muse_type_traits[type].from_float(x, dst, n);
    }
}

void muse_kv_cache_store(struct muse_kv_cache *kv, uint32_t il, int32_t pos, const float *k, const float *v) {
    struct muse_kv_layer *l = &kv->layers[il];
    MUSE_ASSERT(il < kv->n_layer && pos >= 0 && (uint32_t)pos < kv->n_ctx);
    uint32_t cell = (uint32_t)pos % l->n_cells;
    store_row(l->type, k, (uint8_t *)l->k + (size_t)cell * l->k_row_size, l->n_embd_k);
    store_row(l->type, v, (uint8_t *)l->v + (size_t)cell * l->v_row_size, l->n_embd_v);
}
