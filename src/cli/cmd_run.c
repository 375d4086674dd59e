/* `wick run`: load a model, feed a prompt, stream the generated text.
 * Numerics mode: --tokens feeds exact ids as one batch and --dump-logits
 * writes every row of logits (float32 little-endian [n_tokens][n_vocab]). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "pipeline/pipeline.h"
#include "util/timeutil.h"

typedef struct run_opts {
    const char *model_path;
    const char *prompt;
    const char *prompt_file;
    const char *tokens_arg;
    const char *dump_logits;
    bool dump_tokens;
    bool no_bos;
    bool ignore_eos;
    bool show_special;
    int n_predict;
    bool n_predict_set;
    int n_threads;
    int n_ctx;
    int n_ubatch;
    eng_sampler_params sp;
    be_attn_policy policy;
    int32_t kv_type;
    int32_t device, gpu;
    eng_split_opts split;
    int spec;               /* enum eng_spec_mode */
    const char *draft_path;
} run_opts;

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: wick run -m MODEL.gguf (-p TEXT | -f FILE | --tokens IDS) [options]\n"
            "\n"
            "Feeds a prompt to the model and streams the generated text to stdout;\n"
            "timings go to stderr.\n"
            "\n"
            "input:\n"
            "  -m, --model FILE       GGUF model to load (required)\n"
            "  -p, --prompt TEXT      prompt text (special-token text such as <|im_start|> is recognized)\n"
            "  -f, --file FILE        read the prompt text from FILE\n"
            "      --tokens IDS       feed these token ids (comma-separated) exactly: no BOS, one batch,\n"
            "                         no tokenizer needed\n"
            "      --no-bos           do not add the vocabulary's BOS token to a text prompt\n"
            "\n"
            "generation:\n"
            "  -n, --n-predict N      generate at most N tokens (default 128; 0 with --dump-logits)\n"
            "      --temp X           temperature, 0 = greedy (default 0.8)\n"
            "      --top-k N          keep the N most likely tokens, 0 = off (default 40)\n"
            "      --top-p X          nucleus sampling mass, 1 = off (default 0.95)\n"
            "      --min-p X          drop tokens below X times the best one, 0 = off (default 0.05)\n"
            "      --repeat-penalty X penalize recent tokens, 1 = off (default 1)\n"
            "      --seed N           sampler seed (default 0)\n"
            "      --ignore-eos       keep generating past end-of-generation tokens\n"
            "      --special          print control tokens as text\n"
            "      --spec SOURCE      speculative decoding: off (default), ngram (prompt lookup), draft\n"
            "                         (--draft model), mtp (the model's MTP block) or auto; the output\n"
            "                         is the same token for token at temperature 0 (on CUDA: up to\n"
            "                         rounding, docs/speculative.md)\n"
            "      --draft FILE       draft model with the model's vocabulary (for --spec draft / auto)\n"
            "\n"
            "engine:\n"
            "      --device D         cpu (default), cuda (GPU 0), cuda:N, or cuda:N,M,... to split the\n"
            "                         layers over several GPUs (needs a CUDA build; cuda:0,0 lists a GPU\n"
            "                         twice: a test aid that runs the hand-over between parts on one card)\n"
            "      --split S          layer (default) or tensor (needs NCCL; not implemented: refused)\n"
            "      --gpu-mem SIZE     cap on what wick allocates on each GPU (20G, 512M): what does not\n"
            "                         fit is refused up front, naming it and the sizes\n"
            "  -t, --threads N        worker threads (default: physical cores)\n"
            "  -c, --ctx N            context capacity in tokens (default: prompt + n-predict, at least 512)\n"
            "  -b, --ubatch N         prefill chunk size in tokens (default 512)\n"
            CLI_POLICY_HELP CLI_KV_TYPE_HELP
            "\n"
            "debugging:\n"
            "      --dump-logits FILE write the logits of every prompt token to FILE as float32 LE\n"
            "                         [n_tokens][n_vocab] (with --tokens: the whole list is one batch)\n"
            "      --dump-tokens      print the token ids the prompt becomes and exit\n"
            "  -h, --help             show this help\n");
}

static int die(const char *fmt, const char *arg)
{
    fprintf(stderr, "wick run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

/* Returns 0 on success, 1 on a bad command line (message printed), 2 for --help. */
static int parse_args(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_ubatch = 512;
    eng_sampler_params_default(&o->sp);
    cli_policy_init(&o->policy);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                               \
    do {                                                           \
        if (!v) return die("option %s needs a value", a);          \
        i++;                                                       \
    } while (0)
#define IS(s) (strcmp(a, s) == 0)
        if (IS("-h") || IS("--help")) return 2;
        else if (IS("-m") || IS("--model")) { NEED_VALUE(); o->model_path = v; }
        else if (IS("-p") || IS("--prompt")) { NEED_VALUE(); o->prompt = v; }
        else if (IS("-f") || IS("--file")) { NEED_VALUE(); o->prompt_file = v; }
        else if (IS("--tokens")) { NEED_VALUE(); o->tokens_arg = v; }
        else if (IS("--dump-logits")) { NEED_VALUE(); o->dump_logits = v; }
        else if (IS("--dump-tokens")) o->dump_tokens = true;
        else if (IS("--no-bos")) o->no_bos = true;
        else if (IS("--ignore-eos")) o->ignore_eos = true;
        else if (IS("--special")) o->show_special = true;
        else if (IS("--draft")) { NEED_VALUE(); o->draft_path = v; }
        else if (IS("--spec")) {
            NEED_VALUE();
            wk_error e = {0};
            if (eng_spec_mode_parse(v, &o->spec, &e)) return die("--spec: %s", e.msg);
        }
        else if (IS("-n") || IS("--n-predict")) {
            NEED_VALUE();
            if (!parse_int(v, 0, 1 << 24, &o->n_predict)) return die("bad token count '%s' for -n", v);
            o->n_predict_set = true;
        } else if (IS("-t") || IS("--threads")) {
            NEED_VALUE();
            if (!parse_int(v, 1, 1024, &o->n_threads)) return die("bad thread count '%s'", v);
        } else if (IS("-c") || IS("--ctx")) {
            NEED_VALUE();
            if (!parse_int(v, 1, 1 << 24, &o->n_ctx)) return die("bad context size '%s'", v);
        } else if (IS("-b") || IS("--ubatch")) {
            NEED_VALUE();
            if (!parse_int(v, 1, 1 << 16, &o->n_ubatch)) return die("bad ubatch size '%s'", v);
        } else if (IS("--temp")) {
            NEED_VALUE();
            if (!parse_float(v, &o->sp.temperature)) return die("bad temperature '%s'", v);
        } else if (IS("--top-k")) {
            NEED_VALUE();
            int k;
            if (!parse_int(v, 0, 1 << 24, &k)) return die("bad top-k '%s'", v);
            o->sp.top_k = k;
        } else if (IS("--top-p")) {
            NEED_VALUE();
            if (!parse_float(v, &o->sp.top_p)) return die("bad top-p '%s'", v);
        } else if (IS("--min-p")) {
            NEED_VALUE();
            if (!parse_float(v, &o->sp.min_p)) return die("bad min-p '%s'", v);
        } else if (IS("--repeat-penalty")) {
            NEED_VALUE();
            if (!parse_float(v, &o->sp.repeat_penalty)) return die("bad repeat penalty '%s'", v);
        } else if (IS("--seed")) {
            NEED_VALUE();
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end) return die("bad seed '%s'", v);
            o->sp.seed = s;
        } else if (IS("--device")) {
            NEED_VALUE();
            if (cli_device_option(CLI_OPT_DEVICE, v, &o->device, &o->gpu, &o->split, "wick run") != 1) return 1;
        } else if (IS("--split") || IS("--gpu-mem")) {
            NEED_VALUE();
            if (cli_device_option(IS("--split") ? CLI_OPT_SPLIT : CLI_OPT_GPU_MEM, v, &o->device, &o->gpu, &o->split,
                                  "wick run") != 1)
                return 1;
        } else if (IS("--kv-type")) {
            NEED_VALUE();
            if (cli_kv_type_option(CLI_OPT_KV_TYPE, v, &o->kv_type, "wick run") != 1) return 1;
        } else if (strncmp(a, "--attn-", 7) == 0) {
            int pr = cli_policy_arg(a, v, &o->policy, "wick run");
            if (pr == 0) return die("unknown option '%s' (see wick run --help)", a);
            if (pr < 0) return 1;
            i++;
        } else {
            return die("unknown option '%s' (see wick run --help)", a);
        }
#undef NEED_VALUE
#undef IS
    }
    if (!o->model_path) return die("%s", "no model given (-m FILE)");
    if (cli_device_finish(o->device, &o->split, "wick run")) return 1;
    int inputs = (o->prompt != NULL) + (o->prompt_file != NULL) + (o->tokens_arg != NULL);
    if (inputs == 0) return die("%s", "no prompt given (-p TEXT, -f FILE or --tokens IDS)");
    if (inputs > 1) return die("%s", "give only one of -p, -f and --tokens");
    if (o->dump_logits && !o->n_predict_set) o->n_predict = 0;
    return 0;
}

/* "5,17,99" → ids. */
static int parse_tokens(const char *s, int32_t **ids, int32_t *n)
{
    size_t cap = 16, len = 0;
    int32_t *p = malloc(cap * sizeof *p);
    if (!p) return -1;
    const char *c = s;
    while (*c) {
        char *end;
        errno = 0;
        long v = strtol(c, &end, 10);
        if (errno || end == c || v < 0 || v > INT32_MAX) {
            free(p);
            return -1;
        }
        if (len == cap) {
            int32_t *q = realloc(p, 2 * cap * sizeof *p);
            if (!q) {
                free(p);
                return -1;
            }
            p = q;
            cap *= 2;
        }
        p[len++] = (int32_t)v;
        c = end;
        while (*c == ' ') c++;
        if (*c == ',') c++;
        else if (*c) {
            free(p);
            return -1;
        }
    }
    if (!len) {
        free(p);
        return -1;
    }
    *ids = p;
    *n = (int32_t)len;
    return 0;
}

static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

static int write_logits(const char *path, const float *rows, int32_t n_rows, int32_t n_vocab)
{
    /* float32 little-endian: the host order on every platform wick builds for */
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = (size_t)n_rows * (size_t)n_vocab;
    size_t w = fwrite(rows, sizeof(float), n, f);
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

/* What `wick run` does with the pipeline's output. */
typedef struct run_out {
    const run_opts *o;
    bool has_vocab;
    int32_t n_ids;        /* token ids printed (a file without a tokenizer) */
    int dump_rc;          /* --dump-logits: 0, or -1 when writing failed */
    int32_t dump_rows;
} run_out;

static void on_event(void *user, eng_event *ev)
{
    (void)user;
    if (ev->type == ENG_EV_DELTA && ev->text) {
        fputs(ev->text, stdout);
        fflush(stdout);
    }
    eng_event_clear(ev);
}

static void on_token(void *user, int32_t id)
{
    run_out *r = user;
    if (r->has_vocab) return; /* text comes through on_event */
    printf("%s%d", r->n_ids++ ? "," : "", id);
    fflush(stdout);
}

static void on_prefilled(void *user, eng_ctx *ctx)
{
    run_out *r = user;
    if (!r->o->dump_logits) return;
    int32_t rows = 0;
    const float *all = eng_logits_all(ctx, &rows);
    r->dump_rows = rows;
    r->dump_rc = write_logits(r->o->dump_logits, all, rows, eng_n_vocab(ctx));
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc == 2) {
        run_usage(stdout);
        return 0;
    }
    if (prc) return 1;

    wk_error err = {0};
    pl_engine *pe = NULL;
    int32_t *prompt = NULL, n_prompt = 0;
    char *file_text = NULL;
    int status = 1;
    eng_request req = {0};

    if (o.tokens_arg && parse_tokens(o.tokens_arg, &prompt, &n_prompt)) {
        fprintf(stderr, "wick run: --tokens wants comma-separated non-negative ids, got '%s'\n", o.tokens_arg);
        return 1;
    }
    double t_load = wk_now_ms();
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = o.model_path;
    cfg.need_template = false;
    cfg.need_tokenizer = !o.tokens_arg; /* --tokens works without a tokenizer */
    cfg.eng.n_threads = o.n_threads;
    cfg.eng.policy = o.policy;
    cfg.eng.kv_type = o.kv_type;
    cfg.eng.device = o.device;
    cfg.eng.gpu = o.gpu;
    cfg.eng.split = o.split;
    cfg.spec = o.spec;
    cfg.draft_path = o.draft_path;
    /* --tokens is one batch by contract (the golden logits are made that way) */
    cfg.eng.n_ubatch = o.tokens_arg ? n_prompt : o.n_ubatch;
    /* text prompts are tokenized once the vocabulary is loaded; the context grows to fit them below */
    int64_t known = (int64_t)n_prompt + o.n_predict;
    cfg.eng.n_ctx = o.n_ctx ? o.n_ctx : (int32_t)(known > 512 ? known : 512);
    if (pl_engine_open(&pe, &cfg, &err)) {
        fprintf(stderr, "wick run: %s\n", err.msg);
        goto done;
    }
    const tok_vocab *vocab = pl_engine_vocab(pe);
    const model *m = pl_engine_model(pe);
    if (!o.tokens_arg) {
        const char *text = o.prompt;
        if (o.prompt_file) {
            file_text = read_text_file(o.prompt_file);
            if (!file_text) {
                fprintf(stderr, "wick run: cannot read prompt file %s: %s\n", o.prompt_file, strerror(errno));
                goto done;
            }
            text = file_text;
        }
        size_t n_ids = 0;
        if (tok_encode(vocab, text, strlen(text), !o.no_bos, TOK_SPECIAL_ALL, &prompt, &n_ids, &err)) {
            fprintf(stderr, "wick run: tokenizing the prompt: %s\n", err.msg);
            goto done;
        }
        n_prompt = (int32_t)n_ids;
    }
    if (o.dump_tokens) {
        for (int32_t i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", prompt[i]);
        printf("\n");
        status = 0;
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "wick run: the prompt is empty\n");
        goto done;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        if ((uint32_t)prompt[i] >= m->hp.n_vocab) {
            fprintf(stderr, "wick run: token id %d is outside the vocabulary (%u)\n", prompt[i], m->hp.n_vocab);
            goto done;
        }
    /* room for the prompt and what is generated after it (the last token is not fed back) */
    int64_t need = (int64_t)n_prompt + o.n_predict;
    if (o.n_ctx && need > o.n_ctx) {
        fprintf(stderr, "wick run: prompt (%d tokens) + %d to generate exceed the context of %d (-c)\n", n_prompt,
                o.n_predict, o.n_ctx);
        goto done;
    }
    if (!o.n_ctx) pl_engine_reserve(pe, (int32_t)(need > 512 ? need : 512));
    t_load = wk_now_ms() - t_load;

    req.kind = ENG_REQ_COMPLETION;
    req.prompt_ids = prompt;
    req.n_prompt_ids = n_prompt;
    prompt = NULL; /* the request owns it now */
    req.max_tokens = o.n_predict;
    req.sampling.temperature = o.sp.temperature;
    req.sampling.top_k = o.sp.top_k;
    req.sampling.top_p = o.sp.top_p;
    req.sampling.min_p = o.sp.min_p;
    req.sampling.repeat_penalty = o.sp.repeat_penalty;
    req.sampling.seed = o.sp.seed;
    req.sampling.has_seed = true;
    req.ignore_eos = o.ignore_eos;
    req.emit_special = o.show_special;
    req.all_logits = o.dump_logits != NULL;
    req.fresh = true;
    snprintf(req.id, sizeof req.id, "run");
    run_out out = {.o = &o, .has_vocab = vocab != NULL};
    pl_sink sink = {.user = &out, .event = on_event, .token = on_token, .prefilled = on_prefilled};
    eng_event final = {0};
    int rc = pl_run(pe, &req, &sink, &final);
    if (out.n_ids || final.counters.completion_tokens) printf("\n");
    fflush(stdout);
    if (out.dump_rc) {
        fprintf(stderr, "wick run: cannot write %s: %s\n", o.dump_logits, strerror(errno));
        goto done;
    }
    if (rc) {
        fprintf(stderr, "wick run: %s\n", final.message);
        goto done;
    }
    const eng_counters *c = &final.counters;
    char where[256];
    if (o.device == ENG_DEVICE_CUDA)
        eng_ctx_where(pl_engine_ctx(pe), where, sizeof where);
    else
        snprintf(where, sizeof where, "%d threads", (int)eng_ctx_options(pl_engine_ctx(pe))->n_threads);
    fprintf(stderr, "\nmodel:     %s (%s, %u layers, %s), loaded in %.0f ms\n", o.model_path,
            model_arch_name(m->arch), m->hp.n_layer, where, t_load);
    fprintf(stderr, "prompt:    %d tokens in %.1f ms (%.1f tok/s)\n", c->prompt_tokens, c->prefill_ms,
            c->prefill_tok_per_s);
    fprintf(stderr, "generated: %d tokens, %d decode steps in %.1f ms (%.1f tok/s)\n", c->completion_tokens,
            c->completion_tokens > 1 ? c->completion_tokens - 1 : 0, c->decode_ms, c->decode_tok_per_s);
    if (c->spec[0])
        fprintf(stderr, "drafts:    %s, %d proposed, %d accepted (%.1f %%), %.2f accepted per step of %d\n", c->spec,
                c->draft_proposed, c->draft_accepted,
                c->draft_proposed ? 100.0 * c->draft_accepted / c->draft_proposed : 0.0,
                c->spec_steps ? (double)c->draft_accepted / c->spec_steps : 0.0, c->spec_steps);
    status = 0;
done:
    eng_request_clear(&req);
    pl_engine_close(pe);
    free(prompt);
    free(file_text);
    return status;
}
