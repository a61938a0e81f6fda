/*
 * test_governor.c - the cost governor and the adaptive confidence floor (src/speculative/governor.c)
 * with a scripted clock, then both inside the loop (spec.c) with a clock that charges each kind of
 * step a scripted cost. What a wrong implementation breaks:
 *   - the probe round: 9 speculative steps (the first discarded), then 4 plain ones (the first
 *     discarded), then the verdict; a win holds 512 steps; losses park 16, 32, 64, 64 steps;
 *   - the verdict is a ratio of sums (a mean of per-step rates would decide the other way here),
 *     the first sample of each side does not count, the worst speculative sample is trimmed (one
 *     outlier, not two), the margin is 1.15 (1.15x wins, 1.16x loses);
 *   - reset per request; disabled = always allows;
 *   - the bandit tries 0.35, 0.15, 0.6, 0 four steps each, then runs the best by tokens per second
 *     (ratio of sums), refreshes the arm run longest ago after 32 steps, backing off while the best
 *     stays the best, and follows a change.
 */
#include <string.h>

#include "speculative/governor.h"
#include "test.h"

/* a clock that returns the next value of a script (then keeps the last) */
struct script_clock {
    const int64_t *t;
    int n, i;
};

static int64_t script_now(void *user) {
    struct script_clock *c = user;
    const int64_t v = c->t[c->i < c->n ? c->i : c->n - 1];
    if (c->i < c->n) c->i++;
    return v;
}

#define MS 1000000LL

/* Drive g for n steps: speculate when allowed (spec_ms per step, spec_tok tokens), else plain
 * (plain_ms, 1 token). Writes 'S' / 'P' per step into trace. */
static void drive(struct muse_spec_governor *g, int n, double spec_ms, int spec_tok, double plain_ms, char *trace) {
    for (int i = 0; i < n; i++) {
        const bool s = muse_spec_governor_allows(g);
        trace[i] = s ? 'S' : 'P';
        muse_spec_governor_record(g, s, s ? spec_tok : 1, (int64_t)((s ? spec_ms : plain_ms) * MS));
    }
    trace[n] = 0;
}

static bool run_of(const char *t, int from, int n, char c) {
    for (int i = from; i < from + n; i++)
        if (t[i] != c) return false;
    return true;
}

static void test_rounds(void) {
    struct muse_spec_governor g;
    char tr[4096];
    /* a loser: 1 token per 30 ms speculative vs 10 ms plain */
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    drive(&g, 300, 30, 1, 10, tr);
    TEST_COND("probe: 9 speculative steps first", run_of(tr, 0, 9, 'S'));
    TEST_COND("then 4 plain steps", run_of(tr, 9, 4, 'P'));
    TEST_COND("a loss parks 16 steps", run_of(tr, 13, 16, 'P') && tr[29] == 'S');
    TEST_COND("second probe, then 32 parked", run_of(tr, 29, 9, 'S') && run_of(tr, 38, 4 + 32, 'P') && tr[74] == 'S');
    TEST_COND("third probe, then 64 parked", run_of(tr, 74, 9, 'S') && run_of(tr, 83, 4 + 64, 'P') && tr[151] == 'S');
    TEST_COND("fourth: 64 again (the cap)", run_of(tr, 151, 9, 'S') && run_of(tr, 160, 4 + 64, 'P') && tr[228] == 'S');
    TEST_COND("losses counted (the fifth round ended at step 241)", g.losses == 5 && g.n_wins == 0);
    TEST_COND("parked steps counted", g.n_parked_steps == 16 + 32 + 64 + 64 + (300 - 241));
    /* a winner: 4 tokens per 30 ms vs 10 ms per token */
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    drive(&g, 13 + 512 + 13 + 5, 30, 4, 10, tr);
    TEST_COND("win: probe as before", run_of(tr, 0, 9, 'S') && run_of(tr, 9, 4, 'P'));
    TEST_COND("a win holds 512 steps", run_of(tr, 13, 512, 'S'));
    TEST_COND("then a new round", run_of(tr, 525, 9, 'S') && run_of(tr, 534, 4, 'P') && g.n_wins == 2);
    TEST_COND("verdict values (7.5 ms vs 10 ms per token)", g.last_spec_ms > 7.49 && g.last_spec_ms < 7.51 && g.last_plain_ms > 9.99 &&
                                                        g.last_plain_ms < 10.01);
    /* reset per request: a parked governor speculates again, from a fresh round */
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    drive(&g, 20, 30, 1, 10, tr);
    TEST_COND("parked before the reset", !muse_spec_governor_allows(&g));
    muse_spec_governor_reset(&g);
    drive(&g, 13, 30, 1, 10, tr);
    TEST_COND("reset: a full probe round again", run_of(tr, 0, 9, 'S') && run_of(tr, 9, 4, 'P') && g.losses == 1);
    /* disabled: always allows, nothing recorded */
    muse_spec_governor_init(&g, false, NULL);
    drive(&g, 100, 300, 1, 1, tr);
    TEST_COND("disabled: always speculates", run_of(tr, 0, 100, 'S') && g.n_rounds == 0);
}

/* One round from explicit samples: spec[0..8] (ms, tokens), plain[0..3] ms; returns the verdict. */
static bool verdict(const double *spec_ms, const int *spec_tok, const double *plain_ms) {
    struct muse_spec_governor g;
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    for (int i = 0; i < 9; i++) muse_spec_governor_record(&g, true, spec_tok[i], (int64_t)(spec_ms[i] * MS));
    for (int i = 0; i < 4; i++) muse_spec_governor_record(&g, false, 1, (int64_t)(plain_ms[i] * MS));
    return g.n_rounds == 1 && g.spec_wins;
}

static void test_verdict(void) {
    const double plain[4] = {1000, 10, 10, 10}; /* the first plain sample is discarded */
    /* ratio of sums: 8 samples, 4 of 16 tokens in 40 ms and 4 of 1 token in 30 ms: 280 ms / 68 tokens =
     * 4.1 ms per token (3.7 with the worst trimmed) beats 10 ms x 1.15; a mean of per-step rates,
     * (2.5 + 30) / 2 = 16.25 ms per token, would lose. The first sample (5 s) is discarded. */
    double s1[9] = {5000, 40, 30, 40, 30, 40, 30, 40, 30};
    int t1[9] = {1, 16, 1, 16, 1, 16, 1, 16, 1};
    TEST_COND("ratio of sums, not a mean of rates (and the first sample discarded)", verdict(s1, t1, plain));
    /* the worst speculative sample trimmed: seven at 9 ms/token and one at 500 ms */
    double s2[9] = {9, 9, 9, 9, 9, 9, 9, 9, 500};
    int t2[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    TEST_COND("one outlier is trimmed", verdict(s2, t2, plain));
    double s3[9] = {9, 9, 9, 9, 9, 9, 9, 500, 500};
    TEST_COND("two are not", !verdict(s3, t2, plain));
    /* the margin: 11.5 ms vs 10 ms per token wins, 11.6 loses (no outlier to trim: all equal) */
    double s4[9] = {11.5, 11.5, 11.5, 11.5, 11.5, 11.5, 11.5, 11.5, 11.5};
    TEST_COND("1.15x plain wins", verdict(s4, t2, plain));
    double s5[9] = {11.6, 11.6, 11.6, 11.6, 11.6, 11.6, 11.6, 11.6, 11.6};
    TEST_COND("1.16x plain loses", !verdict(s5, t2, plain));
    /* a verdict needs 8 speculative and 3 plain samples */
    struct muse_spec_governor g;
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    for (int i = 0; i < 9; i++) muse_spec_governor_record(&g, true, 1, 100 * MS);
    for (int i = 0; i < 3; i++) muse_spec_governor_record(&g, false, 1, MS);
    TEST_COND("no verdict before 3 plain samples (the first discarded)", g.n_rounds == 0 && !muse_spec_governor_allows(&g));
    muse_spec_governor_record(&g, false, 1, MS);
    TEST_COND("the verdict after the 4th plain step", g.n_rounds == 1 && !g.spec_wins && g.parked_remaining == 16);
    /* zero tokens are not a sample */
    muse_spec_governor_init(&g, true, NULL);
    g.zero_accept_loss = g.win_window = g.short_reprobe = false; /* the model card's rules alone (test_later: the additions) */
    muse_spec_governor_record(&g, true, 0, MS);
    TEST_COND("a step that emitted nothing is ignored", !g.spec_first_skipped);
}

/* The later revision's early loss (on by default): 4 measured speculative steps that accepted
 * nothing end the round as a loss, without a plain baseline; one accepted draft keeps the round. */
static void test_zero_accept(void) {
    struct muse_spec_governor g;
    char tr[512];
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    TEST_COND("on by default", g.zero_accept_loss);
    g.short_reprobe = false; /* test_later: with it */
    drive(&g, 200, 11, 1, 10, tr); /* within the 1.15 margin: the model card's rules alone would let it win */
    TEST_COND("5 speculative steps (1 discarded + 4), then parked 16", run_of(tr, 0, 5, 'S') && run_of(tr, 5, 16, 'P') && tr[21] == 'S');
    TEST_COND("then 32, 64", run_of(tr, 21, 5, 'S') && run_of(tr, 26, 32, 'P') && run_of(tr, 58, 5, 'S') && run_of(tr, 63, 64, 'P'));
    TEST_COND("counted as losses", g.n_zero_accept >= 3 && g.n_wins == 0);
    g.zero_accept_loss = false;
    muse_spec_governor_reset(&g);
    drive(&g, 13, 11, 1, 10, tr);
    TEST_COND("without it, 11 ms vs 10 ms per token wins (the margin)", g.n_wins == 1);
    /* a step that accepted one draft (2 tokens) keeps the round going */
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    for (int i = 0; i < 9; i++) muse_spec_governor_record(&g, true, i == 3 ? 2 : 1, 11 * MS);
    TEST_COND("one accepted draft: no early loss", g.n_zero_accept == 0 && g.spec_samples == 8 && !muse_spec_governor_allows(&g));
}

/* The later revision's win window and short reprobe (on by default; spec 5.4). */
static void test_later(void) {
    struct muse_spec_governor g;
    char tr[512];
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    TEST_COND("win window and short reprobe on by default", g.win_window && g.short_reprobe);
    /* a win (2 tokens per 10 ms vs 10 ms plain), then speculation turns slow (1 token per 30 ms, a
     * neighbour took the core): the hold ends after 8 speculative samples, as a loss */
    for (int i = 0; i < 13; i++) {
        const bool sp = muse_spec_governor_allows(&g);
        muse_spec_governor_record(&g, sp, sp ? 2 : 1, (sp ? 10 : 10) * MS);
    }
    TEST_COND("the round won", g.n_wins == 1 && g.recheck_remaining == 512);
    int i = 0;
    for (; i < 100; i++) {
        const bool sp = muse_spec_governor_allows(&g);
        tr[i] = sp ? 'S' : 'P';
        muse_spec_governor_record(&g, sp, sp ? 1 : 1, (sp ? 30 : 10) * MS);
    }
    tr[i] = 0;
    TEST_CONDF(run_of(tr, 0, 8, 'S') && run_of(tr, 8, 16, 'P') && g.n_window_losses == 1, "8 slow steps end the hold, park 16: %s", tr);
    /* within the margin (11 ms vs 10 ms per token) the hold goes on */
    muse_spec_governor_reset(&g);
    for (int k = 0; k < 13; k++) {
        const bool sp = muse_spec_governor_allows(&g);
        muse_spec_governor_record(&g, sp, sp ? 2 : 1, (sp ? 10 : 10) * MS);
    }
    for (i = 0; i < 200; i++) {
        const bool sp = muse_spec_governor_allows(&g);
        tr[i] = sp ? 'S' : 'P';
        muse_spec_governor_record(&g, sp, sp ? 1 : 1, (sp ? 11 : 10) * MS);
    }
    tr[i] = 0;
    TEST_COND("11 ms vs 10 ms per token: the hold goes on", run_of(tr, 0, 200, 'S') && g.n_window_losses == 1);
    /* a steady loser (2 tokens per 70 ms vs 10 ms plain): 9 + 4 steps, park 16; then rounds of
     * 4 speculative steps (1 discarded + 3) and 4 plain ones, parks 32, 64 */
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    drive(&g, 200, 70, 2, 10, tr);
    TEST_CONDF(run_of(tr, 0, 9, 'S') && run_of(tr, 9, 4 + 16, 'P') && run_of(tr, 29, 4, 'S') && run_of(tr, 33, 4 + 32, 'P') &&
                   run_of(tr, 69, 4, 'S') && run_of(tr, 73, 4 + 64, 'P') && tr[141] == 'S',
               "short reprobes after a loss: %s", tr);
    g.short_reprobe = false;
    muse_spec_governor_reset(&g);
    drive(&g, 40, 70, 2, 10, tr);
    TEST_COND("without it, 9 speculative steps again", run_of(tr, 0, 9, 'S') && run_of(tr, 9, 20, 'P') && run_of(tr, 29, 9, 'S'));
    /* a drafter that never accepts, within the margin (11 ms vs 10 ms per token): the early loss
     * after 4 samples, then after all 3 of each short reprobe */
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    drive(&g, 200, 11, 1, 10, tr);
    TEST_CONDF(run_of(tr, 0, 5, 'S') && run_of(tr, 5, 16, 'P') && run_of(tr, 21, 4, 'S') && run_of(tr, 25, 32, 'P') &&
                   run_of(tr, 57, 4, 'S') && run_of(tr, 61, 64, 'P') && g.n_wins == 0,
               "never accepting, short reprobes: %s", tr);
}

/* Drive g for n steps as the loop does, shadow steps included: a speculative step emits spec_tok
 * tokens in spec_ms, a plain one 1 token in plain_ms; a shadow step ('s') is a plain step whose
 * first draft hits when hit(i) says so. */
static void drive_shadow(struct muse_spec_governor *g, int n, double spec_ms, int spec_tok, double plain_ms,
                         bool (*hit)(int), char *trace) {
    for (int i = 0; i < n; i++) {
        const bool s = muse_spec_governor_allows(g);
        const bool sh = !s && muse_spec_governor_wants_shadow(g);
        trace[i] = s ? 'S' : sh ? 's' : 'P';
        if (sh) muse_spec_governor_record_shadow(g, hit(i), (int64_t)(plain_ms * MS));
        else muse_spec_governor_record(g, s, s ? spec_tok : 1, (int64_t)((s ? spec_ms : plain_ms) * MS));
    }
    trace[n] = 0;
}

static bool never(int i) { return (void)i, false; }
static bool third(int i) { return i == 2; }
static bool always(int i) { return (void)i, true; }

/* The shadow probe (on by default): each round first checks 4 first drafts without verifying. */
static void test_shadow(void) {
    struct muse_spec_governor g;
    char tr[512];
    muse_spec_governor_init(&g, true, NULL);
    TEST_COND("shadow probe on by default", g.shadow_probe);
    TEST_COND("a request starts with a shadow step", !muse_spec_governor_allows(&g) && muse_spec_governor_wants_shadow(&g));
    /* never right: 4 shadow steps, parked 16; 4 shadows, parked 32; 4, 64: never a speculative step */
    drive_shadow(&g, 200, 11, 1, 10, never, tr);
    TEST_CONDF(run_of(tr, 0, 4, 's') && run_of(tr, 4, 16, 'P') && run_of(tr, 20, 4, 's') && run_of(tr, 24, 32, 'P') &&
                   run_of(tr, 56, 4, 's') && run_of(tr, 60, 64, 'P') && run_of(tr, 124, 4, 's') && strchr(tr, 'S') == NULL,
               "never right: shadows and parks only: %s", tr);
    TEST_COND("counted as early losses", g.n_shadow_losses == 5 && g.n_zero_accept == 5 && g.n_shadow_steps == 5 * 4 &&
                                             g.n_wins == 0);
    /* right at the third shadow: the timed round of the model card follows (9 speculative, 4 plain)
     * and a winner (2 tokens per 10 ms vs 10 ms) wins and holds */
    muse_spec_governor_reset(&g);
    drive_shadow(&g, 100, 10, 2, 10, third, tr);
    TEST_CONDF(run_of(tr, 0, 3, 's') && run_of(tr, 3, 9, 'S') && run_of(tr, 12, 4, 'P') && run_of(tr, 16, 84, 'S') &&
                   g.n_wins == 1,
               "a hit, then the card's round: %s", tr);
    /* a hit but a slow drafter (2 tokens per 70 ms): the verdict parks; the next round shadows again */
    muse_spec_governor_reset(&g);
    drive_shadow(&g, 60, 70, 2, 10, always, tr);
    TEST_CONDF(run_of(tr, 0, 1, 's') && run_of(tr, 1, 9, 'S') && run_of(tr, 10, 4 + 16, 'P') && tr[30] == 's' &&
                   run_of(tr, 31, 4, 'S'),
               "a hit, a slow drafter: parked, then a shadow again: %s", tr);
    /* record_shadow outside a shadow phase changes nothing; without the early loss there is none */
    muse_spec_governor_reset(&g);
    g.zero_accept_loss = false;
    TEST_COND("no shadow without the early loss", muse_spec_governor_allows(&g) && !muse_spec_governor_wants_shadow(&g));
    muse_spec_governor_record_shadow(&g, false, 10 * MS);
    TEST_COND("record_shadow then ignored", g.shadow_n == 0);
}

/* Drive g as drive_shadow, shadow steps costing shadow_ms (a draft that costs much of a step). */
static void drive_costly_shadow(struct muse_spec_governor *g, int n, double shadow_ms, double plain_ms, char *trace) {
    for (int i = 0; i < n; i++) {
        const bool s = muse_spec_governor_allows(g);
        const bool sh = !s && muse_spec_governor_wants_shadow(g);
        trace[i] = s ? 'S' : sh ? 's' : 'P';
        if (sh) muse_spec_governor_record_shadow(g, false, (int64_t)(shadow_ms * MS));
        else muse_spec_governor_record(g, s, 1, (int64_t)((s ? 2 * plain_ms : plain_ms) * MS));
    }
    trace[n] = 0;
}

/* The shadow budget (on by default): a lost shadow round parks at least extra / (2% x plain) -
 * its 4 steps; the card's parks where they are longer; carried across requests; off: the card's. */
static void test_shadow_budget(void) {
    struct muse_spec_governor g;
    char tr[1024];
    muse_spec_governor_init(&g, true, NULL);
    TEST_COND("shadow budget on by default", g.shadow_budget);
    /* before any plain step there is no plain rate: the card's park */
    drive_costly_shadow(&g, 4 + 16, 20, 10, tr);
    TEST_CONDF(run_of(tr, 0, 4, 's') && run_of(tr, 4, 16, 'P') && g.budget_park == 0, "no plain rate yet: %s", tr);
    /* then shadows at 20 ms against 10 ms plain: 40 ms extra per round -> 40 / (0.02 x 10) - 4 = 196 */
    drive_costly_shadow(&g, 4 + 196 + 1, 20, 10, tr);
    TEST_CONDF(run_of(tr, 0, 4, 's') && run_of(tr, 4, 196, 'P') && tr[200] == 's' && g.budget_park == 196,
               "a costly shadow round parks 196 steps: %s (budget park %d)", tr, g.budget_park);
    /* a new request keeps it (the carry cap is the budget's park when longer) */
    drive_costly_shadow(&g, 3, 20, 10, tr); /* the round's other 3 shadows: parked 196 again */
    drive_costly_shadow(&g, 10, 20, 10, tr);
    muse_spec_governor_new_sequence(&g);
    TEST_CONDF(g.parked_remaining == 186, "carried: the budget's park (%d)", g.parked_remaining);
    /* cheap shadows (11 ms against 10): 4 ms extra -> 4 / 0.2 - 4 = 16, the card's park is as long */
    muse_spec_governor_reset(&g);
    drive_costly_shadow(&g, 4, 11, 10, tr);
    TEST_COND("a cheap shadow round: the card's park", g.parked_remaining == 16 && g.budget_park == 16);
    /* off: the card's 16, 32, 64 */
    muse_spec_governor_reset(&g);
    g.shadow_budget = false;
    drive_costly_shadow(&g, 4 + 16 + 4, 20, 10, tr);
    TEST_CONDF(run_of(tr, 0, 4, 's') && run_of(tr, 4, 16, 'P') && run_of(tr, 20, 4, 's') && g.parked_remaining == 32,
               "budget off: %s", tr);
}

/* A new request: the card's reset without carry, the later revision's NewSequence with it. */
static void test_new_sequence(void) {
    struct muse_spec_governor g;
    char tr[512];
    muse_spec_governor_init(&g, true, NULL);
    g.shadow_probe = false;
    TEST_COND("carry on by default", g.carry);
    drive(&g, 21, 11, 1, 10, tr); /* never accepting: 5 speculative steps, parked 16 (all used) */
    drive(&g, 5 + 10, 11, 1, 10, tr); /* the reprobe (4) and its loss: parked 32, 11 of them used */
    TEST_COND("two losses, 21 steps of the park left", g.losses == 2 && g.parked_remaining == 21);
    muse_spec_governor_new_sequence(&g);
    TEST_COND("carried: the park (21 <= 32) and losses capped at 1", g.parked_remaining == 21 && g.losses == 1);
    drive(&g, 60, 11, 1, 10, tr); /* then the reprobe; its loss parks 32 again (losses 2) */
    TEST_CONDF(run_of(tr, 0, 21, 'P') && run_of(tr, 21, 4, 'S') && run_of(tr, 25, 32, 'P'), "a carried park: %s", tr);
    g.parked_remaining = 64;
    muse_spec_governor_new_sequence(&g);
    TEST_COND("a park above 32 is capped", g.parked_remaining == MUSE_GOV_CARRY_PARK && g.losses == 1);
    /* a win hold carries over */
    muse_spec_governor_reset(&g);
    drive(&g, 13 + 100, 10, 2, 10, tr);
    TEST_COND("a win holding", g.spec_wins && g.recheck_remaining == 512 - 100);
    muse_spec_governor_new_sequence(&g);
    TEST_COND("the hold carries", g.spec_wins && g.recheck_remaining == 412 && muse_spec_governor_allows(&g));
    /* without carry: the card's reset */
    g.carry = false;
    g.parked_remaining = 20;
    g.losses = 3;
    muse_spec_governor_new_sequence(&g);
    TEST_COND("without carry, the reset", g.parked_remaining == 0 && g.losses == 0 && g.recheck_remaining == 0 && g.spec_wins);
}

static void test_clock(void) {
    /* step_begin / step_end read the injected clock: steps of 20 ms speculative (2 tokens) and 10 ms plain */
    int64_t t[64];
    int n = 0;
    int64_t now = 0;
    for (int i = 0; i < 9; i++) t[n++] = now, now += 20 * MS, t[n++] = now;
    for (int i = 0; i < 4; i++) t[n++] = now, now += 10 * MS, t[n++] = now;
    struct script_clock sc = {t, n, 0};
    struct muse_spec_clock clock = {script_now, &sc};
    struct muse_spec_governor g;
    muse_spec_governor_init(&g, true, &clock);
    g.shadow_probe = false; /* the rules on record() alone (test_shadow: with it) */
    g.zero_accept_loss = false;
    for (int i = 0; i < 13; i++) {
        const bool s = muse_spec_governor_allows(&g);
        muse_spec_governor_step_begin(&g);
        muse_spec_governor_step_end(&g, s, s ? 2 : 1);
    }
    TEST_COND("scripted clock: 10 ms vs 10 ms per token, a win", g.n_rounds == 1 && g.spec_wins && g.last_spec_ms > 9.99 &&
                                                                 g.last_spec_ms < 10.01 && g.last_plain_ms > 9.99);
}

/* The bandit: arm a's step emits tok[a] tokens in ms[a] milliseconds. */
static void bandit_drive(struct muse_spec_floor_bandit *b, int n, const double *ms, const int *tok, int *arms) {
    for (int i = 0; i < n; i++) {
        const int a = muse_spec_floor_bandit_arm(b);
        arms[i] = a;
        muse_spec_floor_bandit_record(b, tok[a], (int64_t)(ms[a] * MS));
    }
}

static void test_bandit(void) {
    struct muse_spec_floor_bandit b;
    int arms[400];
    TEST_COND("floors in trial order", muse_spec_floors[0] == 0.35f && muse_spec_floors[1] == 0.15f &&
                                          muse_spec_floors[2] == 0.6f && muse_spec_floors[3] == 0.0f);
    /* tokens per second: arm 0 200, arm 1 100, arm 2 400 (best), arm 3 50 */
    double ms[4] = {10, 10, 10, 20};
    int tok[4] = {2, 1, 4, 1};
    muse_spec_floor_bandit_init(&b, NULL);
    TEST_COND("no best before every arm ran", muse_spec_floor_bandit_best(&b) == -1);
    bandit_drive(&b, 200, ms, tok, arms);
    bool order = true;
    for (int i = 0; i < 16; i++) order = order && arms[i] == i / 4;
    TEST_COND("each arm four steps, in order", order);
    TEST_COND("then the best", arms[16] == 2 && arms[19] == 2 && muse_spec_floor_bandit_best(&b) == 2);
    /* refresh runs: every 32 steps 4 steps of another arm, the one run longest ago */
    int refresh = 0, first_refresh = -1;
    for (int i = 16; i < 200; i++)
        if (arms[i] != 2) {
            refresh++;
            if (first_refresh < 0) first_refresh = i;
        }
    TEST_CONDF(first_refresh == 32 && arms[32] == 0 && arms[35] == 0 && arms[36] == 2, "the first refresh at step 32 is arm 0 (%d)",
               first_refresh);
    TEST_CONDF(refresh == 8 && arms[96] == 1 && arms[99] == 1 && arms[100] == 2, "refreshes back off: at step 32, then 64 steps later, then 128 (%d steps of 184)", refresh);
    bool cycled = false;
    for (int i = 36; i < 200; i++) cycled |= arms[i] == 1 || arms[i] == 3;
    TEST_COND("every other arm gets refreshed", cycled);
    /* a change: arm 2 becomes the worst; the bandit moves to arm 0 */
    ms[2] = 100;
    bandit_drive(&b, 200, ms, tok, arms);
    int tail0 = 0;
    for (int i = 100; i < 200; i++) tail0 += arms[i] == 0;
    TEST_CONDF(muse_spec_floor_bandit_best(&b) == 0 && tail0 > 70, "after a change the new best runs (%d of 100)", tail0);
    /* ratio of sums, through step_begin/step_end and a scripted clock: arm 0 alternates 8 tokens in 5 ms
     * and 1 token in 15 ms (18 tokens in 40 ms: 0.45 per ms; a mean of per-step rates would say 0.83),
     * arm 1 makes 1 token in 2.2 ms (0.4545 per ms): arm 1 is the better */
    int64_t t[64];
    int n = 0;
    int64_t now = 0;
    const double sched_ms[16] = {5, 15, 5, 15, 2.2, 2.2, 2.2, 2.2, 50, 50, 50, 50, 50, 50, 50, 50};
    for (int i = 0; i < 16; i++) t[n++] = now, now += (int64_t)(sched_ms[i] * MS), t[n++] = now;
    struct script_clock sc = {t, n, 0};
    struct muse_spec_clock clock = {script_now, &sc};
    muse_spec_floor_bandit_init(&b, &clock);
    const int toks[16] = {8, 1, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < 16; i++) {
        muse_spec_floor_bandit_step_begin(&b);
        muse_spec_floor_bandit_step_end(&b, toks[i]);
    }
    TEST_CONDF(muse_spec_floor_bandit_best(&b) == 1, "ratio of sums: 18 tokens / 40 ms < 4 / 8.8 ms (best %d)",
               muse_spec_floor_bandit_best(&b));
}

int main(void) {
    test_rounds();
    test_verdict();
    test_zero_accept();
    test_later();
    test_shadow();
    test_shadow_budget();
    test_new_sequence();
    test_clock();
    test_bandit();
    return TEST_REPORT();
}
