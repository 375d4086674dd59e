/* Golden conformance on the CUDA backend: every tiny golden model runs its
 * 64-token prompt as one batch (prefill kernels) and 16 greedy decode steps
 * (decode kernels) through model_forward on be_cuda, and the logits are
 * compared with llama.cpp's (max |diff| <= the case's tolerance from
 * MANIFEST.json), next to the CPU backend's error on the same case; then the
 * model's recorded multi-row steps against graphs off (golden_cuda_steps.c).
 * usage: golden_cuda GOLDEN_DIR   (GOLDEN_DIR holds cases.txt, models/, logits/:
 * cases.txt is one line per case: model n_tokens n_vocab tol logits gen tokens greedy) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "model/model.h"
#include "model/model_impl.h"
#include "golden_cuda_steps.h"
#include "golden_seq.h"

typedef struct gcase {
    char model[256], logits[256], gen[256];
    int n_tokens, n_vocab;
    double tol;
    int32_t tokens[64], greedy[16];
} gcase;

static int parse_ints(const char *s, int32_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static float *read_f32(const char *dir, const char *rel, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *p = malloc(n * sizeof(float));
    size_t got = fread(p, sizeof(float), n, f);
    fclose(f);
    if (got != n) {
        free(p);
        return NULL;
    }
    return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

/* Runs the prompt and the greedy steps; returns max |diff| of prompt and gen logits. */
static int run_case(const char *dir, const gcase *c, const model *m, be_backend *be, int is_cuda,
                    const float *ref_p, const float *ref_g, double *err_p, double *err_g, wk_error *err)
{
    const size_t V = (size_t)c->n_vocab;
    model_scratch *s = NULL;
    seq q;
    int rc = model_scratch_new(&s, m, be, 64, err);
    if (rc) return rc;
    if (seq_new(&q, m, be, 128)) return wk_fail(err, WK_ENOMEM, "state");
    float *logits = malloc(sizeof(float) * V * 64);
    rc = model_forward(m, be, s, &q.st, c->tokens, c->n_tokens, MODEL_LOGITS_ALL, logits, NULL, err);
    if (!rc && is_cuda) rc = be_cuda_status(be, err);
    if (!rc) *err_p = max_abs_diff(logits, ref_p, V * c->n_tokens);
    *err_g = 0;
    for (int i = 0; i < 16 && !rc; i++) {
        rc = model_forward(m, be, s, &q.st, &c->greedy[i], 1, MODEL_LOGITS_LAST, logits, NULL, err);
        if (!rc && is_cuda) rc = be_cuda_status(be, err);
        if (!rc) {
            double d = max_abs_diff(logits, ref_g + i * V, V);
            if (d > *err_g) *err_g = d;
        }
    }
    (void)dir;
    free(logits);
    seq_free(&q, be);
    model_scratch_free(s);
    return rc;
}

int compare_ops_all(void); /* compare_ops.c */

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".golden";
    char path[600];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "golden_cuda: no %s\n", path);
        return 2;
    }
    wk_error err = {0};
    be_backend *cpu = NULL;
    if (be_cpu_new(&cpu, 4, &err)) {
        fprintf(stderr, "golden_cuda: %s\n", err.msg);
        return 2;
    }
    char line[8192];
    int n_pass = 0, n_fail = 0;
    printf("-- backend ops, cuda vs cpu\n");
    n_fail += compare_ops_all();
    printf("%-34s %7s %12s %12s %12s %12s\n", "model", "tol", "cuda prompt", "cuda gen", "cpu prompt", "cpu gen");
    while (fgets(line, sizeof line, f)) {
        gcase c;
        char toks[4096], greedy[512];
        if (sscanf(line, "%255s %d %d %lf %255s %255s %4095s %511s", c.model, &c.n_tokens, &c.n_vocab, &c.tol, c.logits,
                   c.gen, toks, greedy) != 8)
            continue;
        parse_ints(toks, c.tokens, 64);
        parse_ints(greedy, c.greedy, 16);
        float *ref_p = read_f32(dir, c.logits, (size_t)c.n_vocab * c.n_tokens);
        float *ref_g = read_f32(dir, c.gen, (size_t)c.n_vocab * 16);
        snprintf(path, sizeof path, "%s/%s", dir, c.model);
        model *m = NULL;
        if (!ref_p || !ref_g || model_load(&m, path, &err)) {
            printf("FAIL %-29s cannot load: %s\n", c.model, ref_p && ref_g ? err.msg : "logits file missing");
            n_fail++;
            free(ref_p);
            free(ref_g);
            continue;
        }
        double cp = NAN, cg = NAN, up = NAN, ug = NAN;
        /* one backend per model: the backend keys uploaded weights by their
         * host address, which the next model's mapping may reuse */
        be_backend *cuda = NULL;
        if (be_cuda_new(&cuda, 0, &err)) {
            fprintf(stderr, "golden_cuda: %s\n", err.msg);
            return 2;
        }
        int rc_cuda = run_case(dir, &c, m, cuda, 1, ref_p, ref_g, &cp, &cg, &err);
        be_free(cuda);
        char cuda_msg[WK_ERROR_MSG_CAP];
        snprintf(cuda_msg, sizeof cuda_msg, "%s", rc_cuda ? err.msg : "");
        int rc_cpu = run_case(dir, &c, m, cpu, 0, ref_p, ref_g, &up, &ug, &err);
        const char *name = strrchr(c.model, '/') ? strrchr(c.model, '/') + 1 : c.model;
        int ok = !rc_cuda && cp <= c.tol && cg <= c.tol;
        ok ? n_pass++ : n_fail++;
        printf("%-4s %-29s %7.3f %12.5f %12.5f %12.5f %12.5f%s%s\n", ok ? "ok" : "FAIL", name, c.tol, cp, cg,
               rc_cpu ? NAN : up, rc_cpu ? NAN : ug, rc_cuda ? "  cuda error: " : "", cuda_msg);
        n_fail += golden_steps_check(m, c.tokens, c.n_tokens, name);
        fflush(stdout);
        model_free(m);
        free(ref_p);
        free(ref_g);
    }
    fclose(f);
    be_free(cpu);
    printf("golden on cuda: %d passed, %d failed (max |logit diff| vs llama.cpp CPU, prompt = one 64-token batch, gen = 16 decode steps)\n",
           n_pass, n_fail);
    return n_fail ? 1 : 0;
}
