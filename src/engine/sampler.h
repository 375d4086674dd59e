/* Token sampler: logit bias, repetition/presence/frequency penalties over a
 * window of recent tokens, then greedy or temperature + top-k + top-p + min-p
 * with a seeded PRNG (same seed + same logits → same tokens).
 *
 * Pipeline per token (order matters and is fixed):
 *   logits → + logit_bias → penalties (window of the last penalty_last_n
 *   accepted tokens) → if temperature <= 0 or top_k == 1: argmax (ties →
 *   lowest id) → else top-k → softmax(logits / temperature) → top-p → min-p
 *   → draw.
 * Candidates are narrowed by selection, never by a full sort of the
 * vocabulary: top-k uses a heap of the k largest; top-p/min-p without top-k
 * use a weighted quickselect (expected O(n_vocab)). */
#ifndef WICK_ENGINE_SAMPLER_H
#define WICK_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct eng_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off (whole vocabulary) */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off; keep p >= min_p * p_max */
    float repeat_penalty;    /* 1: off; logit > 0 → logit / rp, else logit * rp */
    float presence_penalty;  /* 0: off; subtract once per token present in window */
    float frequency_penalty; /* 0: off; subtract count × fp */
    int32_t penalty_last_n;  /* window size in tokens; 0: penalties off, -1: whole history */
    uint64_t seed;
} eng_sampler_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties
 * off, penalty_last_n 64, seed 0 (llama-server's defaults). */
void eng_sampler_params_default(eng_sampler_params *p);

typedef struct eng_sampler eng_sampler;

/* Allocates a sampler for a vocabulary of n_vocab tokens. WK_EINVAL on
 * n_vocab <= 0 or out-of-range params (NaN, temperature < 0 is fine = greedy,
 * top_p/min_p outside [0,1], repeat_penalty <= 0). Caller frees. */
int eng_sampler_new(eng_sampler **out, const eng_sampler_params *p, int32_t n_vocab,
                    wk_error *err);
void eng_sampler_free(eng_sampler *s);

/* Additive bias for one token (OpenAI logit_bias); -INFINITY bans it.
 * WK_EINVAL if token is outside [0, n_vocab). Biases persist until reset. */
int eng_sampler_set_bias(eng_sampler *s, int32_t token, float bias, wk_error *err);

/* Picks the next token from logits[n_vocab] (not modified; the sampler
 * works on its own copy). Does not record the token: call
 * eng_sampler_accept with whatever token is actually used (it may differ,
 * e.g. a speculative draft). Returns the token id, or -1 if every logit is
 * -inf / NaN. If prob is non-NULL it receives the chosen token's
 * probability in the final distribution. */
int32_t eng_sampler_sample(eng_sampler *s, const float *logits, float *prob);

/* The distribution eng_sampler_sample draws from for these logits (after bias,
 * penalties, temperature, top-k, top-p, min-p): n candidates, ids[i] with probability
 * probs[i] (they sum to 1; room for n_vocab entries each). Greedy: the argmax alone with
 * probability 1. Returns n, 0 if every logit is -inf / NaN. Draws nothing. */
int32_t eng_sampler_dist(eng_sampler *s, const float *logits, int32_t *ids, float *probs);

/* A uniform draw in [0, 1) from the sampler's seeded generator (speculative acceptance). */
double eng_sampler_uniform(eng_sampler *s);

/* Whether eng_sampler_sample is a plain argmax of the logits as given: greedy (temperature
 * <= 0 or top_k 1) with no logit bias and penalties off. Then eng_decode_greedy may pick
 * instead (eng_sampler_accept is still called). */
bool eng_sampler_is_plain_greedy(const eng_sampler *s);

/* Appends token to the penalty window. Out-of-range ids are ignored. */
void eng_sampler_accept(eng_sampler *s, int32_t token);

/* Clears the penalty window and re-seeds the PRNG with params.seed; keeps
 * logit biases. */
void eng_sampler_reset(eng_sampler *s);

/* Argmax with ties to the lowest id (-1 if n <= 0 or all NaN). */
int32_t eng_argmax(const float *logits, int32_t n);

#endif
