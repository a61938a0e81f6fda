/* sampler.c - the server's sampling chain (see sampler.h). */
#include "server/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a small, well-mixed generator; the request's seed is its state. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

struct cand {
    float logit;
    int32_t id;
};

/* By logit, descending; ties: lower id first (deterministic). */
static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The k largest logits, sorted descending, into c[0..k) (c has room for n). O(n) + O(k log k). */
static void top_k(const float *logits, int n, int k, struct cand *c) {
    for (int i = 0; i < n; i++) c[i] = (struct cand){logits[i], i};
    int lo = 0, hi = n - 1;
    while (lo < hi) { /* quickselect: afterwards c[0..k) hold the k largest */
        struct cand pivot = c[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand(&c[i], &pivot) < 0) i++;
            while (cmp_cand(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

muse_status muse_srv_sample(float *logits, int n_vocab, const struct muse_srv_sampling *sp, const int32_t *history,
                            int n_history, uint64_t *rng, int n_probs, struct muse_srv_prob *probs,
                            struct muse_srv_sampler_scratch *sc, int32_t *tok) {
    if (!sc->cand) {
        sc->cand = malloc((size_t)n_vocab * sizeof *sc->cand);
        sc->p = malloc((size_t)n_vocab * sizeof *sc->p);
        if (!sc->cand || !sc->p) return MUSE_ERR_NOMEM;
    }
    struct cand *c = sc->cand;
    if (n_probs > 0) {
        if (n_probs > n_vocab) n_probs = n_vocab;
        float mx = -INFINITY;
        for (int i = 0; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0;
        for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
        top_k(logits, n_vocab, n_probs, c);
        for (int i = 0; i < n_probs; i++) {
            probs[i].token = c[i].id;
            probs[i].prob = (float)(exp((double)c[i].logit - mx) / sum);
        }
    }
    if ((sp->presence_penalty != 0 || sp->frequency_penalty != 0) && n_history > 0) {
        if (n_history > sc->cap_hist) {
            int32_t *h = realloc(sc->hist, (size_t)n_history * sizeof *h);
            if (!h) return MUSE_ERR_NOMEM;
            sc->hist = h;
            sc->cap_hist = n_history;
        }
        memcpy(sc->hist, history, (size_t)n_history * sizeof *history);
        qsort(sc->hist, (size_t)n_history, sizeof *sc->hist, cmp_i32);
        for (int i = 0; i < n_history;) {
            int j = i;
            while (j < n_history && sc->hist[j] == sc->hist[i]) j++;
            int32_t t = sc->hist[i];
            if (t >= 0 && t < n_vocab) logits[t] -= (float)(j - i) * sp->frequency_penalty + sp->presence_penalty;
            i = j;
        }
    }
    if (sp->temperature <= 0) {
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        *tok = best;
        return MUSE_OK;
    }
    int k = sp->top_k > 0 && sp->top_k < n_vocab ? sp->top_k : n_vocab;
    top_k(logits, n_vocab, k, c);
    float mx = c[0].logit;
    double sum = 0;
    for (int i = 0; i < k; i++) {
        sc->p[i] = (float)exp(((double)c[i].logit - mx) / sp->temperature);
        sum += sc->p[i];
    }
    int n = k;
    if (sp->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < k; i++) {
            cum += sc->p[i] / sum;
            if (cum >= sp->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (sp->min_p > 0) {
        float cut = sp->min_p * sc->p[0];
        int m = 1;
        while (m < n && sc->p[m] >= cut) m++;
        n = m;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += sc->p[i];
    double r = (double)(next_u64(rng) >> 11) / 9007199254740992.0 * total;
    int pick = n - 1;
    for (int i = 0; i < n; i++) {
        r -= sc->p[i];
        if (r < 0) {
            pick = i;
            break;
        }
    }
    *tok = c[pick].id;
    return MUSE_OK;
}

void muse_srv_sampler_scratch_free(struct muse_srv_sampler_scratch *s) {
    free(s->cand);
    free(s->p);
    free(s->hist);
    memset(s, 0, sizeof *s);
}
