/* Perplexity (eval/eval_ppl.h) against llama.cpp's logits: for the golden
 * 64-token sequence of tiny-qwen3-F32 and tiny-qwen35-F32, the perplexity
 * computed from the recorded logits (golden logits/NAME.n64.logits.bin, row i
 * after token i) equals ev_perplexity's within the logits' tolerance; shorter
 * windows score fewer tokens and never see across a window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
#include "eval/eval_ppl.h"
#include "model/model.h"
#include "testutil.h"

typedef struct golden_case {
    int32_t *tokens;
    int n, n_vocab;
    float *logits; /* [n][n_vocab] */
    double tol;
} golden_case;

static int load_case(const char *dir, const char *model_rel, golden_case *g)
{
    json_error_t je;
    json_t *m = json_load_file(path_join(dir, "MANIFEST.json"), 0, &je);
    if (!m) return -1;
    size_t i;
    json_t *c;
    int found = -1;
    json_array_foreach(json_object_get(m, "logit_cases"), i, c) {
        if (strcmp(json_string_value(json_object_get(c, "model")), model_rel) ||
            json_integer_value(json_object_get(c, "n_tokens")) != 64)
            continue;
        json_t *jt = json_object_get(c, "tokens");
        g->n = (int)json_array_size(jt);
        g->n_vocab = (int)json_integer_value(json_object_get(c, "n_vocab"));
        g->tol = json_real_value(json_object_get(c, "tol"));
        g->tokens = malloc(sizeof(int32_t) * (size_t)g->n);
        for (int k = 0; k < g->n; k++) g->tokens[k] = (int32_t)json_integer_value(json_array_get(jt, (size_t)k));
        size_t sz = 0;
        g->logits = read_whole_file(path_join(dir, json_string_value(json_object_get(c, "logits"))), &sz);
        found = g->logits && sz == (size_t)g->n * (size_t)g->n_vocab * 4 ? 0 : -1;
        break;
    }
    json_decref(m);
    return found;
}

/* The reference: llama.cpp's logits, scored the same way (window = all n tokens). */
static double reference_ppl(const golden_case *g, int32_t window, int32_t *scored)
{
    double sum = 0;
    *scored = 0;
    for (int w0 = 0; w0 + 1 < g->n; w0 += window) {
        /* llama.cpp evaluated the whole sequence at once, so only window == n is comparable row for row */
        for (int r = w0; r < w0 + window - 1 && r + 1 < g->n; r++) {
            const float *row = g->logits + (size_t)r * (size_t)g->n_vocab;
            double mx = row[0], s = 0;
            for (int v = 1; v < g->n_vocab; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < g->n_vocab; v++) s += exp(row[v] - mx);
            sum += -(row[g->tokens[r + 1]] - mx - log(s));
            (*scored)++;
        }
    }
    return exp(sum / *scored);
}

static void check_model(const char *dir, const char *model_rel)
{
    golden_case g = {0};
    if (load_case(dir, model_rel, &g)) fail_msg("no n64 logit case for %s", model_rel);
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, model_rel), &err), 0);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 2;
    o.n_ctx = 64;
    eng_ctx *ctx = NULL;
    assert_int_equal(eng_ctx_new(&ctx, m, &o, &err), 0);
    ev_ppl_result r;
    assert_int_equal(ev_perplexity(ctx, g.tokens, g.n, 64, &r, &err), 0);
    int32_t scored;
    double ref = reference_ppl(&g, 64, &scored);
    assert_int_equal(r.n_scored, 63);
    assert_int_equal(scored, 63);
    assert_int_equal(r.n_windows, 1);
    /* logits within tol of llama.cpp's move log-probabilities by at most 2 tol per token */
    printf("%s: perplexity %.4f, llama.cpp's logits give %.4f\n", model_rel, r.ppl, ref);
    assert_true(fabs(log(r.ppl) - log(ref)) <= 2 * g.tol);
    assert_true(fabs(r.ppl - ref) / ref < 0.02);
    /* windows of 16: 4 fresh sequences, 15 tokens scored in each */
    ev_ppl_result w;
    assert_int_equal(ev_perplexity(ctx, g.tokens, g.n, 16, &w, &err), 0);
    assert_int_equal(w.n_windows, 4);
    assert_int_equal(w.n_scored, 60);
    assert_true(w.ppl > 1.0 && isfinite(w.ppl));
    /* bad input */
    assert_int_equal(ev_perplexity(ctx, g.tokens, 1, 16, &w, &err), WK_EINVAL);
    int32_t bad[3] = {1, 2, 99999};
    assert_int_not_equal(ev_perplexity(ctx, bad, 3, 16, &w, &err), 0);
    eng_ctx_free(ctx);
    model_free(m);
    free(g.tokens);
    free(g.logits);
}

static void test_perplexity_matches_llama_cpp_logits(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    check_model(dir, "models/tiny-qwen3-F32.gguf");
    check_model(dir, "models/tiny-qwen35-F32.gguf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_perplexity_matches_llama_cpp_logits),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
