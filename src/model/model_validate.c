/* Hyper-parameters of a model file, read and checked in one pass before
 * anything is sized from them. A file the GGUF reader accepts can still lie:
 * block_count = 2^31-1 once made the loader fill an 8 GiB per-layer table, a
 * feed_forward_length of 2^32-1 a 24 GiB activation buffer. So every integer
 * key is checked
 *   - against a cap far above real models (MODEL_MAX_DIM),
 *   - against the other keys (kv heads divide heads, RoPE sections fit the
 *     rotary pairs, experts used <= experts, ...),
 *   - against the tensors present: the blk.N blocks, and for each size the
 *     tensor whose shape it describes (in the first layer that has it; the
 *     binding in model.c then checks every layer's tensors against it).
 * A failure is one line naming the key, its value and what it contradicts.
 * Spec: shared/spec/architectures.md (keys and shapes per architecture). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "util/checked.h"

/* Cap on every width and count key: a million is ~20x the widest dimension
 * of any released model (the 53248-wide FFN of Llama 3.1 405B) and keeps a
 * product of three such values far inside 64 bits. */
#define MODEL_MAX_DIM (1u << 20)

typedef struct hreader {
    const gguf_file *f;
    enum model_arch arch;
    const char *prefix; /* the architecture name, prefix of every key */
    char key[128];
    char dk_note[96];   /* " (embedding_length / head_count ...)" when key_length is not in the file */
    wk_error *err;
} hreader;

static const char *akey(hreader *R, const char *suffix)
{
    snprintf(R->key, sizeof R->key, "%s.%s", R->prefix, suffix);
    return R->key;
}

/* "key PREFIX.SUFFIX = VALUE: reason" as a WK_EFORMAT error. */
__attribute__((format(printf, 4, 5))) static int bad_key(hreader *R, const char *suffix, uint64_t value,
                                                         const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return wk_fail(R->err, WK_EFORMAT, "key %s.%s = %" PRIu64 ": %s", R->prefix, suffix, value, why);
}

static int check_range(hreader *R, const char *suffix, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v < lo) return bad_key(R, suffix, v, "must be at least %" PRIu64, lo);
    if (v > hi) return bad_key(R, suffix, v, "larger than any model has (limit %" PRIu64 ")", hi);
    return 0;
}

/* An integer key in [lo, hi]; def when absent and not required. */
static int read_count(hreader *R, const char *suffix, bool required, uint64_t def, uint64_t lo, uint64_t hi,
                      uint32_t *out)
{
    uint64_t v;
    int rc = required ? gguf_get_u64(R->f, akey(R, suffix), &v, R->err)
                      : gguf_get_u64_or(R->f, akey(R, suffix), def, &v, R->err);
    if (rc) return rc;
    if ((rc = check_range(R, suffix, v, lo, hi))) return rc;
    *out = (uint32_t)v;
    return 0;
}

/* A per-layer count (scalar, or one entry per block) that must be the same on
 * every block where it is non-zero, then in [lo, hi]. n_blocks is validated. */
static int read_uniform(hreader *R, const char *suffix, bool required, uint32_t def, uint32_t n_blocks,
                        uint64_t lo, uint64_t hi, uint32_t *out)
{
    if (!gguf_find_kv(R->f, akey(R, suffix))) {
        if (required) return wk_fail(R->err, WK_ENOTFOUND, "key %s: missing", R->key);
        *out = def;
        return check_range(R, suffix, def, lo, hi);
    }
    uint32_t *vals = calloc(n_blocks, sizeof *vals);
    if (!vals) return wk_fail(R->err, WK_ENOMEM, "out of memory");
    int rc = gguf_get_u32_per_layer(R->f, R->key, n_blocks, vals, R->err);
    uint32_t v = 0;
    for (uint32_t i = 0; !rc && i < n_blocks; i++) {
        if (vals[i] && v && vals[i] != v)
            rc = wk_fail(R->err, WK_EUNSUPPORTED, "key %s: differs between layers (%u vs %u)", R->key, v, vals[i]);
        if (vals[i]) v = vals[i];
    }
    free(vals);
    if (rc) return rc;
    *out = v;
    return check_range(R, suffix, v, lo, hi);
}

/* A float key that must be finite and inside (lo, hi) (lo_open) or [lo, hi). */
static int read_real(hreader *R, const char *suffix, bool required, double def, double lo, bool lo_open, double hi,
                     float *out)
{
    double v;
    int rc = required ? gguf_get_f64(R->f, akey(R, suffix), &v, R->err)
                      : gguf_get_f64_or(R->f, akey(R, suffix), def, &v, R->err);
    if (rc) return rc;
    if (!isfinite(v) || (lo_open ? v <= lo : v < lo) || v >= hi)
        return wk_fail(R->err, WK_EFORMAT, "key %s = %g: must be a finite number in %c%g, %g)", R->key, v,
                       lo_open ? '(' : '[', lo, hi);
    *out = (float)v;
    return 0;
}

static const gguf_tensor *blk_tensor(const gguf_file *f, uint32_t il, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%u.%s", il, suffix);
    return gguf_find_tensor(f, name);
}

static int missing(hreader *R, uint32_t il, const char *suffix)
{
    return wk_fail(R->err, WK_EFORMAT, "tensor blk.%u.%s: missing", il, suffix);
}

/* ---- blocks ------------------------------------------------------------------ */

/* Index N of a tensor named "blk.N.<rest>", or -1 for any other name. */
static int64_t block_index(const char *name)
{
    if (strncmp(name, "blk.", 4)) return -1;
    int64_t n = 0;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (*p - '0');
        if (n > (int64_t)UINT32_MAX) return -1; /* beyond any block_count: not a block of this model */
    }
    return *p == '.' ? n : -1;
}

/* block_count must be the number of blocks the tensors describe: blk.0 ..
 * blk.N-1, every one present. Checked before any per-layer table exists. */
static int check_block_count(hreader *R, uint64_t block_count)
{
    const size_t n_tensors = gguf_tensor_count(R->f);
    int64_t max_index = -1;
    const char *max_name = NULL;
    for (size_t i = 0; i < n_tensors; i++) {
        const char *name = gguf_tensor_at(R->f, i)->name_z;
        int64_t n = block_index(name);
        if (n > max_index) max_index = n, max_name = name;
    }
    const uint64_t present = (uint64_t)(max_index + 1);
    /* every block has tensors of its own, so there are no more blocks than tensors */
    if (present > n_tensors)
        return wk_fail(R->err, WK_EFORMAT, "tensor %s: block index %" PRId64 " but the file has only %zu tensors",
                       max_name, max_index, n_tensors);
    if (present == 0) return bad_key(R, "block_count", block_count, "the file has no blk.N tensors");
    if (block_count != present)
        return bad_key(R, "block_count", block_count, "the file has tensors for %" PRIu64 " blocks (blk.0 .. blk.%" PRId64 ")",
                       present, max_index);
    bool *seen = calloc(present, sizeof *seen);
    if (!seen) return wk_fail(R->err, WK_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_tensors; i++) {
        int64_t n = block_index(gguf_tensor_at(R->f, i)->name_z);
        if (n >= 0) seen[n] = true;
    }
    uint64_t hole = present;
    for (uint64_t i = 0; i < present && hole == present; i++)
        if (!seen[i]) hole = i;
    free(seen);
    if (hole < present)
        return bad_key(R, "block_count", block_count, "no tensor of block blk.%" PRIu64 " (the file has blk.%" PRId64 ")",
                       hole, max_index);
    return 0;
}

/* ---- layer kinds (qwen35 hybrids) ---------------------------------------------- */

bool model_layer_is_recurrent(const gguf_file *f, enum model_arch arch, const model_hparams *hp, uint32_t il)
{
    if (!model_arch_is_hybrid(arch)) return false;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", model_arch_name(arch));
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv) return gguf_arr_i64(kv, il) != 0; /* validated: an integer array with an entry per layer */
    return (il + 1) % hp->full_attention_interval != 0;
}

/* Which layers are Gated DeltaNet must agree with the tensors each block holds. */
static int check_layer_kinds(hreader *R, const model_hparams *hp)
{
    const gguf_kv *rec = gguf_find_kv(R->f, akey(R, "attention.recurrent_layers"));
    if (rec && (rec->type != GGUF_T_ARRAY || !gguf_type_is_integer(rec->arr_type) || rec->arr_count < hp->n_layer))
        return wk_fail(R->err, WK_EFORMAT, "key %s: expected an integer array with one entry per layer (%u)", R->key,
                       hp->n_layer);
    const char *decider = rec ? "attention.recurrent_layers" : "full_attention_interval";
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        bool recurrent = model_layer_is_recurrent(R->f, R->arch, hp, il);
        bool has_gdn = blk_tensor(R->f, il, "ssm_a") != NULL, has_attn = blk_tensor(R->f, il, "attn_q.weight") != NULL;
        if (recurrent == has_gdn && recurrent != has_attn) continue;
        char what[160];
        snprintf(what, sizeof what, "makes blk.%u %s layer, but the block %s", il,
                 recurrent ? "a Gated DeltaNet" : "an attention",
                 recurrent ? (has_gdn ? "also has attn_q.weight" : "has no ssm_a")
                           : (has_attn ? "also has ssm_a" : "has no attn_q.weight"));
        if (rec) return wk_fail(R->err, WK_EFORMAT, "key %s.%s (entry %u): %s", R->prefix, decider, il, what);
        return bad_key(R, decider, hp->full_attention_interval, "%s", what);
    }
    return 0;
}

/* ---- attention ------------------------------------------------------------------ */

static int check_attention_tensors(hreader *R, const model_hparams *hp, uint32_t il)
{
    const bool gated = model_arch_is_hybrid(R->arch);
    const gguf_tensor *q = blk_tensor(R->f, il, "attn_q.weight"), *k = blk_tensor(R->f, il, "attn_k.weight"),
                      *v = blk_tensor(R->f, il, "attn_v.weight"), *o = blk_tensor(R->f, il, "attn_output.weight"),
                      *qn = blk_tensor(R->f, il, "attn_q_norm.weight");
    if (!q) return missing(R, il, "attn_q.weight");
    if (!k) return missing(R, il, "attn_k.weight");
    if (!v) return missing(R, il, "attn_v.weight");
    if (!o) return missing(R, il, "attn_output.weight");
    if (qn && qn->ne[0] != hp->d_k)
        return bad_key(R, "attention.key_length", hp->d_k, "tensor blk.%u.attn_q_norm.weight has %" PRId64 " entries",
                       il, qn->ne[0]);
    const uint64_t q_rows = (uint64_t)hp->n_head * hp->d_k * (gated ? 2 : 1);
    if ((uint64_t)q->ne[1] != q_rows)
        return bad_key(R, "attention.head_count", hp->n_head,
                       "%u heads x key_length %u%s%s = %" PRIu64 " query rows, but tensor blk.%u.attn_q.weight has %" PRId64,
                       hp->n_head, hp->d_k, R->dk_note, gated ? " x 2 (query|gate)" : "", q_rows, il, q->ne[1]);
    if ((uint64_t)k->ne[1] != (uint64_t)hp->n_head_kv * hp->d_k)
        return bad_key(R, "attention.head_count_kv", hp->n_head_kv,
                       "%u kv heads x key_length %u%s = %" PRIu64 " key rows, but tensor blk.%u.attn_k.weight has %" PRId64,
                       hp->n_head_kv, hp->d_k, R->dk_note, (uint64_t)hp->n_head_kv * hp->d_k, il, k->ne[1]);
    if ((uint64_t)v->ne[1] != (uint64_t)hp->n_head_kv * hp->d_v)
        return bad_key(R, "attention.value_length", hp->d_v,
                       "%u kv heads x value_length %u = %" PRIu64 " value rows, but tensor blk.%u.attn_v.weight has %" PRId64,
                       hp->n_head_kv, hp->d_v, (uint64_t)hp->n_head_kv * hp->d_v, il, v->ne[1]);
    if ((uint64_t)o->ne[0] != (uint64_t)hp->n_head * hp->d_v)
        return bad_key(R, "attention.value_length", hp->d_v,
                       "%u heads x value_length %u = %" PRIu64 " inputs, but tensor blk.%u.attn_output.weight has %" PRId64,
                       hp->n_head, hp->d_v, (uint64_t)hp->n_head * hp->d_v, il, o->ne[0]);
    return 0;
}

static int read_attention(hreader *R, model_hparams *hp)
{
    int rc;
    if ((rc = read_uniform(R, "attention.head_count", true, 0, hp->n_layer_all, 1, MODEL_MAX_DIM, &hp->n_head)) ||
        (rc = read_uniform(R, "attention.head_count_kv", false, hp->n_head, hp->n_layer_all, 1, MODEL_MAX_DIM,
                           &hp->n_head_kv)))
        return rc;
    if (hp->n_head % hp->n_head_kv)
        return bad_key(R, "attention.head_count_kv", hp->n_head_kv, "does not divide head_count %u", hp->n_head);
    if (!gguf_find_kv(R->f, akey(R, "attention.key_length")))
        snprintf(R->dk_note, sizeof R->dk_note, " (embedding_length %u / head_count %u: the file has no key_length)",
                 hp->n_embd, hp->n_head);
    if ((rc = read_count(R, "attention.key_length", false, hp->n_embd / hp->n_head, 1, MODEL_MAX_DIM, &hp->d_k)) ||
        (rc = read_count(R, "attention.value_length", false, hp->n_embd / hp->n_head, 1, MODEL_MAX_DIM, &hp->d_v)))
        return rc;
    /* the gate of gated attention multiplies the head output element-wise */
    if (model_arch_is_hybrid(R->arch) && hp->d_v != hp->d_k)
        return wk_fail(R->err, WK_EFORMAT,
                       "keys %s.attention.key_length = %u and value_length = %u differ: gated attention needs them equal",
                       R->prefix, hp->d_k, hp->d_v);
    return 0;
}

/* ---- RoPE ------------------------------------------------------------------------- */

static int read_rope(hreader *R, model_hparams *hp)
{
    be_rope_params *r = &hp->rope;
    const bool hybrid = model_arch_is_hybrid(R->arch);
    r->mode = R->arch == MODEL_ARCH_LLAMA ? BE_ROPE_NORM : hybrid ? BE_ROPE_IMROPE : BE_ROPE_NEOX;
    uint32_t n_rot;
    int rc;
    if ((rc = read_count(R, "rope.dimension_count", false, hp->d_k, 2, MODEL_MAX_DIM, &n_rot))) return rc;
    if (n_rot > hp->d_k)
        return bad_key(R, "rope.dimension_count", n_rot, "more than key_length %u%s", hp->d_k, R->dk_note);
    if (n_rot % 2) return bad_key(R, "rope.dimension_count", n_rot, "must be even (dimensions rotate in pairs)");
    r->n_rot = (int32_t)n_rot;
    if ((rc = read_real(R, "rope.freq_base", false, 10000.0, 0.0, true, 1e30, &r->theta))) return rc;
    r->freq_scale = 1.0f;
    gguf_str st;
    if (gguf_find_kv(R->f, akey(R, "rope.scaling.type"))) {
        if ((rc = gguf_get_str(R->f, R->key, &st, R->err))) return rc;
        bool none = st.len == 4 && !memcmp(st.ptr, "none", 4);
        bool linear = st.len == 6 && !memcmp(st.ptr, "linear", 6);
        if (!none && !linear)
            return wk_fail(R->err, WK_EUNSUPPORTED, "key %s: rope scaling '%.*s' not supported", R->key,
                           (int)(st.len > 64 ? 64 : st.len), st.ptr);
    }
    float factor = 0.0f;
    if ((rc = read_real(R, "rope.scaling.factor", false, 0.0, 0.0, false, 1e30, &factor))) return rc;
    if (factor == 0.0f && (rc = read_real(R, "rope.scale_linear", false, 0.0, 0.0, false, 1e30, &factor))) return rc;
    if (factor > 0.0f) r->freq_scale = 1.0f / factor;
    if (!hybrid) return 0;

    /* IMROPE: sections count rotary pairs per position component (t, h, w, e) */
    const gguf_kv *kv = gguf_find_kv(R->f, akey(R, "rope.dimension_sections"));
    if (!kv || kv->type != GGUF_T_ARRAY || !gguf_type_is_integer(kv->arr_type) || kv->arr_count < 3 || kv->arr_count > 4)
        return wk_fail(R->err, WK_EFORMAT, "key %s: missing or not an integer array of 3 or 4 entries", R->key);
    const int64_t pairs = n_rot / 2;
    int64_t s[4] = {0, 0, 0, 0}, sum = 0;
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        s[i] = gguf_arr_i64(kv, i);
        if (s[i] < 0 || s[i] > pairs)
            return wk_fail(R->err, WK_EFORMAT,
                           "key %s: entry %" PRIu64 " = %" PRId64 " is outside 0..%" PRId64
                           " (the rotary pairs of rope.dimension_count %u)",
                           R->key, i, s[i], pairs, n_rot);
        sum += s[i]; /* at most 4 x pairs: no overflow */
    }
    if (sum < 1 || sum > pairs)
        return wk_fail(R->err, WK_EFORMAT,
                       "key %s = [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]: sections sum to %" PRId64
                       ", expected 1..%" PRId64 " (rope.dimension_count %u / 2)",
                       R->key, s[0], s[1], s[2], s[3], sum, pairs, n_rot);
    for (int i = 0; i < 4; i++) r->sections[i] = (int32_t)s[i];
    return 0;
}

/* ---- FFN -------------------------------------------------------------------------- */

static int read_ffn(hreader *R, model_hparams *hp)
{
    int rc;
    const bool moe = model_arch_is_moe(R->arch);
    if (!moe) {
        if ((rc = read_uniform(R, "feed_forward_length", true, 0, hp->n_layer_all, 1, MODEL_MAX_DIM, &hp->n_ff)))
            return rc;
        const gguf_tensor *g = blk_tensor(R->f, 0, "ffn_gate.weight");
        if (!g) return missing(R, 0, "ffn_gate.weight");
        if (g->ne[1] != hp->n_ff)
            return bad_key(R, "feed_forward_length", hp->n_ff, "tensor blk.0.ffn_gate.weight has %" PRId64 " rows",
                           g->ne[1]);
        return 0;
    }
    /* MoE files carry the width of a dense FFN they do not have: capped, then unused */
    uint32_t unused;
    if ((rc = read_uniform(R, "feed_forward_length", false, 0, hp->n_layer_all, 0, MODEL_MAX_DIM, &unused)))
        return rc;
    hp->n_ff = 0;
    if ((rc = read_count(R, "expert_count", true, 0, 1, MODEL_MAX_DIM, &hp->n_expert)) ||
        (rc = read_count(R, "expert_used_count", true, 0, 1, MODEL_MAX_DIM, &hp->n_expert_used)) ||
        (rc = read_count(R, "expert_feed_forward_length", true, 0, 1, MODEL_MAX_DIM, &hp->n_ff_exp)))
        return rc;
    if (hp->n_expert_used > hp->n_expert)
        return bad_key(R, "expert_used_count", hp->n_expert_used, "more than expert_count %u", hp->n_expert);
    const gguf_tensor *router = blk_tensor(R->f, 0, "ffn_gate_inp.weight");
    if (!router) return missing(R, 0, "ffn_gate_inp.weight");
    if (router->ne[1] != hp->n_expert)
        return bad_key(R, "expert_count", hp->n_expert, "tensor blk.0.ffn_gate_inp.weight routes to %" PRId64 " experts",
                       router->ne[1]);
    const gguf_tensor *fused = blk_tensor(R->f, 0, "ffn_gate_up_exps.weight");
    const gguf_tensor *gate = fused ? fused : blk_tensor(R->f, 0, "ffn_gate_exps.weight");
    if (!gate) return missing(R, 0, "ffn_gate_exps.weight");
    if ((uint64_t)gate->ne[1] != (uint64_t)hp->n_ff_exp * (fused ? 2 : 1))
        return bad_key(R, "expert_feed_forward_length", hp->n_ff_exp, "tensor %s has %" PRId64 " rows%s",
                       gate->name_z, gate->ne[1], fused ? " (gate and up)" : "");
    if (R->arch != MODEL_ARCH_QWEN35MOE) return 0;
    const gguf_tensor *sh = blk_tensor(R->f, 0, "ffn_gate_shexp.weight");
    if (!sh) return missing(R, 0, "ffn_gate_shexp.weight");
    if (!gguf_find_kv(R->f, akey(R, "expert_shared_feed_forward_length"))) {
        /* optional key: the tensor gives the width, the binding holds every layer to it */
        if (sh->ne[1] < 1 || sh->ne[1] > MODEL_MAX_DIM)
            return wk_fail(R->err, WK_EFORMAT, "tensor blk.0.ffn_gate_shexp.weight: %" PRId64 " rows", sh->ne[1]);
        hp->n_ff_shexp = (uint32_t)sh->ne[1];
        return 0;
    }
    if ((rc = read_count(R, "expert_shared_feed_forward_length", true, 0, 1, MODEL_MAX_DIM, &hp->n_ff_shexp)))
        return rc;
    if (sh->ne[1] != hp->n_ff_shexp)
        return bad_key(R, "expert_shared_feed_forward_length", hp->n_ff_shexp,
                       "tensor blk.0.ffn_gate_shexp.weight has %" PRId64 " rows", sh->ne[1]);
    return 0;
}

/* ---- Gated DeltaNet ------------------------------------------------------------------- */

static int read_ssm(hreader *R, model_hparams *hp)
{
    int rc;
    uint32_t inner;
    if ((rc = read_count(R, "full_attention_interval", false, 4, 1, MODEL_MAX_DIM, &hp->full_attention_interval)) ||
        (rc = read_count(R, "ssm.conv_kernel", true, 0, 1, MODEL_MAX_DIM, &hp->ssm_conv_k)) ||
        (rc = read_count(R, "ssm.state_size", true, 0, 1, MODEL_MAX_DIM, &hp->ssm_d_k)) ||
        (rc = read_count(R, "ssm.group_count", true, 0, 1, MODEL_MAX_DIM, &hp->ssm_n_hk)) ||
        (rc = read_count(R, "ssm.time_step_rank", true, 0, 1, MODEL_MAX_DIM, &hp->ssm_n_hv)) ||
        (rc = read_count(R, "ssm.inner_size", true, 0, 1, MODEL_MAX_DIM, &inner)))
        return rc;
    if (hp->ssm_n_hv % hp->ssm_n_hk)
        return bad_key(R, "ssm.group_count", hp->ssm_n_hk, "does not divide ssm.time_step_rank %u", hp->ssm_n_hv);
    if (inner % hp->ssm_n_hv)
        return bad_key(R, "ssm.inner_size", inner, "not a multiple of ssm.time_step_rank %u", hp->ssm_n_hv);
    hp->ssm_d_v = inner / hp->ssm_n_hv;
    return 0;
}

static int check_ssm_tensors(hreader *R, const model_hparams *hp, uint32_t il)
{
    const gguf_tensor *a = blk_tensor(R->f, il, "ssm_a"), *norm = blk_tensor(R->f, il, "ssm_norm.weight"),
                      *conv = blk_tensor(R->f, il, "ssm_conv1d.weight");
    if (!a) return missing(R, il, "ssm_a");
    if (!norm) return missing(R, il, "ssm_norm.weight");
    if (!conv) return missing(R, il, "ssm_conv1d.weight");
    const uint64_t inner = (uint64_t)hp->ssm_n_hv * hp->ssm_d_v;
    if (a->ne[0] != hp->ssm_n_hv)
        return bad_key(R, "ssm.time_step_rank", hp->ssm_n_hv, "tensor blk.%u.ssm_a has %" PRId64 " value heads", il,
                       a->ne[0]);
    if (norm->ne[0] != hp->ssm_d_v)
        return bad_key(R, "ssm.inner_size", inner,
                       "inner_size / time_step_rank %u = head dim %u, but tensor blk.%u.ssm_norm.weight has %" PRId64,
                       hp->ssm_n_hv, hp->ssm_d_v, il, norm->ne[0]);
    if (conv->ne[0] != hp->ssm_conv_k)
        return bad_key(R, "ssm.conv_kernel", hp->ssm_conv_k, "tensor blk.%u.ssm_conv1d.weight has %" PRId64 " taps", il,
                       conv->ne[0]);
    const uint64_t channels = 2 * (uint64_t)hp->ssm_n_hk * hp->ssm_d_k + inner;
    if ((uint64_t)conv->ne[1] != channels)
        return bad_key(R, "ssm.state_size", hp->ssm_d_k,
                       "2 x group_count %u x state_size + inner_size %" PRIu64 " = %" PRIu64
                       " conv channels, but tensor blk.%u.ssm_conv1d.weight has %" PRId64,
                       hp->ssm_n_hk, inner, channels, il, conv->ne[1]);
    return 0;
}

/* ---- the whole set ----------------------------------------------------------------- */

int model_hparams_read(const gguf_file *f, enum model_arch arch, model_hparams *hp, wk_error *err)
{
    memset(hp, 0, sizeof *hp);
    hreader R = {f, arch, model_arch_name(arch), {0}, {0}, err};
    const bool hybrid = model_arch_is_hybrid(arch);
    int rc;
    uint64_t block_count;
    if ((rc = gguf_get_u64(f, akey(&R, "block_count"), &block_count, err)) ||
        (rc = check_range(&R, "block_count", block_count, 1, UINT32_MAX)) ||
        (rc = check_block_count(&R, block_count)))
        return rc;
    hp->n_layer_all = (uint32_t)block_count;
    uint32_t nextn;
    if ((rc = read_count(&R, "nextn_predict_layers", false, 0, 0, MODEL_MAX_DIM, &nextn))) return rc;
    if (nextn >= hp->n_layer_all)
        return bad_key(&R, "nextn_predict_layers", nextn, "leaves no main layer of block_count %u", hp->n_layer_all);
    hp->n_layer = hp->n_layer_all - nextn;
    if ((rc = read_count(&R, "context_length", false, 4096, 1, INT32_MAX, &hp->n_ctx_train)) ||
        (rc = read_count(&R, "embedding_length", true, 0, 1, MODEL_MAX_DIM, &hp->n_embd)))
        return rc;
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) return wk_fail(err, WK_EFORMAT, "tensor token_embd.weight: missing");
    if (te->ne[0] != hp->n_embd)
        return bad_key(&R, "embedding_length", hp->n_embd, "tensor token_embd.weight has rows of %" PRId64, te->ne[0]);
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX) /* token ids are int32 */
        return wk_fail(err, WK_EFORMAT, "tensor token_embd.weight: %" PRId64 " rows (vocabulary size 1..%d)",
                       te->ne[1], INT32_MAX);
    hp->n_vocab = (uint32_t)te->ne[1];
    if ((rc = read_attention(&R, hp)) || (rc = read_rope(&R, hp)) ||
        (rc = read_real(&R, "attention.layer_norm_rms_epsilon", true, 0.0, 0.0, true, 1.0, &hp->eps)) ||
        (rc = read_ffn(&R, hp)) || (hybrid && (rc = read_ssm(&R, hp))))
        return rc;

    /* sizes against the first layer of each kind; model.c binds every layer */
    if (hybrid && (rc = check_layer_kinds(&R, hp))) return rc;
    int64_t first_attn = -1, first_rec = -1;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        bool rec = model_layer_is_recurrent(f, arch, hp, il);
        if (rec && first_rec < 0) first_rec = il;
        if (!rec && first_attn < 0) first_attn = il;
    }
    if (first_attn >= 0 && (rc = check_attention_tensors(&R, hp, (uint32_t)first_attn))) return rc;
    if (first_rec >= 0 && (rc = check_ssm_tensors(&R, hp, (uint32_t)first_rec))) return rc;
    return 0;
}
