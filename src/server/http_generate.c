/* The generation driver shared by every API (srv_api): body → eng_request,
 * submit, wait for admission (the engine renders, tokenizes and says whether
 * it fits), then stream the events or collect them into one answer. The
 * handler thread blocks while it waits and watches the client's socket: a
 * client that leaves cancels its job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "server/anthropic.h"
#include "server/body_decode.h"
#include "server/http_internal.h"
#include "util/timeutil.h"

/* State of one streamed response; owned by the MHD response (freed in its
 * free callback). Keeps its own copy of what the log line needs: the
 * connection's context may be gone when the stream ends. */
typedef struct stream_ctx {
    srv_server *srv;
    struct MHD_Connection *conn;
    const srv_api *api;
    pl_job *job;
    srv_exchange x;
    srv_buf out;
    bool finished;
    bool logged;
    double last_write_ms;
    double deadline_ms; /* 0 = none */
    char method[16];
    char path[256];
    double t0_ms;
} stream_ctx;

int srv_read_body_json(conn_ctx *cc, json_t **out, srv_error *e)
{
    *out = NULL;
    srv_server *s = cc->srv;
    const char *enc = MHD_lookup_connection_value(cc->conn, MHD_HEADER_KIND, "Content-Encoding");
    if (!enc || !*enc) return srv_parse_body(cc->body.data, cc->body.len, &s->cfg.limits, out, e);
    srv_buf plain = {0};
    if (srv_body_decode(enc, cc->body.data, cc->body.len, s->cfg.limits.max_body_bytes, &plain, e)) return -1;
    int rc = srv_parse_body(plain.data, plain.len, &s->cfg.limits, out, e);
    srv_buf_free(&plain);
    return rc;
}

static void stream_log(stream_ctx *st, int status, const char *reason, const eng_counters *c, const char *finish)
{
    if (st->logged) return;
    st->logged = true;
    srv_log_entry le = {.method = st->method, .path = st->path, .route = st->api->route, .status = status,
                        .reason = reason, .id = st->x.meta.id, .stream = true, .counters = c, .finish = finish,
                        .ms = wk_now_ms() - st->t0_ms};
    srv_note(st->srv, &le);
}

/* An engine ERROR event as an API error. */
static void event_error(const eng_event *ev, srv_error *e)
{
    srv_fail(e, ev->http_status ? ev->http_status : 500, ev->error_code[0] ? "messages" : NULL,
             ev->error_code[0] ? ev->error_code : NULL, "%s", ev->message);
}

static void on_stream_event(stream_ctx *st, const eng_event *ev)
{
    srv_server *s = st->srv;
    if (ev->type == ENG_EV_DELTA) {
        srv_accum_add(&st->x.acc, ev);
        st->api->stream_delta(&st->x, ev, &st->out);
    } else if (ev->type == ENG_EV_DONE) {
        st->api->stream_done(&st->x, ev, &st->out);
        srv_metrics_observe(&s->metrics, &ev->counters);
        stream_log(st, 200, NULL, &ev->counters, ev->finish_reason);
        st->finished = true;
    } else if (ev->type == ENG_EV_ERROR) {
        srv_error e;
        event_error(ev, &e);
        st->api->stream_error(&st->x, &e, ev->error_type[0] ? ev->error_type : NULL, &st->out);
        stream_log(st, e.status, e.message, &ev->counters, NULL);
        st->finished = true;
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *st = cls;
    srv_server *s = st->srv;
    for (;;) {
        if (srv_buf_pending(&st->out)) {
            st->last_write_ms = wk_now_ms();
            return (ssize_t)srv_buf_take(&st->out, buf, max);
        }
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (atomic_load(&s->stopping)) return MHD_CONTENT_READER_END_WITH_ERROR;
        eng_event ev = {0};
        int got = pl_job_next_event(st->job, WAIT_SLICE_MS, &ev);
        if (got == 1) {
            on_stream_event(st, &ev);
            eng_event_clear(&ev);
            continue;
        }
        if (got < 0) {
            st->finished = true;
            continue;
        }
        double now = wk_now_ms();
        if (!srv_client_alive(st->conn)) {
            pl_job_cancel(st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->deadline_ms > 0 && now > st->deadline_ms) {
            pl_job_cancel(st->job); /* the ERROR event that follows ends the stream */
            st->deadline_ms = 0;
        }
        if (now - st->last_write_ms >= s->cfg.keepalive_ms) st->api->keepalive(&st->x, &st->out);
    }
}

static void stream_free(void *cls)
{
    stream_ctx *st = cls;
    if (!st->finished) pl_job_cancel(st->job);
    stream_log(st, 499, "client closed the stream", NULL, NULL);
    pl_job_release(st->job);
    srv_exchange_free(&st->x);
    srv_buf_free(&st->out);
    free(st);
}

/* Waits for the job's next event while watching the client. Returns 1 with
 * an event, 0 if the client left (job cancelled). */
static int wait_event(srv_server *s, struct MHD_Connection *c, pl_job *job, double *deadline_ms, eng_event *ev,
                      bool *timed_out)
{
    for (;;) {
        int got = pl_job_next_event(job, WAIT_SLICE_MS, ev);
        if (got == 1) return 1;
        if (got < 0) return 0;
        if (!srv_client_alive(c) || atomic_load(&s->stopping)) {
            pl_job_cancel(job);
            return 0;
        }
        if (*deadline_ms > 0 && wk_now_ms() > *deadline_ms) {
            pl_job_cancel(job);
            *timed_out = true;
            *deadline_ms = 0; /* keep reading: the cancellation error event follows */
        }
    }
}

static enum MHD_Result reply_event_error(conn_ctx *cc, const eng_event *ev, bool timed_out)
{
    srv_error e;
    if (timed_out)
        srv_fail(&e, 503, NULL, "timeout", "request exceeded the server's time limit of %d s",
                 cc->srv->cfg.request_timeout_s);
    else
        event_error(ev, &e);
    /* logged with its reason like any error */
    return srv_reply_error_typed(cc, &e, timed_out || !ev->error_type[0] ? NULL : ev->error_type);
}

static const char *id_prefix(const srv_api *api)
{
    if (api == &srv_api_messages) return "msg_";
    if (api == &srv_api_responses) return "resp_";
    return api->chat ? "chatcmpl-" : "cmpl-";
}

static enum MHD_Result start_stream(conn_ctx *cc, pl_job *job, srv_exchange *x, double deadline)
{
    srv_server *s = cc->srv;
    stream_ctx *st = calloc(1, sizeof *st);
    if (!st) {
        pl_job_cancel(job);
        pl_job_release(job);
        srv_exchange_free(x);
        return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory");
    }
    st->srv = s;
    st->conn = cc->conn;
    st->api = cc->api;
    st->job = job;
    st->x = *x;
    st->deadline_ms = deadline;
    st->last_write_ms = wk_now_ms();
    st->t0_ms = cc->t0_ms;
    snprintf(st->method, sizeof st->method, "%s", cc->method);
    snprintf(st->path, sizeof st->path, "%s", cc->path);
    cc->api->stream_start(&st->x, &st->out);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, st, stream_free);
    if (!r) {
        st->logged = true;
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    MHD_set_connection_option(cc->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s);
    enum MHD_Result q = MHD_queue_response(cc->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result collect(conn_ctx *cc, pl_job *job, srv_exchange *x, double deadline, bool *timed_out)
{
    srv_server *s = cc->srv;
    enum MHD_Result result;
    eng_event ev = {0};
    for (;;) {
        if (!wait_event(s, cc->conn, job, &deadline, &ev, timed_out)) {
            srv_note_request(cc, 499, "client closed the connection", x->meta.id, false, NULL, NULL);
            result = MHD_NO;
            break;
        }
        if (ev.type == ENG_EV_DELTA) {
            srv_accum_add(&x->acc, &ev);
            if (cc->api->collect_delta) cc->api->collect_delta(x, &ev);
            eng_event_clear(&ev);
            continue;
        }
        if (ev.type == ENG_EV_DONE) {
            srv_metrics_observe(&s->metrics, &ev.counters);
            result = srv_reply_generated(cc, cc->api->final_json(x, &ev), x->meta.id, &ev);
        } else {
            result = reply_event_error(cc, &ev, *timed_out);
        }
        eng_event_clear(&ev);
        break;
    }
    return result;
}

/* --logit-bias: the server's biases join the request's (the request wins for a token it names). */
static int add_server_bias(const srv_config *cfg, eng_request *req)
{
    if (cfg->n_bias <= 0) return 0;
    int32_t *ids = realloc(req->bias_ids, (size_t)(req->n_bias + cfg->n_bias) * sizeof *ids);
    if (!ids) return -1;
    req->bias_ids = ids;
    float *vals = realloc(req->bias_values, (size_t)(req->n_bias + cfg->n_bias) * sizeof *vals);
    if (!vals) return -1;
    req->bias_values = vals;
    int n = req->n_bias;
    for (int i = 0; i < cfg->n_bias; i++) {
        bool named = false;
        for (int k = 0; k < n; k++) named = named || ids[k] == cfg->bias_ids[i];
        if (named) continue;
        ids[req->n_bias] = cfg->bias_ids[i];
        vals[req->n_bias++] = cfg->bias_values[i];
    }
    return 0;
}

enum MHD_Result srv_handle_generate(conn_ctx *cc, const srv_api *api)
{
    srv_server *s = cc->srv;
    cc->api = api;
    srv_limits lim = s->cfg.limits;
    lim.n_ctx = pl_service_n_ctx(s->svc);
    json_t *root = NULL;
    srv_error e;
    if (srv_read_body_json(cc, &root, &e)) return srv_reply_error(cc, &e);
    eng_request req;
    srv_exchange x;
    srv_exchange_init(&x);
    int rc = api->parse(root, &lim, &s->models, &req, &x, &e);
    json_decref(root);
    if (rc) {
        srv_exchange_free(&x);
        return srv_reply_error(cc, &e);
    }
    if (add_server_bias(&s->cfg, &req)) {
        eng_request_clear(&req);
        srv_exchange_free(&x);
        return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory");
    }
    /* --max-tokens: the server's cap, over what the client asked for (finish reason "length") */
    if (s->cfg.max_tokens > 0 && (req.max_tokens < 0 || req.max_tokens > s->cfg.max_tokens)) req.max_tokens = s->cfg.max_tokens;
    for (int i = 0; i < req.n_stop; i++) {
        x.stops[i] = strdup(req.stop[i]);
        if (!x.stops[i]) break;
        x.n_stops++;
    }
    srv_resp_meta_init(&x.meta, id_prefix(api), api->chat, pl_service_model_id(s->svc));
    snprintf(req.id, sizeof req.id, "%s", x.meta.id);
    pl_job *job = NULL;
    wk_error werr = {0};
    rc = pl_service_submit(s->svc, &req, &job, &werr);
    eng_request_clear(&req);
    if (rc) {
        srv_exchange_free(&x);
        if (rc == WK_EBUSY) return srv_reply_errorf(cc, 429, "queue_full", werr.msg);
        return srv_reply_errorf(cc, 503, "unavailable", werr.msg[0] ? werr.msg : "engine unavailable");
    }

    double deadline = s->cfg.request_timeout_s > 0 ? wk_now_ms() + s->cfg.request_timeout_s * 1000.0 : 0;
    bool timed_out = false;
    eng_event ev = {0};
    /* Admission: the engine renders and tokenizes, and says whether it fits. */
    if (!wait_event(s, cc->conn, job, &deadline, &ev, &timed_out)) {
        pl_job_release(job);
        srv_note_request(cc, 499, "client closed the connection", x.meta.id, x.ro.stream, NULL, NULL);
        srv_exchange_free(&x);
        return MHD_NO; /* client gone: close */
    }
    if (ev.type == ENG_EV_ERROR) {
        enum MHD_Result r = reply_event_error(cc, &ev, timed_out);
        eng_event_clear(&ev);
        pl_job_release(job);
        srv_exchange_free(&x);
        return r;
    }
    x.prompt_tokens = ev.counters.prompt_tokens;
    eng_event_clear(&ev);
    if (x.ro.stream) return start_stream(cc, job, &x, deadline);
    enum MHD_Result result = collect(cc, job, &x, deadline, &timed_out);
    pl_job_release(job);
    srv_exchange_free(&x);
    return result;
}

enum MHD_Result srv_handle_count_tokens(conn_ctx *cc)
{
    srv_server *s = cc->srv;
    json_t *root = NULL;
    srv_error e;
    if (srv_read_body_json(cc, &root, &e)) return srv_reply_error(cc, &e);
    chat_conv conv;
    int rc = srv_anthropic_conv(root, &s->models, &conv, &e);
    json_decref(root);
    if (rc) return srv_reply_error(cc, &e);
    int n = 0;
    wk_error werr = {0};
    rc = pl_service_count_tokens(s->svc, &conv, &n, &werr);
    chat_conv_free(&conv);
    if (rc) {
        srv_fail(&e, rc == WK_ENOMEM ? 500 : rc == WK_EUNSUPPORTED ? 503 : 400, NULL, NULL, "%s", werr.msg);
        return srv_reply_error(cc, &e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "input_tokens", json_integer(n));
    return srv_reply_json(cc, 200, o);
}
