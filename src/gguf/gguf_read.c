/*
 * gguf_read.c - the GGUF v2/v3 parser (a pure function over bytes), the mmap loader and
 * muse_gguf_free. Every check of gguf-and-quants.md 1.8 is made here, with overflow-safe
 * arithmetic; no allocation is sized from a count before the count has been checked against
 * the bytes that remain in the input.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"
#include "gguf/tensor_type.h"

#define GGUF_MAGIC_LE 0x46554747u
#define GGUF_HEADER_SIZE 24
/* Smallest possible records: key len + 1-byte key + type + 1-byte value; name len + n_dims +
 * one ne + type + offset (an empty tensor name is accepted, as ggml does). */
#define MIN_KV_RECORD 14
#define MIN_TENSOR_INFO 32

// ---- reader state and error reporting ------------------------------------------------------

struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    char name[128];     /* file name for messages (printable) */
    char ctx[200];      /* the record being read, e.g. "key 'x' (record at byte 24)" */
    struct muse_error *err;
};

/* Copy `len` bytes of untrusted text into dst as one printable line (bytes outside 0x20..0x7e
 * become '?', long text is cut with "..."). */
static void printable(char *dst, size_t dst_size, const char *src, uint64_t len) {
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 1 < dst_size; i++) {
        if (n + 4 >= dst_size && i + 1 < len) {
            memcpy(dst + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = (unsigned char)src[i];
        dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    dst[n] = '\0';
}

static muse_status rd_fail(struct rd *r, muse_status status, const char *fmt, ...) MUSE_PRINTF(3, 4);
static muse_status rd_fail(struct rd *r, muse_status status, const char *fmt, ...) {
    char detail[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return muse_error_set(r->err, status, "%s: %s: %s", r->name, r->ctx, detail);
}

static uint64_t rd_left(const struct rd *r) { return r->size - r->pos; }

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* Check that `n` bytes of `field` can be read at the current position. */
static muse_status rd_need(struct rd *r, const char *field, uint64_t n) {
    if (n <= rd_left(r)) return MUSE_OK;
    return rd_fail(r, MUSE_ERR_FORMAT, "truncated: %s at byte %llu needs %llu bytes, %llu left", field,
                   (unsigned long long)r->pos, (unsigned long long)n, (unsigned long long)rd_left(r));
}

static muse_status rd_u32(struct rd *r, const char *field, uint32_t *out) {
    muse_status st = rd_need(r, field, 4);
    if (st) return st;
    *out = le32(r->p + r->pos);
    r->pos += 4;
    return MUSE_OK;
}

static muse_status rd_u64(struct rd *r, const char *field, uint64_t *out) {
    muse_status st = rd_need(r, field, 8);
    if (st) return st;
    *out = le64(r->p + r->pos);
    r->pos += 8;
    return MUSE_OK;
}

/* A string: u64 length + bytes; the length is checked against the bytes left. */
static muse_status rd_str(struct rd *r, const char *field, struct muse_gguf_str *s) {
    uint64_t at = r->pos, len;
    muse_status st = rd_need(r, field, 8);
    if (st) return st;
    len = le64(r->p + r->pos);
    r->pos += 8;
    if (len > rd_left(r))
        return rd_fail(r, MUSE_ERR_FORMAT, "%s length %llu (at byte %llu) exceeds the %llu bytes left", field,
                       (unsigned long long)len, (unsigned long long)at, (unsigned long long)rd_left(r));
    s->data = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return MUSE_OK;
}

// ---- name hash --------------------------------------------------------------------------------

typedef const char *(*name_of_fn)(const struct muse_gguf *g, uint32_t i);

static const char *kv_name(const struct muse_gguf *g, uint32_t i) { return g->kv[i].key; }
static const char *tensor_name(const struct muse_gguf *g, uint32_t i) { return g->tensors[i].name; }

static muse_status hash_init(struct muse_gguf_hash *h, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    h->slots = calloc(cap, sizeof(uint32_t));
    if (!h->slots) return MUSE_ERR_NOMEM;
    h->cap = cap;
    return MUSE_OK;
}

/* Insert record i named `name`; returns the index of an existing record of that name, or -1. */
static int64_t hash_insert(struct muse_gguf_hash *h, const struct muse_gguf *g, name_of_fn name_of, uint32_t i,
                           const char *name) {
    uint64_t mask = h->cap - 1;
    for (uint64_t s = muse_gguf_hash_bytes(name, strlen(name)) & mask;; s = (s + 1) & mask) {
        uint32_t e = h->slots[s];
        if (!e) {
            h->slots[s] = i + 1;
            return -1;
        }
        if (!strcmp(name_of(g, e - 1), name)) return (int64_t)e - 1;
    }
}

// ---- values -----------------------------------------------------------------------------------

/* Read one value of `type` (already validated < MUSE_GGUF_TYPE_COUNT) into v. */
static muse_status rd_value(struct rd *r, uint32_t type, struct muse_gguf_value *v) {
    muse_status st;
    const uint8_t *q;
    v->type = (enum muse_gguf_type)type;
    if (type == MUSE_GGUF_TYPE_STRING) return rd_str(r, "string value", &v->v.str);
    if (type == MUSE_GGUF_TYPE_ARRAY) {
        uint64_t at = r->pos;
        uint32_t et;
        uint64_t count;
        if ((st = rd_u32(r, "array element type", &et))) return st;
        if (et >= MUSE_GGUF_TYPE_COUNT)
            return rd_fail(r, MUSE_ERR_FORMAT, "array element type %u (at byte %llu) is not a GGUF value type (0..12)",
                           et, (unsigned long long)at);
        if (et == MUSE_GGUF_TYPE_ARRAY)
            return rd_fail(r, MUSE_ERR_UNSUPPORTED, "nested array (at byte %llu) is not supported",
                           (unsigned long long)at);
        if ((st = rd_u64(r, "array count", &count))) return st;
        v->v.arr.elem_type = (enum muse_gguf_type)et;
        v->v.arr.count = count;
        v->v.arr.data = r->p + r->pos;
        v->v.arr.strs = NULL;
        if (et == MUSE_GGUF_TYPE_STRING) {
            if (count > rd_left(r) / 8)
                return rd_fail(r, MUSE_ERR_FORMAT,
                               "array of %llu strings (at byte %llu) cannot fit in the %llu bytes left",
                               (unsigned long long)count, (unsigned long long)at, (unsigned long long)rd_left(r));
            if (count == 0) return MUSE_OK;
            struct muse_gguf_str *strs = calloc(count, sizeof(*strs));
            if (!strs) return rd_fail(r, MUSE_ERR_NOMEM, "out of memory for %llu strings", (unsigned long long)count);
            v->v.arr.strs = strs;   /* owned by the kv from now on (freed by muse_gguf_free) */
            for (uint64_t i = 0; i < count; i++)
                if ((st = rd_str(r, "array string", &strs[i]))) return st;
            return MUSE_OK;
        }
        size_t esz = muse_gguf_type_size((enum muse_gguf_type)et);
        if (count > rd_left(r) / esz)
            return rd_fail(r, MUSE_ERR_FORMAT,
                           "array of %llu %s (at byte %llu) needs more than the %llu bytes left",
                           (unsigned long long)count, muse_gguf_type_name((enum muse_gguf_type)et),
                           (unsigned long long)at, (unsigned long long)rd_left(r));
        r->pos += count * esz;
        return MUSE_OK;
    }
    size_t n = muse_gguf_type_size((enum muse_gguf_type)type);
    if ((st = rd_need(r, "value", n))) return st;
    q = r->p + r->pos;
    r->pos += n;
    switch ((enum muse_gguf_type)type) {
    case MUSE_GGUF_TYPE_UINT8: v->v.u64 = q[0]; break;
    case MUSE_GGUF_TYPE_INT8: v->v.i64 = (int8_t)q[0]; break;
    case MUSE_GGUF_TYPE_UINT16: v->v.u64 = le16(q); break;
    case MUSE_GGUF_TYPE_INT16: v->v.i64 = (int16_t)le16(q); break;
    case MUSE_GGUF_TYPE_UINT32: v->v.u64 = le32(q); break;
    case MUSE_GGUF_TYPE_INT32: v->v.i64 = (int32_t)le32(q); break;
    case MUSE_GGUF_TYPE_UINT64: v->v.u64 = le64(q); break;
    case MUSE_GGUF_TYPE_INT64: v->v.i64 = (int64_t)le64(q); break;
    case MUSE_GGUF_TYPE_FLOAT32: {
        uint32_t u = le32(q);
        float f;
        memcpy(&f, &u, 4);
        v->v.f64 = f;
        break;
    }
    case MUSE_GGUF_TYPE_FLOAT64: {
        uint64_t u = le64(q);
        memcpy(&v->v.f64, &u, 8);
        break;
    }
    case MUSE_GGUF_TYPE_BOOL: v->v.b = q[0] != 0; break;   /* ggml and gguf-py: non-zero = true */
    default: break;
    }
    return MUSE_OK;
}

// ---- header, metadata, tensor infos -----------------------------------------------------------

static muse_status parse_header(struct rd *r, struct muse_gguf *g, uint64_t *n_kv, uint64_t *n_tensors) {
    snprintf(r->ctx, sizeof(r->ctx), "header");
    if (r->size < GGUF_HEADER_SIZE)
        return rd_fail(r, MUSE_ERR_FORMAT, "file is %llu bytes, shorter than the 24-byte GGUF header",
                       (unsigned long long)r->size);
    uint32_t magic = le32(r->p);
    if (magic != GGUF_MAGIC_LE)
        return rd_fail(r, MUSE_ERR_FORMAT, "bad magic %02x %02x %02x %02x at byte 0 (expected 'GGUF')", r->p[0],
                       r->p[1], r->p[2], r->p[3]);
    uint32_t version = le32(r->p + 4);
    if (version == 0)
        return rd_fail(r, MUSE_ERR_FORMAT, "version 0 at byte 4 is invalid");
    if ((version & 0xFFFF) == 0)
        return rd_fail(r, MUSE_ERR_UNSUPPORTED, "version field 0x%08x at byte 4: a big-endian GGUF file (not supported)",
                       version);
    if (version == 1)
        return rd_fail(r, MUSE_ERR_UNSUPPORTED, "version 1 at byte 4 is obsolete (need 2 or 3)");
    if (version > 3)
        return rd_fail(r, MUSE_ERR_UNSUPPORTED, "version %u at byte 4 is newer than 3", version);
    g->version = version;
    *n_tensors = le64(r->p + 8);
    *n_kv = le64(r->p + 16);
    r->pos = GGUF_HEADER_SIZE;
    if (*n_tensors > (uint64_t)INT64_MAX)
        return rd_fail(r, MUSE_ERR_FORMAT, "tensor_count %llu at byte 8 is negative as i64",
                       (unsigned long long)*n_tensors);
    if (*n_kv > (uint64_t)INT64_MAX)
        return rd_fail(r, MUSE_ERR_FORMAT, "kv_count %llu at byte 16 is negative as i64", (unsigned long long)*n_kv);
    uint64_t left = rd_left(r);
    if (*n_kv > left / MIN_KV_RECORD)
        return rd_fail(r, MUSE_ERR_FORMAT, "kv_count %llu at byte 16 cannot fit in the %llu bytes left",
                       (unsigned long long)*n_kv, (unsigned long long)left);
    if (*n_tensors > left / MIN_TENSOR_INFO)
        return rd_fail(r, MUSE_ERR_FORMAT, "tensor_count %llu at byte 8 cannot fit in the %llu bytes left",
                       (unsigned long long)*n_tensors, (unsigned long long)left);
    if (*n_kv * MIN_KV_RECORD + *n_tensors * MIN_TENSOR_INFO > left)
        return rd_fail(r, MUSE_ERR_FORMAT, "kv_count %llu and tensor_count %llu cannot fit in the %llu bytes left",
                       (unsigned long long)*n_kv, (unsigned long long)*n_tensors, (unsigned long long)left);
    if (*n_kv >= UINT32_MAX || *n_tensors >= UINT32_MAX)
        return rd_fail(r, MUSE_ERR_UNSUPPORTED, "kv_count %llu / tensor_count %llu: more than 2^32-2 records",
                       (unsigned long long)*n_kv, (unsigned long long)*n_tensors);
    return MUSE_OK;
}

static muse_status parse_kvs(struct rd *r, struct muse_gguf *g, uint64_t n_kv) {
    struct muse_gguf_priv *priv = g->priv;
    muse_status st;
    if (n_kv) {
        g->kv = calloc(n_kv, sizeof(*g->kv));
        if (!g->kv) return rd_fail(r, MUSE_ERR_NOMEM, "out of memory for %llu kv records", (unsigned long long)n_kv);
    }
    g->n_kv = n_kv;
    if ((st = hash_init(&priv->kv_hash, n_kv))) return rd_fail(r, st, "out of memory for the key hash");
    for (uint64_t i = 0; i < n_kv; i++) {
        struct muse_gguf_kv *kv = &g->kv[i];
        struct muse_gguf_str key;
        char shown[96];
        kv->offset = r->pos;
        snprintf(r->ctx, sizeof(r->ctx), "kv record %llu (at byte %llu)", (unsigned long long)i,
                 (unsigned long long)kv->offset);
        if ((st = rd_str(r, "key", &key))) return st;
        if (key.len == 0) return rd_fail(r, MUSE_ERR_FORMAT, "empty key");
        if (memchr(key.data, 0, key.len)) return rd_fail(r, MUSE_ERR_FORMAT, "key contains a NUL byte");
        char *copy = malloc(key.len + 1);
        if (!copy) return rd_fail(r, MUSE_ERR_NOMEM, "out of memory for a key");
        memcpy(copy, key.data, key.len);
        copy[key.len] = '\0';
        kv->key = copy;
        printable(shown, sizeof(shown), key.data, key.len);
        snprintf(r->ctx, sizeof(r->ctx), "key '%s' (record at byte %llu)", shown, (unsigned long long)kv->offset);
        int64_t dup = hash_insert(&priv->kv_hash, g, kv_name, (uint32_t)i, copy);
        if (dup >= 0)
            return rd_fail(r, MUSE_ERR_FORMAT, "duplicate key (first record at byte %llu)",
                           (unsigned long long)g->kv[dup].offset);
        uint32_t type;
        uint64_t type_at = r->pos;
        if ((st = rd_u32(r, "value type", &type))) return st;
        if (type >= MUSE_GGUF_TYPE_COUNT)
            return rd_fail(r, MUSE_ERR_FORMAT, "value type %u (at byte %llu) is not a GGUF value type (0..12)", type,
                           (unsigned long long)type_at);
        if ((st = rd_value(r, type, &kv->value))) return st;
        if (!strcmp(copy, "general.alignment")) {
            if (type != MUSE_GGUF_TYPE_UINT32)
                return rd_fail(r, MUSE_ERR_FORMAT, "general.alignment has type %s (at byte %llu), must be UINT32",
                               muse_gguf_type_name((enum muse_gguf_type)type), (unsigned long long)type_at);
            uint64_t a = kv->value.v.u64;
            if (a == 0 || (a & (a - 1)))
                return rd_fail(r, MUSE_ERR_FORMAT, "alignment %llu (at byte %llu) is not a non-zero power of two",
                               (unsigned long long)a, (unsigned long long)(type_at + 4));
            g->alignment = (uint32_t)a;
        }
    }
    return MUSE_OK;
}

static muse_status parse_tensor_info(struct rd *r, struct muse_gguf *g, uint64_t i) {
    struct muse_gguf_tensor *t = &g->tensors[i];
    struct muse_gguf_str name;
    char shown[96];
    muse_status st;
    t->info_offset = r->pos;
    snprintf(r->ctx, sizeof(r->ctx), "tensor info %llu (at byte %llu)", (unsigned long long)i,
             (unsigned long long)t->info_offset);
    if ((st = rd_str(r, "tensor name", &name))) return st;
    if (name.len >= MUSE_GGUF_MAX_NAME) {
        printable(shown, 40, name.data, name.len);
        return rd_fail(r, MUSE_ERR_FORMAT, "tensor name '%s' is %llu bytes, longer than %d", shown,
                       (unsigned long long)name.len, MUSE_GGUF_MAX_NAME - 1);
    }
    if (memchr(name.data, 0, name.len)) return rd_fail(r, MUSE_ERR_FORMAT, "tensor name contains a NUL byte");
    memcpy(t->name, name.data, name.len);
    t->name[name.len] = '\0';
    printable(shown, sizeof(shown), name.data, name.len);
    snprintf(r->ctx, sizeof(r->ctx), "tensor '%s' (info at byte %llu)", shown, (unsigned long long)t->info_offset);
    int64_t dup = hash_insert(&((struct muse_gguf_priv *)g->priv)->tensor_hash, g, tensor_name, (uint32_t)i, t->name);
    if (dup >= 0)
        return rd_fail(r, MUSE_ERR_FORMAT, "duplicate tensor name (first info at byte %llu)",
                       (unsigned long long)g->tensors[dup].info_offset);
    uint64_t at = r->pos;
    if ((st = rd_u32(r, "n_dims", &t->n_dims))) return st;
    if (t->n_dims < 1 || t->n_dims > MUSE_GGUF_MAX_DIMS)
        return rd_fail(r, MUSE_ERR_FORMAT, "n_dims %u (at byte %llu) is outside 1..%d", t->n_dims,
                       (unsigned long long)at, MUSE_GGUF_MAX_DIMS);
    int64_t n_elements = 1;
    for (int d = 0; d < MUSE_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        at = r->pos;
        if ((st = rd_u64(r, "ne", &ne))) return st;
        if (ne > (uint64_t)INT64_MAX)
            return rd_fail(r, MUSE_ERR_FORMAT, "ne[%u] = %llu (at byte %llu) is negative as i64", d,
                           (unsigned long long)ne, (unsigned long long)at);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elements, (int64_t)ne, &n_elements))
            return rd_fail(r, MUSE_ERR_FORMAT, "element count overflows int64 at ne[%u] = %llu (at byte %llu)", d,
                           (unsigned long long)ne, (unsigned long long)at);
    }
    t->n_elements = n_elements;
    at = r->pos;
    if ((st = rd_u32(r, "type", &t->type))) return st;
    const struct muse_type_layout *layout = muse_type_layout_get(t->type);
    if (!layout) {
        bool removed = t->type == 4 || t->type == 5 || (t->type >= 31 && t->type <= 33) ||
                       (t->type >= 36 && t->type <= 38);
        return rd_fail(r, MUSE_ERR_UNSUPPORTED, "type id %u (at byte %llu) is %s", t->type, (unsigned long long)at,
                       removed ? "a removed type" : "an unknown type");
    }
    if (t->ne[0] % layout->block_size)
        return rd_fail(r, MUSE_ERR_FORMAT, "ne[0] = %lld is not a multiple of the %s block size %lld",
                       (long long)t->ne[0], layout->name, (long long)layout->block_size);
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)(n_elements / layout->block_size), (uint64_t)layout->type_size, &nbytes) ||
        nbytes > (uint64_t)SIZE_MAX)
        return rd_fail(r, MUSE_ERR_FORMAT, "byte size of %lld %s elements overflows", (long long)n_elements,
                       layout->name);
    t->nbytes = nbytes;
    return rd_u64(r, "offset", &t->offset);
}

struct span {
    uint64_t begin, end;
    uint32_t idx;
};

static int span_cmp(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Data placement: alignment, inside the file, no overlaps. */
static muse_status check_data(struct rd *r, struct muse_gguf *g) {
    struct span *spans = NULL;
    muse_status st = MUSE_OK;
    uint64_t n_spans = 0;
    if (g->n_tensors) {
        spans = malloc(g->n_tensors * sizeof(*spans));
        if (!spans) return rd_fail(r, MUSE_ERR_NOMEM, "out of memory checking tensor placement");
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct muse_gguf_tensor *t = &g->tensors[i];
        char shown[96];
        printable(shown, sizeof(shown), t->name, strlen(t->name));
        snprintf(r->ctx, sizeof(r->ctx), "tensor '%s' (info at byte %llu)", shown, (unsigned long long)t->info_offset);
        uint64_t begin, end;
        if (t->offset % g->alignment) {
            st = rd_fail(r, MUSE_ERR_FORMAT, "offset %llu is not a multiple of the alignment %u",
                         (unsigned long long)t->offset, g->alignment);
            goto done;
        }
        if (__builtin_add_overflow(g->data_start, t->offset, &begin) ||
            __builtin_add_overflow(begin, t->nbytes, &end) || end > g->size) {
            st = rd_fail(r, MUSE_ERR_FORMAT,
                         "data (offset %llu + %llu bytes from data start %llu) lies past the end of the file (%llu bytes)",
                         (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                         (unsigned long long)g->data_start, (unsigned long long)g->size);
            goto done;
        }
        t->data = g->base + begin;
        if (t->nbytes) spans[n_spans++] = (struct span){begin, end, (uint32_t)i};
    }
    if (n_spans > 1) qsort(spans, n_spans, sizeof(*spans), span_cmp);
    for (uint64_t k = 1; k < n_spans; k++) {
        if (spans[k].begin < spans[k - 1].end) {
            const struct muse_gguf_tensor *a = &g->tensors[spans[k - 1].idx], *b = &g->tensors[spans[k].idx];
            char sa[96], sb[96];
            printable(sa, sizeof(sa), a->name, strlen(a->name));
            printable(sb, sizeof(sb), b->name, strlen(b->name));
            snprintf(r->ctx, sizeof(r->ctx), "tensor '%s' (info at byte %llu)", sb, (unsigned long long)b->info_offset);
            st = rd_fail(r, MUSE_ERR_FORMAT, "data at offset %llu overlaps tensor '%s' (offset %llu, %llu bytes)",
                         (unsigned long long)b->offset, sa, (unsigned long long)a->offset,
                         (unsigned long long)a->nbytes);
            goto done;
        }
    }
    /* llama.cpp's rule (gguf_init_from_file): in info order, each tensor's data starts where the
     * previous one's ends, padded to the alignment - the packed sequence ggml writes. A gap (say
     * after a zero-sized tensor), a reordering or padding beyond the alignment is refused, as
     * llama.cpp refuses it, so a file muse accepts is one llama.cpp accepts. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        if (t->offset != expect) {
            char shown[96];
            printable(shown, sizeof(shown), t->name, strlen(t->name));
            snprintf(r->ctx, sizeof(r->ctx), "tensor '%s' (info at byte %llu)", shown, (unsigned long long)t->info_offset);
            st = rd_fail(r, MUSE_ERR_FORMAT,
                         "offset %llu, expected %llu: tensor data must follow the previous tensor's, padded to the "
                         "alignment %u (ggml's layout; llama.cpp refuses this file too)",
                         (unsigned long long)t->offset, (unsigned long long)expect, g->alignment);
            goto done;
        }
        /* cannot overflow: the data lies inside the file (checked above) and alignment <= 2^31 */
        expect += (t->nbytes + g->alignment - 1) / g->alignment * g->alignment;
    }
done:
    free(spans);
    return st;
}

// ---- entry points -----------------------------------------------------------------------------

muse_status muse_gguf_parse(const void *data, size_t size, const char *name, struct muse_gguf **out,
                            struct muse_error *err) {
    struct rd r = {.p = data, .size = size, .pos = 0, .err = err};
    struct muse_gguf *g = NULL;
    uint64_t n_kv = 0, n_tensors = 0;
    muse_status st;
    const char *nm = name ? name : "<memory>";
    printable(r.name, sizeof(r.name), nm, strlen(nm));
    *out = NULL;
    if (!data && size) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s: NULL data", r.name);

    g = calloc(1, sizeof(*g));
    if (!g) return muse_error_set(err, MUSE_ERR_NOMEM, "%s: out of memory", r.name);
    g->priv = calloc(1, sizeof(struct muse_gguf_priv));
    if (!g->priv) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "%s: out of memory", r.name);
        goto fail;
    }
    g->base = data;
    g->size = size;
    g->alignment = MUSE_GGUF_DEFAULT_ALIGNMENT;

    if ((st = parse_header(&r, g, &n_kv, &n_tensors))) goto fail;
    if ((st = parse_kvs(&r, g, n_kv))) goto fail;

    snprintf(r.ctx, sizeof(r.ctx), "tensor infos (at byte %llu)", (unsigned long long)r.pos);
    if (n_tensors > rd_left(&r) / MIN_TENSOR_INFO) {
        st = rd_fail(&r, MUSE_ERR_FORMAT, "tensor_count %llu (header byte 8) cannot fit in the %llu bytes left",
                     (unsigned long long)n_tensors, (unsigned long long)rd_left(&r));
        goto fail;
    }
    if (n_tensors) {
        g->tensors = calloc(n_tensors, sizeof(*g->tensors));
        if (!g->tensors) {
            st = rd_fail(&r, MUSE_ERR_NOMEM, "out of memory for %llu tensor infos", (unsigned long long)n_tensors);
            goto fail;
        }
    }
    g->n_tensors = n_tensors;
    if ((st = hash_init(&((struct muse_gguf_priv *)g->priv)->tensor_hash, n_tensors))) {
        st = rd_fail(&r, st, "out of memory for the tensor hash");
        goto fail;
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(&r, g, i))) goto fail;

    /* align_up cannot overflow: pos <= size < 2^63 and alignment <= 2^31 */
    g->data_start = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if ((st = check_data(&r, g))) goto fail;

    *out = g;
    return MUSE_OK;
fail:
    muse_gguf_free(g);
    return st;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL and pages are touched instead */
#endif
#define LOAD_CHUNK ((size_t)32 << 20) /* bytes between progress calls */

/* Fault every page of map[0..size) in, chunk by chunk, reporting progress. */
static muse_status populate(uint8_t *map, size_t size, const struct muse_gguf_load_params *lp, const char *shown,
                            struct muse_error *err) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    bool advise = true;
    for (size_t done = 0; done < size;) {
        size_t n = size - done < LOAD_CHUNK ? size - done : LOAD_CHUNK;
        if (!advise || madvise(map + done, n, MADV_POPULATE_READ) != 0) {
            advise = false; /* touch one byte per page */
            volatile uint8_t sink = 0;
            for (size_t o = 0; o < n; o += page) sink ^= map[done + o];
            (void)sink;
        }
        done += n;
        if (lp->progress && lp->progress(lp->progress_user, done, size))
            return muse_error_set(err, MUSE_ERR_CANCELLED, "%s: loading cancelled", shown);
    }
    return MUSE_OK;
}

/* Read the whole file into anonymous memory (read-only afterwards). */
static muse_status read_all(int fd, uint8_t *map, size_t size, const struct muse_gguf_load_params *lp,
                            const char *shown, struct muse_error *err) {
    char ebuf[128];
    for (size_t done = 0; done < size;) {
        size_t want = size - done < LOAD_CHUNK ? size - done : LOAD_CHUNK;
        ssize_t got = read(fd, map + done, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return muse_error_set(err, MUSE_ERR_IO, "%s: cannot read: %s", shown, strerror_r(errno, ebuf, sizeof(ebuf)));
        if (got == 0) return muse_error_set(err, MUSE_ERR_IO, "%s: the file shrank while it was read", shown);
        done += (size_t)got;
        if (lp->progress && lp->progress(lp->progress_user, done, size))
            return muse_error_set(err, MUSE_ERR_CANCELLED, "%s: loading cancelled", shown);
    }
    mprotect(map, size, PROT_READ); /* only a guard: failure leaves the bytes writable */
    return MUSE_OK;
}

muse_status muse_gguf_open(const char *path, struct muse_gguf **out, struct muse_error *err) {
    return muse_gguf_open_ex(path, NULL, out, err);
}

muse_status muse_gguf_open_ex(const char *path, const struct muse_gguf_load_params *lp, struct muse_gguf **out,
                              struct muse_error *err) {
    static const struct muse_gguf_load_params lazy = {0};
    char shown[128], ebuf[128];
    struct stat sb;
    void *map = NULL;
    muse_status st;
    *out = NULL;
    if (!lp) lp = &lazy;
    printable(shown, sizeof(shown), path, strlen(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return muse_error_set(err, MUSE_ERR_IO, "%s: cannot open: %s", shown, strerror_r(errno, ebuf, sizeof(ebuf)));
    if (fstat(fd, &sb) != 0) {
        st = muse_error_set(err, MUSE_ERR_IO, "%s: cannot stat: %s", shown, strerror_r(errno, ebuf, sizeof(ebuf)));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return muse_error_set(err, MUSE_ERR_IO, "%s: not a regular file", shown);
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) {
        close(fd);
        return muse_gguf_parse("", 0, path, out, err);   /* reports the short header */
    }
    if (lp->read) map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    else map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = muse_error_set(err, lp->read ? MUSE_ERR_NOMEM : MUSE_ERR_IO, "%s: cannot %s %llu bytes: %s", shown,
                            lp->read ? "allocate" : "mmap", (unsigned long long)size, strerror_r(errno, ebuf, sizeof(ebuf)));
        close(fd);
        return st;
    }
#ifdef MADV_HUGEPAGE
    /* the copy in 2 MiB pages where the kernel has them: fewer page-table pages and TLB walks for
     * a decode that streams every weight per token (on Zen 3 the 30B preset decoded no faster
     * with them than without: docs/perf.md; only advice: a failure leaves small pages) */
    if (lp->read) madvise(map, size, MADV_HUGEPAGE);
#endif
    if (lp->read) st = read_all(fd, map, size, lp, shown, err);
    else st = lp->populate ? populate(map, size, lp, shown, err) : MUSE_OK;
    close(fd);
    if (st == MUSE_OK && lp->mlock && mlock(map, size) != 0)
        st = muse_error_set(err, MUSE_ERR_IO, "%s: cannot lock %llu bytes in memory: %s (the limit is `ulimit -l`)", shown,
                            (unsigned long long)size, strerror_r(errno, ebuf, sizeof(ebuf)));
    if (st == MUSE_OK) st = muse_gguf_parse(map, size, path, out, err);
    if (st) {
        munmap(map, size); /* also unlocks */
        return st;
    }
    struct muse_gguf_priv *priv = (*out)->priv;
    priv->map = map;
    priv->map_size = size;
    return MUSE_OK;
}

void muse_gguf_free(struct muse_gguf *g) {
    if (!g) return;
    for (uint64_t i = 0; i < g->n_kv && g->kv; i++) {
        struct muse_gguf_kv *kv = &g->kv[i];
        free((void *)kv->key);
        if (kv->value.type == MUSE_GGUF_TYPE_ARRAY && kv->value.v.arr.elem_type == MUSE_GGUF_TYPE_STRING)
            free((void *)kv->value.v.arr.strs);
    }
    free(g->kv);
    free(g->tensors);
    struct muse_gguf_priv *priv = g->priv;
    if (priv) {
        free(priv->kv_hash.slots);
        free(priv->tensor_hash.slots);
        if (priv->map) munmap(priv->map, priv->map_size);
        free(priv);
    }
    free(g);
}
