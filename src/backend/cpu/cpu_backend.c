/* CPU backend: construction, memory, threading helper, matmul and embedding
 * dispatch, and the small element-wise ops. */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/matmul_packed.h"
#include "quant/quant.h"
#include "quant/qtypes.h"
#include "util/mapfile.h"

int cpu_buf_reserve(cpu_buf *b, size_t n)
{
    if (b->cap >= n) return 0;
    /* 64-byte alignment for the vector kernels; round up so aligned_alloc accepts it */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (!p) return WK_ENOMEM;
    free(b->p);
    b->p = p;
    b->cap = bytes / sizeof(float);
    return 0;
}

typedef struct range_job {
    cpu_range_fn fn;
    void *ctx;
    long n;
} range_job;

static void range_worker(void *p, int worker, int n_workers)
{
    range_job *j = p;
    long b, e;
    wk_split(j->n, worker, n_workers, &b, &e);
    if (b < e) j->fn(j->ctx, b, e, worker);
}

void cpu_parallel_for(cpu_backend *cb, long n, long min_parallel, cpu_range_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (cb->n_threads <= 1 || n < min_parallel) {
        fn(ctx, 0, n, 0);
        return;
    }
    range_job j = {fn, ctx, n};
    wk_pool_run(cb->pool, range_worker, &j);
}

/* ---- memory ---------------------------------------------------------------- */

/* Allocations from this size on are fresh anonymous mappings: zero pages
 * the kernel provides as they are first touched, so a KV cache sized for a
 * long context only takes the memory of the positions written so far. */
#define CPU_MAP_MIN_BYTES ((size_t)4 << 20)
/* Each block starts with a header (one cache line, keeping the data 64-byte
 * aligned) that says how it was made, for cpu_release. */
#define CPU_HEADER_BYTES 64

typedef struct cpu_block {
    size_t map_bytes; /* the mapping's length, 0: from aligned_alloc */
} cpu_block;

static void *cpu_alloc(be_backend *be, size_t bytes)
{
    (void)be;
    if (bytes > SIZE_MAX - CPU_HEADER_BYTES - 4096) return NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    uint8_t *base;
    size_t map = 0;
    if (rounded >= CPU_MAP_MIN_BYTES) {
        map = rounded + CPU_HEADER_BYTES;
        base = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) return NULL;
    } else {
        base = aligned_alloc(64, rounded + CPU_HEADER_BYTES);
        if (!base) return NULL;
        memset(base, 0, rounded + CPU_HEADER_BYTES);
    }
    ((cpu_block *)base)->map_bytes = map;
    return base + CPU_HEADER_BYTES;
}

static void cpu_release(be_backend *be, void *p)
{
    (void)be;
    if (!p) return;
    uint8_t *base = (uint8_t *)p - CPU_HEADER_BYTES;
    size_t map = ((cpu_block *)base)->map_bytes;
    if (map) munmap(base, map);
    else free(base);
}

static void cpu_to_host(be_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (dst != src) memcpy(dst, src, bytes);
}

static void cpu_zero(be_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static void cpu_free(be_backend *be)
{
    cpu_backend *cb = cpu_of(be);
    wk_pool_free(cb->pool);
    cpu_scratch_free(&cb->mm_scratch);
    for (int i = 0; i < CPU_MAX_THREADS; i++) free(cb->work[i].p);
    free(cb->shared.p);
    free(cb->moe_rows);
    free(cb);
}

/* ---- matmul and embedding --------------------------------------------------- */

cpu_weight cpu_weight_of(const be_weight *w)
{
    if (w->prep) return *(const cpu_weight *)w->prep;
    return cpu_weight_view((enum qt_type)w->type, w->data, w->ne[1], w->ne[0], w->nb1);
}

/* A prepared 3-D expert pack: each expert's matrix prepared on its own. */
typedef struct {
    int64_t n;
    cpu_weight w[];
} cpu_expert_pack;

cpu_weight cpu_expert_weight(const be_weight *pack, int64_t e, int64_t row0, int64_t n_rows,
                             struct cpu_packed *view)
{
    const cpu_expert_pack *xp = pack->prep;
    if (xp) {
        cpu_weight r = xp->w[e];
        r.data = (const uint8_t *)r.data + (size_t)row0 * r.row_bytes;
        r.rows = n_rows;
        r.packed = cpu_pack_rows(xp->w[e].packed, row0, n_rows, view);
        return r;
    }
    const uint8_t *base = (const uint8_t *)pack->data + (size_t)e * pack->nb2 + (size_t)row0 * pack->nb1;
    return cpu_weight_view((enum qt_type)pack->type, base, n_rows, pack->ne[0], pack->nb1);
}

static void expert_pack_free(cpu_expert_pack *xp)
{
    if (!xp) return;
    for (int64_t e = 0; e < xp->n; e++) cpu_weight_release(&xp->w[e]);
    free(xp);
}

/* Expert packs of a type with a repacked layout: every expert repacked (MoE
 * decode streams the selected experts' rows like any matmul). */
static int prepare_expert_pack(be_backend *be, be_weight *w, wk_error *err)
{
    if (cpu_pack_layout_for((enum qt_type)w->type) == CPU_PACK_NONE) return 0;
    const int64_t n = w->ne[2];
    cpu_expert_pack *xp = calloc(1, sizeof *xp + (size_t)n * sizeof(cpu_weight));
    if (!xp) return wk_fail(err, WK_ENOMEM, "out of memory preparing %s", w->name ? w->name : "experts");
    for (int64_t e = 0; e < n; e++) {
        xp->w[e] = cpu_weight_view((enum qt_type)w->type, (const uint8_t *)w->data + (size_t)e * w->nb2, w->ne[1],
                                   w->ne[0], w->nb1);
        int rc = cpu_weight_prepare_on(cpu_of(be)->pool, &xp->w[e], err);
        xp->n = e + 1;
        if (rc) {
            expert_pack_free(xp);
            return wk_fail_prefix(err, "preparing expert %lld of %s", (long long)e, w->name ? w->name : "experts");
        }
    }
    w->prep = xp;
    if (w->file_mapped) wk_mapfile_drop(w->data, (size_t)n * w->nb2);
    return 0;
}

static int cpu_prepare_weight(be_backend *be, be_weight *w, wk_error *err)
{
    if (w->prep || !w->data) return 0;
    if (w->ne[2] != 1) return prepare_expert_pack(be, w, err);
    cpu_weight *cw = malloc(sizeof *cw);
    if (!cw) return wk_fail(err, WK_ENOMEM, "out of memory preparing %s", w->name ? w->name : "weight");
    *cw = cpu_weight_view((enum qt_type)w->type, w->data, w->ne[1], w->ne[0], w->nb1);
    int rc = cpu_weight_prepare_on(cpu_of(be)->pool, cw, err);
    if (rc) {
        free(cw);
        return wk_fail_prefix(err, "preparing %s", w->name ? w->name : "weight");
    }
    w->prep = cw;
    /* the matmuls read only the repacked copy now: release the file pages
     * the repacking touched (embeddings fault rows back in as needed) */
    if (cw->packed && w->file_mapped) wk_mapfile_drop(w->data, (size_t)w->ne[1] * w->nb1);
    return 0;
}

static void cpu_release_weight(be_backend *be, be_weight *w)
{
    (void)be;
    if (!w->prep) return;
    if (w->ne[2] != 1) {
        expert_pack_free(w->prep);
        w->prep = NULL;
        return;
    }
    cpu_weight_release(w->prep);
    free(w->prep);
    w->prep = NULL;
}

int cpu_op_matmul(be_backend *be, const be_weight *w, const float *x, int64_t n_rows, float *y,
                  wk_error *err)
{
    cpu_backend *cb = cpu_of(be);
    cpu_weight cw = cpu_weight_of(w);
    int rc = cpu_matmul_ex(cb->pool, &cw, x, w->ne[0], n_rows, y, w->ne[1], &cb->mm_scratch, cpu_mm_flags(cb), err);
    if (rc) wk_fail_prefix(err, "matmul %s", w->name ? w->name : "?");
    return rc;
}

static void cpu_rows_as_one(be_backend *be, bool on) { cpu_of(be)->rows_as_one = on; }

int cpu_op_get_rows(be_backend *be, const be_weight *w, const int32_t *ids, int64_t n, float *y,
                    wk_error *err)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->ne[1])
            return wk_fail(err, WK_EINVAL, "token id %d outside %s (%lld rows)", ids[i],
                           w->name ? w->name : "embedding", (long long)w->ne[1]);
        const uint8_t *row = (const uint8_t *)w->data + (size_t)ids[i] * w->nb1;
        int rc = qt_dequantize_row((enum qt_type)w->type, row, y + i * w->ne[0], w->ne[0]);
        if (rc)
            return wk_fail(err, rc, "%s: cannot dequantize type %s", w->name ? w->name : "embedding",
                           qt_type_name(w->type));
    }
    return 0;
}

/* ---- element-wise ----------------------------------------------------------- */

/* Element-wise ops are memory-bound and short; splitting below this many
 * floats costs more in wake-ups than it saves. */
#define ELEMWISE_MIN_PARALLEL 65536

typedef struct ew_job {
    float *y;
    const float *a, *b;
    float s;
    const cpu_vec_fns *vec;
} ew_job;

static void add_range(void *p, long b, long e, int w)
{
    (void)w;
    ew_job *j = p;
    for (long i = b; i < e; i++) j->y[i] = j->a[i] + j->b[i];
}

void cpu_op_add(be_backend *be, float *y, const float *a, const float *b, int64_t n)
{
    ew_job j = {y, a, b, 0, NULL};
    cpu_parallel_for(cpu_of(be), n, ELEMWISE_MIN_PARALLEL, add_range, &j);
}

void cpu_op_add_bias(be_backend *be, float *y, const float *bias, int64_t n_rows, int64_t n)
{
    (void)be;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * n + i] += bias[i];
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static void swiglu_range(void *p, long b, long e, int w)
{
    (void)w;
    ew_job *j = p;
    j->vec->swiglu(j->y + b, j->a + b, j->b + b, (int)(e - b));
}

void cpu_op_swiglu(be_backend *be, float *y, const float *gate, const float *up, int64_t n)
{
    ew_job j = {y, gate, up, 0, cpu_of(be)->vec};
    cpu_parallel_for(cpu_of(be), n, ELEMWISE_MIN_PARALLEL / 4, swiglu_range, &j);
}

void cpu_op_mul_sigmoid(be_backend *be, float *y, size_t y_stride, const float *g, size_t g_stride,
                        int64_t n_rows, int64_t n)
{
    (void)be;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * y_stride + i] *= sigmoid(g[r * g_stride + i]);
}

static void mul_silu_range(void *p, long b, long e, int w)
{
    (void)w;
    ew_job *j = p;
    for (long i = b; i < e; i++) j->y[i] *= silu(j->a[i]);
}

void cpu_op_mul_silu(be_backend *be, float *y, const float *z, int64_t n)
{
    ew_job j = {y, z, NULL, 0, NULL};
    cpu_parallel_for(cpu_of(be), n, ELEMWISE_MIN_PARALLEL / 4, mul_silu_range, &j);
}

void cpu_op_add_scaled_sigmoid(be_backend *be, float *y, const float *x, const float *s,
                               int64_t n_rows, int64_t n)
{
    (void)be;
    for (int64_t r = 0; r < n_rows; r++) {
        float g = sigmoid(s[r]);
        for (int64_t i = 0; i < n; i++) y[r * n + i] += g * x[r * n + i];
    }
}

/* ---- construction ----------------------------------------------------------- */

static const be_ops k_cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .to_host = cpu_to_host,
    .from_host = cpu_to_host, /* same address space: a copy either way */
    .zero = cpu_zero,
    .prepare_weight = cpu_prepare_weight,
    .release_weight = cpu_release_weight,
    .matmul = cpu_op_matmul,
    .get_rows = cpu_op_get_rows,
    .rms_norm = cpu_op_rms_norm,
    .rope_cache = cpu_op_rope_cache,
    .rope = cpu_op_rope,
    .kv_store = cpu_op_kv_store,
    .kv_store_q8_0 = cpu_op_kv_store_q8_0,
    .attention = cpu_op_attention,
    .ssm_conv = cpu_op_ssm_conv,
    .gdn = cpu_op_gdn,
    .moe_route = cpu_op_moe_route,
    .moe_ffn = cpu_op_moe_ffn,
    .add = cpu_op_add,
    .add_bias = cpu_op_add_bias,
    .swiglu = cpu_op_swiglu,
    .mul_sigmoid = cpu_op_mul_sigmoid,
    .mul_silu = cpu_op_mul_silu,
    .add_scaled_sigmoid = cpu_op_add_scaled_sigmoid,
    .copy = cpu_to_host, /* host memory on both sides */
    .exact_rows = CPU_MATMUL_PANEL_MIN_N - 1,
    .rows_as_one = cpu_rows_as_one,
};

int be_cpu_new(be_backend **out, int n_threads, wk_error *err)
{
    *out = NULL;
    if (n_threads <= 0) n_threads = wk_physical_cores();
    if (n_threads > CPU_MAX_THREADS) n_threads = CPU_MAX_THREADS;
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return wk_fail(err, WK_ENOMEM, "cpu backend: out of memory");
    cb->pool = wk_pool_new(n_threads);
    if (!cb->pool) {
        free(cb);
        return wk_fail(err, WK_ENOMEM, "cpu backend: cannot start %d threads", n_threads);
    }
    cb->n_threads = wk_pool_size(cb->pool);
    cb->vec = cpu_vec_select(2);
    cb->base.ops = &k_cpu_ops;
    cb->base.impl = cb;
    *out = &cb->base;
    return 0;
}

int be_cpu_threads(const be_backend *be)
{
    if (!be || be->ops != &k_cpu_ops) return 1;
    return ((const cpu_backend *)be->impl)->n_threads;
}

bool be_is_cpu(const be_backend *be) { return be && be->ops == &k_cpu_ops; }
