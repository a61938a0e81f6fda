/*
 * cmd_embed.c - `muse embed`: embeddings of text as llama-embedding computes them (muse_embed:
 * the final hidden states, pooled, normalized), printed as OpenAI's embeddings JSON. Each line of
 * the input is one text (llama-embedding's default separator); empty lines are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model_opts.h"
#include "muse.h"
#include "run_text.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse embed -m MODEL (-p TEXT | -f FILE) [--pooling P] [--embd-normalize N] [options]\n"
            "Prints the embedding of every line of the text as JSON: {\"object\": \"list\", \"data\": [{\"object\":\n"
            "\"embedding\", \"index\": i, \"embedding\": [...]}, ...], \"usage\": {...}} (with --pooling none each\n"
            "\"embedding\" is a list of per-token vectors). The vectors are the final hidden states (after the\n"
            "output norm), as llama-embedding.\n"
            "  -p, --prompt TEXT        the texts, one per line\n"
            "  -f, --file FILE          read them from FILE (- = standard input)\n"
            "  --pooling P              none | mean | cls | last (default: the model file's pooling_type, else\n"
            "                           none, as llama.cpp)\n"
            "  --embd-normalize N       -1 none, 0 max-absolute (int16 range), 1 taxicab, 2 Euclidean\n"
            "                           (default), N > 2 the N-norm\n");
    model_opts_usage(f);
}

/* The whole input: -p TEXT, or FILE's contents. NULL after an error (printed). */
static char *read_input(const char *text, const char *file) {
    if (text) {
        char *s = strdup(text);
        if (!s) cli_err("out of memory");
        return s;
    }
    FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
    if (!f) {
        cli_err("cannot open %s", file);
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *s = malloc(cap);
    for (size_t got; s && (got = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    if (f != stdin) fclose(f);
    if (!s) cli_err("out of memory");
    else s[n] = '\0';
    return s;
}

static void print_vec(const float *v, int64_t n) {
    putchar('[');
    for (int64_t i = 0; i < n; i++) printf("%s%.9g", i ? ", " : "", v[i]);
    putchar(']');
}

int cmd_embed(int argc, char **argv) {
    struct model_opts mo;
    model_opts_init(&mo);
    const char *text = NULL, *file = NULL;
    int pooling = -1;
    int64_t normalize = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(text = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--pooling")) {
            if (!(v = cli_next(argc, argv, &i))) return 2;
            if ((pooling = muse_pooling_from_name(v)) < 0) {
                cli_usage_err("bad value for --pooling: '%s' (expected none, mean, cls or last)", v);
                return 2;
            }
        } else if (!strcmp(a, "--embd-normalize")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, -1, 1000, &normalize)) return 2;
        } else {
            cli_unknown(a);
            return 2;
        }
    }
    if (!mo.model_path || (!text == !file)) {
        cli_usage_err("-m MODEL and one of -p TEXT or -f FILE are required");
        return 2;
    }
    char *input = read_input(text, file);
    if (!input) return 1;
    /* the texts, tokenized; the context sized for the longest */
    struct muse_error err;
    struct run_text *rt = NULL;
    int32_t **ids = NULL;
    int *n_ids = NULL, n_in = 0, rc = 1;
    int64_t longest = 0, n_tok = 0;
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    float *vec = NULL;
    if (run_text_open(mo.model_path, &rt, &err)) {
        cli_err("%s", err.msg);
        goto done;
    }
    for (char *line = input, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        if (!len) continue;
        int32_t **ni = realloc(ids, sizeof *ids * (size_t)(n_in + 1));
        int *nn = ni ? realloc(n_ids, sizeof *n_ids * (size_t)(n_in + 1)) : NULL;
        if (ni) ids = ni;
        if (nn) n_ids = nn;
        if (!ni || !nn) {
            cli_err("out of memory");
            goto done;
        }
        ids[n_in] = NULL;
        if (run_text_encode_prompt(rt, line, NULL, &ids[n_in], &n_ids[n_in], &err)) {
            cli_err("%s", err.msg);
            goto done;
        }
        if (n_ids[n_in] > longest) longest = n_ids[n_in];
        n_tok += n_ids[n_in++];
    }
    if (n_in == 0) {
        cli_err("no text to embed");
        goto done;
    }
    mo.cparams.embeddings = 1;
    mo.cparams.n_seq_max = n_in < 8 ? (uint32_t)n_in : 8; /* pooled inputs are embedded together */
    if (mo.cparams.n_ctx == 0) mo.cparams.n_ctx = (uint32_t)longest;
    if (!model_opts_open(&mo, "embed", &model, &ctx)) goto done;
    if (pooling < 0) pooling = muse_model_pooling(model) >= 0 ? muse_model_pooling(model) : MUSE_POOLING_NONE;
    const int64_t E = muse_model_n_embd(model);
    const bool pooled = pooling != MUSE_POOLING_NONE;
    if (!(vec = malloc(sizeof(float) * (size_t)E * (size_t)(pooled ? n_in : longest)))) {
        cli_err("out of memory");
        goto done;
    }
    if (pooled && muse_embed_batch(ctx, (const int32_t *const *)ids, n_ids, n_in, (enum muse_pooling)pooling,
                                   (int)normalize, vec, &err)) { /* every line at once: they share forwards */
        cli_err("%s", err.msg);
        goto done;
    }
    printf("{\"object\": \"list\", \"data\": [");
    for (int k = 0; k < n_in; k++) {
        if (!pooled && muse_embed(ctx, ids[k], n_ids[k], (enum muse_pooling)pooling, (int)normalize, vec, &err)) {
            printf("]}\n");
            cli_err("text %d: %s", k, err.msg);
            goto done;
        }
        printf("%s\n  {\"object\": \"embedding\", \"index\": %d, \"embedding\": ", k ? "," : "", k);
        if (pooled) {
            print_vec(vec + (size_t)k * (size_t)E, E);
        } else {
            putchar('[');
            for (int t = 0; t < n_ids[k]; t++) {
                if (t) printf(", ");
                print_vec(vec + (size_t)t * (size_t)E, E);
            }
            putchar(']');
        }
        putchar('}');
    }
    printf("\n], \"pooling\": \"%s\", \"usage\": {\"prompt_tokens\": %lld, \"total_tokens\": %lld}}\n",
           muse_pooling_name((enum muse_pooling)pooling), (long long)n_tok, (long long)n_tok);
    rc = 0;
done:
    for (int k = 0; ids && k < n_in; k++) free(ids[k]);
    free(ids);
    free(n_ids);
    free(vec);
    free(input);
    muse_context_free(ctx);
    muse_model_free(model);
    run_text_close(rt);
    return rc;
}
