/* cmd_quantize.c - `muse quantize`: llama-quantize's output without an importance matrix (muse_quantize). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gguf/tensor_type.h"
#include "muse.h"
#include "quantize/quant_rules.h"

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

/* Set by SIGINT: the quantize stops after the tensor it is writing and removes the output. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static int on_tensor(void *user, const struct muse_quantize_tensor *t) {
    const struct cli_state *cs = user;
    if (cs->quiet) return interrupted;
    char dims[64];
    print_dims(t, dims, sizeof dims);
    const bool same = !strcmp(t->type_in, t->type_out);
    printf("[%4d/%4d] %-36s %-14s %6s -> %-6s %9.3f MiB -> %9.3f MiB%s%s\n", t->index + 1, t->n_tensors, t->name, dims,
           t->type_in, t->type_out, (double)t->bytes_in / (1 << 20), (double)t->bytes_out / (1 << 20),
           same ? "  (copied)" : "", t->fallback ? "  (fallback: rows do not fit the block size)" : "");
    fflush(stdout);
    return interrupted;
}

/* Appends the whitespace-separated entries of a file to *list (strings are leaked into the list). */
static bool read_type_file(const char *path, char ***list, int *n, int *cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_err("cannot read %s", path);
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

struct quant_opts {
    struct muse_quantize_params p;
    struct cli_state cs;
    char **tt; /* --tensor-type entries, NULL-terminated (strdup'd) */
    int n_tt, cap_tt;
    bool help, failed; /* failed: an error with exit status 1 (a --tensor-type-file not read) */
};

#define Q(dst) ((struct quant_opts *)(dst))

/* A ggml type name (llama-quantize's, case-insensitive); a bad value (exit 2) otherwise. Whether muse
 * can write that type is muse_quantize's to say. */
static bool type_name_ok(const char *f, const char *v, const char *spec) {
    if (muse_type_from_name(v) >= 0) return true;
    cli_err("bad value for %s: '%s' (unknown ggml type '%s')", f, spec, v);
    return false;
}

static int add_tensor_type(void *d, const char *f, const char *v) {
    struct quant_opts *q = Q(d);
    const char *sep = strchr(v, '=');
    if (!sep || sep == v || !sep[1]) {
        cli_err("bad value for %s: '%s' (expected PATTERN=TYPE)", f, v);
        return -1;
    }
    if (!type_name_ok(f, sep + 1, v)) return -1;
    if (q->n_tt + 2 > q->cap_tt) {
        int cap = q->cap_tt ? 2 * q->cap_tt : 16;
        char **nl = realloc(q->tt, sizeof(char *) * (size_t)cap);
        if (!nl) {
            cli_err("out of memory");
            return -1;
        }
        q->tt = nl;
        q->cap_tt = cap;
    }
    q->tt[q->n_tt++] = strdup(v);
    q->tt[q->n_tt] = NULL;
    return 0;
}

static int set_type_file(void *d, const char *f, const char *v) {
    (void)f;
    if (!read_type_file(v, &Q(d)->tt, &Q(d)->n_tt, &Q(d)->cap_tt)) Q(d)->failed = true;
    return 0;
}

static int set_string(void *d, const char *f, const char *v) {
    if (!type_name_ok(f, v, v)) return -1;
    if (!strcmp(f, "--output-tensor-type")) Q(d)->p.output_tensor_type = v;
    else Q(d)->p.token_embedding_type = v;
    return 0;
}

static int set_threads(void *d, const char *f, const char *v) {
    int64_t iv;
    if (!cli_parse_int(f, v, 1, 256, &iv)) return -1;
    Q(d)->p.n_threads = (int32_t)iv;
    return 0;
}

static int set_flag(void *d, const char *f, const char *v) {
    (void)v;
    struct quant_opts *q = Q(d);
    if (!strcmp(f, "--pure")) q->p.pure = 1;
    else if (!strcmp(f, "--leave-output-tensor")) q->p.leave_output_tensor = 1;
    else if (!strcmp(f, "--allow-requantize")) q->p.allow_requantize = 1;
    else if (!strcmp(f, "--dry-run")) q->p.dry_run = 1;
    else if (!strcmp(f, "-q") || !strcmp(f, "--quiet")) q->cs.quiet = true;
    else q->help = true;
    return 0;
}

static const struct cli_opt rows[] = {
    {"--tensor-type", "PATTERN=TYPE", "ggml type for the matrices whose name matches PATTERN (a regex,\n"
                                      "searched, lower-cased; the first matching pattern wins;\n"
                                      "repeatable), e.g. attn_v=q8_0 or 'blk\\.0\\.ffn_down=q6_k'", add_tensor_type},
    {"--tensor-type-file", "FILE", "PATTERN=TYPE entries separated by blanks or newlines", set_type_file},
    {"--output-tensor-type", "TYPE", "ggml type of output.weight", set_string},
    {"--token-embedding-type", "TYPE", "ggml type of token_embd.weight", set_string},
    {"--pure", NULL, "no mixture rules: every matrix gets TYPE's tensor type", set_flag},
    {"--leave-output-tensor", NULL, "copy output.weight unchanged", set_flag},
    {"--allow-requantize", NULL, "accept quantized source tensors (dequantized first; loses quality)", set_flag},
    {"--dry-run", NULL, "print the plan (types, sizes) and write nothing", set_flag},
    {"-t|--threads", "N", "threads (default: the physical cores); the bytes do not depend on it", set_threads},
    {"-q|--quiet", NULL, "no per-tensor lines", set_flag},
    {"-h|--help", NULL, "this help", set_flag},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse quantize IN.gguf OUT.gguf TYPE [options]\n"
            "       muse quantize --dry-run IN.gguf TYPE [options]\n"
            "\n"
            "Quantizes an F32/F16/BF16 Muse-Glimmer (or DFlash drafter) GGUF as llama-quantize does without\n"
            "an importance matrix: the same type per tensor, the same bytes (docs/quantize.md).\n"
            "\n");
    cli_opts_usage(f, rows, N_ROWS);
    fprintf(f,
            "\n"
            "TYPE (llama-quantize's names, case-insensitive, or the llama_ftype number):\n");
    for (const struct muse_ftype_name *t = muse_ftype_names; t->name; t++)
        if (t->supported) fprintf(f, "  %2d  %-7s %s\n", t->ftype, t->name, t->note);
    fprintf(f, "Not here: ");
    for (const struct muse_ftype_name *t = muse_ftype_names; t->name; t++)
        if (!t->supported) fprintf(f, "%s ", t->name);
    fprintf(f, "\n(IQ types: use llama-quantize, muse reads them; Q2_K_S needs an importance matrix.)\n");
}

int cmd_quantize(int argc, char **argv) {
    struct quant_opts q = {.p = muse_quantize_default_params(), .cs = {.quiet = false}};
    int rc = 2;
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_opts_parse(rows, N_ROWS, &q, argc, argv, &i);
        if (r < 0) goto out;
        if (q.failed) {
            rc = 1;
            goto out;
        }
        if (q.help) {
            usage(stdout);
            rc = 0;
            goto out;
        }
        if (r > 0) continue;
        if (a[0] == '-' && a[1]) {
            cli_unknown(a);
            goto out;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            cli_usage_err("unexpected argument '%s'", a);
            goto out;
        }
    }
    struct muse_quantize_params *const p = &q.p;
    const char *in = pos[0], *out = NULL;
    if (p->dry_run && n_pos == 2) {
        p->type = pos[1];
    } else if (n_pos == 3) {
        out = pos[1];
        p->type = pos[2];
    } else {
        cli_usage_err("expected IN.gguf OUT.gguf TYPE");
        goto out;
    }
    if (!muse_ftype_lookup(p->type)) { /* a bad value (exit 2), before any file is read */
        cli_err("bad value for TYPE: '%s' (muse quantize --help lists the types)", p->type);
        goto out;
    }
    p->tensor_types = (const char *const *)q.tt;
    p->progress = on_tensor;
    p->progress_user = &q.cs;

    struct muse_quantize_stats st;
    struct muse_error err;
    const int64_t t0 = muse_time_us();
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    const muse_status qst = muse_quantize(in, out, p, &st, &err);
    sigaction(SIGINT, &old, NULL);
    if (qst != MUSE_OK) {
        cli_err("%s", err.msg);
        rc = 1;
        goto out;
    }
    const double secs = (double)(muse_time_us() - t0) / 1e6;
    const double n = st.n_elements ? (double)st.n_elements : 1.0;
    const struct muse_ftype_name *ft = muse_ftype_lookup(p->type);
    fprintf(stderr, "muse quantize: %s%s %s: %d tensors (%d converted%s), %.2f MiB (%.2f bpw) -> %.2f MiB (%.2f bpw)",
            p->dry_run ? "dry run, " : "", out ? out : in, ft ? ft->name : p->type, st.n_tensors, st.n_converted,
            st.n_fallback ? ", some by a fallback type" : "", (double)st.bytes_in / (1 << 20), 8.0 * (double)st.bytes_in / n,
            (double)st.bytes_out / (1 << 20), 8.0 * (double)st.bytes_out / n);
    if (!p->dry_run) fprintf(stderr, " in %.2f s", secs);
    fprintf(stderr, "\n");
    rc = 0;
out:
    for (int k = 0; k < q.n_tt; k++) free(q.tt[k]);
    free(q.tt);
    return rc;
}
