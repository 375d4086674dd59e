/* wick eval longbench: a LongBench v2-format JSON file supplied by the user
 * (nothing is downloaded), the published zero-shot prompt, answer-letter
 * extraction; answered and unanswered items reported separately. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "eval/eval_text.h"

#define LB_RULE                                                                                                      \
    "LongBench v2 extract_answer: '*' removed, then 'The correct answer is (X)' or 'The correct answer is X'; no match " \
    "= unanswered (counted wrong in accuracy)"

enum { OPT_FILE = 0x4600, OPT_LIMIT, OPT_BRIEF, OPT_MAX_INPUT };

static void usage(FILE *out)
{
    fprintf(out, "usage: wick eval longbench --file data.json (-m FILE | --url URL) [options]\n\n"
                 "Runs LongBench v2 items (a JSON array with _id, question, choice_A..D, answer,\n"
                 "context) with the published zero-shot template. Contexts longer than the\n"
                 "input limit are cut in the middle, as LongBench v2 does.\n\n"
                 "  --file PATH          the LongBench v2-format JSON file (required)\n"
                 "  --limit N            first N items only\n"
                 "  --brief              add an instruction to answer with the sentence only\n"
                 "  --max-input N        prompt token limit for the context cut (default: the\n"
                 "                       model's training context minus the response limit with -m,\n"
                 "                       128000 with --url)\n" EVAL_RUNNER_HELP CLI_POLICY_HELP);
}

/* Cuts the middle of ctx so the prompt fits max_input tokens (first and last
 * halves kept, as LongBench v2's pred.py does). *out malloc'd. */
static int fit_context(eval_runner *r, const ev_lb_item *it, int32_t max_input, bool brief, char **out, bool *cut,
                       wk_error *err)
{
    *out = NULL;
    *cut = false;
    char *shell = ev_lb_prompt(it, "", brief);
    if (!shell) return wk_fail(err, WK_ENOMEM, "out of memory");
    int32_t n_shell = 0, *ids = NULL, n = 0;
    int rc = eval_runner_count(r, shell, strlen(shell), &n_shell, err);
    free(shell);
    if (!rc) rc = eval_runner_tokenize(r, it->context, &ids, &n, err);
    if (rc) return rc;
    int32_t budget = max_input - n_shell - 64; /* 64: the chat template's own tokens */
    if (budget < 16) budget = 16;
    if (n <= budget) {
        free(ids);
        *out = strdup(it->context);
        return *out ? 0 : wk_fail(err, WK_ENOMEM, "out of memory");
    }
    int32_t half = budget / 2;
    char *a = NULL, *b = NULL;
    rc = eval_runner_detokenize(r, ids, half, &a, err);
    if (!rc) rc = eval_runner_detokenize(r, ids + n - half, half, &b, err);
    free(ids);
    if (!rc) {
        size_t la = strlen(a), lb = strlen(b);
        *out = malloc(la + lb + 1);
        if (*out) {
            memcpy(*out, a, la);
            memcpy(*out + la, b, lb + 1);
            *cut = true;
        } else {
            rc = wk_fail(err, WK_ENOMEM, "out of memory");
        }
    }
    free(a);
    free(b);
    return rc;
}

int cmd_eval_longbench(int argc, char **argv)
{
    static const struct option opts[] = {
        EVAL_RUNNER_LONG_OPTIONS, CLI_POLICY_LONG_OPTIONS,
        {"file", required_argument, 0, OPT_FILE}, {"limit", required_argument, 0, OPT_LIMIT},
        {"brief", no_argument, 0, OPT_BRIEF}, {"max-input", required_argument, 0, OPT_MAX_INPUT},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *cmd = "wick eval longbench";
    eval_runner_opts o;
    eval_runner_opts_init(&o, 128); /* LongBench v2's max_new_tokens without CoT */
    const char *path = NULL;
    int32_t limit = 0, max_input = 0;
    bool brief = false;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:t:qh", opts, NULL)) != -1) {
        int32_t one[1];
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_FILE: path = optarg; break;
        case OPT_BRIEF: brief = true; break;
        case OPT_LIMIT:
            if (eval_parse_ints(cmd, "--limit", optarg, 1, 1 << 24, one, 1) < 0) return 2;
            limit = one[0];
            break;
        case OPT_MAX_INPUT:
            if (eval_parse_ints(cmd, "--max-input", optarg, 256, 1 << 24, one, 1) < 0) return 2;
            max_input = one[0];
            break;
        default:
            if (eval_runner_other_option(&o, c, optarg, cmd, usage)) return 2;
        }
    }
    if (optind < argc || !path) {
        fprintf(stderr, "%s: %s\n", cmd, path ? "unexpected argument" : "--file is required");
        return 2;
    }
    if (eval_runner_check(&o, cmd)) return 2;
    wk_error err = {0};
    ev_lb_item *items = NULL;
    size_t n_items = 0;
    if (ev_lb_load(path, &items, &n_items, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return 1;
    }
    const size_t n_all = n_items;
    if (limit > 0 && (size_t)limit < n_items) n_items = (size_t)limit;
    eval_runner *r = NULL;
    if (eval_runner_open(&r, &o, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        ev_lb_free(items, n_all);
        return 1;
    }
    if (max_input <= 0) {
        ev_local *l = eval_runner_local(r);
        max_input = l ? ev_local_n_ctx_train(l) - o.max_tokens : 128000;
        if (max_input < 256) max_input = 256;
    }
    json_t *rep = eval_report_new("longbench", r, &o), *results = json_array();
    json_object_set_new(rep, "file", json_string(path));
    json_object_set_new(rep, "prompt_template", json_string(brief ? "LongBench v2 0shot + brief-answer instruction"
                                                                  : "LongBench v2 0shot"));
    json_object_set_new(rep, "max_input_tokens", json_integer(max_input));
    json_object_set_new(rep, "scoring", json_string(LB_RULE));
    json_object_set_new(rep, "sample_size", json_pack("{s:i}", "items", (int)n_items));
    int rc = 0, correct = 0, answered = 0, answered_correct = 0, n_cut = 0;
    for (size_t i = 0; i < n_items && !rc; i++) {
        const ev_lb_item *it = &items[i];
        char *ctx = NULL;
        bool cut = false;
        if (!o.quiet) fprintf(stderr, "%s: item %zu/%zu (%s)...\n", cmd, i + 1, n_items, it->id);
        if ((rc = fit_context(r, it, max_input, brief, &ctx, &cut, &err))) break;
        char *prompt = ev_lb_prompt(it, ctx, brief);
        free(ctx);
        eval_answer ans;
        rc = prompt ? eval_runner_ask(r, prompt, o.max_tokens, NULL, &ans, &err) : wk_fail(&err, WK_ENOMEM, "out of memory");
        free(prompt);
        if (rc) break;
        char got = ev_lb_extract(ans.text);
        char gs[2] = {got, 0}, as[2] = {it->answer, 0};
        n_cut += cut;
        answered += got != 0;
        correct += got == it->answer;
        answered_correct += got != 0 && got == it->answer;
        json_array_append_new(results, json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:b, s:b, s:i, s:s}", "id", it->id,
                                                 "difficulty", it->difficulty, "length", it->length, "answer", as,
                                                 "response", ans.text, "pred", got ? json_string(gs) : json_null(),
                                                 "correct", got == it->answer, "context_cut", cut, "prompt_tokens",
                                                 ans.prompt_tokens, "domain", it->domain));
        eval_answer_free(&ans);
    }
    ev_lb_free(items, n_all);
    if (rc) {
        eval_report_incomplete(&o, cmd, "longbench", err.msg);
        json_decref(results);
        json_decref(rep);
        eval_runner_close(r);
        return 1;
    }
    int total = (int)json_array_size(results);
    json_object_set_new(rep, "results", results);
    json_object_set_new(rep, "summary",
                        json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:i}", "items", total, "answered", answered, "unanswered",
                                  total - answered, "correct", correct, "accuracy", total ? (double)correct / total : 0.0,
                                  "accuracy_answered", answered ? (double)answered_correct / answered : 0.0,
                                  "contexts_cut", n_cut));
    if (!eval_report_finish(&o, rep, "longbench", r, true)) {
        printf("sample: %d item(s) of %s; prompt: %s; input limit %d tokens (%d contexts cut in the middle); response "
               "limit %d tokens, greedy\nscoring: %s\n\n",
               total, path, brief ? "LongBench v2 0shot + brief-answer instruction" : "LongBench v2 0shot", max_input,
               n_cut, o.max_tokens, LB_RULE);
        printf("| items | answered | unanswered | correct | accuracy (all) | accuracy (answered) |\n"
               "|---:|---:|---:|---:|---:|---:|\n");
        printf("| %d | %d | %d | %d | %.1f %% | %.1f %% |\n", total, answered, total - answered, correct,
               total ? 100.0 * correct / total : 0.0, answered ? 100.0 * answered_correct / answered : 0.0);
    }
    json_decref(rep);
    eval_runner_close(r);
    return 0;
}
