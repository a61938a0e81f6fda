/* npy.h - write float32 arrays as NumPy .npy files (format version 1.0, C order). */
#pragma once

#include <stdint.h>

#include "muse.h"

/* Write data [rows][cols] as a float32 .npy of shape (rows, cols). Errors: MUSE_ERR_IO. */
muse_status npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols, struct muse_error *err);
