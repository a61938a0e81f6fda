/*
 * test_synth.c - synthetic Muse-Glimmer files (synth/synth.h) against the spec: tensor names,
 * shapes and types of text-model.md §4, the keys of §3, the vocabulary rules of
 * tokenizer-and-chat.md §2 (GPT-2 byte alphabet, merges, special-token ids), determinism, and
 * the written files parsed back with muse_gguf_open.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "text/glimmer_template.h"
#include "gguf/gguf.h"
#include "kernels/types.h"
#include "synth/synth.h"
#include "test.h"

/* ---- independent helpers -------------------------------------------------------------- */

/* GPT-2 bytes_to_unicode, written the way the spec describes it (2.4 step 3). */
static void gpt2_byte_table(uint32_t cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp[b] = keep ? (uint32_t)b : 0;
    }
    for (int b = 0; b < 256; b++)
        if (!((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae))) cp[b] = 256 + (uint32_t)n++;
}

static void utf8_put(uint32_t c, char *out, size_t *o) {
    if (c < 0x80) {
        out[(*o)++] = (char)c;
    } else {
        out[(*o)++] = (char)(0xc0 | (c >> 6));
        out[(*o)++] = (char)(0x80 | (c & 0x3f));
    }
}

/* Sorted lookup of a string array: index i of strs[] by text. */
struct index {
    const char **sorted;
    int32_t *ids;
    int32_t n;
};

static const char *const *sort_base;
static int cmp_idx(const void *a, const void *b) {
    return strcmp(sort_base[*(const int32_t *)a], sort_base[*(const int32_t *)b]);
}

static void index_build(struct index *ix, char *const *strs, int32_t n) {
    ix->n = n;
    ix->ids = malloc((size_t)n * sizeof(int32_t));
    ix->sorted = malloc((size_t)n * sizeof(char *));
    for (int32_t i = 0; i < n; i++) ix->ids[i] = i;
    sort_base = (const char *const *)strs;
    qsort(ix->ids, (size_t)n, sizeof(int32_t), cmp_idx);
    for (int32_t i = 0; i < n; i++) ix->sorted[i] = strs[ix->ids[i]];
}

static int32_t index_find(const struct index *ix, const char *s) {
    int32_t lo = 0, hi = ix->n - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        int c = strcmp(ix->sorted[mid], s);
        if (!c) return ix->ids[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void index_free(struct index *ix) {
    free(ix->ids);
    free(ix->sorted);
}

/* A tiny merges-based BPE over one piece (llama.cpp's algorithm: lowest rank first, leftmost on
 * ties); returns the number of final symbols, or -1 when a symbol is not a token. */
static int bpe_count(const struct index *tokens, const struct index *merges, const char *piece) {
    uint32_t cp[256];
    gpt2_byte_table(cp);
    char sym[64][128];
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)piece; *p; p++) {
        size_t o = 0;
        utf8_put(cp[*p], sym[n], &o);
        sym[n++][o] = 0;
    }
    for (;;) {
        int best_rank = -1, best_i = -1;
        for (int i = 0; i + 1 < n; i++) {
            char pair[260];
            snprintf(pair, sizeof(pair), "%s %s", sym[i], sym[i + 1]);
            int r = index_find(merges, pair);
            if (r >= 0 && (best_rank < 0 || r < best_rank)) {
                best_rank = r;
                best_i = i;
            }
        }
        if (best_rank < 0) break;
        size_t la = strlen(sym[best_i]), lb = strlen(sym[best_i + 1]);
        if (la + lb >= sizeof(sym[0])) return -1;
        memcpy(sym[best_i] + la, sym[best_i + 1], lb + 1);
        memmove(sym[best_i + 1], sym[best_i + 2], (size_t)(n - best_i - 2) * sizeof(sym[0]));
        n--;
    }
    for (int i = 0; i < n; i++)
        if (index_find(tokens, sym[i]) < 0) return -1;
    return n;
}

/* ---- vocabulary -------------------------------------------------------------------------- */

static void check_vocab_rules(int32_t n_vocab) {
    struct muse_synth_vocab *v = NULL;
    struct muse_error err;
    TEST_CONDF(muse_synth_vocab_build(n_vocab, &v, &err) == MUSE_OK, "vocab %d builds: %s", n_vocab, err.msg);
    if (!v) return;
    TEST_CONDF(v->n_tokens == n_vocab, "vocab %d: %d tokens", n_vocab, v->n_tokens);
    uint32_t cp[256];
    gpt2_byte_table(cp);
    int bad_bytes = 0;
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t o = 0;
        utf8_put(cp[b], s, &o);
        s[o] = 0;
        bad_bytes += strcmp(v->tokens[b], s) != 0 || v->types[b] != MUSE_SYNTH_TOKEN_NORMAL;
    }
    TEST_CONDF(bad_bytes == 0, "vocab %d: ids 0..255 are the GPT-2 byte tokens (%d wrong)", n_vocab, bad_bytes);
    TEST_COND("space is U+0120, newline U+010A", !strcmp(v->tokens[' '], "\xc4\xa0") && !strcmp(v->tokens['\n'], "\xc4\x8a"));

    /* no duplicate token texts, no duplicate merges */
    struct index tok, mer;
    index_build(&tok, v->tokens, v->n_tokens);
    index_build(&mer, v->merges, v->n_merges);
    int dups = 0;
    for (int i = 1; i < n_vocab; i++) dups += !strcmp(tok.sorted[i - 1], tok.sorted[i]);
    for (int i = 1; i < v->n_merges; i++) dups += !strcmp(mer.sorted[i - 1], mer.sorted[i]);
    TEST_CONDF(dups == 0, "vocab %d: %d duplicate token texts or merges", n_vocab, dups);

    /* merges: both sides are tokens, the result is a NORMAL token with a larger id than either side */
    int bad_merges = 0;
    for (int m = 0; m < v->n_merges; m++) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", v->merges[m]);
        char *sp = strchr(buf, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            bad_merges++;
            continue;
        }
        *sp = 0;
        int l = index_find(&tok, buf), r = index_find(&tok, sp + 1);
        char joined[512];
        snprintf(joined, sizeof(joined), "%s%s", buf, sp + 1);
        int res = index_find(&tok, joined);
        if (l < 0 || r < 0 || res < 0 || res <= l || res <= r || v->types[res] != MUSE_SYNTH_TOKEN_NORMAL) bad_merges++;
    }
    TEST_CONDF(bad_merges == 0, "vocab %d: %d bad merges", n_vocab, bad_merges);
    TEST_CONDF(v->n_merges >= (n_vocab >= 8192 ? 7000 : n_vocab / 2), "vocab %d: %d merges", n_vocab, v->n_merges);

    /* special tokens: text, CONTROL type, and ids (real ids for the real size, else the last 12) */
    struct { const char *text; int32_t real_id; int32_t id; } sp[] = {
        {"<|begin_of_text|>", 200000, v->bos}, {"<|end_of_text|>", 200001, v->eos}, {"<|eom|>", 200007, v->eom},
        {"<|eot|>", 200008, v->eot},           {"<|start|>", 200022, v->start},     {"<|message|>", 200023, v->message},
        {"<|image_start|>", 200080, v->image_start}, {"<|image_end|>", 200081, v->image_end},
        {"<|video|>", 200091, v->video},       {"<|patch|>", 200092, v->patch},
    };
    bool real = n_vocab >= 202048;
    int n_control = 0;
    for (int i = 0; i < n_vocab; i++) n_control += v->types[i] == MUSE_SYNTH_TOKEN_CONTROL;
    TEST_CONDF(n_control == (real ? 2048 : 12), "vocab %d: %d CONTROL tokens", n_vocab, n_control);
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) {
        int id = index_find(&tok, sp[i].text);
        TEST_CONDF(id >= 0 && id == sp[i].id && v->types[id] == MUSE_SYNTH_TOKEN_CONTROL, "vocab %d: %s id %d", n_vocab,
                   sp[i].text, id);
        if (real) TEST_CONDF(id == sp[i].real_id, "%s at its real id %d (got %d)", sp[i].text, sp[i].real_id, id);
        else TEST_CONDF(id >= n_vocab - 12, "%s in the last 12 ids (got %d)", sp[i].text, id);
    }
    if (real) TEST_COND("reserved names", !strcmp(v->tokens[200002], "<|reserved_special_token_2|>") &&
                                              !strcmp(v->tokens[202047], "<|reserved_special_token_2047|>"));

    /* English tokenizes into multi-byte tokens */
    const char *words[] = {" the", " of", " and", " people", " question", " government", " Hello", " world", " assistant"};
    int total_bytes = 0, total_tokens = 0, failed = 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        int n = bpe_count(&tok, &mer, words[i]);
        if (n < 0) failed++;
        total_bytes += (int)strlen(words[i]);
        total_tokens += n;
    }
    TEST_CONDF(failed == 0, "vocab %d: every BPE symbol is a token", n_vocab);
    TEST_CONDF(bpe_count(&tok, &mer, " the") == 1, "vocab %d: ' the' is one token", n_vocab);
    TEST_CONDF(total_tokens * 2 < total_bytes, "vocab %d: %d bytes -> %d tokens", n_vocab, total_bytes, total_tokens);
    index_free(&tok);
    index_free(&mer);
    muse_synth_vocab_free(v);
}

static void test_vocab(void) {
    check_vocab_rules(MUSE_SYNTH_MIN_VOCAB + 300);
    check_vocab_rules(2000);
    check_vocab_rules(8192);
    check_vocab_rules(202048);
    struct muse_synth_vocab *a = NULL, *b = NULL;
    struct muse_error err;
    TEST_COND("below the minimum is an error", muse_synth_vocab_build(MUSE_SYNTH_MIN_VOCAB - 1, &a, &err) == MUSE_ERR_INVALID_ARG);
    muse_synth_vocab_build(3000, &a, &err);
    muse_synth_vocab_build(3000, &b, &err);
    bool same = a && b && a->n_merges == b->n_merges;
    for (int i = 0; same && i < a->n_tokens; i++) same = !strcmp(a->tokens[i], b->tokens[i]);
    for (int i = 0; same && i < a->n_merges; i++) same = !strcmp(a->merges[i], b->merges[i]);
    TEST_COND("vocabulary is deterministic", same);
    muse_synth_vocab_free(a);
    muse_synth_vocab_free(b);
}

static void test_template(void) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/golden/chat/templates/muse-glimmer.jinja", test_shared_dir());
    FILE *f = fopen(path, "rb");
    TEST_CONDF(f != NULL, "open %s", path);
    if (!f) return;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    TEST_COND("chat template is muse-glimmer.jinja byte for byte", !strcmp(buf, muse_glimmer_chat_template));
}

/* ---- plan -------------------------------------------------------------------------------- */

struct want {
    const char *name;
    int64_t ne0, ne1; /* ne1 = 0: 1-D */
    enum muse_type type;
};

static const struct muse_synth_tensor *find_t(const struct muse_synth_tensor *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static void check_want(const struct muse_synth_tensor *t, size_t n, const struct want *w, size_t nw, const char *what) {
    for (size_t i = 0; i < nw; i++) {
        const struct muse_synth_tensor *x = find_t(t, n, w[i].name);
        TEST_CONDF(x != NULL, "%s: %s present", what, w[i].name);
        if (!x) continue;
        TEST_CONDF(x->n_dims == (w[i].ne1 ? 2u : 1u) && x->ne[0] == w[i].ne0 && x->ne[1] == (w[i].ne1 ? w[i].ne1 : 1),
                   "%s: %s shape {%lld, %lld}", what, w[i].name, (long long)x->ne[0], (long long)x->ne[1]);
        TEST_CONDF(x->type == w[i].type, "%s: %s type %s, want %s", what, w[i].name, muse_type_layouts[x->type].name,
                   muse_type_layouts[w[i].type].name);
    }
}

static void test_plan_30b(void) {
    struct muse_synth_config cfg;
    struct muse_error err;
    TEST_COND("30b preset", muse_synth_preset("30b", &cfg, &err) == MUSE_OK);
    struct muse_synth_tensor *t = NULL;
    size_t n = 0;
    TEST_COND("30b plan", muse_synth_plan(&cfg, &t, &n, &err) == MUSE_OK);
    /* text-model.md §4: the published file has 731 tensors, 313 of them 1-D */
    TEST_CONDF(n == 731, "30b: 731 tensors, got %zu", n);
    size_t n1 = 0;
    for (size_t i = 0; i < n; i++) n1 += t[i].n_dims == 1;
    TEST_CONDF(n1 == 313, "30b: 313 norms, got %zu", n1);
    const struct want w[] = {
        {"token_embd.weight", 6656, 202048, MUSE_TYPE_Q4_K},
        {"output_norm.weight", 6656, 0, MUSE_TYPE_F32},
        {"output.weight", 6656, 202048, MUSE_TYPE_Q6_K},
        {"blk.0.attn_norm.weight", 6656, 0, MUSE_TYPE_F32},
        {"blk.0.attn_q.weight", 6656, 4096, MUSE_TYPE_Q4_K},
        {"blk.0.attn_k.weight", 6656, 256, MUSE_TYPE_Q4_K},
        {"blk.0.attn_v.weight", 6656, 256, MUSE_TYPE_Q4_K},
        {"blk.0.attn_output.weight", 4096, 6656, MUSE_TYPE_Q4_K},
        {"blk.0.attn_q_norm.weight", 128, 0, MUSE_TYPE_F32}, /* attn_* matches, but norms stay F32 */
        {"blk.0.attn_k_norm.weight", 128, 0, MUSE_TYPE_F32},
        {"blk.51.attn_gate.weight", 6656, 4096, MUSE_TYPE_Q4_K},
        {"blk.51.post_attention_norm.weight", 6656, 0, MUSE_TYPE_F32},
        {"blk.51.ffn_norm.weight", 6656, 0, MUSE_TYPE_F32}, /* ffn_* matches, still F32 */
        {"blk.51.ffn_gate.weight", 6656, 19968, MUSE_TYPE_IQ2_XXS},
        {"blk.51.ffn_up.weight", 6656, 19968, MUSE_TYPE_IQ2_XXS},
        {"blk.51.ffn_down.weight", 19968, 6656, MUSE_TYPE_IQ2_XXS},
        {"blk.51.post_ffw_norm.weight", 6656, 0, MUSE_TYPE_F32},
    };
    check_want(t, n, w, sizeof(w) / sizeof(w[0]), "30b");
    TEST_COND("no blk.52", find_t(t, n, "blk.52.attn_norm.weight") == NULL);
    /* ~10 GB at IQ2_XXS */
    double gb = (double)muse_synth_data_bytes(t, n) / 1e9;
    TEST_CONDF(gb > 9.0 && gb < 11.0, "30b is about 10 GB (%.2f)", gb);
    TEST_CONDF(muse_synth_file_type(t, n) == 19, "30b file_type MOSTLY_IQ2_XXS (%u)", muse_synth_file_type(t, n));
    /* value recipe (golden/text/README.md): q_norm around 3.87, output std 4/(sqrt(n_embd)*logit_scale) */
    const struct muse_synth_tensor *q = find_t(t, n, "blk.0.attn_q_norm.weight");
    const struct muse_synth_tensor *o = find_t(t, n, "output.weight");
    TEST_COND("q_norm mean 3.87", q && fabsf(q->mean - 3.87f) < 1e-6f);
    TEST_CONDF(o && fabsf(o->std - 4.0f / (sqrtf(6656.0f) * 0.19611613f)) < 1e-4f, "output std %g", o ? o->std : 0);
    free(t);
    /* layer pattern: il % 4 == 3 is full */
    bool ok = true;
    for (int il = 0; il < 52; il++) ok &= muse_synth_layer_is_swa(&cfg, il) == (il % 4 != 3);
    TEST_COND("30b SWA pattern", ok);
}

static void test_rules(void) {
    struct muse_synth_config cfg;
    struct muse_error err;
    muse_synth_preset("tiny", &cfg, &err);
    TEST_COND("unknown type", muse_synth_parse_types("ffn_*=q9_k", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("activation type q8_k", muse_synth_parse_types("*=q8_k", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("integer type", muse_synth_parse_types("*=i32", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("empty glob", muse_synth_parse_types("=q4_k", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("no '='", muse_synth_parse_types("q4_k", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("rules unchanged after errors", cfg.n_rules == 0);
    TEST_COND("unknown preset", muse_synth_preset("70b", &cfg, &err) == MUSE_ERR_INVALID_ARG);

    /* user rules go before the preset's: first match wins; full names work too */
    muse_synth_preset("small", &cfg, &err); /* *=q8_0 */
    TEST_COND("rules parse", muse_synth_parse_types("blk.1.ffn_*=q4_k,ffn_down=f16,attn_?=bf16", &cfg, &err) == MUSE_OK);
    struct muse_synth_tensor *t = NULL;
    size_t n = 0;
    TEST_CONDF(muse_synth_plan(&cfg, &t, &n, &err) == MUSE_OK, "small plan: %s", err.msg);
    const struct want w[] = {
        {"blk.1.ffn_down.weight", 768, 256, MUSE_TYPE_Q4_K},
        {"blk.1.ffn_up.weight", 256, 768, MUSE_TYPE_Q4_K},
        {"blk.0.ffn_down.weight", 768, 256, MUSE_TYPE_F16},
        {"blk.0.ffn_up.weight", 256, 768, MUSE_TYPE_Q8_0},
        {"blk.2.attn_q.weight", 256, 256, MUSE_TYPE_BF16},
        {"blk.2.attn_v.weight", 256, 128, MUSE_TYPE_BF16},
        {"blk.2.attn_gate.weight", 256, 256, MUSE_TYPE_Q8_0},
        {"blk.2.attn_norm.weight", 256, 0, MUSE_TYPE_F32},
        {"token_embd.weight", 256, 2000, MUSE_TYPE_Q8_0},
        {"output.weight", 256, 2000, MUSE_TYPE_Q8_0},
    };
    check_want(t, n, w, sizeof(w) / sizeof(w[0]), "rules");
    free(t);

    /* a K type on rows that are not a multiple of 256 is refused, naming the tensor */
    muse_synth_preset("tiny", &cfg, &err);
    cfg.n_embd = 320;
    muse_synth_parse_types("*=q4_k", &cfg, &err);
    TEST_COND("block size check", muse_synth_validate(&cfg, &err) == MUSE_ERR_INVALID_ARG && strstr(err.msg, "weight"));
    muse_synth_preset("tiny", &cfg, &err);
    cfg.n_head_kv = 3;
    TEST_COND("heads % kv-heads", muse_synth_validate(&cfg, &err) == MUSE_ERR_INVALID_ARG);
    muse_synth_preset("tiny", &cfg, &err);
    cfg.head_dim = 33;
    TEST_COND("odd head_dim", muse_synth_validate(&cfg, &err) == MUSE_ERR_INVALID_ARG);

    /* patterns */
    muse_synth_preset("tiny", &cfg, &err);
    TEST_COND("period 3", muse_synth_parse_pattern("3", &cfg, &err) == MUSE_OK && !strcmp(cfg.pattern, "SSF"));
    TEST_COND("period 0", muse_synth_parse_pattern("0", &cfg, &err) == MUSE_OK && !strcmp(cfg.pattern, "S"));
    TEST_COND("period 1", muse_synth_parse_pattern("1", &cfg, &err) == MUSE_OK && !strcmp(cfg.pattern, "F"));
    TEST_COND("bad letters", muse_synth_parse_pattern("SXF", &cfg, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("letters", muse_synth_parse_pattern("FSFS", &cfg, &err) == MUSE_OK);
    TEST_COND("FSFS layer 0 full, 1 swa", !muse_synth_layer_is_swa(&cfg, 0) && muse_synth_layer_is_swa(&cfg, 1));
    cfg.pattern_scalar = true;
    TEST_COND("FSFS has no u32 form", muse_synth_validate(&cfg, &err) == MUSE_ERR_INVALID_ARG);
    /* a period longer than the model is cut: layer il uses pattern[il % period] */
    muse_synth_parse_pattern("SSSF", &cfg, &err);
    cfg.n_layer = 2;
    cfg.pattern_scalar = true;
    TEST_COND("period 4 on 2 layers", muse_synth_validate(&cfg, &err) == MUSE_OK && muse_synth_layer_is_swa(&cfg, 1));
}

/* ---- written files, parsed back ------------------------------------------------------------ */

static bool sanitizer(void) { return getenv("MUSE_SANITIZER") && !strcmp(getenv("MUSE_SANITIZER"), "1"); }

static char *tmp_path(char *buf, size_t size, const char *tag) {
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(buf, size, "%s/muse-test-synth-%d-%s.gguf", dir, (int)getpid(), tag);
    return buf;
}

static uint64_t kv_u64(const struct muse_gguf *g, const char *key) {
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    if (!kv) return UINT64_MAX;
    if (kv->value.type == MUSE_GGUF_TYPE_UINT32) return kv->value.v.u64;
    return UINT64_MAX - 1;
}

static double kv_f32(const struct muse_gguf *g, const char *key) {
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    return kv && kv->value.type == MUSE_GGUF_TYPE_FLOAT32 ? kv->value.v.f64 : NAN;
}

static bool kv_str_is(const struct muse_gguf *g, const char *key, const char *want) {
    const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, key);
    return kv && kv->value.type == MUSE_GGUF_TYPE_STRING && kv->value.v.str.len == strlen(want) &&
           !memcmp(kv->value.v.str.data, want, strlen(want));
}

/* Mean and RMS of a dequantized tensor (its first max_rows rows). */
static void tensor_stats(const struct muse_gguf_tensor *t, int64_t max_rows, double *mean, double *rms) {
    int64_t ne0 = t->ne[0], rows = t->ne[1] < max_rows ? t->ne[1] : max_rows;
    size_t row_size = muse_type_row_size((enum muse_type)t->type, ne0);
    float *y = malloc((size_t)ne0 * sizeof(float));
    double s = 0, s2 = 0;
    for (int64_t r = 0; r < rows; r++) {
        muse_type_traits[t->type].to_float((const uint8_t *)t->data + (size_t)r * row_size, y, ne0);
        for (int64_t i = 0; i < ne0; i++) {
            s += y[i];
            s2 += (double)y[i] * y[i];
        }
    }
    free(y);
    *mean = s / (double)(ne0 * rows);
    *rms = sqrt(s2 / (double)(ne0 * rows));
}

/* Everything in a written file against the config: keys, vocabulary keys, tensors, values. */
static void check_file(const char *path, const struct muse_synth_config *cfg, const char *what) {
    struct muse_gguf *g = NULL;
    struct muse_error err;
    TEST_CONDF(muse_gguf_open(path, &g, &err) == MUSE_OK, "%s: parses: %s", what, err.msg);
    if (!g) return;
    TEST_CONDF(g->version == 3 && g->alignment == 32, "%s: GGUF v3, alignment 32", what);
    TEST_CONDF(kv_str_is(g, "general.architecture", "muse-glimmer"), "%s: architecture", what);
    struct { const char *key; uint64_t want; } u[] = {
        {"muse-glimmer.block_count", (uint64_t)cfg->n_layer},
        {"muse-glimmer.embedding_length", (uint64_t)cfg->n_embd},
        {"muse-glimmer.feed_forward_length", (uint64_t)cfg->n_ff},
        {"muse-glimmer.context_length", (uint64_t)cfg->n_ctx},
        {"muse-glimmer.attention.head_count", (uint64_t)cfg->n_head},
        {"muse-glimmer.attention.head_count_kv", (uint64_t)cfg->n_head_kv},
        {"muse-glimmer.attention.key_length", (uint64_t)cfg->head_dim},
        {"muse-glimmer.attention.value_length", (uint64_t)cfg->head_dim},
        {"muse-glimmer.attention.sliding_window", (uint64_t)cfg->n_swa},
    };
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
        TEST_CONDF(kv_u64(g, u[i].key) == u[i].want, "%s: %s = %llu (u32)", what, u[i].key, (unsigned long long)u[i].want);
    /* the f32 values of text-model.md §3 */
    TEST_CONDF(kv_f32(g, "muse-glimmer.attention.layer_norm_rms_epsilon") == (double)1e-5f, "%s: rms eps", what);
    TEST_CONDF(kv_f32(g, "muse-glimmer.rope.freq_base") == 500000.0, "%s: rope base", what);
    TEST_CONDF(kv_f32(g, "muse-glimmer.final_logit_softcapping") == 20.0, "%s: softcap", what);
    TEST_CONDF(kv_f32(g, "muse-glimmer.logit_scale") == (double)0.19611613513818404f, "%s: logit scale", what);
    const struct muse_gguf_kv *pat = muse_gguf_find_kv(g, "muse-glimmer.attention.sliding_window_pattern");
    TEST_CONDF(pat != NULL, "%s: sliding_window_pattern present", what);
    if (pat && cfg->pattern_scalar) {
        size_t len = strlen(cfg->pattern);
        TEST_CONDF(pat->value.type == MUSE_GGUF_TYPE_UINT32 &&
                       pat->value.v.u64 == (strspn(cfg->pattern, "S") == len ? 0 : len), "%s: u32 pattern", what);
    } else if (pat) {
        bool ok = pat->value.type == MUSE_GGUF_TYPE_ARRAY && pat->value.v.arr.elem_type == MUSE_GGUF_TYPE_BOOL &&
                  pat->value.v.arr.count == (uint64_t)cfg->n_layer;
        for (int il = 0; ok && il < cfg->n_layer; il++)
            ok = (pat->value.v.arr.data[il] != 0) == (cfg->pattern[il % strlen(cfg->pattern)] == 'S');
        TEST_CONDF(ok, "%s: bool[n_layer] pattern", what);
    }
    /* tokenizer keys (tokenizer-and-chat.md 2.1) */
    TEST_CONDF(kv_str_is(g, "tokenizer.ggml.model", "gpt2") && kv_str_is(g, "tokenizer.ggml.pre", "llama4"),
               "%s: gpt2 / llama4", what);
    TEST_CONDF(kv_str_is(g, "tokenizer.chat_template", muse_glimmer_chat_template), "%s: chat template", what);
    const struct muse_gguf_value *tokens = NULL, *types = NULL, *merges = NULL;
    muse_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, &err);
    muse_gguf_get_arr(g, "tokenizer.ggml.token_type", &types, &err);
    muse_gguf_get_arr(g, "tokenizer.ggml.merges", &merges, &err);
    TEST_CONDF(tokens && tokens->v.arr.elem_type == MUSE_GGUF_TYPE_STRING && tokens->v.arr.count == (uint64_t)cfg->n_vocab,
               "%s: %d tokens", what, (int)cfg->n_vocab);
    TEST_CONDF(types && types->v.arr.elem_type == MUSE_GGUF_TYPE_INT32 && types->v.arr.count == (uint64_t)cfg->n_vocab,
               "%s: token_type INT32[n_vocab]", what);
    TEST_CONDF(merges && merges->v.arr.elem_type == MUSE_GGUF_TYPE_STRING && merges->v.arr.count > 0, "%s: merges", what);
    uint64_t bos = kv_u64(g, "tokenizer.ggml.bos_token_id"), eos = kv_u64(g, "tokenizer.ggml.eos_token_id"),
             eot = kv_u64(g, "tokenizer.ggml.eot_token_id");
    if (tokens && types && bos < (uint64_t)cfg->n_vocab && eos < (uint64_t)cfg->n_vocab && eot < (uint64_t)cfg->n_vocab) {
        const struct muse_gguf_str *ts = tokens->v.arr.strs;
        TEST_CONDF(ts[bos].len == 17 && !memcmp(ts[bos].data, "<|begin_of_text|>", 17) &&
                       muse_gguf_arr_i64(types, bos) == 3, "%s: bos is <|begin_of_text|> CONTROL", what);
        TEST_CONDF(ts[eos].len == 15 && !memcmp(ts[eos].data, "<|end_of_text|>", 15), "%s: eos", what);
        TEST_CONDF(ts[eot].len == 7 && !memcmp(ts[eot].data, "<|eot|>", 7), "%s: eot", what);
    } else {
        TEST_CONDF(false, "%s: bos/eos/eot ids are u32 in range", what);
    }
    TEST_CONDF(muse_gguf_find_kv(g, "tokenizer.ggml.eom_token_id") == NULL, "%s: no eom_token_id (not a stop)", what);
    const struct muse_gguf_kv *ab = muse_gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
    TEST_CONDF(ab && ab->value.type == MUSE_GGUF_TYPE_BOOL && ab->value.v.b, "%s: add_bos_token true", what);

    /* tensors: the list of text-model.md §4 with the config's shapes */
    int64_t e = cfg->n_embd, nq = (int64_t)cfg->n_head * cfg->head_dim, nkv = (int64_t)cfg->n_head_kv * cfg->head_dim;
    TEST_CONDF(g->n_tensors == 3 + 14 * (uint64_t)cfg->n_layer, "%s: %llu tensors", what, (unsigned long long)g->n_tensors);
    struct { const char *n; int64_t ne0, ne1; } layer[] = {
        {"attn_norm", e, 0},     {"attn_q", e, nq},      {"attn_k", e, nkv},          {"attn_v", e, nkv},
        {"attn_q_norm", cfg->head_dim, 0}, {"attn_k_norm", cfg->head_dim, 0}, {"attn_gate", e, nq},
        {"attn_output", nq, e},  {"post_attention_norm", e, 0}, {"ffn_norm", e, 0},  {"ffn_gate", e, cfg->n_ff},
        {"ffn_up", e, cfg->n_ff}, {"ffn_down", cfg->n_ff, e}, {"post_ffw_norm", e, 0},
    };
    int bad = 0, not_f32_norm = 0;
    for (int il = -1; il < cfg->n_layer; il++) {
        for (size_t k = 0; k < (il < 0 ? 3 : sizeof(layer) / sizeof(layer[0])); k++) {
            char name[96];
            int64_t ne0, ne1;
            if (il < 0) {
                static const char *top[] = {"token_embd", "output_norm", "output"};
                snprintf(name, sizeof(name), "%s.weight", top[k]);
                ne0 = e;
                ne1 = k == 1 ? 0 : cfg->n_vocab;
            } else {
                snprintf(name, sizeof(name), "blk.%d.%s.weight", il, layer[k].n);
                ne0 = layer[k].ne0;
                ne1 = layer[k].ne1;
            }
            const struct muse_gguf_tensor *t = muse_gguf_find_tensor(g, name);
            if (!t || t->n_dims != (ne1 ? 2u : 1u) || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
                if (bad++ < 5) fprintf(stderr, "%s: tensor %s missing or mis-shaped\n", what, name);
                continue;
            }
            if (!ne1 && t->type != MUSE_TYPE_F32) not_f32_norm++;
        }
    }
    TEST_CONDF(bad == 0, "%s: %d tensors missing or mis-shaped", what, bad);
    TEST_CONDF(not_f32_norm == 0, "%s: %d norms not F32", what, not_f32_norm);

    /* values (golden/text/README.md "Value scales"); quantized RMS is within ~1.5x by contract */
    bool cond = cfg->values == MUSE_SYNTH_VALUES_CONDITIONED;
    double mean, rms;
    const struct muse_gguf_tensor *qn = muse_gguf_find_tensor(g, "blk.0.attn_q_norm.weight");
    const struct muse_gguf_tensor *pn = muse_gguf_find_tensor(g, "blk.0.post_attention_norm.weight");
    const struct muse_gguf_tensor *te = muse_gguf_find_tensor(g, "token_embd.weight");
    const struct muse_gguf_tensor *out = muse_gguf_find_tensor(g, "output.weight");
    const struct muse_gguf_tensor *on = muse_gguf_find_tensor(g, "output_norm.weight");
    if (qn && pn && te && out && on) {
        tensor_stats(qn, 1, &mean, &rms);
        TEST_CONDF(fabs(mean - 3.87) < 0.1, "%s: attn_q_norm mean %g ~ 3.87", what, mean);
        tensor_stats(pn, 1, &mean, &rms);
        TEST_CONDF(fabs(mean - (cond ? 0.15 : 1.0)) < (cond ? 0.02 : 0.1), "%s: post_attention_norm mean %g", what, mean);
        tensor_stats(te, 64, &mean, &rms);
        double want = cond ? 0.05 : 1.0;
        TEST_CONDF(rms > want / 1.6 && rms < want * 1.6, "%s: token_embd rms %g ~ %g", what, rms, want);
        want = 4.0 / (sqrt((double)e) * 0.19611613513818404);
        tensor_stats(out, 64, &mean, &rms);
        TEST_CONDF(rms > want / 1.6 && rms < want * 1.6, "%s: output rms %g ~ %g", what, rms, want);
        /* logits stay spread: a unit-RMS hidden state through output_norm and output gives
         * pre-softcap logits (x logit_scale) with a std of a few units, not ~0 and not >> 20 */
        float *h = malloc((size_t)e * sizeof(float)), *w = malloc((size_t)e * sizeof(float));
        muse_type_traits[on->type].to_float(on->data, w, e);
        uint64_t st = 12345;
        for (int64_t i = 0; i < e; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = ((st >> 40) & 1 ? 1.0f : -1.0f) * w[i];
        }
        size_t rs = muse_type_row_size((enum muse_type)out->type, e);
        int64_t rows = out->ne[1] < 512 ? out->ne[1] : 512;
        double s2 = 0;
        for (int64_t r = 0; r < rows; r++) {
            muse_type_traits[out->type].to_float((const uint8_t *)out->data + (size_t)r * rs, w, e);
            double dot = 0;
            for (int64_t i = 0; i < e; i++) dot += (double)w[i] * h[i];
            dot *= 0.19611613513818404;
            s2 += dot * dot;
        }
        double lstd = sqrt(s2 / (double)rows);
        TEST_CONDF(lstd > 1.5 && lstd < 10.0, "%s: pre-softcap logit std %g in 1.5..10", what, lstd);
        free(h);
        free(w);
    }
    muse_gguf_free(g);
}

static int cancel_at_half(void *user, uint64_t done, uint64_t total) {
    (void)user;
    return done * 2 >= total;
}

static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_write(void) {
    struct muse_synth_config cfg;
    struct muse_error err;
    char p1[512], p2[512], p3[512];
    tmp_path(p1, sizeof(p1), "a");
    tmp_path(p2, sizeof(p2), "b");
    tmp_path(p3, sizeof(p3), "c");
    const char *presets[] = {"tiny", "small", "demo"};
    for (size_t i = 0; i < 3; i++) {
        muse_synth_preset(presets[i], &cfg, &err);
        clock_t t0 = clock(); /* CPU time: the machine is shared, wall time is not ours */
        TEST_CONDF(muse_synth_write(&cfg, p1, NULL, NULL, &err) == MUSE_OK, "%s writes: %s", presets[i], err.msg);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        if (!sanitizer()) TEST_CONDF(secs < 1.0, "%s written in %.2f s of CPU (< 1 s)", presets[i], secs);
        check_file(p1, &cfg, presets[i]);
    }
    /* demo types: matrices Q4_K, output Q6_K */
    struct muse_gguf *g = NULL;
    if (muse_gguf_open(p1, &g, &err) == MUSE_OK) {
        const struct muse_gguf_tensor *a = muse_gguf_find_tensor(g, "blk.5.ffn_down.weight");
        const struct muse_gguf_tensor *b = muse_gguf_find_tensor(g, "output.weight");
        TEST_COND("demo: ffn_down q4_k, output q6_k", a && b && a->type == MUSE_TYPE_Q4_K && b->type == MUSE_TYPE_Q6_K);
        TEST_COND("demo: file_type 15 (Q4_K_M)", kv_u64(g, "general.file_type") == 15);
        TEST_COND("demo: quantization_version 2", kv_u64(g, "general.quantization_version") == 2);
        muse_gguf_free(g);
    }

    /* custom dimensions, u32 pattern, type rules over several families; norms stay F32 */
    muse_synth_preset("tiny", &cfg, &err);
    cfg.n_layer = 5;
    cfg.n_embd = 128;
    cfg.n_head = 4;
    cfg.n_head_kv = 1;
    cfg.head_dim = 32;
    cfg.n_ff = 384;
    cfg.n_vocab = 700;
    cfg.n_ctx = 1024;
    cfg.n_swa = 5;
    cfg.seed = 7;
    cfg.values = MUSE_SYNTH_VALUES_CONDITIONED;
    muse_synth_parse_pattern("3", &cfg, &err);
    cfg.pattern_scalar = true;
    TEST_COND("custom rules", muse_synth_parse_types("*norm*=q8_0,attn_q=f16,attn_v=bf16,ffn_down=iq4_nl,*=q8_0",
                                                     &cfg, &err) == MUSE_OK);
    TEST_CONDF(muse_synth_write(&cfg, p1, NULL, NULL, &err) == MUSE_OK, "custom writes: %s", err.msg);
    check_file(p1, &cfg, "custom");
    if (muse_gguf_open(p1, &g, &err) == MUSE_OK) {
        const struct muse_gguf_tensor *q = muse_gguf_find_tensor(g, "blk.4.attn_q.weight");
        const struct muse_gguf_tensor *v = muse_gguf_find_tensor(g, "blk.4.attn_v.weight");
        const struct muse_gguf_tensor *d = muse_gguf_find_tensor(g, "blk.4.ffn_down.weight");
        const struct muse_gguf_tensor *o = muse_gguf_find_tensor(g, "blk.4.attn_output.weight");
        TEST_COND("custom: attn_q f16", q && q->type == MUSE_TYPE_F16);
        TEST_COND("custom: attn_v bf16", v && v->type == MUSE_TYPE_BF16);
        TEST_COND("custom: ffn_down iq4_nl", d && d->type == MUSE_TYPE_IQ4_NL);
        TEST_COND("custom: attn_output q8_0", o && o->type == MUSE_TYPE_Q8_0);
        muse_gguf_free(g);
    }

    /* determinism: same config -> same bytes; another seed -> other weights, same vocabulary */
    muse_synth_preset("small", &cfg, &err);
    muse_synth_write(&cfg, p2, NULL, NULL, &err);
    muse_synth_write(&cfg, p3, NULL, NULL, &err);
    TEST_COND("same seed -> identical bytes", files_equal(p2, p3));
    cfg.seed = 2;
    muse_synth_write(&cfg, p3, NULL, NULL, &err);
    TEST_COND("other seed -> different bytes", !files_equal(p2, p3));
    struct muse_gguf *g2 = NULL, *g3 = NULL;
    if (muse_gguf_open(p2, &g2, &err) == MUSE_OK && muse_gguf_open(p3, &g3, &err) == MUSE_OK) {
        TEST_COND("other seed: same data offset (same metadata size)", g2->data_start == g3->data_start);
        TEST_COND("other seed: same metadata bytes", !memcmp(g2->base, g3->base, g2->data_start));
        const struct muse_gguf_tensor *a = muse_gguf_find_tensor(g2, "blk.0.ffn_up.weight");
        const struct muse_gguf_tensor *b = muse_gguf_find_tensor(g3, "blk.0.ffn_up.weight");
        TEST_COND("other seed: other weights", a && b && memcmp(a->data, b->data, a->nbytes));
    }
    muse_gguf_free(g2);
    muse_gguf_free(g3);

    /* errors: a bad directory is an i/o error; nothing is left behind on a cancelled write */
    muse_synth_preset("tiny", &cfg, &err);
    TEST_COND("bad path -> MUSE_ERR_IO", muse_synth_write(&cfg, "/nonexistent-dir/x.gguf", NULL, NULL, &err) == MUSE_ERR_IO);
    unlink(p1);
    TEST_COND("cancel", muse_synth_write(&cfg, p1, cancel_at_half, NULL, &err) == MUSE_ERR_CANCELLED);
    TEST_COND("cancelled file removed", access(p1, F_OK) != 0);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}

int main(void) {
    test_write();
    test_template();
    test_rules();
    test_plan_30b();
    test_vocab();
    return TEST_REPORT();
}
