/* The engine service thread: a bounded queue of jobs, one job at a time,
 * control requests (reset cache, reload) between jobs, per-job event
 * channels and the live state the monitor shows. The per-request pipeline
 * is in service_run.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_conv.h"
#include "engine/service_internal.h"
#include "gguf/gguf.h"
#include "quant/qtypes.h"
#include "util/log.h"
#include "util/timeutil.h"

/* ---- jobs and their event channel ------------------------------------------- */

eng_job *svc_job_new(void)
{
    eng_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    return j;
}

static void job_ref(eng_job *j) { atomic_fetch_add(&j->refs, 1); }

void eng_job_release(eng_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    for (int i = 0; i < j->ev_len; i++) eng_event_clear(&j->events[(j->ev_head + i) % j->ev_cap]);
    free(j->events);
    eng_request_clear(&j->req);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
}

void job_push(eng_job *j, eng_event *ev)
{
    pthread_mutex_lock(&j->lock);
    if (j->final_queued) {
        pthread_mutex_unlock(&j->lock);
        eng_event_clear(ev);
        return;
    }
    /* One slot always stays free for the final event, so it can never be
     * lost to a failed allocation (a delta may be). */
    bool is_final = ev->type == ENG_EV_DONE || ev->type == ENG_EV_ERROR;
    if (j->ev_len + (is_final ? 0 : 1) >= j->ev_cap) {
        int cap = j->ev_cap ? j->ev_cap * 2 : 16;
        eng_event *ne = malloc((size_t)cap * sizeof *ne);
        if (!ne && !(is_final && j->ev_len < j->ev_cap)) {
            pthread_mutex_unlock(&j->lock);
            eng_event_clear(ev);
            return;
        }
        if (ne) {
            for (int i = 0; i < j->ev_len; i++) ne[i] = j->events[(j->ev_head + i) % j->ev_cap];
            free(j->events);
            j->events = ne;
            j->ev_head = 0;
            j->ev_cap = cap;
        }
    }
    j->events[(j->ev_head + j->ev_len) % j->ev_cap] = *ev;
    j->ev_len++;
    if (is_final) j->final_queued = true;
    memset(ev, 0, sizeof *ev);
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

void job_fail(eng_job *j, int http_status, const char *type, const char *fmt, ...)
{
    eng_event ev = {0};
    ev.type = ENG_EV_ERROR;
    ev.http_status = http_status;
    snprintf(ev.error_type, sizeof ev.error_type, "%s", type ? type : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev.message, sizeof ev.message, fmt, ap);
    va_end(ap);
    job_push(j, &ev);
}

int eng_job_next_event(eng_job *j, int timeout_ms, eng_event *ev)
{
    pthread_mutex_lock(&j->lock);
    if (j->ev_len == 0 && !j->final_delivered && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (j->ev_len == 0 && !j->final_delivered)
            if (pthread_cond_timedwait(&j->cond, &j->lock, &ts) != 0) break;
    }
    int rc;
    if (j->ev_len > 0) {
        *ev = j->events[j->ev_head];
        j->ev_head = (j->ev_head + 1) % j->ev_cap;
        j->ev_len--;
        if (ev->type == ENG_EV_DONE || ev->type == ENG_EV_ERROR) j->final_delivered = true;
        rc = 1;
    } else {
        rc = j->final_delivered ? -1 : 0;
    }
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void eng_job_cancel(eng_job *j)
{
    if (j) atomic_store(&j->cancel, true);
}

/* ---- model lifetime (engine thread, model_lock held for writing) ---------------- */

static void unload_model(eng_service *svc)
{
    if (svc->store.self) svc->store.free(svc->store.self);
    memset(&svc->store, 0, sizeof svc->store);
    if (svc->seq) eng_seq_free(svc->seq);
    if (svc->ctx) eng_ctx_free(svc->ctx);
    if (svc->vocab) tok_free(svc->vocab);
    if (svc->model) model_free(svc->model);
    json_decref(svc->model_info);
    svc->seq = NULL;
    svc->ctx = NULL;
    svc->vocab = NULL;
    svc->model = NULL;
    svc->model_info = NULL;
    svc->has_tmpl = false;
}

/* The tensor type holding most weight bytes ("Q8_0"), for the monitor. */
static const char *dominant_type(const gguf_file *f, uint64_t *n_params, uint64_t *tensor_bytes)
{
    uint64_t by_type[64] = {0};
    *n_params = *tensor_bytes = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        *n_params += t->n_elements;
        *tensor_bytes += t->n_bytes;
        if (t->type < 64) by_type[t->type] += t->n_bytes;
    }
    uint32_t best = 0;
    for (uint32_t k = 1; k < 64; k++)
        if (by_type[k] > by_type[best]) best = k;
    const char *n = qt_type_name(best);
    return n ? n : "?";
}

static json_t *build_model_info(eng_service *svc)
{
    const gguf_file *f = svc->model->file;
    uint64_t n_params, tensor_bytes;
    const char *type = dominant_type(f, &n_params, &tensor_bytes);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(svc->model_id));
    json_object_set_new(o, "path", json_string(svc->model_path));
    json_object_set_new(o, "arch", json_string(model_arch_name(svc->model->arch)));
    gguf_str name = {0};
    if (gguf_get_str(f, "general.name", &name, NULL) == 0 && name.ptr)
        json_object_set_new(o, "name", json_stringn(name.ptr, (size_t)name.len));
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "bits_per_weight",
                        json_real(n_params ? (double)tensor_bytes * 8.0 / (double)n_params : 0.0));
    json_object_set_new(o, "n_params", json_integer((json_int_t)n_params));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)gguf_file_size(f)));
    json_object_set_new(o, "n_ctx", json_integer(svc->n_ctx));
    json_object_set_new(o, "n_ctx_train", json_integer(svc->model->hp.n_ctx_train));
    json_object_set_new(o, "n_vocab", json_integer(tok_n_vocab(svc->vocab)));
    json_object_set_new(o, "n_layer", json_integer(svc->model->hp.n_layer));
    json_object_set_new(o, "n_embd", json_integer(svc->model->hp.n_embd));
    json_object_set_new(o, "recurrent_layers", json_integer(svc->model->hp.n_rec_layers));
    json_object_set_new(o, "synthetic", json_boolean(svc->cfg.synthetic));
    json_object_set_new(o, "chat_template",
                        svc->has_tmpl ? json_string(chat_template_name(svc->tmpl.kind)) : json_null());
    json_object_set_new(o, "tokenizer", json_string(tok_model_name(svc->vocab)));
    svc->weight_bytes = (size_t)tensor_bytes;
    return o;
}

static int load_model(eng_service *svc, wk_error *err)
{
    int rc = model_load(&svc->model, svc->model_path, err);
    if (rc) return rc;
    rc = tok_load_from_gguf(&svc->vocab, svc->model->file, err);
    if (rc) {
        wk_fail_prefix(err, "%s: tokenizer", svc->model_path);
        goto fail;
    }
    /* No usable chat template is not fatal: /v1/completions still works and
     * chat requests get a clear 400 naming --chat-template. */
    gguf_str jinja = {0};
    char *jinja_z = NULL;
    if (gguf_get_str(svc->model->file, "tokenizer.chat_template", &jinja, NULL) == 0 && jinja.ptr)
        jinja_z = strndup(jinja.ptr, (size_t)jinja.len);
    wk_error terr = {0};
    svc->has_tmpl = chat_template_select(&svc->tmpl, jinja_z, svc->chat_template_name[0] ? svc->chat_template_name : NULL,
                                         &terr) == 0;
    free(jinja_z);
    if (!svc->has_tmpl) {
        if (svc->chat_template_name[0]) {
            rc = wk_fail(err, WK_EINVAL, "%s", terr.msg);
            goto fail;
        }
        WK_WARN("%s: no usable chat template (%s); /v1/chat/completions needs --chat-template NAME (%s)",
                svc->model_path, terr.msg, CHAT_TEMPLATE_NAMES);
    }

    eng_options o;
    eng_options_default(&o);
    o.n_threads = svc->cfg.n_threads;
    o.policy = svc->cfg.policy;
    o.kv_type = svc->cfg.kv_type;
    o.device = svc->cfg.device;
    o.gpu = svc->cfg.gpu;
    uint32_t train = svc->model->hp.n_ctx_train ? svc->model->hp.n_ctx_train : 4096;
    /* Default context: the model's, capped at 8192 to keep KV memory modest. */
    o.n_ctx = svc->cfg.n_ctx > 0 ? svc->cfg.n_ctx : (int32_t)(train < 8192 ? train : 8192);
    rc = eng_ctx_new(&svc->ctx, svc->model, &o, err);
    if (rc) goto fail;
    if (svc->cfg.store_factory) {
        /* The prefix cache owns the sequences. */
        rc = svc->cfg.store_factory(svc->cfg.store_user, svc->ctx, o.n_ctx, &svc->store, err);
        if (rc) goto fail;
        svc->n_ctx = o.n_ctx;
    } else {
        rc = eng_seq_new(&svc->seq, svc->ctx, o.n_ctx, err);
        if (rc) goto fail;
        svc->n_ctx = eng_seq_capacity(svc->seq);
    }
    svc->last_pos = 0;
    svc->kv_bytes_per_token = eng_kv_bytes_per_token(svc->ctx);
    svc->state_bytes = (size_t)svc->kv_bytes_per_token * (size_t)svc->n_ctx +
                       (model_conv_elems(svc->model) + model_ssm_elems(svc->model)) * sizeof(float) *
                           svc->model->hp.n_rec_layers;
    svc->model_info = build_model_info(svc);
    return 0;
fail:
    unload_model(svc);
    return rc;
}

/* ---- the thread ---------------------------------------------------------------- */

/* Runs a control request taken from the queue; answers the callers whose
 * requests were pending when it was taken (sequence numbers <= seq). */
static void run_control(eng_service *svc, int ctrl, unsigned seq)
{
    wk_error err = {0};
    int rc = 0;
    if (ctrl == CTRL_RESET) {
        if (svc->store.self) svc->store.clear(svc->store.self);
        if (svc->seq) eng_seq_clear(svc->seq);
        svc->last_pos = 0;
    } else if (ctrl == CTRL_RELOAD) {
        atomic_store(&svc->ready, false);
        pthread_rwlock_wrlock(&svc->model_lock);
        unload_model(svc);
        rc = load_model(svc, &err);
        pthread_rwlock_unlock(&svc->model_lock);
        if (rc == 0) atomic_store(&svc->ready, true);
        else WK_ERROR("reload failed: %s", err.msg);
    }
    json_t *sj = svc->store.self ? svc->store.state_json(svc->store.self) : NULL;
    pthread_mutex_lock(&svc->lock);
    svc->seq_pos_snapshot = svc->last_pos;
    json_decref(svc->store_json);
    svc->store_json = sj;
    svc->ctrl_rc = rc;
    svc->ctrl_err = err;
    svc->ctrl_seq_done = seq;
    pthread_cond_broadcast(&svc->ctrl_done);
    pthread_mutex_unlock(&svc->lock);
}

static void *engine_main(void *arg)
{
    eng_service *svc = arg;
    for (;;) {
        pthread_mutex_lock(&svc->lock);
        while (!svc->stop && svc->q_len == 0 && !svc->ctrl_pending) pthread_cond_wait(&svc->wake, &svc->lock);
        if (svc->stop) {
            pthread_mutex_unlock(&svc->lock);
            break;
        }
        if (svc->ctrl_pending) {
            int ctrl = svc->ctrl_pending;
            unsigned seq = svc->ctrl_seq_req;
            svc->ctrl_pending = 0;
            pthread_mutex_unlock(&svc->lock);
            run_control(svc, ctrl, seq);
            continue;
        }
        eng_job *job = svc->queue[svc->q_head];
        svc->q_head = (svc->q_head + 1) % svc->q_cap;
        svc->q_len--;
        svc->active = job;
        job->phase = JOB_PREFILL;
        job->t_start_ms = wk_now_ms();
        pthread_mutex_unlock(&svc->lock);

        if (!atomic_load(&svc->ready)) job_fail(job, 503, "unavailable_error", "model is not loaded");
        else svc_run_job(svc, job);

        json_t *sj = svc->store.self ? svc->store.state_json(svc->store.self) : NULL;
        pthread_mutex_lock(&svc->lock);
        svc->active = NULL;
        svc->seq_pos_snapshot = svc->last_pos;
        if (sj) {
            json_decref(svc->store_json);
            svc->store_json = sj;
        }
        pthread_mutex_unlock(&svc->lock);
        eng_job_release(job);
    }
    /* Fail whatever is still queued so no reader waits forever. */
    pthread_mutex_lock(&svc->lock);
    while (svc->q_len) {
        eng_job *job = svc->queue[svc->q_head];
        svc->q_head = (svc->q_head + 1) % svc->q_cap;
        svc->q_len--;
        job_fail(job, 503, "unavailable_error", "server is shutting down");
        eng_job_release(job);
    }
    pthread_mutex_unlock(&svc->lock);
    return NULL;
}

int eng_service_start(const eng_service_config *cfg, eng_service **out, wk_error *err)
{
    *out = NULL;
    if (!cfg->model_path) return wk_fail(err, WK_EINVAL, "no model path given");
    eng_service *svc = calloc(1, sizeof *svc);
    if (!svc) return wk_fail(err, WK_ENOMEM, "out of memory");
    svc->cfg = *cfg;
    snprintf(svc->model_path, sizeof svc->model_path, "%s", cfg->model_path);
    if (cfg->model_id && *cfg->model_id) {
        snprintf(svc->model_id, sizeof svc->model_id, "%s", cfg->model_id);
    } else {
        const char *base = strrchr(cfg->model_path, '/');
        snprintf(svc->model_id, sizeof svc->model_id, "%s", base ? base + 1 : cfg->model_path);
        char *dot = strrchr(svc->model_id, '.');
        if (dot && strcmp(dot, ".gguf") == 0) *dot = '\0';
    }
    snprintf(svc->chat_template_name, sizeof svc->chat_template_name, "%s",
             cfg->chat_template ? cfg->chat_template : "");
    svc->cfg.model_path = svc->model_path;
    svc->cfg.model_id = svc->model_id;
    svc->cfg.chat_template = svc->chat_template_name;
    if (svc->cfg.max_queue <= 0) svc->cfg.max_queue = 64;
    if (svc->cfg.n_recent <= 0) svc->cfg.n_recent = 50;
    svc->q_cap = svc->cfg.max_queue;
    svc->queue = calloc((size_t)svc->q_cap, sizeof *svc->queue);
    svc->recent = json_array();
    pthread_mutex_init(&svc->lock, NULL);
    pthread_cond_init(&svc->wake, NULL);
    pthread_cond_init(&svc->ctrl_done, NULL);
    pthread_rwlock_init(&svc->model_lock, NULL);
    int rc = svc->queue ? load_model(svc, err) : wk_fail(err, WK_ENOMEM, "out of memory");
    if (rc == 0) {
        atomic_store(&svc->ready, true);
        if (pthread_create(&svc->thread, NULL, engine_main, svc) != 0)
            rc = wk_fail(err, WK_ENOMEM, "cannot start the engine thread");
        else
            svc->thread_started = true;
    }
    if (rc) {
        eng_service_stop(svc);
        return rc;
    }
    *out = svc;
    return 0;
}

void eng_service_stop(eng_service *svc)
{
    if (!svc) return;
    pthread_mutex_lock(&svc->lock);
    svc->stop = true;
    if (svc->active) eng_job_cancel(svc->active);
    pthread_cond_broadcast(&svc->wake);
    pthread_mutex_unlock(&svc->lock);
    if (svc->thread_started) pthread_join(svc->thread, NULL);
    unload_model(svc);
    json_decref(svc->recent);
    json_decref(svc->store_json);
    free(svc->queue);
    pthread_mutex_destroy(&svc->lock);
    pthread_cond_destroy(&svc->wake);
    pthread_cond_destroy(&svc->ctrl_done);
    pthread_rwlock_destroy(&svc->model_lock);
    free(svc);
}

int eng_service_submit(eng_service *svc, eng_request *req, eng_job **out, wk_error *err)
{
    *out = NULL;
    if (!atomic_load(&svc->ready)) {
        eng_request_clear(req);
        return wk_fail(err, WK_EUNSUPPORTED, "model is loading, try again shortly");
    }
    eng_job *job = svc_job_new();
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
        eng_job_release(job);
        return stopping ? wk_fail(err, WK_EUNSUPPORTED, "server is shutting down")
                        : wk_fail(err, WK_EBUSY, "too many requests: %d already queued", svc->q_cap);
    }
    job_ref(job); /* the queue's reference */
    svc->queue[(svc->q_head + svc->q_len) % svc->q_cap] = job;
    svc->q_len++;
    pthread_cond_signal(&svc->wake);
    pthread_mutex_unlock(&svc->lock);
    *out = job;
    return 0;
}

static int run_ctrl(eng_service *svc, int ctrl, wk_error *err)
{
    pthread_mutex_lock(&svc->lock);
    if (svc->stop) {
        pthread_mutex_unlock(&svc->lock);
        return wk_fail(err, WK_EUNSUPPORTED, "server is shutting down");
    }
    /* A reload supersedes a reset; either way one run answers both callers. */
    if (ctrl > svc->ctrl_pending) svc->ctrl_pending = ctrl;
    unsigned my = ++svc->ctrl_seq_req;
    pthread_cond_signal(&svc->wake);
    while ((int)(svc->ctrl_seq_done - my) < 0 && !svc->stop) pthread_cond_wait(&svc->ctrl_done, &svc->lock);
    int rc = svc->ctrl_rc;
    if (rc && err) *err = svc->ctrl_err;
    pthread_mutex_unlock(&svc->lock);
    return rc;
}

int eng_service_reset_cache(eng_service *svc, wk_error *err) { return run_ctrl(svc, CTRL_RESET, err); }
int eng_service_reload(eng_service *svc, wk_error *err) { return run_ctrl(svc, CTRL_RELOAD, err); }

/* ---- read-only queries from other threads -------------------------------------------- */

int eng_service_tokenize(eng_service *svc, const char *text, bool parse_special, int32_t **out_ids,
                         int *out_n, wk_error *err)
{
    *out_ids = NULL;
    *out_n = 0;
    pthread_rwlock_rdlock(&svc->model_lock);
    if (!svc->vocab) {
        pthread_rwlock_unlock(&svc->model_lock);
        return wk_fail(err, WK_EUNSUPPORTED, "model is loading");
    }
    size_t n = 0;
    int rc = tok_encode(svc->vocab, text, strlen(text), false, parse_special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE,
                        out_ids, &n, err);
    pthread_rwlock_unlock(&svc->model_lock);
    *out_n = (int)n;
    return rc;
}

int eng_service_detokenize(eng_service *svc, const int32_t *ids, int n, char **out_text, wk_error *err)
{
    *out_text = NULL;
    pthread_rwlock_rdlock(&svc->model_lock);
    if (!svc->vocab) {
        pthread_rwlock_unlock(&svc->model_lock);
        return wk_fail(err, WK_EUNSUPPORTED, "model is loading");
    }
    size_t len = 0;
    int rc = tok_decode(svc->vocab, ids, (size_t)n, TOK_DECODE_SPECIAL, out_text, &len, err);
    pthread_rwlock_unlock(&svc->model_lock);
    return rc;
}

int eng_service_count_tokens(eng_service *svc, const struct chat_conv *conv, int *n_out, wk_error *err)
{
    *n_out = 0;
    pthread_rwlock_rdlock(&svc->model_lock);
    int rc = 0;
    if (!svc->vocab) rc = wk_fail(err, WK_EUNSUPPORTED, "model is loading");
    else if (!svc->has_tmpl)
        rc = wk_fail(err, WK_EUNSUPPORTED, "this model has no usable chat template; restart wick serve with --chat-template NAME");
    chat_prompt p = {0};
    if (!rc) rc = chat_render_conv(&svc->tmpl, conv, &p, err);
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (!rc && !p.starts_with_bos && tok_add_bos(svc->vocab) && tok_bos(svc->vocab) != TOK_NULL) {
        /* the BOS counts, and the SentencePiece space prefix depends on it */
        ids = malloc(16 * sizeof *ids);
        if (!ids) rc = wk_fail(err, WK_ENOMEM, "out of memory");
        else {
            cap = 16;
            ids[n++] = tok_bos(svc->vocab);
        }
    }
    /* as build_prompt: template text with special tokens, request text plain */
    for (size_t i = 0; !rc && i < p.n_segs; i++) {
        const chat_segment *sg = &p.segs[i];
        rc = tok_encode_append(svc->vocab, p.text + sg->offset, sg->len, false,
                               sg->special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE, &ids, &n, &cap, err);
    }
    pthread_rwlock_unlock(&svc->model_lock);
    free(ids);
    chat_prompt_free(&p);
    if (!rc) *n_out = (int)n;
    return rc;
}

json_t *eng_service_model_info(eng_service *svc)
{
    pthread_rwlock_rdlock(&svc->model_lock);
    json_t *o = svc->model_info ? json_deep_copy(svc->model_info) : json_object();
    pthread_rwlock_unlock(&svc->model_lock);
    if (!json_object_get(o, "id")) json_object_set_new(o, "id", json_string(svc->model_id));
    json_object_set_new(o, "loaded", json_boolean(atomic_load(&svc->ready)));
    return o;
}

bool eng_service_ready(eng_service *svc) { return atomic_load(&svc->ready); }
int eng_service_n_ctx(eng_service *svc)
{
    pthread_rwlock_rdlock(&svc->model_lock);
    int n = svc->n_ctx;
    pthread_rwlock_unlock(&svc->model_lock);
    return n;
}
const char *eng_service_model_id(eng_service *svc) { return svc->model_id; }

void eng_service_load(eng_service *svc, int *queue_depth, int *busy)
{
    pthread_mutex_lock(&svc->lock);
    *queue_depth = svc->q_len;
    *busy = svc->active ? 1 : 0;
    pthread_mutex_unlock(&svc->lock);
}

void eng_service_cache_stats(eng_service *svc, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&svc->lock);
    *hits = svc->cache_hits;
    *misses = svc->cache_misses;
    pthread_mutex_unlock(&svc->lock);
}

json_t *eng_service_store_state(eng_service *svc)
{
    pthread_mutex_lock(&svc->lock);
    json_t *o = svc->store_json ? json_deep_copy(svc->store_json) : NULL;
    pthread_mutex_unlock(&svc->lock);
    return o;
}

static json_t *counters_json(const eng_counters *c)
{
    json_t *o = eng_counters_timings_json(c);
    json_object_set_new(o, "reasoning_tokens", json_integer(c->reasoning_tokens));
    return o;
}

/* Live row for a queued or running job (svc->lock held). */
static json_t *active_row(const eng_job *j, double now)
{
    static const char *phases[] = {"queued", "prefill", "decode", "done"};
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->req.id));
    json_object_set_new(o, "kind", json_string(j->req.kind == ENG_REQ_CHAT ? "chat" : "completion"));
    json_object_set_new(o, "stream", json_boolean(j->req.stream));
    json_object_set_new(o, "phase", json_string(phases[j->phase]));
    json_object_set_new(o, "provisional", json_true());
    json_object_set_new(o, "cancelled", json_boolean(atomic_load(&j->cancel)));
    double started = j->phase == JOB_QUEUED ? now : j->t_start_ms;
    json_object_set_new(o, "queued_ms", json_real(started - j->t_submit_ms));
    json_object_set_new(o, "elapsed_ms", json_real(j->phase == JOB_QUEUED ? 0.0 : now - j->t_start_ms));
    json_object_set_new(o, "prefill_done", json_integer(j->prefill_done));
    json_object_set_new(o, "prefill_total", json_integer(j->prefill_total));
    /* ETA from the speed so far (computed tokens only). */
    double eta = -1;
    if (j->phase == JOB_PREFILL && j->prefill_done > 0 && j->prefill_total > j->prefill_done) {
        double el = now - j->t_start_ms;
        eta = el / j->prefill_done * (j->prefill_total - j->prefill_done);
    }
    json_object_set_new(o, "prefill_eta_ms", json_real(eta));
    eng_counters live = j->live;
    if (j->phase == JOB_DECODE && j->t_first_ms > 0) {
        live.decode_ms = now - j->t_first_ms;
        if (live.completion_tokens > 1 && live.decode_ms > 0)
            live.decode_tok_per_s = (live.completion_tokens - 1) / (live.decode_ms / 1000.0);
    } else if (j->phase == JOB_PREFILL && j->prefill_done > 0) {
        live.prefill_ms = now - j->t_start_ms;
        live.prefill_tok_per_s = j->prefill_done / (live.prefill_ms / 1000.0);
    }
    json_object_set_new(o, "counters", counters_json(&live));
    return o;
}

void svc_record_done(eng_service *svc, eng_job *job, const char *status, const char *finish,
                     const eng_counters *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(job->req.id));
    json_object_set_new(o, "kind", json_string(job->req.kind == ENG_REQ_CHAT ? "chat" : "completion"));
    json_object_set_new(o, "stream", json_boolean(job->req.stream));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "provisional", json_false());
    json_object_set_new(o, "finished_at", json_integer((json_int_t)time(NULL)));
    json_object_set_new(o, "counters", counters_json(c));
    /* debug only: the server logs one line per request with these counters */
    WK_DEBUG("%s: %s%s%s, prompt %d (cached %d, computed %d), prefill %.1f ms %.1f tok/s, ttft %.1f ms, "
            "%d tokens %.1f tok/s", job->req.id, status, finish ? " " : "", finish ? finish : "", c->prompt_tokens, c->cached_tokens, c->recomputed_tokens, c->prefill_ms, c->prefill_tok_per_s, c->ttft_ms,
            c->completion_tokens, c->decode_tok_per_s);
    pthread_mutex_lock(&svc->lock);
    json_array_append_new(svc->recent, o);
    while (json_array_size(svc->recent) > (size_t)svc->cfg.n_recent) json_array_remove(svc->recent, 0);
    pthread_mutex_unlock(&svc->lock);
}

json_t *eng_service_state(eng_service *svc)
{
    json_t *st = json_object();
    json_object_set_new(st, "model", eng_service_model_info(svc));
    double now = wk_now_ms();
    int n_ctx = eng_service_n_ctx(svc);
    pthread_mutex_lock(&svc->lock);
    json_t *active = json_array();
    if (svc->active) json_array_append_new(active, active_row(svc->active, now));
    for (int i = 0; i < svc->q_len; i++) json_array_append_new(active, active_row(svc->queue[(svc->q_head + i) % svc->q_cap], now));
    json_object_set_new(st, "active", active);
    json_t *recent = json_array();
    for (size_t i = json_array_size(svc->recent); i-- > 0;) json_array_append(recent, json_array_get(svc->recent, i));
    json_object_set_new(st, "recent", recent);
    json_object_set_new(st, "queue_depth", json_integer(svc->q_len));
    json_object_set_new(st, "max_queue", json_integer(svc->q_cap));
    json_t *cache = json_object();
    json_object_set_new(cache, "tokens", json_integer(svc->seq_pos_snapshot));
    json_object_set_new(cache, "capacity", json_integer(n_ctx));
    json_object_set_new(cache, "hits", json_integer((json_int_t)svc->cache_hits));
    json_object_set_new(cache, "misses", json_integer((json_int_t)svc->cache_misses));
    if (svc->store_json) json_object_set_new(cache, "prefix_cache", json_deep_copy(svc->store_json));
    json_object_set_new(st, "cache", cache);
    pthread_mutex_unlock(&svc->lock);
    pthread_rwlock_rdlock(&svc->model_lock);
    size_t wb = svc->weight_bytes, sb = svc->state_bytes;
    uint64_t kv_tok = svc->kv_bytes_per_token;
    pthread_rwlock_unlock(&svc->model_lock);
    json_t *mem = json_object();
    json_object_set_new(mem, "kv_type", json_string(svc->cfg.kv_type == BE_KV_Q8_0 ? "q8_0" : "f16"));
    json_object_set_new(mem, "kv_bytes_per_token", json_integer((json_int_t)kv_tok));
    json_object_set_new(mem, "weights_bytes", json_integer((json_int_t)wb));
    json_object_set_new(mem, "state_bytes", json_integer((json_int_t)sb));
    json_object_set_new(mem, "total_bytes", json_integer((json_int_t)(wb + sb)));
    json_object_set_new(st, "memory", mem);
    json_object_set_new(st, "ready", json_boolean(atomic_load(&svc->ready)));
    return st;
}
