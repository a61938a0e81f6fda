/*
 * synth_plant.c - the planted target + copying drafter pair (synth_plant.h): a GGUF rewritten
 * tensor by tensor (the keys copied, chosen tensors' values replaced).
 */
#include "synth/synth_plant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/types.h"

#define KEY_PERIOD "muse.synth.plant.period"
#define KEY_CONTENT "muse.synth.plant.content"
#define EMBD_CONST 1.0f    /* dimension 0 of every token embedding */
#define CONTROL_LOGIT 4.0f /* a control token's head row: -this on dimension 0 */
#define FIRST_CONTENT 3    /* content dimensions start here (1 and 2 stay free) */
#define N_PAIRS 4          /* RoPE pairs the copy head's query and key use */
#define SCORE_GAP 14.0     /* the attention score of the copied key above every other key */

// ---- random values -----------------------------------------------------------------------------------

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_normal(uint64_t *s) {
    const double u1 = ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    const double u2 = ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// ---- the rewrite -------------------------------------------------------------------------------------

enum fill { FILL_COPY, FILL_VALUES, FILL_ZERO };

/* What to do with tensor t: copy it, zero it, or write buf ([ne1][ne0] floats). */
typedef enum fill (*fill_fn)(void *user, const struct muse_gguf_tensor *t, float *buf);

struct extra_key {
    const char *key;
    uint32_t value;
};

static bool tensor_is(const struct muse_gguf_tensor *t, const char *suffix, int layer) {
    char name[96];
    if (layer < 0) snprintf(name, sizeof name, "%s", suffix);
    else snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    return !strcmp(t->name, name);
}

/* "blk.N.<suffix>" for any N. */
static bool tensor_any_layer(const struct muse_gguf_tensor *t, const char *suffix) {
    const char *dot = strncmp(t->name, "blk.", 4) ? NULL : strchr(t->name + 4, '.');
    return dot && !strcmp(dot + 1, suffix);
}

static muse_status rewrite(const char *in, const char *out, const struct extra_key *extra, int n_extra, fill_fn fill,
                           void *user, struct muse_error *err) {
    struct muse_gguf *g = NULL;
    struct muse_gguf_writer *w = NULL;
    float *buf = NULL;
    void *row = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.plant-%d.tmp", out, (int)getpid());
    muse_status st = muse_gguf_open(in, &g, err);
    if (st) return st;
    if ((st = muse_gguf_writer_open(tmp, &w, err))) goto done;
    for (uint64_t i = 0; i < g->n_kv && !st; i++) {
        bool replaced = false;
        for (int k = 0; k < n_extra; k++) replaced |= !strcmp(g->kv[i].key, extra[k].key);
        if (!replaced) st = muse_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value);
    }
    for (int k = 0; k < n_extra && !st; k++) st = muse_gguf_writer_set_u32(w, extra[k].key, extra[k].value);
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        st = muse_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    if (!st) st = muse_gguf_writer_begin_data(w);
    if (st) {
        st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
        goto done;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        const int64_t ne0 = t->ne[0], rows = t->n_elements / ne0;
        free(buf);
        if (!(buf = calloc((size_t)t->n_elements, sizeof(float)))) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto done;
        }
        const enum fill f = fill(user, t, buf);
        if (f == FILL_COPY) {
            st = muse_gguf_writer_write_data(w, t->data, t->nbytes);
        } else if (f == FILL_ZERO) {
            void *z = calloc(1, t->nbytes);
            st = z ? muse_gguf_writer_write_data(w, z, t->nbytes) : MUSE_ERR_NOMEM;
            free(z);
        } else {
            const muse_from_float_fn q = muse_type_traits[t->type].from_float;
            if (!q) {
                const struct muse_type_layout *lay = muse_type_layout_get(t->type);
                st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                    "planting values into '%s' needs a type with a quantizer (f32, f16, bf16, q8_0), not %s",
                                    t->name, lay ? lay->name : "?");
                goto done;
            }
            const size_t rs = muse_type_row_size((enum muse_type)t->type, ne0);
            free(row);
            if (!(row = malloc(rs))) {
                st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
                goto done;
            }
            for (int64_t r = 0; r < rows && !st; r++) {
                q(buf + (size_t)r * ne0, row, ne0);
                st = muse_gguf_writer_write_data(w, row, rs);
            }
        }
        if (st) {
            st = muse_error_set(err, st, "%s", muse_gguf_writer_error(w));
            goto done;
        }
    }
    st = muse_gguf_writer_close(w, err);
    w = NULL;
    if (!st && rename(tmp, out)) st = muse_error_set(err, MUSE_ERR_IO, "cannot rename %s to %s", tmp, out);
done:
    if (w) muse_gguf_writer_close(w, NULL);
    if (st) unlink(tmp);
    free(buf);
    free(row);
    muse_gguf_free(g);
    return st;
}

// ---- the target ---------------------------------------------------------------------------------------

struct target_plan {
    int64_t H, V;
    int32_t m;
    float noise;
    float *content;  /* [V][m]; zero rows for control tokens */
    int32_t *succ;   /* [V]; -1 for control tokens outside the cycles */
    uint64_t rng;
};

static enum fill fill_target(void *user, const struct muse_gguf_tensor *t, float *buf) {
    struct target_plan *p = user;
    const int64_t H = p->H;
    if (tensor_is(t, "token_embd.weight", -1)) {
        for (int64_t v = 0; v < p->V; v++) {
            float *e = buf + v * H;
            e[0] = EMBD_CONST;
            memcpy(e + FIRST_CONTENT, p->content + v * p->m, sizeof(float) * (size_t)p->m);
        }
        return FILL_VALUES;
    }
    if (tensor_is(t, "output.weight", -1)) {
        const float scale = 4.0f / sqrtf((float)p->m);
        for (int64_t v = 0; v < p->V; v++) {
            if (p->succ[v] < 0) continue;
            float *o = buf + (int64_t)p->succ[v] * H;
            for (int32_t i = 0; i < p->m; i++) o[FIRST_CONTENT + i] += scale * p->content[v * p->m + i];
        }
        for (int64_t v = 0; v < p->V; v++) { /* rows nothing maps to (control tokens) lose */
            bool target = false;
            for (int32_t i = 0; i < p->m && !target; i++) target = buf[v * H + FIRST_CONTENT + i] != 0.0f;
            if (!target) buf[v * H] = -CONTROL_LOGIT;
        }
        return FILL_VALUES;
    }
    if (tensor_any_layer(t, "post_attention_norm.weight") || tensor_any_layer(t, "post_ffw_norm.weight")) {
        for (int64_t i = 0; i < t->n_elements; i++) buf[i] = p->noise * (1.0f + 0.1f * rng_normal(&p->rng));
        return FILL_VALUES;
    }
    return FILL_COPY;
}

muse_status muse_synth_plant_target(const char *in, const char *out, const struct muse_synth_plant_config *cfg,
                                    struct muse_error *err) {
    struct muse_gguf *g = NULL;
    struct target_plan p = {0};
    muse_status st = muse_gguf_open(in, &g, err);
    if (st) return st;
    const struct muse_gguf_tensor *te = muse_gguf_find_tensor(g, "token_embd.weight");
    const struct muse_gguf_kv *types = muse_gguf_find_kv(g, "tokenizer.ggml.token_type");
    uint32_t eos = UINT32_MAX;
    muse_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos, NULL);
    if (!te || !types || types->value.type != MUSE_GGUF_TYPE_ARRAY) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "%s: not a muse synth target (token_embd or token types missing)", in);
        goto done;
    }
    p.H = te->ne[0];
    p.V = te->ne[1];
    p.m = cfg->content > 0 ? cfg->content : (int32_t)(p.H / 2 > 16 ? p.H / 2 : 16);
    if (p.m > p.H - FIRST_CONTENT) p.m = (int32_t)(p.H - FIRST_CONTENT);
    p.noise = cfg->noise;
    p.rng = cfg->seed ^ 0x706c616e74ull;
    if (cfg->period < 2 || cfg->content > p.H - FIRST_CONTENT || p.m < 1 || (int64_t)types->value.v.arr.count != p.V) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                            "planting needs a period >= 2 (got %d) and at most %lld content dimensions (got %d)", cfg->period,
                            (long long)(p.H - FIRST_CONTENT), cfg->content);
        goto done;
    }
    p.content = calloc((size_t)(p.V * p.m), sizeof(float));
    p.succ = malloc(sizeof(int32_t) * (size_t)p.V);
    int32_t *normal = malloc(sizeof(int32_t) * (size_t)p.V);
    if (!p.content || !p.succ || !normal) {
        free(normal);
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto done;
    }
    int32_t n = 0;
    for (int64_t v = 0; v < p.V; v++) {
        p.succ[v] = -1;
        const bool control = muse_gguf_arr_i64(&types->value, (uint64_t)v) == 3;
        if (!control || (cfg->stop_in_cycle && (uint32_t)v == eos)) {
            if ((uint32_t)v != eos) normal[n++] = (int32_t)v;
            for (int32_t i = 0; i < p.m; i++) p.content[v * p.m + i] = rng_normal(&p.rng);
        }
    }
    if (cfg->stop_in_cycle && eos < (uint32_t)p.V && n >= cfg->period) { /* EOS ends the first cycle */
        memmove(normal + cfg->period, normal + cfg->period - 1, sizeof(int32_t) * (size_t)(n - cfg->period + 1));
        normal[cfg->period - 1] = (int32_t)eos;
        n++;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t start = i / cfg->period * cfg->period;
        const int32_t len = n - start < cfg->period ? n - start : cfg->period;
        p.succ[normal[i]] = normal[start + (i - start + 1) % len];
    }
    free(normal);
    const struct extra_key keys[] = {{KEY_PERIOD, (uint32_t)cfg->period}, {KEY_CONTENT, (uint32_t)p.m}};
    muse_gguf_free(g);
    g = NULL;
    st = rewrite(in, out, keys, 2, fill_target, &p, err);
done:
    muse_gguf_free(g);
    free(p.content);
    free(p.succ);
    return st;
}

// ---- the drafter --------------------------------------------------------------------------------------

struct drafter_plan {
    int64_t H, F;
    int32_t n_head, n_head_kv, hd, n_rot, k0, m, n_layer;
    float qk_scale, wo_scale;
    float qhat[512], khat[512]; /* [hd] before the norm (hd <= 512) */
};

/* max over 0 < |delta| <= range of sum_j cos(delta theta_j) / N_PAIRS: how close another key scores */
static double worst_alias(const float *theta, int32_t range) {
    double worst = -1.0;
    for (int32_t d = 1; d <= range; d++) {
        double f = 0;
        for (int j = 0; j < N_PAIRS; j++) f += cos((double)d * theta[j]);
        if (f / N_PAIRS > worst) worst = f / N_PAIRS;
    }
    return worst;
}

static enum fill fill_drafter(void *user, const struct muse_gguf_tensor *t, float *buf) {
    const struct drafter_plan *p = user;
    const int64_t H = p->H, hd = p->hd, group = p->n_head / p->n_head_kv;
    if (tensor_is(t, "fc.weight", -1)) { /* [H rows][F]: g_1 = feat_0 of slot k0; g_{3+i} = feat_{3+i} */
        const int64_t base = (int64_t)p->k0 * H;
        buf[1 * p->F + base + 0] = 1.0f;
        for (int32_t i = 0; i < p->m; i++) buf[(FIRST_CONTENT + i) * p->F + base + FIRST_CONTENT + i] = 1.0f;
        return FILL_VALUES;
    }
    if (tensor_is(t, "enc.output_norm.weight", -1) || tensor_is(t, "output_norm.weight", -1) ||
        tensor_is(t, "attn_norm.weight", 0)) {
        for (int64_t i = 0; i < t->n_elements; i++) buf[i] = 1.0f;
        return FILL_VALUES;
    }
    if (tensor_is(t, "attn_q_norm.weight", 0) || tensor_is(t, "attn_k_norm.weight", 0)) {
        for (int64_t i = 0; i < t->n_elements; i++) buf[i] = p->qk_scale;
        return FILL_VALUES;
    }
    if (tensor_is(t, "attn_q.weight", 0)) { /* every head: qhat times x_0 (the embedding's constant) */
        for (int32_t h = 0; h < p->n_head; h++)
            for (int64_t i = 0; i < hd; i++) buf[(h * hd + i) * H + 0] = p->qhat[i];
        return FILL_VALUES;
    }
    if (tensor_is(t, "attn_k.weight", 0)) { /* every kv head: khat times g_1 (context rows only) */
        for (int32_t j = 0; j < p->n_head_kv; j++)
            for (int64_t i = 0; i < hd; i++) buf[(j * hd + i) * H + 1] = p->khat[i];
        return FILL_VALUES;
    }
    if (tensor_is(t, "attn_v.weight", 0)) { /* kv head j carries content dims j*hd .. */
        for (int32_t j = 0; j < p->n_head_kv; j++)
            for (int64_t i = 0; i < hd; i++)
                if (j * hd + i < p->m) buf[(j * hd + i) * H + FIRST_CONTENT + j * hd + i] = 1.0f;
        return FILL_VALUES;
    }
    if (tensor_is(t, "attn_output.weight", 0)) { /* [H rows][n_head * hd]: the copies back into the residual */
        const int64_t n_q = (int64_t)p->n_head * hd;
        for (int32_t h = 0; h < p->n_head; h++) {
            const int64_t j = h / group;
            for (int64_t i = 0; i < hd; i++)
                if (j * hd + i < p->m) buf[(FIRST_CONTENT + j * hd + i) * n_q + h * hd + i] = p->wo_scale / (float)group;
        }
        return FILL_VALUES;
    }
    if (tensor_any_layer(t, "attn_output.weight") || tensor_any_layer(t, "ffn_down.weight")) return FILL_ZERO;
    return FILL_COPY;
}

static muse_status get_u32(const struct muse_gguf *g, const char *key, uint32_t *v, struct muse_error *err) {
    return muse_gguf_get_u32(g, key, v, err);
}

muse_status muse_synth_plant_drafter(const char *target, const char *in, const char *out, struct muse_error *err) {
    struct muse_gguf *tg = NULL, *dg = NULL;
    muse_status st = muse_gguf_open(target, &tg, err);
    if (st) return st;
    if ((st = muse_gguf_open(in, &dg, err))) goto done;
    uint32_t period = 0, content = 0, H = 0, n_layer = 0, n_head = 0, n_head_kv = 0, hd = 0, n_rot = 0, window = 0, block = 0;
    float base = 10000.0f;
    if (get_u32(tg, KEY_PERIOD, &period, NULL) || get_u32(tg, KEY_CONTENT, &content, NULL)) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "%s is not a planted target (muse synth --cycle L)", target);
        goto done;
    }
    if ((st = get_u32(dg, "dflash.embedding_length", &H, err)) || (st = get_u32(dg, "dflash.block_count", &n_layer, err)) ||
        (st = get_u32(dg, "dflash.attention.head_count", &n_head, err)) ||
        (st = get_u32(dg, "dflash.attention.head_count_kv", &n_head_kv, err)) ||
        (st = get_u32(dg, "dflash.attention.key_length", &hd, err)) ||
        (st = get_u32(dg, "dflash.attention.sliding_window", &window, err)) || (st = get_u32(dg, "dflash.block_size", &block, err)))
        goto done;
    if (get_u32(dg, "dflash.rope.dimension_count", &n_rot, NULL)) n_rot = hd;
    muse_gguf_get_f32(dg, "dflash.rope.freq_base", &base, NULL);
    const struct muse_gguf_value *tl = NULL;
    if ((st = muse_gguf_get_arr(dg, "dflash.target_layers", &tl, err))) goto done;
    struct drafter_plan p = {.H = H, .F = (int64_t)tl->v.arr.count * H, .n_head = (int32_t)n_head, .n_head_kv = (int32_t)n_head_kv,
                             .hd = (int32_t)hd, .n_rot = (int32_t)n_rot, .k0 = -1, .m = (int32_t)content, .n_layer = (int32_t)n_layer};
    for (uint64_t i = 0; i < tl->v.arr.count; i++)
        if (muse_gguf_arr_i64(tl, i) == 0 && p.k0 < 0) p.k0 = (int32_t)i;
    const int32_t D = (int32_t)period + 1;
    if (p.k0 < 0 || (int64_t)n_head_kv * hd < content || D + 1 >= (int32_t)window || hd > 512 || n_rot < 2 * N_PAIRS ||
        n_head_kv == 0 || n_head % n_head_kv) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                            "a copying drafter needs target layer 0 among its target layers, KV heads x head size >= the "
                            "target's %u content dimensions (has %u x %u), a window above %d (has %u) and at least %d RoPE "
                            "dimensions",
                            content, n_head_kv, hd, D + 1, window, 2 * N_PAIRS);
        goto done;
    }
    /* khat: pairs 0..N_PAIRS-1 (their first halves); qhat = khat rotated back by D positions, so
     * q(pos).k(pos - d) = sum_j cos((D - d) theta_j): largest at d = D (NeoX: pair j is dims j, j + n_rot/2) */
    float theta[N_PAIRS];
    for (int j = 0; j < N_PAIRS; j++) {
        theta[j] = powf(base, -2.0f * (float)j / (float)n_rot);
        p.khat[j] = 1.0f;
        p.qhat[j] = cosf((float)D * theta[j]);
        p.qhat[j + n_rot / 2] = -sinf((float)D * theta[j]);
    }
    const double gap = 1.0 - worst_alias(theta, (int32_t)(window + block));
    if (gap < 0.02) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "a window of %u is too long for the copying head to single out one key",
                            window);
        goto done;
    }
    /* |q| = |k| = sqrt(hd) * s after the per-head norm: the score at the key is sqrt(hd) s^2 (times
     * the aliasing gap for the next best key): make that SCORE_GAP */
    p.qk_scale = (float)sqrt(SCORE_GAP / (gap * sqrt((double)hd)));
    p.wo_scale = 4.0f;
    muse_gguf_free(tg);
    muse_gguf_free(dg);
    return rewrite(in, out, NULL, 0, fill_drafter, &p, err);
done:
    muse_gguf_free(tg);
    muse_gguf_free(dg);
    return st;
}
