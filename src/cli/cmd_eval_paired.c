/* wick eval paired: the same prompts under dense and approximate attention.
 * Reports whether the greedy answers are identical, where they first
 * diverge, and (in-process) the KL divergence and top-1 agreement of the
 * next-token distributions at the answer positions (approx teacher-forced
 * along the dense answer). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "eval/eval_paired.h"
#include "eval/eval_text.h"

#define PAIRED_MAX_LENGTHS 32
#define PAIRED_RULE                                                                                                   \
    "greedy answers compared token by token; KL(dense || approx) and top-1 agreement of the next-token distributions " \
    "at every answer position (approx teacher-forced along the dense answer)"

enum { OPT_CTX = 0x4500, OPT_SAMPLES, OPT_PROMPTS };

static void usage(FILE *out)
{
    fprintf(out, "usage: wick eval paired (-m FILE | --url URL) [options]\n\n"
                 "Runs the same prompts under dense and under approximate attention (the\n"
                 "--attn-* numbers) and compares the answers. Prompts: needle documents of\n"
                 "the --ctx lengths (default) or a file. With --url only the answers are\n"
                 "compared (the server gives no distributions).\n\n"
                 "  --ctx LIST           generated prompts of these document lengths (default 1024)\n"
                 "  --samples N          prompts per length (default 2)\n"
                 "  --prompts FILE       one prompt per line (JSON lines {\"prompt\": ...} or text)\n" EVAL_RUNNER_HELP
                     CLI_POLICY_HELP);
}

typedef struct prompt_list {
    char **text;
    int32_t *target; /* document length asked for (0 = from a file) */
    int n, cap;
} prompt_list;

static int add_prompt(prompt_list *p, char *text, int32_t target)
{
    if (!text) return -1;
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        char **t = realloc(p->text, sizeof *t * (size_t)cap);
        if (t) p->text = t;
        int32_t *g = realloc(p->target, sizeof *g * (size_t)cap);
        if (g) p->target = g;
        if (!t || !g) {
            free(text);
            return -1;
        }
        p->cap = cap;
    }
    p->text[p->n] = text;
    p->target[p->n++] = target;
    return 0;
}

static int load_prompts(prompt_list *p, const char *path, wk_error *err)
{
    size_t len = 0;
    char *all = eval_read_file(path, &len, err);
    if (!all) return err->code;
    int rc = 0, line = 0;
    for (char *s = all, *e; *s && !rc; s = *e ? e + 1 : e) {
        e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        line++;
        size_t n = (size_t)(e - s);
        if (n == 0) continue;
        if (s[0] == '{') {
            json_error_t je;
            json_t *j = json_loadb(s, n, 0, &je);
            const json_t *pr = json_object_get(j, "prompt");
            if (!json_is_string(pr)) rc = wk_fail(err, WK_EFORMAT, "%s:%d: expected {\"prompt\": \"...\"}", path, line);
            else if (add_prompt(p, strdup(json_string_value(pr)), 0)) rc = wk_fail(err, WK_ENOMEM, "out of memory");
            json_decref(j);
        } else if (add_prompt(p, strndup(s, n), 0)) {
            rc = wk_fail(err, WK_ENOMEM, "out of memory");
        }
    }
    free(all);
    if (!rc && p->n == 0) rc = wk_fail(err, WK_EINVAL, "%s: no prompts", path);
    return rc;
}

/* Token-level first divergence of two texts (server mode). */
static int text_divergence(eval_runner *r, const char *a, const char *b, int32_t *first, int32_t *n_a, wk_error *err)
{
    int32_t *ia = NULL, *ib = NULL, na = 0, nb = 0;
    int rc = eval_runner_tokenize(r, a, &ia, &na, err);
    if (!rc) rc = eval_runner_tokenize(r, b, &ib, &nb, err);
    *first = -1;
    *n_a = na;
    if (!rc) {
        int32_t i = 0;
        while (i < na && i < nb && ia[i] == ib[i]) i++;
        if (i < na || i < nb) *first = i;
    }
    free(ia);
    free(ib);
    return rc;
}

int cmd_eval_paired(int argc, char **argv)
{
    static const struct option opts[] = {
        EVAL_RUNNER_LONG_OPTIONS, CLI_POLICY_LONG_OPTIONS,
        {"ctx", required_argument, 0, OPT_CTX}, {"samples", required_argument, 0, OPT_SAMPLES},
        {"prompts", required_argument, 0, OPT_PROMPTS}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *cmd = "wick eval paired";
    eval_runner_opts o;
    eval_runner_opts_init(&o, 32);
    int32_t lengths[PAIRED_MAX_LENGTHS] = {1024}, samples = 2;
    int n_lengths = 1;
    const char *prompts_path = NULL;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:t:qh", opts, NULL)) != -1) {
        int32_t one[1];
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_CTX:
            if ((n_lengths = eval_parse_ints(cmd, "--ctx", optarg, 64, 1 << 24, lengths, PAIRED_MAX_LENGTHS)) < 0) return 2;
            break;
        case OPT_SAMPLES:
            if (eval_parse_ints(cmd, "--samples", optarg, 1, 10000, one, 1) < 0) return 2;
            samples = one[0];
            break;
        case OPT_PROMPTS: prompts_path = optarg; break;
        default:
            if (eval_runner_other_option(&o, c, optarg, cmd, usage)) return 2;
        }
    }
    if (eval_runner_args_done(&o, cmd, argc, argv, optind)) return 2;
    be_attn_policy dense = o.policy, approx = o.policy;
    dense.approx = false;
    approx.approx = true;
    o.policy = approx; /* what the report names */

    wk_error err = {0};
    eval_runner *r = NULL;
    if (eval_runner_open(&r, &o, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return 1;
    }
    prompt_list pl = {0};
    int rc = 0;
    if (prompts_path) {
        rc = load_prompts(&pl, prompts_path, &err);
    } else {
        for (int li = 0; li < n_lengths && !rc; li++)
            for (int s = 0; s < samples && !rc; s++) {
                ev_needle_spec spec = {lengths[li], ev_needle_default_depths, 5, 5, o.seed + (uint64_t)s, NULL, 0};
                ev_needle_doc doc;
                if ((rc = ev_needle_build(&spec, eval_runner_count, r, &doc, &err))) break;
                if (add_prompt(&pl, ev_needle_prompt(&doc), lengths[li])) rc = wk_fail(&err, WK_ENOMEM, "out of memory");
                ev_needle_doc_free(&doc);
            }
    }
    json_t *rep = eval_report_new("paired", r, &o), *results = json_array();
    json_object_set_new(rep, "prompts", json_string(prompts_path ? prompts_path : "generated needle documents (5 codes)"));
    json_object_set_new(rep, "scoring", json_string(PAIRED_RULE));
    json_object_set_new(rep, "sample_size", json_pack("{s:i}", "prompts", pl.n));
    int n_identical = 0;
    for (int i = 0; i < pl.n && !rc; i++) {
        if (!o.quiet) fprintf(stderr, "%s: prompt %d/%d...\n", cmd, i + 1, pl.n);
        json_t *row = NULL;
        int32_t prompt_tokens = 0;
        if (eval_runner_local(r)) {
            ev_local *l = eval_runner_local(r);
            int32_t *ids = NULL, n = 0;
            ev_paired_result pr;
            if ((rc = ev_local_chat_ids(l, pl.text[i], &ids, &n, &err))) break;
            rc = ev_paired_local(l, ids, n, o.max_tokens, &dense, &approx, &pr, &err);
            free(ids);
            if (rc) break;
            prompt_tokens = n;
            n_identical += pr.identical;
            row = json_pack("{s:b, s:i, s:i, s:i, s:f, s:f, s:f, s:b, s:f, s:f, s:s}", "identical", pr.identical,
                            "first_divergence", pr.first_divergence, "positions", pr.positions, "top1_agree", pr.top1_agree,
                            "top1_agreement", pr.positions ? (double)pr.top1_agree / pr.positions : 1.0, "kl_mean", pr.kl_mean,
                            "kl_max", pr.kl_max, "logits_identical", pr.logits_identical, "prefill_ms_dense",
                            pr.ref_prefill_ms, "prefill_ms_approx", pr.other_prefill_ms, "answer_dense", pr.ref_answer);
            ev_paired_result_free(&pr);
        } else {
            eval_answer a, b;
            if ((rc = eval_runner_ask(r, pl.text[i], o.max_tokens, &dense, &a, &err))) break;
            if ((rc = eval_runner_ask(r, pl.text[i], o.max_tokens, &approx, &b, &err))) {
                eval_answer_free(&a);
                break;
            }
            int32_t first = -1, n_a = 0;
            rc = text_divergence(r, a.text, b.text, &first, &n_a, &err);
            prompt_tokens = a.prompt_tokens;
            bool same = strcmp(a.text, b.text) == 0;
            n_identical += same;
            row = json_pack("{s:b, s:i, s:i, s:n, s:n, s:n, s:n, s:f, s:f, s:s, s:s}", "identical", same, "first_divergence",
                            first, "positions", n_a, "top1_agreement", "kl_mean", "kl_max", "logits_identical",
                            "prefill_ms_dense", a.prefill_ms, "prefill_ms_approx", b.prefill_ms, "answer_dense", a.text,
                            "answer_approx", b.text);
            eval_answer_free(&a);
            eval_answer_free(&b);
            if (rc) {
                json_decref(row);
                break;
            }
        }
        /* The policy changes nothing unless some query outside the dense
         * tail sits at or beyond global + window. */
        bool active = (int64_t)prompt_tokens - approx.dense_tail > (int64_t)approx.global + approx.window;
        json_object_set_new(row, "prompt_tokens", json_integer(prompt_tokens));
        json_object_set_new(row, "doc_tokens_target", json_integer(pl.target[i]));
        json_object_set_new(row, "policy_active", json_boolean(active));
        json_array_append_new(results, row);
    }
    for (int i = 0; i < pl.n; i++) free(pl.text[i]);
    free(pl.text);
    free(pl.target);
    if (rc) {
        eval_report_incomplete(&o, cmd, "paired", err.msg);
        json_decref(results);
        json_decref(rep);
        eval_runner_close(r);
        return 1;
    }
    json_object_set_new(rep, "results", results);
    json_object_set_new(rep, "identical", json_integer(n_identical));
    if (!eval_report_finish(&o, rep, "paired", r, false)) {
        printf("dense vs %s\n", json_string_value(json_object_get(rep, "policy")));
        printf("sample: %d prompt(s) (%s); response limit %d tokens, greedy\nscoring: %s\n\n", (int)json_array_size(results),
               prompts_path ? prompts_path : "generated", o.max_tokens, PAIRED_RULE);
        printf("| # | prompt tokens | policy active | identical | first divergence | top-1 agreement | KL mean | KL max "
               "| logits bit-identical |\n|---:|---:|---|---|---:|---:|---:|---:|---|\n");
        size_t i;
        json_t *row;
        json_array_foreach(results, i, row) {
            const json_t *t1 = json_object_get(row, "top1_agreement");
            long long fd = json_integer_value(json_object_get(row, "first_divergence"));
            char fdb[32], t1b[32], klm[32], klx[32];
            snprintf(fdb, sizeof fdb, fd < 0 ? "-" : "%lld", fd);
            if (json_is_number(t1)) {
                snprintf(t1b, sizeof t1b, "%.3f", json_number_value(t1));
                snprintf(klm, sizeof klm, "%.3g", json_number_value(json_object_get(row, "kl_mean")));
                snprintf(klx, sizeof klx, "%.3g", json_number_value(json_object_get(row, "kl_max")));
            } else {
                snprintf(t1b, sizeof t1b, "n/a");
                snprintf(klm, sizeof klm, "n/a");
                snprintf(klx, sizeof klx, "n/a");
            }
            const json_t *li = json_object_get(row, "logits_identical");
            printf("| %zu | %lld | %s | %s | %s | %s | %s | %s | %s |\n", i + 1,
                   (long long)json_integer_value(json_object_get(row, "prompt_tokens")),
                   json_is_true(json_object_get(row, "policy_active")) ? "yes" : "no",
                   json_is_true(json_object_get(row, "identical")) ? "yes" : "no", fdb, t1b, klm, klx,
                   json_is_boolean(li) ? (json_is_true(li) ? "yes" : "no") : "n/a");
        }
        printf("\nidentical greedy answers: %d of %d\n", n_identical, (int)json_array_size(results));
    }
    json_decref(rep);
    eval_runner_close(r);
    return 0;
}
