/*
 * sched.h - slots, the bounded request queue and the generation loop of `muse serve`.
 *
 * Threads. N slots, each one worker thread that owns one adapter slot (its own KV cache: a
 * session in the model adapter) and a mirror of the token ids in it. HTTP threads submit jobs
 * (http.c's work pool) and read their output (its event loops, woken through job->notify); a
 * client that gives up has its job abandoned (muse_srv_sched_abandon). Only the slot's worker
 * ever calls the adapter's slot functions, so an adapter slot is never used from two threads.
 * Workers of different slots run concurrently.
 *
 * Placement. A job submitted while some slot is idle goes to the idle slot whose cache shares the
 * longest token prefix with the job's prompt - when that prefix is at least half the prompt -
 * else to the least recently used idle slot (a new conversation does not evict another one's
 * cache because both start with the same system prompt). With no idle slot it waits in a FIFO
 * queue of at most queue_cap jobs; beyond that submit answers FULL. A worker that finishes a job
 * takes the queue's head (FIFO, not prefix-aware).
 *
 * A job on a slot: keep the prompt's common prefix with the slot's cache as far as the adapter can
 * rewind (muse_session_reuse_len: never all of it, the last prompt token is always evaluated for
 * fresh logits; slot_keep may keep less on a sliding-window miss, src/gen/session.h), evaluate the
 * rest in chunks (cancellation is checked between them), slot_begin, then sample until a stop
 * token, a stop string, max tokens, the context end, cancellation or an error. The generated
 * tokens are evaluated into the cache as they come (all but the last), so the next request of the
 * conversation finds them there.
 *
 * Locks. The scheduler's mutex guards the queue, each slot's `job` pointer and `last_used`, and
 * `stopping`. A slot's cache mirror is written only by its worker while it holds a job, and read by
 * submit (under the scheduler's mutex) only for idle slots, so the two never overlap. A job's
 * outputs are guarded by job->mu (below); the worker never holds the scheduler's mutex and a
 * job's mutex at once, and never calls the adapter with either held.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gen/sampler.h"
#include "server/adapter.h"
#include "server/buf.h"
#include "server/metrics.h"

struct cJSON;

enum muse_srv_finish {
    MUSE_SRV_FINISH_NONE = 0,  /* still running */
    MUSE_SRV_FINISH_EOG,       /* the model wrote a stop token */
    MUSE_SRV_FINISH_WORD,      /* a stop string matched */
    MUSE_SRV_FINISH_LENGTH,    /* max tokens or the context end */
    MUSE_SRV_FINISH_CANCELLED, /* client gone or shutdown */
    MUSE_SRV_FINISH_ERROR,     /* adapter error (or out of memory): see err */
};

struct muse_srv_tool_call {
    char id[48];
    char *name;      /* owned */
    char *arguments; /* owned JSON object text */
};

/*
 * One request's generation. Lifetime: reference counted (refs). muse_srv_job_new gives the
 * creator one reference; a successful submit takes another for the scheduler, which it drops when
 * the job is finished (done set, readers woken) or cancelled at shutdown. The last release frees
 * the job and everything it owns. So an HTTP thread may keep reading a job after the scheduler let
 * go of it, and a worker may finish a job whose client is gone.
 */
struct muse_srv_job {
    /* inputs: set before submit, read-only afterwards (owned by the job: freed with it) */
    int32_t *prompt; /* [n_prompt] malloc'd */
    int n_prompt;
    struct muse_sampler_params sp; /* the request's sampling (defaults: muse_sampler_default_params) */
    int n_predict;       /* max generated tokens; < 0 = until the context is full */
    bool ignore_eos;     /* an end token does not end the job (llama-server's ignore_eos): it stays out of
                            the text and generation goes on after it */
    char **stops;        /* [n_stops] stop strings */
    int n_stops;
    int n_probs;         /* top-k list per generated token; 0 = none */
    bool parse_channels; /* Muse-Glimmer channel parser (chat) vs raw text */
    bool no_tool_calls;  /* tool_choice "none": a tool-call message is content */
    struct cJSON *tools; /* types tool-call arguments; may be NULL */
    struct muse_grammar *grammar; /* constrained decoding (owned); NULL = free text */
    bool grammar_lazy;   /* chat: the grammar arms at the answer header (reasoning stays free) */
    struct muse_grammar *grammar_whole; /* chat with a JSON schema (owned): the whole answer - a bounded
                                           reasoning block, the header, the JSON - used instead of the
                                           lazy grammar when the prompt does not end with the header */
    char *schema;        /* the JSON schema's text of `grammar` (owned), or NULL */
    int n_shifted;       /* chat: messages the context shift dropped from the request (api_chat.c) */
    uint64_t id;         /* unique per server: tool-call ids derive from it */
    void *media;         /* a prompt with images: the adapter's handle (prompt then holds its ids), or NULL */
    void (*media_free)(void *self, void *media); /* how the job frees media (with media_self) */
    void *media_self;
    /* news hook: called by whoever changed the outputs, after broadcasting cv and with no lock held:
     * the worker after each token (done false), job_finish (done true); may be NULL. notify_ud
     * must outlive the scheduler. */
    void (*notify)(void *ud, struct muse_srv_job *job, bool done);
    void *notify_ud;

    /*
     * outputs, guarded by mu: the worker appends and broadcasts cv after each token and once when
     * done; readers lock mu, copy what is past their own cursor, and wait on cv. Arrays grow (they
     * may move): readers copy under mu, never keep pointers into them. Once done is true nothing
     * changes any more.
     */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct muse_srv_buf content;
    struct muse_srv_buf reasoning;
    struct muse_srv_tool_call *calls; /* [n_calls] */
    int n_calls, cap_calls;
    int32_t *out_toks;                /* [n_out] generated tokens (stop token included) */
    struct muse_srv_prob *probs;      /* [n_out][n_probs + 1]: the top n_probs, then the sampled token */
    int n_out, cap_out;
    /* chat logprobs (parse_channels with n_probs): which tokens are the answer's. Bytes of the
     * generated text after each token, the answer's byte ranges in that text, and how many bytes
     * are decided (the parser placed them in the answer, the reasoning or markup) */
    int *out_raw_end;                 /* [n_out] */
    struct muse_srv_span { int lo, hi; } *answer; /* [n_answer], increasing */
    int n_answer, cap_answer;
    int raw_decided;
    int n_cached;                     /* prompt tokens reused from the slot's cache (set before prefill) */
    int slot;                         /* slot index once started, else -1 */
    bool started, done;
    enum muse_srv_finish finish;
    char stop_word[128];              /* the stop string that matched (FINISH_WORD) */
    char err[256];                    /* FINISH_ERROR message */
    muse_status err_status;           /* FINISH_ERROR: the adapter's status (MUSE_ERR_CONTEXT: the KV pool is full) */
    int64_t t_submit_us, t_start_us, t_prefill_end_us, t_end_us;

    atomic_bool cancel; /* set by anyone (muse_srv_job_cancel); the worker polls it between tokens */
    atomic_int refs;
};

/* A new job with one reference (the caller's) and default inputs (sp = muse_sampler_default_params,
 * n_predict -1), or NULL when out of memory. Fill the inputs, then submit. */
struct muse_srv_job *muse_srv_job_new(void);
/* Drop a reference; the last one frees the job (NULL is a no-op). Any thread. */
void muse_srv_job_release(struct muse_srv_job *job);
/* Ask the worker to stop this job as soon as possible (safe from any thread, any time). */
void muse_srv_job_cancel(struct muse_srv_job *job);

struct muse_srv_sched;

enum muse_srv_submit {
    MUSE_SRV_SUBMIT_OK = 0,
    MUSE_SRV_SUBMIT_FULL,   /* every slot busy and the queue full: answer 503 + Retry-After */
    MUSE_SRV_SUBMIT_CLOSED, /* shutting down */
};

/*
 * Create n_slots adapter slots and start one worker per slot over ad (borrowed; must outlive the
 * scheduler) with a queue of at most queue_cap waiting jobs (0: none wait, a busy server answers
 * FULL). metrics is borrowed (may be NULL). NULL with err set on failure (bad parameters, out of
 * memory, a slot the adapter could not create, a thread that did not start); nothing is left
 * running then.
 */
struct muse_srv_sched *muse_srv_sched_create(const struct muse_srv_adapter *ad, int n_slots, int queue_cap,
                                             struct muse_srv_metrics *metrics, struct muse_error *err);
/*
 * Hand a job to an idle slot or the queue (placement above). Any thread; never blocks on a
 * generation. On OK the scheduler holds its own reference until the job is done, and the job's
 * inputs must no longer change; on FULL or CLOSED it took nothing and the caller still owns its
 * reference.
 */
enum muse_srv_submit muse_srv_sched_submit(struct muse_srv_sched *s, struct muse_srv_job *job);
/*
 * The client of job gave up: a job still waiting in the queue leaves it at once (finished as
 * CANCELLED, its place free for the next client, counted in requests_cancelled_total); a running
 * one is cancelled (the worker stops at its next token). Any thread; no lock held by the caller.
 */
void muse_srv_sched_abandon(struct muse_srv_sched *s, struct muse_srv_job *job);
/* Gauges for /metrics: slots, slots running a job, jobs waiting (a consistent snapshot). */
void muse_srv_sched_stats(struct muse_srv_sched *s, int *n_slots, int *n_busy, int *n_queued);
/* One slot as /slots shows it. */
struct muse_srv_slot_state {
    bool busy;
    uint64_t job_id;  /* the running job's id (busy) */
    int n_cache;      /* tokens in its cache when idle; -1 while busy */
    int n_past;       /* tokens in its KV cache now, also while busy (the worker's last update) */
};
/* Slot i's state (a snapshot under the scheduler's mutex); false when i is not a slot. */
bool muse_srv_sched_slot(struct muse_srv_sched *s, int i, struct muse_srv_slot_state *out);
/*
 * Refuse new jobs, cancel every job (running and queued; each ends with FINISH_CANCELLED) and
 * join the workers. Idempotent; submit returns CLOSED afterwards. NULL is a no-op.
 */
void muse_srv_sched_stop(struct muse_srv_sched *s);
/* Stop (if not yet) and free the slots and the scheduler. NULL is a no-op. Not from a worker. */
void muse_srv_sched_free(struct muse_srv_sched *s);
