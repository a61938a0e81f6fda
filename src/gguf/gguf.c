/*
 * gguf.c - lookups and typed getters over a parsed muse_gguf, and the value-type table.
 * The parser and loader are in gguf_read.c, the writer in gguf_write.c.
 */
#include <math.h>
#include <string.h>

#include "core/assert.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

// ---- value types ------------------------------------------------------------------------------

static const struct {
    const char *name;
    size_t size;
} value_types[MUSE_GGUF_TYPE_COUNT] = {
    [MUSE_GGUF_TYPE_UINT8] = {"UINT8", 1},     [MUSE_GGUF_TYPE_INT8] = {"INT8", 1},
    [MUSE_GGUF_TYPE_UINT16] = {"UINT16", 2},   [MUSE_GGUF_TYPE_INT16] = {"INT16", 2},
    [MUSE_GGUF_TYPE_UINT32] = {"UINT32", 4},   [MUSE_GGUF_TYPE_INT32] = {"INT32", 4},
    [MUSE_GGUF_TYPE_FLOAT32] = {"FLOAT32", 4}, [MUSE_GGUF_TYPE_BOOL] = {"BOOL", 1},
    [MUSE_GGUF_TYPE_STRING] = {"STRING", 0},   [MUSE_GGUF_TYPE_ARRAY] = {"ARRAY", 0},
    [MUSE_GGUF_TYPE_UINT64] = {"UINT64", 8},   [MUSE_GGUF_TYPE_INT64] = {"INT64", 8},
    [MUSE_GGUF_TYPE_FLOAT64] = {"FLOAT64", 8},
};

const char *muse_gguf_type_name(enum muse_gguf_type type) {
    if ((unsigned)type >= MUSE_GGUF_TYPE_COUNT) return "INVALID";
    return value_types[type].name;
}

size_t muse_gguf_type_size(enum muse_gguf_type type) {
    if ((unsigned)type >= MUSE_GGUF_TYPE_COUNT) return 0;
    return value_types[type].size;
}

static bool is_unsigned(enum muse_gguf_type t) {
    return t == MUSE_GGUF_TYPE_UINT8 || t == MUSE_GGUF_TYPE_UINT16 || t == MUSE_GGUF_TYPE_UINT32 ||
           t == MUSE_GGUF_TYPE_UINT64;
}

static bool is_signed(enum muse_gguf_type t) {
    return t == MUSE_GGUF_TYPE_INT8 || t == MUSE_GGUF_TYPE_INT16 || t == MUSE_GGUF_TYPE_INT32 ||
           t == MUSE_GGUF_TYPE_INT64;
}

// ---- lookups ----------------------------------------------------------------------------------

const struct muse_gguf_kv *muse_gguf_find_kv(const struct muse_gguf *g, const char *key) {
    const struct muse_gguf_priv *priv = g->priv;
    const struct muse_gguf_hash *h = &priv->kv_hash;
    if (!h->cap) return NULL;
    uint64_t mask = h->cap - 1;
    for (uint64_t s = muse_gguf_hash_bytes(key, strlen(key)) & mask;; s = (s + 1) & mask) {
        uint32_t e = h->slots[s];
        if (!e) return NULL;
        if (!strcmp(g->kv[e - 1].key, key)) return &g->kv[e - 1];
    }
}

const struct muse_gguf_tensor *muse_gguf_find_tensor(const struct muse_gguf *g, const char *name) {
    const struct muse_gguf_priv *priv = g->priv;
    const struct muse_gguf_hash *h = &priv->tensor_hash;
    if (!h->cap) return NULL;
    uint64_t mask = h->cap - 1;
    for (uint64_t s = muse_gguf_hash_bytes(name, strlen(name)) & mask;; s = (s + 1) & mask) {
        uint32_t e = h->slots[s];
        if (!e) return NULL;
        if (!strcmp(g->tensors[e - 1].name, name)) return &g->tensors[e - 1];
    }
}

// ---- typed getters ----------------------------------------------------------------------------

static muse_status find_typed(const struct muse_gguf *g, const char *key, const struct muse_gguf_kv **out,
                              struct muse_error *err) {
    *out = muse_gguf_find_kv(g, key);
    if (!*out) return muse_error_set(err, MUSE_ERR_MISSING, "key '%s' not found", key);
    return MUSE_OK;
}

static muse_status wrong_type(const struct muse_gguf_kv *kv, const char *want, struct muse_error *err) {
    return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' (record at byte %llu) has type %s, expected %s", kv->key,
                          (unsigned long long)kv->offset, muse_gguf_type_name(kv->value.type), want);
}

muse_status muse_gguf_get_u32(const struct muse_gguf *g, const char *key, uint32_t *out, struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    enum muse_gguf_type t = kv->value.type;
    if (is_unsigned(t) && kv->value.v.u64 <= UINT32_MAX) {
        *out = (uint32_t)kv->value.v.u64;
        return MUSE_OK;
    }
    if (is_signed(t) && kv->value.v.i64 >= 0 && kv->value.v.i64 <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)kv->value.v.i64;
        return MUSE_OK;
    }
    if (is_unsigned(t) || is_signed(t))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' (record at byte %llu): value %s%llu does not fit UINT32",
                              key, (unsigned long long)kv->offset, is_signed(t) && kv->value.v.i64 < 0 ? "-" : "",
                              is_signed(t) && kv->value.v.i64 < 0 ? 0ull - (unsigned long long)kv->value.v.i64
                                                                  : (unsigned long long)kv->value.v.u64);
    return wrong_type(kv, "UINT32", err);
}

muse_status muse_gguf_get_i64(const struct muse_gguf *g, const char *key, int64_t *out, struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    enum muse_gguf_type t = kv->value.type;
    if (is_signed(t)) {
        *out = kv->value.v.i64;
        return MUSE_OK;
    }
    if (is_unsigned(t)) {
        if (kv->value.v.u64 > (uint64_t)INT64_MAX)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' (record at byte %llu): value %llu does not fit INT64",
                                  key, (unsigned long long)kv->offset, (unsigned long long)kv->value.v.u64);
        *out = (int64_t)kv->value.v.u64;
        return MUSE_OK;
    }
    return wrong_type(kv, "an integer", err);
}

muse_status muse_gguf_get_f32(const struct muse_gguf *g, const char *key, float *out, struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->value.type != MUSE_GGUF_TYPE_FLOAT32) return wrong_type(kv, "FLOAT32", err);
    *out = (float)kv->value.v.f64;   /* exact: the value was widened from a float */
    return MUSE_OK;
}

muse_status muse_gguf_get_bool(const struct muse_gguf *g, const char *key, bool *out, struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->value.type != MUSE_GGUF_TYPE_BOOL) return wrong_type(kv, "BOOL", err);
    *out = kv->value.v.b;
    return MUSE_OK;
}

muse_status muse_gguf_get_str(const struct muse_gguf *g, const char *key, char *buf, size_t buf_size,
                              struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->value.type != MUSE_GGUF_TYPE_STRING) return wrong_type(kv, "STRING", err);
    const struct muse_gguf_str *s = &kv->value.v.str;
    if (buf_size == 0 || s->len > buf_size - 1)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' (record at byte %llu): string of %llu bytes is longer than %zu",
                              key, (unsigned long long)kv->offset, (unsigned long long)s->len,
                              buf_size ? buf_size - 1 : 0);
    if (memchr(s->data, 0, s->len))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' (record at byte %llu): string contains a NUL byte", key,
                              (unsigned long long)kv->offset);
    memcpy(buf, s->data, s->len);
    buf[s->len] = '\0';
    return MUSE_OK;
}

muse_status muse_gguf_get_arr(const struct muse_gguf *g, const char *key, const struct muse_gguf_value **out,
                              struct muse_error *err) {
    const struct muse_gguf_kv *kv;
    muse_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->value.type != MUSE_GGUF_TYPE_ARRAY) return wrong_type(kv, "ARRAY", err);
    *out = &kv->value;
    return MUSE_OK;
}

// ---- array elements ---------------------------------------------------------------------------

static uint64_t rd_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

bool muse_gguf_type_is_int(enum muse_gguf_type t) {
    switch (t) {
    case MUSE_GGUF_TYPE_UINT8: case MUSE_GGUF_TYPE_INT8: case MUSE_GGUF_TYPE_UINT16:
    case MUSE_GGUF_TYPE_INT16: case MUSE_GGUF_TYPE_UINT32: case MUSE_GGUF_TYPE_INT32:
    case MUSE_GGUF_TYPE_UINT64: case MUSE_GGUF_TYPE_INT64:
        return true;
    default:
        return false;
    }
}

muse_status muse_gguf_get_u32_per_layer(const struct muse_gguf *g, const char *key, uint32_t n, uint32_t *out,
                                        bool *per_layer, struct muse_error *err) {
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return MUSE_ERR_MISSING;
    *per_layer = kv->value.type == MUSE_GGUF_TYPE_ARRAY;
    if (!*per_layer) {
        uint32_t x;
        muse_status st = muse_gguf_get_u32(g, key, &x, err);
        if (st != MUSE_OK) return st;
        for (uint32_t il = 0; il < n; il++) out[il] = x;
        return MUSE_OK;
    }
    const struct muse_gguf_value *v = &kv->value;
    if (v->v.arr.count != n)
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' has wrong array length: expected %u (block_count), got %llu",
                              key, n, (unsigned long long)v->v.arr.count);
    if (!muse_gguf_type_is_int(v->v.arr.elem_type))
        return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s' is an array of %s, expected integers", key,
                              muse_gguf_type_name(v->v.arr.elem_type));
    for (uint32_t il = 0; il < n; il++) {
        int64_t x = muse_gguf_arr_i64(v, il);
        if (x < 0 || x > (int64_t)UINT32_MAX)
            return muse_error_set(err, MUSE_ERR_FORMAT, "key '%s'[%u] = %lld is out of range", key, il, (long long)x);
        out[il] = (uint32_t)x;
    }
    return MUSE_OK;
}

int64_t muse_gguf_arr_i64(const struct muse_gguf_value *arr, uint64_t i) {
    MUSE_ASSERT(arr->type == MUSE_GGUF_TYPE_ARRAY && i < arr->v.arr.count);
    enum muse_gguf_type t = arr->v.arr.elem_type;
    size_t n = muse_gguf_type_size(t);
    MUSE_ASSERT(n != 0);
    uint64_t raw = rd_le(arr->v.arr.data + i * n, n);
    switch (t) {
    case MUSE_GGUF_TYPE_INT8: return (int8_t)raw;
    case MUSE_GGUF_TYPE_INT16: return (int16_t)raw;
    case MUSE_GGUF_TYPE_INT32: return (int32_t)raw;
    case MUSE_GGUF_TYPE_INT64: return (int64_t)raw;
    case MUSE_GGUF_TYPE_UINT64: return raw > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)raw;
    case MUSE_GGUF_TYPE_BOOL: return raw != 0;
    case MUSE_GGUF_TYPE_FLOAT32:
    case MUSE_GGUF_TYPE_FLOAT64: {
        double d = muse_gguf_arr_f64(arr, i);
        if (isnan(d)) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    default: return (int64_t)raw;   /* UINT8/16/32 */
    }
}

double muse_gguf_arr_f64(const struct muse_gguf_value *arr, uint64_t i) {
    MUSE_ASSERT(arr->type == MUSE_GGUF_TYPE_ARRAY && i < arr->v.arr.count);
    enum muse_gguf_type t = arr->v.arr.elem_type;
    size_t n = muse_gguf_type_size(t);
    MUSE_ASSERT(n != 0);
    uint64_t raw = rd_le(arr->v.arr.data + i * n, n);
    if (t == MUSE_GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (t == MUSE_GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, &raw, 8);
        return d;
    }
    if (t == MUSE_GGUF_TYPE_UINT64) return (double)raw;
    return (double)muse_gguf_arr_i64(arr, i);
}
