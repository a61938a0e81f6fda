/*
 * drafter.h - the internals behind the public muse_drafter / muse_draft_ctx handles
 * (include/muse.h, "DFlash block drafter"): the loaded drafter (config + weights + the views it
 * borrows from the target), the draft context (the KV ring, the outputs), and the two programs
 * of the drafter forward (draft_forward.c: pass A+B "inject" and pass C "draft a block", spec
 * dflash.md section 3), run on the target's device.
 *
 * The ring. Layer il keeps a muse_kv_layer of n_cells cells, position p in cell p % n_cells (the
 * layout the backends' attention reads). Positions 0..n_past-1 have been injected; a draft at
 * P = n_past also writes the block's own keys/values into the cells of positions P..P+n_rows-1
 * (so the backend's attention can read ring and block in one pass) - never committed: n_past
 * does not move, and a later injection of those positions overwrites them. `lo` is the oldest
 * position whose cell still holds it (injections and blocks overwrite the cells of older ones);
 * a draft at P needs positions max(0, P - window + 1)..P-1, so a rollback to n_keep is possible
 * while max(0, n_keep - window + 1) >= lo.
 *
 * A restarted ring (muse_draft_restart, when the caller cannot roll the ring back to where the
 * target now is, e.g. after the target restored a checkpoint the drafter has no copy of) holds no
 * positions below `floor`: drafts attend to positions floor.. only (fewer context keys, lower
 * acceptance until the window refills; never a wrong key). floor is 0 for a ring filled from 0.
 *
 * The block's attention (spec 3.4): query row r (position P + r) sees ring positions
 * P + r - window + 1 .. P - 1 and all n_rows block positions P..P+n_rows-1 (non-causal): the
 * ATTENTION op's BLOCK mask (program.h) with n_swa = window and the run's kv_floor = floor.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/program.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "muse.h"
#include "speculative/dflash_hparams.h"
#include "speculative/dflash_tensors.h"

struct muse_drafter {
    struct muse_gguf *gguf;          /* owns the mapping every own weight view points into */
    struct muse_dflash_hparams hp;
    struct muse_dflash_weights w;
    const struct muse_model *target; /* borrowed: must outlive the drafter */
    /* the two tensors the drafter uses from the target (views into the TARGET's mapping, or the
     * drafter's own when its file has them, as llama.cpp does); never copied */
    struct muse_weight token_embd;   /* [n_vocab][n_embd], any type with a dequantizer */
    struct muse_weight output;       /* [n_embd] -> n_vocab */
    bool has_output_scale;           /* the target's output.scale (llama.cpp applies it: build_lora_mm) */
    float output_scale;
    bool has_fc_scale;               /* fc.scale */
    float fc_scale;
    int64_t n_vocab;                 /* the target's vocabulary */
};

/*
 * Load a drafter from an already parsed file; takes ownership of `gguf` (freed on error too).
 * Errors as muse_drafter_load, without the path prefix.
 */
muse_status muse_drafter_load_gguf(struct muse_gguf *gguf, const struct muse_model *target, struct muse_drafter **out,
                                   struct muse_error *err);

struct muse_draft_ctx {
    const struct muse_drafter *d;
    struct muse_context *target;     /* its device runs the drafter; its feature rows feed the ring */
    struct muse_draft_ctx_params params; /* as resolved */
    enum muse_type ring_type;
    uint32_t n_cells;                /* ring cells per layer */
    int32_t window;                  /* the sliding window the masks use: min(n_swa, target n_ctx + block_size) */
    int32_t n_batch;                 /* most feature rows per inject region */
    int32_t n_past;                  /* positions 0..n_past-1 injected */
    int32_t lo;                      /* oldest position whose ring cell is intact */
    int32_t floor;                   /* no position below it was injected since the last restart (0: none) */
    struct muse_kv_layer *ring;      /* [n_layer] */
    void *ring_buf;
    size_t ring_size;                /* bytes of ring_buf */

    /* the drafter forward (draft_forward.c), run on the target's device (its workspace holds the
     * activations); the outputs below (one allocation) */
    struct muse_program prog_inject; /* pass A + B over up to n_batch rows */
    struct muse_program prog_block;  /* pass C over up to block_size rows */
    float *logits;                   /* [block][n_vocab] raw logits */
    float *conf, *conf_top10;        /* [block] per row */
    int32_t *argmax;                 /* [block] per row */
    int32_t *ids;                    /* [block] the block's input ids */
    int32_t *out_rows;               /* [block] the head's rows */
    int32_t *pos;                    /* [max(n_batch, block)] */
    void *mem;
};

/* Build dc's two programs (prog_inject, prog_block) once. Errors: NOMEM. */
muse_status muse_draft_programs_build(struct muse_draft_ctx *dc, struct muse_error *err);

/* Pass A + B for n rows (n <= n_batch) of features at positions pos0..pos0+n-1: encode and store
 * every layer's key/value into the ring. One run of prog_inject on the target's device. */
void muse_draft_forward_inject(struct muse_draft_ctx *dc, const float *features, int32_t n, int32_t pos0);

/* Pass C: the block dc->ids[0..n_rows) at positions P..P+n_rows-1; the LM head (dc->logits, and per
 * row dc->argmax / conf / conf_top10) runs for rows head_lo..head_hi-1 only. One run of prog_block
 * on the target's device. */
void muse_draft_forward_block(struct muse_draft_ctx *dc, int32_t n_rows, int32_t P, int32_t head_lo, int32_t head_hi);

/*
 * ---- for the speculative loop (spec.c) --------------------------------------------------------
 */

/* Forget every position and continue at position n_past: the ring holds nothing below it (floor =
 * lo = n_past), so drafts attend only to what is injected from there on. Cannot fail. */
void muse_draft_restart(struct muse_draft_ctx *dc, int32_t n_past);

/* A copy of a ring (its cells and positions): what a KV checkpoint of the target is to its rings. */
struct muse_draft_snapshot {
    void *buf;                   /* ring_size bytes, owned */
    size_t size;
    int32_t n_past, lo, floor;
};
/* Allocate a snapshot for dc's ring layout (n_past -1: empty). Errors: MUSE_ERR_NOMEM. */
muse_status muse_draft_snapshot_init(const struct muse_draft_ctx *dc, struct muse_draft_snapshot *s, struct muse_error *err);
void muse_draft_snapshot_free(struct muse_draft_snapshot *s);
/* Copy dc's ring into s / s back into dc (the same layout: made by muse_draft_snapshot_init(dc)). */
void muse_draft_snapshot_save(struct muse_draft_snapshot *s, const struct muse_draft_ctx *dc);
void muse_draft_snapshot_restore(struct muse_draft_ctx *dc, const struct muse_draft_snapshot *s);

/* How tokens get evaluated on the target (e.g. through a session, which mirrors them, and maybe a
 * stepper, which batches them with other sequences'): muse_eval's contract, and features
 * ([n_tokens][n_features]) receives the target's feature rows of these tokens. At most the
 * target's n_batch tokens per call. NULL in muse_draft_eval_via = muse_eval on the draft context's
 * target (its sequence 0), the rows copied from muse_context_features. */
typedef muse_status (*muse_draft_eval_fn)(void *user, const int32_t *tokens, int32_t n_tokens, float *logits,
                                          int logits_all, float *features, struct muse_error *err);

/*
 * muse_draft_eval with two choices: eval (NULL: muse_eval) evaluates each chunk on the target, and
 * inject = false captures the features into `features` ([n_tokens][n_features], required then)
 * without injecting them (the ring and n_past unchanged; the caller injects later with
 * muse_draft_inject, so the ring may lag the target). With inject the ring must be in step.
 */
muse_status muse_draft_eval_via(struct muse_draft_ctx *dc, const int32_t *tokens, int32_t n_tokens, float *logits,
                                int logits_all, float *features, bool inject, muse_draft_eval_fn eval, void *eval_user,
                                struct muse_error *err);

/*
 * Pass C with a partial LM head: the block's layers for n_rows rows, and the head for rows
 * 1..head_rows only (head_rows <= n_rows - 1; row 0, the anchor's, is never needed by the loop;
 * row0_argmax is -1). The result's tokens / conf / conf_top10 are valid for the first head_rows
 * drafts (n_drafts says n_rows - 1; the caller reads only what it asked for). Errors as
 * muse_draft_block.
 */
muse_status muse_draft_block_lazy(struct muse_draft_ctx *dc, int32_t anchor, int32_t n_rows, int32_t head_rows,
                                  struct muse_draft_block *out, struct muse_error *err);
