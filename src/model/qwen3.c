/* Forward pass of `qwen3` and `qwen3moe` (spec architectures.md 6, 7):
 *   x = embed(tokens)
 *   per layer:  n = RMSNorm(x; attn_norm)
 *               q, k, v = W_q n, W_k n, W_v n
 *               q, k = RMSNorm per head (attn_q_norm, attn_k_norm), then NEOX RoPE
 *               x = x + W_o · Attn(q, k, v)
 *               u = RMSNorm(x; ffn_norm)
 *               x = x + FFN(u)     dense SwiGLU (qwen3) or routed MoE (qwen3moe)
 *   logits = W_out · RMSNorm(x; output_norm)                 (forward.c's output step) */
#include "model/model_impl.h"

static int qwen3_attention(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, uint32_t il,
                           const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t H = (int32_t)hp->n_head, Hkv = (int32_t)hp->n_head_kv, dk = (int32_t)hp->d_k;
    const int32_t n_t = b->n_t;
    TRY(model_qkv(be, s, ly, b, err));
    be_rms_norm(be, s->q, dk, s->q, dk, (int64_t)n_t * H, dk, wf32(&ly->q_norm), hp->eps);
    be_rms_norm(be, s->k, dk, s->k, dk, (int64_t)n_t * Hkv, dk, wf32(&ly->k_norm), hp->eps);
    be_rope(be, s->q, n_t, (size_t)H * dk, H, dk, s->rope_cs, &hp->rope);
    be_rope(be, s->k, n_t, (size_t)Hkv * dk, Hkv, dk, s->rope_cs, &hp->rope);
    TRY(model_attend(m, be, s, b, il, s->q, (size_t)H * dk, (size_t)dk, err));
    return model_mm(be, b, &ly->wo, s->att, s->tmp, err);
}

int qwen3_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, n = (int64_t)b->n_t * E;
    const bool moe = m->arch == MODEL_ARCH_QWEN3MOE;
    TRY(model_embed(m, be, s, b, err));
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        TRY(model_part_enter(m, &be, &s, il, b->n_t, err));
        const model_layer *ly = &m->layers[il];
        be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->attn_norm), hp->eps);
        TRY(qwen3_attention(m, be, s, ly, il, b, err));
        be_add(be, s->x, s->x, s->tmp, n);
        be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->ffn_norm), hp->eps);
        if (moe)
            TRY(model_ffn_moe(m, be, s, ly, b, s->cur, s->tmp, err));
        else
            TRY(model_ffn_dense(be, s, b, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, s->cur, s->tmp, err));
        be_add(be, s->x, s->x, s->tmp, n);
    }
    return 0;
}
