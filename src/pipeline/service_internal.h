/* Internals shared by the service's files: service.c (thread, queue,
 * control, queries), service_job.c (jobs and their event channel) and
 * service_monitor.c (live state and recent requests for the monitor). */
#ifndef WICK_PIPELINE_SERVICE_INTERNAL_H
#define WICK_PIPELINE_SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "pipeline/service.h"

enum job_phase { JOB_QUEUED = 0, JOB_PREFILL, JOB_DECODE, JOB_DONE };

struct pl_job {
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

struct pl_service {
    pl_service_config cfg;
    char model_path[4096];
    char model_id[256];
    char chat_template_name[64];
    char cache_dir[4096];

    pthread_t *threads;       /* the engine threads: one per sequence in flight (--parallel) */
    int n_threads;

    /* Queue + control requests, guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* engine threads: work or control arrived, a job ended */
    pthread_cond_t ctrl_done; /* callers of reset/reload */
    pl_job **queue;
    int q_head, q_len, q_cap;
    bool stop;
    int ctrl_pending;         /* 0, CTRL_RESET, CTRL_RELOAD */
    unsigned ctrl_seq_req, ctrl_seq_done;
    int ctrl_rc;
    wk_error ctrl_err;
    pl_job **active;          /* jobs the engine works on [n_active] (monitor) */
    int n_active;
    bool ctrl_running;        /* a control request runs: no job starts */
    bool archiving;           /* an archive step runs */
    json_t *recent;           /* array of completed-request summaries, newest last */
    ckpt_cache_stats cache_st;/* the cache's counters after the last job */
    json_t *cache_json;       /* its monitor view after the last job */
    int32_t last_pos;         /* tokens in the sequence the last request used (monitor) */

    /* The model. Written only by the engine thread under model_lock (write);
     * tokenize/detokenize/model_info read it under model_lock (read). */
    pthread_rwlock_t model_lock;
    atomic_bool ready;
    pl_engine *pe;
    json_t *model_info;
    size_t weight_bytes, state_bytes, spec_bytes;
    uint64_t kv_bytes_per_token; /* KV cache bytes per position, all attention layers */
};

enum { CTRL_RESET = 1, CTRL_RELOAD = 2 };

/* service_job.c */
/* A fresh job with one reference. */
pl_job *svc_job_new(void);
void svc_job_ref(pl_job *job);
/* Pushes an event onto the job's channel (takes ev->text). Final events
 * (DONE, ERROR) close the channel; pushes after that are dropped. */
void svc_job_push(pl_job *job, eng_event *ev);
/* Pushes an ERROR event. */
void svc_job_fail(pl_job *job, int http_status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* service_monitor.c */
/* Records a finished request for the monitor and the log (final as sent). */
void svc_record_done(pl_service *svc, pl_job *job, const eng_event *final);
/* The static facts of the loaded model (pl_service_model_info's source). */
json_t *svc_build_model_info(pl_service *svc);

#endif
