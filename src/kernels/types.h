/*
 * types.h - the ggml tensor types as one traits table (STYLE rule 10).
 *
 * Every standard id 0..41 of ../shared/spec/gguf-and-quants.md 2.1 has a row. Removed ids
 * (4, 5, 31-33, 36-38) and ids >= 42 have no row: muse_type_get() returns NULL for them and
 * loaders reject the tensor by name.
 *
 * Reference numerics: to_float is bit-exact with ggml's dequantize_row_*; from_float for the
 * activation formats (Q8_0, Q8_1, Q8_K, F16, BF16) rounds exactly as ggml's reference
 * quantizers (spec 2.11); vec_dot_ref is the plain-C dot product of one weight row with one
 * activation row already in vec_dot_type, accumulated exactly as ggml's *_generic kernels do.
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

/* Dequantize n elements (n a multiple of block_size) from x into y. */
typedef void (*muse_to_float_fn)(const void *x, float *y, int64_t n);
/* Quantize n elements (n a multiple of block_size) from x into y with reference rounding. */
typedef void (*muse_from_float_fn)(const float *x, void *y, int64_t n);
/*
 * *s = dot(x, y) over n elements: x is one row of this type, y one row of vec_dot_type
 * (n a multiple of both block sizes).
 */
typedef void (*muse_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

struct muse_type_traits {
    const char *name;          /* lower-case ggml name: "f32", "q4_k", "iq2_xxs", ... ; NULL = no such type */
    int64_t block_size;        /* elements per block */
    size_t type_size;          /* bytes per block */
    bool is_quantized;
    muse_to_float_fn to_float;     /* NULL for the integer types I8..I64 */
    muse_from_float_fn from_float; /* reference quantizer; NULL where none is needed (K/IQ weights) */
    enum muse_type vec_dot_type;   /* activation format of the dot-product partner */
    muse_vec_dot_fn vec_dot_ref;   /* NULL for types that are never matmul weights */
};

extern const struct muse_type_traits muse_type_traits[MUSE_TYPE_COUNT];

/* The traits of `id`, or NULL when the id is unknown, removed or out of range. */
const struct muse_type_traits *muse_type_get(uint32_t id);

/* Case-insensitive lookup by name ("q4_k", "IQ2_XXS"); -1 when unknown. */
int muse_type_from_name(const char *name);

/* Bytes of one row of ne0 elements (ne0 must be a multiple of the block size). */
size_t muse_type_row_size(enum muse_type type, int64_t ne0);

/* Bits per weight, 8 * type_size / block_size. */
double muse_type_bpw(enum muse_type type);
