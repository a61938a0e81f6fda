/*
 * governor.h - when speculation pays: the cost governor and the adaptive confidence floor of the
 * speculative loop (spec dflash.md section 5; spec.h uses both).
 *
 * The cost governor is TensorSharp's, in the revision the Muse-Glimmer model card documents
 * (spec 5.3), exactly: decode steps are timed whole (draft + verify + sampling, or one plain
 * step); a probe round measures 8 speculative steps, then 3 plain ones (the first sample of each
 * side discarded: it carries one-off costs); the verdict compares milliseconds per emitted token
 * as a ratio of sums (a 1-token rejected step must not weigh like a 16-token one), the speculative
 * side with its worst sample trimmed, and speculation wins when it is no slower than plain x 1.15.
 * A win holds for 512 steps before the next round; a loss parks speculation for 16, 32, 64, 64 ...
 * steps (doubling per consecutive loss, at most 64) and then probes again. Parked and held steps
 * are not samples. muse_spec_governor_reset starts over (per request).
 *
 * One addition, from the model card's later revision (spec 5.4, ZeroAcceptProbeSteps = 4), on by
 * default (zero_accept_loss): a round whose first 4 measured speculative steps accepted nothing
 * (each emitted one token) ends at once as a loss. Without it a drafter that never accepts but
 * costs less than the 1.15 margin wins its rounds and keeps drafting up to 15% below plain speed
 * (measured: 0.92x plain on this CPU, docs/perf.md); a step that accepted nothing cannot have paid.
 * Two more from that revision, also on by default, because a noisy machine otherwise pays dearly
 * (docs/perf.md, the trained pair at 1 thread: one plain sample slowed by a neighbour made a 2x
 * slower drafter "win" and hold for 512 steps): the win window (win_window: during a win hold the
 * last 8 speculative samples are checked after each one, and when their ratio of sums is slower
 * than the verdict's plain rate x 1.15 the hold ends as a loss and parks) and the short reprobe
 * (short_reprobe: the round after a loss measures 3 speculative steps, not 8, the first still
 * discarded). The park back-off stays the model card's 16, 32, 64.
 *
 * One step of muse's own, on by default with the early loss (shadow_probe): every probe round
 * begins by looking before it leaps. Its first steps are plain steps that also draft a first row
 * for their anchor (with the lazy head, spec.h, its 2-row block, llama.cpp's n_max 1, the probe a
 * speculative step makes after a gated-out one; without it the full block's first row; the LM head
 * for that row only) and compare it with the token the target then emits: the test a verify row
 * applies, without paying for the verify batch. When the first 4 such
 * shadow drafts all miss, the round ends as the early loss would have ended it (parked 16, 32, 64
 * ...), having cost 4 plain steps and 4 partial drafts instead of 5 speculative steps; the first
 * hit ends the shadow phase and the round goes on as the model card's (timed speculative samples,
 * then the plain baseline, the verdict). Why: with the card's per-request reset and its 64-step
 * longest park, a drafter that never accepts pays a probe at every request start and every 64
 * steps; where a verify row costs nearly a whole decode step (a small model in cache, computing
 * rather than reading weights) those probes alone cost 20% of decode speed (docs/perf.md, issue
 * 12). Shadow steps are not samples of either side.
 *
 * With the shadow probe comes its budget (shadow_budget, muse's own, on by default): a shadow round
 * that ends in a loss costs its catch-up (the drafter's ring injects the positions it missed while
 * parked) and its 4 first drafts on top of the plain steps it makes, and where a draft costs much
 * of a decode step (a small target computing in cache) the card's longest park (64 steps) let
 * those rounds alone take 7-9% of decode speed (docs/perf.md, issue 12). So the park after a
 * shadow loss is at least as long as keeps that round's measured extra time within
 * MUSE_GOV_SHADOW_BUDGET (2%) of the plain time of the round and its park: park >= extra /
 * (budget x plain ns per token) - the round's steps, at most MUSE_GOV_BUDGET_PARK_MAX (the plain
 * rate: decayed sums over the non-speculative steps). Where a draft is cheap (every real
 * Muse-Glimmer file reads its weights from memory) the card's 16, 32, 64 stay the longer parks.
 *
 * And the later revision's NewSequence (spec 5.4, on by default: carry): a request starts from the
 * verdict the last one left instead of the card's reset, a carried park capped at 32 steps and the
 * loss count at 1 (so a drafter that lost before is looked at again within 32 steps, and one that
 * won keeps its hold, the win window still watching). Without it every request of a session pays a
 * probe round at its start, which is where a drafter that never accepts costs most (docs/perf.md).
 *
 * The adaptive floor is the "small bandit" the model card leaves open (spec 5.1): arms are the
 * cumulative-confidence floors {0, 0.15, 0.35, 0.6} (a draft is kept while the running product of
 * its confidences stays at or above the floor); the reward of a speculative step is its emitted
 * tokens and its time, and an arm is rated by tokens per second as a ratio of sums. Schedule
 * (deterministic, so it can be tested): first each arm for 4 steps, in the order 0.35, 0.15, 0.6,
 * 0 (the model card's default first); then the best-rated arm, except that after 32 steps the arm
 * measured longest ago gets 4 steps again, so a rating that went stale (the text changed, the
 * context grew) is refreshed; each refresh that leaves the best arm as it was doubles that
 * interval (up to 256 steps: a settled choice wastes under 2% of the steps on other arms), one
 * that changes it resets it to 32. An arm's sums are halved whenever it starts a new run, so its
 * rate follows its recent runs. The bandit is not reset per request: what it learnt about the pair and
 * the machine carries over.
 *
 * Time comes from an injectable clock (muse_spec_clock; NULL = the monotonic clock), so the tests
 * drive both with a scripted clock. Neither allocates; both are plain structs owned by the caller.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* A clock in nanoseconds from any origin, monotonic. now_ns NULL = CLOCK_MONOTONIC. */
struct muse_spec_clock {
    int64_t (*now_ns)(void *user);
    void *user;
};

int64_t muse_spec_clock_now(const struct muse_spec_clock *clock);

/* The model card's constants (spec 5.3). */
#define MUSE_GOV_PROBE_SPEC_STEPS 8
#define MUSE_GOV_CALIBRATION_PLAIN_STEPS 3
#define MUSE_GOV_FIRST_PARK 16
#define MUSE_GOV_PARKED_PROBE 64
#define MUSE_GOV_WIN_RECHECK 512
#define MUSE_GOV_WIN_MARGIN 1.15
#define MUSE_GOV_ZERO_ACCEPT_STEPS 4 /* the later revision's early loss (spec 5.4) */
#define MUSE_GOV_WIN_WINDOW 8         /* the later revision's check during a win hold (spec 5.4) */
#define MUSE_GOV_REPROBE_SPEC_STEPS 3 /* the later revision's round after a loss (spec 5.4) */
#define MUSE_GOV_SHADOW_BUDGET 0.02   /* the shadow budget: a lost shadow round's share of plain time */
#define MUSE_GOV_BUDGET_PARK_MAX 1024 /* ... and the longest park it asks for */

struct muse_spec_governor {
    bool enabled;               /* false: always allows, records nothing */
    bool zero_accept_loss;      /* the early loss of spec 5.4 (init: true) */
    bool win_window;            /* the win hold's sliding check of spec 5.4 (init: true) */
    bool short_reprobe;         /* 3 speculative samples in a round after a loss, spec 5.4 (init: true) */
    bool shadow_probe;          /* each round begins with shadow drafts (above; init: true; needs
                                   zero_accept_loss) */
    bool carry;                 /* muse_spec_governor_new_sequence carries the verdict (spec 5.4; init: true) */
    bool shadow_budget;         /* a lost shadow round parks long enough to cost at most the budget
                                   (above; init: true) */
    struct muse_spec_clock clock;
    int64_t step_t0;            /* muse_spec_governor_step_begin's time */
    /* the verdict */
    int32_t parked_remaining, recheck_remaining, losses;
    bool spec_wins;
    /* the current probe round */
    int64_t spec_ns, spec_tokens, plain_ns, plain_tokens;
    int32_t spec_samples, plain_samples;
    bool spec_first_skipped, plain_first_skipped;
    int32_t shadow_n;           /* shadow drafts this round */
    int64_t shadow_ns;          /* their time */
    double rate_ns, rate_tok;   /* decayed sums of the non-speculative steps (the plain rate) */
    int32_t budget_park;        /* the park the last lost shadow round's budget asked for (0: none) */
    bool shadow_hit;            /* one of them was right: the timed round goes on */
    int64_t worst_ns, worst_tokens; /* the speculative sample with the most ns per token */
    /* the win window: the last speculative samples of a win hold (a ring) */
    int64_t win_ns[MUSE_GOV_WIN_WINDOW], win_tokens[MUSE_GOV_WIN_WINDOW];
    int32_t win_n;
    /* what the last verdict compared (ms per token; 0 before the first) and counters */
    double last_spec_ms, last_plain_ms;
    uint64_t n_rounds, n_wins, n_parked_steps, n_zero_accept, n_window_losses, n_shadow_steps, n_shadow_losses;
};

/* Enabled, with the given clock (NULL = monotonic), reset. */
void muse_spec_governor_init(struct muse_spec_governor *g, bool enabled, const struct muse_spec_clock *clock);
/* The model card's per-request Reset: clear the round and the verdict (parked = recheck = 0, losses
 * = 0, spec wins). */
void muse_spec_governor_reset(struct muse_spec_governor *g);
#define MUSE_GOV_CARRY_PARK 32 /* NewSequence's cap on a carried park (spec 5.4) */
/* A new request: with carry, the later revision's NewSequence (the round cleared, the verdict kept,
 * a park capped at MUSE_GOV_CARRY_PARK steps, or at the shadow budget's park when that is longer,
 * and losses at 1); without it, reset. */
void muse_spec_governor_new_sequence(struct muse_spec_governor *g);
/* Whether the next decode step may speculate (AllowsSpeculation of spec 5.3). */
bool muse_spec_governor_allows(const struct muse_spec_governor *g);
/* Whether the next decode step (one that may not speculate: allows() is false then) is a shadow
 * step: a plain step whose anchor also gets its first draft, reported by record_shadow. */
bool muse_spec_governor_wants_shadow(const struct muse_spec_governor *g);
/* A shadow step's result (instead of record): its first draft equalled the emitted token or not,
 * and the step took ns. */
void muse_spec_governor_record_shadow(struct muse_spec_governor *g, bool hit, int64_t ns);
/* One decode step's sample: speculated or not, tokens it emitted, its duration (Record of 5.3). */
void muse_spec_governor_record(struct muse_spec_governor *g, bool speculated, int32_t tokens, int64_t ns);
/* The same with the clock: begin before the step, end after it. */
void muse_spec_governor_step_begin(struct muse_spec_governor *g);
void muse_spec_governor_step_end(struct muse_spec_governor *g, bool speculated, int32_t tokens);

#define MUSE_FLOOR_ARMS 4
#define MUSE_FLOOR_RUN 4          /* steps per run of an arm */
#define MUSE_FLOOR_REFRESH 32     /* steps between refresh runs once every arm was tried ... */
#define MUSE_FLOOR_REFRESH_MAX 256 /* ... doubling up to this while refreshes leave the best arm as it was */

/* The floors, in the order they are first tried. */
extern const float muse_spec_floors[MUSE_FLOOR_ARMS];

struct muse_spec_floor_bandit {
    struct muse_spec_clock clock;
    int64_t step_t0;
    double tokens[MUSE_FLOOR_ARMS], ns[MUSE_FLOOR_ARMS]; /* decayed sums */
    int64_t pulls[MUSE_FLOOR_ARMS];                       /* steps ever run with each arm */
    int64_t last_run[MUSE_FLOOR_ARMS];                    /* step count when each arm's last run began */
    int32_t arm;                                          /* the arm of the current run */
    int32_t run_left;                                     /* steps left in it */
    int64_t steps;                                        /* steps recorded */
    int64_t since_refresh;
    int64_t refresh_every;                                /* the current refresh interval */
    bool in_refresh;                                      /* the current run is a refresh */
    int32_t best_before;                                  /* the best arm when it began */
};

void muse_spec_floor_bandit_init(struct muse_spec_floor_bandit *b, const struct muse_spec_clock *clock);
/* The arm for the next speculative step (its floor: muse_spec_floors[arm]). Does not change state. */
int32_t muse_spec_floor_bandit_arm(const struct muse_spec_floor_bandit *b);
/* The step with arm muse_spec_floor_bandit_arm() emitted `tokens` in `ns`. */
void muse_spec_floor_bandit_record(struct muse_spec_floor_bandit *b, int32_t tokens, int64_t ns);
/* The same with the clock. */
void muse_spec_floor_bandit_step_begin(struct muse_spec_floor_bandit *b);
void muse_spec_floor_bandit_step_end(struct muse_spec_floor_bandit *b, int32_t tokens);
/* The best-rated arm so far (tokens per second, ratio of sums); -1 before every arm was tried. */
int32_t muse_spec_floor_bandit_best(const struct muse_spec_floor_bandit *b);
