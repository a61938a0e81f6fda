/*
 * quantize.c - muse_quantize (include/muse.h): llama-quantize without an importance matrix.
 *
 * The run, in llama-quantize's order (llama.cpp src/llama-quant.cpp, llama_model_quantize_impl):
 *   1. plan: tensors sorted as llama.cpp's loader keeps them (non-layer tensors by name, then
 *      blk.0.* by name, blk.1.* ...); per tensor the type (quant_rules.c: rules, overrides,
 *      fallbacks); every refusal is found here, before the output file is created;
 *   2. metadata: the input's key/value pairs in their order, less general.quantization_version,
 *      general.file_type and the split.* keys, then general.quantization_version = 2 and
 *      general.file_type = the ftype (both u32) appended; tensor infos with ggml's n_dims
 *      (trailing 1s dropped) and the new types; 32-byte alignment;
 *   3. data: each tensor copied (type unchanged) or converted in slabs of rows: rows to f32
 *      (to_float, exact for F16/BF16 and bit-exact ggml dequantizers for quantized sources),
 *      then the type's reference from_float, which is ggml's quantize_row_<t>_ref. Rows are
 *      independent, so the threads split a slab by rows and the bytes do not depend on them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/types.h"
#include "muse.h"
#include "quantize/quant_rules.h"

#define GGML_QNT_VERSION 2
#define SLAB_BYTES ((size_t)32 << 20)   /* output bytes converted per parallel region */

struct muse_quantize_params muse_quantize_default_params(void) {
    struct muse_quantize_params p;
    memset(&p, 0, sizeof p);
    return p;
}

// ---- types ----

/* ggml's spelling of a type name ("q4_K", "q8_0"): muse's lower-case name with K-quants' K upper. */
static const char *ggml_name(enum muse_type t, char buf[16]) {
    const char *n = muse_type_layouts[t].name;
    snprintf(buf, 16, "%s", n);
    size_t len = strlen(buf);
    if (len > 2 && buf[len - 2] == '_' && buf[len - 1] == 'k' && buf[0] == 'q') buf[len - 1] = 'K';
    return buf;
}

/* Can muse write tensors of type t? (from_float, and a weight format rather than an activation one) */
static bool producible(enum muse_type t, const char **why) {
    switch (t) {
    case MUSE_TYPE_Q8_1: case MUSE_TYPE_Q8_K:
        *why = "is an activation format, not a weight type";
        return false;
    case MUSE_TYPE_IQ2_XXS: case MUSE_TYPE_IQ2_XS: case MUSE_TYPE_IQ2_S: case MUSE_TYPE_IQ3_XXS:
    case MUSE_TYPE_IQ3_S: case MUSE_TYPE_IQ1_S: case MUSE_TYPE_IQ1_M: case MUSE_TYPE_IQ4_NL: case MUSE_TYPE_IQ4_XS:
        *why = "is an IQ type: use llama-quantize (muse reads them)";
        return false;
    default:
        if (!muse_type_traits[t].from_float) {
            *why = "cannot be written by muse";
            return false;
        }
        return true;
    }
}

/* A ggml type name as llama-quantize's parse_ggml_type accepts it (case-insensitive). */
static muse_status parse_type(const char *what, const char *s, enum muse_type *out, struct muse_error *err) {
    const int t = s ? muse_type_from_name(s) : -1;
    if (t < 0) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s: unknown ggml type '%s'", what, s ? s : "");
    const char *why;
    if (!producible((enum muse_type)t, &why))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "%s: type %s %s", what, s, why);
    *out = (enum muse_type)t;
    return MUSE_OK;
}

// ---- overrides (--tensor-type PATTERN=TYPE) ----

struct override {
    char *pattern;              /* lower-cased, as llama-quantize stores it */
    pcre2_code *re;
    enum muse_type type;
    bool used;                  /* matched at least one quantizable tensor */
};

static void overrides_free(struct override *ov, int n) {
    for (int i = 0; i < n; i++) {
        free(ov[i].pattern);
        pcre2_code_free(ov[i].re);
    }
    free(ov);
}

static muse_status overrides_parse(const char *const *specs, struct override **out, int *n_out, struct muse_error *err) {
    int n = 0;
    while (specs && specs[n]) n++;
    *out = NULL;
    *n_out = 0;
    if (!n) return MUSE_OK;
    struct override *ov = calloc((size_t)n, sizeof *ov);
    if (!ov) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const char *sep = strchr(specs[i], '=');
        if (!sep || sep == specs[i] || !sep[1]) {
            overrides_free(ov, i);
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor type '%s': expected PATTERN=TYPE", specs[i]);
        }
        const size_t len = (size_t)(sep - specs[i]);
        ov[i].pattern = malloc(len + 1);
        if (!ov[i].pattern) {
            overrides_free(ov, i + 1);
            return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        }
        for (size_t k = 0; k < len; k++) {
            const char c = specs[i][k];
            ov[i].pattern[k] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        }
        ov[i].pattern[len] = '\0';
        muse_status st = parse_type(specs[i], sep + 1, &ov[i].type, err);
        if (st) {
            overrides_free(ov, i + 1);
            return st;
        }
        int code;
        PCRE2_SIZE off;
        ov[i].re = pcre2_compile((PCRE2_SPTR)ov[i].pattern, PCRE2_ZERO_TERMINATED, 0, &code, &off, NULL);
        if (!ov[i].re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor type '%s': bad pattern at offset %zu: %s", specs[i],
                           (size_t)off, (const char *)msg);
            overrides_free(ov, i + 1);
            return err ? err->status : MUSE_ERR_INVALID_ARG;
        }
    }
    *out = ov;
    *n_out = n;
    return MUSE_OK;
}

/* 1 = match, 0 = none, < 0 = PCRE2 error. */
static int override_match(const struct override *o, const char *name) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(o->re, NULL);
    if (!md) return PCRE2_ERROR_NOMEMORY;
    int rc = pcre2_match(o->re, (PCRE2_SPTR)name, strlen(name), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : rc;
}

// ---- the plan ----

struct planned {
    const struct muse_gguf_tensor *t;
    int layer;                  /* "blk.%d." or -1, for the order */
    enum muse_type type_out;
    int n_dims;
    bool fallback, manual;
    uint64_t bytes_out;
};

/* llama.cpp's weight_name_comparer: by layer number (sscanf "blk.%d."; -1 without), then name. */
static int plan_cmp(const void *a, const void *b) {
    const struct planned *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

struct run {
    const struct muse_quantize_params *p;
    const struct muse_ftype_name *ft;
    enum muse_type default_type;
    struct muse_quant_choice choice;
    struct muse_quant_model model;
    struct muse_quant_state qs;
    struct override *ov;
    int n_ov;
    struct muse_gguf *in;
    const char *in_path;
    struct planned *plan;
    int n;
};

static muse_status read_model(struct run *r, struct muse_error *err) {
    char arch[64];
    muse_status st = muse_gguf_get_str(r->in, "general.architecture", arch, sizeof arch, err);
    if (st == MUSE_ERR_MISSING) return muse_error_set(err, st, "general.architecture is missing");
    if (st) return st;
    if (strcmp(arch, "muse-glimmer") != 0 && strcmp(arch, "dflash") != 0)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "architecture '%s': muse quantize knows llama-quantize's rules for muse-glimmer and "
                              "dflash only (use llama-quantize)", arch);
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", arch);
    if ((st = muse_gguf_get_u32(r->in, key, &r->model.n_layer, err))) {
        if (st == MUSE_ERR_MISSING) muse_error_set(err, st, "%s is missing", key);
        return st;
    }
    if (r->model.n_layer == 0 || r->model.n_layer > 512)
        return muse_error_set(err, MUSE_ERR_FORMAT, "%s = %u is outside 1..512", key, r->model.n_layer);
    /* n_gqa of layer 0: head_count / head_count_kv (llama_hparams::n_gqa; kv defaults to head_count) */
    uint32_t *heads = calloc(2 * (size_t)r->model.n_layer, sizeof *heads);
    if (!heads) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    uint32_t *heads_kv = heads + r->model.n_layer;
    bool per_layer;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    st = muse_gguf_get_u32_per_layer(r->in, key, r->model.n_layer, heads, &per_layer, err);
    if (st == MUSE_ERR_MISSING) st = MUSE_OK;   /* 0 heads, as llama.cpp's default */
    if (!st) {
        memcpy(heads_kv, heads, sizeof *heads * r->model.n_layer);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        st = muse_gguf_get_u32_per_layer(r->in, key, r->model.n_layer, heads_kv, &per_layer, err);
        if (st == MUSE_ERR_MISSING) st = MUSE_OK;
    }
    r->model.n_gqa = heads_kv[0] ? heads[0] / heads_kv[0] : 0;
    free(heads);
    if (st) return st;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    st = muse_gguf_get_u32(r->in, key, &r->model.n_expert, err);
    if (st == MUSE_ERR_MISSING) st = MUSE_OK;
    if (r->model.n_expert <= 1) r->model.n_expert = 0;
    return st;
}

/* llama_tensor_get_type for one quantizable tensor. */
static muse_status choose(struct run *r, struct planned *pl, struct muse_error *err) {
    const struct muse_gguf_tensor *t = pl->t;
    const enum muse_tensor_category cat = muse_quant_category(t->name);
    if (r->choice.token_embd_type < MUSE_TYPE_COUNT && cat == MUSE_TCAT_TOKEN_EMBD) {
        /* per_layer_token_embd yields to a --tensor-type that names it */
        bool named = false;
        if (!strcmp(t->name, "per_layer_token_embd.weight"))
            for (int i = 0; i < r->n_ov && !named; i++) named = override_match(&r->ov[i], t->name) == 1;
        if (!named) {
            pl->type_out = r->choice.token_embd_type;
            pl->manual = true;
            return MUSE_OK;
        }
    }
    if (r->choice.output_type < MUSE_TYPE_COUNT && cat == MUSE_TCAT_OUTPUT) {
        pl->type_out = r->choice.output_type;
        pl->manual = true;
        return MUSE_OK;
    }
    enum muse_type type = r->default_type;
    if (!muse_type_layouts[type].is_quantized) {   /* F32/F16/BF16 files: no rules, no overrides */
        pl->type_out = type;
        return MUSE_OK;
    }
    for (int i = 0; i < r->n_ov && !pl->manual; i++) {
        const int m = override_match(&r->ov[i], t->name);
        if (m < 0) return muse_error_set(err, MUSE_ERR_INTERNAL, "pattern '%s': PCRE2 error %d", r->ov[i].pattern, m);
        if (m) {
            type = r->ov[i].type;
            pl->manual = true;
        }
    }
    if (!pl->manual && !r->p->pure) {
        char why[200] = "";
        type = muse_quant_rules(&r->qs, &r->model, &r->choice, type, t->name, t->ne, cat, why, sizeof why);
        if (type == MUSE_TYPE_COUNT) return muse_error_set(err, MUSE_ERR_FORMAT, "%s", why);
    }
    const enum muse_type chosen = type;
    type = muse_quant_fallback(&r->qs, chosen, t->ne[0], &pl->fallback);
    if (type == MUSE_TYPE_COUNT) {
        char b[16];
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "tensor %s: ne[0] = %lld is not a multiple of the %s block size %lld and %s has no "
                              "fallback type", t->name, (long long)t->ne[0], ggml_name(chosen, b),
                              (long long)muse_type_layouts[chosen].block_size, b);
    }
    pl->type_out = type;
    return MUSE_OK;
}

static muse_status make_plan(struct run *r, struct muse_error *err) {
    const struct muse_gguf *in = r->in;
    r->n = (int)in->n_tensors;
    r->plan = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *r->plan);
    const char **names = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *names);
    if (!r->plan || !names) {
        free(names);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < r->n; i++) {
        r->plan[i].t = &in->tensors[i];
        r->plan[i].layer = -1;
        sscanf(in->tensors[i].name, "blk.%d.", &r->plan[i].layer);
    }
    qsort(r->plan, (size_t)r->n, sizeof *r->plan, plan_cmp);
    for (int i = 0; i < r->n; i++) names[i] = r->plan[i].t->name;
    muse_quant_state_init(&r->qs, &r->model, names, r->n);
    free(names);

    muse_status st = MUSE_OK;
    for (int i = 0; i < r->n && !st; i++) {
        struct planned *pl = &r->plan[i];
        const struct muse_gguf_tensor *t = pl->t;
        pl->n_dims = muse_quant_n_dims(t->ne);
        pl->type_out = (enum muse_type)t->type;
        if (muse_quant_allows(t->name, t->ne, !r->p->leave_output_tensor)) {
            for (int k = 0; k < r->n_ov; k++)
                if (!r->ov[k].used && override_match(&r->ov[k], t->name) == 1) r->ov[k].used = true;
            if ((st = choose(r, pl, err))) break;
        }
        const enum muse_type to = pl->type_out, from = (enum muse_type)t->type;
        char b1[16], b2[16];
        if (to != from) {
            const char *why;
            if (!producible(to, &why)) {
                st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor %s: type %s %s", t->name, ggml_name(to, b1), why);
                break;
            }
            if (t->ne[0] % muse_type_layouts[to].block_size) {
                st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor %s: ne[0] = %lld is not a multiple of the %s block size %lld",
                                    t->name, (long long)t->ne[0], ggml_name(to, b1), (long long)muse_type_layouts[to].block_size);
                break;
            }
            if (!muse_type_traits[from].to_float || from == MUSE_TYPE_F64 || from == MUSE_TYPE_Q8_1) {
                st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tensor %s: cannot convert type %s", t->name, ggml_name(from, b1));
                break;
            }
            if (muse_type_layouts[from].is_quantized && !r->p->allow_requantize) {
                st = muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                                    "tensor %s is already quantized (%s -> %s): quantize from F32/F16/BF16, or pass "
                                    "--allow-requantize", t->name, ggml_name(from, b1), ggml_name(to, b2));
                break;
            }
        }
        pl->bytes_out = (uint64_t)muse_type_row_size(to, t->ne[0]) * (uint64_t)(t->n_elements / (t->ne[0] ? t->ne[0] : 1));
    }
    if (st) return st;
    for (int k = 0; k < r->n_ov; k++)
        if (!r->ov[k].used)
            return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tensor type pattern '%s' matches no quantizable tensor",
                                  r->ov[k].pattern);
    return MUSE_OK;
}

// ---- conversion ----

struct convert_job {
    const uint8_t *src;         /* first row of the slab */
    uint8_t *dst;
    enum muse_type from, to;
    int64_t ne0, nrows;
    size_t rs_src, rs_dst;
    float **scratch;            /* [nth] buffers of scratch_rows * ne0 floats */
    int64_t scratch_rows;
    int64_t *bad_row;           /* [nth] out: first row with a non-finite value, -1 = none */
    bool *bad_out;              /* [nth] out: the non-finite value is in the quantized output */
};

/* fp16 -> f32 by a table of all 65536 values (exact; the per-element decode is branchy). */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;
static void f16_table_init(void) {
    for (uint32_t i = 0; i < 65536; i++) f16_table[i] = muse_fp16_to_fp32((uint16_t)i);
}
static void f16_to_f32(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = f16_table[h[i]];
}

/* Index of the first NaN or infinity in x[0..n), or -1 (a branch-free scan first: it vectorizes). */
static int64_t first_non_finite(const float *x, int64_t n) {
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        any |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
}

/* The half at byte p (any alignment: a source tensor's data need not be 2-aligned). */
static uint16_t half_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Index of the first fp16 (mask 0x7c00) or bf16 (0x7f80) NaN or infinity among n halves (stride
 * halves apart from h), or -1. */
static int64_t first_non_finite_half(const void *h, int64_t n, int64_t stride, uint16_t mask) {
    const uint8_t *b = h;
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) any |= (half_at(b + 2 * i * stride) & mask) == mask;
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++)
        if ((half_at(b + 2 * i * stride) & mask) == mask) return i;
    return -1;
}

/*
 * A converted row set with a NaN or infinity in its output (llama-quantize's
 * ggml_validate_row_data): the fp16 scale fields of the block types (what ggml checks: the codes
 * cannot be non-finite), the values of F16/BF16 outputs. Returns the first bad element's index
 * (block index * block size for blocks) or -1; other types are decoded into `scratch` and scanned.
 */
static int64_t output_non_finite(enum muse_type type, const uint8_t *q, int64_t n, float *scratch) {
    size_t off[2] = {0, 0};
    int n_off = 1;
    switch (type) {
    case MUSE_TYPE_F32: return first_non_finite((const float *)q, n);
    case MUSE_TYPE_F16: return first_non_finite_half(q, n, 1, 0x7c00);
    case MUSE_TYPE_BF16: return first_non_finite_half(q, n, 1, 0x7f80);
    case MUSE_TYPE_Q4_0: case MUSE_TYPE_Q5_0: case MUSE_TYPE_Q8_0: case MUSE_TYPE_Q1_0: break;
    case MUSE_TYPE_Q4_1: case MUSE_TYPE_Q5_1: case MUSE_TYPE_Q4_K: case MUSE_TYPE_Q5_K: off[1] = 2; n_off = 2; break;
    case MUSE_TYPE_Q2_K: off[0] = 80; off[1] = 82; n_off = 2; break;
    case MUSE_TYPE_Q3_K: off[0] = 108; break;
    case MUSE_TYPE_Q6_K: off[0] = 208; break;
    case MUSE_TYPE_TQ1_0: off[0] = 52; break;
    case MUSE_TYPE_TQ2_0: off[0] = 64; break;
    default:
        muse_type_traits[type].to_float(q, scratch, n);
        return first_non_finite(scratch, n);
    }
    const struct muse_type_layout *lay = &muse_type_layouts[type];
    const int64_t nb = n / lay->block_size, stride = (int64_t)(lay->type_size / 2);
    for (int k = 0; k < n_off; k++) {
        const int64_t b = first_non_finite_half(q + off[k], nb, stride, 0x7c00);
        if (b >= 0) return b * lay->block_size;
    }
    return -1;
}

/*
 * Rows [r0, r1) of this thread: to f32, checked finite (llama-quantize validates its inputs),
 * quantized, and the output's scales checked finite (llama-quantize validates every output row:
 * an fp16 scale that overflowed, say). Stops at the first bad row.
 */
static void convert_rows(int ith, int nth, void *ctx) {
    const struct convert_job *j = ctx;
    const int64_t r0 = j->nrows * ith / nth, r1 = j->nrows * (ith + 1) / nth;
    const muse_from_float_fn q = muse_type_traits[j->to].from_float;
    float *scratch = j->scratch[ith];
    j->bad_row[ith] = -1;
    for (int64_t r = r0; r < r1; r += j->scratch_rows) {
        const int64_t k = r1 - r < j->scratch_rows ? r1 - r : j->scratch_rows, n = k * j->ne0;
        const float *f = (const float *)(j->src + (size_t)r * j->rs_src);
        if (j->from == MUSE_TYPE_F16) {
            f16_to_f32(j->src + (size_t)r * j->rs_src, scratch, n);
            f = scratch;
        } else if (j->from != MUSE_TYPE_F32) {
            muse_type_traits[j->from].to_float(j->src + (size_t)r * j->rs_src, scratch, n);
            f = scratch;
        }
        int64_t bad = first_non_finite(f, n);
        if (bad >= 0) {
            j->bad_row[ith] = r + bad / j->ne0;
            j->bad_out[ith] = false;
            return;
        }
        uint8_t *out = j->dst + (size_t)r * j->rs_dst;
        q(f, out, n);
        if ((bad = output_non_finite(j->to, out, n, scratch)) >= 0) {
            j->bad_row[ith] = r + bad / j->ne0;
            j->bad_out[ith] = true;
            return;
        }
    }
}

/* A copied F32/F16/BF16 tensor with a NaN or infinity: its first bad element, or -1. */
static int64_t copied_non_finite(const struct muse_gguf_tensor *t) {
    const int64_t n = t->n_elements;
    if (t->type == MUSE_TYPE_F32) return first_non_finite(t->data, n);
    if (t->type == MUSE_TYPE_F16) return first_non_finite_half(t->data, n, 1, 0x7c00);
    if (t->type == MUSE_TYPE_BF16) return first_non_finite_half(t->data, n, 1, 0x7f80);
    return -1;
}

static void region_or_direct(struct muse_threadpool *pool, muse_parallel_fn fn, void *ctx) {
    if (pool) muse_threadpool_run(pool, fn, ctx);
    else fn(0, 1, ctx);
}

/* Tell the progress callback that tensor i is written (or planned); MUSE_ERR_CANCELLED when it
 * asks to stop. */
static muse_status report(const struct run *r, int i, struct muse_error *err) {
    if (!r->p->progress) return MUSE_OK;
    const struct planned *pl = &r->plan[i];
    char b1[16], b2[16];
    struct muse_quantize_tensor info = {
        .index = i, .n_tensors = r->n, .name = pl->t->name, .type_in = ggml_name((enum muse_type)pl->t->type, b1),
        .type_out = ggml_name(pl->type_out, b2), .n_dims = pl->n_dims, .bytes_in = pl->t->nbytes,
        .bytes_out = pl->bytes_out, .fallback = pl->fallback, .manual = pl->manual,
    };
    memcpy(info.ne, pl->t->ne, sizeof info.ne);
    if (r->p->progress(r->p->progress_user, &info))
        return muse_error_set(err, MUSE_ERR_CANCELLED, "quantize cancelled after tensor %d of %d (%s)", i + 1, r->n,
                              pl->t->name);
    return MUSE_OK;
}

static muse_status write_output(struct run *r, const char *out_path, struct muse_error *err) {
    const struct muse_gguf *in = r->in;
    struct muse_gguf_writer *w = NULL;
    struct muse_threadpool *pool = NULL;
    uint8_t *buf = NULL, *src_copy = NULL; /* src_copy: an aligned copy of a misaligned source tensor */
    float **scratch = NULL;
    int nth = 1;
    muse_status st = muse_gguf_writer_open(out_path, &w, err);
    if (st) return st;
    for (uint64_t i = 0; i < in->n_kv && !st; i++) {
        const char *k = in->kv[i].key;
        if (!strcmp(k, "general.quantization_version") || !strcmp(k, "general.file_type") || !strcmp(k, "split.no") ||
            !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count"))
            continue;
        st = muse_gguf_writer_set_value(w, k, &in->kv[i].value);
    }
    if (!st) st = muse_gguf_writer_set_u32(w, "general.quantization_version", GGML_QNT_VERSION);
    if (!st) st = muse_gguf_writer_set_u32(w, "general.file_type", (uint32_t)r->ft->ftype);
    for (int i = 0; i < r->n && !st; i++)
        st = muse_gguf_writer_add_tensor(w, r->plan[i].t->name, r->plan[i].type_out, (uint32_t)r->plan[i].n_dims,
                                         r->plan[i].t->ne);
    if (!st) st = muse_gguf_writer_begin_data(w);
    if (st) goto fail_writer;

    /* buffers for the largest converted slab */
    size_t buf_size = 0;
    int64_t max_ne0 = 1;
    for (int i = 0; i < r->n; i++) {
        const struct planned *pl = &r->plan[i];
        if (pl->type_out == (enum muse_type)pl->t->type || pl->t->n_elements == 0) continue;
        const size_t rs = muse_type_row_size(pl->type_out, pl->t->ne[0]);
        const int64_t rows = pl->t->n_elements / pl->t->ne[0];
        int64_t slab = (int64_t)(SLAB_BYTES / (rs ? rs : 1));
        if (slab < 1) slab = 1;
        if (slab > rows) slab = rows;
        if ((size_t)slab * rs > buf_size) buf_size = (size_t)slab * rs;
        if (pl->t->ne[0] > max_ne0) max_ne0 = pl->t->ne[0];
    }
    if (buf_size) {
        if (r->p->n_threads != 1) {
            if ((st = muse_threadpool_create(r->p->n_threads, &pool, err))) goto fail;
            nth = muse_threadpool_n_threads(pool);
            if (nth == 1) {
                muse_threadpool_free(pool);
                pool = NULL;
            }
        }
        buf = malloc(buf_size);
        scratch = calloc((size_t)nth, sizeof *scratch);
        if (!buf || !scratch) goto nomem;
    }
    const int64_t scratch_rows = max_ne0 >= 65536 ? 1 : 65536 / max_ne0;
    int64_t bad_row[MUSE_THREADPOOL_MAX];
    bool bad_out[MUSE_THREADPOOL_MAX];
    if (buf_size)
        for (int k = 0; k < nth; k++)
            if (!(scratch[k] = malloc(sizeof(float) * (size_t)(scratch_rows * max_ne0)))) goto nomem;

    for (int i = 0; i < r->n; i++) {
        const struct planned *pl = &r->plan[i];
        const struct muse_gguf_tensor *t = pl->t;
        if (pl->type_out == (enum muse_type)t->type) {
            const int64_t bad = copied_non_finite(t);
            if (bad >= 0) {
                st = muse_error_set(err, MUSE_ERR_FORMAT, "%s: tensor %s has a NaN or infinity (element %lld)", r->in_path,
                                    t->name, (long long)bad);
                goto fail;
            }
            if ((st = muse_gguf_writer_write_data(w, t->data, (size_t)t->nbytes))) goto fail_writer;
        } else if (t->n_elements > 0) {   /* (an empty tensor has no bytes to write) */
            /* a file with general.alignment below 8 can place a tensor at any address; the
             * dequantizers read typed fields, so such a tensor is converted from an aligned copy */
            const uint8_t *data = t->data;
            if ((uintptr_t)data & 7) {
                if (!(src_copy = malloc((size_t)t->nbytes))) goto nomem;
                memcpy(src_copy, t->data, (size_t)t->nbytes);
                data = src_copy;
            }
            struct convert_job j = {
                .from = (enum muse_type)t->type, .to = pl->type_out, .ne0 = t->ne[0],
                .rs_src = muse_type_row_size((enum muse_type)t->type, t->ne[0]),
                .rs_dst = muse_type_row_size(pl->type_out, t->ne[0]), .scratch = scratch, .scratch_rows = scratch_rows,
                .bad_row = bad_row, .bad_out = bad_out,
            };
            const int64_t rows = t->n_elements / t->ne[0];
            const int64_t slab = (int64_t)(buf_size / j.rs_dst);
            for (int64_t r0 = 0; r0 < rows; r0 += slab) {
                j.nrows = rows - r0 < slab ? rows - r0 : slab;
                j.src = data + (size_t)r0 * j.rs_src;
                j.dst = buf;
                region_or_direct(pool, convert_rows, &j);
                for (int k = 0; k < nth; k++) {
                    if (bad_row[k] < 0) continue;
                    char b[16];
                    st = muse_error_set(err, MUSE_ERR_FORMAT,
                                        bad_out[k] ? "%s: tensor %s row %lld: quantized to %s it has a NaN or infinity (a "
                                                     "scale out of the fp16 range)"
                                                   : "%s: tensor %s row %lld has a NaN or infinity%.0s",
                                        r->in_path, t->name, (long long)(r0 + bad_row[k]), ggml_name(pl->type_out, b));
                    goto fail;
                }
                if ((st = muse_gguf_writer_write_data(w, buf, (size_t)j.nrows * j.rs_dst))) goto fail_writer;
            }
            free(src_copy);
            src_copy = NULL;
        }
        if ((st = report(r, i, err))) goto fail;
    }
    st = muse_gguf_writer_close(w, err);
    w = NULL;
    goto done;

nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory for the conversion buffers");
fail:
    if (w) {
        struct muse_error ignored;
        muse_gguf_writer_close(w, &ignored);   /* removes a partial file */
        unlink(out_path);                      /* and a whole one (cancelled after the last tensor) */
        w = NULL;
    }
    goto done;
fail_writer:
    muse_gguf_writer_close(w, err);            /* reports the writer's first error, removes the file */
    w = NULL;
done:
    free(src_copy);
    if (scratch)
        for (int k = 0; k < nth; k++) free(scratch[k]);
    free(scratch);
    free(buf);
    muse_threadpool_free(pool);
    return st;
}

// ---- entry point ----

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

muse_status muse_quantize(const char *in_path, const char *out_path, const struct muse_quantize_params *params,
                          struct muse_quantize_stats *stats, struct muse_error *err) {
    struct run r;
    memset(&r, 0, sizeof r);
    r.p = params;
    r.in_path = in_path;
    muse_status st;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!params || !in_path || (!out_path && !params->dry_run))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "muse_quantize: missing path or params");
    r.ft = muse_ftype_lookup(params->type);
    if (!r.ft)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "unknown quantization type '%s' (muse quantize --help lists them)",
                              params->type ? params->type : "");
    if (!r.ft->supported) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "type %s: %s", r.ft->name, r.ft->note);
    r.default_type = muse_ftype_default_type(r.ft->ftype);
    r.choice.ftype = r.ft->ftype;
    r.choice.output_type = r.choice.token_embd_type = MUSE_TYPE_COUNT;
    if (params->output_tensor_type &&
        (st = parse_type("output tensor type", params->output_tensor_type, &r.choice.output_type, err)))
        return st;
    if (params->token_embedding_type &&
        (st = parse_type("token embedding type", params->token_embedding_type, &r.choice.token_embd_type, err)))
        return st;
    if ((st = overrides_parse(params->tensor_types, &r.ov, &r.n_ov, err))) return st;
    if (r.n_ov && !muse_type_layouts[r.default_type].is_quantized) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                            "tensor type overrides need a quantized TYPE (llama-quantize ignores them for %s)", r.ft->name);
        goto out;
    }
    if (!params->dry_run && same_file(in_path, out_path)) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "input and output are the same file: %s", in_path);
        goto out;
    }
    pthread_once(&f16_once, f16_table_init);
    if ((st = muse_gguf_open(in_path, &r.in, err))) goto out;
    if ((st = read_model(&r, err)) || (st = make_plan(&r, err))) {
        muse_error_prefix(err, "%s: ", in_path);
        goto out;
    }
    if (!params->dry_run) {
        if ((st = write_output(&r, out_path, err))) goto out;
    } else {
        for (int i = 0; i < r.n; i++)
            if ((st = report(&r, i, err))) goto out;
    }
    if (stats) {
        stats->n_tensors = r.n;
        stats->ftype = r.ft->ftype;
        stats->n_fallback = r.qs.n_fallback;
        for (int i = 0; i < r.n; i++) {
            stats->n_converted += r.plan[i].type_out != (enum muse_type)r.plan[i].t->type;
            stats->n_elements += r.plan[i].t->n_elements;
            stats->bytes_in += r.plan[i].t->nbytes;
            stats->bytes_out += r.plan[i].bytes_out;
        }
    }
    muse_error_clear(err);
out:
    free(r.plan);
    overrides_free(r.ov, r.n_ov);
    muse_gguf_free(r.in);
    return st;
}
