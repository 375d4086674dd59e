/* Forward pass of `llama` and `qwen2` (spec architectures.md 4, 5):
 *   x = embed(tokens)
 *   per layer:  n = RMSNorm(x; attn_norm)
 *               q, k, v = W_q n (+b), W_k n (+b), W_v n (+b)    (qwen2 has biases)
 *               q, k = RoPE(q), RoPE(k)                         (llama NORM, qwen2 NEOX)
 *               x = x + W_o · Attn(q, k, v)
 *               x = x + FFN(RMSNorm(x; ffn_norm))               (SwiGLU)
 *   logits = W_out · RMSNorm(x; output_norm) */
#include "model/model_impl.h"

static int llama_attention(const model *m, be_backend *be, model_scratch *s, const model_layer *ly,
                           model_layer_state *ls, int32_t n_t, int32_t pos0, const be_attn_policy *policy,
                           wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t H = (int32_t)hp->n_head, Hkv = (int32_t)hp->n_head_kv, dk = (int32_t)hp->d_k;
    TRY(model_qkv(be, s, ly, n_t, err));
    be_rope(be, s->q, n_t, (size_t)H * dk, H, dk, s->rope_cs, &hp->rope);
    be_rope(be, s->k, n_t, (size_t)Hkv * dk, Hkv, dk, s->rope_cs, &hp->rope);
    TRY(model_attend(m, be, s, ls, n_t, pos0, s->q, (size_t)H * dk, (size_t)dk, policy, err));
    return model_linear(be, &ly->wo, &ly->bo, s->att, n_t, s->tmp, err);
}

int llama_forward(const model *m, be_backend *be, model_scratch *s, model_state *st, int32_t n_t,
                  const model_rows *out, const be_attn_policy *policy, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, n = (int64_t)n_t * E;
    const int32_t pos0 = st->n_past;
    TRY(model_embed(m, be, s, n_t, pos0, err));
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        TRY(model_part_enter(m, &be, &s, il, n_t, err));
        const model_layer *ly = &m->layers[il];
        be_rms_norm(be, s->cur, E, s->x, E, n_t, E, wf32(&ly->attn_norm), hp->eps);
        TRY(llama_attention(m, be, s, ly, &st->layers[il], n_t, pos0, policy, err));
        be_add(be, s->x, s->x, s->tmp, n);
        be_rms_norm(be, s->cur, E, s->x, E, n_t, E, wf32(&ly->ffn_norm), hp->eps);
        TRY(model_ffn_dense(be, s, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, s->cur, n_t, s->tmp, err));
        be_add(be, s->x, s->x, s->tmp, n);
    }
    return model_output(m, be, s, n_t, out, err);
}
