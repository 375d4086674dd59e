/* The server's event loop and routing: libmicrohttpd with one thread per
 * connection on a listening socket of our own (bound without port sharing,
 * so a second server on the same port is refused, naming the holder), the
 * request gate (origin, auth), and the small routes. The generating routes
 * are in http_generate.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/error.h"
#include "server/http_internal.h"
#include "server/monitor.h"
#include "server/port_owner.h"
#include "util/log.h"
#include "util/timeutil.h"

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

enum MHD_Result srv_queue_bytes(conn_ctx *cc, int status, const char *mime, const void *data, size_t n, bool copy)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, (void *)data, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", mime);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405) MHD_add_response_header(r, "Allow", "GET, HEAD, POST");
    /* A request that may still have an unread body (413) cannot keep the connection. */
    if (status == 413) MHD_add_response_header(r, "Connection", "close");
    /* After a long wait the idle clock must restart, or MHD may drop the
     * finished answer as a timed-out connection. */
    MHD_set_connection_option(cc->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)cc->srv->cfg.conn_timeout_s);
    enum MHD_Result rc = MHD_queue_response(cc->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

void srv_note(srv_server *s, const srv_log_entry *e)
{
    srv_metrics_count_request(&s->metrics, e->route ? e->route : "other", e->status);
    srv_log_request(e);
}

void srv_note_request(conn_ctx *cc, int status, const char *reason, const char *id, bool stream,
                      const eng_counters *c, const char *finish)
{
    srv_log_entry le = {.method = cc->method, .path = cc->path, .route = cc->route, .status = status,
                        .reason = reason, .id = id, .stream = stream, .counters = c, .finish = finish,
                        .ms = wk_now_ms() - cc->t0_ms};
    srv_note(cc->srv, &le);
}

/* Queues a JSON body (stolen); the caller logs. */
static enum MHD_Result queue_json(conn_ctx *cc, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(12)) : NULL;
    json_decref(body);
    if (!text) {
        /* out of memory while answering: still a JSON error, from static text */
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":\"out_of_memory\"}}\n";
        return srv_queue_bytes(cc, 500, "application/json", oom, sizeof oom - 1, false);
    }
    size_t n = strlen(text);
    /* Trailing newline: friendlier for curl users, still one JSON value. */
    char *t2 = realloc(text, n + 2);
    if (t2) {
        text = t2;
        text[n++] = '\n';
        text[n] = '\0';
    }
    enum MHD_Result rc = srv_queue_bytes(cc, status, "application/json", text, n, true);
    free(text);
    return rc;
}

enum MHD_Result srv_reply_json(conn_ctx *cc, int status, json_t *body)
{
    srv_note_request(cc, status, NULL, NULL, false, NULL, NULL);
    return queue_json(cc, status, body);
}

enum MHD_Result srv_reply_generated(conn_ctx *cc, json_t *body, const char *id, const eng_event *done)
{
    srv_note_request(cc, 200, NULL, id, false, &done->counters, done->finish_reason);
    return queue_json(cc, 200, body);
}

enum MHD_Result srv_reply_error_typed(conn_ctx *cc, const srv_error *e, const char *type)
{
    srv_note_request(cc, e->status, e->message, NULL, false, NULL, NULL);
    return queue_json(cc, e->status, cc->api ? cc->api->error_json(e, type) : srv_error_json(e, type));
}

enum MHD_Result srv_reply_error(conn_ctx *cc, const srv_error *e) { return srv_reply_error_typed(cc, e, NULL); }

enum MHD_Result srv_reply_errorf(conn_ctx *cc, int status, const char *code, const char *msg)
{
    srv_error e;
    srv_fail(&e, status, NULL, code, "%s", msg);
    return srv_reply_error(cc, &e);
}

/* ---- client liveness ------------------------------------------------------ */

bool srv_client_alive(struct MHD_Connection *c)
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

/* ---- small routes ------------------------------------------------------------ */

static bool is_served_name(const srv_server *s, const char *name)
{
    if (!strcmp(name, s->models.id)) return true;
    for (int i = 0; i < s->models.n_aliases; i++)
        if (!strcmp(name, s->models.aliases[i])) return true;
    return false;
}

static enum MHD_Result handle_models(conn_ctx *cc, const char *one)
{
    srv_server *s = cc->srv;
    if (one && !is_served_name(s, one)) {
        srv_error e;
        srv_fail(&e, 404, "model", "model_not_found", "The model '%s' does not exist; this server serves '%s'", one,
                 s->models.id);
        return srv_reply_error(cc, &e);
    }
    json_t *info = pl_service_model_info(s->svc);
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(s->models.id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    bool synthetic = json_is_true(json_object_get(info, "synthetic"));
    json_object_set_new(m, "owned_by", json_string(synthetic ? "wick (synthetic demo model)" : "wick"));
    if (synthetic)
        json_object_set_new(m, "description",
                            json_string("SYNTHETIC random-weight demo model: answers are gibberish; "
                                        "start wick serve -m FILE.gguf to serve a real model"));
    json_t *aliases = json_array();
    for (int i = 0; i < s->models.n_aliases; i++) json_array_append_new(aliases, json_string(s->models.aliases[i]));
    json_object_set_new(m, "aliases", aliases);
    json_object_set_new(m, "meta", info);
    if (one) return srv_reply_json(cc, 200, m);
    json_t *list = json_object();
    json_object_set_new(list, "object", json_string("list"));
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_object_set_new(list, "data", data);
    return srv_reply_json(cc, 200, list);
}

static enum MHD_Result handle_tokenize(conn_ctx *cc)
{
    srv_server *s = cc->srv;
    json_t *root;
    srv_error e;
    if (srv_read_body_json(cc, &root, &e)) return srv_reply_error(cc, &e);
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
        return srv_reply_error(cc, &e);
    }
    if (ps) parse_special = json_is_true(ps);
    if (wp) with_pieces = json_is_true(wp);
    int32_t *ids = NULL;
    int n = 0;
    wk_error werr = {0};
    int rc = pl_service_tokenize(s->svc, json_string_value(content), parse_special, &ids, &n, &werr);
    json_decref(root);
    if (rc) return srv_reply_errorf(cc, rc == WK_EINVAL ? 400 : rc == WK_ENOMEM ? 500 : 503, NULL, werr.msg);
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
    return srv_reply_json(cc, 200, out);
}

static enum MHD_Result handle_detokenize(conn_ctx *cc)
{
    srv_server *s = cc->srv;
    json_t *root;
    srv_error e;
    if (srv_read_body_json(cc, &root, &e)) return srv_reply_error(cc, &e);
    const json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        srv_fail(&e, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
        return srv_reply_error(cc, &e);
    }
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            free(ids);
            json_decref(root);
            srv_fail(&e, 400, "tokens", "invalid_type", "'tokens[%zu]' must be a token id", i);
            return srv_reply_error(cc, &e);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    json_decref(root);
    char *text = NULL;
    wk_error werr = {0};
    int rc = pl_service_detokenize(s->svc, ids, (int)n, &text, &werr);
    free(ids);
    if (rc)
        return srv_reply_errorf(cc, rc == WK_EINVAL || rc == WK_ERANGE ? 400 : rc == WK_ENOMEM ? 500 : 503, NULL,
                                werr.msg);
    json_t *out = json_object();
    json_object_set_new(out, "content", srv_json_text(text, (size_t)-1));
    free(text);
    return srv_reply_json(cc, 200, out);
}

static enum MHD_Result handle_metrics(conn_ctx *cc)
{
    srv_server *s = cc->srv;
    srv_gauges g = {0};
    pl_service_load(s->svc, &g.queue_depth, &g.busy);
    pl_service_cache_stats(s->svc, &g.cache_hits, &g.cache_misses);
    g.connections = atomic_load(&s->connections);
    json_t *store = pl_service_cache_state(s->svc);
    g.store = store;
    srv_buf b = {0};
    int rc = srv_metrics_render(&s->metrics, &g, &b);
    json_decref(store);
    if (rc) {
        srv_buf_free(&b);
        return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory");
    }
    srv_note_request(cc, 200, NULL, NULL, false, NULL, NULL);
    enum MHD_Result r = srv_queue_bytes(cc, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
                                        b.len, true);
    srv_buf_free(&b);
    return r;
}

static enum MHD_Result handle_monitor_state(conn_ctx *cc)
{
    srv_server *s = cc->srv;
    json_t *st = pl_service_state(s->svc);
    json_t *srv = json_object();
    json_object_set_new(srv, "connections", json_integer(atomic_load(&s->connections)));
    json_object_set_new(srv, "host", json_string(s->host));
    json_object_set_new(srv, "port", json_integer(s->port));
    json_object_set_new(srv, "auth", json_boolean(s->api_key[0] != 0));
    json_object_set_new(st, "server", srv);
    return srv_reply_json(cc, 200, st);
}

static enum MHD_Result handle_monitor_action(conn_ctx *cc, bool reload)
{
    wk_error werr = {0};
    int rc = reload ? pl_service_reload(cc->srv->svc, &werr) : pl_service_reset_cache(cc->srv->svc, &werr);
    if (rc) return srv_reply_errorf(cc, 500, NULL, werr.msg);
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_true());
    json_object_set_new(o, "action", json_string(reload ? "reload" : "reset-cache"));
    return srv_reply_json(cc, 200, o);
}

static enum MHD_Result handle_monitor_asset(conn_ctx *cc, const char *name)
{
    const unsigned char *data;
    size_t size;
    const char *mime;
    if (srv_monitor_asset(name, &data, &size, &mime)) return srv_reply_errorf(cc, 404, "not_found", "no such monitor file");
    srv_note_request(cc, 200, NULL, NULL, false, NULL, NULL);
    return srv_queue_bytes(cc, 200, mime, data, size, false);
}

/* GET / (and HEAD /, which clients send to probe the server). */
static enum MHD_Result handle_root(conn_ctx *cc)
{
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("wick"));
    json_object_set_new(o, "status", json_string(pl_service_ready(cc->srv->svc) ? "ok" : "loading"));
    json_object_set_new(o, "model", json_string(cc->srv->models.id));
    json_object_set_new(o, "monitor", json_string("/monitor"));
    return srv_reply_json(cc, 200, o);
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

/* OpenAI clients send Authorization: Bearer, Anthropic ones x-api-key: either may carry the key. */
static bool auth_ok(srv_server *s, struct MHD_Connection *c)
{
    if (!s->api_key[0]) return true;
    const char *bearer = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return srv_auth_ok(bearer, s->api_key) || srv_auth_ok(xkey, s->api_key);
}

/* ---- dispatch --------------------------------------------------------------- */

enum route_id {
    R_NONE = 0, R_ROOT, R_HEALTH, R_MODELS, R_MODEL_ONE, R_CHAT, R_COMPLETIONS, R_MESSAGES, R_COUNT_TOKENS,
    R_RESPONSES, R_TOKENIZE, R_DETOKENIZE, R_METRICS, R_MONITOR_PAGE, R_MONITOR_ASSET, R_MONITOR_STATE,
    R_MONITOR_RESET, R_MONITOR_RELOAD,
};

static const struct {
    const char *path;
    enum route_id id;
    bool post;
    const char *label;
} ROUTES[] = {
    {"/", R_ROOT, false, "root"},
    {"/health", R_HEALTH, false, "health"},
    {"/v1/health", R_HEALTH, false, "health"},
    {"/v1/models", R_MODELS, false, "models"},
    {"/models", R_MODELS, false, "models"},
    {"/v1/chat/completions", R_CHAT, true, "chat"},
    {"/chat/completions", R_CHAT, true, "chat"},
    {"/v1/completions", R_COMPLETIONS, true, "completions"},
    {"/v1/messages", R_MESSAGES, true, "messages"},
    {"/v1/messages/count_tokens", R_COUNT_TOKENS, true, "count_tokens"},
    {"/v1/responses", R_RESPONSES, true, "responses"},
    {"/responses", R_RESPONSES, true, "responses"},
    {"/v1/tokenize", R_TOKENIZE, true, "tokenize"},
    {"/tokenize", R_TOKENIZE, true, "tokenize"},
    {"/v1/detokenize", R_DETOKENIZE, true, "detokenize"},
    {"/detokenize", R_DETOKENIZE, true, "detokenize"},
    {"/monitor/api/reset-cache", R_MONITOR_RESET, true, "monitor"},
    {"/monitor/api/reload", R_MONITOR_RELOAD, true, "monitor"},
    {"/metrics", R_METRICS, false, "metrics"},
    {"/monitor", R_MONITOR_PAGE, false, "monitor"},
    {"/monitor/", R_MONITOR_PAGE, false, "monitor"},
    {"/monitor/api/state", R_MONITOR_STATE, false, "monitor"},
};

static enum route_id match_route(const char *url, const char **arg, bool *want_post, const char **label)
{
    *arg = NULL;
    *want_post = false;
    *label = "other";
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        if (strcmp(url, ROUTES[i].path)) continue;
        *want_post = ROUTES[i].post;
        *label = ROUTES[i].label;
        return ROUTES[i].id;
    }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *arg = url + 11;
        *label = "models";
        return R_MODEL_ONE;
    }
    if (!strncmp(url, "/monitor/", 9)) {
        *arg = url + 9;
        *label = "monitor";
        return R_MONITOR_ASSET;
    }
    return R_NONE;
}

static enum MHD_Result dispatch(conn_ctx *cc, const char *url, const char *method)
{
    srv_server *s = cc->srv;
    const char *arg;
    bool want_post;
    enum route_id r = match_route(url, &arg, &want_post, &cc->route);
    if (r == R_MESSAGES || r == R_COUNT_TOKENS) cc->api = &srv_api_messages; /* Anthropic-shaped errors */
    else if (r == R_RESPONSES) cc->api = &srv_api_responses;
    if (r == R_NONE) return srv_reply_errorf(cc, 404, "not_found", "no such route");
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool is_post = !strcmp(method, "POST");
    if ((want_post && !is_post) || (!want_post && !is_get))
        return srv_reply_errorf(cc, 405, "method_not_allowed", "method not allowed on this route");
    if (cc->oom) return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory while reading the request body");
    const char *why = NULL;
    if (!origin_ok(s, cc->conn, &why)) return srv_reply_errorf(cc, 403, "forbidden", why);
    bool is_public = r == R_ROOT || r == R_HEALTH || r == R_MONITOR_PAGE || r == R_MONITOR_ASSET;
    if (!is_public && !auth_ok(s, cc->conn)) {
        srv_error e;
        srv_fail(&e, 401, NULL, "invalid_api_key",
                 "Invalid or missing API key (send Authorization: Bearer KEY or x-api-key: KEY)");
        return srv_reply_error(cc, &e);
    }
    switch (r) {
    case R_ROOT: return handle_root(cc);
    case R_HEALTH:
        if (!pl_service_ready(s->svc)) return srv_reply_errorf(cc, 503, "loading", "Loading model");
        {
            json_t *o = json_object();
            json_object_set_new(o, "status", json_string("ok"));
            return srv_reply_json(cc, 200, o);
        }
    case R_MODELS: return handle_models(cc, NULL);
    case R_MODEL_ONE: return handle_models(cc, arg);
    case R_CHAT: return srv_handle_generate(cc, &srv_api_chat);
    case R_COMPLETIONS: return srv_handle_generate(cc, &srv_api_completions);
    case R_MESSAGES: return srv_handle_generate(cc, &srv_api_messages);
    case R_COUNT_TOKENS: return srv_handle_count_tokens(cc);
    case R_RESPONSES: return srv_handle_generate(cc, &srv_api_responses);
    case R_TOKENIZE: return handle_tokenize(cc);
    case R_DETOKENIZE: return handle_detokenize(cc);
    case R_METRICS: return handle_metrics(cc);
    case R_MONITOR_PAGE: return handle_monitor_asset(cc, "index.html");
    case R_MONITOR_ASSET: return handle_monitor_asset(cc, arg);
    case R_MONITOR_STATE: return handle_monitor_state(cc);
    case R_MONITOR_RESET: return handle_monitor_action(cc, false);
    case R_MONITOR_RELOAD: return handle_monitor_action(cc, true);
    default: break;
    }
    return srv_reply_errorf(cc, 404, "not_found", "no such route");
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
        cc->conn = c;
        cc->t0_ms = wk_now_ms();
        cc->route = "other";
        snprintf(cc->method, sizeof cc->method, "%s", method);
        cc->path = strdup(url);
        *con_cls = cc;
        if (!cc->path) {
            cc->responded = true;
            return srv_reply_errorf(cc, 500, "out_of_memory", "out of memory");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.limits.max_body_bytes) {
            /* Refuse before reading it; MHD closes the connection afterwards. */
            cc->too_large = true;
            cc->responded = true;
            srv_error e;
            srv_fail(&e, 413, NULL, "body_too_large", "request body of %s bytes exceeds the limit of %zu bytes", cl,
                     s->cfg.limits.max_body_bytes);
            return srv_reply_error(cc, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large && !cc->oom) {
            if (cc->body.len + *upload_size > s->cfg.limits.max_body_bytes) {
                cc->too_large = true;
                srv_buf_free(&cc->body);
            } else if (srv_buf_append(&cc->body, upload, *upload_size)) {
                cc->oom = true; /* answered with a 500 once the upload ends */
                srv_buf_free(&cc->body);
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
        return srv_reply_error(cc, &e);
    }
    return dispatch(cc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    srv_buf_free(&cc->body);
    free(cc->path);
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

/* A listening socket on host:port. SO_REUSEADDR only lets a restarted
 * server bind while old connections linger in TIME_WAIT; no SO_REUSEPORT:
 * a port another process listens on is refused, not shared. */
static int listen_on(const char *host, int port, int *fd_out, bool *v6, wk_error *err)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *lookup = strcmp(host, "[::1]") == 0 ? "::1" : host;
    int gai = getaddrinfo(lookup, port_s, &hints, &ai);
    if (gai) return wk_fail(err, WK_EINVAL, "cannot resolve host %s: %s", host, gai_strerror(gai));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return wk_fail(err, WK_EIO, "cannot create a socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    *v6 = ai->ai_family == AF_INET6;
    if (*v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int rc = bind(fd, ai->ai_addr, ai->ai_addrlen);
    int bind_errno = errno;
    freeaddrinfo(ai);
    if (rc == 0 && listen(fd, 64) != 0) {
        rc = -1;
        bind_errno = errno;
    }
    if (rc != 0) {
        close(fd);
        if (bind_errno == EADDRINUSE) {
            char owner[320];
            bool known = srv_port_owner(port, owner, sizeof owner) == 0;
            return wk_fail(err, WK_EIO, "port %d on %s is already in use%s%s; stop it or pick another port with "
                           "--port N (--port 0 picks a free one)", port, host, known ? " by " : "", known ? owner : "");
        }
        return wk_fail(err, WK_EIO, "cannot listen on %s:%d: %s", host, port, strerror(bind_errno));
    }
    *fd_out = fd;
    return 0;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -1;
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
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

    int fd;
    bool v6;
    int rc = listen_on(host, cfg->port, &fd, &v6, err);
    if (rc) return rc;
    srv_server *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    s->cfg = *cfg;
    snprintf(s->host, sizeof s->host, "%s", host);
    snprintf(s->api_key, sizeof s->api_key, "%s", cfg->api_key ? cfg->api_key : "");
    s->cfg.host = s->host;
    s->cfg.api_key = s->api_key;
    s->svc = svc;
    s->loopback = loopback;
    s->listen_fd = fd;
    s->models.id = pl_service_model_id(svc);
    s->models.aliases = cfg->aliases;
    s->models.n_aliases = cfg->n_aliases;
    s->models.strict = cfg->strict_model_id;
    if (s->cfg.conn_timeout_s <= 0) s->cfg.conn_timeout_s = 30;
    if (s->cfg.keepalive_ms <= 0) s->cfg.keepalive_ms = 5000;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 512;
    srv_metrics_init(&s->metrics);

    /* Idle timeout + connection caps bound what slow (slow-loris) clients can
     * hold: a remote peer gets at most max_conn_per_ip connections. */
    if (s->cfg.max_conn_per_ip <= 0) s->cfg.max_conn_per_ip = loopback ? 0 : 32;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.max_conn_per_ip, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->daemon) {
        srv_metrics_destroy(&s->metrics);
        close(fd);
        free(s);
        return wk_fail(err, WK_EIO, "cannot start the HTTP server on %s:%d", host, cfg->port);
    }
    s->port = bound_port(fd);
    *out = s;
    return 0;
}

int srv_port(const srv_server *s) { return s->port; }

void srv_stop(srv_server *s)
{
    if (!s) return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->daemon); /* closes the listening socket too */
    srv_metrics_destroy(&s->metrics);
    free(s);
}
