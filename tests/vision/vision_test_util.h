/*
 * vision_test_util.h - helpers of the vision tests: paths of the goldens, reading files, JSON and
 * float32 .npy arrays, SHA-256 as hex, comparing arrays.
 */
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/sha256.h"
#include "test.h"

static inline const char *vt_golden(const char *rel, char *buf, size_t size) {
    snprintf(buf, size, "%s/golden/vision/%s", test_shared_dir(), rel);
    return buf;
}

/* The whole file (NUL-terminated, *n without the NUL), or NULL. */
static inline char *vt_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[sz] = 0;
        if (n) *n = (size_t)sz;
    }
    return buf;
}

static inline cJSON *vt_read_json(const char *path) {
    char *s = vt_read_file(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

static inline double vt_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static inline const char *vt_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* A float32 C-order .npy of 2 dimensions: malloc'd data, shape in rows/cols; NULL on error. */
static inline float *vt_read_npy(const char *path, int64_t *rows, int64_t *cols) {
    size_t n;
    char *b = vt_read_file(path, &n);
    if (!b || n < 10 || memcmp(b, "\x93NUMPY", 6)) {
        free(b);
        return NULL;
    }
    const size_t hl = (size_t)(unsigned char)b[8] | (size_t)(unsigned char)b[9] << 8;
    char hdr[512];
    snprintf(hdr, sizeof hdr, "%.*s", (int)(hl < 511 ? hl : 511), b + 10);
    long long r = 0, c = 0;
    const char *sh = strstr(hdr, "'shape': (");
    if (!strstr(hdr, "'<f4'") || strstr(hdr, "True") || !sh || sscanf(sh, "'shape': (%lld, %lld)", &r, &c) != 2 ||
        10 + hl + (size_t)(r * c) * 4 != n) {
        free(b);
        return NULL;
    }
    float *d = malloc(sizeof(float) * (size_t)(r * c) + 1);
    memcpy(d, b + 10 + hl, sizeof(float) * (size_t)(r * c));
    free(b);
    *rows = r;
    *cols = c;
    return d;
}

static inline void vt_sha256_hex(const void *data, size_t n, char hex[65]) {
    uint8_t d[MUSE_SHA256_SIZE];
    muse_sha256(data, n, d);
    muse_sha256_hex(d, hex);
}

/* max |a - b| and the RMS of (a - b) relative to the RMS of b. */
static inline void vt_diff(const float *a, const float *b, size_t n, double *max_abs, double *rel_rms) {
    double mx = 0, se = 0, sb = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= mx)) mx = d; /* NaN wins */
        se += d * d;
        sb += (double)b[i] * b[i];
    }
    *max_abs = mx;
    *rel_rms = sb > 0 ? sqrt(se / sb) : sqrt(se);
}
