/* wick eval needle: N random codes hidden at chosen token depths of a long
 * filler document, one request asking for all of them, scored per code;
 * swept over document lengths. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "eval/eval_text.h"

#define NEEDLE_MAX_DEPTHS 32
#define NEEDLE_MAX_LENGTHS 32
#define NEEDLE_RULE "a code counts as found when its exact text (e.g. KQV-4821) occurs in the answer"

enum { OPT_CTX = 0x4300, OPT_DEPTHS, OPT_CODES, OPT_FILLER };

static void usage(FILE *out)
{
    fprintf(out, "usage: wick eval needle (-m FILE | --url URL) [options]\n\n"
                 "Hides N random codes (ABC-1234) at token depths of a long filler document,\n"
                 "asks once for all of them, and scores each code found in the answer. One\n"
                 "document per length; depths are measured in tokens on the finished text.\n\n"
                 "  --ctx LIST           document lengths in tokens (default 4096)\n"
                 "  --depths LIST        depths in percent (default 1.5,25,50,75,98.5)\n"
                 "  --codes N            codes per document, spread over the depths (default 15)\n"
                 "  --filler FILE        filler text (repeated as needed; default: generated)\n" EVAL_RUNNER_HELP
                     CLI_POLICY_HELP);
}

int cmd_eval_needle(int argc, char **argv)
{
    static const struct option opts[] = {
        EVAL_RUNNER_LONG_OPTIONS, CLI_POLICY_LONG_OPTIONS,
        {"ctx", required_argument, 0, OPT_CTX}, {"depths", required_argument, 0, OPT_DEPTHS},
        {"codes", required_argument, 0, OPT_CODES}, {"filler", required_argument, 0, OPT_FILLER},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *cmd = "wick eval needle";
    eval_runner_opts o;
    eval_runner_opts_init(&o, 0);
    int32_t lengths[NEEDLE_MAX_LENGTHS] = {4096}, n_codes = 15;
    int n_lengths = 1, n_depths = 5;
    double depths[NEEDLE_MAX_DEPTHS];
    for (int i = 0; i < 5; i++) depths[i] = ev_needle_default_depths[i];
    const char *filler_path = NULL;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:t:qh", opts, NULL)) != -1) {
        int32_t one[1];
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_CTX:
            if ((n_lengths = eval_parse_ints(cmd, "--ctx", optarg, 64, 1 << 24, lengths, NEEDLE_MAX_LENGTHS)) < 0) return 2;
            break;
        case OPT_DEPTHS:
            if ((n_depths = eval_parse_doubles(cmd, "--depths", optarg, 0.0, 100.0, depths, NEEDLE_MAX_DEPTHS)) < 0) return 2;
            for (int i = 0; i < n_depths; i++) depths[i] /= 100.0;
            break;
        case OPT_CODES:
            if (eval_parse_ints(cmd, "--codes", optarg, 1, 256, one, 1) < 0) return 2;
            n_codes = one[0];
            break;
        case OPT_FILLER: filler_path = optarg; break;
        default:
            if (eval_runner_other_option(&o, c, optarg, cmd, usage)) return 2;
        }
    }
    if (eval_runner_args_done(&o, cmd, argc, argv, optind)) return 2;
    if (o.max_tokens <= 0) o.max_tokens = 8 * n_codes + 32; /* a code is ~5 tokens + newline */

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
    json_t *rep = eval_report_new("needle", r, &o);
    json_t *jdepths = json_array(), *results = json_array();
    for (int i = 0; i < n_depths; i++) json_array_append_new(jdepths, json_real(depths[i] * 100.0));
    json_object_set_new(rep, "depths_percent", jdepths);
    json_object_set_new(rep, "codes_per_document", json_integer(n_codes));
    json_object_set_new(rep, "filler", json_string(filler_path ? filler_path : "generated"));
    json_object_set_new(rep, "scoring", json_string(NEEDLE_RULE));
    json_object_set_new(rep, "sample_size",
                        json_pack("{s:i, s:i}", "documents", n_lengths, "codes", n_lengths * n_codes));
    int rc = 0, total_found = 0;
    for (int li = 0; li < n_lengths && !rc; li++) {
        ev_needle_spec spec = {lengths[li], depths, n_depths, n_codes, o.seed + (uint64_t)li, filler, filler_len};
        ev_needle_doc doc;
        if ((rc = ev_needle_build(&spec, eval_runner_count, r, &doc, &err))) break;
        char *prompt = ev_needle_prompt(&doc);
        eval_answer ans;
        if (!o.quiet) fprintf(stderr, "%s: document of %d tokens: asking...\n", cmd, doc.doc_tokens);
        rc = prompt ? eval_runner_ask(r, prompt, o.max_tokens, NULL, &ans, &err) : wk_fail(&err, WK_ENOMEM, "out of memory");
        free(prompt);
        if (rc) {
            ev_needle_doc_free(&doc);
            break;
        }
        bool found[256];
        int n_found = ev_needle_score(&doc, ans.text, found);
        total_found += n_found;
        json_t *codes = json_array();
        for (int i = 0; i < doc.n_codes; i++) {
            const ev_needle_code *k = &doc.codes[i];
            json_array_append_new(codes, json_pack("{s:s, s:f, s:i, s:f, s:b}", "code", k->code, "depth_requested_percent",
                                                   k->depth_requested * 100.0, "token_offset", k->token_offset,
                                                   "depth_tokens_percent", k->depth_tokens * 100.0, "found", found[i]));
        }
        json_array_append_new(results, json_pack("{s:i, s:i, s:i, s:i, s:f, s:s, s:o}", "doc_tokens_target", lengths[li],
                                                 "doc_tokens", doc.doc_tokens, "prompt_tokens", ans.prompt_tokens,
                                                 "found", n_found, "prefill_ms", ans.prefill_ms, "answer", ans.text,
                                                 "codes", codes));
        eval_answer_free(&ans);
        ev_needle_doc_free(&doc);
    }
    if (rc) {
        /* Never a partial result: say what failed and stop. */
        eval_report_incomplete(&o, cmd, "needle", err.msg);
        json_decref(results);
        json_decref(rep);
        eval_runner_close(r);
        free(filler);
        return 1;
    }
    json_object_set_new(rep, "results", results);
    json_object_set_new(rep, "found", json_integer(total_found));
    if (!eval_report_finish(&o, rep, "needle", r, true)) {
        printf("sample: %d document(s) x %d codes, seed %llu, filler %s; response limit %d tokens, greedy\n", n_lengths,
               n_codes, (unsigned long long)o.seed, filler_path ? filler_path : "generated", o.max_tokens);
        printf("scoring: %s\n\n", NEEDLE_RULE);
        printf("| doc tokens | prompt tokens |");
        for (int d = 0; d < n_depths; d++) printf(" %.1f%% |", depths[d] * 100.0);
        printf(" found | prefill ms |\n|---:|---:|");
        for (int d = 0; d < n_depths; d++) printf("---:|");
        printf("---:|---:|\n");
        size_t i;
        json_t *res;
        json_array_foreach(results, i, res) {
            printf("| %lld | %lld |", (long long)json_integer_value(json_object_get(res, "doc_tokens")),
                   (long long)json_integer_value(json_object_get(res, "prompt_tokens")));
            json_t *codes = json_object_get(res, "codes");
            for (int d = 0; d < n_depths; d++) {
                int hit = 0, all = 0;
                for (int k = d; k < n_codes; k += n_depths) {
                    all++;
                    hit += json_is_true(json_object_get(json_array_get(codes, (size_t)k), "found"));
                }
                printf(" %d/%d |", hit, all);
            }
            printf(" %lld/%d | %.0f |\n", (long long)json_integer_value(json_object_get(res, "found")), n_codes,
                   json_real_value(json_object_get(res, "prefill_ms")));
        }
        printf("\nmeasured depths (token offset of each needle in the document):\n");
        json_array_foreach(results, i, res) {
            json_t *codes = json_object_get(res, "codes");
            printf("  %lld tokens:", (long long)json_integer_value(json_object_get(res, "doc_tokens")));
            for (int d = 0; d < n_depths; d++) {
                printf(" %.1f%% ->", depths[d] * 100.0);
                for (int k = d; k < n_codes; k += n_depths)
                    printf(" %lld", (long long)json_integer_value(json_object_get(json_array_get(codes, (size_t)k),
                                                                                 "token_offset")));
                printf(";");
            }
            printf("\n");
        }
        printf("\ntotal: %d of %d codes found (%.1f %%)\n", total_found, n_lengths * n_codes,
               100.0 * total_found / (n_lengths * n_codes));
    }
    json_decref(rep);
    eval_runner_close(r);
    free(filler);
    return 0;
}
