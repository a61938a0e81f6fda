/* npy.c - see npy.h. Header: magic, version 1.0, a u16 length, a Python dict literal padded with
 * spaces and a newline so that the data starts at a multiple of 64 bytes. */
#include "npy.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

muse_status npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols, struct muse_error *err) {
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    const int total = (10 + n + 1 + 63) & ~63; /* magic(6) + version(2) + len(2) + dict + '\n' */
    const int pad = total - 10 - n - 1;
    FILE *f = fopen(path, "wb");
    if (!f) return muse_error_set(err, MUSE_ERR_IO, "cannot create '%s'", path);
    const uint16_t hlen = (uint16_t)(total - 10);
    const unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                                    (unsigned char)(hlen >> 8)};
    int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    if (fclose(f) != 0) ok = 0;
    return ok ? MUSE_OK : muse_error_set(err, MUSE_ERR_IO, "cannot write '%s'", path);
}
