/*
 * sched.h - slots, the bounded request queue and the generation loop of `muse serve`.
 *
 * N slots, each a worker thread owning one engine slot (its own KV cache) and a mirror of the
 * tokens in it. A job submitted while a slot is idle goes to the idle slot whose cache shares
 * the longest token prefix with the job's prompt (ties: least recently used); otherwise it waits
 * in a FIFO queue of bounded length. The worker keeps the common prefix (as far as the engine
 * can rewind, see slot_keep), evaluates only the rest, then samples until a stop token, a stop
 * string, max tokens, the context end or cancellation. Output is appended to the job under its
 * mutex; readers (HTTP threads) keep their own cursors and wait on job->cv.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/buf.h"
#include "server/engine_iface.h"
#include "server/metrics.h"

struct cJSON;

enum muse_srv_finish {
    MUSE_SRV_FINISH_NONE = 0,  /* still running */
    MUSE_SRV_FINISH_EOG,       /* the model wrote a stop token */
    MUSE_SRV_FINISH_WORD,      /* a stop string matched */
    MUSE_SRV_FINISH_LENGTH,    /* max tokens or the context end */
    MUSE_SRV_FINISH_CANCELLED, /* client gone or shutdown */
    MUSE_SRV_FINISH_ERROR,     /* engine error: see status/err */
};

struct muse_srv_tool_call {
    char id[48];
    char *name;      /* owned */
    char *arguments; /* owned JSON object text */
};

struct muse_srv_job {
    /* inputs: set before submit, read-only afterwards (owned by the job) */
    int32_t *prompt; /* [n_prompt] */
    int n_prompt;
    struct muse_srv_sampling sp;
    int n_predict;       /* max generated tokens; < 0 = until the context is full */
    char **stops;        /* [n_stops] stop strings */
    int n_stops;
    int n_probs;         /* top-k list per generated token; 0 = none */
    bool parse_channels; /* Muse-Glimmer channel parser (chat) vs raw text */
    bool no_tool_calls;  /* tool_choice "none": a tool-call message is content */
    struct cJSON *tools; /* types tool-call arguments; may be NULL */
    uint64_t id;         /* unique per server: tool-call ids derive from it */

    /* outputs, guarded by mu (the worker appends; readers copy what is new) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct muse_srv_buf content;
    struct muse_srv_buf reasoning;
    struct muse_srv_tool_call *calls; /* [n_calls] */
    int n_calls, cap_calls;
    int32_t *out_toks;                /* [n_out] generated tokens (stop token included) */
    struct muse_srv_prob *probs;      /* [n_out][n_probs] */
    int *out_text_end;                /* [n_out] content length (bytes) after each token */
    int n_out, cap_out;
    int n_cached;                     /* prompt tokens reused from the slot's cache */
    int slot;                         /* slot index once started, else -1 */
    bool started, done;
    enum muse_srv_finish finish;
    char stop_word[128];              /* the stop string that matched (FINISH_WORD) */
    char err[256];                    /* FINISH_ERROR message */
    int64_t t_submit_us, t_start_us, t_prefill_end_us, t_end_us;

    atomic_bool cancel;
    atomic_int refs;
};

/* A new job with one reference (the caller's), or NULL. Fill the inputs, then submit. */
struct muse_srv_job *muse_srv_job_new(void);
/* Drop a reference; the last one frees the job. */
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
 * Start n_slots workers over eng (borrowed; must outlive the scheduler) with a queue of at
 * most queue_cap waiting jobs. metrics is borrowed. NULL with err set on failure.
 */
struct muse_srv_sched *muse_srv_sched_create(const struct muse_srv_engine *eng, int n_slots, int queue_cap,
                                             struct muse_srv_metrics *metrics, struct muse_error *err);
/* Hand a job to a slot or the queue. On OK the scheduler holds its own reference. */
enum muse_srv_submit muse_srv_sched_submit(struct muse_srv_sched *s, struct muse_srv_job *job);
/* Gauges for /metrics. */
void muse_srv_sched_stats(struct muse_srv_sched *s, int *n_slots, int *n_busy, int *n_queued);
/*
 * Refuse new jobs, cancel every job (running and queued; each ends with FINISH_CANCELLED) and
 * join the workers. Idempotent; submit returns CLOSED afterwards. NULL is a no-op.
 */
void muse_srv_sched_stop(struct muse_srv_sched *s);
/* Stop (if not yet) and free the slots and the scheduler. NULL is a no-op. */
void muse_srv_sched_free(struct muse_srv_sched *s);

/* Length of the longest common prefix of a and b. */
int muse_srv_common_prefix(const int32_t *a, int n_a, const int32_t *b, int n_b);
