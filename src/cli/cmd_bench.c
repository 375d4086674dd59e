/* wick bench: prefill / decode throughput at context depths, like llama-bench
 * (harness: engine/bench.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_spec.h"
#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "engine/bench.h"
#include "engine/context.h"
#include "engine/request.h"
#include "model/model.h"
#include "util/cpu.h"
#include "util/os.h"
#include "util/threadpool.h"

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: wick bench -m FILE [-p 512,4096] [-n 128] [-d 0,8192] [-r 3] [-t N] [--json]\n\n"
            "Measures prefill (pp<N>) and decode (tg<N>) speed at context depths D: D tokens are\n"
            "prefilled once, then every repetition goes back to D and times N new tokens.\n\n"
            "  -m, --model FILE     GGUF model\n"
            "  -p, --prefill LIST   prefill sizes (default 512; 0 = none)\n"
            "  -n, --decode LIST    decode lengths (default 128; 0 = none)\n"
            "  -d, --depth LIST     context depths (default 0)\n"
            "  -r, --reps N         repetitions per test (default 3); median, min, max reported\n"
            "  -t, --threads N      threads (default: physical cores)\n"
            CLI_DEVICE_HELP
            "  -b, --ubatch N       prefill chunk in tokens (default 512)\n"
            CLI_POLICY_HELP CLI_KV_TYPE_HELP
            "  --verify LIST        speculative verification of K drafts (vk<K>, K <= 8): K + 1 tokens as\n"
            "                       one batch, rolled back; its cost relative to one decode step (tg)\n"
            "  --seqs LIST          batched decode of N sequences (bs<N>, N <= 64): one token of each per\n"
            "                       step with its logits, as `wick serve --parallel N` decodes; tok/s of\n"
            "                       all and the aggregate speed-up over one stream (tg)\n"
            "  --spec SOURCE        decode through the request pipeline with and without speculation\n"
            "                       (ngram, draft, mtp, auto), interleaved: tok/s, acceptance, and a check\n"
            "                       that the greedy outputs are the same\n"
            "  --draft FILE         draft model for --spec draft / auto\n"
            "  --prompt-file FILE   --spec prompt (text); default: D pseudo-random tokens (-d)\n"
            "  --json               one JSON object per test on stdout instead of a table\n"
            "  --membw              also measure memory read and copy bandwidth (read: the decode roof)\n"
            "  -q, --quiet          no progress on stderr\n");
}

static int parse_list(const char *opt, const char *s, int32_t *out, int cap, int *n)
{
    *n = 0;
    char *copy = strdup(s), *save = NULL;
    if (!copy) return -1;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        long v = strtol(tok, &end, 10);
        if (errno || end == tok || *end || v < 0 || v > (1 << 24) || *n >= cap) {
            fprintf(stderr, "wick bench: %s: bad value '%s' (non-negative integers, at most %d)\n", opt, tok, cap);
            free(copy);
            return -1;
        }
        out[(*n)++] = (int32_t)v;
    }
    free(copy);
    if (*n == 0) {
        fprintf(stderr, "wick bench: %s: empty list\n", opt);
        return -1;
    }
    return 0;
}

static void policy_name(const be_attn_policy *p, char *buf, size_t cap)
{
    cli_policy_describe(p, buf, cap);
}

typedef struct bench_cli {
    int quiet;
    int reps;
} bench_cli;

static void on_rep(void *user, const eng_bench_test *t, int32_t rep, double ms)
{
    bench_cli *b = user;
    if (b->quiet) return;
    fprintf(stderr, "wick bench: %s%d @ d%d rep %d/%d: %.1f ms\n", eng_bench_kind_name(t->kind), t->n, t->depth,
            rep + 1, b->reps, ms);
}

static const char *basename_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prefill", required_argument, 0, 'p'},
        {"decode", required_argument, 0, 'n'}, {"depth", required_argument, 0, 'd'},
        {"reps", required_argument, 0, 'r'}, {"threads", required_argument, 0, 't'},
        {"ubatch", required_argument, 0, 'b'}, CLI_POLICY_LONG_OPTIONS, CLI_KV_TYPE_OPTION,
        CLI_DEVICE_OPTION,
        {"json", no_argument, 0, 'J'}, {"membw", no_argument, 0, 'W'}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {"verify", required_argument, 0, 'V'}, {"spec", required_argument, 0, 'S'},
        {"draft", required_argument, 0, 'D'}, {"prompt-file", required_argument, 0, 'P'},
        {"seqs", required_argument, 0, 'B'},
        {0, 0, 0, 0},
    };
    int32_t vk[16], bs[16];
    int n_vk = 0, n_bs = 0;
    bench_spec_opts so = {0};
    const char *path = NULL;
    int32_t pp[16] = {512}, tg[16] = {128}, depths[16] = {0};
    int n_pp = 1, n_tg = 1, n_depth = 1, reps = 3, threads = 0, ubatch = 512, json = 0, quiet = 0, membw = 0;
    be_attn_policy policy;
    cli_policy_init(&policy);
    int32_t kv_type = BE_KV_F16;
    int32_t device = ENG_DEVICE_CPU, gpu = 0;
    eng_split_opts split = {0};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:d:r:t:b:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': path = optarg; break;
        case 'p': if (parse_list("-p", optarg, pp, 16, &n_pp)) return 2; break;
        case 'n': if (parse_list("-n", optarg, tg, 16, &n_tg)) return 2; break;
        case 'd': if (parse_list("-d", optarg, depths, 16, &n_depth)) return 2; break;
        case 'r': reps = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'b': ubatch = atoi(optarg); break;
        case 'J': json = 1; break;
        case 'W': membw = 1; break;
        case 'q': quiet = 1; break;
        case 'h': bench_usage(stdout); return 0;
        case 'V': if (parse_list("--verify", optarg, vk, 16, &n_vk)) return 2; break;
        case 'B': if (parse_list("--seqs", optarg, bs, 16, &n_bs)) return 2; break;
        case 'S': {
            wk_error e = {0};
            if (eng_spec_mode_parse(optarg, &so.spec, &e)) {
                fprintf(stderr, "wick bench: --spec: %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 'D': so.draft_path = optarg; break;
        case 'P': so.prompt_file = optarg; break;
        default: {
            int pr = cli_policy_option(c, optarg, &policy, "wick bench");
            if (pr == 0) pr = cli_kv_type_option(c, optarg, &kv_type, "wick bench");
            if (pr == 0) pr = cli_device_option(c, optarg, &device, &gpu, &split, "wick bench");
            if (pr < 0) return 2;
            if (pr == 0) {
                bench_usage(stderr);
                return 2;
            }
        }
        }
    }
    if (!path || optind < argc) {
        if (!path) fprintf(stderr, "wick bench: -m FILE is required\n\n");
        else fprintf(stderr, "wick bench: unexpected argument '%s'\n\n", argv[optind]);
        bench_usage(stderr);
        return 2;
    }
    if (cli_device_finish(device, &split, "wick bench")) return 2;
    if (reps < 1 || reps > 1000 || ubatch < 1) {
        fprintf(stderr, "wick bench: -r must be in 1..1000 and -b >= 1\n");
        return 2;
    }
    if (threads <= 0) threads = wk_physical_cores();
    if (so.spec) {
        so.model_path = path;
        so.n_predict = tg[0] > 0 ? tg[0] : 128;
        so.depth = depths[0];
        so.reps = reps;
        so.threads = threads;
        so.device = device;
        so.gpu = gpu;
        so.split = split;
        so.kv_type = kv_type;
        so.json = json;
        so.quiet = quiet;
        return bench_spec_run(&so);
    }

    /* Tests, grouped by depth (each depth is prefilled once). */
    eng_bench_test tests[16 * 32];
    int32_t n_tests = 0, max_ctx = 1;
    for (int di = 0; di < n_depth; di++) {
        for (int i = 0; i < n_pp; i++)
            if (pp[i] > 0) tests[n_tests++] = (eng_bench_test){ENG_BENCH_PP, pp[i], depths[di]};
        for (int i = 0; i < n_tg; i++)
            if (tg[i] > 0) tests[n_tests++] = (eng_bench_test){ENG_BENCH_TG, tg[i], depths[di]};
        for (int i = 0; i < n_vk; i++)
            if (vk[i] > 0) tests[n_tests++] = (eng_bench_test){ENG_BENCH_VK, vk[i], depths[di]};
        for (int i = 0; i < n_bs; i++)
            if (bs[i] > 0) tests[n_tests++] = (eng_bench_test){ENG_BENCH_BS, bs[i], depths[di]};
    }
    int32_t n_seq = 1;
    for (int i = 0; i < n_bs; i++) {
        if (bs[i] > ENG_BENCH_BS_MAX) {
            fprintf(stderr, "wick bench: --seqs: at most %d sequences, not %d\n", ENG_BENCH_BS_MAX, bs[i]);
            return 2;
        }
        if (bs[i] > n_seq) n_seq = bs[i];
    }
    if (n_tests == 0) {
        fprintf(stderr, "wick bench: nothing to measure (all sizes are 0)\n");
        return 2;
    }
    for (int32_t i = 0; i < n_tests; i++) {
        const int32_t need = tests[i].depth + eng_bench_test_positions(&tests[i]);
        if (need > max_ctx) max_ctx = need;
    }

    wk_error err = {0};
    model *m = NULL;
    if (model_load(&m, path, &err)) {
        fprintf(stderr, "wick bench: %s\n", err.msg);
        return 1;
    }
    eng_options eo;
    eng_options_default(&eo);
    eo.n_threads = threads;
    eo.n_ctx = max_ctx;
    eo.n_ubatch = ubatch;
    eo.n_seq = n_seq;
    eo.policy = policy;
    eo.kv_type = kv_type;
    eo.device = device;
    eo.gpu = gpu;
    eo.split = split;
    eng_ctx *ctx = NULL;
    if (eng_ctx_new(&ctx, m, &eo, &err)) {
        fprintf(stderr, "wick bench: %s\n", err.msg);
        model_free(m);
        return 1;
    }
    eng_bench_costs costs;
    eng_bench_model_costs(m, &costs);
    uint64_t model_bytes = gguf_file_size(m->file);
    char pol[128];
    policy_name(&policy, pol, sizeof pol);
    const unsigned long long kv_per_tok = (unsigned long long)eng_kv_bytes_per_token(ctx);
    const char *arch = model_arch_name(m->arch);
    double copy_gbps = membw ? eng_bench_copy_gbytes_per_s(threads) : 0.0;
    double read_gbps = membw ? eng_bench_read_gbytes_per_s(threads) : 0.0;
    if (!json) {
        printf("model: %s (%s), %.2f MiB, %.2f M params, %.3f bits/weight\n", basename_of(path), arch,
               (double)model_bytes / (1 << 20), (double)costs.n_params / 1e6, costs.bits_per_weight);
        char where[256];
        if (device == ENG_DEVICE_CUDA)
            printf("device: %s, ubatch: %d, attention: %s, kv cache: %s (%llu bytes/token), reps: %d\n\n",
                   eng_ctx_where(ctx, where, sizeof where), ubatch, pol, cli_kv_type_name(kv_type), kv_per_tok, reps);
        else
            printf("threads: %d, ubatch: %d, attention: %s, kv cache: %s (%llu bytes/token), cpu kernels: %s, reps: %d\n\n",
                   threads, ubatch, pol, cli_kv_type_name(kv_type), kv_per_tok, wk_cpu_level_name(), reps);
        if (membw)
            printf("memory bandwidth (%d threads, 1 GiB buffers): read %.1f GB/s (the decode roof), copy %.1f GB/s "
                   "(read + write)\n\n",
                   threads, read_gbps, copy_gbps);
        printf("| test | depth | t/s median | t/s min | t/s max | ms/rep | rate |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|\n");
        fflush(stdout);
    }
    bench_cli bc = {.quiet = quiet, .reps = reps};
    int rc = 0;
    for (int32_t g = 0; g < n_tests && rc == 0;) {
        int32_t e = g;
        while (e < n_tests && tests[e].depth == tests[g].depth) e++;
        eng_bench_result res[16 * 32];
        rc = eng_bench_run(ctx, tests + g, e - g, reps, res, on_rep, &bc, &err);
        if (rc) {
            fprintf(stderr, "wick bench: %s\n", err.msg);
            break;
        }
        double tg_ms = 0; /* one decode step at this depth, for the vk and bs ratios */
        for (int32_t i = 0; i < e - g; i++)
            if (res[i].test.kind == ENG_BENCH_TG) tg_ms = res[i].ms_per_step;
        for (int32_t i = 0; i < e - g; i++) {
            const eng_bench_result *r = &res[i];
            char test[32];
            snprintf(test, sizeof test, "%s%d", eng_bench_kind_name(r->test.kind), r->test.n);
            if (json) {
                printf("{\"test\": \"%s\", \"depth\": %d, \"n\": %d, \"reps\": %d, \"tok_per_s_median\": %.4f, "
                       "\"tok_per_s_min\": %.4f, \"tok_per_s_max\": %.4f, \"ms_median\": %.3f, \"threads\": %d, "
                       "\"model_bytes\": %llu, \"bpw\": %.4f, \"params\": %llu, ",
                       test, r->test.depth, r->test.n, r->reps, r->tok_per_s_median, r->tok_per_s_min,
                       r->tok_per_s_max, r->ms_median, threads, (unsigned long long)model_bytes,
                       costs.bits_per_weight, (unsigned long long)costs.n_params);
                if (membw) printf("\"copy_gbytes_per_s\": %.3f, \"read_gbytes_per_s\": %.3f, ", copy_gbps, read_gbps);
                if (r->test.kind == ENG_BENCH_TG) printf("\"gbytes_per_s\": %.3f, ", r->gbytes_per_s);
                else if (r->test.kind == ENG_BENCH_PP) printf("\"gflop_per_s\": %.3f, ", r->gflop_per_s);
                else if (r->test.kind == ENG_BENCH_VK)
                    printf("\"ms_per_step\": %.4f, \"rollback_ms\": %.4f, \"cost_vs_decode\": %.4f, ", r->ms_per_step,
                           r->rollback_ms, tg_ms > 0 ? r->ms_per_step / tg_ms : 0.0);
                else
                    printf("\"ms_per_step\": %.4f, \"cost_vs_decode\": %.4f, \"speedup_vs_one\": %.4f, ", r->ms_per_step,
                           tg_ms > 0 ? r->ms_per_step / tg_ms : 0.0, tg_ms > 0 ? r->test.n * tg_ms / r->ms_per_step : 0.0);
                printf("\"kv_type\": \"%s\", \"kv_bytes_per_token\": %llu, ", cli_kv_type_name(kv_type), kv_per_tok);
                printf("\"device\": \"%s\", ", eng_device_name(device));
                printf("\"peak_rss_bytes\": %llu, \"attn_policy\": \"%s\", \"ubatch\": %d, \"arch\": \"%s\", "
                       "\"model\": \"%s\", \"engine\": \"wick\"}\n",
                       (unsigned long long)wk_peak_rss_bytes(), pol, ubatch, arch, basename_of(path));
            } else {
                char rate[96];
                if (r->test.kind == ENG_BENCH_TG) snprintf(rate, sizeof rate, "%.1f GB/s", r->gbytes_per_s);
                else if (r->test.kind == ENG_BENCH_PP) snprintf(rate, sizeof rate, "%.1f GFLOP/s", r->gflop_per_s);
                else if (r->test.kind == ENG_BENCH_BS && tg_ms > 0)
                    snprintf(rate, sizeof rate, "%.2f x tg step, %.2f x one stream", r->ms_per_step / tg_ms,
                             r->test.n * tg_ms / r->ms_per_step);
                else if (r->test.kind == ENG_BENCH_BS)
                    snprintf(rate, sizeof rate, "%.2f ms/step", r->ms_per_step);
                else if (tg_ms > 0)
                    snprintf(rate, sizeof rate, "%.2f x tg step (rollback %.2f ms), ceiling %.2f x", r->ms_per_step / tg_ms,
                             r->rollback_ms, (r->test.n + 1) * tg_ms / r->ms_per_step);
                else snprintf(rate, sizeof rate, "%.2f ms/step (rollback %.2f ms)", r->ms_per_step, r->rollback_ms);
                printf("| %s | %d | %.2f | %.2f | %.2f | %.1f | %s |\n", test, r->test.depth, r->tok_per_s_median,
                       r->tok_per_s_min, r->tok_per_s_max, r->ms_median, rate);
            }
            fflush(stdout);
        }
        g = e;
    }
    if (!json && rc == 0)
        printf("\npeak RSS: %.1f MiB (model file %.1f MiB, mapped)\n", (double)wk_peak_rss_bytes() / (1 << 20),
               (double)model_bytes / (1 << 20));
    eng_ctx_free(ctx);
    model_free(m);
    return rc ? 1 : 0;
}
