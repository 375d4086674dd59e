/* `wick serve`'s HTTP side: an OpenAI-compatible API on libmicrohttpd (one
 * thread per connection), talking to the engine service only through its
 * queue and per-request event channels.
 *
 * Routes: GET|HEAD /, GET /health, GET /v1/models[/{id}], POST
 * /v1/chat/completions, POST /v1/completions, POST /v1/messages and
 * /v1/messages/count_tokens (Anthropic), POST /v1/responses, POST
 * /v1/tokenize, POST /v1/detokenize, GET /metrics, GET /monitor (page), GET
 * /monitor/api/state, POST /monitor/api/reset-cache, POST
 * /monitor/api/reload. Errors use each API's own error shape; query strings
 * are ignored. Request bodies may be sent gzip-, deflate- or zstd-encoded.
 *
 * Safety: the API key (when set) is required on every route but /health and
 * the monitor's static files, compared in constant time; bodies, JSON depth
 * and message counts are capped; idle connections time out; a browser page
 * from another origin cannot drive the API (Origin must match Host, and on a
 * loopback bind Host must be a loopback name — DNS rebinding). */
#ifndef WICK_SERVER_SERVER_H
#define WICK_SERVER_SERVER_H

#include <stdbool.h>

#include "pipeline/service.h"
#include "server/openai_request.h"
#include "util/err.h"

typedef struct srv_config {
    const char *host;        /* default "127.0.0.1" */
    int port;                /* default 8008; 0 = any free port (see srv_port) */
    const char *api_key;     /* NULL/"" = no auth (only allowed on loopback) */
    srv_limits limits;
    int conn_timeout_s;      /* idle connection timeout (slow clients), default 30 */
    int request_timeout_s;   /* longest a generation may take, 0 = unlimited (default 0) */
    int max_tokens;          /* cap on generated tokens per request (0: none, the context is the limit) */
    const int32_t *bias_ids; /* logit biases every request gets unless it sets the same token (borrowed) */
    const float *bias_values;
    int n_bias;
    int keepalive_ms;        /* SSE ": keep-alive" after this much silence, default 5000 */
    int max_connections;     /* default 512 */
    int max_conn_per_ip;     /* 0: none on loopback, 32 otherwise (bounds one slow client's share) */
    const char *const *aliases; /* more names requests may use for the model (borrowed) */
    int n_aliases;
    bool strict_model_id;    /* refuse a request naming another model (default: the loaded model answers) */
} srv_config;

void srv_config_default(srv_config *c);

/* True for 127.0.0.0/8, ::1 and "localhost". */
bool srv_host_is_loopback(const char *host);

typedef struct srv_server srv_server;

/* Starts listening. Refuses (WK_EINVAL) a non-loopback host without an API
 * key, and (WK_EIO) a port another process listens on, naming the process
 * where /proc tells. svc is borrowed and must outlive the server. */
int srv_start(const srv_config *cfg, pl_service *svc, srv_server **out, wk_error *err);

/* Port actually bound (useful with port 0). */
int srv_port(const srv_server *s);

/* Stops accepting, cancels streams in flight, joins connection threads. */
void srv_stop(srv_server *s);

/* Constant-time check of an Authorization header value ("Bearer KEY") or a
 * bare key against the expected key. NULL header → false. */
bool srv_auth_ok(const char *header_value, const char *expected_key);

#endif
