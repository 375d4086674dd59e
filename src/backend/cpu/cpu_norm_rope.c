/* CPU ops: RMSNorm, RoPE (NORM / NEOX / IMROPE, partial rotary) and the
 * F32 → F16 store into the KV cache. */
#include <math.h>

#include "backend/cpu/cpu_backend.h"

/* ---- RMSNorm ------------------------------------------------------------------ */

typedef struct norm_job {
    const cpu_vec_fns *vec;
    float *y;
    size_t y_stride;
    const float *x;
    size_t x_stride;
    int64_t n;
    const float *w;
    float eps;
} norm_job;

static void norm_range(void *p, long b, long e, int worker)
{
    (void)worker;
    norm_job *j = p;
    for (long r = b; r < e; r++) {
        const float *x = j->x + r * j->x_stride;
        float *y = j->y + r * j->y_stride;
        /* sum of squares in double, scale in float: the same rounding as ggml */
        double sum = j->vec->sumsq(x, (int)j->n);
        float scale = 1.0f / sqrtf((float)(sum / (double)j->n) + j->eps);
        j->vec->scale_mul(y, x, scale, j->w, (int)j->n);
    }
}

void cpu_op_rms_norm(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_rows, int64_t n, const float *w, float eps)
{
    norm_job j = {cpu_of(be)->vec, y, y_stride, x, x_stride, n, w, eps};
    /* rows of a few hundred floats: parallel only for batches */
    cpu_parallel_for(cpu_of(be), n_rows, 64, norm_range, &j);
}

/* ---- RoPE ----------------------------------------------------------------------- */

/* Position component used by pair i under IMROPE: 0 = t, 1 = h, 2 = w, 3 = e.
 * Sums and products in 64 bits: the sections come from the file (model/
 * bounds them by n_rot/2, but this op must not overflow on any input). */
static int imrope_component(const int32_t s[4], int i)
{
    int64_t total = (int64_t)s[0] + s[1] + s[2] + s[3];
    int64_t sector = total > 0 ? i % total : 0;
    if (sector % 3 == 1 && sector < 3 * (int64_t)s[1]) return 1;
    if (sector % 3 == 2 && sector < 3 * (int64_t)s[2]) return 2;
    if (sector % 3 == 0 && sector < 3 * (int64_t)s[0]) return 0;
    return 3;
}

void cpu_op_rope_cache(be_backend *be, float *cs, const int32_t *pos, int64_t n_t,
                       const be_rope_params *p)
{
    (void)be;
    int half = p->n_rot / 2;
    /* ggml walks the angles with a running float product p·θ^(−2i/n_rot); doing the
     * same keeps our angles bit-close to the reference at long positions */
    float theta_scale = powf(p->theta, -2.0f / (float)p->n_rot);
    for (int64_t t = 0; t < n_t; t++) {
        /* text-only IMROPE: t = h = w = position, e = 0 */
        float th[4] = {(float)pos[t], (float)pos[t], (float)pos[t], 0.0f};
        float *out = cs + t * (size_t)p->n_rot;
        for (int i = 0; i < half; i++) {
            float ang = p->mode == BE_ROPE_IMROPE ? th[imrope_component(p->sections, i)] : th[0];
            if (p->freq_factors) ang /= p->freq_factors[i];
            ang *= p->freq_scale;
            out[i] = cosf(ang);
            out[half + i] = sinf(ang);
            for (int c = 0; c < 4; c++) th[c] *= theta_scale;
        }
    }
}

typedef struct rope_job {
    const cpu_vec_fns *vec;
    float *x;
    size_t t_stride;
    int32_t n_head, head_stride;
    const float *cs;
    const be_rope_params *p;
} rope_job;

static void rope_range(void *pp, long b, long e, int worker)
{
    (void)worker;
    rope_job *j = pp;
    int n_rot = j->p->n_rot, half = n_rot / 2;
    for (long t = b; t < e; t++) {
        const float *cs = j->cs + t * (size_t)n_rot;
        for (int h = 0; h < j->n_head; h++) {
            float *x = j->x + t * j->t_stride + (size_t)h * j->head_stride;
            if (j->p->mode == BE_ROPE_NORM) {
                for (int i = 0; i < half; i++) {
                    float c = cs[i], s = cs[half + i];
                    float a = x[2 * i], bb = x[2 * i + 1];
                    x[2 * i] = a * c - bb * s;
                    x[2 * i + 1] = a * s + bb * c;
                }
            } else {
                j->vec->rope_neox(x, cs, cs + half, half);
            }
        }
    }
}

void cpu_op_rope(be_backend *be, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
                 int32_t head_stride, const float *cs, const be_rope_params *p)
{
    rope_job j = {cpu_of(be)->vec, x, t_stride, n_head, head_stride, cs, p};
    cpu_parallel_for(cpu_of(be), n_t, 32, rope_range, &j);
}

/* ---- KV store ----------------------------------------------------------------------- */

typedef struct kv_job {
    const cpu_vec_fns *vec;
    uint16_t *cache;
    size_t head_stride;
    int32_t pos0;
    const float *x;
    size_t x_stride;
    int32_t n_head_kv, d;
} kv_job;

static void kv_range(void *p, long b, long e, int worker)
{
    (void)worker;
    kv_job *j = p;
    for (long t = b; t < e; t++)
        for (int g = 0; g < j->n_head_kv; g++) {
            const float *src = j->x + t * j->x_stride + (size_t)g * j->d;
            uint16_t *dst = j->cache + g * j->head_stride + (size_t)(j->pos0 + t) * j->d;
            j->vec->f32_to_f16(dst, src, j->d);
        }
}

void cpu_op_kv_store(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                     const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    kv_job j = {cpu_of(be)->vec, cache, head_stride, pos0, x, x_stride, n_head_kv, d};
    cpu_parallel_for(cpu_of(be), n_t, 64, kv_range, &j);
}
