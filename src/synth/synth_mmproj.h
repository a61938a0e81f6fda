/*
 * synth_mmproj.h - synthetic Muse-Glimmer vision projectors (`muse synth --mmproj`): an mmproj GGUF
 * with exactly the spec's clip.* keys and tensor names (vision.md 3.1, 3.3) at any dimensions,
 * random weights of sane scale (activations stay O(1) through any number of layers), matrices in
 * any matmul type; and a converter that rewrites an existing mmproj with its matrices in another
 * type (the quantized copies of the vision tests). Written through the streaming GGUF writer, so
 * the 30b preset (about 2 GB in Q8_0) needs a few MB of memory.
 */
#pragma once

#include <stdint.h>

#include "gguf/tensor_type.h"
#include "muse.h"

struct muse_synth_mmproj_config {
    char preset[16];          /* informative: goes into general.name */
    int32_t n_layer;          /* clip.vision.block_count */
    int32_t n_embd;           /* clip.vision.embedding_length */
    int32_t n_ff;             /* clip.vision.feed_forward_length */
    int32_t n_head;           /* clip.vision.attention.head_count (n_embd / n_head a multiple of 4) */
    int32_t patch_size;       /* clip.vision.patch_size */
    int32_t pos_side;         /* the position table is pos_side x pos_side (= the window side) */
    int32_t n_mm0, n_mm1;     /* adapter hidden widths (mm.0 / mm.1 rows) */
    int32_t n_out;            /* mm.2 rows: the text model's n_embd */
    enum muse_type type;      /* the tower's matrices (attn_*, ffn_*) */
    enum muse_type mm_type;   /* the adapter's matrices (mm.0, mm.1, mm.2) */
    uint64_t seed;
};

/* "tiny" (the shape of the golden vis-mmproj: 4 layers, n_embd 64, 4 heads, n_ff 128, patch 14,
 * 4 x 4 positions, adapter 256 -> 96 -> 96 -> 256, F32) or "30b" (Muse-Glimmer-30B's tower: 50
 * layers, n_embd 1536, 16 heads, n_ff 8960, patch 14, 32 x 32 positions, adapter 6144 -> 4096 ->
 * 4096 -> 6656, Q8_0 matrices). MUSE_ERR_INVALID_ARG for another name. */
muse_status muse_synth_mmproj_preset(const char *name, struct muse_synth_mmproj_config *cfg, struct muse_error *err);

/* Every dimension in range, head_dim a multiple of 4, each matrix's rows a whole number of blocks
 * of its type. MUSE_ERR_INVALID_ARG naming the problem. */
muse_status muse_synth_mmproj_validate(const struct muse_synth_mmproj_config *cfg, struct muse_error *err);

/* Write the projector to path (validates first; a failed write removes the file). */
muse_status muse_synth_mmproj_write(const struct muse_synth_mmproj_config *cfg, const char *path,
                                    struct muse_error *err);

/* Bytes of tensor data a config writes. */
uint64_t muse_synth_mmproj_data_bytes(const struct muse_synth_mmproj_config *cfg);

/*
 * Rewrite the mmproj at src to dst with every 2-D matrix of the tower and adapter (attn_*, ffn_*,
 * mm.*) converted to `type` (dequantized to f32, then quantized with the reference quantizer;
 * F32/F16/BF16 convert directly) and everything else copied byte for byte, keys included
 * (general.file_type updated). MUSE_ERR_INVALID_ARG when a matrix's rows are not a whole number
 * of blocks of type; the errors of reading and writing GGUF otherwise.
 */
muse_status muse_synth_mmproj_convert(const char *src, enum muse_type type, const char *dst, struct muse_error *err);
