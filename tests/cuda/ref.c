/* CPU references for the CUDA tests (see ref.h). */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/qtypes.h"
#include "util/f16.h"

static uint64_t next_u64(uint64_t *s)
{
    /* splitmix64: good enough for test data */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float ref_randf(uint64_t *rng) { return (float)((next_u64(rng) >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f; }

float ref_randn(uint64_t *rng)
{
    double u1 = ((next_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (next_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int ref_block_elems(uint32_t t)
{
    switch (t) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: return 256;
    case QT_Q8_0: case QT_Q4_0: case QT_IQ4_NL: case QT_Q5_0: return 32;
    case QT_F32: case QT_F16: case QT_BF16: return 1;
    default: return 0;
    }
}

int ref_block_bytes(uint32_t t)
{
    switch (t) {
    case QT_Q4_K: return 144;
    case QT_Q5_K: return 176;
    case QT_Q6_K: return 210;
    case QT_Q8_0: return 34;
    case QT_Q4_0: case QT_IQ4_NL: return 18;
    case QT_Q5_0: return 22;
    case QT_F32: return 4;
    case QT_F16: case QT_BF16: return 2;
    default: return 0;
    }
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = wk_f32_to_f16(v);
    memcpy(p, &h, 2);
}

void ref_random_blocks(uint32_t t, void *dst, int64_t n, uint64_t *rng)
{
    int be = ref_block_elems(t), bb = ref_block_bytes(t);
    int64_t nb = n / be;
    uint8_t *p = dst;
    for (int64_t i = 0; i < nb * bb; i++) p[i] = (uint8_t)next_u64(rng);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * bb;
        float d = (0.5f + 0.5f * fabsf(ref_randf(rng))) * 0.01f;
        switch (t) {
        case QT_Q4_K: case QT_Q5_K:
            put_f16(blk, d);
            put_f16(blk + 2, d * 0.5f * fabsf(ref_randf(rng)));
            break;
        case QT_Q6_K: put_f16(blk + 208, d); break;
        case QT_Q8_0: case QT_Q4_0: case QT_IQ4_NL: case QT_Q5_0: put_f16(blk, ref_randf(rng) < 0 ? -d : d); break;
        case QT_F32: { float v = ref_randf(rng); memcpy(blk, &v, 4); break; }
        case QT_F16: put_f16(blk, ref_randf(rng)); break;
        case QT_BF16: { uint16_t h = wk_f32_to_bf16(ref_randf(rng)); memcpy(blk, &h, 2); break; }
        }
    }
}

static const int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return wk_f16_to_f32(h);
}

static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void ref_dequant_row(uint32_t t, const void *src, float *y, int64_t n)
{
    const uint8_t *p = src;
    int be = ref_block_elems(t), bb = ref_block_bytes(t);
    for (int64_t b = 0; b < n / be; b++, y += be) {
        const uint8_t *blk = p + b * bb;
        switch (t) {
        case QT_F32: memcpy(y, blk, 4); break;
        case QT_F16: y[0] = f16_at(blk); break;
        case QT_BF16: { uint16_t h; memcpy(&h, blk, 2); y[0] = wk_bf16_to_f32(h); break; }
        case QT_Q8_0: {
            float d = f16_at(blk);
            for (int j = 0; j < 32; j++) y[j] = d * (int8_t)blk[2 + j];
            break;
        }
        case QT_Q4_0: case QT_IQ4_NL: {
            float d = f16_at(blk);
            for (int j = 0; j < 16; j++) {
                int lo = blk[2 + j] & 0xF, hi = blk[2 + j] >> 4;
                y[j] = t == QT_Q4_0 ? d * (lo - 8) : d * k_iq4nl[lo];
                y[j + 16] = t == QT_Q4_0 ? d * (hi - 8) : d * k_iq4nl[hi];
            }
            break;
        }
        case QT_Q4_K: case QT_Q5_K: {
            float d = f16_at(blk), dmin = f16_at(blk + 2);
            const uint8_t *sc = blk + 4;
            const uint8_t *qh = blk + 16;
            const uint8_t *qs = blk + (t == QT_Q4_K ? 16 : 48);
            for (int g = 0; g < 4; g++)
                for (int half = 0; half < 2; half++) {
                    int j = 2 * g + half, s, m;
                    scale_min_k4(j, sc, &s, &m);
                    for (int l = 0; l < 32; l++) {
                        int code = (qs[32 * g + l] >> (4 * half)) & 0xF;
                        if (t == QT_Q5_K) code += 16 * ((qh[l] >> j) & 1);
                        y[64 * g + 32 * half + l] = d * s * code - dmin * m;
                    }
                }
            break;
        }
        case QT_Q6_K: {
            const uint8_t *ql = blk, *qh = blk + 128;
            const int8_t *sc = (const int8_t *)(blk + 192);
            float d = f16_at(blk + 208);
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    int s = l / 16;
                    int q1 = (ql[64 * h + l] & 0xF) | (((qh[32 * h + l] >> 0) & 3) << 4);
                    int q2 = (ql[64 * h + l + 32] & 0xF) | (((qh[32 * h + l] >> 2) & 3) << 4);
                    int q3 = (ql[64 * h + l] >> 4) | (((qh[32 * h + l] >> 4) & 3) << 4);
                    int q4 = (ql[64 * h + l + 32] >> 4) | (((qh[32 * h + l] >> 6) & 3) << 4);
                    y[128 * h + l] = d * sc[8 * h + s + 0] * (q1 - 32);
                    y[128 * h + l + 32] = d * sc[8 * h + s + 2] * (q2 - 32);
                    y[128 * h + l + 64] = d * sc[8 * h + s + 4] * (q3 - 32);
                    y[128 * h + l + 96] = d * sc[8 * h + s + 6] * (q4 - 32);
                }
            break;
        }
        }
    }
}

void ref_round_act(const float *x, float *out, int64_t n, int group)
{
    for (int64_t b = 0; b < n; b += group) {
        if (group == 32) { /* Q8_0: d = amax/127, q = round(x/d), d stored as F16 */
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b + j]));
            float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            float dh = wk_f16_to_f32(wk_f32_to_f16(d));
            for (int j = 0; j < 32; j++) out[b + j] = dh * roundf(x[b + j] * id);
        } else { /* Q8_K */
            float amax = 0, mx = 0;
            for (int j = 0; j < 256; j++)
                if (fabsf(x[b + j]) > amax) {
                    amax = fabsf(x[b + j]);
                    mx = x[b + j];
                }
            if (amax == 0) {
                for (int j = 0; j < 256; j++) out[b + j] = 0;
                continue;
            }
            float iscale = -127.0f / mx;
            for (int j = 0; j < 256; j++) {
                float q = rintf(iscale * x[b + j]);
                if (q > 127) q = 127;
                out[b + j] = q * (1.0f / iscale);
            }
        }
    }
}

double ref_rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isinf(a[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Row p of one head of a KV cache as floats: d F16 values (kv_type 0), or
 * d/32 Q8_0 blocks (kv_type 1: F16 scale then 32 int8, value = scale · code). */
static void kv_row(const uint16_t *head, int kv_type, int d, int p, float *out)
{
    if (kv_type == 1) {
        const uint8_t *b = (const uint8_t *)(head + (size_t)p * (d / 32 * 17));
        for (int i = 0; i < d; i += 32, b += 34) {
            uint16_t h;
            memcpy(&h, b, 2);
            const float s = wk_f16_to_f32(h);
            for (int j = 0; j < 32; j++) out[i + j] = s * (float)(int8_t)b[2 + j];
        }
        return;
    }
    for (int c = 0; c < d; c++) out[c] = wk_f16_to_f32(head[(size_t)p * d + c]);
}

void ref_attention(const float *q, size_t q_stride, int n_q, int q_pos0, const uint16_t *k,
                   const uint16_t *v, size_t kv_head_stride, int n_kv, int n_head, int n_head_kv, int d,
                   float scale, int approx, int global, int window, int dense_from, float *out,
                   size_t out_stride)
{
    ref_attention_kv(q, q_stride, n_q, q_pos0, k, v, kv_head_stride, 0, n_kv, n_head, n_head_kv, d, scale, approx,
                     global, window, dense_from, out, out_stride);
}

void ref_attention_kv(const float *q, size_t q_stride, int n_q, int q_pos0, const uint16_t *k,
                      const uint16_t *v, size_t kv_head_stride, int kv_type, int n_kv, int n_head, int n_head_kv,
                      int d, float scale, int approx, int global, int window, int dense_from, float *out,
                      size_t out_stride)
{
    (void)n_kv;
    int ratio = n_head / n_head_kv;
    double *s = malloc(sizeof(double) * (size_t)(q_pos0 + n_q));
    double *o = malloc(sizeof(double) * (size_t)d);
    float *row = malloc(sizeof(float) * (size_t)d);
    for (int i = 0; i < n_q; i++) {
        int p = q_pos0 + i;
        for (int h = 0; h < n_head; h++) {
            int g = h / ratio;
            const float *qh = q + (size_t)i * q_stride + (size_t)h * d;
            double mx = -INFINITY;
            for (int j = 0; j <= p; j++) {
                int ok = !approx || j < global || p - j < window || p >= dense_from;
                if (!ok) {
                    s[j] = -INFINITY;
                    continue;
                }
                kv_row(k + g * kv_head_stride, kv_type, d, j, row);
                double acc = 0;
                for (int c = 0; c < d; c++) acc += (double)qh[c] * row[c];
                s[j] = acc * scale;
                if (s[j] > mx) mx = s[j];
            }
            double l = 0;
            for (int c = 0; c < d; c++) o[c] = 0;
            for (int j = 0; j <= p; j++) {
                if (s[j] == -INFINITY) continue;
                double e = exp(s[j] - mx);
                l += e;
                kv_row(v + g * kv_head_stride, kv_type, d, j, row);
                for (int c = 0; c < d; c++) o[c] += e * row[c];
            }
            float *oh = out + (size_t)i * out_stride + (size_t)h * d;
            for (int c = 0; c < d; c++) oh[c] = (float)(o[c] / l);
        }
    }
    free(s);
    free(o);
    free(row);
}

void ref_gdn(const float *q, const float *k, const float *v, size_t qk_stride, size_t v_stride,
             const float *alpha, const float *beta, const float *ssm_a, const float *dt_bias, int n_t,
             int n_hk, int n_hv, int d_k, int d_v, float eps, float *state, float *out, size_t out_stride)
{
    double *qn = malloc(sizeof(double) * d_k), *kn = malloc(sizeof(double) * d_k);
    double *dl = malloc(sizeof(double) * d_v);
    for (int t = 0; t < n_t; t++)
        for (int j = 0; j < n_hv; j++) {
            int hk = j % n_hk;
            const float *qh = q + (size_t)t * qk_stride + (size_t)hk * d_k;
            const float *kh = k + (size_t)t * qk_stride + (size_t)hk * d_k;
            const float *vh = v + (size_t)t * v_stride + (size_t)j * d_v;
            double sq = 0, sk = 0;
            for (int i = 0; i < d_k; i++) {
                sq += (double)qh[i] * qh[i];
                sk += (double)kh[i] * kh[i];
            }
            double nq = fmax(sqrt(sq), eps), nk = fmax(sqrt(sk), eps);
            for (int i = 0; i < d_k; i++) {
                qn[i] = qh[i] / nq / sqrt((double)d_k);
                kn[i] = kh[i] / nk;
            }
            double b = 1.0 / (1.0 + exp(-(double)beta[(size_t)t * n_hv + j]));
            double a = (double)alpha[(size_t)t * n_hv + j] + dt_bias[j];
            double sp = a > 20 ? a : log1p(exp(a));
            double decay = exp(ssm_a[j] * sp);
            float *S = state + (size_t)j * d_k * d_v;
            for (int c = 0; c < d_v; c++) {
                double kv = 0;
                for (int i = 0; i < d_k; i++) kv += decay * S[(size_t)i * d_v + c] * kn[i];
                dl[c] = b * (vh[c] - kv);
            }
            float *o = out + (size_t)t * out_stride + (size_t)j * d_v;
            for (int c = 0; c < d_v; c++) {
                double acc = 0;
                for (int i = 0; i < d_k; i++) {
                    double s = decay * S[(size_t)i * d_v + c] + kn[i] * dl[c];
                    S[(size_t)i * d_v + c] = (float)s;
                    acc += s * qn[i];
                }
                o[c] = (float)acc;
            }
        }
    free(qn);
    free(kn);
    free(dl);
}
