/* CUDA kernels of the wick backend, callable from C (tests, benchmarks and
 * the be_ops glue in cuda_backend.cu). Every pointer named d_* or documented
 * as "device" is device memory; host pointers say so. All launches go on the
 * context's stream and are asynchronous; functions return 0 or a negative
 * WK_E* code (launch failures: WK_EIO with the CUDA message in err).
 *
 * Quantized weights live on the device in a "device layout" (cuda_qw_*):
 *   Q4_K, Q5_K      ggml blocks as stored (144 / 176 bytes: multiples of 16)
 *   Q6_K            per row: nb × 208 bytes (ql | qh | scales) then nb × F16 d
 *   Q8_0            per row: nb × 32 bytes of qs, then nb × F16 d
 *   Q4_0, IQ4_NL    per row: nb × 16 bytes of qs, then nb × F16 d
 *   F32, F16, BF16  rows as stored
 * each row padded to 16 bytes, so every quant payload can be read with
 * aligned 16-byte loads (Q6_K, Q8_0, Q4_0 and IQ4_NL blocks are 210/34/18
 * bytes in GGUF and would otherwise straddle alignment). */
#ifndef WICK_BACKEND_CUDA_KERNELS_H
#define WICK_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cuda_stream; /* = cudaStream_t */

/* The A/B switches still worth having: read from the environment when a context is
 * made, changed in one process by be_cuda_tune (cuda_backend.h). On by default:
 *   fuse    WICK_CUDA_FUSE=0     decode without its fusions (norms and gates quantizing
 *                                their output for the next matmul; the held-back residual
 *                                add, RoPE and K store; the one-kernel gated norm); the
 *                                results are bit-identical either way
 *   graphs  WICK_CUDA_GRAPHS=0   decode steps op by op instead of as CUDA graphs
 *                                (bit-identical)
 *   int8    WICK_CUDA_INT8=0     products of 5 to 64 rows by dequantize + cuBLAS (F16
 *                                operands) instead of int8 activations, for rounding
 *                                comparisons (the MoE stays on int8)
 *   hopper  WICK_CUDA_GENERIC=1 turns it off: on an sm_90 GPU, the kernels every
 *                                architecture runs (no bulk copies, no programmatic
 *                                dependent launch), i.e. the path of an A100 or an RTX
 *                                30/40/50, checkable on an H200. Off below sm_90.
 *   nt      WICK_CUDA_NT=0       products of 2 to 8 rows (cuda_matvec_nt) with the kernel
 *                                that decodes each weight part again for every activation
 *                                row, one weight row per warp (bit-identical; for timing
 *                                the one that shares the decode against it)
 *   tc      WICK_CUDA_TC=0       products of 2 to 8 rows of the types cuda_matvec_tc has
 *                                (Q4_K, Q6_K) with cuda_matvec_nt's dp4a kernels instead of
 *                                int8 tensor cores (rows then equal one-row products bit
 *                                for bit; on tensor cores up to rounding) */
typedef struct cuda_switches {
    int fuse, graphs, int8, hopper, nt, tc;
} cuda_switches;
/* The switches from the environment for a device of compute capability cc_major.x. */
cuda_switches cuda_switches_from_env(int cc_major);

/* Per-device state: stream, cuBLAS handle, growable scratch. */
typedef struct cuda_ctx {
    int device;
    int cc_major;         /* compute capability */
    cuda_stream stream;
    void *cublas;         /* cublasHandle_t */
    void *scratch;        /* device; grows in cuda_ctx_scratch */
    size_t scratch_bytes;
    int sm_count;
    size_t smem_per_sm, smem_per_block; /* shared memory: per multiprocessor, per block (opt-in limit) */
    cuda_switches sw;
    /* decode matmuls: the last quantized activation rows, reused while the
     * same rows feed consecutive matmuls (q/k/v, gate/up, the DeltaNet
     * projections); cuda_ctx_act_invalidate drops it */
    void *actq;           /* device: xd floats then xq bytes */
    size_t actq_bytes;
    const float *actq_x;  /* NULL: nothing cached */
    int64_t actq_n, actq_K;
    int actq_group;
    /* bumped whenever a device buffer that kernels may have been given is
     * freed or moved (scratch, actq, backend buffers): captured CUDA graphs
     * of an older epoch hold stale pointers */
    uint64_t epoch;
    int64_t mmv_max_rows; /* int8 matvec for quantized weights up to this many rows (CUDA_MMV_MAX_ROWS;
                             0 with sw.int8 off: rows > 4 go to cuBLAS) */
    int64_t mmq_max_rows; /* int8 tensor cores (cuda_mmq) for quantized weights up to this many
                             rows (CUDA_MMQ_MAX_ROWS; 0 with sw.int8 off) */
    int tc_per_sm[2][2];  /* blocks of cuda_matvec_tc's kernels resident per multiprocessor,
                             [Q4_K, Q6_K][4, 8 warps]; 0 until its first launch asks */
    /* cuda_matvec_tc's stream-K split (made with the context: never inside a graph capture):
     * the partial sums of warps that share a weight tile, and per tile the count of those that
     * arrived (back to 0 when the last has added them up) */
    float *tc_part;
    unsigned *tc_cnt;
} cuda_ctx;

/* Sets c's switches (and the row limits that follow from int8); hopper only where the
 * device has sm_90. */
void cuda_ctx_set_switches(cuda_ctx *c, cuda_switches sw);

/* Forget the cached quantized activations: call after anything that may have
 * written the rows they came from (every op but a matmul). */
void cuda_ctx_act_invalidate(cuda_ctx *c);

int cuda_ctx_init(cuda_ctx *c, int device, wk_error *err);
void cuda_ctx_free(cuda_ctx *c);
/* Device scratch of at least bytes (contents undefined); valid until the next
 * call that grows it. Growing synchronizes the device. */
int cuda_ctx_scratch(cuda_ctx *c, size_t bytes, void **p, wk_error *err);

/* ---- quantized weights ---------------------------------------------------- */

/* A weight (or a pack of n_mat expert matrices) in device layout. */
typedef struct cuda_qweight {
    uint32_t type;        /* enum qt_type */
    int64_t rows, cols;   /* per matrix: M outputs, K inputs */
    int64_t n_mat;        /* 1, or experts */
    size_t row_bytes;     /* device row stride */
    size_t mat_bytes;     /* device matrix stride = rows * row_bytes */
    void *data;           /* device, owned */
    int act_group;        /* F32 copies of types without kernels: activations are rounded
                             like that type's partner format (32: Q8_0, 256: Q8_K); else 0 */
} cuda_qweight;

/* 1 if the type has device kernels (matvec, dequant). */
int cuda_qw_supported(uint32_t type);
/* Device row stride for a row of cols elements, 0 if unsupported/bad cols. */
size_t cuda_qw_row_bytes(uint32_t type, int64_t cols);
/* Repacks rows (ggml layout, src_row_bytes apart) into the device layout on
 * the host: dst receives rows * cuda_qw_row_bytes bytes. */
int cuda_qw_repack(uint32_t type, const void *src, size_t src_row_bytes, int64_t rows, int64_t cols,
                   void *dst, wk_error *err);
/* Uploads a weight (host data, ggml layout: rows nb1 apart, matrices nb2 apart). */
int cuda_qw_upload(cuda_ctx *c, cuda_qweight *w, uint32_t type, const void *host, int64_t cols,
                   int64_t rows, size_t nb1, int64_t n_mat, size_t nb2, wk_error *err);
void cuda_qw_free(cuda_qweight *w);

/* ---- decode matmul (matrix × vector) --------------------------------------- */

/* Activation group for type: 256 (K-quants: per-256 Q8_K-style scales) or 32. */
int cuda_act_group(uint32_t type);
/* Quantizes n_rows rows of K floats to int8 with one float scale per 32
 * (group 32: Q8_0 rule, scale rounded to F16; group 256: Q8_K rule, the same
 * scale repeated over the 8 sub-groups). xq: n_rows*K bytes, xd: n_rows*K/32. */
int cuda_quantize_act(cuda_ctx *c, const float *x, int64_t n_rows, int64_t K, int group, int8_t *xq,
                      float *xd);
/* The same rounding, written back as F32 values (out: n_rows*K floats). */
int cuda_round_act_f32(cuda_ctx *c, const float *x, int64_t n_rows, int64_t K, int group, float *out);
/* y[s][0..M) = W[e_s] · x[s / slots_per_x] for s < n_slots, e_s = ids ? ids[s] : 0
 * (ids device). Quantized types take xq/xd from cuda_quantize_act; F32/F16/BF16
 * weights take the F32 rows xf instead. */
int cuda_matvec(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd,
                const float *xf, int64_t n_slots, int64_t slots_per_x, const int32_t *ids, float *y,
                wk_error *err);

/* y[i] = w[i] · x for n weights of one quantized type and column count and one row x
 * (F32, device), in one launch per 4 weights (q/k/v, gate/up, the DeltaNet
 * projections); x is quantized once (or taken from the cached activations).
 * Each y[i] is bit-identical to cuda_matmul(w[i], x, 1). */
int cuda_matvec_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int n, const float *x,
                      wk_error *err);
/* y[i] = x · w[i]ᵀ for nw weights and n rows of x (F32, device): where all take the tensor-core
 * matvec (2..CUDA_MMV_TC_MAX_ROWS rows, one type and width) x is quantized once and the
 * weights go to cuda_matvec_tc_multi; otherwise cuda_matmul of each. */
int cuda_matmul_rows_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int nw, const float *x,
                           int64_t n, wk_error *err);

/* ---- prefill matmul --------------------------------------------------------- */

/* Dequantizes matrix `mat` of w to BF16 rows (dst: rows*cols, row-major). */
int cuda_dequant_bf16(cuda_ctx *c, const cuda_qweight *w, int64_t mat, uint16_t *dst, wk_error *err);
/* y[n][M] = x[n][K] · W[mat]ᵀ: matvec for small n, else BF16 dequant + cuBLAS
 * (F32 accumulation). Scratch comes from the context. */
int cuda_matmul(cuda_ctx *c, const cuda_qweight *w, int64_t mat, const float *x, int64_t n,
                float *y, wk_error *err);
/* cuda_matmul with int8 activations at any n (cuda_mmq beyond the matvec's rows) for a
 * weight with MMQ kernels (cuda_mmq_supported, K a multiple of its activation group):
 * rounds like llama.cpp's CPU backend where cuda_matmul's large batches take F16
 * (which also overflows past 65504). WK_EINVAL for other weights. */
int cuda_matmul_int8(cuda_ctx *c, const cuda_qweight *w, const float *x, int64_t n, float *y, wk_error *err);
/* Rows up to which cuda_matmul uses matvec on any weight type (the decode fusions
 * quantize activations for up to this many rows). */
#define CUDA_MATVEC_MAX_ROWS 4
/* Rows up to which cuda_matmul multiplies quantized weights with cuda_matvec_nt
 * (the default of cuda_ctx.mmv_max_rows): its dp4a dots cost per row, so it
 * pays only for a few (H200, Q4_K 17408x5120: n = 8 0.132 ms vs 0.151 ms for
 * dequant + cuBLAS; n = 32 0.50 vs 0.15). */
#define CUDA_MMV_MAX_ROWS 8
/* Rows up to which cuda_matmul keeps cuda_matvec_tc above cuda_ctx.mmv_max_rows (tiles of 8
 * rows, the weight read once per tile) before cuda_mmq, whose few column tiles leave most of
 * the card idle at such sizes (H200, 27B Q4_K, 4 layers, 16 sequences of one token:
 * mmq 287 us per product, matvec_tc 34 us per tile of 8). */
#define CUDA_MMV_TC_MAX_ROWS 32
/* cuda_matvec_tc's stream-K kernel: warps per block, blocks per multiprocessor (the split of a
 * product over its warps follows from these and the weights' shapes, never from the activation
 * rows; the partial-sum buffer is sized by them), slices of 8 activation rows a launch, the fewest
 * (tile, block of K) items of a product it takes, and the most 16-row weight tiles it splits. */
#define CUDA_TC_SK_WARPS 4
#define CUDA_TC_SK_BLOCKS_PER_SM 4
#define CUDA_TC_SK_SLICES 4
#define CUDA_TC_SK_MIN_ITEMS 16384
#define CUDA_TC_MAX_TILES 65536
/* Rows up to which cuda_matmul uses cuda_mmq (int8 tensor cores) above
 * cuda_ctx.mmv_max_rows: the default of cuda_ctx.mmq_max_rows. */
#define CUDA_MMQ_MAX_ROWS 64
/* Whether cuda_mmq has a kernel for the type. */
int cuda_mmq_supported(uint32_t type);
/* y[t][0..M) = W[mat] · x[t] for t < n on activations quantized by
 * cuda_quantize_act (xq/xd, n rows): integer products of 16-element groups on
 * tensor cores, scaled in F32 (rounds like the matvec path and llama.cpp's
 * integer dot products, unlike dequantize + cuBLAS). */
int cuda_mmq(cuda_ctx *c, const cuda_qweight *w, int64_t mat, const int8_t *xq, const float *xd, int64_t n, float *y,
             wk_error *err);
/* y[t][0..M) = W · x[t] for t < n (n >= 1) on quantized activations xq/xd of n rows:
 * the weight is read once per 8 rows; each row's result is bit-identical to
 * cuda_matvec's one-row result. */
int cuda_matvec_nt(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, int64_t n, float *y,
                   wk_error *err);
/* One activation row times Q4_K weights on sm_90 with the pipelined kernel split as asked
 * (for tests and benchmarks; cuda_matvec picks the split): items of `rows` (1, 2) rows, each
 * row in `pieces` (1, 2) pieces. Bit-identical to cuda_matvec's one-row kernels. */
int cuda_matvec_q4k_pipe(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, float *y, int rows,
                         int pieces, wk_error *err);
/* Whether cuda_matvec_tc has a kernel for the type and width. */
int cuda_matvec_tc_supported(uint32_t type, int64_t K);
/* y[t][0..M) = W · x[t] for t < n as cuda_matvec_nt, on int8 tensor cores (matvec_tc.cu):
 * each weight block read once per 8 rows and its integer products taken by mma, so a row
 * costs little more than one; each row's result is the same whatever n is, and equals
 * cuda_matvec's up to rounding. warps: 0 picks the kernel (stream-K for Q4_K products of at
 * least CUDA_TC_SK_MIN_ITEMS items, else the tile kernel with 4 or 8 warps per 16 weight rows by
 * the weight's tile count), 4 or 8 asks for the tile kernel with that many. */
int cuda_matvec_tc(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, int64_t n, float *y,
                   int warps, wk_error *err);
/* y[i] = w[i] · x for nw weights of one type and width and the n activation rows xq/xd, as
 * cuda_matvec_tc: runs of up to 4 Q4_K weights that make a stream-K product together are one
 * launch (each row the same whatever n is; equal to its product alone up to rounding). */
int cuda_matvec_tc_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int nw, const int8_t *xq,
                         const float *xd, int64_t n, wk_error *err);

/* Embedding lookup: y[i] = row ids[i] (device ids) of w dequantized to F32. */
int cuda_get_rows(cuda_ctx *c, const cuda_qweight *w, const int32_t *ids, int64_t n, float *y,
                  wk_error *err);

/* ---- element-wise and norms --------------------------------------------------- */

int cuda_rms_norm(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                  int64_t n_rows, int64_t n, const float *w, float eps);
/* cs[t][i] = (cos, sin) of pair i at position pos[t] (device pos) — ggml's
 * running-product angles; mode 2 (IMROPE) picks the section's component. */
int cuda_rope_cache(cuda_ctx *c, float *cs, const int32_t *pos, int64_t n_t, int mode, int n_rot,
                    float theta, float freq_scale, const float *freq_factors, const int32_t sections[4]);
/* In place; mode 0 = NORM pairs, else NEOX pairs. */
int cuda_rope(cuda_ctx *c, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
              int32_t head_stride, const float *cs, int mode, int n_rot);
/* cuda_rope on two tensors with the same cache (a layer's q and k) in one launch: the same
 * results as two calls. */
int cuda_rope2(cuda_ctx *c, float *x0, size_t t_stride0, int32_t n_head0, int32_t head_stride0, float *x1,
               size_t t_stride1, int32_t n_head1, int32_t head_stride1, int64_t n_t, const float *cs, int mode,
               int n_rot);
int cuda_kv_store(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                  size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d);
/* The same with positions shifted by *pos_dev - pos_ref when pos_dev (device
 * int) is given: a kernel captured in a CUDA graph at one position then
 * writes at the position of each replay. */
int cuda_kv_store_shifted(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0,
                          const int32_t *pos_dev, int32_t pos_ref, const float *x, size_t x_stride,
                          int64_t n_t, int32_t n_head_kv, int32_t d);
/* cuda_kv_store_shifted into a Q8_0 cache (ggml block_q8_0 rows: per 32
 * values an F16 scale s = amax/127, then 32 int8 codes roundf(x · (1/s)) with
 * s in F32; bit for bit the CPU backend's rows): head g, position p at
 * cache + g*head_stride + p*(d/32*17) uint16 units. WK_EINVAL unless d % 32 == 0. */
int cuda_kv_store_q8_0_shifted(cuda_ctx *c, uint16_t *cache, size_t head_stride, int32_t pos0,
                               const int32_t *pos_dev, int32_t pos_ref, const float *x, size_t x_stride,
                               int64_t n_t, int32_t n_head_kv, int32_t d);
/* The two KV stores of a layer (K rows x0 into cache0, V rows x1 into cache1: same
 * cache type CUDA_KV_*, head stride, position and shape) as one launch: the same bytes
 * as cuda_kv_store_shifted / cuda_kv_store_q8_0_shifted on each. */
int cuda_kv_store2_shifted(cuda_ctx *c, int kv_type, uint16_t *cache0, const float *x0, size_t x_stride0,
                           uint16_t *cache1, const float *x1, size_t x_stride1, size_t head_stride, int32_t pos0,
                           const int32_t *pos_dev, int32_t pos_ref, int64_t n_t, int32_t n_head_kv, int32_t d);
/* Sequences one launch of a batched step's KV stores or decode attention takes
 * (cuda_kv_store_batch, cuda_attn_decode_batch). */
#define CUDA_ATTN_SEQS 16
/* The K and V stores of up to CUDA_ATTN_SEQS sequences at one layer (a batched step), each
 * the bytes cuda_kv_store2_shifted gives it; one cache type, kv head count and d. */
typedef struct cuda_kv_batch {
    int32_t n;
    uint16_t *k[CUDA_ATTN_SEQS], *v[CUDA_ATTN_SEQS];
    const float *xk[CUDA_ATTN_SEQS], *xv[CUDA_ATTN_SEQS];
    size_t xk_stride[CUDA_ATTN_SEQS], xv_stride[CUDA_ATTN_SEQS], head_stride[CUDA_ATTN_SEQS];
    int32_t pos0[CUDA_ATTN_SEQS], pos_ref[CUDA_ATTN_SEQS], n_t[CUDA_ATTN_SEQS];
    const int32_t *pos_dev[CUDA_ATTN_SEQS];
} cuda_kv_batch;
int cuda_kv_store_batch(cuda_ctx *c, int kv_type, const cuda_kv_batch *b, int32_t n_head_kv, int32_t d);
int cuda_add(cuda_ctx *c, float *y, const float *a, const float *b, int64_t n);
/* The greedy pick of x[0..n) into *slot (device) as a key: 0 when every value is NaN, else the
 * value's order in the high word and ~index in the low one (so the largest key is the largest
 * value at its lowest index; -0 counts as +0). cuda_argmax_decode reads a key. */
int cuda_argmax(cuda_ctx *c, const float *x, int32_t n, unsigned long long *slot);
int32_t cuda_argmax_decode(unsigned long long key, float *value);
int cuda_add_bias(cuda_ctx *c, float *y, const float *bias, int64_t n_rows, int64_t n);
int cuda_swiglu(cuda_ctx *c, float *y, const float *gate, const float *up, int64_t n);
/* y[r][i] = SiLU(x[r][i]) · x[r][n + i] for rows of a fused gate|up product (x rows 2n apart). */
int cuda_swiglu_fused(cuda_ctx *c, float *y, const float *x, int64_t n_rows, int64_t n);
int cuda_mul_sigmoid(cuda_ctx *c, float *y, size_t y_stride, const float *g, size_t g_stride,
                     int64_t n_rows, int64_t n);
int cuda_mul_silu(cuda_ctx *c, float *y, const float *z, int64_t n);
int cuda_add_scaled_sigmoid(cuda_ctx *c, float *y, const float *x, const float *s, int64_t n_rows,
                            int64_t n);

/* ---- decode fusions ------------------------------------------------------------------ */

/* Cached-activation slots for n rows of K (device; the layout cuda_matvec
 * reads) when the context's buffer holds them: 1, else 0 (no allocation). */
int cuda_act_slots(cuda_ctx *c, int64_t n, int64_t K, int8_t **xq, float **xd);
/* x's n rows of K quantized with `group` in the cached slots (cuda_quantize_act's
 * rule): the cached rows when x was the last input quantized and nothing invalidated
 * them, else quantized now (growing the slots may synchronize). */
int cuda_act_quantized(cuda_ctx *c, const float *x, int64_t n, int64_t K, int group, int8_t **xq, float **xd,
                       wk_error *err);
/* Declares the slots to hold x's n rows of K quantized with group `group`:
 * the next cuda_matmul on x skips its quantization. */
void cuda_act_mark(cuda_ctx *c, const float *x, int64_t n, int64_t K, int group);
/* cuda_rms_norm (y rows n apart), cuda_swiglu and cuda_mul_silu that also
 * quantize their output by the Q8_K rule into the cached activations (one row
 * of n for the element-wise ones), bit-identical to the op followed by
 * cuda_quantize_act: the next decode matmul on a K-quant weight reads them.
 * Return 1 when done, 0 when the cache cannot hold them or the shape does not
 * fit (n a multiple of 256; RMSNorm: n >= 1024) — nothing launched — or WK_EIO. */
int cuda_rms_norm_q8k(cuda_ctx *c, float *y, const float *x, size_t x_stride, int64_t n_rows, int64_t n,
                      const float *w, float eps);
/* x = a + b (n_rows rows of n), then cuda_rms_norm_q8k(y ← x): a residual add and the norm
 * that follows it in one pass; same results, same return values. */
int cuda_add_rms_norm_q8k(cuda_ctx *c, float *x, const float *a, const float *b, float *y, int64_t n_rows,
                          int64_t n, const float *w, float eps);
int cuda_swiglu_q8k(cuda_ctx *c, float *y, const float *gate, const float *up, int64_t n);
/* y = RMSNorm(x; w) ⊙ SiLU(z) over n_rows rows of n (n dividing 256; x may be y), quantized
 * like cuda_mul_silu_q8k (one row of n_rows·n): bit-identical to cuda_rms_norm followed by
 * cuda_mul_silu_q8k. Same return values as the functions above. */
int cuda_rms_norm_gated_q8k(cuda_ctx *c, float *y, const float *x, int64_t n_rows, int64_t n, const float *w,
                            float eps, const float *z);
int cuda_mul_silu_q8k(cuda_ctx *c, float *y, const float *z, int64_t n);

/* ---- attention ------------------------------------------------------------------ */

/* Which keys query position p may see, in addition to causality (j <= p):
 * dense (approx = 0), or j < global || p - j < window || p >= dense_from. */
typedef struct cuda_attn_mask {
    int approx;
    int32_t global, window, dense_from;
} cuda_attn_mask;

/* KV cache element types (the values of backend.h's enum be_kv_type). */
#define CUDA_KV_F16 0
#define CUDA_KV_Q8_0 1

typedef struct cuda_attn {
    const float *q;
    size_t q_stride;          /* floats between query tokens */
    size_t q_head_stride;     /* floats between query heads (0 = d) */
    int32_t n_q, q_pos0;
    const uint16_t *k, *v;    /* caches: head g, position p at g*kv_head_stride + p*row, in uint16
                                 units; row = d (F16) or d/32*17 (Q8_0 blocks of 34 bytes) */
    size_t kv_head_stride;    /* F16: a multiple of 8; Q8_0: of 2 (and k, v 4-byte aligned) */
    int32_t n_kv, n_head, n_head_kv, d; /* d = d_k = d_v (64, 128 or 256) */
    float scale;
    cuda_attn_mask mask;
    float *out;
    size_t out_stride;
    /* decode in a CUDA graph: when pos_dev (device int) is set, the kernels
     * shift q_pos0, n_kv and mask.dense_from by *pos_dev - pos_ref */
    const int32_t *pos_dev;
    int32_t pos_ref;
    int kv_type;              /* CUDA_KV_F16 (0) or CUDA_KV_Q8_0 */
} cuda_attn;

/* Decode attention splits the keys by the 4096-position band of the last
 * query (the same split for every step of a band: graphs captured in a band
 * stay valid through it, and eager and graph steps round alike). */
#define CUDA_ATTN_BAND 4096
/* Calls of at most this many queries take the decode kernels (which also read graph
 * replays' device positions); more take the prefill kernel. */
#define CUDA_ATTN_DECODE_MAX_Q 8

/* Flash attention. Prefill (n_q > 8): tensor-core tiles of 64 queries × 64
 * keys, key tiles outside the mask skipped (Q8_0 keys and values are
 * dequantized to F16 in shared memory). Decode: split-K over the keys with a
 * combine pass (pos_dev only here), on tensor cores (Q and P in F16, as in
 * prefill) or, switched off or with more than 16 query heads per kv head,
 * on CUDA cores in F32 (Q8_0 dequantized to F32 as on the CPU).
 * Returns WK_EINVAL on unsupported shapes. */
int cuda_attention(cuda_ctx *c, const cuda_attn *a, wk_error *err);
/* Forces a path (0 = auto, 1 = decode kernel, 2 = prefill kernel) for tests. */
int cuda_attention_path(cuda_ctx *c, const cuda_attn *a, int path, wk_error *err);
/* Decode attention on tensor cores (attention_decode.cu), called by the decode
 * path: 0 or a WK_E* code when it ran, 1 when it did not take the call
 * (switched off by cuda_attn_decode_kernel, more than 16 query heads per kv head,
 * or another head dim),
 * so the split-K kernel on CUDA cores runs instead. */
int cuda_attn_decode_tc(cuda_ctx *c, const cuda_attn *a, wk_error *err);
/* Whether cuda_attention takes a's arguments: 0, or WK_EINVAL / WK_EUNSUPPORTED with the reason. */
int cuda_attn_check(const cuda_attn *a, wk_error *err);
/* n decode calls (a batched step's sequences at one layer, each at most
 * CUDA_ATTN_DECODE_MAX_Q queries, one head layout; n <= CUDA_ATTN_SEQS) as one launch of
 * the tensor-core kernel and one of its merge, each call's output bit for bit what
 * cuda_attention gives it alone. 1 when they cannot go that way (the caller runs them one
 * by one), else 0 or an error. */
int cuda_attn_decode_batch(cuda_ctx *c, const cuda_attn *a, int n, wk_error *err);
/* Which decode kernel runs: 1 tensor cores (default), 0 the split-K kernel;
 * -1 only asks. Returns the choice before the call. For tests and benchmarks. */
int cuda_attn_decode_kernel(int which);

/* ---- Gated DeltaNet ---------------------------------------------------------------- */

/* The recurrent states of several sequences decoded in one call, one token each: row i of
 * the call's inputs and outputs is sequence i, whose state is p[i]. Passed by value. */
#define CUDA_SEQS_MAX 16
typedef struct cuda_seq_states {
    int32_t n; /* 0: one sequence, the call's own state */
    float *p[CUDA_SEQS_MAX];
} cuda_seq_states;

int cuda_ssm_conv(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                  int64_t n_t, int64_t n_ch, const float *w, int32_t k, float *state);
/* cuda_ssm_conv of s->n sequences of one token each (row i with state s->p[i]) in one launch,
 * bit for bit s->n calls of one row. */
int cuda_ssm_conv_seqs(cuda_ctx *c, float *y, size_t y_stride, const float *x, size_t x_stride, int64_t n_ch,
                       const float *w, int32_t k, const cuda_seq_states *s);

typedef struct cuda_gdn {
    const float *q, *k, *v;
    size_t qk_stride, v_stride;
    const float *alpha, *beta;   /* [n_t][n_hv] raw projections */
    const float *ssm_a, *dt_bias;
    int32_t n_t, n_hk, n_hv, d_k, d_v; /* d_k 64 or 128, d_v a multiple of 16 */
    float eps;
    float *state;                /* [n_hv][d_k][d_v] */
    float *out;
    size_t out_stride;
    cuda_seq_states seqs;        /* n > 0: n sequences of one token (n_t == n), row i with state p[i] */
} cuda_gdn;

/* One token (decode): one kernel, also for a->seqs.n sequences of one token each (bit for bit
 * a call per sequence); more: q/k norm + gates first, then the token scan, or from 64 tokens
 * on the chunked form (deltanet_chunked.cu). */
int cuda_gdn_scan(cuda_ctx *c, const cuda_gdn *a, wk_error *err);
/* Forces a path for tests (0 = auto, 1 = the fused one-token kernel: n_t must be 1,
 * 2 = prepare + token scan, 3 = prepare + chunked (its state kernel on tensor cores),
 * 4 = chunked with the state kernel on the CUDA cores);
 * 1 and 2 give bit-identical results, 3 and 4 equal to float rounding. */
int cuda_gdn_scan_path(cuda_ctx *c, const cuda_gdn *a, int path, wk_error *err);
/* The chunked form after the prepare pass (deltanet.cu): qn, kn normalized q/k of all
 * tokens; scratch of cuda_gdn_chunked_scratch_floats(a) floats, 16-byte aligned; mma:
 * the sequential state kernel on tensor cores (3×TF32) rather than F32 CUDA cores. */
size_t cuda_gdn_chunked_scratch_floats(const cuda_gdn *a);
int cuda_gdn_chunked(cuda_ctx *c, const cuda_gdn *a, const float *qn, const float *kn, float *scratch, int mma,
                     wk_error *err);

/* ---- MoE (moe.cu; the grouped products in mmq.cu) ------------------------------------ */

/* Per token t (n_t rows of n_expert logits): softmax, the k largest (ties to the lower id),
 * renormalized to sum 1, into ids/weights (n_t × k). */
int cuda_moe_route(cuda_ctx *c, const float *logits, int64_t n_t, int32_t n_expert, int32_t k,
                   int32_t *ids, float *weights);
/* A few tokens' router in one launch: logits = W · x (W: n_expert F32 rows of K), sh_logit[t]
 * = wsh · x[t] when wsh (one F32 row), then cuda_moe_route's picks; logits bit-identical to
 * cuda_matvec's F32 kernel, ids and weights to cuda_moe_route on them. arrivals: n_t
 * counters of device memory, zero before the first launch (each launch leaves them so). */
int cuda_moe_gate(cuda_ctx *c, const float *W, const float *wsh, int32_t n_expert, int64_t K, const float *x,
                  int64_t n_t, int32_t k, float *logits, float *sh_logit, int32_t *ids, float *weights,
                  unsigned *arrivals);

/* A batch's (token, slot) pairs sorted by expert. Pair i is (token i / ks, slot i % ks):
 * slot j < k is the router's pick ids[t·k + j]; with ks = k + 1, slot k is expert
 * n_e − 1 (the shared expert, kept as the extra matrix after a pack's n_e − 1). Pair i
 * lands on sorted row pos[i] (−1: its id was out of range, dropped); tok[p] is the token
 * of sorted row p; the tile table holds *n_tiles (device) tiles of one expert's rows each
 * (expert, first row, rows ≤ bn, unused: int32 × 4), at most max_tiles. */
typedef struct cuda_moe_plan {
    int32_t *pos, *tok;
    int32_t *tiles;
    int32_t *n_tiles;
    int64_t n_rows;    /* pairs: n_t · ks */
    int64_t max_tiles; /* the launch's block rows */
    int bn;            /* 32 or 64 */
} cuda_moe_plan;
/* Device bytes of a plan's arrays for n_pairs pairs over n_e experts. */
size_t cuda_moe_plan_bytes(int64_t n_pairs, int32_t n_e, int bn);
/* Fills plan (its arrays carved out of buf, device, cuda_moe_plan_bytes bytes) for the
 * pairs of n_t tokens: one launch, no host synchronization. WK_EINVAL on bad sizes. */
int cuda_moe_sort(cuda_ctx *c, const int32_t *ids, int64_t n_t, int32_t k, int32_t ks, int32_t n_e, int bn,
                  void *buf, cuda_moe_plan *plan);
/* Every expert's product in one launch (two packs in one when w1, the gate and up packs):
 * for each tile of plan, y[p] = W[e] · x[r] for its sorted rows p, where W[e] is matrix e
 * of the pack, or extra (the shared expert's matrix, same type and shape) for e = n_mat,
 * and r = plan->tok[p] when gather (activations per token), else p (per sorted row).
 * xq/xd: activations quantized by cuda_quantize_act with the weight's group. y: rows of
 * w->rows floats, plan->n_rows of them. Rounds as cuda_mmq (y bit-identical to it row for
 * row). */
int cuda_mmq_grouped(cuda_ctx *c, const cuda_qweight *w0, const cuda_qweight *w1, const void *extra0,
                     const void *extra1, const cuda_moe_plan *plan, int gather, const int8_t *xq,
                     const float *xd, float *y0, float *y1, wk_error *err);
/* h = SiLU(g) ⊙ u for n_rows rows of F (g and u rows stride floats apart), quantized by
 * cuda_quantize_act's rule for group into xq/xd (n_rows rows of F), bit-identical to
 * cuda_swiglu then cuda_quantize_act. */
int cuda_moe_glu_quant(cuda_ctx *c, const float *g, const float *u, size_t stride, int64_t n_rows,
                       int64_t F, int group, int8_t *xq, float *xd);
/* out[t][i] = Σ_{j<k} weights[t·k + j] · ys[row(t, j)][i], plus σ(sh_logit[t]) ·
 * ys[row(t, k)][i] when ks = k + 1; row(t, j) = pos ? pos[t·ks + j] : t·ks + j (rows
 * < 0 skipped). */
int cuda_moe_combine(cuda_ctx *c, float *out, const float *ys, const int32_t *pos, const float *weights,
                     const float *sh_logit, int64_t n_t, int32_t k, int32_t ks, int64_t n);
/* The decode form of a MoE product (a few tokens): y[s] = W[e_s] · x[s / slots_per_x]
 * for the n_t·ks pairs s (e_s as in cuda_moe_sort, extra for the shared expert) through
 * the matvec, the gate and up packs in one launch when w1. Quantized types only. */
int cuda_matvec_moe(cuda_ctx *c, const cuda_qweight *w0, const cuda_qweight *w1, const void *extra0,
                    const void *extra1, const int8_t *xq, const float *xd, int64_t n_t, int32_t k, int32_t ks,
                    int64_t slots_per_x, const int32_t *ids, float *y0, float *y1, wk_error *err);
/* The decode form of the down product with the weighted sum: out[t] = Σ_j weights[t·k + j] ·
 * W[ids[t·k + j]] · x[t·ks + j] (+ σ(sh_logit[t]) · extra · x[t·ks + k] when ks = k + 1),
 * bit for bit cuda_matvec_moe (slots_per_x 1) then cuda_moe_combine. */
#define CUDA_MOE_DOWN_MAX_SLOTS 16
int cuda_moe_down_combine(cuda_ctx *c, const cuda_qweight *w, const void *extra, const int8_t *xq, const float *xd,
                          int64_t n_t, int32_t k, int32_t ks, const int32_t *ids, const float *weights,
                          const float *sh_logit, float *out, wk_error *err);

#ifdef __cplusplus
}
#endif

#endif
