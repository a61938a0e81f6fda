/* metrics.c - Prometheus counters of the server. */
#include "server/metrics.h"

#include <string.h>

void muse_srv_metrics_init(struct muse_srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void muse_srv_metrics_destroy(struct muse_srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void muse_srv_metrics_request(struct muse_srv_metrics *m, unsigned status) {
    pthread_mutex_lock(&m->mu);
    m->requests_total++;
    if (status >= 400) m->requests_errors_total++;
    if (status == 503) m->requests_rejected_total++;
    pthread_mutex_unlock(&m->mu);
}

void muse_srv_metrics_job(struct muse_srv_metrics *m, int n_prompt, int n_cached, int n_gen, double prefill_s,
                          double decode_s, int cancelled) {
    pthread_mutex_lock(&m->mu);
    m->generations_total++;
    if (cancelled) m->requests_cancelled_total++;
    m->prompt_tokens_total += (uint64_t)n_prompt;
    m->prompt_tokens_cached_total += (uint64_t)n_cached;
    if (n_cached > 0) m->cache_hits_total++;
    m->generated_tokens_total += (uint64_t)n_gen;
    m->prefill_seconds_total += prefill_s;
    m->decode_seconds_total += decode_s;
    if (prefill_s > 0 && n_prompt > n_cached) m->last_prefill_tps = (n_prompt - n_cached) / prefill_s;
    if (decode_s > 0 && n_gen > 1) m->last_decode_tps = (n_gen - 1) / decode_s;
    pthread_mutex_unlock(&m->mu);
}

void muse_srv_metrics_cancelled(struct muse_srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->requests_cancelled_total++;
    pthread_mutex_unlock(&m->mu);
}

void muse_srv_metrics_keep(struct muse_srv_metrics *m, const struct muse_session_keep *keep) {
    pthread_mutex_lock(&m->mu);
    if (keep->kind == MUSE_SESSION_KEEP_RESTORED) m->swa_restores_total++;
    if (keep->kind == MUSE_SESSION_KEEP_CLEARED) m->swa_reprefills_total++;
    pthread_mutex_unlock(&m->mu);
}

static void metric(struct muse_srv_buf *out, const char *name, const char *type, const char *help, double v) {
    muse_srv_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void muse_srv_metrics_render(struct muse_srv_metrics *m, int slots_total, int slots_busy, int queue_depth,
                             struct muse_srv_buf *out) {
    pthread_mutex_lock(&m->mu);
    struct muse_srv_metrics c = *m;
    pthread_mutex_unlock(&m->mu);
    metric(out, "muse_requests_total", "counter", "HTTP requests answered.", (double)c.requests_total);
    metric(out, "muse_requests_errors_total", "counter", "HTTP requests answered with a 4xx/5xx status.",
           (double)c.requests_errors_total);
    metric(out, "muse_requests_rejected_total", "counter", "Requests rejected with 503 because the queue was full.",
           (double)c.requests_rejected_total);
    metric(out, "muse_requests_cancelled_total", "counter", "Requests cancelled: the client disconnected (running or queued) or shutdown.",
           (double)c.requests_cancelled_total);
    metric(out, "muse_generations_total", "counter", "Generation jobs finished.", (double)c.generations_total);
    metric(out, "muse_prompt_tokens_total", "counter", "Prompt tokens of finished jobs.", (double)c.prompt_tokens_total);
    metric(out, "muse_prompt_tokens_cached_total", "counter", "Prompt tokens served from a slot's prompt cache.",
           (double)c.prompt_tokens_cached_total);
    metric(out, "muse_prompt_tokens_evaluated_total", "counter", "Prompt tokens actually evaluated (prefill).",
           (double)(c.prompt_tokens_total - c.prompt_tokens_cached_total));
    metric(out, "muse_prompt_cache_hits_total", "counter", "Jobs that reused at least one cached prompt token.",
           (double)c.cache_hits_total);
    metric(out, "muse_swa_checkpoint_restores_total", "counter",
           "Prompt-cache rewinds the sliding-window rings could not serve, served by a checkpoint.",
           (double)c.swa_restores_total);
    metric(out, "muse_swa_reprefills_total", "counter",
           "Prompt-cache rewinds the sliding-window rings could not serve, restarted from position 0.",
           (double)c.swa_reprefills_total);
    metric(out, "muse_tokens_predicted_total", "counter", "Generated tokens.", (double)c.generated_tokens_total);
    metric(out, "muse_prefill_seconds_total", "counter", "Time spent in prefill.", c.prefill_seconds_total);
    metric(out, "muse_decode_seconds_total", "counter", "Time spent decoding.", c.decode_seconds_total);
    metric(out, "muse_prefill_tokens_per_second", "gauge", "Prefill rate of the most recent job.", c.last_prefill_tps);
    metric(out, "muse_decode_tokens_per_second", "gauge", "Decode rate of the most recent job.", c.last_decode_tps);
    metric(out, "muse_slots_total", "gauge", "Slots (parallel sequences).", slots_total);
    metric(out, "muse_slots_busy", "gauge", "Slots running a job.", slots_busy);
    metric(out, "muse_queue_depth", "gauge", "Jobs waiting for a slot.", queue_depth);
}
