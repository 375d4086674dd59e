/* Per-tensor type rules (quant_mix.h): llama-quantize's categories, mixes,
 * use_more_bits and shape fallbacks (shared/spec/gguf.md section 7). */
#include "quant/quant_mix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quant/qtypes.h"

/* tensor_get_category of llama-quantize, plus "other" (the base type) */
enum cat { CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUTPUT, CAT_FFN_GATE, CAT_FFN_UP,
           CAT_FFN_DOWN, CAT_OTHER };

static const struct {
    const char *name;
    enum qt_mix mix;
} k_mixes[] = {{"Q4_K_M", QT_MIX_Q4_K_M}, {"Q5_K_M", QT_MIX_Q5_K_M}, {"Q4_K_E8", QT_MIX_Q4_K_E8}};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool qt_mix_quantizable(const char *name, uint32_t n_dims)
{
    return n_dims >= 2 && ends_with(name, "weight") && !strstr(name, "_norm.weight") && !strstr(name, "ffn_gate_inp") &&
           !strstr(name, "ssm_conv1d");
}

bool qt_mix_is_attn_v_like(const char *name)
{
    return strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight");
}

static enum cat category(const char *name)
{
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return CAT_TOKEN_EMBD;
    if (qt_mix_is_attn_v_like(name)) return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return CAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static int is_expert_stack(const char *name) { return strstr(name, "_exps.") != NULL; }

int32_t qt_mix_layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 || *end != '.' || v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
}

static uint32_t base_type(const qt_mix_spec *s)
{
    switch (s->mix) {
    case QT_MIX_PURE: return s->type;
    case QT_MIX_Q5_K_M: return QT_Q5_K;
    case QT_MIX_Q6_K: return QT_Q6_K;
    case QT_MIX_Q4_K_M:
    case QT_MIX_Q4_K_E8: return QT_Q4_K;
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
uint32_t qt_mix_fallback(uint32_t type, int64_t ne0)
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

uint32_t qt_mix_choose(const qt_mix_spec *s, const qt_mix_model *m, qt_mix_state *st, const char *name,
                       uint32_t n_dims, int64_t ne0)
{
    if (!qt_mix_quantizable(name, n_dims)) return QT_MIX_KEEP;
    const enum cat cat = category(name);
    if (cat == CAT_ATTN_V) st->i_attention_wv++;
    if (s->expert_type >= 0 && is_expert_stack(name)) return qt_mix_fallback((uint32_t)s->expert_type, ne0);
    const uint32_t base = base_type(s);
    if (s->mix == QT_MIX_PURE) return qt_mix_fallback(base, ne0);
    const int eight_experts = m->n_expert == 8;
    const int k_mix = s->mix == QT_MIX_Q4_K_M || s->mix == QT_MIX_Q5_K_M || s->mix == QT_MIX_Q4_K_E8;
    const int32_t layer = qt_mix_layer_of(name);
    uint32_t type = base;
    if (cat == CAT_OUTPUT || (cat == CAT_TOKEN_EMBD && m->tied_output)) {
        type = base == QT_Q8_0 ? QT_Q8_0 : QT_Q6_K;
    } else if (cat == CAT_ATTN_V) {
        if (eight_experts) type = QT_Q8_0; /* llama.cpp: ~128 MB for 8-expert models */
        else if (k_mix && use_more_bits(st->i_attention_wv - 1, m->n_attention_wv)) type = QT_Q6_K;
    } else if (cat == CAT_ATTN_K) {
        if (eight_experts) type = QT_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        if (s->mix == QT_MIX_Q4_K_E8 && is_expert_stack(name)) type = QT_Q8_0;
        else if (k_mix && use_more_bits(layer > 0 ? (uint32_t)layer : 0, m->n_layer)) type = QT_Q6_K;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (eight_experts && (base == QT_Q4_K || base == QT_Q5_K)) type = QT_Q5_K;
    }
    return qt_mix_fallback(type, ne0);
}

static int parse(const char *spec, qt_mix_spec *out, int ftype, wk_error *err)
{
    memset(out, 0, sizeof *out);
    out->expert_type = -1;
    for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
        if (strcasecmp(spec, k_mixes[i].name) == 0) {
            out->mix = k_mixes[i].mix;
            out->type = QT_Q4_K;
            return 0;
        }
    int t = qt_type_from_name(spec);
    const qt_traits *tr = t >= 0 ? qt_traits_of((uint32_t)t) : NULL;
    if (!tr || !tr->weight_ok)
        return wk_fail(err, WK_EINVAL,
                       "unknown type '%s' (weight types: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k "
                       "q5_k q6_k iq4_nl iq4_xs; mixes: q4_k_m q5_k_m q4_k_e8)",
                       spec);
    out->mix = ftype && t == QT_Q6_K ? QT_MIX_Q6_K : QT_MIX_PURE;
    out->type = (uint32_t)t;
    return 0;
}

int qt_mix_parse(const char *spec, qt_mix_spec *out, wk_error *err) { return parse(spec, out, 0, err); }
int qt_mix_parse_ftype(const char *spec, qt_mix_spec *out, wk_error *err) { return parse(spec, out, 1, err); }

void qt_mix_name(const qt_mix_spec *s, char *buf, size_t cap)
{
    const char *name = qt_type_name(s->mix == QT_MIX_Q6_K ? QT_Q6_K : s->type);
    for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
        if (s->mix == k_mixes[i].mix) name = k_mixes[i].name;
    if (s->expert_type >= 0) snprintf(buf, cap, "%s+experts %s", name, qt_type_name((uint32_t)s->expert_type));
    else snprintf(buf, cap, "%s", name);
}

uint32_t qt_mix_file_type(const qt_mix_spec *s)
{
    switch (s->mix) {
    case QT_MIX_Q4_K_M:
    case QT_MIX_Q4_K_E8: return 15;
    case QT_MIX_Q5_K_M: return 17;
    case QT_MIX_Q6_K: return 18;
    case QT_MIX_PURE: break;
    }
    switch (s->type) {
    case QT_F32: return 0;
    case QT_F16: return 1;
    case QT_Q4_0: return 2;
    case QT_Q4_1: return 3;
    case QT_Q8_0: return 7;
    case QT_Q5_0: return 8;
    case QT_Q5_1: return 9;
    case QT_Q2_K: return 10;
    case QT_Q3_K: return 12; /* llama-quantize --pure Q3_K writes Q3_K_M */
    case QT_Q4_K: return 15;
    case QT_Q5_K: return 17;
    case QT_Q6_K: return 18;
    case QT_IQ4_NL: return 25;
    case QT_IQ4_XS: return 30;
    case QT_BF16: return 32;
    default: return 7;
    }
}
