/* Local model or server behind the long-context evaluations (eval_runner.h). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/eval_http.h"
#include "cli/eval_runner.h"
#include "engine/context.h"
#include "util/fileio.h"

struct eval_runner {
    eval_runner_opts o;
    ev_local *local;
    char target[512];
    char tmpl[128];
};

void eval_runner_opts_init(eval_runner_opts *o, int max_tokens)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = max_tokens;
    o->seed = 1;
    o->ubatch = 512;
    o->api_key = getenv("WICK_API_KEY");
    cli_policy_init(&o->policy);
}

static int parse_int(const char *arg, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int eval_runner_option(eval_runner_opts *o, int opt, const char *arg, const char *cmd)
{
    long v = 0;
    switch (opt) {
    case 'm': o->model_path = arg; return 1;
    case 't':
        if (parse_int(arg, 0, 1024, &v)) goto bad;
        o->threads = (int)v;
        return 1;
    case 'q': o->quiet = true; return 1;
    case EVR_OPT_URL: o->url = arg; return 1;
    case EVR_OPT_API_KEY: o->api_key = arg; return 1;
    case EVR_OPT_MODEL_NAME: o->model_name = arg; return 1;
    case EVR_OPT_TEMPLATE: o->template_name = arg; return 1;
    case EVR_OPT_JSON: o->json = true; return 1;
    case EVR_OPT_MAX_TOKENS:
        if (parse_int(arg, 1, 1 << 20, &v)) goto bad;
        o->max_tokens = (int)v;
        return 1;
    case EVR_OPT_UBATCH:
        if (parse_int(arg, 1, 1 << 16, &v)) goto bad;
        o->ubatch = (int)v;
        return 1;
    case EVR_OPT_SEED:
        if (parse_int(arg, 0, 0x7fffffffL, &v)) goto bad;
        o->seed = (uint64_t)v;
        return 1;
    default: {
        int r = cli_policy_option(opt, arg, &o->policy, cmd);
        return r ? r : cli_kv_type_option(opt, arg, &o->kv_type, cmd);
    }
    }
bad:
    fprintf(stderr, "%s: bad value '%s'\n", cmd, arg);
    return -1;
}

int eval_report_finish(const eval_runner_opts *o, json_t *rep, const char *name, eval_runner *r, bool with_policy)
{
    json_object_set_new(rep, "complete", json_true());
    if (o->json) {
        json_dumpf(rep, stdout, JSON_COMPACT);
        printf("\n");
        return 1;
    }
    printf("wick eval %s: %s (%s), template %s", name, eval_runner_target(r),
           eval_runner_local(r) ? "in-process" : "server", eval_runner_template(r));
    if (with_policy) printf(", policy %s", json_string_value(json_object_get(rep, "policy")));
    printf("\n");
    return 0;
}

int eval_read_filler(const char *cmd, const char *path, char **text, size_t *len)
{
    wk_error err = {0};
    *text = NULL;
    *len = 0;
    if (path && !(*text = eval_read_file(path, len, &err))) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return 1;
    }
    return 0;
}

int eval_runner_other_option(eval_runner_opts *o, int opt, const char *arg, const char *cmd,
                             void (*usage)(FILE *out))
{
    int r = eval_runner_option(o, opt, arg, cmd);
    if (r < 0) return 2;
    if (r == 0) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int eval_runner_args_done(const eval_runner_opts *o, const char *cmd, int argc, char **argv, int first_extra)
{
    if (first_extra < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, argv[first_extra]);
        return 2;
    }
    return eval_runner_check(o, cmd) ? 2 : 0;
}

void eval_report_incomplete(const eval_runner_opts *o, const char *cmd, const char *eval_name, const char *why)
{
    fprintf(stderr, "%s: incomplete run, no result: %s\n", cmd, why);
    if (!o->json) return;
    json_t *fail = json_pack("{s:s, s:b, s:s}", "eval", eval_name, "complete", 0, "error", why);
    json_dumpf(fail, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(fail);
}

int eval_runner_check(const eval_runner_opts *o, const char *cmd)
{
    if (!!o->model_path == !!o->url) {
        fprintf(stderr, "%s: give exactly one of -m FILE or --url URL\n", cmd);
        return -1;
    }
    return 0;
}

int eval_runner_open(eval_runner **out, const eval_runner_opts *o, wk_error *err)
{
    *out = NULL;
    eval_runner *r = calloc(1, sizeof *r);
    if (!r) return wk_fail(err, WK_ENOMEM, "out of memory");
    r->o = *o;
    if (o->model_path) {
        eng_options eo;
        eng_options_default(&eo);
        eo.n_threads = o->threads;
        eo.n_ubatch = o->ubatch;
        eo.policy = o->policy;
        eo.kv_type = o->kv_type;
        int rc = ev_local_open(&r->local, o->model_path, &eo, o->template_name, err);
        if (rc) {
            free(r);
            return wk_fail_prefix(err, "%s", o->model_path);
        }
        const char *base = strrchr(o->model_path, '/');
        snprintf(r->target, sizeof r->target, "%s", base ? base + 1 : o->model_path);
        snprintf(r->tmpl, sizeof r->tmpl, "%s", ev_local_template_desc(r->local));
    } else {
        snprintf(r->target, sizeof r->target, "%s", o->url);
        snprintf(r->tmpl, sizeof r->tmpl, "server's chat template (enable_thinking=false)");
        /* Reachable? A clear error now beats one per request later. */
        cli_http_resp resp;
        char eb[600];
        if (cli_http_get(o->url, "/health", o->api_key, &resp, eb, sizeof eb)) {
            free(r);
            return wk_fail(err, WK_EIO, "%s", eb);
        }
        cli_http_resp_free(&resp);
    }
    *out = r;
    return 0;
}

void eval_runner_close(eval_runner *r)
{
    if (!r) return;
    ev_local_close(r->local);
    free(r);
}

const char *eval_runner_target(const eval_runner *r) { return r->target; }
const char *eval_runner_template(const eval_runner *r) { return r->tmpl; }
ev_local *eval_runner_local(eval_runner *r) { return r->local; }

/* POST a JSON object to the server; *reply is a new reference on 200. */
static int post_json(eval_runner *r, const char *path, json_t *body, json_t **reply, wk_error *err)
{
    *reply = NULL;
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return wk_fail(err, WK_ENOMEM, "out of memory");
    cli_http_resp resp;
    char eb[600];
    int rc = cli_http_post(r->o.url, path, r->o.api_key, text, 0, &resp, eb, sizeof eb);
    free(text);
    if (rc) return wk_fail(err, WK_EIO, "%s", eb);
    json_error_t je;
    json_t *j = json_loads(resp.body ? resp.body : "", 0, &je);
    if (resp.status != 200 || !j) {
        const json_t *e = j ? json_object_get(json_object_get(j, "error"), "message") : NULL;
        rc = wk_fail(err, WK_EIO, "%s%s: HTTP %ld: %.300s", r->o.url, path, resp.status,
                     json_is_string(e) ? json_string_value(e) : (resp.body ? resp.body : ""));
        json_decref(j);
        cli_http_resp_free(&resp);
        return rc;
    }
    cli_http_resp_free(&resp);
    *reply = j;
    return 0;
}

int eval_runner_tokenize(eval_runner *r, const char *text, int32_t **ids, int32_t *n, wk_error *err)
{
    *ids = NULL;
    *n = 0;
    if (r->local) return ev_local_tokenize(r->local, text, ids, n, err);
    json_t *body = json_pack("{s:s, s:b}", "content", text, "parse_special", 0), *reply = NULL;
    if (!body) return wk_fail(err, WK_EINVAL, "text is not valid UTF-8");
    int rc = post_json(r, "/v1/tokenize", body, &reply, err);
    json_decref(body);
    if (rc) return rc;
    const json_t *toks = json_object_get(reply, "tokens");
    size_t cnt = json_array_size(toks);
    *ids = malloc(sizeof(int32_t) * (cnt ? cnt : 1));
    if (!*ids) {
        json_decref(reply);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cnt; i++) {
        const json_t *t = json_array_get(toks, i);
        /* llama-server's with_pieces form is an object {id, piece} */
        if (json_is_object(t)) t = json_object_get(t, "id");
        (*ids)[i] = (int32_t)json_integer_value(t);
    }
    *n = (int32_t)cnt;
    json_decref(reply);
    return 0;
}

int eval_runner_detokenize(eval_runner *r, const int32_t *ids, int32_t n, char **text, wk_error *err)
{
    *text = NULL;
    if (r->local) return ev_local_detokenize(r->local, ids, n, text, err);
    json_t *arr = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    json_t *body = json_pack("{s:o}", "tokens", arr), *reply = NULL;
    int rc = post_json(r, "/v1/detokenize", body, &reply, err);
    json_decref(body);
    if (rc) return rc;
    const json_t *c = json_object_get(reply, "content");
    *text = strdup(json_is_string(c) ? json_string_value(c) : "");
    json_decref(reply);
    return *text ? 0 : wk_fail(err, WK_ENOMEM, "out of memory");
}

int eval_runner_count(void *user, const char *text, size_t len, int32_t *n_tokens, wk_error *err)
{
    eval_runner *r = user;
    if (r->local) return ev_local_count(r->local, text, len, n_tokens, err);
    char *copy = strndup(text, len);
    if (!copy) return wk_fail(err, WK_ENOMEM, "out of memory");
    int32_t *ids = NULL;
    int rc = eval_runner_tokenize(r, copy, &ids, n_tokens, err);
    free(copy);
    free(ids);
    return rc;
}

/* The request extension object for a policy ({"attn_policy": ..., ...}). */
static json_t *policy_json(const be_attn_policy *p)
{
    if (!p->approx) return json_pack("{s:s, s:b}", "attn_policy", "dense", "fresh", 1);
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:b}", "attn_policy", "approx", "global", p->global, "window",
                     p->window, "dense_tail", p->dense_tail, "dense_tail_continue", p->dense_tail_continue, "fresh", 1);
}

int eval_runner_ask(eval_runner *r, const char *user_text, int32_t max_tokens, const be_attn_policy *policy,
                    eval_answer *ans, wk_error *err)
{
    memset(ans, 0, sizeof *ans);
    ans->prefill_ms = -1;
    if (!policy) policy = &r->o.policy;
    if (r->local) {
        int32_t *ids = NULL, n = 0, n_out = 0;
        int rc = ev_local_chat_ids(r->local, user_text, &ids, &n, err);
        if (!rc)
            rc = ev_local_generate(r->local, ids, n, max_tokens, policy, NULL, NULL, NULL, &n_out, &ans->text,
                                   &ans->prefill_ms, err);
        free(ids);
        ans->prompt_tokens = n;
        ans->answer_tokens = n_out;
        return rc;
    }
    json_t *body = json_pack("{s:[{s:s, s:s}], s:i, s:f, s:{s:b}, s:o}", "messages", "role", "user", "content",
                             user_text, "max_tokens", max_tokens, "temperature", 0.0, "chat_template_kwargs",
                             "enable_thinking", 0, "wick", policy_json(policy));
    if (!body) return wk_fail(err, WK_EINVAL, "prompt is not valid UTF-8");
    if (r->o.model_name) json_object_set_new(body, "model", json_string(r->o.model_name));
    json_t *reply = NULL;
    int rc = post_json(r, "/v1/chat/completions", body, &reply, err);
    json_decref(body);
    if (rc) return rc;
    const json_t *msg = json_object_get(json_array_get(json_object_get(reply, "choices"), 0), "message");
    const json_t *content = json_object_get(msg, "content");
    ans->text = strdup(json_is_string(content) ? json_string_value(content) : "");
    const json_t *usage = json_object_get(reply, "usage");
    ans->prompt_tokens = (int32_t)json_integer_value(json_object_get(usage, "prompt_tokens"));
    ans->answer_tokens = (int32_t)json_integer_value(json_object_get(usage, "completion_tokens"));
    const json_t *pm = json_object_get(json_object_get(reply, "timings"), "prefill_ms");
    if (json_is_number(pm)) ans->prefill_ms = json_number_value(pm);
    json_decref(reply);
    return ans->text ? 0 : wk_fail(err, WK_ENOMEM, "out of memory");
}

void eval_answer_free(eval_answer *a)
{
    free(a->text);
    memset(a, 0, sizeof *a);
}

int eval_parse_ints(const char *cmd, const char *opt, const char *s, long lo, long hi, int32_t *out, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || v < lo || v > hi || n >= cap) {
            fprintf(stderr, "%s: %s '%s': expected up to %d comma-separated integers in %ld..%ld\n", cmd, opt, s, cap, lo,
                    hi);
            return -1;
        }
        out[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) fprintf(stderr, "%s: %s: empty list\n", cmd, opt);
    return n ? n : -1;
}

int eval_parse_doubles(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (errno || end == p || (*end && *end != ',') || !(v >= lo && v <= hi) || n >= cap) {
            fprintf(stderr, "%s: %s '%s': expected up to %d comma-separated numbers in %g..%g\n", cmd, opt, s, cap, lo, hi);
            return -1;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) fprintf(stderr, "%s: %s: empty list\n", cmd, opt);
    return n ? n : -1;
}

char *eval_read_file(const char *path, size_t *len, wk_error *err)
{
    size_t n = 0;
    char *b = wk_read_file(path, SIZE_MAX, &n, err);
    if (b && len) *len = n;
    return b;
}

json_t *eval_report_new(const char *eval, eval_runner *r, const eval_runner_opts *o)
{
    char pol[128];
    cli_policy_describe(&o->policy, pol, sizeof pol);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:b}", "eval", eval, "target", eval_runner_target(r), "via",
                     eval_runner_local(r) ? "in-process" : "server", "template", eval_runner_template(r), "policy", pol,
                     "response_limit_tokens", o->max_tokens, "seed", (json_int_t)o->seed, "complete", 0);
}
