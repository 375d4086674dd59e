/* What `wick eval needle|vt|longbench|paired` run against: a model file
 * loaded in-process (-m FILE) or a running server (--url). Both answer one
 * user message greedily (temperature 0, thinking off), count tokens, and
 * say which template and policy were used, so every report can state them.
 * Common options are parsed here (eval_runner_option). */
#ifndef WICK_CLI_EVAL_RUNNER_H
#define WICK_CLI_EVAL_RUNNER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

#include "backend/backend.h"
#include "cli/cli_policy.h"
#include "eval/eval_local.h"
#include "util/err.h"

enum {
    EVR_OPT_URL = 0x4200,
    EVR_OPT_API_KEY,
    EVR_OPT_MODEL_NAME,
    EVR_OPT_MAX_TOKENS,
    EVR_OPT_SEED,
    EVR_OPT_JSON,
    EVR_OPT_TEMPLATE,
    EVR_OPT_UBATCH,
};

#define EVAL_RUNNER_LONG_OPTIONS                                                        \
    {"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},       \
        {"url", required_argument, 0, EVR_OPT_URL},                                      \
        {"api-key", required_argument, 0, EVR_OPT_API_KEY},                              \
        {"model-name", required_argument, 0, EVR_OPT_MODEL_NAME},                        \
        {"max-tokens", required_argument, 0, EVR_OPT_MAX_TOKENS},                        \
        {"seed", required_argument, 0, EVR_OPT_SEED}, {"json", no_argument, 0, EVR_OPT_JSON}, \
        {"chat-template", required_argument, 0, EVR_OPT_TEMPLATE},                       \
        {"ubatch", required_argument, 0, EVR_OPT_UBATCH}, {"quiet", no_argument, 0, 'q'}, CLI_KV_TYPE_OPTION

#define EVAL_RUNNER_HELP                                                                        \
    "  -m, --model FILE     run the GGUF in-process, or\n"                                      \
    "  --url URL            ask a running wick server (http://127.0.0.1:8008)\n"                \
    "  --api-key KEY        bearer key for --url (env WICK_API_KEY)\n"                          \
    "  --model-name NAME    'model' field sent to the server\n"                                 \
    "  --max-tokens N       response limit in tokens\n"                                         \
    "  --seed N             generator seed (default 1)\n"                                       \
    "  -t, --threads N      threads for -m (default: physical cores)\n"                         \
    "  --ubatch N           prefill chunk for -m (default 512)\n"                               \
    "  --chat-template NAME override the model's chat template (-m)\n"                          \
    "  --kv-type T          KV cache type for -m: f16 (default) or q8_0\n"                     \
    "  --json               one JSON object on stdout instead of the table\n"                   \
    "  -q, --quiet          no progress on stderr\n"

typedef struct eval_runner_opts {
    const char *model_path, *url, *api_key, *model_name, *template_name;
    int threads, ubatch, max_tokens;
    uint64_t seed;
    bool json, quiet;
    be_attn_policy policy; /* the policy answers are computed with (--attn-*) */
    int32_t kv_type;       /* -m: enum be_kv_type */
} eval_runner_opts;

/* Defaults: max_tokens as given, seed 1, dense policy (design numbers ready). */
void eval_runner_opts_init(eval_runner_opts *o, int max_tokens);

/* Handles a common option code; 1 handled, 0 not common, -1 bad value (printed). */
int eval_runner_option(eval_runner_opts *o, int opt, const char *arg, const char *cmd);

/* The `default:` of an eval command's option switch: a common option, else
 * usage on stderr. 0 = handled; 2 = the exit status to return. */
int eval_runner_other_option(eval_runner_opts *o, int opt, const char *arg, const char *cmd,
                             void (*usage)(FILE *out));

/* A run that failed part-way: prints why on stderr and, with --json, the
 * {"eval": name, "complete": false, "error": …} object. Never a partial result. */
void eval_report_incomplete(const eval_runner_opts *o, const char *cmd, const char *eval_name, const char *why);

/* Checks that exactly one of -m / --url is given (printed error, -1). */
int eval_runner_check(const eval_runner_opts *o, const char *cmd);

/* After getopt: no stray arguments (argv[first_extra..]) and eval_runner_check.
 * 0, or 2 (the exit status) with the error printed. */
int eval_runner_args_done(const eval_runner_opts *o, const char *cmd, int argc, char **argv, int first_extra);

typedef struct eval_runner eval_runner;

int eval_runner_open(eval_runner **out, const eval_runner_opts *o, wk_error *err);
void eval_runner_close(eval_runner *r);

/* ev_count_fn: user = the runner. */
int eval_runner_count(void *user, const char *text, size_t len, int32_t *n_tokens, wk_error *err);

/* Plain-text tokenize / detokenize (malloc'd). */
int eval_runner_tokenize(eval_runner *r, const char *text, int32_t **ids, int32_t *n, wk_error *err);
int eval_runner_detokenize(eval_runner *r, const int32_t *ids, int32_t n, char **text, wk_error *err);

typedef struct eval_answer {
    char *text;            /* malloc'd */
    int32_t prompt_tokens; /* as rendered with the template */
    int32_t answer_tokens;
    double prefill_ms;     /* -1 when unknown */
} eval_answer;

/* One user message answered greedily under policy (NULL: the runner's). */
int eval_runner_ask(eval_runner *r, const char *user_text, int32_t max_tokens, const be_attn_policy *policy,
                    eval_answer *ans, wk_error *err);
void eval_answer_free(eval_answer *a);

/* For reports: "model.gguf" or the URL; the template; the in-process ev_local
 * (NULL with --url). */
const char *eval_runner_target(const eval_runner *r);
const char *eval_runner_template(const eval_runner *r);
ev_local *eval_runner_local(eval_runner *r);

/* Comma-separated lists for options: integers in [lo, hi] / numbers in
 * [lo, hi]. Return the count (>= 1) or -1 with a message on stderr. */
int eval_parse_ints(const char *cmd, const char *opt, const char *s, long lo, long hi, int32_t *out, int cap);
int eval_parse_doubles(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out, int cap);

/* Reads a whole text file (malloc'd, NUL-terminated); NULL with err. */
char *eval_read_file(const char *path, size_t *len, wk_error *err);

/* The fields every report carries: eval name, target, template, policy,
 * response limit, seed. New reference. */
json_t *eval_report_new(const char *eval, eval_runner *r, const eval_runner_opts *o);

/* Marks rep complete. With --json prints it (one line) and returns 1; else
 * prints the title "wick eval NAME: target (in-process|server), template T"
 * (", policy P" when with_policy), a newline, and returns 0: the caller then
 * prints its tables. */
int eval_report_finish(const eval_runner_opts *o, json_t *rep, const char *name, eval_runner *r, bool with_policy);

/* --filler: *text = the file (NULL when path is NULL). 0, or 1 with the error printed. */
int eval_read_filler(const char *cmd, const char *path, char **text, size_t *len);

#endif
