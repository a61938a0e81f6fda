/*
 * bench_tokenizer.c - tokenizer speed on the golden long documents, single-threaded, in MB/s,
 * plus the vocabulary load time (gguf open + parse + muse_tokenizer_init_from_gguf).
 *
 *   build/bench/bench_tokenizer [REPS]        (REPS timed runs per document, default 20)
 *
 * Method (as the reference numbers in golden/tokenizer/README.md §5): each document is checked
 * against tiktoken's ids first, tokenized once as a warm-up, then timed over REPS runs;
 * MB/s = UTF-8 input bytes / mean time. "all" = total bytes / total mean time. The best run is
 * printed too, since on a shared machine the mean mostly measures the neighbours, and so is the
 * rate per second of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID: time spent preempted by
 * other processes does not count; cache sharing still does).
 * Reference (same documents, one EPYC core): tiktoken 3.8 MB/s, llama.cpp 1.35 MB/s.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "text/tokenizer.h"
#include "text/tok_corpus.h"
#include "gguf/gguf.h"

static const char *const docs[] = {"long-prose-en", "long-code-c", "long-code-py",
                                   "long-markdown", "long-multilingual", "long-json"};
enum { N_DOCS = sizeof(docs) / sizeof(docs[0]) };

/* This thread's CPU time in microseconds. */
static int64_t cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The expected ids of corpus line `id` from expected-tiktoken.jsonl (malloc'd). */
static int32_t *expected_ids(const char *tik, const char *id, size_t *n) {
    char key[96];
    snprintf(key, sizeof(key), "{\"id\":\"%s\"", id);
    const char *p = strstr(tik, key);
    if (!p) return NULL;
    const char *e = strchr(p, '\n');
    char *line = strndup(p, e ? (size_t)(e - p) : strlen(p));
    cJSON *j = cJSON_Parse(line);
    free(line);
    const cJSON *arr = cJSON_GetObjectItem(j, "ids");
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof(int32_t));
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) ids[i++] = (int32_t)it->valuedouble; /* GetArrayItem is O(i) */
    cJSON_Delete(j);
    return ids;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) reps = 1;
    const char *shared = getenv("MUSE_SHARED") ? getenv("MUSE_SHARED") : "../shared";
    char dir[1024], path[1100];
    snprintf(dir, sizeof(dir), "%s/golden/tokenizer", shared);

    /* load time: open + parse + init, 10 times */
    enum { LOADS = 10 };
    double load_ms[LOADS], load_cpu_ms[LOADS];
    struct muse_tokenizer *tok = NULL;
    struct muse_error err;
    snprintf(path, sizeof(path), "%s/o200k-muse-vocab.gguf", dir);
    for (int i = 0; i < LOADS; i++) {
        muse_tokenizer_free(tok); /* one tokenizer alive at a time, as in a real load */
        tok = NULL;
        struct muse_gguf *g = NULL;
        struct muse_tokenizer *t = NULL;
        int64_t t0 = muse_time_us(), c0 = cpu_us();
        if (muse_gguf_open(path, &g, &err) != MUSE_OK || muse_tokenizer_init_from_gguf(g, &t, &err) != MUSE_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        load_ms[i] = (double)(muse_time_us() - t0) / 1000.0;
        load_cpu_ms[i] = (double)(cpu_us() - c0) / 1000.0;
        muse_gguf_free(g);
        tok = t;
    }
    qsort(load_ms, LOADS, sizeof(double), cmp_double);
    qsort(load_cpu_ms, LOADS, sizeof(double), cmp_double);
    printf("vocabulary load (open + parse + init, %d tokens): wall best %.1f ms, median %.1f ms; "
           "cpu median %.1f ms (%d loads)\n",
           muse_tokenizer_n_vocab(tok), load_ms[0], load_ms[LOADS / 2], load_cpu_ms[LOADS / 2], LOADS);

    snprintf(path, sizeof(path), "%s/corpus.jsonl", dir);
    char *corpus = tok_slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/expected-tiktoken.jsonl", dir);
    char *tik = tok_slurp(path, NULL);
    if (!corpus || !tik) {
        fprintf(stderr, "bench_tokenizer: cannot read the corpus in %s\n", dir);
        return 1;
    }
    double total_bytes = 0, total_mean_s = 0, total_best_s = 0, total_cpu_s = 0, total_tokens = 0;
    printf("%-18s %8s %8s %10s %10s %10s\n", "document", "KB", "tokens", "MB/s mean", "MB/s best", "MB/s cpu");
    for (int d = 0; d < N_DOCS; d++) {
        char key[96];
        snprintf(key, sizeof(key), "{\"id\": \"%s\"", docs[d]);
        const char *line = strstr(corpus, key);
        size_t len = 0, n_want = 0, n = 0;
        char *text = line ? tok_json_string(line, "text", &len) : NULL;
        int32_t *want = expected_ids(tik, docs[d], &n_want);
        int32_t *ids = NULL;
        if (!text || !want || muse_tokenizer_encode_alloc(tok, text, len, 0, &ids, &n, &err) != MUSE_OK ||
            n != n_want || memcmp(ids, want, n * sizeof(int32_t)) != 0) {
            fprintf(stderr, "bench_tokenizer: %s does not match tiktoken; not timing a wrong tokenizer\n", docs[d]);
            return 1;
        }
        free(ids);
        int32_t *buf = malloc((n + 16) * sizeof(int32_t));
        double sum = 0, best = 1e30;
        int64_t c0 = cpu_us();
        for (int r = 0; r < reps; r++) {
            size_t k;
            int64_t t0 = muse_time_us();
            muse_tokenizer_encode(tok, text, len, 0, buf, n + 16, &k, NULL);
            double s = (double)(muse_time_us() - t0) / 1e6;
            sum += s;
            if (s < best) best = s;
        }
        double cpu = (double)(cpu_us() - c0) / 1e6 / reps;
        double mean = sum / reps;
        printf("%-18s %8.1f %8zu %10.2f %10.2f %10.2f\n", docs[d], (double)len / 1024, n, (double)len / mean / 1e6,
               (double)len / best / 1e6, (double)len / cpu / 1e6);
        total_cpu_s += cpu;
        total_bytes += (double)len;
        total_tokens += (double)n;
        total_mean_s += mean;
        total_best_s += best;
        free(buf);
        free(want);
        free(text);
    }
    printf("%-18s %8.1f %8.0f %10.2f %10.2f %10.2f   (%.2f Mtok/s mean; %d runs each)\n", "all",
           total_bytes / 1024, total_tokens, total_bytes / total_mean_s / 1e6, total_bytes / total_best_s / 1e6,
           total_bytes / total_cpu_s / 1e6, total_tokens / total_mean_s / 1e6, reps);
    free(corpus);
    free(tik);
    muse_tokenizer_free(tok);
    return 0;
}
