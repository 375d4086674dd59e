/* One log line per HTTP request: method, path, status, the reason of every
 * 4xx/5xx (requests refused during validation included), and for
 * generations the request id, prompt / cached / recomputed tokens, TTFT,
 * decode speed and finish reason. Text or JSON as the log sink is set
 * (util/log.h). Polling routes (health, metrics, monitor) that succeed log
 * at debug level only. */
#ifndef WICK_SERVER_REQUEST_LOG_H
#define WICK_SERVER_REQUEST_LOG_H

#include <stdbool.h>

#include "engine/request.h"

typedef struct srv_log_entry {
    const char *method;
    const char *path;
    const char *route;  /* label ("chat", "messages", "health", ...) */
    int status;
    const char *reason; /* why a 4xx/5xx happened, or NULL */
    const char *id;     /* generation: the response id, or NULL */
    bool stream;
    const eng_counters *counters; /* generation that ran: its counters, or NULL */
    const char *finish;           /* finish reason, or NULL */
    double ms;                    /* wall time from request to response */
} srv_log_entry;

void srv_log_request(const srv_log_entry *e);

#endif
