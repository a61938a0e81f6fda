/* repack.c - rows interleaved by 8 (repack.h). */
#include "kernels/repack.h"

#include <string.h>

#include "kernels/blocks.h"

bool muse_repack_r8_type(enum muse_type type) { return type == MUSE_TYPE_Q4_0 || type == MUSE_TYPE_IQ4_NL; }

void muse_repack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst) {
    (void)type; /* Q4_0 and IQ4_NL blocks have the same fields */
    const int64_t nb = (int64_t)(row_size / sizeof(struct muse_block_q4_0));
    for (int64_t g = 0; g < n_groups; g++) {
        struct muse_block_r8x4 *out = (struct muse_block_r8x4 *)((char *)dst + (size_t)g * 8 * row_size);
        for (int64_t ib = 0; ib < nb; ib++) {
            for (int r = 0; r < 8; r++) {
                const struct muse_block_q4_0 *b =
                    (const struct muse_block_q4_0 *)((const char *)src + (size_t)(8 * g + r) * row_size) + ib;
                out[ib].d[r] = b->d;
                for (int c = 0; c < 4; c++) memcpy(out[ib].qs + 32 * c + 4 * r, b->qs + 4 * c, 4);
            }
        }
    }
}

void muse_unpack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst) {
    (void)type;
    const int64_t nb = (int64_t)(row_size / sizeof(struct muse_block_q4_0));
    for (int64_t g = 0; g < n_groups; g++) {
        const struct muse_block_r8x4 *in = (const struct muse_block_r8x4 *)((const char *)src + (size_t)g * 8 * row_size);
        for (int r = 0; r < 8; r++) {
            struct muse_block_q4_0 *b = (struct muse_block_q4_0 *)((char *)dst + (size_t)(8 * g + r) * row_size);
            for (int64_t ib = 0; ib < nb; ib++) {
                b[ib].d = in[ib].d[r];
                for (int c = 0; c < 4; c++) memcpy(b[ib].qs + 4 * c, in[ib].qs + 32 * c + 4 * r, 4);
            }
        }
    }
}
