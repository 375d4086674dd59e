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
    c->cc_major = prop.major;
    cuda_ctx_set_switches(c, cuda_switches_from_env(prop.major));
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
    /* cuda_matvec_tc's stream-K buffers, per slice of 8 activation rows: per warp two partial
     * tiles of 16 × 8 sums, per weight tile a counter (zero before the first launch) */
    const size_t warps = (size_t)c->sm_count * CUDA_TC_SK_BLOCKS_PER_SM * CUDA_TC_SK_WARPS;
    const size_t part = CUDA_TC_SK_SLICES * warps * 2 * 16 * 8 * sizeof(float);
    const size_t cnt = (size_t)CUDA_TC_SK_SLICES * CUDA_TC_MAX_TILES * sizeof(unsigned);
    if (cudaMalloc(&c->tc_part, part) != cudaSuccess || cudaMalloc(&c->tc_cnt, cnt) != cudaSuccess ||
        cudaMemsetAsync(c->tc_cnt, 0, cnt, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        cudaGetLastError(); /* no stream-K: the tile kernel takes every product */
        if (c->tc_part) cudaFree(c->tc_part);
        if (c->tc_cnt) cudaFree(c->tc_cnt);
        c->tc_part = NULL;
        c->tc_cnt = NULL;
    }
    return 0;
}

extern "C" void cuda_ctx_free(cuda_ctx *c)
{
    if (!c) return;
    if (c->cublas) cublasDestroy((cublasHandle_t)c->cublas);
    if (c->scratch) cudaFree(c->scratch);
    if (c->actq) cudaFree(c->actq);
    if (c->tc_part) cudaFree(c->tc_part);
    if (c->tc_cnt) cudaFree(c->tc_cnt);
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

extern "C" cuda_switches cuda_switches_from_env(int cc_major)
{
    const char *gen = getenv("WICK_CUDA_GENERIC");
    cuda_switches sw;
    sw.fuse = env_on("WICK_CUDA_FUSE");
    sw.graphs = env_on("WICK_CUDA_GRAPHS");
    sw.int8 = env_on("WICK_CUDA_INT8");
    sw.nt = env_on("WICK_CUDA_NT");
    sw.tc = env_on("WICK_CUDA_TC");
    sw.hopper = cc_major >= 9 && !(gen && !strcmp(gen, "1"));
    return sw;
}

extern "C" void cuda_ctx_set_switches(cuda_ctx *c, cuda_switches sw)
{
    sw.hopper = sw.hopper && c->cc_major >= 9;
    c->sw = sw;
    c->mmv_max_rows = sw.int8 ? CUDA_MMV_MAX_ROWS : 0;
    c->mmq_max_rows = sw.int8 ? CUDA_MMQ_MAX_ROWS : 0;
}

extern "C" void cuda_ctx_act_invalidate(cuda_ctx *c) { c->actq_x = NULL; }
