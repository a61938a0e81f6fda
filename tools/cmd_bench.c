/*
 * cmd_bench.c - `muse bench`: llama-bench-style throughput of a model.
 *
 *   pp<P>  prompt processing: P tokens in one muse_eval call (chunked by --batch-size), tokens/s
 *   tg<N>  text generation: N single-token muse_eval calls, tokens/s
 * optionally after a context of -d DEPTH tokens ("pp512 @ d4096"); each test is repeated -r
 * times after one warm-up run, and reported as mean +- standard deviation. As llama-bench, -p,
 * -n, -d, -t and -b take comma-separated lists and every combination runs (for each thread count,
 * batch size and depth: the pp tests, then the tg tests). -o md|json|jsonl|csv (--json = -o json)
 * prints records with llama-bench's field names (build_commit, test, n_prompt, n_gen, n_depth,
 * n_threads, n_batch, avg_ts, stddev_ts, samples_ts, avg_ns, ...) so llama-bench tooling reads
 * them. --roofline adds the read bandwidth measured in the same run and the decode roofline
 * (bandwidth / bytes of weights read per token). With --draft-model, two more tests compare plain and
 * speculative greedy generation (tools/bench_spec.h).
 * With --image F (and --mmproj P, else the projector beside the model), per thread count: the tower
 * ("img WxH": preprocessing excluded, the encode only, as llama-mtmd-cli's "image encoded in";
 * t/s = merged tokens per second) and the time to first token of that image + 16 text tokens
 * ("ttft img+16": decode-free, preprocess + encode + prefill of 8 + rows + 16 positions from an
 * empty cache; avg_ns is the TTFT, t/s positions per second).
 * With --parallel NPL,... (llama-batched-bench's measurement) the pp and tg tests run for each
 * number of sequences NPL in one context (muse_decode): pp<P> = every sequence's P prompt tokens,
 * sequence after sequence, in batches of --batch-size rows; tg<N> = N steps of one row per
 * sequence in one batch; t/s = the tokens of all sequences per second together (S_PP / S_TG), and
 * each record carries n_parallel.
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "model/model.h"
#include "core/cpu.h"
#include "core/membw.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "media_opts.h"
#include "bench_spec.h"
#include "model_opts.h"
#include "muse.h"
#include "run_text.h"
#include "spec_opts.h"

#define MAX_REPS 100

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-b BATCH] [-r REPS] [-o md|json|jsonl|csv]\n"
            "Measures prompt processing (ppP) and text generation (tgN) in tokens per second.\n"
            "-p, -n, -d, -t and -b take comma-separated lists (llama-bench's): every combination runs.\n"
            "  -p, --n-prompt P,...     prompt tokens of the pp tests (default 512; 0 = no pp test)\n"
            "  -n, --n-gen N,...        generated tokens of the tg tests (default 128; 0 = no tg test)\n"
            "  -d, --n-depth D,...      tokens already in the context before each test (default 0)\n"
            "  -t, --threads T,...      thread counts, 1..256 (default: physical cores)\n"
            "  -b, --batch-size B,...   prompt chunk sizes (default 512)\n"
            "  -np, --parallel NPL,...  run the pp / tg tests over NPL sequences in one context each (muse_decode,\n"
            "                           as llama-batched-bench): t/s = all sequences' tokens per second; -npl too\n"
            "  -r, --repetitions R      timed repeats per test, after one warm-up (default 5; --no-warmup: none)\n"
            "  -o, --output FORMAT      md (table, default), json (one array), jsonl (a record per line), csv\n"
            "  --json                   = -o json\n"
            "  --roofline               also measure read bandwidth and the decode roofline\n"
            "  --cpu-time               time with process CPU time / threads instead of the wall clock (a\n"
            "                           shared, oversubscribed machine: leaves out waiting for a core)\n"
            "with --draft-model: two more tests, tgN plain and tgN spec: N (the largest -n) tokens generated\n"
            "greedily from a prompt (--tokens IDS, --input FILE, else the largest -d random tokens, at least 32),\n"
            "without and with the drafter, runs alternating; reports the acceptance rate, the mean accepted\n"
            "length and the speedup\n"
            "  --tokens IDS             prompt of the speculative tests (comma-separated ids)\n"
            "  --input FILE             prompt text of the speculative tests (the model's tokenizer)\n");
    spec_opts_usage(f);
    model_opts_usage(f);
    media_opts_usage(f);
}

/* A comma-separated list of integers in [lo, hi] (at most MAX_LIST values). */
#define MAX_LIST 32
struct int_list {
    int n;
    int64_t v[MAX_LIST];
};

static bool parse_list(const char *opt, const char *val, int64_t lo, int64_t hi, struct int_list *out) {
    out->n = 0;
    const char *p = val;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item || out->n == MAX_LIST) {
            cli_err("bad value for %s: '%s' (expected comma-separated integers in %lld..%lld, at most %d)", opt, val,
                    (long long)lo, (long long)hi, MAX_LIST);
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_int(opt, item, lo, hi, &out->v[out->n++])) return false;
        if (!comma) return true;
        p = comma + 1;
    }
}

static int64_t list_max(const struct int_list *l) {
    int64_t m = 0;
    for (int i = 0; i < l->n; i++) m = l->v[i] > m ? l->v[i] : m;
    return m;
}

struct bench_result {
    char test[64];
    int n_prompt, n_gen, n_depth, n_threads, n_batch, n_parallel;
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

/* The rows of one muse_decode call ([n_batch] each). */
struct rows {
    int32_t *token, *seq;
    int8_t *want;
    int32_t n, cap;
};

static bool rows_flush(struct muse_context *ctx, struct rows *r, float *logits) {
    struct muse_error err;
    if (r->n == 0) return true;
    const struct muse_batch b = {.n_tokens = r->n, .token = r->token, .seq_id = r->seq, .logits = r->want};
    const muse_status st = muse_decode(ctx, &b, logits, &err);
    r->n = 0;
    if (st) fprintf(stderr, "muse bench: %s\n", err.msg);
    return st == MUSE_OK;
}

/* Append a row; runs the batch when it is full. */
static bool rows_add(struct muse_context *ctx, struct rows *r, int32_t token, int32_t seq, bool want, float *logits) {
    r->token[r->n] = token;
    r->seq[r->n] = seq;
    r->want[r->n++] = want;
    return r->n < r->cap || rows_flush(ctx, r, logits);
}

/* One run of a test over npl sequences of one context (--parallel): each sequence gets `depth`
 * tokens (untimed), then its n_prompt tokens (sequence after sequence, n_batch rows per
 * muse_decode, the logits of each sequence's last row) or n_gen steps of one row per sequence (the
 * logits of every row). Returns the nanoseconds as run_once, or -1. */
static double run_once_par(struct muse_context *ctx, const int32_t *tokens, int depth, int n_prompt, int n_gen, int npl,
                           struct rows *r, float *logits, int cpu_threads) {
    struct muse_error err;
    for (int s = 0; s < npl; s++)
        if (muse_seq_clear(ctx, s, &err)) return -1;
    for (int s = 0; s < npl; s++)
        for (int i = 0; i < depth; i++)
            if (!rows_add(ctx, r, tokens[i], s, false, NULL)) return -1;
    if (!rows_flush(ctx, r, NULL)) return -1;
    const int32_t *t = tokens + depth;
    const double c0 = cpu_ns();
    int64_t t0 = muse_time_us();
    for (int s = 0; s < npl; s++)
        for (int i = 0; i < n_prompt; i++)
            if (!rows_add(ctx, r, t[i], s, i == n_prompt - 1, logits)) return -1;
    for (int k = 0; k < n_gen; k++) {
        for (int s = 0; s < npl; s++)
            if (!rows_add(ctx, r, t[k], s, true, logits)) return -1;
        if (!rows_flush(ctx, r, logits)) return -1;
    }
    if (!rows_flush(ctx, r, logits)) return -1;
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

/* The tower on one image: encode-only ns (img) or preprocess + encode + prefill of 8 + rows + 16
 * positions from an empty cache (ttft); -1 on error. */
static double run_image(struct muse_vision *v, struct muse_context *ctx, const struct muse_image *img, int32_t max_tokens,
                        const int32_t *tokens, bool ttft, int32_t *n_pos) {
    struct muse_error err;
    struct muse_vision_input in = {0};
    float *rows = NULL;
    const float **ptr = NULL;
    double ns = -1;
    muse_kv_clear(ctx);
    int64_t t0 = muse_time_us();
    if (muse_vision_preprocess(v, img, max_tokens, &in, &err)) goto out;
    const int32_t n = in.geom.n_tokens, w = muse_vision_n_embd_out(v);
    if (!(rows = malloc(sizeof(float) * (size_t)n * (size_t)w))) goto out;
    if (!ttft) t0 = muse_time_us();
    if (muse_vision_encode(v, &in, rows, &err)) goto out;
    if (ttft) {
        *n_pos = 8 + n + 16;
        if (!(ptr = calloc((size_t)*n_pos, sizeof *ptr))) goto out;
        for (int32_t r = 0; r < n; r++) ptr[8 + r] = rows + (size_t)r * (size_t)w;
        if (muse_eval_mixed(ctx, tokens, ptr, *n_pos, NULL, 0, &err)) goto out;
    } else {
        *n_pos = n;
    }
    ns = (double)(muse_time_us() - t0) * 1e3;
out:
    if (ns < 0) fprintf(stderr, "muse bench: %s\n", err.msg);
    free(ptr);
    free(rows);
    muse_vision_input_free(&in);
    return ns;
}

static const char *const csv_fields[] = {
    "build_commit", "cpu_info", "backends", "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_threads", "type_k", "type_v", "test", "n_prompt", "n_gen", "n_depth", "timing", "avg_ns", "stddev_ns", "avg_ts",
    "stddev_ts", "n_parallel"};

/* The model and machine fields every record starts with (llama-bench's names and order). */
static cJSON *record_head(const char *path, const char *desc, const char *backend, const char *level, double size,
                          double n_params, int n_batch, int n_threads, enum muse_kv_type kv) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "build_commit", muse_build_commit());
    cJSON_AddStringToObject(o, "build_version", muse_version());
    cJSON_AddStringToObject(o, "cpu_info", level);
    cJSON_AddStringToObject(o, "backends", backend);
    cJSON_AddStringToObject(o, "model_filename", path);
    cJSON_AddStringToObject(o, "model_type", desc);
    cJSON_AddNumberToObject(o, "model_size", size);
    cJSON_AddNumberToObject(o, "model_n_params", n_params);
    cJSON_AddNumberToObject(o, "n_batch", n_batch);
    cJSON_AddNumberToObject(o, "n_threads", n_threads);
    cJSON_AddStringToObject(o, "type_k", muse_kv_type_name(kv));
    cJSON_AddStringToObject(o, "type_v", muse_kv_type_name(kv));
    return o;
}

/* One record with llama-bench's field names. */
static cJSON *record(const struct bench_result *r, const char *path, const char *desc, const char *backend,
                     const char *level, double size, double n_params, enum muse_kv_type kv, bool cpu_time, bool roofline,
                     double bw, double decode_bytes) {
    cJSON *o = record_head(path, desc, backend, level, size, n_params, r->n_batch, r->n_threads, kv);
    cJSON_AddStringToObject(o, "test", r->test);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "n_depth", r->n_depth);
    cJSON_AddNumberToObject(o, "n_parallel", r->n_parallel);
    cJSON_AddStringToObject(o, "timing", cpu_time ? "cpu_time_per_thread" : "wall");
    cJSON_AddNumberToObject(o, "avg_ns", round(r->avg_ns));
    cJSON_AddNumberToObject(o, "stddev_ns", round(r->stddev_ns));
    cJSON_AddNumberToObject(o, "avg_ts", r->avg_ts);
    cJSON_AddNumberToObject(o, "stddev_ts", r->stddev_ts);
    cJSON *sn = cJSON_CreateArray(), *st = cJSON_CreateArray();
    for (int k = 0; k < r->reps; k++) {
        cJSON_AddItemToArray(sn, cJSON_CreateNumber(round(r->samples_ns[k])));
        cJSON_AddItemToArray(st, cJSON_CreateNumber(r->samples_ts[k]));
    }
    cJSON_AddItemToObject(o, "samples_ns", sn);
    cJSON_AddItemToObject(o, "samples_ts", st);
    if (roofline && r->n_gen > 0) {
        cJSON_AddNumberToObject(o, "read_bw_gbs", bw * 1e-9);
        cJSON_AddNumberToObject(o, "decode_bytes", decode_bytes);
        cJSON_AddNumberToObject(o, "roofline_ts", decode_bytes > 0 ? bw / decode_bytes : 0);
    }
    return o;
}

/* A record of a speculative test (bench_spec.h), llama-bench's fields and the speculative ones. */
static cJSON *spec_record(const struct bench_spec_result *sres, int k, const char *path, const char *draft_path,
                          const char *desc, const char *backend, const char *level, double size, double n_params,
                          enum muse_kv_type kv, int n_threads, int n_batch) {
    const struct bench_spec_result *r = &sres[k];
    cJSON *o = record_head(path, desc, backend, level, size, n_params, n_batch, n_threads, kv);
    cJSON_AddStringToObject(o, "test", r->test);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "n_depth", 0);
    cJSON_AddNumberToObject(o, "n_parallel", 1);
    cJSON_AddStringToObject(o, "timing", "wall");
    cJSON_AddNumberToObject(o, "avg_ns", round(r->avg_ns));
    cJSON_AddNumberToObject(o, "stddev_ns", round(r->stddev_ns));
    cJSON_AddNumberToObject(o, "avg_ts", r->avg_ts);
    cJSON_AddNumberToObject(o, "stddev_ts", r->stddev_ts);
    cJSON_AddNumberToObject(o, "median_ts", r->median_ts);
    cJSON *sn = cJSON_CreateArray(), *st = cJSON_CreateArray();
    for (int j = 0; j < r->reps; j++) {
        cJSON_AddItemToArray(sn, cJSON_CreateNumber(round(r->samples_ns[j])));
        cJSON_AddItemToArray(st, cJSON_CreateNumber(r->samples_ts[j]));
    }
    cJSON_AddItemToObject(o, "samples_ns", sn);
    cJSON_AddItemToObject(o, "samples_ts", st);
    cJSON_AddBoolToObject(o, "speculative", r->spec);
    if (r->spec) {
        const struct muse_spec_stats *ss = &r->stats;
        cJSON_AddStringToObject(o, "draft_model", draft_path);
        cJSON_AddNumberToObject(o, "n_drafted", (double)ss->n_drafted);
        cJSON_AddNumberToObject(o, "n_accepted", (double)ss->n_accepted);
        cJSON_AddNumberToObject(o, "acceptance_rate", ss->n_drafted ? (double)ss->n_accepted / (double)ss->n_drafted : 0);
        cJSON_AddNumberToObject(o, "verify_steps", (double)ss->n_steps_spec);
        cJSON_AddNumberToObject(o, "mean_accepted_length",
                                ss->n_steps_spec ? (double)ss->n_emitted_spec / (double)ss->n_steps_spec : 0);
        cJSON_AddNumberToObject(o, "parked_steps", (double)ss->n_steps_parked);
        cJSON_AddNumberToObject(o, "shadow_steps", (double)ss->n_steps_shadow);
        cJSON_AddNumberToObject(o, "speedup", bench_spec_speedup(sres));
    }
    return o;
}

/* A CSV cell as llama-bench writes them: every value in double quotes, quotes doubled. */
static void csv_cell(const cJSON *v, bool last) {
    char *text = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
    const char *s = cJSON_IsString(v) ? v->valuestring : text ? text : "";
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
    putchar(last ? '\n' : ',');
    free(text);
}

enum out_format { OUT_MD, OUT_JSON, OUT_JSONL, OUT_CSV };

int cmd_bench(int argc, char **argv) {
    struct model_opts o;
    model_opts_init(&o);
    struct int_list prompts = {1, {512}}, gens = {1, {128}}, depths = {1, {0}}, threads = {0}, batches = {0},
                    parallels = {0};
    int64_t reps = 5;
    enum out_format fmt = OUT_MD;
    bool roofline = false, cpu_time = false;
    struct media_opts md;
    media_opts_init(&md);
    struct spec_opts spo;
    spec_opts_init(&spo);
    const char *spec_input = NULL;
    int32_t *spec_tokens = NULL;
    int n_spec_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        struct int_list *l = NULL;
        int64_t lo = 0, hi = 1 << 20;
        if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) l = &prompts;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) l = &gens;
        else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) l = &depths, hi = 1 << 22;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) l = &threads, lo = 1, hi = MUSE_THREADPOOL_MAX;
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size") || !strcmp(a, "--batch")) l = &batches, lo = 1, hi = 1 << 16;
        else if (!strcmp(a, "-np") || !strcmp(a, "-npl") || !strcmp(a, "--parallel")) l = &parallels, lo = 1, hi = MUSE_MAX_SEQ;
        if (l) {
            if (!(v = cli_next(argc, argv, &i)) || !parse_list(a, v, lo, hi, l)) goto usage_fail;
            continue;
        }
        int r = model_opts_parse(&o, argc, argv, &i);
        if (r == 0) r = media_opts_parse(&md, argc, argv, &i);
        if (r == 0) r = spec_opts_parse(&spo, argc, argv, &i);
        if (r == 0 && (!strcmp(a, "--tokens") || !strcmp(a, "--input"))) {
            if (!(v = cli_next(argc, argv, &i))) r = -1;
            else if (a[2] == 'i') spec_input = v, r = 1;
            else {
                free(spec_tokens);
                spec_tokens = NULL;
                r = cli_parse_ids(a, v, &spec_tokens, &n_spec_tokens) ? 1 : -1;
            }
        }
        if (r < 0) goto usage_fail;
        if (r > 0) continue;
        if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, MAX_REPS, &reps)) goto usage_fail;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(v = cli_next(argc, argv, &i))) goto usage_fail;
            if (!strcmp(v, "md")) fmt = OUT_MD;
            else if (!strcmp(v, "json")) fmt = OUT_JSON;
            else if (!strcmp(v, "jsonl")) fmt = OUT_JSONL;
            else if (!strcmp(v, "csv")) fmt = OUT_CSV;
            else {
                cli_err("bad value for %s: '%s' (expected md, json, jsonl or csv)", a, v);
                goto usage_fail;
            }
        } else if (!strcmp(a, "--json")) {
            fmt = OUT_JSON;
        } else if (!strcmp(a, "--roofline")) {
            roofline = true;
        } else if (!strcmp(a, "--cpu-time")) {
            cpu_time = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(spec_tokens);
            return 0;
        } else {
            cli_unknown(a);
            goto usage_fail;
        }
    }
    if (!o.model_path) {
        cli_usage_err("-m MODEL is required");
        goto usage_fail;
    }
    if (list_max(&prompts) == 0 && list_max(&gens) == 0 && md.n_images == 0) {
        cli_usage_err("nothing to measure (-p 0 and -n 0)");
        goto usage_fail;
    }
    int64_t test_max = list_max(&prompts) > list_max(&gens) ? list_max(&prompts) : list_max(&gens);
    /* images: their projector and pixels before the model (the context must hold their rows) */
    struct muse_image *imgs = md.n_images ? calloc((size_t)md.n_images, sizeof *imgs) : NULL;
    char *mmproj = md.mmproj ? strdup(md.mmproj) : NULL;
    if (md.n_images) {
        struct muse_error err;
        struct muse_vision *v = NULL;
        if (!imgs || (!mmproj && !(mmproj = media_find_mmproj(o.model_path, &err)))) {
            cli_err("%s", imgs ? err.msg : "out of memory");
            goto images_fail;
        }
        if (!md.mmproj && o.verbosity >= 0) cli_err("using the vision projector %s (found beside the model)", mmproj);
        if (muse_vision_load(mmproj, muse_vision_default_params(), &v, &err)) {
            cli_err("%s", err.msg);
            goto images_fail;
        }
        for (int k = 0; k < md.n_images; k++) {
            struct muse_image_geometry g;
            if (muse_image_load(md.images[k], 0, &imgs[k], &err) ||
                muse_vision_geometry(v, imgs[k].width, imgs[k].height, (int32_t)md.max_tokens, &g, &err)) {
                cli_err("%s", err.msg);
                muse_vision_free(v);
                goto images_fail;
            }
            if (g.n_tokens + 24 > test_max) test_max = g.n_tokens + 24;
        }
        muse_vision_free(v);
    }
    int64_t need = list_max(&depths) + test_max;
    /* the speculative tests: a prompt (default: the largest depth, at least 32) + the largest -n */
    const int64_t spec_gen = list_max(&gens), spec_depth = list_max(&depths) > 32 ? list_max(&depths) : 32;
    const int64_t spec_need = (spec_tokens ? n_spec_tokens : spec_depth) + spec_gen + 1;
    if (spo.draft_path && spec_gen > 0 && !spec_input && spec_need > need) need = spec_need; /* text: checked once tokenized */
    if (o.cparams.n_ctx == 0) o.cparams.n_ctx = (uint32_t)need;
    if (o.cparams.n_ctx < need) {
        cli_err("--ctx-size %u is smaller than depth + test (%lld)", o.cparams.n_ctx, (long long)need);
        goto usage_fail;
    }
    if (threads.n == 0) threads = (struct int_list){1, {o.cparams.n_threads}}; /* 0: the backend's choice */
    const bool par = parallels.n > 0; /* --parallel: every pp / tg test through muse_decode over NPL sequences */
    if (!par) parallels = (struct int_list){1, {1}};
    if (batches.n == 0) batches = (struct int_list){1, {o.cparams.n_batch ? o.cparams.n_batch : 512}};
    const bool show_batch = batches.n > 1 || batches.v[0] != 512;

    struct muse_model *model = NULL;
    struct muse_context *ctx = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    struct rows rows = {0};
    struct bench_result *res = NULL;
    int n_res = 0, rc = 1;
    cJSON *arr = NULL;
    struct muse_drafter *drafter = NULL;
    struct bench_spec_result *sres = NULL; /* [2]: plain, spec */
    bool have_spec = false;
    /* a text prompt for the speculative tests: the model's default context, room for the text */
    if (spec_input && o.cparams.n_ctx == (uint32_t)need) o.cparams.n_ctx = 0;
    /* the model is loaded once; a context per (threads, batch) */
    struct model_opts first = o;
    first.cparams.n_threads = (uint32_t)threads.v[0];
    first.cparams.n_batch = (uint32_t)batches.v[0];
    if (!model_opts_open(&first, "bench", &model, &ctx)) goto done;
    const enum muse_kv_type kv = o.cparams.kv_type; /* model_opts_open refused a -ctk/-ctv pair that differs */
    const int32_t n_vocab = muse_model_n_vocab(model);
    const int max_res = threads.n * batches.n * parallels.n * depths.n * (prompts.n + gens.n) + threads.n * md.n_images * 2;
    /* logits: one row, or with --parallel the most rows a batch asks for (one per sequence) */
    const int64_t max_npl = list_max(&parallels), max_b = list_max(&batches) ? list_max(&batches) : 512;
    const int64_t n_logit_rows = par ? (max_npl < max_b ? max_npl : max_b) : 1;
    rows = (struct rows){malloc(sizeof(int32_t) * (size_t)max_b), malloc(sizeof(int32_t) * (size_t)max_b), malloc((size_t)max_b), 0, 0};
    tokens = malloc(sizeof(int32_t) * (size_t)need);
    logits = malloc(sizeof(float) * (size_t)n_vocab * (size_t)n_logit_rows);
    res = calloc((size_t)max_res, sizeof *res);
    if (!tokens || !logits || !res || !rows.token || !rows.seq || !rows.want) {
        cli_err("out of memory");
        goto done;
    }
    uint32_t seed = 42;
    for (int64_t i = 0; i < need; i++) tokens[i] = (int32_t)(rng_next(&seed) % (uint32_t)n_vocab);

    for (int ti = 0; ti < threads.n; ti++)
        for (int bi = 0; bi < batches.n; bi++) {
            for (int pi = 0; pi < parallels.n; pi++) {
            const int npl = (int)parallels.v[pi];
            if (ti || bi || pi || npl > 1) { /* another thread count, batch size or NPL: a new context */
                struct muse_error err;
                struct muse_context_params cp = o.cparams;
                if (o.ngl_given) { /* -ngl as model_opts_open applied it (its note is said once, there) */
                    struct model_opts quiet = o;
                    quiet.verbosity = -1;
                    model_opts_apply_ngl(&quiet, &cp);
                }
                cp.kv_type = kv;
                cp.n_threads = (uint32_t)threads.v[ti];
                cp.n_batch = (uint32_t)batches.v[bi];
                cp.n_seq_max = (uint32_t)npl;
                muse_context_free(ctx);
                ctx = NULL;
                if (muse_context_create(model, cp, &ctx, &err)) {
                    cli_err("%s", err.msg);
                    goto done;
                }
            }
            const int n_threads = (int)muse_context_n_threads(ctx);
            rows.cap = (int32_t)muse_context_n_batch(ctx);
            for (int di = 0; di < depths.n; di++)
                for (int k = 0; k < prompts.n + gens.n; k++) {
                    const int p = k < prompts.n ? (int)prompts.v[k] : 0, g = k < prompts.n ? 0 : (int)gens.v[k - prompts.n];
                    const int depth = (int)depths.v[di];
                    if (p == 0 && g == 0) continue;
                    struct bench_result *r = &res[n_res++];
                    if (p) snprintf(r->test, sizeof r->test, "pp%d", p);
                    else snprintf(r->test, sizeof r->test, "tg%d", g);
                    if (depth) snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " @ d%d", depth);
                    r->n_prompt = p;
                    r->n_gen = g;
                    r->n_depth = depth;
                    r->n_threads = n_threads;
                    r->n_batch = (int)muse_context_n_batch(ctx);
                    r->n_parallel = npl;
                    r->reps = (int)reps;
                    const int ct = cpu_time ? n_threads : 0;
                    if (!o.no_warmup && (par ? run_once_par(ctx, tokens, depth, p, p ? 0 : 1, npl, &rows, logits, 0)
                             : run_once(ctx, tokens, depth, p, p ? 0 : 1, logits, 0)) < 0)
                        goto done; /* warm-up */
                    for (int j = 0; j < reps; j++) {
                        double ns = par ? run_once_par(ctx, tokens, depth, p, g, npl, &rows, logits, ct)
                                        : run_once(ctx, tokens, depth, p, g, logits, ct);
                        if (ns < 0) goto done;
                        r->samples_ns[j] = ns;
                        r->samples_ts[j] = (double)npl * (p ? p : g) / (ns * 1e-9);
                    }
                    stats(r);
                }
            }
            /* images: the tower alone, then the time to first token, at this thread count */
            for (int k = 0; bi == batches.n - 1 && k < md.n_images; k++) {
                struct muse_vision_params vp = muse_vision_default_params();
                struct muse_vision *v = NULL;
                struct muse_error err;
                vp.n_threads = (uint32_t)threads.v[ti];
                vp.backend = o.cparams.backend;
                if (muse_vision_load(mmproj, vp, &v, &err)) {
                    cli_err("%s", err.msg);
                    goto done;
                }
                for (int ttft = 0; ttft < 2; ttft++) {
                    struct bench_result *r = &res[n_res++];
                    int32_t n_pos = 0;
                    r->n_threads = (int)muse_context_n_threads(ctx);
                    r->n_batch = (int)muse_context_n_batch(ctx);
                    r->n_parallel = 1;
                    r->reps = (int)reps;
                    bool bad = !o.no_warmup && run_image(v, ctx, &imgs[k], (int32_t)md.max_tokens, tokens, ttft, &n_pos) < 0;
                    for (int j = 0; !bad && j < reps; j++) {
                        double ns = run_image(v, ctx, &imgs[k], (int32_t)md.max_tokens, tokens, ttft, &n_pos);
                        bad = ns < 0;
                        r->samples_ns[j] = ns;
                        r->samples_ts[j] = n_pos / (ns * 1e-9);
                    }
                    if (bad) {
                        muse_vision_free(v);
                        goto done;
                    }
                    r->n_prompt = n_pos;
                    if (ttft) snprintf(r->test, sizeof r->test, "ttft img+16 (%d pos)", n_pos);
                    else snprintf(r->test, sizeof r->test, "img %dx%d (%d tok)", imgs[k].width, imgs[k].height, n_pos);
                    stats(r);
                }
                muse_vision_free(v);
            }
        }
    /* plain vs speculative greedy generation (bench_spec.h), on the last context */
    if (spo.draft_path && spec_gen > 0) {
        if (!spec_opts_load(&spo, "bench", model, &drafter)) goto done;
        if (spec_input) {
            struct run_text *rt = NULL;
            struct muse_error err;
            if (run_text_open(o.model_path, &rt, &err) ||
                run_text_encode_prompt(rt, NULL, spec_input, &spec_tokens, &n_spec_tokens, &err)) {
                cli_err("%s", err.msg);
                run_text_close(rt);
                goto done;
            }
            run_text_close(rt);
        }
        const int32_t *sp_prompt = spec_tokens ? spec_tokens : tokens;
        const int sp_n = spec_tokens ? n_spec_tokens : (int)spec_depth;
        if ((int64_t)sp_n + spec_gen + 1 > (int64_t)muse_context_n_ctx(ctx)) {
            cli_err("the speculative tests need %lld positions, the context has %u", (long long)sp_n + spec_gen + 1,
                    muse_context_n_ctx(ctx));
            goto done;
        }
        sres = calloc(2, sizeof *sres);
        if (!sres) {
            cli_err("out of memory");
            goto done;
        }
        if (!bench_spec_run(model, ctx, drafter, spo.sp, sp_prompt, sp_n, (int)spec_gen, (int)reps, sres)) goto done;
        have_spec = true;
    }

    double size, n_params, decode_bytes, bw = 0;
    model_sizes(o.model_path, &size, &n_params, &decode_bytes);
    const int bw_threads = (int)muse_context_n_threads(ctx);
    if (roofline) {
        struct muse_threadpool *pool = NULL;
        size_t bytes = (size_t)1 << 30;
        void *buf = malloc(bytes);
        if (buf && muse_threadpool_create(bw_threads, &pool, NULL) == MUSE_OK) {
            memset(buf, 1, bytes);
            bw = muse_membw_read(pool, buf, bytes, 5);
        }
        muse_threadpool_free(pool);
        free(buf);
    }
    /* the model as llama-bench names it: architecture, size, type ("muse-glimmer 28M Q4_K"): the
     * description up to its colon, the type in capitals */
    char desc[256];
    muse_model_desc(model, desc, sizeof desc);
    char *colon = strchr(desc, ':');
    if (colon) *colon = '\0';
    for (char *c = strrchr(desc, ' '); c && *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    const char *backend = muse_context_backend(ctx);
    /* the SIMD level only matters to the cpu backend */
    char level[160];
    if (muse_device_own_memory(ctx->dev)) { /* the GPU's name ("vulkan: NAME (device N)" without the kind) */
        const char *d = muse_device_describe(ctx->dev);
        const size_t nb = strlen(backend);
        snprintf(level, sizeof level, "%s", !strncmp(d, backend, nb) && !strncmp(d + nb, ": ", 2) ? d + nb + 2 : d);
    }
    else if (strcmp(backend, "cpu")) snprintf(level, sizeof level, "scalar");
    else snprintf(level, sizeof level, "%s%s%s", muse_cpu_level_name(muse_kernels_active()->level),
                  muse_kernels_active()->exact_mode && muse_kernels_active()->level ? ", exact" : "",
                  o.cparams.no_repack ? ", no-repack" : "");
    /* tensor parallel: the group's size in the backend column, rank 0's all-reduce counters */
    struct muse_tp_stats tps;
    muse_tp_get_stats(&tps);
    if (muse_tp_size() > 1)
        snprintf(level + strlen(level), sizeof level - strlen(level), ", tp %d", (int)muse_tp_size());
    const double ar_us = tps.n_allreduce ? 1e6 * tps.seconds / (double)tps.n_allreduce : 0.0;
    const double ar_bytes = tps.n_allreduce ? (double)tps.bytes_sent / (double)tps.n_allreduce : 0.0;

    if (fmt != OUT_MD) {
        arr = cJSON_CreateArray();
        for (int i = 0; i < n_res; i++)
            cJSON_AddItemToArray(arr, record(&res[i], o.model_path, desc, backend, level, size, n_params, kv, cpu_time,
                                             roofline, bw, decode_bytes));
        for (int k = 0; have_spec && k < 2; k++)
            cJSON_AddItemToArray(arr, spec_record(sres, k, o.model_path, spo.draft_path, desc, backend, level, size, n_params,
                                                  kv, bw_threads, (int)muse_context_n_batch(ctx)));
        for (int i = 0; muse_tp_size() > 1 && i < cJSON_GetArraySize(arr); i++) {
            cJSON *rec = cJSON_GetArrayItem(arr, i);
            cJSON_AddNumberToObject(rec, "tp", muse_tp_size());
            cJSON_AddNumberToObject(rec, "tp_allreduce_us", ar_us);
            cJSON_AddNumberToObject(rec, "tp_allreduce_bytes_sent", ar_bytes);
        }
    }
    const int n_rec = n_res + (have_spec ? 2 : 0);
    if (fmt == OUT_JSON) {
        char *text = cJSON_Print(arr);
        if (text) puts(text);
        free(text);
    } else if (fmt == OUT_JSONL) {
        for (int i = 0; i < n_rec; i++) {
            char *text = cJSON_PrintUnformatted(cJSON_GetArrayItem(arr, i));
            if (text) puts(text);
            free(text);
        }
    } else if (fmt == OUT_CSV) {
        const size_t nf = sizeof csv_fields / sizeof csv_fields[0];
        for (size_t f = 0; f < nf; f++) printf("%s%c", csv_fields[f], f + 1 < nf ? ',' : '\n');
        for (int i = 0; i < n_rec; i++) {
            const cJSON *rec = cJSON_GetArrayItem(arr, i);
            for (size_t f = 0; f < nf; f++) csv_cell(cJSON_GetObjectItemCaseSensitive(rec, csv_fields[f]), f + 1 == nf);
        }
    } else {
        /* llama-bench's units: MiB or GiB, M or B */
        char size_s[32], params_s[32];
        if (size < 1024.0 * 1048576.0) snprintf(size_s, sizeof size_s, "%.2f MiB", size / 1048576.0);
        else snprintf(size_s, sizeof size_s, "%.2f GiB", size / (1024.0 * 1048576.0));
        if (n_params < 1e9) snprintf(params_s, sizeof params_s, "%.2f M", n_params * 1e-6);
        else snprintf(params_s, sizeof params_s, "%.2f B", n_params * 1e-9);
        printf("| model | size | params | backend | threads |%s%s test | t/s |\n", show_batch ? " n_batch |" : "",
               par ? " npl |" : "");
        printf("| --- | ---: | ---: | --- | ---: |%s%s ---: | ---: |\n", show_batch ? " ---: |" : "", par ? " ---: |" : "");
        for (int i = 0; i < n_res; i++) {
            char nb[48] = "";
            if (show_batch) snprintf(nb, sizeof nb, " %d |", res[i].n_batch);
            if (par) snprintf(nb + strlen(nb), sizeof nb - strlen(nb), " %d |", res[i].n_parallel);
            printf("| %s | %s | %s | %s (%s) | %d |%s %s | %.2f ± %.2f |\n", desc, size_s, params_s, backend, level,
                   res[i].n_threads, nb, res[i].test, res[i].avg_ts, res[i].stddev_ts);
        }
        for (int k = 0; have_spec && k < 2; k++) {
            char nb[48] = "";
            if (show_batch) snprintf(nb, sizeof nb, " %u |", muse_context_n_batch(ctx));
            if (par) snprintf(nb + strlen(nb), sizeof nb - strlen(nb), " 1 |");
            printf("| %s | %s | %s | %s (%s) | %d |%s %s | %.2f ± %.2f |\n", desc, size_s, params_s, backend, level,
                   bw_threads, nb, sres[k].test, sres[k].avg_ts, sres[k].stddev_ts);
        }
        if (muse_tp_size() > 1)
            printf("\ntensor parallel: %d ranks; rank 0 ran %lld all-reduces of %.1f KiB on average (%.1f KiB sent each), "
                   "%.1f us each\n",
                   (int)muse_tp_size(), (long long)tps.n_allreduce,
                   tps.n_allreduce ? 4.0 * (double)tps.floats_reduced / (double)tps.n_allreduce / 1024.0 : 0.0,
                   ar_bytes / 1024.0, ar_us);
        if (have_spec) {
            const struct muse_spec_stats *ss = &sres[1].stats;
            printf("\nspeculative (%s): median %.2f vs %.2f t/s plain = %.2fx; acceptance %.1f%% (%llu of %llu drafts), "
                   "mean accepted length %.2f over %llu verify steps, %llu steps parked, %llu shadow\n",
                   spo.draft_path, sres[1].median_ts, sres[0].median_ts, bench_spec_speedup(sres),
                   ss->n_drafted ? 100.0 * (double)ss->n_accepted / (double)ss->n_drafted : 0.0, (unsigned long long)ss->n_accepted,
                   (unsigned long long)ss->n_drafted, ss->n_steps_spec ? (double)ss->n_emitted_spec / (double)ss->n_steps_spec : 0.0,
                   (unsigned long long)ss->n_steps_spec, (unsigned long long)ss->n_steps_parked,
                   (unsigned long long)ss->n_steps_shadow);
        }
        printf("\nbuild: %s (commit %s)\n", muse_version(), muse_build_commit());
        if (cpu_time) printf("\n(timed with process CPU time / threads, not the wall clock)\n");
        if (roofline)
            printf("\nread bandwidth %.2f GB/s (%d threads); weights read per decode token %.2f MiB; "
                   "decode roofline %.2f t/s\n",
                   bw * 1e-9, bw_threads, decode_bytes / 1048576.0, decode_bytes > 0 ? bw / decode_bytes : 0);
    }
    rc = 0;
done:
    for (int k = 0; imgs && k < md.n_images; k++) muse_image_free(&imgs[k]);
    free(imgs);
    free(mmproj);
    media_opts_free(&md);
    cJSON_Delete(arr);
    free(tokens);
    free(spec_tokens);
    free(logits);
    free(rows.token);
    free(rows.seq);
    free(rows.want);
    free(res);
    free(sres);
    muse_drafter_free(drafter);
    muse_context_free(ctx);
    muse_model_free(model);
    return rc;
images_fail:
    for (int k = 0; imgs && k < md.n_images; k++) muse_image_free(&imgs[k]);
    free(imgs);
    free(mmproj);
    media_opts_free(&md);
    free(spec_tokens);
    return 1;
usage_fail:
    media_opts_free(&md);
    free(spec_tokens);
    return 2;
}
