/* Model loading: architecture, hyper-parameters, tensor binding with shape and
 * type checks, model identity, and the per-architecture forward dispatch. */
#include "model/model.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "model/model_impl.h"
#include "quant/qtypes.h"

static const char *const k_arch_names[] = {
    [MODEL_ARCH_LLAMA] = "llama",   [MODEL_ARCH_QWEN2] = "qwen2",
    [MODEL_ARCH_QWEN3] = "qwen3",   [MODEL_ARCH_QWEN3MOE] = "qwen3moe",
    [MODEL_ARCH_QWEN35] = "qwen35", [MODEL_ARCH_QWEN35MOE] = "qwen35moe",
};

const char *model_arch_name(enum model_arch arch)
{
    if ((unsigned)arch >= sizeof k_arch_names / sizeof k_arch_names[0]) return "?";
    return k_arch_names[arch];
}

static bool arch_is_hybrid(enum model_arch a) { return a == MODEL_ARCH_QWEN35 || a == MODEL_ARCH_QWEN35MOE; }
static bool arch_is_moe(enum model_arch a) { return a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_QWEN35MOE; }

/* ---- metadata ----------------------------------------------------------------- */

typedef struct loader {
    model *m;
    const char *arch; /* key prefix */
    char key[128];
    wk_error *err;
} loader;

static const char *akey(loader *L, const char *suffix)
{
    snprintf(L->key, sizeof L->key, "%s.%s", L->arch, suffix);
    return L->key;
}

static int get_u32(loader *L, const char *suffix, bool required, uint32_t def, uint32_t *out)
{
    uint64_t v;
    int rc = required ? gguf_get_u64(L->m->file, akey(L, suffix), &v, L->err)
                      : gguf_get_u64_or(L->m->file, akey(L, suffix), def, &v, L->err);
    if (rc) return rc;
    if (v > UINT32_MAX) return wk_fail(L->err, WK_EFORMAT, "key %s: value %" PRIu64 " too large", L->key, v);
    *out = (uint32_t)v;
    return 0;
}

static int get_f32(loader *L, const char *suffix, bool required, double def, float *out)
{
    double v;
    int rc = required ? gguf_get_f64(L->m->file, akey(L, suffix), &v, L->err)
                      : gguf_get_f64_or(L->m->file, akey(L, suffix), def, &v, L->err);
    if (rc) return rc;
    *out = (float)v;
    return 0;
}

/* A per-layer count that must be the same on every layer where it is non-zero. */
static int get_uniform(loader *L, const char *suffix, bool required, uint32_t def, uint32_t *out)
{
    uint32_t n = L->m->hp.n_layer_all;
    uint32_t *vals = calloc(n ? n : 1, sizeof *vals);
    if (!vals) return wk_fail(L->err, WK_ENOMEM, "out of memory");
    int rc = gguf_get_u32_per_layer(L->m->file, akey(L, suffix), n, vals, L->err);
    if (rc == WK_ENOTFOUND && !required) {
        *out = def;
        free(vals);
        return 0;
    }
    if (rc) {
        free(vals);
        return rc;
    }
    uint32_t v = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!vals[i]) continue;
        if (v && vals[i] != v) {
            uint32_t other = vals[i];
            free(vals);
            return wk_fail(L->err, WK_EUNSUPPORTED, "key %s: differs between layers (%u vs %u)", L->key, v,
                           other);
        }
        v = vals[i];
    }
    free(vals);
    *out = v;
    return 0;
}

static int load_hparams(loader *L)
{
    model *m = L->m;
    model_hparams *hp = &m->hp;
    int rc;
    uint32_t nextn = 0;
    if ((rc = get_u32(L, "block_count", true, 0, &hp->n_layer_all))) return rc;
    if ((rc = get_u32(L, "nextn_predict_layers", false, 0, &nextn))) return rc;
    if (nextn >= hp->n_layer_all)
        return wk_fail(L->err, WK_EFORMAT, "key %s: %u MTP layers of %u blocks", L->key, nextn, hp->n_layer_all);
    hp->n_layer = hp->n_layer_all - nextn;
    if ((rc = get_u32(L, "context_length", false, 4096, &hp->n_ctx_train))) return rc;
    if ((rc = get_u32(L, "embedding_length", true, 0, &hp->n_embd))) return rc;
    if ((rc = get_uniform(L, "attention.head_count", true, 0, &hp->n_head))) return rc;
    if ((rc = get_uniform(L, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv))) return rc;
    if (hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return wk_fail(L->err, WK_EFORMAT, "%s: %u heads with %u kv heads", L->arch, hp->n_head, hp->n_head_kv);
    if ((rc = get_u32(L, "attention.key_length", false, hp->n_embd / hp->n_head, &hp->d_k))) return rc;
    if ((rc = get_u32(L, "attention.value_length", false, hp->n_embd / hp->n_head, &hp->d_v))) return rc;
    if ((rc = get_f32(L, "attention.layer_norm_rms_epsilon", true, 0, &hp->eps))) return rc;
    if (!arch_is_moe(m->arch) || gguf_find_kv(m->file, akey(L, "feed_forward_length")))
        if ((rc = get_uniform(L, "feed_forward_length", !arch_is_moe(m->arch), 0, &hp->n_ff))) return rc;

    be_rope_params *r = &hp->rope;
    r->mode = m->arch == MODEL_ARCH_LLAMA ? BE_ROPE_NORM : arch_is_hybrid(m->arch) ? BE_ROPE_IMROPE : BE_ROPE_NEOX;
    uint32_t n_rot;
    if ((rc = get_u32(L, "rope.dimension_count", false, hp->d_k, &n_rot))) return rc;
    if (n_rot == 0 || n_rot % 2 || n_rot > hp->d_k)
        return wk_fail(L->err, WK_EFORMAT, "key %s: %u rotary dims for head dim %u", L->key, n_rot, hp->d_k);
    r->n_rot = (int32_t)n_rot;
    if ((rc = get_f32(L, "rope.freq_base", false, 10000.0, &r->theta))) return rc;
    r->freq_scale = 1.0f;
    gguf_str st;
    if (gguf_find_kv(m->file, akey(L, "rope.scaling.type"))) {
        if ((rc = gguf_get_str(m->file, L->key, &st, L->err))) return rc;
        bool none = st.len == 4 && !memcmp(st.ptr, "none", 4);
        bool linear = st.len == 6 && !memcmp(st.ptr, "linear", 6);
        if (!none && !linear)
            return wk_fail(L->err, WK_EUNSUPPORTED, "key %s: rope scaling '%.*s' not supported", L->key,
                           (int)st.len, st.ptr);
    }
    float factor = 0.0f;
    if ((rc = get_f32(L, "rope.scaling.factor", false, 0.0, &factor))) return rc;
    if (factor == 0.0f && (rc = get_f32(L, "rope.scale_linear", false, 0.0, &factor))) return rc;
    if (factor > 0.0f) r->freq_scale = 1.0f / factor;
    if (arch_is_hybrid(m->arch)) {
        const gguf_kv *kv = gguf_find_kv(m->file, akey(L, "rope.dimension_sections"));
        if (!kv || kv->type != GGUF_T_ARRAY || kv->arr_count < 3)
            return wk_fail(L->err, WK_EFORMAT, "key %s: missing or not an array of 4", L->key);
        for (uint64_t i = 0; i < 4 && i < kv->arr_count; i++) r->sections[i] = (int32_t)gguf_arr_i64(kv, i);
    }

    if (arch_is_moe(m->arch)) {
        if ((rc = get_u32(L, "expert_count", true, 0, &hp->n_expert))) return rc;
        if ((rc = get_u32(L, "expert_used_count", true, 0, &hp->n_expert_used))) return rc;
        if ((rc = get_u32(L, "expert_feed_forward_length", true, 0, &hp->n_ff_exp))) return rc;
        if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
            return wk_fail(L->err, WK_EFORMAT, "%s: %u experts used of %u", L->arch, hp->n_expert_used,
                           hp->n_expert);
        if (m->arch == MODEL_ARCH_QWEN35MOE &&
            (rc = get_u32(L, "expert_shared_feed_forward_length", false, 0, &hp->n_ff_shexp)))
            return rc;
    }
    if (arch_is_hybrid(m->arch)) {
        if ((rc = get_u32(L, "full_attention_interval", false, 4, &hp->full_attention_interval))) return rc;
        if ((rc = get_u32(L, "ssm.conv_kernel", true, 0, &hp->ssm_conv_k))) return rc;
        if ((rc = get_u32(L, "ssm.state_size", true, 0, &hp->ssm_d_k))) return rc;
        if ((rc = get_u32(L, "ssm.group_count", true, 0, &hp->ssm_n_hk))) return rc;
        if ((rc = get_u32(L, "ssm.time_step_rank", true, 0, &hp->ssm_n_hv))) return rc;
        uint32_t inner;
        if ((rc = get_u32(L, "ssm.inner_size", true, 0, &inner))) return rc;
        if (!hp->ssm_n_hk || !hp->ssm_n_hv || hp->ssm_n_hv % hp->ssm_n_hk || inner % hp->ssm_n_hv ||
            hp->ssm_conv_k < 1 || hp->full_attention_interval == 0)
            return wk_fail(L->err, WK_EFORMAT, "%s: inconsistent ssm sizes (H_k %u, H_v %u, inner %u, conv %u)",
                           L->arch, hp->ssm_n_hk, hp->ssm_n_hv, inner, hp->ssm_conv_k);
        hp->ssm_d_v = inner / hp->ssm_n_hv;
    }
    return 0;
}

/* ---- tensors ----------------------------------------------------------------- */

#define ANY (-1)

/* Binds tensor `name` to *w. Absent: error if required, else w->data = NULL.
 * Checks the shape against ne0..ne2 (ANY skips a dim) and, if f32_only, the type. */
static int bind(loader *L, be_weight *w, const char *name, bool required, int n_dims, int64_t ne0,
                int64_t ne1, int64_t ne2, bool f32_only)
{
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(L->m->file, name);
    if (!t) {
        if (required) return wk_fail(L->err, WK_EFORMAT, "tensor %s: missing", name);
        return 0;
    }
    int64_t want[3] = {ne0, ne1, ne2};
    for (int d = 0; d < 3; d++) {
        int64_t expect = d < n_dims ? want[d] : 1;
        if (expect != ANY && t->ne[d] != expect)
            return wk_fail(L->err, WK_EFORMAT,
                           "tensor %s: shape {%" PRId64 ", %" PRId64 ", %" PRId64 "}, expected {%" PRId64
                           ", %" PRId64 ", %" PRId64 "} (dim %d)",
                           name, t->ne[0], t->ne[1], t->ne[2], want[0], want[1], want[2], d);
    }
    if (t->ne[3] != 1) return wk_fail(L->err, WK_EFORMAT, "tensor %s: 4-D tensors are not expected", name);
    const qt_traits *tr = qt_traits_of(t->type);
    if (!tr || !tr->weight_ok)
        return wk_fail(L->err, WK_EUNSUPPORTED, "tensor %s: type %s not supported", name, qt_type_name(t->type));
    if (f32_only && t->type != QT_F32)
        return wk_fail(L->err, WK_EUNSUPPORTED, "tensor %s: type %s, expected F32", name, qt_type_name(t->type));
    w->type = t->type;
    for (int d = 0; d < 4; d++) w->ne[d] = t->ne[d];
    w->nb1 = qt_row_bytes(tr, t->ne[0]);
    w->nb2 = w->nb1 * (size_t)t->ne[1];
    w->data = t->data;
    w->name = t->name_z;
    w->file_mapped = gguf_is_file_mapped(L->m->file);
    return 0;
}

static int bind_blk(loader *L, be_weight *w, int il, const char *suffix, bool required, int n_dims,
                    int64_t ne0, int64_t ne1, int64_t ne2, bool f32_only)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return bind(L, w, name, required, n_dims, ne0, ne1, ne2, f32_only);
}


static int bind_attention(loader *L, model_layer *ly, int il)
{
    const model_hparams *hp = &L->m->hp;
    const int64_t E = hp->n_embd, Hd = (int64_t)hp->n_head * hp->d_k, Kd = (int64_t)hp->n_head_kv * hp->d_k,
                  Vd = (int64_t)hp->n_head_kv * hp->d_v, Od = (int64_t)hp->n_head * hp->d_v;
    const bool gated = arch_is_hybrid(L->m->arch);
    if (gguf_find_tensor(L->m->file, "blk.0.attn_qkv.weight") && !gated)
        return wk_fail(L->err, WK_EUNSUPPORTED, "tensor blk.%d.attn_qkv.weight: fused QKV is not supported", il);
    TRY(bind_blk(L, &ly->wq, il, "attn_q.weight", true, 2, E, gated ? 2 * Hd : Hd, 1, false));
    TRY(bind_blk(L, &ly->wk, il, "attn_k.weight", true, 2, E, Kd, 1, false));
    TRY(bind_blk(L, &ly->wv, il, "attn_v.weight", true, 2, E, Vd, 1, false));
    TRY(bind_blk(L, &ly->wo, il, "attn_output.weight", true, 2, Od, E, 1, false));
    TRY(bind_blk(L, &ly->bq, il, "attn_q.bias", false, 1, Hd, 1, 1, true));
    TRY(bind_blk(L, &ly->bk, il, "attn_k.bias", false, 1, Kd, 1, 1, true));
    TRY(bind_blk(L, &ly->bv, il, "attn_v.bias", false, 1, Vd, 1, 1, true));
    TRY(bind_blk(L, &ly->bo, il, "attn_output.bias", false, 1, E, 1, 1, true));
    bool qk_norm = L->m->arch != MODEL_ARCH_LLAMA && L->m->arch != MODEL_ARCH_QWEN2;
    TRY(bind_blk(L, &ly->q_norm, il, "attn_q_norm.weight", qk_norm, 1, hp->d_k, 1, 1, true));
    TRY(bind_blk(L, &ly->k_norm, il, "attn_k_norm.weight", qk_norm, 1, hp->d_k, 1, 1, true));
    return 0;
}

static int bind_gdn(loader *L, model_layer *ly, int il)
{
    const model_hparams *hp = &L->m->hp;
    const int64_t E = hp->n_embd, key_dim = (int64_t)hp->ssm_n_hk * hp->ssm_d_k,
                  value_dim = (int64_t)hp->ssm_n_hv * hp->ssm_d_v, conv_dim = 2 * key_dim + value_dim;
    TRY(bind_blk(L, &ly->ssm_qkv, il, "attn_qkv.weight", true, 2, E, conv_dim, 1, false));
    TRY(bind_blk(L, &ly->ssm_z, il, "attn_gate.weight", true, 2, E, value_dim, 1, false));
    TRY(bind_blk(L, &ly->ssm_beta, il, "ssm_beta.weight", true, 2, E, hp->ssm_n_hv, 1, false));
    TRY(bind_blk(L, &ly->ssm_alpha, il, "ssm_alpha.weight", true, 2, E, hp->ssm_n_hv, 1, false));
    TRY(bind_blk(L, &ly->ssm_dt, il, "ssm_dt.bias", true, 1, hp->ssm_n_hv, 1, 1, true));
    TRY(bind_blk(L, &ly->ssm_a, il, "ssm_a", true, 1, hp->ssm_n_hv, 1, 1, true));
    TRY(bind_blk(L, &ly->ssm_conv1d, il, "ssm_conv1d.weight", true, 2, hp->ssm_conv_k, conv_dim, 1, true));
    TRY(bind_blk(L, &ly->ssm_norm, il, "ssm_norm.weight", true, 1, hp->ssm_d_v, 1, 1, true));
    TRY(bind_blk(L, &ly->ssm_out, il, "ssm_out.weight", true, 2, value_dim, E, 1, false));
    return 0;
}

static int bind_ffn(loader *L, model_layer *ly, int il)
{
    const model_hparams *hp = &L->m->hp;
    const int64_t E = hp->n_embd;
    if (!arch_is_moe(L->m->arch)) {
        TRY(bind_blk(L, &ly->ffn_gate, il, "ffn_gate.weight", true, 2, E, hp->n_ff, 1, false));
        TRY(bind_blk(L, &ly->ffn_up, il, "ffn_up.weight", true, 2, E, hp->n_ff, 1, false));
        TRY(bind_blk(L, &ly->ffn_down, il, "ffn_down.weight", true, 2, hp->n_ff, E, 1, false));
        return 0;
    }
    const int64_t X = hp->n_expert, F = hp->n_ff_exp;
    TRY(bind_blk(L, &ly->ffn_gate_inp, il, "ffn_gate_inp.weight", true, 2, E, X, 1, false));
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
    if (gguf_find_tensor(L->m->file, name)) {
        TRY(bind(L, &ly->ffn_gate_exps, name, true, 3, E, 2 * F, X, false));
        memset(&ly->ffn_up_exps, 0, sizeof ly->ffn_up_exps);
    } else {
        TRY(bind_blk(L, &ly->ffn_gate_exps, il, "ffn_gate_exps.weight", true, 3, E, F, X, false));
        TRY(bind_blk(L, &ly->ffn_up_exps, il, "ffn_up_exps.weight", true, 3, E, F, X, false));
    }
    TRY(bind_blk(L, &ly->ffn_down_exps, il, "ffn_down_exps.weight", true, 3, F, E, X, false));
    if (L->m->arch == MODEL_ARCH_QWEN35MOE) {
        const int64_t S = hp->n_ff_shexp ? (int64_t)hp->n_ff_shexp : ANY;
        TRY(bind_blk(L, &ly->ffn_gate_inp_shexp, il, "ffn_gate_inp_shexp.weight", true, 1, E, 1, 1, false));
        TRY(bind_blk(L, &ly->ffn_gate_shexp, il, "ffn_gate_shexp.weight", true, 2, E, S, 1, false));
        TRY(bind_blk(L, &ly->ffn_up_shexp, il, "ffn_up_shexp.weight", true, 2, E, ly->ffn_gate_shexp.ne[1], 1,
                     false));
        TRY(bind_blk(L, &ly->ffn_down_shexp, il, "ffn_down_shexp.weight", true, 2, ly->ffn_gate_shexp.ne[1], E,
                     1, false));
    }
    return 0;
}

/* qwen35: layer il is recurrent unless (il + 1) is a multiple of the interval,
 * or as the optional attention.recurrent_layers array says. */
static bool layer_is_recurrent(loader *L, int il)
{
    if (!arch_is_hybrid(L->m->arch)) return false;
    const gguf_kv *kv = gguf_find_kv(L->m->file, akey(L, "attention.recurrent_layers"));
    if (kv && kv->type == GGUF_T_ARRAY && (uint64_t)il < kv->arr_count) return gguf_arr_i64(kv, il) != 0;
    return (il + 1) % L->m->hp.full_attention_interval != 0;
}

/* The MTP block at blk.{n_layer} (qwen35 / qwen35moe with nextn_predict_layers > 0 and
 * its eh_proj present; a file converted without it loads as a plain model). Its
 * optional head tensors fall back to the main model's. */
static int bind_mtp(loader *L)
{
    model *m = L->m;
    const model_hparams *hp = &m->hp;
    const int il = (int)hp->n_layer;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", il);
    if (!arch_is_hybrid(m->arch) || hp->n_layer_all == hp->n_layer || !gguf_find_tensor(m->file, name)) return 0;
    model_mtp *mt = &m->mtp;
    const int64_t E = hp->n_embd;
    mt->layer.attn_slot = 0;
    mt->layer.rec_slot = -1;
    TRY(bind(L, &mt->eh_proj, name, true, 2, 2 * E, E, 1, false));
    TRY(bind_blk(L, &mt->enorm, il, "nextn.enorm.weight", true, 1, E, 1, 1, true));
    TRY(bind_blk(L, &mt->hnorm, il, "nextn.hnorm.weight", true, 1, E, 1, 1, true));
    TRY(bind_blk(L, &mt->embd, il, "nextn.embed_tokens.weight", false, 2, E, hp->n_vocab, 1, false));
    if (!mt->embd.data) mt->embd = m->tok_embd;
    TRY(bind_blk(L, &mt->head_norm, il, "nextn.shared_head_norm.weight", false, 1, E, 1, 1, true));
    if (!mt->head_norm.data) mt->head_norm = m->output_norm;
    TRY(bind_blk(L, &mt->head, il, "nextn.shared_head_head.weight", false, 2, E, hp->n_vocab, 1, false));
    if (!mt->head.data) mt->head = m->output;
    TRY(bind_blk(L, &mt->layer.attn_norm, il, "attn_norm.weight", true, 1, E, 1, 1, true));
    TRY(bind_blk(L, &mt->layer.ffn_norm, il, "post_attention_norm.weight", true, 1, E, 1, 1, true));
    TRY(bind_attention(L, &mt->layer, il));
    TRY(bind_ffn(L, &mt->layer, il));
    m->has_mtp = true;
    return 0;
}

static int bind_tensors(loader *L)
{
    model *m = L->m;
    model_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(m->file, "token_embd.weight");
    if (!te) return wk_fail(L->err, WK_EFORMAT, "tensor token_embd.weight: missing");
    hp->n_vocab = (uint32_t)te->ne[1];
    TRY(bind(L, &m->tok_embd, "token_embd.weight", true, 2, hp->n_embd, hp->n_vocab, 1, false));
    TRY(bind(L, &m->output_norm, "output_norm.weight", true, 1, hp->n_embd, 1, 1, true));
    TRY(bind(L, &m->output, "output.weight", false, 2, hp->n_embd, hp->n_vocab, 1, false));
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    TRY(bind(L, &m->output_bias, "output.bias", false, 1, hp->n_vocab, 1, 1, true));
    be_weight rf;
    TRY(bind(L, &rf, "rope_freqs.weight", false, 1, hp->rope.n_rot / 2, 1, 1, true));
    hp->rope.freq_factors = rf.data;

    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) return wk_fail(L->err, WK_ENOMEM, "out of memory");
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        model_layer *ly = &m->layers[il];
        ly->recurrent = layer_is_recurrent(L, (int)il);
        ly->attn_slot = ly->recurrent ? -1 : (int32_t)hp->n_attn_layers++;
        ly->rec_slot = ly->recurrent ? (int32_t)hp->n_rec_layers++ : -1;
        TRY(bind_blk(L, &ly->attn_norm, (int)il, "attn_norm.weight", true, 1, hp->n_embd, 1, 1, true));
        TRY(bind_blk(L, &ly->ffn_norm, (int)il,
                     arch_is_hybrid(m->arch) ? "post_attention_norm.weight" : "ffn_norm.weight", true, 1,
                     hp->n_embd, 1, 1, true));
        TRY(ly->recurrent ? bind_gdn(L, ly, (int)il) : bind_attention(L, ly, (int)il));
        TRY(bind_ffn(L, ly, (int)il));
    }
    return bind_mtp(L);
}

/* Identity: hash of every tensor's name, type, shape and offset plus the file
 * size — changes whenever the weights' layout or the file does. */
static uint64_t compute_model_id(const gguf_file *f)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    uint64_t size = gguf_file_size(f);
    XXH3_64bits_update(st, &size, sizeof size);
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        XXH3_64bits_update(st, t->name_z, strlen(t->name_z));
        XXH3_64bits_update(st, &t->type, sizeof t->type);
        XXH3_64bits_update(st, t->ne, sizeof t->ne);
        XXH3_64bits_update(st, &t->offset, sizeof t->offset);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int model_load(model **out, const char *path, wk_error *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return wk_fail(err, WK_ENOMEM, "out of memory");
    int rc = gguf_open(&m->file, path, err);
    if (rc) {
        free(m);
        return rc;
    }
    gguf_str arch;
    rc = gguf_get_str(m->file, "general.architecture", &arch, err);
    if (rc) goto fail;
    char archz[32];
    snprintf(archz, sizeof archz, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    int found = -1;
    for (size_t i = 0; i < sizeof k_arch_names / sizeof k_arch_names[0]; i++)
        if (!strcmp(archz, k_arch_names[i])) found = (int)i;
    if (found < 0) {
        rc = wk_fail(err, WK_EUNSUPPORTED, "architecture '%s' is not supported", archz);
        goto fail;
    }
    m->arch = (enum model_arch)found;
    loader L = {m, k_arch_names[found], {0}, err};
    if ((rc = load_hparams(&L)) || (rc = bind_tensors(&L))) goto fail;
    m->model_id = compute_model_id(m->file);
    *out = m;
    return 0;
fail:
    wk_fail_prefix(err, "%s", path);
    model_free(m);
    return rc;
}

void model_free(model *m)
{
    if (!m) return;
    free(m->layers);
    gguf_close(m->file);
    free(m);
}

size_t model_kv_elems_per_layer(const model *m, int32_t n_ctx)
{
    return (size_t)n_ctx * m->hp.n_head_kv * (m->hp.d_k + m->hp.d_v);
}

size_t model_conv_elems(const model *m)
{
    const model_hparams *hp = &m->hp;
    size_t conv_dim = 2 * (size_t)hp->ssm_n_hk * hp->ssm_d_k + (size_t)hp->ssm_n_hv * hp->ssm_d_v;
    return hp->ssm_conv_k ? (hp->ssm_conv_k - 1) * conv_dim : 0;
}

size_t model_ssm_elems(const model *m)
{
    const model_hparams *hp = &m->hp;
    return (size_t)hp->ssm_n_hv * hp->ssm_d_k * hp->ssm_d_v;
}

/* Offsets of every 2-D matmul weight of a layer (vectors and 3-D expert packs
 * are used as stored). */
static const size_t k_layer_matmul_offsets[] = {
    offsetof(model_layer, wq),             offsetof(model_layer, wk),
    offsetof(model_layer, wv),             offsetof(model_layer, wo),
    offsetof(model_layer, ffn_gate),       offsetof(model_layer, ffn_up),
    offsetof(model_layer, ffn_down),       offsetof(model_layer, ffn_gate_inp),
    offsetof(model_layer, ffn_gate_shexp), offsetof(model_layer, ffn_up_shexp),
    offsetof(model_layer, ffn_down_shexp), offsetof(model_layer, ssm_qkv),
    offsetof(model_layer, ssm_z),          offsetof(model_layer, ssm_beta),
    offsetof(model_layer, ssm_alpha),      offsetof(model_layer, ssm_out),
    offsetof(model_layer, ffn_gate_exps),  offsetof(model_layer, ffn_up_exps),
    offsetof(model_layer, ffn_down_exps),
};
#define N_LAYER_MATMULS (sizeof k_layer_matmul_offsets / sizeof k_layer_matmul_offsets[0])

static be_weight *layer_weight(model_layer *ly, size_t k)
{
    return (be_weight *)((char *)ly + k_layer_matmul_offsets[k]);
}

static int prepare_layer(be_backend *be, model_layer *ly, wk_error *err)
{
    for (size_t k = 0; k < N_LAYER_MATMULS; k++) {
        be_weight *w = layer_weight(ly, k);
        if (w->data) TRY(be_prepare_weight(be, w, err));
    }
    return 0;
}

static void release_layer(be_backend *be, model_layer *ly)
{
    for (size_t k = 0; k < N_LAYER_MATMULS; k++) be_release_weight(be, layer_weight(ly, k));
}

/* The MTP head that is the main LM head shares its prepared form (one copy of a
 * vocabulary-sized matrix, not two). */
static bool mtp_head_shared(const model *m) { return m->mtp.head.data == m->output.data; }

int model_prepare(model *dst, const model *src, be_backend *be, wk_error *err)
{
    *dst = *src;
    dst->layers = malloc(sizeof(model_layer) * (src->hp.n_layer ? src->hp.n_layer : 1));
    if (!dst->layers) return wk_fail(err, WK_ENOMEM, "out of memory");
    memcpy(dst->layers, src->layers, sizeof(model_layer) * src->hp.n_layer);
    int rc = be_prepare_weight(be, &dst->output, err);
    for (uint32_t il = 0; !rc && il < dst->hp.n_layer; il++) rc = prepare_layer(be, &dst->layers[il], err);
    if (!rc && dst->has_mtp) {
        rc = prepare_layer(be, &dst->mtp.layer, err);
        if (!rc) rc = be_prepare_weight(be, &dst->mtp.eh_proj, err);
        if (!rc && mtp_head_shared(dst)) dst->mtp.head = dst->output;
        else if (!rc) rc = be_prepare_weight(be, &dst->mtp.head, err);
    }
    if (rc) model_release_prepared(dst, be);
    return rc;
}

void model_release_prepared(model *dst, be_backend *be)
{
    if (!dst->layers) return;
    if (dst->has_mtp) {
        release_layer(be, &dst->mtp.layer);
        be_release_weight(be, &dst->mtp.eh_proj);
        if (!mtp_head_shared(dst)) be_release_weight(be, &dst->mtp.head);
        dst->mtp.head.prep = NULL;
    }
    be_release_weight(be, &dst->output);
    for (uint32_t il = 0; il < dst->hp.n_layer; il++) release_layer(be, &dst->layers[il]);
    free(dst->layers);
    dst->layers = NULL;
}
