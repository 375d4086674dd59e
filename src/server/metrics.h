/* /metrics: Prometheus text exposition (format 0.0.4) of request counts by
 * route and status, token totals (prompt / cached / recomputed / generated),
 * prefill / decode / TTFT histograms, queue depth and cache hits/misses,
 * speculative drafts proposed / accepted by source.
 * The numbers come from the same eng_counters the API returns. */
#ifndef WICK_SERVER_METRICS_H
#define WICK_SERVER_METRICS_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "engine/request.h"
#include "server/sse.h"

#define SRV_HIST_BUCKETS 15
#define SRV_METRIC_SLOTS 96 /* distinct (route, status) pairs kept */

typedef struct srv_hist {
    uint64_t counts[SRV_HIST_BUCKETS]; /* per bucket (not cumulative) */
    uint64_t count;                    /* observations, +Inf included */
    double sum;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t lock;
    struct {
        char route[32];
        int status;
        uint64_t count;
    } req[SRV_METRIC_SLOTS];
    int n_req;
    uint64_t prompt_tokens, cached_tokens, recomputed_tokens, generated_tokens;
    uint64_t completed;
    srv_hist prefill_s, decode_s, ttft_s;
    /* speculative decoding by draft source (ngram, draft, mtp) */
    struct {
        uint64_t proposed, accepted, steps;
    } spec[3];
} srv_metrics;

/* Live values read at scrape time. */
typedef struct srv_gauges {
    int queue_depth;
    int busy;
    int connections;
    uint64_t cache_hits, cache_misses;
    const json_t *store;  /* prefix cache view (ram_bytes, evictions, refused, slots ...) or NULL */
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
/* One HTTP response sent on route (a short label such as "chat"). */
void srv_metrics_count_request(srv_metrics *m, const char *route, int status);
/* One request the engine finished (its final counters). */
void srv_metrics_observe(srv_metrics *m, const eng_counters *c);
/* Appends the exposition text to out. */
int srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *out);

#endif
