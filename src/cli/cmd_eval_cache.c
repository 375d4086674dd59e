/* wick eval cache: a scripted agent-style conversation against a running
 * server that checks the prefix cache for speed and correctness.
 *
 * Steps: cold request; follow-up question; appended tool result; rewritten
 * last user message; an early fact changed; a cancelled request and its
 * retry; (with --server-cmd) a server restart and a follow-up. Every cached
 * request is repeated with {"wick": {"fresh": true}} (no cache) and, the
 * sampling being greedy, must give the same output: stale reuse would not.
 * Speed check for follow-ups: recomputed tokens <= new tail + slack, where
 * the new tail is measured from the previous prompt (the checkpoint must sit
 * within `slack` tokens before the edit). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/eval_http.h"

typedef struct eval {
    const char *url, *key, *model, *server_cmd;
    int max_tokens, pad_words, slack;
    long abort_ms;
    bool json, quiet, speed_only;
    pid_t server;
    json_t *steps;
    int failures;
    char nonce[32];
} eval;

/* What one chat request gave back. */
typedef struct reply {
    bool ok;
    long status;
    char *content, *reasoning; /* malloc'd */
    json_t *tool_calls;        /* new ref or NULL */
    int prompt, cached, recomputed, replayed, ckpt_pos;
    char ckpt_kind[32];
    bool from_disk, aborted;
    double ttft_ms, wall_ms;
    char error[512];
} reply;

static void reply_free(reply *r)
{
    free(r->content);
    free(r->reasoning);
    json_decref(r->tool_calls);
    memset(r, 0, sizeof *r);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick eval cache --url URL [options]\n\n"
            "Runs a scripted conversation against a wick server and checks that the\n"
            "prefix cache reuses what it should (speed) and never what it should not\n"
            "(every answer equals a cache-bypassing run of the same request; greedy).\n\n"
            "options:\n"
            "  --url URL           server base URL (http://127.0.0.1:8008)\n"
            "  --server-cmd CMD    start the server with CMD (sh -c), wait for /health,\n"
            "                      and restart it for the restart step (use --cache-dir)\n"
            "  --api-key KEY       bearer key (env WICK_API_KEY)\n"
            "  --model NAME        model field of the requests\n"
            "  --max-tokens N      tokens per answer (default 12)\n"
            "  --pad-words N       words of filler in the system prompt (default 150)\n"
            "  --slack N           tokens a checkpoint may sit before the edit (default 16)\n"
            "  --abort-ms N        the cancelled request is dropped after N ms (default 40)\n"
            "  --speed-only        skip the cache-bypassing comparison runs (timing tables\n"
            "                      on large prompts); the correctness checks are then not made\n"
            "  --json              one JSON object with every step and check\n"
            "  -q, --quiet         no table, exit status only\n");
}

/* ---- server process ------------------------------------------------------------- */

static bool server_healthy(const eval *ev)
{
    cli_http_resp r;
    char e[256];
    bool ok = cli_http_get(ev->url, "/health", ev->key, &r, e, sizeof e) == 0 && r.status == 200;
    cli_http_resp_free(&r);
    return ok;
}

static int start_server(eval *ev)
{
    pid_t p = fork();
    if (p < 0) return -1;
    if (p == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", ev->server_cmd, (char *)NULL);
        _exit(127);
    }
    ev->server = p;
    for (int i = 0; i < 600; i++) { /* 60 s: model load on a slow machine */
        if (server_healthy(ev)) return 0;
        int st;
        if (waitpid(p, &st, WNOHANG) == p) {
            ev->server = 0;
            return -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* SIGTERM to the server's process group, then wait until every process of
 * the group is gone: the shell may exit first while the server still
 * finishes its last archive write (a restart must not race with it). */
static void stop_server(eval *ev)
{
    if (ev->server <= 0) return;
    kill(-ev->server, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 1200 && !gone; i++) { /* 120 s: a large archive write + fsync */
        waitpid(ev->server, NULL, WNOHANG);
        gone = kill(-ev->server, 0) != 0 && errno == ESRCH;
        if (!gone) {
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (!gone) {
        kill(-ev->server, SIGKILL);
        waitpid(ev->server, NULL, 0);
    }
    ev->server = 0;
}

/* ---- requests ------------------------------------------------------------------- */

static json_t *msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static int int_of(const json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }

static char *dup_str(const json_t *s) { return strdup(json_is_string(s) ? json_string_value(s) : ""); }

/* Sends messages; fresh bypasses the cache; abort_ms > 0 drops the connection. */
static void chat(eval *ev, const json_t *messages, const json_t *tools, bool fresh, long abort_ms, reply *r)
{
    memset(r, 0, sizeof *r);
    json_t *req = json_object();
    if (ev->model) json_object_set_new(req, "model", json_string(ev->model));
    json_object_set(req, "messages", (json_t *)messages);
    if (tools) json_object_set(req, "tools", (json_t *)tools);
    json_object_set_new(req, "max_tokens", json_integer(abort_ms > 0 ? 4096 : ev->max_tokens));
    json_object_set_new(req, "temperature", json_integer(0));
    json_object_set_new(req, "seed", json_integer(7));
    if (abort_ms > 0) {
        json_object_set_new(req, "stream", json_true());
        json_object_set_new(req, "ignore_eos", json_true());
    }
    if (fresh) json_object_set_new(req, "wick", json_pack("{s:b}", "fresh", 1));
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    cli_http_resp h;
    char err[512];
    int rc = cli_http_post(ev->url, "/v1/chat/completions", ev->key, body, abort_ms, &h, err, sizeof err);
    free(body);
    r->wall_ms = h.wall_ms;
    r->status = h.status;
    r->aborted = h.aborted;
    if (rc) {
        snprintf(r->error, sizeof r->error, "%s", err);
        return;
    }
    if (h.aborted) {
        r->ok = true;
        cli_http_resp_free(&h);
        return;
    }
    json_error_t je;
    json_t *o = json_loads(h.body, 0, &je);
    if (h.status != 200 || !o) {
        snprintf(r->error, sizeof r->error, "HTTP %ld: %.400s", h.status, h.body ? h.body : "");
        json_decref(o);
        cli_http_resp_free(&h);
        return;
    }
    cli_http_resp_free(&h);
    const json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    r->content = dup_str(json_object_get(m, "content"));
    r->reasoning = dup_str(json_object_get(m, "reasoning_content"));
    json_t *calls = json_object_get(m, "tool_calls");
    if (calls && json_array_size(calls)) r->tool_calls = json_incref(calls);
    const json_t *t = json_object_get(o, "timings");
    r->prompt = int_of(t, "prompt_tokens");
    r->cached = int_of(t, "cached_tokens");
    r->recomputed = int_of(t, "recomputed_tokens");
    r->replayed = int_of(t, "replayed_tokens");
    r->ttft_ms = json_number_value(json_object_get(t, "ttft_ms"));
    const json_t *ck = json_object_get(t, "checkpoint");
    r->ckpt_pos = ck ? int_of(ck, "pos") : -1;
    snprintf(r->ckpt_kind, sizeof r->ckpt_kind, "%s",
             ck && json_is_string(json_object_get(ck, "kind")) ? json_string_value(json_object_get(ck, "kind")) : "-");
    r->from_disk = ck && json_is_true(json_object_get(ck, "from_disk"));
    r->ok = true;
    json_decref(o);
}

/* Tokens the server's vocabulary makes of plain text (-1 on failure). */
static int count_tokens(eval *ev, const char *text)
{
    json_t *req = json_pack("{s:s, s:b}", "content", text, "parse_special", 0);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    cli_http_resp h;
    char err[256];
    int n = -1;
    if (cli_http_post(ev->url, "/v1/tokenize", ev->key, body, 0, &h, err, sizeof err) == 0 && h.status == 200) {
        json_t *o = json_loads(h.body, 0, NULL);
        if (o) n = (int)json_array_size(json_object_get(o, "tokens"));
        json_decref(o);
    }
    free(body);
    cli_http_resp_free(&h);
    return n;
}

/* Where the server stopped the request the client dropped: "prefill" when
 * its final counters cover less than the prompt, "decode" when the prompt
 * went through, "unknown" if the monitor does not list it (yet). */
static const char *cancel_phase(eval *ev)
{
    for (int tries = 0; tries < 50; tries++) { /* 5 s: the server notices the drop on its next write */
        cli_http_resp h;
        char err[256];
        const char *phase = NULL;
        if (cli_http_get(ev->url, "/monitor/api/state", ev->key, &h, err, sizeof err) == 0 && h.status == 200) {
            json_t *o = json_loads(h.body, 0, NULL);
            size_t i;
            json_t *r;
            json_array_foreach(json_object_get(o, "recent"), i, r)
            {
                if (strcmp(json_string_value(json_object_get(r, "status")) ? json_string_value(json_object_get(r, "status")) : "",
                           "cancelled"))
                    continue;
                const json_t *c = json_object_get(r, "counters");
                phase = int_of(c, "cached_tokens") + int_of(c, "recomputed_tokens") < int_of(c, "prompt_tokens") ? "prefill"
                                                                                                                  : "decode";
                break; /* newest first */
            }
            json_decref(o);
        }
        cli_http_resp_free(&h);
        if (phase) return phase;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return "unknown";
}

/* The assistant message a client would send back for a reply. */
static json_t *assistant_of(const reply *r)
{
    json_t *m = msg("assistant", r->content ? r->content : "");
    if (r->reasoning && *r->reasoning) json_object_set_new(m, "reasoning_content", json_string(r->reasoning));
    if (r->tool_calls) json_object_set(m, "tool_calls", r->tool_calls);
    return m;
}

static bool same_output(const reply *a, const reply *b)
{
    if (strcmp(a->content ? a->content : "", b->content ? b->content : "")) return false;
    if (strcmp(a->reasoning ? a->reasoning : "", b->reasoning ? b->reasoning : "")) return false;
    if (!a->tool_calls != !b->tool_calls) return false;
    return !a->tool_calls || json_equal(a->tool_calls, b->tool_calls);
}

/* ---- steps and checks ----------------------------------------------------------- */

typedef struct step {
    json_t *obj;   /* the step's JSON row */
    json_t *checks;
} step;

static void step_begin(eval *ev, step *s, const char *name, const reply *r)
{
    (void)ev;
    s->obj = json_object();
    s->checks = json_array();
    json_object_set_new(s->obj, "step", json_string(name));
    json_object_set_new(s->obj, "prompt_tokens", json_integer(r->prompt));
    json_object_set_new(s->obj, "cached_tokens", json_integer(r->cached));
    json_object_set_new(s->obj, "recomputed_tokens", json_integer(r->recomputed));
    json_object_set_new(s->obj, "replayed_tokens", json_integer(r->replayed));
    json_object_set_new(s->obj, "checkpoint_pos", json_integer(r->ckpt_pos));
    json_object_set_new(s->obj, "checkpoint_kind", json_string(r->ckpt_kind));
    json_object_set_new(s->obj, "from_disk", json_boolean(r->from_disk));
    json_object_set_new(s->obj, "ttft_ms", json_real(r->ttft_ms));
    json_object_set_new(s->obj, "wall_ms", json_real(r->wall_ms));
}

static void check(eval *ev, step *s, const char *name, bool pass, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void check(eval *ev, step *s, const char *name, bool pass, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    json_array_append_new(s->checks, json_pack("{s:s, s:b, s:s}", "check", name, "pass", pass, "detail", detail));
    if (!pass) ev->failures++;
}

static void step_end(eval *ev, step *s)
{
    json_object_set_new(s->obj, "checks", s->checks);
    json_array_append_new(ev->steps, s->obj);
}

/* Counters add up, and the answer equals a cache-bypassing run. */
static void common_checks(eval *ev, step *s, const json_t *messages, const json_t *tools, const reply *r)
{
    check(ev, s, "counters", r->cached + r->recomputed == r->prompt && r->cached < r->prompt && r->prompt > 0,
          "cached %d + recomputed %d vs prompt %d", r->cached, r->recomputed, r->prompt);
    if (ev->speed_only) return;
    reply fresh;
    chat(ev, messages, tools, true, 0, &fresh);
    if (!fresh.ok) {
        check(ev, s, "same_as_fresh", false, "fresh run failed: %s", fresh.error);
    } else {
        check(ev, s, "same_as_fresh", same_output(r, &fresh),
              "cached answer %s the fresh answer (fresh reused %d tokens)", same_output(r, &fresh) ? "equals" : "DIFFERS from",
              fresh.cached);
        check(ev, s, "fresh_reuses_nothing", fresh.cached == 0, "fresh cached_tokens = %d", fresh.cached);
    }
    reply_free(&fresh);
}

/* recomputed <= new tail + slack: the reuse reached to within slack tokens of the edit. */
static void tail_check(eval *ev, step *s, const reply *r, int new_tail)
{
    json_object_set_new(s->obj, "new_tail", json_integer(new_tail));
    check(ev, s, "recomputed_le_tail_plus_slack", r->recomputed <= new_tail + ev->slack,
          "recomputed %d <= new tail %d + slack %d", r->recomputed, new_tail, ev->slack);
}

static bool request_ok(eval *ev, const char *name, const reply *r)
{
    if (r->ok) return true;
    step s;
    step_begin(ev, &s, name, r);
    check(ev, &s, "request", false, "%s", r->error);
    step_end(ev, &s);
    return false;
}

static char *padding(int words)
{
    static const char *const w[] = {"context", "records", "planning", "archive", "review", "notes",
                                    "ledger", "summary", "details", "history", "status", "report"};
    size_t cap = (size_t)words * 12 + 1, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < words; i++) n += (size_t)snprintf(s + n, cap - n, "%s%s", i ? " " : "", w[(i * 7 + i / 3) % 12]);
    return s;
}

/* ---- the scenario --------------------------------------------------------------- */

static json_t *tools_def(void)
{
    return json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
                      "\"Current weather for a city\",\"parameters\":{\"type\":\"object\",\"properties\":"
                      "{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]",
                      0, NULL);
}

static json_t *tool_call_msg(void)
{
    return json_loads("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":"
                      "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
                      "\\\"Paris\\\"}\"}}]}",
                      0, NULL);
}

static void run_scenario(eval *ev)
{
    char *pad = padding(ev->pad_words);
    size_t sys_cap = (pad ? strlen(pad) : 0) + 256;
    char *sys = malloc(sys_cap);
    if (!sys) {
        free(pad);
        return;
    }
    snprintf(sys, sys_cap, "You are a careful assistant (session %s). Background: %s.", ev->nonce, pad ? pad : "");
    free(pad);
    const char *facts_a = "Facts: the project code name is BLUE-HERON; the deadline is March 14; the budget is 4200 euros. "
                          "What is the code name?";
    const char *facts_b = "Facts: the project code name is GREEN-FALCON; the deadline is March 14; the budget is 4200 euros. "
                          "What is the code name?";
    json_t *tools = tools_def();
    json_t *msgs = json_array();
    json_array_append_new(msgs, msg("system", sys));
    json_array_append_new(msgs, msg("user", facts_a));
    reply r, prev;
    step s;

    /* 1. cold */
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "cold", &r)) goto out;
    step_begin(ev, &s, "cold", &r);
    common_checks(ev, &s, msgs, tools, &r);
    step_end(ev, &s);
    int cold_prompt = r.prompt;
    prev = r;

    /* 2. follow-up question */
    json_array_append_new(msgs, assistant_of(&prev));
    json_array_append_new(msgs, msg("user", "And when is the deadline?"));
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "follow_up", &r)) goto out_prev;
    step_begin(ev, &s, "follow_up", &r);
    common_checks(ev, &s, msgs, tools, &r);
    tail_check(ev, &s, &r, r.prompt - prev.prompt);
    step_end(ev, &s);
    reply_free(&prev);
    prev = r;

    /* 3. appended tool result (the assistant turn asks for a tool, the result comes back) */
    json_array_append_new(msgs, assistant_of(&prev));
    json_array_append_new(msgs, msg("user", "Check the weather in Paris with the tool."));
    json_array_append_new(msgs, tool_call_msg());
    json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", "call_1", "content",
                                          "{\"temp_c\": 18, \"sky\": \"clear\"}"));
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "tool_result", &r)) goto out_prev;
    step_begin(ev, &s, "tool_result", &r);
    common_checks(ev, &s, msgs, tools, &r);
    tail_check(ev, &s, &r, r.prompt - prev.prompt);
    step_end(ev, &s);
    reply_free(&prev);
    prev = r;

    /* 4. the last user message rewritten: drop the tool exchange, edit the question */
    json_array_remove(msgs, json_array_size(msgs) - 1);
    json_array_remove(msgs, json_array_size(msgs) - 1);
    json_array_remove(msgs, json_array_size(msgs) - 1);
    const char *rewritten = "Actually, check the weather in Lyon with the tool instead.";
    json_array_append_new(msgs, msg("user", rewritten));
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "rewrite_last_user", &r)) goto out_prev;
    step_begin(ev, &s, "rewrite_last_user", &r);
    common_checks(ev, &s, msgs, tools, &r);
    int rw = count_tokens(ev, rewritten);
    tail_check(ev, &s, &r, rw < 0 ? r.prompt : rw);
    step_end(ev, &s);
    reply_free(&prev);
    prev = r;

    /* 5. an early fact changed: the first user message. Nothing after the
     * change may be reused: cached <= tokens before the user text + tokens of
     * the unchanged part of it (+1 for a BPE merge across the edit). */
    json_array_set_new(msgs, 1, msg("user", facts_b));
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "early_fact_changed", &r)) goto out_prev;
    step_begin(ev, &s, "early_fact_changed", &r);
    common_checks(ev, &s, msgs, tools, &r);
    {
        size_t same = 0;
        while (facts_a[same] && facts_a[same] == facts_b[same]) same++;
        char head[512];
        snprintf(head, sizeof head, "%.*s", (int)same, facts_a);
        int n_user = count_tokens(ev, facts_a), n_head = count_tokens(ev, head);
        /* the cold prompt is [system, user=facts_a, header]: tokens before the user text <= cold - n_user */
        int bound = cold_prompt - n_user + n_head + 1;
        json_object_set_new(s.obj, "common_prefix_bound", json_integer(bound));
        check(ev, &s, "no_stale_reuse", n_user > 0 && r.cached <= bound, "cached %d <= true common prefix bound %d",
              r.cached, bound);
    }
    step_end(ev, &s);
    reply_free(&prev);
    prev = r;

    /* 6. a cancelled request (client drops the connection), then the retry */
    json_array_append_new(msgs, assistant_of(&prev));
    int long_words = ev->pad_words * 3 < 120 ? 120 : ev->pad_words * 3 > 1500 ? 1500 : ev->pad_words * 3;
    char *long_pad = padding(long_words); /* long enough that the drop lands in its prefill */
    char *question = malloc(strlen(long_pad ? long_pad : "") + 128);
    sprintf(question, "Summarise these notes: %s", long_pad ? long_pad : "");
    free(long_pad);
    json_array_append_new(msgs, msg("user", question));
    free(question);
    chat(ev, msgs, tools, false, ev->abort_ms, &r);
    bool aborted = r.aborted;
    reply_free(&r);
    const char *phase = aborted ? cancel_phase(ev) : "not cancelled";
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "cancel_then_retry", &r)) goto out_prev;
    step_begin(ev, &s, "cancel_then_retry", &r);
    json_object_set_new(s.obj, "cancelled_request_aborted", json_boolean(aborted));
    json_object_set_new(s.obj, "cancelled_in", json_string(phase));
    common_checks(ev, &s, msgs, tools, &r);
    tail_check(ev, &s, &r, r.prompt - prev.prompt);
    step_end(ev, &s);
    reply_free(&prev);
    prev = r;

    /* 7. restart the server (the archive must bring the conversation back) */
    if (!ev->server_cmd) {
        json_array_append_new(ev->steps, json_pack("{s:s, s:s}", "step", "restart_follow_up", "skipped",
                                                   "needs --server-cmd"));
        goto out_prev;
    }
    stop_server(ev);
    if (start_server(ev)) {
        memset(&r, 0, sizeof r);
        snprintf(r.error, sizeof r.error, "server did not come back after a restart");
        request_ok(ev, "restart_follow_up", &r);
        goto out_prev;
    }
    json_array_append_new(msgs, assistant_of(&prev));
    json_array_append_new(msgs, msg("user", "Thanks. What was the budget again?"));
    chat(ev, msgs, tools, false, 0, &r);
    if (!request_ok(ev, "restart_follow_up", &r)) goto out_prev;
    step_begin(ev, &s, "restart_follow_up", &r);
    common_checks(ev, &s, msgs, tools, &r);
    check(ev, &s, "restored_from_disk", r.from_disk && r.cached > 0, "from_disk %s, cached %d",
          r.from_disk ? "yes" : "no", r.cached);
    tail_check(ev, &s, &r, r.prompt - prev.prompt);
    step_end(ev, &s);
    reply_free(&r);
out_prev:
    reply_free(&prev);
out:
    free(sys);
    json_decref(msgs);
    json_decref(tools);
}

static void print_table(const eval *ev)
{
    printf("%-20s %7s %7s %7s %7s %-22s %9s  %s\n", "step", "prompt", "cached", "recomp", "replay", "checkpoint",
           "ttft_ms", "checks");
    size_t i;
    json_t *s;
    json_array_foreach(ev->steps, i, s)
    {
        const char *name = json_string_value(json_object_get(s, "step"));
        if (json_object_get(s, "skipped")) {
            printf("%-20s SKIP (%s)\n", name, json_string_value(json_object_get(s, "skipped")));
            continue;
        }
        char ck[64];
        snprintf(ck, sizeof ck, "%s@%d%s", json_string_value(json_object_get(s, "checkpoint_kind")),
                 int_of(s, "checkpoint_pos"), json_is_true(json_object_get(s, "from_disk")) ? " disk" : "");
        printf("%-20s %7d %7d %7d %7d %-22s %9.1f  ", name, int_of(s, "prompt_tokens"), int_of(s, "cached_tokens"),
               int_of(s, "recomputed_tokens"), int_of(s, "replayed_tokens"), ck,
               json_number_value(json_object_get(s, "ttft_ms")));
        size_t k;
        json_t *c;
        bool first = true;
        json_array_foreach(json_object_get(s, "checks"), k, c)
        {
            printf("%s%s %s", first ? "" : ", ", json_string_value(json_object_get(c, "check")),
                   json_is_true(json_object_get(c, "pass")) ? "PASS" : "FAIL");
            first = false;
        }
        printf("\n");
        if (json_object_get(s, "cancelled_in"))
            printf("    (the dropped request was stopped during its %s)\n",
                   json_string_value(json_object_get(s, "cancelled_in")));
        json_array_foreach(json_object_get(s, "checks"), k, c)
        if (!json_is_true(json_object_get(c, "pass")))
            printf("    FAIL %s: %s\n", json_string_value(json_object_get(c, "check")),
                   json_string_value(json_object_get(c, "detail")));
    }
}

static int parse_pos(const char *s, const char *name, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "wick eval cache: %s must be an integer in %d..%d, got '%s'\n", name, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cmd_eval_cache(int argc, char **argv)
{
    enum { O_URL = 1000, O_CMD, O_KEY, O_MODEL, O_MAX, O_PAD, O_SLACK, O_ABORT, O_JSON, O_SPEED };
    static const struct option opts[] = {
        {"url", required_argument, 0, O_URL},     {"server-cmd", required_argument, 0, O_CMD},
        {"api-key", required_argument, 0, O_KEY}, {"model", required_argument, 0, O_MODEL},
        {"max-tokens", required_argument, 0, O_MAX}, {"pad-words", required_argument, 0, O_PAD},
        {"slack", required_argument, 0, O_SLACK}, {"abort-ms", required_argument, 0, O_ABORT},
        {"json", no_argument, 0, O_JSON},         {"quiet", no_argument, 0, 'q'},
        {"speed-only", no_argument, 0, O_SPEED},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    eval ev = {0};
    ev.key = getenv("WICK_API_KEY");
    ev.max_tokens = 12;
    ev.pad_words = 150;
    ev.slack = 16;
    ev.abort_ms = 40;
    int c, v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case O_URL: ev.url = optarg; break;
        case O_CMD: ev.server_cmd = optarg; break;
        case O_KEY: ev.key = optarg; break;
        case O_MODEL: ev.model = optarg; break;
        case O_MAX:
            if (parse_pos(optarg, "--max-tokens", 1, 4096, &ev.max_tokens)) return 2;
            break;
        case O_PAD:
            if (parse_pos(optarg, "--pad-words", 0, 100000, &ev.pad_words)) return 2;
            break;
        case O_SLACK:
            if (parse_pos(optarg, "--slack", 0, 1 << 20, &ev.slack)) return 2;
            break;
        case O_ABORT:
            if (parse_pos(optarg, "--abort-ms", 1, 600000, &v)) return 2;
            ev.abort_ms = v;
            break;
        case O_JSON: ev.json = true; break;
        case O_SPEED: ev.speed_only = true; break;
        case 'q': ev.quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ev.url) {
        fprintf(stderr, "wick eval cache: --url is required\n");
        usage(stderr);
        return 2;
    }
    snprintf(ev.nonce, sizeof ev.nonce, "%08lx", (unsigned long)(time(NULL) ^ ((unsigned long)getpid() << 12)));
    if (ev.server_cmd && start_server(&ev)) {
        fprintf(stderr, "wick eval cache: the server command did not become healthy at %s: %s\n", ev.url,
                ev.server_cmd);
        stop_server(&ev);
        return 1;
    }
    if (!server_healthy(&ev)) {
        fprintf(stderr, "wick eval cache: no healthy server at %s\n", ev.url);
        stop_server(&ev);
        return 1;
    }
    ev.steps = json_array();
    run_scenario(&ev);
    stop_server(&ev);
    if (ev.json) {
        json_t *o = json_pack("{s:o, s:i, s:b}", "steps", json_incref(ev.steps), "failures", ev.failures, "pass",
                              ev.failures == 0);
        char *txt = json_dumps(o, JSON_INDENT(1));
        printf("%s\n", txt);
        free(txt);
        json_decref(o);
    } else if (!ev.quiet) {
        print_table(&ev);
        printf("%s: %d failed check(s)\n", ev.failures ? "FAIL" : "PASS", ev.failures);
    }
    json_decref(ev.steps);
    return ev.failures ? 1 : 0;
}
