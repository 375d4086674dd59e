/* Mixture-of-experts FFN shared by qwen3moe and qwen35moe (spec 7, 9):
 *   p = softmax(W_router · u) over all experts → top-k → renormalize
 *   routed = Σ_j w_j · SwiGLU_expert(e_j)(u)
 *   qwen35moe adds a shared expert gated per token: + σ(w_shgate · u) · SwiGLU_shared(u) */
#include "model/model_impl.h"

int model_ffn_moe(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, const float *in,
                  int32_t n_t, float *out, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t k = (int32_t)hp->n_expert_used;
    TRY(be_matmul(be, &ly->ffn_gate_inp, in, n_t, s->router, err));
    be_moe_route(be, s->router, n_t, (int32_t)hp->n_expert, k, s->expert_ids, s->expert_w);
    const bool has_shared = ly->ffn_gate_inp_shexp.data != NULL;
    const be_moe_shared shared = {&ly->ffn_gate_shexp, &ly->ffn_up_shexp, &ly->ffn_down_shexp, s->sh_gate};
    if (has_shared) TRY(be_matmul(be, &ly->ffn_gate_inp_shexp, in, n_t, s->sh_gate, err));
    be_moe_args a = {
        .gate = &ly->ffn_gate_exps,
        .up = &ly->ffn_up_exps,
        .down = &ly->ffn_down_exps,
        .u = in,
        .n_t = n_t,
        .k = k,
        .ids = s->expert_ids,
        .weights = s->expert_w,
        .out = out,
        .shared = has_shared && be_moe_takes_shared(be) ? &shared : NULL,
    };
    TRY(be_moe_ffn(be, &a, err));
    if (!has_shared || a.shared) return 0;
    /* shared expert op by op: its output lands in moe_out */
    TRY(model_ffn_dense(be, s, &ly->ffn_gate_shexp, &ly->ffn_up_shexp, &ly->ffn_down_shexp, in, n_t, s->moe_out,
                        err));
    be_add_scaled_sigmoid(be, out, s->moe_out, s->sh_gate, n_t, hp->n_embd);
    return 0;
}
