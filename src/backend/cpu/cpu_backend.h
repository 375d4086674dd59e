/* CPU backend internals shared by the op files of backend/cpu (not a public
 * API: callers use backend/backend.h). */
#ifndef WICK_BACKEND_CPU_CPU_BACKEND_H
#define WICK_BACKEND_CPU_CPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/cpu_vec.h"
#include "util/threadpool.h"

/* Per-worker scratch that grows on demand (never shrinks). */
typedef struct cpu_buf {
    float *p;
    size_t cap; /* floats */
} cpu_buf;

#define CPU_MAX_THREADS 256

typedef struct cpu_backend {
    be_backend base;
    wk_pool *pool;
    int n_threads;
    const cpu_vec_fns *vec;        /* vector kernels for this CPU */
    cpu_scratch mm_scratch;        /* quantized activations for matmuls */
    cpu_buf work[CPU_MAX_THREADS]; /* per-worker scratch for attention, gdn */
    cpu_buf shared;                /* op-wide scratch: MoE activations, DeltaNet prep */
    int32_t *moe_rows;             /* MoE row lists */
    size_t moe_rows_cap;
    bool rows_as_one;              /* be_rows_as_one: matmuls without the panel kernels */
} cpu_backend;

static inline cpu_backend *cpu_of(be_backend *be) { return (cpu_backend *)be->impl; }
static inline unsigned cpu_mm_flags(const cpu_backend *cb) { return cb->rows_as_one ? CPU_MM_ROWS_AS_ONE : 0; }

/* Grows b to at least n floats; returns 0 or WK_ENOMEM. Not thread-safe
 * across workers on the same buffer. */
int cpu_buf_reserve(cpu_buf *b, size_t n);

/* Runs fn(ctx, begin, end) over [0, n) split across the pool when n is at
 * least min_parallel items, else on the caller in one piece. */
typedef void (*cpu_range_fn)(void *ctx, long begin, long end, int worker);
void cpu_parallel_for(cpu_backend *cb, long n, long min_parallel, cpu_range_fn fn, void *ctx);

/* Op implementations (one file per op family). */
int cpu_op_matmul(be_backend *be, const be_weight *w, const float *x, int64_t n_rows, float *y,
                  wk_error *err);
int cpu_op_get_rows(be_backend *be, const be_weight *w, const int32_t *ids, int64_t n, float *y,
                    wk_error *err);
void cpu_op_rms_norm(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_rows, int64_t n, const float *w, float eps);
void cpu_op_rope_cache(be_backend *be, float *cs, const int32_t *pos, int64_t n_t,
                       const be_rope_params *p);
void cpu_op_rope(be_backend *be, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
                 int32_t head_stride, const float *cs, const be_rope_params *p);
void cpu_op_kv_store(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                     const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d);
int cpu_op_attention(be_backend *be, const be_attn_args *a, wk_error *err);
/* Q8_0 KV cache (attention_kv_q8.c): store rows, and one row back to F32. */
void cpu_op_kv_store_q8_0(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                          const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d);
void cpu_kv_row_q8_0_to_f32(float *dst, const uint16_t *src, int32_t d); /* best for this CPU */
void cpu_kv_row_q8_0_to_f32_scalar(float *dst, const uint16_t *src, int32_t d);
void cpu_kv_row_q8_0_to_f32_avx2(float *dst, const uint16_t *src, int32_t d); /* attention_kv_q8_avx2.c */
void cpu_kv_row_q8_0_to_f32_neon(float *dst, const uint16_t *src, int32_t d); /* attention_kv_q8_neon.c */
void cpu_op_ssm_conv(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_t, int64_t n_ch, const float *w, int32_t k, float *state);
int cpu_op_gdn(be_backend *be, const be_gdn_args *a, wk_error *err);
void cpu_op_moe_route(be_backend *be, const float *logits, int64_t n_t, int32_t n_expert, int32_t k,
                      int32_t *ids, float *weights);
int cpu_op_moe_ffn(be_backend *be, const be_moe_args *a, wk_error *err);
void cpu_op_add(be_backend *be, float *y, const float *a, const float *b, int64_t n);
void cpu_op_add_bias(be_backend *be, float *y, const float *bias, int64_t n_rows, int64_t n);
void cpu_op_swiglu(be_backend *be, float *y, const float *gate, const float *up, int64_t n);
void cpu_op_mul_sigmoid(be_backend *be, float *y, size_t y_stride, const float *g, size_t g_stride,
                        int64_t n_rows, int64_t n);
void cpu_op_mul_silu(be_backend *be, float *y, const float *z, int64_t n);
void cpu_op_add_scaled_sigmoid(be_backend *be, float *y, const float *x, const float *s,
                               int64_t n_rows, int64_t n);

/* A plain cpu_weight view of a 2-D be_weight (or the prepared one). */
cpu_weight cpu_weight_of(const be_weight *w);

/* Rows [row0, row0 + n_rows) of expert e of a 3-D pack: the repacked copy
 * when the pack was prepared (and row0 starts a 16-row group), else the
 * plain rows. *view holds the packed sub-view and must outlive the result. */
cpu_weight cpu_expert_weight(const be_weight *pack, int64_t e, int64_t row0, int64_t n_rows,
                             struct cpu_packed *view);

#endif
