/* `wick measure`: send a file as the prompt of one streamed chat request to
 * a running OpenAI-compatible server and report what happened: prompt /
 * cached / recomputed tokens and prefill speed (the server's counters),
 * time to first token and streamed generation speed (measured here), and
 * the file's SHA-256 so runs can be compared. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/commands.h"
#include "util/sha256.h"
#include "util/timeutil.h"

#ifdef WICK_HAVE_CURL
#include <curl/curl.h>
#endif

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick measure --url URL --file FILE [options]\n\n"
            "Sends FILE as the user message of one streamed /v1/chat/completions request\n"
            "and reports prompt, cached and recomputed tokens, prefill time and speed (from\n"
            "the server's counters), time to first token, and the generation speed seen\n"
            "between the first and the last streamed content chunk.\n\n"
            "options:\n"
            "      --url URL        server base URL, e.g. http://127.0.0.1:8008\n"
            "      --file FILE      prompt text (UTF-8)\n"
            "      --fresh          ask the server not to reuse its cache ({\"wick\":{\"fresh\":true}})\n"
            "      --max-tokens N   tokens to generate (default 64)\n"
            "      --ignore-eos     generate exactly N tokens (the server ignores end-of-generation)\n"
            "      --model ID       model field of the request (default: the server's)\n"
            "      --api-key KEY    bearer key (default: env WICK_API_KEY)\n"
            "      --show-answer    print the streamed answer\n"
            "      --json           print one JSON object instead of text\n"
            "  -h, --help           this help\n");
}

#ifdef WICK_HAVE_CURL

typedef struct measure {
    double t0;
    double t_first_byte, t_first_token, t_first_content, t_last_content;
    int content_chunks, reasoning_chunks;
    char *line;
    size_t line_len, line_cap;
    char *answer;
    size_t answer_len, answer_cap;
    char *error_body;
    size_t error_len, error_cap;
    json_t *usage, *timings;
    char finish[32];
    char stream_error[512];
    bool done;
    bool show;
    long status;
} measure;

static void append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb) return;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static void handle_event(measure *m, const char *data)
{
    if (strcmp(data, "[DONE]") == 0) {
        m->done = true;
        return;
    }
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    json_t *err = json_object_get(j, "error");
    if (err) {
        snprintf(m->stream_error, sizeof m->stream_error, "%s",
                 json_string_value(json_object_get(err, "message")) ? json_string_value(json_object_get(err, "message")) : "error");
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_decref(m->usage);
        m->usage = json_incref(u);
    }
    json_t *t = json_object_get(j, "timings");
    if (json_is_object(t)) {
        json_decref(m->timings);
        m->timings = json_incref(t);
    }
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *delta = json_object_get(ch, "delta");
    const char *content = json_string_value(json_object_get(delta, "content"));
    const char *reasoning = json_string_value(json_object_get(delta, "reasoning_content"));
    double now = wk_now_ms();
    bool tool = json_object_get(delta, "tool_calls") != NULL;
    if ((content && *content) || (reasoning && *reasoning) || tool) {
        if (!m->t_first_token) m->t_first_token = now;
        if (!m->t_first_content) m->t_first_content = now;
        m->t_last_content = now;
        if (content && *content) {
            m->content_chunks++;
            append(&m->answer, &m->answer_len, &m->answer_cap, content, strlen(content));
            if (m->show) {
                fputs(content, stdout);
                fflush(stdout);
            }
        } else {
            m->reasoning_chunks++;
        }
    }
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (fin) snprintf(m->finish, sizeof m->finish, "%s", fin);
    json_decref(j);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *user)
{
    measure *m = user;
    size_t n = size * nmemb;
    if (!m->t_first_byte) m->t_first_byte = wk_now_ms();
    if (m->status != 200) {
        if (m->error_len < 65536) append(&m->error_body, &m->error_len, &m->error_cap, p, n);
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (m->line_len >= 6 && memcmp(m->line, "data: ", 6) == 0) handle_event(m, m->line + 6);
            m->line_len = 0;
            if (m->line) m->line[0] = '\0';
        } else if (p[i] != '\r') {
            append(&m->line, &m->line_len, &m->line_cap, p + i, 1);
        }
    }
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *user)
{
    measure *m = user;
    size_t n = size * nmemb;
    if (n > 9 && memcmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', n);
        if (sp) m->status = strtol(sp + 1, NULL, 10);
    }
    return n;
}

static double num(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

int cmd_measure(int argc, char **argv)
{
    enum { O_URL = 1000, O_FILE, O_FRESH, O_MAX, O_SHOW, O_JSON, O_KEY, O_MODEL, O_NOEOS };
    static const struct option opts[] = {
        {"url", required_argument, 0, O_URL},        {"file", required_argument, 0, O_FILE},
        {"fresh", no_argument, 0, O_FRESH},          {"max-tokens", required_argument, 0, O_MAX},
        {"show-answer", no_argument, 0, O_SHOW},     {"json", no_argument, 0, O_JSON},
        {"api-key", required_argument, 0, O_KEY},    {"model", required_argument, 0, O_MODEL},
        {"ignore-eos", no_argument, 0, O_NOEOS},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *url = NULL, *file = NULL, *key = getenv("WICK_API_KEY"), *model = NULL;
    bool fresh = false, show = false, as_json = false, ignore_eos = false;
    long max_tokens = 64;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_URL: url = optarg; break;
        case O_FILE: file = optarg; break;
        case O_FRESH: fresh = true; break;
        case O_NOEOS: ignore_eos = true; break;
        case O_MAX: {
            char *end;
            max_tokens = strtol(optarg, &end, 10);
            if (*end || max_tokens < 1 || max_tokens > 1 << 20) {
                fprintf(stderr, "wick measure: --max-tokens must be a positive integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case O_SHOW: show = true; break;
        case O_JSON: as_json = true; break;
        case O_KEY: key = optarg; break;
        case O_MODEL: model = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!url || !file) {
        fprintf(stderr, "wick measure: --url and --file are required\n");
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "wick measure: cannot open %s: %s\n", file, strerror(errno));
        return 1;
    }
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) append(&text, &text_len, &text_cap, chunk, got);
    fclose(f);
    char sha[65];
    wk_error err = {0};
    if (wk_sha256_file(file, sha, &err)) {
        fprintf(stderr, "wick measure: %s\n", err.msg);
        free(text);
        return 1;
    }
    json_t *content = json_stringn(text ? text : "", text_len);
    free(text);
    if (!content) {
        fprintf(stderr, "wick measure: %s is not valid UTF-8 text\n", file);
        return 1;
    }
    json_t *req = json_object();
    if (model) json_object_set_new(req, "model", json_string(model));
    json_t *msgs = json_array();
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("user"));
    json_object_set_new(msg, "content", content);
    json_array_append_new(msgs, msg);
    json_object_set_new(req, "messages", msgs);
    json_object_set_new(req, "max_tokens", json_integer(max_tokens));
    json_object_set_new(req, "stream", json_true());
    json_object_set_new(req, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (fresh) json_object_set_new(req, "wick", json_pack("{s:b}", "fresh", 1));
    if (ignore_eos) json_object_set_new(req, "ignore_eos", json_true());
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);

    char full_url[2048];
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/') ul--;
    if (strstr(url, "/chat/completions")) snprintf(full_url, sizeof full_url, "%.*s", (int)ul, url);
    else if (ul >= 3 && memcmp(url + ul - 3, "/v1", 3) == 0) snprintf(full_url, sizeof full_url, "%.*s/chat/completions", (int)ul, url);
    else snprintf(full_url, sizeof full_url, "%.*s/v1/chat/completions", (int)ul, url);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[600];
    if (key && *key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        hdr = curl_slist_append(hdr, auth);
    }
    measure m = {0};
    m.show = show && !as_json;
    curl_easy_setopt(h, CURLOPT_URL, full_url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &m);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    m.t0 = wk_now_ms();
    CURLcode cc = curl_easy_perform(h);
    double t_end = wk_now_ms();
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    curl_global_cleanup();
    free(body);
    int rc = 0;
    if (cc != CURLE_OK) {
        fprintf(stderr, "wick measure: %s: %s\n", full_url, curl_easy_strerror(cc));
        rc = 1;
    } else if (m.status != 200) {
        json_t *e = m.error_body ? json_loads(m.error_body, 0, NULL) : NULL;
        const char *em = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        fprintf(stderr, "wick measure: HTTP %ld: %s\n", m.status, em ? em : (m.error_body ? m.error_body : ""));
        json_decref(e);
        rc = 1;
    } else if (m.stream_error[0]) {
        fprintf(stderr, "wick measure: the server reported an error mid-stream: %s\n", m.stream_error);
        rc = 1;
    } else if (!m.timings && !m.usage) {
        fprintf(stderr, "wick measure: the stream ended without usage/timings (server not wick or too old?)\n");
        rc = 1;
    }
    if (m.show) fputc('\n', stdout);
    if (rc == 0) {
        const json_t *u = m.usage, *t = m.timings;
        int prompt = (int)num(u, "prompt_tokens");
        int cached = (int)num(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
        int completion = (int)num(u, "completion_tokens");
        int recomputed = t ? (int)num(t, "recomputed_tokens") : prompt - cached;
        double prefill_ms = num(t, "prefill_ms"), prefill_tps = num(t, "prefill_tok_per_s");
        double server_ttft = num(t, "ttft_ms"), server_decode = num(t, "decode_tok_per_s");
        double ttft = m.t_first_token ? m.t_first_token - m.t0 : -1;
        double span = m.t_last_content - m.t_first_content;
        /* Tokens after the first over the time between first and last chunk. */
        double stream_tps = span > 0 && completion > 1 ? (completion - 1) / (span / 1000.0) : 0;
        if (as_json) {
            json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:i,s:f,s:f,s:i,s:f,s:s}", "file", file,
                                  "file_bytes", (json_int_t)text_len, "sha256", sha, "url", full_url, "prompt_tokens",
                                  prompt, "cached_tokens", cached, "recomputed_tokens", recomputed, "prefill_ms",
                                  prefill_ms, "prefill_tok_per_s", prefill_tps, "ttft_ms", ttft, "server_ttft_ms",
                                  server_ttft, "completion_tokens", completion, "stream_tok_per_s", stream_tps,
                                  "server_decode_tok_per_s", server_decode, "content_chunks", m.content_chunks,
                                  "total_ms", t_end - m.t0, "finish_reason", m.finish);
            if (show) json_object_set_new(o, "answer", json_string(m.answer ? m.answer : ""));
            char *s = json_dumps(o, JSON_INDENT(2));
            puts(s);
            free(s);
            json_decref(o);
        } else {
            printf("file        %s (%zu bytes)\nsha256      %s\n", file, text_len, sha);
            printf("prompt      %d tokens: %d cached, %d recomputed\n", prompt, cached, recomputed);
            printf("prefill     %.1f ms, %.1f tok/s (server)\n", prefill_ms, prefill_tps);
            printf("TTFT        %.1f ms (client), %.1f ms (server)\n", ttft, server_ttft);
            printf("generation  %d tokens, %.1f tok/s streamed (first to last chunk), %.1f tok/s (server decode)\n",
                   completion, stream_tps, server_decode);
            printf("finish      %s, total %.1f ms\n", m.finish[0] ? m.finish : "?", t_end - m.t0);
        }
    }
    json_decref(m.usage);
    json_decref(m.timings);
    free(m.line);
    free(m.answer);
    free(m.error_body);
    return rc;
}

#else

int cmd_measure(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    fprintf(stderr, "wick measure: this build has no libcurl (install libcurl4-openssl-dev and rebuild)\n");
    return 1;
}

#endif
