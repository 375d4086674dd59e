/* Scalar quantizers. Q8_0 / Q8_1 / Q8_K follow llama.cpp's reference
 * (activation) quantizers bit for bit (spec/gguf.md 6.5); the weight types use
 * our own least-squares fits: valid blocks with error comparable to
 * llama-quantize without an importance matrix, not the same bytes. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_impl.h"
#include "util/f16.h"

#define F2H(f) wk_f32_to_f16(f)
#define H2F(h) wk_f16_to_f32(h)

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
/* Round half to even (ggml's nearest_int). */
static inline int nearest(float v) { return (int)rintf(v); }

/* ---- activation formats (bit-exact with llama.cpp) ---------------------- */

/* Q8_0 block: d = amax/127 in F32, q = round-half-away(x / d); returns the
 * F32 d (Q8_1 needs it unrounded). */
static float q8_0_block(const float *x, uint16_t *d_out, int8_t *qs)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    for (int j = 0; j < 32; j++) qs[j] = d != 0.0f ? (int8_t)roundf(x[j] / d) : 0;
    *d_out = F2H(d);
    return d;
}

static void quant_q8_0(const float *x, blk_q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) q8_0_block(x + 32 * i, &b[i].d, b[i].qs);
}

static void quant_q8_1(const float *x, blk_q8_1 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = q8_0_block(x + 32 * i, &b[i].d, b[i].qs);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += b[i].qs[j];
        b[i].s = F2H(d * (float)sum);
    }
}

static void quant_q8_K(const float *x, blk_q8_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        float amax = 0.0f, xmax = 0.0f;
        for (int j = 0; j < 256; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                xmax = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.0f / xmax;
        for (int j = 0; j < 256; j++) {
            int v = nearest(iscale * x[j]);
            b->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b->qs[16 * g + j];
            b->bsums[g] = (int16_t)s;
        }
        b->d = 1.0f / iscale;
    }
}

/* ---- legacy 32-element weight blocks ------------------------------------- */

/* Signed value of the largest magnitude (the sign lets the longer end of an
 * asymmetric code range, e.g. -8..7, take the extreme value). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            m = x[j];
        }
    return m;
}

static void quant_q4_0(const float *x, blk_q4_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, b++) {
        const float d = signed_absmax(x, 32) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = F2H(d);
        for (int j = 0; j < 16; j++) {
            int lo = clampi((int)(x[j] * id + 8.5f), 0, 15);
            int hi = clampi((int)(x[j + 16] * id + 8.5f), 0, 15);
            b->qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void minmax(const float *x, int n, float *lo, float *hi)
{
    *lo = FLT_MAX;
    *hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        *lo = fminf(*lo, x[j]);
        *hi = fmaxf(*hi, x[j]);
    }
}

static void quant_q4_1(const float *x, blk_q4_1 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, b++) {
        float lo, hi;
        minmax(x, 32, &lo, &hi);
        const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = F2H(d);
        b->m = F2H(lo);
        for (int j = 0; j < 16; j++) {
            int q0 = clampi((int)((x[j] - lo) * id + 0.5f), 0, 15);
            int q1 = clampi((int)((x[j + 16] - lo) * id + 0.5f), 0, 15);
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_0(const float *x, blk_q5_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, b++) {
        const float d = signed_absmax(x, 32) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = F2H(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi((int)(x[j] * id + 16.5f), 0, 31);
            int q1 = clampi((int)(x[j + 16] * id + 16.5f), 0, 31);
            b->qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b->qh, &qh, 4);
    }
}

static void quant_q5_1(const float *x, blk_q5_1 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, b++) {
        float lo, hi;
        minmax(x, 32, &lo, &hi);
        const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = F2H(d);
        b->m = F2H(lo);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi((int)((x[j] - lo) * id + 0.5f), 0, 31);
            int q1 = clampi((int)((x[j + 16] - lo) * id + 0.5f), 0, 31);
            b->qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b->qh, &qh, 4);
    }
}

/* ---- fitting helpers for the K-quants and IQ4 ---------------------------- */

/* Fits x ≈ scale·q − minv with integer q in [0, nmax], scale ≥ 0, minv ≥ 0
 * (the K-quant "min" form): a few starting scales, each refined by alternating
 * rounding and a least-squares solve; the best squared error wins. */
static float fit_affine(const float *x, int n, int nmax, float *minv)
{
    float lo, hi;
    minmax(x, n, &lo, &hi);
    if (lo > 0.0f) lo = 0.0f;
    *minv = -lo;
    if (hi <= lo) return 0.0f;
    float best_s = (hi - lo) / (float)nmax, best_o = lo, best_err = FLT_MAX;
    for (int start = -2; start <= 6; start++) {
        float s = (hi - lo) / ((float)nmax + 0.15f * (float)start), o = lo;
        for (int it = 0; it < 4; it++) {
            double sq = 0, sq2 = 0, sx = 0, sxq = 0, err = 0;
            for (int j = 0; j < n; j++) {
                int q = clampi(nearest((x[j] - o) / s), 0, nmax);
                double r = x[j] - (s * (float)q + o);
                err += r * r;
                sq += q;
                sq2 += (double)q * q;
                sx += x[j];
                sxq += (double)x[j] * q;
            }
            if (err < best_err) {
                best_err = (float)err;
                best_s = s;
                best_o = o;
            }
            double det = n * sq2 - sq * sq;
            if (det <= 0) break;
            double ns = (n * sxq - sq * sx) / det, no = (sq2 * sx - sq * sxq) / det;
            if (no > 0) {
                no = 0;
                ns = sxq / sq2;
            }
            if (!(ns > 0)) break;
            s = (float)ns;
            o = (float)no;
        }
    }
    *minv = -best_o;
    return best_s;
}

/* Fits x ≈ scale·v[q] with v one of the nv sorted codebook values (scale may
 * be negative so the largest magnitude can use the longer end of the book). */
static int nearest_code(const int8_t *v, int nv, float t)
{
    int best = 0;
    float bd = fabsf(t - v[0]);
    for (int k = 1; k < nv; k++) {
        float dd = fabsf(t - v[k]);
        if (dd < bd) {
            bd = dd;
            best = k;
        }
    }
    return best;
}

static float fit_sym_book(const float *x, int n, const int8_t *v, int nv)
{
    const float m = signed_absmax(x, n);
    if (m == 0.0f) return 0.0f;
    float best_s = m / (float)v[0], best_err = FLT_MAX;
    for (int start = -3; start <= 6; start++) {
        float s = m / ((float)v[0] + 0.1f * (float)(v[1] - v[0]) * (float)start);
        for (int it = 0; it < 3; it++) {
            double sqq = 0, sxq = 0, err = 0;
            for (int j = 0; j < n; j++) {
                float q = (float)v[nearest_code(v, nv, x[j] / s)];
                double r = x[j] - s * q;
                err += r * r;
                sqq += (double)q * q;
                sxq += (double)x[j] * q;
            }
            if (err < best_err) {
                best_err = (float)err;
                best_s = s;
            }
            if (sqq <= 0) break;
            s = (float)(sxq / sqq);
            if (s == 0.0f) break;
        }
    }
    return best_s;
}

/* Q3_K's signed codes -4..3 as a codebook. */
static const int8_t k_book3[8] = {-4, -3, -2, -1, 0, 1, 2, 3};

/* Uniform-book fit without the linear search (used for Q6_K's 64 codes). */
static float fit_sym_uniform(const float *x, int n, int qmin, int qmax)
{
    const float m = signed_absmax(x, n);
    if (m == 0.0f) return 0.0f;
    float best_s = m / (float)qmin, best_err = FLT_MAX;
    for (int start = -3; start <= 6; start++) {
        float s = m / ((float)qmin + 0.1f * (float)start);
        for (int it = 0; it < 3; it++) {
            double sqq = 0, sxq = 0, err = 0;
            for (int j = 0; j < n; j++) {
                float q = (float)clampi(nearest(x[j] / s), qmin, qmax);
                double r = x[j] - s * q;
                err += r * r;
                sqq += (double)q * q;
                sxq += (double)x[j] * q;
            }
            if (err < best_err) {
                best_err = (float)err;
                best_s = s;
            }
            if (sqq <= 0) break;
            s = (float)(sxq / sqq);
            if (s == 0.0f) break;
        }
    }
    return best_s;
}

/* Quantizes signed sub-block scales s[ns] to integers in [-qrange, qrange-1]
 * with one super-block factor; writes codes to out and returns the factor. */
static float quant_signed_scales(const float *s, int ns, int qrange, int *out)
{
    const float m = signed_absmax(s, ns);
    if (m == 0.0f) {
        for (int i = 0; i < ns; i++) out[i] = 0;
        return 0.0f;
    }
    const float iscale = -(float)qrange / m;
    for (int i = 0; i < ns; i++) out[i] = clampi(nearest(iscale * s[i]), -qrange, qrange - 1);
    return 1.0f / iscale;
}

/* Unsigned scales in [0, qmax]: returns the factor, codes to out. */
static float quant_unsigned_scales(const float *s, int ns, int qmax, int *out)
{
    float m = 0.0f;
    for (int i = 0; i < ns; i++) m = fmaxf(m, s[i]);
    if (m == 0.0f) {
        for (int i = 0; i < ns; i++) out[i] = 0;
        return 0.0f;
    }
    const float d = m / (float)qmax;
    for (int i = 0; i < ns; i++) out[i] = clampi(nearest(s[i] / d), 0, qmax);
    return d;
}

/* Codes of x for the stored (rounded) affine parameters dl, ml. */
static void affine_codes(const float *x, int n, float dl, float ml, int nmax, uint8_t *q)
{
    for (int j = 0; j < n; j++) q[j] = (uint8_t)(dl != 0.0f ? clampi(nearest((x[j] + ml) / dl), 0, nmax) : 0);
}

/* ---- K-quants ------------------------------------------------------------ */

static void quant_q2_K(const float *x, blk_q2_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        float sc[16], mn[16];
        int isc[16], imn[16];
        for (int s = 0; s < 16; s++) sc[s] = fit_affine(x + 16 * s, 16, 3, &mn[s]);
        const float d = quant_unsigned_scales(sc, 16, 15, isc);
        const float dmin = quant_unsigned_scales(mn, 16, 15, imn);
        b->d = F2H(d);
        b->dmin = F2H(dmin);
        const float dq = H2F(b->d), mq = H2F(b->dmin);
        uint8_t q[256];
        for (int s = 0; s < 16; s++) {
            b->scales[s] = (uint8_t)(isc[s] | (imn[s] << 4));
            affine_codes(x + 16 * s, 16, dq * (float)isc[s], mq * (float)imn[s], 3, q + 16 * s);
        }
        memset(b->qs, 0, sizeof b->qs);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++)
                for (int l = 0; l < 32; l++)
                    b->qs[32 * h + l] |= (uint8_t)(q[128 * h + 32 * p + l] << (2 * p));
    }
}

static void quant_q3_K(const float *x, blk_q3_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        float sc[16];
        int isc[16];
        for (int s = 0; s < 16; s++) sc[s] = fit_sym_book(x + 16 * s, 16, k_book3, 8);
        const float d = quant_signed_scales(sc, 16, 32, isc);
        b->d = F2H(d);
        const float dq = H2F(b->d);
        memset(b->scales, 0, sizeof b->scales);
        for (int s = 0; s < 16; s++) {
            int u = isc[s] + 32;
            if (s < 8) b->scales[s] |= (uint8_t)(u & 0xF);
            else b->scales[s - 8] |= (uint8_t)((u & 0xF) << 4);
            b->scales[8 + (s & 3)] |= (uint8_t)((u >> 4) << (2 * (s >> 2)));
        }
        uint8_t q[256];
        for (int s = 0; s < 16; s++) {
            const float dl = dq * (float)isc[s];
            for (int j = 0; j < 16; j++)
                q[16 * s + j] = (uint8_t)(dl != 0.0f ? clampi(nearest(x[16 * s + j] / dl), -4, 3) + 4 : 4);
        }
        memset(b->qs, 0, sizeof b->qs);
        memset(b->hmask, 0, sizeof b->hmask);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++)
                for (int l = 0; l < 32; l++) {
                    int c = q[128 * h + 32 * p + l];
                    b->qs[32 * h + l] |= (uint8_t)((c & 3) << (2 * p));
                    if (c & 4) b->hmask[l] |= (uint8_t)(1u << (4 * h + p));
                }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): scales/mins packed in 12 bytes,
 * codes returned in q[256]. */
static void kquant_scales_mins(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                               uint8_t *scales, uint8_t *q)
{
    float sc[8], mn[8];
    int isc[8], imn[8];
    for (int s = 0; s < 8; s++) sc[s] = fit_affine(x + 32 * s, 32, nmax, &mn[s]);
    *d_out = F2H(quant_unsigned_scales(sc, 8, 63, isc));
    *dmin_out = F2H(quant_unsigned_scales(mn, 8, 63, imn));
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(isc[j] | ((isc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(imn[j] | ((imn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((isc[j + 4] & 0xF) | ((imn[j + 4] & 0xF) << 4));
    }
    const float dq = H2F(*d_out), mq = H2F(*dmin_out);
    for (int s = 0; s < 8; s++)
        affine_codes(x + 32 * s, 32, dq * (float)isc[s], mq * (float)imn[s], nmax, q + 32 * s);
}

static void quant_q4_K(const float *x, blk_q4_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        uint8_t q[256];
        kquant_scales_mins(x, 15, &b->d, &b->dmin, b->scales, q);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
}

static void quant_q5_K(const float *x, blk_q5_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        uint8_t q[256];
        kquant_scales_mins(x, 31, &b->d, &b->dmin, b->scales, q);
        memset(b->qh, 0, sizeof b->qh);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
                b->qs[32 * g + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b->qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
    }
}

static void quant_q6_K(const float *x, blk_q6_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        float sc[16];
        int isc[16];
        for (int s = 0; s < 16; s++) sc[s] = fit_sym_uniform(x + 16 * s, 16, -32, 31);
        /* int8 scales: -128..127 */
        b->d = F2H(quant_signed_scales(sc, 16, 128, isc));
        const float dq = H2F(b->d);
        uint8_t q[256];
        for (int s = 0; s < 16; s++) {
            b->scales[s] = (int8_t)isc[s];
            const float dl = dq * (float)isc[s];
            for (int j = 0; j < 16; j++)
                q[16 * s + j] = (uint8_t)(dl != 0.0f ? clampi(nearest(x[16 * s + j] / dl), -32, 31) + 32 : 32);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = q + 128 * h + l;
                b->ql[64 * h + l] = (uint8_t)((e[0] & 0xF) | ((e[64] & 0xF) << 4));
                b->ql[64 * h + l + 32] = (uint8_t)((e[32] & 0xF) | ((e[96] & 0xF) << 4));
                b->qh[32 * h + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) |
                                              ((e[96] >> 4) << 6));
            }
    }
}

/* ---- IQ4 ------------------------------------------------------------------ */

static void iq4_codes(const float *x, int n, float dl, uint8_t *q)
{
    for (int j = 0; j < n; j++) q[j] = (uint8_t)(dl != 0.0f ? nearest_code(k_iq4nl_values, 16, x[j] / dl) : 8);
}

static void quant_iq4_nl(const float *x, blk_iq4_nl *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, b++) {
        b->d = F2H(fit_sym_book(x, 32, k_iq4nl_values, 16));
        uint8_t q[32];
        iq4_codes(x, 32, H2F(b->d), q);
        for (int j = 0; j < 16; j++) b->qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

static void quant_iq4_xs(const float *x, blk_iq4_xs *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        float sc[8];
        int isc[8];
        for (int s = 0; s < 8; s++) sc[s] = fit_sym_book(x + 32 * s, 32, k_iq4nl_values, 16);
        b->d = F2H(quant_signed_scales(sc, 8, 32, isc));
        const float dq = H2F(b->d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int s = 0; s < 8; s++) {
            int ls = isc[s] + 32;
            b->scales_l[s / 2] |= (uint8_t)((ls & 0xF) << (4 * (s % 2)));
            b->scales_h |= (uint16_t)((ls >> 4) << (2 * s));
            uint8_t q[32];
            iq4_codes(x + 32 * s, 32, dq * (float)isc[s], q);
            for (int j = 0; j < 16; j++) b->qs[16 * s + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
    }
}

int qt_quantize_blocks(enum qt_type type, const float *src, void *dst, int64_t n)
{
    switch (type) {
    case QT_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case QT_F16: {
        uint8_t *p = dst;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = wk_f32_to_f16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return 0;
    }
    case QT_BF16: {
        uint8_t *p = dst;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = wk_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return 0;
    }
    case QT_Q4_0: quant_q4_0(src, dst, n / 32); return 0;
    case QT_Q4_1: quant_q4_1(src, dst, n / 32); return 0;
    case QT_Q5_0: quant_q5_0(src, dst, n / 32); return 0;
    case QT_Q5_1: quant_q5_1(src, dst, n / 32); return 0;
    case QT_Q8_0: quant_q8_0(src, dst, n / 32); return 0;
    case QT_Q8_1: quant_q8_1(src, dst, n / 32); return 0;
    case QT_Q2_K: quant_q2_K(src, dst, n / 256); return 0;
    case QT_Q3_K: quant_q3_K(src, dst, n / 256); return 0;
    case QT_Q4_K: quant_q4_K(src, dst, n / 256); return 0;
    case QT_Q5_K: quant_q5_K(src, dst, n / 256); return 0;
    case QT_Q6_K: quant_q6_K(src, dst, n / 256); return 0;
    case QT_Q8_K: quant_q8_K(src, dst, n / 256); return 0;
    case QT_IQ4_NL: quant_iq4_nl(src, dst, n / 32); return 0;
    case QT_IQ4_XS: quant_iq4_xs(src, dst, n / 256); return 0;
    default: return -1;
    }
}
