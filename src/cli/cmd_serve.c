/* `wick serve`: load a model and serve the OpenAI-compatible API, the
 * monitor page and /metrics. Without -m it serves wick's own trained model
 * (models/wick-coder.gguf, tools/train); --demo makes (once) and serves a
 * tiny synthetic random-weight demo model from the cache directory. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/chat.h"
#include "cli/cli_config.h"
#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "cli/readiness.h"
#include "gguf/gguf.h"
#include "pipeline/service.h"
#include "model/synth.h"
#include "server/server.h"
#include "util/log.h"

/* The demo model: the synth engineer's "tiny" preset (4-layer qwen3, BPE
 * vocab with Qwen special tokens, Qwen3 chat template), Q8_0. */
#define DEMO_PRESET "tiny"
#define DEMO_QUANT "q8_0"
#define DEMO_FILE "wick-demo-tiny-q8_0.gguf"
/* wick's own model (docs/models.md), looked for in models/ beside the
 * binary's folder (build/wick -> models/), then in ./models/. */
#define DEFAULT_MODEL "models/wick-coder.gguf"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick serve [-m MODEL.gguf] [options]\n\n"
            "Serves the OpenAI API (POST /v1/chat/completions, /v1/completions, /v1/responses),\n"
            "the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens),\n"
            "POST /v1/tokenize, /v1/detokenize, GET /v1/models, /health, /metrics and a\n"
            "live monitor page at /monitor. Up to --parallel requests run at once; the others\n"
            "wait in a bounded queue (HTTP 429 when it is full).\n\n"
            "options:\n"
            "  -m, --model FILE        GGUF model to serve (default: wick's own small code model,\n"
            "                          " DEFAULT_MODEL ", see docs/models.md)\n"
            "      --demo              serve a tiny SYNTHETIC random-weight demo model instead,\n"
            "                          made once in $XDG_CACHE_HOME/wick (or ~/.cache/wick): it\n"
            "                          exercises the whole server but answers gibberish\n"
            "      --alias NAME        model id shown by /v1/models (default: file name); may\n"
            "                          repeat: later names are accepted as well\n"
            "      --strict-model-id   refuse requests naming another model (404); by default\n"
            "                          the loaded model answers whatever 'model' says\n"
            "      --host HOST         address to listen on (default 127.0.0.1). A host\n"
            "                          other than loopback requires --api-key; HTTP is\n"
            "                          not encrypted, put TLS in front for remote use.\n"
            "      --port N            TCP port (default 8008; 0 = a free port, printed). A port\n"
            "                          another process listens on is refused, never shared\n"
            "      --api-key KEY       require 'Authorization: Bearer KEY' on every route\n"
            "                          but /health and the monitor page (env WICK_API_KEY)\n"
            "  -t, --threads N         compute threads (default: physical cores)\n"
            "      --device D          cpu (default), cuda (GPU 0), cuda:N, or cuda:N,M,... to split the\n"
            "                          layers over several GPUs (needs a CUDA build; a GPU listed twice,\n"
            "                          cuda:0,0, is a test aid: the hand-over between parts on one card)\n"
            "      --split S           layer (default) or tensor (needs NCCL; not implemented: refused)\n"
            "      --gpu-mem SIZE      cap on what wick allocates on each GPU (20G, 512M); wick check\n"
            "                          shows the layers, bytes and fit of each GPU\n"
            "  -c, --ctx N             context length in tokens (default: the trained context, reduced\n"
            "                          to what fits --mem; printed at startup with the arithmetic)\n"
            "      --chat-template NAME  override the GGUF's chat template (%s)\n"
            "      --max-queue N       requests allowed to wait (default 64)\n"
            "      --parallel N        requests in progress at once (default 1, at most 256). Each\n"
            "                          engine step runs one token of every decoding request and\n"
            "                          prompt chunks of --ubatch tokens in all (the oldest waiting\n"
            "                          prompt first) as one batch: the weights are read once for\n"
            "                          all, and a long prompt delays the others' streams by one\n"
            "                          chunk per step. Memory: KV and state for N\n"
            "                          sequences (wick check --parallel N); N + 1 cache slots at\n"
            "                          least. Speculative decoding (--spec) is off when N > 1\n"
            "      --ubatch N          prompt tokens per forward chunk (default 512)\n"
            "      --max-body-mb N     largest request body (default 32)\n"
            "      --timeout S         close connections idle for S seconds (default 30)\n"
            "      --request-timeout S stop a generation after S seconds (default: none)\n"
            "      --max-tokens N      cap on the tokens one request generates, whatever it asks\n"
            "                          for (default: none; the context is the limit)\n"
            "      --logit-bias ID=B   add B (-100..100) to token ID's logit in every request that\n"
            "                          does not bias it itself (-100 bans it); may repeat\n"
            "      --keepalive-ms N    SSE ': keep-alive' comment after N ms of silence (5000)\n"
            "      --cache-mem SIZE    prefix cache RAM for idle conversations and checkpoints (2G)\n"
            "      --cache-slots N     conversations kept in RAM (4)\n"
            "      --cache-dir DIR     archive conversations on disk; a restarted server resumes them\n"
            "      --cache-disk SIZE   cap of the archive folder (8G)\n"
            "      --log-format F      text (default) or json: one JSON object per log line\n"
            "      --spec SOURCE       speculative decoding for requests that do not choose: off\n"
            "                          (default), ngram (prompt lookup), draft (--draft FILE: a\n"
            "                          draft model with the model's vocabulary), mtp (the model's\n"
            "                          MTP block) or auto; same output at temperature 0 (on\n"
            "                          CUDA: up to rounding, docs/speculative.md)\n"
            "  -v, --verbose           debug logging\n"
            "  -h, --help              this help\n\n"
            "configuration, memory and readiness (the checks of wick check run first; serve refuses\n"
            "when one fails):\n" CLI_READY_HELP "\n"
            "attention (server default; a request may override):\n" CLI_POLICY_HELP CLI_KV_TYPE_HELP "\n"
            "Request extensions: {\"wick\": {\"fresh\": true}} bypasses the prefix cache for\n"
            "one request (cache_prompt: false does the same); {\"wick\": {\"attn_policy\":\n"
            "\"approx\", \"global\": N, \"window\": N, \"dense_tail\": N, \"dense_tail_continue\": N}}\n"
            "sets its attention policy; {\"wick\": {\"spec\": \"ngram\"}} its draft source; responses\n"
            "carry a 'timings' object (prompt/cached/recomputed tokens, prefill and decode speed,\n"
            "drafts proposed and accepted).\n",
            CHAT_TEMPLATE_NAMES);
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

/* Path of the demo model, made on first use. Writes to a temporary name and
 * renames, so an interrupted run never leaves a half-written model behind. */
static int ensure_demo_model(char *out, size_t cap)
{
    char dir[PATH_MAX - 64]; /* room for the file name */
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/wick", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/wick", home);
    else snprintf(dir, sizeof dir, "/tmp/wick-cache");
    if (mkdir_p(dir)) {
        fprintf(stderr, "wick serve: cannot create cache directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(out, cap, "%s/%s", dir, DEMO_FILE);
    struct stat st;
    if (stat(out, &st) == 0 && st.st_size > 0) return 0;

    synth_options o;
    wk_error err = {0};
    if (synth_options_init(&o, DEMO_PRESET, &err) || qt_mix_parse(DEMO_QUANT, &o.quant, &err)) {
        fprintf(stderr, "wick serve: demo model: %s\n", err.msg);
        return -1;
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    fprintf(stderr, "wick: making the synthetic demo model (preset '%s', %s) in %s ...\n", DEMO_PRESET, DEMO_QUANT, out);
    if (synth_write(&o, tmp, NULL, NULL, &err)) {
        fprintf(stderr, "wick serve: writing the demo model: %s\n", err.msg);
        return -1;
    }
    if (rename(tmp, out)) {
        fprintf(stderr, "wick serve: rename %s -> %s: %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The default model: DEFAULT_MODEL under the folder above the binary's, then
 * under the current folder. Fills out (the file found) or looked (where it
 * was looked for); returns 0 when found. */
static int find_default_model(char *out, size_t cap, char *looked, size_t looked_cap)
{
    char exe[PATH_MAX - 64]; /* room for DEFAULT_MODEL */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    looked[0] = '\0';
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0'; /* the binary's folder */
        slash = strrchr(exe, '/');
        if (slash) *slash = '\0'; /* its parent */
        snprintf(out, cap, "%s/%s", *exe ? exe : "", DEFAULT_MODEL);
        if (access(out, R_OK) == 0) return 0;
        snprintf(looked, looked_cap, "%s", out);
    }
    snprintf(out, cap, "%s", DEFAULT_MODEL);
    if (access(out, R_OK) == 0) return 0;
    size_t used = strlen(looked);
    snprintf(looked + used, looked_cap - used, "%s./%s", used ? " and " : "", DEFAULT_MODEL);
    return -1;
}

/* general.name of a GGUF (the model id of the default model), or "" */
static void model_name_of(const char *path, char *out, size_t cap)
{
    gguf_file *f = NULL;
    wk_error err = {0};
    gguf_str name;
    out[0] = '\0';
    if (gguf_open(&f, path, &err)) return;
    if (!gguf_get_str(f, "general.name", &name, &err))
        snprintf(out, cap, "%.*s", (int)(name.len < cap ? name.len : cap - 1), name.ptr);
    gguf_close(f);
}

/* "512M", "2G", "1048576" → bytes. */
static int parse_size(const char *s, const char *what, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (errno || end == s || *end || v <= 0 || v * mul > 1e18) {
        fprintf(stderr, "wick serve: %s must be a size such as 512M or 2G, got '%s'\n", what, s);
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_int(const char *s, const char *what, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "wick serve: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* What the server runs with, one fact per line: the model and its chat
 * template, the context and why, KV type, attention policy, cache, where it
 * listens. */
static void log_startup(pl_service *svc, const pl_service_config *ec, const srv_config *sc, int port)
{
    json_t *info = pl_service_model_info(svc);
    const char *tmpl = json_string_value(json_object_get(info, "chat_template"));
    long long train = json_integer_value(json_object_get(info, "n_ctx_train"));
    int n_ctx = pl_service_n_ctx(svc);
    WK_INFO("model '%s' (%s, %s), chat template %s%s", pl_service_model_id(svc),
            json_string_value(json_object_get(info, "arch")), json_string_value(json_object_get(info, "type")),
            tmpl ? tmpl : "none (chat needs --chat-template NAME; /v1/completions works)",
            ec->pipeline.chat_template && *ec->pipeline.chat_template ? " (--chat-template)"
            : tmpl                                                      ? " (recognised from the GGUF)"
                                                                        : "");
    const eng_options *eo = &ec->pipeline.eng;
    if (eo->n_ctx > 0)
        WK_INFO("context %d tokens (--ctx; the model was trained for %lld)", n_ctx, train);
    else
        WK_INFO("context %d tokens (default: the model's trained context %lld, reduced to what fits the memory "
                "budget, as logged above; --ctx N or --mem SIZE to change)", n_ctx, train);
    char pol[160];
    cli_policy_describe(&eo->policy, pol, sizeof pol);
    WK_INFO("KV cache %s, attention %s", cli_kv_type_name(eo->kv_type), pol);
    if (ec->parallel > 1)
        WK_INFO("parallel: up to %d requests at once, prompt chunks of %d tokens; speculative decoding off",
                ec->parallel, eo->n_ubatch);
    const ckpt_cache_config *cache = &ec->pipeline.cache;
    int slots = cache->max_slots > 0 ? cache->max_slots : CKPT_CACHE_SLOTS_DEFAULT;
    if (ec->parallel > 1 && slots <= ec->parallel) slots = ec->parallel + 1; /* as pl_engine_open: one per request, + 1 */
    WK_INFO("prefix cache: slots %d, RAM %.2f GiB, %s%s", slots,
            (double)(cache->mem_bytes ? cache->mem_bytes : CKPT_CACHE_MEM_DEFAULT) / (1024.0 * 1024 * 1024),
            cache->dir ? "disk archive in " : "no disk archive", cache->dir ? cache->dir : " (--cache-dir DIR)");
    json_decref(info);
    const char *h = sc->host;
    bool v6 = strchr(h, ':') && h[0] != '[';
    WK_INFO("listening on http://%s%s%s:%d (OpenAI /v1, Anthropic /v1/messages, monitor /monitor, metrics /metrics)%s",
            v6 ? "[" : "", h, v6 ? "]" : "", port, sc->api_key ? ", API key required" : "");
    if (sc->strict_model_id) WK_INFO("model names other than '%s' are refused (--strict-model-id)", pl_service_model_id(svc));
    if (!srv_host_is_loopback(h))
        WK_WARN("listening on a non-loopback address over plain HTTP: traffic (prompts, answers, the API key) is NOT "
                "encrypted. Put a TLS proxy in front for remote use.");
    fflush(stderr);
}

int cmd_serve(int argc, char **argv)
{
    enum { O_HOST = 1000, O_PORT, O_KEY, O_TMPL, O_QUEUE, O_PAR, O_BODY, O_TIMEOUT, O_RTIMEOUT, O_KA, O_ALIAS,
           O_CMEM, O_CSLOTS, O_CDIR, O_CDISK, O_DEMO, O_STRICT_ID, O_LOG_FORMAT, O_MAX_TOKENS, O_BIAS, O_SPEC, O_UBATCH };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT}, {"api-key", required_argument, 0, O_KEY},
        {"threads", required_argument, 0, 't'}, {"ctx", required_argument, 0, 'c'},
        {"chat-template", required_argument, 0, O_TMPL}, {"max-queue", required_argument, 0, O_QUEUE},
        {"parallel", required_argument, 0, O_PAR}, {"max-body-mb", required_argument, 0, O_BODY},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"request-timeout", required_argument, 0, O_RTIMEOUT},
        {"keepalive-ms", required_argument, 0, O_KA}, {"alias", required_argument, 0, O_ALIAS},
        {"cache-mem", required_argument, 0, O_CMEM}, {"cache-slots", required_argument, 0, O_CSLOTS},
        {"cache-dir", required_argument, 0, O_CDIR}, {"cache-disk", required_argument, 0, O_CDISK},
        {"demo", no_argument, 0, O_DEMO}, {"strict-model-id", no_argument, 0, O_STRICT_ID},
        {"log-format", required_argument, 0, O_LOG_FORMAT}, {"max-tokens", required_argument, 0, O_MAX_TOKENS},
        {"logit-bias", required_argument, 0, O_BIAS}, {"spec", required_argument, 0, O_SPEC},
        {"ubatch", required_argument, 0, O_UBATCH},
        CLI_POLICY_LONG_OPTIONS, CLI_KV_TYPE_OPTION,
        CLI_DEVICE_OPTION,                      {"verbose", no_argument, 0, 'v'},       {"help", no_argument, 0, 'h'},
        CLI_READY_LONG_OPTIONS, {0, 0, 0, 0}};
    cli_config cfg; /* --config FILE: its keys become options in front of the command line */
    if (cli_config_expand(&cfg, "wick serve", opts, argc, argv)) return 2;
    argc = cfg.argc;
    argv = cfg.argv;
    cli_ready_opts ready = {0};
    srv_config sc;
    srv_config_default(&sc);
    pl_service_config ec = {0};
    pl_config_default(&ec.pipeline);
    ec.pipeline.need_template = false; /* /v1/completions works without one */
    ec.max_queue = 64;
    eng_options *eo = &ec.pipeline.eng;
    cli_policy_init(&eo->policy);
    const char *model_path = NULL;
    const char *api_key = getenv("WICK_API_KEY");
    ckpt_cache_config *cache_cfg = &ec.pipeline.cache;
    cache_cfg->max_slots = 0; /* the cache's default */
    bool demo = false;
    const char *aliases[16];
    int n_aliases = 0;
    int32_t bias_ids[64];
    float bias_values[64];
    int n_bias = 0;
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:c:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case O_HOST: sc.host = optarg; break;
        case O_PORT:
            if (parse_int(optarg, "--port", 0, 65535, &v)) return 2;
            sc.port = (int)v;
            break;
        case O_KEY: api_key = optarg; break;
        case 't':
            if (parse_int(optarg, "--threads", 0, 1024, &v)) return 2;
            eo->n_threads = (int)v;
            break;
        case 'c':
            if (parse_int(optarg, "--ctx", 16, 1 << 24, &v)) return 2;
            eo->n_ctx = (int)v;
            break;
        case O_TMPL: ec.pipeline.chat_template = optarg; break;
        case O_QUEUE:
            if (parse_int(optarg, "--max-queue", 1, 100000, &v)) return 2;
            ec.max_queue = (int)v;
            break;
        case O_PAR:
            if (parse_int(optarg, "--parallel", 1, ENG_MAX_SEQ, &v)) return 2;
            ec.parallel = (int)v;
            break;
        case O_UBATCH:
            if (parse_int(optarg, "--ubatch", 1, 1 << 16, &v)) return 2;
            eo->n_ubatch = (int)v;
            break;
        case O_BODY:
            if (parse_int(optarg, "--max-body-mb", 1, 4096, &v)) return 2;
            sc.limits.max_body_bytes = (size_t)v << 20;
            break;
        case O_TIMEOUT:
            if (parse_int(optarg, "--timeout", 1, 86400, &v)) return 2;
            sc.conn_timeout_s = (int)v;
            break;
        case O_RTIMEOUT:
            if (parse_int(optarg, "--request-timeout", 0, 86400 * 7, &v)) return 2;
            sc.request_timeout_s = (int)v;
            break;
        case O_KA:
            if (parse_int(optarg, "--keepalive-ms", 50, 600000, &v)) return 2;
            sc.keepalive_ms = (int)v;
            break;
        case O_ALIAS:
            if (n_aliases == (int)(sizeof aliases / sizeof aliases[0])) {
                fprintf(stderr, "wick serve: at most %zu --alias names\n", sizeof aliases / sizeof aliases[0]);
                return 2;
            }
            aliases[n_aliases++] = optarg;
            if (!ec.model_id) ec.model_id = optarg; /* the first is the id /v1/models shows */
            break;
        case O_STRICT_ID: sc.strict_model_id = true; break;
        case O_BIAS: {
            char *end;
            long id = strtol(optarg, &end, 10);
            double b = *end == '=' ? strtod(end + 1, &end) : NAN;
            if (end == optarg || *end || id < 0 || id > INT32_MAX || !(b >= -100.0 && b <= 100.0)) {
                fprintf(stderr, "wick serve: --logit-bias must be TOKEN_ID=BIAS with BIAS in [-100, 100], got '%s'\n", optarg);
                return 2;
            }
            if (n_bias == (int)(sizeof bias_ids / sizeof bias_ids[0])) {
                fprintf(stderr, "wick serve: at most %zu --logit-bias entries\n", sizeof bias_ids / sizeof bias_ids[0]);
                return 2;
            }
            bias_ids[n_bias] = (int32_t)id;
            bias_values[n_bias++] = (float)b;
            break;
        }
        case O_MAX_TOKENS:
            if (parse_int(optarg, "--max-tokens", 1, INT32_MAX, &v)) return 2;
            sc.max_tokens = (int)v;
            break;
        case O_LOG_FORMAT: {
            enum wk_log_format f;
            if (wk_log_format_parse(optarg, &f)) {
                fprintf(stderr, "wick serve: --log-format must be text or json, got '%s'\n", optarg);
                return 2;
            }
            wk_log_set_format(f);
            break;
        }
        case O_CMEM:
            if (parse_size(optarg, "--cache-mem", &cache_cfg->mem_bytes)) return 2;
            break;
        case O_CSLOTS:
            if (parse_int(optarg, "--cache-slots", 1, 256, &v)) return 2;
            cache_cfg->max_slots = (int)v;
            break;
        case O_CDIR: cache_cfg->dir = optarg; break;
        case O_CDISK:
            if (parse_size(optarg, "--cache-disk", &cache_cfg->disk_bytes)) return 2;
            break;
        case O_DEMO: demo = true; break;
        case O_SPEC: {
            wk_error e = {0};
            if (eng_spec_mode_parse(optarg, &ec.pipeline.spec, &e)) {
                fprintf(stderr, "wick serve: --spec: %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 'v': wk_log_set_level(WK_LOG_DEBUG); break;
        case 'h': usage(stdout); return 0;
        default: {
            int32_t kv = eo->kv_type;
            int pr = cli_policy_option(c, optarg, &eo->policy, "wick serve");
            if (pr == 0 && (pr = cli_kv_type_option(c, optarg, &kv, "wick serve")) == 1) eo->kv_type = kv;
            int32_t dev = eo->device, gpu = eo->gpu;
            if (pr == 0 && (pr = cli_device_option(c, optarg, &dev, &gpu, &eo->split, "wick serve")) == 1) {
                eo->device = dev;
                eo->gpu = gpu;
            }
            if (pr == 0) pr = cli_ready_option(c, optarg, &ready, "wick serve");
            if (pr <= 0) {
                if (pr == 0) usage(stderr);
                return 2;
            }
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "wick serve: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (ready.print_config) {
        static const char *const repeatable[] = {"aux", NULL}, *const secret[] = {"api-key", NULL};
        return cli_config_print(stdout, "wick serve", opts, "m:t:c:vh", repeatable, secret, argc, argv) ? 2 : 0;
    }
    sc.api_key = api_key && *api_key ? api_key : NULL;
    sc.aliases = aliases;
    sc.n_aliases = n_aliases;
    sc.bias_ids = bias_ids;
    sc.bias_values = bias_values;
    sc.n_bias = n_bias;
    if (!srv_host_is_loopback(sc.host) && !sc.api_key) {
        fprintf(stderr, "wick serve: refusing to listen on %s without an API key: anyone who can reach it could use "
                        "the model. Pass --api-key KEY (or set WICK_API_KEY), or use --host 127.0.0.1.\n", sc.host);
        return 2;
    }

    if (demo && model_path) {
        fprintf(stderr, "wick serve: --demo and -m both name the model to serve; give one\n");
        return 2;
    }
    char demo_path[PATH_MAX], default_path[PATH_MAX], default_name[128];
    if (demo) {
        if (ensure_demo_model(demo_path, sizeof demo_path)) return 1;
        model_path = demo_path;
        ec.synthetic = true;
        if (!ec.model_id) ec.model_id = "wick-demo-tiny-synthetic";
    } else if (!model_path) {
        char looked[2 * PATH_MAX];
        if (find_default_model(default_path, sizeof default_path, looked, sizeof looked)) {
            fprintf(stderr, "wick serve: no -m MODEL.gguf given and wick's default model is not there (looked for %s); "
                            "pass -m FILE.gguf, or --demo for the synthetic demo model\n", looked);
            return 1;
        }
        model_path = default_path;
        model_name_of(model_path, default_name, sizeof default_name);
        if (!ec.model_id && default_name[0]) ec.model_id = default_name;
    }
    ec.pipeline.model_path = model_path;
    ec.pipeline.draft_path = ready.draft; /* --draft: checked with the others, used by --spec draft */
    ec.pipeline.mem_budget_bytes = ready.mem_bytes;
    const uint64_t cache_budget = cache_cfg->mem_bytes ? cache_cfg->mem_bytes : CKPT_CACHE_MEM_DEFAULT;
    int ready_rc;
    if (cli_device_finish(eo->device, &eo->split, "wick serve")) return 2;
    eo->n_seq = ec.parallel > 0 ? ec.parallel : 1;
    if (cli_ready_serve(&ready, cfg.path, model_path, sc.host, sc.port, eo, cache_budget, ec.pipeline.chat_template,
                        &ready_rc))
        return ready_rc;
    if (cache_cfg->dir && mkdir_p(cache_cfg->dir)) {
        fprintf(stderr, "wick serve: cannot create --cache-dir %s: %s\n", cache_cfg->dir, strerror(errno));
        return 1;
    }

    /* Signals are taken by sigwait below; every thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    wk_error err = {0};
    pl_service *svc = NULL;
    fprintf(stderr, "wick: loading %s\n", model_path);
    if (pl_service_start(&ec, &svc, &err)) {
        fprintf(stderr, "wick serve: %s\n", err.msg);
        return 1;
    }
    if (ec.synthetic)
        fprintf(stderr, "wick: NOTE: serving a SYNTHETIC random-weight demo model (%s): the server works end to end "
                        "but the answers are gibberish. Use -m FILE.gguf for a real model.\n", model_path);
    srv_server *srv = NULL;
    if (srv_start(&sc, svc, &srv, &err)) {
        fprintf(stderr, "wick serve: %s\n", err.msg);
        pl_service_stop(svc);
        return 1;
    }
    log_startup(svc, &ec, &sc, srv_port(srv));
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "wick: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(srv);
    pl_service_stop(svc);
    return 0;
}
