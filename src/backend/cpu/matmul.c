/* CPU matmul driver. Per call: pick the regime (decode: N < 8 rows, else the
 * panel kernels on AVX-512 CPUs, else generic tiles), quantize the
 * activations once into the scratch, split the work over the thread pool.
 * Kernels: matmul_decode_x86.h (AVX-512 and AVX2), matmul_float_avx512.c (tile kernels),
 * matmul_panel_avx512.c + matmul_amx_avx512.c (prefill panels), quant/'s
 * vec_dot (everything else, any ISA). Builds for other targets than x86-64
 * have only vec_dot (scalar or NEON) and never repacked weights. */
#include "backend/cpu/matmul.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/matmul_panel.h"
#include "quant/quant.h"
#include "util/cpu.h"

/* Activation rows in the scratch start on cache lines. */
#define ACT_ALIGN 64
/* Rows of W per tile: 32 rows of K = 4096 Q8_0 are 136 KiB, inside L2 (2 MiB
 * per core here), and 32 is a multiple of every micro-kernel's row count. */
#define TILE_ROWS 32
/* Activation rows per tile in the prefill regime: enough to amortize loading
 * a weight tile, few enough that the quantized chunk stays in L2. */
#define TILE_ACTS 64
/* At or below this many activation rows a call is "decode": each worker takes
 * a contiguous share of W's rows and streams them once. */
#define DECODE_MAX_N 4
/* From this many activation rows on, the panel kernels (AMX / VNNI) win:
 * below it, their per-call weight unpacking costs more than the few extra
 * passes of the decode kernels over L1-resident weight rows (measured on a
 * 1024 x 1024 Q8_0/Q4_K: break-even near 8). */
#define PANEL_MIN_N CPU_MATMUL_PANEL_MIN_N

void cpu_scratch_free(cpu_scratch *s)
{
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

/* Work of the non-panel paths: activations already quantized into act. */
typedef struct {
    qt_vec_dot_fn dot;
    cpu_gemm_fn gemm;
    const cpu_weight *w;
    const uint8_t *act; /* n quantized rows, act_stride bytes apart */
    size_t act_stride;
    int64_t n;
    float *y;
    int64_t y_stride;
    long m_blocks, n_chunks, chunk_rows;
    cpu_queue queue; /* tiles (prefill) or 16-row units (decode) */
} mm_job;

/* Generic tile: one vec_dot per output; weight row outer, so each row is
 * read from memory once and reused from L1 for the tile's activations. */
static void tile_generic(const mm_job *job, int64_t r0, int64_t r1, int64_t i0, int64_t i1)
{
    const cpu_weight *w = job->w;
    const uint8_t *wbase = w->data;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = i0; i < i1; i++)
            job->dot(w->cols, &job->y[i * job->y_stride + r], wbase + (size_t)r * w->row_bytes,
                     job->act + (size_t)i * job->act_stride);
}

/* Rows [r0, r1) of W against activation rows [i0, i1): the ISA's tile
 * kernel if there is one, else vec_dot per output. */
static void run_tile(const mm_job *job, int64_t r0, int64_t r1, int64_t i0, int64_t i1)
{
    if (job->gemm) {
        const uint8_t *wbase = job->w->data;
        job->gemm(job->w->cols, wbase + (size_t)r0 * job->w->row_bytes, job->w->row_bytes, (int)(r1 - r0),
                  job->act + (size_t)i0 * job->act_stride, job->act_stride, (int)(i1 - i0),
                  job->y + i0 * job->y_stride + r0, job->y_stride);
        return;
    }
    tile_generic(job, r0, r1, i0, i1);
}

static void mm_body(void *ctx, int worker, int n_workers)
{
    mm_job *job = ctx;
    (void)worker, (void)n_workers;
    const int64_t m = job->w->rows;
    long b, e;
    while (cpu_queue_take(&job->queue, &b, &e)) {
        for (long it = b; it < e; it++) {
            long mb = it / job->n_chunks, nc = it % job->n_chunks;
            int64_t r0 = mb * TILE_ROWS, r1 = r0 + TILE_ROWS < m ? r0 + TILE_ROWS : m;
            int64_t i0 = nc * job->chunk_rows, i1 = i0 + job->chunk_rows < job->n ? i0 + job->chunk_rows : job->n;
            if (i0 < i1) run_tile(job, r0, r1, i0, i1);
        }
    }
}

/* Decode regime: contiguous row ranges (W streamed once), handed out in
 * units of 16 rows so the kernels see full register blocks. */
static void mm_decode_body(void *ctx, int worker, int n_workers)
{
    mm_job *job = ctx;
    (void)worker, (void)n_workers;
    long b, e;
    while (cpu_queue_take(&job->queue, &b, &e)) {
        int64_t r0 = b * 16, r1 = e * 16 < job->w->rows ? e * 16 : job->w->rows;
        if (r0 < r1) run_tile(job, r0, r1, 0, job->n);
    }
}

typedef struct {
    enum qt_type wtype;
    const float *x;
    int64_t x_stride, k, n;
    const int32_t *x_rows;
    uint8_t *act;
    size_t act_stride;
    cpu_queue queue; /* activation rows */
} q_job;

static void quant_body(void *ctx, int worker, int n_workers)
{
    q_job *q = ctx;
    (void)worker, (void)n_workers;
    long b, e;
    while (cpu_queue_take(&q->queue, &b, &e)) {
        for (long i = b; i < e; i++) {
            int64_t src = q->x_rows ? q->x_rows[i] : i;
            qt_quantize_act(q->wtype, q->x + src * q->x_stride, q->act + (size_t)i * q->act_stride, q->k);
        }
    }
}

/* Tile kernels of this CPU: AVX-512 (decode-regime quantized ones, float
 * ones) or AVX2 (quantized ones), else NULL. */
static cpu_gemm_fn pick_gemm(enum qt_type type)
{
#if defined(__x86_64__)
    const wk_cpu_features *f = wk_cpu();
    if (!(f->avx2 && f->fma && f->f16c)) return NULL;
    if (!(f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni)) return cpu_gemm_decode_avx2(type);
    cpu_gemm_fn fn = cpu_gemm_decode_avx512(type);
    return fn ? fn : cpu_gemm_float_avx512(type);
#else
    (void)type;
    return NULL;
#endif
}

static int check_weight(const cpu_weight *w, wk_error *err)
{
    const qt_traits *t = w ? qt_traits_of((uint32_t)w->type) : NULL;
    if (!t || !t->weight_ok)
        return wk_fail(err, WK_EINVAL, "matmul: weight type %s is not supported",
                       w ? qt_type_name((uint32_t)w->type) : "(null)");
    if (w->rows < 0 || w->cols <= 0 || w->cols % t->block_elems != 0)
        return wk_fail(err, WK_EINVAL, "matmul: %s weight of %lld x %lld: K must be a positive multiple of %u",
                       t->name, (long long)w->rows, (long long)w->cols, t->block_elems);
    if (w->row_bytes < qt_row_bytes(t, w->cols))
        return wk_fail(err, WK_EINVAL, "matmul: row stride %zu bytes is below the %zu bytes of one %s row",
                       w->row_bytes, qt_row_bytes(t, w->cols), t->name);
    return 0;
}

static uint8_t *scratch_get(cpu_scratch *s, size_t bytes, void **owned)
{
    *owned = NULL;
    if (bytes == 0) bytes = ACT_ALIGN;
    bytes = (bytes + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
    if (s) {
        if (s->cap < bytes) {
            free(s->buf);
            s->buf = aligned_alloc(ACT_ALIGN, bytes);
            s->cap = s->buf ? bytes : 0;
        }
        return s->buf;
    }
    *owned = aligned_alloc(ACT_ALIGN, bytes);
    return *owned;
}

/* Quantizes the activations into act (act_stride bytes per row) and runs the
 * vec_dot / tile-kernel path. */
static void matmul_quantized(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                             const int32_t *x_rows, int64_t n, float *y, int64_t y_stride, uint8_t *act,
                             size_t act_stride)
{
    int threads = pool ? wk_pool_size(pool) : 1;
    q_job q = {.wtype = w->type, .x = x, .x_stride = x_stride, .k = w->cols, .n = n, .x_rows = x_rows,
               .act = act, .act_stride = act_stride};
    cpu_queue_init(&q.queue, (long)n, (long)n / (8L * threads));
    if (n * w->cols >= 16384 && pool) wk_pool_run(pool, quant_body, &q);
    else quant_body(&q, 0, 1);

    mm_job job = {0};
    job.dot = qt_vec_dot(w->type);
    job.w = w;
    job.act = act;
    job.act_stride = act_stride;
    job.n = n;
    job.y = y;
    job.y_stride = y_stride;
    job.gemm = pick_gemm(w->type);
    if (w->rows == 0 || n == 0) return;
    if (n <= DECODE_MAX_N) {
        long units = (long)((w->rows + 15) / 16);
        cpu_queue_init(&job.queue, units, units / (8L * threads));
        if (pool && threads > 1 && w->rows >= 64) wk_pool_run(pool, mm_decode_body, &job);
        else mm_decode_body(&job, 0, 1);
        return;
    }
    job.m_blocks = (long)((w->rows + TILE_ROWS - 1) / TILE_ROWS);
    job.chunk_rows = TILE_ACTS;
    job.n_chunks = (long)((n + TILE_ACTS - 1) / TILE_ACTS);
    /* few weight tiles: cut the activations finer so every thread has work */
    while (job.m_blocks * job.n_chunks < 2L * threads && job.chunk_rows > 8) {
        job.chunk_rows /= 2;
        job.n_chunks = (long)((n + job.chunk_rows - 1) / job.chunk_rows);
    }
    cpu_queue_init(&job.queue, job.m_blocks * job.n_chunks, 1);
    if (pool && threads > 1) wk_pool_run(pool, mm_body, &job);
    else mm_body(&job, 0, 1);
}

#if defined(__x86_64__)
/* WICK_NO_AMX=1 turns the AMX kernel off (benchmarks and tests compare it
 * with the AVX-512 VNNI one); read per call, prefill calls take milliseconds. */
static int amx_disabled(void)
{
    const char *v = getenv("WICK_NO_AMX");
    return v && v[0] && v[0] != '0';
}

/* Work of the packed decode path (N < PANEL_MIN_N on a repacked weight). */
typedef struct {
    const cpu_weight *w;
    const uint8_t *act;
    size_t act_stride;
    const float *ascale;
    const int32_t *acorr;
    int n;
    float *y;
    int64_t y_stride;
    cpu_queue queue; /* groups of 16 rows */
} pk_job;

static void pk_body(void *ctx, int worker, int n_workers)
{
    pk_job *job = ctx;
    (void)worker, (void)n_workers;
    long b, e;
    while (cpu_queue_take(&job->queue, &b, &e))
        cpu_pack_gemv_avx512(job->w->packed, b, e, job->act, job->act_stride, job->ascale, job->acorr, job->n,
                             job->y, job->y_stride);
}

/* Bytes of scratch the packed decode path needs for n activation rows. */
static size_t packed_scratch_bytes(const cpu_weight *w, int64_t n, size_t act_stride)
{
    return act_stride * (size_t)n + (size_t)n * (size_t)w->packed->blocks * (sizeof(float) + sizeof(int32_t));
}

static void matmul_packed(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                          const int32_t *x_rows, int64_t n, float *y, int64_t y_stride, uint8_t *act,
                          size_t act_stride)
{
    const int threads = pool ? wk_pool_size(pool) : 1;
    const int64_t blocks = w->packed->blocks;
    float *ascale = (float *)(act + act_stride * (size_t)n);
    int32_t *acorr = (int32_t *)(ascale + n * blocks);
    q_job q = {.wtype = w->type, .x = x, .x_stride = x_stride, .k = w->cols, .n = n, .x_rows = x_rows,
               .act = act, .act_stride = act_stride};
    cpu_queue_init(&q.queue, (long)n, 1);
    quant_body(&q, 0, 1); /* a few rows: not worth a pool hand-off */
    if (w->packed->layout == CPU_PACK_R16_Q8_0)
        for (int64_t i = 0; i < n; i++)
            cpu_pack_act_terms(act + (size_t)i * act_stride, blocks, ascale + i * blocks, acorr + i * blocks);
    pk_job job = {.w = w, .act = act, .act_stride = act_stride, .ascale = ascale, .acorr = acorr, .n = (int)n,
                  .y = y, .y_stride = y_stride};
    const long groups = (long)w->packed->groups;
    cpu_queue_init(&job.queue, groups, groups / (8L * threads));
    if (pool && threads > 1 && groups >= 4) wk_pool_run(pool, pk_body, &job);
    else pk_body(&job, 0, 1);
}

#endif /* x86-64 */

/* Core of both entry points: y rows are compact (y_stride apart) here. The
 * first extra_bytes of the scratch are handed to the caller via *extra (the
 * gather's output rows), the rest holds the activations. */
static int matmul_core(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                       const int32_t *x_rows, int64_t n, float *y, int64_t y_stride, cpu_scratch *scratch,
                       size_t extra_bytes, float **extra, unsigned flags, wk_error *err)
{
    const bool panels = n >= PANEL_MIN_N && !(flags & CPU_MM_ROWS_AS_ONE);
    const size_t act_stride = (qt_act_row_bytes(w->type, w->cols) + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
#if defined(__x86_64__)
    const int threads = pool ? wk_pool_size(pool) : 1;
    enum cpu_panel_kernel kernel = panels ? cpu_panel_kernel_for(w->type) : CPU_PANEL_NONE;
    if (kernel == CPU_PANEL_AMX && amx_disabled()) kernel = CPU_PANEL_VNNI;
    const int packed_decode = w->packed && !panels;
    const size_t need = kernel != CPU_PANEL_NONE ? cpu_panel_scratch_bytes(w->type, n, w->cols, threads)
                        : packed_decode          ? packed_scratch_bytes(w, n, act_stride)
                                                 : act_stride * (size_t)n;
#else
    (void)panels;
    const size_t need = act_stride * (size_t)n;
#endif
    extra_bytes = (extra_bytes + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
    void *owned;
    uint8_t *buf = scratch_get(scratch, extra_bytes + need, &owned);
    if (!buf) return wk_fail(err, WK_ENOMEM, "matmul: no memory for %lld activation rows", (long long)n);
    if (extra) {
        *extra = (float *)buf;
        y = *extra;
    }
    uint8_t *act = buf + extra_bytes;
#if defined(__x86_64__)
    if (packed_decode) matmul_packed(pool, w, x, x_stride, x_rows, n, y, y_stride, act, act_stride);
    else if (kernel == CPU_PANEL_NONE ||
        cpu_matmul_panel(pool, kernel, w, x, x_stride, x_rows, n, y, y_stride, act, need) != 0)
#endif
        matmul_quantized(pool, w, x, x_stride, x_rows, n, y, y_stride, act, act_stride);
    free(owned);
    return 0;
}

int cpu_matmul(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride, int64_t n, float *y,
               int64_t y_stride, cpu_scratch *scratch, wk_error *err)
{
    return cpu_matmul_ex(pool, w, x, x_stride, n, y, y_stride, scratch, 0, err);
}

int cpu_matmul_ex(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride, int64_t n, float *y,
                  int64_t y_stride, cpu_scratch *scratch, unsigned flags, wk_error *err)
{
    int rc = check_weight(w, err);
    if (rc) return rc;
    if (n < 0 || (n > 0 && (x_stride < w->cols || y_stride < w->rows)))
        return wk_fail(err, WK_EINVAL, "matmul: bad strides (x %lld, y %lld) for %lld x %lld",
                       (long long)x_stride, (long long)y_stride, (long long)w->rows, (long long)w->cols);
    if (n == 0 || w->rows == 0) return 0;
    return matmul_core(pool, w, x, x_stride, NULL, n, y, y_stride, scratch, 0, NULL, flags, err);
}

int cpu_matmul_gather(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                      const int32_t *x_rows, float *y, int64_t y_stride, const int32_t *y_rows, int64_t n,
                      cpu_scratch *scratch, wk_error *err)
{
    return cpu_matmul_gather_ex(pool, w, x, x_stride, x_rows, y, y_stride, y_rows, n, scratch, 0, err);
}

int cpu_matmul_gather_ex(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                         const int32_t *x_rows, float *y, int64_t y_stride, const int32_t *y_rows, int64_t n,
                         cpu_scratch *scratch, unsigned flags, wk_error *err)
{
    int rc = check_weight(w, err);
    if (rc) return rc;
    if (n < 0 || (n > 0 && (!x_rows || !y_rows || x_stride < w->cols || y_stride < w->rows)))
        return wk_fail(err, WK_EINVAL, "matmul_gather: bad row lists or strides");
    if (n == 0 || w->rows == 0) return 0;
    /* compact output rows live in the scratch, then are scattered */
    cpu_scratch local = {0};
    if (!scratch) scratch = &local;
    float *tmp = NULL;
    rc = matmul_core(pool, w, x, x_stride, x_rows, n, NULL, w->rows, scratch,
                     (size_t)n * (size_t)w->rows * sizeof(float), &tmp, flags, err);
    for (int64_t i = 0; i < n && rc == 0; i++)
        memcpy(y + (int64_t)y_rows[i] * y_stride, tmp + i * w->rows, (size_t)w->rows * sizeof(float));
    cpu_scratch_free(&local);
    return rc;
}

int cpu_weight_prepare_on(wk_pool *pool, cpu_weight *w, wk_error *err)
{
    int rc = check_weight(w, err);
    if (rc) return rc;
    return cpu_pack_build(pool, w, &w->packed, err);
}

int cpu_weight_prepare(cpu_weight *w, wk_error *err) { return cpu_weight_prepare_on(NULL, w, err); }

void cpu_weight_release(cpu_weight *w)
{
    if (!w) return;
    cpu_pack_free(w->packed);
    w->packed = NULL;
}
