/* Paired comparison of two attention policies (see eval_paired.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_paired.h"

/* log Σ exp(x) in double. */
static double log_sum_exp(const float *x, int32_t n)
{
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

double ev_kl_logits(const float *p_logits, const float *q_logits, int32_t n)
{
    double lp = log_sum_exp(p_logits, n), lq = log_sum_exp(q_logits, n), kl = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double a = (double)p_logits[i] - lp, b = (double)q_logits[i] - lq;
        if (a < -745.0) continue; /* p underflows to 0: no contribution */
        kl += exp(a) * (a - b);
    }
    return kl > 0.0 ? kl : 0.0; /* rounding can dip below 0 */
}

/* Reference pass: keeps every position's logits and greedy choice. */
typedef struct ref_trace {
    float *logits;     /* [cap][V] */
    int32_t *greedy;   /* [cap] */
    int32_t n, cap, V;
    bool oom;
} ref_trace;

static int32_t record_ref(void *user, int32_t step, const float *logits, int32_t V, int32_t greedy)
{
    ref_trace *t = user;
    if (step < t->cap && !t->oom) {
        memcpy(t->logits + (size_t)step * V, logits, sizeof(float) * (size_t)V);
        t->greedy[step] = greedy;
        t->n = step + 1;
    }
    return -1;
}

typedef struct other_trace {
    const ref_trace *ref;
    ev_paired_result *r;
    double kl_sum;
} other_trace;

static int32_t compare_other(void *user, int32_t step, const float *logits, int32_t V, int32_t greedy)
{
    other_trace *o = user;
    const ref_trace *t = o->ref;
    if (step >= t->n) return -1;
    const float *rl = t->logits + (size_t)step * V;
    double kl = ev_kl_logits(rl, logits, V);
    ev_paired_result *r = o->r;
    r->positions++;
    o->kl_sum += kl;
    if (kl > r->kl_max) r->kl_max = kl;
    if (memcmp(rl, logits, sizeof(float) * (size_t)V) != 0) r->logits_identical = false;
    if (greedy == t->greedy[step]) r->top1_agree++;
    else if (r->first_divergence < 0) {
        r->first_divergence = step;
        r->ref_token = t->greedy[step];
        r->other_token = greedy;
    }
    return t->greedy[step]; /* teacher forcing: stay on the reference answer */
}

int ev_paired_local(ev_local *l, const int32_t *ids, int32_t n, int32_t max_tokens, const be_attn_policy *ref,
                    const be_attn_policy *other, ev_paired_result *r, wk_error *err)
{
    memset(r, 0, sizeof *r);
    r->first_divergence = -1;
    r->logits_identical = true;
    r->prompt_tokens = n;
    ref_trace t = {0};
    t.V = eng_n_vocab(ev_local_ctx(l));
    t.cap = max_tokens + 1; /* answer tokens and the stop position */
    t.logits = malloc(sizeof(float) * (size_t)t.V * (size_t)t.cap);
    t.greedy = malloc(sizeof(int32_t) * (size_t)t.cap);
    if (!t.logits || !t.greedy) {
        free(t.logits);
        free(t.greedy);
        return wk_fail(err, WK_ENOMEM, "paired: out of memory for %d rows of logits", t.cap);
    }
    /* max_tokens + 1 steps so the position after the last answer token (the
     * stop decision) is compared too; the answer text keeps max_tokens. */
    int32_t *ans = NULL, n_ans = 0;
    int rc = ev_local_generate(l, ids, n, max_tokens, ref, record_ref, &t, &ans, &n_ans, &r->ref_answer,
                               &r->ref_prefill_ms, err);
    free(ans);
    if (!rc) {
        other_trace o = {&t, r, 0.0};
        rc = ev_local_generate(l, ids, n, t.n, other, compare_other, &o, NULL, NULL, NULL, &r->other_prefill_ms, err);
        r->kl_mean = r->positions ? o.kl_sum / r->positions : 0.0;
        r->identical = r->first_divergence < 0 && r->positions == t.n;
    }
    free(t.logits);
    free(t.greedy);
    if (rc) ev_paired_result_free(r);
    return rc;
}

void ev_paired_result_free(ev_paired_result *r)
{
    free(r->ref_answer);
    r->ref_answer = NULL;
}
