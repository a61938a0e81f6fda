/*
 * tensor_type.h - the ggml tensor type ids and their storage layout: what the file format
 * needs to size and validate tensors. The numeric side (dequantize, quantize, dot products)
 * is src/kernels/types.h, one floor up.
 *
 * Every standard id 0..41 of ../shared/spec/gguf-and-quants.md 2.1 has a row. Removed ids
 * (4, 5, 31-33, 36-38) and ids >= 42 have no row: muse_type_layout_get() returns NULL for them
 * and loaders reject the tensor by name.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum muse_type {
    MUSE_TYPE_F32     = 0,
    MUSE_TYPE_F16     = 1,
    MUSE_TYPE_Q4_0    = 2,
    MUSE_TYPE_Q4_1    = 3,
    MUSE_TYPE_Q5_0    = 6,
    MUSE_TYPE_Q5_1    = 7,
    MUSE_TYPE_Q8_0    = 8,
    MUSE_TYPE_Q8_1    = 9,
    MUSE_TYPE_Q2_K    = 10,
    MUSE_TYPE_Q3_K    = 11,
    MUSE_TYPE_Q4_K    = 12,
    MUSE_TYPE_Q5_K    = 13,
    MUSE_TYPE_Q6_K    = 14,
    MUSE_TYPE_Q8_K    = 15,
    MUSE_TYPE_IQ2_XXS = 16,
    MUSE_TYPE_IQ2_XS  = 17,
    MUSE_TYPE_IQ3_XXS = 18,
    MUSE_TYPE_IQ1_S   = 19,
    MUSE_TYPE_IQ4_NL  = 20,
    MUSE_TYPE_IQ3_S   = 21,
    MUSE_TYPE_IQ2_S   = 22,
    MUSE_TYPE_IQ4_XS  = 23,
    MUSE_TYPE_I8      = 24,
    MUSE_TYPE_I16     = 25,
    MUSE_TYPE_I32     = 26,
    MUSE_TYPE_I64     = 27,
    MUSE_TYPE_F64     = 28,
    MUSE_TYPE_IQ1_M   = 29,
    MUSE_TYPE_BF16    = 30,
    MUSE_TYPE_TQ1_0   = 34,
    MUSE_TYPE_TQ2_0   = 35,
    MUSE_TYPE_MXFP4   = 39,
    MUSE_TYPE_NVFP4   = 40,
    MUSE_TYPE_Q1_0    = 41,
    MUSE_TYPE_COUNT   = 42
};

struct muse_type_layout {
    const char *name;      /* lower-case ggml name: "f32", "q4_k", "iq2_xxs"; NULL = no such type */
    int64_t block_size;    /* elements per block */
    size_t type_size;      /* bytes per block */
    bool is_quantized;     /* block_size > 1 */
};

extern const struct muse_type_layout muse_type_layouts[MUSE_TYPE_COUNT];

/* The layout of `id`, or NULL when the id is unknown, removed or out of range. */
const struct muse_type_layout *muse_type_layout_get(uint32_t id);

/* Case-insensitive lookup by name ("q4_k", "IQ2_XXS"); -1 when unknown. */
int muse_type_from_name(const char *name);

/* Bytes of one row of ne0 elements (ne0 must be a multiple of the block size). */
size_t muse_type_row_size(enum muse_type type, int64_t ne0);

/* Bits per weight, 8 * type_size / block_size. */
double muse_type_bpw(enum muse_type type);
