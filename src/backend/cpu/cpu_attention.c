/* CPU attention: flash-attention style (online softmax over key tiles) over
 * an F16 KV cache, causal, GQA.
 *
 * Work is split into items of (kv head, block of query tokens); an item
 * processes the queries of every query head that shares the kv head, so each
 * K/V tile is converted to F32 once and reused by all of them. The key-tile
 * loop is where an attention policy decides which tiles to visit: dense
 * visits every tile up to the causal limit; the approximate policy
 * (backend.h) skips tiles no query of the item may see, without reading them,
 * and masks single keys only in tiles that straddle the allowed set. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

#define ATTN_BQ 64 /* query tokens per work item: each K/V tile is converted once per item, reused by 64 tokens × the heads sharing it */
#define ATTN_BK 64 /* keys per tile: a 64×128 F32 tile (32 KiB) stays in L1/L2 */

/* Numerics follow llama.cpp's CPU flash attention, the reference the golden
 * logits come from: batches of fewer than 64 queries (its Q tile) take its
 * one-chunk kernel — Q rounded to F16, keys visited one by one, the V
 * accumulator rounded to F16 after every update — and larger batches its tiled
 * kernel with F32 accumulators. Mirroring both keeps decode rows within
 * llama.cpp's own noise (an F32 decode drifts ~4x further from it). */
#define ATTN_F16_ACC_BELOW 64

/* The approximate policy resolved for one call: query position i sees key j
 * when j < global || i - j < window || i >= dense_from. approx = false: all. */
typedef struct attn_mask {
    bool approx;
    int32_t global, window, dense_from;
} attn_mask;

typedef struct attn_job {
    const be_attn_args *a;
    attn_mask mask;
    cpu_backend *cb;
    int32_t n_qblocks;
    int32_t ratio; /* query heads per kv head */
    size_t q_head_stride;
    bool f16_acc; /* one-chunk numerics (see ATTN_F16_ACC_BELOW) */
} attn_job;

static attn_mask mask_of(const be_attn_args *a)
{
    attn_mask m = {false, 0, 0, 0};
    const be_attn_policy *p = a->policy;
    if (!p || !p->approx) return m;
    m.approx = true;
    m.global = p->global > 0 ? p->global : 0;
    m.window = p->window > 1 ? p->window : 1; /* a query always sees itself */
    int32_t tail = p->dense_tail > 0 ? p->dense_tail : 0;
    m.dense_from = a->q_pos0 + (a->n_q > tail ? a->n_q - tail : 0);
    return m;
}

static inline bool key_allowed(const attn_mask *m, int32_t i, int32_t j)
{
    return !m->approx || j < m->global || i - j < m->window || i >= m->dense_from;
}

/* Key tile [k0, k1) for the queries at positions [q0, q1) (causality aside):
 * 0 = no query may see any key (skipped, never read), 1 = some pairs masked,
 * 2 = every pair allowed (the dense path, bit for bit). */
static int tile_visibility(const attn_mask *m, int32_t q0, int32_t q1, int32_t k0, int32_t k1)
{
    if (!m->approx || q0 >= m->dense_from || k1 <= m->global || (q1 - 1) - k0 < m->window) return 2;
    if (q1 - 1 >= m->dense_from || k0 < m->global || q0 - (k1 - 1) < m->window) return 1;
    return 0;
}

/* Query rows of an item padded to whole 16-lane vectors (tile kernels keep rows in lanes). */
static int32_t rows_padded(int32_t rows) { return (rows + 15) & ~15; }

static size_t attn_scratch_floats(const be_attn_args *a, int32_t ratio)
{
    size_t rp = (size_t)rows_padded(ratio * ATTN_BQ);
    return (size_t)ATTN_BK * a->d_k + (size_t)ATTN_BK * a->d_v + rp * a->d_v + 3 * rp +
           (size_t)ATTN_BK * rp + 2 * rp * a->d_k;
}

/* One work item: queries of block qb for every query head of kv head g, over
 * keys [kb, ke) ∩ causal range. partial == NULL: normalized output to a->out;
 * else the unnormalized (M, S, acc[d_v]) of each row go to partial + row·(2 + d_v). */
static void attn_item(attn_job *j, int32_t g, int32_t qb, int32_t kb, int32_t ke, float *scratch,
                      float *partial)
{
    const be_attn_args *a = j->a;
    const cpu_vec_fns *vec = j->cb->vec;
    const int32_t d_k = a->d_k, d_v = a->d_v, ratio = j->ratio;
    const int32_t i0 = qb * ATTN_BQ;
    const int32_t i1 = i0 + ATTN_BQ < a->n_q ? i0 + ATTN_BQ : a->n_q;
    const int32_t nqi = i1 - i0;
    const int32_t rows = ratio * nqi; /* row r = (query token i0 + r / ratio, head g*ratio + r % ratio) */

    const int32_t rp = rows_padded(rows);
    float *kt = scratch;
    float *vt = kt + (size_t)ATTN_BK * d_k;
    float *acc = vt + (size_t)ATTN_BK * d_v;
    const size_t rp_max = (size_t)rows_padded(ratio * ATTN_BQ);
    float *m = acc + rp_max * d_v;
    float *l = m + rp_max;
    float *corr = l + rp_max;
    float *st = corr + rp_max;     /* tile scores / probabilities [key][row] */
    float *qrows = st + (size_t)ATTN_BK * rp_max; /* query rows, contiguous (F16-rounded in f16_acc mode) */
    float *qt = qrows + rp_max * d_k;             /* tiled mode: the same rows transposed [dim][row] */

    for (int32_t r = 0; r < rp; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)rows * d_v);
    for (int32_t r = 0; r < rows; r++) {
        int32_t i = i0 + r / ratio, h = g * ratio + r % ratio;
        const float *q = a->q + (size_t)i * a->q_stride + (size_t)h * j->q_head_stride;
        if (j->f16_acc) {
            vec->round_h(qrows + (size_t)r * d_k, q, d_k);
        } else {
            for (int32_t c = 0; c < d_k; c++) qt[(size_t)c * rp + r] = q[c];
        }
    }
    if (!j->f16_acc)
        for (int32_t c = 0; c < d_k; c++)
            for (int32_t r = rows; r < rp; r++) qt[(size_t)c * rp + r] = 0.0f;

    const uint16_t *kh = a->k + (size_t)g * a->kv_head_stride;
    const uint16_t *vh = a->v + (size_t)g * a->kv_head_stride;
    const bool q8 = a->kv_type == BE_KV_Q8_0;
    const size_t k_row = be_kv_row_units(a->kv_type, (size_t)d_k), v_row = be_kv_row_units(a->kv_type, (size_t)d_v);
    int32_t key_end = a->q_pos0 + i1; /* exclusive: last query sees keys < key_end */
    if (key_end > ke) key_end = ke;
    int64_t tiles = 0;

    for (int32_t k0 = kb; k0 < key_end; k0 += ATTN_BK) {
        int32_t k1 = k0 + ATTN_BK < key_end ? k0 + ATTN_BK : key_end;
        const int vis = tile_visibility(&j->mask, a->q_pos0 + i0, a->q_pos0 + i1, k0, k1);
        if (vis == 0) continue;
        tiles++;
        int32_t nk = k1 - k0;
        for (int32_t t = 0; t < nk; t++) {
            if (q8) { /* Q8_0 cache: dequantized here, tile by tile */
                cpu_kv_row_q8_0_to_f32(kt + (size_t)t * d_k, kh + (size_t)(k0 + t) * k_row, d_k);
                cpu_kv_row_q8_0_to_f32(vt + (size_t)t * d_v, vh + (size_t)(k0 + t) * v_row, d_v);
                continue;
            }
            vec->f16_to_f32(kt + (size_t)t * d_k, kh + (size_t)(k0 + t) * d_k, d_k);
            vec->f16_to_f32(vt + (size_t)t * d_v, vh + (size_t)(k0 + t) * d_v, d_v);
        }
        if (!j->f16_acc) {
            /* whole tile at once: scores for every row, masks, one softmax step, P·V */
            vec->attn_qk(st, kt, nk, d_k, qt, rp, a->scale);
            for (int32_t r = 0; r < rows; r++) {
                const int32_t qpos = a->q_pos0 + i0 + r / ratio;
                const int32_t limit = qpos + 1; /* causal: keys < limit */
                const int row_vis = vis == 1 ? tile_visibility(&j->mask, qpos, qpos + 1, k0, k1) : 2;
                int32_t t_end = limit <= k0 || row_vis == 0 ? 0 : limit < k1 ? limit - k0 : nk;
                for (int32_t t = t_end; t < nk; t++) st[(size_t)t * rp + r] = -INFINITY;
                if (row_vis == 1)
                    for (int32_t t = 0; t < t_end; t++)
                        if (!key_allowed(&j->mask, qpos, k0 + t)) st[(size_t)t * rp + r] = -INFINITY;
            }
            vec->attn_softmax(st, nk, rp, m, l, corr);
            vec->attn_pv(acc, st, nk, rp, rows, vt, d_v, corr);
            continue;
        }
        for (int32_t r = 0; r < rows; r++) {
            int32_t i = i0 + r / ratio;
            int32_t limit = a->q_pos0 + i + 1; /* causal: keys < limit */
            if (limit <= k0) continue;
            int32_t kend = (limit < k1 ? limit : k1) - k0;
            const float *q = qrows + (size_t)r * d_k;
            float *ar = acc + (size_t)r * d_v;
            const int32_t qpos = a->q_pos0 + i;
            const int row_vis = vis == 1 ? tile_visibility(&j->mask, qpos, qpos + 1, k0, k1) : 2;
            if (row_vis == 0) continue;
            const bool masked = row_vis == 1;
            if (!masked) {
                vec->attn_row_h(q, kt, vt, kend, d_k, d_v, a->scale, &m[r], &l[r], ar);
                continue;
            }
            /* key by key, accumulator in F16 precision */
            for (int32_t t = 0; t < kend; t++) {
                if (masked && !key_allowed(&j->mask, qpos, k0 + t)) continue;
                float sc = vec->dot(q, kt + (size_t)t * d_k, d_k) * a->scale;
                if (sc > m[r]) {
                    float ms = expf(m[r] - sc);
                    m[r] = sc;
                    vec->scale_h(ar, ms, d_v);
                    vec->axpy_h(ar, 1.0f, vt + (size_t)t * d_v, d_v);
                    l[r] = l[r] * ms + 1.0f;
                } else {
                    float vs = expf(sc - m[r]);
                    vec->axpy_h(ar, vs, vt + (size_t)t * d_v, d_v);
                    l[r] += vs;
                }
            }
        }
    }
    if (a->tiles_visited) __atomic_fetch_add(a->tiles_visited, tiles, __ATOMIC_RELAXED);
    if (partial) {
        for (int32_t r = 0; r < rows; r++) {
            float *p = partial + (size_t)r * (2 + d_v);
            p[0] = m[r];
            p[1] = l[r];
            memcpy(p + 2, acc + (size_t)r * d_v, sizeof(float) * d_v);
        }
        return;
    }
    for (int32_t r = 0; r < rows; r++) {
        int32_t i = i0 + r / ratio, h = g * ratio + r % ratio;
        float *o = a->out + (size_t)i * a->out_stride + (size_t)h * d_v;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        const float *ar = acc + (size_t)r * d_v;
        for (int32_t c = 0; c < d_v; c++) o[c] = ar[c] * inv;
    }
}

static void attn_worker(void *p, int worker, int n_workers)
{
    attn_job *j = p;
    long n_items = (long)j->a->n_head_kv * j->n_qblocks, b, e;
    wk_split(n_items, worker, n_workers, &b, &e);
    float *scratch = j->cb->work[worker].p;
    for (long it = b; it < e; it++)
        attn_item(j, (int32_t)(it % j->a->n_head_kv), (int32_t)(it / j->a->n_head_kv), 0, INT32_MAX, scratch,
                  NULL);
}

/* Decode over a long cache splits the keys across the workers, each producing
 * partial (M, S, acc) per head, merged afterwards in F32 — llama.cpp's split-KV
 * decode path, which this mirrors (threshold and split points included: its
 * cache view is padded to 256 cells). */
#define ATTN_SPLIT_KV_MIN 512
#define ATTN_KV_PAD 256

/* Partials of chunk c, kv head g: the rows of attn_item (query i, head g·ratio + hr at
 * row i·ratio + hr) of every query of the call. */
typedef struct split_job {
    attn_job *j;
    int32_t chunk, n_chunks;
    float *partials; /* [n_chunks][n_head_kv][n_q · ratio][2 + d_v] */
} split_job;

static size_t split_row(const split_job *sj, int32_t c, int32_t g, int32_t r)
{
    const be_attn_args *a = sj->j->a;
    return (((size_t)c * a->n_head_kv + g) * (size_t)(a->n_q * sj->j->ratio) + r) * (2 + a->d_v);
}

static void split_worker(void *p, int worker, int n_workers)
{
    split_job *sj = p;
    const be_attn_args *a = sj->j->a;
    for (int32_t c = worker; c < sj->n_chunks; c += n_workers) {
        int32_t kb = c * sj->chunk, ke = kb + sj->chunk;
        for (int32_t g = 0; g < a->n_head_kv; g++)
            attn_item(sj->j, g, 0, kb, ke, sj->j->cb->work[worker].p, sj->partials + split_row(sj, c, g, 0));
    }
}

static void split_reduce(const split_job *sj)
{
    const be_attn_args *a = sj->j->a;
    const int32_t d_v = a->d_v, ratio = sj->j->ratio;
    for (int32_t i = 0; i < a->n_q; i++)
    for (int32_t h = 0; h < a->n_head; h++) {
        float *o = a->out + (size_t)i * a->out_stride + (size_t)h * d_v;
        float M = -INFINITY, S = 0.0f;
        memset(o, 0, sizeof(float) * d_v);
        for (int32_t c = 0; c < sj->n_chunks; c++) {
            const float *p = sj->partials + split_row(sj, c, h / ratio, i * ratio + h % ratio);
            if (p[1] == 0.0f) continue;
            float Mn = fmaxf(M, p[0]);
            float so = expf(M - Mn), sn = expf(p[0] - Mn);
            for (int32_t d = 0; d < d_v; d++) o[d] = o[d] * so + p[2 + d] * sn;
            S = S * so + p[1] * sn;
            M = Mn;
        }
        if (S != 0.0f)
            for (int32_t d = 0; d < d_v; d++) o[d] *= 1.0f / S;
    }
}

static int32_t kv_padded(int32_t n_kv) { return (n_kv + ATTN_KV_PAD - 1) / ATTN_KV_PAD * ATTN_KV_PAD; }

/* Split-KV over the keys for every query of a (one padded size for all of them). */
static int attend_split(cpu_backend *cb, attn_job *j, int32_t padded, wk_error *err)
{
    const be_attn_args *a = j->a;
    const int n_workers = cb->n_threads;
    split_job sj = {j, (padded + n_workers - 1) / n_workers, n_workers, NULL};
    if (cpu_buf_reserve(&cb->shared, (size_t)n_workers * a->n_head * a->n_q * (2 + a->d_v)))
        return wk_fail(err, WK_ENOMEM, "attention: out of memory for partials");
    sj.partials = cb->shared.p;
    wk_pool_run(cb->pool, split_worker, &sj);
    split_reduce(&sj);
    return 0;
}

/* as_decode: every query computed as a decode step computes its one (split-KV over a
 * long cache: the queries must then share one padded cache size). */
static int attend(be_backend *be, const be_attn_args *a, bool as_decode, wk_error *err);

/* A few dense queries (speculative verification) over a cache long enough for a single
 * query to take the split-KV path: the rows go in groups of one padded size through the
 * same splits, so each comes out exactly as it would alone (backend.h exact_rows), the
 * keys still read once per group. */
static int attend_rows_as_decode(be_backend *be, const be_attn_args *a, wk_error *err)
{
    for (int32_t i0 = 0; i0 < a->n_q;) {
        const int32_t padded = kv_padded(a->q_pos0 + i0 + 1);
        int32_t i1 = i0 + 1;
        while (i1 < a->n_q && kv_padded(a->q_pos0 + i1 + 1) == padded) i1++;
        be_attn_args g = *a;
        g.q = a->q + (size_t)i0 * a->q_stride;
        g.q_pos0 = a->q_pos0 + i0;
        g.n_q = i1 - i0;
        g.n_kv = a->q_pos0 + i1;
        g.out = a->out + (size_t)i0 * a->out_stride;
        int rc = attend(be, &g, true, err);
        if (rc) return rc;
        i0 = i1;
    }
    return 0;
}

int cpu_op_attention(be_backend *be, const be_attn_args *a, wk_error *err)
{
    const cpu_backend *cb = cpu_of(be);
    const bool dense = !a->policy || !a->policy->approx;
    if (a->n_q == 1) return attend(be, a, true, err);
    if (a->n_q < CPU_MATMUL_PANEL_MIN_N && dense && cb->n_threads > 1 && a->q_pos0 >= 0 &&
        kv_padded(a->q_pos0 + a->n_q) >= ATTN_SPLIT_KV_MIN)
        return attend_rows_as_decode(be, a, err);
    return attend(be, a, false, err);
}

static int attend(be_backend *be, const be_attn_args *a, bool as_decode, wk_error *err)
{
    cpu_backend *cb = cpu_of(be);
    if (a->n_q <= 0) return 0;
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return wk_fail(err, WK_EINVAL, "attention: %d query heads not a multiple of %d kv heads",
                       a->n_head, a->n_head_kv);
    if (a->q_pos0 < 0 || a->q_pos0 + a->n_q > a->n_kv)
        return wk_fail(err, WK_EINVAL, "attention: queries at %d..%d beyond %d cached keys",
                       a->q_pos0, a->q_pos0 + a->n_q - 1, a->n_kv);
    if (a->kv_type == BE_KV_Q8_0 && (a->d_k % 32 || a->d_v % 32))
        return wk_fail(err, WK_EINVAL, "attention: Q8_0 KV cache needs head dims divisible by 32 (%d, %d)", a->d_k,
                       a->d_v);
    attn_job j = {a, mask_of(a), cb, (a->n_q + ATTN_BQ - 1) / ATTN_BQ, a->n_head / a->n_head_kv,
                  a->q_head_stride ? a->q_head_stride : (size_t)a->d_k, a->n_q < ATTN_F16_ACC_BELOW};
    size_t need = attn_scratch_floats(a, j.ratio);
    int n_workers = cb->n_threads;
    for (int w = 0; w < n_workers; w++)
        if (cpu_buf_reserve(&cb->work[w], need))
            return wk_fail(err, WK_ENOMEM, "attention: out of memory for scratch");
    if (as_decode && n_workers > 1 && kv_padded(a->n_kv) >= ATTN_SPLIT_KV_MIN)
        return attend_split(cb, &j, kv_padded(a->n_kv), err);
    long n_items = (long)a->n_head_kv * j.n_qblocks;
    if (n_items == 1 || n_workers == 1)
        for (long it = 0; it < n_items; it++)
            attn_item(&j, (int32_t)(it % a->n_head_kv), (int32_t)(it / a->n_head_kv), 0, INT32_MAX,
                      cb->work[0].p, NULL);
    else
        wk_pool_run(cb->pool, attn_worker, &j);
    return 0;
}
