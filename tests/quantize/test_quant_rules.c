/*
 * test_quant_rules.c - the per-tensor type choice of src/quantize/quant_rules.c on models the
 * byte-identity cases (test_quantize_oracle.sh) do not reach: 32 layers (llama-quantize's
 * use_more_bits pattern), tied embeddings, GQA 1 vs 4, 8 experts, expert tensors without a
 * layer number; plus the TYPE table, categories, the quantizable-name filter and the shape
 * fallbacks. Expectations are written out from llama.cpp's rules (src/llama-quant.cpp).
 */
#include <stdio.h>
#include <string.h>

#include "quantize/quant_rules.h"
#include "test.h"

static const int64_t NE[4] = {4096, 4096, 1, 1};

static void test_ftypes(void) {
    const struct muse_ftype_name *f = muse_ftype_lookup("q4_k_m");
    TEST_COND("q4_k_m found", f && f->ftype == MUSE_FTYPE_MOSTLY_Q4_K_M && f->supported);
    f = muse_ftype_lookup("Q4_K");
    TEST_COND("Q4_K is the Q4_K_M alias", f && f->ftype == 15 && !strcmp(f->name, "Q4_K"));
    f = muse_ftype_lookup("15");
    TEST_COND("15 -> the first name with ftype 15 (Q4_K)", f && !strcmp(f->name, "Q4_K"));
    f = muse_ftype_lookup("0");
    TEST_COND("0 -> F32, not COPY", f && !strcmp(f->name, "F32") && f->supported);
    f = muse_ftype_lookup("12abc");
    TEST_COND("stoi-like number parse", f && f->ftype == 12);
    TEST_COND("unknown", !muse_ftype_lookup("Q7_K") && !muse_ftype_lookup("") && !muse_ftype_lookup(NULL));
    f = muse_ftype_lookup("iq4_xs");
    TEST_COND("IQ4_XS known but refused", f && !f->supported && strstr(f->note, "llama-quantize"));
    f = muse_ftype_lookup("Q2_K_S");
    TEST_COND("Q2_K_S refused (imatrix)", f && !f->supported && strstr(f->note, "importance matrix"));
    TEST_COND("defaults", muse_ftype_default_type(MUSE_FTYPE_MOSTLY_Q3_K_L) == MUSE_TYPE_Q3_K &&
                              muse_ftype_default_type(MUSE_FTYPE_MOSTLY_Q5_K_S) == MUSE_TYPE_Q5_K &&
                              muse_ftype_default_type(MUSE_FTYPE_MOSTLY_BF16) == MUSE_TYPE_BF16 &&
                              muse_ftype_default_type(MUSE_FTYPE_MOSTLY_TQ1_0) == MUSE_TYPE_TQ1_0 &&
                              muse_ftype_default_type(19) == MUSE_TYPE_COUNT);
    for (const struct muse_ftype_name *t = muse_ftype_names; t->name; t++)
        if (t->supported && strcmp(t->name, "COPY"))
            TEST_CONDF(muse_ftype_default_type(t->ftype) != MUSE_TYPE_COUNT, "%s has no default type", t->name);
}

static void test_names(void) {
    TEST_COND("categories", muse_quant_category("output.weight") == MUSE_TCAT_OUTPUT &&
                                muse_quant_category("token_embd.weight") == MUSE_TCAT_TOKEN_EMBD &&
                                muse_quant_category("blk.3.attn_v.weight") == MUSE_TCAT_ATTN_V &&
                                muse_quant_category("blk.3.attn_qkv.weight") == MUSE_TCAT_ATTN_QKV &&
                                muse_quant_category("blk.3.attn_gate.weight") == MUSE_TCAT_OTHER &&
                                muse_quant_category("blk.3.ffn_down_exps.weight") == MUSE_TCAT_FFN_DOWN &&
                                muse_quant_category("blk.3.ffn_gate.weight") == MUSE_TCAT_FFN_GATE &&
                                muse_quant_category("fc.weight") == MUSE_TCAT_OTHER);
    const int64_t one[4] = {4096, 1, 1, 1}, three[4] = {64, 64, 8, 1};
    TEST_COND("n_dims drops trailing 1s", muse_quant_n_dims(one) == 1 && muse_quant_n_dims(three) == 3 &&
                                              muse_quant_n_dims(NE) == 2);
    TEST_COND("matrices", muse_quant_allows("blk.0.attn_q.weight", NE, true) && muse_quant_allows("fc.weight", NE, true));
    TEST_COND("3-D experts", muse_quant_allows("blk.0.ffn_up_exps.weight", three, true));
    TEST_COND("1-D never", !muse_quant_allows("blk.0.attn_q.weight", one, true));
    TEST_COND("norms never", !muse_quant_allows("blk.0.attn_norm.weight", NE, true) &&
                                 !muse_quant_allows("enc.output_norm.weight", NE, true));
    TEST_COND("not ending in weight", !muse_quant_allows("blk.0.attn_output.weight.scale", NE, true) &&
                                          !muse_quant_allows("rope_freqs", NE, true));
    TEST_COND("5-byte names pass (llama.cpp's rfind quirk)", muse_quant_allows("abcde", NE, true));
    TEST_COND("leave output", !muse_quant_allows("output.weight", NE, false) && muse_quant_allows("output.weight", NE, true));
    TEST_COND("excluded kinds", !muse_quant_allows("blk.0.ffn_gate_inp.weight", NE, true) &&
                                    !muse_quant_allows("position_embd.weight", NE, true) &&
                                    !muse_quant_allows("v.position_embd.weight", NE, true) &&
                                    !muse_quant_allows("blk.0.ssm_conv1d.weight", NE, true));
}

/* Types chosen for the tensors of a dense n-layer model, in llama-quantize's walk order. */
struct model_types {
    enum muse_type output, token_embd, attn_v[64], attn_k[64], attn_output[64], ffn_down[64], ffn_up[64];
};

static void run_model(int32_t ftype, const struct muse_quant_model *m, bool tied, struct model_types *out) {
    const char *fixed[] = {"output.weight", "token_embd.weight"};
    char names[64][5][40];
    const char *all[2 + 64 * 5];
    int n = 0;
    for (int k = tied ? 1 : 0; k < 2; k++) all[n++] = fixed[k];
    static const char *kinds[5] = {"attn_k", "attn_output", "attn_v", "ffn_down", "ffn_up"};
    for (uint32_t l = 0; l < m->n_layer; l++)
        for (int k = 0; k < 5; k++) {
            snprintf(names[l][k], sizeof names[l][k], "blk.%u.%s.weight", l, kinds[k]);
            all[n++] = names[l][k];
        }
    struct muse_quant_state qs;
    muse_quant_state_init(&qs, m, all, n);
    const struct muse_quant_choice ch = {.ftype = ftype, .output_type = MUSE_TYPE_COUNT, .token_embd_type = MUSE_TYPE_COUNT};
    const enum muse_type def = muse_ftype_default_type(ftype);
    char err[200];
    for (int i = 0; i < n; i++) {
        const enum muse_tensor_category cat = muse_quant_category(all[i]);
        const enum muse_type t = muse_quant_rules(&qs, m, &ch, def, all[i], NE, cat, err, sizeof err);
        int l = -1;
        sscanf(all[i], "blk.%d.", &l);
        switch (cat) {
        case MUSE_TCAT_OUTPUT: out->output = t; break;
        case MUSE_TCAT_TOKEN_EMBD: out->token_embd = t; break;
        case MUSE_TCAT_ATTN_V: out->attn_v[l] = t; break;
        case MUSE_TCAT_ATTN_K: out->attn_k[l] = t; break;
        case MUSE_TCAT_ATTN_OUTPUT: out->attn_output[l] = t; break;
        case MUSE_TCAT_FFN_DOWN: out->ffn_down[l] = t; break;
        case MUSE_TCAT_FFN_UP: out->ffn_up[l] = t; break;
        default: break;
        }
    }
}

static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static void test_rules(void) {
    struct muse_quant_model m = {.n_layer = 32, .n_gqa = 4, .n_expert = 0};
    struct model_types t;
    memset(&t, 0, sizeof t);

    run_model(MUSE_FTYPE_MOSTLY_Q4_K_M, &m, false, &t);
    TEST_COND("Q4_K_M output Q6_K, token_embd Q4_K", t.output == MUSE_TYPE_Q6_K && t.token_embd == MUSE_TYPE_Q4_K);
    int n6 = 0;
    for (int l = 0; l < 32; l++) {
        const enum muse_type want = more_bits(l, 32) ? MUSE_TYPE_Q6_K : MUSE_TYPE_Q4_K;
        TEST_CONDF(t.attn_v[l] == want && t.ffn_down[l] == want, "Q4_K_M layer %d: attn_v %d ffn_down %d", l, t.attn_v[l],
                   t.ffn_down[l]);
        TEST_CONDF(t.attn_k[l] == MUSE_TYPE_Q4_K && t.attn_output[l] == MUSE_TYPE_Q4_K && t.ffn_up[l] == MUSE_TYPE_Q4_K,
                   "Q4_K_M layer %d: others", l);
        n6 += want == MUSE_TYPE_Q6_K;
    }
    TEST_CONDF(n6 == 16, "Q4_K_M: %d of 32 layers with Q6_K (llama.cpp: 4 + 4 + 8)", n6);

    run_model(MUSE_FTYPE_MOSTLY_Q3_K_M, &m, false, &t);
    for (int l = 0; l < 32; l++)
        TEST_CONDF(t.attn_v[l] == (l < 2 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K) &&
                       t.ffn_down[l] == (l < 2 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K) && t.attn_output[l] == MUSE_TYPE_Q4_K &&
                       t.attn_k[l] == MUSE_TYPE_Q3_K,
                   "Q3_K_M layer %d", l);
    run_model(MUSE_FTYPE_MOSTLY_Q3_K_L, &m, false, &t);
    TEST_COND("Q3_K_L", t.attn_v[7] == MUSE_TYPE_Q5_K && t.ffn_down[7] == MUSE_TYPE_Q5_K &&
                            t.attn_output[7] == MUSE_TYPE_Q5_K && t.ffn_up[7] == MUSE_TYPE_Q3_K);
    run_model(MUSE_FTYPE_MOSTLY_Q4_K_S, &m, false, &t);
    for (int l = 0; l < 32; l++)
        TEST_CONDF(t.attn_v[l] == (l < 4 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K) &&
                       t.ffn_down[l] == (l < 4 ? MUSE_TYPE_Q5_K : MUSE_TYPE_Q4_K),
                   "Q4_K_S layer %d", l);
    run_model(MUSE_FTYPE_MOSTLY_Q5_K_S, &m, false, &t);
    TEST_COND("Q5_K_S: only the output changes", t.output == MUSE_TYPE_Q6_K && t.attn_v[0] == MUSE_TYPE_Q5_K &&
                                                     t.ffn_down[0] == MUSE_TYPE_Q5_K);
    run_model(MUSE_FTYPE_MOSTLY_Q2_K, &m, false, &t);
    TEST_COND("Q2_K gqa 4", t.attn_v[5] == MUSE_TYPE_Q4_K && t.ffn_down[5] == MUSE_TYPE_Q3_K &&
                                t.attn_output[5] == MUSE_TYPE_Q3_K && t.ffn_up[5] == MUSE_TYPE_Q2_K);
    m.n_gqa = 1;
    run_model(MUSE_FTYPE_MOSTLY_Q2_K, &m, false, &t);
    TEST_COND("Q2_K gqa 1: attn_v Q3_K", t.attn_v[5] == MUSE_TYPE_Q3_K);
    run_model(MUSE_FTYPE_MOSTLY_Q8_0, &m, false, &t);
    TEST_COND("Q8_0: output stays Q8_0", t.output == MUSE_TYPE_Q8_0 && t.attn_v[0] == MUSE_TYPE_Q8_0);
    run_model(MUSE_FTYPE_MOSTLY_Q4_0, &m, false, &t);
    TEST_COND("Q4_0: output Q6_K", t.output == MUSE_TYPE_Q6_K && t.ffn_down[0] == MUSE_TYPE_Q4_0);
    run_model(MUSE_FTYPE_MOSTLY_TQ1_0, &m, false, &t);
    TEST_COND("TQ1_0: token_embd Q4_K", t.token_embd == MUSE_TYPE_Q4_K && t.output == MUSE_TYPE_Q6_K);

    /* tied embeddings: token_embd is treated as the output matrix */
    run_model(MUSE_FTYPE_MOSTLY_Q4_K_M, &m, true, &t);
    TEST_COND("tied: token_embd Q6_K", t.token_embd == MUSE_TYPE_Q6_K);
    run_model(MUSE_FTYPE_MOSTLY_TQ2_0, &m, true, &t);
    TEST_COND("tied TQ2_0: token_embd Q6_K", t.token_embd == MUSE_TYPE_Q6_K);

    /* 8 experts: attn_v and attn_k Q8_0, attn_output Q5_K for Q4_K_M (names carry the layer) */
    m.n_expert = 8;
    run_model(MUSE_FTYPE_MOSTLY_Q4_K_M, &m, false, &t);
    TEST_COND("8 experts", t.attn_v[3] == MUSE_TYPE_Q8_0 && t.attn_k[3] == MUSE_TYPE_Q8_0 &&
                               t.attn_output[3] == MUSE_TYPE_Q5_K && t.ffn_down[0] == MUSE_TYPE_Q6_K &&
                               t.ffn_down[4] == MUSE_TYPE_Q4_K);
    /* an expert tensor without a layer number is refused */
    struct muse_quant_state qs;
    const char *odd[] = {"ffn_down_shared.weight"};
    muse_quant_state_init(&qs, &m, odd, 1);
    const struct muse_quant_choice ch = {.ftype = MUSE_FTYPE_MOSTLY_Q4_K_M, .output_type = MUSE_TYPE_COUNT,
                                         .token_embd_type = MUSE_TYPE_COUNT};
    char err[200] = "";
    TEST_COND("no layer number", muse_quant_rules(&qs, &m, &ch, MUSE_TYPE_Q4_K, odd[0], NE, MUSE_TCAT_FFN_DOWN, err,
                                                  sizeof err) == MUSE_TYPE_COUNT && strstr(err, "layer"));

    /* explicit output type: also the tied token_embd's */
    m.n_expert = 0;
    const char *tied[] = {"token_embd.weight"};
    muse_quant_state_init(&qs, &m, tied, 1);
    const struct muse_quant_choice ch2 = {.ftype = MUSE_FTYPE_MOSTLY_Q4_K_M, .output_type = MUSE_TYPE_Q8_0,
                                          .token_embd_type = MUSE_TYPE_COUNT};
    TEST_COND("tied token_embd follows the output type",
              muse_quant_rules(&qs, &m, &ch2, MUSE_TYPE_Q4_K, tied[0], NE, MUSE_TCAT_TOKEN_EMBD, err, sizeof err) ==
                  MUSE_TYPE_Q8_0);
    /* output with a row that is not a multiple of the default type's block: Q8_0 */
    const int64_t ne320[4] = {320, 1000, 1, 1};
    TEST_COND("output of 320 columns Q8_0",
              muse_quant_rules(&qs, &m, &ch, MUSE_TYPE_Q4_K, "output.weight", ne320, MUSE_TCAT_OUTPUT, err, sizeof err) ==
                  MUSE_TYPE_Q8_0);
}

static void test_fallback(void) {
    struct muse_quant_state qs;
    memset(&qs, 0, sizeof qs);
    bool fb;
    TEST_COND("fits", muse_quant_fallback(&qs, MUSE_TYPE_Q4_K, 512, &fb) == MUSE_TYPE_Q4_K && !fb);
    TEST_COND("Q4_K 320 -> Q5_0", muse_quant_fallback(&qs, MUSE_TYPE_Q4_K, 320, &fb) == MUSE_TYPE_Q5_0 && fb);
    TEST_COND("Q5_K 320 -> Q5_1", muse_quant_fallback(&qs, MUSE_TYPE_Q5_K, 320, &fb) == MUSE_TYPE_Q5_1);
    TEST_COND("Q6_K 320 -> Q8_0", muse_quant_fallback(&qs, MUSE_TYPE_Q6_K, 320, &fb) == MUSE_TYPE_Q8_0);
    TEST_COND("Q2_K/Q3_K/TQ 320 -> Q4_0", muse_quant_fallback(&qs, MUSE_TYPE_Q2_K, 320, &fb) == MUSE_TYPE_Q4_0 &&
                                              muse_quant_fallback(&qs, MUSE_TYPE_Q3_K, 320, &fb) == MUSE_TYPE_Q4_0 &&
                                              muse_quant_fallback(&qs, MUSE_TYPE_TQ2_0, 320, &fb) == MUSE_TYPE_Q4_0);
    TEST_COND("Q4_K 200 -> F16", muse_quant_fallback(&qs, MUSE_TYPE_Q4_K, 200, &fb) == MUSE_TYPE_F16);
    TEST_COND("Q8_0 200 -> F16", muse_quant_fallback(&qs, MUSE_TYPE_Q8_0, 200, &fb) == MUSE_TYPE_F16);
    TEST_COND("IQ4_XS 320 -> IQ4_NL", muse_quant_fallback(&qs, MUSE_TYPE_IQ4_XS, 320, &fb) == MUSE_TYPE_IQ4_NL);
    TEST_COND("Q1_0 320: none", muse_quant_fallback(&qs, MUSE_TYPE_Q1_0, 320, &fb) == MUSE_TYPE_COUNT);
    TEST_CONDF(qs.n_fallback == 10, "fallback count %d", qs.n_fallback);
}

int main(void) {
    test_ftypes();
    test_names();
    test_rules();
    test_fallback();
    return TEST_REPORT();
}
