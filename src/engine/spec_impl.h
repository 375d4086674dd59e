/* Internals shared by the draft sources of engine/spec_*.c. */
#ifndef WICK_ENGINE_SPEC_IMPL_H
#define WICK_ENGINE_SPEC_IMPL_H

#include "engine/spec.h"

/* Empties a proposal; returns k capped at ENG_SPEC_MAX_DRAFT. */
static inline int32_t draft_begin(eng_draft *out, int32_t k)
{
    out->n = 0;
    out->has_q = false;
    return k > ENG_SPEC_MAX_DRAFT ? ENG_SPEC_MAX_DRAFT : k;
}

/* How a draft source turns logits into its next draft: the greedy pick, or a draw from
 * the distribution eng_sampler_dist gives (kept as a dense q for the acceptance rule). */
typedef struct spec_picker {
    int32_t n_vocab;
    eng_sampler *smp;              /* sampling drafts: the request's knobs, no penalties or bias */
    eng_sampler_params params;     /* what smp was made with */
    int32_t *ids;                  /* [n_vocab] scratch for eng_sampler_dist */
    float *probs;                  /* [n_vocab] */
    float *q[ENG_SPEC_MAX_DRAFT];  /* [n_vocab] each, zero outside the last draw's support */
} spec_picker;

/* Gets the picker ready for a step (a new sampler when the knobs changed). WK_ENOMEM. */
int spec_picker_prepare(spec_picker *pk, const eng_draft_sampling *ds, int32_t n_vocab, wk_error *err);

/* Draft i of out from these logits (ds as prepared): out->tok[i] and, when sampling,
 * out->q[i]. Returns the token, -1 if every logit is -inf / NaN. */
int32_t spec_picker_pick(spec_picker *pk, const eng_draft_sampling *ds, const float *logits, int32_t i,
                         eng_draft *out);

void spec_picker_free(spec_picker *pk);

#endif
