/*
 * synth_fixture.h - what the model tests share: the exact kernels (MUSE_CPU=exact, set before any
 * device exists, so that batch and solo runs compare bit for bit) and a small synthetic model
 * (muse synth's "tiny" preset, conditioned values, no rules) written to /tmp and loaded.
 */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/model.h"
#include "synth/synth.h"
#include "test.h"

/* MUSE_CPU gets ",exact" appended (the level asked for, if any, stays). */
static inline void fixture_exact_kernels(void) {
    const char *e = getenv("MUSE_CPU");
    char mode[96];
    snprintf(mode, sizeof mode, "%s%sexact", e ? e : "", e && *e ? "," : "");
    setenv("MUSE_CPU", mode, 1);
}

/* The tiny preset with n_layer layers, a window of n_swa (0: the preset's), every tensor of
 * `types`, written to path (a /tmp name with `tag` and the pid) and loaded; NULL after reporting
 * a failed check. The caller unlinks path. */
static inline struct muse_model *fixture_synth_model(const char *tag, uint32_t n_layer, uint32_t n_swa,
                                                     const char *types, char *path, size_t cap) {
    snprintf(path, cap, "/tmp/muse-test-%s-%d.gguf", tag, (int)getpid());
    struct muse_error err;
    struct muse_synth_config cfg;
    struct muse_model *m = NULL;
    if (muse_synth_preset("tiny", &cfg, &err) != MUSE_OK) {
        TEST_CONDF(false, "preset: %s", err.msg);
        return NULL;
    }
    cfg.n_layer = n_layer;
    if (n_swa) cfg.n_swa = n_swa;
    cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
    cfg.n_rules = 0;
    if (muse_synth_parse_types(types, &cfg, &err) != MUSE_OK || muse_synth_write(&cfg, path, NULL, NULL, &err) != MUSE_OK ||
        muse_model_load(path, muse_model_default_params(), &m, &err) != MUSE_OK) {
        TEST_CONDF(false, "model: %s", err.msg);
        return NULL;
    }
    return m;
}
