/* CPU attention: flash-attention style (online softmax over key tiles) over
 * an F16 KV cache, causal, GQA.
 *
 * Work is split into items of (kv head, block of query tokens); an item
 * processes the queries of every query head that shares the kv head, so each
 * K/V tile is converted to F32 once and reused by all of them. The key-tile
 * loop is where an attention policy decides which tiles to visit: dense
 * visits every tile up to the causal limit. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

#define ATTN_BQ 32 /* query tokens per work item: enough reuse of a K tile, enough items for threads */
#define ATTN_BK 64 /* keys per tile: a 64×128 F32 tile (32 KiB) stays in L1/L2 */

typedef struct attn_job {
    const be_attn_args *a;
    cpu_backend *cb;
    int32_t n_qblocks;
    int32_t ratio; /* query heads per kv head */
    size_t q_head_stride;
} attn_job;

/* Whether the key tile [k0, k1) must be visited by the queries [q0, q1) (positions).
 * Dense attention visits every tile; the approximate policy will skip tiles here. */
static bool tile_visible(const be_attn_policy *policy, int32_t q0, int32_t q1, int32_t k0, int32_t k1)
{
    (void)q0;
    (void)q1;
    (void)k0;
    (void)k1;
    if (!policy || !policy->approx) return true;
    return true; /* approximate policy not implemented yet: dense */
}

static size_t attn_scratch_floats(const be_attn_args *a, int32_t ratio)
{
    size_t rows = (size_t)ratio * ATTN_BQ;
    return (size_t)ATTN_BK * a->d_k + (size_t)ATTN_BK * a->d_v + rows * a->d_v + 2 * rows + ATTN_BK;
}

static void attn_item(attn_job *j, int32_t g, int32_t qb, float *scratch)
{
    const be_attn_args *a = j->a;
    const cpu_vec_fns *vec = j->cb->vec;
    const int32_t d_k = a->d_k, d_v = a->d_v, ratio = j->ratio;
    const int32_t i0 = qb * ATTN_BQ;
    const int32_t i1 = i0 + ATTN_BQ < a->n_q ? i0 + ATTN_BQ : a->n_q;
    const int32_t nqi = i1 - i0;
    const int32_t rows = ratio * nqi; /* row r = (query token i0 + r / ratio, head g*ratio + r % ratio) */

    float *kt = scratch;
    float *vt = kt + (size_t)ATTN_BK * d_k;
    float *acc = vt + (size_t)ATTN_BK * d_v;
    float *m = acc + (size_t)ratio * ATTN_BQ * d_v;
    float *l = m + (size_t)ratio * ATTN_BQ;
    float *s = l + (size_t)ratio * ATTN_BQ;

    for (int32_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)rows * d_v);

    const uint16_t *kh = a->k + (size_t)g * a->kv_head_stride;
    const uint16_t *vh = a->v + (size_t)g * a->kv_head_stride;
    const int32_t key_end = a->q_pos0 + i1; /* exclusive: last query sees keys < key_end */

    for (int32_t k0 = 0; k0 < key_end; k0 += ATTN_BK) {
        int32_t k1 = k0 + ATTN_BK < key_end ? k0 + ATTN_BK : key_end;
        if (!tile_visible(a->policy, a->q_pos0 + i0, a->q_pos0 + i1, k0, k1)) continue;
        int32_t nk = k1 - k0;
        for (int32_t t = 0; t < nk; t++) {
            vec->f16_to_f32(kt + (size_t)t * d_k, kh + (size_t)(k0 + t) * d_k, d_k);
            vec->f16_to_f32(vt + (size_t)t * d_v, vh + (size_t)(k0 + t) * d_v, d_v);
        }
        for (int32_t r = 0; r < rows; r++) {
            int32_t i = i0 + r / ratio, h = g * ratio + r % ratio;
            int32_t limit = a->q_pos0 + i + 1; /* causal: keys < limit */
            if (limit <= k0) continue;
            int32_t kend = (limit < k1 ? limit : k1) - k0;
            const float *q = a->q + (size_t)i * a->q_stride + (size_t)h * j->q_head_stride;
            float mx = -INFINITY;
            for (int32_t t = 0; t < kend; t++) {
                s[t] = vec->dot(q, kt + (size_t)t * d_k, d_k) * a->scale;
                if (s[t] > mx) mx = s[t];
            }
            float *ar = acc + (size_t)r * d_v;
            if (mx > m[r]) {
                float corr = expf(m[r] - mx); /* 0 on the first tile (m = -inf) */
                l[r] *= corr;
                vec->scale(ar, corr, d_v);
                m[r] = mx;
            }
            float sum = 0.0f;
            for (int32_t t = 0; t < kend; t++) {
                float p = expf(s[t] - m[r]);
                sum += p;
                vec->axpy(ar, p, vt + (size_t)t * d_v, d_v);
            }
            l[r] += sum;
        }
    }
    for (int32_t r = 0; r < rows; r++) {
        int32_t i = i0 + r / ratio, h = g * ratio + r % ratio;
        float *o = a->out + (size_t)i * a->out_stride + (size_t)h * d_v;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        const float *ar = acc + (size_t)r * d_v;
        for (int32_t c = 0; c < d_v; c++) o[c] = ar[c] * inv;
    }
}

#include <stdlib.h>
#include "util/f16.h"
/* EXPERIMENT: llama.cpp one_chunk numerics (Q and V accumulation in F16). */
static void attn_row_llamacpp(attn_job *j, int32_t i, int32_t h)
{
    const be_attn_args *a = j->a;
    int32_t g = h / j->ratio, d_k = a->d_k, d_v = a->d_v;
    const float *q = a->q + (size_t)i * a->q_stride + (size_t)h * j->q_head_stride;
    float qh[512], acc[512];
    int emu = atoi(getenv("WICK_FA_EMU"));
    for (int c = 0; c < d_k; c++) qh[c] = (emu & 1) ? wk_f16_to_f32(wk_f32_to_f16(q[c])) : q[c];
    for (int c = 0; c < d_v; c++) acc[c] = 0;
    const uint16_t *kh = a->k + (size_t)g * a->kv_head_stride;
    const uint16_t *vh = a->v + (size_t)g * a->kv_head_stride;
    float M = -INFINITY, S = 0;
    int32_t limit = a->q_pos0 + i + 1;
    for (int32_t t = 0; t < limit; t++) {
        float s = 0;
        for (int c = 0; c < d_k; c++) s += qh[c] * wk_f16_to_f32(kh[(size_t)t * d_k + c]);
        s *= a->scale;
        float ms = 1, vs = 1;
        if (s > M) {
            float Mold = M; M = s; ms = expf(Mold - M);
            for (int c = 0; c < d_v; c++) acc[c] = (emu & 2) ? wk_f16_to_f32(wk_f32_to_f16(acc[c] * ms)) : acc[c] * ms;
        } else vs = expf(s - M);
        for (int c = 0; c < d_v; c++) { float nv = acc[c] + wk_f16_to_f32(vh[(size_t)t * d_v + c]) * vs; acc[c] = (emu & 2) ? wk_f16_to_f32(wk_f32_to_f16(nv)) : nv; }
        S = S * ms + vs;
    }
    float *o = a->out + (size_t)i * a->out_stride + (size_t)h * d_v;
    for (int c = 0; c < d_v; c++) o[c] = acc[c] * (1.0f / S);
}

static void attn_worker(void *p, int worker, int n_workers)
{
    attn_job *j = p;
    long n_items = (long)j->a->n_head_kv * j->n_qblocks, b, e;
    wk_split(n_items, worker, n_workers, &b, &e);
    float *scratch = j->cb->work[worker].p;
    for (long it = b; it < e; it++)
        attn_item(j, (int32_t)(it % j->a->n_head_kv), (int32_t)(it / j->a->n_head_kv), scratch);
}

int cpu_op_attention(be_backend *be, const be_attn_args *a, wk_error *err)
{
    cpu_backend *cb = cpu_of(be);
    if (a->n_q <= 0) return 0;
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return wk_fail(err, WK_EINVAL, "attention: %d query heads not a multiple of %d kv heads",
                       a->n_head, a->n_head_kv);
    if (a->q_pos0 < 0 || a->q_pos0 + a->n_q > a->n_kv)
        return wk_fail(err, WK_EINVAL, "attention: queries at %d..%d beyond %d cached keys",
                       a->q_pos0, a->q_pos0 + a->n_q - 1, a->n_kv);
    attn_job j = {a, cb, (a->n_q + ATTN_BQ - 1) / ATTN_BQ, a->n_head / a->n_head_kv,
                  a->q_head_stride ? a->q_head_stride : (size_t)a->d_k};
    size_t need = attn_scratch_floats(a, j.ratio);
    int n_workers = cb->n_threads;
    for (int w = 0; w < n_workers; w++)
        if (cpu_buf_reserve(&cb->work[w], need))
            return wk_fail(err, WK_ENOMEM, "attention: out of memory for scratch");
    if (getenv("WICK_FA_EMU") && a->n_q < 64) {
        for (int32_t i = 0; i < a->n_q; i++)
            for (int32_t h = 0; h < a->n_head; h++) attn_row_llamacpp(&j, i, h);
        return 0;
    }
    long n_items = (long)a->n_head_kv * j.n_qblocks;
    if (n_items == 1 || n_workers == 1)
        for (long it = 0; it < n_items; it++)
            attn_item(&j, (int32_t)(it % a->n_head_kv), (int32_t)(it / a->n_head_kv), cb->work[0].p);
    else
        wk_pool_run(cb->pool, attn_worker, &j);
    return 0;
}
