/*
 * synth.c - presets, type rules, the tensor plan and the value recipe of synthetic Muse-Glimmer
 * files, and the streaming write (see synth.h).
 */
#include "synth/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/tensors.h"

/* HF output_multiplier of the 30B, 1/sqrt(6656/256); every synthetic file uses it (as the goldens
 * do); the output matrix's std compensates for other widths. Keep in sync with synth_write.c. */
#define LOGIT_SCALE 0.19611613513818404
#define QK_SCALE_FACTOR 3.87f /* HF qk_scale_factor, folded into attn_q_norm by the converter */

/* ---- presets ------------------------------------------------------------------------------ */

struct preset {
    const char *name;
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx, n_swa;
    const char *pattern;
    enum muse_synth_values values;
    const char *types; /* default type rules ("" = every matrix F32) */
};

static const struct preset presets[] = {
    /* the shapes of the golden tiny-f32 case: every path of the forward in ~10 MB of F32 */
    {"tiny", 4, 256, 8, 2, 32, 512, 1000, 4096, 8, "SSSF", MUSE_SYNTH_VALUES_PLAIN, ""},
    /* the shapes of the golden small-* cases, Q8_0 matrices */
    {"small", 6, 256, 4, 2, 64, 768, 2000, 4096, 16, "SSSF", MUSE_SYNTH_VALUES_CONDITIONED, "*=q8_0"},
    /* fast generation on 2 cores: ~28M parameters, ~17 MB at Q4_K */
    {"demo", 6, 512, 8, 2, 64, 1536, 8192, 4096, 64, "SSSF", MUSE_SYNTH_VALUES_CONDITIONED,
     "output=q6_k,*=q4_k"},
    /* the real Muse-Glimmer 30B dimensions with an Unsloth-"UD"-like IQ2_XXS mix (~10 GB) */
    {"30b", 52, 6656, 32, 2, 128, 19968, 202048, 131072, 2048, "SSSF", MUSE_SYNTH_VALUES_CONDITIONED,
     "ffn_*=iq2_xxs,attn_*=q4_k,token_embd=q4_k,output=q6_k"},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

const char *const muse_synth_preset_names[] = {"tiny", "small", "demo", "30b", NULL};

muse_status muse_synth_preset(const char *name, struct muse_synth_config *cfg, struct muse_error *err) {
    for (size_t i = 0; i < N_PRESETS; i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name)) continue;
        memset(cfg, 0, sizeof(*cfg));
        snprintf(cfg->preset, sizeof(cfg->preset), "%s", p->name);
        cfg->n_layer = p->n_layer;
        cfg->n_embd = p->n_embd;
        cfg->n_head = p->n_head;
        cfg->n_head_kv = p->n_head_kv;
        cfg->head_dim = p->head_dim;
        cfg->n_ff = p->n_ff;
        cfg->n_vocab = p->n_vocab;
        cfg->n_ctx = p->n_ctx;
        cfg->n_swa = p->n_swa;
        snprintf(cfg->pattern, sizeof(cfg->pattern), "%s", p->pattern);
        cfg->seed = 1;
        cfg->values = p->values;
        if (p->types[0]) return muse_synth_parse_types(p->types, cfg, err);
        return MUSE_OK;
    }
    return muse_error_set(err, MUSE_ERR_INVALID_ARG, "unknown preset '%s' (presets: tiny, small, demo, 30b)", name);
}

/* ---- type rules and patterns ---------------------------------------------------------------- */

/* Whether `type` can be a matrix of a synthetic file: a weight type llama.cpp can multiply. */
static bool matrix_type_ok(int type) {
    const struct muse_type_layout *l = muse_type_layout_get((uint32_t)type);
    if (!l) return false;
    switch (type) {
    case MUSE_TYPE_Q8_1: case MUSE_TYPE_Q8_K:  /* activation formats only */
    case MUSE_TYPE_I8: case MUSE_TYPE_I16: case MUSE_TYPE_I32: case MUSE_TYPE_I64: case MUSE_TYPE_F64:
        return false;
    default:
        return true;
    }
}

muse_status muse_synth_parse_types(const char *spec, struct muse_synth_config *cfg, struct muse_error *err) {
    struct muse_synth_type_rule parsed[MUSE_SYNTH_MAX_RULES];
    int n = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad type rule '%.*s' (expected GLOB=TYPE)", (int)len, p);
        size_t glen = (size_t)(eq - p), tlen = len - glen - 1;
        char tname[32];
        if (glen >= sizeof(parsed[0].pattern) || tlen == 0 || tlen >= sizeof(tname))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad type rule '%.*s'", (int)len, p);
        if (n + cfg->n_rules >= MUSE_SYNTH_MAX_RULES)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "too many type rules (at most %d)", MUSE_SYNTH_MAX_RULES);
        memcpy(tname, eq + 1, tlen);
        tname[tlen] = 0;
        int type = muse_type_from_name(tname);
        if (type < 0 || !matrix_type_ok(type))
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "type rule '%.*s': '%s' is not a weight type", (int)len, p,
                                  tname);
        memcpy(parsed[n].pattern, p, glen);
        parsed[n].pattern[glen] = 0;
        parsed[n].type = (enum muse_type)type;
        n++;
        p = end ? end + 1 : p + len;
    }
    if (n == 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "empty type rule list");
    memmove(&cfg->rules[n], &cfg->rules[0], (size_t)cfg->n_rules * sizeof(cfg->rules[0]));
    memcpy(&cfg->rules[0], parsed, (size_t)n * sizeof(parsed[0]));
    cfg->n_rules += n;
    return MUSE_OK;
}

muse_status muse_synth_parse_pattern(const char *spec, struct muse_synth_config *cfg, struct muse_error *err) {
    size_t len = strlen(spec);
    if (len == 0 || len > MUSE_SYNTH_MAX_PATTERN)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad --pattern '%s'", spec);
    if (strspn(spec, "0123456789") == len) {
        long period = strtol(spec, NULL, 10);
        if (period > MUSE_SYNTH_MAX_PATTERN)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "--pattern period %ld is above %d", period,
                                  MUSE_SYNTH_MAX_PATTERN);
        if (period == 0) {
            snprintf(cfg->pattern, sizeof(cfg->pattern), "S");
        } else {
            memset(cfg->pattern, 'S', (size_t)period - 1);
            cfg->pattern[period - 1] = 'F';
            cfg->pattern[period] = 0;
        }
        return MUSE_OK;
    }
    if (strspn(spec, "SF") != len)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad --pattern '%s' (a period or a string of S and F)", spec);
    memcpy(cfg->pattern, spec, len + 1);
    return MUSE_OK;
}

bool muse_synth_layer_is_swa(const struct muse_synth_config *cfg, int32_t il) {
    size_t period = strlen(cfg->pattern);
    return cfg->pattern[(size_t)il % period] == 'S';
}

/* The u32 form of the pattern: P when the pattern is S^(P-1) F, 0 when it is all S; -1 otherwise. */
static int64_t pattern_period(const char *pattern) {
    size_t len = strlen(pattern);
    if (strspn(pattern, "S") == len) return 0;
    if (strspn(pattern, "S") == len - 1) return (int64_t)len;
    return -1;
}

/* Glob with `*` and `?`. */
static bool glob_match(const char *g, const char *s) {
    if (!*g) return !*s;
    if (*g == '*') {
        for (;; s++) {
            if (glob_match(g + 1, s)) return true;
            if (!*s) return false;
        }
    }
    return *s && (*g == '?' || *g == *s) && glob_match(g + 1, s + 1);
}

/* "blk.3.ffn_gate.weight" -> "ffn_gate"; "output.weight" -> "output". */
static void short_name(const char *name, char *out, size_t size) {
    const char *p = name;
    if (!strncmp(p, "blk.", 4)) {
        const char *dot = strchr(p + 4, '.');
        if (dot) p = dot + 1;
    }
    size_t len = strlen(p);
    if (len > 7 && !strcmp(p + len - 7, ".weight")) len -= 7;
    if (len >= size) len = size - 1;
    memcpy(out, p, len);
    out[len] = 0;
}

static enum muse_type matrix_type(const struct muse_synth_config *cfg, const char *name) {
    char sn[64];
    short_name(name, sn, sizeof(sn));
    for (int i = 0; i < cfg->n_rules; i++)
        if (glob_match(cfg->rules[i].pattern, sn) || glob_match(cfg->rules[i].pattern, name)) return cfg->rules[i].type;
    return MUSE_TYPE_F32;
}

/* ---- validation and the plan ---------------------------------------------------------------- */

static muse_status check_range(const char *opt, int64_t v, int64_t lo, int64_t hi, struct muse_error *err) {
    if (v < lo || v > hi)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s %lld is out of range %lld..%lld", opt, (long long)v,
                              (long long)lo, (long long)hi);
    return MUSE_OK;
}

static muse_status validate_dims(const struct muse_synth_config *cfg, struct muse_error *err) {
    muse_status st;
    if ((st = check_range("--layers", cfg->n_layer, 1, MUSE_SYNTH_MAX_LAYERS, err)) ||
        (st = check_range("--embd", cfg->n_embd, 1, 1 << 20, err)) ||
        (st = check_range("--heads", cfg->n_head, 1, 4096, err)) ||
        (st = check_range("--kv-heads", cfg->n_head_kv, 1, 4096, err)) ||
        (st = check_range("--head-dim", cfg->head_dim, 2, 4096, err)) ||
        (st = check_range("--ff", cfg->n_ff, 1, 1 << 22, err)) ||
        (st = check_range("--vocab", cfg->n_vocab, MUSE_SYNTH_MIN_VOCAB, 1 << 22, err)) ||
        (st = check_range("--ctx", cfg->n_ctx, 1, INT32_MAX, err)) ||
        (st = check_range("--window", cfg->n_swa, 1, INT32_MAX, err)))
        return st;
    if (cfg->n_head % cfg->n_head_kv)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "--heads %d is not a multiple of --kv-heads %d",
                              (int)cfg->n_head, (int)cfg->n_head_kv);
    if (cfg->head_dim % 2)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "--head-dim %d is odd (RoPE rotates pairs)", (int)cfg->head_dim);
    size_t plen = strlen(cfg->pattern);
    if (plen == 0 || strspn(cfg->pattern, "SF") != plen)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad layer pattern '%s'", cfg->pattern);
    if (cfg->pattern_scalar && pattern_period(cfg->pattern) < 0)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "layer pattern '%s' has no u32 form (it must be S...SF or all S)", cfg->pattern);
    if ((unsigned)cfg->values >= MUSE_SYNTH_VALUES_COUNT)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad value recipe %d", (int)cfg->values);
    return MUSE_OK;
}

/*
 * The value recipe (golden/text/README.md "Value scales"): what the values of table entry `id`
 * are drawn from, mean + std * N(0, 1). ne0 = the tensor's row length.
 */
static void value_scale(const struct muse_synth_config *cfg, int id, int64_t ne0, float *mean, float *std) {
    const bool cond = cfg->values == MUSE_SYNTH_VALUES_CONDITIONED;
    const float post = cond ? 0.15f : 1.0f; /* post-attention / post-FFN norm factor */
    const float ffn_norm = cond ? 0.25f : 1.0f;
    switch (id) {
    case MUSE_GLIMMER_TOKEN_EMBD: *mean = 0.0f, *std = cond ? 0.05f : 1.0f; break;
    case MUSE_GLIMMER_ATTN_Q_NORM: *mean = QK_SCALE_FACTOR, *std = 0.1f; break;
    case MUSE_GLIMMER_POST_ATTENTION_NORM:
    case MUSE_GLIMMER_POST_FFW_NORM: *mean = post, *std = 0.1f * post; break;
    case MUSE_GLIMMER_FFN_NORM: *mean = ffn_norm, *std = 0.1f * ffn_norm; break;
    /* pre-softcap logits of std ~4: |h| ~ sqrt(n_embd) after the final norm */
    case MUSE_GLIMMER_OUTPUT: *mean = 0.0f, *std = (float)(4.0 / (sqrt((double)ne0) * LOGIT_SCALE)); break;
    default:
        if (muse_glimmer_tensors[id].kind == MUSE_TENSOR_MATRIX)
            *mean = 0.0f, *std = 0.02f; /* hidden matrices */
        else
            *mean = 1.0f, *std = 0.1f; /* attn_norm, attn_k_norm, output_norm */
    }
}

struct entries_state {
    char *elems; /* NULL: count only */
    size_t elem_size, n;
    muse_synth_fill_fn fill;
    const void *ctx;
};

static muse_status entry_visit(struct muse_tensor_net *net, const struct muse_tensor_visit *v, void *user) {
    struct entries_state *s = user;
    if (v->desc->optional) return MUSE_OK;
    if (s->elems) s->fill(v, s->elems + s->n * s->elem_size, s->ctx);
    s->n++;
    return MUSE_OK;
}

muse_status muse_synth_entries(struct muse_tensor_net *net, size_t elem_size, muse_synth_fill_fn fill, const void *ctx,
                               void **out, size_t *n_out, struct muse_error *err) {
    struct entries_state s = {NULL, elem_size, 0, fill, ctx};
    muse_tensors_walk(net, MUSE_TENSOR_ORDER_FILE, entry_visit, &s);
    *n_out = s.n;
    *out = s.elems = calloc(s.n ? s.n : 1, elem_size);
    if (!s.elems) return muse_error_set(err, MUSE_ERR_NOMEM, "synth: out of memory");
    s.n = 0;
    muse_tensors_walk(net, MUSE_TENSOR_ORDER_FILE, entry_visit, &s);
    return MUSE_OK;
}

/* One tensor of a text model's plan: its name, shape, type (the config's rules) and value recipe. */
static void fill_tensor(const struct muse_tensor_visit *v, void *elem, const void *ctx) {
    const struct muse_synth_config *cfg = ctx;
    struct muse_synth_tensor *t = elem;
    snprintf(t->name, sizeof t->name, "%s", v->name);
    t->n_dims = (uint32_t)v->n_dims;
    t->ne[0] = v->ne[0];
    t->ne[1] = v->ne[1];
    t->type = t->n_dims == 2 ? matrix_type(cfg, t->name) : MUSE_TYPE_F32; /* 1-D tensors (norms) are always F32 */
    value_scale(cfg, v->id, t->ne[0], &t->mean, &t->std);
}

/* The tensors a converter writes (the table's required entries) in file order. */
muse_status muse_synth_plan(const struct muse_synth_config *cfg, struct muse_synth_tensor **out, size_t *n_out,
                            struct muse_error *err) {
    *out = NULL;
    *n_out = 0;
    muse_status st = validate_dims(cfg, err);
    if (st) return st;
    struct muse_tensor_net net = {.table = &muse_glimmer_table, .n_layer = (uint32_t)cfg->n_layer};
    muse_glimmer_dims_uniform(net.dims, cfg->n_embd, cfg->n_vocab, cfg->n_head, cfg->n_head_kv, cfg->head_dim, cfg->n_ff);
    void *plan;
    size_t n;
    if ((st = muse_synth_entries(&net, sizeof(struct muse_synth_tensor), fill_tensor, cfg, &plan, &n, err))) return st;
    struct muse_synth_tensor *t = plan;
    for (size_t i = 0; i < n; i++) {
        const struct muse_type_layout *l = muse_type_layout_get(t[i].type);
        if (t[i].ne[0] % l->block_size) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                "%s: row length %lld is not a multiple of the %s block size %lld (choose another "
                                "type with --types or other dimensions)",
                                t[i].name, (long long)t[i].ne[0], l->name, (long long)l->block_size);
            free(t);
            return st;
        }
    }
    *out = t;
    *n_out = n;
    return MUSE_OK;
}

muse_status muse_synth_validate(const struct muse_synth_config *cfg, struct muse_error *err) {
    struct muse_synth_tensor *t;
    size_t n;
    muse_status st = muse_synth_plan(cfg, &t, &n, err);
    free(t);
    return st;
}

/* llama_ftype of "mostly TYPE" (gguf-and-quants.md 1.10); K types take the _M / plain label. */
static uint32_t ftype_of(enum muse_type t) {
    switch (t) {
    case MUSE_TYPE_F32: return 0;
    case MUSE_TYPE_F16: return 1;
    case MUSE_TYPE_Q4_0: return 2;
    case MUSE_TYPE_Q4_1: return 3;
    case MUSE_TYPE_Q8_0: return 7;
    case MUSE_TYPE_Q5_0: return 8;
    case MUSE_TYPE_Q5_1: return 9;
    case MUSE_TYPE_Q2_K: return 10;
    case MUSE_TYPE_Q3_K: return 12;
    case MUSE_TYPE_Q4_K: return 15;
    case MUSE_TYPE_Q5_K: return 17;
    case MUSE_TYPE_Q6_K: return 18;
    case MUSE_TYPE_IQ2_XXS: return 19;
    case MUSE_TYPE_IQ2_XS: return 20;
    case MUSE_TYPE_IQ3_XXS: return 23;
    case MUSE_TYPE_IQ1_S: return 24;
    case MUSE_TYPE_IQ4_NL: return 25;
    case MUSE_TYPE_IQ3_S: return 26;
    case MUSE_TYPE_IQ2_S: return 28;
    case MUSE_TYPE_IQ4_XS: return 30;
    case MUSE_TYPE_IQ1_M: return 31;
    case MUSE_TYPE_BF16: return 32;
    case MUSE_TYPE_TQ1_0: return 36;
    case MUSE_TYPE_TQ2_0: return 37;
    case MUSE_TYPE_MXFP4: return 38;
    case MUSE_TYPE_NVFP4: return 39;
    case MUSE_TYPE_Q1_0: return 40;
    default: return 0;
    }
}

uint32_t muse_synth_file_type(const struct muse_synth_tensor *tensors, size_t n) {
    int64_t count[MUSE_TYPE_COUNT] = {0}; /* matrix elements per type */
    for (size_t i = 0; i < n; i++)
        if (tensors[i].n_dims == 2) count[tensors[i].type] += tensors[i].ne[0] * tensors[i].ne[1];
    int best = MUSE_TYPE_F32;
    for (int t = 0; t < MUSE_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    return ftype_of((enum muse_type)best);
}

uint64_t muse_synth_data_bytes(const struct muse_synth_tensor *tensors, size_t n) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += (uint64_t)muse_type_row_size(tensors[i].type, tensors[i].ne[0]) * (uint64_t)tensors[i].ne[1];
    return total;
}
