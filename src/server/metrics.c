#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

/* Seconds: from sub-10 ms decode of a tiny model to minutes-long prefills of
 * a long document on CPU. */
static const double k_bounds[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                 2.5,   5,    10,    30,   60,  120,  300};

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->lock); }

void srv_metrics_count_request(srv_metrics *m, const char *route, int status)
{
    pthread_mutex_lock(&m->lock);
    int i;
    for (i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && strcmp(m->req[i].route, route) == 0) break;
    if (i == m->n_req) {
        if (m->n_req == SRV_METRIC_SLOTS) {
            /* Table full: fold into the last slot's bucket rather than grow without bound. */
            i = SRV_METRIC_SLOTS - 1;
        } else {
            snprintf(m->req[i].route, sizeof m->req[i].route, "%s", route);
            m->req[i].status = status;
            m->n_req++;
        }
    }
    m->req[i].count++;
    pthread_mutex_unlock(&m->lock);
}

static void hist_add(srv_hist *h, double v)
{
    int b = 0;
    while (b < SRV_HIST_BUCKETS && v > k_bounds[b]) b++;
    if (b < SRV_HIST_BUCKETS) h->counts[b]++;
    h->count++;
    h->sum += v;
}

static const char *const k_spec_sources[3] = {"ngram", "draft", "mtp"};

void srv_metrics_observe(srv_metrics *m, const eng_counters *c)
{
    pthread_mutex_lock(&m->lock);
    m->completed++;
    m->prompt_tokens += (uint64_t)c->prompt_tokens;
    m->cached_tokens += (uint64_t)c->cached_tokens;
    m->recomputed_tokens += (uint64_t)c->recomputed_tokens;
    m->generated_tokens += (uint64_t)c->completion_tokens;
    hist_add(&m->prefill_s, c->prefill_ms / 1000.0);
    hist_add(&m->decode_s, c->decode_ms / 1000.0);
    if (c->completion_tokens > 0) hist_add(&m->ttft_s, c->ttft_ms / 1000.0);
    for (int i = 0; i < 3; i++)
        if (!strcmp(c->spec, k_spec_sources[i])) {
            m->spec[i].proposed += (uint64_t)c->draft_proposed;
            m->spec[i].accepted += (uint64_t)c->draft_accepted;
            m->spec[i].steps += (uint64_t)c->spec_steps;
        }
    pthread_mutex_unlock(&m->lock);
}

static void render_by_source(srv_buf *o, const char *name, const char *help, const srv_metrics *m, int field)
{
    srv_buf_appendf(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int i = 0; i < 3; i++) {
        uint64_t v = field == 0 ? m->spec[i].proposed : field == 1 ? m->spec[i].accepted : m->spec[i].steps;
        srv_buf_appendf(o, "%s{source=\"%s\"} %llu\n", name, k_spec_sources[i], (unsigned long long)v);
    }
}

static void render_hist(srv_buf *o, const char *name, const char *help, const srv_hist *h)
{
    srv_buf_appendf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < SRV_HIST_BUCKETS; b++) {
        cum += h->counts[b];
        srv_buf_appendf(o, "%s_bucket{le=\"%g\"} %llu\n", name, k_bounds[b], (unsigned long long)cum);
    }
    srv_buf_appendf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    srv_buf_appendf(o, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

static void render_counter(srv_buf *o, const char *name, const char *help, uint64_t v)
{
    srv_buf_appendf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                    (unsigned long long)v);
}

static void render_gauge(srv_buf *o, const char *name, const char *help, long long v)
{
    srv_buf_appendf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

int srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *o)
{
    pthread_mutex_lock(&m->lock);
    srv_buf_appendf(o, "# HELP wick_http_requests_total HTTP responses by route and status.\n"
                       "# TYPE wick_http_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        srv_buf_appendf(o, "wick_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->req[i].route,
                        m->req[i].status, (unsigned long long)m->req[i].count);
    render_counter(o, "wick_requests_completed_total", "Generation requests the engine finished.", m->completed);
    render_counter(o, "wick_prompt_tokens_total", "Prompt tokens of finished requests, cached included.",
                   m->prompt_tokens);
    render_counter(o, "wick_cached_tokens_total", "Prompt tokens reused from the cache.", m->cached_tokens);
    render_counter(o, "wick_recomputed_tokens_total", "Tokens prefilled (computed) for prompts.",
                   m->recomputed_tokens);
    render_counter(o, "wick_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    render_hist(o, "wick_prefill_seconds", "Prefill time per request.", &m->prefill_s);
    render_hist(o, "wick_decode_seconds", "Decode time per request.", &m->decode_s);
    render_hist(o, "wick_ttft_seconds", "Time to first token per request.", &m->ttft_s);
    render_by_source(o, "wick_draft_tokens_total", "Speculative draft tokens verified, by source.", m, 0);
    render_by_source(o, "wick_draft_accepted_total", "Speculative draft tokens accepted, by source.", m, 1);
    render_by_source(o, "wick_spec_steps_total", "Verification batches with drafts, by source.", m, 2);
    pthread_mutex_unlock(&m->lock);
    render_gauge(o, "wick_queue_depth", "Requests waiting for the engine.", g->queue_depth);
    render_gauge(o, "wick_requests_processing", "Requests the engine is working on.", g->busy);
    render_gauge(o, "wick_http_connections", "Open HTTP connections.", g->connections);
    render_counter(o, "wick_cache_hits_total", "Requests that reused a cached prefix.", g->cache_hits);
    render_counter(o, "wick_cache_misses_total", "Requests that reused nothing.", g->cache_misses);
    if (g->store) {
        const json_t *st = g->store;
        render_counter(o, "wick_cache_evictions_total", "Checkpoints and slots evicted for the memory budget.",
                       (uint64_t)json_integer_value(json_object_get(st, "evictions")));
        render_counter(o, "wick_cache_refused_total", "Checkpoints that failed validation and were not used.",
                       (uint64_t)json_integer_value(json_object_get(st, "refused")));
        render_gauge(o, "wick_cache_ram_bytes", "RAM held by idle cached sequences and checkpoints.",
                     (long long)json_integer_value(json_object_get(st, "ram_bytes")));
        render_gauge(o, "wick_cache_ram_budget_bytes", "RAM budget of the prefix cache.",
                     (long long)json_integer_value(json_object_get(st, "ram_budget")));
        render_gauge(o, "wick_cache_disk_bytes", "Bytes in the cache archive folder.",
                     (long long)json_integer_value(json_object_get(st, "disk_bytes")));
        render_gauge(o, "wick_cache_slots", "Conversations cached in RAM.",
                     (long long)json_array_size(json_object_get(st, "slots")));
    }
    return 0;
}
