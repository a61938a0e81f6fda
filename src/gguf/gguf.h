/*
 * gguf.h - GGUF v2/v3 reader (pure parser over bytes + mmap loader) and a streaming writer.
 *
 * File layout (little-endian; see ../shared/spec/gguf-and-quants.md part 1):
 *   header      "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *   n_kv        records: string key, u32 value_type, value
 *   n_tensors   infos:   string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
 *   padding     to general.alignment (default 32)
 *   data        tensor i at data_start + offset_i, each padded to the alignment
 * A string is u64 length + bytes (no NUL). An array is u32 elem_type, u64 count, elements.
 *
 * The parser checks every count, length, offset and size with overflow-safe arithmetic and
 * never allocates more than a small multiple of the input size. On error it returns a
 * negative muse_status and fills `err` with one line naming the field and its byte offset.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"

enum muse_gguf_type {
    MUSE_GGUF_TYPE_UINT8   = 0,
    MUSE_GGUF_TYPE_INT8    = 1,
    MUSE_GGUF_TYPE_UINT16  = 2,
    MUSE_GGUF_TYPE_INT16   = 3,
    MUSE_GGUF_TYPE_UINT32  = 4,
    MUSE_GGUF_TYPE_INT32   = 5,
    MUSE_GGUF_TYPE_FLOAT32 = 6,
    MUSE_GGUF_TYPE_BOOL    = 7,
    MUSE_GGUF_TYPE_STRING  = 8,
    MUSE_GGUF_TYPE_ARRAY   = 9,
    MUSE_GGUF_TYPE_UINT64  = 10,
    MUSE_GGUF_TYPE_INT64   = 11,
    MUSE_GGUF_TYPE_FLOAT64 = 12,
    MUSE_GGUF_TYPE_COUNT   = 13
};

#define MUSE_GGUF_DEFAULT_ALIGNMENT 32
#define MUSE_GGUF_MAX_DIMS 4
#define MUSE_GGUF_MAX_NAME 64   /* tensor names are at most 63 bytes */

/* A string inside the file bytes: NOT NUL-terminated. */
struct muse_gguf_str {
    const char *data;
    uint64_t len;
};

/* A decoded metadata value. Scalars are widened; strings and arrays point into the file bytes. */
struct muse_gguf_value {
    enum muse_gguf_type type;
    union {
        uint64_t u64;   /* UINT8/16/32/64 */
        int64_t i64;    /* INT8/16/32/64 */
        double f64;     /* FLOAT32/64 (FLOAT32 widened exactly) */
        bool b;         /* BOOL */
        struct muse_gguf_str str;   /* STRING */
        struct {
            enum muse_gguf_type elem_type;  /* never ARRAY (nested arrays are rejected) */
            uint64_t count;
            const uint8_t *data;            /* raw little-endian elements (fixed-size types) */
            const struct muse_gguf_str *strs; /* STRING arrays: `count` entries, else NULL */
        } arr;
    } v;
};

struct muse_gguf_kv {
    const char *key;            /* NUL-terminated copy owned by the muse_gguf */
    uint64_t offset;            /* byte offset of the record in the file */
    struct muse_gguf_value value;
};

struct muse_gguf_tensor {
    char name[MUSE_GGUF_MAX_NAME]; /* NUL-terminated */
    uint32_t n_dims;
    int64_t ne[MUSE_GGUF_MAX_DIMS]; /* dims beyond n_dims are 1 */
    uint32_t type;              /* ggml type id (enum muse_type); validated against muse_type_layouts */
    uint64_t offset;            /* relative to data_start */
    uint64_t nbytes;
    int64_t n_elements;
    const void *data;           /* base + data_start + offset (inside the mapping) */
    uint64_t info_offset;       /* byte offset of the tensor-info record in the file */
};

/* A parsed file. Read-only after parse; safe to share between threads. */
struct muse_gguf {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    struct muse_gguf_kv *kv;            /* [n_kv] */
    uint64_t n_tensors;
    struct muse_gguf_tensor *tensors;   /* [n_tensors] */
    uint64_t data_start;                /* file offset of the data section */
    const uint8_t *base;                /* the file bytes */
    uint64_t size;                      /* their count */
    /* private: mapping and allocations */
    void *priv;
};

/*
 * Parse `size` bytes at `data`. The bytes must outlive the result (tensor data and strings
 * point into them). `name` is used in error messages (a file name; may be NULL).
 * On success *out owns a new muse_gguf (free with muse_gguf_free).
 */
muse_status muse_gguf_parse(const void *data, size_t size, const char *name,
                            struct muse_gguf **out, struct muse_error *err);

/* mmap `path` read-only and parse it. The mapping lives until muse_gguf_free. Pages fault in
 * as they are read (only the metadata, for a caller that never touches tensor data). */
muse_status muse_gguf_open(const char *path, struct muse_gguf **out, struct muse_error *err);

/* How muse_gguf_open_ex brings the bytes in (zeroed = muse_gguf_open's lazy mmap). */
struct muse_gguf_load_params {
    bool read;                 /* read the file into private anonymous memory instead of mapping it */
    bool populate;             /* mmap: fault every page in now (MADV_POPULATE_READ, else a read per page),
                                  as llama.cpp's MAP_POPULATE does; reading loads everything anyway */
    bool mlock;                /* lock the bytes in RAM (mlock); failing is an error (MUSE_ERR_IO, `ulimit -l`) */
    muse_progress_fn progress; /* NULL, or called every 32 MiB read or populated (done, total bytes);
                                  nonzero from it cancels: MUSE_ERR_CANCELLED */
    void *progress_user;
};

/* muse_gguf_open with a loading mode (params may be NULL: lazy mmap). Errors as muse_gguf_open,
 * plus MUSE_ERR_NOMEM (read mode), MUSE_ERR_IO (a failed read or mlock), MUSE_ERR_CANCELLED. The
 * memory lives until muse_gguf_free. */
muse_status muse_gguf_open_ex(const char *path, const struct muse_gguf_load_params *params, struct muse_gguf **out,
                              struct muse_error *err);

void muse_gguf_free(struct muse_gguf *gguf);

/* Lookups. Return NULL / -1 when absent. Linear time is fine for keys; tensor lookup is hashed. */
const struct muse_gguf_kv *muse_gguf_find_kv(const struct muse_gguf *gguf, const char *key);
const struct muse_gguf_tensor *muse_gguf_find_tensor(const struct muse_gguf *gguf, const char *name);

/*
 * Typed getters with llama.cpp's strictness: the stored type must be the expected one, except
 * that integer getters accept any integer type whose value fits. Return MUSE_OK, MUSE_ERR_MISSING
 * (absent; *out untouched) or MUSE_ERR_FORMAT (wrong type / out of range), with `err` naming the key.
 */
muse_status muse_gguf_get_u32(const struct muse_gguf *gguf, const char *key, uint32_t *out, struct muse_error *err);
muse_status muse_gguf_get_i64(const struct muse_gguf *gguf, const char *key, int64_t *out, struct muse_error *err);
muse_status muse_gguf_get_f32(const struct muse_gguf *gguf, const char *key, float *out, struct muse_error *err);
muse_status muse_gguf_get_bool(const struct muse_gguf *gguf, const char *key, bool *out, struct muse_error *err);
/* Returns a NUL-terminated copy in buf (truncation is an error). */
muse_status muse_gguf_get_str(const struct muse_gguf *gguf, const char *key, char *buf, size_t buf_size, struct muse_error *err);
/* An array of any element type; *out points at the value inside the gguf. */
muse_status muse_gguf_get_arr(const struct muse_gguf *gguf, const char *key, const struct muse_gguf_value **out, struct muse_error *err);

/*
 * The hyperparameter loaders' key reads (gguf_keys.c), over the getters above. A required key that
 * is absent is MUSE_ERR_MISSING "missing required key 'K'" (muse_gguf_key_missing); an optional
 * key that is absent leaves *out untouched, clears err and returns MUSE_OK (*found, when not NULL,
 * says whether it was there); a key of the wrong type is MUSE_ERR_FORMAT either way.
 * muse_gguf_arch_key writes "<arch>.<suffix>" into buf and returns buf.
 */
muse_status muse_gguf_key_missing(struct muse_error *err, const char *key);
muse_status muse_gguf_req_u32(const struct muse_gguf *gguf, const char *key, uint32_t *out, struct muse_error *err);
muse_status muse_gguf_opt_u32(const struct muse_gguf *gguf, const char *key, uint32_t *out, struct muse_error *err);
muse_status muse_gguf_req_f32(const struct muse_gguf *gguf, const char *key, float *out, struct muse_error *err);
muse_status muse_gguf_opt_f32(const struct muse_gguf *gguf, const char *key, float *out, bool *found,
                              struct muse_error *err);
const char *muse_gguf_arch_key(char *buf, size_t size, const char *arch, const char *suffix);

/*
 * llama.cpp's get_key_or_arr for a per-layer u32: a scalar (any integer type whose value fits) is
 * broadcast to out[0..n); an array must hold exactly n integers, each fitting in u32. Returns
 * MUSE_OK (*per_layer tells the form), MUSE_ERR_MISSING when absent (out untouched, err left
 * alone) or MUSE_ERR_FORMAT with `err` naming the key.
 */
muse_status muse_gguf_get_u32_per_layer(const struct muse_gguf *gguf, const char *key, uint32_t n, uint32_t *out,
                                        bool *per_layer, struct muse_error *err);

/* True for the eight integer value types (not BOOL). */
bool muse_gguf_type_is_int(enum muse_gguf_type type);

/* Element i of a fixed-size-type array, widened (no bounds check beyond MUSE_ASSERT). */
int64_t muse_gguf_arr_i64(const struct muse_gguf_value *arr, uint64_t i);
double muse_gguf_arr_f64(const struct muse_gguf_value *arr, uint64_t i);

const char *muse_gguf_type_name(enum muse_gguf_type type);
/* Bytes per element of a fixed-size type; 0 for STRING/ARRAY/invalid. */
size_t muse_gguf_type_size(enum muse_gguf_type type);

/* ---- writer ---------------------------------------------------------------------------
 * Streaming: add all metadata and tensor infos, then muse_gguf_writer_begin_data() writes
 * the header/metadata/infos and padding, then each tensor's bytes are written in info order
 * (in as many pieces as the caller likes) with muse_gguf_writer_write_data(); the writer pads
 * after each tensor. Nothing but the metadata is held in memory, so multi-GB files stream.
 */
struct muse_gguf_writer;

muse_status muse_gguf_writer_open(const char *path, struct muse_gguf_writer **out, struct muse_error *err);
/* Scalars and strings. Keys are copied. */
muse_status muse_gguf_writer_set_u32(struct muse_gguf_writer *w, const char *key, uint32_t v);
muse_status muse_gguf_writer_set_i32(struct muse_gguf_writer *w, const char *key, int32_t v);
muse_status muse_gguf_writer_set_f32(struct muse_gguf_writer *w, const char *key, float v);
muse_status muse_gguf_writer_set_bool(struct muse_gguf_writer *w, const char *key, bool v);
muse_status muse_gguf_writer_set_str(struct muse_gguf_writer *w, const char *key, const char *v);
/* Arrays of fixed-size elements (`data` holds count little-endian elements) and of strings. */
muse_status muse_gguf_writer_set_arr(struct muse_gguf_writer *w, const char *key, enum muse_gguf_type elem_type,
                                     const void *data, uint64_t count);
muse_status muse_gguf_writer_set_arr_str(struct muse_gguf_writer *w, const char *key,
                                         const char *const *strs, uint64_t count);
/* Any parsed value (e.g. copied from a muse_gguf being rewritten); nested arrays are refused. */
muse_status muse_gguf_writer_set_value(struct muse_gguf_writer *w, const char *key, const struct muse_gguf_value *v);
/* Declare a tensor (n_dims 1..4, ne[0] first). Its nbytes follows from the type traits. */
muse_status muse_gguf_writer_add_tensor(struct muse_gguf_writer *w, const char *name, uint32_t type,
                                        uint32_t n_dims, const int64_t *ne);
muse_status muse_gguf_writer_begin_data(struct muse_gguf_writer *w);
muse_status muse_gguf_writer_write_data(struct muse_gguf_writer *w, const void *data, size_t size);
/* Checks that every declared tensor got exactly its bytes, flushes, closes. Frees w either way. */
muse_status muse_gguf_writer_close(struct muse_gguf_writer *w, struct muse_error *err);
/* The first error the writer hit (for set_* calls that returned an error). */
const char *muse_gguf_writer_error(const struct muse_gguf_writer *w);
