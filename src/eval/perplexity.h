/*
 * perplexity.h - llama-perplexity's method: the perplexity of a model over a token stream, and
 * the KL divergence of a model (say a quantization) against a base model's saved log-probs.
 * The facts come from llama.cpp's tools/perplexity/perplexity.cpp; the code is muse's own.
 *
 * The method, as llama.cpp runs it (docs/perplexity.md):
 *   - the text is tokenized once (BOS in front when the vocabulary asks for it) and cut into
 *     n_chunk = n_tokens / n_ctx chunks of n_ctx tokens (the tail is dropped);
 *   - each chunk is evaluated from an empty KV cache at positions 0..n_ctx-1, its first token
 *     replaced by BOS when the vocabulary adds BOS, in forwards of n_batch tokens;
 *   - only the second half is scored: the rows of positions first = n_ctx/2 .. n_ctx-2 predict
 *     tokens first+1 .. n_ctx-1 (muse_ppl_n_scored rows per chunk), -log p summed in double;
 *   - PPL = exp(mean), uncertainty = PPL * sqrt((mean(nll^2) - mean^2) / (count - 1)).
 *
 * The scoring functions reproduce llama.cpp's float/double mix (noted per function), so the
 * printed digits match when the logits do. Nothing here prints; errors are muse_status values.
 * Everything but muse_ppl_eval_chunk is pure and thread-safe.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "muse.h"

struct muse_tokenizer;

/*
 * The token stream of a text as llama-perplexity makes it: one trailing '\n' dropped (its -f
 * reader does that), BOS in front when the vocabulary asks for it, special-token texts not parsed.
 * *ids: a new malloc'd array of *n_ids ids (caller frees). Errors: those of muse_tokenizer_encode.
 */
muse_status muse_ppl_tokenize(const struct muse_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                              size_t *n_ids, struct muse_error *err);

/* First scored row of a chunk (n_ctx/2): rows from here to n_ctx-1 are computed. */
int32_t muse_ppl_first(int32_t n_ctx);
/* Rows scored per chunk: n_ctx - 1 - n_ctx/2 (the last row predicts nothing inside the chunk). */
int32_t muse_ppl_n_scored(int32_t n_ctx);

/*
 * Evaluate one chunk of n_ctx tokens on ctx: clears the KV cache, replaces the first token by
 * `bos` when bos >= 0 (the caller's array is not modified), runs forwards of at most n_batch
 * tokens, and writes the logits of positions first..n_ctx-1 into logits = [n_ctx - first][n_vocab]
 * (the head runs only for those rows). progress (may be NULL) is called after each forward with
 * (tokens done, n_ctx); nonzero from it stops the chunk (MUSE_ERR_CANCELLED). Errors:
 * MUSE_ERR_INVALID_ARG (n_ctx < 4, n_batch < 1, a token out of the vocabulary), MUSE_ERR_CONTEXT
 * (n_ctx larger than the context), those of muse_eval. Uses ctx (one thread at a time).
 */
muse_status muse_ppl_eval_chunk(struct muse_context *ctx, const int32_t *chunk, int32_t n_ctx, int32_t n_batch,
                                int32_t bos, float *logits, muse_progress_fn progress, void *progress_user,
                                struct muse_error *err);

/* ---- perplexity ---------------------------------------------------------------------------- */

/* Running sums of -log p over scored tokens. Start from {0}. */
struct muse_ppl_sums {
    double nll;    /* sum of -log p */
    double nll2;   /* sum of (-log p)^2 */
    int64_t count; /* tokens scored */
};

/*
 * Score n_rows rows of logits ([n_rows][n_vocab]) against next[0..n_rows) (row i predicts
 * next[i]), adding to s. Without `packed`: -log p = -((logit[tok] - max) - log(sum exp)), the
 * log-sum in double (llama.cpp's plain run). With packed = [n_rows][muse_kld_row_len(n_vocab)]:
 * also writes each row's log-probs in the base-file encoding (muse_kld_pack_row) and computes
 * -log p = max + log(sum exp) - logit[tok] in float, as llama.cpp does when it saves a base.
 */
void muse_ppl_score(const float *logits, int32_t n_vocab, const int32_t *next, int32_t n_rows, struct muse_ppl_sums *s,
                    uint16_t *packed);

/*
 * The estimate: *ppl = exp(nll / count); *unc = ppl * sqrt(var / (count - 1)) with
 * var = nll2 / count - (nll / count)^2. Returns 0 when count < 2 or var <= 0 (llama.cpp then
 * prints no final estimate: "Unexpected negative standard deviation"), 1 otherwise. *ppl is set
 * whenever count > 0.
 */
int muse_ppl_estimate(const struct muse_ppl_sums *s, double *ppl, double *unc);

/* ---- KL divergence against a base model -------------------------------------------------- */

/* uint16 values per saved row: 4 (two floats: scale, min log-prob) + n_vocab rounded up to even. */
int64_t muse_kld_row_len(int32_t n_vocab);

/*
 * Encode one row's log-probs as llama.cpp's base file does: with max/min the row's logits,
 * min clamped to max - 16, scale = (max - min) / 65535, row[0..1] = float scale, row[2..3] = float
 * (min - max - log(sum exp)), then v_i = round((logit_i - min) / scale) for logit_i > min, else 0
 * (all 0 when scale is 0), padding 0. Decoding: log p_i = scale * v_i + min_log_prob (so every
 * token more than 16 below the top reads as the floor). Returns -log p[tok] (float arithmetic).
 */
double muse_kld_pack_row(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row);

/* Running sums of the KL statistics (llama.cpp's kl_divergence_result). Start from {0}. */
struct muse_kld_sums {
    double nll, nll2;           /* -log p of the model under test (Q) */
    double nll_base, nll_base2; /* -log p of the base, from the saved rows */
    double nll_nll_base;        /* sum of nll * nll_base (for the covariance) */
    double kld, kld2;           /* per-token KL(base || Q), summed over tokens with log p_base > -16 */
    double p_diff, p_diff2, p_diff4; /* p_Q(tok) - p_base(tok) */
    float max_p_diff;           /* largest |p_diff| */
    int64_t n_same_top;         /* rows whose argmax agrees (Q: first max; base: first max of the saved row) */
    int64_t count;
};

/*
 * Score n_rows rows of the model under test (logits [n_rows][n_vocab]) against the base rows
 * (base = [n_rows][muse_kld_row_len(n_vocab)], as muse_kld_pack_row wrote them) and next[],
 * adding to s. kld_out / p_diff_out: NULL, or [n_rows] per-token values (for the percentiles).
 * llama.cpp's arithmetic: per-token values in float, sums in double.
 */
void muse_kld_score(const float *logits, int32_t n_vocab, const int32_t *next, int32_t n_rows, const uint16_t *base,
                    struct muse_kld_sums *s, float *kld_out, float *p_diff_out);

/* A value and its uncertainty. */
struct muse_stat {
    double val, unc;
};

/* What llama-perplexity --kl-divergence prints, from the sums (uncertainties 0 while count <= 10). */
struct muse_kld_report {
    struct muse_stat ppl, ppl_base; /* exp(mean nll), of Q and of the base */
    double cor;                     /* correlation of ln PPL(Q) and ln PPL(base), -1..1 */
    struct muse_stat ln_ratio;      /* ln(PPL(Q) / PPL(base)) */
    struct muse_stat ratio;         /* PPL(Q) / PPL(base) */
    struct muse_stat diff;          /* PPL(Q) - PPL(base) */
    struct muse_stat kld;           /* mean KL divergence */
    struct muse_stat p_diff;        /* mean of p_Q(tok) - p_base(tok) */
    struct muse_stat p_diff_rms;    /* RMS of the same */
    struct muse_stat same_top;      /* fraction of rows with the same top token, 0..1 */
};

void muse_kld_report(const struct muse_kld_sums *s, struct muse_kld_report *r);

/* Linear-interpolated percentile of sorted values v[0..n) at fraction 0..1 (llama.cpp's rule);
 * muse_median: the middle value or the mean of the two middle ones. n >= 1. */
float muse_percentile(const float *v, size_t n, float fraction);
float muse_median(const float *v, size_t n);
