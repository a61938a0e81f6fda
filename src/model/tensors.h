/*
 * tensors.h - tensor tables: the tensors of a model file described once, as data.
 *
 * A table is a constant array of struct muse_tensor_desc indexed by the model's own enum of
 * tensor roles (the shape of llama.cpp's LLM_TENSOR_* name table). An entry says all that the
 * file format fixes about one tensor: its GGUF name, whether it repeats per layer, its shape in
 * terms of the hyperparameters, what its data may be (an f32 vector or a matrix), and whether a
 * file must have it. Everything that walks the tensors of a file reads the table instead of
 * spelling the list again:
 *   - the loader binds by walking it (muse_tensors_bind),
 *   - the synthetic writers write the entries a converter writes (muse_tensors_walk in file order),
 *   - a device upload (or a split over devices) can walk the bound views the same way,
 *   - the model tests' fixture builds its files from it (tests/model/model_fixture.h).
 * Three tables, one type, one binder, one walk: the Muse-Glimmer text model's is below
 * (muse_glimmer_tensors, spec text-model.md §4), the vision projector's (mmproj) is
 * muse_vision_table (vision/vision.h, spec vision.md §3.3), the DFlash drafter's
 * muse_dflash_table (speculative/dflash_tensors.h, spec dflash.md §2.3).
 *
 * Conventions every table keeps (tests/model/test_tensors.c checks them for each table):
 *   - Order: entries stand in the order a converter writes the tensors. The per-layer entries
 *     form one contiguous run; a file holds the global entries before that run, then layer 0's
 *     tensors, layer 1's, ..., then the global entries after the run. A loader binds (and
 *     reports the first error) in its table's bind_order.
 *   - The entries a converter writes are exactly the required ones (!optional); the optional
 *     entries are variants the loader accepts (fused projections, biases, scales).
 *   - An entry with `when` != MUSE_TENSOR_ALWAYS is looked at only when the entry `dep`, which
 *     stands earlier in the table and in the same scope (global or the same layer), is present
 *     (IF_PRESENT) or absent (IF_ABSENT). A fused variant and the tensors it replaces are one
 *     optional entry and the required entries IF_ABSENT on it.
 *   - Shapes are in GGUF `ne` order (ne[0] = row length = a matrix's input dim), as ids of the
 *     table's own dimension enum (0 = none, so dims[1] == 0 is a 1-D tensor); the table's
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

#define MUSE_TENSOR_MAX_DIMS 4      /* dims of a table entry (the tower's patch kernel has 4) */
#define MUSE_TENSOR_MAX_DIM_IDS 16  /* ids of a table's dimension enum */

/* What a tensor's data may be; the binder's type checks follow from it (muse_tensors_bind). */
enum muse_tensor_kind {
    MUSE_TENSOR_VECTOR = 0, /* 1-D f32 only: a norm weight or a bias */
    MUSE_TENSOR_SCALE,      /* {1} f32 only: a per-tensor scale multiplying a matrix's product; binds its
                               value (1.0 when absent) and a found flag, not a view */
    MUSE_TENSOR_MATRIX,     /* a matmul weight: any type with a dot product, rows a whole number of
                               blocks of its type and of its activation (vec_dot) type */
    MUSE_TENSOR_ROWS,       /* a table read by rows (token embedding): any type with a dequantizer,
                               rows a whole number of blocks */
    MUSE_TENSOR_FLOAT,      /* f32, f16 or bf16 only (the tower's patch kernel and position table,
                               converted to f32 by their loader) */
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
    uint8_t dims[MUSE_TENSOR_MAX_DIMS]; /* ne0, ne1, ... as ids of the table's dimension enum; the
                                    first 0 ends the shape ({a} is 1-D, {a, b} 2-D) */
    enum muse_tensor_when when;
    uint16_t dep;                /* the entry `when` depends on (an index into the same table) */
    uint16_t offset;             /* where it binds: offsetof its struct muse_weight in the owning
                                    struct (the weights struct; per-layer entries: the layer struct);
                                    a SCALE: offsetof its float value */
    uint16_t found;              /* a SCALE: offsetof its bool found flag */
};

/* The order of a walk over a table's tensors. */
enum muse_tensor_order {
    MUSE_TENSOR_ORDER_FILE = 0,      /* as a converter writes them: the global entries before the
                                        per-layer run, layer 0's run, layer 1's, ..., the global
                                        entries after the run */
    MUSE_TENSOR_ORDER_GLOBALS_FIRST, /* every global entry, then layer by layer */
    MUSE_TENSOR_ORDER_ENTRIES,       /* table order, a per-layer entry for every layer at once */
    MUSE_TENSOR_ORDER_COUNT
};

/* How a loader words its type errors (each kept as it has always been; the checks are the same):
 * TEXT and DFLASH report a type without a matmul kernel as MUSE_ERR_UNSUPPORTED, VISION as
 * MUSE_ERR_SHAPE; the row-length messages differ in the block sizes they name. */
enum muse_tensor_wording {
    MUSE_TENSOR_WORDING_TEXT = 0,
    MUSE_TENSOR_WORDING_VISION,
    MUSE_TENSOR_WORDING_DFLASH,
    MUSE_TENSOR_WORDING_COUNT
};

/* A network's table: its entries and what the binder needs to know about them. */
struct muse_tensor_table {
    const struct muse_tensor_desc *desc;
    uint16_t n_desc;
    uint8_t n_dim_ids;           /* ids of its dimension enum (0 = none, then 1 .. n_dim_ids - 1) */
    bool bind_dims;              /* a dimension whose value is 0 is taken from the first tensor that
                                    has it and must agree everywhere else (the mmproj's adapter widths) */
    const char *const *dim_names; /* [n_dim_ids] names for shape errors ("expected {64} = {n_embd}"), or NULL */
    enum muse_tensor_order bind_order; /* the order the loader binds in (and so reports the first error) */
    enum muse_tensor_wording wording;
    size_t layer_size;           /* sizeof the per-layer struct the per-layer entries bind into */
};

/* One use of a table: a file's (or a synthetic writer's) layers and dimensions, and where the views
 * go. */
struct muse_tensor_net {
    const struct muse_tensor_table *table;
    uint32_t n_layer;
    int64_t dims[MUSE_TENSOR_MAX_DIM_IDS]; /* the value of each dimension id (dims[0] unused) */
    /* when the dimensions vary by layer: rewrites dims for layer il (0 for the global entries); NULL
     * when they do not */
    void (*layer_dims)(int64_t *dims, uint32_t il, const void *ctx);
    const void *dims_ctx;
    void *weights;               /* the owning struct the global entries bind into, or NULL (a walk
                                    over names and shapes only: every optional entry counts as absent) */
    void *layers;                /* [n_layer] structs of table->layer_size (with weights) */
};

/* What a walk hands its function for one tensor. */
struct muse_tensor_visit {
    int id;                      /* the entry's index in the table */
    const struct muse_tensor_desc *desc;
    uint32_t il;                 /* the layer (0 for a global entry) */
    const char *name;
    int n_dims;
    int64_t ne[MUSE_TENSOR_MAX_DIMS]; /* the expected shape (1 past n_dims; 0 for a dimension bind_dims
                                         has not bound yet) */
    char *base;                  /* the struct the entry binds into (weights or layer il), or NULL */
};

/* The view of a bound entry (NULL for a walk without weights and for a SCALE). */
struct muse_weight *muse_tensor_view(const struct muse_tensor_visit *v);

typedef muse_status (*muse_tensor_visit_fn)(struct muse_tensor_net *net, const struct muse_tensor_visit *v, void *user);

/*
 * Call fn for every tensor of net in `order`, skipping the entries whose `when` rules them out
 * (deps are read from the bound views, so a walk that binds sees its own earlier binds). An
 * optional entry the file lacks is visited too: its view's data is NULL (a device upload skips
 * it). The first status other than MUSE_OK stops the walk and is returned.
 */
muse_status muse_tensors_walk(struct muse_tensor_net *net, enum muse_tensor_order order, muse_tensor_visit_fn fn,
                              void *user);

/*
 * Bind every tensor of net->table found in `gguf` into net->weights / net->layers (which the
 * caller allocates, zeroed), in the table's bind_order, checking each as muse_tensor_bind does;
 * with bind_dims, a dimension that is 0 in net->dims takes its value from the file. used, when not
 * NULL, is [gguf->n_tensors] and gets true for every tensor bound (a loader that refuses tensors it
 * does not know reports the others). Stops at the first error. Views point into `gguf`.
 */
muse_status muse_tensors_bind(struct muse_tensor_net *net, const struct muse_gguf *gguf, bool *used,
                              struct muse_error *err);

/*
 * The GGUF name of entry d (for layer il when d->per_layer; il is ignored otherwise) into buf.
 * Returns the length snprintf reports (>= size means it was cut).
 */
int muse_tensor_name(const struct muse_tensor_desc *d, uint32_t il, char *buf, size_t size);

/*
 * The expected shape of entry d, given dims[id] = the value of each dimension id of its table
 * (for the layer in question). Writes ne[0 .. MUSE_TENSOR_MAX_DIMS) (1 past the entry's
 * dimensions) and returns the number of dimensions.
 */
int muse_tensor_shape(const struct muse_tensor_desc *d, const int64_t *dims, int64_t *ne);

/*
 * Find the tensor `name` (entry d) in `gguf` and bind it to *w, checking the shape (ne, n_dims;
 * every further dimension must be 1, llama.cpp's rule) and the type against d->kind, worded as
 * the text loader words it. Errors name the tensor:
 *   MUSE_ERR_MISSING      a required entry is absent;
 *   MUSE_ERR_SHAPE        "tensor 'X' has wrong shape: expected {a, b}, found {c, d}", a vector or
 *                         scale that is not f32, a row length that is not a whole number of blocks;
 *   MUSE_ERR_UNSUPPORTED  a matrix type without a matmul kernel, a rows type without a dequantizer.
 * An optional entry that is absent leaves *w zeroed (w->data == NULL) and returns MUSE_OK.
 * *w points into `gguf`, which must outlive it.
 */
muse_status muse_tensor_bind(const struct muse_gguf *gguf, const struct muse_tensor_desc *d, const char *name,
                             int n_dims, const int64_t *ne, struct muse_weight *w, struct muse_error *err);

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
extern const struct muse_tensor_table muse_glimmer_table; /* binds into struct muse_weights (model/weights.h) */

/*
 * dims[MUSE_GLIMMER_DIM_COUNT] for layer il of a file with hyperparameters hp (il < hp->n_layer)
 * and n_vocab tokens (the loader's n_vocab, which a file without a tokenizer takes from
 * token_embd).
 */
void muse_glimmer_dims(int64_t *dims, const struct muse_hparams *hp, uint32_t il, int64_t n_vocab);

/* dims[MUSE_GLIMMER_DIM_COUNT] of a model whose layers all have these sizes (synthetic writers). */
void muse_glimmer_dims_uniform(int64_t *dims, int64_t n_embd, int64_t n_vocab, int64_t n_head, int64_t n_head_kv,
                               int64_t head_dim, int64_t n_ff);
