/*
 * cmd_logits.c - `muse logits`: the parity interface. Runs a token prompt, then greedy
 * decoding, and prints JSON in the schema of ../shared/golden/text/README.md (prompt,
 * positions[].top, greedy, greedy_steps[].top). Keep the schema stable.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model_opts.h"
#include "muse.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse logits -m MODEL --tokens 1,2,3 [-n N] [--top K] [--kv f16|f32|q8_0] [--batch B]\n"
            "                   [--threads T] [--backend ref|cpu] [--ctx-size N]\n"
            "The context is sized for the prompt and the greedy steps unless --ctx-size is given.\n"
            "Prints the logits of every prompt position and of N greedy steps as JSON (the golden schema).\n"
            "  --tokens IDS         comma-separated prompt token ids (required)\n"
            "  -n, --n-predict N    greedy tokens to generate (default 0)\n"
            "  --top K              logits listed per row, highest first (default 40)\n");
    model_opts_usage(f);
}

/* The K best (id, logit) of a row: by logit descending, ties to the lower id. */
static int top_k(const float *row, int32_t n_vocab, int k, int32_t *ids, float *vals) {
    int n = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        float v = row[id];
        if (v != v) continue; /* NaN never ranks */
        if (n == k && !(v > vals[n - 1])) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && v > vals[j - 1]) {
            ids[j] = ids[j - 1];
            vals[j] = vals[j - 1];
            j--;
        }
        ids[j] = id;
        vals[j] = v;
    }
    return n;
}

static int32_t argmax(const float *row, int32_t n_vocab) {
    int32_t best = 0;
    for (int32_t id = 1; id < n_vocab; id++)
        if (row[id] > row[best]) best = id;
    return best;
}

static void print_top(const float *row, int32_t n_vocab, int k, int32_t *ids, float *vals) {
    int n = top_k(row, n_vocab, k, ids, vals);
    printf("\"top\": [");
    for (int j = 0; j < n; j++) {
        if (isfinite(vals[j])) printf("%s[%d, %.9g]", j ? ", " : "", ids[j], vals[j]);
        else printf("%s[%d, %s]", j ? ", " : "", ids[j], vals[j] > 0 ? "1e39" : "-1e39");
    }
    printf("]");
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int cmd_logits(int argc, char **argv) {
    struct model_opts mo;
    model_opts_init(&mo);
    int32_t *prompt = NULL, n_prompt = 0;
    int64_t n_predict = 0, k = 40;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r < 0) goto usage_fail;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(prompt);
            return 0;
        } else if (!strcmp(a, "--tokens")) {
            free(prompt);
            prompt = NULL;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_ids(a, v, &prompt, &n_prompt)) goto usage_fail;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, 1 << 20, &n_predict)) goto usage_fail;
        } else if (!strcmp(a, "--top")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &k)) goto usage_fail;
        } else {
            cli_unknown(a);
            goto usage_fail;
        }
    }
    if (!mo.model_path || !prompt) {
        cli_usage_err("-m MODEL and --tokens IDS are required");
        goto usage_fail;
    }

    /* without --ctx-size the context is exactly what the run needs (any prompt length) */
    if (mo.cparams.n_ctx == 0) mo.cparams.n_ctx = (uint32_t)(n_prompt + (n_predict > 1 ? n_predict - 1 : 0));
    struct muse_model *model;
    struct muse_context *ctx;
    if (!model_opts_open(&mo, "logits", &model, &ctx)) {
        free(prompt);
        return 1;
    }
    const int32_t n_vocab = muse_model_n_vocab(model);
    int32_t n_batch = (int32_t)mo.cparams.n_batch ? (int32_t)mo.cparams.n_batch : 512;
    if ((uint32_t)n_batch > muse_context_n_ctx(ctx)) n_batch = (int32_t)muse_context_n_ctx(ctx); /* as the context clamps */
    if (k > n_vocab) k = n_vocab;
    int rc = 1;
    struct muse_error err;
    const int32_t n_rows = n_prompt < n_batch ? n_prompt : n_batch; /* logits rows of one chunk */
    float *logits = malloc(sizeof(float) * (size_t)n_vocab * (size_t)n_rows);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)k);
    float *vals = malloc(sizeof(float) * (size_t)k);
    int32_t *greedy = malloc(sizeof(int32_t) * (size_t)(n_predict + 1));
    if (!logits || !ids || !vals || !greedy) {
        fprintf(stderr, "muse logits: out of memory\n");
        goto done;
    }
    if ((int64_t)n_prompt + (n_predict > 0 ? n_predict - 1 : 0) > (int64_t)muse_context_n_ctx(ctx)) {
        fprintf(stderr, "muse logits: %d prompt tokens + %lld greedy steps exceed the context size %u (use --ctx-size)\n",
                n_prompt, (long long)n_predict, muse_context_n_ctx(ctx));
        goto done;
    }
    char desc[256];
    muse_model_desc(model, desc, sizeof desc);
    printf("{\n\"model\": \"%s\", \"desc\": \"%s\", \"engine\": \"muse\", \"backend\": \"%s\",\n", base_name(mo.model_path),
           desc, muse_context_backend(ctx));
    printf("\"n_vocab\": %d, \"n_ctx\": %u, \"n_threads\": %u, \"n_batch\": %d, \"n_ubatch\": %d, \"flash_attn\": \"off\", "
           "\"kv_type\": \"%s\", \"top_k\": %lld,\n",
           n_vocab, muse_context_n_ctx(ctx), muse_context_n_threads(ctx), n_batch, n_batch,
           muse_kv_type_name(mo.cparams.kv_type), (long long)k);
    printf("\"prompt\": [");
    for (int32_t i = 0; i < n_prompt; i++) printf("%s%d", i ? ", " : "", prompt[i]);
    printf("],\n\"positions\": [\n");
    /* prompt rows, chunk by chunk (each chunk one forward of up to n_batch tokens) */
    int32_t last = 0;
    for (int32_t done = 0; done < n_prompt;) {
        int32_t n = n_prompt - done < n_batch ? n_prompt - done : n_batch;
        if (muse_eval(ctx, prompt + done, n, logits, 1, &err)) {
            fprintf(stderr, "muse logits: %s\n", err.msg);
            goto done;
        }
        for (int32_t r = 0; r < n; r++) {
            const float *row = logits + (size_t)r * n_vocab;
            printf("  {\"pos\": %d, \"token\": %d, ", done + r, prompt[done + r]);
            print_top(row, n_vocab, (int)k, ids, vals);
            printf("}%s\n", done + r + 1 < n_prompt ? "," : "");
        }
        last = argmax(logits + (size_t)(n - 1) * n_vocab, n_vocab);
        done += n;
    }
    printf("],\n");
    /* greedy: greedy[0] from the last prompt row; step j feeds greedy[j] and yields greedy[j+1] */
    if (n_predict > 0) greedy[0] = last;
    printf("\"greedy_steps\": [\n");
    for (int64_t j = 0; j + 1 < n_predict; j++) {
        if (muse_eval(ctx, &greedy[j], 1, logits, 1, &err)) {
            fprintf(stderr, "muse logits: %s\n", err.msg);
            goto done;
        }
        printf("  {\"pos\": %lld, \"input\": %d, ", (long long)(n_prompt + j), greedy[j]);
        print_top(logits, n_vocab, (int)k, ids, vals);
        printf("}%s\n", j + 2 < n_predict ? "," : "");
        greedy[j + 1] = argmax(logits, n_vocab);
    }
    printf("],\n\"greedy\": [");
    for (int64_t j = 0; j < n_predict; j++) printf("%s%d", j ? ", " : "", greedy[j]);
    printf("]\n}\n");
    fflush(stdout);
    rc = 0;
done:
    free(logits);
    free(ids);
    free(vals);
    free(greedy);
    free(prompt);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
usage_fail:
    free(prompt);
    return 2;
}
