/* cmd_quantize.c - `muse quantize`: llama-quantize's output without an importance matrix (muse_quantize). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "muse.h"
#include "quantize/quant_rules.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse quantize IN.gguf OUT.gguf TYPE [options]\n"
            "       muse quantize --dry-run IN.gguf TYPE [options]\n"
            "\n"
            "Quantizes an F32/F16/BF16 Muse-Glimmer (or DFlash drafter) GGUF as llama-quantize does without\n"
            "an importance matrix: the same type per tensor, the same bytes (docs/quantize.md).\n"
            "\n"
            "  --tensor-type PATTERN=TYPE   ggml type for the matrices whose name matches PATTERN (a regex,\n"
            "                               searched, lower-cased; the first matching pattern wins;\n"
            "                               repeatable), e.g. attn_v=q8_0 or 'blk\\.0\\.ffn_down=q6_k'\n"
            "  --tensor-type-file FILE      PATTERN=TYPE entries separated by blanks or newlines\n"
            "  --output-tensor-type TYPE    ggml type of output.weight\n"
            "  --token-embedding-type TYPE  ggml type of token_embd.weight\n"
            "  --pure                       no mixture rules: every matrix gets TYPE's tensor type\n"
            "  --leave-output-tensor        copy output.weight unchanged\n"
            "  --allow-requantize           accept quantized source tensors (dequantized first; loses quality)\n"
            "  --dry-run                    print the plan (types, sizes) and write nothing\n"
            "  -t, --threads N              threads (default: the physical cores); the bytes do not depend on it\n"
            "  -q, --quiet                  no per-tensor lines\n"
            "\n"
            "TYPE (llama-quantize's names, case-insensitive, or the llama_ftype number):\n");
    for (const struct muse_ftype_name *t = muse_ftype_names; t->name; t++)
        if (t->supported) fprintf(f, "  %2d  %-7s %s\n", t->ftype, t->name, t->note);
    fprintf(f, "Not here: ");
    for (const struct muse_ftype_name *t = muse_ftype_names; t->name; t++)
        if (!t->supported) fprintf(f, "%s ", t->name);
    fprintf(f, "\n(IQ types: use llama-quantize, muse reads them; Q2_K_S needs an importance matrix.)\n");
}

struct cli_state {
    bool quiet;
};

static void print_dims(const struct muse_quantize_tensor *t, char *buf, size_t size) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int d = 0; d < t->n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

static void on_tensor(const struct muse_quantize_tensor *t, void *user) {
    const struct cli_state *cs = user;
    if (cs->quiet) return;
    char dims[64];
    print_dims(t, dims, sizeof dims);
    const bool same = !strcmp(t->type_in, t->type_out);
    printf("[%4d/%4d] %-36s %-14s %6s -> %-6s %9.3f MiB -> %9.3f MiB%s%s\n", t->index + 1, t->n_tensors, t->name, dims,
           t->type_in, t->type_out, (double)t->bytes_in / (1 << 20), (double)t->bytes_out / (1 << 20),
           same ? "  (copied)" : "", t->fallback ? "  (fallback: rows do not fit the block size)" : "");
    fflush(stdout);
}

/* Appends the whitespace-separated entries of a file to *list (strings are leaked into the list). */
static bool read_type_file(const char *path, char ***list, int *n, int *cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "muse quantize: cannot read %s\n", path);
        return false;
    }
    char word[1024];
    while (fscanf(f, "%1023s", word) == 1) {
        if (*n + 2 > *cap) {
            *cap = *cap ? 2 * *cap : 16;
            char **nl = realloc(*list, sizeof(char *) * (size_t)*cap);
            if (!nl) break;
            *list = nl;
        }
        (*list)[(*n)++] = strdup(word);
        (*list)[*n] = NULL;
    }
    fclose(f);
    return true;
}

int cmd_quantize(int argc, char **argv) {
    struct muse_quantize_params p = muse_quantize_default_params();
    struct cli_state cs = {.quiet = false};
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, n_tt = 0, cap_tt = 0, rc = 2;
    char **tt = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int64_t iv;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--tensor-type")) {
            if (!(v = cli_next(argc, argv, &i))) goto out;
            if (n_tt + 2 > cap_tt) {
                cap_tt = cap_tt ? 2 * cap_tt : 16;
                char **nl = realloc(tt, sizeof(char *) * (size_t)cap_tt);
                if (!nl) goto out;
                tt = nl;
            }
            tt[n_tt++] = strdup(v);
            tt[n_tt] = NULL;
        } else if (!strcmp(a, "--tensor-type-file")) {
            if (!(v = cli_next(argc, argv, &i)) || !read_type_file(v, &tt, &n_tt, &cap_tt)) {
                rc = 1;
                goto out;
            }
        } else if (!strcmp(a, "--output-tensor-type")) {
            if (!(p.output_tensor_type = cli_next(argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--token-embedding-type")) {
            if (!(p.token_embedding_type = cli_next(argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--pure")) {
            p.pure = 1;
        } else if (!strcmp(a, "--leave-output-tensor")) {
            p.leave_output_tensor = 1;
        } else if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = 1;
        } else if (!strcmp(a, "--dry-run")) {
            p.dry_run = 1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &iv)) goto out;
            p.n_threads = (int32_t)iv;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            cs.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "muse quantize: unknown option '%s'\n\n", a);
            usage(stderr);
            goto out;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "muse quantize: unexpected argument '%s'\n\n", a);
            usage(stderr);
            goto out;
        }
    }
    const char *in = pos[0], *out = NULL;
    if (p.dry_run && n_pos == 2) {
        p.type = pos[1];
    } else if (n_pos == 3) {
        out = pos[1];
        p.type = pos[2];
    } else {
        fprintf(stderr, "muse quantize: expected IN.gguf OUT.gguf TYPE\n\n");
        usage(stderr);
        goto out;
    }
    p.tensor_types = (const char *const *)tt;
    p.progress = on_tensor;
    p.progress_user = &cs;

    struct muse_quantize_stats st;
    struct muse_error err;
    const int64_t t0 = muse_time_us();
    if (muse_quantize(in, out, &p, &st, &err) != MUSE_OK) {
        fprintf(stderr, "muse quantize: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    const double secs = (double)(muse_time_us() - t0) / 1e6;
    const double n = st.n_elements ? (double)st.n_elements : 1.0;
    const struct muse_ftype_name *ft = muse_ftype_lookup(p.type);
    fprintf(stderr, "muse quantize: %s%s %s: %d tensors (%d converted%s), %.2f MiB (%.2f bpw) -> %.2f MiB (%.2f bpw)",
            p.dry_run ? "dry run, " : "", out ? out : in, ft ? ft->name : p.type, st.n_tensors, st.n_converted,
            st.n_fallback ? ", some by a fallback type" : "", (double)st.bytes_in / (1 << 20), 8.0 * (double)st.bytes_in / n,
            (double)st.bytes_out / (1 << 20), 8.0 * (double)st.bytes_out / n);
    if (!p.dry_run) fprintf(stderr, " in %.2f s", secs);
    fprintf(stderr, "\n");
    rc = 0;
out:
    for (int k = 0; k < n_tt; k++) free(tt[k]);
    free(tt);
    return rc;
}
