/* test_sampler.c - greedy, penalties, top-k / top-p / min-p truncation, temperature, seeding. */
#include <math.h>
#include <string.h>

#include "gen/sampler.h"
#include "test.h"

#define NV 8

static struct muse_sampler *make(struct muse_sampler_params p) {
    struct muse_sampler *s = NULL;
    struct muse_error err;
    if (muse_sampler_create(p, NV, &s, &err)) fprintf(stderr, "create: %s\n", err.msg);
    return s;
}

/* frequency of each token over n draws */
static void histogram(struct muse_sampler *s, const float *logits, int n, int *h) {
    memset(h, 0, sizeof(int) * NV);
    for (int i = 0; i < n; i++) h[muse_sampler_sample(s, logits)]++;
}

static void test_greedy(void) {
    struct muse_sampler_params p = muse_sampler_default_params();
    struct muse_sampler *s = make(p);
    float l[NV] = {0.1f, 2.0f, -1.0f, 3.0f, 3.0f, 0.0f, 1.0f, NAN};
    TEST_COND("greedy: argmax, ties to the lower id, NaN ignored", muse_sampler_sample(s, l) == 3);
    /* repeat penalty: 3 seen -> 3/2 = 1.5 < 2 (id 4 also 3.0 but unseen wins) */
    muse_sampler_free(s);
    p.repeat_penalty = 2.0f;
    s = make(p);
    muse_sampler_accept(s, 3);
    TEST_COND("repeat penalty divides positive logits", muse_sampler_sample(s, l) == 4);
    muse_sampler_accept(s, 4);
    TEST_COND("both penalized -> 2.0 wins", muse_sampler_sample(s, l) == 1);
    /* negative logits are multiplied: id 2 at -1 seen stays below everything */
    muse_sampler_free(s);

    p = muse_sampler_default_params();
    p.frequency_penalty = 0.6f;
    s = make(p);
    float l2[NV] = {1.0f, 1.5f, 0, 0, 0, 0, 0, 0};
    muse_sampler_accept(s, 1);
    TEST_COND("one occurrence: 1.5-0.6 < 1.0", muse_sampler_sample(s, l2) == 0);
    muse_sampler_free(s);
    p = muse_sampler_default_params();
    p.frequency_penalty = 0.3f;
    s = make(p);
    muse_sampler_accept(s, 1);
    TEST_COND("one occurrence: 1.5-0.3 > 1.0", muse_sampler_sample(s, l2) == 1);
    muse_sampler_accept(s, 1);
    TEST_COND("two occurrences: 1.5-0.6 < 1.0", muse_sampler_sample(s, l2) == 0);
    muse_sampler_free(s);
    p = muse_sampler_default_params();
    p.presence_penalty = 0.3f;
    s = make(p);
    muse_sampler_accept(s, 1);
    muse_sampler_accept(s, 1);
    TEST_COND("presence counts once: 1.5-0.3 > 1.0", muse_sampler_sample(s, l2) == 1);
    muse_sampler_free(s);
    /* the window forgets */
    p = muse_sampler_default_params();
    p.presence_penalty = 1.0f;
    p.repeat_last_n = 2;
    s = make(p);
    muse_sampler_accept(s, 1);
    muse_sampler_accept(s, 5);
    muse_sampler_accept(s, 6);
    TEST_COND("token outside repeat_last_n not penalized", muse_sampler_sample(s, l2) == 1);
    muse_sampler_free(s);
}

static void test_distribution(void) {
    struct muse_sampler_params p = muse_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 42;
    struct muse_sampler *s = make(p);
    float l[NV] = {0, logf(2), logf(3), logf(4), -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int h[NV], n = 20000;
    histogram(s, l, n, h);
    /* expected 1:2:3:4 of 10 */
    for (int i = 0; i < 4; i++)
        TEST_CONDF(fabs(h[i] / (double)n - (i + 1) / 10.0) < 0.015, "temperature 1: token %d freq %g, want %g", i,
                   h[i] / (double)n, (i + 1) / 10.0);
    TEST_COND("-inf never drawn", h[4] + h[5] + h[6] + h[7] == 0);
    /* same seed, same draws; reset replays */
    int a[50], b[50];
    muse_sampler_reset(s);
    for (int i = 0; i < 50; i++) a[i] = muse_sampler_sample(s, l);
    muse_sampler_reset(s);
    for (int i = 0; i < 50; i++) b[i] = muse_sampler_sample(s, l);
    TEST_COND("reset replays the same draws", !memcmp(a, b, sizeof a));
    muse_sampler_free(s);

    /* temperature 0.5 squares the ratios: 1:4:9:16 of 30 */
    p.temperature = 0.5f;
    s = make(p);
    histogram(s, l, n, h);
    TEST_CONDF(fabs(h[3] / (double)n - 16 / 30.0) < 0.015, "temperature 0.5: top freq %g", h[3] / (double)n);
    muse_sampler_free(s);

    /* top-k 2 keeps ids 3 and 2 (4:3) */
    p.temperature = 1.0f;
    p.top_k = 2;
    s = make(p);
    histogram(s, l, n, h);
    TEST_COND("top-k 2 drops the others", h[0] == 0 && h[1] == 0);
    TEST_CONDF(fabs(h[3] / (double)n - 4 / 7.0) < 0.015, "top-k 2 renormalizes: %g", h[3] / (double)n);
    muse_sampler_free(s);

    /* top-p 0.6: 0.4 + 0.3 = 0.7 >= 0.6 keeps ids 3, 2 */
    p.top_k = 0;
    p.top_p = 0.6f;
    s = make(p);
    histogram(s, l, n, h);
    TEST_COND("top-p 0.6 keeps two", h[0] == 0 && h[1] == 0 && h[2] > 0 && h[3] > 0);
    muse_sampler_free(s);
    p.top_p = 0.3f;
    s = make(p);
    histogram(s, l, 2000, h);
    TEST_COND("top-p 0.3 keeps one", h[3] == 2000);
    muse_sampler_free(s);

    /* min-p 0.5: p >= 0.5 * 0.4 = 0.2 keeps ids 1 (0.2), 2, 3 */
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    s = make(p);
    histogram(s, l, n, h);
    TEST_COND("min-p 0.5 drops id 0 only", h[0] == 0 && h[1] > 0 && h[2] > 0 && h[3] > 0);
    muse_sampler_free(s);

    struct muse_sampler *bad;
    struct muse_error err;
    p = muse_sampler_default_params();
    p.repeat_penalty = 0.0f;
    TEST_COND("repeat_penalty 0 refused", muse_sampler_create(p, NV, &bad, &err) == MUSE_ERR_INVALID_ARG);
}

int main(void) {
    test_greedy();
    test_distribution();
    return TEST_REPORT();
}
