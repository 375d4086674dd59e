/* CPU ops for Gated DeltaNet layers (spec architectures.md 8.5, 8.6): the
 * causal depthwise conv with state, and the delta-rule scan in two forms —
 * token by token (decode) and chunked WY/UT (prefill). Both are parallel over
 * value heads; each head's state is touched by one worker only. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

#define GDN_CHUNK 64 /* chunk length of the WY form, as llama.cpp's fallback graph */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* ln(1 + e^x); for large x that is x (and expf would overflow) */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- conv ----------------------------------------------------------------------- */

typedef struct conv_job {
    cpu_backend *cb;
    float *y;
    size_t y_stride;
    const float *x;
    size_t x_stride;
    int64_t n_t, n_ch;
    const float *w;
    int32_t k;
    float *state;
} conv_job;

#define CONV_T_BLOCK 64 /* tokens per pass: bounds the per-worker window scratch */

/* Channels [b, e) for every token, time-major so every inner loop runs over
 * contiguous channels (taps transposed to [tap][channel] per slice). The
 * window holds the K-1 previous inputs then a block of new ones. */
static void conv_range(void *p, long b, long e, int worker)
{
    conv_job *j = p;
    const cpu_vec_fns *vec = j->cb->vec;
    const int32_t K = j->k;
    const long nc = e - b;
    float *wt = j->cb->work[worker].p;       /* [K][nc] */
    float *win = wt + (size_t)K * nc;        /* [(K-1) + CONV_T_BLOCK][nc] */
    for (int32_t kk = 0; kk < K; kk++)
        for (long c = 0; c < nc; c++) wt[(size_t)kk * nc + c] = j->w[(b + c) * K + kk];
    for (int32_t r = 0; r < K - 1; r++) memcpy(win + (size_t)r * nc, j->state + (size_t)r * j->n_ch + b, sizeof(float) * nc);
    for (int64_t t0 = 0; t0 < j->n_t; t0 += CONV_T_BLOCK) {
        int64_t nt = j->n_t - t0 < CONV_T_BLOCK ? j->n_t - t0 : CONV_T_BLOCK;
        for (int64_t t = 0; t < nt; t++)
            memcpy(win + (size_t)(K - 1 + t) * nc, j->x + (t0 + t) * j->x_stride + b, sizeof(float) * nc);
        for (int64_t t = 0; t < nt; t++) {
            float *y = j->y + (t0 + t) * j->y_stride + b;
            memset(y, 0, sizeof(float) * nc);
            for (int32_t kk = 0; kk < K; kk++) vec->mul_add(y, wt + (size_t)kk * nc, win + (size_t)(t + kk) * nc, (int)nc);
            vec->silu(y, y, (int)nc);
        }
        /* the last K-1 rows of this block start the next window */
        memmove(win, win + (size_t)nt * nc, sizeof(float) * (size_t)(K - 1) * nc);
    }
    for (int32_t r = 0; r < K - 1; r++) memcpy(j->state + (size_t)r * j->n_ch + b, win + (size_t)r * nc, sizeof(float) * nc);
}

/* Same result one channel at a time without scratch (used only if the scratch
 * cannot be allocated). */
static void conv_range_direct(void *p, long b, long e, int worker)
{
    (void)worker;
    conv_job *j = p;
    const int32_t K = j->k;
    for (long ch = b; ch < e; ch++) {
        const float *w = j->w + ch * K;
#define WIN(i) ((i) < K - 1 ? j->state[(size_t)(i) * j->n_ch + ch] : j->x[(size_t)((i) - (K - 1)) * j->x_stride + ch])
        for (int64_t t = 0; t < j->n_t; t++) {
            float acc = 0.0f;
            for (int32_t kk = 0; kk < K; kk++) acc += w[kk] * WIN(t + kk);
            j->y[t * j->y_stride + ch] = silu(acc);
        }
        for (int32_t r = 0; r < K - 1; r++) {
            float v = WIN(j->n_t + r);
            j->state[(size_t)r * j->n_ch + ch] = v;
        }
#undef WIN
    }
}

void cpu_op_ssm_conv(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_t, int64_t n_ch, const float *w, int32_t k, float *state)
{
    cpu_backend *cb = cpu_of(be);
    conv_job j = {cb, y, y_stride, x, x_stride, n_t, n_ch, w, k, state};
    long slice = (long)(n_ch + cb->n_threads - 1) / cb->n_threads;
    size_t need = (size_t)slice * (size_t)(2 * k - 1 + CONV_T_BLOCK);
    for (int i = 0; i < cb->n_threads; i++)
        /* worker 0 may get every channel when the op runs unsplit */
        if (cpu_buf_reserve(&cb->work[i], i == 0 ? (size_t)n_ch * (size_t)(2 * k - 1 + CONV_T_BLOCK) : need)) {
            cpu_parallel_for(cb, n_ch, 256, conv_range_direct, &j);
            return;
        }
    cpu_parallel_for(cb, n_ch, 256, conv_range, &j);
}

/* ---- delta rule ---------------------------------------------------------------------- */

typedef struct gdn_job {
    const be_gdn_args *a;
    const cpu_vec_fns *vec;
    float *qn, *kn;      /* normalized q (scaled) and k: [n_t][n_hk][d_k] */
    float *beta, *g;     /* [n_t][n_hv] */
    float *decay;        /* e^g [n_t][n_hv] */
    cpu_backend *cb;
} gdn_job;

/* L2 norm of q and k heads, q scaled by 1/sqrt(d_k); gates β and g. */
static void gdn_prep_range(void *p, long b, long e, int worker)
{
    (void)worker;
    gdn_job *j = p;
    const be_gdn_args *a = j->a;
    float qscale = 1.0f / sqrtf((float)a->d_k);
    for (long t = b; t < e; t++) {
        for (int32_t i = 0; i < a->n_hk; i++) {
            for (int which = 0; which < 2; which++) {
                const float *src = (which ? a->k : a->q) + t * a->qk_stride + (size_t)i * a->d_k;
                float *dst = (which ? j->kn : j->qn) + ((size_t)t * a->n_hk + i) * a->d_k;
                double sum = 0.0;
                for (int32_t c = 0; c < a->d_k; c++) sum += (double)(src[c] * src[c]);
                float s = 1.0f / fmaxf(sqrtf((float)sum), a->eps);
                if (!which) s *= qscale;
                for (int32_t c = 0; c < a->d_k; c++) dst[c] = src[c] * s;
            }
        }
        for (int32_t h = 0; h < a->n_hv; h++) {
            size_t ix = (size_t)t * a->n_hv + h;
            j->beta[ix] = sigmoid(a->beta[ix]);
            j->g[ix] = a->ssm_a[h] * softplus(a->alpha[ix] + a->dt_bias[h]);
            j->decay[ix] = expf(j->g[ix]);
        }
    }
}

/* Token-by-token recurrence for value head h (spec 8.5 step 6). */
/* Column block of the state run through all tokens before the next one,
 * copied to a contiguous scratch: a 128 × 64 block (32 KiB) then stays in L1
 * (in place, its 512-byte row stride would fold onto half the L1 sets). One
 * token runs in place: the copies would be two more passes over the state. */
#define GDN_COL_BLOCK 64

/* Token-by-token recurrence for value head h (spec 8.5 step 6). */
static void gdn_head_sequential(gdn_job *j, int32_t h, float *tmp)
{
    const be_gdn_args *a = j->a;
    const int32_t d_k = a->d_k, d_v = a->d_v, ik = h % a->n_hk;
    float *S = a->state + (size_t)h * d_k * d_v;
    for (int32_t c0 = 0; c0 < d_v; c0 += GDN_COL_BLOCK) {
        int32_t nc = d_v - c0 < GDN_COL_BLOCK ? d_v - c0 : GDN_COL_BLOCK;
        if (a->n_t == 1) { /* one token (decode): nothing to reuse, so in place, without the two copies */
            j->vec->gdn_step(S + c0, d_k, d_v, nc, j->qn + (size_t)ik * d_k, j->kn + (size_t)ik * d_k,
                             a->v + (size_t)h * d_v + c0, j->decay[h], j->beta[h], a->out + (size_t)h * d_v + c0);
            continue;
        }
        for (int32_t i = 0; i < d_k; i++) memcpy(tmp + (size_t)i * nc, S + (size_t)i * d_v + c0, sizeof(float) * nc);
        for (int32_t t = 0; t < a->n_t; t++) {
            const float *q = j->qn + ((size_t)t * a->n_hk + ik) * d_k;
            const float *k = j->kn + ((size_t)t * a->n_hk + ik) * d_k;
            const float *v = a->v + (size_t)t * a->v_stride + (size_t)h * d_v + c0;
            float *o = a->out + (size_t)t * a->out_stride + (size_t)h * d_v + c0;
            j->vec->gdn_step(tmp, d_k, nc, nc, q, k, v, j->decay[(size_t)t * a->n_hv + h],
                             j->beta[(size_t)t * a->n_hv + h], o);
        }
        for (int32_t i = 0; i < d_k; i++) memcpy(S + (size_t)i * d_v + c0, tmp + (size_t)i * nc, sizeof(float) * nc);
    }
}

static size_t gdn_chunk_scratch_floats(const be_gdn_args *a)
{
    size_t C = GDN_CHUNK;
    size_t chunked = 2 * C + 3 * C * C + 2 * C * a->d_v + C * a->d_k + 2 * (size_t)a->d_v;
    size_t sequential = (size_t)a->d_k * GDN_COL_BLOCK;
    return chunked > sequential ? chunked : sequential;
}

/* Chunked WY form for value head h (spec 8.6). */
static void gdn_head_chunked(gdn_job *j, int32_t h, float *tmp)
{
    const be_gdn_args *a = j->a;
    const cpu_vec_fns *vec = j->vec;
    const int32_t d_k = a->d_k, d_v = a->d_v, ik = h % a->n_hk, C = GDN_CHUNK;
    float *S = a->state + (size_t)h * d_k * d_v;
    float *G = tmp, *bet = G + C;
    float *A = bet + C, *T = A + (size_t)C * C, *P = T + (size_t)C * C;
    float *U = P + (size_t)C * C, *W = U + (size_t)C * d_v, *Vp = W + (size_t)C * d_k;

    for (int32_t c0 = 0; c0 < a->n_t; c0 += C) {
        int32_t L = a->n_t - c0 < C ? a->n_t - c0 : C;
#define KR(n) (j->kn + ((size_t)(c0 + (n)) * a->n_hk + ik) * d_k)
#define QR(n) (j->qn + ((size_t)(c0 + (n)) * a->n_hk + ik) * d_k)
#define VR(n) (a->v + (size_t)(c0 + (n)) * a->v_stride + (size_t)h * d_v)
        float gsum = 0.0f;
        for (int32_t n = 0; n < L; n++) {
            gsum += j->g[(size_t)(c0 + n) * a->n_hv + h];
            G[n] = gsum;
            bet[n] = j->beta[(size_t)(c0 + n) * a->n_hv + h];
        }
        /* A[n][m] = β_n (k_n·k_m) e^{G_n−G_m} (m < n); P[n][m] = (q_n·k_m) e^{G_n−G_m} (m ≤ n) */
        for (int32_t n = 0; n < L; n++)
            for (int32_t m = 0; m <= n; m++) {
                float gam = expf(G[n] - G[m]);
                if (m < n) A[(size_t)n * C + m] = bet[n] * vec->dot(KR(n), KR(m), d_k) * gam;
                P[(size_t)n * C + m] = vec->dot(QR(n), KR(m), d_k) * gam;
            }
        /* T = (I + A)⁻¹, unit lower triangular: row n = e_n − Σ_{p<n} A[n][p] T[p] */
        for (int32_t n = 0; n < L; n++) {
            float *tn = T + (size_t)n * C;
            for (int32_t m = 0; m < n; m++) {
                float acc = 0.0f;
                for (int32_t p = m; p < n; p++) acc += A[(size_t)n * C + p] * T[(size_t)p * C + m];
                tn[m] = -acc;
            }
            tn[n] = 1.0f;
        }
        /* U = T diag(β) V,  W = T diag(β e^G) K,  then V' = U − W S */
        for (int32_t n = 0; n < L; n++) {
            float *un = U + (size_t)n * d_v, *wn = W + (size_t)n * d_k;
            memset(un, 0, sizeof(float) * d_v);
            memset(wn, 0, sizeof(float) * d_k);
            for (int32_t m = 0; m <= n; m++) {
                float tb = T[(size_t)n * C + m] * bet[m];
                vec->axpy(un, tb, VR(m), d_v);
                vec->axpy(wn, tb * expf(G[m]), KR(m), d_k);
            }
            float *vp = Vp + (size_t)n * d_v;
            memcpy(vp, un, sizeof(float) * d_v);
            for (int32_t i = 0; i < d_k; i++) vec->axpy(vp, -wn[i], S + (size_t)i * d_v, d_v);
        }
        /* o_n = e^{G_n} Sᵀ q_n + Σ_{m≤n} P[n][m] v'_m */
        for (int32_t n = 0; n < L; n++) {
            float *o = a->out + (size_t)(c0 + n) * a->out_stride + (size_t)h * d_v;
            const float *q = QR(n);
            memset(o, 0, sizeof(float) * d_v);
            for (int32_t i = 0; i < d_k; i++) vec->axpy(o, q[i], S + (size_t)i * d_v, d_v);
            vec->scale(o, expf(G[n]), d_v);
            for (int32_t m = 0; m <= n; m++) vec->axpy(o, P[(size_t)n * C + m], Vp + (size_t)m * d_v, d_v);
        }
        /* S ← e^{G_last} S + Σ_m (e^{G_last − G_m} k_m) v'_mᵀ */
        float glast = G[L - 1];
        float dl = expf(glast);
        for (int32_t i = 0; i < d_k; i++) vec->scale(S + (size_t)i * d_v, dl, d_v);
        for (int32_t m = 0; m < L; m++) {
            const float *k = KR(m);
            float e = expf(glast - G[m]);
            for (int32_t i = 0; i < d_k; i++) vec->axpy(S + (size_t)i * d_v, e * k[i], Vp + (size_t)m * d_v, d_v);
        }
#undef KR
#undef QR
#undef VR
    }
}

static void gdn_heads_range(void *p, long b, long e, int worker)
{
    gdn_job *j = p;
    float *tmp = j->cb->work[worker].p;
    for (long h = b; h < e; h++) {
        if (j->a->chunked)
            gdn_head_chunked(j, (int32_t)h, tmp);
        else
            gdn_head_sequential(j, (int32_t)h, tmp);
    }
}

int cpu_op_gdn(be_backend *be, const be_gdn_args *a, wk_error *err)
{
    cpu_backend *cb = cpu_of(be);
    if (a->n_t <= 0) return 0;
    if (a->n_hk <= 0 || a->n_hv % a->n_hk != 0)
        return wk_fail(err, WK_EINVAL, "gated deltanet: %d value heads not a multiple of %d key heads",
                       a->n_hv, a->n_hk);
    /* shared prep buffer (normalized q/k, gates) lives in cb->shared, per-head scratch in work[] */
    size_t prep = 2 * (size_t)a->n_t * a->n_hk * a->d_k + 3 * (size_t)a->n_t * a->n_hv;
    if (cpu_buf_reserve(&cb->shared, prep)) return wk_fail(err, WK_ENOMEM, "gated deltanet: out of memory");
    size_t per = gdn_chunk_scratch_floats(a);
    for (int w = 0; w < cb->n_threads; w++)
        if (cpu_buf_reserve(&cb->work[w], per)) return wk_fail(err, WK_ENOMEM, "gated deltanet: out of memory");
    gdn_job j = {a, cb->vec, NULL, NULL, NULL, NULL, NULL, cb};
    j.qn = cb->shared.p;
    j.kn = j.qn + (size_t)a->n_t * a->n_hk * a->d_k;
    j.beta = j.kn + (size_t)a->n_t * a->n_hk * a->d_k;
    j.g = j.beta + (size_t)a->n_t * a->n_hv;
    j.decay = j.g + (size_t)a->n_t * a->n_hv;
    cpu_parallel_for(cb, a->n_t, 16, gdn_prep_range, &j);
    cpu_parallel_for(cb, a->n_hv, 2, gdn_heads_range, &j);
    return 0;
}
