/*
 * tensors.h - tensor tables: the tensors of a model file described once, as data.
 *
 * A table is a constant array of struct muse_tensor_desc indexed by the model's own enum of
 * tensor roles (the shape of llama.cpp's LLM_TENSOR_* name table). An entry says all that the
 * file format fixes about one tensor: its GGUF name, whether it repeats per layer, its shape in
 * terms of the hyperparameters, what its data may be (an f32 vector or a matrix), and whether a
 * file must have it. Everything that walks the tensors of a file reads the table instead of
 * spelling the list again:
 *   - the loader binds by walking it (model/weights.c),
 *   - the synthetic writer writes the entries a converter writes (synth/synth.c),
 *   - the model tests' fixture builds its files from it (tests/model/model_fixture.h).
 * The Muse-Glimmer text model's table is below (muse_glimmer_tensors, spec text-model.md §4);
 * the vision projector (mmproj) and the DFlash drafter get tables of the same type.
 *
 * Conventions every table keeps (tests/model/test_tensors.c checks them for each table):
 *   - Order: entries stand in the order a converter writes the tensors. The per-layer entries
 *     form one contiguous run; a file holds the global entries before that run, then layer 0's
 *     tensors, layer 1's, ..., then the global entries after the run. The loader binds (and
 *     reports the first error) in the order globals first, then layer by layer.
 *   - The entries a converter writes are exactly the required ones (!optional); the optional
 *     entries are variants the loader accepts (fused projections, biases, scales).
 *   - An entry with `when` != MUSE_TENSOR_ALWAYS is looked at only when the entry `dep`, which
 *     stands earlier in the table and in the same scope (global or the same layer), is present
 *     (IF_PRESENT) or absent (IF_ABSENT). A fused variant and the tensors it replaces are one
 *     optional entry and the required entries IF_ABSENT on it.
 *   - Shapes are in GGUF `ne` order (ne[0] = row length = a matrix's input dim), as two ids of
 *     the table's own dimension enum (0 = none, so dims[1] == 0 is a 1-D tensor); the table's
 *     dimension function gives the values of those ids for a file, muse_tensor_shape the shape.
 *
 * Tables and the functions here are constant and pure: thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/hparams.h"

/* What a tensor's data may be; the loader's type checks follow from it (muse_tensor_bind). */
enum muse_tensor_kind {
    MUSE_TENSOR_VECTOR = 0, /* 1-D f32 only: a norm weight or a bias */
    MUSE_TENSOR_SCALE,      /* {1} f32 only: a per-tensor scale multiplying a matrix's product */
    MUSE_TENSOR_MATRIX,     /* a matmul weight: any type with a dot product, rows a whole number of
                               blocks of its type and of its activation (vec_dot) type */
    MUSE_TENSOR_ROWS,       /* a table read by rows (token embedding): any type with a dequantizer,
                               rows a whole number of blocks */
    MUSE_TENSOR_KIND_COUNT
};

/* When the loader looks at an entry (see `dep`). */
enum muse_tensor_when {
    MUSE_TENSOR_ALWAYS = 0,
    MUSE_TENSOR_IF_PRESENT, /* only when entry `dep` is present (e.g. the bias of a fused QKV) */
    MUSE_TENSOR_IF_ABSENT,  /* only when entry `dep` is absent (the tensors a fused variant replaces) */
    MUSE_TENSOR_WHEN_COUNT
};

/* One tensor of a model file. Fields left out of a designated initializer mean: global,
 * required, always looked at. */
struct muse_tensor_desc {
    const char *name;            /* GGUF name; per-layer entries: a printf pattern with one %u for the
                                    layer index ("blk.%u.attn_q.weight") */
    const char *role;            /* what the tensor is, one line (documentation, test messages) */
    enum muse_tensor_kind kind;
    bool per_layer;              /* one tensor per layer (else one per file) */
    bool optional;               /* a file may lack it (the converter never writes it) */
    uint8_t dims[2];             /* {ne0, ne1} as ids of the table's dimension enum; dims[1] = 0: 1-D */
    enum muse_tensor_when when;
    uint16_t dep;                /* the entry `when` depends on (an index into the same table) */
};

/*
 * The GGUF name of entry d (for layer il when d->per_layer; il is ignored otherwise) into buf.
 * Returns the length snprintf reports (>= size means it was cut).
 */
int muse_tensor_name(const struct muse_tensor_desc *d, uint32_t il, char *buf, size_t size);

/*
 * The expected shape of entry d, given dims[id] = the value of each dimension id of its table
 * (for the layer in question). Writes ne[0], ne[1] (ne[1] = 1 for a 1-D tensor) and returns
 * the number of dimensions, 1 or 2.
 */
int muse_tensor_shape(const struct muse_tensor_desc *d, const int64_t *dims, int64_t ne[2]);

/*
 * Find the tensor `name` (entry d) in `gguf` and bind it to *w, checking the shape (ne, n_dims;
 * every further dimension must be 1, llama.cpp's rule) and the type against d->kind. Errors
 * name the tensor:
 *   MUSE_ERR_MISSING      a required entry is absent;
 *   MUSE_ERR_SHAPE        "tensor 'X' has wrong shape: expected {a, b}, found {c, d}", a vector or
 *                         scale that is not f32, a row length that is not a whole number of blocks;
 *   MUSE_ERR_UNSUPPORTED  a matrix type without a matmul kernel, a rows type without a dequantizer.
 * An optional entry that is absent leaves *w zeroed (w->data == NULL) and returns MUSE_OK.
 * *w points into `gguf`, which must outlive it.
 */
muse_status muse_tensor_bind(const struct muse_gguf *gguf, const struct muse_tensor_desc *d, const char *name,
                             int n_dims, const int64_t ne[2], struct muse_weight *w, struct muse_error *err);

/* ---- Muse-Glimmer (text model, spec text-model.md §4) ---------------------------------------- */

/* The tensor roles of a Muse-Glimmer file: the indices of muse_glimmer_tensors, in file order. */
enum muse_glimmer_tensor {
    MUSE_GLIMMER_TOKEN_EMBD = 0,
    MUSE_GLIMMER_ATTN_NORM,           /* per layer from here to POST_FFW_NORM */
    MUSE_GLIMMER_ATTN_QKV,            /* optional fused Q|K|V ... */
    MUSE_GLIMMER_ATTN_QKV_BIAS,
    MUSE_GLIMMER_ATTN_QKV_SCALE,
    MUSE_GLIMMER_ATTN_Q,              /* ... or the three projections */
    MUSE_GLIMMER_ATTN_K,
    MUSE_GLIMMER_ATTN_V,
    MUSE_GLIMMER_ATTN_Q_BIAS,
    MUSE_GLIMMER_ATTN_K_BIAS,
    MUSE_GLIMMER_ATTN_V_BIAS,
    MUSE_GLIMMER_ATTN_Q_SCALE,
    MUSE_GLIMMER_ATTN_K_SCALE,
    MUSE_GLIMMER_ATTN_V_SCALE,
    MUSE_GLIMMER_ATTN_Q_NORM,
    MUSE_GLIMMER_ATTN_K_NORM,
    MUSE_GLIMMER_ATTN_GATE,
    MUSE_GLIMMER_ATTN_OUTPUT,
    MUSE_GLIMMER_ATTN_OUTPUT_SCALE,
    MUSE_GLIMMER_POST_ATTENTION_NORM,
    MUSE_GLIMMER_FFN_NORM,
    MUSE_GLIMMER_FFN_GATE,
    MUSE_GLIMMER_FFN_UP,
    MUSE_GLIMMER_FFN_DOWN,
    MUSE_GLIMMER_POST_FFW_NORM,
    MUSE_GLIMMER_OUTPUT_NORM,
    MUSE_GLIMMER_OUTPUT,
    MUSE_GLIMMER_OUTPUT_SCALE,
    MUSE_GLIMMER_TENSOR_COUNT
};

/* The dimension ids of the Muse-Glimmer table (values per layer: muse_glimmer_dims). */
enum muse_glimmer_dim {
    MUSE_GLIMMER_DIM_NONE = 0,
    MUSE_GLIMMER_DIM_ONE,      /* 1 (a scale) */
    MUSE_GLIMMER_DIM_EMBD,     /* n_embd */
    MUSE_GLIMMER_DIM_VOCAB,    /* n_vocab */
    MUSE_GLIMMER_DIM_HEAD_K,   /* head_dim_k of the layer (the Q/K norm length) */
    MUSE_GLIMMER_DIM_Q,        /* n_head * head_dim_k */
    MUSE_GLIMMER_DIM_K,        /* n_head_kv * head_dim_k */
    MUSE_GLIMMER_DIM_V,        /* n_head_kv * head_dim_v */
    MUSE_GLIMMER_DIM_QKV,      /* Q + K + V (fused projection) */
    MUSE_GLIMMER_DIM_FF,       /* n_ff of the layer */
    MUSE_GLIMMER_DIM_COUNT
};

/*
 * The Muse-Glimmer table. Not in it, as llama.cpp's muse-glimmer graph does not use them:
 * attn_gate.weight.scale and ffn_{gate,up,down}.weight.scale (a file may hold them; they are
 * not looked at).
 */
extern const struct muse_tensor_desc muse_glimmer_tensors[MUSE_GLIMMER_TENSOR_COUNT];

/*
 * dims[MUSE_GLIMMER_DIM_COUNT] for layer il of a file with hyperparameters hp (il < hp->n_layer)
 * and n_vocab tokens (the loader's n_vocab, which a file without a tokenizer takes from
 * token_embd).
 */
void muse_glimmer_dims(int64_t *dims, const struct muse_hparams *hp, uint32_t il, int64_t n_vocab);

/* dims[MUSE_GLIMMER_DIM_COUNT] of a model whose layers all have these sizes (synthetic writers). */
void muse_glimmer_dims_uniform(int64_t *dims, int64_t n_embd, int64_t n_vocab, int64_t n_head, int64_t n_head_kv,
                               int64_t head_dim, int64_t n_ff);
