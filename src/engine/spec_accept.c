/* The speculative sampling rule (Leviathan et al. 2023, Chen et al. 2023): accepting a
 * draft d ~ q with probability min(1, p(d)/q(d)) and otherwise drawing from the
 * normalized residual max(0, p − q) yields tokens distributed exactly as p. */
#include <stdlib.h>
#include <string.h>

#include "engine/spec_impl.h"

/* The residual's weight at token i. */
static double residual(const float *p, const float *q, int32_t d, int32_t i)
{
    double r = (double)p[i] - (q ? (double)q[i] : i == d ? 1.0 : 0.0);
    return r > 0 ? r : 0;
}

/* Draws from weights w(i) = residual (or p itself when from_p) with u in [0, 1). */
static int32_t draw(const float *p, const float *q, int32_t n_vocab, int32_t d, bool from_p, double total, double u)
{
    double target = u * total, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n_vocab; i++) {
        double w = from_p ? (p[i] > 0 ? (double)p[i] : 0) : residual(p, q, d, i);
        if (w <= 0) continue;
        acc += w;
        last = i;
        if (target < acc) return i;
    }
    return last; /* rounding: u landed on the total */
}

int32_t eng_spec_accept(const float *p, const float *q, int32_t n_vocab, int32_t d, double u_accept,
                        double u_resample)
{
    const double qd = q ? (double)q[d] : 1.0;
    if (qd > 0 && u_accept * qd < (double)p[d]) return d;
    double total = 0;
    for (int32_t i = 0; i < n_vocab; i++) total += residual(p, q, d, i);
    if (total > 0) return draw(p, q, n_vocab, d, false, total, u_resample);
    double mass = 0;
    for (int32_t i = 0; i < n_vocab; i++) mass += p[i] > 0 ? (double)p[i] : 0;
    return mass > 0 ? draw(p, q, n_vocab, d, true, mass, u_resample) : d;
}

/* ---- the draft sources' picks ------------------------------------------------------- */

int spec_picker_prepare(spec_picker *pk, const eng_draft_sampling *ds, int32_t n_vocab, wk_error *err)
{
    if (!ds || !ds->sample) {
        pk->n_vocab = n_vocab;
        return 0;
    }
    eng_sampler_params p = ds->params;
    /* a draft only has to be drawn from the q it reports: penalties would buy nothing */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = p.frequency_penalty = 0.0f;
    if (pk->smp && pk->n_vocab == n_vocab && !memcmp(&p, &pk->params, sizeof p)) return 0;
    spec_picker_free(pk);
    pk->n_vocab = n_vocab;
    pk->params = p;
    int rc = eng_sampler_new(&pk->smp, &p, n_vocab, err);
    if (rc) return rc;
    pk->ids = malloc(sizeof(int32_t) * (size_t)n_vocab);
    pk->probs = malloc(sizeof(float) * (size_t)n_vocab);
    bool ok = pk->ids && pk->probs;
    for (int i = 0; i < ENG_SPEC_MAX_DRAFT; i++) ok = ok && (pk->q[i] = calloc((size_t)n_vocab, sizeof(float)));
    if (!ok) {
        spec_picker_free(pk);
        return wk_fail(err, WK_ENOMEM, "speculation: out of memory for draft distributions");
    }
    return 0;
}

int32_t spec_picker_pick(spec_picker *pk, const eng_draft_sampling *ds, const float *logits, int32_t i,
                         eng_draft *out)
{
    if (!ds || !ds->sample || !pk->smp) return out->tok[i] = eng_argmax(logits, pk->n_vocab);
    float *q = pk->q[i];
    memset(q, 0, sizeof(float) * (size_t)pk->n_vocab);
    int32_t n = eng_sampler_dist(pk->smp, logits, pk->ids, pk->probs);
    if (n <= 0) return out->tok[i] = -1;
    for (int32_t j = 0; j < n; j++) q[pk->ids[j]] = pk->probs[j];
    double u = eng_sampler_uniform(pk->smp), acc = 0;
    int32_t j = 0;
    while (j < n - 1 && u >= (acc += pk->probs[j])) j++;
    out->q[i] = q;
    out->has_q = true;
    return out->tok[i] = pk->ids[j];
}

void spec_picker_free(spec_picker *pk)
{
    eng_sampler_free(pk->smp);
    free(pk->ids);
    free(pk->probs);
    for (int i = 0; i < ENG_SPEC_MAX_DRAFT; i++) free(pk->q[i]);
    memset(pk, 0, sizeof *pk);
}
