/*
 * libFuzzer target for the GGUF parser: parse arbitrary bytes; when they parse, walk every kv
 * (all array elements, every string byte) and every tensor's data, and exercise the lookups and
 * getters, so that any pointer the parser hands out that is not backed by the input trips ASan.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static uint64_t walk_value(const struct muse_gguf_value *v) {
    uint64_t h = (uint64_t)v->type;
    switch (v->type) {
    case MUSE_GGUF_TYPE_STRING:
        for (uint64_t i = 0; i < v->v.str.len; i++) h = h * 31 + (uint8_t)v->v.str.data[i];
        break;
    case MUSE_GGUF_TYPE_ARRAY:
        if (v->v.arr.elem_type == MUSE_GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < v->v.arr.count; i++)
                for (uint64_t k = 0; k < v->v.arr.strs[i].len; k++) h = h * 31 + (uint8_t)v->v.arr.strs[i].data[k];
        } else {
            for (uint64_t i = 0; i < v->v.arr.count; i++)
                h = h * 31 + (uint64_t)muse_gguf_arr_i64(v, i) + (uint64_t)(muse_gguf_arr_f64(v, i) != 0);
        }
        break;
    default: h = h * 31 + v->v.u64; break;
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy so that reads past `size` are caught */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    struct muse_gguf *g = NULL;
    struct muse_error err;
    volatile uint64_t h = 0;
    if (muse_gguf_parse(copy, size, "fuzz.gguf", &g, &err) == MUSE_OK) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const struct muse_gguf_kv *kv = &g->kv[i];
            h += walk_value(&kv->value) + strlen(kv->key);
            if (muse_gguf_find_kv(g, kv->key) != kv) __builtin_trap();
            uint32_t u;
            int64_t i64;
            float f;
            bool b;
            char buf[32];
            const struct muse_gguf_value *arr;
            h += (uint64_t)muse_gguf_get_u32(g, kv->key, &u, &err) + (uint64_t)muse_gguf_get_i64(g, kv->key, &i64, &err) +
                 (uint64_t)muse_gguf_get_f32(g, kv->key, &f, &err) + (uint64_t)muse_gguf_get_bool(g, kv->key, &b, &err) +
                 (uint64_t)muse_gguf_get_str(g, kv->key, buf, sizeof(buf), &err) +
                 (uint64_t)muse_gguf_get_arr(g, kv->key, &arr, &err);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct muse_gguf_tensor *t = &g->tensors[i];
            const uint8_t *p = t->data;
            if (muse_gguf_find_tensor(g, t->name) != t) __builtin_trap();
            if (p < g->base + g->data_start || t->nbytes > g->size || p + t->nbytes > g->base + g->size) __builtin_trap();
            for (uint64_t k = 0; k < t->nbytes; k += 61) h += p[k];
            if (t->nbytes) h += p[t->nbytes - 1];
        }
        muse_gguf_free(g);
    } else if (!err.msg[0] || strchr(err.msg, '\n')) {
        __builtin_trap();   /* every failure carries a one-line message */
    }
    free(copy);
    (void)h;
    return 0;
}
