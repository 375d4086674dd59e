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
    c->mv_rows = 1; /* one warp per row: fastest measured on the H200 (bench_cuda variants) */
    c->mv_blocks_per_sm = 0;
    const char *pe = getenv("WICK_CUDA_PDL");
    c->pdl = !(pe && !strcmp(pe, "0"));
    const char *fe = getenv("WICK_CUDA_FUSE");
    c->fuse_act = !(fe && !strcmp(fe, "0"));
    c->mv_q4k_parts = 8;
    /* Q4_K matvec: 2 (default) = each warp's row bulk-copied to shared memory (cp.async.bulk):
     * 2776 vs 2401 GB/s on 17408x5120, 1616 vs 1328 on 5120x6144, tg128 93.6 vs 90.1 (H200);
     * WICK_CUDA_MV_OCC=1: one warp per row with registers capped for 7 blocks per multiprocessor
     * (2312 vs 2035 GB/s on 17408x5120 against 0, the uncapped kernel); 3: bulk, capped (slower).
     * All split a Q4_K block over 8 threads, 16 quant bytes each (2422 vs 2189 GB/s for 4 parts). */
    const char *oe = getenv("WICK_CUDA_MV_OCC");
    c->mv_occ = 2;
    if (oe && oe[0] >= '0' && oe[0] <= '3' && !oe[1]) c->mv_occ = oe[0] - '0';
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
