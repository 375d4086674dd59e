/* The server's event loop and routing: libmicrohttpd with one thread per
 * connection, so a handler may block while it waits for the engine (it
 * checks the client's socket while it waits, and cancels the job when the
 * client is gone). Streams are MHD callback responses fed from the job's
 * event channel. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/error.h"
#include "server/metrics.h"
#include "server/monitor.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/server.h"
#include "server/sse.h"
#include "util/log.h"
#include "util/timeutil.h"

/* How often a waiting handler wakes to look at its client's socket. */
#define WAIT_SLICE_MS 200

struct srv_server {
    srv_config cfg;
    char host[256];
    char api_key[256];
    pl_service *svc;
    struct MHD_Daemon *daemon;
    int port;
    bool loopback;
    srv_metrics metrics;
    atomic_int connections;
    atomic_bool stopping;
};

/* Per-request state (MHD's con_cls), freed in the completion callback. */
typedef struct conn_ctx {
    srv_server *srv;
    srv_buf body;
    bool too_large;
    bool responded;
} conn_ctx;

/* State of one streamed response; owned by the MHD response (freed in its
 * free callback). */
typedef struct stream_ctx {
    srv_server *srv;
    struct MHD_Connection *conn;
    pl_job *job;
    srv_resp_meta meta;
    srv_resp_opts ro;
    srv_buf out;
    bool finished;
    double last_write_ms;
    double deadline_ms; /* 0 = none */
} stream_ctx;

void srv_config_default(srv_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8008;
    srv_limits_default(&c->limits);
    c->conn_timeout_s = 30;
    c->request_timeout_s = 0;
    c->keepalive_ms = 5000;
    c->max_connections = 512;
}

/* ---- responses ---------------------------------------------------------- */

static enum MHD_Result send_bytes(srv_server *s, struct MHD_Connection *c, const char *route, int status,
                                  const char *mime, const void *data, size_t n, bool copy)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        n, (void *)data, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", mime);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405) MHD_add_response_header(r, "Allow", "GET, POST");
    /* A request that may still have an unread body (413) cannot keep the connection. */
    if (status == 413) MHD_add_response_header(r, "Connection", "close");
    /* After a long wait the idle clock must restart, or MHD may drop the
     * finished answer as a timed-out connection. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_count_request(&s->metrics, route, status);
    return rc;
}

static enum MHD_Result send_json(srv_server *s, struct MHD_Connection *c, const char *route, int status,
                                 json_t *body /* stolen */)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(12));
    json_decref(body);
    if (!text) return MHD_NO;
    size_t n = strlen(text);
    /* Trailing newline: friendlier for curl users, still one JSON value. */
    char *t2 = realloc(text, n + 2);
    if (t2) {
        text = t2;
        text[n++] = '\n';
        text[n] = '\0';
    }
    enum MHD_Result rc = send_bytes(s, c, route, status, "application/json", text, n, true);
    free(text);
    return rc;
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, const char *route,
                                  const srv_error *e)
{
    return send_json(s, c, route, e->status, srv_error_json(e, NULL));
}

static enum MHD_Result send_errorf(srv_server *s, struct MHD_Connection *c, const char *route, int status,
                                   const char *code, const char *msg)
{
    srv_error e;
    srv_fail(&e, status, NULL, code, "%s", msg);
    return send_error(s, c, route, &e);
}

/* ---- client liveness ------------------------------------------------------ */

/* False once the peer has closed its end (or the socket failed). */
static bool client_alive(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    int fd = ci->connect_fd;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    return true;
}

/* ---- generation ----------------------------------------------------------- */

static const char *route_label(bool chat) { return chat ? "chat" : "completions"; }

static void finish_stream_event(stream_ctx *st, const eng_event *ev)
{
    srv_server *s = st->srv;
    if (ev->type == ENG_EV_DELTA) {
        json_t *ch = srv_chunk_delta(&st->meta, ev);
        if (ch) {
            srv_sse_data(&st->out, ch);
            json_decref(ch);
        }
    } else if (ev->type == ENG_EV_DONE) {
        json_t *ch = srv_chunk_finish(&st->meta, ev->finish_reason, &ev->counters);
        srv_sse_data(&st->out, ch);
        json_decref(ch);
        if (st->ro.include_usage) {
            ch = srv_chunk_usage(&st->meta, &ev->counters);
            srv_sse_data(&st->out, ch);
            json_decref(ch);
        }
        srv_sse_done(&st->out);
        srv_metrics_observe(&s->metrics, &ev->counters);
        st->finished = true;
    } else if (ev->type == ENG_EV_ERROR) {
        /* After the stream started, errors travel as one data event; no [DONE]. */
        srv_error e;
        srv_fail(&e, ev->http_status ? ev->http_status : 500, NULL, ev->error_code, "%s", ev->message);
        json_t *body = srv_error_json(&e, ev->error_type[0] ? ev->error_type : NULL);
        srv_sse_data(&st->out, body);
        json_decref(body);
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
            finish_stream_event(st, &ev);
            eng_event_clear(&ev);
            continue;
        }
        if (got < 0) {
            st->finished = true;
            continue;
        }
        double now = wk_now_ms();
        if (!client_alive(st->conn)) {
            pl_job_cancel(st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->deadline_ms > 0 && now > st->deadline_ms) {
            pl_job_cancel(st->job); /* the ERROR event that follows ends the stream */
            st->deadline_ms = 0;
        }
        if (now - st->last_write_ms >= s->cfg.keepalive_ms) srv_sse_comment(&st->out, "keep-alive");
    }
}

static void stream_free(void *cls)
{
    stream_ctx *st = cls;
    if (!st->finished) pl_job_cancel(st->job);
    pl_job_release(st->job);
    srv_buf_free(&st->out);
    free(st);
}

/* Waits for the job's next event while watching the client. Returns 1 with
 * an event, 0 if the client left or the deadline passed (job cancelled). */
static int wait_event(srv_server *s, struct MHD_Connection *c, pl_job *job, double deadline_ms,
                      eng_event *ev, bool *timed_out)
{
    for (;;) {
        int got = pl_job_next_event(job, WAIT_SLICE_MS, ev);
        if (got == 1) return 1;
        if (got < 0) return 0;
        if (!client_alive(c) || atomic_load(&s->stopping)) {
            pl_job_cancel(job);
            return 0;
        }
        if (deadline_ms > 0 && wk_now_ms() > deadline_ms) {
            pl_job_cancel(job);
            *timed_out = true;
            deadline_ms = 0; /* keep reading: the cancellation error event follows */
        }
    }
}

static enum MHD_Result send_event_error(srv_server *s, struct MHD_Connection *c, const char *route,
                                        const eng_event *ev, bool timed_out)
{
    srv_error e;
    if (timed_out)
        srv_fail(&e, 503, NULL, "timeout", "request exceeded the server's time limit of %d s",
                 s->cfg.request_timeout_s);
    else
        srv_fail(&e, ev->http_status ? ev->http_status : 500, NULL, ev->error_code, "%s", ev->message);
    return send_json(s, c, route, e.status, srv_error_json(&e, timed_out ? NULL : ev->error_type));
}

static enum MHD_Result handle_generate(srv_server *s, struct MHD_Connection *c, conn_ctx *cc, bool chat)
{
    const char *route = route_label(chat);
    srv_limits lim = s->cfg.limits;
    lim.n_ctx = pl_service_n_ctx(s->svc);
    json_t *root = NULL;
    srv_error e;
    if (srv_parse_body(cc->body.data, cc->body.len, &lim, &root, &e)) return send_error(s, c, route, &e);
    eng_request req;
    srv_resp_opts ro;
    const char *model_id = pl_service_model_id(s->svc);
    int rc = chat ? srv_parse_chat(root, &lim, model_id, &req, &ro, &e)
                  : srv_parse_completion(root, &lim, model_id, &req, &ro, &e);
    json_decref(root);
    if (rc) return send_error(s, c, route, &e);

    srv_resp_meta meta;
    srv_resp_meta_init(&meta, chat, model_id);
    snprintf(req.id, sizeof req.id, "%s", meta.id);
    pl_job *job = NULL;
    wk_error werr = {0};
    rc = pl_service_submit(s->svc, &req, &job, &werr);
    eng_request_clear(&req);
    if (rc == WK_EBUSY) return send_errorf(s, c, route, 429, "queue_full", werr.msg);
    if (rc) return send_errorf(s, c, route, 503, "unavailable", werr.msg[0] ? werr.msg : "engine unavailable");

    double deadline = s->cfg.request_timeout_s > 0 ? wk_now_ms() + s->cfg.request_timeout_s * 1000.0 : 0;
    bool timed_out = false;
    eng_event ev = {0};
    /* Admission: the engine renders and tokenizes, and says whether it fits. */
    if (!wait_event(s, c, job, deadline, &ev, &timed_out)) {
        pl_job_release(job);
        srv_metrics_count_request(&s->metrics, route, 499);
        return MHD_NO; /* client gone: close */
    }
    if (ev.type == ENG_EV_ERROR) {
        enum MHD_Result r = send_event_error(s, c, route, &ev, timed_out);
        eng_event_clear(&ev);
        pl_job_release(job);
        return r;
    }
    eng_event_clear(&ev);

    if (ro.stream) {
        stream_ctx *st = calloc(1, sizeof *st);
        if (!st) {
            pl_job_cancel(job);
            pl_job_release(job);
            return send_errorf(s, c, route, 500, "oom", "out of memory");
        }
        st->srv = s;
        st->conn = c;
        st->job = job;
        st->meta = meta;
        st->ro = ro;
        st->deadline_ms = deadline;
        st->last_write_ms = wk_now_ms();
        if (chat) {
            json_t *first = srv_chunk_role(&meta);
            srv_sse_data(&st->out, first);
            json_decref(first);
        }
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader,
                                                                   st, stream_free);
        if (!r) {
            stream_free(st);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s);
        enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        srv_metrics_count_request(&s->metrics, route, 200);
        return q;
    }

    srv_accum acc = {0};
    enum MHD_Result result;
    for (;;) {
        if (!wait_event(s, c, job, deadline, &ev, &timed_out)) {
            srv_metrics_count_request(&s->metrics, route, 499);
            result = MHD_NO;
            break;
        }
        if (ev.type == ENG_EV_DELTA) {
            srv_accum_add(&acc, &ev);
            eng_event_clear(&ev);
            continue;
        }
        if (ev.type == ENG_EV_DONE) {
            srv_metrics_observe(&s->metrics, &ev.counters);
            result = send_json(s, c, route, 200, srv_completion_json(&meta, &acc, ev.finish_reason, &ev.counters));
        } else {
            result = send_event_error(s, c, route, &ev, timed_out);
        }
        eng_event_clear(&ev);
        break;
    }
    srv_accum_free(&acc);
    pl_job_release(job);
    return result;
}

/* ---- other routes ---------------------------------------------------------- */

static enum MHD_Result handle_models(srv_server *s, struct MHD_Connection *c, const char *one)
{
    json_t *info = pl_service_model_info(s->svc);
    const char *id = pl_service_model_id(s->svc);
    if (one && strcmp(one, id) != 0) {
        json_decref(info);
        srv_error e;
        srv_fail(&e, 404, "model", "model_not_found", "The model '%s' does not exist", one);
        return send_error(s, c, "models", &e);
    }
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    bool synthetic = json_is_true(json_object_get(info, "synthetic"));
    json_object_set_new(m, "owned_by", json_string(synthetic ? "wick (synthetic demo model)" : "wick"));
    if (synthetic)
        json_object_set_new(m, "description",
                            json_string("SYNTHETIC random-weight demo model: answers are gibberish; "
                                        "start wick serve -m FILE.gguf to serve a real model"));
    json_object_set_new(m, "meta", info);
    if (one) return send_json(s, c, "models", 200, m);
    json_t *list = json_object();
    json_object_set_new(list, "object", json_string("list"));
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_object_set_new(list, "data", data);
    return send_json(s, c, "models", 200, list);
}

static enum MHD_Result handle_tokenize(srv_server *s, struct MHD_Connection *c, conn_ctx *cc)
{
    json_t *root;
    srv_error e;
    if (srv_parse_body(cc->body.data, cc->body.len, &s->cfg.limits, &root, &e)) return send_error(s, c, "tokenize", &e);
    const json_t *content = json_object_get(root, "content");
    if (!content) content = json_object_get(root, "text");
    if (!content) content = json_object_get(root, "prompt");
    bool parse_special = true, with_pieces = false;
    const json_t *ps = json_object_get(root, "parse_special");
    const json_t *wp = json_object_get(root, "with_pieces");
    if (!json_is_string(content)) {
        srv_fail(&e, 400, "content", "invalid_type", "'content' must be a string");
    } else if ((ps && !json_is_boolean(ps)) || (wp && !json_is_boolean(wp))) {
        srv_fail(&e, 400, ps && !json_is_boolean(ps) ? "parse_special" : "with_pieces", "invalid_type",
                 "must be a boolean");
    } else {
        e.status = 0;
    }
    if (e.status) {
        json_decref(root);
        return send_error(s, c, "tokenize", &e);
    }
    if (ps) parse_special = json_is_true(ps);
    if (wp) with_pieces = json_is_true(wp);
    int32_t *ids = NULL;
    int n = 0;
    wk_error werr = {0};
    int rc = pl_service_tokenize(s->svc, json_string_value(content), parse_special, &ids, &n, &werr);
    json_decref(root);
    if (rc) return send_errorf(s, c, "tokenize", rc == WK_EINVAL ? 400 : 503, NULL, werr.msg);
    json_t *toks = json_array();
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        char *piece = NULL;
        pl_service_detokenize(s->svc, &ids[i], 1, &piece, &werr);
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(ids[i]));
        json_object_set_new(o, "piece", srv_json_text(piece ? piece : "", (size_t)-1));
        free(piece);
        json_array_append_new(toks, o);
    }
    free(ids);
    json_t *out = json_object();
    json_object_set_new(out, "tokens", toks);
    json_object_set_new(out, "count", json_integer(n));
    return send_json(s, c, "tokenize", 200, out);
}

static enum MHD_Result handle_detokenize(srv_server *s, struct MHD_Connection *c, conn_ctx *cc)
{
    json_t *root;
    srv_error e;
    if (srv_parse_body(cc->body.data, cc->body.len, &s->cfg.limits, &root, &e))
        return send_error(s, c, "detokenize", &e);
    const json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        srv_fail(&e, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
        return send_error(s, c, "detokenize", &e);
    }
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            free(ids);
            json_decref(root);
            srv_fail(&e, 400, "tokens", "invalid_type", "'tokens[%zu]' must be a token id", i);
            return send_error(s, c, "detokenize", &e);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    json_decref(root);
    char *text = NULL;
    wk_error werr = {0};
    int rc = pl_service_detokenize(s->svc, ids, (int)n, &text, &werr);
    free(ids);
    if (rc) return send_errorf(s, c, "detokenize", rc == WK_EINVAL || rc == WK_ERANGE ? 400 : 503, NULL, werr.msg);
    json_t *out = json_object();
    json_object_set_new(out, "content", srv_json_text(text, (size_t)-1));
    free(text);
    return send_json(s, c, "detokenize", 200, out);
}

static enum MHD_Result handle_metrics(srv_server *s, struct MHD_Connection *c)
{
    srv_gauges g = {0};
    pl_service_load(s->svc, &g.queue_depth, &g.busy);
    pl_service_cache_stats(s->svc, &g.cache_hits, &g.cache_misses);
    g.connections = atomic_load(&s->connections);
    json_t *store = pl_service_cache_state(s->svc);
    g.store = store;
    srv_buf b = {0};
    srv_metrics_render(&s->metrics, &g, &b);
    json_decref(store);
    enum MHD_Result rc = send_bytes(s, c, "metrics", 200, "text/plain; version=0.0.4; charset=utf-8",
                                    b.data ? b.data : "", b.len, true);
    srv_buf_free(&b);
    return rc;
}

static enum MHD_Result handle_monitor_state(srv_server *s, struct MHD_Connection *c)
{
    json_t *st = pl_service_state(s->svc);
    json_t *srv = json_object();
    json_object_set_new(srv, "connections", json_integer(atomic_load(&s->connections)));
    json_object_set_new(srv, "host", json_string(s->host));
    json_object_set_new(srv, "port", json_integer(s->port));
    json_object_set_new(srv, "auth", json_boolean(s->api_key[0] != 0));
    json_object_set_new(st, "server", srv);
    return send_json(s, c, "monitor", 200, st);
}

static enum MHD_Result handle_monitor_action(srv_server *s, struct MHD_Connection *c, bool reload)
{
    wk_error werr = {0};
    int rc = reload ? pl_service_reload(s->svc, &werr) : pl_service_reset_cache(s->svc, &werr);
    if (rc) return send_errorf(s, c, "monitor", 500, NULL, werr.msg);
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_true());
    json_object_set_new(o, "action", json_string(reload ? "reload" : "reset-cache"));
    return send_json(s, c, "monitor", 200, o);
}

static enum MHD_Result handle_monitor_asset(srv_server *s, struct MHD_Connection *c, const char *name)
{
    const unsigned char *data;
    size_t size;
    const char *mime;
    if (srv_monitor_asset(name, &data, &size, &mime))
        return send_errorf(s, c, "monitor", 404, "not_found", "no such monitor file");
    return send_bytes(s, c, "monitor", 200, mime, data, size, false);
}

/* ---- request gate: host/origin, auth --------------------------------------- */

/* host[:port] without the port, lower-case, into out. */
static void host_only(const char *hp, char *out, size_t cap)
{
    size_t n = 0;
    if (*hp == '[') {
        const char *end = strchr(hp, ']');
        n = end ? (size_t)(end - hp + 1) : strlen(hp);
    } else {
        const char *colon = strchr(hp, ':');
        n = colon ? (size_t)(colon - hp) : strlen(hp);
    }
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) out[i] = (char)((hp[i] >= 'A' && hp[i] <= 'Z') ? hp[i] + 32 : hp[i]);
    out[n] = '\0';
}

/* Refuses browser requests from other origins and DNS-rebinding hosts. */
static bool origin_ok(srv_server *s, struct MHD_Connection *c, const char **why)
{
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (s->loopback && host) {
        char h[256];
        host_only(host, h, sizeof h);
        if (!srv_host_is_loopback(h) && strcmp(h, "[::1]") != 0) {
            *why = "Host header is not a loopback name (DNS rebinding protection)";
            return false;
        }
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && host) {
        const char *o = strstr(origin, "://");
        o = o ? o + 3 : origin;
        if (strcasecmp(o, host) != 0) {
            *why = "cross-origin requests are not allowed";
            return false;
        }
    }
    return true;
}

static bool auth_ok(srv_server *s, struct MHD_Connection *c)
{
    if (!s->api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h) h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return srv_auth_ok(h, s->api_key);
}

/* ---- dispatch --------------------------------------------------------------- */

enum route_id {
    R_NONE = 0, R_HEALTH, R_MODELS, R_MODEL_ONE, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE,
    R_METRICS, R_MONITOR_PAGE, R_MONITOR_ASSET, R_MONITOR_STATE, R_MONITOR_RESET, R_MONITOR_RELOAD,
};

static enum route_id match_route(const char *url, const char **arg, bool *want_post)
{
    *arg = NULL;
    *want_post = false;
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) return R_HEALTH;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return R_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *arg = url + 11;
        return R_MODEL_ONE;
    }
    *want_post = true;
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/v1/tokenize") || !strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/v1/detokenize") || !strcmp(url, "/detokenize")) return R_DETOKENIZE;
    if (!strcmp(url, "/monitor/api/reset-cache")) return R_MONITOR_RESET;
    if (!strcmp(url, "/monitor/api/reload")) return R_MONITOR_RELOAD;
    *want_post = false;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/monitor") || !strcmp(url, "/monitor/")) return R_MONITOR_PAGE;
    if (!strcmp(url, "/monitor/api/state")) return R_MONITOR_STATE;
    if (!strncmp(url, "/monitor/", 9)) {
        *arg = url + 9;
        return R_MONITOR_ASSET;
    }
    return R_NONE;
}

static enum MHD_Result dispatch(srv_server *s, struct MHD_Connection *c, conn_ctx *cc, const char *url,
                                const char *method)
{
    const char *arg;
    bool want_post;
    enum route_id r = match_route(url, &arg, &want_post);
    if (r == R_NONE) return send_errorf(s, c, "other", 404, "not_found", "no such route");
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool is_post = !strcmp(method, "POST");
    if ((want_post && !is_post) || (!want_post && !is_get))
        return send_errorf(s, c, "other", 405, "method_not_allowed", "method not allowed on this route");
    const char *why = NULL;
    if (!origin_ok(s, c, &why)) return send_errorf(s, c, "other", 403, "forbidden", why);
    bool is_public = r == R_HEALTH || r == R_MONITOR_PAGE || r == R_MONITOR_ASSET;
    if (!is_public && !auth_ok(s, c)) {
        srv_error e;
        srv_fail(&e, 401, NULL, "invalid_api_key", "Invalid or missing API key (send Authorization: Bearer KEY)");
        return send_error(s, c, "auth", &e);
    }
    switch (r) {
    case R_HEALTH:
        if (!pl_service_ready(s->svc)) return send_errorf(s, c, "health", 503, "loading", "Loading model");
        {
            json_t *o = json_object();
            json_object_set_new(o, "status", json_string("ok"));
            return send_json(s, c, "health", 200, o);
        }
    case R_MODELS: return handle_models(s, c, NULL);
    case R_MODEL_ONE: return handle_models(s, c, arg);
    case R_CHAT: return handle_generate(s, c, cc, true);
    case R_COMPLETIONS: return handle_generate(s, c, cc, false);
    case R_TOKENIZE: return handle_tokenize(s, c, cc);
    case R_DETOKENIZE: return handle_detokenize(s, c, cc);
    case R_METRICS: return handle_metrics(s, c);
    case R_MONITOR_PAGE: return handle_monitor_asset(s, c, "index.html");
    case R_MONITOR_ASSET: return handle_monitor_asset(s, c, arg);
    case R_MONITOR_STATE: return handle_monitor_state(s, c);
    case R_MONITOR_RESET: return handle_monitor_action(s, c, false);
    case R_MONITOR_RELOAD: return handle_monitor_action(s, c, true);
    default: break;
    }
    return send_errorf(s, c, "other", 404, "not_found", "no such route");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->srv = s;
        *con_cls = cc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.limits.max_body_bytes) {
            /* Refuse before reading it; MHD closes the connection afterwards. */
            cc->too_large = true;
            cc->responded = true;
            srv_error e;
            srv_fail(&e, 413, NULL, "body_too_large", "request body of %s bytes exceeds the limit of %zu bytes", cl,
                     s->cfg.limits.max_body_bytes);
            return send_error(s, c, "other", &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large) {
            if (cc->body.len + *upload_size > s->cfg.limits.max_body_bytes) {
                cc->too_large = true;
                srv_buf_free(&cc->body);
            } else if (srv_buf_append(&cc->body, upload, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->responded) return MHD_YES;
    cc->responded = true;
    if (cc->too_large) {
        srv_error e;
        srv_fail(&e, 413, NULL, "body_too_large", "request body exceeds the limit of %zu bytes",
                 s->cfg.limits.max_body_bytes);
        return send_error(s, c, "other", &e);
    }
    return dispatch(s, c, cc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code)
{
    (void)c;
    (void)socket_ctx;
    srv_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) atomic_fetch_add(&s->connections, 1);
    else atomic_fetch_sub(&s->connections, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = '\0';
    WK_DEBUG("http: %s", msg);
}

int srv_start(const srv_config *cfg, pl_service *svc, srv_server **out, wk_error *err)
{
    *out = NULL;
    const char *host = cfg->host && *cfg->host ? cfg->host : "127.0.0.1";
    bool loopback = srv_host_is_loopback(host);
    if (!loopback && (!cfg->api_key || !*cfg->api_key))
        return wk_fail(err, WK_EINVAL,
                       "refusing to listen on non-loopback host %s without an API key "
                       "(pass --api-key or set WICK_API_KEY)", host);
    if (cfg->api_key && strlen(cfg->api_key) >= 256) return wk_fail(err, WK_EINVAL, "API key longer than 255 bytes");
    if (cfg->port < 0 || cfg->port > 65535) return wk_fail(err, WK_EINVAL, "port %d out of range", cfg->port);

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", cfg->port);
    const char *lookup = strcmp(host, "[::1]") == 0 ? "::1" : host;
    int gai = getaddrinfo(lookup, port_s, &hints, &ai);
    if (gai) return wk_fail(err, WK_EINVAL, "cannot resolve host %s: %s", host, gai_strerror(gai));

    srv_server *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    s->cfg = *cfg;
    snprintf(s->host, sizeof s->host, "%s", host);
    snprintf(s->api_key, sizeof s->api_key, "%s", cfg->api_key ? cfg->api_key : "");
    s->cfg.host = s->host;
    s->cfg.api_key = s->api_key;
    s->svc = svc;
    s->loopback = loopback;
    if (s->cfg.conn_timeout_s <= 0) s->cfg.conn_timeout_s = 30;
    if (s->cfg.keepalive_ms <= 0) s->cfg.keepalive_ms = 5000;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 512;
    srv_metrics_init(&s->metrics);

    /* Idle timeout + connection caps bound what slow (slow-loris) clients can
     * hold: a remote peer gets at most max_conn_per_ip connections. */
    if (s->cfg.max_conn_per_ip <= 0) s->cfg.max_conn_per_ip = loopback ? 0 : 32;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.max_conn_per_ip,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        srv_metrics_destroy(&s->metrics);
        free(s);
        return wk_fail(err, WK_EIO, "cannot listen on %s:%d (address in use or not available)", host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return 0;
}

int srv_port(const srv_server *s) { return s->port; }

void srv_stop(srv_server *s)
{
    if (!s) return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->daemon);
    srv_metrics_destroy(&s->metrics);
    free(s);
}
