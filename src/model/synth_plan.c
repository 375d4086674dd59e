/* Tensor list of a synthetic model and the per-tensor type rules.
 *
 * Names, shapes and file order follow llama.cpp's converter output
 * (shared/spec/architectures.md sections 4-9); types follow llama-quantize
 * (shared/spec/gguf.md section 7): 1-D tensors, norms, routers, ssm_conv1d,
 * ssm_a and ssm_dt stay F32; mixes apply the Q4_K_M / Q5_K_M category rules
 * with use_more_bits and the shape fallbacks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"
#include "quant/qtypes.h"

#define SYNTH_ALIGNMENT 32 /* GGUF default alignment, what llama.cpp writes */

/* What llama-quantize's tensor_get_category would call a tensor, plus the
 * "never quantized" class. */
enum cat {
    CAT_F32 = 0, /* stays F32 (1-D, norms, routers, conv, ...) */
    CAT_TOKEN_EMBD,
    CAT_OUTPUT,
    CAT_ATTN_V, /* attn_v and attn_qkv: "attn_v-like" */
    CAT_ATTN_K,
    CAT_ATTN_Q,
    CAT_ATTN_OUTPUT,
    CAT_FFN_GATE,
    CAT_FFN_UP,
    CAT_FFN_DOWN,
    CAT_OTHER, /* attn_gate, ssm_alpha/beta, ssm_out: base type */
};

typedef struct plan_builder {
    const synth_options *o;
    synth_plan *p;
    size_t cap;
    uint32_t n_attention_wv, i_attention_wv; /* llama-quantize's running attn_v-like counter */
    int failed;
} plan_builder;

static uint32_t ftype_base(const synth_quant *q)
{
    switch (q->mix) {
    case SYNTH_MIX_PURE: return q->type;
    case SYNTH_MIX_Q5_K_M: return QT_Q5_K;
    case SYNTH_MIX_Q4_K_M:
    case SYNTH_MIX_Q4_K_E8: return QT_Q4_K;
    }
    return QT_Q8_0;
}

/* use_more_bits(i, n) of llama-quantize: first and last eighth of the layers
 * plus every third layer in between. */
static int use_more_bits(uint32_t i, uint32_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || ((int64_t)i - (int64_t)(n / 8)) % 3 == 2;
}

/* tensor_type_fallback: a type whose block does not divide the row length. */
static uint32_t shape_fallback(uint32_t type, int64_t ne0)
{
    const qt_traits *t = qt_traits_of(type);
    if (!t || ne0 % t->block_elems == 0) return type;
    uint32_t fb;
    switch (type) {
    case QT_Q4_K: fb = QT_Q5_0; break;
    case QT_Q5_K: fb = QT_Q5_1; break;
    case QT_Q6_K: fb = QT_Q8_0; break;
    case QT_Q2_K:
    case QT_Q3_K: fb = QT_Q4_0; break;
    case QT_IQ4_XS: fb = QT_IQ4_NL; break;
    default: fb = QT_F16; break;
    }
    if (ne0 % qt_traits_of(fb)->block_elems != 0) fb = QT_F16;
    return fb;
}

static int is_expert_tensor(const char *name) { return strstr(name, "_exps.") != NULL; }

static uint32_t choose_type(plan_builder *b, enum cat cat, const char *name, uint32_t layer, int64_t ne0)
{
    const synth_dims *d = &b->o->dims;
    const synth_quant *q = &b->o->quant;
    if (cat == CAT_F32) return QT_F32;
    uint32_t base = ftype_base(q), type = base;
    int eight_experts = d->n_expert == 8 && (d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE);
    int is_vlike = cat == CAT_ATTN_V;
    if (is_vlike) b->i_attention_wv++;
    if (q->mix == SYNTH_MIX_PURE) return shape_fallback(type, ne0);

    if (cat == CAT_OUTPUT || (cat == CAT_TOKEN_EMBD && d->tied_embeddings)) {
        type = QT_Q6_K;
    } else if (cat == CAT_TOKEN_EMBD) {
        type = base;
    } else if (is_vlike) {
        if (eight_experts) type = QT_Q8_0;
        else if (use_more_bits(b->i_attention_wv - 1, b->n_attention_wv)) type = QT_Q6_K;
    } else if (cat == CAT_ATTN_K) {
        if (eight_experts) type = QT_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        if (q->mix == SYNTH_MIX_Q4_K_E8 && is_expert_tensor(name)) type = QT_Q8_0;
        else if (use_more_bits(layer, d->n_layer)) type = QT_Q6_K;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (eight_experts) type = QT_Q5_K;
    }
    (void)name;
    return shape_fallback(type, ne0);
}

static void add(plan_builder *b, const char *name, enum cat cat, uint32_t layer, uint32_t n_dims, int64_t ne0,
                int64_t ne1, int64_t ne2, enum synth_init init, float std)
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
    t->type = choose_type(b, cat, name, layer, ne0);
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

static void add_matrix(plan_builder *b, uint32_t il, const char *suffix, enum cat cat, int64_t in, int64_t out)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, cat, il, 2, in, out, 1, SYNTH_INIT_NORMAL, inv_sqrt((double)in));
}

static void add_experts(plan_builder *b, uint32_t il, const char *suffix, enum cat cat, int64_t in, int64_t out,
                        int64_t n_exp)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, cat, il, 3, in, out, n_exp, SYNTH_INIT_NORMAL, inv_sqrt((double)in));
}

static void add_norm(plan_builder *b, uint32_t il, const char *suffix, int64_t n_elems)
{
    char n[64];
    lname(n, sizeof n, il, suffix);
    add(b, n, CAT_F32, il, 1, n_elems, 1, 1, SYNTH_INIT_NORM, NORM_STD);
}

static void add_attention(plan_builder *b, uint32_t il, int gated_q)
{
    const synth_dims *d = &b->o->dims;
    int64_t q_out = (int64_t)d->n_head * d->head_dim * (gated_q ? 2 : 1);
    int64_t kv_out = (int64_t)d->n_head_kv * d->head_dim;
    add_matrix(b, il, "attn_q.weight", CAT_ATTN_Q, d->n_embd, q_out);
    add_matrix(b, il, "attn_k.weight", CAT_ATTN_K, d->n_embd, kv_out);
    add_matrix(b, il, "attn_v.weight", CAT_ATTN_V, d->n_embd, kv_out);
    if (d->arch != SYNTH_ARCH_LLAMA) {
        add_norm(b, il, "attn_q_norm.weight", d->head_dim);
        add_norm(b, il, "attn_k_norm.weight", d->head_dim);
    }
    add_matrix(b, il, "attn_output.weight", CAT_ATTN_OUTPUT, (int64_t)d->n_head * d->head_dim, d->n_embd);
}

static void add_deltanet(plan_builder *b, uint32_t il)
{
    const synth_dims *d = &b->o->dims;
    int64_t key_dim = (int64_t)d->ssm_n_k_heads * d->ssm_head_dim;
    int64_t value_dim = (int64_t)d->ssm_n_v_heads * d->ssm_head_dim;
    int64_t conv_dim = 2 * key_dim + value_dim;
    char n[64];
    add_matrix(b, il, "attn_qkv.weight", CAT_ATTN_V, d->n_embd, conv_dim);
    add_matrix(b, il, "attn_gate.weight", CAT_OTHER, d->n_embd, value_dim);
    add_matrix(b, il, "ssm_beta.weight", CAT_OTHER, d->n_embd, d->ssm_n_v_heads);
    add_matrix(b, il, "ssm_alpha.weight", CAT_OTHER, d->n_embd, d->ssm_n_v_heads);
    lname(n, sizeof n, il, "ssm_dt.bias");
    add(b, n, CAT_F32, il, 1, d->ssm_n_v_heads, 1, 1, SYNTH_INIT_UNIFORM, 1.0f); /* dt bias ~ U(-1, 1) */
    lname(n, sizeof n, il, "ssm_a");
    add(b, n, CAT_F32, il, 1, d->ssm_n_v_heads, 1, 1, SYNTH_INIT_SSM_A, 0.0f);
    lname(n, sizeof n, il, "ssm_conv1d.weight");
    add(b, n, CAT_F32, il, 2, d->ssm_conv_kernel, conv_dim, 1, SYNTH_INIT_NORMAL,
        inv_sqrt((double)d->ssm_conv_kernel));
    add_norm(b, il, "ssm_norm.weight", d->ssm_head_dim);
    add_matrix(b, il, "ssm_out.weight", CAT_OTHER, value_dim, d->n_embd);
}

static void add_ffn(plan_builder *b, uint32_t il)
{
    const synth_dims *d = &b->o->dims;
    char n[64];
    int moe = d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE;
    if (!moe) {
        add_matrix(b, il, "ffn_gate.weight", CAT_FFN_GATE, d->n_embd, d->n_ff);
        add_matrix(b, il, "ffn_up.weight", CAT_FFN_UP, d->n_embd, d->n_ff);
        add_matrix(b, il, "ffn_down.weight", CAT_FFN_DOWN, d->n_ff, d->n_embd);
        return;
    }
    /* Router logits ~ N(0, 4): a few experts clearly preferred, as in trained routers. */
    lname(n, sizeof n, il, "ffn_gate_inp.weight");
    add(b, n, CAT_F32, il, 2, d->n_embd, d->n_expert, 1, SYNTH_INIT_NORMAL, 2.0f * inv_sqrt(d->n_embd));
    add_experts(b, il, "ffn_gate_exps.weight", CAT_FFN_GATE, d->n_embd, d->n_ff_exp, d->n_expert);
    add_experts(b, il, "ffn_up_exps.weight", CAT_FFN_UP, d->n_embd, d->n_ff_exp, d->n_expert);
    add_experts(b, il, "ffn_down_exps.weight", CAT_FFN_DOWN, d->n_ff_exp, d->n_embd, d->n_expert);
    if (d->arch == SYNTH_ARCH_QWEN35MOE) {
        lname(n, sizeof n, il, "ffn_gate_inp_shexp.weight");
        add(b, n, CAT_F32, il, 1, d->n_embd, 1, 1, SYNTH_INIT_NORMAL, inv_sqrt(d->n_embd));
        add_matrix(b, il, "ffn_gate_shexp.weight", CAT_FFN_GATE, d->n_embd, d->n_ff_shexp);
        add_matrix(b, il, "ffn_up_shexp.weight", CAT_FFN_UP, d->n_embd, d->n_ff_shexp);
        add_matrix(b, il, "ffn_down_shexp.weight", CAT_FFN_DOWN, d->n_ff_shexp, d->n_embd);
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
    b.n_attention_wv = d->n_layer; /* one attn_v or attn_qkv per layer */

    /* Embeddings ~ N(0, (2/sqrt(n_embd))^2): rows of norm ~2; as the tied LM
     * head this gives logits of std ~2, like the golden models. */
    float embd_std = 2.0f * inv_sqrt(d->n_embd);
    add(&b, "token_embd.weight", CAT_TOKEN_EMBD, 0, 2, d->n_embd, d->n_vocab, 1, SYNTH_INIT_NORMAL, embd_std);
    if (d->arch == SYNTH_ARCH_LLAMA && d->llama3_rope)
        add(&b, "rope_freqs.weight", CAT_F32, 0, 1, (d->n_rot ? d->n_rot : d->head_dim) / 2, 1, 1,
            SYNTH_INIT_ROPE_FREQS, 0.0f);
    for (uint32_t il = 0; il < d->n_layer; il++) {
        add_norm(&b, il, "attn_norm.weight", d->n_embd);
        if (!hybrid) add_attention(&b, il, 0);
        else if (synth_is_full_attn_layer(d, il)) add_attention(&b, il, 1);
        else add_deltanet(&b, il);
        add_norm(&b, il, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight", d->n_embd);
        add_ffn(&b, il);
    }
    add(&b, "output_norm.weight", CAT_F32, 0, 1, d->n_embd, 1, 1, SYNTH_INIT_NORM, NORM_STD);
    if (!d->tied_embeddings)
        add(&b, "output.weight", CAT_OUTPUT, 0, 2, d->n_embd, d->n_vocab, 1, SYNTH_INIT_NORMAL, embd_std);
    /* The MTP block (spec architectures.md 8.8) as llama.cpp's converter names it: a
     * full-attention layer with the main layers' FFN, its input projection and norms; the
     * embedding and head are the main model's (the optional nextn copies are left out).
     * Last in the file, so the main model's weights are those of the file without it. */
    for (uint32_t il = d->n_layer; il < d->n_layer + d->n_mtp; il++) {
        add_norm(&b, il, "nextn.enorm.weight", d->n_embd);
        add_norm(&b, il, "nextn.hnorm.weight", d->n_embd);
        add_matrix(&b, il, "nextn.eh_proj.weight", CAT_OTHER, 2 * (int64_t)d->n_embd, d->n_embd);
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
