/*
 * draft_ctx.c - the draft context of include/muse.h: the drafter's KV ring and its rollback, the
 * target evaluation with feature capture, injection and block drafting (drafter.h has the ring's
 * invariants; draft_forward.c the math).
 */
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "backend/device.h"
#include "speculative/drafter.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

struct muse_draft_ctx_params muse_draft_ctx_default_params(void) {
    struct muse_draft_ctx_params p = {0};
    p.kv_type = MUSE_KV_TYPE_F16;
    return p;
}

void muse_draft_ctx_free(struct muse_draft_ctx *dc) {
    if (!dc) return;
    free(dc->ring);
    free(dc->ring_buf);
    muse_program_free(&dc->prog_inject);
    muse_program_free(&dc->prog_block);
    free(dc->mem);
    free(dc);
}

/* The ring: n_layer layers of n_cells cells of k and v (zero-filled: never read before written). */
static muse_status ring_alloc(struct muse_draft_ctx *dc, struct muse_error *err) {
    const struct muse_dflash_hparams *hp = &dc->d->hp;
    const int32_t n_kv = (int32_t)muse_dflash_n_kv(hp);
    const size_t row = muse_type_row_size(dc->ring_type, n_kv);
    const size_t per_layer = (((size_t)dc->n_cells * row + 63) & ~(size_t)63) * 2;
    dc->ring = calloc(hp->n_layer, sizeof *dc->ring);
    dc->ring_buf = calloc(hp->n_layer, per_layer);
    dc->ring_size = hp->n_layer * per_layer;
    if (!dc->ring || !dc->ring_buf)
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the drafter's KV ring (%u cells)", dc->n_cells);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct muse_kv_layer *l = &dc->ring[il];
        l->type = dc->ring_type;
        l->n_cells = dc->n_cells;
        l->n_embd_k = l->n_embd_v = n_kv;
        l->k_row_size = l->v_row_size = row;
        l->k = (uint8_t *)dc->ring_buf + il * per_layer;
        l->v = (uint8_t *)l->k + per_layer / 2;
    }
    return MUSE_OK;
}

/* The outputs of drafter.h, one allocation, each array rounded up to 16 elements. */
static muse_status outputs_alloc(struct muse_draft_ctx *dc, struct muse_error *err) {
    const size_t nb = (size_t)dc->n_batch, B = dc->d->hp.block_size, nr = nb > B ? nb : B;
#define R16(n) (((size_t)(n) + 15) & ~(size_t)15)
    const size_t sizes[] = {R16(B * (size_t)dc->d->n_vocab), R16(B), R16(B), R16(B), R16(B), R16(B), R16(nr)};
#undef R16
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += sizes[i];
    dc->mem = aligned_alloc(64, total * 4);
    if (!dc->mem) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the drafter's outputs (%zu MB)", total * 4 >> 20);
    memset(dc->mem, 0, total * 4);
    uint8_t *p = dc->mem;
    void **arrays[] = {(void **)&dc->logits, (void **)&dc->conf, (void **)&dc->conf_top10, (void **)&dc->argmax,
                       (void **)&dc->ids, (void **)&dc->out_rows, (void **)&dc->pos};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) *arrays[i] = p, p += sizes[i] * 4; /* floats and int32s */
    return MUSE_OK;
}

muse_status muse_draft_ctx_create(const struct muse_drafter *d, struct muse_context *target, struct muse_draft_ctx_params params,
                                  struct muse_draft_ctx **out, struct muse_error *err) {
    static const enum muse_type kv_types[MUSE_KV_TYPE_COUNT] = {MUSE_TYPE_F16, MUSE_TYPE_F32, MUSE_TYPE_Q8_0};
    const struct muse_dflash_hparams *hp = &d->hp;
    muse_status st;
    *out = NULL;
    if (!target || target->model != d->target)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "the target context does not belong to the drafter's target model");
    if (muse_device_own_memory(target->dev)) /* its ring and programs live in host memory (docs/vulkan.md) */
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "the DFlash drafter runs on the cpu and ref backends only for now, not on %s",
                              muse_device_name(target->dev));
    if ((unsigned)params.kv_type >= MUSE_KV_TYPE_COUNT)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad KV type %d for the drafter's ring", (int)params.kv_type);
    if (params.seq < 0 || params.seq >= (int32_t)muse_context_n_seq_max(target))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "sequence %d is not one of the target context's %u", params.seq,
                              muse_context_n_seq_max(target));
    if (params.kv_type == MUSE_KV_TYPE_Q8_0 && hp->head_dim % 32)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a q8_0 ring needs a head size that is a multiple of 32 (the drafter has %u)",
                              hp->head_dim);
    /* a window longer than the target's context (plus a block) masks nothing more: cap it */
    const int64_t window = hp->n_swa < (int64_t)target->params.n_ctx + hp->block_size ? (int64_t)hp->n_swa
                                                                                        : (int64_t)target->params.n_ctx + hp->block_size;
    const int64_t need_cells = window + hp->block_size - 1;
    if (params.n_ring == 0) params.n_ring = muse_dflash_default_ring((uint32_t)window, hp->block_size);
    if (params.n_ring < need_cells || params.n_ring > (1u << 26))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "a drafter ring of %u cells cannot hold its window and a block (needs %lld..%u)", params.n_ring,
                              (long long)need_cells, 1u << 26);
    if (params.n_batch == 0) params.n_batch = target->params.n_batch;
    if (params.n_batch > (1u << 16)) params.n_batch = 1u << 16;

    struct muse_draft_ctx *dc = calloc(1, sizeof *dc);
    if (!dc) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    dc->d = d;
    dc->target = target;
    dc->params = params;
    dc->ring_type = kv_types[params.kv_type];
    dc->n_cells = params.n_ring;
    dc->window = (int32_t)window;
    dc->n_batch = (int32_t)params.n_batch;
    if ((st = ring_alloc(dc, err)) || (st = outputs_alloc(dc, err)) || (st = muse_draft_programs_build(dc, err))) goto fail;
    /* the target's device must plan for the drafter's rows, widths, ring, heads and activations */
    const int64_t H = hp->n_embd;
    const struct muse_backend_plan need = {
        .n_batch = (int32_t)max64(dc->n_batch, hp->block_size),
        .max_ne0 = max64(max64(H, muse_dflash_n_features(hp)), max64(muse_dflash_n_q(hp), hp->n_ff)),
        .max_cells = dc->n_cells,
        .max_head_dim = (int32_t)hp->head_dim,
    };
    const size_t ws = dc->prog_inject.workspace_floats > dc->prog_block.workspace_floats ? dc->prog_inject.workspace_floats
                                                                                          : dc->prog_block.workspace_floats;
    if ((st = muse_device_reserve(target->dev, &need, ws, err))) goto fail;
    /* the target's forwards write the features the ring is fed with (muse_draft_eval_via) */
    if ((st = muse_context_set_features(target, hp->target_layers, (int32_t)hp->n_target_layers, err))) goto fail;
    *out = dc;
    return MUSE_OK;
fail:
    muse_draft_ctx_free(dc);
    return st;
}

int32_t muse_draft_n_past(const struct muse_draft_ctx *dc) { return dc->n_past; }
uint32_t muse_draft_n_ring(const struct muse_draft_ctx *dc) { return dc->n_cells; }

void muse_draft_clear(struct muse_draft_ctx *dc) { muse_draft_restart(dc, 0); }

void muse_draft_restart(struct muse_draft_ctx *dc, int32_t n_past) {
    dc->n_past = n_past > 0 ? n_past : 0;
    dc->lo = dc->floor = dc->n_past;
}

muse_status muse_draft_ctx_copy(struct muse_draft_ctx *dst, const struct muse_draft_ctx *src, struct muse_error *err) {
    if (dst->d != src->d || dst->n_cells != src->n_cells || dst->ring_type != src->ring_type || dst->window != src->window)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "drafter ring copy between different drafters or ring layouts");
    if (dst != src) memcpy(dst->ring_buf, src->ring_buf, src->ring_size);
    dst->n_past = src->n_past;
    dst->lo = src->lo;
    dst->floor = src->floor;
    return MUSE_OK;
}

muse_status muse_draft_snapshot_init(const struct muse_draft_ctx *dc, struct muse_draft_snapshot *s, struct muse_error *err) {
    memset(s, 0, sizeof *s);
    s->n_past = -1;
    s->size = dc->ring_size;
    if (!(s->buf = malloc(s->size)))
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for a copy of the drafter's ring (%zu MB)", s->size >> 20);
    return MUSE_OK;
}

void muse_draft_snapshot_free(struct muse_draft_snapshot *s) {
    free(s->buf);
    s->buf = NULL;
}

void muse_draft_snapshot_save(struct muse_draft_snapshot *s, const struct muse_draft_ctx *dc) {
    MUSE_ASSERT(s->size == dc->ring_size);
    memcpy(s->buf, dc->ring_buf, s->size);
    s->n_past = dc->n_past;
    s->lo = dc->lo;
    s->floor = dc->floor;
}

void muse_draft_snapshot_restore(struct muse_draft_ctx *dc, const struct muse_draft_snapshot *s) {
    MUSE_ASSERT(s->size == dc->ring_size && s->n_past >= 0);
    memcpy(dc->ring_buf, s->buf, s->size);
    dc->n_past = s->n_past;
    dc->lo = s->lo;
    dc->floor = s->floor;
}

/* The oldest position a draft at P reads (row 0's window; nothing below a restarted ring's floor). */
static int32_t window_start(const struct muse_draft_ctx *dc, int32_t P) {
    const int32_t w = P - dc->window + 1;
    return w > dc->floor ? w : dc->floor;
}

muse_status muse_draft_truncate(struct muse_draft_ctx *dc, int32_t n_keep, struct muse_error *err) {
    if (n_keep < 0 || n_keep > dc->n_past)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "cannot keep %d positions: the drafter's ring holds %d", n_keep, dc->n_past);
    if (n_keep == 0) {
        muse_draft_clear(dc);
        return MUSE_OK;
    }
    if (n_keep < dc->floor)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "cannot roll the drafter back to %d positions: its ring was restarted at %d (restart or clear it)",
                              n_keep, dc->floor);
    if (window_start(dc, n_keep) < dc->lo)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "cannot roll the drafter back from %d to %d positions: its ring (%u cells) no longer holds "
                              "positions %d..%d (clear and re-inject)",
                              dc->n_past, n_keep, dc->n_cells, window_start(dc, n_keep), dc->lo - 1);
    dc->n_past = n_keep;
    return MUSE_OK;
}

/* Inject rows (no checks): only the last n_cells of them can ever be attended. */
static void inject_rows(struct muse_draft_ctx *dc, const float *features, int32_t n_rows) {
    const int64_t F = muse_dflash_n_features(&dc->d->hp);
    const int32_t skip = n_rows > (int32_t)dc->n_cells ? n_rows - (int32_t)dc->n_cells : 0;
    for (int32_t done = skip; done < n_rows;) {
        const int32_t n = n_rows - done < dc->n_batch ? n_rows - done : dc->n_batch;
        muse_draft_forward_inject(dc, features + (size_t)done * F, n, dc->n_past + done);
        done += n;
    }
    dc->n_past += n_rows;
    if (dc->n_past - (int32_t)dc->n_cells > dc->lo) dc->lo = dc->n_past - (int32_t)dc->n_cells;
}

muse_status muse_draft_inject(struct muse_draft_ctx *dc, const float *features, int32_t n_rows, struct muse_error *err) {
    if (!features || n_rows < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to inject (%d rows)", n_rows);
    if ((int64_t)dc->n_past + n_rows > (int64_t)dc->target->params.n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT, "%d feature rows after %d positions exceed the target context (%u)", n_rows,
                              dc->n_past, dc->target->params.n_ctx);
    inject_rows(dc, features, n_rows);
    return MUSE_OK;
}

// ---- target evaluation with feature capture --------------------------------------------------------

static muse_status eval_target(void *user, const int32_t *tokens, int32_t n_tokens, float *logits, int logits_all,
                               float *features, struct muse_error *err) {
    struct muse_context *t = user;
    muse_status st = muse_eval(t, tokens, n_tokens, logits, logits_all, err);
    if (st == MUSE_OK && !muse_context_copy_features(t, 0, n_tokens, features))
        st = muse_error_set(err, MUSE_ERR_INTERNAL, "the target gave no feature rows for %d tokens", n_tokens);
    return st;
}

muse_status muse_draft_eval_via(struct muse_draft_ctx *dc, const int32_t *tokens, int32_t n_tokens, float *logits,
                                int logits_all, float *features, bool inject, muse_draft_eval_fn eval, void *eval_user,
                                struct muse_error *err) {
    struct muse_context *t = dc->target;
    const int32_t seq = dc->params.seq, n_past = muse_seq_n_past(t, seq);
    if (!tokens || n_tokens < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "nothing to evaluate (%d tokens)", n_tokens);
    if (!inject && !features) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "capture without injection needs a feature buffer");
    if (inject && dc->n_past != n_past)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "the drafter's ring (%d positions) is out of step with the target context (%d): truncate or "
                              "clear them together",
                              dc->n_past, n_past);
    if ((int64_t)n_past + n_tokens > (int64_t)t->params.n_ctx)
        return muse_error_set(err, MUSE_ERR_CONTEXT,
                              "%d tokens after %d already in the context exceed the context size %u (use a larger --ctx-size)",
                              n_tokens, n_past, t->params.n_ctx);
    if (!eval) {
        if (seq != 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a draft context on sequence %d needs an eval function", seq);
        eval = eval_target;
        eval_user = t;
    }
    const int64_t F = muse_dflash_n_features(&dc->d->hp), n_vocab = dc->d->n_vocab;
    /* one target forward per chunk: its feature rows come back with it */
    const int32_t chunk = dc->n_batch < (int32_t)t->params.n_batch ? dc->n_batch : (int32_t)t->params.n_batch;
    float *scratch = NULL;
    if (!features && !(scratch = malloc(sizeof(float) * (size_t)F * (size_t)(n_tokens < chunk ? n_tokens : chunk))))
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_status st = MUSE_OK;
    for (int32_t done = 0; done < n_tokens && st == MUSE_OK;) {
        const int32_t n = n_tokens - done < chunk ? n_tokens - done : chunk;
        const bool last = done + n == n_tokens;
        float *lg = !logits ? NULL : logits_all ? logits + (size_t)done * n_vocab : last ? logits : NULL;
        float *f = features ? features + (size_t)done * F : scratch;
        if ((st = eval(eval_user, tokens + done, n, lg, logits_all, f, err)) == MUSE_OK && inject) inject_rows(dc, f, n);
        done += n;
    }
    free(scratch);
    return st;
}

muse_status muse_draft_eval(struct muse_draft_ctx *dc, const int32_t *tokens, int32_t n_tokens, float *logits, int logits_all,
                            float *features, struct muse_error *err) {
    return muse_draft_eval_via(dc, tokens, n_tokens, logits, logits_all, features, true, NULL, NULL, err);
}

// ---- drafting ----------------------------------------------------------------------------------------

int32_t muse_draft_rows(const struct muse_drafter *d, int32_t n_max) {
    const int32_t most = (int32_t)d->hp.block_size - 1;
    if (n_max < 1) n_max = 1;
    return (n_max < most ? n_max : most) + 1;
}

/* Checks and the layers of a block; the head for rows head_lo..head_hi-1. */
static muse_status run_block(struct muse_draft_ctx *dc, int32_t anchor, int32_t *n_rows, int32_t head_lo, int32_t head_hi,
                             struct muse_draft_block *out, struct muse_error *err) {
    const struct muse_drafter *d = dc->d;
    const int32_t B = (int32_t)d->hp.block_size;
    if (anchor < 0 || anchor >= d->n_vocab)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "anchor token %d is out of range (vocabulary %lld)", anchor,
                              (long long)d->n_vocab);
    if (*n_rows == 0) *n_rows = B;
    if (*n_rows < 2 || *n_rows > B)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a block has 2..%d rows (the anchor and 1..%d drafts), not %d", B, B - 1,
                              *n_rows);
    const int32_t P = dc->n_past;
    if (window_start(dc, P) < dc->lo) /* the ring invariant of drafter.h */
        return muse_error_set(err, MUSE_ERR_INTERNAL, "the drafter's ring lost positions %d..%d", window_start(dc, P), dc->lo - 1);
    dc->ids[0] = anchor;
    for (int32_t r = 1; r < *n_rows; r++) dc->ids[r] = d->hp.mask_token_id;
    if (head_hi > *n_rows) head_hi = *n_rows;
    muse_draft_forward_block(dc, *n_rows, P, head_lo, head_hi);
    /* the block's keys took the cells of positions P + r - n_cells */
    if (P + *n_rows - (int32_t)dc->n_cells > dc->lo) dc->lo = P + *n_rows - (int32_t)dc->n_cells;
    *out = (struct muse_draft_block){
        .anchor_pos = P, .n_rows = *n_rows, .n_drafts = *n_rows - 1, .row0_argmax = head_lo == 0 ? dc->argmax[0] : -1,
        .tokens = dc->argmax + 1, .conf = dc->conf + 1, .conf_top10 = dc->conf_top10 + 1, .logits = dc->logits,
    };
    return MUSE_OK;
}

muse_status muse_draft_block(struct muse_draft_ctx *dc, int32_t anchor, int32_t n_rows, struct muse_draft_block *out,
                             struct muse_error *err) {
    return run_block(dc, anchor, &n_rows, 0, n_rows ? n_rows : (int32_t)dc->d->hp.block_size, out, err);
}

muse_status muse_draft_block_lazy(struct muse_draft_ctx *dc, int32_t anchor, int32_t n_rows, int32_t head_rows,
                                  struct muse_draft_block *out, struct muse_error *err) {
    if (head_rows < 0) head_rows = 0;
    return run_block(dc, anchor, &n_rows, 1, 1 + head_rows, out, err);
}

int32_t muse_draft_gate_p_min(const struct muse_draft_block *b, float p_min) {
    int32_t k = 0;
    while (k < b->n_drafts && !(b->conf_top10[k] < p_min)) k++;
    return k;
}

int32_t muse_draft_gate_cumulative(const struct muse_draft_block *b, float floor) {
    double cum = 1.0;
    int32_t k = 0;
    for (; k < b->n_drafts; k++) {
        cum *= b->conf[k];
        if (cum < floor) break;
    }
    return k;
}
