/* CUDA context: device, stream, cuBLAS handle and one growable scratch buffer. */
#include <cublas_v2.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" int cuda_ctx_init(cuda_ctx *c, int device, wk_error *err)
{
    memset(c, 0, sizeof *c);
    c->device = device;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return cu_fail(err, e, "selecting the device");
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return cu_fail(err, e, "reading device properties");
    c->sm_count = prop.multiProcessorCount;
    c->smem_per_sm = prop.sharedMemPerMultiprocessor;
    c->smem_per_block = prop.sharedMemPerBlockOptin;
    c->mv_rows = 1; /* one warp per row: fastest measured on the H200 (bench_cuda variants) */
    c->mv_blocks_per_sm = 0;
    /* 1 (default): the matvecs only. 2, every decode kernel, measured slower on the H200
     * (e2e_cuda tg128, 27B q4_k: 101.7 vs 107.9 tok/s; 0: 101.4), likely because kernels
     * launched early hold multiprocessor slots while they wait */
    c->pdl = env_digit("WICK_CUDA_PDL", 0, 2, 1);
    c->fuse_act = env_on("WICK_CUDA_FUSE");
    c->mv_q4k_parts = 8;
    /* Q4_K matvec: 4 (default) = persistent warps keeping 2 bulk row copies in flight
     * (cp.async.bulk to shared memory) for rows up to 4 KiB, longer rows bulk-copied one per
     * warp (two warps per row, half each, with mv_split, the default: tg128 129.1 vs 125.4);
     * tg128 27B q4_k 107.9 vs 105.9 tok/s for 2 (every row bulk-copied, one per warp), which
     * was 93.6 vs 90.1 for 1 (one warp per row from registers, capped for 7 blocks per
     * multiprocessor; 0 uncapped); 3: bulk, capped; 5: pipelined for every row (H200).
     * All split a Q4_K block over 8 threads, 16 quant bytes each (2422 vs 2189 GB/s for 4 parts). */
    c->mv_occ = env_digit("WICK_CUDA_MV_OCC", 0, 5, 4);
    c->mv_split = env_on("WICK_CUDA_MV_SPLIT");
    c->mv_multi = env_on("WICK_CUDA_MULTI");
    c->mmv_max_rows = env_on("WICK_CUDA_MMV") ? CUDA_MMV_MAX_ROWS : 0;
    const char *qe = getenv("WICK_CUDA_MMQ");
    c->mmq_max_rows = qe && *qe ? strtoll(qe, NULL, 10) : CUDA_MMQ_MAX_ROWS;
    cudaStream_t s;
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cu_fail(err, e, "creating a stream");
    c->stream = s;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(s);
        c->stream = NULL;
        return wk_fail(err, WK_EIO, "cuda: cublasCreate failed");
    }
    cublasSetStream(h, s);
    c->cublas = h;
    return 0;
}

extern "C" void cuda_ctx_free(cuda_ctx *c)
{
    if (!c) return;
    if (c->cublas) cublasDestroy((cublasHandle_t)c->cublas);
    if (c->scratch) cudaFree(c->scratch);
    if (c->actq) cudaFree(c->actq);
    if (c->stream) cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
}

extern "C" int cuda_ctx_scratch(cuda_ctx *c, size_t bytes, void **p, wk_error *err)
{
    if (bytes > c->scratch_bytes) {
        /* cudaFree waits for the device, so kernels still reading the old
         * buffer finish first */
        if (c->scratch) cudaFree(c->scratch);
        c->epoch++;
        c->scratch = NULL;
        c->scratch_bytes = 0;
        size_t want = bytes + bytes / 4; /* headroom: fewer regrowths as batches vary */
        cudaError_t e = cudaMalloc(&c->scratch, want);
        if (e != cudaSuccess) return wk_fail(err, WK_ENOMEM, "cuda: scratch of %zu bytes: %s", want,
                                             cudaGetErrorString(e));
        c->scratch_bytes = want;
    }
    *p = c->scratch;
    return 0;
}

extern "C" int cuda_sync(cuda_ctx *c, wk_error *err)
{
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) return cu_fail(err, e, "synchronizing the stream");
    return 0;
}

extern "C" void cuda_ctx_act_invalidate(cuda_ctx *c) { c->actq_x = NULL; }
