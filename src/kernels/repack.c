/* repack.c - rows interleaved by 8 (repack.h). */
#include "kernels/repack.h"

#include <string.h>

#include "kernels/blocks.h"

bool muse_repack_r8_type(enum muse_type type) {
    return type == MUSE_TYPE_Q4_0 || type == MUSE_TYPE_IQ4_NL || type == MUSE_TYPE_Q8_0;
}

/* Bytes of a row's block (a fp16 scale, then the code bytes) and of its code bytes. Q4_0 and IQ4_NL:
 * 18 and 16 (struct muse_block_r8x4 per 8 rows); Q8_0: 34 and 32 (struct muse_block_r8x8). */
static size_t block_bytes(enum muse_type type) { return type == MUSE_TYPE_Q8_0 ? 34 : 18; }

/* row <-> group: code dword c of row r of block ib at group block ib's qs + 32 c + 4 r */
static void move(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst, bool pack) {
    const size_t bb = block_bytes(type), qb = bb - 2;
    const int64_t nb = (int64_t)(row_size / bb);
    for (int64_t g = 0; g < n_groups; g++) {
        uint8_t *grp = (uint8_t *)(pack ? dst : (void *)(uintptr_t)src) + (size_t)g * 8 * row_size;
        for (int r = 0; r < 8; r++) {
            uint8_t *row = (uint8_t *)(pack ? (void *)(uintptr_t)src : dst) + (size_t)(8 * g + r) * row_size;
            for (int64_t ib = 0; ib < nb; ib++) {
                uint8_t *gb = grp + (size_t)ib * 8 * bb, *rb = row + (size_t)ib * bb;
                if (pack) memcpy(gb + 2 * r, rb, 2);
                else memcpy(rb, gb + 2 * r, 2);
                for (size_t c = 0; c < qb / 4; c++) {
                    if (pack) memcpy(gb + 16 + 32 * c + 4 * r, rb + 2 + 4 * c, 4);
                    else memcpy(rb + 2 + 4 * c, gb + 16 + 32 * c + 4 * r, 4);
                }
            }
        }
    }
}

void muse_repack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst) {
    move(type, src, row_size, n_groups, dst, true);
}

void muse_unpack_r8(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst) {
    move(type, src, row_size, n_groups, dst, false);
}
