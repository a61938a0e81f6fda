/*
 * backend.h - the small ops table through which the forward runs its heavy operations:
 * the matmul of a weight tensor with a batch of activation rows, and attention of a batch of
 * queries over one layer's KV cache. Everything else in the forward (norms, rope, gate, FFN
 * activation, residuals) is plain C in forward.c and is shared by every backend, so a backend
 * only has to get these two operations right.
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
};

/* Sizes a backend plans its scratch for (maxima over the model and context). */
struct muse_backend_plan {
    int32_t n_batch;      /* most activation rows per call */
    int64_t max_ne0;      /* longest weight row (matmul input dim) */
    uint32_t max_cells;   /* most KV cells of any layer */
    int32_t max_head_dim;
    int32_t n_threads;    /* >= 1; the ref backend ignores it */
};

struct muse_backend_ops {
    const char *name;
    /* Create the backend state for `plan` (allocates all scratch). */
    muse_status (*init)(const struct muse_backend_plan *plan, void **state, struct muse_error *err);
    void (*free)(void *state);
    /*
     * y[r][i] = dot(w row i, x[r]) for r < n_rows, i < w->ne1, where x[r] (w->ne0 floats) is first
     * converted to the weight type's vec_dot_type exactly as ggml's CPU backend does
     * (Q8_0/Q8_1/Q8_K/F16/BF16/F32). x: [n_rows][w->ne0], y: [n_rows][w->ne1]. n_rows <= plan n_batch.
     */
    void (*matmul)(void *state, const struct muse_weight *w, const float *x, int32_t n_rows, float *y);
    /* Attention as llama.cpp's non-flash CPU path computes it (see text-model.md 5.4). */
    void (*attention)(void *state, const struct muse_attn_args *args);
};

/*
 * One query head of the attention, with the numerics of llama.cpp's non-flash CPU path on an
 * x86-64 AVX2+FMA build (backend_ref.c; every backend calls it so that they agree bit for bit):
 * query t, head h of `a`, written to a->out. Scratch: scores [a->kv->n_cells] floats,
 * fscratch [10 * head_dim] floats, qc [4 * head_dim + 64] bytes. Thread-safe for distinct
 * (t, h) and scratch.
 */
void muse_attn_head_ref(const struct muse_attn_args *a, int32_t t, int32_t h, float *scores, float *fscratch,
                        uint8_t *qc);

extern const struct muse_backend_ops muse_backend_ref_ops;
extern const struct muse_backend_ops muse_backend_cpu_ops;  /* backend_cpu.c: threads + SIMD kernels */

/* The backend registered under `name` ("ref", "cpu", ...); NULL when unknown. */
const struct muse_backend_ops *muse_backend_find(const char *name);

/* Whether weights of `type` can be multiplied (has a reference dot product and activation format). */
bool muse_backend_type_supported(enum muse_type type);
