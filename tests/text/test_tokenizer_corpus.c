/*
 * Golden tests of the tokenizer on the o200k stand-in vocabulary
 * ($MUSE_SHARED/golden/tokenizer/, see its README):
 *   - every corpus line encodes to tiktoken's ids (expected-tiktoken.jsonl), exactly;
 *   - ADD_BOS gives llama.cpp's ids_bos shape ([200000] + ids);
 *   - PARSE_SPECIAL on the special-text lines equals llama.cpp's ids_special (no regex
 *     differences there, so this checks the special-token partition on a real vocabulary);
 *   - decode(encode(x)) == x for every line, and the streaming detokenizer gives x back;
 *   - concurrent encodes from several threads give the single-threaded ids;
 *   - long runs of one character finish and round-trip; digit runs group in threes.
 */
#include <cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"
#include "test.h"
#include "tok_corpus.h"

struct line {
    char id[64];
    char *text;
    size_t len;
    int32_t *want;          /* tiktoken ids */
    size_t n_want;
    int32_t *want_special;  /* llama.cpp ids_special */
    size_t n_want_special;
};

static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof(int32_t));
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) ids[i++] = (int32_t)it->valuedouble; /* GetArrayItem is O(i) */
    return ids;
}

/* Read corpus + expectations; returns the number of lines (0 on error). */
static size_t load_corpus(const char *dir, struct line **out) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/corpus.jsonl", dir);
    char *corpus = tok_slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/expected-tiktoken.jsonl", dir);
    char *tik = tok_slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/expected-llamacpp.jsonl", dir);
    char *lcpp = tok_slurp(path, NULL);
    if (!corpus || !tik || !lcpp) {
        free(corpus);
        free(tik);
        free(lcpp);
        return 0;
    }
    size_t cap = 1024, n = 0;
    struct line *lines = calloc(cap, sizeof(*lines));
    char *c = corpus, *t = tik, *l = lcpp;
    while (*c && n < cap) {
        char *ce = strchr(c, '\n'), *te = strchr(t, '\n'), *le = strchr(l, '\n');
        if (!ce || !te || !le) break;
        *ce = *te = *le = '\0';
        struct line *ln = &lines[n];
        cJSON *cj = cJSON_Parse(c), *tj = cJSON_Parse(t), *lj = cJSON_Parse(l);
        const cJSON *id = cJSON_GetObjectItem(cj, "id");
        snprintf(ln->id, sizeof(ln->id), "%s", id ? id->valuestring : "?");
        const cJSON *tid = cJSON_GetObjectItem(tj, "id"), *lid = cJSON_GetObjectItem(lj, "id");
        TEST_CONDF(tid && lid && !strcmp(tid->valuestring, ln->id) && !strcmp(lid->valuestring, ln->id),
                   "expectation files line up at %s", ln->id);
        ln->text = tok_json_string(c, "text", &ln->len);
        ln->want = json_ids(cJSON_GetObjectItem(tj, "ids"), &ln->n_want);
        ln->want_special = json_ids(cJSON_GetObjectItem(lj, "ids_special"), &ln->n_want_special);
        cJSON_Delete(cj);
        cJSON_Delete(tj);
        cJSON_Delete(lj);
        if (ln->text) n++;
        c = ce + 1;
        t = te + 1;
        l = le + 1;
    }
    free(corpus);
    free(tik);
    free(lcpp);
    *out = lines;
    return n;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof(int32_t)) == 0);
}

static void print_diff(const char *id, const int32_t *got, size_t n, const int32_t *want, size_t m) {
    size_t i = 0;
    while (i < n && i < m && got[i] == want[i]) i++;
    fprintf(stderr, "  %s: %zu ids (want %zu), first difference at %zu: got %d, want %d\n", id, n, m, i,
            i < n ? got[i] : -1, i < m ? want[i] : -1);
}

// ---- tests ---------------------------------------------------------------------------------------

static void test_corpus(const struct muse_tokenizer *tok, const struct line *lines, size_t n) {
    size_t ok = 0, ok_bos = 0, ok_rt = 0, ok_stream = 0, n_special = 0, ok_special = 0;
    double bytes = 0;
    int64_t t0 = muse_time_us();
    for (size_t i = 0; i < n; i++) {
        const struct line *ln = &lines[i];
        int32_t *ids = NULL;
        size_t k = 0;
        muse_status st = muse_tokenizer_encode_alloc(tok, ln->text, ln->len, 0, &ids, &k, NULL);
        bytes += (double)ln->len;
        if (st == MUSE_OK && same_ids(ids, k, ln->want, ln->n_want)) ok++;
        else print_diff(ln->id, ids, k, ln->want, ln->n_want);

        int32_t *bos = NULL;
        size_t kb = 0;
        st = muse_tokenizer_encode_alloc(tok, ln->text, ln->len, MUSE_TOKENIZE_ADD_BOS, &bos, &kb, NULL);
        ok_bos += st == MUSE_OK && kb == k + 1 && bos[0] == 200000 && same_ids(bos + 1, kb - 1, ids, k);
        free(bos);

        char *back = NULL;
        size_t blen = 0;
        st = muse_tokenizer_decode_alloc(tok, ids, k, 0, &back, &blen, NULL);
        bool rt = st == MUSE_OK && blen == ln->len && memcmp(back, ln->text, blen) == 0;
        ok_rt += rt;
        TEST_CONDF(rt, "decode(encode(%s)) round trip", ln->id);
        free(back);

        struct muse_detok *d = muse_detok_init(tok, 0);
        char *s = malloc(ln->len * 3 + 16);
        size_t sn = 0;
        for (size_t j = 0; j <= k; j++) {
            const char *t;
            size_t tl;
            if (j < k) muse_detok_push(d, ids[j], &t, &tl);
            else muse_detok_flush(d, &t, &tl);
            memcpy(s + sn, t, tl);
            sn += tl;
        }
        ok_stream += sn == ln->len && memcmp(s, ln->text, sn) == 0;
        free(s);
        muse_detok_free(d);
        free(ids);

        if (!strncmp(ln->id, "special", 7)) {
            n_special++;
            int32_t *sp = NULL;
            size_t ks = 0;
            st = muse_tokenizer_encode_alloc(tok, ln->text, ln->len, MUSE_TOKENIZE_PARSE_SPECIAL, &sp, &ks, NULL);
            if (st == MUSE_OK && same_ids(sp, ks, ln->want_special, ln->n_want_special)) ok_special++;
            else print_diff(ln->id, sp, ks, ln->want_special, ln->n_want_special);
            free(sp);
        }
    }
    double ms = (double)(muse_time_us() - t0) / 1000.0;
    printf("corpus: %zu/%zu lines equal tiktoken; %zu round trips; %zu streams; %zu/%zu special lines equal "
           "llama.cpp ids_special (%.0f ms for %.0f KB, all checks)\n",
           ok, n, ok_rt, ok_stream, ok_special, n_special, ms, bytes / 1024);
    TEST_CONDF(n >= 477, "corpus has all lines (%zu)", n);
    TEST_CONDF(ok == n, "every line equals tiktoken (%zu of %zu)", ok, n);
    TEST_CONDF(ok_bos == n, "ADD_BOS prepends 200000 (%zu of %zu)", ok_bos, n);
    TEST_CONDF(ok_stream == n, "streaming detokenizer gives the text back (%zu of %zu)", ok_stream, n);
    TEST_CONDF(n_special >= 20 && ok_special == n_special, "PARSE_SPECIAL equals llama.cpp (%zu of %zu)", ok_special,
               n_special);
}

struct job {
    const struct muse_tokenizer *tok;
    const struct line *lines;
    size_t n;
    int32_t **ids;      /* [n] reference ids */
    size_t *n_ids;
    int bad;
};

static void *worker(void *arg) {
    struct job *j = arg;
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < j->n; i++) {
            int32_t *ids = NULL;
            size_t k = 0;
            if (muse_tokenizer_encode_alloc(j->tok, j->lines[i].text, j->lines[i].len, 0, &ids, &k, NULL) != MUSE_OK ||
                !same_ids(ids, k, j->ids[i], j->n_ids[i]))
                j->bad++;
            free(ids);
        }
    return NULL;
}

static void test_threads(const struct muse_tokenizer *tok, const struct line *lines, size_t n) {
    int32_t **ids = calloc(n, sizeof(*ids));
    size_t *n_ids = calloc(n, sizeof(*n_ids));
    for (size_t i = 0; i < n; i++) muse_tokenizer_encode_alloc(tok, lines[i].text, lines[i].len, 0, &ids[i], &n_ids[i], NULL);
    enum { NT = 4 };
    pthread_t th[NT];
    struct job jobs[NT];
    for (int t = 0; t < NT; t++) {
        jobs[t] = (struct job){.tok = tok, .lines = lines, .n = n, .ids = ids, .n_ids = n_ids};
        pthread_create(&th[t], NULL, worker, &jobs[t]);
    }
    int bad = 0;
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        bad += jobs[t].bad;
    }
    TEST_CONDF(bad == 0, "concurrent encodes agree with the single-threaded ones (%d differ)", bad);
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    free(n_ids);
}

static void encode_str(const struct muse_tokenizer *tok, const char *s, size_t len, int32_t **ids, size_t *n) {
    muse_status st = muse_tokenizer_encode_alloc(tok, s, len, 0, ids, n, NULL);
    TEST_CONDF(st == MUSE_OK, "encode %.20s", s);
}

static void test_long_runs(const struct muse_tokenizer *tok) {
    bool sanitizer = getenv("MUSE_SANITIZER") != NULL;
    size_t len = sanitizer ? 20000 : 200000;
    char *s = malloc(len + 1);
    static const char fill[] = {'a', ' ', '7', '!', '\n', 'Z'};
    for (size_t f = 0; f < sizeof(fill); f++) {
        memset(s, fill[f], len);
        int32_t *ids = NULL;
        size_t n = 0;
        int64_t t0 = muse_time_us();
        encode_str(tok, s, len, &ids, &n);
        double ms = (double)(muse_time_us() - t0) / 1000.0;
        char *back = NULL;
        size_t blen = 0;
        muse_tokenizer_decode_alloc(tok, ids, n, 0, &back, &blen, NULL);
        TEST_CONDF(back && blen == len && memcmp(back, s, len) == 0, "run of %zu x '%c' round-trips", len, fill[f]);
        TEST_CONDF(n > 0 && n < len, "run of '%c' merges (%zu ids)", fill[f], n);
        TEST_CONDF(sanitizer || ms < 2000, "run of '%c' takes %.0f ms", fill[f], ms);
        free(back);
        free(ids);
    }
    free(s);

    /* digits group in threes: "1234567" = "123" + "456" + "7" */
    int32_t *a, *b, *c, *d;
    size_t na, nb, nc, nd;
    encode_str(tok, "1234567", 7, &a, &na);
    encode_str(tok, "123", 3, &b, &nb);
    encode_str(tok, "456", 3, &c, &nc);
    encode_str(tok, "7", 1, &d, &nd);
    TEST_COND("digit groups", na == nb + nc + nd && same_ids(a, nb, b, nb) && same_ids(a + nb, nc, c, nc) &&
                                  same_ids(a + nb + nc, nd, d, nd));
    free(a);
    free(b);
    free(c);
    free(d);
}

static void test_vocab_facts(const struct muse_tokenizer *tok) {
    TEST_COND("n_vocab", muse_tokenizer_n_vocab(tok) == 202048);
    TEST_COND("bos/eos/eot", muse_tokenizer_bos(tok) == 200000 && muse_tokenizer_eos(tok) == 200001 &&
                                 muse_tokenizer_eot(tok) == 200008);
    TEST_COND("eom found by its text", muse_tokenizer_eom(tok) == 200007);
    TEST_COND("eog is eos+eot, not eom", muse_tokenizer_is_eog(tok, 200001) && muse_tokenizer_is_eog(tok, 200008) &&
                                             !muse_tokenizer_is_eog(tok, 200007));
    TEST_COND("add_bos", muse_tokenizer_add_bos(tok));
    TEST_COND("find <|start|>", muse_tokenizer_find(tok, "<|start|>", 9) == 200022);
    TEST_COND("find <|message|>", muse_tokenizer_find(tok, "<|message|>", 11) == 200023);
    TEST_COND("unused type", muse_tokenizer_token_type(tok, 199999) == MUSE_TOKEN_TYPE_UNUSED);
    size_t len;
    const char *t = muse_tokenizer_token_text(tok, 200008, &len);
    TEST_COND("eot text", t && len == 7 && !memcmp(t, "<|eot|>", 7));
    /* decode: CONTROL hidden, chat markers always shown */
    int32_t ids[] = {200000, 200022, 1428, 200023, 3686, 200008};
    char *out;
    muse_tokenizer_decode_alloc(tok, ids, 6, 0, &out, &len, NULL);
    TEST_CONDF(out && !strcmp(out, "<|start|>user<|message|>hi"), "plain decode: '%s'", out);
    free(out);
    muse_tokenizer_decode_alloc(tok, ids, 6, MUSE_DECODE_SPECIAL, &out, &len, NULL);
    TEST_CONDF(out && !strcmp(out, "<|begin_of_text|><|start|>user<|message|>hi<|eot|>"), "special decode: '%s'", out);
    free(out);
}

int main(void) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof(dir), "%s/golden/tokenizer", test_shared_dir());
    snprintf(path, sizeof(path), "%s/o200k-muse-vocab.gguf", dir);
    struct muse_gguf *g = NULL;
    struct muse_tokenizer *tok = NULL;
    struct muse_error err;
    int64_t t0 = muse_time_us();
    muse_status st = muse_gguf_open(path, &g, &err);
    if (st == MUSE_OK) st = muse_tokenizer_init_from_gguf(g, &tok, &err);
    double ms = (double)(muse_time_us() - t0) / 1000.0;
    TEST_CONDF(st == MUSE_OK, "load %s: %s", path, err.msg);
    if (st != MUSE_OK) return TEST_REPORT();
    printf("vocabulary load (open + parse + tokenizer init): %.1f ms\n", ms);
    muse_gguf_free(g); /* the tokenizer keeps nothing from the file */

    struct line *lines = NULL;
    size_t n = load_corpus(dir, &lines);
    TEST_CONDF(n > 0, "read the corpus in %s", dir);
    test_vocab_facts(tok);
    test_corpus(tok, lines, n);
    test_threads(tok, lines, n);
    test_long_runs(tok);
    for (size_t i = 0; i < n; i++) {
        free(lines[i].text);
        free(lines[i].want);
        free(lines[i].want_special);
    }
    free(lines);
    muse_tokenizer_free(tok);
    return TEST_REPORT();
}
