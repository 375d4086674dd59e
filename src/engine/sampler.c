/* Token sampler (see sampler.h for the pipeline).
 *
 * Cost per token for a vocabulary of n, never a full sort:
 *   greedy        one pass (argmax);
 *   top-k         one pass with a bounded heap, O(n log k), then k items;
 *   top-p / min-p one pass computing weights (exp) of the tokens above the
 *                 min-p floor, then a weighted quickselect that finds the
 *                 heaviest tokens holding top_p of the mass in expected O(n).
 * Logits are copied only when a bias or penalty must be applied. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/request.h"
#include "engine/sampler.h"
#include "util/argmax.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct eng_sampler {
    eng_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4]; /* xoshiro256** state */

    /* penalty window: ring of the last penalty_last_n accepted tokens, or the
     * whole history when penalty_last_n < 0 */
    int32_t *hist;
    size_t hist_len, hist_cap, hist_head;

    /* sparse logit bias */
    int32_t *bias_id;
    float *bias_val;
    size_t n_bias, cap_bias;

    /* scratch */
    float *work;      /* n_vocab: logits after bias and penalties */
    int32_t *counts;  /* n_vocab: per-token count in the window (kept zeroed) */
    int32_t *touched; /* tokens whose count is non-zero */
    cand *heap;       /* top-k selection */
    size_t heap_cap;
    cand *pool;       /* n_vocab: (weight, id) for top-p / min-p without top-k */
};

/* ---------------------------------------------------------------- PRNG */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
}

/* ---------------------------------------------------------- life cycle */

void eng_sampler_params_default(eng_sampler_params *p)
{
    eng_sampling d; /* the one place the default numbers are written down */
    eng_sampling_default(&d);
    p->temperature = d.temperature;
    p->top_k = d.top_k;
    p->top_p = d.top_p;
    p->min_p = d.min_p;
    p->repeat_penalty = d.repeat_penalty;
    p->presence_penalty = d.presence_penalty;
    p->frequency_penalty = d.frequency_penalty;
    p->penalty_last_n = 64;
    p->seed = 0;
}

static bool penalties_on(const eng_sampler_params *p)
{
    return p->penalty_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

int eng_sampler_new(eng_sampler **out, const eng_sampler_params *p, int32_t n_vocab, wk_error *err)
{
    *out = NULL;
    if (n_vocab <= 0) return wk_fail(err, WK_EINVAL, "sampler: n_vocab %d must be positive", (int)n_vocab);
    if (isnan(p->temperature) || isinf(p->temperature))
        return wk_fail(err, WK_EINVAL, "sampler: temperature must be a finite number");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return wk_fail(err, WK_EINVAL, "sampler: top_p %g outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return wk_fail(err, WK_EINVAL, "sampler: min_p %g outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return wk_fail(err, WK_EINVAL, "sampler: repeat_penalty %g must be > 0", (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return wk_fail(err, WK_EINVAL, "sampler: presence/frequency penalties must be finite");
    if (p->penalty_last_n < -1)
        return wk_fail(err, WK_EINVAL, "sampler: penalty_last_n %d must be >= -1", (int)p->penalty_last_n);

    eng_sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    if (!s->work) goto oom;
    if (penalties_on(p)) {
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
        s->touched = malloc((size_t)n_vocab * sizeof *s->touched);
        if (!s->counts || !s->touched) goto oom;
        s->hist_cap = p->penalty_last_n > 0 ? (size_t)p->penalty_last_n : 256;
        s->hist = malloc(s->hist_cap * sizeof *s->hist);
        if (!s->hist) goto oom;
    }
    rng_seed(s->rng, p->seed);
    *out = s;
    return 0;
oom:
    eng_sampler_free(s);
    return wk_fail(err, WK_ENOMEM, "sampler: out of memory (n_vocab %d)", (int)n_vocab);
}

void eng_sampler_free(eng_sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->bias_id);
    free(s->bias_val);
    free(s->work);
    free(s->counts);
    free(s->touched);
    free(s->heap);
    free(s->pool);
    free(s);
}

int eng_sampler_set_bias(eng_sampler *s, int32_t token, float bias, wk_error *err)
{
    if (token < 0 || token >= s->n_vocab)
        return wk_fail(err, WK_EINVAL, "sampler: logit_bias token %d outside [0, %d)", (int)token, (int)s->n_vocab);
    if (isnan(bias)) return wk_fail(err, WK_EINVAL, "sampler: logit_bias for token %d is NaN", (int)token);
    for (size_t i = 0; i < s->n_bias; i++) {
        if (s->bias_id[i] == token) {
            s->bias_val[i] = bias;
            return 0;
        }
    }
    if (s->n_bias == s->cap_bias) {
        size_t cap = s->cap_bias ? s->cap_bias * 2 : 16;
        int32_t *ids = realloc(s->bias_id, cap * sizeof *ids);
        if (!ids) return wk_fail(err, WK_ENOMEM, "sampler: out of memory");
        s->bias_id = ids;
        float *vals = realloc(s->bias_val, cap * sizeof *vals);
        if (!vals) return wk_fail(err, WK_ENOMEM, "sampler: out of memory");
        s->bias_val = vals;
        s->cap_bias = cap;
    }
    s->bias_id[s->n_bias] = token;
    s->bias_val[s->n_bias] = bias;
    s->n_bias++;
    return 0;
}

void eng_sampler_accept(eng_sampler *s, int32_t token)
{
    if (!s->hist || token < 0 || token >= s->n_vocab) return;
    if (s->p.penalty_last_n > 0) {
        /* ring: hist_head is the oldest entry once full */
        if (s->hist_len < s->hist_cap) {
            s->hist[s->hist_len++] = token;
        } else {
            s->hist[s->hist_head] = token;
            s->hist_head = (s->hist_head + 1) % s->hist_cap;
        }
        return;
    }
    if (s->hist_len == s->hist_cap) {
        int32_t *h = realloc(s->hist, s->hist_cap * 2 * sizeof *h);
        if (!h) return; /* history stays as it is; penalties see fewer tokens */
        s->hist = h;
        s->hist_cap *= 2;
    }
    s->hist[s->hist_len++] = token;
}

void eng_sampler_reset(eng_sampler *s)
{
    s->hist_len = 0;
    s->hist_head = 0;
    rng_seed(s->rng, s->p.seed);
}

bool eng_sampler_is_plain_greedy(const eng_sampler *s)
{
    return (s->p.temperature <= 0.0f || s->p.top_k == 1) && s->n_bias == 0 && !s->hist;
}

/* ------------------------------------------------------------ helpers */

int32_t eng_argmax(const float *logits, int32_t n)
{
    return wk_argmax_f32(logits, n);
}

/* Applies bias and penalties into s->work; returns the array to sample from. */
static const float *adjusted_logits(eng_sampler *s, const float *logits)
{
    bool pen = s->hist && s->hist_len > 0;
    if (!pen && s->n_bias == 0) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    for (size_t i = 0; i < s->n_bias; i++) s->work[s->bias_id[i]] += s->bias_val[i];
    if (pen) {
        size_t n_touched = 0;
        for (size_t i = 0; i < s->hist_len; i++) {
            int32_t t = s->hist[i];
            if (s->counts[t]++ == 0) s->touched[n_touched++] = t;
        }
        for (size_t i = 0; i < n_touched; i++) {
            int32_t t = s->touched[i];
            float l = s->work[t];
            /* repetition penalty pushes a logit toward "less likely" whatever its sign */
            l = l > 0 ? l / s->p.repeat_penalty : l * s->p.repeat_penalty;
            l -= (float)s->counts[t] * s->p.frequency_penalty + s->p.presence_penalty;
            s->work[t] = l;
            s->counts[t] = 0;
        }
    }
    return s->work;
}

/* "a ranks before b": higher logit, then lower id. */
static bool cand_better(cand a, cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

static int cand_cmp_desc(const void *pa, const void *pb)
{
    cand a = *(const cand *)pa, b = *(const cand *)pb;
    return cand_better(a, b) ? -1 : cand_better(b, a) ? 1 : 0;
}

/* Min-heap on rank (root = worst kept candidate). */
static void heap_sift_down(cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(h[w], h[l])) w = l;
        if (r < n && cand_better(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void heap_sift_up(cand *h, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_better(h[parent], h[i])) return;
        cand t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* The k best tokens with logit >= floor (NaN skipped), sorted best first.
 * Returns how many were found (<= k) or -1 on allocation failure. */
static long select_top(eng_sampler *s, const float *l, size_t k, float floor_logit)
{
    if (k > s->heap_cap) {
        cand *h = realloc(s->heap, k * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = k;
    }
    cand *h = s->heap;
    size_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float v = l[i];
        if (!(v >= floor_logit)) continue; /* also drops NaN */
        cand c = {v, i};
        if (n < k) {
            h[n] = c;
            heap_sift_up(h, n);
            n++;
        } else if (cand_better(c, h[0])) {
            h[0] = c;
            heap_sift_down(h, n, 0);
        }
    }
    qsort(h, n, sizeof *h, cand_cmp_desc);
    return (long)n;
}

/* ------------------------------------------------------------- sample */

/* Weighted quickselect: rearranges c[0..n) (logit field = weight) so that
 * c[0..keep) are the heaviest candidates whose total first reaches target,
 * and returns keep (n if the whole pool holds less) with their mass.
 * Three-way partitions keep runs of equal weights linear. */
static size_t nucleus(cand *c, size_t n, double target, double *mass_out)
{
    size_t lo = 0, hi = n; /* c[0..lo) is kept; the answer ends inside [lo, hi] */
    double kept = 0;
    while (lo < hi) {
        float a = c[lo].logit, b = c[lo + (hi - lo) / 2].logit, d = c[hi - 1].logit;
        float piv = a < b ? (b < d ? b : (a < d ? d : a)) : (a < d ? a : (b < d ? d : b)); /* median of 3 */
        size_t lt = lo, i = lo, gt = hi;
        double m_gt = 0, m_eq = 0;
        while (i < gt) {
            cand t = c[i];
            if (t.logit > piv) {
                c[i] = c[lt];
                c[lt++] = t;
                m_gt += t.logit;
                i++;
            } else if (t.logit < piv) {
                c[i] = c[--gt];
                c[gt] = t;
            } else {
                m_eq += t.logit;
                i++;
            }
        }
        /* [lo, lt) heavier than piv, [lt, gt) equal, [gt, hi) lighter */
        if (kept + m_gt >= target) {
            hi = lt;
            continue;
        }
        kept += m_gt;
        if (kept + m_eq >= target) {
            size_t k = lt;
            while (k < gt && kept < target) kept += c[k++].logit;
            *mass_out = kept;
            return k;
        }
        kept += m_eq;
        lo = gt;
    }
    *mass_out = kept;
    return lo;
}

/* Draws from c[0..n) in proportion to weight(c[i]) = exp((logit - max) / T)
 * (or the stored weight when weights_stored); mass is their total. */
static int32_t draw(eng_sampler *s, const cand *c, size_t n, bool weights_stored, float max, float inv_t,
                    double mass, float *prob)
{
    double u = rng_uniform(s->rng) * mass, acc = 0, w = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        w = weights_stored ? (double)c[i].logit : expf((c[i].logit - max) * inv_t);
        acc += w;
        if (u < acc) break;
    }
    if (i == n) i = n - 1; /* rounding: u landed on the total */
    if (prob) {
        if (weights_stored) w = c[i].logit;
        else w = expf((c[i].logit - max) * inv_t);
        *prob = (float)(w / mass);
    }
    return c[i].id;
}

/* The candidates a draw picks from: either one token (greedy, +inf, nothing else
 * possible) or c[0..n) with weights (stored, or exp((logit - max) / T)) of total mass. */
typedef struct pick_set {
    int32_t best;        /* argmax of the adjusted logits; -1: every logit -inf / NaN */
    bool single;         /* best alone */
    bool greedy;         /* single because of the temperature / top_k 1 (its prob is softmax's) */
    const float *l;      /* adjusted logits */
    const cand *c;
    size_t n;
    bool weights_stored;
    float max, inv_t;
    double mass;
} pick_set;

static void build_set(eng_sampler *s, const float *logits, pick_set *ps)
{
    const float *l = adjusted_logits(s, logits);
    const eng_sampler_params *p = &s->p;
    memset(ps, 0, sizeof *ps);
    ps->l = l;
    ps->single = true;
    int32_t best = eng_argmax(l, s->n_vocab);
    ps->best = best < 0 || l[best] == -INFINITY ? -1 : best;
    if (ps->best < 0) return;
    float max = l[best];
    if (isinf(max)) return; /* +inf dominates everything */
    if (p->temperature <= 0.0f || p->top_k == 1) {
        ps->greedy = true;
        return;
    }
    float inv_t = 1.0f / p->temperature;
    ps->max = max;
    ps->inv_t = inv_t;
    /* min-p keeps p_i >= min_p * p_max, i.e. logit >= max + T ln(min_p) */
    float floor_logit = p->min_p > 0.0f ? max + p->temperature * logf(p->min_p) : -INFINITY;
    size_t n_vocab = (size_t)s->n_vocab;
    size_t k = p->top_k > 0 && (size_t)p->top_k < n_vocab ? (size_t)p->top_k : 0;

    if (k > 0) {
        long n = select_top(s, l, k, -INFINITY);
        if (n <= 0) return;
        double total = 0;
        for (long i = 0; i < n; i++) total += expf((s->heap[i].logit - max) * inv_t);
        /* top-p: the smallest prefix whose mass reaches top_p (at least one) */
        size_t keep = (size_t)n;
        double kept = 0;
        for (size_t i = 0; i < (size_t)n; i++) {
            kept += expf((s->heap[i].logit - max) * inv_t);
            if (p->top_p < 1.0f && kept >= (double)p->top_p * total) {
                keep = i + 1;
                break;
            }
        }
        /* min-p after top-p: drop the tail below the floor (candidate 0 = max stays) */
        while (keep > 1 && !(s->heap[keep - 1].logit >= floor_logit)) {
            kept -= expf((s->heap[keep - 1].logit - max) * inv_t);
            keep--;
        }
        *ps = (pick_set){.best = best, .l = l, .c = s->heap, .n = keep, .max = max, .inv_t = inv_t, .mass = kept};
        return;
    }

    if (!s->pool) {
        s->pool = malloc(n_vocab * sizeof *s->pool);
        if (!s->pool) return; /* no scratch: fall back to the most likely token */
    }
    /* weights of the tokens above the min-p floor; top-p is measured against
     * the mass of the whole vocabulary (top-p before min-p) */
    double total = 0, pool_mass = 0;
    size_t n = 0;
    for (size_t i = 0; i < n_vocab; i++) {
        float v = l[i];
        if (!(v >= -INFINITY)) continue; /* NaN */
        float x = (v - max) * inv_t;
        if (x < -104.0f) continue; /* expf underflows to 0 below about -103.3 */
        float w = expf(x);
        total += w;
        if (v >= floor_logit) {
            s->pool[n++] = (cand){w, (int32_t)i};
            pool_mass += w;
        }
    }
    size_t keep = n;
    double kept = pool_mass;
    if (p->top_p < 1.0f) {
        keep = nucleus(s->pool, n, (double)p->top_p * total, &kept);
        if (keep == 0) { /* top_p 0: the best token alone */
            s->pool[0] = (cand){1.0f, best};
            keep = 1;
            kept = 1.0;
        }
    }
    *ps = (pick_set){.best = best, .l = l, .c = s->pool, .n = keep, .weights_stored = true, .max = max,
                     .inv_t = inv_t, .mass = kept};
}

int32_t eng_sampler_sample(eng_sampler *s, const float *logits, float *prob)
{
    pick_set ps;
    build_set(s, logits, &ps);
    if (ps.best < 0) return -1;
    if (ps.single) {
        if (prob && ps.greedy) {
            double z = 0;
            for (int32_t i = 0; i < s->n_vocab; i++)
                if (ps.l[i] >= -INFINITY) z += expf(ps.l[i] - ps.l[ps.best]);
            *prob = (float)(1.0 / z);
        } else if (prob) {
            *prob = 1.0f;
        }
        return ps.best;
    }
    return draw(s, ps.c, ps.n, ps.weights_stored, ps.max, ps.inv_t, ps.mass, prob);
}

int32_t eng_sampler_dist(eng_sampler *s, const float *logits, int32_t *ids, float *probs)
{
    pick_set ps;
    build_set(s, logits, &ps);
    if (ps.best < 0) return 0;
    if (ps.single) {
        ids[0] = ps.best;
        probs[0] = 1.0f;
        return 1;
    }
    for (size_t i = 0; i < ps.n; i++) {
        double w = ps.weights_stored ? (double)ps.c[i].logit : expf((ps.c[i].logit - ps.max) * ps.inv_t);
        ids[i] = ps.c[i].id;
        probs[i] = (float)(w / ps.mass);
    }
    return (int32_t)ps.n;
}

double eng_sampler_uniform(eng_sampler *s) { return rng_uniform(s->rng); }
