/* What the monitor and the log see of the service: the model's static
 * facts, the live rows of queued and running jobs, finished requests with
 * their counters, memory and cache occupancy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "pipeline/service_internal.h"
#include "quant/qtypes.h"
#include "util/log.h"
#include "util/timeutil.h"

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

json_t *svc_build_model_info(pl_service *svc)
{
    const model *m = pl_engine_model(svc->pe);
    const gguf_file *f = m->file;
    const chat_template *t = pl_engine_template(svc->pe);
    const tok_vocab *v = pl_engine_vocab(svc->pe);
    uint64_t n_params, tensor_bytes;
    const char *type = dominant_type(f, &n_params, &tensor_bytes);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(svc->model_id));
    json_object_set_new(o, "path", json_string(svc->model_path));
    json_object_set_new(o, "arch", json_string(model_arch_name(m->arch)));
    gguf_str name = {0};
    if (gguf_get_str(f, "general.name", &name, NULL) == 0 && name.ptr)
        json_object_set_new(o, "name", json_stringn(name.ptr, (size_t)name.len));
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "bits_per_weight",
                        json_real(n_params ? (double)tensor_bytes * 8.0 / (double)n_params : 0.0));
    json_object_set_new(o, "n_params", json_integer((json_int_t)n_params));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)gguf_file_size(f)));
    json_object_set_new(o, "n_ctx", json_integer(pl_engine_n_ctx(svc->pe)));
    json_object_set_new(o, "n_ctx_train", json_integer(m->hp.n_ctx_train));
    json_object_set_new(o, "n_vocab", json_integer(m->hp.n_vocab));
    json_object_set_new(o, "n_layer", json_integer(m->hp.n_layer));
    json_object_set_new(o, "n_embd", json_integer(m->hp.n_embd));
    json_object_set_new(o, "recurrent_layers", json_integer(m->hp.n_rec_layers));
    json_object_set_new(o, "synthetic", json_boolean(svc->cfg.synthetic));
    json_object_set_new(o, "chat_template", t ? json_string(chat_template_name(t->kind)) : json_null());
    json_object_set_new(o, "tokenizer", v ? json_string(tok_model_name(v)) : json_null());
    svc->weight_bytes = (size_t)tensor_bytes;
    return o;
}

json_t *pl_service_model_info(pl_service *svc)
{
    pthread_rwlock_rdlock(&svc->model_lock);
    json_t *o = svc->model_info ? json_deep_copy(svc->model_info) : json_object();
    pthread_rwlock_unlock(&svc->model_lock);
    if (!json_object_get(o, "id")) json_object_set_new(o, "id", json_string(svc->model_id));
    json_object_set_new(o, "loaded", json_boolean(atomic_load(&svc->ready)));
    return o;
}

static json_t *counters_json(const eng_counters *c)
{
    json_t *o = eng_counters_timings_json(c);
    json_object_set_new(o, "reasoning_tokens", json_integer(c->reasoning_tokens));
    return o;
}

static const char *job_kind(const pl_job *j) { return j->req.kind == ENG_REQ_CHAT ? "chat" : "completion"; }

/* Live row for a queued or running job (svc->lock held). */
static json_t *active_row(const pl_job *j, double now)
{
    static const char *phases[] = {"queued", "prefill", "decode", "done"};
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->req.id));
    json_object_set_new(o, "kind", json_string(job_kind(j)));
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

void svc_record_done(pl_service *svc, pl_job *job, const eng_event *final)
{
    const eng_counters *c = &final->counters;
    const bool ok = final->type == ENG_EV_DONE;
    const char *status = ok ? "ok" : final->http_status == 499 ? "cancelled" : "error";
    const char *finish = ok ? final->finish_reason : NULL;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(job->req.id));
    json_object_set_new(o, "kind", json_string(job_kind(job)));
    json_object_set_new(o, "stream", json_boolean(job->req.stream));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "finish_reason", finish ? json_string(finish) : json_null());
    if (!ok) json_object_set_new(o, "error", json_string(final->message));
    json_object_set_new(o, "provisional", json_false());
    json_object_set_new(o, "finished_at", json_integer((json_int_t)time(NULL)));
    json_object_set_new(o, "counters", counters_json(c));
    if (ok)
        WK_INFO("%s: ok %s, prompt %d (cached %d, computed %d), prefill %.1f ms %.1f tok/s, ttft %.1f ms, "
                "%d tokens %.1f tok/s",
                job->req.id, finish, c->prompt_tokens, c->cached_tokens, c->recomputed_tokens, c->prefill_ms,
                c->prefill_tok_per_s, c->ttft_ms, c->completion_tokens, c->decode_tok_per_s);
    else
        WK_INFO("%s: %s %d (%s), prompt %d (cached %d, computed %d), %d tokens", job->req.id, status,
                final->http_status, final->message, c->prompt_tokens, c->cached_tokens, c->recomputed_tokens,
                c->completion_tokens);
    pthread_mutex_lock(&svc->lock);
    json_array_append_new(svc->recent, o);
    while (json_array_size(svc->recent) > (size_t)svc->cfg.n_recent) json_array_remove(svc->recent, 0);
    pthread_mutex_unlock(&svc->lock);
}

json_t *pl_service_state(pl_service *svc)
{
    json_t *st = json_object();
    json_object_set_new(st, "model", pl_service_model_info(svc));
    double now = wk_now_ms();
    int n_ctx = pl_service_n_ctx(svc);
    pthread_mutex_lock(&svc->lock);
    json_t *active = json_array();
    for (int i = 0; i < svc->n_active; i++) json_array_append_new(active, active_row(svc->active[i], now));
    for (int i = 0; i < svc->q_len; i++) json_array_append_new(active, active_row(svc->queue[(svc->q_head + i) % svc->q_cap], now));
    json_object_set_new(st, "active", active);
    json_t *recent = json_array();
    for (size_t i = json_array_size(svc->recent); i-- > 0;) json_array_append(recent, json_array_get(svc->recent, i));
    json_object_set_new(st, "recent", recent);
    json_object_set_new(st, "queue_depth", json_integer(svc->q_len));
    json_object_set_new(st, "max_queue", json_integer(svc->q_cap));
    json_t *cache = json_object();
    json_object_set_new(cache, "tokens", json_integer(svc->last_pos));
    json_object_set_new(cache, "capacity", json_integer(n_ctx));
    json_object_set_new(cache, "hits", json_integer((json_int_t)svc->cache_st.hits));
    json_object_set_new(cache, "misses", json_integer((json_int_t)svc->cache_st.misses));
    if (svc->cache_json) json_object_set_new(cache, "prefix_cache", json_deep_copy(svc->cache_json));
    json_object_set_new(st, "cache", cache);
    pthread_mutex_unlock(&svc->lock);
    pthread_rwlock_rdlock(&svc->model_lock);
    size_t wb = svc->weight_bytes, sb = svc->state_bytes, xb = svc->spec_bytes;
    uint64_t kv_tok = svc->kv_bytes_per_token;
    pthread_rwlock_unlock(&svc->model_lock);
    json_t *mem = json_object();
    json_object_set_new(mem, "kv_type", json_string(svc->cfg.pipeline.eng.kv_type == BE_KV_Q8_0 ? "q8_0" : "f16"));
    json_object_set_new(mem, "kv_bytes_per_token", json_integer((json_int_t)kv_tok));
    json_object_set_new(mem, "weights_bytes", json_integer((json_int_t)wb));
    json_object_set_new(mem, "state_bytes", json_integer((json_int_t)sb));
    json_object_set_new(mem, "spec_bytes", json_integer((json_int_t)xb));
    json_object_set_new(mem, "total_bytes", json_integer((json_int_t)(wb + sb)));
    json_object_set_new(st, "memory", mem);
    json_object_set_new(st, "ready", json_boolean(atomic_load(&svc->ready)));
    return st;
}
