/* Internal interface of the CPU matmul: per-ISA GEMM tile kernels. */
#ifndef WICK_BACKEND_CPU_MATMUL_IMPL_H
#define WICK_BACKEND_CPU_MATMUL_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul.h"

/* Work queue shared by the workers of one job: items [0, n) are handed out
 * in order, `grain` at a time. A worker the OS has descheduled then delays
 * the job only by the chunk it holds (with a static split the others would
 * wait for its whole share; the machines we run on are often oversubscribed).
 * Which worker takes an item never changes the item's result. */
typedef struct {
    atomic_long next;
    long n, grain;
} cpu_queue;

static inline void cpu_queue_init(cpu_queue *q, long n, long grain)
{
    atomic_init(&q->next, 0);
    q->n = n;
    q->grain = grain > 0 ? grain : 1;
}

/* Next chunk [*b, *e); 0 when the queue is empty. */
static inline int cpu_queue_take(cpu_queue *q, long *b, long *e)
{
    long s = atomic_fetch_add_explicit(&q->next, q->grain, memory_order_relaxed);
    if (s >= q->n) return 0;
    *b = s;
    *e = s + q->grain < q->n ? s + q->grain : q->n;
    return 1;
}

/* Tile kernel: y[i*y_stride + j] = W_j · A_i for j < nw, i < na, where W_j is
 * the weight row at w + j*w_stride and A_i the activation row (already in the
 * partner format) at a + i*a_stride; k elements per row. Results must match
 * the type's vec_dot of the same ISA level up to float summation order. */
typedef void (*cpu_gemm_fn)(int64_t k, const void *w, size_t w_stride, int nw, const void *a,
                            size_t a_stride, int na, float *y, int64_t y_stride);

/* Kernels for the decode regime (matmul_decode_x86.h) at the AVX-512 VNNI
 * and the AVX2 level, for the types that have one, else NULL. */
cpu_gemm_fn cpu_gemm_decode_avx512(enum qt_type type);
cpu_gemm_fn cpu_gemm_decode_avx2(enum qt_type type);

/* AVX-512 kernels for F32 / F16 / BF16 weights, any N (matmul_float_avx512.c). */
cpu_gemm_fn cpu_gemm_float_avx512(enum qt_type type);

#endif
