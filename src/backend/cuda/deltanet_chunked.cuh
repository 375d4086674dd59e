/* What the chunked Gated DeltaNet prefill's kernels share: deltanet_chunked.cu
 * (the per-chunk prep and out kernels, the runs) and deltanet_state.cu (the
 * sequential state kernels). */
#ifndef WICK_CUDA_DELTANET_CHUNKED_CUH
#define WICK_CUDA_DELTANET_CHUNKED_CUH

#include "backend/cuda/cuda_common.cuh"

#define GC 64 /* chunk length, as llama.cpp's fallback graph and the CPU */
/* value columns per block of the state kernel: 384 blocks for a 27B layer, three per
 * multiprocessor (32 columns measured no faster before k moved to registers; with
 * it a 256-thread block no longer fits twice) */
#define GDN_STATE_COLS 16

typedef struct gdn_chunk_bufs {
    const float *qn, *kn; /* [n_t][n_hk][d_k], normalized (deltanet.cu's first pass) */
    float *G;             /* [n_hv][nc][GC] cumulative log-decay */
    float *W;             /* [n_hv][nc][GC][d_k] */
    float *U;             /* [n_hv][nc][GC][d_v]: U, then V' (state kernel) */
    float *P;             /* [n_hv][nc][GC][GC] */
    float *S;             /* [n_hv][nc][d_k][d_v]: the state entering each chunk */
    int t0, n_seg, nc;    /* the run: first token, tokens, chunks */
    int v16;              /* v rows 16-byte aligned: copied 16 bytes at a time */
} gdn_chunk_bufs;

__device__ __forceinline__ float dot4(float4 x, float4 y) { return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }
__device__ __forceinline__ float comp(const float4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/* The state kernel over the run in b: on tensor cores (mma) or in F32 on the CUDA cores. */
int gdn_chunk_state(cuda_ctx *c, const cuda_gdn *a, const gdn_chunk_bufs &b, bool mma, wk_error *err);

#endif
