/* Forward pass of `qwen35` and `qwen35moe` (spec architectures.md 8, 9): a
 * hybrid stack where most layers are Gated DeltaNet (linear attention with a
 * recurrent state) and every full_attention_interval-th layer is gated full
 * attention.
 *   x = embed(tokens)
 *   per layer:  n = RMSNorm(x; attn_norm)
 *               x = x + (GatedAttention(n) or GatedDeltaNet(n))
 *               x = x + FFN(RMSNorm(x; post_attention_norm))   dense SwiGLU or MoE + shared expert
 *   logits = W_out · RMSNorm(x; output_norm)
 * Norm weights already carry the "1 + w" of the checkpoint (converter). */
#include "model/model_impl.h"

/* The scan runs token by token, as llama.cpp's fused CPU op does: on a CPU it
 * costs ~4·d_k·d_v flops per token and head (a few % of the layer's matmuls)
 * and matches the reference bit-closely whatever the chunking of the prompt.
 * The chunked WY form (be_gdn_args.chunked) is there for backends that need
 * the parallelism. */
#define GDN_USE_CHUNKED false

/* Gated full attention (8.4): W_q yields per head [query | gate]; the output is
 * multiplied by σ(gate) before W_o. */
static int gated_attention(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, uint32_t il,
                           const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t H = (int32_t)hp->n_head, Hkv = (int32_t)hp->n_head_kv, dk = (int32_t)hp->d_k;
    const int32_t n_t = b->n_t;
    const size_t q_stride = (size_t)2 * H * dk; /* token stride of the interleaved query|gate rows */
    TRY(model_qkv(be, s, ly, b, err));
    be_rms_norm(be, s->q, 2 * dk, s->q, 2 * dk, (int64_t)n_t * H, dk, wf32(&ly->q_norm), hp->eps);
    be_rms_norm(be, s->k, dk, s->k, dk, (int64_t)n_t * Hkv, dk, wf32(&ly->k_norm), hp->eps);
    be_rope(be, s->q, n_t, q_stride, H, 2 * dk, s->rope_cs, &hp->rope);
    be_rope(be, s->k, n_t, (size_t)Hkv * dk, Hkv, dk, s->rope_cs, &hp->rope);
    TRY(model_attend(m, be, s, b, il, s->q, q_stride, (size_t)2 * dk, err));
    be_mul_sigmoid(be, s->att, hp->d_v, s->q + dk, 2 * dk, (int64_t)n_t * H, hp->d_v);
    return model_mm(be, b, &ly->wo, s->att, s->tmp, err);
}

/* The DeltaNet scan's arguments for n_t rows from row r on (conv outputs in s->conv). */
static be_gdn_args gdn_args(const model_hparams *hp, const model_layer *ly, model_scratch *s, size_t r, int32_t n_t,
                            float *state)
{
    const int32_t Hk = (int32_t)hp->ssm_n_hk, Hv = (int32_t)hp->ssm_n_hv;
    const size_t key_dim = (size_t)Hk * hp->ssm_d_k, value_dim = (size_t)Hv * hp->ssm_d_v;
    const size_t conv_dim = 2 * key_dim + value_dim;
    float *conv = s->conv + r * conv_dim;
    return (be_gdn_args){
        .q = conv,
        .k = conv + key_dim,
        .v = conv + 2 * key_dim,
        .qk_stride = conv_dim,
        .v_stride = conv_dim,
        .alpha = s->alpha + r * (size_t)Hv,
        .beta = s->beta + r * (size_t)Hv,
        .ssm_a = wf32(&ly->ssm_a),
        .dt_bias = wf32(&ly->ssm_dt),
        .n_t = n_t,
        .n_hk = Hk,
        .n_hv = Hv,
        .d_k = (int32_t)hp->ssm_d_k,
        .d_v = (int32_t)hp->ssm_d_v,
        .eps = hp->eps,
        .state = state,
        .out = s->gdn_o + r * value_dim,
        .out_stride = value_dim,
        .chunked = GDN_USE_CHUNKED,
    };
}

/* A decode batch of several sequences: one token each, in row order. */
static bool one_token_each(const model_batch *b)
{
    if (b->n_seg < 2) return false;
    for (int32_t i = 0; i < b->n_seg; i++)
        if (b->seg[i].n_t != 1 || b->seg[i].row0 != i) return false;
    return true;
}

#define SEQS_PER_CALL 32 /* sequences per be_ssm_conv_seqs / be_gdn_seqs call */

/* Gated DeltaNet (8.5): projections → causal conv + SiLU → delta-rule scan over
 * the recurrent state (both per sequence; a decode batch's sequences in one call each) →
 * per-head RMSNorm gated by SiLU(z) → W_out. */
static int gated_deltanet(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, uint32_t il,
                          const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t Hv = (int32_t)hp->ssm_n_hv, dv = (int32_t)hp->ssm_d_v;
    const size_t key_dim = (size_t)hp->ssm_n_hk * hp->ssm_d_k, conv_dim = 2 * key_dim + (size_t)Hv * dv;
    const be_weight *proj[4] = {&ly->ssm_qkv, &ly->ssm_z, &ly->ssm_beta, &ly->ssm_alpha};
    float *const proj_out[4] = {s->qkv, s->z, s->beta, s->alpha};
    const float *conv_w = wf32(&ly->ssm_conv1d);
    const int32_t conv_k = (int32_t)hp->ssm_conv_k;
    TRY(model_mm_multi(be, b, proj, 4, s->cur, proj_out, err));
    if (one_token_each(b)) {
        for (int32_t i0 = 0; i0 < b->n_seg; i0 += SEQS_PER_CALL) {
            const int32_t n = b->n_seg - i0 < SEQS_PER_CALL ? b->n_seg - i0 : SEQS_PER_CALL;
            float *conv_state[SEQS_PER_CALL], *ssm_state[SEQS_PER_CALL];
            for (int32_t i = 0; i < n; i++) {
                conv_state[i] = b->seg[i0 + i].layers[il].conv;
                ssm_state[i] = b->seg[i0 + i].layers[il].ssm;
            }
            const size_t r = (size_t)i0;
            be_ssm_conv_seqs(be, s->conv + r * conv_dim, conv_dim, s->qkv + r * conv_dim, conv_dim, n,
                             (int64_t)conv_dim, conv_w, conv_k, conv_state);
            const be_gdn_args g = gdn_args(hp, ly, s, r, n, NULL);
            TRY(be_gdn_seqs(be, &g, ssm_state, err));
        }
    } else {
        for (int32_t i = 0; i < b->n_seg; i++) {
            const model_seg *sg = &b->seg[i];
            model_layer_state *ls = &sg->layers[il];
            const size_t r = (size_t)sg->row0;
            be_ssm_conv(be, s->conv + r * conv_dim, conv_dim, s->qkv + r * conv_dim, conv_dim, sg->n_t,
                        (int64_t)conv_dim, conv_w, conv_k, ls->conv);
            const be_gdn_args g = gdn_args(hp, ly, s, r, sg->n_t, ls->ssm);
            TRY(be_gdn(be, &g, err));
        }
    }
    be_rms_norm_gated(be, s->gdn_o, s->gdn_o, (int64_t)b->n_t * Hv, dv, wf32(&ly->ssm_norm), hp->eps, s->z);
    return model_mm(be, b, &ly->ssm_out, s->gdn_o, s->tmp, err);
}

/* The block shared by the main stack and the MTP block: mixer (attention or DeltaNet)
 * and FFN, each with its residual; il picks each sequence's layer state. */
static int qwen35_block(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, uint32_t il,
                        const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, n = (int64_t)b->n_t * E;
    be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->attn_norm), hp->eps);
    if (ly->recurrent)
        TRY(gated_deltanet(m, be, s, ly, il, b, err));
    else
        TRY(gated_attention(m, be, s, ly, il, b, err));
    be_add(be, s->x, s->x, s->tmp, n);
    be_rms_norm(be, s->cur, E, s->x, E, b->n_t, E, wf32(&ly->ffn_norm), hp->eps);
    if (m->arch == MODEL_ARCH_QWEN35MOE)
        TRY(model_ffn_moe(m, be, s, ly, b, s->cur, s->tmp, err));
    else
        TRY(model_ffn_dense(be, s, b, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, s->cur, s->tmp, err));
    be_add(be, s->x, s->x, s->tmp, n);
    return 0;
}

int qwen35_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err)
{
    TRY(model_embed(m, be, s, b, err));
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        TRY(model_part_enter(m, &be, &s, il, b->n_t, err));
        TRY(qwen35_block(m, be, s, &m->layers[il], il, b, err));
    }
    return 0;
}

/* MTP (8.8): u = W_eh · [RMSNorm(embed(x); enorm) ‖ RMSNorm(h; hnorm)], one full-attention
 * block at the absolute positions pos0.. (RoPE) over its own KV, then its head. */
int qwen35_mtp_forward(const model *m, be_backend *be, model_scratch *s, model_layer_state *kv, int32_t kv_pos0,
                       int32_t pos0, const float *hidden, int32_t n_t, const model_rows *out, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const model_mtp *mt = &m->mtp;
    const int64_t E = hp->n_embd;
    const model_seg seg = {kv, 0, n_t, pos0, kv_pos0, NULL};
    model_grp grp = {0, n_t, false};
    const model_batch b = {n_t, 1, &seg, 1, &grp};
    TRY(model_embed_with(m, be, s, &mt->embd, &b, err));
    be_from_host(be, s->tmp, hidden, sizeof(float) * (size_t)n_t * (size_t)E);
    be_rms_norm(be, s->mtp_in, 2 * E, s->x, E, n_t, E, wf32(&mt->enorm), hp->eps);
    be_rms_norm(be, s->mtp_in + E, 2 * E, s->tmp, E, n_t, E, wf32(&mt->hnorm), hp->eps);
    TRY(be_matmul(be, &mt->eh_proj, s->mtp_in, n_t, s->x, err));
    TRY(qwen35_block(m, be, s, &mt->layer, 0, &b, err));
    return model_output_with(be, s, hp, &mt->head_norm, &mt->head, NULL, n_t, out, err);
}
