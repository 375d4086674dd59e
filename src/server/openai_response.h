/* Building OpenAI-shaped response bodies and stream chunks from engine
 * events and counters (chat.completion, chat.completion.chunk,
 * text_completion). All functions return new references. */
#ifndef WICK_SERVER_OPENAI_RESPONSE_H
#define WICK_SERVER_OPENAI_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/request.h"
#include "server/sse.h"

typedef struct srv_resp_meta {
    char id[48];       /* "chatcmpl-…" / "cmpl-…" / "msg_…" / "resp_…" */
    long long created; /* unix seconds, same on every chunk */
    char model[160];
    bool chat;         /* chat.completion vs text_completion */
} srv_resp_meta;

/* Fills meta with a fresh random id (id_prefix + 24 alphanumerics:
 * "chatcmpl-", "cmpl-", "msg_", "resp_"), the time now and the model id. */
void srv_resp_meta_init(srv_resp_meta *m, const char *id_prefix, bool chat, const char *model);

/* n random alphanumerics + NUL into out (ids only need to be unique). */
void srv_random_alnum(char *out, size_t n);

/* What a non-streamed answer accumulates from DELTA events. */
typedef struct srv_accum {
    srv_buf content;
    srv_buf reasoning;
    json_t *tool_calls; /* array of OpenAI tool-call objects, or NULL */
} srv_accum;

void srv_accum_add(srv_accum *a, const eng_event *ev);
void srv_accum_free(srv_accum *a);

/* The whole non-streamed response (with usage + timings). */
json_t *srv_completion_json(const srv_resp_meta *m, const srv_accum *a, const char *finish,
                            const eng_counters *c);

/* First chat chunk: delta {"role": "assistant", "content": ""}. */
json_t *srv_chunk_role(const srv_resp_meta *m);
/* Chunk for one DELTA event; NULL for an event that carries nothing. */
json_t *srv_chunk_delta(const srv_resp_meta *m, const eng_event *ev);
/* Final chunk of the choice: empty delta + finish_reason, with timings. */
json_t *srv_chunk_finish(const srv_resp_meta *m, const char *finish, const eng_counters *c);
/* stream_options.include_usage: choices [] + usage. */
json_t *srv_chunk_usage(const srv_resp_meta *m, const eng_counters *c);

#endif
