/*
 * cmd_perplexity.c - `muse perplexity`: llama-perplexity's perplexity and KL-divergence runs
 * (the method is in src/eval/perplexity.h; docs/perplexity.md has the comparison with llama.cpp).
 *
 *   muse perplexity -m M -f TEXT [-c N] [-b N] [--chunks N] [--kl-divergence-base OUT]
 *   muse perplexity -m Q --kl-divergence --kl-divergence-base BASE [--chunks N]
 *
 * Results go to stdout in llama-perplexity's format (the running "[1]x,[2]y," line and
 * "Final estimate: PPL = X +/- Y"; the KL table and statistics); progress and timing to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "eval/kld_base.h"
#include "eval/perplexity.h"
#include "gguf/gguf.h"
#include "model_opts.h"
#include "muse.h"
#include "progress.h"
#include "text/tokenizer.h"

#define PPL_DEFAULT_CTX 512   /* llama-perplexity's -c default */
#define PPL_DEFAULT_BATCH 512 /* llama.cpp's micro-batch (-ub) default: tokens per forward */

struct ppl_opts {
    const char *text_path, *base_path;
    int64_t max_chunks;
    bool kl, help;
};

#define P(dst) ((struct ppl_opts *)(dst))

static int set_file(void *d, const char *f, const char *v) {
    (void)f;
    P(d)->text_path = v;
    return 0;
}

static int set_chunks(void *d, const char *f, const char *v) {
    return cli_parse_int(f, v, 1, INT32_MAX, &P(d)->max_chunks) ? 0 : -1;
}

static int set_base(void *d, const char *f, const char *v) {
    (void)f;
    P(d)->base_path = v;
    return 0;
}

static int set_flag(void *d, const char *f, const char *v) {
    (void)v;
    if (!strcmp(f, "--kl-divergence")) P(d)->kl = true;
    else P(d)->help = true;
    return 0;
}

static const struct cli_opt rows[] = {
    {"-f|--file", "TEXT", "the text (read as bytes; one trailing newline is dropped)", set_file},
    {"--chunks", "N", "score at most N chunks (default: all)", set_chunks},
    {"--kl-divergence-base", "FILE", "with -f: also save the model's log-probs to FILE (llama.cpp's format);\n"
                                     "with --kl-divergence: the base to compare against", set_base},
    {"--kl-divergence", NULL, "compare this model with the base file: KL divergence, top-token\n"
                              "agreement, PPL of both (the tokens and N come from the file)", set_flag},
    {"-h|--help", NULL, "this help", set_flag},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse perplexity -m MODEL -f TEXT [--ctx-size N] [--batch N] [--chunks N]\n"
            "                       [--kl-divergence-base OUT] [--threads N] [--kv f16|f32|q8_0] [--backend ref|cpu]\n"
            "       muse perplexity -m MODEL --kl-divergence --kl-divergence-base BASE [--chunks N] ...\n"
            "\n"
            "llama-perplexity's method: the text is cut into chunks of N tokens (-c, default %d; the\n"
            "text needs at least 2*N tokens), each evaluated from an empty cache with BOS first, in\n"
            "forwards of -b tokens (default min(%d, N); more than N is N), and the second half of each\n"
            "chunk is scored.\n",
            PPL_DEFAULT_CTX, PPL_DEFAULT_BATCH);
    cli_opts_usage(f, rows, N_ROWS);
    model_opts_usage(f);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* The text's tokens, as llama-perplexity makes them; prints the error and returns false. */
static bool tokenize_text(const char *model_path, const char *text_path, int32_t **ids, size_t *n_ids, bool *add_bos,
                          double *ms) {
    struct muse_error err;
    struct muse_gguf *g = NULL;
    struct muse_tokenizer *tok = NULL;
    size_t len = 0;
    char *text = read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "muse perplexity: cannot read %s\n", text_path);
        return false;
    }
    bool ok = false;
    if (muse_gguf_open(model_path, &g, &err) || muse_tokenizer_init_from_gguf(g, &tok, &err)) {
        fprintf(stderr, "muse perplexity: %s\n", err.msg);
        goto done;
    }
    const int64_t t0 = muse_time_us();
    if (muse_ppl_tokenize(tok, text, len, ids, n_ids, &err)) {
        fprintf(stderr, "muse perplexity: tokenizing %s: %s\n", text_path, err.msg);
        goto done;
    }
    *ms = (double)(muse_time_us() - t0) / 1e3;
    *add_bos = muse_tokenizer_add_bos(tok);
    ok = true;
done:
    muse_tokenizer_free(tok);
    muse_gguf_free(g);
    free(text);
    return ok;
}

static void print_eta(double seconds_per_chunk, int32_t n_chunk) {
    fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", seconds_per_chunk,
            seconds_per_chunk * n_chunk / 60.0);
}

/* ---- perplexity ---------------------------------------------------------------------------- */

/* The progress line of a long chunk: "chunk I/N: D/T tokens (P%, R tok/s, S s left)". */
struct chunk_progress {
    struct progress p;
    int32_t chunk, n_chunk;
};

static int chunk_progress_cb(void *user, uint64_t done, uint64_t total) {
    struct chunk_progress *c = user;
    const double s = progress_seconds(&c->p), rate = s > 0 ? (double)done / s : 0.0;
    progress_draw(&c->p, false, "chunk %d/%d: %llu/%llu tokens (%.0f%%, %.1f tok/s, %.0f s left)", c->chunk, c->n_chunk,
                  (unsigned long long)done, (unsigned long long)total, total ? 100.0 * (double)done / (double)total : 0.0,
                  rate, rate > 0 ? (double)(total - done) / rate : 0.0);
    return 0;
}

/* One chunk with its progress line (drawn on a terminal when the chunk takes more than one forward). */
static muse_status eval_chunk(struct model_opts *mo, struct muse_context *ctx, const int32_t *chunk, int32_t n_ctx,
                              int32_t n_batch, int32_t bos, float *logits, int32_t i, int32_t n_chunk,
                              struct muse_error *err) {
    struct chunk_progress cp = {.chunk = i + 1, .n_chunk = n_chunk};
    progress_begin(&cp.p, model_opts_progress(mo) && n_ctx > n_batch);
    muse_status st = muse_ppl_eval_chunk(ctx, chunk, n_ctx, n_batch, bos, logits, chunk_progress_cb, &cp, err);
    progress_end(&cp.p);
    return st;
}

static int run_perplexity(struct model_opts *mo, const char *text_path, int64_t max_chunks, const char *base_path) {
    struct muse_error err;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    bool add_bos = false;
    const int32_t n_ctx = (int32_t)mo->cparams.n_ctx;
    double ms = 0;
    if (!tokenize_text(mo->model_path, text_path, &tokens, &n_tokens, &add_bos, &ms)) return 1;
    if (n_tokens < 2 * (size_t)n_ctx) {
        fprintf(stderr,
                "muse perplexity: you need at least %d tokens to evaluate perplexity with a context of %d; "
                "%s tokenizes to only %zu tokens\n",
                2 * n_ctx, n_ctx, text_path, n_tokens);
        free(tokens);
        return 1;
    }
    fprintf(stderr, "perplexity: tokenized %s: %zu tokens in %.1f ms\n", text_path, n_tokens, ms);
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    struct muse_kld_base *base = NULL;
    float *logits = NULL;
    uint16_t *packed = NULL;
    int rc = 1;
    if (!model_opts_open(mo, "perplexity", &model, &ctx)) goto done;
    const int32_t n_vocab = muse_model_n_vocab(model);
    const int32_t n_batch = (int32_t)muse_context_n_batch(ctx);
    const int32_t first = muse_ppl_first(n_ctx), n_scored = muse_ppl_n_scored(n_ctx);
    const int32_t n_chunk_max = (int32_t)(n_tokens / (size_t)n_ctx);
    const int32_t n_chunk = max_chunks > 0 && max_chunks < n_chunk_max ? (int32_t)max_chunks : n_chunk_max;
    const int32_t bos = add_bos ? muse_model_token_bos(model) : -1;
    logits = malloc(sizeof(float) * (size_t)(n_ctx - first) * (size_t)n_vocab);
    if (base_path) packed = malloc(sizeof(uint16_t) * (size_t)n_scored * (size_t)muse_kld_row_len(n_vocab));
    if (!logits || (base_path && !packed)) {
        fprintf(stderr, "muse perplexity: out of memory\n");
        goto done;
    }
    if (base_path) {
        if (muse_kld_base_create(base_path, n_ctx, n_vocab, n_chunk, tokens, &base, &err)) {
            fprintf(stderr, "muse perplexity: %s\n", err.msg);
            goto done;
        }
        fprintf(stderr, "perplexity: saving the log-probs to %s\n", base_path);
    }
    fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, threads=%u, backend=%s\n",
            n_chunk, n_ctx, n_batch, muse_context_n_threads(ctx), muse_context_backend(ctx));
    struct muse_ppl_sums sums = {0};
    const int64_t t0 = muse_time_us();
    for (int32_t i = 0; i < n_chunk; i++) {
        const int32_t *chunk = tokens + (size_t)i * (size_t)n_ctx;
        if (eval_chunk(mo, ctx, chunk, n_ctx, n_batch, bos, logits, i, n_chunk, &err)) {
            fprintf(stderr, "\nmuse perplexity: chunk %d: %s\n", i + 1, err.msg);
            goto done;
        }
        muse_ppl_score(logits, n_vocab, chunk + first + 1, n_scored, &sums, packed);
        if (base && muse_kld_base_write_chunk(base, packed, &err)) {
            fprintf(stderr, "\nmuse perplexity: %s\n", err.msg);
            goto done;
        }
        if (i == 0) print_eta((double)(muse_time_us() - t0) / 1e6, n_chunk);
        double ppl, unc;
        muse_ppl_estimate(&sums, &ppl, &unc);
        printf("[%d]%.4f,", i + 1, ppl);
        fflush(stdout);
    }
    const double seconds = (double)(muse_time_us() - t0) / 1e6;
    printf("\n");
    double ppl, unc;
    if (muse_ppl_estimate(&sums, &ppl, &unc)) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
    } else {
        fprintf(stderr, "muse perplexity: unexpected negative standard deviation of log(prob) (%lld tokens scored)\n",
                (long long)sums.count);
        goto done;
    }
    fflush(stdout);
    fprintf(stderr, "perplexity: %d chunks of %d tokens in %.2f s (%.1f tokens/s), %lld tokens scored\n", n_chunk, n_ctx,
            seconds, seconds > 0 ? n_chunk * (double)n_ctx / seconds : 0.0, (long long)sums.count);
    rc = 0;
done:
    if (base) {
        struct muse_kld_base *b = base;
        base = NULL;
        if (muse_kld_base_close(b, &err) && rc == 0) {
            fprintf(stderr, "muse perplexity: %s\n", err.msg);
            rc = 1;
        }
        if (rc) remove(base_path); /* never leave a partial base behind */
    }
    free(packed);
    free(logits);
    free(tokens);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
}

/* ---- KL divergence -------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void print_stats(const struct muse_kld_report *r, float *kld, float *p_diff, size_t n) {
    qsort(kld, n, sizeof(float), cmp_float);
    qsort(p_diff, n, sizeof(float), cmp_float);
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r->ppl.val, r->ppl.unc);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r->ppl_base.val, r->ppl_base.unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * r->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->ln_ratio.val, r->ln_ratio.unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r->ratio.val, r->ratio.unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", r->diff.val, r->diff.unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", r->kld.val, r->kld.unc);
    printf("Maximum KLD: %10.6f\n", kld[n - 1]);
    static const float kld_pct[] = {0.999f, 0.990f, 0.950f, 0.900f};
    for (size_t i = 0; i < sizeof kld_pct / sizeof kld_pct[0]; i++)
        printf("%4.1f%%   KLD: %10.6f\n", 100.0 * kld_pct[i], muse_percentile(kld, n, kld_pct[i]));
    printf("Median  KLD: %10.6f\n", muse_median(kld, n));
    static const float kld_low[] = {0.100f, 0.050f, 0.010f, 0.001f};
    for (size_t i = 0; i < sizeof kld_low / sizeof kld_low[0]; i++)
        printf("%4.1f%%   KLD: %10.6f\n", 100.0 * kld_low[i], muse_percentile(kld, n, kld_low[i]));
    printf("Minimum KLD: %10.6f\n", kld[0]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * r->p_diff.val, 100.0 * r->p_diff.unc);
    printf("Maximum Δp: %6.3f%%\n", 100.0 * p_diff[n - 1]);
    static const float hi[] = {0.999f, 0.990f, 0.950f, 0.900f, 0.750f};
    for (size_t i = 0; i < sizeof hi / sizeof hi[0]; i++)
        printf("%4.1f%%   Δp: %6.3f%%\n", 100.0 * hi[i], 100.0 * muse_percentile(p_diff, n, hi[i]));
    printf("Median  Δp: %6.3f%%\n", 100.0 * muse_median(p_diff, n));
    static const float lo[] = {0.250f, 0.100f, 0.050f, 0.010f, 0.001f};
    for (size_t i = 0; i < sizeof lo / sizeof lo[0]; i++)
        printf("%4.1f%%   Δp: %6.3f%%\n", 100.0 * lo[i], 100.0 * muse_percentile(p_diff, n, lo[i]));
    printf("Minimum Δp: %6.3f%%\n", 100.0 * p_diff[0]);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * r->p_diff_rms.val, 100.0 * r->p_diff_rms.unc);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * r->same_top.val, 100.0 * r->same_top.unc);
}

static int run_kl_divergence(struct model_opts *mo, bool ctx_given, int64_t max_chunks, const char *base_path) {
    struct muse_error err;
    struct muse_kld_base *base = NULL;
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    float *logits = NULL, *kld = NULL, *p_diff = NULL;
    uint16_t *rows = NULL;
    int rc = 1;
    if (muse_kld_base_open(base_path, &base, &err)) {
        fprintf(stderr, "muse perplexity: %s\n", err.msg);
        return 1;
    }
    const struct muse_kld_base_info *info = muse_kld_base_info(base);
    const int32_t n_ctx = info->n_ctx;
    if (ctx_given && mo->cparams.n_ctx != (uint32_t)n_ctx) {
        fprintf(stderr, "muse perplexity: %s was computed with a context of %d, not %u (leave --ctx-size out)\n",
                base_path, n_ctx, mo->cparams.n_ctx);
        goto done;
    }
    mo->cparams.n_ctx = (uint32_t)n_ctx;
    if (!model_opts_open(mo, "perplexity", &model, &ctx)) goto done;
    const int32_t n_vocab = muse_model_n_vocab(model);
    if (n_vocab != info->n_vocab) {
        fprintf(stderr, "muse perplexity: inconsistent vocabulary: %s has %d tokens, the model %d\n", base_path,
                info->n_vocab, n_vocab);
        goto done;
    }
    /* the substitution needs the tokenizer's add_bos flag: read it with the vocabulary */
    int32_t bos = -1;
    {
        struct muse_gguf *g = NULL;
        struct muse_tokenizer *tok = NULL;
        if (muse_gguf_open(mo->model_path, &g, &err) || muse_tokenizer_init_from_gguf(g, &tok, &err)) {
            fprintf(stderr, "muse perplexity: %s\n", err.msg);
            muse_gguf_free(g);
            goto done;
        }
        if (muse_tokenizer_add_bos(tok)) bos = muse_model_token_bos(model);
        muse_tokenizer_free(tok);
        muse_gguf_free(g);
    }
    const int32_t n_batch = (int32_t)muse_context_n_batch(ctx);
    const int32_t first = muse_ppl_first(n_ctx), n_scored = muse_ppl_n_scored(n_ctx);
    const int32_t n_chunk = max_chunks > 0 && max_chunks < info->n_chunk ? (int32_t)max_chunks : info->n_chunk;
    const size_t n_values = (size_t)n_scored * (size_t)n_chunk;
    logits = malloc(sizeof(float) * (size_t)(n_ctx - first) * (size_t)n_vocab);
    rows = malloc(sizeof(uint16_t) * (size_t)n_scored * (size_t)muse_kld_row_len(n_vocab));
    kld = malloc(sizeof(float) * n_values);
    p_diff = malloc(sizeof(float) * n_values);
    if (!logits || !rows || !kld || !p_diff) {
        fprintf(stderr, "muse perplexity: out of memory\n");
        goto done;
    }
    fprintf(stderr, "kl_divergence: computing over %d chunks, n_ctx=%d, batch_size=%d, threads=%u, backend=%s\n", n_chunk,
            n_ctx, n_batch, muse_context_n_threads(ctx), muse_context_backend(ctx));
    struct muse_kld_sums sums = {0};
    struct muse_kld_report r;
    const int64_t t0 = muse_time_us();
    for (int32_t i = 0; i < n_chunk; i++) {
        const int32_t *chunk = info->tokens + (size_t)i * (size_t)n_ctx;
        if (eval_chunk(mo, ctx, chunk, n_ctx, n_batch, bos, logits, i, n_chunk, &err) ||
            muse_kld_base_read_chunk(base, rows, &err)) {
            fprintf(stderr, "muse perplexity: chunk %d: %s\n", i + 1, err.msg);
            goto done;
        }
        const size_t at = (size_t)i * (size_t)n_scored;
        muse_kld_score(logits, n_vocab, chunk + first + 1, n_scored, rows, &sums, kld + at, p_diff + at);
        if (i == 0) {
            print_eta((double)(muse_time_us() - t0) / 1e6, n_chunk);
            printf("\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                   "Δp RMS            Same top p\n");
        }
        muse_kld_report(&sums, &r);
        printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n", i + 1,
               r.ppl.val, r.ppl.unc, r.ln_ratio.val, r.ln_ratio.unc, r.kld.val, r.kld.unc, 100.0 * r.p_diff_rms.val,
               100.0 * r.p_diff_rms.unc, 100.0 * r.same_top.val, 100.0 * r.same_top.unc);
        fflush(stdout);
    }
    const double seconds = (double)(muse_time_us() - t0) / 1e6;
    printf("\n");
    if (sums.count < 100) {
        fprintf(stderr, "muse perplexity: only %lld tokens scored: too few for the statistics (at least 100)\n",
                (long long)sums.count);
    } else {
        print_stats(&r, kld, p_diff, n_values);
    }
    fflush(stdout);
    fprintf(stderr, "kl_divergence: %d chunks of %d tokens in %.2f s (%.1f tokens/s), %lld tokens scored\n", n_chunk,
            n_ctx, seconds, seconds > 0 ? n_chunk * (double)n_ctx / seconds : 0.0, (long long)sums.count);
    rc = 0;
done:
    free(logits);
    free(rows);
    free(kld);
    free(p_diff);
    muse_kld_base_close(base, NULL);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    struct model_opts mo;
    model_opts_init(&mo);
    mo.cparams.n_batch = 0; /* 0 = not given */
    struct ppl_opts po = {.max_chunks = -1};
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r == 0) r = cli_opts_parse(rows, N_ROWS, &po, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_unknown(argv[i]);
        if (po.help) {
            usage(stdout);
            return 0;
        }
    }
    if (!mo.model_path) return cli_usage_err("-m MODEL is required");
    const bool ctx_given = mo.cparams.n_ctx != 0;
    if (!ctx_given) mo.cparams.n_ctx = PPL_DEFAULT_CTX;
    if (mo.cparams.n_ctx < 4) return cli_usage_err("--ctx-size must be at least 4");
    if (mo.cparams.n_batch == 0) mo.cparams.n_batch = PPL_DEFAULT_BATCH;
    if (mo.cparams.n_batch > mo.cparams.n_ctx) mo.cparams.n_batch = mo.cparams.n_ctx;
    if (po.kl) {
        if (!po.base_path)
            return cli_usage_err("--kl-divergence needs --kl-divergence-base FILE (the base model's log-probs)");
        if (po.text_path)
            fprintf(stderr, "perplexity: --kl-divergence takes the tokens from %s; -f is ignored\n", po.base_path);
        return run_kl_divergence(&mo, ctx_given, po.max_chunks, po.base_path);
    }
    if (!po.text_path) return cli_usage_err("-f TEXT is required (or --kl-divergence with a base file)");
    return run_perplexity(&mo, po.text_path, po.max_chunks, po.base_path);
}
