/* Tensor list of a synthetic model.
 *
 * Names, shapes and file order follow llama.cpp's converter output
 * (shared/spec/architectures.md sections 4-9); types come from the one mix
 * rule of quant/quant_mix.h (llama-quantize's): 1-D tensors, norms, routers,
 * ssm_conv1d, ssm_a and ssm_dt stay F32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"
#include "quant/qtypes.h"

#define SYNTH_ALIGNMENT 32 /* GGUF default alignment, what llama.cpp writes */

typedef struct plan_builder {
    const synth_options *o;
    synth_plan *p;
    size_t cap;
    qt_mix_model mix_model;
    qt_mix_state mix_state;
    int failed;
} plan_builder;

static void add(plan_builder *b, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                enum synth_init init, float std)
{
    if (b->failed) return;
    synth_plan *p = b->p;
    if (p->n_tensors == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        synth_tensor *nt = realloc(p->tensors, nc * sizeof *nt);
        if (!nt) { b->failed = 1; return; }
        p->tensors = nt;
        b->cap = nc;
    }
    synth_tensor *t = &p->tensors[p->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = n_dims > 2 ? ne2 : 1;
    t->ne[3] = 1;
    /* never-quantized tensors (norms, routers, conv, ...) are F32, as the converter writes them */
    t->type = qt_mix_choose(&b->o->quant, &b->mix_model, &b->mix_state, name, n_dims, ne0);
    if (t->type == QT_MIX_KEEP) t->type = QT_F32;
    t->init = init;
    t->std = std;
    t->n_elements = (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
    t->n_bytes = qt_row_bytes(qt_traits_of(t->type), ne0) * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
    p->n_params += t->n_elements;
    p->tensor_bytes += t->n_bytes;
    p->data_bytes += (t->n_bytes + SYNTH_ALIGNMENT - 1) / SYNTH_ALIGNMENT * SYNTH_ALIGNMENT;
}

/* Shorthands: a per-layer name, a weight matrix {in, out} with N(0, 1/in)
 * and a norm vector 1 + N(0, 0.1^2). Weight scales follow the golden models
 * (shared/golden/README.md): activations stay O(1) per layer. */
#define NORM_STD 0.1f

static void lname(char *buf, size_t cap, uint32_t il, const char *suffix)
{
    snprintf(buf, cap, "blk.%u.%s", il, suffix);
}

static float inv_sqrt(double x) { return (float)(1.0 / __builtin_sqrt(x)); }

static void add_matrix(plan_builder *b, uint32_t il, const char *suffix, int64_t in, int64_t out)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, 2, in, out, 1, SYNTH_INIT_NORMAL, inv_sqrt((double)in));
}

static void add_experts(plan_builder *b, uint32_t il, const char *suffix, int64_t in, int64_t out, int64_t n_exp)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, 3, in, out, n_exp, SYNTH_INIT_NORMAL, inv_sqrt((double)in));
}

static void add_norm(plan_builder *b, uint32_t il, const char *suffix, int64_t n_elems)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, 1, n_elems, 1, 1, SYNTH_INIT_NORM, NORM_STD);
}

static void add_attention(plan_builder *b, uint32_t il, int gated_q)
{
    const synth_dims *d = &b->o->dims;
    int64_t q_out = (int64_t)d->n_head * d->head_dim * (gated_q ? 2 : 1);
    int64_t kv_out = (int64_t)d->n_head_kv * d->head_dim;
    add_matrix(b, il, "attn_q.weight", d->n_embd, q_out);
    add_matrix(b, il, "attn_k.weight", d->n_embd, kv_out);
    add_matrix(b, il, "attn_v.weight", d->n_embd, kv_out);
    if (d->arch != SYNTH_ARCH_LLAMA) {
        add_norm(b, il, "attn_q_norm.weight", d->head_dim);
        add_norm(b, il, "attn_k_norm.weight", d->head_dim);
    }
    add_matrix(b, il, "attn_output.weight", (int64_t)d->n_head * d->head_dim, d->n_embd);
}

static void add_deltanet(plan_builder *b, uint32_t il)
{
    const synth_dims *d = &b->o->dims;
    int64_t key_dim = (int64_t)d->ssm_n_k_heads * d->ssm_head_dim;
    int64_t value_dim = (int64_t)d->ssm_n_v_heads * d->ssm_head_dim;
    int64_t conv_dim = 2 * key_dim + value_dim;
    char n[64];
    add_matrix(b, il, "attn_qkv.weight", d->n_embd, conv_dim);
    add_matrix(b, il, "attn_gate.weight", d->n_embd, value_dim);
    add_matrix(b, il, "ssm_beta.weight", d->n_embd, d->ssm_n_v_heads);
    add_matrix(b, il, "ssm_alpha.weight", d->n_embd, d->ssm_n_v_heads);
    lname(n, sizeof n, il, "ssm_dt.bias");
    add(b, n, 1, d->ssm_n_v_heads, 1, 1, SYNTH_INIT_UNIFORM, 1.0f); /* dt bias ~ U(-1, 1) */
    lname(n, sizeof n, il, "ssm_a");
    add(b, n, 1, d->ssm_n_v_heads, 1, 1, SYNTH_INIT_SSM_A, 0.0f);
    lname(n, sizeof n, il, "ssm_conv1d.weight");
    add(b, n, 2, d->ssm_conv_kernel, conv_dim, 1, SYNTH_INIT_NORMAL,
        inv_sqrt((double)d->ssm_conv_kernel));
    add_norm(b, il, "ssm_norm.weight", d->ssm_head_dim);
    add_matrix(b, il, "ssm_out.weight", value_dim, d->n_embd);
}

static void add_ffn(plan_builder *b, uint32_t il)
{
    const synth_dims *d = &b->o->dims;
    char n[64];
    int moe = d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE;
    if (!moe) {
        add_matrix(b, il, "ffn_gate.weight", d->n_embd, d->n_ff);
        add_matrix(b, il, "ffn_up.weight", d->n_embd, d->n_ff);
        add_matrix(b, il, "ffn_down.weight", d->n_ff, d->n_embd);
        return;
    }
    /* Router logits ~ N(0, 4): a few experts clearly preferred, as in trained routers. */
    lname(n, sizeof n, il, "ffn_gate_inp.weight");
    add(b, n, 2, d->n_embd, d->n_expert, 1, SYNTH_INIT_NORMAL, 2.0f * inv_sqrt(d->n_embd));
    add_experts(b, il, "ffn_gate_exps.weight", d->n_embd, d->n_ff_exp, d->n_expert);
    add_experts(b, il, "ffn_up_exps.weight", d->n_embd, d->n_ff_exp, d->n_expert);
    add_experts(b, il, "ffn_down_exps.weight", d->n_ff_exp, d->n_embd, d->n_expert);
    if (d->arch == SYNTH_ARCH_QWEN35MOE) {
        lname(n, sizeof n, il, "ffn_gate_inp_shexp.weight");
        add(b, n, 1, d->n_embd, 1, 1, SYNTH_INIT_NORMAL, inv_sqrt(d->n_embd));
        add_matrix(b, il, "ffn_gate_shexp.weight", d->n_embd, d->n_ff_shexp);
        add_matrix(b, il, "ffn_up_shexp.weight", d->n_embd, d->n_ff_shexp);
        add_matrix(b, il, "ffn_down_shexp.weight", d->n_ff_shexp, d->n_embd);
    }
}

int synth_plan_new(const synth_options *o, synth_plan **out, wk_error *err)
{
    *out = NULL;
    int rc = synth_validate(o, err);
    if (rc) return rc;
    const synth_dims *d = &o->dims;
    synth_plan *p = calloc(1, sizeof *p);
    if (!p) return wk_fail(err, WK_ENOMEM, "synth plan: out of memory");
    p->alignment = SYNTH_ALIGNMENT;
    plan_builder b = {.o = o, .p = p};
    int hybrid = d->arch == SYNTH_ARCH_QWEN35 || d->arch == SYNTH_ARCH_QWEN35MOE;
    int moe = d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE;
    b.mix_model.n_layer = d->n_layer;
    b.mix_model.n_attention_wv = d->n_layer; /* one attn_v or attn_qkv per layer */
    b.mix_model.n_expert = moe ? d->n_expert : 0;
    b.mix_model.tied_output = d->tied_embeddings;

    /* Embeddings ~ N(0, (2/sqrt(n_embd))^2): rows of norm ~2; as the tied LM
     * head this gives logits of std ~2, like the golden models. */
    float embd_std = 2.0f * inv_sqrt(d->n_embd);
    add(&b, "token_embd.weight", 2, d->n_embd, d->n_vocab, 1, SYNTH_INIT_NORMAL, embd_std);
    if (d->arch == SYNTH_ARCH_LLAMA && d->llama3_rope)
        add(&b, "rope_freqs.weight", 1, (d->n_rot ? d->n_rot : d->head_dim) / 2, 1, 1,
            SYNTH_INIT_ROPE_FREQS, 0.0f);
    for (uint32_t il = 0; il < d->n_layer; il++) {
        add_norm(&b, il, "attn_norm.weight", d->n_embd);
        if (!hybrid) add_attention(&b, il, 0);
        else if (synth_is_full_attn_layer(d, il)) add_attention(&b, il, 1);
        else add_deltanet(&b, il);
        add_norm(&b, il, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight", d->n_embd);
        add_ffn(&b, il);
    }
    add(&b, "output_norm.weight", 1, d->n_embd, 1, 1, SYNTH_INIT_NORM, NORM_STD);
    if (!d->tied_embeddings)
        add(&b, "output.weight", 2, d->n_embd, d->n_vocab, 1, SYNTH_INIT_NORMAL, embd_std);
    /* The MTP block (spec architectures.md 8.8) as llama.cpp's converter names it: a
     * full-attention layer with the main layers' FFN, its input projection and norms; the
     * embedding and head are the main model's (the optional nextn copies are left out).
     * Last in the file, so the main model's weights are those of the file without it. */
    for (uint32_t il = d->n_layer; il < d->n_layer + d->n_mtp; il++) {
        add_norm(&b, il, "nextn.enorm.weight", d->n_embd);
        add_norm(&b, il, "nextn.hnorm.weight", d->n_embd);
        add_matrix(&b, il, "nextn.eh_proj.weight", 2 * (int64_t)d->n_embd, d->n_embd);
        add_norm(&b, il, "attn_norm.weight", d->n_embd);
        add_attention(&b, il, 1);
        add_norm(&b, il, "post_attention_norm.weight", d->n_embd);
        add_ffn(&b, il);
        add_norm(&b, il, "nextn.shared_head_norm.weight", d->n_embd);
    }
    if (b.failed) {
        synth_plan_free(p);
        return wk_fail(err, WK_ENOMEM, "synth plan: out of memory");
    }
    *out = p;
    return 0;
}

void synth_plan_free(synth_plan *p)
{
    if (!p) return;
    free(p->tensors);
    free(p);
}

bool synth_is_full_attn_layer(const synth_dims *d, uint32_t il)
{
    if (d->arch != SYNTH_ARCH_QWEN35 && d->arch != SYNTH_ARCH_QWEN35MOE) return true;
    uint32_t k = d->full_attn_interval ? d->full_attn_interval : 4;
    return (il + 1) % k == 0;
}
