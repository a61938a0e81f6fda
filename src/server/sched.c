/*
 * sched.c - slots, queue and the per-slot generation loop (the contract: sched.h).
 *
 * Ownership in brief: the scheduler owns its slots (each: the adapter slot, the token mirror, the
 * worker thread, the condition the worker sleeps on) and the queue's storage; it borrows the
 * adapter and the metrics. Jobs are shared by reference count (sched.h). The only state two
 * threads touch is the queue and the slots' `job` / `last_used` (under s->mu), a job's outputs
 * (under job->mu) and a job's cancel flag (atomic).
 */
#include "server/sched.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "core/utf8.h"
#include "text/output_parser.h"

#define PREFILL_CHUNK 256 /* tokens per eval call during prefill: cancellation is checked between */
#define MAX_PIECE 256

struct slot {
    struct muse_srv_sched *s;
    int idx;
    void *es;               /* the adapter's slot: used by this slot's worker only */
    int32_t *cache;         /* [n_ctx] token ids now in the adapter slot's KV cache: written by the worker
                               while it holds a job, read by submit only while the slot is idle */
    int n_cache;
    atomic_int n_live;      /* n_cache as the worker last set it: /slots reads it also while busy */
    struct muse_srv_job *job; /* assigned job, NULL when idle (under s->mu); the scheduler's reference */
    uint64_t last_used;     /* s->tick when its last job ended (under s->mu): least recently used wins ties */
    pthread_t th;
    bool th_started;        /* th was created and must be joined */
    pthread_cond_t cv;      /* the worker waits here (with s->mu) for a job or for stopping */
};

struct muse_srv_sched {
    const struct muse_srv_adapter *ad; /* borrowed */
    struct muse_srv_adapter_info info; /* read once at creation: immutable afterwards, read without a lock */
    struct muse_srv_metrics *metrics;  /* borrowed, may be NULL; has its own lock */
    pthread_mutex_t mu;                /* guards everything below that changes, and each slot's job/last_used */
    struct slot *slots; /* [n_slots]; the array itself never changes after creation */
    int n_slots;
    struct muse_srv_job **queue; /* ring [q_cap] of waiting jobs, each holding the scheduler's reference */
    int q_head, q_len, q_cap; /* q_cap = storage (>= 1) */
    int q_limit;              /* most jobs allowed to wait (--queue) */
    bool stopping;            /* no new jobs; workers exit once their job is done */
    bool joined;              /* muse_srv_sched_stop ran (it joins once) */
    uint64_t tick;            /* counts finished jobs: the clock of last_used */
};

/* ---- jobs ---- */

struct muse_srv_job *muse_srv_job_new(void) {
    struct muse_srv_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    pthread_mutex_init(&job->mu, NULL);
    pthread_cond_init(&job->cv, NULL);
    job->n_predict = -1;
    job->slot = -1;
    job->sp = muse_sampler_default_params();
    atomic_init(&job->cancel, false);
    atomic_init(&job->refs, 1);
    return job;
}

void muse_srv_job_release(struct muse_srv_job *job) {
    if (!job || atomic_fetch_sub(&job->refs, 1) != 1) return;
    free(job->prompt);
    if (job->media && job->media_free) job->media_free(job->media_self, job->media);
    for (int i = 0; i < job->n_stops; i++) free(job->stops[i]);
    free(job->stops);
    cJSON_Delete(job->tools);
    muse_grammar_free(job->grammar);
    muse_grammar_free(job->grammar_whole);
    free(job->schema);
    muse_srv_buf_free(&job->content);
    muse_srv_buf_free(&job->reasoning);
    for (int i = 0; i < job->n_calls; i++) {
        free(job->calls[i].name);
        free(job->calls[i].arguments);
    }
    free(job->calls);
    free(job->out_toks);
    free(job->probs);
    free(job->out_raw_end);
    free(job->answer);
    pthread_mutex_destroy(&job->mu);
    pthread_cond_destroy(&job->cv);
    free(job);
}

void muse_srv_job_cancel(struct muse_srv_job *job) { atomic_store(&job->cancel, true); }

/*
 * Arm the job's grammar on the slot. Chat (grammar_lazy): armed at the Muse-Glimmer answer header
 * (`to=user<|message|>`, or a headerless `<|start|>assistant<|message|>`), so reasoning stays free;
 * the seed is the end of the prompt (the generation prompt may already hold the header). A JSON
 * schema's chat constrains the whole answer instead (grammar_whole), so that a model that never
 * writes the header still answers with the JSON.
 */
static muse_status constrain(const struct muse_srv_adapter *ad, void *slot, const struct muse_srv_job *job,
                             struct muse_error *err) {
    static const char *const triggers[] = {"to=user<|message|>", "<|start|>assistant<|message|>", NULL};
    if (!ad->ops->slot_constrain)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "this server cannot constrain its output (no model)");
    char seed[256];
    size_t n = 0;
    int first = job->n_prompt > 8 ? job->n_prompt - 8 : 0;
    for (int i = first; i < job->n_prompt; i++) {
        char piece[64];
        int np = ad->ops->token_piece(ad->self, job->prompt[i], piece, sizeof piece);
        if (np < 0 || np > (int)sizeof piece) np = 0;
        if (n + (size_t)np >= sizeof seed) break;
        memcpy(seed + n, piece, (size_t)np);
        n += (size_t)np;
    }
    seed[n] = 0;
    if (job->grammar_lazy && job->grammar_whole) { /* the whole answer unless the prompt holds its header */
        bool header = false;
        for (int i = 0; triggers[i]; i++) {
            const size_t k = strlen(triggers[i]);
            header |= n >= k && !memcmp(seed + n - k, triggers[i], k);
        }
        if (!header) return ad->ops->slot_constrain(slot, job->grammar_whole, NULL, seed, err);
    }
    return ad->ops->slot_constrain(slot, job->grammar, job->grammar_lazy ? triggers : NULL, seed, err);
}

/*
 * End a job once (later calls only wake readers again): record why and when, set done and wake
 * every reader. The timestamps a job never reached (it was cancelled in the queue, or failed
 * before its prefill ended) are set to the end, so durations are never negative.
 */
static void job_notify(struct muse_srv_job *job, bool done) {
    if (job->notify) job->notify(job->notify_ud, job, done);
}

static void job_finish(struct muse_srv_job *job, enum muse_srv_finish f, const char *err) {
    pthread_mutex_lock(&job->mu);
    if (!job->done) {
        job->finish = f;
        if (err) snprintf(job->err, sizeof job->err, "%s", err);
        job->t_end_us = muse_time_us();
        if (!job->t_start_us) job->t_start_us = job->t_end_us;
        if (!job->t_prefill_end_us) job->t_prefill_end_us = job->t_end_us;
        job->done = true;
    }
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&job->mu);
    job_notify(job, true);
}

/*
 * ---- the generation loop's text pipeline ----
 * Token pieces -> complete UTF-8 (utf8_drain) -> stop-string search (text_advance) -> the output
 * parser (chat: reasoning / content / tool calls) or the content verbatim (raw completions). Text
 * that may be the start of a stop string is held back until it is decided; a stop string ends the
 * job and never reaches the client. All of it runs on the worker, with job->mu held while the job's
 * outputs change; `struct gen` itself is the worker's own.
 */

struct gen {
    struct muse_srv_job *job;
    struct muse_output_parser *parser; /* chat: the library's output parser; NULL: raw text */
    struct muse_srv_buf utf8; /* piece bytes not yet forming complete UTF-8 */
    struct muse_srv_buf raw;  /* valid UTF-8 generated text */
    size_t fed;               /* raw[0..fed) went to the parser (or to content when raw) */
    size_t feed_end;          /* the end of what the parser is being fed (deltas lie before it) */
    size_t seek;              /* where the next delta is looked for in raw (chat logprobs) */
    bool finished;            /* the parser saw its end */
    bool stopped_by_word;
};

static void add_tool_call(struct muse_srv_job *job, const char *id, const char *name, const char *args) {
    if (job->n_calls == job->cap_calls) {
        int cap = job->cap_calls ? job->cap_calls * 2 : 4;
        struct muse_srv_tool_call *c = realloc(job->calls, (size_t)cap * sizeof *c);
        if (!c) return;
        job->calls = c;
        job->cap_calls = cap;
    }
    struct muse_srv_tool_call *c = &job->calls[job->n_calls];
    c->name = strdup(name);
    c->arguments = strdup(args);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return;
    }
    snprintf(c->id, sizeof c->id, "%s", id);
    job->n_calls++;
}

/* Where a reasoning or content delta lies in the generated text, for the chat logprobs: deltas
 * are the text's own bytes, in order, so each is found after the previous one; an answer delta
 * adds its range to job->answer. Everything before a delta is decided. */
static void place_delta(struct gen *g, const struct muse_output_event *ev) {
    struct muse_srv_job *job = g->job;
    if (!job->out_raw_end || !ev->len || g->seek >= g->feed_end) return;
    const char *r = muse_srv_buf_str(&g->raw);
    const char *at = memmem(r + g->seek, g->feed_end - g->seek, ev->text, ev->len);
    if (!at) return; /* not verbatim: the tokens stay undecided until the end */
    const int lo = (int)(at - r), hi = lo + (int)ev->len;
    if (ev->kind == MUSE_OUTPUT_CONTENT) {
        if (job->n_answer && job->answer[job->n_answer - 1].hi == lo) {
            job->answer[job->n_answer - 1].hi = hi;
        } else {
            if (job->n_answer == job->cap_answer) {
                const int cap = job->cap_answer ? 2 * job->cap_answer : 4;
                struct muse_srv_span *a = realloc(job->answer, sizeof *a * (size_t)cap);
                if (!a) return;
                job->answer = a;
                job->cap_answer = cap;
            }
            job->answer[job->n_answer++] = (struct muse_srv_span){lo, hi};
        }
    }
    g->seek = (size_t)hi;
    job->raw_decided = hi;
}

/* Output parser events: called with job->mu held by the worker. */
static void on_output(void *ud, const struct muse_output_event *ev) {
    struct gen *g = ud;
    struct muse_srv_job *job = g->job;
    if (ev->kind != MUSE_OUTPUT_TOOL_CALL) place_delta(g, ev);
    switch (ev->kind) {
    case MUSE_OUTPUT_REASONING: muse_srv_buf_append(&job->reasoning, ev->text, ev->len); break;
    case MUSE_OUTPUT_CONTENT: muse_srv_buf_append(&job->content, ev->text, ev->len); break;
    case MUSE_OUTPUT_TOOL_CALL: add_tool_call(job, ev->id, ev->name, ev->arguments); break;
    }
}

/*
 * Move complete UTF-8 from g->utf8 to g->raw, each byte outside a well-formed character becoming
 * U+FFFD (core/utf8.h: no overlong forms, surrogates or code points above U+10FFFF, which clients'
 * decoders refuse); a character still incomplete at the end waits for the next piece unless flush.
 */
static void utf8_drain(struct gen *g, bool flush) {
    const uint8_t *p = (const uint8_t *)g->utf8.p;
    size_t n = g->utf8.len, i = 0;
    while (i < n) {
        const int k = muse_utf8_seq(p + i, n - i);
        if (k == 0 && !flush) break; /* wait for the rest of the character */
        if (k > 0) {
            muse_srv_buf_append(&g->raw, (const char *)p + i, (size_t)k);
            i += (size_t)k;
        } else {
            muse_srv_buf_append(&g->raw, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    memmove(g->utf8.p, g->utf8.p + i, n - i);
    g->utf8.len = n - i;
}

/* Longest suffix of s[0..n) that is a proper prefix of stop. */
static size_t stop_partial(const char *s, size_t n, const char *stop) {
    size_t m = strlen(stop);
    size_t max = n < m ? n : m - 1;
    for (size_t k = max; k > 0; k--)
        if (!memcmp(s + n - k, stop, k)) return k;
    return 0;
}

/* Feed newly completed text to the parser, stopping at a stop string. Called with job->mu held. */
static void text_advance(struct gen *g, bool final) {
    struct muse_srv_job *job = g->job;
    const char *r = muse_srv_buf_str(&g->raw);
    size_t n = g->raw.len;
    size_t maxlen = 0;
    for (int i = 0; i < job->n_stops; i++) {
        size_t l = strlen(job->stops[i]);
        if (l > maxlen) maxlen = l;
    }
    size_t from = g->fed > maxlen ? g->fed - maxlen : 0;
    const char *hit = NULL;
    int hit_i = -1;
    for (int i = 0; i < job->n_stops; i++) {
        size_t l = strlen(job->stops[i]);
        for (size_t p = from; l && p + l <= n; p++) {
            if (hit && r + p >= hit) break;
            if (!memcmp(r + p, job->stops[i], l)) {
                hit = r + p;
                hit_i = i;
                break;
            }
        }
    }
    size_t safe = n;
    if (hit) {
        safe = (size_t)(hit - r);
        snprintf(job->stop_word, sizeof job->stop_word, "%s", job->stops[hit_i]);
        g->stopped_by_word = true;
    } else if (!final) {
        size_t hold = 0;
        for (int i = 0; i < job->n_stops; i++) {
            size_t h = stop_partial(r, n, job->stops[i]);
            if (h > hold) hold = h;
        }
        safe = n - hold;
    }
    if (safe > g->fed) {
        /* out of memory inside the parser loses text, never the request (the parser stays usable) */
        g->feed_end = safe;
        if (g->parser) (void)muse_output_parser_feed(g->parser, r + g->fed, safe - g->fed);
        else muse_srv_buf_append(&job->content, r + g->fed, safe - g->fed); /* raw completion: verbatim */
        g->fed = safe;
    }
    if ((final || hit) && g->parser && !g->finished) {
        g->feed_end = g->fed;
        (void)muse_output_parser_finish(g->parser); /* flushes held-back text (max_tokens, stop string) */
        g->finished = true;
        job->raw_decided = (int)g->raw.len; /* all of it: what is not the answer is not */
    }
}

/* Append a generated token (and its top-n_probs list) to the job's outputs; false when out of memory
 * (nothing appended). Called with job->mu held: the arrays may move. */
static bool record_token(struct muse_srv_job *job, int32_t tok, const struct muse_srv_prob *probs) {
    if (job->n_out == job->cap_out) {
        int cap = job->cap_out ? job->cap_out * 2 : 64;
        int32_t *t = realloc(job->out_toks, (size_t)cap * sizeof *t);
        if (!t) return false;
        job->out_toks = t;
        if (job->n_probs > 0) {
            struct muse_srv_prob *p = realloc(job->probs, (size_t)cap * (size_t)(job->n_probs + 1) * sizeof *p);
            if (!p) return false;
            job->probs = p;
        }
        if (job->n_probs > 0 && job->parse_channels) {
            int *e = realloc(job->out_raw_end, (size_t)cap * sizeof *e);
            if (!e) return false;
            job->out_raw_end = e;
        }
        job->cap_out = cap;
    }
    job->out_toks[job->n_out] = tok;
    if (job->n_probs > 0)
        memcpy(job->probs + (size_t)job->n_out * (size_t)(job->n_probs + 1), probs, (size_t)(job->n_probs + 1) * sizeof *probs);
    job->n_out++;
    return true;
}

/* The slot's mirror now holds n_cache tokens (published for /slots). */
static void set_n_cache(struct slot *sl, int n_cache) {
    sl->n_cache = n_cache;
    atomic_store(&sl->n_live, n_cache);
}

/* After an evaluation of toks[0..n) with status st: mirror them in the slot's cache, or on failure
 * drop the slot's cache (the request ends with an error; the next one starts cold). */
static muse_status mirror(struct slot *sl, muse_status st, const int32_t *toks, int n) {
    if (st != MUSE_OK) {
        set_n_cache(sl, sl->s->ad->ops->slot_keep(sl->es, 0).n_kept);
        return st;
    }
    memcpy(sl->cache + sl->n_cache, toks, (size_t)n * sizeof *toks);
    set_n_cache(sl, sl->n_cache + n);
    return MUSE_OK;
}

/* Evaluate toks in the slot and mirror them in its cache (mirror). */
static muse_status slot_eval(struct slot *sl, const int32_t *toks, int n, struct muse_error *err) {
    return mirror(sl, sl->s->ad->ops->slot_eval(sl->es, toks, n, err), toks, n);
}

/* slot_eval of the job's prompt positions from..from+n (through the adapter's media path when the
 * prompt has images: its ids there are the images' content-derived negative ids). */
static muse_status slot_eval_prompt(struct slot *sl, struct muse_srv_job *job, int from, int n, struct muse_error *err) {
    if (!job->media) return slot_eval(sl, job->prompt + from, n, err);
    return mirror(sl, sl->s->ad->ops->slot_eval_media(sl->es, job->media, from, n, err), job->prompt + from, n);
}

/*
 * Run one job on its slot, from the worker thread, with no lock held on entry. Returns how it ended
 * (cancelled, an error with its message in errbuf, or the loop's finish reason) without finishing
 * it: the worker marks the slot idle first, then calls job_finish, so a client that sends its next
 * request as soon as it has the answer finds this slot (and its cache) free. The slot's mirror
 * (sl->cache) tracks the adapter slot's cache throughout, so the next job's prefix match is right
 * even after an error.
 */
static enum muse_srv_finish run_job(struct slot *sl, struct muse_srv_job *job, char *errbuf, size_t cap) {
    struct muse_srv_sched *s = sl->s;
    const struct muse_srv_adapter *ad = s->ad;
    struct muse_error err = {0};
    struct gen g = {.job = job};
    struct muse_srv_prob *probs = NULL;
    enum muse_srv_finish fin = MUSE_SRV_FINISH_NONE;

    pthread_mutex_lock(&job->mu);
    job->started = true;
    job->slot = sl->idx;
    job->t_start_us = muse_time_us();
    pthread_mutex_unlock(&job->mu);
    if (atomic_load(&job->cancel)) {
        fin = MUSE_SRV_FINISH_CANCELLED;
        goto done;
    }
    if (job->n_prompt < 1 || job->n_prompt >= s->info.n_ctx) {
        fin = MUSE_SRV_FINISH_ERROR;
        snprintf(err.msg, sizeof err.msg, "prompt does not fit the context");
        goto done;
    }

    /* prompt cache: keep the common prefix (as far as the adapter can rewind: a sliding-window miss
     * may keep less, src/gen/session.h), evaluate the rest */
    struct muse_session_keep kept =
        ad->ops->slot_keep(sl->es, muse_session_reuse_len(sl->cache, sl->n_cache, job->prompt, job->n_prompt));
    set_n_cache(sl, kept.n_kept);
    if (s->metrics) muse_srv_metrics_keep(s->metrics, &kept);
    pthread_mutex_lock(&job->mu);
    job->n_cached = sl->n_cache;
    pthread_mutex_unlock(&job->mu);
    /* a paged KV pool: the whole prompt's cells now, or a clear error before any of it is evaluated */
    if (ad->ops->slot_reserve && ad->ops->slot_reserve(sl->es, job->n_prompt, &err) != MUSE_OK) {
        fin = MUSE_SRV_FINISH_ERROR;
        goto done;
    }
    for (int i = sl->n_cache; i < job->n_prompt; i += PREFILL_CHUNK) {
        if (atomic_load(&job->cancel)) {
            fin = MUSE_SRV_FINISH_CANCELLED;
            goto done;
        }
        int k = job->n_prompt - i < PREFILL_CHUNK ? job->n_prompt - i : PREFILL_CHUNK;
        if (slot_eval_prompt(sl, job, i, k, &err) != MUSE_OK) {
            fin = MUSE_SRV_FINISH_ERROR;
            goto done;
        }
    }
    pthread_mutex_lock(&job->mu);
    job->t_prefill_end_us = muse_time_us();
    pthread_mutex_unlock(&job->mu);

    if (job->parse_channels) {
        /* ids unique across the server's lifetime (and so across a conversation's turns) */
        char prefix[40];
        snprintf(prefix, sizeof prefix, "call_%016llx_", (unsigned long long)job->id);
        struct muse_output_parser_params pp = {.tools = job->tools,
                                               .no_tool_calls = job->no_tool_calls,
                                               .id_prefix = prefix,
                                               .callback = on_output,
                                               .user = &g};
        if (muse_output_parser_create(&pp, &g.parser, &err) != MUSE_OK) g.parser = NULL;
    }
    if (job->n_probs > 0) probs = calloc((size_t)job->n_probs + 1, sizeof *probs);
    if ((job->parse_channels && !g.parser) || (job->n_probs > 0 && !probs)) {
        fin = MUSE_SRV_FINISH_ERROR;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto done;
    }
    /* the prompt is in the cache: a sampler for this request, and the adapter's checkpoint */
    if (ad->ops->slot_begin(sl->es, &job->sp, &err) != MUSE_OK) {
        fin = MUSE_SRV_FINISH_ERROR;
        goto done;
    }
    if (job->grammar && constrain(ad, sl->es, job, &err) != MUSE_OK) {
        fin = MUSE_SRV_FINISH_ERROR;
        goto done;
    }
    for (;;) {
        if (atomic_load(&job->cancel)) { fin = MUSE_SRV_FINISH_CANCELLED; break; }
        if (job->n_predict >= 0 && job->n_out >= job->n_predict) { fin = MUSE_SRV_FINISH_LENGTH; break; }
        int32_t tok;
        if (ad->ops->slot_sample(sl->es, job->n_probs, probs, &tok, &err) != MUSE_OK) {
            fin = MUSE_SRV_FINISH_ERROR;
            break;
        }
        const bool eog_tok = ad->ops->is_eog(ad->self, tok), eog = eog_tok && !job->ignore_eos;
        char piece[MAX_PIECE];
        int np = eog_tok ? 0 : ad->ops->token_piece(ad->self, tok, piece, sizeof piece);
        if (np < 0) np = 0;
        if (np > (int)sizeof piece) np = (int)sizeof piece; /* no real token is that long */
        pthread_mutex_lock(&job->mu);
        bool ok = record_token(job, tok, probs);
        if (ok && np) {
            muse_srv_buf_append(&g.utf8, piece, (size_t)np);
            utf8_drain(&g, false);
        }
        if (ok && job->out_raw_end) job->out_raw_end[job->n_out - 1] = (int)(g.raw.len + g.utf8.len);
        if (ok && np) text_advance(&g, false);
        pthread_cond_broadcast(&job->cv);
        pthread_mutex_unlock(&job->mu);
        job_notify(job, false);
        if (!ok) { snprintf(err.msg, sizeof err.msg, "out of memory"); fin = MUSE_SRV_FINISH_ERROR; break; }
        if (eog) { fin = MUSE_SRV_FINISH_EOG; break; }
        if (g.stopped_by_word) { fin = MUSE_SRV_FINISH_WORD; break; }
        if (job->n_predict >= 0 && job->n_out >= job->n_predict) { fin = MUSE_SRV_FINISH_LENGTH; break; }
        if (sl->n_cache >= s->info.n_ctx) { fin = MUSE_SRV_FINISH_LENGTH; break; }
        if (slot_eval(sl, &tok, 1, &err) != MUSE_OK) { fin = MUSE_SRV_FINISH_ERROR; break; }
    }
    pthread_mutex_lock(&job->mu);
    if (!g.stopped_by_word) {
        utf8_drain(&g, true);
        text_advance(&g, true);
    }
    pthread_mutex_unlock(&job->mu);
done:
    if (fin == MUSE_SRV_FINISH_ERROR) {
        snprintf(errbuf, cap, "%s", err.msg);
        job->err_status = err.status; /* published by job_finish's lock */
    }
    if (s->metrics && ad->ops->slot_spec_counts) { /* speculative decoding's counters of this job */
        uint64_t drafted, accepted, steps;
        ad->ops->slot_spec_counts(sl->es, &drafted, &accepted, &steps);
        muse_srv_metrics_spec(s->metrics, drafted, accepted, steps);
    }
    if (job->grammar && ad->ops->slot_constrain) ad->ops->slot_constrain(sl->es, NULL, NULL, NULL, &err);
    muse_output_parser_free(g.parser);
    muse_srv_buf_free(&g.utf8);
    muse_srv_buf_free(&g.raw);
    free(probs);
    return fin;
}

/* Count a job that reached a slot, ending as fin, in the metrics: before it is reported done, so a
 * client that reads /metrics as soon as it has its answer sees the job counted. */
static void count_job(struct muse_srv_sched *s, struct muse_srv_job *job, enum muse_srv_finish fin) {
    if (!s->metrics) return;
    const int64_t now = muse_time_us();
    pthread_mutex_lock(&job->mu);
    const int64_t t0 = job->t_start_us ? job->t_start_us : now;
    const int64_t tp = job->t_prefill_end_us ? job->t_prefill_end_us : now;
    const int64_t te = job->done ? job->t_end_us : now;
    double pre = (double)(tp - t0) / 1e6;
    double dec = (double)(te - tp) / 1e6;
    int n_gen = job->n_out, n_cached = job->n_cached;
    bool cancelled = (job->done ? job->finish : fin) == MUSE_SRV_FINISH_CANCELLED;
    pthread_mutex_unlock(&job->mu);
    muse_srv_metrics_job(s->metrics, job->n_prompt, n_cached, n_gen, pre, dec, cancelled);
}



/* ---- slots and queue ---- */

/*
 * A slot's thread: sleep on sl->cv until submit (or a finishing worker, through the queue) hands it
 * a job or the scheduler stops; run the job without the lock; mark the slot idle, or take the
 * queue's head straight away; then count the job, finish it (readers see it done) and drop the
 * scheduler's reference. A job already assigned when stopping
 * starts is still run (it sees its cancel flag and ends as cancelled), so every job submitted with
 * OK is finished by some worker - or, when no worker ever started, by muse_srv_sched_stop.
 */
static void *worker(void *arg) {
    struct slot *sl = arg;
    struct muse_srv_sched *s = sl->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->job && !s->stopping) pthread_cond_wait(&sl->cv, &s->mu);
        struct muse_srv_job *job = sl->job;
        if (!job) break;
        pthread_mutex_unlock(&s->mu);
        char err[sizeof ((struct muse_error *)0)->msg] = "";
        enum muse_srv_finish fin = run_job(sl, job, err, sizeof err);
        if (s->ad->ops->slot_done) s->ad->ops->slot_done(sl->es);
        /* the slot is idle (or has the queue's head) before the job is reported done */
        pthread_mutex_lock(&s->mu);
        sl->last_used = ++s->tick;
        sl->job = NULL;
        if (s->q_len > 0) {
            sl->job = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
        }
        pthread_mutex_unlock(&s->mu);
        count_job(s, job, fin);
        job_finish(job, fin, fin == MUSE_SRV_FINISH_ERROR ? err : NULL);
        muse_srv_job_release(job);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

struct muse_srv_sched *muse_srv_sched_create(const struct muse_srv_adapter *ad, int n_slots, int queue_cap,
                                             struct muse_srv_metrics *metrics, struct muse_error *err) {
    struct muse_srv_sched *s = calloc(1, sizeof *s);
    if (!s) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->ad = ad;
    s->metrics = metrics;
    ad->ops->info(ad->self, &s->info);
    if (n_slots < 1 || queue_cap < 0 || s->info.n_ctx < 2) {
        muse_error_set(err, MUSE_ERR_INVALID_ARG, "bad scheduler parameters (slots %d, queue %d, n_ctx %d)", n_slots,
                       queue_cap, s->info.n_ctx);
        goto fail;
    }
    s->q_cap = queue_cap > 0 ? queue_cap : 1;
    s->q_limit = queue_cap;
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    s->slots = calloc((size_t)n_slots, sizeof *s->slots);
    if (!s->queue || !s->slots) {
        muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->n_slots = n_slots;
    for (int i = 0; i < n_slots; i++) {
        s->slots[i].s = s;
        s->slots[i].idx = i;
        pthread_cond_init(&s->slots[i].cv, NULL);
        atomic_init(&s->slots[i].n_live, 0);
    }
    for (int i = 0; i < n_slots; i++) {
        struct slot *sl = &s->slots[i];
        sl->cache = malloc((size_t)s->info.n_ctx * sizeof *sl->cache);
        if (!sl->cache) {
            muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto fail;
        }
        sl->es = ad->ops->slot_create(ad->self, err);
        if (!sl->es) goto fail;
    }
    for (int i = 0; i < n_slots; i++) {
        if (pthread_create(&s->slots[i].th, NULL, worker, &s->slots[i])) {
            muse_error_set(err, MUSE_ERR_INTERNAL, "cannot start a slot thread");
            goto fail;
        }
        s->slots[i].th_started = true;
    }
    return s;
fail:
    muse_srv_sched_free(s);
    return NULL;
}

/* Placement (sched.h): all under s->mu, so a slot is handed at most one job and the queue is FIFO. */
enum muse_srv_submit muse_srv_sched_submit(struct muse_srv_sched *s, struct muse_srv_job *job) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return MUSE_SRV_SUBMIT_CLOSED;
    }
    /*
     * Prefer the idle slot whose cache shares the longest prefix with the prompt, but only when
     * that prefix is at least half of the prompt (llama.cpp's slot similarity rule); otherwise take
     * the least recently used idle slot, so a new conversation does not evict another one's cache
     * just because both start with the same system prompt.
     */
    struct slot *best = NULL, *lru = NULL;
    int best_lcp = -1;
    for (int i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->job) continue;
        /* the worker only changes cache/n_cache while it holds a job, so reading them here is safe */
        int lcp = muse_session_common_prefix(sl->cache, sl->n_cache, job->prompt, job->n_prompt);
        if (lcp > best_lcp || (lcp == best_lcp && sl->last_used < best->last_used)) {
            best = sl;
            best_lcp = lcp;
        }
        if (!lru || sl->last_used < lru->last_used) lru = sl;
    }
    if (best && 2 * best_lcp < job->n_prompt) best = lru;
    atomic_fetch_add(&job->refs, 1);
    job->t_submit_us = muse_time_us();
    if (best) {
        best->job = job;
        pthread_cond_signal(&best->cv);
    } else if (s->q_len < s->q_limit) {
        s->queue[(s->q_head + s->q_len) % s->q_cap] = job;
        s->q_len++;
    } else {
        atomic_fetch_sub(&job->refs, 1);
        pthread_mutex_unlock(&s->mu);
        return MUSE_SRV_SUBMIT_FULL;
    }
    pthread_mutex_unlock(&s->mu);
    return MUSE_SRV_SUBMIT_OK;
}

/* Drop queue entry i (under s->mu), keeping the others in FIFO order. */
static void queue_remove(struct muse_srv_sched *s, int i) {
    for (int k = i; k + 1 < s->q_len; k++)
        s->queue[(s->q_head + k) % s->q_cap] = s->queue[(s->q_head + k + 1) % s->q_cap];
    s->q_len--;
}

void muse_srv_sched_abandon(struct muse_srv_sched *s, struct muse_srv_job *job) {
    muse_srv_job_cancel(job); /* a running job stops at its next token */
    bool queued = false;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->q_len; i++)
        if (s->queue[(s->q_head + i) % s->q_cap] == job) {
            queue_remove(s, i);
            queued = true;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    if (!queued) return;
    job_finish(job, MUSE_SRV_FINISH_CANCELLED, NULL);
    if (s->metrics) muse_srv_metrics_cancelled(s->metrics);
    muse_srv_job_release(job); /* the scheduler's reference */
}

void muse_srv_sched_stats(struct muse_srv_sched *s, int *n_slots, int *n_busy, int *n_queued) {
    pthread_mutex_lock(&s->mu);
    int busy = 0;
    for (int i = 0; i < s->n_slots; i++) busy += s->slots[i].job != NULL;
    *n_slots = s->n_slots;
    *n_busy = busy;
    *n_queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
}

bool muse_srv_sched_slot(struct muse_srv_sched *s, int i, struct muse_srv_slot_state *out) {
    if (i < 0 || i >= s->n_slots) return false;
    pthread_mutex_lock(&s->mu);
    const struct slot *sl = &s->slots[i];
    out->busy = sl->job != NULL;
    out->job_id = sl->job ? sl->job->id : 0;
    out->n_cache = sl->job ? -1 : sl->n_cache; /* the worker writes it while busy */
    out->n_past = atomic_load(&sl->n_live);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/*
 * Set stopping and cancel everything under s->mu, then join the workers without it (a worker needs
 * s->mu to finish its job). Each worker runs its assigned job to its (cancelled) end, drains the
 * queue the same way (cancelled jobs end at once) and exits; what is still queued after the joins
 * (only when no worker ever started) is finished as cancelled here.
 */
void muse_srv_sched_stop(struct muse_srv_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    bool joined = s->joined;
    s->stopping = true;
    for (int i = 0; i < s->q_len; i++) muse_srv_job_cancel(s->queue[(s->q_head + i) % s->q_cap]);
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        if (s->slots[i].job) muse_srv_job_cancel(s->slots[i].job);
        pthread_cond_signal(&s->slots[i].cv);
    }
    s->joined = true;
    pthread_mutex_unlock(&s->mu);
    if (joined) return;
    for (int i = 0; s->slots && i < s->n_slots; i++)
        if (s->slots[i].th_started) pthread_join(s->slots[i].th, NULL);
    /* jobs still queued (only when no worker ever started) end as cancelled */
    for (int i = 0; i < s->q_len; i++) {
        struct muse_srv_job *job = s->queue[(s->q_head + i) % s->q_cap];
        job_finish(job, MUSE_SRV_FINISH_CANCELLED, NULL);
        muse_srv_job_release(job);
    }
    s->q_len = 0;
}

void muse_srv_sched_free(struct muse_srv_sched *s) {
    if (!s) return;
    muse_srv_sched_stop(s);
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        if (s->slots[i].es) s->ad->ops->slot_free(s->slots[i].es);
        free(s->slots[i].cache);
        pthread_cond_destroy(&s->slots[i].cv);
    }
    free(s->slots);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
