/* OpenAI chat completions and completions as srv_api tables: the request
 * parsers of openai_request.c and the bodies / chunks of openai_response.c,
 * streamed as "data: {...}" events ending with "data: [DONE]". */
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

static int parse_chat(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                      srv_exchange *x, srv_error *err)
{
    return srv_parse_chat(root, lim, models, req, &x->ro, err);
}

static int parse_completion(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                            srv_exchange *x, srv_error *err)
{
    return srv_parse_completion(root, lim, models, req, &x->ro, err);
}

static void send(srv_buf *out, json_t *obj)
{
    if (obj) srv_sse_data(out, obj);
    json_decref(obj);
}

static void chat_start(srv_exchange *x, srv_buf *out) { send(out, srv_chunk_role(&x->meta)); }
static void completion_start(srv_exchange *x, srv_buf *out) { (void)x, (void)out; }

static void openai_delta(srv_exchange *x, const eng_event *ev, srv_buf *out) { send(out, srv_chunk_delta(&x->meta, ev)); }

static void openai_done(srv_exchange *x, const eng_event *done, srv_buf *out)
{
    send(out, srv_chunk_finish(&x->meta, done->finish_reason, &done->counters));
    if (x->ro.include_usage) send(out, srv_chunk_usage(&x->meta, &done->counters));
    srv_sse_done(out);
}

/* After the stream started, an error travels as one data event; no [DONE]. */
static void openai_stream_error(srv_exchange *x, const srv_error *e, const char *type, srv_buf *out)
{
    (void)x;
    send(out, srv_error_json(e, type));
}

static void openai_keepalive(srv_exchange *x, srv_buf *out)
{
    (void)x;
    srv_sse_comment(out, "keep-alive");
}

static json_t *openai_final(srv_exchange *x, const eng_event *done)
{
    return srv_completion_json(&x->meta, &x->acc, done->finish_reason, &done->counters);
}

const srv_api srv_api_chat = {
    .route = "chat",
    .chat = true,
    .parse = parse_chat,
    .error_json = srv_error_json,
    .stream_start = chat_start,
    .stream_delta = openai_delta,
    .stream_done = openai_done,
    .stream_error = openai_stream_error,
    .keepalive = openai_keepalive,
    .final_json = openai_final,
};

const srv_api srv_api_completions = {
    .route = "completions",
    .chat = false,
    .parse = parse_completion,
    .error_json = srv_error_json,
    .stream_start = completion_start,
    .stream_delta = openai_delta,
    .stream_done = openai_done,
    .stream_error = openai_stream_error,
    .keepalive = openai_keepalive,
    .final_json = openai_final,
};

void srv_exchange_init(srv_exchange *x)
{
    memset(x, 0, sizeof *x);
    x->block_kind = -1;
    x->item_kind = -1;
}

void srv_exchange_free(srv_exchange *x)
{
    srv_accum_free(&x->acc);
    for (int i = 0; i < x->n_stops; i++) free(x->stops[i]);
    json_decref(x->namespaces);
    json_decref(x->items);
    json_decref(x->echo);
    srv_exchange_init(x);
}

const char *srv_exchange_stop(const srv_exchange *x, const eng_event *done)
{
    int k = done->stopped_by - 1;
    return k >= 0 && k < x->n_stops ? x->stops[k] : NULL;
}

int srv_sse_named(srv_buf *b, const char *name, const json_t *obj)
{
    if (srv_buf_appendf(b, "event: %s\n", name)) return -1;
    return srv_sse_data(b, obj);
}
