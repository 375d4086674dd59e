/* Forward pass of `llama` and `qwen2` (spec architectures.md 4, 5):
 *   x = embed(tokens)
 *   per layer:  n = RMSNorm(x; attn_norm)
 *               q, k, v = W_q n (+b), W_k n (+b), W_v n (+b)    (qwen2 has biases)
 *               q, k = RoPE(q), RoPE(k)                         (llama NORM, qwen2 NEOX)
 *               x = x + W_o · Attn(q, k, v)
 *               x = x + FFN(RMSNorm(x; ffn_norm))               (SwiGLU)
 *   logits = W_out · RMSNorm(x; output_norm)                    (forward.c's output step) */
#include "model/model_impl.h"

static int llama_attention(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, uint32_t il,
                           const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t H = (int32_t)hp->n_head, Hkv = (int32_t)hp->n_head_kv, dk = (int32_t)hp->d_k;
    TRY(model_qkv(be, s, ly, b, err));
    be_rope(be, s->q, b->n_t, (size_t)H * dk, H, dk, s->rope_cs, &hp->rope);
    be_rope(be, s->k, b->n_t, (size_t)Hkv * dk, Hkv, dk, s->rope_cs, &hp->rope);
    TRY(model_attend(m, be, s, b, il, s->q, (size_t)H * dk, (size_t)dk, err));
    return model_linear(be, b, &ly->wo, &ly->bo, s->att, s->tmp, err);
}

int llama_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, n = (int64_t)b->n_t * E;
    TRY(model_embed(m, be, s, b, err));
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        TRY(model_part_enter(m, &be, &s, il, b->n_t, err));
        const model_layer *ly = &m->layers[il];
        be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->attn_norm), hp->eps);
        TRY(llama_attention(m, be, s, ly, il, b, err));
        be_add(be, s->x, s->x, s->tmp, n);
        be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->ffn_norm), hp->eps);
        TRY(model_ffn_dense(be, s, b, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, s->cur, s->tmp, err));
        be_add(be, s->x, s->x, s->tmp, n);
    }
    return 0;
}
