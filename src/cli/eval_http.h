/* Small HTTP client for the `wick eval` subcommands (libcurl): POST a JSON
 * body or GET a path on a server, optionally giving up after a deadline the
 * way a client that goes away would. Without libcurl every call fails with
 * a message saying so. */
#ifndef WICK_CLI_EVAL_HTTP_H
#define WICK_CLI_EVAL_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cli_http_resp {
    long status;      /* HTTP status, 0 if none arrived */
    char *body;       /* malloc'd, NUL-terminated */
    size_t len;
    double wall_ms;   /* request start to end (or abort) */
    bool aborted;     /* the deadline passed and the connection was dropped */
} cli_http_resp;

/* POST body (JSON) to base + path ("http://127.0.0.1:8008" + "/v1/chat/completions").
 * abort_after_ms > 0: drop the connection after that long. api_key may be
 * NULL. Returns 0 when an HTTP exchange happened (any status) or the abort
 * fired; -1 with errbuf filled when the server could not be reached. */
int cli_http_post(const char *base, const char *path, const char *api_key, const char *body, long abort_after_ms,
                  cli_http_resp *out, char *errbuf, size_t errcap);

/* GET base + path; as cli_http_post. */
int cli_http_get(const char *base, const char *path, const char *api_key, cli_http_resp *out, char *errbuf,
                 size_t errcap);

void cli_http_resp_free(cli_http_resp *r);

#endif
