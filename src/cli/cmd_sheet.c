/* `wick sheet`: the evaluation sheet of model packs (cli/sheet.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "cli/sheet.h"

#define SHEET_MAX_PACKS 16

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick sheet -m FILE [--aux TABLE]... [-m FILE ...] [options]\n"
            "       wick sheet --compare A B [options]     (A, B: .gguf packs or .jsonl sheets)\n\n"
            "Measures each pack into rows of pack x runtime x machine x context: pack name and\n"
            "SHA-256, weight bytes and bits per weight per tensor class, auxiliary table bytes,\n"
            "wick version and build, machine (CPU, cores, RAM, GPU), load time, prefill speed\n"
            "cold (the first prefill after loading) and warm, decode speed, and quality samples:\n"
            "perplexity on held-out text, needle and variable-tracking accuracy. Speeds come from\n"
            "the wick bench harness (random token ids; warm = median of the repetitions).\n\n"
            "input:\n"
            "  -m, --model FILE     a pack to measure (repeatable)\n"
            "  --aux TABLE          an auxiliary GGUF of the preceding -m (bytes counted apart)\n"
            "  --in FILE            rows collected earlier (wick sheet --json output, any machine)\n"
            "  --compare A B        two packs (or sheets) side by side, with B - A and B / A\n"
            "measurement:\n"
            "  --ctx LIST           contexts (tokens already in the sequence; default 0,4096)\n"
            "  -p, --prefill N      prefill tokens per measurement (default 512)\n"
            "  -n, --decode N       decode tokens per measurement (default 64)\n"
            "  -r, --reps N         repetitions (default 2)\n"
            "  -t, --threads N      threads (default: physical cores)\n"
            "  --device D           cpu (default), cuda (GPU 0) or cuda:N (one device)\n" CLI_KV_TYPE_HELP
            "  --ppl-text FILE      held-out text for perplexity (default: wick's generated filler)\n"
            "  --ppl-tokens N       tokens of it scored, in windows of 512 (default 2048)\n"
            "  --task-tokens N      needle / variable-tracking document length (default 2048)\n"
            "  --no-quality         speed only\n"
            "output (default: Markdown on stdout):\n"
            "  --json               one JSON object per row (JSON lines) instead\n"
            "  --md                 Markdown (also with --html)\n"
            "  --html OUT           a self-contained page with charts (speed vs context per pack,\n"
            "                       quality vs bits per weight); no network needed to view it\n"
            "  -q, --quiet          no progress on stderr\n\n"
            "Exit status: 0 written, 1 a pack could not be measured or read, 2 bad usage.\n");
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int32_t *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < lo || v > hi) {
        fprintf(stderr, "wick sheet: %s must be an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int cmd_sheet(int argc, char **argv)
{
    enum { O_AUX = 1000, O_IN, O_COMPARE, O_CTX, O_PPL_TEXT, O_PPL_TOKENS, O_TASK_TOKENS, O_NO_QUALITY, O_JSON, O_MD,
           O_HTML };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"aux", required_argument, 0, O_AUX},
        {"in", required_argument, 0, O_IN}, {"compare", no_argument, 0, O_COMPARE},
        {"ctx", required_argument, 0, O_CTX}, {"prefill", required_argument, 0, 'p'},
        {"decode", required_argument, 0, 'n'}, {"reps", required_argument, 0, 'r'},
        {"threads", required_argument, 0, 't'}, {"ppl-text", required_argument, 0, O_PPL_TEXT},
        {"ppl-tokens", required_argument, 0, O_PPL_TOKENS}, {"task-tokens", required_argument, 0, O_TASK_TOKENS},
        {"no-quality", no_argument, 0, O_NO_QUALITY}, {"json", no_argument, 0, O_JSON}, {"md", no_argument, 0, O_MD},
        {"html", required_argument, 0, O_HTML}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        CLI_DEVICE_OPTION, CLI_KV_TYPE_OPTION, {0, 0, 0, 0}};
    sheet_options o;
    sheet_options_default(&o);
    sheet_pack_spec packs[SHEET_MAX_PACKS];
    const char *ins[SHEET_MAX_PACKS];
    int n_packs = 0, n_ins = 0;
    bool compare = false, json = false, md = false;
    const char *html = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:r:t:qh", opts, NULL)) != -1) {
        int32_t v;
        switch (c) {
        case 'm':
            if (n_packs == SHEET_MAX_PACKS) {
                fprintf(stderr, "wick sheet: at most %d packs\n", SHEET_MAX_PACKS);
                return 2;
            }
            packs[n_packs++] = (sheet_pack_spec){.path = optarg};
            break;
        case O_AUX:
            if (!n_packs || packs[n_packs - 1].n_aux == SHEET_MAX_AUX) {
                fprintf(stderr, "wick sheet: --aux belongs to a preceding -m FILE (at most %d each)\n", SHEET_MAX_AUX);
                return 2;
            }
            packs[n_packs - 1].aux[packs[n_packs - 1].n_aux++] = optarg;
            break;
        case O_IN:
            if (n_ins == SHEET_MAX_PACKS) return 2;
            ins[n_ins++] = optarg;
            break;
        case O_COMPARE: compare = true; break;
        case O_CTX:
            if ((o.n_contexts = eval_parse_ints("wick sheet", "--ctx", optarg, 0, 1 << 24, o.contexts, SHEET_MAX_CTX)) < 0)
                return 2;
            break;
        case 'p': if (parse_int("--prefill", optarg, 0, 1 << 20, &o.prefill_tokens)) return 2; break;
        case 'n': if (parse_int("--decode", optarg, 0, 1 << 20, &o.decode_tokens)) return 2; break;
        case 'r': if (parse_int("--reps", optarg, 1, 1000, &o.reps)) return 2; break;
        case 't':
            if (parse_int("--threads", optarg, 0, 1024, &v)) return 2;
            o.threads = v;
            break;
        case O_PPL_TEXT: o.ppl_text = optarg; break;
        case O_PPL_TOKENS: if (parse_int("--ppl-tokens", optarg, 2, 1 << 20, &o.ppl_tokens)) return 2; break;
        case O_TASK_TOKENS: if (parse_int("--task-tokens", optarg, 128, 1 << 20, &o.task_tokens)) return 2; break;
        case O_NO_QUALITY: o.quality = false; break;
        case O_JSON: json = true; break;
        case O_MD: md = true; break;
        case O_HTML: html = optarg; break;
        case 'q': o.quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: {
            int pr = cli_kv_type_option(c, optarg, &o.kv_type, "wick sheet");
            eng_split_opts split = {0};
            if (pr == 0) pr = cli_device_option(c, optarg, &o.device, &o.gpu, &split, "wick sheet");
            if (pr == 1 && (split.n > 1 || split.gpu_mem || c == CLI_OPT_SPLIT)) {
                fprintf(stderr, "wick sheet: measures one device: no GPU list, --split or --gpu-mem\n");
                return 2;
            }
            if (pr <= 0) {
                if (pr == 0) usage(stderr);
                return 2;
            }
        }
        }
    }
    if (compare) { /* --compare A B: the two operands follow */
        if (argc - optind != 2) {
            fprintf(stderr, "wick sheet: --compare needs exactly two packs or sheets (A B), got %d\n", argc - optind);
            return 2;
        }
        for (int i = optind; i < argc; i++) {
            if (ends_with(argv[i], ".gguf")) packs[n_packs++] = (sheet_pack_spec){.path = argv[i]};
            else ins[n_ins++] = argv[i];
        }
    } else if (optind < argc) {
        fprintf(stderr, "wick sheet: unexpected argument '%s' (packs are given with -m)\n", argv[optind]);
        return 2;
    }
    if (!n_packs && !n_ins) {
        fprintf(stderr, "wick sheet: nothing to show: give -m FILE, --in ROWS.jsonl or --compare A B\n");
        return 2;
    }
    json_t *rows = json_array();
    wk_error err = {0};
    int rc = 0;
    /* --compare keeps the operands' order: A's rows first */
    for (int i = 0; i < n_ins && !rc; i++)
        if ((rc = sheet_read_rows(ins[i], rows, &err))) fprintf(stderr, "wick sheet: %s\n", err.msg);
    for (int i = 0; i < n_packs && !rc; i++)
        if ((rc = sheet_measure(&packs[i], &o, rows, &err))) fprintf(stderr, "wick sheet: %s\n", err.msg);
    if (!rc && compare && n_packs == 1 && n_ins == 1 && ends_with(argv[optind], ".gguf")) {
        /* A was the pack, B the sheet: put A's rows first */
        json_t *a = json_array();
        size_t k;
        json_t *row;
        size_t from = json_array_size(rows) - (size_t)o.n_contexts;
        json_array_foreach(rows, k, row) if (k >= from) json_array_append(a, row);
        json_array_foreach(rows, k, row) if (k < from) json_array_append(a, row);
        json_decref(rows);
        rows = a;
    }
    if (!rc && html && (rc = sheet_write_html(html, rows, compare, &err))) fprintf(stderr, "wick sheet: %s\n", err.msg);
    if (!rc) {
        if (json) sheet_write_jsonl(stdout, rows);
        if (!json || md) {
            if (compare) sheet_write_compare_md(stdout, rows);
            if (!compare || md) sheet_write_md(stdout, rows);
        }
        if (html && !o.quiet) fprintf(stderr, "wick sheet: wrote %s\n", html);
    }
    json_decref(rows);
    return rc ? 1 : 0;
}
