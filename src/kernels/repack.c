/* repack.c - rows interleaved by 8 (repack.h). */
#include "kernels/repack.h"

#include <string.h>

#include "kernels/blocks.h"

/*
 * The interleaved form of a type: a row's block is `bytes` long, header fields first (the sizes of
 * the fields, in order; 0 ends the list), the code bytes from `codes` on. In the group's block a
 * header field at row offset o of size s goes to 8 o + s r (the 8 rows' copies of a field side by
 * side), code dword c of row r to 8 codes + 32 c + 4 r.
 */
struct r8_form {
    size_t bytes, codes;
    uint8_t fields[6];
};

static bool r8_form(enum muse_type type, struct r8_form *f) {
    switch (type) {
    case MUSE_TYPE_Q4_0:
    case MUSE_TYPE_IQ4_NL: *f = (struct r8_form){18, 2, {2}}; return true;       /* struct muse_block_r8x4 */
    case MUSE_TYPE_Q8_0: *f = (struct r8_form){34, 2, {2}}; return true;         /* struct muse_block_r8x8 */
    case MUSE_TYPE_IQ4_XS: *f = (struct r8_form){136, 8, {2, 2, 4}}; return true; /* struct muse_block_iq4_xs_r8 */
    case MUSE_TYPE_Q4_K: *f = (struct r8_form){144, 16, {2, 2, 4, 4, 4}}; return true; /* struct muse_block_q4_K_r8 */
    default: return false;
    }
}

bool muse_repack_r8_type(enum muse_type type) {
    struct r8_form f;
    return r8_form(type, &f);
}

/* row <-> group, block after block */
static void move(enum muse_type type, const void *src, size_t row_size, int64_t n_groups, void *dst, bool pack) {
    struct r8_form f;
    if (!r8_form(type, &f)) return;
    const int64_t nb = (int64_t)(row_size / f.bytes);
    for (int64_t g = 0; g < n_groups; g++) {
        uint8_t *grp = (uint8_t *)(pack ? dst : (void *)(uintptr_t)src) + (size_t)g * 8 * row_size;
        for (int r = 0; r < 8; r++) {
            uint8_t *row = (uint8_t *)(pack ? (void *)(uintptr_t)src : dst) + (size_t)(8 * g + r) * row_size;
            for (int64_t ib = 0; ib < nb; ib++) {
                uint8_t *gb = grp + (size_t)ib * 8 * f.bytes, *rb = row + (size_t)ib * f.bytes;
                size_t o = 0;
                for (int i = 0; i < 6 && f.fields[i]; o += f.fields[i++]) {
                    uint8_t *gf = gb + 8 * o + (size_t)f.fields[i] * r;
                    if (pack) memcpy(gf, rb + o, f.fields[i]);
                    else memcpy(rb + o, gf, f.fields[i]);
                }
                for (size_t c = 0; c < (f.bytes - f.codes) / 4; c++) {
                    uint8_t *gc = gb + 8 * f.codes + 32 * c + 4 * (size_t)r, *rc = rb + f.codes + 4 * c;
                    if (pack) memcpy(gc, rc, 4);
                    else memcpy(rc, gc, 4);
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
