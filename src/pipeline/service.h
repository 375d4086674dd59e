/* The engine service: engine threads that own the model, its context and the
 * prefix cache (a pl_engine) and run requests through the pipeline, up to
 * `parallel` at once (their forward passes batched into shared steps,
 * engine/sched.h), in the order they came. HTTP threads never touch those; they describe a request
 * (eng_request), submit it to a bounded queue and read its events (deltas,
 * final counters, errors) from a per-request channel (pl_job). Between
 * requests the thread writes the prefix cache's disk archive in bounded
 * steps, so no response waits for the disk.
 *
 * Ownership: pl_service_submit() takes the eng_request (moves its
 * contents); the returned pl_job is reference counted — the submitter holds
 * one reference and must call pl_job_release() exactly once. Cancellation
 * (client gone, timeout) is a flag the engine checks between prefill chunks
 * and decode steps; a cancelled job ends with an ENG_EV_ERROR event. */
#ifndef WICK_PIPELINE_SERVICE_H
#define WICK_PIPELINE_SERVICE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/request.h"
#include "pipeline/pipeline.h"
#include "util/err.h"

typedef struct pl_job pl_job;
typedef struct pl_service pl_service;

typedef struct pl_service_config {
    pl_config pipeline;    /* model, template, engine options, prefix cache (borrowed strings) */
    const char *model_id;  /* id shown by /v1/models (default: file name without .gguf) */
    int max_queue;         /* pending requests before submit() reports busy (default 64) */
    bool synthetic;        /* a random-weight demo model (said everywhere) */
    int n_recent;          /* completed requests kept for the monitor (default 50) */
    int parallel;          /* requests in progress at once (default 1; pipeline.eng.n_seq is set to it) */
} pl_service_config;

/* Loads the model and starts the engine thread. On failure returns a
 * negative WK_E* code with err filled and *out NULL. */
int pl_service_start(const pl_service_config *cfg, pl_service **out, wk_error *err);

/* Stops the engine thread (cancels running and queued jobs, finishes
 * pending archive writes) and frees the service. Jobs still referenced by
 * callers stay valid until released. */
void pl_service_stop(pl_service *svc);

/* Queues a request. Takes ownership of req's contents (req is cleared).
 * Returns 0 and a job (one reference for the caller), WK_EBUSY when the
 * queue is full, WK_EUNSUPPORTED while the model is (re)loading. */
int pl_service_submit(pl_service *svc, eng_request *req, pl_job **out, wk_error *err);

/* Waits up to timeout_ms for the next event of the job. Returns 1 with *ev
 * filled (caller clears it), 0 on timeout, -1 when the job already delivered
 * its final event. */
int pl_job_next_event(pl_job *job, int timeout_ms, eng_event *ev);

/* Asks the engine to stop the job; it ends within one prefill chunk or
 * decode step with an ERROR event (status 499). Idempotent, thread-safe. */
void pl_job_cancel(pl_job *job);

void pl_job_release(pl_job *job);

/* Tokenize / detokenize with the loaded vocabulary. parse_special: special
 * token text becomes special ids. *out_ids is malloc'd (caller frees). */
int pl_service_tokenize(pl_service *svc, const char *text, bool parse_special, int32_t **out_ids, int *out_n,
                        wk_error *err);
/* *out_text is malloc'd UTF-8 (invalid sequences replaced by U+FFFD). */
int pl_service_detokenize(pl_service *svc, const int32_t *ids, int n, char **out_text, wk_error *err);

/* Tokens a validated conversation's prompt takes with the served model
 * (rendered and tokenized as a request's prompt is: pl_chat_tokens). Safe
 * from any thread. WK_EUNSUPPORTED while loading or without a chat
 * template, WK_EINVAL for a conversation the template refuses. */
struct chat_conv;
int pl_service_count_tokens(pl_service *svc, const struct chat_conv *conv, int *n_out, wk_error *err);

/* Static facts about the loaded model for /v1/models and the monitor:
 * {"id", "path", "arch", "type", "bits_per_weight", "n_params", "file_bytes",
 *  "n_ctx", "n_ctx_train", "n_vocab", "synthetic", "chat_template"}. New ref. */
json_t *pl_service_model_info(pl_service *svc);

/* Live state for the monitor: {"model": …, "memory": {…}, "cache": {…},
 * "queue_depth", "active": [..], "recent": [..]}. New reference. */
json_t *pl_service_state(pl_service *svc);

/* Queue depth and busy flag for /metrics. */
void pl_service_load(pl_service *svc, int *queue_depth, int *busy);

/* The prefix cache's hits (requests that reused some prefix) and misses
 * as of the last finished request: the cache's own counters. */
void pl_service_cache_stats(pl_service *svc, uint64_t *hits, uint64_t *misses);

/* The prefix cache's monitor view (ckpt_cache_json) as of the last
 * finished request, or NULL before the first. New reference. */
json_t *pl_service_cache_state(pl_service *svc);

/* Drops the cached sequences (next request prefills from scratch; the disk
 * archive keeps them). Queued behind running work; returns once done. */
int pl_service_reset_cache(pl_service *svc, wk_error *err);

/* Reloads the model from its file (same config). Requests queued meanwhile
 * wait; returns once the new model serves. */
int pl_service_reload(pl_service *svc, wk_error *err);

bool pl_service_ready(pl_service *svc);
int pl_service_n_ctx(pl_service *svc);
const char *pl_service_model_id(pl_service *svc);

#endif
