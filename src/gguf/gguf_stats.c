/* Precision, shape and cache-size facts derived from GGUF metadata. */
#include "gguf/gguf_stats.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "quant/qtypes.h"

/* ---- tensor classes and bits per weight ---- */

enum gguf_tensor_class gguf_tensor_class_of(const char *name)
{
    if (strncmp(name, "token_embd", 10) == 0) return GGUF_CLASS_EMBED;
    if (strcmp(name, "output.weight") == 0) return GGUF_CLASS_OUTPUT;
    /* norms first: attn_norm, ffn_norm, attn_q_norm, ssm_norm ... are small F32 vectors */
    if (strstr(name, "_norm.") || strstr(name, "_norm_")) return GGUF_CLASS_OTHER;
    if (strstr(name, "attn_") || strstr(name, "ssm_") || strstr(name, "linear_attn") ||
        strstr(name, "time_mix"))
        return GGUF_CLASS_ATTN;
    if (strstr(name, "ffn_")) return GGUF_CLASS_FFN;
    return GGUF_CLASS_OTHER;
}

const char *gguf_tensor_class_name(enum gguf_tensor_class c)
{
    switch (c) {
    case GGUF_CLASS_EMBED: return "embeddings";
    case GGUF_CLASS_OUTPUT: return "output";
    case GGUF_CLASS_ATTN: return "attention";
    case GGUF_CLASS_FFN: return "ffn";
    case GGUF_CLASS_OTHER: return "norms/other";
    default: return "?";
    }
}

static void stat_add(gguf_bytes_stat *s, const gguf_tensor *t)
{
    s->n_tensors++;
    s->n_elements += t->n_elements;
    s->n_bytes += t->n_bytes;
}

void gguf_weight_stats_compute(const gguf_file *f, gguf_weight_stats *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        stat_add(&out->total, t);
        stat_add(&out->by_class[gguf_tensor_class_of(t->name_z)], t);
        if (t->type < sizeof out->by_type / sizeof out->by_type[0]) stat_add(&out->by_type[t->type], t);
    }
}

double gguf_bits_per_weight(const gguf_bytes_stat *s)
{
    return s->n_elements ? 8.0 * (double)s->n_bytes / (double)s->n_elements : 0.0;
}

const char *gguf_file_type_name(uint32_t ftype)
{
    /* llama_ftype values (gguf-py LlamaFileType); removed ids have no name */
    static const char *const names[] = {
        "ALL_F32", "MOSTLY_F16", "MOSTLY_Q4_0", "MOSTLY_Q4_1", NULL, NULL, NULL, "MOSTLY_Q8_0",
        "MOSTLY_Q5_0", "MOSTLY_Q5_1", "MOSTLY_Q2_K", "MOSTLY_Q3_K_S", "MOSTLY_Q3_K_M", "MOSTLY_Q3_K_L",
        "MOSTLY_Q4_K_S", "MOSTLY_Q4_K_M", "MOSTLY_Q5_K_S", "MOSTLY_Q5_K_M", "MOSTLY_Q6_K",
        "MOSTLY_IQ2_XXS", "MOSTLY_IQ2_XS", "MOSTLY_Q2_K_S", "MOSTLY_IQ3_XS", "MOSTLY_IQ3_XXS",
        "MOSTLY_IQ1_S", "MOSTLY_IQ4_NL", "MOSTLY_IQ3_S", "MOSTLY_IQ3_M", "MOSTLY_IQ2_S", "MOSTLY_IQ2_M",
        "MOSTLY_IQ4_XS", "MOSTLY_IQ1_M", "MOSTLY_BF16", NULL, NULL, NULL, "MOSTLY_TQ1_0", "MOSTLY_TQ2_0",
        "MOSTLY_MXFP4_MOE", "MOSTLY_NVFP4", "MOSTLY_Q1_0", "MOSTLY_Q2_0",
    };
    return ftype < sizeof names / sizeof names[0] ? names[ftype] : NULL;
}

/* ---- model shape ---- */

static void copy_gguf_str(char *dst, size_t cap, gguf_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

/* Reads "{arch}.suffix" as an unsigned integer, def when absent. */
static int arch_u64(const gguf_file *f, const char *arch, const char *suffix, uint64_t def, uint64_t *out,
                    wk_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_u64_or(f, key, def, out, err);
}

static int is_hybrid_arch(const char *arch)
{
    return strcmp(arch, "qwen35") == 0 || strcmp(arch, "qwen35moe") == 0 || strcmp(arch, "qwen3next") == 0;
}

/* Per-layer attention facts used by both the summary and the KV size. */
typedef struct layer_plan {
    uint32_t n_layer_all, n_layer;
    uint8_t *full_attn;  /* [n_layer_all] */
    uint32_t *head_kv;   /* [n_layer_all] */
    uint32_t *head;      /* [n_layer_all] */
    uint32_t d_k, d_v;
} layer_plan;

static void plan_free(layer_plan *p)
{
    free(p->full_attn);
    free(p->head_kv);
    free(p->head);
}

/* Per-layer count key: scalar or per-layer array; def when absent. */
static int per_layer(const gguf_file *f, const char *arch, const char *suffix, uint32_t n, uint32_t *out,
                     const uint32_t *def, wk_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find_kv(f, key)) {
        for (uint32_t i = 0; i < n; i++) out[i] = def ? def[i] : 0;
        return 0;
    }
    return gguf_get_u32_per_layer(f, key, n, out, err);
}

static int plan_layers(const gguf_file *f, gguf_model_summary *s, layer_plan *p, wk_error *err)
{
    memset(p, 0, sizeof *p);
    const char *arch = s->arch;
    uint32_t n = s->n_layer_all;
    p->n_layer_all = n;
    p->n_layer = s->n_layer;
    size_t cnt = n ? n : 1;
    p->full_attn = calloc(cnt, 1);
    p->head_kv = calloc(cnt, sizeof *p->head_kv);
    p->head = calloc(cnt, sizeof *p->head);
    if (!p->full_attn || !p->head_kv || !p->head) return wk_fail(err, WK_ENOMEM, "out of memory");
    int rc;
    if ((rc = per_layer(f, arch, "attention.head_count", n, p->head, NULL, err))) return rc;
    if ((rc = per_layer(f, arch, "attention.head_count_kv", n, p->head_kv, p->head, err))) return rc;

    uint64_t interval = 0;
    if ((rc = arch_u64(f, arch, "full_attention_interval", is_hybrid_arch(arch) ? 4 : 0, &interval, err)))
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    const gguf_kv *rec = gguf_find_kv(f, key);
    if (rec && (rec->type != GGUF_T_ARRAY || rec->arr_count < s->n_layer))
        return wk_fail(err, WK_EFORMAT, "key %s: expected an array with one entry per layer (%u)", key, s->n_layer);
    s->full_attn_interval = (uint32_t)interval;
    for (uint32_t i = 0; i < n; i++) {
        int full = 1;
        if (i < s->n_layer) { /* MTP blocks (i >= n_layer) are always full attention */
            if (rec) full = gguf_arr_i64(rec, i) == 0;
            else if (interval) full = (i + 1) % interval == 0;
        }
        p->full_attn[i] = (uint8_t)full;
    }

    uint32_t h0 = 0;
    for (uint32_t i = 0; i < n; i++)
        if (p->full_attn[i] && p->head[i]) {
            h0 = p->head[i];
            break;
        }
    uint64_t dk = 0, dv = 0;
    uint64_t def_hd = h0 ? s->n_embd / h0 : 0;
    if ((rc = arch_u64(f, arch, "attention.key_length", def_hd, &dk, err))) return rc;
    if ((rc = arch_u64(f, arch, "attention.value_length", dk, &dv, err))) return rc;
    /* caps far above real models keep the per-token sums below exact in 64 bits */
    if (dk > 65536 || dv > 65536)
        return wk_fail(err, WK_EFORMAT, "key %s.attention.key_length/value_length: head dims %" PRIu64 "/%" PRIu64
                       " are implausible (> 65536)", arch, dk, dv);
    for (uint32_t i = 0; i < n; i++)
        if (p->head[i] > 65536 || p->head_kv[i] > 65536)
            return wk_fail(err, WK_EFORMAT, "key %s.attention.head_count(_kv): layer %u has %u/%u heads (> 65536)",
                           arch, i, p->head[i], p->head_kv[i]);
    p->d_k = (uint32_t)dk;
    p->d_v = (uint32_t)dv;
    return 0;
}

static int recurrent_sizes(const gguf_file *f, gguf_model_summary *s, wk_error *err)
{
    uint64_t conv_k, d_state, n_group, inner, dt_rank;
    int rc;
    if ((rc = arch_u64(f, s->arch, "ssm.conv_kernel", 0, &conv_k, err))) return rc;
    if ((rc = arch_u64(f, s->arch, "ssm.state_size", 0, &d_state, err))) return rc;
    if ((rc = arch_u64(f, s->arch, "ssm.group_count", 0, &n_group, err))) return rc;
    if ((rc = arch_u64(f, s->arch, "ssm.inner_size", 0, &inner, err))) return rc;
    if ((rc = arch_u64(f, s->arch, "ssm.time_step_rank", 0, &dt_rank, err))) return rc;
    (void)dt_rank;
    /* Gated DeltaNet: conv keeps the last K-1 inputs of q, k (H_k*d_k each)
     * and v (inner); the SSM state is H_v*d_k*d_v = state_size * inner floats. */
    uint64_t conv_dim, conv_bytes, ssm_bytes, per_layer, total;
    int bad = __builtin_mul_overflow(n_group, d_state, &conv_dim) ||
              __builtin_mul_overflow(conv_dim, 2, &conv_dim) || __builtin_add_overflow(conv_dim, inner, &conv_dim) ||
              __builtin_mul_overflow(conv_k ? conv_k - 1 : 0, conv_dim, &conv_bytes) ||
              __builtin_mul_overflow(conv_bytes, 4, &conv_bytes) || __builtin_mul_overflow(d_state, inner, &ssm_bytes) ||
              __builtin_mul_overflow(ssm_bytes, 4, &ssm_bytes) ||
              __builtin_add_overflow(conv_bytes, ssm_bytes, &per_layer) ||
              __builtin_mul_overflow(per_layer, (uint64_t)s->n_recurrent, &total);
    if (bad)
        return wk_fail(err, WK_EFORMAT, "keys %s.ssm.*: recurrent state size overflows (state_size %" PRIu64
                       ", inner_size %" PRIu64 ", group_count %" PRIu64 ", conv_kernel %" PRIu64 ")",
                       s->arch, d_state, inner, n_group, conv_k);
    s->conv_state_bytes_per_layer = conv_bytes;
    s->ssm_state_bytes_per_layer = ssm_bytes;
    s->recurrent_bytes_per_seq = total;
    return 0;
}

int gguf_model_summary_compute(const gguf_file *f, gguf_model_summary *s, wk_error *err)
{
    memset(s, 0, sizeof *s);
    int rc;
    gguf_str str;
    const gguf_kv *kv;
    /* tokenizer facts do not depend on the architecture */
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.model")) && kv->type == GGUF_T_STRING)
        copy_gguf_str(s->tok_model, sizeof s->tok_model, kv->v.str);
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.pre")) && kv->type == GGUF_T_STRING)
        copy_gguf_str(s->tok_pre, sizeof s->tok_pre, kv->v.str);
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.tokens")) && kv->type == GGUF_T_ARRAY) s->tok_vocab = kv->arr_count;
    if ((kv = gguf_find_kv(f, "tokenizer.chat_template")) && kv->type == GGUF_T_STRING) {
        s->has_chat_template = 1;
        s->chat_template_len = kv->v.str.len;
    }
    if (!gguf_find_kv(f, "general.architecture")) return 0;
    if ((rc = gguf_get_str(f, "general.architecture", &str, err))) return rc;
    if (str.len == 0 || str.len >= sizeof s->arch)
        return wk_fail(err, WK_EFORMAT, "key general.architecture: length %" PRIu64 " (must be 1..%zu)", str.len,
                       sizeof s->arch - 1);
    copy_gguf_str(s->arch, sizeof s->arch, str);
    const char *arch = s->arch;

    uint64_t v;
    if ((rc = arch_u64(f, arch, "context_length", 0, &s->n_ctx_train, err))) return rc;
    if ((rc = arch_u64(f, arch, "embedding_length", 0, &s->n_embd, err))) return rc;
    if ((rc = arch_u64(f, arch, "vocab_size", s->tok_vocab, &s->n_vocab, err))) return rc;
    if ((rc = arch_u64(f, arch, "block_count", 0, &v, err))) return rc;
    /* 2^16 layers is far beyond any model and bounds the per-layer tables */
    if (v > 65536) return wk_fail(err, WK_EFORMAT, "key %s.block_count: %" PRIu64 " is implausible", arch, v);
    s->n_layer_all = (uint32_t)v;
    if ((rc = arch_u64(f, arch, "nextn_predict_layers", 0, &v, err))) return rc;
    if (v > s->n_layer_all)
        return wk_fail(err, WK_EFORMAT, "key %s.nextn_predict_layers: %" PRIu64 " exceeds block_count %u", arch, v,
                       s->n_layer_all);
    s->n_nextn = (uint32_t)v;
    s->n_layer = s->n_layer_all - s->n_nextn;
    if ((rc = arch_u64(f, arch, "expert_count", 0, &v, err))) return rc;
    s->n_expert = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    if ((rc = arch_u64(f, arch, "expert_used_count", 0, &v, err))) return rc;
    s->n_expert_used = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    if ((rc = arch_u64(f, arch, "expert_feed_forward_length", 0, &s->n_ff_exp, err))) return rc;
    if ((rc = arch_u64(f, arch, "expert_shared_feed_forward_length", 0, &s->n_ff_shexp, err))) return rc;
    if (s->n_layer_all) {
        uint32_t *ff = calloc(s->n_layer_all, sizeof *ff);
        if (!ff) return wk_fail(err, WK_ENOMEM, "out of memory");
        rc = per_layer(f, arch, "feed_forward_length", s->n_layer_all, ff, NULL, err);
        s->n_ff = ff[0];
        free(ff);
        if (rc) return rc;
    }

    layer_plan p;
    rc = plan_layers(f, s, &p, err);
    if (rc == 0) {
        int first = 1;
        for (uint32_t i = 0; i < s->n_layer; i++) {
            if (!p.full_attn[i]) {
                s->n_recurrent++;
                continue;
            }
            s->n_full_attn++;
            s->kv_elems_per_token += (uint64_t)p.head_kv[i] * ((uint64_t)p.d_k + p.d_v);
            if (first) {
                s->n_head = p.head[i];
                s->n_head_kv = p.head_kv[i];
                first = 0;
            }
        }
        if (first && p.n_layer_all) { /* no main full-attention layer: show layer 0 */
            s->n_head = p.head[0];
            s->n_head_kv = p.head_kv[0];
        }
        s->head_dim_k = p.d_k;
        s->head_dim_v = p.d_v;
    }
    plan_free(&p);
    if (rc) return rc;
    if (s->n_recurrent) return recurrent_sizes(f, s, err);
    return 0;
}

static uint64_t row_bytes_rounded(const qt_traits *t, uint64_t n)
{
    return (n + t->block_elems - 1) / t->block_elems * t->block_bytes;
}

uint64_t gguf_kv_bytes_per_token(const gguf_file *f, const gguf_model_summary *s, uint32_t cache_type)
{
    const qt_traits *t = qt_traits_of(cache_type);
    if (!t || !s->arch[0]) return 0;
    gguf_model_summary copy = *s;
    layer_plan p;
    wk_error err;
    uint64_t total = 0;
    if (plan_layers(f, &copy, &p, &err) == 0)
        for (uint32_t i = 0; i < p.n_layer; i++)
            if (p.full_attn[i])
                total += row_bytes_rounded(t, (uint64_t)p.head_kv[i] * p.d_k) +
                         row_bytes_rounded(t, (uint64_t)p.head_kv[i] * p.d_v);
    plan_free(&p);
    return total;
}
