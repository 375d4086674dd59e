/* The engine service: one thread that owns the model, its context and the
 * sequence state. HTTP threads never touch those; they describe a request
 * (eng_request), submit it to a bounded queue and read its events (deltas,
 * final counters, errors) from a per-request channel (eng_job).
 *
 * Ownership: eng_service_submit() takes the eng_request (moves its contents);
 * the returned eng_job is reference counted — the submitter holds one
 * reference and must call eng_job_release() exactly once. Cancellation
 * (client gone, timeout) is a flag the engine checks between prefill chunks
 * and decode steps; a cancelled job ends with an ENG_EV_ERROR event. */
#ifndef WICK_ENGINE_SERVICE_H
#define WICK_ENGINE_SERVICE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

enum eng_request_kind { ENG_REQ_CHAT = 0, ENG_REQ_COMPLETION = 1 };

enum eng_tool_choice { ENG_TOOLS_AUTO = 0, ENG_TOOLS_NONE, ENG_TOOLS_REQUIRED, ENG_TOOLS_FUNCTION };

enum eng_response_format { ENG_FORMAT_TEXT = 0, ENG_FORMAT_JSON_OBJECT, ENG_FORMAT_JSON_SCHEMA };

struct chat_conv;

/* Sampling knobs as the API gives them; the engine maps them onto sampler.h. */
typedef struct eng_sampling {
    float temperature;       /* 0 = greedy */
    float top_p;             /* 1 = off */
    int top_k;               /* 0 = off */
    float min_p;             /* 0 = off */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    float repeat_penalty;    /* 1 = off */
    uint64_t seed;
    bool has_seed;           /* false: the engine picks a seed */
} eng_sampling;

#define ENG_MAX_STOP 16

typedef struct eng_request {
    int kind;                  /* enum eng_request_kind */
    /* chat: the validated conversation (chat/chat_conv.h, owned), built by
     * the server from any of its APIs; render it with chat_render_conv. */
    struct chat_conv *chat;
    const json_t *tools;       /* borrowed from chat->tools: the tools offered (NULL if none) */
    /* Constrained output, to be enforced token by token by the generate
     * loop (grammar engine): tool_choice REQUIRED = the answer is a call of
     * one of `tools`, FUNCTION = a call of tool_choice_name (always one of
     * `tools`); response_format JSON_OBJECT = a JSON object, JSON_SCHEMA = a
     * JSON value valid against json_schema. The server has checked them. */
    int tool_choice;           /* enum eng_tool_choice */
    char *tool_choice_name;    /* forced function name (ENG_TOOLS_FUNCTION), owned */
    bool parallel_tool_calls;  /* false: at most one call per answer */
    int response_format;       /* enum eng_response_format */
    json_t *json_schema;       /* JSON_SCHEMA: the schema object (owned reference) */
    char *json_schema_name;    /* its name as the client gave it (owned), or NULL */
    bool json_schema_strict;
    /* completion: the prompt as text (owned) or as token ids (owned array). */
    char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    int max_tokens;            /* -1: until end of generation or context */
    char *stop[ENG_MAX_STOP];  /* owned strings */
    int n_stop;
    eng_sampling sampling;
    int32_t *bias_ids;         /* OpenAI logit_bias: token ids (owned) ... */
    float *bias_values;        /* ... and additive biases (owned); -100 bans */
    int n_bias;
    bool fresh;                /* {"wick": {"fresh": true}}: do not reuse cached state */
    bool has_policy;           /* {"wick": {"attn_policy": ..., "global": ...}} given */
    be_attn_policy policy;     /* this request's attention policy (has_policy) */
    bool ignore_eos;           /* keep generating past end-of-generation tokens (benchmarks) */
    bool stream;               /* informational (monitor) */
    char id[48];               /* "chatcmpl-..." / "cmpl-...", set by the server */
} eng_request;

/* Releases everything a request owns and zeroes it. Safe on a zeroed struct. */
void eng_request_clear(eng_request *req);

/* Per-request counters: one source of truth for the API (usage + timings),
 * the monitor and /metrics. Speeds come from work actually done: prefill
 * speed counts recomputed tokens only, never cached ones. */
typedef struct eng_counters {
    int prompt_tokens;       /* the whole prompt, cached part included */
    int cached_tokens;       /* reused from the previous sequence */
    int recomputed_tokens;   /* everything prefilled for this request, replay included */
    int replayed_tokens;     /* part of recomputed that was cached text re-run after a
                                checkpoint restore */
    int ckpt_pos;            /* position of the state resumed from, -1: cold start */
    char ckpt_kind[24];      /* its kind ("system_end", "kv_prefix", "live", ...), "" when cold */
    bool ckpt_from_disk;     /* loaded from the cache archive */
    double prefill_ms;
    double prefill_tok_per_s;
    double ttft_ms;          /* from start of processing to the first generated token */
    double queue_ms;         /* time spent waiting in the queue */
    int completion_tokens;   /* == decode_n */
    int reasoning_tokens;
    double decode_ms;
    double decode_tok_per_s; /* tokens after the first / time after the first */
} eng_counters;

enum eng_event_type {
    ENG_EV_ACCEPTED = 1, /* prompt rendered + tokenized and fits; counters.prompt_tokens set */
    ENG_EV_DELTA,        /* text piece (see eng_delta_kind) */
    ENG_EV_DONE,         /* final: counters + finish_reason; no more events */
    ENG_EV_ERROR,        /* final: http_status + message; no more events */
};

enum eng_delta_kind {
    ENG_DELTA_CONTENT = 0,
    ENG_DELTA_REASONING,
    ENG_DELTA_TOOL_CALL, /* a new call: tool_index, tool_id, tool_name (text is empty) */
    ENG_DELTA_TOOL_ARGS, /* argument text of call tool_index */
};

typedef struct eng_event {
    int type;                 /* enum eng_event_type */
    int delta_kind;           /* enum eng_delta_kind (ENG_EV_DELTA) */
    char *text;               /* owned by the event; NUL-terminated UTF-8 */
    int tool_index;
    char tool_id[40];
    char tool_name[128];
    eng_counters counters;    /* ACCEPTED (prompt part) and DONE */
    char finish_reason[16];   /* DONE: "stop" | "length" | "tool_calls" */
    int stopped_by;           /* DONE: 1 + index in eng_request.stop of the stop string that ended it, 0: none */
    int http_status;          /* ERROR: 400, 500, 503, 499 (cancelled) */
    char error_type[40];      /* ERROR: OpenAI error type */
    char error_code[40];      /* ERROR: OpenAI error code ("context_length_exceeded"), "" if none */
    char message[WK_ERROR_MSG_CAP];
} eng_event;

/* Frees ev->text and zeroes the event. */
void eng_event_clear(eng_event *ev);

typedef struct eng_job eng_job;
typedef struct eng_service eng_service;

/* ---- pluggable prefix store ----------------------------------------------------
 * The prefix cache (cache/) sits above engine/ in the module order, so the
 * CLI plugs it in through this table. Without one the service keeps one
 * sequence and reuses the longest common prefix (svc_reuse_decision). All
 * calls happen on the engine thread. */

/* A chat boundary of the prompt as a token position: kind is a
 * chat_boundary_kind, flags CHAT_BFLAG_* (chat/chat.h). */
typedef struct eng_mark {
    int32_t pos;
    int kind;
    unsigned flags;
} eng_mark;

/* What the store decided for one request. */
typedef struct eng_reuse {
    struct eng_seq *seq;   /* sequence to prefill and decode into (owned by the store) */
    int32_t start;         /* prompt tokens kept: prefill ids[start..n) */
    int32_t replayed;      /* of the prefilled tokens, those that were cached text re-run */
    int ckpt_kind;         /* store's kind of the state resumed from, -1: cold */
    int32_t ckpt_pos;      /* its position, -1 when cold */
    const char *ckpt_name; /* its name ("system_end", "kv_prefix", ...), borrowed */
    bool from_disk;
    void *plan;            /* store's per-request state */
} eng_reuse;

struct eng_prefill_opts;
typedef struct eng_prefix_store {
    void *self;
    /* Picks and prepares a sequence for ids[0..n) (fresh: reuse nothing). */
    int (*begin)(void *self, const int32_t *ids, int32_t n, const eng_mark *marks, int n_marks, bool fresh,
                 eng_reuse *r, wk_error *err);
    /* Prefills ids[r->start..n) into r->seq (returns what eng_prefill returns). */
    int (*prefill)(void *self, eng_reuse *r, const int32_t *ids, int32_t n, const struct eng_prefill_opts *opts,
                   wk_error *err);
    /* After each successful eng_decode on r->seq. */
    void (*decoded)(void *self, eng_reuse *r);
    /* ok: the prefill completed (generation may have stopped anywhere). */
    void (*end)(void *self, eng_reuse *r, bool ok);
    void (*clear)(void *self);
    json_t *(*state_json)(void *self); /* monitor view, new reference */
    void (*free)(void *self);
} eng_prefix_store;

struct eng_ctx;
/* Makes a store over a freshly created context (again after each reload). */
typedef int (*eng_prefix_store_factory)(void *user, struct eng_ctx *ctx, int32_t n_ctx, eng_prefix_store *out,
                                        wk_error *err);

/* Model-facing part of the service, supplied by whoever owns the model (see
 * eng_service_config). All calls happen on the engine thread except
 * tokenize/detokenize, which must be safe to call concurrently with the
 * engine (read-only vocabulary). */
typedef struct eng_service_config {
    const char *model_path;       /* GGUF to load */
    const char *model_id;         /* id shown by /v1/models (default: file name) */
    const char *chat_template;    /* template name override, or NULL (from the GGUF) */
    int n_threads;                /* <= 0: physical cores */
    int n_ctx;                    /* <= 0: model default capped at 8192 */
    int max_queue;                /* pending requests before submit() reports busy */
    bool synthetic;               /* a random-weight demo model (said everywhere) */
    int n_recent;                 /* completed requests kept for the monitor */
    eng_prefix_store_factory store_factory; /* NULL: built-in single-sequence reuse */
    void *store_user;
    be_attn_policy policy;        /* default attention policy (zeroed: dense); requests may override */
    int kv_type;                  /* enum be_kv_type of the KV cache (0: F16) */
    int device;                   /* enum eng_device (0: CPU) */
    int gpu;                      /* CUDA device ordinal */
} eng_service_config;

/* Loads the model and starts the engine thread. On failure returns a
 * negative WK_E* code with err filled and *out NULL. */
int eng_service_start(const eng_service_config *cfg, eng_service **out, wk_error *err);

/* Stops the engine thread (cancels running and queued jobs) and frees the
 * service. Jobs still referenced by callers stay valid until released. */
void eng_service_stop(eng_service *svc);

/* Queues a request. Takes ownership of req's contents (req is cleared).
 * Returns 0 and a job (one reference for the caller), WK_EBUSY when the
 * queue is full, WK_EUNSUPPORTED while the model is (re)loading. */
int eng_service_submit(eng_service *svc, eng_request *req, eng_job **out, wk_error *err);

/* Waits up to timeout_ms for the next event of the job. Returns 1 with *ev
 * filled (caller clears it), 0 on timeout, -1 when the job already delivered
 * its final event. */
int eng_job_next_event(eng_job *job, int timeout_ms, eng_event *ev);

/* Asks the engine to stop the job; it ends within one prefill chunk or
 * decode step with an ERROR event (status 499). Idempotent, thread-safe. */
void eng_job_cancel(eng_job *job);

void eng_job_release(eng_job *job);

/* Tokenize / detokenize with the loaded vocabulary. parse_special: special
 * token text becomes special ids. *out_ids is malloc'd (caller frees). */
int eng_service_tokenize(eng_service *svc, const char *text, bool parse_special, int32_t **out_ids,
                         int *out_n, wk_error *err);
/* *out_text is malloc'd UTF-8 (invalid sequences replaced by U+FFFD). */
int eng_service_detokenize(eng_service *svc, const int32_t *ids, int n, char **out_text,
                           wk_error *err);

/* Renders conv with the served model's chat template and counts its tokens
 * the way a request's prompt is tokenized (special-token parsing only in
 * the template's own text, BOS as the model wants). Safe from any thread.
 * WK_EUNSUPPORTED while loading or without a chat template. */
int eng_service_count_tokens(eng_service *svc, const struct chat_conv *conv, int *n_out, wk_error *err);

/* Static facts about the loaded model for /v1/models and the monitor:
 * {"id", "path", "arch", "type", "bits_per_weight", "n_params", "file_bytes",
 *  "n_ctx", "n_ctx_train", "n_vocab", "synthetic", "chat_template"}. New ref. */
json_t *eng_service_model_info(eng_service *svc);

/* Live state for the monitor: {"model": …, "memory_bytes", "cache": {…},
 * "queue_depth", "active": [..], "recent": [..]}. New reference. */
json_t *eng_service_state(eng_service *svc);

/* Queue depth and busy flag for /metrics. */
void eng_service_load(eng_service *svc, int *queue_depth, int *busy);

/* Cache hits/misses so far (a hit = some prefix reused). */
void eng_service_cache_stats(eng_service *svc, uint64_t *hits, uint64_t *misses);

/* The plugged-in prefix store's monitor view as of the last finished
 * request (see eng_prefix_store.state_json), or NULL. New reference. */
json_t *eng_service_store_state(eng_service *svc);

/* Drops the cached sequence (next request prefills from scratch). Queued
 * behind running work; returns once done. */
int eng_service_reset_cache(eng_service *svc, wk_error *err);

/* Reloads the model from its file (same config). Requests queued meanwhile
 * wait; returns once the new model serves. */
int eng_service_reload(eng_service *svc, wk_error *err);

bool eng_service_ready(eng_service *svc);
int eng_service_n_ctx(eng_service *svc);
const char *eng_service_model_id(eng_service *svc);

/* Fills the usage + timings pair the API returns from counters. New refs. */
json_t *eng_counters_usage_json(const eng_counters *c);
json_t *eng_counters_timings_json(const eng_counters *c);

#endif
