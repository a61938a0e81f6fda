/*
 * cmd_draft.c - `muse draft`: the DFlash drafter's parity interface. Evaluates IDS as the committed
 * tokens (positions 0..P-1) on the target with feature capture into the drafter's ring, then
 * drafts the block for TOKEN at position P and prints it (JSON with --json):
 *   {"anchor_pos", "anchor", "n_rows", "draft_tokens", "confidences" (full-vocabulary softmax of
 *    the raw logits at each draft), "confidences_top10" (llama.cpp's p_min value), "row0_argmax",
 *    "top" (per block row, the K highest raw logits as [id, logit]), ...}
 * --dump-features / --dump-logits write the captured feature rows [P][F] and the block's raw
 * logits [n_rows][n_vocab] as float32 .npy files (the golden files' format).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "model_opts.h"
#include "muse.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse draft -m TARGET --draft-model D --tokens IDS --anchor TOKEN [options]\n"
            "Runs IDS through the target (positions 0..P-1) with the drafter's feature capture and ring,\n"
            "then drafts the DFlash block [TOKEN, MASK...] at position P.\n"
            "  --draft-model FILE   DFlash drafter GGUF (env MUSE_DRAFT_MODEL)\n"
            "  --tokens IDS         comma-separated committed token ids (required)\n"
            "  --anchor TOKEN       the anchor token id at position P (required)\n"
            "  --rows N             block rows incl. the anchor, 2..block_size (default block_size)\n"
            "  --n-max N            llama.cpp's --spec-draft-n-max: rows = min(N, block_size - 1) + 1\n"
            "  --p-min P            also report llama.cpp's p_min gate (drafts kept)\n"
            "  --top K              raw logits listed per block row (default 10)\n"
            "  --draft-kv TYPE      the drafter ring's type (default: --kv)\n"
            "  --ring N             drafter ring cells (default pad32(window + block_size + 1))\n"
            "  --json               JSON output\n"
            "  --dump-features F    write the captured feature rows [P][n_features] as float32 .npy\n"
            "  --dump-logits F      write the block's raw logits [rows][n_vocab] as float32 .npy\n"
            "  --time N             also time N drafts of the block and N target decode steps (stderr)\n");
    model_opts_usage(f);
}

/* A float32 C-order .npy file of shape [rows][cols]. */
static bool write_npy(const char *path, const float *data, int64_t rows, int64_t cols) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }", (long long)rows,
                     (long long)cols);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    bool ok = fwrite("\x93NUMPY\x01\x00", 1, 8, fp) == 8 && fwrite(&hlen, 2, 1, fp) == 1 && fwrite(hdr, 1, (size_t)n, fp) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', fp) != EOF;
    ok = ok && fputc('\n', fp) != EOF && fwrite(data, sizeof(float), (size_t)(rows * cols), fp) == (size_t)(rows * cols);
    return (fclose(fp) == 0) && ok;
}

/* The K best (id, logit) of a row: by logit descending, ties to the lower id. */
static int top_k(const float *row, int32_t n_vocab, int k, int32_t *ids, float *vals) {
    int n = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        float v = row[id];
        if (v != v) continue;
        if (n == k && !(v > vals[n - 1])) continue;
        int j = n < k ? n++ : n - 1;
        for (; j > 0 && v > vals[j - 1]; j--) ids[j] = ids[j - 1], vals[j] = vals[j - 1];
        ids[j] = id;
        vals[j] = v;
    }
    return n;
}

static void print_float(float v) {
    if (isfinite(v)) printf("%.9g", v);
    else printf("%s", v != v ? "null" : v > 0 ? "1e39" : "-1e39");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over n timings of f (µs). */
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n ? t[n / 2] : 0.0;
}

int cmd_draft(int argc, char **argv) {
    struct model_opts mo;
    model_opts_init(&mo);
    const char *draft_path = getenv("MUSE_DRAFT_MODEL"), *dump_feat = NULL, *dump_logits = NULL;
    int32_t *toks = NULL;
    int n_toks = 0;
    int64_t anchor = -1, rows = 0, n_max = -1, top = 10, ring = 0, n_time = 0;
    double p_min = -1.0;
    bool json = false;
    int draft_kv = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r < 0) goto usage_fail;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(toks);
            return 0;
        } else if (!strcmp(a, "--draft-model") || !strcmp(a, "-md")) {
            if (!(draft_path = cli_next(argc, argv, &i))) goto usage_fail;
        } else if (!strcmp(a, "--tokens")) {
            free(toks);
            toks = NULL;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_ids(a, v, &toks, &n_toks)) goto usage_fail;
        } else if (!strcmp(a, "--anchor")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT32_MAX, &anchor)) goto usage_fail;
        } else if (!strcmp(a, "--rows")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 2, 1 << 20, &rows)) goto usage_fail;
        } else if (!strcmp(a, "--n-max")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n_max)) goto usage_fail;
        } else if (!strcmp(a, "--p-min")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_float(a, v, &p_min)) goto usage_fail;
        } else if (!strcmp(a, "--top")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &top)) goto usage_fail;
        } else if (!strcmp(a, "--ring")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 26, &ring)) goto usage_fail;
        } else if (!strcmp(a, "--time")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 100000, &n_time)) goto usage_fail;
        } else if (!strcmp(a, "--draft-kv")) {
            if (!(v = cli_next(argc, argv, &i))) goto usage_fail;
            if ((draft_kv = muse_kv_type_from_name(v)) < 0) {
                cli_usage_err("bad value for --draft-kv: '%s' (expected f16, f32 or q8_0)", v);
                goto usage_fail;
            }
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--dump-features")) {
            if (!(dump_feat = cli_next(argc, argv, &i))) goto usage_fail;
        } else if (!strcmp(a, "--dump-logits")) {
            if (!(dump_logits = cli_next(argc, argv, &i))) goto usage_fail;
        } else {
            cli_usage_err("unknown option '%s'", a);
            goto usage_fail;
        }
    }
    if (!mo.model_path || !draft_path || !toks || anchor < 0) {
        cli_usage_err("-m TARGET, --draft-model D, --tokens IDS and --anchor TOKEN are required");
        goto usage_fail;
    }
    if (rows && n_max >= 0) {
        cli_usage_err("give --rows or --n-max, not both");
        goto usage_fail;
    }

    /* without --ctx-size the target context holds exactly the committed tokens (+ the timed steps) */
    if (mo.cparams.n_ctx == 0) mo.cparams.n_ctx = (uint32_t)(n_toks + n_time + (n_time ? 256 : 0));
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    struct muse_drafter *drafter = NULL;
    struct muse_draft_ctx *dc = NULL;
    float *feat = NULL;
    int rc = 1;
    struct muse_error err;
    int32_t *ids = NULL;
    float *vals = NULL;
    if (!model_opts_open(&mo, "draft", &model, &ctx)) {
        free(toks);
        return 1;
    }
    if (muse_drafter_load(draft_path, model, muse_drafter_default_params(), &drafter, &err)) {
        fprintf(stderr, "muse draft: %s\n", err.msg);
        goto done;
    }
    struct muse_draft_ctx_params dp = muse_draft_ctx_default_params();
    dp.kv_type = draft_kv >= 0 ? (enum muse_kv_type)draft_kv : mo.cparams.kv_type;
    dp.n_ring = (uint32_t)ring;
    if (muse_draft_ctx_create(drafter, ctx, dp, &dc, &err)) {
        fprintf(stderr, "muse draft: %s\n", err.msg);
        goto done;
    }
    const int32_t n_vocab = muse_model_n_vocab(model), F = muse_drafter_n_features(drafter);
    const int32_t B = muse_drafter_block_size(drafter);
    if (anchor >= n_vocab) {
        fprintf(stderr, "muse draft: --anchor %lld is out of range (vocabulary %d)\n", (long long)anchor, n_vocab);
        goto done;
    }
    if (n_max >= 0) rows = muse_draft_rows(drafter, (int32_t)n_max);
    if (rows > B) {
        fprintf(stderr, "muse draft: --rows %lld exceeds the drafter's block_size %d\n", (long long)rows, B);
        goto done;
    }
    if (top > n_vocab) top = n_vocab;
    feat = malloc(sizeof(float) * (size_t)n_toks * (size_t)F);
    ids = malloc(sizeof(int32_t) * (size_t)top);
    vals = malloc(sizeof(float) * (size_t)top);
    if (!feat || !ids || !vals) {
        fprintf(stderr, "muse draft: out of memory\n");
        goto done;
    }
    if (muse_draft_eval(dc, toks, n_toks, NULL, 0, feat, &err)) {
        fprintf(stderr, "muse draft: %s\n", err.msg);
        goto done;
    }
    struct muse_draft_block b;
    if (muse_draft_block(dc, (int32_t)anchor, (int32_t)rows, &b, &err)) {
        fprintf(stderr, "muse draft: %s\n", err.msg);
        goto done;
    }
    if (dump_feat && !write_npy(dump_feat, feat, n_toks, F)) {
        fprintf(stderr, "muse draft: cannot write %s\n", dump_feat);
        goto done;
    }
    if (dump_logits && !write_npy(dump_logits, b.logits, b.n_rows, n_vocab)) {
        fprintf(stderr, "muse draft: cannot write %s\n", dump_logits);
        goto done;
    }
    int32_t gated = p_min >= 0.0 ? muse_draft_gate_p_min(&b, (float)p_min) : -1;
    if (json) {
        char desc[512];
        muse_drafter_desc(drafter, desc, sizeof desc);
        printf("{\n\"engine\": \"muse\", \"backend\": \"%s\", \"n_threads\": %u, \"kv_type\": \"%s\", \"draft_kv_type\": \"%s\",\n",
               muse_context_backend(ctx), muse_context_n_threads(ctx), muse_kv_type_name(mo.cparams.kv_type),
               muse_kv_type_name(dp.kv_type));
        printf("\"drafter\": \"%s\", \"block_size\": %d, \"n_ring\": %u,\n", desc, B, muse_draft_n_ring(dc));
        printf("\"anchor_pos\": %d, \"anchor\": %lld, \"n_rows\": %d,\n", b.anchor_pos, (long long)anchor, b.n_rows);
        printf("\"draft_tokens\": [");
        for (int32_t i = 0; i < b.n_drafts; i++) printf("%s%d", i ? ", " : "", b.tokens[i]);
        printf("],\n\"confidences\": [");
        for (int32_t i = 0; i < b.n_drafts; i++) printf("%s", i ? ", " : ""), print_float(b.conf[i]);
        printf("],\n\"confidences_top10\": [");
        for (int32_t i = 0; i < b.n_drafts; i++) printf("%s", i ? ", " : ""), print_float(b.conf_top10[i]);
        printf("],\n\"row0_argmax\": %d,\n", b.row0_argmax);
        if (gated >= 0) printf("\"p_min\": %.9g, \"p_min_drafts\": %d,\n", p_min, gated);
        printf("\"top\": [\n");
        for (int32_t r = 0; r < b.n_rows; r++) {
            int n = top_k(b.logits + (size_t)r * n_vocab, n_vocab, (int)top, ids, vals);
            printf("  [");
            for (int j = 0; j < n; j++) printf("%s[%d, ", j ? ", " : "", ids[j]), print_float(vals[j]), printf("]");
            printf("]%s\n", r + 1 < b.n_rows ? "," : "");
        }
        printf("]\n}\n");
    } else {
        printf("anchor %lld at position %d, %d rows\n", (long long)anchor, b.anchor_pos, b.n_rows);
        printf("row 0 argmax (discarded): %d\n", b.row0_argmax);
        for (int32_t i = 0; i < b.n_drafts; i++)
            printf("draft %2d: token %6d  conf %.6f  conf_top10 %.6f\n", i + 1, b.tokens[i], b.conf[i], b.conf_top10[i]);
        if (gated >= 0) printf("p_min %.3g keeps %d drafts\n", p_min, gated);
    }
    fflush(stdout);
    if (n_time > 0) {
        /* drafts of the same block (the ring is unchanged), then target decode steps with capture + inject */
        double *t = malloc(sizeof(double) * (size_t)n_time);
        if (!t) goto done;
        for (int64_t i = 0; i < n_time; i++) {
            int64_t t0 = muse_time_us();
            muse_draft_block(dc, (int32_t)anchor, (int32_t)rows, &b, &err);
            t[i] = (double)(muse_time_us() - t0);
        }
        double draft_us = median(t, (int)n_time);
        int32_t tok = (int32_t)anchor;
        for (int64_t i = 0; i < n_time; i++) {
            int64_t t0 = muse_time_us();
            if (muse_draft_eval(dc, &tok, 1, NULL, 0, NULL, &err)) break;
            t[i] = (double)(muse_time_us() - t0);
        }
        double step_us = median(t, (int)n_time);
        /* plain decode steps (no capture, no injection), rolled back so that the ring stays in step */
        int32_t n1 = muse_context_n_past(ctx);
        for (int64_t i = 0; i < n_time; i++) {
            int64_t t0 = muse_time_us();
            if (muse_eval(ctx, &tok, 1, NULL, 0, &err)) break;
            t[i] = (double)(muse_time_us() - t0);
            if (muse_kv_truncate(ctx, n1, &err)) break;
        }
        double plain_us = median(t, (int)n_time);
        /* a verify-sized batch: n_rows tokens through the target with capture + inject, then rolled back */
        int32_t vt[512];
        for (int32_t i = 0; i < b.n_rows; i++) vt[i] = (int32_t)anchor;
        int32_t n0 = muse_draft_n_past(dc);
        for (int64_t i = 0; i < n_time; i++) {
            int64_t t0 = muse_time_us();
            if (muse_draft_eval(dc, vt, b.n_rows, NULL, 0, NULL, &err)) break;
            t[i] = (double)(muse_time_us() - t0);
            if (muse_kv_truncate(ctx, n0, &err) || muse_draft_truncate(dc, n0, &err)) break;
        }
        double verify_us = median(t, (int)n_time);
        fprintf(stderr,
                "timing (median of %lld, %u threads, %s): draft block of %d rows %.3f ms; plain target decode step %.3f ms; "
                "with capture + inject %.3f ms (ratio %.2f); target %d-row batch + capture + inject %.3f ms (ratio %.2f)\n",
                (long long)n_time, muse_context_n_threads(ctx), muse_context_backend(ctx), b.n_rows, draft_us / 1e3,
                plain_us / 1e3, step_us / 1e3, step_us > 0 ? draft_us / step_us : 0.0, b.n_rows, verify_us / 1e3,
                verify_us > 0 ? draft_us / verify_us : 0.0);
        free(t);
    }
    rc = 0;
done:
    free(feat);
    free(ids);
    free(vals);
    free(toks);
    muse_draft_ctx_free(dc);
    muse_drafter_free(drafter);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
usage_fail: /* the reason was said in one line (muse draft --help for the usage) */
    free(toks);
    return 2;
}
