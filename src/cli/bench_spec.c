/* `wick bench --spec`: the same greedy request, plain and speculative, alternating for
 * -r repetitions. Decode speed comes from the pipeline's own counters (time after the
 * first token), so prefill and model loading are not in it; the prefix cache gives the
 * repetitions after the first their prompt back. The outputs of the two modes must be
 * the same token for token (temperature 0): a difference is reported as an error. */
#include "cli/bench_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/bench.h"
#include "pipeline/pipeline.h"

typedef struct spec_run {
    int32_t *ids;
    int n, cap;
} spec_run;

static void on_token(void *user, int32_t id)
{
    spec_run *r = user;
    if (r->n < r->cap) r->ids[r->n++] = id;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One greedy completion of the prompt; its counters into *c, its tokens into r. */
static int run_one(pl_engine *pe, const int32_t *prompt, int n_prompt, int n_predict, int spec, spec_run *r,
                   eng_counters *c)
{
    eng_request req = {0};
    req.kind = ENG_REQ_COMPLETION;
    req.prompt_ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (!req.prompt_ids) return 500;
    memcpy(req.prompt_ids, prompt, sizeof(int32_t) * (size_t)n_prompt);
    req.n_prompt_ids = n_prompt;
    req.max_tokens = n_predict;
    req.ignore_eos = true;
    req.sampling.temperature = 0;
    req.sampling.top_p = 1;
    req.sampling.repeat_penalty = 1;
    req.sampling.has_seed = true;
    req.spec = spec;
    r->n = 0;
    pl_sink sink = {.user = r, .token = on_token};
    eng_event final = {0};
    int rc = pl_run(pe, &req, &sink, &final);
    if (rc) fprintf(stderr, "wick bench: %s\n", final.message);
    *c = final.counters;
    eng_request_clear(&req);
    return rc;
}

int bench_spec_run(const bench_spec_opts *o)
{
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = o->model_path;
    cfg.need_template = false;
    cfg.need_tokenizer = o->prompt_file != NULL;
    cfg.eng.n_threads = o->threads;
    cfg.eng.device = o->device;
    cfg.eng.gpu = o->gpu;
    cfg.eng.split = o->split;
    cfg.eng.kv_type = o->kv_type;
    cfg.draft_path = o->draft_path;
    wk_error err = {0};
    pl_engine *pe = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    int status = 1;
    spec_run runs[2] = {0};
    double *tps[2] = {NULL, NULL};
    if (pl_engine_open(&pe, &cfg, &err)) {
        fprintf(stderr, "wick bench: %s\n", err.msg);
        return 1;
    }
    const model *m = pl_engine_model(pe);
    if (o->prompt_file) {
        if (!(text = read_all(o->prompt_file))) {
            fprintf(stderr, "wick bench: cannot read --prompt-file %s\n", o->prompt_file);
            goto done;
        }
        if (tok_encode(pl_engine_vocab(pe), text, strlen(text), true, TOK_SPECIAL_ALL, &prompt, &n_prompt, &err)) {
            fprintf(stderr, "wick bench: tokenizing %s: %s\n", o->prompt_file, err.msg);
            goto done;
        }
    } else {
        n_prompt = o->depth > 0 ? (size_t)o->depth : 16;
        prompt = malloc(sizeof(int32_t) * n_prompt);
        if (!prompt) goto done;
        eng_bench_tokens(prompt, (int32_t)n_prompt, (int32_t)m->hp.n_vocab, 12345);
    }
    pl_engine_reserve(pe, (int32_t)n_prompt + o->n_predict + 1);
    const int modes[2] = {ENG_SPEC_OFF, o->spec};
    eng_counters last[2] = {0};
    for (int k = 0; k < 2; k++) {
        runs[k].cap = o->n_predict;
        runs[k].ids = malloc(sizeof(int32_t) * (size_t)o->n_predict);
        tps[k] = malloc(sizeof(double) * (size_t)o->reps);
        if (!runs[k].ids || !tps[k]) goto done;
    }
    long proposed = 0, accepted = 0, steps = 0;
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < 2; k++) {
            if (run_one(pe, prompt, (int)n_prompt, o->n_predict, modes[k], &runs[k], &last[k])) goto done;
            tps[k][r] = last[k].decode_tok_per_s;
            if (k == 1) {
                proposed += last[k].draft_proposed;
                accepted += last[k].draft_accepted;
                steps += last[k].spec_steps;
            }
            if (!o->quiet)
                fprintf(stderr, "wick bench: %s rep %d/%d: %.2f tok/s\n", eng_spec_mode_name(modes[k]), r + 1, o->reps,
                        tps[k][r]);
        }
    if (runs[0].n != runs[1].n || memcmp(runs[0].ids, runs[1].ids, sizeof(int32_t) * (size_t)runs[0].n)) {
        fprintf(stderr, "wick bench: the speculative output differs from plain decoding\n");
        goto done;
    }
    double med[2];
    for (int k = 0; k < 2; k++) {
        qsort(tps[k], (size_t)o->reps, sizeof(double), cmp_double);
        med[k] = o->reps % 2 ? tps[k][o->reps / 2] : 0.5 * (tps[k][o->reps / 2 - 1] + tps[k][o->reps / 2]);
    }
    const char *src = last[1].spec[0] ? last[1].spec : "off";
    double acc = proposed ? (double)accepted / proposed : 0, per_step = steps ? (double)accepted / steps : 0;
    if (o->json) {
        printf("{\"test\": \"tg%d\", \"prompt_tokens\": %zu, \"spec\": \"%s\", \"reps\": %d, \"threads\": %d, "
               "\"plain_tok_per_s\": %.4f, \"spec_tok_per_s\": %.4f, \"speedup\": %.4f, \"draft_n\": %ld, "
               "\"draft_n_accepted\": %ld, \"draft_acceptance\": %.4f, \"draft_accepted_per_step\": %.4f, "
               "\"same_output\": true, \"model\": \"%s\", \"arch\": \"%s\", \"engine\": \"wick\"}\n",
               o->n_predict, n_prompt, src, o->reps, o->threads, med[0], med[1], med[1] / med[0], proposed, accepted,
               acc, per_step, o->model_path, model_arch_name(m->arch));
    } else {
        printf("model: %s (%s), prompt %zu tokens, tg%d, %d reps, %d threads\n\n", o->model_path,
               model_arch_name(m->arch), n_prompt, o->n_predict, o->reps, o->threads);
        printf("| decode | t/s median | speed-up | drafts accepted | accepted per step |\n|---|---:|---:|---:|---:|\n");
        printf("| plain | %.2f | 1.00 | | |\n", med[0]);
        printf("| %s | %.2f | %.2f | %ld / %ld (%.1f %%) | %.2f |\n", src, med[1], med[1] / med[0], accepted, proposed,
               100 * acc, per_step);
        printf("\nthe same %d tokens with and without speculation\n", runs[0].n);
    }
    status = 0;
done:
    for (int k = 0; k < 2; k++) {
        free(runs[k].ids);
        free(tps[k]);
    }
    free(prompt);
    free(text);
    pl_engine_close(pe);
    return status;
}
