/* gguf_keys.c - the key reads the hyperparameter loaders share: required and optional scalars with
 * one message for an absent required key (gguf.h). */
#include <stdio.h>

#include "core/error.h"
#include "gguf/gguf.h"

muse_status muse_gguf_key_missing(struct muse_error *err, const char *key) {
    return muse_error_set(err, MUSE_ERR_MISSING, "missing required key '%s'", key);
}

muse_status muse_gguf_req_u32(const struct muse_gguf *g, const char *key, uint32_t *out, struct muse_error *err) {
    muse_status st = muse_gguf_get_u32(g, key, out, err);
    return st == MUSE_ERR_MISSING ? muse_gguf_key_missing(err, key) : st;
}

muse_status muse_gguf_opt_u32(const struct muse_gguf *g, const char *key, uint32_t *out, struct muse_error *err) {
    muse_status st = muse_gguf_get_u32(g, key, out, err);
    if (st == MUSE_ERR_MISSING) {
        muse_error_clear(err);
        return MUSE_OK;
    }
    return st;
}

muse_status muse_gguf_req_f32(const struct muse_gguf *g, const char *key, float *out, struct muse_error *err) {
    muse_status st = muse_gguf_get_f32(g, key, out, err);
    return st == MUSE_ERR_MISSING ? muse_gguf_key_missing(err, key) : st;
}

muse_status muse_gguf_opt_f32(const struct muse_gguf *g, const char *key, float *out, bool *found,
                              struct muse_error *err) {
    muse_status st = muse_gguf_get_f32(g, key, out, err);
    if (found) *found = st == MUSE_OK;
    if (st == MUSE_ERR_MISSING) {
        muse_error_clear(err);
        return MUSE_OK;
    }
    return st;
}

const char *muse_gguf_arch_key(char *buf, size_t size, const char *arch, const char *suffix) {
    snprintf(buf, size, "%s.%s", arch, suffix);
    return buf;
}
