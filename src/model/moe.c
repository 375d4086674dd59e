/* Mixture-of-experts FFN shared by qwen3moe and qwen35moe (spec 7, 9):
 *   p = softmax(W_router · u) over all experts → top-k → renormalize
 *   routed = Σ_j w_j · SwiGLU_expert(e_j)(u)
 *   qwen35moe adds a shared expert gated per token: + σ(w_shgate · u) · SwiGLU_shared(u) */
#include "model/model_impl.h"

int model_ffn_moe(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, const model_batch *b,
                  const float *in, float *out, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t k = (int32_t)hp->n_expert_used;
    const size_t E = hp->n_embd;
    const bool has_shared = ly->ffn_gate_inp_shexp.data != NULL;
    /* the router per matmul group, as model_mm takes its product */
    for (int32_t i = 0; i < b->n_grp; i++) {
        const model_grp g = b->grp[i];
        const size_t r = (size_t)g.row0;
        be_rows_as_one(be, g.as_one);
        int rc = be_moe_gate(be, &ly->ffn_gate_inp, has_shared ? &ly->ffn_gate_inp_shexp : NULL, in + r * E, g.n, k,
                             s->router + r * hp->n_expert, s->sh_gate + r, s->expert_ids + r * (size_t)k,
                             s->expert_w + r * (size_t)k, err);
        be_rows_as_one(be, false);
        if (rc) return rc;
    }
    const bool fused_shared = has_shared && be_moe_takes_shared(be);
    /* per matmul group: the experts' matmuls take the group's rows as one call does */
    for (int32_t i = 0; i < b->n_grp; i++) {
        const model_grp g = b->grp[i];
        const size_t r = (size_t)g.row0;
        const be_moe_shared shared = {&ly->ffn_gate_shexp, &ly->ffn_up_shexp, &ly->ffn_down_shexp, s->sh_gate + r};
        be_moe_args a = {
            .gate = &ly->ffn_gate_exps,
            .up = &ly->ffn_up_exps,
            .down = &ly->ffn_down_exps,
            .u = in + r * E,
            .n_t = g.n,
            .k = k,
            .ids = s->expert_ids + r * (size_t)k,
            .weights = s->expert_w + r * (size_t)k,
            .out = out + r * E,
            .shared = fused_shared ? &shared : NULL,
        };
        be_rows_as_one(be, g.as_one);
        int rc = be_moe_ffn(be, &a, err);
        be_rows_as_one(be, false);
        if (rc) return rc;
    }
    if (!has_shared || fused_shared) return 0;
    /* shared expert op by op: its output lands in moe_out */
    TRY(model_ffn_dense(be, s, b, &ly->ffn_gate_shexp, &ly->ffn_up_shexp, &ly->ffn_down_shexp, in, s->moe_out, err));
    be_add_scaled_sigmoid(be, out, s->moe_out, s->sh_gate, b->n_t, hp->n_embd);
    return 0;
}
