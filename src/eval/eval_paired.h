/* Paired comparison of two attention policies on the same prompt (wick eval
 * paired): the greedy answer under the reference policy (dense), then the
 * other policy (approx) teacher-forced along that answer, so both next-token
 * distributions are compared at the same answer positions. */
#ifndef WICK_EVAL_EVAL_PAIRED_H
#define WICK_EVAL_EVAL_PAIRED_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "eval/eval_local.h"
#include "util/err.h"

/* KL(P || Q) in nats of P = softmax(p_logits), Q = softmax(q_logits), n
 * entries; computed in double, 0 for identical inputs. */
double ev_kl_logits(const float *p_logits, const float *q_logits, int32_t n);

typedef struct ev_paired_result {
    int32_t prompt_tokens;
    int32_t positions;       /* answer positions compared (answer tokens + the stop, if any) */
    bool identical;          /* greedy answers identical (every position agrees on the top-1) */
    int32_t first_divergence;/* first answer position where the top-1 differs, -1 if none */
    int32_t ref_token, other_token; /* the two choices at first_divergence */
    int32_t top1_agree;      /* positions where the two top-1 tokens agree */
    double kl_mean, kl_max;  /* KL(ref || other) over the positions */
    bool logits_identical;   /* every compared distribution bit-identical */
    double ref_prefill_ms, other_prefill_ms;
    char *ref_answer;        /* malloc'd */
} ev_paired_result;

/* Runs the prompt ids under ref (NULL = dense) greedily up to max_tokens,
 * then under other along the same answer. */
int ev_paired_local(ev_local *l, const int32_t *ids, int32_t n, int32_t max_tokens, const be_attn_policy *ref,
                    const be_attn_policy *other, ev_paired_result *r, wk_error *err);
void ev_paired_result_free(ev_paired_result *r);

#endif
