/*
 * types.h - the numeric side of the ggml tensor types as one table (STYLE rule 10); the ids and
 * storage layouts are in gguf/tensor_type.h.
 *
 * Reference numerics: to_float is bit-exact with ggml's dequantize_row_*; from_float for the
 * activation formats (Q8_0, Q8_1, Q8_K, F16, BF16) rounds exactly as ggml's reference
 * quantizers (spec 2.11), and for the weight formats (Q4_0..Q5_1, Q2_K..Q6_K, TQ1_0/TQ2_0, Q1_0,
 * MXFP4, NVFP4) gives the bytes of ggml's quantize_row_<t>_ref (what llama-quantize writes
 * without an importance matrix); vec_dot_ref is the plain-C dot product of one weight row with one
 * activation row already in vec_dot_type, accumulated exactly as ggml's *_generic kernels do.
 */
#pragma once

#include "gguf/tensor_type.h"

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
    muse_to_float_fn to_float;     /* NULL for the integer types I8..I64 */
    muse_from_float_fn from_float; /* reference quantizer; NULL where muse has none (I-quants, IQ4_NL) */
    enum muse_type vec_dot_type;   /* activation format of the dot-product partner */
    muse_vec_dot_fn vec_dot_ref;   /* NULL for types that are never matmul weights */
};

/* Indexed by type id; rows of ids without a layout are all NULL. */
extern const struct muse_type_traits muse_type_traits[MUSE_TYPE_COUNT];
