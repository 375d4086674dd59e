/* Q8_0 KV cache on CPU: storing K/V rows as ggml Q8_0 blocks (an F16 scale
 * and 32 int8 values: 34 bytes per 32 elements, about half of F16), and
 * turning one row back into F32 inside the attention tile loop. The cache is
 * never converted as a whole: attention dequantizes the keys and values of
 * the tile it is about to use into its scratch. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "util/cpu.h"
#include "util/f16.h"

#define Q8_BLOCK 32
#define Q8_BLOCK_BYTES 34

void cpu_kv_row_q8_0_to_f32(float *dst, const uint16_t *src, int32_t d)
{
    const wk_cpu_features *f = wk_cpu();
#if defined(__x86_64__)
    if (f->avx2 && f->f16c) {
        cpu_kv_row_q8_0_to_f32_avx2(dst, src, d);
        return;
    }
#elif defined(__aarch64__)
    if (f->neon) {
        cpu_kv_row_q8_0_to_f32_neon(dst, src, d);
        return;
    }
#endif
    (void)f;
    cpu_kv_row_q8_0_to_f32_scalar(dst, src, d);
}

void cpu_kv_row_q8_0_to_f32_scalar(float *dst, const uint16_t *src, int32_t d)
{
    const uint8_t *b = (const uint8_t *)src;
    for (int32_t i = 0; i < d; i += Q8_BLOCK, b += Q8_BLOCK_BYTES) {
        uint16_t h;
        memcpy(&h, b, 2);
        const float s = wk_f16_to_f32(h);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < Q8_BLOCK; j++) dst[i + j] = s * (float)q[j];
    }
}

/* ggml's quantize_row_q8_0: scale amax / 127, values rounded to nearest. */
static void row_f32_to_q8_0(uint16_t *dst, const float *x, int32_t d)
{
    uint8_t *b = (uint8_t *)dst;
    for (int32_t i = 0; i < d; i += Q8_BLOCK, b += Q8_BLOCK_BYTES) {
        float amax = 0.0f;
        for (int j = 0; j < Q8_BLOCK; j++) amax = fmaxf(amax, fabsf(x[i + j]));
        const float s = amax / 127.0f, inv = s != 0.0f ? 1.0f / s : 0.0f;
        const uint16_t h = wk_f32_to_f16(s);
        memcpy(b, &h, 2);
        int8_t *q = (int8_t *)(b + 2);
        for (int j = 0; j < Q8_BLOCK; j++) q[j] = (int8_t)roundf(x[i + j] * inv);
    }
}

typedef struct kvq_job {
    uint16_t *cache;
    size_t head_stride;
    int32_t pos0;
    const float *x;
    size_t x_stride;
    int32_t n_head_kv, d;
} kvq_job;

static void kvq_range(void *ctx, long begin, long end, int worker)
{
    (void)worker;
    const kvq_job *j = ctx;
    const size_t row = be_kv_row_units(BE_KV_Q8_0, (size_t)j->d);
    for (long t = begin; t < end; t++)
        for (int32_t g = 0; g < j->n_head_kv; g++)
            row_f32_to_q8_0(j->cache + (size_t)g * j->head_stride + (size_t)(j->pos0 + t) * row,
                            j->x + (size_t)t * j->x_stride + (size_t)g * j->d, j->d);
}

void cpu_op_kv_store_q8_0(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                          size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    kvq_job j = {cache, head_stride, pos0, x, x_stride, n_head_kv, d};
    cpu_parallel_for(cpu_of(be), n_t, 64, kvq_range, &j);
}
