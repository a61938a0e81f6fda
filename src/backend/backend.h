/*
 * backend.h - the small ops table through which the forward runs: a parallel region with a
 * barrier, and inside it the heavy operations, the matmuls of weight tensors with a batch of
 * activation rows, attention of a batch of queries over one layer's KV cache and window attention
 * of a batch's rows over each other (the vision tower), each computing the calling thread's share. Everything else in the forward (norms, rope, FFN activation,
 * residuals) is plain C in forward.c, sliced over the threads and shared by every backend, so a
 * backend only has to get these operations right.
 *
 * Backends: "ref" (backend_ref.c: the plain-C correctness oracle, single-threaded, numerics as
 * ggml's CPU backend defines them) and whatever else registers in backend.c (e.g. "cpu").
 * A backend's state (scratch, thread pool) is created once per context from a plan; the
 * per-token path allocates nothing.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/tensor_type.h"
#include "muse.h"

/* A read-only 2-D view of a weight tensor inside the mapped GGUF (ggml order: ne0 = row length). */
struct muse_weight {
    const void *data;     /* [ne1][row_size bytes]; NULL = tensor absent */
    enum muse_type type;
    int64_t ne0;          /* elements per row (the input dim of a matrix) */
    int64_t ne1;          /* rows (the output dim of a matrix); 1 for vectors */
    size_t row_size;      /* bytes per row */
    const char *name;     /* tensor name (points into the parsed GGUF) */
    /* The rows interleaved by 8 (kernels/repack.h) that the cpu device made when it prepared the
     * program (backend/cpu_weights.c), or NULL: rows 0 .. ne1 / 8 * 8 - 1, group g at
     * r8 + g * 8 * row_size. Only the cpu backend reads it; `data` stays valid. */
    const void *r8;
};

/*
 * One layer's KV cache storage as the forward sees it. Position p lives in cell p % n_cells
 * (full layers have n_cells >= n_ctx so this is the identity; sliding-window layers may hold a
 * ring of at least n_swa + n_batch cells). K is stored after norm (and rope on SWA layers), V raw.
 */
struct muse_kv_layer {
    enum muse_type type;  /* MUSE_TYPE_F16 (default), MUSE_TYPE_F32 or MUSE_TYPE_Q8_0 */
    uint32_t n_cells;
    int32_t n_embd_k;     /* n_head_kv * head_dim_k */
    int32_t n_embd_v;     /* n_head_kv * head_dim_v */
    size_t k_row_size;    /* bytes per cell of k */
    size_t v_row_size;
    void *k;              /* [n_cells][n_embd_k] in `type` */
    void *v;              /* [n_cells][n_embd_v] in `type` */
};

/* Arguments of one attention call: n_tokens queries of one layer, one sequence. */
struct muse_attn_args {
    const float *q;       /* [n_tokens][n_head * head_dim], normed (and roped on SWA layers) */
    float *out;           /* [n_tokens][n_head * head_dim] (head h at channels h*head_dim..) */
    const struct muse_kv_layer *kv; /* already holds the keys/values of every visible position */
    const int32_t *pos;   /* [n_tokens] positions of the queries */
    int32_t n_tokens;
    int32_t n_head;
    int32_t n_head_kv;    /* query head h reads KV head h / (n_head / n_head_kv) */
    int32_t head_dim;
    int32_t n_swa;        /* 0: full attention (causal only); else keys with pos - kpos >= n_swa are masked */
    float scale;          /* 1/sqrt(head_dim), applied inside the softmax */
    const float *gate;    /* [n_tokens][n_head * head_dim] or NULL: out *= sigmoid(gate) afterwards */
};

/*
 * Attention of a batch's own rows over each other inside windows: bidirectional, no KV cache (the
 * vision tower; a global layer is one window over every row). Row i of window s (rows seg[s] ..
 * seg[s+1] - 1) attends to the keys of that window, head by head, with the numerics of kernels.h's
 * window attention (the same bits on every backend); its output overwrites q[i].
 */
struct muse_window_attn_args {
    float *q;             /* [n_rows][ld] queries (head h at columns h*head_dim ..), then the output */
    const float *k, *v;   /* [n_rows][ld] keys (roped) and values */
    int64_t ld;
    int32_t n_rows, n_head, head_dim;
    const int32_t *seg;   /* [n_seg + 1]: seg[0] = 0, increasing, seg[n_seg] = n_rows */
    int32_t n_seg;
    float scale;
    float *scratch;       /* muse_window_attn_scratch(n_rows, n_head, head_dim, nth) floats, 64-byte aligned, shared */
};

/* Sizes a backend plans its scratch for (maxima over the model and context). */
struct muse_backend_plan {
    int32_t n_batch;      /* most activation rows per call */
    int64_t max_ne0;      /* longest weight row (matmul input dim) */
    uint32_t max_cells;   /* most KV cells of any layer */
    int32_t max_head_dim;
    int32_t n_threads;    /* >= 1; the ref backend ignores it */
    bool no_repack;       /* the cpu backend: no tile GEMM (packed weight panels) */
};

/*
 * One matmul of a step: y = w·x, then llama.cpp's build_lora_mm epilogue (y *= scale, then
 * y += bias). w is a view: it may be a row range of a fused tensor (muse_weight_rows).
 */
struct muse_matmul_job {
    struct muse_weight w;
    float *y;             /* [n_rows][w.ne1] */
    bool has_scale;
    float scale;
    const float *bias;    /* [w.ne1] or NULL */
};

/* The body of a parallel region: called once on each of the nth threads, ith = 0 .. nth-1. */
typedef void (*muse_backend_fn)(int ith, int nth, void *ctx);

/*
 * The forward runs as ONE parallel region per call (ops->parallel); inside it every thread calls
 * the same ops in the same order with its (ith, nth), and ops->barrier separates steps where a
 * thread reads what another wrote. matmul and attention compute the thread's share of their
 * outputs; the outputs are complete only after the caller's next barrier.
 */
struct muse_backend_ops {
    const char *name;
    /* Create the backend state for `plan` (allocates all scratch). */
    muse_status (*init)(const struct muse_backend_plan *plan, void **state, struct muse_error *err);
    void (*free)(void *state);
    /* Run fn(ith, nth, ctx) on each of the backend's threads; returns when all have returned.
     * The ref backend runs fn(0, 1, ctx). Not reentrant. */
    void (*parallel)(void *state, muse_backend_fn fn, void *ctx);
    /* Inside fn only: wait for all nth threads. Writes before it are visible to all after it. */
    void (*barrier)(void *state);
    /*
     * Inside fn, every thread with the same arguments: this thread's share of jobs[j].y[r][i] =
     * dot(jobs[j].w row i, x[r]) (+ epilogue) for all j, r < n_rows, i < w.ne1, where x[r]
     * (w.ne0 floats; every job has the same ne0) is first converted to the weight type's
     * vec_dot_type exactly as ggml's CPU backend does (Q8_0/Q8_1/Q8_K/F16/BF16/F32).
     * x: [n_rows][ne0]; n_rows <= plan n_batch. On entry, x rows r with r % nth == ith must be
     * complete as this thread sees them (the rows it converts); other rows may still be written
     * by their threads until the backend's internal barrier.
     */
    void (*matmul)(void *state, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows,
                   int ith, int nth);
    /* Inside fn: this thread's share of the attention as llama.cpp's non-flash CPU path computes
     * it (text-model.md 5.4), then the optional gate (muse_attn_gate_head) on the heads it computed. */
    void (*attention)(void *state, const struct muse_attn_args *args, int ith, int nth);
    /* Inside fn: this thread's share of window attention (muse_window_attn_args); it packs the keys
     * into the scratch, waits on its own barrier, then claims (window, head, block of rows) items.
     * The output is complete after the caller's next barrier. */
    void (*window_attention)(void *state, const struct muse_window_attn_args *args, int ith, int nth);
};

/* Store one position's k [n_embd_k] and v [n_embd_v] (f32) into its cell (pos % n_cells) of KV
 * layer l, converted to the cache type (F16 by rounding, F32 as is, else the type's from_float). */
void muse_kv_layer_store(struct muse_kv_layer *l, int32_t pos, const float *k, const float *v);

/* View of rows [r0, r0 + n) of weight w (a slice of a fused tensor). */
struct muse_weight muse_weight_rows(const struct muse_weight *w, int64_t r0, int64_t n);

/* The epilogue of job j on output columns [i0, i1) of rows 0..n_rows-1 (every backend calls it
 * on the columns it computed): y *= scale (if has_scale), then y += bias (if any). */
void muse_matmul_job_epilogue(const struct muse_matmul_job *j, int32_t n_rows, int64_t i0, int64_t i1);

/* out[t][h] *= sigmoid(gate[t][h]) (1 / (1 + expf(-g))) over one head of one query, when
 * a->gate is set; called by every backend right after the head is computed. */
void muse_attn_gate_head(const struct muse_attn_args *a, int32_t t, int32_t h);

/*
 * The attention probabilities of one query head in place, as llama.cpp's non-flash CPU path
 * forms them: scores[j] *= scale, then p = e * (float)(1 / sum) with ggml's vector exp
 * (muse_x86_softmax_exp over positions lo..lo+n-1), rounded to F16 and back when round_f16 (an
 * F16 cache). probs_f16 (NULL, or a kernel giving the same bits) does that last step.
 */
void muse_attn_softmax(float *scores, int32_t n, int32_t lo, float scale, bool round_f16,
                       void (*probs_f16)(int32_t n, float inv, float *p));

/*
 * One query head of the attention, with the numerics of llama.cpp's non-flash CPU path on an
 * x86-64 AVX2+FMA build (backend_ref.c; every backend calls it so that they agree bit for bit):
 * query t, head h of `a`, written to a->out. Scratch: scores [a->kv->n_cells] floats,
 * fscratch [10 * head_dim] floats, qc [4 * head_dim + 64] bytes. Thread-safe for distinct
 * (t, h) and scratch.
 */
void muse_attn_head_ref(const struct muse_attn_args *a, int32_t t, int32_t h, float *scores, float *fscratch,
                        uint8_t *qc);

/* The scratch floats of a window attention over n_rows rows on nth threads (the packed keys,
 * the work counter and each thread's score rows). */
size_t muse_window_attn_scratch(int32_t n_rows, int32_t n_head, int32_t head_dim, int nth);

/*
 * The window attention every backend runs (backend_numerics.c), with `rows` as its kernel
 * (kernels.h muse_win_attn_rows_fn): this thread packs its rows' keys, barrier(bs), then claims
 * items (window, head, block of query rows) from the scratch's shared counter.
 */
struct muse_win_attn;
void muse_window_attn_share(const struct muse_window_attn_args *a,
                            void (*rows)(const struct muse_win_attn *, int32_t, int32_t, float *),
                            void (*barrier)(void *), void *bs, int ith, int nth);

extern const struct muse_backend_ops muse_backend_ref_ops;
extern const struct muse_backend_ops muse_backend_cpu_ops;  /* backend_cpu.c: threads + SIMD kernels */

/* The backend registered under `name` ("ref", "cpu", ...); NULL when unknown. */
const struct muse_backend_ops *muse_backend_find(const char *name);

/* Whether weights of `type` can be multiplied (has a reference dot product and activation format). */
bool muse_backend_type_supported(enum muse_type type);
