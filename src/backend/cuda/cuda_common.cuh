/* Internal helpers shared by the CUDA kernel files (not a public API). */
#ifndef WICK_BACKEND_CUDA_COMMON_CUH
#define WICK_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* wick's C headers: C linkage for the functions they declare */
extern "C" {
#include "quant/qtypes.h"
#include "util/err.h"
}
#include "backend/cuda/cuda_kernels.h"

#define WARP 32

/* Launch error of the last kernel, as a wick error code (messages are filled
 * by the caller that knows which op failed). */
static inline int cu_launch_status(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : WK_EIO;
}

static inline int cu_fail(wk_error *err, cudaError_t e, const char *what)
{
    return wk_fail(err, WK_EIO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* Checks the last launch; on failure fills err naming the kernel. */
#define CU_CHECK_LAUNCH(err, what)                                                   \
    do {                                                                             \
        cudaError_t e_ = cudaGetLastError();                                         \
        if (e_ != cudaSuccess) return cu_fail((err), e_, (what));                    \
    } while (0)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Programmatic dependent launch (sm_90): let the next kernel of the stream
 * start (trigger), wait until the previous one has finished and its writes
 * are visible (wait; a no-op for kernels launched without the attribute).
 * Before sm_90 kernels are never launched that way: both are no-ops. */
__device__ __forceinline__ void pdl_trigger()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* The start of a kernel launched by launch_k that reads nothing before waiting:
 * let the next kernel launch, then wait for the previous one. */
__device__ __forceinline__ void pdl_enter()
{
    pdl_trigger();
    pdl_wait();
}
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/* kernel<<<grid, block, smem>>> on c's stream, with programmatic dependent launch
 * when pdl and the device has it (cuda_ctx.sw.hopper). Launch errors stay in
 * cudaGetLastError (cu_launch_status, CU_CHECK_LAUNCH). */
template <typename... P, typename... A>
static inline void launch_attr(cuda_ctx *c, bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                               A... args)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl && c->sw.hopper ? 1 : 0; /* an attribute of sm_90 and later */
    cudaLaunchKernelEx(&cfg, kernel, ((P)args)...);
}

/* Launches a kernel on c's stream. Such kernels start with pdl_enter() (or call
 * pdl_wait() before touching anything earlier kernels write or read), so the matvec
 * launched after one with programmatic dependent launch may start early; they are not
 * launched that way themselves (measured slower on the H200: e2e_cuda tg128, 27B q4_k,
 * 101.7 tok/s with every decode kernel so, 107.9 with the matvecs only; again in session
 * 4: 133.7 vs 134.6). */
template <typename... P, typename... A>
static inline void launch_k(cuda_ctx *c, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A... args)
{
    launch_attr(c, false, kernel, grid, block, smem, args...);
}

/* Lets a kernel take `bytes` of dynamic shared memory (past the 48 KiB default); a host-side
 * attribute, cheap enough to set before every prefill launch. */
template <typename... P>
static inline cudaError_t smem_allow(void (*kernel)(P...), size_t bytes)
{
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Warp-wide int8 tensor-core products (sm_80 and later), C = A·B with zero C in:
 * A 16 × K row-major, B K × 8 column-major, int32 out. Thread (lane) holds A rows
 * lane/4 and lane/4 + 8 at k = 4·(lane%4) + 0..3 (and + 16 for k32), B column lane/4
 * at the same k, and C rows lane/4, lane/4 + 8 at columns 2·(lane%4) + {0, 1}. */
__device__ __forceinline__ void mma_s8_16816(int *c, int a0, int a1, int b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
}
__device__ __forceinline__ void mma_s8_16832(int *c, int a0, int a1, int a2, int a3, int b0, int b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* An A/B switch from the environment (cuda_kernels.h lists them): on unless set to "0". */
static inline int env_on(const char *name)
{
    const char *v = getenv(name);
    return !(v && !strcmp(v, "0"));
}

static inline unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

#endif
