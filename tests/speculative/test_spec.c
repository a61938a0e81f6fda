/*
 * test_spec.c - speculative decoding (src/speculative/spec.c, plugged into the generation loop of
 * src/gen/generate.c) is lossless: what it emits is what plain decoding emits, token for token,
 * whatever the drafter proposes and the governor decides; the loop without a drafter is plain
 * decoding.
 *
 * The reference is an independent plain loop (muse_eval one token at a time on a context of its
 * own, the sampler as `muse run` always used it). Drafters, on a synthetic target (4 layers, width
 * 64, sliding window 8, batches of 8: its rings wrap after 16 positions; the drafter's window 16,
 * block 8, so its ring of 64 cells wraps too):
 *   - the planted pair (synth_plant.h) with noise 0: long periodic stretches, full acceptance;
 *   - the planted pair with noise: jumps, partial acceptance at varying positions;
 *   - a random drafter: almost every draft rejected;
 *   - scripted drafts (the test hook): the true continuation with its i-th draft corrupted, for every
 *     i of every step (a rejection at every position, and the full block accepted), plus a stop
 *     token inside an accepted run.
 * On prompts from 1 to 150 tokens (past the target's window and the drafter's ring), greedy and
 * sampled (temperature, top-k/top-p, repetition and presence penalties, several seeds): the sampled
 * streams are equal to plain ones exactly, because each verify row is sampled with the history and
 * RNG draw plain decoding has there (the same RNG stream consumption; no statistical test needed).
 * Max tokens and the context end inside an accepted run cut exactly where plain decoding stops.
 * After every step: ring n_past + pending == the session's n_past (the ring holds committed
 * positions below the anchor only). Prefix reuse and rollbacks: the ring follows the session in
 * place, from a copy saved with a checkpoint (the drafts after a restore equal a cold run's), or
 * restarts. ref and cpu backends.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/generate.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "speculative/drafter.h"
#include "speculative/spec.h"
#include "synth/synth.h"
#include "synth/synth_dflash.h"
#include "synth/synth_plant.h"
#include "test.h"

#define N_BATCH 8
#define N_CTX 256
#define MAX_GEN 64
#define PERIOD 6

static const char *g_backend = "cpu";
/* threads of the cpu backend: 2 for the first pass over the drafters (the threaded paths), then 1
 * (2-thread barriers crawl on a loaded 2-core box: the whole file took 146 s there, not 68 s) */
static int g_threads = 2;
static char dir[200];

static void tmp_path(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", dir, name); }

/* target (planted with `noise`, EOS in its last cycle when stop) + copying drafter + random drafter */
static bool make_files(const char *tag, float noise, bool stop, char *target, char *copier, char *randd, size_t size) {
    struct muse_error err;
    struct muse_synth_config c;
    char name[64];
    if (muse_synth_preset("tiny", &c, &err)) return false;
    c.n_layer = 4, c.n_embd = 64, c.n_head = 2, c.n_head_kv = 1, c.head_dim = 32, c.n_ff = 128, c.n_vocab = 300;
    c.n_ctx = 1024, c.n_swa = 8;
    snprintf(c.pattern, sizeof c.pattern, "SSSF");
    snprintf(name, sizeof name, "%s-target.gguf", tag);
    tmp_path(target, size, name);
    snprintf(name, sizeof name, "%s-copier.gguf", tag);
    tmp_path(copier, size, name);
    snprintf(name, sizeof name, "%s-random.gguf", tag);
    tmp_path(randd, size, name);
    struct muse_synth_plant_config pc = {.period = PERIOD, .noise = noise, .stop_in_cycle = stop, .seed = 7};
    struct muse_synth_dflash_config dc;
    muse_synth_dflash_default(&dc);
    dc.block_size = 8, dc.n_swa = 16, dc.head_dim = 64, dc.n_head = 2, dc.n_head_kv = 1;
    dc.n_target_layers = 2, dc.target_layers[0] = 0, dc.target_layers[1] = 2;
    if (muse_synth_write(&c, target, NULL, NULL, &err) || muse_synth_plant_target(target, target, &pc, &err) ||
        muse_synth_dflash_write(&dc, target, copier, &err) || muse_synth_plant_drafter(target, copier, copier, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return false;
    }
    dc.seed = 99;
    if (muse_synth_dflash_write(&dc, target, randd, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return false;
    }
    return true;
}

static struct muse_context *new_ctx(struct muse_model *m, int n_ctx) {
    struct muse_context_params cp = muse_context_default_params();
    cp.n_batch = N_BATCH;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.backend = g_backend;
    cp.n_threads = getenv("MUSE_SANITIZER") ? 1 : g_threads; /* barriers crawl under ASan on a busy machine */
    struct muse_context *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(m, cp, &ctx, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return ctx;
}

static void make_prompt(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % 280); /* normal tokens (the control tokens are the last 12) */
    }
}

/* The reference: plain decoding, one muse_eval per token (what `muse run` did before spec.c).
 * Returns the tokens generated (stop token included), stopping at a stop token, max or n_ctx. */
static int plain_generate(struct muse_model *m, const int32_t *prompt, int n, struct muse_sampler_params spp, int max,
                          int n_ctx, int32_t *out) {
    struct muse_context *ctx = new_ctx(m, n_ctx);
    struct muse_sampler *smp = NULL;
    struct muse_error err;
    float *logits = malloc(sizeof(float) * (size_t)muse_model_n_vocab(m));
    int n_gen = 0;
    if (!ctx || !logits || muse_sampler_create(spp, muse_model_n_vocab(m), &smp, &err) ||
        muse_eval(ctx, prompt, n, logits, 0, &err))
        goto done;
    for (int i = 0; i < n; i++) muse_sampler_accept(smp, prompt[i]);
    while (n_gen < max) {
        int32_t t = muse_sampler_sample(smp, logits);
        muse_sampler_accept(smp, t);
        out[n_gen++] = t;
        if (muse_model_token_is_stop(m, t) || n_gen == max || muse_context_n_past(ctx) >= n_ctx) break;
        if (muse_eval(ctx, &t, 1, logits, 0, &err)) {
            n_gen = -1;
            break;
        }
    }
done:
    muse_sampler_free(smp);
    muse_context_free(ctx);
    free(logits);
    return n_gen;
}

/* ---- scripted drafts --------------------------------------------------------------------------- */

struct script {
    const int32_t *truth; /* prompt + the plain continuation */
    int n_truth;
    int corrupt;          /* draft index to corrupt, cycling 0..cap (cap = no corruption); < 0: never */
    int n_steps;
    bool record;          /* record the drafter's own drafts instead of replacing them */
    int32_t seen[512][8];
    int seen_k[512], seen_pos[512];
};

static int32_t script_hook(void *user, int32_t P, int32_t anchor, int32_t *drafts, int32_t k, int32_t cap) {
    struct script *s = user;
    (void)anchor;
    if (s->record) {
        if (s->n_steps < 512) {
            memcpy(s->seen[s->n_steps], drafts, sizeof(int32_t) * (size_t)k);
            s->seen_k[s->n_steps] = k;
            s->seen_pos[s->n_steps] = P;
        }
        s->n_steps++;
        return k;
    }
    int32_t n = 0;
    for (; n < cap && P + 1 + n < s->n_truth; n++) drafts[n] = s->truth[P + 1 + n];
    if (s->corrupt >= 0) {
        const int c = s->corrupt % (cap + 1);
        if (c < n) drafts[c] = (drafts[c] + 1) % 280;
        s->corrupt++;
    }
    s->n_steps++;
    return n;
}

/* ---- the speculative side ------------------------------------------------------------------------ */

struct run_cfg {
    struct muse_sampler_params spp;
    int max, n_ctx;
    struct muse_spec_params params;
};

/* Generate through the loop, spec.c plugged in when there is a drafter (d may be NULL); checks the
 * position invariants after every step. Returns tokens generated, -1 on error. */
static int spec_generate(struct muse_model *m, struct muse_drafter *d, const int32_t *prompt, int n, const struct run_cfg *rc,
                         int32_t *out, struct muse_spec_stats *stats) {
    struct muse_context *ctx = new_ctx(m, rc->n_ctx);
    struct muse_session *ses = NULL;
    struct muse_gen *g = NULL;
    struct muse_spec *sp = NULL;
    struct muse_sampler *smp = NULL;
    struct muse_error err;
    int n_gen = -1;
    struct muse_session_params ps = {.n_checkpoints = 0};
    if (!ctx || muse_session_create(ctx, ps, &ses, &err) || muse_gen_create(ses, &g, &err) ||
        (d && muse_spec_create(g, d, rc->params, &sp, &err)) ||
        muse_sampler_create(rc->spp, muse_model_n_vocab(m), &smp, &err)) {
        fprintf(stderr, "spec setup: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < n; i++) muse_sampler_accept(smp, prompt[i]);
    if (muse_gen_eval(g, prompt, n, &err)) goto done;
    muse_gen_begin(g, smp);
    n_gen = 0;
    bool inv = true;
    while (n_gen < rc->max) {
        int32_t t;
        if (muse_gen_sample(g, &t, NULL, &err)) {
            n_gen = -1;
            break;
        }
        inv = inv && muse_gen_n_past(g) == n + n_gen;
        out[n_gen++] = t;
        if (muse_model_token_is_stop(m, t) || n_gen == rc->max || muse_gen_n_past(g) >= rc->n_ctx) break;
        if (muse_gen_advance(g, t, rc->max - n_gen, &err)) {
            fprintf(stderr, "advance: %s\n", err.msg);
            n_gen = -1;
            break;
        }
        const struct muse_draft_ctx *dc = sp ? muse_spec_draft_ctx(sp) : NULL;
        if (dc) inv = inv && muse_draft_n_past(dc) + muse_spec_n_pending(sp) == muse_session_n_past(ses);
        inv = inv && muse_session_n_past(ses) == muse_context_n_past(ctx);
    }
    TEST_COND("positions: ring + pending == session, spec n_past == emitted", inv);
    if (stats && sp) *stats = muse_spec_stats(sp);
done:
    muse_spec_free(sp);
    muse_gen_free(g);
    muse_session_free(ses);
    muse_sampler_free(smp);
    muse_context_free(ctx);
    return n_gen;
}

static bool same(const int32_t *a, int na, const int32_t *b, int nb) { return na == nb && na >= 0 && !memcmp(a, b, sizeof *a * (size_t)na); }

static const int prompt_lens[] = {1, 9, 40, 150};
#define N_LENS (int)(sizeof prompt_lens / sizeof prompt_lens[0])

/* Greedy and sampled, every prompt length: spec == plain. Accumulates the stats. */
static void lossless(struct muse_model *m, struct muse_drafter *d, const char *what, struct muse_spec_params params,
                     struct muse_spec_stats *total) {
    int32_t prompt[256], a[MAX_GEN + 8], b[MAX_GEN + 8];
    struct muse_sampler_params samplers[4];
    samplers[0] = muse_sampler_default_params(); /* greedy */
    samplers[1] = muse_sampler_default_params();
    samplers[1].temperature = 0.8f, samplers[1].seed = 11;
    samplers[2] = samplers[1];
    samplers[2].temperature = 1.0f, samplers[2].top_k = 40, samplers[2].top_p = 0.95f, samplers[2].seed = 12345;
    samplers[3] = samplers[1];
    samplers[3].temperature = 0.6f, samplers[3].repeat_penalty = 1.3f, samplers[3].presence_penalty = 0.2f,
    samplers[3].repeat_last_n = 16, samplers[3].seed = 3;
    bool ok = true;
    const int n_samplers = getenv("MUSE_SANITIZER") || !strcmp(g_backend, "ref") ? 2 : 4;
    for (int si = 0; si < n_samplers; si++)
        for (int li = 0; li < N_LENS; li++) {
            make_prompt(prompt, prompt_lens[li], 1000u + (uint32_t)li * 77u);
            struct run_cfg rc = {.spp = samplers[si], .max = MAX_GEN, .n_ctx = N_CTX, .params = params};
            struct muse_spec_stats st = {0};
            const int na = plain_generate(m, prompt, prompt_lens[li], rc.spp, rc.max, rc.n_ctx, a);
            const int nb = spec_generate(m, d, prompt, prompt_lens[li], &rc, b, &st);
            if (!same(a, na, b, nb)) {
                ok = false;
                fprintf(stderr, "%s: sampler %d, prompt %d tokens: plain %d tokens, speculative %d differ\n", what, si,
                        prompt_lens[li], na, nb);
            }
            if (si != 0) continue; /* acceptance is counted on greedy text (sampled text leaves the cycles) */
            total->n_steps_spec += st.n_steps_spec;
            total->n_drafted += st.n_drafted;
            total->n_accepted += st.n_accepted;
            total->n_emitted_spec += st.n_emitted_spec;
            total->n_steps_plain += st.n_steps_plain;
        }
    TEST_CONDF(ok, "%s: speculative output == plain output (greedy and sampled, every prompt)", what);
    printf("%-44s greedy: %4llu verify steps, %5llu drafted, %5llu accepted, %.2f tokens/step, %llu plain steps\n", what,
           (unsigned long long)total->n_steps_spec, (unsigned long long)total->n_drafted, (unsigned long long)total->n_accepted,
           total->n_steps_spec ? (double)total->n_emitted_spec / (double)total->n_steps_spec : 0.0,
           (unsigned long long)total->n_steps_plain);
}

/* No governor, full blocks (7 drafts: the default is llama.cpp's 3) */
static struct muse_spec_params no_gov(void) {
    struct muse_spec_params p = muse_spec_default_params();
    p.governor = false;
    p.n_max = 7;
    return p;
}

static void test_drafters(struct muse_model *m, struct muse_drafter *copier, struct muse_drafter *randd, const char *tag) {
    char what[128];
    struct muse_spec_stats s;

    memset(&s, 0, sizeof s);
    snprintf(what, sizeof what, "%s copier, adaptive floor", tag);
    lossless(m, copier, what, no_gov(), &s);
    TEST_CONDF(s.n_steps_spec > 30 && s.n_accepted * 3 > s.n_drafted, "%s: drafts are accepted (%llu of %llu)", what,
               (unsigned long long)s.n_accepted, (unsigned long long)s.n_drafted);
    TEST_CONDF(s.n_emitted_spec > 2 * s.n_steps_spec, "%s: more than 2 tokens per verify step (%llu in %llu)", what,
               (unsigned long long)s.n_emitted_spec, (unsigned long long)s.n_steps_spec);

    struct muse_spec_params p = no_gov();
    p.p_min = 0.0f; /* llama.cpp's gate at 0: every draft verified */
    p.lazy_head = false;
    memset(&s, 0, sizeof s);
    snprintf(what, sizeof what, "%s copier, p_min 0, no lazy head", tag);
    lossless(m, copier, what, p, &s);

    p.n_max = 3; /* a narrower block (llama.cpp's default n_max) */
    p.p_min = 0.5f;
    memset(&s, 0, sizeof s);
    snprintf(what, sizeof what, "%s copier, n_max 3, p_min 0.5", tag);
    lossless(m, copier, what, p, &s);
    TEST_CONDF(s.n_drafted <= 3 * s.n_steps_spec, "%s: at most n_max drafts per step", what);

    memset(&s, 0, sizeof s);
    snprintf(what, sizeof what, "%s random drafter", tag);
    p = no_gov();
    p.p_min = 0.0f;
    lossless(m, randd, what, p, &s);
    TEST_CONDF(s.n_accepted * 10 < s.n_drafted, "%s: few drafts accepted (%llu of %llu)", what,
               (unsigned long long)s.n_accepted, (unsigned long long)s.n_drafted);

    memset(&s, 0, sizeof s);
    snprintf(what, sizeof what, "%s defaults (governor, n_max 3)", tag);
    lossless(m, copier, what, muse_spec_default_params(), &s);
    TEST_CONDF(s.n_drafted <= 3 * s.n_steps_spec, "%s: at most 3 drafts per step", what);
}

/* Scripted drafts: the true continuation, corrupted at draft i (i cycling over 0..cap per step). */
static void test_scripted(struct muse_model *m, struct muse_drafter *d, bool sampled) {
    int32_t prompt[64], truth[64 + MAX_GEN + 8], b[MAX_GEN + 8];
    struct muse_sampler_params spp = muse_sampler_default_params();
    if (sampled) spp.temperature = 0.9f, spp.seed = 77;
    bool ok = true;
    int positions_rejected[8] = {0};
    for (int len = 5; len <= 45; len += 20) {
        make_prompt(prompt, len, 31u * (uint32_t)len);
        const int na = plain_generate(m, prompt, len, spp, MAX_GEN, N_CTX, truth + len);
        memcpy(truth, prompt, sizeof(int32_t) * (size_t)len);
        for (int start = 0; start < 9; start++) {
            struct script sc = {.truth = truth, .n_truth = len + na, .corrupt = start};
            struct run_cfg rc = {.spp = spp, .max = MAX_GEN, .n_ctx = N_CTX, .params = no_gov()};
            rc.params.hook = script_hook;
            rc.params.hook_user = &sc;
            struct muse_spec_stats st;
            const int nb = spec_generate(m, d, prompt, len, &rc, b, &st);
            ok = ok && same(truth + len, na, b, nb);
            if (st.n_steps_spec) positions_rejected[start % 8]++;
        }
    }
    TEST_CONDF(ok, "scripted drafts (%s): a rejection at every draft position, and full blocks: output == plain",
               sampled ? "sampled" : "greedy");
}

/* A stop token inside an accepted run ends the output there; max tokens and the context end cut
 * inside accepted runs exactly where plain decoding stops. */
static void test_cuts(struct muse_model *stop_model, struct muse_drafter *stop_copier, struct muse_model *m, struct muse_drafter *d) {
    int32_t prompt[64], a[MAX_GEN + 8], b[MAX_GEN + 8];
    /* the stop model's greedy text reaches EOS on prompts ending in its first cycle */
    int found = 0;
    for (int seed = 0; seed < 40 && found < 6; seed++) {
        make_prompt(prompt, 30, 500u + (uint32_t)seed);
        prompt[29] = seed % 5; /* in the first cycle, which ends with EOS */
        struct run_cfg rc = {.spp = muse_sampler_default_params(), .max = MAX_GEN, .n_ctx = N_CTX, .params = no_gov()};
        rc.params.p_min = 0.0f;
        const int na = plain_generate(stop_model, prompt, 30, rc.spp, rc.max, rc.n_ctx, a);
        if (na <= 0 || !muse_model_token_is_stop(stop_model, a[na - 1])) continue;
        struct muse_spec_stats st;
        const int nb = spec_generate(stop_model, stop_copier, prompt, 30, &rc, b, &st);
        TEST_CONDF(same(a, na, b, nb), "a stop token in an accepted run: output ends there (plain %d, spec %d)", na, nb);
        found++;
    }
    TEST_CONDF(found >= 3, "the stop-in-cycle model reaches EOS (%d prompts)", found);
    /* a scripted run whose EOS is an accepted draft: the stop cut happens inside the accepted run */
    bool inside = false;
    for (int seed = 0; seed < 40 && !inside; seed++) {
        make_prompt(prompt, 30, 500u + (uint32_t)seed);
        prompt[29] = seed % 5;
        int32_t truth[128];
        const int na = plain_generate(stop_model, prompt, 30, muse_sampler_default_params(), MAX_GEN, N_CTX, truth + 30);
        if (na < 3 || !muse_model_token_is_stop(stop_model, truth[30 + na - 1])) continue;
        memcpy(truth, prompt, sizeof prompt[0] * 30);
        struct script sc = {.truth = truth, .n_truth = 30 + na, .corrupt = -1};
        struct run_cfg rc = {.spp = muse_sampler_default_params(), .max = MAX_GEN, .n_ctx = N_CTX, .params = no_gov()};
        rc.params.hook = script_hook;
        rc.params.hook_user = &sc;
        struct muse_spec_stats st;
        const int nb = spec_generate(stop_model, stop_copier, prompt, 30, &rc, b, &st);
        inside = same(truth + 30, na, b, nb) && st.n_accepted >= (uint64_t)na - 1 && st.n_steps_spec <= (uint64_t)(na + 6) / 7 + 1;
    }
    TEST_COND("EOS as an accepted draft ends the output at it", inside);
    /* max tokens at every value 1..20 and the context end, inside accepted runs */
    bool ok = true;
    make_prompt(prompt, 12, 4242);
    for (int max = 1; max <= 20; max++) {
        struct run_cfg rc = {.spp = muse_sampler_default_params(), .max = max, .n_ctx = N_CTX, .params = no_gov()};
        const int na = plain_generate(m, prompt, 12, rc.spp, max, N_CTX, a);
        const int nb = spec_generate(m, d, prompt, 12, &rc, b, NULL);
        ok = ok && same(a, na, b, nb) && na == max;
    }
    TEST_COND("max tokens 1..20: cut exactly there", ok);
    ok = true;
    for (int n_ctx = 13; n_ctx <= 40; n_ctx += 3) {
        struct run_cfg rc = {.spp = muse_sampler_default_params(), .max = MAX_GEN, .n_ctx = n_ctx, .params = no_gov()};
        const int na = plain_generate(m, prompt, 12, rc.spp, MAX_GEN, n_ctx, a);
        const int nb = spec_generate(m, d, prompt, 12, &rc, b, NULL);
        ok = ok && same(a, na, b, nb) && na == n_ctx - 12 + 1;
    }
    TEST_COND("the context end: cut exactly where plain decoding stops", ok);
}

/* A conversation through one engine: reuse, rollback, checkpoints. The drafter's drafts after each
 * reuse equal those of a cold engine on the same prompt (the ring was rolled back or restored
 * exactly), and the output equals plain decoding; a ring that cannot follow restarts (output still
 * plain's). */
static int converse_turn(struct muse_gen *g, struct muse_model *m, const int32_t *prompt, int n, int max, int32_t *out,
                         struct muse_session_keep *keep) {
    struct muse_error err;
    struct muse_sampler *smp = NULL;
    if (muse_sampler_create(muse_sampler_default_params(), muse_model_n_vocab(m), &smp, &err)) return -1;
    *keep = muse_gen_reuse(g, prompt, n);
    int n_gen = -1;
    if (muse_gen_eval(g, prompt + keep->n_kept, n - keep->n_kept, &err) || muse_gen_checkpoint(g, &err)) goto done;
    muse_gen_begin(g, smp);
    n_gen = 0;
    while (n_gen < max) {
        int32_t t;
        if (muse_gen_sample(g, &t, NULL, &err)) break;
        out[n_gen++] = t;
        if (n_gen == max || muse_gen_advance(g, t, max - n_gen, &err)) break;
    }
done:
    muse_sampler_free(smp);
    return n_gen;
}

/* One engine (warm) and, per turn, a fresh one on the same prompt (cold): outputs equal, and the
 * drafts equal too unless the ring had to restart. swa_full: the target can roll back anywhere in
 * place, the drafter's ring cannot (a restart). */
struct conv {
    struct muse_model *m;
    struct muse_drafter *d;
    struct muse_context *ctx;
    struct muse_session *ses;
    struct muse_gen *g;
    struct muse_spec *sp;
    struct muse_spec_params p;
    struct script warm, cold;
    int swa_full;
};

static struct muse_context *conv_ctx(struct conv *c) {
    struct muse_context_params cp = muse_context_default_params();
    cp.n_batch = N_BATCH;
    cp.n_ctx = N_CTX;
    cp.backend = g_backend;
    cp.n_threads = getenv("MUSE_SANITIZER") ? 1 : g_threads;
    cp.swa_full = c->swa_full;
    struct muse_context *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(c->m, cp, &ctx, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return ctx;
}

/* A turn: prompt conv[0..n), max generated; checks warm == cold. Returns tokens generated. */
static int conv_turn(struct conv *c, const int32_t *conv, int n, int max, int32_t *out, enum muse_session_keep_kind *kind,
                     const char *what) {
    struct muse_error err;
    struct muse_session_keep keep;
    c->warm.n_steps = 0;
    const int ng = converse_turn(c->g, c->m, conv, n, max, out, &keep);
    *kind = keep.kind;
    struct muse_context *c2 = conv_ctx(c);
    struct muse_session *s2 = NULL;
    struct muse_gen *g2 = NULL;
    struct muse_spec *sp2 = NULL;
    struct muse_spec_params p2 = c->p;
    p2.hook_user = &c->cold;
    c->cold.n_steps = 0;
    int32_t ref[128];
    int nr = -1;
    struct muse_session_keep k2;
    if (c2 && !muse_session_create(c2, muse_session_default_params(), &s2, &err) && !muse_gen_create(s2, &g2, &err) &&
        !muse_spec_create(g2, c->d, p2, &sp2, &err))
        nr = converse_turn(g2, c->m, conv, n, max, ref, &k2);
    bool same_drafts = c->warm.n_steps == c->cold.n_steps;
    for (int i = 0; same_drafts && i < c->warm.n_steps && i < 512; i++)
        same_drafts = c->warm.seen_k[i] == c->cold.seen_k[i] && c->warm.seen_pos[i] == c->cold.seen_pos[i] &&
                      !memcmp(c->warm.seen[i], c->cold.seen[i], sizeof(int32_t) * (size_t)c->warm.seen_k[i]);
    TEST_CONDF(same(out, ng, ref, nr) && ng == max, "%s: output == a cold engine's (%d, %d tokens)", what, ng, nr);
    if (strstr(what, "restart")) TEST_CONDF(!same_drafts, "%s: a restarted ring drafts differently at first", what);
    else TEST_CONDF(same_drafts && c->warm.n_steps > 3, "%s: drafts == a cold engine's (%d steps)", what, c->warm.n_steps);
    muse_spec_free(sp2);
    muse_gen_free(g2);
    muse_session_free(s2);
    muse_context_free(c2);
    return ng;
}

static void test_reuse(struct muse_model *m, struct muse_drafter *d) {
    struct muse_error err;
    struct conv c = {.m = m, .d = d, .warm = {.record = true}, .cold = {.record = true}};
    c.p = no_gov();
    c.p.p_min = 0.0f;
    c.p.lazy_head = false;
    c.p.hook = script_hook;
    c.p.hook_user = &c.warm;
    int32_t conv[N_CTX], out[128];
    enum muse_session_keep_kind kind;
    for (int variant = 0; variant < 2; variant++) {
        c.swa_full = variant;
        c.ctx = conv_ctx(&c);
        if (!c.ctx || muse_session_create(c.ctx, muse_session_default_params(), &c.ses, &err) ||
            muse_gen_create(c.ses, &c.g, &err) || muse_spec_create(c.g, d, c.p, &c.sp, &err)) {
            TEST_COND("reuse setup", false);
            goto next;
        }
        make_prompt(conv, 40, 9);
        int n = 40, ng = conv_turn(&c, conv, n, 24, out, &kind, "turn 1");
        if (variant == 0) {
            /* the answer minus its last 10 tokens + 5 new: an in-place rollback of 10 */
            memcpy(conv + n, out, sizeof(int32_t) * 14), n += 14;
            make_prompt(conv + n, 5, 77), n += 5;
            ng = conv_turn(&c, conv, n, 60, out, &kind, "rollback in place");
            TEST_COND("rollback in place: the session truncated", kind == MUSE_SESSION_KEEP_TRUNCATED);
            /* 2 tokens of a 60-token answer: deeper than both rings; the target restores its checkpoint at
             * the prompt's end, the ring its copy saved there */
            const uint64_t restored = muse_spec_stats(c.sp).n_ring_restored;
            memcpy(conv + n, out, sizeof(int32_t) * 2), n += 2;
            make_prompt(conv + n, 6, 78), n += 6;
            ng = conv_turn(&c, conv, n, 24, out, &kind, "rollback from a checkpoint");
            TEST_COND("the session restored its checkpoint", kind == MUSE_SESSION_KEEP_RESTORED);
            TEST_COND("the ring restored its copy", muse_spec_stats(c.sp).n_ring_restored == restored + 1);
            /* far below every checkpoint: both start over */
            n -= 40;
            make_prompt(conv + n, 3, 79), n += 3;
            ng = conv_turn(&c, conv, n, 24, out, &kind, "rollback to 0");
            TEST_COND("the session cleared", kind == MUSE_SESSION_KEEP_CLEARED);
        } else {
            /* the target keeps everything (swa_full): a rollback of 50 in place, which the ring cannot follow */
            memcpy(conv + n, out, sizeof(int32_t) * 24), n += 24;
            ng = conv_turn(&c, conv, n, 60, out, &kind, "a long answer");
            const uint64_t restarts = muse_spec_stats(c.sp).n_ring_restarts;
            make_prompt(conv + n + 2, 4, 80);
            memcpy(conv + n, out, sizeof(int32_t) * 2), n += 6;
            ng = conv_turn(&c, conv, n, 24, out, &kind, "rollback the ring cannot follow: a restart");
            TEST_COND("the ring restarted", muse_spec_stats(c.sp).n_ring_restarts == restarts + 1 && kind == MUSE_SESSION_KEEP_TRUNCATED);
        }
        (void)ng;
    next:
        muse_spec_free(c.sp);
        muse_gen_free(c.g);
        muse_session_free(c.ses);
        muse_context_free(c.ctx);
        c.sp = NULL, c.g = NULL, c.ses = NULL, c.ctx = NULL;
    }
}

/* A ring that restarts mid-text (nothing below the floor): drafts attend only to what follows; the
 * output is still plain's; the floor refuses a rollback below it. */
static void test_restart(struct muse_model *m, struct muse_drafter *d) {
    struct muse_error err;
    struct muse_context *ctx = new_ctx(m, N_CTX);
    struct muse_draft_ctx *dc = NULL;
    if (!ctx || muse_draft_ctx_create(d, ctx, muse_draft_ctx_default_params(), &dc, &err)) {
        TEST_COND("restart setup", false);
        muse_context_free(ctx);
        return;
    }
    int32_t prompt[40];
    make_prompt(prompt, 40, 5);
    TEST_COND("eval", muse_eval(ctx, prompt, 20, NULL, 0, &err) == MUSE_OK);
    muse_draft_restart(dc, 20);
    TEST_COND("eval after a restart", muse_draft_eval(dc, prompt + 20, 10, NULL, 0, NULL, &err) == MUSE_OK);
    struct muse_draft_block b;
    TEST_COND("a draft over a restarted ring", muse_draft_block(dc, prompt[30], 0, &b, &err) == MUSE_OK);
    TEST_COND("no rollback below the floor", muse_draft_truncate(dc, 19, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("a rollback above it", muse_draft_truncate(dc, 25, &err) == MUSE_OK);
    muse_draft_ctx_free(dc);
    muse_context_free(ctx);
}

/* The governor inside the loop, on a clock that charges a scripted cost per kind of step (the
 * engine reads it before and after each step; the step's kind shows in the stats by then). */
struct cost_clock {
    struct muse_spec **sp;
    uint64_t seen_spec, seen_plain, seen_shadow;
    int64_t now, spec_cost, plain_cost, shadow_cost; /* a shadow step: plain_cost + shadow_cost */
};

static int64_t cost_now(void *user) {
    struct cost_clock *c = user;
    if (!*c->sp) return c->now;
    const struct muse_spec_stats st = muse_spec_stats(*c->sp);
    if (st.n_steps_spec + st.n_steps_gated > c->seen_spec) c->now += c->spec_cost;
    else if (st.n_steps_shadow > c->seen_shadow) c->now += c->plain_cost + c->shadow_cost;
    else if (st.n_steps_plain > c->seen_plain) c->now += c->plain_cost;
    c->seen_spec = st.n_steps_spec + st.n_steps_gated;
    c->seen_plain = st.n_steps_plain;
    c->seen_shadow = st.n_steps_shadow;
    return c->now;
}

static void governed(struct muse_model *m, struct muse_drafter *d, int64_t spec_cost, int n, bool shadow,
                     struct muse_spec_stats *st, uint64_t *parked, int64_t *time) {
    struct muse_error err;
    struct muse_context *ctx = new_ctx(m, N_CTX);
    struct muse_session *ses = NULL;
    struct muse_gen *g = NULL;
    struct muse_spec *sp = NULL;
    struct muse_sampler *smp = NULL;
    struct cost_clock cc = {.sp = &sp, .spec_cost = spec_cost, .plain_cost = 1000000, .shadow_cost = 500000};
    struct muse_spec_params p = muse_spec_default_params();
    p.n_max = 7;
    p.clock = (struct muse_spec_clock){cost_now, &cc};
    p.shadow_probe = shadow;
    struct muse_session_params ps = {0};
    int32_t prompt[40];
    make_prompt(prompt, 20, 2024); /* then 20 tokens of its greedy text: the copier has history from the start */
    plain_generate(m, prompt, 20, muse_sampler_default_params(), 20, N_CTX, prompt + 20);
    memset(st, 0, sizeof *st);
    if (!ctx || muse_session_create(ctx, ps, &ses, &err) || muse_gen_create(ses, &g, &err) ||
        muse_spec_create(g, d, p, &sp, &err) ||
        muse_sampler_create(muse_sampler_default_params(), muse_model_n_vocab(m), &smp, &err) ||
        muse_gen_eval(g, prompt, 40, &err)) {
        TEST_COND("governed setup", false);
        goto done;
    }
    muse_gen_begin(g, smp);
    for (int i = 0; i < n; i++) {
        int32_t t;
        if (muse_gen_sample(g, &t, NULL, &err) || (i + 1 < n && muse_gen_advance(g, t, n - i - 1, &err))) break;
    }
    *st = muse_spec_stats(sp);
    *parked = muse_spec_governor(sp)->n_parked_steps;
    *time = cc.now;
done:
    muse_sampler_free(smp);
    muse_spec_free(sp);
    muse_gen_free(g);
    muse_session_free(ses);
    muse_context_free(ctx);
}

static void test_governed(struct muse_model *m, struct muse_drafter *copier, struct muse_drafter *randd) {
    struct muse_spec_stats st;
    uint64_t parked;
    int64_t time;
    /* a drafter that never pays: a speculative step costs 3 plain ones and emits about 1 token;
     * first without the shadow drafts (the model card's probes and the early loss) */
    governed(m, randd, 3000000, 200, false, &st, &parked, &time);
    const uint64_t spec = st.n_steps_spec + st.n_steps_gated;
    const int64_t time_verified = time;
    TEST_CONDF(parked >= 16 + 32 + 64 && spec <= 45 && st.n_steps_shadow == 0,
               "a losing drafter is parked (%llu parked, %llu speculative steps)", (unsigned long long)parked,
               (unsigned long long)spec);
    /* with them (default): found out mostly by shadow drafts (a first draft checked against the
     * emitted token, half a plain step here) rather than verify steps */
    governed(m, randd, 3000000, 200, true, &st, &parked, &time);
    const uint64_t spec2 = st.n_steps_spec + st.n_steps_gated;
    TEST_CONDF(st.n_steps_shadow >= 12 && spec2 < spec && time < time_verified && parked >= 16 + 32 + 64,
               "with shadow drafts: fewer verify steps, less time (%llu shadow, %llu vs %llu speculative, %.1f vs %.1f of 199 "
               "plain steps' time)",
               (unsigned long long)st.n_steps_shadow, (unsigned long long)spec2, (unsigned long long)spec, (double)time / 1e6,
               (double)time_verified / 1e6);
    /* the copier pays: a speculative step costs 2 plain ones and emits ~4 tokens */
    governed(m, copier, 2000000, 200, true, &st, &parked, &time);
    TEST_CONDF(parked == 0 && st.n_steps_spec > st.n_steps_plain, "a paying drafter is not parked (%llu parked, %llu spec, %llu plain)",
               (unsigned long long)parked, (unsigned long long)st.n_steps_spec, (unsigned long long)st.n_steps_plain);
    TEST_CONDF(time < 199 * 1000000LL / 2, "and the scripted time is under half of plain's (%.1f of 199 steps)", (double)time / 1e6);
}

/* Errors: a sample with nothing to sample from, an advance with a token that was not sampled; with
 * and without a drafter (d NULL). */
static void test_misuse(struct muse_model *m, struct muse_drafter *d) {
    struct muse_error err;
    struct muse_context *ctx = new_ctx(m, N_CTX);
    struct muse_session *ses = NULL;
    struct muse_gen *g = NULL;
    struct muse_spec *sp = NULL;
    struct muse_sampler *smp = NULL;
    if (!ctx || muse_session_create(ctx, muse_session_default_params(), &ses, &err) || muse_gen_create(ses, &g, &err) ||
        (d && muse_spec_create(g, d, muse_spec_default_params(), &sp, &err)) ||
        muse_sampler_create(muse_sampler_default_params(), muse_model_n_vocab(m), &smp, &err)) {
        TEST_COND("misuse setup", false);
        goto done;
    }
    int32_t t, prompt[4] = {1, 2, 3, 4};
    muse_gen_begin(g, smp);
    TEST_COND("sample before any eval", muse_gen_sample(g, &t, NULL, &err) == MUSE_ERR_INTERNAL);
    TEST_COND("eval", muse_gen_eval(g, prompt, 4, &err) == MUSE_OK);
    TEST_COND("sample", muse_gen_sample(g, &t, NULL, &err) == MUSE_OK);
    TEST_COND("advance with another token", muse_gen_advance(g, t + 1, 10, &err) == MUSE_ERR_INVALID_ARG);
    TEST_COND("advance", muse_gen_advance(g, t, 10, &err) == MUSE_OK);
done:
    muse_sampler_free(smp);
    muse_spec_free(sp);
    muse_gen_free(g);
    muse_session_free(ses);
    muse_context_free(ctx);
}

int main(void) {
    /* Lossless is a property of the loop: compare it with plain decoding on the exact kernels. In the
     * fast mode a verify batch (4+ rows: flash attention, 32+: the tile GEMM) is not bit-identical to
     * single-row decode steps, so sampled outputs may part at a near-tie (docs/speculative.md). */
    char cpu_mode[64];
    snprintf(cpu_mode, sizeof cpu_mode, "%s%sexact", getenv("MUSE_CPU") ? getenv("MUSE_CPU") : "",
             getenv("MUSE_CPU") ? "," : "");
    setenv("MUSE_CPU", cpu_mode, 1);
    snprintf(dir, sizeof dir, "%s/muse-test-spec-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    mkdir(dir, 0700);
    char target[512], copier[512], randd[512], starget[512], scopier[512], srand[512];
    if (!make_files("noise0", 0.0f, false, target, copier, randd, sizeof target)) return 1;
    struct muse_error err;
    struct muse_model *m = NULL, *m2 = NULL, *ms = NULL;
    struct muse_drafter *dcopy = NULL, *drand = NULL, *dcopy2 = NULL, *drand2 = NULL, *dstop = NULL, *dstoprand = NULL;
    char t2[512], c2[512], r2[512];
    bool ok = make_files("noise45", 0.45f, false, t2, c2, r2, sizeof t2) && make_files("stop", 0.0f, true, starget, scopier, srand, sizeof starget);
    ok = ok && !muse_model_load(target, muse_model_default_params(), &m, &err) && !muse_model_load(t2, muse_model_default_params(), &m2, &err) &&
         !muse_model_load(starget, muse_model_default_params(), &ms, &err) &&
         !muse_drafter_load(copier, m, muse_drafter_default_params(), &dcopy, &err) &&
         !muse_drafter_load(randd, m, muse_drafter_default_params(), &drand, &err) &&
         !muse_drafter_load(c2, m2, muse_drafter_default_params(), &dcopy2, &err) &&
         !muse_drafter_load(r2, m2, muse_drafter_default_params(), &drand2, &err) &&
         !muse_drafter_load(scopier, ms, muse_drafter_default_params(), &dstop, &err) &&
         !muse_drafter_load(srand, ms, muse_drafter_default_params(), &dstoprand, &err);
    TEST_CONDF(ok, "load the pairs: %s", ok ? "" : err.msg);
    if (ok) {
        const char *backends[2] = {"cpu", "ref"};
        for (int bi = 0; bi < (getenv("MUSE_SANITIZER") ? 1 : 2); bi++) {
            g_backend = backends[bi];
            char tag[64];
            struct muse_spec_stats none = {0};
            snprintf(tag, sizeof tag, "%s the loop without a drafter", g_backend);
            lossless(m, NULL, tag, muse_spec_default_params(), &none);
            snprintf(tag, sizeof tag, "%s noise 0", g_backend);
            test_drafters(m, dcopy, drand, tag);
            g_threads = 1;
            snprintf(tag, sizeof tag, "%s noise 0.45", g_backend);
            test_drafters(m2, dcopy2, drand2, tag);
            test_scripted(m2, dcopy2, false);
            if (bi == 1) continue; /* the rest does not depend on the backend */
            test_scripted(m2, dcopy2, true);
            test_cuts(ms, dstop, m2, dcopy2);
            test_reuse(m2, dcopy2);
            test_restart(m2, dcopy2);
            test_misuse(m2, dcopy2);
            test_misuse(m2, NULL);
            test_governed(m, dcopy, drand);
        }
    }
    muse_drafter_free(dcopy);
    muse_drafter_free(drand);
    muse_drafter_free(dcopy2);
    muse_drafter_free(drand2);
    muse_drafter_free(dstop);
    muse_drafter_free(dstoprand);
    muse_model_free(m);
    muse_model_free(m2);
    muse_model_free(ms);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    return TEST_REPORT();
}
