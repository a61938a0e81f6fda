/*
 * tp.h - tensor parallelism (docs/tensor-parallel.md): the text model split across the N ranks of
 * an MPI job, each rank a process with its own device, its share of the weights and its share of
 * the KV cache, all computing every forward together.
 *
 * The split (Megatron's, as the model card gives it): Q/K/V, the attention gate, ffn_gate and
 * ffn_up are column-parallel (each rank holds a contiguous range of their output rows: its heads,
 * its FFN units), attn_output and ffn_down row-parallel (the matching range of their input
 * columns), so each rank's attention and FFN give a partial sum of the block's output, and one
 * all-reduce (program.h ALL_REDUCE) completes it before the 1e-8 post-norm. The residual stream,
 * the norms and the embedding are replicated; the output head runs on rank 0 only.
 *
 * Ranks and heads: rank r takes units [U r / N, U (r + 1) / N) of a layer's U units, a unit being
 * the fewest query heads whose attn_output columns fill whole quant blocks. A rank's query heads
 * read the KV heads of their GQA groups: with N <= n_head_kv every rank holds its own KV heads,
 * with more ranks than KV heads the KV heads are replicated (rank r's heads all read one). The FFN
 * is split likewise in units of ffn_down's block. A layer with fewer units than ranks (a small
 * model whose blocks are too large) keeps that block whole on every rank, replicated, and skips
 * its all-reduce: slower, never wrong.
 *
 * Commands: rank 0 does all I/O and drives the others. Everything that changes the state of a
 * context (create and free it, run a batch, clear, truncate or reserve a sequence, a KV
 * checkpoint's life) is broadcast as a command before rank 0 does it, and the other ranks, in
 * muse_tp_worker, do the same on their contexts, so every rank holds the same sequences at the
 * same positions. Commands and the all-reduces of a run go out under the group's lock, one
 * thread at a time (MPI_THREAD_SERIALIZED).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/tp/comm.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "muse.h"

struct muse_tp;

/* The group this process joined (muse_tp_init), NULL without one. */
struct muse_tp *muse_tp_group(void);
int32_t muse_tp_rank_of(const struct muse_tp *tp);
struct muse_comm *muse_tp_comm(struct muse_tp *tp);
bool muse_tp_bf16(const struct muse_tp *tp);

/*
 * Model loading on every rank, in step: `local` is how opening the file went here (err its
 * message); the ranks compare what they loaded (the file's size, its tensor count and a hash of
 * its header). Fails on every rank when any rank failed or saw another file; the message names
 * the rank. Then the model is this group's (one text model per job).
 */
muse_status muse_tp_load_check(struct muse_tp *tp, muse_status local, const struct muse_error *local_err,
                               const struct muse_gguf *g, struct muse_error *err);

/*
 * Cut hp and w down to this rank's share (see above): views of its rows, and copies of its
 * columns of attn_output and ffn_down read from `path` (into *owned, freed with
 * muse_tp_owned_free). The output head stays on rank 0 only (w->output.data is NULL elsewhere).
 * Every rank reaches the same decisions. Errors: IO, NOMEM, UNSUPPORTED (value and key head sizes
 * that differ), each on this rank only: the caller checks again (muse_tp_load_check).
 */
struct muse_tp_owned;
muse_status muse_tp_shard(struct muse_tp *tp, struct muse_hparams *hp, struct muse_weights *w, const struct muse_gguf *g,
                          const char *path, struct muse_tp_owned **owned, struct muse_error *err);
void muse_tp_owned_free(struct muse_tp_owned *o);
/* Bytes of weights this rank holds in memory of its own (the row-parallel copies). */
size_t muse_tp_owned_bytes(const struct muse_tp_owned *o);
/* A line on what the split did with the layers (split, replicated), for -v. */
void muse_tp_describe(const struct muse_tp_owned *o, char *buf, size_t size);

// ---- commands (rank 0 sends, muse_tp_worker does) ---------------------------------------------

enum muse_tp_op {
    MUSE_TP_QUIT = 1,
    MUSE_TP_CTX_CREATE,
    MUSE_TP_CTX_FREE,
    MUSE_TP_RUN,          /* a = rows; body: tokens, pos, (flags & 1) sequence ids */
    MUSE_TP_SEQ_CLEAR,
    MUSE_TP_SEQ_TRUNCATE, /* a = n_keep */
    MUSE_TP_SEQ_RESERVE,  /* a = positions */
    MUSE_TP_CK_CREATE,    /* a = checkpoint id */
    MUSE_TP_CK_SAVE,
    MUSE_TP_CK_RESTORE,
    MUSE_TP_CK_FREE,
    MUSE_TP_NOP,          /* rank 0's heartbeat */
};

struct muse_tp_cmd {
    int32_t op, ctx, seq, a, flags;
    /* CTX_CREATE: the context's parameters as rank 0 resolved them (n_threads as asked) */
    uint32_t n_ctx, n_batch, n_threads, n_seq_max, n_ctx_pool;
    int32_t kv_type, swa_full, no_repack;
    char backend[24];
};

/* The group's lock: held around a command and, for a run, the run itself. */
void muse_tp_lock(struct muse_tp *tp);
void muse_tp_unlock(struct muse_tp *tp);
/* Send a command (the lock held); RUN: then its rows. */
void muse_tp_send(struct muse_tp *tp, const struct muse_tp_cmd *c);
void muse_tp_send_rows(struct muse_tp *tp, int32_t n, const int32_t *tokens, const int32_t *pos, const int32_t *seq);
/* lock + send + unlock, once the group has a model (no-op before, or after muse_tp_finish). */
void muse_tp_command(struct muse_tp *tp, enum muse_tp_op op, int32_t ctx, int32_t seq, int32_t a);
/* A fresh context / checkpoint id (rank 0). */
int32_t muse_tp_next_id(struct muse_tp *tp, bool checkpoint);
/* Take the group's one text model (false: it has one already). */
bool muse_tp_claim_model(struct muse_tp *tp);
/* Whether the other ranks are listening (a model loaded everywhere, no QUIT sent). */
bool muse_tp_live(const struct muse_tp *tp);
void muse_tp_set_live(struct muse_tp *tp);
