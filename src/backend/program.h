/*
 * program.h - a network as one list of layer ops, built once and run by a device (device.h) over
 * a batch of rows from one or more sequences.
 *
 * A model floor (the Muse-Glimmer text forward, the DFlash drafter) describes its network once,
 * as ops on named activation buffers: a buffer is [n_batch][cols] floats in the device's
 * workspace (muse_prog_buffer), so the program holds no pointer to memory the device owns. What a
 * run binds (the batch's tokens and positions, its sequences' KV views, the logits and features
 * outputs) comes in struct muse_prog_run. The op vocabulary is small and closed:
 *
 *   EMBED        dst row r = token_embd[token r] (to_float) or the row injected for r
 *   ROPE_ANGLES  the rope cache (cos in dst, sin in src) of each row's position
 *   RMS_NORM     dst = src / sqrt(mean(src^2) + eps) (* w), per vector of n floats
 *   ROPE         rotate the first n_rot dims of every head of dst (NORM: adjacent pairs; NEOX: halves)
 *   MATMUL       dst_j = W_j . src, then the epilogue (* scale, + bias), for the op's jobs
 *   KV_STORE     each row's k (src) and v (src2) into its sequence's KV layer at its position
 *   ATTENTION    dst = softmax(q K^T * scale + mask) V over each row's own sequence (causal, or a
 *                sliding window of n_swa keys; or a block that sees itself whole), then
 *                * sigmoid(gate) when src2 is set
 *   SWIGLU       dst = silu(dst) * src
 *   ADD          dst += src
 *   LOGITS       the output rows: * scale, then softcap
 *   TOP_PROBS    per output row of src: the argmax, its softmax probability over the row and over
 *                the row's 10 highest values (the drafter's confidences)
 *   OBSERVE      the layer trace, the capture hook and the feature rows of layer `layer` (the
 *                residual in src)
 *   ALL_REDUCE   dst summed over the ranks of a tensor-parallel group (run->comm; none: nothing);
 *                everything written before it must be visible (a BARRIER precedes it)
 *   BARRIER      everything written before is visible to everything after
 *   LAYER_NORM   dst = (src - mean) / sqrt(var + eps) (* w) (+ b), per row of n floats
 *   GELU         dst = 0.5 dst (1 + erf(dst / sqrt 2)), per row of n floats
 *   GATHER       dst row r = per_row vectors of n floats, vector s = src row idx[r * per_row + s]
 *                (concatenated, or interleaved channel by channel)
 *   ROPE_2D      rotate each head's first half by the angles of position idx[r], its second half
 *                by those of idx2[r] (each half as ROPE NORM; the angles rows of a ROPE_ANGLES table)
 *   WINDOW_ATTENTION  dst (the queries) = softmax(q K^T * scale) V inside each window of rows
 *                (seg) of the batch itself: bidirectional, no KV cache (backend.h)
 *   HOOK         the run's hook sees `count` rows of src (stage dumps, progress; it may stop the run)
 *
 * Numerics are ggml's CPU ops (text-model.md section 8), the same on every device that claims
 * ggml parity; a device that reorders sums says so and is tested within a stated bound.
 *
 * Rows. Ops run over all batch rows, or (rows = MUSE_ROWS_OUT) over the run's n_out output rows
 * only: an RMS_NORM reads batch row out_rows[i] and writes row i; other OUT ops work on rows
 * 0..n_out-1 of their buffers, and their results go to the run's bound outputs (MUSE_BUF_LOGITS,
 * MUSE_BUF_EMBD). How the CPU device splits an op over its threads is part of the op (split), because its barriers follow the
 * split: MUSE_SPLIT_ROWS gives a thread the rows r % nth == ith (the rows it also converts for the
 * next matmul, so row steps chain into a matmul without a barrier); MUSE_SPLIT_SHARE a contiguous
 * share of all the op's vectors (rows x per_row); the program places its BARRIER ops for that.
 * An op with `count` set runs over that many rows from its refs' row 0 (their offsets place it),
 * whatever the run's n_rows: a program built for one input shape (the vision tower, whose rows
 * are more than a matmul chunk) spells its chunks out as ops, and its buffers may have rows of
 * their own (muse_program_buffer_rows) or live in the caller's memory (muse_program_bound).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "muse.h"

enum muse_op_kind {
    MUSE_OP_BARRIER,
    MUSE_OP_EMBED,
    MUSE_OP_ROPE_ANGLES,
    MUSE_OP_RMS_NORM,
    MUSE_OP_ROPE,
    MUSE_OP_MATMUL,
    MUSE_OP_KV_STORE,
    MUSE_OP_ATTENTION,
    MUSE_OP_SWIGLU,
    MUSE_OP_ADD,
    MUSE_OP_LOGITS,
    MUSE_OP_TOP_PROBS,
    MUSE_OP_OBSERVE,
    MUSE_OP_ALL_REDUCE,
    /* the vision tower's (ops over explicit row ranges: `count`) */
    MUSE_OP_LAYER_NORM,
    MUSE_OP_GELU,
    MUSE_OP_GATHER,
    MUSE_OP_ROPE_2D,
    MUSE_OP_WINDOW_ATTENTION,
    MUSE_OP_HOOK,
};

enum muse_op_rows { MUSE_ROWS_ALL, MUSE_ROWS_OUT };
enum muse_op_split { MUSE_SPLIT_ROWS, MUSE_SPLIT_SHARE };
enum muse_rope_mode { MUSE_ROPE_NORM, MUSE_ROPE_NEOX };
/* ATTENTION masks. CAUSAL: row r sees its sequence's keys up to pos[r] (the last n_swa of them when
 * n_swa > 0). BLOCK: the rows are one block of consecutive positions of one sequence that sees
 * itself whole (non-causal): row r sees keys pos[r] - n_swa + 1 .. pos[n_rows - 1], none below the
 * run's kv_floor (the DFlash drafter's block over its ring, dflash.md 3.4). */
enum muse_attn_mask { MUSE_MASK_CAUSAL, MUSE_MASK_BLOCK };

/* Buffer ids: the run's bound outputs first (the logits of the output rows; the final hidden
 * states of all rows), then the program's activation buffers. */
enum { MUSE_BUF_NONE = -1, MUSE_BUF_LOGITS = 0, MUSE_BUF_EMBD = 1, MUSE_BUF_FIRST = 2 };

/* A float array an op reads or writes: row r at `off + r * stride` floats into buffer buf
 * (stride 0: the buffer's cols). Matmul outputs have stride w.ne1 and inputs w.ne0 (backend.h). */
struct muse_prog_ref {
    int16_t buf;
    int64_t off;
    int64_t stride;
};

/* One matmul of an op (backend.h muse_matmul_job, with its output named instead of pointed to). */
struct muse_prog_job {
    struct muse_weight w;
    struct muse_prog_ref y;
    bool has_scale;
    float scale;
    const float *bias; /* [w.ne1] or NULL */
};

struct muse_op {
    enum muse_op_kind kind;
    enum muse_op_rows rows;
    enum muse_op_split split;
    int32_t layer;            /* KV_STORE / ATTENTION: the sequence's KV layer; OBSERVE: the layer index */
    struct muse_prog_ref dst, src, src2;
    int64_t n;                /* floats per vector (RMS_NORM, SWIGLU, ADD, ROPE: head_dim) */
    int32_t per_row;          /* vectors per row (RMS_NORM, ROPE: heads) */
    const float *w;           /* RMS_NORM: the weight [n] or NULL */
    float eps;                /* RMS_NORM */
    /* ROPE_ANGLES / ROPE */
    enum muse_rope_mode rope;
    int32_t n_rot;
    float rope_base, rope_scale;
    /* ATTENTION */
    int32_t n_head, n_head_kv, head_dim, n_swa;
    enum muse_attn_mask mask;
    float scale;              /* ATTENTION: 1/sqrt(head_dim); LOGITS: the logit scale */
    float softcap;            /* LOGITS: 0 = none */
    const struct muse_weight *table; /* EMBED: the token embedding table */
    int32_t job0, n_jobs;     /* MATMUL: jobs[job0 .. job0 + n_jobs) */
    /* row ranges (a network whose rows outnumber a matmul's chunk: the vision tower) */
    int32_t count;            /* rows the op runs over (its refs' row 0 first); 0: the run's (n_rows or n_out) */
    const int32_t *idx;       /* GATHER: [count * per_row] source rows (NULL: row r * per_row + s);
                                 ROPE_ANGLES: [count] positions (NULL: the run's pos); ROPE_2D: the first half's */
    const int32_t *idx2;      /* ROPE_2D: [count] the second half's positions */
    const float *b;           /* LAYER_NORM: the bias [n] or NULL */
    bool interleave;          /* GATHER: vector s's element c lands at c * per_row + s (else s * n + c) */
    const int32_t *seg;       /* WINDOW_ATTENTION: [n_seg + 1] the windows (muse_window_attn_args) */
    int32_t n_seg;
    struct muse_prog_ref src3; /* WINDOW_ATTENTION: its scratch (muse_window_attn_scratch floats) */
};

/* An activation buffer: [n_batch][cols] floats, at `off` floats into the device's workspace. */
struct muse_prog_buffer {
    int64_t cols;
    size_t off;
    int32_t rows;  /* 0: the program's n_batch */
    int32_t bind;  /* 0: in the workspace; k + 1: the run's bind[k] (memory the caller owns) */
};

struct muse_comm;

struct muse_program {
    struct muse_op *ops;
    int32_t n_ops, cap_ops;
    struct muse_prog_job *jobs;
    int32_t n_jobs, cap_jobs;
    struct muse_prog_buffer *bufs; /* [n_bufs]; bufs[MUSE_BUF_LOGITS] and [MUSE_BUF_EMBD] are bound outputs */
    int32_t n_bufs, cap_bufs;
    int32_t n_batch;               /* rows every buffer holds */
    size_t workspace_floats;       /* all buffers, each rounded to 16 floats */
    bool failed;                   /* an append ran out of memory (muse_program_finish reports it) */
};

/* A HOOK op's call (thread 0, between barriers): rows x cols floats of a buffer; nonzero: stop the run. */
typedef int (*muse_prog_hook_fn)(void *user, int32_t id, const float *data, int64_t rows, int64_t cols);

/* What one run binds. */
struct muse_prog_run {
    int32_t n_rows;                 /* 1..n_batch */
    const int32_t *tokens;          /* [n_rows] (EMBED), or NULL with embd */
    const float *embd;              /* [n_rows][n_embd] input rows instead of token rows, or NULL */
    const float *const *rows;       /* NULL, or [n_rows]: row r is rows[r] when non-NULL (a mixed batch) */
    const int32_t *pos;             /* [n_rows] positions */
    const int32_t *seq;             /* [n_rows] index into kv, or NULL: every row of sequence 0 */
    struct muse_kv_layer *const *kv; /* [n_seq] -> [n_layer] each sequence's KV layers */
    const int32_t *out_rows;        /* [n_out] the MUSE_ROWS_OUT rows, increasing */
    int32_t n_out;
    float *logits;                  /* MUSE_BUF_LOGITS: [n_out][its cols] */
    float *embd_out;                /* MUSE_BUF_EMBD: [n_rows][its cols] */
    int32_t *argmax;                /* TOP_PROBS: [n_out] each */
    float *conf, *conf_top10;
    int32_t kv_floor;               /* ATTENTION (BLOCK): no key below this position */
    /* OBSERVE: the feature rows, [n_rows][n_features * n_embd]: slot k of row r is the residual of
     * row r entering layer feature_layers[k] (NULL: none) */
    float *features;
    const int32_t *feature_layers;
    int32_t n_features;
    /* OBSERVE (the caller's hooks, include/muse.h) */
    muse_layer_trace_fn trace;
    void *trace_user;
    int32_t trace_n_pos;
    muse_layer_capture_fn capture;
    void *capture_user;
    int32_t n_layers;               /* OBSERVE layers are 0..n_layers (n_layers: the final residual) */
    int64_t n_embd;                 /* OBSERVE / EMBED row width */
    /* bound buffers and HOOK ops */
    float *const *bind;             /* [slots] the memory of the buffers of muse_program_bound */
    muse_prog_hook_fn hook;         /* NULL: the HOOK ops do nothing */
    void *hook_user;
    int *stop;                      /* HOOK: set nonzero when the hook asks to stop (then the run ends there) */
    /* BARRIER ops: thread 0 asks preempt before each (NULL: never); nonzero ends the run on every
     * thread after that barrier, *preempted (-1 before the run) then holds the op's index. What the
     * ops before it wrote stays written: the caller treats the run as not having happened (a
     * forward's KV rows are rewritten with the same values when its rows run again). */
    int (*preempt)(void *user);
    void *preempt_user;
    _Atomic int32_t *preempted;
    /* ALL_REDUCE: the tensor-parallel group whose ranks each hold a share of the sums (backend/tp/
     * comm.h; thread 0 reduces between barriers), NULL: one device, nothing to do. bf16: the payload
     * travels as bf16. */
    struct muse_comm *comm;
    bool comm_bf16;
};

/* The confidences of one row of n values (raw logits): the argmax (ties to the lower index, NaN
 * never wins), its full softmax probability and its probability after a softmax over the 10
 * highest values (the TOP_PROBS op's numerics). */
void muse_row_confidence(const float *row, int64_t n, int32_t *argmax, float *conf, float *conf_top10);

/* Start an empty program whose buffers hold n_batch rows. */
void muse_program_init(struct muse_program *p, int32_t n_batch);
void muse_program_free(struct muse_program *p);

/* Declare an activation buffer of `cols` floats per row; returns its id. */
int16_t muse_program_buffer(struct muse_program *p, int64_t cols);
/* The same with `rows` rows instead of n_batch. */
int16_t muse_program_buffer_rows(struct muse_program *p, int32_t rows, int64_t cols);
/* A buffer the run binds (run->bind[slot]: caller memory, rows of `cols` floats); returns its id. */
int16_t muse_program_bound(struct muse_program *p, int32_t slot, int64_t cols);
/* Append an op (a copy); returns it for the caller to adjust, or NULL when out of memory. */
struct muse_op *muse_program_op(struct muse_program *p, const struct muse_op *op);
/* Append a MATMUL op over src with jobs[0..n) (copied); rows as given. */
void muse_program_matmul(struct muse_program *p, struct muse_prog_ref src, const struct muse_prog_job *jobs, int n,
                         enum muse_op_rows rows);
/* Append a BARRIER (rows MUSE_ROWS_OUT: only when the run has output rows). */
void muse_program_barrier(struct muse_program *p, enum muse_op_rows rows);
/* Lay the buffers out in the workspace. Errors: NOMEM (an append failed). */
muse_status muse_program_finish(struct muse_program *p, struct muse_error *err);

/* Rows of `stride` floats of buffer b, from `off` floats in (stride 0: the buffer's cols). */
static inline struct muse_prog_ref muse_ref(int16_t b, int64_t off, int64_t stride) {
    return (struct muse_prog_ref){b, off, stride};
}

/* ggml's rope cache for position p: theta = p * theta_scale^i in f32 (incremental), cos/sin of
 * freq_scale * theta, for the n_rot / 2 pairs (the ROPE_ANGLES op's numerics). */
void muse_rope_angles(float p, int32_t n_rot, float base, float freq_scale, float *c, float *s);
/* Floats per row of a rope cache buffer (ROPE_ANGLES' dst / src): the n_rot / 2 angles and one
 * more, rounded up to 16 (64 bytes). */
static inline int64_t muse_rope_cols(int64_t n_rot) { return (n_rot / 2 + 1 + 15) & ~(int64_t)15; }

/*
 * Run program p inside a parallel region of `ops` (state bs): this thread's share of every op, in
 * order (the CPU devices' interpreter; device.c calls it on each thread). ws: the workspace.
 */
void muse_program_region(const struct muse_program *p, const struct muse_prog_run *run, float *ws,
                         const struct muse_backend_ops *ops, void *bs, int ith, int nth);
