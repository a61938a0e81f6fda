/* governor.c - the cost governor and the adaptive confidence floor (governor.h). */
#include "speculative/governor.h"

#include <math.h>
#include <string.h>
#include <time.h>

int64_t muse_spec_clock_now(const struct muse_spec_clock *c) {
    if (c && c->now_ns) return c->now_ns(c->user);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ---- the cost governor (spec 5.3) ------------------------------------------------------------------

static void reset_round(struct muse_spec_governor *g) {
    g->spec_ns = g->spec_tokens = g->plain_ns = g->plain_tokens = 0;
    g->spec_samples = g->plain_samples = 0;
    g->spec_first_skipped = g->plain_first_skipped = false;
    g->worst_ns = g->worst_tokens = 0;
    g->win_n = 0;
    g->shadow_n = 0;
    g->shadow_ns = 0;
    g->shadow_hit = false;
}

void muse_spec_governor_init(struct muse_spec_governor *g, bool enabled, const struct muse_spec_clock *clock) {
    memset(g, 0, sizeof *g);
    g->enabled = enabled;
    g->zero_accept_loss = true;
    g->win_window = true;
    g->short_reprobe = true;
    g->shadow_probe = true;
    g->carry = true;
    g->shadow_budget = true;
    if (clock) g->clock = *clock;
    muse_spec_governor_reset(g);
}

void muse_spec_governor_reset(struct muse_spec_governor *g) {
    reset_round(g);
    g->parked_remaining = g->recheck_remaining = g->losses = 0;
    g->budget_park = 0;
    g->spec_wins = true;
    g->last_spec_ms = g->last_plain_ms = 0;
}

void muse_spec_governor_new_sequence(struct muse_spec_governor *g) {
    if (!g->carry) {
        muse_spec_governor_reset(g);
        return;
    }
    reset_round(g);
    const int32_t cap = g->budget_park > MUSE_GOV_CARRY_PARK ? g->budget_park : MUSE_GOV_CARRY_PARK;
    if (g->parked_remaining > cap) g->parked_remaining = cap;
    if (g->losses > 1) g->losses = 1;
}

/* Speculative samples of this round: 8, or 3 after a loss (the short reprobe). */
static int32_t probe_steps(const struct muse_spec_governor *g) {
    return g->short_reprobe && g->losses > 0 ? MUSE_GOV_REPROBE_SPEC_STEPS : MUSE_GOV_PROBE_SPEC_STEPS;
}

/* The round is in its shadow phase (no speculative or plain sample taken yet, no hit, < 4 drafts). */
static bool shadow_phase(const struct muse_spec_governor *g) {
    return g->shadow_probe && g->zero_accept_loss && !g->shadow_hit && g->shadow_n < MUSE_GOV_ZERO_ACCEPT_STEPS &&
           !g->spec_first_skipped && !g->plain_first_skipped;
}

bool muse_spec_governor_wants_shadow(const struct muse_spec_governor *g) {
    return g->enabled && g->parked_remaining == 0 && g->recheck_remaining == 0 && shadow_phase(g);
}

bool muse_spec_governor_allows(const struct muse_spec_governor *g) {
    if (!g->enabled) return true;
    if (g->parked_remaining > 0) return false;
    if (g->recheck_remaining > 0) return g->spec_wins;
    if (shadow_phase(g)) return false; /* looking before leaping: shadow drafts first */
    if (g->spec_samples < probe_steps(g)) return true;                 /* measuring speculation first */
    if (g->plain_samples < MUSE_GOV_CALIBRATION_PLAIN_STEPS) return false; /* then a plain baseline */
    return g->spec_wins;
}

/* End a round: a win holds for WIN_RECHECK steps, a loss parks 16, 32, 64, 64 ... steps. */
static void verdict(struct muse_spec_governor *g, bool wins, double spec_ms, double plain_ms) {
    g->spec_wins = wins;
    g->losses = wins ? 0 : g->losses + 1;
    if (wins) {
        g->parked_remaining = 0;
        g->recheck_remaining = MUSE_GOV_WIN_RECHECK;
        g->n_wins++;
    } else {
        const int shift = g->losses - 1 < 4 ? g->losses - 1 : 4;
        const int32_t park = MUSE_GOV_FIRST_PARK << shift;
        g->parked_remaining = park < MUSE_GOV_PARKED_PROBE ? park : MUSE_GOV_PARKED_PROBE;
        g->recheck_remaining = 0;
    }
    g->last_spec_ms = spec_ms;
    g->last_plain_ms = plain_ms;
    g->n_rounds++;
    reset_round(g);
}

void muse_spec_governor_record(struct muse_spec_governor *g, bool speculated, int32_t tokens, int64_t ns) {
    if (!g->enabled || tokens <= 0) return;
    if (!speculated) { /* the plain rate of the shadow budget: the last ~8 plain steps weigh most */
        g->rate_ns = g->rate_ns * 0.875 + (double)ns;
        g->rate_tok = g->rate_tok * 0.875 + (double)tokens;
    }
    if (g->parked_remaining > 0) { /* not a sample */
        g->parked_remaining--;
        g->n_parked_steps++;
        return;
    }
    if (g->recheck_remaining > 0) { /* not a sample */
        g->recheck_remaining--;
        if (speculated && g->spec_wins && g->win_window) { /* the win window (spec 5.4) */
            g->win_ns[g->win_n % MUSE_GOV_WIN_WINDOW] = ns;
            g->win_tokens[g->win_n % MUSE_GOV_WIN_WINDOW] = tokens;
            g->win_n++;
            if (g->win_n >= MUSE_GOV_WIN_WINDOW) {
                int64_t sn = 0, st = 0;
                for (int i = 0; i < MUSE_GOV_WIN_WINDOW; i++) sn += g->win_ns[i], st += g->win_tokens[i];
                const double ms = (double)sn / (double)st * 1e-6;
                if (ms > g->last_plain_ms * MUSE_GOV_WIN_MARGIN) {
                    g->n_window_losses++;
                    verdict(g, false, ms, g->last_plain_ms);
                }
            }
        }
        return;
    }
    if (speculated) {
        if (!g->spec_first_skipped) {
            g->spec_first_skipped = true;
            return;
        }
        g->spec_ns += ns;
        g->spec_tokens += tokens;
        g->spec_samples++;
        /* the worst sample by ns per token: ns / tokens > worst_ns / worst_tokens, cross-multiplied */
        if (g->worst_tokens == 0 || (double)ns * (double)g->worst_tokens > (double)g->worst_ns * (double)tokens) {
            g->worst_ns = ns;
            g->worst_tokens = tokens;
        }
    } else {
        if (!g->plain_first_skipped) {
            g->plain_first_skipped = true;
            return;
        }
        g->plain_ns += ns;
        g->plain_tokens += tokens;
        g->plain_samples++;
    }
    /* the later revision's early loss (spec 5.4): the first measured speculative steps (4, or all 3
     * of a short reprobe) accepted nothing */
    const int32_t za = probe_steps(g) < MUSE_GOV_ZERO_ACCEPT_STEPS ? probe_steps(g) : MUSE_GOV_ZERO_ACCEPT_STEPS;
    if (speculated && g->zero_accept_loss && g->spec_samples == za && g->spec_tokens == g->spec_samples) {
        g->n_zero_accept++;
        verdict(g, false, 0, 0);
        return;
    }
    if (g->spec_samples < probe_steps(g) || g->plain_samples < MUSE_GOV_CALIBRATION_PLAIN_STEPS) return;
    /* the verdict: ratio of sums, the worst speculative sample trimmed */
    double spec_ms = (double)g->spec_ns / (double)g->spec_tokens * 1e-6;
    const int64_t tn = g->spec_ns - g->worst_ns, tt = g->spec_tokens - g->worst_tokens;
    if (g->spec_samples > 1 && tn > 0 && tt > 0) {
        const double trimmed = (double)tn / (double)tt * 1e-6;
        if (trimmed < spec_ms) spec_ms = trimmed;
    }
    const double plain_ms = (double)g->plain_ns / (double)g->plain_tokens * 1e-6;
    verdict(g, spec_ms <= plain_ms * MUSE_GOV_WIN_MARGIN, spec_ms, plain_ms);
}

/* The shadow budget's park for a lost shadow round (0 when it does not ask for one). */
static int32_t budget_park(const struct muse_spec_governor *g) {
    if (!g->shadow_budget || g->rate_tok <= 0) return 0;
    const double step = g->rate_ns / g->rate_tok;                   /* plain ns per token */
    const double extra = (double)g->shadow_ns - g->shadow_n * step; /* the round's cost over plain */
    if (step <= 0 || extra <= 0) return 0;
    const double park = extra / (MUSE_GOV_SHADOW_BUDGET * step) - g->shadow_n;
    return park <= 0 ? 0 : park >= MUSE_GOV_BUDGET_PARK_MAX ? MUSE_GOV_BUDGET_PARK_MAX : (int32_t)ceil(park - 1e-9);
}

void muse_spec_governor_record_shadow(struct muse_spec_governor *g, bool hit, int64_t ns) {
    if (!muse_spec_governor_wants_shadow(g)) return;
    g->n_shadow_steps++;
    g->shadow_n++;
    g->shadow_ns += ns > 0 ? ns : 0;
    if (hit) {
        g->shadow_hit = true;
    } else if (g->shadow_n == MUSE_GOV_ZERO_ACCEPT_STEPS) { /* the early loss, seen without verifying */
        g->n_zero_accept++;
        g->n_shadow_losses++;
        const int32_t bp = budget_park(g);
        verdict(g, false, 0, 0);
        g->budget_park = bp;
        if (g->parked_remaining < bp) g->parked_remaining = bp;
    }
}

void muse_spec_governor_step_begin(struct muse_spec_governor *g) { g->step_t0 = muse_spec_clock_now(&g->clock); }

void muse_spec_governor_step_end(struct muse_spec_governor *g, bool speculated, int32_t tokens) {
    muse_spec_governor_record(g, speculated, tokens, muse_spec_clock_now(&g->clock) - g->step_t0);
}

// ---- the adaptive confidence floor ------------------------------------------------------------------

const float muse_spec_floors[MUSE_FLOOR_ARMS] = {0.35f, 0.15f, 0.6f, 0.0f};

void muse_spec_floor_bandit_init(struct muse_spec_floor_bandit *b, const struct muse_spec_clock *clock) {
    memset(b, 0, sizeof *b);
    if (clock) b->clock = *clock;
    b->arm = 0;
    b->run_left = MUSE_FLOOR_RUN;
    b->refresh_every = MUSE_FLOOR_REFRESH;
}

int32_t muse_spec_floor_bandit_arm(const struct muse_spec_floor_bandit *b) { return b->arm; }

/* tokens per nanosecond of arm a (ratio of sums) */
static double rate(const struct muse_spec_floor_bandit *b, int a) { return b->tokens[a] / (b->ns[a] > 1 ? b->ns[a] : 1); }

int32_t muse_spec_floor_bandit_best(const struct muse_spec_floor_bandit *b) {
    int32_t best = 0;
    for (int a = 0; a < MUSE_FLOOR_ARMS; a++) {
        if (b->pulls[a] == 0) return -1;
        if (rate(b, a) > rate(b, best)) best = a;
    }
    return best;
}

/* The arm of the next run: an untried one in order; a refresh of the arm run longest ago when
 * refresh_every steps passed since the last refresh; else the best. A refresh that leaves the best
 * arm as it was doubles the interval (up to MUSE_FLOOR_REFRESH_MAX); one that changes it resets it. */
static int32_t next_arm(struct muse_spec_floor_bandit *b) {
    for (int a = 0; a < MUSE_FLOOR_ARMS; a++)
        if (b->pulls[a] == 0) return a;
    const int32_t best = muse_spec_floor_bandit_best(b);
    if (b->in_refresh) { /* a refresh run just ended */
        b->in_refresh = false;
        if (best == b->best_before) b->refresh_every = b->refresh_every * 2 < MUSE_FLOOR_REFRESH_MAX ? b->refresh_every * 2
                                                                                                 : MUSE_FLOOR_REFRESH_MAX;
        else b->refresh_every = MUSE_FLOOR_REFRESH;
    }
    if (b->since_refresh >= b->refresh_every) {
        b->since_refresh = 0;
        int32_t old = -1;
        for (int a = 0; a < MUSE_FLOOR_ARMS; a++)
            if (a != best && (old < 0 || b->last_run[a] < b->last_run[old])) old = a;
        b->in_refresh = true;
        b->best_before = best;
        return old;
    }
    return best;
}

void muse_spec_floor_bandit_record(struct muse_spec_floor_bandit *b, int32_t tokens, int64_t ns) {
    const int a = b->arm;
    b->tokens[a] += tokens;
    b->ns[a] += (double)(ns > 0 ? ns : 0);
    b->pulls[a]++;
    b->steps++;
    b->since_refresh++;
    if (--b->run_left > 0) return;
    const int32_t next = next_arm(b);
    /* a new run (of the same arm too): the arm's older measurements count half, so its rate follows
     * its recent runs */
    b->tokens[next] *= 0.5;
    b->ns[next] *= 0.5;
    if (next != a) b->last_run[next] = b->steps;
    b->arm = next;
    b->run_left = MUSE_FLOOR_RUN;
}

void muse_spec_floor_bandit_step_begin(struct muse_spec_floor_bandit *b) { b->step_t0 = muse_spec_clock_now(&b->clock); }

void muse_spec_floor_bandit_step_end(struct muse_spec_floor_bandit *b, int32_t tokens) {
    muse_spec_floor_bandit_record(b, tokens, muse_spec_clock_now(&b->clock) - b->step_t0);
}
