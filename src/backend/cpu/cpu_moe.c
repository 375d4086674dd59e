/* CPU MoE ops: softmax top-k routing and the routed-expert SwiGLU FFN.
 * The FFN groups the batch's tokens by expert so that each expert's weights
 * are streamed once per batch (gathered matmul), then scatters the weighted
 * expert outputs back to their tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul_packed.h"

void cpu_op_moe_route(be_backend *be, const float *logits, int64_t n_t, int32_t n_expert, int32_t k,
                      int32_t *ids, float *weights)
{
    (void)be;
    for (int64_t t = 0; t < n_t; t++) {
        const float *z = logits + t * n_expert;
        float mx = -INFINITY;
        for (int32_t e = 0; e < n_expert; e++) mx = z[e] > mx ? z[e] : mx;
        double sum = 0.0;
        for (int32_t e = 0; e < n_expert; e++) sum += exp((double)(z[e] - mx));
        int32_t *id = ids + t * k;
        float *w = weights + t * k;
        /* top-k by repeated selection: k is small (≤ 16); ties go to the lower id */
        float sel = 0.0f;
        for (int32_t j = 0; j < k; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < n_expert; e++) {
                int taken = 0;
                for (int32_t q = 0; q < j; q++) taken |= id[q] == e;
                if (taken) continue;
                if (best < 0 || z[e] > z[best]) best = e;
            }
            id[j] = best;
            w[j] = (float)(exp((double)(z[best] - mx)) / sum);
            sel += w[j];
        }
        /* renormalize over the selected experts; the floor is llama.cpp's guard against 0 */
        float denom = sel > 6.1035e-5f ? sel : 6.1035e-5f;
        for (int32_t j = 0; j < k; j++) w[j] /= denom;
    }
}

int cpu_op_moe_ffn(be_backend *be, const be_moe_args *a, wk_error *err)
{
    cpu_backend *cb = cpu_of(be);
    const bool fused = a->up->data == NULL;
    const int64_t n_embd = a->gate->ne[0];
    const int64_t n_ff = fused ? a->gate->ne[1] / 2 : a->gate->ne[1];
    const int64_t n_expert = a->gate->ne[2];
    const int64_t n_pairs = (int64_t)a->n_t * a->k;

    /* row lists: token row and pair index (t*k + slot) of every pair grouped by
     * expert, 0..n-1, the inverse permutation, and per-expert start/cursor */
    size_t need_rows = 4 * (size_t)n_pairs + 2 * (size_t)n_expert + 1;
    if (cb->moe_rows_cap < need_rows) {
        int32_t *p = realloc(cb->moe_rows, need_rows * sizeof *p);
        if (!p) return wk_fail(err, WK_ENOMEM, "moe: out of memory");
        cb->moe_rows = p;
        cb->moe_rows_cap = need_rows;
    }
    int32_t *tok = cb->moe_rows, *pair = tok + n_pairs, *iota = pair + n_pairs;
    int32_t *where = iota + n_pairs, *start = where + n_pairs, *cursor = start + n_expert + 1;
    for (int64_t i = 0; i < n_pairs; i++) iota[i] = (int32_t)i;
    /* counting sort of the pairs by expert (stable) */
    memset(start, 0, sizeof(int32_t) * (size_t)(n_expert + 1));
    for (int64_t i = 0; i < n_pairs; i++) {
        int32_t e = a->ids[i];
        if (e < 0 || e >= n_expert) return wk_fail(err, WK_EINVAL, "moe: expert id %d out of range", e);
        start[e + 1]++;
    }
    for (int64_t e = 0; e < n_expert; e++) start[e + 1] += start[e];
    for (int64_t e = 0; e < n_expert; e++) cursor[e] = start[e];
    for (int64_t i = 0; i < n_pairs; i++) {
        int32_t at = cursor[a->ids[i]]++;
        pair[at] = (int32_t)i;
        tok[at] = (int32_t)(i / a->k);
        where[i] = at;
    }

    /* activations: gate [n_pairs][n_ff], up [n_pairs][n_ff], down [n_pairs][n_embd] */
    size_t need = (size_t)n_pairs * (2 * n_ff + n_embd);
    if (cpu_buf_reserve(&cb->shared, need)) return wk_fail(err, WK_ENOMEM, "moe: out of memory");
    float *hg = cb->shared.p, *hu = hg + (size_t)n_pairs * n_ff, *hd = hu + (size_t)n_pairs * n_ff;

    for (int64_t e = 0; e < n_expert; e++) {
        int32_t b = start[e], n = start[e + 1] - start[e];
        if (n == 0) continue;
        struct cpu_packed vg, vu, vd; /* packed sub-views (fused gate_up halves) */
        cpu_weight cg = cpu_expert_weight(a->gate, e, 0, n_ff, &vg);
        cpu_weight cu = fused ? cpu_expert_weight(a->gate, e, n_ff, n_ff, &vu) : cpu_expert_weight(a->up, e, 0, n_ff, &vu);
        cpu_weight cd = cpu_expert_weight(a->down, e, 0, n_embd, &vd);
        float *g = hg + (size_t)b * n_ff, *u = hu + (size_t)b * n_ff, *d = hd + (size_t)b * n_embd;
        const unsigned fl = cpu_mm_flags(cb);
        int rc = cpu_matmul_gather_ex(cb->pool, &cg, a->u, n_embd, tok + b, g, n_ff, iota, n, &cb->mm_scratch, fl,
                                      err);
        if (!rc)
            rc = cpu_matmul_gather_ex(cb->pool, &cu, a->u, n_embd, tok + b, u, n_ff, iota, n, &cb->mm_scratch, fl,
                                      err);
        if (rc) return wk_fail_prefix(err, "moe expert %lld of %s", (long long)e, a->gate->name);
        for (int64_t i = 0; i < (int64_t)n * n_ff; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        rc = cpu_matmul_ex(cb->pool, &cd, g, n_ff, n, d, n_embd, &cb->mm_scratch, fl, err);
        if (rc) return wk_fail_prefix(err, "moe expert %lld of %s", (long long)e, a->down->name);
    }

    /* scatter: out[t] = Σ_slot w · down row, in slot order for every token */
    for (int32_t t = 0; t < a->n_t; t++) {
        float *o = a->out + (size_t)t * n_embd;
        memset(o, 0, sizeof(float) * (size_t)n_embd);
        for (int32_t s = 0; s < a->k; s++) {
            int64_t i = (int64_t)t * a->k + s;
            cb->vec->axpy(o, a->weights[i], hd + (size_t)where[i] * n_embd, (int)n_embd);
        }
    }
    return 0;
}
