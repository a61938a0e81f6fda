/* perplexity.c - chunk evaluation, perplexity and KL-divergence scoring (perplexity.h). */
#include "eval/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "text/tokenizer.h"

int32_t muse_ppl_first(int32_t n_ctx) { return n_ctx / 2; }
int32_t muse_ppl_n_scored(int32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }
int64_t muse_kld_row_len(int32_t n_vocab) { return 2 * (((int64_t)n_vocab + 1) / 2) + 4; }

muse_status muse_ppl_tokenize(const struct muse_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                              size_t *n_ids, struct muse_error *err) {
    if (len > 0 && text[len - 1] == '\n') len--;
    const unsigned flags = muse_tokenizer_add_bos(tok) ? MUSE_TOKENIZE_ADD_BOS : 0;
    return muse_tokenizer_encode_alloc(tok, text, len, flags, ids, n_ids, err);
}

// ---- evaluation ------------------------------------------------------------------------------

muse_status muse_ppl_eval_chunk(struct muse_context *ctx, const int32_t *chunk, int32_t n_ctx, int32_t n_batch,
                                int32_t bos, float *logits, muse_progress_fn progress, void *progress_user,
                                struct muse_error *err) {
    const int32_t n_vocab = muse_model_n_vocab(ctx->model);
    if (n_ctx < 4) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "chunk size %d is too small (at least 4)", n_ctx);
    if (n_batch < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "batch size %d is too small", n_batch);
    if ((uint32_t)n_ctx > muse_context_n_ctx(ctx))
        return muse_error_set(err, MUSE_ERR_CONTEXT, "chunk of %d tokens exceeds the context size %u", n_ctx,
                              muse_context_n_ctx(ctx));
    if (bos >= n_vocab) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "BOS id %d is out of the vocabulary", bos);
    if ((uint32_t)n_batch > muse_context_n_batch(ctx)) n_batch = (int32_t)muse_context_n_batch(ctx);
    if (n_batch > n_ctx) n_batch = n_ctx;
    const int32_t first = muse_ppl_first(n_ctx);
    /* the first forward with BOS in front: a copy, so the caller's tokens stay as they are */
    int32_t *head = malloc(sizeof(int32_t) * (size_t)n_batch);
    if (!head) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    memcpy(head, chunk, sizeof(int32_t) * (size_t)n_batch);
    if (bos >= 0) head[0] = bos;
    muse_kv_clear(ctx);
    muse_status st = MUSE_OK;
    for (int32_t start = 0; start < n_ctx && st == MUSE_OK; start += n_batch) {
        const int32_t n = n_ctx - start < n_batch ? n_ctx - start : n_batch;
        const int32_t *toks = start == 0 ? head : chunk + start;
        const int32_t row0 = first > start ? (first - start < n ? first - start : n) : 0;
        float *out = row0 < n ? logits + (size_t)(start + row0 - first) * (size_t)n_vocab : NULL;
        st = muse_eval_rows(ctx, toks, n, row0, out, err);
        if (st == MUSE_OK && progress && progress(progress_user, (uint64_t)(start + n), (uint64_t)n_ctx))
            st = muse_error_set(err, MUSE_ERR_CANCELLED, "cancelled after %d of %d tokens", start + n, n_ctx);
    }
    free(head);
    return st;
}

// ---- perplexity ------------------------------------------------------------------------------

/* Round to the nearest integer, ties to even (the default rounding mode), as llama.cpp's encoder. */
static int32_t round_even(float x) { return (int32_t)lrintf(x); }

/* max of a row as std::max folds it (NaN-free rows: the plain maximum) */
static float row_max(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++) m = m < x[i] ? x[i] : m;
    return m;
}

/* sum of expf(x_i - max) in double (llama.cpp's log-sum; the exponentials in float) */
static double sum_exp(const float *x, int32_t n, float max) {
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += expf(x[i] - max);
    return s;
}

double muse_kld_pack_row(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row) {
    float max = logits[0], min = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        max = max < logits[i] ? logits[i] : max;
        min = logits[i] < min ? logits[i] : min;
    }
    min = min < max - 16 ? max - 16 : min;
    const float log_sum = (float)log(sum_exp(logits, n_vocab, max));
    const float min_log_prob = min - max - log_sum;
    const float scale = (max - min) / 65535.f;
    memcpy(row, &scale, sizeof scale);
    memcpy(row + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t *v = row + 4;
    memset(v, 0, sizeof(uint16_t) * (size_t)(muse_kld_row_len(n_vocab) - 4));
    if (scale != 0.0f) {
        const float inv_scale = 1 / scale;
        for (int32_t i = 0; i < n_vocab; i++)
            v[i] = logits[i] > min ? (uint16_t)round_even(inv_scale * (logits[i] - min)) : 0;
    }
    return max + log_sum - logits[tok];
}

void muse_ppl_score(const float *logits, int32_t n_vocab, const int32_t *next, int32_t n_rows, struct muse_ppl_sums *s,
                    uint16_t *packed) {
    const int64_t row_len = muse_kld_row_len(n_vocab);
    for (int32_t r = 0; r < n_rows; r++) {
        const float *x = logits + (size_t)r * (size_t)n_vocab;
        double v;
        if (packed) {
            v = muse_kld_pack_row(x, n_vocab, next[r], packed + (size_t)r * (size_t)row_len);
        } else {
            const float max = row_max(x, n_vocab);
            v = -((double)(x[next[r]] - max) - log(sum_exp(x, n_vocab, max)));
        }
        s->nll += v;
        s->nll2 += v * v;
        s->count++;
    }
}

int muse_ppl_estimate(const struct muse_ppl_sums *s, double *ppl, double *unc) {
    *ppl = 0.0;
    *unc = 0.0;
    if (s->count < 1) return 0;
    const double mean = s->nll / (double)s->count;
    *ppl = exp(mean);
    const double var = s->nll2 / (double)s->count - mean * mean;
    if (s->count < 2 || !(var > 0)) return 0;
    *unc = sqrt(var / (double)(s->count - 1)) * *ppl;
    return 1;
}

// ---- KL divergence ---------------------------------------------------------------------------

/* One row: llama.cpp's arithmetic (per-token values in float, sums in double). */
static void kld_row(const float *x, int32_t n_vocab, int32_t tok, const uint16_t *base, struct muse_kld_sums *s,
                    float *kld_out, float *p_diff_out) {
    float max = x[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (x[i] > max) {
            max = x[i];
            imax = i;
        }
    const float log_sum = (float)log(sum_exp(x, n_vocab, max));
    float scale, min_log_prob;
    memcpy(&scale, base, sizeof scale);
    memcpy(&min_log_prob, base + 2, sizeof min_log_prob);
    const uint16_t *v = base + 4;

    const float nll = max + log_sum - x[tok];
    s->nll += nll;
    s->nll2 += nll * nll;
    const float nll_base = -(scale * v[tok] + min_log_prob);
    s->nll_base += nll_base;
    s->nll_base2 += nll_base * nll_base;
    s->nll_nll_base += nll * nll_base;

    const float log_norm = max + log_sum; /* log p_i = x_i - log_norm */
    double kld = 0.0;
    int32_t imax_base = 0;
    float base_max = 0.0f;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float lp_base = scale * v[i] + min_log_prob;
        if (i == 0 || lp_base > base_max) {
            base_max = lp_base;
            imax_base = i;
        }
        if (lp_base > -16.f) kld += expf(lp_base) * (lp_base - x[i] + log_norm);
    }
    s->kld += kld;
    s->kld2 += kld * kld;
    s->count++;
    if (imax == imax_base) s->n_same_top++;

    const float p_diff = expf(-nll) - expf(-nll_base);
    s->p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff;
    s->p_diff2 += p_diff2;
    s->p_diff4 += p_diff2 * p_diff2;
    if (fabsf(p_diff) > s->max_p_diff) s->max_p_diff = fabsf(p_diff);
    if (kld_out) *kld_out = (float)kld;
    if (p_diff_out) *p_diff_out = p_diff;
}

void muse_kld_score(const float *logits, int32_t n_vocab, const int32_t *next, int32_t n_rows, const uint16_t *base,
                    struct muse_kld_sums *s, float *kld_out, float *p_diff_out) {
    const int64_t row_len = muse_kld_row_len(n_vocab);
    for (int32_t r = 0; r < n_rows; r++)
        kld_row(logits + (size_t)r * (size_t)n_vocab, n_vocab, next[r], base + (size_t)r * (size_t)row_len, s,
                kld_out ? kld_out + r : NULL, p_diff_out ? p_diff_out + r : NULL);
}

/* mean and its standard error (0 while count <= 10), llama.cpp's rule */
static struct muse_stat mean_unc(double sum, double sum2, int64_t count) {
    struct muse_stat r = {0, 0};
    if (count < 1) return r;
    r.val = sum / (double)count;
    const double var = sum2 / (double)count - r.val * r.val;
    r.unc = var > 0 && count > 10 ? sqrt(var / (double)(count - 1)) : 0.0;
    return r;
}

static double covariance(double sum_a, double sum_b, double sum_ab, int64_t count) {
    if (count < 10) return 0.0;
    const double n = (double)count;
    return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

/* sqrt of a variance that rounding may leave a hair below zero (a model against itself) */
static double sqrt0(double v) { return v > 0 ? sqrt(v) : 0.0; }

void muse_kld_report(const struct muse_kld_sums *s, struct muse_kld_report *r) {
    memset(r, 0, sizeof *r);
    const struct muse_stat lp = mean_unc(s->nll, s->nll2, s->count);
    const struct muse_stat lpb = mean_unc(s->nll_base, s->nll_base2, s->count);
    r->ppl.val = exp(lp.val);
    r->ppl.unc = r->ppl.val * lp.unc;
    r->ppl_base.val = exp(lpb.val);
    r->ppl_base.unc = r->ppl_base.val * lpb.unc;
    const double cov = covariance(s->nll, s->nll_base, s->nll_nll_base, s->count);
    r->cor = lp.unc > 0 && lpb.unc > 0 ? cov / (lp.unc * lpb.unc) : 0.0;
    r->ln_ratio.val = lp.val - lpb.val;
    r->ln_ratio.unc = sqrt0(lp.unc * lp.unc + lpb.unc * lpb.unc - 2.0 * cov);
    r->ratio.val = exp(r->ln_ratio.val);
    r->ratio.unc = r->ratio.val * r->ln_ratio.unc;
    const double ppl_cov = r->ppl.val * r->ppl_base.val * cov;
    r->diff.val = r->ppl.val - r->ppl_base.val;
    r->diff.unc = sqrt0(r->ppl.unc * r->ppl.unc + r->ppl_base.unc * r->ppl_base.unc - 2.0 * ppl_cov);
    r->kld = mean_unc(s->kld, s->kld2, s->count);
    r->p_diff = mean_unc(s->p_diff, s->p_diff2, s->count);
    const struct muse_stat mse = mean_unc(s->p_diff2, s->p_diff4, s->count);
    r->p_diff_rms.val = sqrt0(mse.val);
    r->p_diff_rms.unc = r->p_diff_rms.val > 0 ? 0.5 / r->p_diff_rms.val * mse.unc : 0.0;
    if (s->count > 0) {
        const double p = (double)s->n_same_top / (double)s->count;
        r->same_top.val = p;
        r->same_top.unc = s->count > 1 ? sqrt0(p * (1 - p) / (double)(s->count - 1)) : 0.0;
    }
}

float muse_percentile(const float *v, size_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    const size_t ip = (size_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

float muse_median(const float *v, size_t n) { return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2]; }
