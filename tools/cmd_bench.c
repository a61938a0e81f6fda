/*
 * cmd_bench.c - `muse bench`: llama-bench-style throughput of a model.
 *
 *   pp<P>  prompt processing: P tokens in one muse_eval call (chunked by --batch), tokens/s
 *   tg<N>  text generation: N single-token muse_eval calls, tokens/s
 * optionally after a context of -d DEPTH tokens ("pp512 @ d4096"); each test is repeated -r
 * times after one warm-up run, and reported as mean +- standard deviation. --json prints a list
 * of records with llama-bench's field names (test, n_prompt, n_gen, n_depth, n_threads, avg_ts,
 * stddev_ts, samples_ts, avg_ns, ...) so llama-bench tooling reads it. --roofline adds the read
 * bandwidth measured in the same run and the decode roofline (bandwidth / bytes of weights read
 * per token).
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/cpu.h"
#include "core/membw.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model_opts.h"
#include "muse.h"

#define MAX_REPS 100

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS] [--json] [--roofline]\n"
            "Measures prompt processing (ppP) and text generation (tgN) in tokens per second.\n"
            "  -p, --n-prompt P     prompt tokens of the pp test (default 512; 0 = no pp test)\n"
            "  -n, --n-gen N        generated tokens of the tg test (default 128; 0 = no tg test)\n"
            "  -d, --n-depth D      tokens already in the context before each test (default 0)\n"
            "  -r, --repetitions R  timed repeats per test, after one warm-up (default 5)\n"
            "  --json               llama-bench JSON records instead of the markdown table\n"
            "  --roofline           also measure read bandwidth and the decode roofline\n"
            "  --cpu-time           time with process CPU time / threads instead of the wall clock (a\n"
            "                       shared, oversubscribed machine: leaves out waiting for a core)\n");
    model_opts_usage(f);
}

struct bench_result {
    char test[64];
    int n_prompt, n_gen, n_depth;
    int reps;
    double samples_ns[MAX_REPS];
    double samples_ts[MAX_REPS];
    double avg_ts, stddev_ts, avg_ns, stddev_ns;
};

static void stats(struct bench_result *r) {
    double s = 0, sn = 0;
    for (int i = 0; i < r->reps; i++) {
        s += r->samples_ts[i];
        sn += r->samples_ns[i];
    }
    r->avg_ts = s / r->reps;
    r->avg_ns = sn / r->reps;
    double v = 0, vn = 0;
    for (int i = 0; i < r->reps; i++) {
        v += (r->samples_ts[i] - r->avg_ts) * (r->samples_ts[i] - r->avg_ts);
        vn += (r->samples_ns[i] - r->avg_ns) * (r->samples_ns[i] - r->avg_ns);
    }
    r->stddev_ts = r->reps > 1 ? sqrt(v / (r->reps - 1)) : 0;
    r->stddev_ns = r->reps > 1 ? sqrt(vn / (r->reps - 1)) : 0;
}

static uint32_t rng_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Clear the context and fill `depth` tokens (untimed). */
static bool prepare(struct muse_context *ctx, const int32_t *tokens, int depth) {
    struct muse_error err;
    muse_kv_clear(ctx);
    if (depth > 0 && muse_eval(ctx, tokens, depth, NULL, 0, &err)) {
        fprintf(stderr, "muse bench: filling the context: %s\n", err.msg);
        return false;
    }
    return true;
}

static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One run of a test; returns its nanoseconds (wall clock, or CPU time / cpu_threads when
 * cpu_threads > 0) or -1 on error. */
static double run_once(struct muse_context *ctx, const int32_t *tokens, int depth, int n_prompt, int n_gen,
                       float *logits, int cpu_threads) {
    struct muse_error err;
    if (!prepare(ctx, tokens, depth)) return -1;
    const int32_t *t = tokens + depth;
    const double c0 = cpu_ns();
    int64_t t0 = muse_time_us();
    if (n_prompt > 0) {
        if (muse_eval(ctx, t, n_prompt, logits, 0, &err)) {
            fprintf(stderr, "muse bench: %s\n", err.msg);
            return -1;
        }
    } else {
        for (int i = 0; i < n_gen; i++)
            if (muse_eval(ctx, t + i, 1, logits, 0, &err)) {
                fprintf(stderr, "muse bench: %s\n", err.msg);
                return -1;
            }
    }
    if (cpu_threads > 0) return (cpu_ns() - c0) / cpu_threads;
    return (double)(muse_time_us() - t0) * 1e3;
}

/* Sizes from the GGUF: file bytes, parameters, and bytes of weights a decode step reads
 * (every matrix but token_embd, of which one row is read). */
static void model_sizes(const char *path, double *size, double *n_params, double *decode_bytes) {
    struct muse_gguf *g = NULL;
    *size = *n_params = *decode_bytes = 0;
    if (muse_gguf_open(path, &g, NULL)) return;
    *size = (double)g->size;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct muse_gguf_tensor *t = &g->tensors[i];
        *n_params += (double)t->n_elements;
        if (strcmp(t->name, "token_embd.weight") == 0) *decode_bytes += (double)t->nbytes / (double)t->ne[1];
        else *decode_bytes += (double)t->nbytes;
    }
    muse_gguf_free(g);
}

int cmd_bench(int argc, char **argv) {
    struct model_opts o;
    model_opts_init(&o);
    int64_t n_prompt = 512, n_gen = 128, depth = 0, reps = 5;
    bool json = false, roofline = false, cpu_time = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = model_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, 1 << 20, &n_prompt)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, 1 << 20, &n_gen)) return 2;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, 1 << 22, &depth)) return 2;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, MAX_REPS, &reps)) return 2;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--roofline")) {
            roofline = true;
        } else if (!strcmp(a, "--cpu-time")) {
            cpu_time = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "muse bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.model_path) {
        fprintf(stderr, "muse bench: -m MODEL is required\n");
        usage(stderr);
        return 2;
    }
    if (n_prompt == 0 && n_gen == 0) {
        fprintf(stderr, "muse bench: nothing to measure (-p 0 and -n 0)\n");
        return 2;
    }
    const int64_t need = depth + (n_prompt > n_gen ? n_prompt : n_gen);
    if (o.cparams.n_ctx == 0) o.cparams.n_ctx = (uint32_t)need;
    if (o.cparams.n_ctx < need) {
        fprintf(stderr, "muse bench: --ctx-size %u is smaller than depth + test (%lld)\n", o.cparams.n_ctx,
                (long long)need);
        return 2;
    }
    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    if (!model_opts_open(&o, "bench", &model, &ctx)) return 1;

    const int32_t n_vocab = muse_model_n_vocab(model);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)need);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    struct bench_result *res = calloc(2, sizeof *res);
    int n_res = 0, rc = 1;
    if (!tokens || !logits || !res) {
        fprintf(stderr, "muse bench: out of memory\n");
        goto done;
    }
    uint32_t seed = 42;
    for (int64_t i = 0; i < need; i++) tokens[i] = (int32_t)(rng_next(&seed) % (uint32_t)n_vocab);

    const int n_threads = o.cparams.n_threads ? (int)o.cparams.n_threads : muse_cpu_features()->n_physical;
    for (int which = 0; which < 2; which++) {
        const int p = which == 0 ? (int)n_prompt : 0, g = which == 0 ? 0 : (int)n_gen;
        if (p == 0 && g == 0) continue;
        struct bench_result *r = &res[n_res++];
        if (p) snprintf(r->test, sizeof r->test, "pp%d", p);
        else snprintf(r->test, sizeof r->test, "tg%d", g);
        if (depth) snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " @ d%lld", (long long)depth);
        r->n_prompt = p;
        r->n_gen = g;
        r->n_depth = (int)depth;
        r->reps = (int)reps;
        if (run_once(ctx, tokens, (int)depth, p, p ? 0 : 1, logits, 0) < 0) goto done;  /* warm-up */
        for (int k = 0; k < reps; k++) {
            double ns = run_once(ctx, tokens, (int)depth, p, g, logits, cpu_time ? n_threads : 0);
            if (ns < 0) goto done;
            r->samples_ns[k] = ns;
            r->samples_ts[k] = (p ? p : g) / (ns * 1e-9);
        }
        stats(r);
    }

    double size, n_params, decode_bytes, bw = 0;
    model_sizes(o.model_path, &size, &n_params, &decode_bytes);
    if (roofline) {
        struct muse_threadpool *pool = NULL;
        size_t bytes = (size_t)1 << 30;
        void *buf = malloc(bytes);
        if (buf && muse_threadpool_create(n_threads, &pool, NULL) == MUSE_OK) {
            memset(buf, 1, bytes);
            bw = muse_membw_read(pool, buf, bytes, 5);
        }
        muse_threadpool_free(pool);
        free(buf);
    }
    char desc[256];
    muse_model_desc(model, desc, sizeof desc);
    const char *backend = muse_context_backend(ctx);
    /* the SIMD level only matters to the cpu backend */
    char level[48];
    if (strcmp(backend, "cpu")) snprintf(level, sizeof level, "scalar");
    else snprintf(level, sizeof level, "%s%s%s", muse_cpu_level_name(muse_kernels_active()->level),
                  muse_kernels_active()->exact_mode && muse_kernels_active()->level ? ", exact" : "",
                  o.cparams.no_repack ? ", no-repack" : "");

    if (json) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < n_res; i++) {
            const struct bench_result *r = &res[i];
            cJSON *o2 = cJSON_CreateObject();
            cJSON_AddStringToObject(o2, "build_commit", muse_version());
            cJSON_AddStringToObject(o2, "cpu_info", level);
            cJSON_AddStringToObject(o2, "backends", backend);
            cJSON_AddStringToObject(o2, "model_filename", o.model_path);
            cJSON_AddStringToObject(o2, "model_type", desc);
            cJSON_AddNumberToObject(o2, "model_size", size);
            cJSON_AddNumberToObject(o2, "model_n_params", n_params);
            cJSON_AddNumberToObject(o2, "n_batch", o.cparams.n_batch ? o.cparams.n_batch : 512);
            cJSON_AddNumberToObject(o2, "n_threads", n_threads);
            cJSON_AddStringToObject(o2, "type_k", muse_kv_type_name(o.cparams.kv_type));
            cJSON_AddStringToObject(o2, "type_v", muse_kv_type_name(o.cparams.kv_type));
            cJSON_AddStringToObject(o2, "test", r->test);
            cJSON_AddNumberToObject(o2, "n_prompt", r->n_prompt);
            cJSON_AddNumberToObject(o2, "n_gen", r->n_gen);
            cJSON_AddNumberToObject(o2, "n_depth", r->n_depth);
            cJSON_AddStringToObject(o2, "timing", cpu_time ? "cpu_time_per_thread" : "wall");
            cJSON_AddNumberToObject(o2, "avg_ns", round(r->avg_ns));
            cJSON_AddNumberToObject(o2, "stddev_ns", round(r->stddev_ns));
            cJSON_AddNumberToObject(o2, "avg_ts", r->avg_ts);
            cJSON_AddNumberToObject(o2, "stddev_ts", r->stddev_ts);
            cJSON *sn = cJSON_CreateArray(), *st = cJSON_CreateArray();
            for (int k = 0; k < r->reps; k++) {
                cJSON_AddItemToArray(sn, cJSON_CreateNumber(round(r->samples_ns[k])));
                cJSON_AddItemToArray(st, cJSON_CreateNumber(r->samples_ts[k]));
            }
            cJSON_AddItemToObject(o2, "samples_ns", sn);
            cJSON_AddItemToObject(o2, "samples_ts", st);
            if (roofline && r->n_gen > 0) {
                cJSON_AddNumberToObject(o2, "read_bw_gbs", bw * 1e-9);
                cJSON_AddNumberToObject(o2, "decode_bytes", decode_bytes);
                cJSON_AddNumberToObject(o2, "roofline_ts", decode_bytes > 0 ? bw / decode_bytes : 0);
            }
            cJSON_AddItemToArray(arr, o2);
        }
        char *text = cJSON_Print(arr);
        if (text) puts(text);
        free(text);
        cJSON_Delete(arr);
    } else {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
        for (int i = 0; i < n_res; i++)
            printf("| %s | %.2f MiB | %.2f M | %s (%s) | %d | %s | %.2f ± %.2f |\n", desc, size / 1048576.0,
                   n_params * 1e-6, backend, level, n_threads, res[i].test, res[i].avg_ts, res[i].stddev_ts);
        if (cpu_time) printf("\n(timed with process CPU time / %d threads, not the wall clock)\n", n_threads);
        if (roofline)
            printf("\nread bandwidth %.2f GB/s (%d threads); weights read per decode token %.2f MiB; "
                   "decode roofline %.2f t/s\n",
                   bw * 1e-9, n_threads, decode_bytes / 1048576.0, decode_bytes > 0 ? bw / decode_bytes : 0);
    }
    rc = 0;
done:
    free(tokens);
    free(logits);
    free(res);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
}
