/* Perplexity of a token sequence under a model: the quality sample of
 * `wick sheet` (held-out text). The text is cut into windows of `window`
 * tokens, each evaluated on a fresh sequence (no context carried over);
 * every token of a window but its first is scored:
 *   ppl = exp(mean over scored tokens of -log softmax(logits)[token]).
 * Logits come in chunks of at most 64 rows, so memory stays at 64 x n_vocab
 * floats whatever the window. */
#ifndef WICK_EVAL_EVAL_PPL_H
#define WICK_EVAL_EVAL_PPL_H

#include <stdint.h>

#include "engine/context.h"
#include "util/err.h"

typedef struct ev_ppl_result {
    double ppl;
    double nll_mean;    /* nats per scored token */
    int32_t n_scored;
    int32_t n_windows;
} ev_ppl_result;

/* WK_EINVAL when fewer than 2 tokens or window < 2; engine errors pass
 * through (a token id outside the vocabulary, out of memory). */
int ev_perplexity(eng_ctx *ctx, const int32_t *ids, int32_t n, int32_t window, ev_ppl_result *out, wk_error *err);

#endif
