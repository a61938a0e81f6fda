/*
 * test_model_load.c - hyperparameters and tensor binding with llama.cpp's rules: both forms of
 * the sliding-window pattern, defaults (softcap 30, freq_base_swa), required keys named in the
 * error, wrong shapes naming tensor / expected / found, missing tensors, other architectures, a
 * load cancelled by its progress callback.
 */
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model_fixture.h"
#include "test.h"

static char path[256];

/* Write spec, try to load it; returns the status and leaves the message in *err. */
static muse_status load(const struct fx_spec *s, struct muse_model **m, struct muse_error *err) {
    *m = NULL;
    if (!fx_write(path, s)) return MUSE_ERR_INTERNAL;
    return muse_model_load(path, muse_model_default_params(), m, err);
}

static void expect_error(const char *what, struct fx_spec s, muse_status want, const char *needle1, const char *needle2) {
    struct muse_model *m;
    struct muse_error err = {0};
    muse_status st = load(&s, &m, &err);
    TEST_CONDF(st == want, "%s: status %d (%s), want %d", what, st, err.msg, want);
    TEST_CONDF(needle1 == NULL || strstr(err.msg, needle1), "%s: message '%s' lacks '%s'", what, err.msg, needle1);
    TEST_CONDF(needle2 == NULL || strstr(err.msg, needle2), "%s: message '%s' lacks '%s'", what, err.msg, needle2);
    muse_model_free(m);
}

static void test_pattern_forms(void) {
    struct muse_model *m;
    struct muse_error err;
    bool swa_array[16];

    /* converter form: bool[n_layer] */
    struct fx_spec s = fx_default();
    s.n_layer = 8;
    for (int i = 0; i < 8; i++) s.swa[i] = i % 4 != 3;
    TEST_COND("bool-array pattern loads", load(&s, &m, &err) == MUSE_OK);
    if (!m) return;
    const struct muse_hparams *hp = muse_model_hparams(m);
    TEST_COND("bool array form recorded", hp->swa_pattern_form == MUSE_SWA_PATTERN_FORM_ARRAY);
    for (int i = 0; i < 8; i++) {
        TEST_CONDF(hp->is_swa[i] == (i % 4 != 3), "bool array: layer %d is_swa %d", i, hp->is_swa[i]);
        swa_array[i] = hp->is_swa[i];
    }
    TEST_COND("two full layers", muse_hparams_n_swa_layers(hp) == 6);
    muse_model_free(m);

    /* Unsloth form: u32 period 4 -> the last layer of each period is full */
    s.pattern = FX_PATTERN_U32;
    s.period = 4;
    TEST_COND("u32 pattern loads", load(&s, &m, &err) == MUSE_OK);
    if (!m) return;
    hp = muse_model_hparams(m);
    TEST_COND("period form recorded", hp->swa_pattern_form == MUSE_SWA_PATTERN_FORM_PERIOD && hp->swa_period == 4);
    for (int i = 0; i < 8; i++) TEST_CONDF(hp->is_swa[i] == swa_array[i], "u32 4 vs bool array differ at layer %d", i);
    muse_model_free(m);

    /* period 3: layers 2, 5 full; period 0: all SWA; period 1: all full */
    s.period = 3;
    if (load(&s, &m, &err) == MUSE_OK) {
        hp = muse_model_hparams(m);
        for (int i = 0; i < 8; i++) TEST_CONDF(hp->is_swa[i] == (i % 3 != 2), "period 3: layer %d", i);
        muse_model_free(m);
    } else TEST_CONDF(0, "period 3 failed: %s", err.msg);
    s.period = 0;
    if (load(&s, &m, &err) == MUSE_OK) {
        TEST_COND("period 0: every layer SWA", muse_hparams_n_swa_layers(muse_model_hparams(m)) == 8);
        muse_model_free(m);
    } else TEST_CONDF(0, "period 0 failed: %s", err.msg);
    s.period = 1;
    if (load(&s, &m, &err) == MUSE_OK) {
        TEST_COND("period 1: every layer full", muse_hparams_n_swa_layers(muse_model_hparams(m)) == 0);
        muse_model_free(m);
    } else TEST_CONDF(0, "period 1 failed: %s", err.msg);

    /* integer array form, arbitrary pattern */
    s.pattern = FX_PATTERN_INT_ARRAY;
    bool custom[8] = {true, false, false, true, true, true, false, true};
    memcpy(s.swa, custom, sizeof custom);
    if (load(&s, &m, &err) == MUSE_OK) {
        hp = muse_model_hparams(m);
        for (int i = 0; i < 8; i++) TEST_CONDF(hp->is_swa[i] == custom[i], "int array: layer %d", i);
        muse_model_free(m);
    } else TEST_CONDF(0, "int array failed: %s", err.msg);

    /* missing key: the array read is required (no period-4 default) */
    s = fx_default();
    s.pattern = FX_PATTERN_NONE;
    expect_error("missing pattern", s, MUSE_ERR_MISSING, "muse-glimmer.attention.sliding_window_pattern", NULL);
    s.pattern = FX_PATTERN_SHORT;
    expect_error("short pattern array", s, MUSE_ERR_FORMAT, "sliding_window_pattern", "wrong array length");
    /* SWA layers without a window would mask everything */
    s = fx_default();
    s.omit_key = "attention.sliding_window";
    expect_error("missing window", s, MUSE_ERR_FORMAT, "sliding_window", NULL);
}

static void test_defaults(void) {
    struct muse_model *m;
    struct muse_error err;
    struct fx_spec s = fx_default();
    s.no_softcap = true;
    TEST_COND("loads without softcap", load(&s, &m, &err) == MUSE_OK);
    if (!m) return;
    const struct muse_hparams *hp = muse_model_hparams(m);
    TEST_CONDF(hp->f_final_logit_softcapping == 30.0f, "absent softcap = %g, want 30", hp->f_final_logit_softcapping);
    TEST_COND("absent freq_base_swa = freq_base", hp->rope_freq_base_swa == 10000.0f && hp->rope_freq_base == 10000.0f);
    TEST_COND("post-norm eps is 1e-8", hp->f_post_norm_eps == 1e-8f);
    TEST_COND("pre-norm eps from the file", hp->f_norm_rms_eps == 1e-5f);
    TEST_COND("n_rot defaults to head_dim", hp->n_rot == 32 && hp->n_rot_swa == 32);
    TEST_COND("special tokens read", hp->bos_token_id == 297 && hp->eos_token_id == 298 && hp->eot_token_id == 299);
    TEST_COND("stop tokens: EOS and EOT", muse_model_token_is_stop(m, 298) && muse_model_token_is_stop(m, 299) &&
                                              !muse_model_token_is_stop(m, 297));
    TEST_COND("n_vocab from token_embd", muse_model_n_vocab(m) == 300);
    /* the size in the description is the parameter count of the file's tensors, never "?B" */
    uint64_t n_params = 0;
    const struct muse_gguf *g = m->gguf;
    for (uint64_t i = 0; i < g->n_tensors; i++) n_params += (uint64_t)g->tensors[i].n_elements;
    char desc[256], want[64], label[32];
    muse_model_desc(m, desc, sizeof desc);
    snprintf(want, sizeof want, "muse-glimmer %s ", muse_model_size_label(n_params, label, sizeof label));
    TEST_CONDF(muse_model_n_params(m) == n_params && n_params > 0 && !strncmp(desc, want, strlen(want)),
               "desc '%s', want it to start with '%s'", desc, want);
    static const struct {
        uint64_t n;
        const char *label;
    } labels[] = {{5970000, "6M"}, {336000000, "336M"}, {1540000000, "1.5B"}, {30200000000ull, "30B"},
                  {9970000, "10M"}, {999700000, "1B"}, {12345, "12K"}, {300, "300"}};
    for (size_t k = 0; k < sizeof labels / sizeof labels[0]; k++)
        TEST_CONDF(!strcmp(muse_model_size_label(labels[k].n, label, sizeof label), labels[k].label),
                   "size label of %llu: '%s', want '%s'", (unsigned long long)labels[k].n, label, labels[k].label);
    muse_model_free(m);

    s = fx_default();
    s.freq_base_swa = 500000.0f;
    if (load(&s, &m, &err) == MUSE_OK) {
        hp = muse_model_hparams(m);
        TEST_COND("freq_base_swa read", hp->rope_freq_base_swa == 500000.0f && hp->rope_freq_base == 10000.0f);
        TEST_COND("softcap read", hp->f_final_logit_softcapping == 20.0f);
        muse_model_free(m);
    }
    /* key_length absent: llama.cpp's default n_embd / n_head (16 here) is wrong for the q_norm tensor */
    s = fx_default();
    s.omit_key = "attention.key_length";
    expect_error("key_length absent", s, MUSE_ERR_FORMAT, "key_length", NULL);
}

static void test_required_keys(void) {
    const char *req[] = {"logit_scale", "attention.layer_norm_rms_epsilon", "context_length", "embedding_length",
                         "block_count"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        struct fx_spec s = fx_default();
        s.omit_key = req[i];
        char full[128];
        snprintf(full, sizeof full, "'muse-glimmer.%s'", req[i]);
        expect_error(req[i], s, MUSE_ERR_MISSING, full, "missing");
    }
}

static void test_tensors(void) {
    struct fx_spec s = fx_default();
    s.bad_tensor = "blk.1.attn_k.weight";
    expect_error("wrong shape", s, MUSE_ERR_SHAPE, "'blk.1.attn_k.weight'", "expected {64, 64}, found {64, 80}");
    s.bad_tensor = "blk.2.attn_q_norm.weight";
    expect_error("wrong vector shape", s, MUSE_ERR_SHAPE, "'blk.2.attn_q_norm.weight'", "expected {32}, found {48}");
    s.bad_tensor = "output.weight";
    expect_error("wrong output shape", s, MUSE_ERR_SHAPE, "'output.weight'", "found {64, 316}");
    s.bad_tensor = NULL;
    s.omit_tensor = "blk.3.post_ffw_norm.weight";
    expect_error("missing tensor", s, MUSE_ERR_MISSING, "'blk.3.post_ffw_norm.weight'", NULL);
    s.omit_tensor = "output.weight"; /* no fallback to token_embd */
    expect_error("missing output", s, MUSE_ERR_MISSING, "'output.weight'", NULL);
    s.omit_tensor = NULL;
    s.n_tokens_kv = 310;
    expect_error("vocab mismatch", s, MUSE_ERR_SHAPE, "310 entries", "300 rows");
    s.n_tokens_kv = 300;
    struct muse_model *m;
    struct muse_error err;
    TEST_COND("matching tokenizer vocabulary loads", load(&s, &m, &err) == MUSE_OK && muse_model_n_vocab(m) == 300);
    muse_model_free(m);
    s.n_tokens_kv = 0;
    s.omit_tensor = "blk.0.attn_gate.weight";
    expect_error("missing gate", s, MUSE_ERR_MISSING, "attn_gate", NULL);
}

static void test_architectures(void) {
    struct fx_spec s = fx_default();
    s.arch = "clip";
    expect_error("mmproj file", s, MUSE_ERR_UNSUPPORTED, "mmproj", "--mmproj");
    s.arch = "dflash";
    expect_error("dflash file", s, MUSE_ERR_UNSUPPORTED, "drafter", "--draft-model");
    s.arch = "llama";
    expect_error("other arch", s, MUSE_ERR_UNSUPPORTED, "'llama'", NULL);
    struct muse_model *m;
    struct muse_error err;
    TEST_COND("nonexistent file fails with IO", muse_model_load("/nonexistent/x.gguf", muse_model_default_params(), &m, &err) ==
                                                    MUSE_ERR_IO && m == NULL);
}

/* As every progress callback (muse.h): 0 goes on, nonzero cancels. */
static int count_then_cancel(void *user, uint64_t done, uint64_t total) {
    int *calls = user;
    (*calls)++;
    return done > 0 && total > 0;
}

static int count_only(void *user, uint64_t done, uint64_t total) {
    (void)done, (void)total;
    (*(int *)user)++;
    return 0;
}

static void test_cancel(void) {
    struct fx_spec s = fx_default();
    if (!fx_write(path, &s)) {
        TEST_COND("cancel: fixture written", 0);
        return;
    }
    for (int mmap = 0; mmap <= 1; mmap++) { /* populate the mapping, or read the file */
        struct muse_model_params mp = muse_model_default_params();
        mp.use_mmap = mmap;
        mp.populate = 1;
        int calls = 0;
        struct muse_model *m = (struct muse_model *)&calls;
        struct muse_error err = {0};
        mp.progress = count_then_cancel;
        mp.progress_user = &calls;
        muse_status st = muse_model_load(path, mp, &m, &err);
        TEST_CONDF(st == MUSE_ERR_CANCELLED && m == NULL && calls == 1, "cancelled load (mmap %d): status %d (%s), %d calls",
                   mmap, st, err.msg, calls);
        calls = 0;
        mp.progress = count_only;
        st = muse_model_load(path, mp, &m, &err);
        TEST_CONDF(st == MUSE_OK && m && calls >= 1, "load with progress (mmap %d): status %d (%s), %d calls", mmap, st,
                   err.msg, calls);
        muse_model_free(m);
    }
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/muse-test-model-load-%d.gguf", (int)getpid());
    test_pattern_forms();
    test_defaults();
    test_required_keys();
    test_tensors();
    test_architectures();
    test_cancel();
    unlink(path);
    return TEST_REPORT();
}
