/* Internals shared by service.c (thread, queue, jobs, monitor state) and
 * service_run.c (one request: render → tokenize → reuse → prefill → decode). */
#ifndef WICK_ENGINE_SERVICE_INTERNAL_H
#define WICK_ENGINE_SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "chat/chat.h"
#include "chat/chat_parse.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "engine/service.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

enum job_phase { JOB_QUEUED = 0, JOB_PREFILL, JOB_DECODE, JOB_DONE };

struct eng_job {
    atomic_int refs;
    atomic_bool cancel;
    eng_request req;

    /* Event channel (engine → HTTP), guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    eng_event *events;
    int ev_head, ev_len, ev_cap;
    bool final_queued;    /* DONE or ERROR pushed */
    bool final_delivered; /* ... and taken by the reader */

    /* Live progress for the monitor, guarded by the service lock. */
    int phase;             /* enum job_phase */
    double t_submit_ms, t_start_ms, t_first_ms;
    int prefill_done, prefill_total;
    eng_counters live;
};

struct eng_service {
    eng_service_config cfg;
    char model_path[4096];
    char model_id[256];
    char chat_template_name[64];

    pthread_t thread;
    bool thread_started;

    /* Queue + control requests, guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* engine: work or control arrived */
    pthread_cond_t ctrl_done; /* callers of reset/reload */
    eng_job **queue;
    int q_head, q_len, q_cap;
    bool stop;
    int ctrl_pending;         /* 0, CTRL_RESET, CTRL_RELOAD */
    unsigned ctrl_seq_req, ctrl_seq_done;
    int ctrl_rc;
    wk_error ctrl_err;
    eng_job *active;          /* job the engine works on (monitor) */
    json_t *recent;           /* array of completed-request summaries, newest last */
    uint64_t cache_hits, cache_misses;
    int seq_pos_snapshot;     /* eng_seq_pos after the last job (monitor) */

    /* The model. Written only by the engine thread under model_lock (write);
     * tokenize/detokenize/model_info read it under model_lock (read). */
    pthread_rwlock_t model_lock;
    atomic_bool ready;
    model *model;
    tok_vocab *vocab;
    chat_template tmpl;
    bool has_tmpl;
    eng_ctx *ctx;
    eng_seq *seq;
    int n_ctx;
    json_t *model_info;
    size_t weight_bytes, state_bytes;
    uint64_t kv_bytes_per_token; /* KV cache bytes per position, all attention layers */
    eng_prefix_store store;   /* plugged-in prefix cache (store.self NULL: none) */
    int32_t last_pos;         /* tokens in the sequence the last request used */
    json_t *store_json;       /* monitor copy of store.state_json, under lock */
};

enum { CTRL_RESET = 1, CTRL_RELOAD = 2 };

/* Pushes an event onto the job's channel (takes ev->text). Final events
 * (DONE, ERROR) close the channel; pushes after that are dropped. */
void job_push(eng_job *job, eng_event *ev);
/* Pushes an ERROR event. */
void job_fail(eng_job *job, int http_status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs one request on the engine thread, start to final event. */
void svc_run_job(eng_service *svc, eng_job *job);

/* How many tokens of the current sequence the new prompt can keep: the
 * longest common prefix, less one so the last prompt token is always
 * computed (its logits start decoding); for models with recurrent layers,
 * whose state cannot be cut back, only a prefix covering the whole previous
 * sequence. 0 when fresh. This is the one place the reuse decision is made. */
int32_t svc_reuse_decision(const eng_seq *seq, bool has_recurrent, const int32_t *ids, int32_t n,
                           bool fresh);

/* Turns generated text into DELTA events on a job (service_output.c). */
typedef struct svc_output {
    eng_job *job;
    chat_parser *parser; /* NULL: completion (everything is content) */
    chat_delta delta;
    int n_calls;         /* tool calls emitted so far */
    bool any_reasoning_this_token;
    bool any_content_this_token;
} svc_output;

/* Feeds text that passed the stop-string filter. */
void svc_output_text(svc_output *o, const char *t, size_t n);
/* End of generation: flushes what the parser held back. */
void svc_output_finish(svc_output *o);

/* A fresh job with one reference (tests and eng_service_submit). */
eng_job *svc_job_new(void);

/* Token positions of the prompt's chat boundaries: seg_tok[i] = tokens
 * before segment i (bos = 1 if a BOS was put in front). Boundaries inside a
 * segment map to that segment's start (earlier is always safe). *out is
 * malloc'd (caller frees), *n_out its count. */
int svc_map_boundaries(const chat_prompt *p, const size_t *seg_tok, eng_mark **out, int *n_out);

/* Records a finished request for the monitor (counters as returned). */
void svc_record_done(eng_service *svc, eng_job *job, const char *status, const char *finish,
                     const eng_counters *c);

#endif
