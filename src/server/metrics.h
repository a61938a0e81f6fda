/* metrics.h - server counters, rendered as Prometheus text at GET /metrics. Thread-safe. */
#pragma once

#include <pthread.h>
#include <stdint.h>

#include "gen/session.h"
#include "server/buf.h"

struct muse_srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests_total;         /* HTTP requests answered */
    uint64_t requests_errors_total;  /* answered with a 4xx/5xx status */
    uint64_t requests_rejected_total;/* 503: queue full */
    uint64_t requests_cancelled_total; /* generation cancelled (client gone, shutdown) */
    uint64_t generations_total;      /* generation jobs finished */
    uint64_t prompt_tokens_total;    /* prompt tokens of finished jobs */
    uint64_t prompt_tokens_cached_total; /* of those, served from a slot's prompt cache */
    uint64_t cache_hits_total;       /* jobs that reused at least one cached token */
    uint64_t swa_restores_total;     /* sliding-window misses served by a checkpoint (session.h) */
    uint64_t swa_reprefills_total;   /* sliding-window misses that restarted the slot at 0 */
    uint64_t generated_tokens_total;
    double prefill_seconds_total, decode_seconds_total;
    double last_prefill_tps, last_decode_tps; /* rates of the most recent job */
};

void muse_srv_metrics_init(struct muse_srv_metrics *m);
void muse_srv_metrics_destroy(struct muse_srv_metrics *m);
/* Count one answered HTTP request with its status. */
void muse_srv_metrics_request(struct muse_srv_metrics *m, unsigned status);
/* Count one finished generation job. */
void muse_srv_metrics_job(struct muse_srv_metrics *m, int n_prompt, int n_cached, int n_gen, double prefill_s,
                          double decode_s, int cancelled);
/* Count a request cancelled before its job reached a slot (its client gave up in the queue). */
void muse_srv_metrics_cancelled(struct muse_srv_metrics *m);
/* Count how a slot's prompt cache was rolled back for a job (only sliding-window misses count). */
void muse_srv_metrics_keep(struct muse_srv_metrics *m, const struct muse_session_keep *keep);
/* Append the Prometheus exposition (with the gauges given) to out. */
void muse_srv_metrics_render(struct muse_srv_metrics *m, int slots_total, int slots_busy, int queue_depth,
                             struct muse_srv_buf *out);
