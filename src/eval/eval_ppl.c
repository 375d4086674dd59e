/* Perplexity (eval_ppl.h). */
#include "eval/eval_ppl.h"

#include <math.h>
#include <string.h>

#include "engine/sequence.h"

#define PPL_CHUNK 64 /* logits rows per prefill call: 64 x 248k vocab x 4 B = 63 MB at most */

/* -log softmax(row)[tok], in double. */
static double nll(const float *row, int32_t n_vocab, int32_t tok)
{
    float mx = row[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (row[i] > mx) mx = row[i];
    double s = 0;
    for (int32_t i = 0; i < n_vocab; i++) s += exp((double)row[i] - mx);
    return -((double)row[tok] - mx - log(s));
}

int ev_perplexity(eng_ctx *ctx, const int32_t *ids, int32_t n, int32_t window, ev_ppl_result *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < 2 || window < 2) return wk_fail(err, WK_EINVAL, "perplexity: need at least 2 tokens and a window of 2");
    const int32_t n_vocab = eng_n_vocab(ctx);
    double sum = 0;
    int rc = WK_OK;
    for (int32_t w0 = 0; w0 + 1 < n && rc == 0; w0 += window) {
        const int32_t len = n - w0 < window ? n - w0 : window;
        if (len < 2) break;
        eng_seq *seq = NULL;
        if ((rc = eng_seq_new(&seq, ctx, len, err))) break;
        eng_prefill_opts po = {.all_logits = true};
        /* row r of a chunk predicts the token after it: the window's tokens 1..len-1 */
        for (int32_t c0 = 0; c0 < len - 1 && rc == 0; c0 += PPL_CHUNK) {
            const int32_t cn = len - 1 - c0 < PPL_CHUNK ? len - 1 - c0 : PPL_CHUNK;
            if ((rc = eng_prefill(ctx, seq, ids + w0 + c0, cn, &po, err))) break;
            int32_t rows = 0;
            const float *lg = eng_logits_all(ctx, &rows);
            if (rows != cn) {
                rc = wk_fail(err, WK_EINVAL, "perplexity: %d logit rows for %d tokens", rows, cn);
                break;
            }
            for (int32_t r = 0; r < cn; r++) {
                const int32_t next = ids[w0 + c0 + r + 1];
                if (next < 0 || next >= n_vocab) {
                    rc = wk_fail(err, WK_EINVAL, "perplexity: token id %d outside the vocabulary", next);
                    break;
                }
                sum += nll(lg + (size_t)r * (size_t)n_vocab, n_vocab, next);
                out->n_scored++;
            }
        }
        eng_seq_free(seq);
        out->n_windows++;
    }
    if (rc) return rc;
    out->nll_mean = sum / out->n_scored;
    out->ppl = exp(out->nll_mean);
    return WK_OK;
}
