/* wick eval vt: RULER-style variable tracking. Chains of assignments
 * ("VAR A = 40817." ... "VAR B = VAR A.") hidden in filler; the model lists
 * every variable holding the first chain's value. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "eval/eval_text.h"

#define VT_MAX_LENGTHS 32
#define VT_RULE "RULER string_match_all: fraction of the chain's variable names occurring in the answer (case-insensitive)"

enum { OPT_CTX = 0x4400, OPT_HOPS, OPT_CHAINS, OPT_SAMPLES, OPT_FILLER };

static void usage(FILE *out)
{
    fprintf(out, "usage: wick eval vt (-m FILE | --url URL) [options]\n\n"
                 "Variable tracking as in RULER: chains of K hops of assignments hidden in filler,\n"
                 "generated from the seed; the answer must name every variable of the chain.\n\n"
                 "  --ctx LIST           document lengths in tokens (default 4096)\n"
                 "  --hops K             assignments after the value (default 4)\n"
                 "  --chains N           chains in the document, the first is asked about (default 1)\n"
                 "  --samples N          documents per length, seeds seed..seed+N-1 (default 5)\n"
                 "  --filler FILE        filler text (default: generated)\n" EVAL_RUNNER_HELP CLI_POLICY_HELP);
}

int cmd_eval_vt(int argc, char **argv)
{
    static const struct option opts[] = {
        EVAL_RUNNER_LONG_OPTIONS, CLI_POLICY_LONG_OPTIONS,
        {"ctx", required_argument, 0, OPT_CTX}, {"hops", required_argument, 0, OPT_HOPS},
        {"chains", required_argument, 0, OPT_CHAINS}, {"samples", required_argument, 0, OPT_SAMPLES},
        {"filler", required_argument, 0, OPT_FILLER}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *cmd = "wick eval vt";
    eval_runner_opts o;
    eval_runner_opts_init(&o, 48); /* RULER generates 30 tokens for vt; names here are longer lists */
    int32_t lengths[VT_MAX_LENGTHS] = {4096}, hops = 4, chains = 1, samples = 5;
    int n_lengths = 1;
    const char *filler_path = NULL;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:t:qh", opts, NULL)) != -1) {
        int32_t one[1];
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_CTX:
            if ((n_lengths = eval_parse_ints(cmd, "--ctx", optarg, 64, 1 << 24, lengths, VT_MAX_LENGTHS)) < 0) return 2;
            break;
        case OPT_HOPS:
            if (eval_parse_ints(cmd, "--hops", optarg, 1, 16, one, 1) < 0) return 2;
            hops = one[0];
            break;
        case OPT_CHAINS:
            if (eval_parse_ints(cmd, "--chains", optarg, 1, 8, one, 1) < 0) return 2;
            chains = one[0];
            break;
        case OPT_SAMPLES:
            if (eval_parse_ints(cmd, "--samples", optarg, 1, 10000, one, 1) < 0) return 2;
            samples = one[0];
            break;
        case OPT_FILLER: filler_path = optarg; break;
        default:
            if (eval_runner_other_option(&o, c, optarg, cmd, usage)) return 2;
        }
    }
    if (eval_runner_args_done(&o, cmd, argc, argv, optind)) return 2;
    wk_error err = {0};
    char *filler = NULL;
    size_t filler_len = 0;
    if (eval_read_filler(cmd, filler_path, &filler, &filler_len)) return 1;
    eval_runner *r = NULL;
    if (eval_runner_open(&r, &o, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        free(filler);
        return 1;
    }
    json_t *rep = eval_report_new("vt", r, &o), *results = json_array();
    json_object_set_new(rep, "hops", json_integer(hops));
    json_object_set_new(rep, "chains", json_integer(chains));
    json_object_set_new(rep, "filler", json_string(filler_path ? filler_path : "generated"));
    json_object_set_new(rep, "scoring", json_string(VT_RULE));
    json_object_set_new(rep, "sample_size", json_pack("{s:i, s:i}", "per_length", samples, "total", samples * n_lengths));
    double *mean = calloc((size_t)n_lengths, sizeof *mean);
    int32_t *prompt_tokens = calloc((size_t)n_lengths, sizeof *prompt_tokens);
    int rc = mean && prompt_tokens ? 0 : wk_fail(&err, WK_ENOMEM, "out of memory");
    for (int li = 0; li < n_lengths && !rc; li++)
        for (int s = 0; s < samples && !rc; s++) {
            uint64_t seed = o.seed + (uint64_t)s;
            ev_vt_spec spec = {lengths[li], chains, hops, seed, filler, filler_len};
            ev_vt_doc doc;
            if ((rc = ev_vt_build(&spec, eval_runner_count, r, &doc, &err))) break;
            char *prompt = ev_vt_prompt(&doc);
            eval_answer ans;
            if (!o.quiet) fprintf(stderr, "%s: %d tokens, sample %d/%d...\n", cmd, doc.doc_tokens, s + 1, samples);
            rc = prompt ? eval_runner_ask(r, prompt, o.max_tokens, NULL, &ans, &err) : wk_fail(&err, WK_ENOMEM, "out of memory");
            free(prompt);
            if (rc) {
                ev_vt_doc_free(&doc);
                break;
            }
            double score = ev_vt_score(&doc, ans.text);
            mean[li] += score / samples;
            if (ans.prompt_tokens > prompt_tokens[li]) prompt_tokens[li] = ans.prompt_tokens;
            json_t *exp = json_array(), *offs = json_array();
            for (int i = 0; i < doc.n_expected; i++) {
                json_array_append_new(exp, json_string(doc.expected[i]));
                json_array_append_new(offs, json_integer(doc.token_offsets[i]));
            }
            json_array_append_new(results, json_pack("{s:i, s:I, s:i, s:i, s:s, s:o, s:o, s:s, s:f, s:f}", "doc_tokens_target",
                                                     lengths[li], "seed", (json_int_t)seed, "doc_tokens", doc.doc_tokens,
                                                     "prompt_tokens", ans.prompt_tokens, "value", doc.value, "expected", exp,
                                                     "token_offsets", offs, "answer", ans.text, "score", score,
                                                     "prefill_ms", ans.prefill_ms));
            eval_answer_free(&ans);
            ev_vt_doc_free(&doc);
        }
    if (rc) {
        eval_report_incomplete(&o, cmd, "vt", err.msg);
        json_decref(results);
        json_decref(rep);
        free(mean);
        free(prompt_tokens);
        eval_runner_close(r);
        free(filler);
        return 1;
    }
    json_t *summary = json_array();
    for (int li = 0; li < n_lengths; li++)
        json_array_append_new(summary, json_pack("{s:i, s:i, s:f}", "doc_tokens_target", lengths[li], "samples", samples,
                                                 "score", mean[li]));
    json_object_set_new(rep, "summary", summary);
    json_object_set_new(rep, "results", results);
    if (!eval_report_finish(&o, rep, "vt", r, true)) {
        printf("sample: %d document(s) per length, %d chain(s) of %d hops, seeds %llu..%llu; response limit %d tokens, "
               "greedy\nscoring: %s\n\n",
               samples, chains, hops, (unsigned long long)o.seed, (unsigned long long)(o.seed + samples - 1), o.max_tokens,
               VT_RULE);
        printf("| doc tokens (target) | prompt tokens (max) | samples | score |\n|---:|---:|---:|---:|\n");
        for (int li = 0; li < n_lengths; li++)
            printf("| %d | %d | %d | %.3f |\n", lengths[li], prompt_tokens[li], samples, mean[li]);
    }
    json_decref(rep);
    free(mean);
    free(prompt_tokens);
    eval_runner_close(r);
    free(filler);
    return 0;
}
