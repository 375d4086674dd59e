/* Internals shared by http.c (daemon, routing, small routes) and
 * http_generate.c (the generation driver common to every API). */
#ifndef WICK_SERVER_HTTP_INTERNAL_H
#define WICK_SERVER_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "server/api.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/server.h"

/* How often a waiting handler wakes to look at its client's socket. */
#define WAIT_SLICE_MS 200

struct srv_server {
    srv_config cfg;
    char host[256];
    char api_key[256];
    pl_service *svc;
    struct MHD_Daemon *daemon;
    int listen_fd;
    int port;
    bool loopback;
    srv_model_names models;
    srv_metrics metrics;
    atomic_int connections;
    atomic_bool stopping;
};

/* Per-request state (MHD's con_cls), freed in the completion callback. */
typedef struct conn_ctx {
    srv_server *srv;
    struct MHD_Connection *conn;
    char method[16];
    char *path;          /* the URL path (MHD has taken the query string off) */
    const char *route;   /* label for logs and metrics */
    const srv_api *api;  /* the API whose error shape applies, or NULL (OpenAI's) */
    srv_buf body;
    bool too_large;
    bool oom;            /* the body could not be stored: answered 500 */
    bool responded;
    double t0_ms;
} conn_ctx;

/* Queues a JSON body (stolen) and logs the request. */
enum MHD_Result srv_reply_json(conn_ctx *cc, int status, json_t *body);
/* An error in the shape of cc->api (OpenAI's by default), logged with its reason. */
enum MHD_Result srv_reply_error(conn_ctx *cc, const srv_error *e);
enum MHD_Result srv_reply_errorf(conn_ctx *cc, int status, const char *code, const char *msg);
/* The same with an explicit error type (the engine's). */
enum MHD_Result srv_reply_error_typed(conn_ctx *cc, const srv_error *e, const char *type);
/* A finished generation's body (stolen), logged with its counters. */
enum MHD_Result srv_reply_generated(conn_ctx *cc, json_t *body, const char *id, const eng_event *done);
/* Queues raw bytes without logging (callers log). */
enum MHD_Result srv_queue_bytes(conn_ctx *cc, int status, const char *mime, const void *data, size_t n, bool copy);
/* One log line + the metrics count for a finished request. */
void srv_note_request(conn_ctx *cc, int status, const char *reason, const char *id, bool stream,
                      const eng_counters *c, const char *finish);
void srv_note(srv_server *s, const srv_log_entry *e);

/* False once the peer has closed its end (or the socket failed). */
bool srv_client_alive(struct MHD_Connection *c);

/* The generating routes (http_generate.c). */
enum MHD_Result srv_handle_generate(conn_ctx *cc, const srv_api *api);
/* POST /v1/messages/count_tokens. */
enum MHD_Result srv_handle_count_tokens(conn_ctx *cc);

/* The request body as JSON: Content-Encoding undone, then srv_parse_body. */
int srv_read_body_json(conn_ctx *cc, json_t **out, srv_error *e);

#endif
