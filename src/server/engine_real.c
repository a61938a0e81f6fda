/*
 * engine_real.c - the adapter from the server's engine interface to libmuse's model, tokenizer,
 * chat template and sampler. Those parts are being written in parallel; until they land this
 * adapter reports that serving a real model is not available yet (no silent fallback).
 */
#include "core/error.h"
#include "server/engine_iface.h"

muse_status muse_srv_real_engine_create(const char *model_path, int n_ctx, struct muse_srv_engine *out,
                                        struct muse_error *err) {
    (void)n_ctx;
    (void)out;
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                          "cannot serve %s: this build has no model engine wired into the server yet", model_path);
}
