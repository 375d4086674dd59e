/* The generating APIs the server speaks — OpenAI chat completions and
 * completions, the Anthropic Messages API, the OpenAI Responses API — as one
 * table each: how a request body becomes an eng_request, and how the
 * engine's events become that API's response, streamed or whole. http.c
 * drives every one of them the same way (parse → submit → admission →
 * stream or collect), so limits, cancellation, logging and metrics are
 * shared. */
#ifndef WICK_SERVER_API_H
#define WICK_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/request.h"
#include "server/error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"

/* The per-request answer being built: ids, the request's response options,
 * everything generated so far, and each API's streaming position. */
typedef struct srv_exchange {
    srv_resp_meta meta;
    srv_resp_opts ro;
    srv_accum acc;       /* every DELTA so far (whole answers and the ".done" events need it) */
    char *stops[ENG_MAX_STOP]; /* copies of the request's stop strings (owned) */
    int n_stops;
    int prompt_tokens;   /* known at admission (Anthropic's message_start) */
    /* Anthropic: the open content block (ENG_DELTA_* kind, -1 none) and its index */
    int block_kind;
    int block_index;
    /* Responses: event sequence number, open output item, the tool names
     * flattened from namespaces (JSON object flat name -> namespace) */
    int seq;
    int item_kind;       /* ENG_DELTA_* kind of the open output item, -1 none */
    int item_index;
    char item_id[80];
    json_t *namespaces;
    json_t *items;       /* Responses: the output items so far */
    json_t *echo;        /* Responses: request fields echoed in the response object */
} srv_exchange;

typedef struct srv_api {
    const char *route; /* label in logs and /metrics ("chat", "messages", ...) */
    bool chat;         /* renders a conversation (vs a raw completion prompt) */
    /* Body (an object) → request; fills x->ro and what x needs later. */
    int (*parse)(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                 srv_exchange *x, srv_error *err);
    /* The error body of this API for an error (type NULL: from the status). */
    json_t *(*error_json)(const srv_error *e, const char *type);
    /* Streams: the opening events, one DELTA, the end (DONE), an error after
     * the start, a keep-alive during silence. */
    void (*stream_start)(srv_exchange *x, srv_buf *out);
    void (*stream_delta)(srv_exchange *x, const eng_event *ev, srv_buf *out);
    /* Not streamed: each DELTA, for an API that builds its answer as it
     * goes (NULL: x->acc is enough). */
    void (*collect_delta)(srv_exchange *x, const eng_event *ev);
    void (*stream_done)(srv_exchange *x, const eng_event *done, srv_buf *out);
    void (*stream_error)(srv_exchange *x, const srv_error *e, const char *type, srv_buf *out);
    void (*keepalive)(srv_exchange *x, srv_buf *out);
    /* The whole answer (not streamed). */
    json_t *(*final_json)(srv_exchange *x, const eng_event *done);
} srv_api;

extern const srv_api srv_api_chat;        /* POST /v1/chat/completions */
extern const srv_api srv_api_completions; /* POST /v1/completions */
extern const srv_api srv_api_messages;    /* POST /v1/messages (Anthropic) */
extern const srv_api srv_api_responses;   /* POST /v1/responses */

void srv_exchange_init(srv_exchange *x);
void srv_exchange_free(srv_exchange *x);

/* The stop string that ended generation (done->stopped_by), or NULL. */
const char *srv_exchange_stop(const srv_exchange *x, const eng_event *done);

/* An SSE event with a name: "event: NAME\ndata: <compact JSON>\n\n". */
int srv_sse_named(srv_buf *b, const char *name, const json_t *obj);

#endif
