/* `wick serve`: load a model and serve the OpenAI-compatible API, the
 * monitor page and /metrics. Without -m it makes (once) and serves a tiny
 * synthetic random-weight demo model from the cache directory. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/chat.h"
#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "pipeline/service.h"
#include "model/synth.h"
#include "server/server.h"
#include "util/log.h"

/* The demo model: the synth engineer's "tiny" preset (4-layer qwen3, BPE
 * vocab with Qwen special tokens, Qwen3 chat template), Q8_0. */
#define DEMO_PRESET "tiny"
#define DEMO_QUANT "q8_0"
#define DEMO_FILE "wick-demo-tiny-q8_0.gguf"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick serve [-m MODEL.gguf] [options]\n\n"
            "Serves an OpenAI-compatible API (POST /v1/chat/completions, /v1/completions,\n"
            "/v1/tokenize, /v1/detokenize; GET /v1/models, /health, /metrics) and a live\n"
            "monitor page at /monitor. One engine thread runs requests one at a time;\n"
            "the others wait in a bounded queue (HTTP 429 when it is full).\n\n"
            "options:\n"
            "  -m, --model FILE        GGUF model to serve. Without it a tiny SYNTHETIC\n"
            "                          random-weight demo model is made once in\n"
            "                          $XDG_CACHE_HOME/wick (or ~/.cache/wick) and served:\n"
            "                          it exercises the whole server but answers gibberish.\n"
            "      --alias NAME        model id shown by /v1/models (default: file name)\n"
            "      --host HOST         address to listen on (default 127.0.0.1). A host\n"
            "                          other than loopback requires --api-key; HTTP is\n"
            "                          not encrypted, put TLS in front for remote use.\n"
            "      --port N            TCP port (default 8008; 0 = any free port)\n"
            "      --api-key KEY       require 'Authorization: Bearer KEY' on every route\n"
            "                          but /health and the monitor page (env WICK_API_KEY)\n"
            "  -t, --threads N         compute threads (default: physical cores)\n"
            "      --device D          cpu (default), cuda (GPU 0) or cuda:N (needs a CUDA build)\n"
            "  -c, --ctx N             context length in tokens (default: model's, <= 8192)\n"
            "      --chat-template NAME  override the GGUF's chat template (%s)\n"
            "      --max-queue N       requests allowed to wait (default 64)\n"
            "      --parallel N        sequences decoded at once; only 1 is supported\n"
            "      --max-body-mb N     largest request body (default 32)\n"
            "      --timeout S         close connections idle for S seconds (default 30)\n"
            "      --request-timeout S stop a generation after S seconds (default: none)\n"
            "      --keepalive-ms N    SSE ': keep-alive' comment after N ms of silence (5000)\n"
            "      --cache-mem SIZE    prefix cache RAM for idle conversations and checkpoints (2G)\n"
            "      --cache-slots N     conversations kept in RAM (4)\n"
            "      --cache-dir DIR     archive conversations on disk; a restarted server resumes them\n"
            "      --cache-disk SIZE   cap of the archive folder (8G)\n"
            "      --spec SOURCE       speculative decoding for requests that do not choose: off\n"
            "                          (default), ngram (prompt lookup), draft (--draft), mtp (the\n"
            "                          model's MTP block) or auto; same output at temperature 0\n"
            "      --draft FILE        draft model with the model's vocabulary\n"

            "  -v, --verbose           debug logging\n"
            "  -h, --help              this help\n\n"
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
    if (synth_options_init(&o, DEMO_PRESET, &err) || synth_parse_quant(DEMO_QUANT, &o.quant, &err)) {
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

int cmd_serve(int argc, char **argv)
{
    enum { O_HOST = 1000, O_PORT, O_KEY, O_TMPL, O_QUEUE, O_PAR, O_BODY, O_TIMEOUT, O_RTIMEOUT, O_KA, O_ALIAS,
           O_CMEM, O_CSLOTS, O_CDIR, O_CDISK, O_SPEC, O_DRAFT };
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
        {"spec", required_argument, 0, O_SPEC}, {"draft", required_argument, 0, O_DRAFT},
        CLI_POLICY_LONG_OPTIONS, CLI_KV_TYPE_OPTION,
        CLI_DEVICE_OPTION,                      {"verbose", no_argument, 0, 'v'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
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
            if (parse_int(optarg, "--parallel", 1, 1, &v)) {
                fprintf(stderr, "wick serve: one engine thread decodes one sequence at a time; "
                                "concurrent requests queue (--max-queue)\n");
                return 2;
            }
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
        case O_ALIAS: ec.model_id = optarg; break;
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
        case O_SPEC: {
            wk_error e = {0};
            if (eng_spec_mode_parse(optarg, &ec.pipeline.spec, &e)) {
                fprintf(stderr, "wick serve: --spec: %s\n", e.msg);
                return 2;
            }
            break;
        }
        case O_DRAFT: ec.pipeline.draft_path = optarg; break;
        case 'v': wk_log_set_level(WK_LOG_DEBUG); break;
        case 'h': usage(stdout); return 0;
        default: {
            int32_t kv = eo->kv_type;
            int pr = cli_policy_option(c, optarg, &eo->policy, "wick serve");
            if (pr == 0 && (pr = cli_kv_type_option(c, optarg, &kv, "wick serve")) == 1) eo->kv_type = kv;
            int32_t dev = eo->device, gpu = eo->gpu;
            if (pr == 0 && (pr = cli_device_option(c, optarg, &dev, &gpu, "wick serve")) == 1) {
                eo->device = dev;
                eo->gpu = gpu;
            }
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
    sc.api_key = api_key && *api_key ? api_key : NULL;
    if (!srv_host_is_loopback(sc.host) && !sc.api_key) {
        fprintf(stderr, "wick serve: refusing to listen on %s without an API key: anyone who can reach it could use "
                        "the model. Pass --api-key KEY (or set WICK_API_KEY), or use --host 127.0.0.1.\n", sc.host);
        return 2;
    }

    char demo_path[PATH_MAX];
    if (!model_path) {
        if (ensure_demo_model(demo_path, sizeof demo_path)) return 1;
        model_path = demo_path;
        ec.synthetic = true;
        if (!ec.model_id) ec.model_id = "wick-demo-tiny-synthetic";
    }
    ec.pipeline.model_path = model_path;
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
    const char *h = sc.host;
    bool v6 = strchr(h, ':') && h[0] != '[';
    fprintf(stderr, "wick: model '%s', context %d tokens\n", pl_service_model_id(svc), pl_service_n_ctx(svc));
    fprintf(stderr, "wick: listening on http://%s%s%s:%d (monitor: /monitor, metrics: /metrics)%s\n", v6 ? "[" : "", h,
            v6 ? "]" : "", srv_port(srv), sc.api_key ? ", API key required" : "");
    if (!srv_host_is_loopback(h))
        fprintf(stderr, "wick: WARNING: listening on a non-loopback address over plain HTTP: traffic (prompts, answers, "
                        "the API key) is NOT encrypted. Put a TLS proxy in front for remote use.\n");
    fflush(stderr);

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "wick: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(srv);
    pl_service_stop(svc);
    return 0;
}
