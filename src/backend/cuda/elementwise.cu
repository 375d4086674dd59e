/* Norms, RoPE, KV store, element-wise gates, the short causal conv of the
 * Gated DeltaNet layers. All memory-bound and simple (the MoE's are in moe.cu).
 * Every kernel is launched with launch_k and starts with pdl_enter(): nothing is
 * read before the previous kernel has finished (a matvec launched after it may
 * start early). */
#include "backend/cuda/actq.cuh"

/* ---- RMSNorm: one block per row ---------------------------------------------------- */

__device__ __forceinline__ float block_sum(float v, float *red)
{
    v = warp_sum(v);
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

/* Threads per row: a decode step's row (a few thousand floats) is one block's
 * work, so the block is wide and its loads are issued together (1024 threads
 * for 5120 floats: 4.1 -> ~2 us; the fused variants below use the same count,
 * so the sums add in the same order). */
static inline int norm_threads(int64_t n) { return n >= 4096 ? 1024 : n >= 1024 ? 256 : n >= 256 ? 128 : 32; }

/* Σ x[i]² over i = t, t + T, ... < n: one thread's share of a row's sum of squares, in the
 * order every RMSNorm kernel here uses (so that fused and plain ones agree bit for bit). */
__device__ __forceinline__ float sumsq_strided(const float *x, int64_t n, int64_t t, int64_t T)
{
    float ss = 0.0f;
#pragma unroll 4
    for (int64_t i = t; i < n; i += T) ss += x[i] * x[i];
    return ss;
}

__global__ void rms_norm_kernel(float *y, size_t y_stride, const float *x, size_t x_stride, int64_t n,
                                const float *__restrict__ w, float eps)
{
    __shared__ float red[32];
    pdl_enter();
    const float *xr = x + blockIdx.x * x_stride;
    float *yr = y + blockIdx.x * y_stride;
    const float ss = block_sum(sumsq_strided(xr, n, threadIdx.x, blockDim.x), red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i] * scale;
        yr[i] = w ? v * w[i] : v;
    }
}

extern "C" int cuda_rms_norm(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                             int64_t n_rows, int64_t n, const float *w, float eps)
{
    if (n_rows <= 0) return 0;
    const int threads = norm_threads(n);
    launch_k(c, rms_norm_kernel, (unsigned)n_rows, threads, 0, y, y_stride, x, x_stride, n, w, eps);
    return cu_launch_status();
}

/* ---- RoPE ---------------------------------------------------------------------------- */

__device__ int imrope_component(const int4 s, int i)
{
    const int total = s.x + s.y + s.z + s.w;
    const int sector = total > 0 ? i % total : 0;
    if (sector % 3 == 1 && sector < 3 * s.y) return 1;
    if (sector % 3 == 2 && sector < 3 * s.z) return 2;
    if (sector % 3 == 0 && sector < 3 * s.x) return 0;
    return 3;
}

__global__ void rope_cache_kernel(float *cs, const int32_t *pos, int64_t n_t, int imrope, int n_rot,
                                  float theta_scale, float freq_scale, const float *ff, int4 sections)
{
    pdl_enter();
    const int half = n_rot / 2;
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * half) return;
    const int64_t t = gi / half;
    const int i = (int)(gi % half);
    /* text-only IMROPE: components t = h = w = position, e = 0 */
    float th = imrope && imrope_component(sections, i) == 3 ? 0.0f : (float)pos[t];
    /* ggml's running float product: th · θ^(−2i/n_rot), one multiply per pair */
    for (int j = 0; j < i; j++) th *= theta_scale;
    if (ff) th /= ff[i];
    th *= freq_scale;
    float s, co;
    sincosf(th, &s, &co);
    cs[t * n_rot + 2 * i] = co;
    cs[t * n_rot + 2 * i + 1] = s;
}

extern "C" int cuda_rope_cache(cuda_ctx *c, float *cs, const int32_t *pos, int64_t n_t, int mode, int n_rot,
                               float theta, float freq_scale, const float *freq_factors,
                               const int32_t sections[4])
{
    if (n_t <= 0) return 0;
    const float theta_scale = powf(theta, -2.0f / (float)n_rot);
    int4 sec = make_int4(sections ? sections[0] : 0, sections ? sections[1] : 0, sections ? sections[2] : 0,
                         sections ? sections[3] : 0);
    launch_k(c, rope_cache_kernel, cdiv(n_t * (n_rot / 2), 256), 256, 0, cs, pos, n_t, mode == 2, n_rot, theta_scale,
             freq_scale, freq_factors, sec);
    return cu_launch_status();
}

/* Rotates pair gi (of n_t · n_head · n_rot/2) of x. */
__device__ __forceinline__ void rope_pair(float *x, int64_t gi, size_t t_stride, int n_head, int head_stride,
                                          const float *__restrict__ cs, int neox, int n_rot)
{
    const int half = n_rot / 2;
    const int i = (int)(gi % half);
    const int64_t th = gi / half;
    const int h = (int)(th % n_head);
    const int64_t t = th / n_head;
    float *xh = x + t * t_stride + (size_t)h * head_stride;
    const float co = cs[t * n_rot + 2 * i], s = cs[t * n_rot + 2 * i + 1];
    const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    const float a = xh[ia], b = xh[ib];
    xh[ia] = a * co - b * s;
    xh[ib] = a * s + b * co;
}

__global__ void rope_kernel(float *x, int64_t n_t, size_t t_stride, int n_head, int head_stride,
                            const float *__restrict__ cs, int neox, int n_rot)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * n_head * (n_rot / 2)) return;
    rope_pair(x, gi, t_stride, n_head, head_stride, cs, neox, n_rot);
}

/* Two tensors rotated with the same cache (a layer's q and k): rope_kernel's work for x0,
 * then for x1, in one launch. */
__global__ void rope2_kernel(float *x0, size_t t_stride0, int n_head0, int head_stride0, float *x1, size_t t_stride1,
                             int n_head1, int head_stride1, int64_t n_t, const float *__restrict__ cs, int neox,
                             int n_rot)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n0 = n_t * n_head0 * (n_rot / 2);
    if (gi < n0) rope_pair(x0, gi, t_stride0, n_head0, head_stride0, cs, neox, n_rot);
    else if (gi - n0 < n_t * n_head1 * (n_rot / 2)) rope_pair(x1, gi - n0, t_stride1, n_head1, head_stride1, cs, neox, n_rot);
}

extern "C" int cuda_rope(cuda_ctx *c, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
                         int32_t head_stride, const float *cs, int mode, int n_rot)
{
    const int64_t n = n_t * n_head * (n_rot / 2);
    if (n <= 0) return 0;
    launch_k(c, rope_kernel, cdiv(n, 256), 256, 0, x, n_t, t_stride, n_head, head_stride, cs, mode != 0,
             n_rot);
    return cu_launch_status();
}

extern "C" int cuda_rope2(cuda_ctx *c, float *x0, size_t t_stride0, int32_t n_head0, int32_t head_stride0, float *x1,
                          size_t t_stride1, int32_t n_head1, int32_t head_stride1, int64_t n_t, const float *cs,
                          int mode, int n_rot)
{
    const int64_t n = n_t * ((int64_t)n_head0 + n_head1) * (n_rot / 2);
    if (n <= 0) return 0;
    launch_k(c, rope2_kernel, cdiv(n, 256), 256, 0, x0, t_stride0, n_head0, head_stride0, x1, t_stride1, n_head1,
             head_stride1, n_t, cs, mode != 0, n_rot);
    return cu_launch_status();
}

/* ---- KV store: F32 → F16 rows -------------------------------------------------------- */

/* Value gi of n_t · n_head_kv · d: its token t, kv head g and element i. */
struct kv_pos {
    int64_t t;
    int g, i;
};
__device__ __forceinline__ kv_pos kv_pos_of(int64_t gi, int n_head_kv, int d)
{
    const int64_t tg = gi / d;
    return kv_pos{tg / n_head_kv, (int)(tg % n_head_kv), (int)(gi % d)};
}

/* Stores value gi (of n_t · n_head_kv · d) of x at position pos0 + its token (pos0 already shifted). */
__device__ __forceinline__ void kv_store_one(uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                                             size_t x_stride, int64_t gi, int n_head_kv, int d)
{
    const kv_pos k = kv_pos_of(gi, n_head_kv, d);
    const int64_t t = k.t;
    const int g = k.g, i = k.i;
    cache[g * head_stride + (size_t)(pos0 + t) * d + i] =
        __half_as_ushort(__float2half_rn(x[t * x_stride + (size_t)g * d + i]));
}

__global__ void kv_store_kernel(uint16_t *cache, size_t head_stride, int32_t pos0, const int32_t *pos_dev,
                                int32_t pos_ref, const float *x, size_t x_stride, int64_t n_t, int n_head_kv, int d)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * n_head_kv * d) return;
    if (pos_dev) pos0 += *pos_dev - pos_ref;
    kv_store_one(cache, head_stride, pos0, x, x_stride, gi, n_head_kv, d);
}

extern "C" int cuda_kv_store_shifted(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0,
                                     const int32_t *pos_dev, int32_t pos_ref, const float *x, size_t x_stride,
                                     int64_t n_t, int32_t n_head_kv, int32_t d)
{
    const int64_t n = n_t * n_head_kv * d;
    if (n <= 0) return 0;
    launch_k(c, kv_store_kernel, cdiv(n, 256), 256, 0, cache, head_stride, pos0, pos_dev, pos_ref, x, x_stride,
             n_t, n_head_kv, d);
    return cu_launch_status();
}

extern "C" int cuda_kv_store(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                             size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    return cuda_kv_store_shifted(c, cache, head_stride, pos0, NULL, 0, x, x_stride, n_t, n_head_kv, d);
}

/* ---- KV store: F32 → Q8_0 rows ------------------------------------------------------- */

/* One warp per 32-value block (d % 32 == 0 and 256-thread blocks: a warp never
 * straddles two blocks or the end). The rule is the CPU backend's
 * (attention_kv_q8.c, ggml's quantize_row_q8_0) with the same F32 operations:
 * scale amax/127, codes roundf(x · (1/scale)), scale stored as F16. */
__device__ __forceinline__ void kv_store_q8_0_one(uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                                                  size_t x_stride, int64_t gi, int n_head_kv, int d)
{
    const kv_pos k = kv_pos_of(gi, n_head_kv, d);
    const int64_t t = k.t;
    const int g = k.g, i = k.i;
    const float v = x[t * x_stride + (size_t)g * d + i];
    const float amax = warp_max(fabsf(v));
    const float s = amax / 127.0f, inv = s != 0.0f ? 1.0f / s : 0.0f;
    uint8_t *blk = (uint8_t *)(cache + g * head_stride + (size_t)(pos0 + t) * (d / 32 * 17)) + i / 32 * 34;
    if ((i & 31) == 0) *(uint16_t *)blk = __half_as_ushort(__float2half_rn(s));
    blk[2 + (i & 31)] = (uint8_t)(int8_t)roundf(v * inv);
}

__global__ void kv_store_q8_0_kernel(uint16_t *cache, size_t head_stride, int32_t pos0, const int32_t *pos_dev,
                                     int32_t pos_ref, const float *x, size_t x_stride, int64_t n_t, int n_head_kv,
                                     int d)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * n_head_kv * d) return;
    if (pos_dev) pos0 += *pos_dev - pos_ref;
    kv_store_q8_0_one(cache, head_stride, pos0, x, x_stride, gi, n_head_kv, d);
}

/* A layer's K and V rows (same shape and position) in one launch: the work of two
 * kv_store (Q8 false) or kv_store_q8_0 (Q8 true) launches, x0 into cache0 then x1 into
 * cache1 (n_t · n_head_kv · d is a multiple of 32: no warp straddles the two). */
template <bool Q8>
__global__ void kv_store2_kernel(uint16_t *cache0, const float *x0, size_t x_stride0, uint16_t *cache1,
                                 const float *x1, size_t x_stride1, size_t head_stride, int32_t pos0,
                                 const int32_t *pos_dev, int32_t pos_ref, int64_t n_t, int n_head_kv, int d)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n = n_t * n_head_kv * d;
    if (gi >= 2 * n) return;
    if (pos_dev) pos0 += *pos_dev - pos_ref;
    const bool second = gi >= n;
    uint16_t *cache = second ? cache1 : cache0;
    const float *x = second ? x1 : x0;
    const size_t x_stride = second ? x_stride1 : x_stride0;
    if (Q8) kv_store_q8_0_one(cache, head_stride, pos0, x, x_stride, second ? gi - n : gi, n_head_kv, d);
    else kv_store_one(cache, head_stride, pos0, x, x_stride, second ? gi - n : gi, n_head_kv, d);
}

extern "C" int cuda_kv_store2_shifted(cuda_ctx *c, int kv_type, uint16_t *cache0, const float *x0, size_t x_stride0,
                                      uint16_t *cache1, const float *x1, size_t x_stride1, size_t head_stride,
                                      int32_t pos0, const int32_t *pos_dev, int32_t pos_ref, int64_t n_t,
                                      int32_t n_head_kv, int32_t d)
{
    if (kv_type != CUDA_KV_F16 && kv_type != CUDA_KV_Q8_0) return WK_EINVAL;
    if (kv_type == CUDA_KV_Q8_0 && (d <= 0 || d % 32)) return WK_EINVAL;
    const int64_t n = n_t * n_head_kv * d;
    if (n <= 0) return 0;
    if (kv_type == CUDA_KV_Q8_0)
        launch_k(c, kv_store2_kernel<true>, cdiv(2 * n, 256), 256, 0, cache0, x0, x_stride0, cache1, x1, x_stride1,
                 head_stride, pos0, pos_dev, pos_ref, n_t, n_head_kv, d);
    else
        launch_k(c, kv_store2_kernel<false>, cdiv(2 * n, 256), 256, 0, cache0, x0, x_stride0, cache1, x1, x_stride1,
                 head_stride, pos0, pos_dev, pos_ref, n_t, n_head_kv, d);
    return cu_launch_status();
}

/* Several sequences' K and V stores (a batched step's layer) in one launch: y runs over
 * the sequences, x over the values of each one's two stores, as kv_store2_kernel. */
template <bool Q8>
__global__ void kv_store_batch_kernel(const __grid_constant__ cuda_kv_batch B, int n_head_kv, int d)
{
    pdl_enter();
    const int s = blockIdx.y;
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n = (int64_t)B.n_t[s] * n_head_kv * d;
    if (gi >= 2 * n) return;
    int32_t pos0 = B.pos0[s];
    if (B.pos_dev[s]) pos0 += *B.pos_dev[s] - B.pos_ref[s];
    const bool second = gi >= n;
    uint16_t *cache = second ? B.v[s] : B.k[s];
    const float *x = second ? B.xv[s] : B.xk[s];
    const size_t x_stride = second ? B.xv_stride[s] : B.xk_stride[s];
    if (Q8) kv_store_q8_0_one(cache, B.head_stride[s], pos0, x, x_stride, second ? gi - n : gi, n_head_kv, d);
    else kv_store_one(cache, B.head_stride[s], pos0, x, x_stride, second ? gi - n : gi, n_head_kv, d);
}

extern "C" int cuda_kv_store_batch(cuda_ctx *c, int kv_type, const cuda_kv_batch *b, int32_t n_head_kv, int32_t d)
{
    if (kv_type != CUDA_KV_F16 && kv_type != CUDA_KV_Q8_0) return WK_EINVAL;
    if (kv_type == CUDA_KV_Q8_0 && (d <= 0 || d % 32)) return WK_EINVAL;
    if (b->n < 1 || b->n > CUDA_ATTN_SEQS) return WK_EINVAL;
    int64_t most = 0;
    for (int i = 0; i < b->n; i++) most = b->n_t[i] > most ? b->n_t[i] : most;
    const int64_t n = most * n_head_kv * d;
    if (n <= 0) return 0;
    const dim3 grid((unsigned)cdiv(2 * n, 256), (unsigned)b->n);
    if (kv_type == CUDA_KV_Q8_0) launch_k(c, kv_store_batch_kernel<true>, grid, 256, 0, *b, n_head_kv, d);
    else launch_k(c, kv_store_batch_kernel<false>, grid, 256, 0, *b, n_head_kv, d);
    return cu_launch_status();
}

extern "C" int cuda_kv_store_q8_0_shifted(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0,
                                          const int32_t *pos_dev, int32_t pos_ref, const float *x, size_t x_stride,
                                          int64_t n_t, int32_t n_head_kv, int32_t d)
{
    if (d <= 0 || d % 32) return WK_EINVAL;
    const int64_t n = n_t * n_head_kv * d;
    if (n <= 0) return 0;
    launch_k(c, kv_store_q8_0_kernel, cdiv(n, 256), 256, 0, cache, head_stride, pos0, pos_dev, pos_ref, x,
             x_stride, n_t, n_head_kv, d);
    return cu_launch_status();
}

/* ---- element-wise --------------------------------------------------------------------- */

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }

__global__ void add_kernel(float *y, const float *a, const float *b, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}
__global__ void add_bias_kernel(float *y, const float *bias, int64_t total, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] += bias[i % n];
}
__global__ void swiglu_kernel(float *y, const float *g, const float *u, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = siluf_(g[i]) * u[i];
}
__global__ void swiglu_fused_kernel(float *y, const float *x, int64_t rows, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n) return;
    int64_t r = i / n, j = i % n;
    y[i] = siluf_(x[r * 2 * n + j]) * x[r * 2 * n + n + j];
}
__global__ void mul_sigmoid_kernel(float *y, size_t ys, const float *g, size_t gs, int64_t rows, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n) return;
    int64_t r = i / n, j = i % n;
    y[r * ys + j] *= sigmoidf_(g[r * gs + j]);
}
__global__ void mul_silu_kernel(float *y, const float *z, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= siluf_(z[i]);
}
__global__ void add_scaled_sigmoid_kernel(float *y, const float *x, const float *s, int64_t rows, int64_t n)
{
    pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * n) y[i] += sigmoidf_(s[i / n]) * x[i];
}

#define EW_LAUNCH(n) cdiv((n), 256), 256, 0

extern "C" int cuda_add(cuda_ctx *c, float *y, const float *a, const float *b, int64_t n)
{
    if (n <= 0) return 0;
    launch_k(c, add_kernel, EW_LAUNCH(n), y, a, b, n);
    return cu_launch_status();
}
extern "C" int cuda_add_bias(cuda_ctx *c, float *y, const float *bias, int64_t n_rows, int64_t n)
{
    if (n_rows * n <= 0) return 0;
    launch_k(c, add_bias_kernel, EW_LAUNCH(n_rows * n), y, bias, n_rows * n, n);
    return cu_launch_status();
}
extern "C" int cuda_swiglu(cuda_ctx *c, float *y, const float *gate, const float *up, int64_t n)
{
    if (n <= 0) return 0;
    launch_k(c, swiglu_kernel, EW_LAUNCH(n), y, gate, up, n);
    return cu_launch_status();
}
extern "C" int cuda_swiglu_fused(cuda_ctx *c, float *y, const float *x, int64_t n_rows, int64_t n)
{
    if (n_rows * n <= 0) return 0;
    launch_k(c, swiglu_fused_kernel, EW_LAUNCH(n_rows * n), y, x, n_rows, n);
    return cu_launch_status();
}
extern "C" int cuda_mul_sigmoid(cuda_ctx *c, float *y, size_t y_stride, const float *g, size_t g_stride,
                                int64_t n_rows, int64_t n)
{
    if (n_rows * n <= 0) return 0;
    launch_k(c, mul_sigmoid_kernel, EW_LAUNCH(n_rows * n), y, y_stride, g, g_stride, n_rows, n);
    return cu_launch_status();
}
extern "C" int cuda_mul_silu(cuda_ctx *c, float *y, const float *z, int64_t n)
{
    if (n <= 0) return 0;
    launch_k(c, mul_silu_kernel, EW_LAUNCH(n), y, z, n);
    return cu_launch_status();
}
extern "C" int cuda_add_scaled_sigmoid(cuda_ctx *c, float *y, const float *x, const float *s, int64_t n_rows,
                                       int64_t n)
{
    if (n_rows * n <= 0) return 0;
    launch_k(c, add_scaled_sigmoid_kernel, EW_LAUNCH(n_rows * n), y, x, s, n_rows, n);
    return cu_launch_status();
}

/* ---- causal depthwise conv + SiLU ---------------------------------------------------------
 * Outputs in parallel over (channel, token); the state is rewritten by a
 * second launch after every output has read the old one. */

#define CONV_MAX_K 8

/* Causal conv + SiLU of n_t rows of one sequence (state), or of st.n sequences of one token
 * each (row t with state st.p[t]): the same operations per channel either way. */
__global__ void ssm_conv_kernel(float *y, size_t y_stride, const float *x, size_t x_stride, int64_t n_t,
                                int64_t n_ch, const float *__restrict__ w, int k, float *state, const cuda_seq_states st)
{
    pdl_enter();
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * n_ch) return;
    const int64_t ch = gi % n_ch, t = gi / n_ch;
    const bool seqs = st.n > 0;
    const int64_t tt = seqs ? 0 : t; /* the row's time within its sequence */
    if (seqs) {
        x += t * x_stride;
        state = st.p[t];
    }
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int64_t src = tt - (k - 1) + j; /* input time of tap j */
        const float v = src >= 0 ? x[src * x_stride + ch] : state[(k - 1 + src) * n_ch + ch];
        acc += w[ch * k + j] * v;
    }
    y[t * y_stride + ch] = acc / (1.0f + expf(-acc));
    if (seqs || n_t == 1) { /* a decode step: this thread alone reads the channel's state, so it shifts it too */
        for (int j = 0; j < k - 2; j++) state[j * n_ch + ch] = state[(j + 1) * n_ch + ch];
        if (k > 1) state[(k - 2) * n_ch + ch] = x[ch];
    }
}

__global__ void ssm_conv_state_kernel(const float *x, size_t x_stride, int64_t n_t, int64_t n_ch, int k,
                                      float *state)
{
    pdl_enter();
    const int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= n_ch) return;
    float keep[CONV_MAX_K];
    for (int j = 0; j < k - 1; j++) {
        const int64_t src = n_t - (k - 1) + j;
        keep[j] = src >= 0 ? x[src * x_stride + ch] : state[(k - 1 + src) * n_ch + ch];
    }
    for (int j = 0; j < k - 1; j++) state[j * n_ch + ch] = keep[j];
}

extern "C" int cuda_ssm_conv(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                             int64_t n_t, int64_t n_ch, const float *w, int32_t k, float *state)
{
    if (k < 1 || k > CONV_MAX_K) return WK_EINVAL;
    if (n_t * n_ch <= 0) return 0;
    const cuda_seq_states one = {0, {}};
    launch_k(c, ssm_conv_kernel, EW_LAUNCH(n_t * n_ch), y, y_stride, x, x_stride, n_t, n_ch, w, k, state, one);
    if (k > 1 && n_t > 1) launch_k(c, ssm_conv_state_kernel, EW_LAUNCH(n_ch), x, x_stride, n_t, n_ch, k, state);
    return cu_launch_status();
}

extern "C" int cuda_ssm_conv_seqs(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                                  int64_t n_ch, const float *w, int32_t k, const cuda_seq_states *s)
{
    if (k < 1 || k > CONV_MAX_K || s->n < 1 || s->n > CUDA_SEQS_MAX) return WK_EINVAL;
    if (n_ch <= 0) return 0;
    launch_k(c, ssm_conv_kernel, EW_LAUNCH(s->n * n_ch), y, y_stride, x, x_stride, (int64_t)s->n, n_ch, w, k,
             (float *)NULL, *s);
    return cu_launch_status();
}

/* ---- decode fusions: the op, then its output quantized for the next matmul ------------------ */

/* Eight consecutive floats (two 16-byte accesses; p 32-byte aligned). */
__device__ __forceinline__ void load8(const float *p, float *v)
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(float *p, const float *v)
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* RMSNorm of one row of n per block, its output quantized to Q8_K for the next matvec; with
 * ADD, the residual add x = a + b (written back) comes first: a decode step's add and norm in
 * one pass. Thread i owns elements 8i .. 8i+7 (vector loads and stores, and one warp holds one
 * 256-value Q8_K block, so the codes come from registers); the sum of squares is then taken
 * from a shared-memory copy of the row by the first T threads in sumsq_strided's order, the
 * others adding zeros: the scale is bit for bit rms_norm_kernel's with T threads, and the
 * element operations are the unfused kernels' (add_kernel, rms_norm_kernel). ncu: 7.2 us for
 * the 27B row (5120) with the earlier strided one-element-per-thread kernel, L1-bound on
 * scalar loads. Needs n % 256 == 0 and n / 8 <= blockDim.x. */
template <bool ADD>
__global__ void __launch_bounds__(1024)
norm_q8k_kernel(float *x, const float *a, size_t a_stride, const float *b, float *y, int64_t n, int T,
                const float *__restrict__ w, float eps, int8_t *__restrict__ xq, float *__restrict__ xd)
{
    extern __shared__ __align__(16) float row[];
    __shared__ float red[32];
    const int64_t i0 = (int64_t)threadIdx.x * 8, o = (int64_t)blockIdx.x * n;
    const bool mine = i0 < n;
    float v[8], wv[8];
    if (mine && w) load8(w + i0, wv); /* a weight: no earlier kernel writes it */
    pdl_enter();
    if (mine) {
        load8(a + blockIdx.x * a_stride + i0, v);
        if (ADD) {
            float bv[8];
            load8(b + o + i0, bv);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = v[k] + bv[k];
            store8(x + o + i0, v);
        }
        store8(row + i0, v);
    }
    __syncthreads();
    const float ss = block_sum((int)threadIdx.x < T ? sumsq_strided(row, n, threadIdx.x, T) : 0.0f, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    if (!mine) return; /* whole warps: n / 8 is a multiple of 32 */
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float t = v[k] * scale;
        v[k] = w ? t * wv[k] : t;
    }
    store8(y + o + i0, v);
    int8_t q[8];
    const float d = q8k_warp(v, threadIdx.x & 31, q);
    q8_store(xq, xd, o + i0, q, d, threadIdx.x & 31);
}

/* Launches norm_q8k_kernel<ADD> on n_rows rows; 0 when the row does not suit it (the caller
 * then runs the unfused ops). */
static int norm_q8k(cuda_ctx *c, bool add, float *x, const float *a, size_t a_stride, const float *b, float *y,
                    int64_t n_rows, int64_t n, const float *w, float eps)
{
    int8_t *xq;
    float *xd;
    const int T = norm_threads(n), threads = (int)(n / 8 > T ? n / 8 : T);
    const bool aligned = ((uintptr_t)x | (uintptr_t)a | (uintptr_t)b | (uintptr_t)y | (uintptr_t)w) % 16 == 0 &&
                         a_stride % 4 == 0; /* the 16-byte accesses */
    if (n_rows <= 0 || n < 1024 || n % 256 || threads > 1024 || !aligned ||
        !cuda_act_slots(c, n_rows, n, &xq, &xd))
        return 0;
    const size_t smem = (size_t)n * sizeof(float);
    if (add) launch_k(c, norm_q8k_kernel<true>, (unsigned)n_rows, threads, smem, x, a, a_stride, b, y, n, T, w, eps, xq, xd);
    else launch_k(c, norm_q8k_kernel<false>, (unsigned)n_rows, threads, smem, x, a, a_stride, b, y, n, T, w, eps, xq, xd);
    if (cu_launch_status()) return WK_EIO;
    cuda_act_mark(c, y, n_rows, n, 256);
    return 1;
}

/* x = a + b (rows of n, written back), then RMSNorm of x into y and its Q8_K codes */
extern "C" int cuda_add_rms_norm_q8k(cuda_ctx *c, float *x, const float *a, const float *b, float *y, int64_t n_rows,
                                     int64_t n, const float *w, float eps)
{
    return norm_q8k(c, true, x, a, (size_t)n, b, y, n_rows, n, w, eps);
}

/* OP 0: y = SiLU(a) · b (swiglu: a = gate, b = up); OP 1: y = a · SiLU(b) (mul_silu: a = y, b = z) */
template <int OP>
__global__ void gate_q8k_kernel(float *y, const float *a, const float *b, int64_t n, int8_t *__restrict__ xq,
                                float *__restrict__ xd)
{
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t ch = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (ch >= n / 256) return;
    const int64_t i0 = ch * 256 + lane * 8;
    float v[8], av[8], bv[8];
    load8(a + i0, av);
    load8(b + i0, bv);
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = OP == 0 ? siluf_(av[k]) * bv[k] : av[k] * siluf_(bv[k]);
    store8(y + i0, v);
    int8_t q[8];
    const float d = q8k_warp(v, lane, q);
    q8_store(xq, xd, i0, q, d, lane);
}

extern "C" int cuda_rms_norm_q8k(cuda_ctx *c, float *y, const float *x, size_t x_stride, int64_t n_rows, int64_t n,
                                 const float *w, float eps)
{
    return norm_q8k(c, false, nullptr, x, x_stride, nullptr, y, n_rows, n, w, eps);
}

static int gate_q8k(cuda_ctx *c, int op, float *y, const float *a, const float *b, int64_t n)
{
    int8_t *xq;
    float *xd;
    if (n <= 0 || n % 256 || ((uintptr_t)y | (uintptr_t)a | (uintptr_t)b) % 16 || !cuda_act_slots(c, 1, n, &xq, &xd))
        return 0;
    const unsigned grid = cdiv(n / 256, 8);
    if (op == 0) launch_k(c, gate_q8k_kernel<0>, grid, 256, 0, y, a, b, n, xq, xd);
    else launch_k(c, gate_q8k_kernel<1>, grid, 256, 0, y, a, b, n, xq, xd);
    if (cu_launch_status()) return WK_EIO;
    cuda_act_mark(c, y, 1, n, 256);
    return 1;
}

extern "C" int cuda_swiglu_q8k(cuda_ctx *c, float *y, const float *gate, const float *up, int64_t n)
{
    return gate_q8k(c, 0, y, gate, up, n);
}

extern "C" int cuda_mul_silu_q8k(cuda_ctx *c, float *y, const float *z, int64_t n)
{
    return gate_q8k(c, 1, y, y, z, n);
}

/* rms_norm_kernel on 256/n rows of n (one block, T = norm_threads(n) threads per
 * row, the same sums in the same order) followed by gate_q8k_kernel<1> on their
 * 256 values: y = RMSNorm(x) ⊙ SiLU(z) and its Q8_K codes, bit for bit what the two
 * kernels give, in one launch per 256 values. */
template <int T>
__global__ void rms_norm_gated_q8k_kernel(float *y, const float *x, int64_t n, const float *__restrict__ w, float eps,
                                          const float *z, int8_t *__restrict__ xq, float *__restrict__ xd)
{
    __shared__ float red[8], scale_s[8];
    __shared__ __align__(16) float g[256];
    pdl_enter();
    const int r = threadIdx.x / T, t = threadIdx.x % T;
    const int lane = threadIdx.x & 31, nw = T / 32; /* warps per row */
    const int64_t base = (int64_t)blockIdx.x * 256, row0 = base + (int64_t)r * n;
    /* block_sum over the row's warps, as rms_norm_kernel's */
    const float ss = warp_sum(sumsq_strided(x + row0, n, t, T));
    if (lane == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    if (t < 32) {
        float v = lane < nw ? red[r * nw + lane] : 0.0f;
        v = warp_sum(v);
        if (t == 0) scale_s[r] = 1.0f / sqrtf(v / (float)n + eps);
    }
    __syncthreads();
    const float scale = scale_s[r];
#pragma unroll 4
    for (int64_t i = t; i < n; i += T) {
        float v = x[row0 + i] * scale;
        v = w ? v * w[i] : v;
        v = v * siluf_(z[row0 + i]); /* gate_q8k_kernel<1>: a · silu(b) */
        y[row0 + i] = v;
        g[r * n + i] = v;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = g[lane * 8 + k];
        int8_t q[8];
        const float d = q8k_warp(v, lane, q);
        q8_store(xq, xd, base + lane * 8, q, d, lane);
    }
}

extern "C" int cuda_rms_norm_gated_q8k(cuda_ctx *c, float *y, const float *x, int64_t n_rows, int64_t n,
                                       const float *w, float eps, const float *z)
{
    const int64_t total = n_rows * n;
    int8_t *xq;
    float *xd;
    if (n_rows <= 0 || n > 256 || 256 % n || total % 256 || !cuda_act_slots(c, 1, total, &xq, &xd)) return 0;
    const int T = norm_threads(n), threads = (256 / (int)n) * T;
    if (threads > 1024 || T < 32) return 0;
    const unsigned grid = (unsigned)(total / 256);
    if (T == 32) launch_k(c, rms_norm_gated_q8k_kernel<32>, grid, threads, 0, y, x, n, w, eps, z, xq, xd);
    else if (T == 128) launch_k(c, rms_norm_gated_q8k_kernel<128>, grid, threads, 0, y, x, n, w, eps, z, xq, xd);
    else return 0;
    if (cu_launch_status()) return WK_EIO;
    cuda_act_mark(c, y, 1, total, 256);
    return 1;
}

/* ---- greedy pick: the argmax of a row of logits -------------------------------------------- */

__device__ __forceinline__ unsigned long long argmax_key(float v, int32_t i)
{
    if (v != v) return 0ull; /* NaN: below every number */
    unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* the floats' order as unsigned */
    return ((unsigned long long)u << 32) | (0xFFFFFFFFu - (unsigned)i);
}

__global__ void argmax_kernel(const float *x, int32_t n, unsigned long long *slot)
{
    pdl_enter();
    unsigned long long k = 0;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        k = max(k, argmax_key(x[i], i));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
    if ((threadIdx.x & 31) == 0 && k) atomicMax(slot, k);
}

extern "C" int cuda_argmax(cuda_ctx *c, const float *x, int32_t n, unsigned long long *slot)
{
    if (cudaMemsetAsync(slot, 0, sizeof *slot, c->stream) != cudaSuccess) return WK_EIO;
    const unsigned blocks = cdiv(n, 256), cap = (unsigned)c->sm_count * 2; /* one wave, a grid-stride loop */
    if (n > 0) launch_k(c, argmax_kernel, blocks < cap ? blocks : cap, 256, 0, x, n, slot);
    return cu_launch_status();
}

extern "C" int32_t cuda_argmax_decode(unsigned long long key, float *value)
{
    if (!key) {
        *value = 0.0f;
        return -1;
    }
    unsigned u = (unsigned)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u;
    memcpy(value, &u, sizeof *value);
    return (int32_t)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFu));
}
