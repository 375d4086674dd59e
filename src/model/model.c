/* Model loading: architecture, tensor binding with shape and type checks,
 * model identity (the hyper-parameters are read and validated by
 * model_validate.c first). */
#include "model/model.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "model/model_impl.h"
#include "quant/qtypes.h"
#include "util/checked.h"

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

typedef struct loader {
    model *m;
    wk_error *err;
} loader;

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
    const bool gated = model_arch_is_hybrid(L->m->arch);
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
    if (!model_arch_is_moe(L->m->arch)) {
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
        const int64_t S = hp->n_ff_shexp; /* the key's, or blk.0's width when the key is absent */
        TRY(bind_blk(L, &ly->ffn_gate_inp_shexp, il, "ffn_gate_inp_shexp.weight", true, 1, E, 1, 1, false));
        TRY(bind_blk(L, &ly->ffn_gate_shexp, il, "ffn_gate_shexp.weight", true, 2, E, S, 1, false));
        TRY(bind_blk(L, &ly->ffn_up_shexp, il, "ffn_up_shexp.weight", true, 2, E, S, 1, false));
        TRY(bind_blk(L, &ly->ffn_down_shexp, il, "ffn_down_shexp.weight", true, 2, S, E, 1, false));
    }
    return 0;
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
    if (!model_arch_is_hybrid(m->arch) || hp->n_layer_all == hp->n_layer || !gguf_find_tensor(m->file, name)) return 0;
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
        ly->recurrent = model_layer_is_recurrent(m->file, m->arch, hp, il);
        ly->attn_slot = ly->recurrent ? -1 : (int32_t)hp->n_attn_layers++;
        ly->rec_slot = ly->recurrent ? (int32_t)hp->n_rec_layers++ : -1;
        TRY(bind_blk(L, &ly->attn_norm, (int)il, "attn_norm.weight", true, 1, hp->n_embd, 1, 1, true));
        TRY(bind_blk(L, &ly->ffn_norm, (int)il,
                     model_arch_is_hybrid(m->arch) ? "post_attention_norm.weight" : "ffn_norm.weight", true, 1,
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

/* Architecture, hyper-parameters, tensors and identity of m->file (set by
 * the caller); on failure m->layers may hold a partial table. */
static int model_build(model *m, wk_error *err)
{
    gguf_str arch;
    int rc = gguf_get_str(m->file, "general.architecture", &arch, err);
    if (rc) return rc;
    char archz[32];
    snprintf(archz, sizeof archz, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    int found = -1;
    for (size_t i = 0; i < sizeof k_arch_names / sizeof k_arch_names[0]; i++)
        if (!strcmp(archz, k_arch_names[i])) found = (int)i;
    if (found < 0) return wk_fail(err, WK_EUNSUPPORTED, "architecture '%s' is not supported", archz);
    m->arch = (enum model_arch)found;
    loader L = {m, err};
    if ((rc = model_hparams_read(m->file, m->arch, &m->hp, err)) || (rc = bind_tensors(&L)))
        return rc;
    m->model_id = compute_model_id(m->file);
    return 0;
}

/* Takes f (closed on failure) and builds the model over it; err gets `where` as prefix. */
static int model_from_file(model **out, gguf_file *f, const char *where, wk_error *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    m->file = f;
    int rc = model_build(m, err);
    if (rc) {
        wk_fail_prefix(err, "%s", where);
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int model_load(model **out, const char *path, wk_error *err)
{
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path, err);
    return rc ? rc : model_from_file(out, f, path, err);
}

int model_load_buffer(model **out, const void *data, size_t size, wk_error *err)
{
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open_buffer(&f, data, size, err);
    return rc ? rc : model_from_file(out, f, "(buffer)", err);
}

int model_check_file(gguf_file *f, wk_error *err)
{
    model m = {.file = f};
    int rc = model_build(&m, err);
    free(m.layers);
    return rc;
}

void model_free(model *m)
{
    if (!m) return;
    free(m->layers);
    gguf_close(m->file);
    free(m);
}

/* The hyper-parameters are validated (each <= MODEL_MAX_DIM), so only a
 * caller's n_ctx can push these past 64 bits: they saturate (util/checked.h). */
size_t model_kv_elems_per_layer(const model *m, int32_t n_ctx)
{
    return (size_t)wk_sat_mul3(n_ctx > 0 ? (uint64_t)n_ctx : 0, m->hp.n_head_kv, (uint64_t)m->hp.d_k + m->hp.d_v);
}

size_t model_conv_elems(const model *m)
{
    const model_hparams *hp = &m->hp;
    uint64_t conv_dim = 2 * (uint64_t)hp->ssm_n_hk * hp->ssm_d_k + (uint64_t)hp->ssm_n_hv * hp->ssm_d_v;
    return hp->ssm_conv_k ? (size_t)wk_sat_mul(hp->ssm_conv_k - 1, conv_dim) : 0;
}

size_t model_ssm_elems(const model *m)
{
    const model_hparams *hp = &m->hp;
    return (size_t)wk_sat_mul3(hp->ssm_n_hv, hp->ssm_d_k, hp->ssm_d_v);
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

/* The backend of the part that runs layer il. */
static be_backend *part_of(be_backend *const *be, const uint32_t *first, int32_t n_parts, uint32_t il)
{
    int32_t p = 0;
    while (p + 1 < n_parts && il >= first[p + 1]) p++;
    return be[p];
}

int model_prepare(model *dst, const model *src, be_backend *const *be, const uint32_t *first, int32_t n_parts,
                  wk_error *err)
{
    *dst = *src;
    dst->layers = malloc(sizeof(model_layer) * (src->hp.n_layer ? src->hp.n_layer : 1));
    if (!dst->layers) return wk_fail(err, WK_ENOMEM, "out of memory");
    memcpy(dst->layers, src->layers, sizeof(model_layer) * src->hp.n_layer);
    be_backend *head = be[n_parts - 1];
    int rc = be_prepare_weight(head, &dst->output, err);
    for (uint32_t il = 0; !rc && il < dst->hp.n_layer; il++)
        rc = prepare_layer(part_of(be, first, n_parts, il), &dst->layers[il], err);
    if (!rc && dst->has_mtp) {
        rc = prepare_layer(head, &dst->mtp.layer, err);
        if (!rc) rc = be_prepare_weight(head, &dst->mtp.eh_proj, err);
        if (!rc && mtp_head_shared(dst)) dst->mtp.head = dst->output;
        else if (!rc) rc = be_prepare_weight(head, &dst->mtp.head, err);
    }
    if (rc) model_release_prepared(dst, be, first, n_parts);
    return rc;
}

void model_release_prepared(model *dst, be_backend *const *be, const uint32_t *first, int32_t n_parts)
{
    if (!dst->layers) return;
    be_backend *head = be[n_parts - 1];
    if (dst->has_mtp) {
        release_layer(head, &dst->mtp.layer);
        be_release_weight(head, &dst->mtp.eh_proj);
        if (!mtp_head_shared(dst)) be_release_weight(head, &dst->mtp.head);
        dst->mtp.head.prep = NULL;
    }
    be_release_weight(head, &dst->output);
    for (uint32_t il = 0; il < dst->hp.n_layer; il++) release_layer(part_of(be, first, n_parts, il), &dst->layers[il]);
    free(dst->layers);
    dst->layers = NULL;
}
