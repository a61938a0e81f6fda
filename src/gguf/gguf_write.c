/*
 * gguf_write.c - the streaming GGUF v3 writer: metadata and tensor infos are collected in
 * memory, then written in the dense layout of gguf-and-quants.md 1.6 (exactly what gguf-py's
 * GGUFWriter and ggml's gguf_write produce); tensor bytes are streamed after that.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/tensor_type.h"

struct wtensor {
    char name[MUSE_GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[MUSE_GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t nbytes;
    uint64_t offset;    /* relative to data start; set by begin_data */
};

struct muse_gguf_writer {
    FILE *f;
    char *path;
    struct muse_error err;      /* first error; sticky */
    /* serialized kv records */
    uint8_t *meta;
    size_t meta_len, meta_cap;
    char **keys;                /* [n_kv] for duplicate detection */
    uint64_t n_kv, keys_cap;
    uint32_t alignment;
    struct wtensor *tensors;    /* [n_tensors] */
    uint64_t n_tensors, tensors_cap;
    /* streaming state */
    bool begun;
    uint64_t pos;               /* bytes written so far */
    uint64_t cur;               /* tensor receiving data */
    uint64_t cur_written;       /* its bytes so far */
};

// ---- helpers ----------------------------------------------------------------------------------

static muse_status wfail(struct muse_gguf_writer *w, muse_status st, const char *fmt, ...) MUSE_PRINTF(3, 4);
static muse_status wfail(struct muse_gguf_writer *w, muse_status st, const char *fmt, ...) {
    if (w->err.status == MUSE_OK) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        muse_error_set(&w->err, st, "%s: %s", w->path, msg);
    }
    return w->err.status;
}

static bool grow(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return true;
    uint64_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return false;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static muse_status meta_put(struct muse_gguf_writer *w, const void *data, size_t n) {
    uint64_t cap = w->meta_cap;
    if (w->meta_len + n < w->meta_len || !grow((void **)&w->meta, &cap, w->meta_len + n, 1))
        return wfail(w, MUSE_ERR_NOMEM, "out of memory for metadata");
    w->meta_cap = cap;
    if (n) memcpy(w->meta + w->meta_len, data, n);
    w->meta_len += n;
    return MUSE_OK;
}

static muse_status meta_u32(struct muse_gguf_writer *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return meta_put(w, b, 4);
}

static muse_status meta_u64(struct muse_gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    return meta_put(w, b, 8);
}

static muse_status meta_str(struct muse_gguf_writer *w, const char *s, uint64_t len) {
    muse_status st = meta_u64(w, len);
    return st ? st : meta_put(w, s, len);
}

/* Common start of every set_*: state checks, duplicate check, key + value type written. */
static muse_status begin_kv(struct muse_gguf_writer *w, const char *key, enum muse_gguf_type type) {
    if (w->err.status) return w->err.status;
    if (w->begun) return wfail(w, MUSE_ERR_INVALID_ARG, "key '%s' set after the data section began", key ? key : "");
    if (!key || !*key) return wfail(w, MUSE_ERR_INVALID_ARG, "empty key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return wfail(w, MUSE_ERR_INVALID_ARG, "duplicate key '%s'", key);
    if (!strcmp(key, "general.alignment") && type != MUSE_GGUF_TYPE_UINT32)
        return wfail(w, MUSE_ERR_INVALID_ARG, "general.alignment must be UINT32");
    if (!grow((void **)&w->keys, &w->keys_cap, w->n_kv + 1, sizeof(char *)))
        return wfail(w, MUSE_ERR_NOMEM, "out of memory for keys");
    char *copy = strdup(key);
    if (!copy) return wfail(w, MUSE_ERR_NOMEM, "out of memory for keys");
    w->keys[w->n_kv++] = copy;
    muse_status st = meta_str(w, key, strlen(key));
    return st ? st : meta_u32(w, (uint32_t)type);
}

/* strerror without the shared static buffer (GNU strerror_r). */
#define ERRSTR(buf) strerror_r(errno, buf, sizeof(buf))

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static muse_status out_bytes(struct muse_gguf_writer *w, const void *p, size_t n) {
    char eb[128];
    if (n && fwrite(p, 1, n, w->f) != n)
        return wfail(w, MUSE_ERR_IO, "write failed at byte %llu: %s", (unsigned long long)w->pos, ERRSTR(eb));
    w->pos += n;
    return MUSE_OK;
}

static muse_status out_pad(struct muse_gguf_writer *w) {
    static const uint8_t zeros[256];
    uint64_t n = align_up(w->pos, w->alignment) - w->pos;
    while (n) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        muse_status st = out_bytes(w, zeros, k);
        if (st) return st;
        n -= k;
    }
    return MUSE_OK;
}

// ---- open and metadata ------------------------------------------------------------------------

muse_status muse_gguf_writer_open(const char *path, struct muse_gguf_writer **out, struct muse_error *err) {
    struct muse_gguf_writer *w = NULL;
    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (!w) return muse_error_set(err, MUSE_ERR_NOMEM, "%s: out of memory", path);
    w->alignment = MUSE_GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    if (!w->path) {
        muse_error_set(err, MUSE_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        char eb[128];
        muse_error_set(err, MUSE_ERR_IO, "%s: cannot create: %s", path, ERRSTR(eb));
        goto fail;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    *out = w;
    return MUSE_OK;
fail:
    free(w->path);
    free(w);
    return err ? err->status : MUSE_ERR_IO;
}

muse_status muse_gguf_writer_set_u32(struct muse_gguf_writer *w, const char *key, uint32_t v) {
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_UINT32);
    if (st) return st;
    if (!strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1))) return wfail(w, MUSE_ERR_INVALID_ARG, "alignment %u is not a power of two", v);
        w->alignment = v;
    }
    return meta_u32(w, v);
}

muse_status muse_gguf_writer_set_i32(struct muse_gguf_writer *w, const char *key, int32_t v) {
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_INT32);
    return st ? st : meta_u32(w, (uint32_t)v);
}

muse_status muse_gguf_writer_set_f32(struct muse_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_FLOAT32);
    return st ? st : meta_u32(w, u);
}

muse_status muse_gguf_writer_set_bool(struct muse_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_BOOL);
    return st ? st : meta_put(w, &b, 1);
}

muse_status muse_gguf_writer_set_str(struct muse_gguf_writer *w, const char *key, const char *v) {
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_STRING);
    return st ? st : meta_str(w, v, strlen(v));
}

muse_status muse_gguf_writer_set_arr(struct muse_gguf_writer *w, const char *key, enum muse_gguf_type elem_type,
                                     const void *data, uint64_t count) {
    size_t esz = muse_gguf_type_size(elem_type);
    if (w->err.status) return w->err.status;
    if (esz == 0)
        return wfail(w, MUSE_ERR_INVALID_ARG, "key '%s': arrays of %s need set_arr_str or are not supported",
                     key ? key : "", muse_gguf_type_name(elem_type));
    if (count > SIZE_MAX / esz) return wfail(w, MUSE_ERR_INVALID_ARG, "key '%s': array too large", key ? key : "");
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_ARRAY);
    if (st || (st = meta_u32(w, (uint32_t)elem_type)) || (st = meta_u64(w, count))) return st;
    return meta_put(w, data, (size_t)count * esz);
}

muse_status muse_gguf_writer_set_arr_str(struct muse_gguf_writer *w, const char *key, const char *const *strs,
                                         uint64_t count) {
    muse_status st = begin_kv(w, key, MUSE_GGUF_TYPE_ARRAY);
    if (st || (st = meta_u32(w, MUSE_GGUF_TYPE_STRING)) || (st = meta_u64(w, count))) return st;
    for (uint64_t i = 0; i < count && !st; i++) st = meta_str(w, strs[i], strlen(strs[i]));
    return st;
}

muse_status muse_gguf_writer_set_value(struct muse_gguf_writer *w, const char *key,
                                       const struct muse_gguf_value *v) {
    muse_status st;
    uint8_t b[8];
    size_t n;
    switch (v->type) {
    case MUSE_GGUF_TYPE_STRING:
        st = begin_kv(w, key, v->type);
        return st ? st : meta_str(w, v->v.str.data, v->v.str.len);
    case MUSE_GGUF_TYPE_ARRAY:
        if (v->v.arr.elem_type == MUSE_GGUF_TYPE_STRING) {
            st = begin_kv(w, key, MUSE_GGUF_TYPE_ARRAY);
            if (st || (st = meta_u32(w, MUSE_GGUF_TYPE_STRING)) || (st = meta_u64(w, v->v.arr.count))) return st;
            for (uint64_t i = 0; i < v->v.arr.count && !st; i++)
                st = meta_str(w, v->v.arr.strs[i].data, v->v.arr.strs[i].len);
            return st;
        }
        return muse_gguf_writer_set_arr(w, key, v->v.arr.elem_type, v->v.arr.data, v->v.arr.count);
    case MUSE_GGUF_TYPE_BOOL:
        return muse_gguf_writer_set_bool(w, key, v->v.b);
    case MUSE_GGUF_TYPE_UINT32:
        if (v->v.u64 > UINT32_MAX) break;
        return muse_gguf_writer_set_u32(w, key, (uint32_t)v->v.u64);
    case MUSE_GGUF_TYPE_FLOAT32: {
        float f = (float)v->v.f64;
        uint32_t u;
        memcpy(&u, &f, 4);
        st = begin_kv(w, key, v->type);
        return st ? st : meta_u32(w, u);
    }
    case MUSE_GGUF_TYPE_FLOAT64: {
        uint64_t u;
        memcpy(&u, &v->v.f64, 8);
        st = begin_kv(w, key, v->type);
        return st ? st : meta_u64(w, u);
    }
    default: {
        n = muse_gguf_type_size(v->type);
        if (n == 0) break;
        /* integers: the low n bytes of the two's-complement / unsigned value, little-endian */
        uint64_t raw = (v->type == MUSE_GGUF_TYPE_INT8 || v->type == MUSE_GGUF_TYPE_INT16 ||
                        v->type == MUSE_GGUF_TYPE_INT32 || v->type == MUSE_GGUF_TYPE_INT64)
                           ? (uint64_t)v->v.i64
                           : v->v.u64;
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(raw >> (8 * i));
        st = begin_kv(w, key, v->type);
        return st ? st : meta_put(w, b, n);
    }
    }
    return wfail(w, MUSE_ERR_INVALID_ARG, "key '%s': invalid value of type %s", key ? key : "",
                 muse_gguf_type_name(v->type));
}

// ---- tensors and data -------------------------------------------------------------------------

muse_status muse_gguf_writer_add_tensor(struct muse_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                        const int64_t *ne) {
    if (w->err.status) return w->err.status;
    if (w->begun) return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s' added after the data section began", name);
    size_t len = strlen(name);
    if (len >= MUSE_GGUF_MAX_NAME)
        return wfail(w, MUSE_ERR_INVALID_ARG, "tensor name '%s' is longer than %d bytes", name, MUSE_GGUF_MAX_NAME - 1);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name)) return wfail(w, MUSE_ERR_INVALID_ARG, "duplicate tensor '%s'", name);
    if (n_dims < 1 || n_dims > MUSE_GGUF_MAX_DIMS)
        return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s': n_dims %u outside 1..%d", name, n_dims, MUSE_GGUF_MAX_DIMS);
    const struct muse_type_layout *layout = muse_type_layout_get(type);
    if (!layout) return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s': unknown type id %u", name, type);
    struct wtensor t = {.n_dims = n_dims, .type = type};
    memcpy(t.name, name, len + 1);
    int64_t n = 1;
    for (int d = 0; d < MUSE_GGUF_MAX_DIMS; d++) t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0 || __builtin_mul_overflow(n, ne[d], &n))
            return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s': bad dimension ne[%u] = %lld", name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % layout->block_size)
        return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld",
                     name, (long long)t.ne[0], layout->name, (long long)layout->block_size);
    if (__builtin_mul_overflow((uint64_t)(n / layout->block_size), (uint64_t)layout->type_size, &t.nbytes))
        return wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s': byte size overflows", name);
    if (!grow((void **)&w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof(*w->tensors)))
        return wfail(w, MUSE_ERR_NOMEM, "out of memory for tensor infos");
    w->tensors[w->n_tensors++] = t;
    return MUSE_OK;
}

muse_status muse_gguf_writer_begin_data(struct muse_gguf_writer *w) {
    muse_status st;
    if (w->err.status) return w->err.status;
    if (w->begun) return wfail(w, MUSE_ERR_INVALID_ARG, "begin_data called twice");
    w->begun = true;
    uint8_t hdr[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    for (int i = 0; i < 8; i++) {
        hdr[8 + i] = (uint8_t)(w->n_tensors >> (8 * i));
        hdr[16 + i] = (uint8_t)(w->n_kv >> (8 * i));
    }
    if ((st = out_bytes(w, hdr, sizeof(hdr))) || (st = out_bytes(w, w->meta, w->meta_len))) return st;
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        struct wtensor *t = &w->tensors[i];
        uint8_t b[8 + MUSE_GGUF_MAX_NAME + 4 + 8 * MUSE_GGUF_MAX_DIMS + 4 + 8];
        size_t n = 0, len = strlen(t->name);
        t->offset = off;
        off += align_up(t->nbytes, w->alignment);
        for (int k = 0; k < 8; k++) b[n++] = (uint8_t)((uint64_t)len >> (8 * k));
        memcpy(b + n, t->name, len);
        n += len;
        for (int k = 0; k < 4; k++) b[n++] = (uint8_t)(t->n_dims >> (8 * k));
        for (uint32_t d = 0; d < t->n_dims; d++)
            for (int k = 0; k < 8; k++) b[n++] = (uint8_t)((uint64_t)t->ne[d] >> (8 * k));
        for (int k = 0; k < 4; k++) b[n++] = (uint8_t)(t->type >> (8 * k));
        for (int k = 0; k < 8; k++) b[n++] = (uint8_t)(t->offset >> (8 * k));
        if ((st = out_bytes(w, b, n))) return st;
    }
    return out_pad(w);
}

/* Skip finished (and zero-byte) tensors, padding after each. */
static muse_status advance(struct muse_gguf_writer *w) {
    while (w->cur < w->n_tensors && w->cur_written == w->tensors[w->cur].nbytes) {
        muse_status st = out_pad(w);
        if (st) return st;
        w->cur++;
        w->cur_written = 0;
    }
    return MUSE_OK;
}

muse_status muse_gguf_writer_write_data(struct muse_gguf_writer *w, const void *data, size_t size) {
    const uint8_t *p = data;
    muse_status st;
    if (w->err.status) return w->err.status;
    if (!w->begun) return wfail(w, MUSE_ERR_INVALID_ARG, "write_data before begin_data");
    while (size) {
        if ((st = advance(w))) return st;
        if (w->cur >= w->n_tensors)
            return wfail(w, MUSE_ERR_INVALID_ARG, "%zu bytes of data beyond the last declared tensor", size);
        uint64_t want = w->tensors[w->cur].nbytes - w->cur_written;
        size_t k = want < size ? (size_t)want : size;
        if ((st = out_bytes(w, p, k))) return st;
        w->cur_written += k;
        p += k;
        size -= k;
    }
    return advance(w);
}

muse_status muse_gguf_writer_close(struct muse_gguf_writer *w, struct muse_error *err) {
    muse_status st = w->err.status;
    if (!st && !w->begun) st = muse_gguf_writer_begin_data(w);
    if (!st) st = advance(w);
    if (!st && w->cur < w->n_tensors)
        st = wfail(w, MUSE_ERR_INVALID_ARG, "tensor '%s' got %llu of its %llu bytes", w->tensors[w->cur].name,
                   (unsigned long long)w->cur_written, (unsigned long long)w->tensors[w->cur].nbytes);
    char eb[128];
    if (fclose(w->f) != 0 && !st) st = wfail(w, MUSE_ERR_IO, "close failed: %s", ERRSTR(eb));
    if (st) {
        unlink(w->path);   /* never leave a half-written model behind */
        if (err) *err = w->err;
    } else {
        muse_error_clear(err);
    }
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    free(w->meta);
    free(w->tensors);
    free(w->path);
    free(w);
    return st;
}

const char *muse_gguf_writer_error(const struct muse_gguf_writer *w) { return w->err.msg; }
