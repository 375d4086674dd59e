/* The engine service threads: a bounded queue of jobs run through the
 * pipeline, up to `parallel` at once (one thread each), control requests
 * (reset cache, reload) when none runs, the disk archive written in bounded
 * steps while nothing else is to do, and the read-only queries other threads
 * may make. Lock order: the engine's lock (pl_engine_lock) before svc->lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/service_internal.h"
#include "util/log.h"
#include "util/timeutil.h"

/* Archive work per idle step: small enough that a request arriving
 * meanwhile waits at most a few tens of milliseconds. */
#define ARCHIVE_STEP_BYTES ((size_t)32 << 20)

/* ---- model lifetime (engine thread, model_lock held for writing) ---------------- */

static void unload_model(pl_service *svc)
{
    pl_engine_close(svc->pe); /* finishes pending archive writes */
    json_decref(svc->model_info);
    svc->pe = NULL;
    svc->model_info = NULL;
}

static int load_model(pl_service *svc, wk_error *err)
{
    int rc = pl_engine_open(&svc->pe, &svc->cfg.pipeline, err);
    if (rc) return rc;
    const model *m = pl_engine_model(svc->pe);
    svc->kv_bytes_per_token = eng_kv_bytes_per_token(pl_engine_ctx(svc->pe));
    svc->state_bytes = (size_t)svc->kv_bytes_per_token * (size_t)pl_engine_n_ctx(svc->pe) +
                       (model_conv_elems(m) + model_ssm_elems(m)) * sizeof(float) * m->hp.n_rec_layers;
    svc->spec_bytes = pl_engine_spec_bytes(svc->pe);
    svc->model_info = svc_build_model_info(svc);
    return 0;
}

/* The cache's counters and view for the monitor, after engine-thread work. */
static void snapshot_cache(pl_service *svc)
{
    ckpt_cache_stats st = {0};
    json_t *j = NULL;
    if (svc->pe) {
        pl_engine_lock(svc->pe);
        ckpt_cache_get_stats(pl_engine_cache(svc->pe), &st);
        j = ckpt_cache_json(pl_engine_cache(svc->pe));
        pl_engine_unlock(svc->pe);
    }
    pthread_mutex_lock(&svc->lock);
    svc->cache_st = st;
    json_decref(svc->cache_json);
    svc->cache_json = j;
    pthread_mutex_unlock(&svc->lock);
}

/* ---- one job: the pipeline's sink ---------------------------------------------- */

typedef struct job_run {
    pl_service *svc;
    pl_job *job;
} job_run;

static void sink_event(void *user, eng_event *ev) { svc_job_push(((job_run *)user)->job, ev); }

static void sink_progress(void *user, int32_t done, int32_t total)
{
    pl_job *job = ((job_run *)user)->job;
    pl_service *svc = ((job_run *)user)->svc;
    (void)total;
    pthread_mutex_lock(&svc->lock);
    job->prefill_done = done;
    pthread_mutex_unlock(&svc->lock);
}

static void sink_live(void *user, int phase, const eng_counters *c)
{
    pl_job *job = ((job_run *)user)->job;
    pl_service *svc = ((job_run *)user)->svc;
    pthread_mutex_lock(&svc->lock);
    if (phase == PL_PHASE_PREFILL) {
        job->prefill_total = c->recomputed_tokens;
        job->prefill_done = 0;
    }
    if (phase == PL_PHASE_DECODE && job->phase != JOB_DECODE) {
        job->phase = JOB_DECODE;
        job->t_first_ms = 0;
    }
    if (phase == PL_PHASE_DECODE && c->completion_tokens == 1 && job->t_first_ms == 0) job->t_first_ms = wk_now_ms();
    job->live = *c;
    pthread_mutex_unlock(&svc->lock);
}

/* The response goes out here, before the cache confirms anything. */
static void sink_finish(void *user, const eng_event *final)
{
    pl_job *job = ((job_run *)user)->job;
    pl_service *svc = ((job_run *)user)->svc;
    eng_event ev = *final;
    ev.text = NULL;
    ev.counters.queue_ms = job->t_start_ms - job->t_submit_ms;
    svc_record_done(svc, job, &ev);
    ckpt_cache_stats st = {0};
    if (svc->pe) ckpt_cache_get_stats(pl_engine_cache(svc->pe), &st); /* hits and misses are final by now */
    pthread_mutex_lock(&svc->lock);
    svc->cache_st = st;
    pthread_mutex_unlock(&svc->lock);
    svc_job_push(job, &ev);
    pthread_mutex_lock(&svc->lock);
    job->phase = JOB_DONE;
    svc->last_pos = ev.counters.prompt_tokens + ev.counters.completion_tokens;
    pthread_mutex_unlock(&svc->lock);
}

static void run_job(pl_service *svc, pl_job *job)
{
    job_run jr = {svc, job};
    if (atomic_load(&job->cancel)) {
        eng_event ev = {0};
        ev.type = ENG_EV_ERROR;
        ev.http_status = 499;
        snprintf(ev.error_type, sizeof ev.error_type, "cancelled");
        snprintf(ev.message, sizeof ev.message, "request cancelled before it started");
        pl_engine_lock(svc->pe); /* the cache's counters, read beside other requests */
        sink_finish(&jr, &ev);
        pl_engine_unlock(svc->pe);
        return;
    }
    pl_sink sink = {.user = &jr,
                    .event = sink_event,
                    .progress = sink_progress,
                    .live = sink_live,
                    .finish = sink_finish,
                    .cancel = &job->cancel};
    pl_run(svc->pe, &job->req, &sink, NULL);
}

/* ---- the thread ---------------------------------------------------------------- */

/* Runs a control request taken from the queue; answers the callers whose
 * requests were pending when it was taken (sequence numbers <= seq). */
static void run_control(pl_service *svc, int ctrl, unsigned seq)
{
    wk_error err = {0};
    int rc = 0;
    if (ctrl == CTRL_RESET) {
        if (svc->pe) ckpt_cache_clear(pl_engine_cache(svc->pe));
        svc->last_pos = 0;
    } else if (ctrl == CTRL_RELOAD) {
        atomic_store(&svc->ready, false);
        pthread_rwlock_wrlock(&svc->model_lock);
        unload_model(svc);
        rc = load_model(svc, &err);
        pthread_rwlock_unlock(&svc->model_lock);
        svc->last_pos = 0;
        if (rc == 0) atomic_store(&svc->ready, true);
        else WK_ERROR("reload failed: %s", err.msg);
    }
    snapshot_cache(svc);
    pthread_mutex_lock(&svc->lock);
    svc->ctrl_rc = rc;
    svc->ctrl_err = err;
    svc->ctrl_seq_done = seq;
    pthread_cond_broadcast(&svc->ctrl_done);
    pthread_mutex_unlock(&svc->lock);
}

/* Archive work while nothing else waits; true when some remains (no job runs). */
static bool archive_pending(pl_service *svc)
{
    return svc->pe && ckpt_cache_archive_pending(pl_engine_cache(svc->pe));
}

static void active_remove(pl_service *svc, pl_job *job)
{
    for (int i = 0; i < svc->n_active; i++)
        if (svc->active[i] == job) {
            svc->active[i] = svc->active[--svc->n_active];
            break;
        }
}

/* One engine thread (svc->lock held on entry and exit between the branches). */
static void *engine_main(void *arg)
{
    pl_service *svc = arg;
    pthread_mutex_lock(&svc->lock);
    for (;;) {
        if (svc->stop) break;
        if (svc->ctrl_pending && svc->n_active == 0 && !svc->ctrl_running && !svc->archiving) {
            int ctrl = svc->ctrl_pending;
            unsigned seq = svc->ctrl_seq_req;
            svc->ctrl_pending = 0;
            svc->ctrl_running = true;
            pthread_mutex_unlock(&svc->lock);
            run_control(svc, ctrl, seq);
            pthread_mutex_lock(&svc->lock);
            svc->ctrl_running = false;
            pthread_cond_broadcast(&svc->wake);
            continue;
        }
        if (svc->q_len > 0 && !svc->ctrl_pending && !svc->ctrl_running && !svc->archiving) {
            pl_job *job = svc->queue[svc->q_head];
            svc->q_head = (svc->q_head + 1) % svc->q_cap;
            svc->q_len--;
            svc->active[svc->n_active++] = job;
            job->phase = JOB_PREFILL;
            job->t_start_ms = wk_now_ms();
            pthread_mutex_unlock(&svc->lock);
            if (!atomic_load(&svc->ready)) svc_job_fail(job, 503, "unavailable_error", "model is not loaded");
            else run_job(svc, job);
            snapshot_cache(svc);
            pthread_mutex_lock(&svc->lock);
            active_remove(svc, job);
            pthread_cond_broadcast(&svc->wake); /* a control request may wait for the last job */
            pl_job_release(job);
            continue;
        }
        if (svc->n_active == 0 && !svc->ctrl_running && !svc->archiving && !svc->ctrl_pending && svc->q_len == 0 &&
            archive_pending(svc)) { /* idle: one bounded step of the disk archive, then look again */
            svc->archiving = true;
            pthread_mutex_unlock(&svc->lock);
            if (!ckpt_cache_archive_step(pl_engine_cache(svc->pe), ARCHIVE_STEP_BYTES)) snapshot_cache(svc);
            pthread_mutex_lock(&svc->lock);
            svc->archiving = false;
            pthread_cond_broadcast(&svc->wake);
            continue;
        }
        pthread_cond_wait(&svc->wake, &svc->lock);
    }
    /* Fail whatever is still queued so no reader waits forever. */
    while (svc->q_len) {
        pl_job *job = svc->queue[svc->q_head];
        svc->q_head = (svc->q_head + 1) % svc->q_cap;
        svc->q_len--;
        svc_job_fail(job, 503, "unavailable_error", "server is shutting down");
        pl_job_release(job);
    }
    pthread_mutex_unlock(&svc->lock);
    return NULL;
}

int pl_service_start(const pl_service_config *cfg, pl_service **out, wk_error *err)
{
    *out = NULL;
    if (!cfg->pipeline.model_path) return wk_fail(err, WK_EINVAL, "no model path given");
    pl_service *svc = calloc(1, sizeof *svc);
    if (!svc) return wk_fail(err, WK_ENOMEM, "out of memory");
    svc->cfg = *cfg;
    const char *path = cfg->pipeline.model_path;
    snprintf(svc->model_path, sizeof svc->model_path, "%s", path);
    if (cfg->model_id && *cfg->model_id) {
        snprintf(svc->model_id, sizeof svc->model_id, "%s", cfg->model_id);
    } else {
        const char *base = strrchr(path, '/');
        snprintf(svc->model_id, sizeof svc->model_id, "%s", base ? base + 1 : path);
        char *dot = strrchr(svc->model_id, '.');
        if (dot && strcmp(dot, ".gguf") == 0) *dot = '\0';
    }
    snprintf(svc->chat_template_name, sizeof svc->chat_template_name, "%s",
             cfg->pipeline.chat_template ? cfg->pipeline.chat_template : "");
    snprintf(svc->cache_dir, sizeof svc->cache_dir, "%s", cfg->pipeline.cache.dir ? cfg->pipeline.cache.dir : "");
    svc->cfg.pipeline.model_path = svc->model_path;
    svc->cfg.pipeline.chat_template = svc->chat_template_name;
    svc->cfg.pipeline.cache.dir = svc->cache_dir[0] ? svc->cache_dir : NULL;
    svc->cfg.model_id = svc->model_id;
    if (svc->cfg.max_queue <= 0) svc->cfg.max_queue = 64;
    if (svc->cfg.n_recent <= 0) svc->cfg.n_recent = 50;
    if (svc->cfg.parallel <= 0) svc->cfg.parallel = 1;
    svc->cfg.pipeline.eng.n_seq = svc->cfg.parallel;
    svc->q_cap = svc->cfg.max_queue;
    svc->queue = calloc((size_t)svc->q_cap, sizeof *svc->queue);
    svc->active = calloc((size_t)svc->cfg.parallel, sizeof *svc->active);
    svc->threads = calloc((size_t)svc->cfg.parallel, sizeof *svc->threads);
    svc->recent = json_array();
    pthread_mutex_init(&svc->lock, NULL);
    pthread_cond_init(&svc->wake, NULL);
    pthread_cond_init(&svc->ctrl_done, NULL);
    pthread_rwlock_init(&svc->model_lock, NULL);
    int rc = svc->queue && svc->active && svc->threads && svc->recent ? load_model(svc, err)
                                                                       : wk_fail(err, WK_ENOMEM, "out of memory");
    if (rc == 0) {
        atomic_store(&svc->ready, true);
        snapshot_cache(svc);
        for (int i = 0; i < svc->cfg.parallel && !rc; i++) {
            if (pthread_create(&svc->threads[i], NULL, engine_main, svc) != 0)
                rc = wk_fail(err, WK_ENOMEM, "cannot start engine thread %d", i + 1);
            else
                svc->n_threads++;
        }
    }
    if (rc) {
        pl_service_stop(svc);
        return rc;
    }
    *out = svc;
    return 0;
}

void pl_service_stop(pl_service *svc)
{
    if (!svc) return;
    pthread_mutex_lock(&svc->lock);
    svc->stop = true;
    for (int i = 0; i < svc->n_active; i++) pl_job_cancel(svc->active[i]);
    pthread_cond_broadcast(&svc->wake);
    pthread_mutex_unlock(&svc->lock);
    for (int i = 0; i < svc->n_threads; i++) pthread_join(svc->threads[i], NULL);
    unload_model(svc);
    json_decref(svc->recent);
    json_decref(svc->cache_json);
    free(svc->queue);
    free(svc->active);
    free(svc->threads);
    pthread_mutex_destroy(&svc->lock);
    pthread_cond_destroy(&svc->wake);
    pthread_cond_destroy(&svc->ctrl_done);
    pthread_rwlock_destroy(&svc->model_lock);
    free(svc);
}

int pl_service_submit(pl_service *svc, eng_request *req, pl_job **out, wk_error *err)
{
    *out = NULL;
    if (!atomic_load(&svc->ready)) {
        eng_request_clear(req);
        return wk_fail(err, WK_EUNSUPPORTED, "model is loading, try again shortly");
    }
    pl_job *job = svc_job_new();
    if (!job) {
        eng_request_clear(req);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    job->req = *req;
    memset(req, 0, sizeof *req);
    job->t_submit_ms = wk_now_ms();
    pthread_mutex_lock(&svc->lock);
    if (svc->stop || svc->q_len == svc->q_cap) {
        bool stopping = svc->stop;
        pthread_mutex_unlock(&svc->lock);
        pl_job_release(job);
        return stopping ? wk_fail(err, WK_EUNSUPPORTED, "server is shutting down")
                        : wk_fail(err, WK_EBUSY, "too many requests: %d already queued", svc->q_cap);
    }
    svc_job_ref(job); /* the queue's reference */
    svc->queue[(svc->q_head + svc->q_len) % svc->q_cap] = job;
    svc->q_len++;
    pthread_cond_signal(&svc->wake);
    pthread_mutex_unlock(&svc->lock);
    *out = job;
    return 0;
}

static int run_ctrl(pl_service *svc, int ctrl, wk_error *err)
{
    pthread_mutex_lock(&svc->lock);
    if (svc->stop) {
        pthread_mutex_unlock(&svc->lock);
        return wk_fail(err, WK_EUNSUPPORTED, "server is shutting down");
    }
    /* A reload supersedes a reset; either way one run answers both callers. */
    if (ctrl > svc->ctrl_pending) svc->ctrl_pending = ctrl;
    unsigned my = ++svc->ctrl_seq_req;
    pthread_cond_broadcast(&svc->wake);
    while ((int)(svc->ctrl_seq_done - my) < 0 && !svc->stop) pthread_cond_wait(&svc->ctrl_done, &svc->lock);
    int rc = svc->ctrl_rc;
    if (rc && err) *err = svc->ctrl_err;
    pthread_mutex_unlock(&svc->lock);
    return rc;
}

int pl_service_reset_cache(pl_service *svc, wk_error *err) { return run_ctrl(svc, CTRL_RESET, err); }
int pl_service_reload(pl_service *svc, wk_error *err) { return run_ctrl(svc, CTRL_RELOAD, err); }

/* ---- read-only queries from other threads -------------------------------------------- */

int pl_service_tokenize(pl_service *svc, const char *text, bool parse_special, int32_t **out_ids, int *out_n,
                        wk_error *err)
{
    *out_ids = NULL;
    *out_n = 0;
    pthread_rwlock_rdlock(&svc->model_lock);
    const tok_vocab *v = svc->pe ? pl_engine_vocab(svc->pe) : NULL;
    if (!v) {
        pthread_rwlock_unlock(&svc->model_lock);
        return wk_fail(err, WK_EUNSUPPORTED, svc->pe ? "this model has no tokenizer" : "model is loading");
    }
    size_t n = 0;
    int rc = tok_encode(v, text, strlen(text), false, parse_special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE, out_ids, &n,
                        err);
    pthread_rwlock_unlock(&svc->model_lock);
    *out_n = (int)n;
    return rc;
}

int pl_service_detokenize(pl_service *svc, const int32_t *ids, int n, char **out_text, wk_error *err)
{
    *out_text = NULL;
    pthread_rwlock_rdlock(&svc->model_lock);
    const tok_vocab *v = svc->pe ? pl_engine_vocab(svc->pe) : NULL;
    if (!v) {
        pthread_rwlock_unlock(&svc->model_lock);
        return wk_fail(err, WK_EUNSUPPORTED, svc->pe ? "this model has no tokenizer" : "model is loading");
    }
    size_t len = 0;
    int rc = tok_decode(v, ids, (size_t)n, TOK_DECODE_SPECIAL, out_text, &len, err);
    pthread_rwlock_unlock(&svc->model_lock);
    return rc;
}

int pl_service_count_tokens(pl_service *svc, const struct chat_conv *conv, int *n_out, wk_error *err)
{
    *n_out = 0;
    pthread_rwlock_rdlock(&svc->model_lock);
    int32_t *ids = NULL, n = 0;
    int rc = svc->pe ? pl_chat_tokens(svc->pe, conv, &ids, &n, err) : wk_fail(err, WK_EUNSUPPORTED, "model is loading");
    pthread_rwlock_unlock(&svc->model_lock);
    free(ids);
    if (!rc) *n_out = n;
    return rc;
}

bool pl_service_ready(pl_service *svc) { return atomic_load(&svc->ready); }

int pl_service_n_ctx(pl_service *svc)
{
    pthread_rwlock_rdlock(&svc->model_lock);
    int n = svc->pe ? pl_engine_n_ctx(svc->pe) : 0;
    pthread_rwlock_unlock(&svc->model_lock);
    return n;
}

const char *pl_service_model_id(pl_service *svc) { return svc->model_id; }

void pl_service_load(pl_service *svc, int *queue_depth, int *busy)
{
    pthread_mutex_lock(&svc->lock);
    *queue_depth = svc->q_len;
    *busy = svc->n_active;
    pthread_mutex_unlock(&svc->lock);
}

void pl_service_cache_stats(pl_service *svc, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&svc->lock);
    *hits = svc->cache_st.hits;
    *misses = svc->cache_st.misses;
    pthread_mutex_unlock(&svc->lock);
}

json_t *pl_service_cache_state(pl_service *svc)
{
    pthread_mutex_lock(&svc->lock);
    json_t *o = svc->cache_json ? json_deep_copy(svc->cache_json) : NULL;
    pthread_mutex_unlock(&svc->lock);
    return o;
}
