/* sampler.c - llama.cpp-order token sampling (sampler.h). */
#include "gen/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct cand {
    int32_t id;
    float logit;
    float p;
};

struct muse_sampler {
    struct muse_sampler_params params;
    int32_t n_vocab;
    struct cand *cands;  /* [n_vocab] scratch */
    int32_t *hist;       /* [repeat_last_n] ring of recent tokens */
    int32_t n_hist;      /* tokens in the ring (<= repeat_last_n) */
    int32_t hist_pos;    /* next write index */
    uint16_t *counts;    /* [n_vocab] occurrences in the window (scratch, zero between calls) */
    uint64_t rng;
};

struct muse_sampler_params muse_sampler_default_params(void) {
    struct muse_sampler_params p = {
        .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f,
        .repeat_last_n = 64, .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = 0,
    };
    return p;
}

void muse_sampler_free(struct muse_sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->hist);
    free(s->counts);
    free(s);
}

muse_status muse_sampler_create(struct muse_sampler_params params, int32_t n_vocab, struct muse_sampler **out,
                                struct muse_error *err) {
    *out = NULL;
    if (n_vocab < 1) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "sampler: vocabulary size %d", n_vocab);
    if (!(params.repeat_penalty > 0.0f) || params.repeat_last_n < 0 || isnan(params.temperature) || isnan(params.top_p) ||
        isnan(params.min_p) || isnan(params.presence_penalty) || isnan(params.frequency_penalty))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG,
                              "sampler: bad parameters (repeat_penalty must be > 0, repeat_last_n >= 0, no NaN)");
    struct muse_sampler *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->params = params;
    s->n_vocab = n_vocab;
    s->cands = malloc(sizeof *s->cands * (size_t)n_vocab);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->hist = malloc(sizeof *s->hist * (size_t)(params.repeat_last_n ? params.repeat_last_n : 1));
    if (!s->cands || !s->counts || !s->hist) goto nomem;
    muse_sampler_reset(s);
    *out = s;
    return MUSE_OK;
nomem:
    muse_sampler_free(s);
    return muse_error_set(err, MUSE_ERR_NOMEM, "sampler: out of memory");
}

void muse_sampler_reset(struct muse_sampler *s) {
    s->n_hist = 0;
    s->hist_pos = 0;
    s->rng = s->params.seed ^ 0x9E3779B97F4A7C15ull;
}

void muse_sampler_accept(struct muse_sampler *s, int32_t token) {
    const int32_t n = s->params.repeat_last_n;
    if (n <= 0) return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % n;
    if (s->n_hist < n) s->n_hist++;
}

/* splitmix64 -> uniform in [0, 1) with 24 random bits. */
static float rng_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Better first: higher logit, then lower id. */
static int better(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb) {
    const struct cand *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Keep the k best of c[0..n) in c[0..k), sorted best first. O(n log k) with a min-heap. */
static int32_t select_top_k(struct cand *c, int32_t n, int32_t k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return n;
    }
    /* c[0..k) is a heap whose root is the worst kept candidate */
    for (int32_t i = 0; i < n; i++) {
        if (i >= k && !better(&c[i], &c[0])) continue;
        int32_t j;
        if (i < k) {
            j = i;
            c[j] = c[i];
            while (j > 0 && better(&c[(j - 1) / 2], &c[j])) { /* sift up: parent must be worse */
                struct cand t = c[j];
                c[j] = c[(j - 1) / 2];
                c[(j - 1) / 2] = t;
                j = (j - 1) / 2;
            }
        } else {
            c[0] = c[i];
            j = 0;
            for (;;) { /* sift down */
                int32_t l = 2 * j + 1, r = l + 1, w = j;
                if (l < k && better(&c[w], &c[l])) w = l;
                if (r < k && better(&c[w], &c[r])) w = r;
                if (w == j) break;
                struct cand t = c[j];
                c[j] = c[w];
                c[w] = t;
                j = w;
            }
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    return k;
}

/* softmax of c[0..n) (sorted, best first) into c[].p */
static void softmax(struct cand *c, int32_t n) {
    const float max = c[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - max);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* allowed: NULL, or a bitset of the candidates (the others are as if their logit were -inf). */
static int32_t sample(struct muse_sampler *s, const float *logits, const uint32_t *allowed) {
    const struct muse_sampler_params *p = &s->params;
    struct cand *c = s->cands;
    int32_t n = 0;
    for (int32_t id = 0; id < s->n_vocab; id++) {
        if (logits[id] != logits[id]) continue; /* NaN never wins */
        if (allowed && !((allowed[id >> 5] >> (id & 31)) & 1u)) continue;
        c[n].id = id;
        c[n].logit = logits[id];
        n++;
    }
    if (n == 0) return allowed ? -1 : 0;

    /* penalties over the window: count each token, then adjust each distinct token once */
    const bool penalize = s->n_hist > 0 &&
                          (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    if (penalize) {
        for (int32_t i = 0; i < s->n_hist; i++)
            if (s->hist[i] >= 0 && s->hist[i] < s->n_vocab && s->counts[s->hist[i]] < UINT16_MAX) s->counts[s->hist[i]]++;
        for (int32_t i = 0; i < n; i++) {
            const uint16_t cnt = s->counts[c[i].id];
            if (!cnt) continue;
            float l = c[i].logit;
            l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
            l -= (float)cnt * p->frequency_penalty + p->presence_penalty;
            c[i].logit = l;
        }
        for (int32_t i = 0; i < s->n_hist; i++)
            if (s->hist[i] >= 0 && s->hist[i] < s->n_vocab) s->counts[s->hist[i]] = 0;
    }

    if (p->temperature <= 0.0f) { /* greedy */
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (better(&c[i], &c[best])) best = i;
        return c[best].id;
    }

    /* top-k (also sorts the survivors best first) */
    n = select_top_k(c, n, p->top_k > 0 && p->top_k < n ? p->top_k : n);
    /* top-p: the smallest prefix whose probability reaches top_p */
    if (p->top_p < 1.0f) {
        softmax(c, n);
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    /* min-p: keep tokens with p >= min_p * p_max, i.e. logit >= max + log(min_p) */
    if (p->min_p > 0.0f) {
        const float thresh = c[0].logit + logf(p->min_p);
        int32_t keep = 1;
        while (keep < n && c[keep].logit >= thresh) keep++;
        n = keep;
    }
    /* temperature, then draw */
    for (int32_t i = 0; i < n; i++) c[i].logit /= p->temperature;
    softmax(c, n);
    const float u = rng_uniform(&s->rng);
    float cum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t muse_sampler_sample(struct muse_sampler *s, const float *logits) { return sample(s, logits, NULL); }

int32_t muse_sampler_sample_masked(struct muse_sampler *s, const float *logits, const uint32_t *allowed) {
    return sample(s, logits, allowed);
}
