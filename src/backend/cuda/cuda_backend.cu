/* be_ops on CUDA: the glue between backend/backend.h and the kernels of
 * cuda_kernels.h.
 *
 * Memory: be_alloc is cudaMalloc; a sorted table of those ranges tells device
 * pointers from host ones. Weights (be_weight.data points into the mmap'd
 * model) are uploaded once on first use and found again by their host
 * address; so are the F32 vectors the forward pass hands over as host
 * pointers (norm weights, conv kernels, biases, ssm_a, dt_bias). Small int
 * arrays that arrive in host memory (positions, token ids) are staged on the
 * stream. Everything runs in order on one stream; be_to_host synchronizes. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" {
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/quant.h"
}

typedef struct alloc_rec {
    uintptr_t p;
    size_t bytes;
} alloc_rec;

typedef struct weight_ent { /* open addressing on the host data pointer */
    const void *host;
    cuda_qweight w;
} weight_ent;

typedef struct const_ent {
    const void *host;
    void *dev;
    size_t bytes;
} const_ent;

/* Decode steps as CUDA graphs (be_cuda_step_begin/end). A step of the same
 * sequences (the engine's keys), row counts and position bands is run op by op
 * the first time (FIRST: uploads and scratch growth happen there), captured into
 * a graph the second time (CAPTURE) and replayed afterwards (REPLAY): the
 * forward pass still calls every op, but they only fold their arguments into a
 * signature that must equal the captured one; the graph is launched at the
 * step's be_to_host (its logits). Host inputs (be_from_host: token ids,
 * positions) go through pinned slots the graph copies from; ops whose arguments
 * carry a position (kv_store, attention) take it relative to their sequence's
 * first position (be_attend_seqs says which sequence), read that from a device int
 * (d_pos[seq]) and shift by its difference to the captured position. */
enum { G_OFF = 0, G_FIRST, G_CAPTURE, G_REPLAY, G_FAILED };
#define G_SLOTS 16           /* graphs kept: step shapes × bands in use at once (draft counts, batches) */
#define G_SEQS 32            /* sequences one recorded step may have */
#define G_PINNED_BYTES 65536 /* host inputs of one step (positions, token ids) */
#define G_POS_BYTES 128      /* the pinned slot of the sequences' positions (G_SEQS ints) */
static_assert(G_SEQS * sizeof(int32_t) <= G_POS_BYTES, "positions slot");

typedef struct graph_ent {
    int32_t n_seq;
    const void *keys[G_SEQS];
    int32_t n_t[G_SEQS], band[G_SEQS];
    int state; /* 0 empty, 1 seen once, 2 captured */
    uint64_t sig, epoch, used;
    cudaGraphExec_t exec;
} graph_ent;

typedef struct step_graphs {
    int enabled;
    int mode;
    graph_ent *cur;
    int32_t n_seq, seq;  /* the step's sequences; the one whose KV store or attention comes now */
    int32_t pos[G_SEQS]; /* their first positions */
    int32_t *d_pos;      /* device: the same, as the graph copies them in */
    uint8_t *pinned;     /* host, pinned: positions, then be_from_host data */
    size_t pinned_off;
    uint64_t sig, epoch0, tick;
    int unsynced;     /* a graph was launched and nothing waited for it yet */
    int failures;
    long captured, replayed, redone;
    /* replayed steps, host seconds: from be_cuda_step_begin to the graph launch (the
     * forward pass walked for its signature while the GPU idles) and in cudaGraphLaunch */
    double t_begin, walk_s, launch_s;
    graph_ent ents[G_SLOTS];
} step_graphs;

/* The arguments of a RoPE and of a KV store launch (held back, see cuda_be.pend_rope/pend_kv). */
typedef struct rope_call {
    int on, mode, n_rot;
    float *x;
    int64_t n_t;
    size_t t_stride;
    int32_t n_head, head_stride;
    const float *cs;
} rope_call;
typedef struct kv_call {
    int on, kv_type;
    uint16_t *cache;
    size_t head_stride, x_stride;
    int32_t pos0, pos_ref, n_head_kv, d;
    const int32_t *pos_dev;
    const float *x;
    int64_t n_t;
} kv_call;

typedef struct cuda_be {
    be_backend base;
    cuda_ctx ctx;
    alloc_rec *allocs;
    size_t n_allocs, cap_allocs;
    weight_ent *weights;
    size_t n_weights, cap_weights;
    const_ent *consts;
    size_t n_consts, cap_consts;
    void *stage; /* device staging for host int arrays */
    size_t stage_bytes;
    void *moe; /* MoE intermediates */
    size_t moe_bytes;
    int err_code; /* first failure of a void op */
    char err_msg[WK_ERROR_MSG_CAP];
    step_graphs g;
    /* large copies to pageable host memory go through a pinned buffer */
    void *host_stage;
    size_t host_stage_bytes;
    /* pinned host buffers handed out by be_host_alloc (copied into directly) */
    alloc_rec *pinned;
    size_t n_pinned, cap_pinned;
    unsigned long long *pick_dev, *pick_host; /* be_argmax's result: device slot, pinned copy */
    unsigned *gate_arrivals; /* cuda_moe_gate's counters, one per token (CUDA_MATVEC_MAX_ROWS) */
    /* a decode step's residual add, held back until the next op: when that
     * op is the RMSNorm of its sum, both run as one kernel */
    struct {
        int on;
        float *y;
        const float *a, *b;
        int64_t n;
    } pend;
    /* likewise a RoPE (a layer's q), joined by the next op when that is a RoPE with the same
     * cache (its k): one kernel for both (cuda_rope2) */
    rope_call pend_rope;
    /* and a KV store (K), joined by the V store of the same shape and position (cuda_kv_store2_shifted) */
    kv_call pend_kv;
    /* at most one of pend, pend_rope, pend_kv is on at a time: every op flushes it or joins it */
} cuda_be;

/* Every op starts here. The CUDA runtime's current device is per host thread
 * and a backend may be used on another thread than the one that made it (the
 * server's engine thread): make its GPU current there (once per thread and
 * device; a TLS compare otherwise). */
static thread_local int t_device = -1; /* the device this thread last made current here */

static cuda_be *cb_raw(be_backend *be)
{
    cuda_be *b = (cuda_be *)be->impl;
    if (t_device != b->ctx.device && cudaSetDevice(b->ctx.device) == cudaSuccess) t_device = b->ctx.device;
    return b;
}

static void keep_launch(cuda_be *b, int rc, const char *what);

static void rope_launch(cuda_be *b, const rope_call &r)
{
    keep_launch(b, cuda_rope(&b->ctx, r.x, r.n_t, r.t_stride, r.n_head, r.head_stride, r.cs, r.mode, r.n_rot), "rope");
}

static void kv_launch(cuda_be *b, const kv_call &k)
{
    const bool q8 = k.kv_type == CUDA_KV_Q8_0;
    keep_launch(b,
                q8 ? cuda_kv_store_q8_0_shifted(&b->ctx, k.cache, k.head_stride, k.pos0, k.pos_dev, k.pos_ref, k.x,
                                                k.x_stride, k.n_t, k.n_head_kv, k.d)
                   : cuda_kv_store_shifted(&b->ctx, k.cache, k.head_stride, k.pos0, k.pos_dev, k.pos_ref, k.x,
                                           k.x_stride, k.n_t, k.n_head_kv, k.d),
                q8 ? "kv_store_q8_0" : "kv_store");
}

/* Launches the held-back op (add, RoPE or K store), if any. */
static void pend_flush(cuda_be *b)
{
    if (b->pend.on) {
        b->pend.on = 0;
        keep_launch(b, cuda_add(&b->ctx, b->pend.y, b->pend.a, b->pend.b, b->pend.n), "add");
    }
    if (b->pend_rope.on) {
        b->pend_rope.on = 0;
        rope_launch(b, b->pend_rope);
    }
    if (b->pend_kv.on) {
        b->pend_kv.on = 0;
        kv_launch(b, b->pend_kv);
    }
}

/* Whether byte ranges [a, a + na) and [c, c + nc) share a byte. */
static bool spans_overlap(const void *a, size_t na, const void *c, size_t nc)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)c;
    return x < y + nc && y < x + na;
}

/* Every op but RMSNorm starts here (RMSNorm may fuse the held-back add). */
static cuda_be *cb_of(be_backend *be)
{
    cuda_be *b = cb_raw(be);
    pend_flush(b);
    return b;
}

static void keep_error(cuda_be *b, const wk_error *e)
{
    if (b->err_code) return;
    b->err_code = e->code ? e->code : WK_EIO;
    snprintf(b->err_msg, sizeof b->err_msg, "%s", e->msg);
}

static void keep_launch(cuda_be *b, int rc, const char *what)
{
    if (!rc) return;
    cudaError_t e = cudaGetLastError();
    wk_error er;
    wk_fail(&er, rc, "cuda: %s: %s", what, e != cudaSuccess ? cudaGetErrorString(e) : "bad arguments");
    keep_error(b, &er);
}

/* ---- decode-step graphs ------------------------------------------------------------------ */

enum {
    OP_FROM_HOST = 1, OP_MATMUL, OP_GET_ROWS, OP_RMS_NORM, OP_ROPE_CACHE, OP_ROPE, OP_KV_STORE, OP_ATTENTION,
    OP_SSM_CONV, OP_GDN, OP_MOE_ROUTE, OP_MOE_FFN, OP_ADD, OP_ADD_BIAS, OP_SWIGLU, OP_MUL_SIGMOID, OP_MUL_SILU,
    OP_ADD_SCALED_SIGMOID, OP_KV_STORE_Q8_0, OP_RMS_NORM_GATED, OP_MOE_GATE, OP_SSM_CONV_SEQS, OP_GDN_SEQS,
    OP_ATTEND_SEQS,
};

static double host_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t g_word(const void *p) { return (uint64_t)(uintptr_t)p; }
static inline uint64_t g_word(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
template <typename T> static inline uint64_t g_word(T v) { return (uint64_t)v; }

/* Folds an op and its arguments into the step's signature. True when the op
 * must not run now: the step is being replayed from its graph, or it failed
 * and will be run again op by op. */
template <typename... A> static bool g_skip(cuda_be *b, int op, A... args)
{
    step_graphs *g = &b->g;
    if (g->mode == G_OFF) return false;
    if (g->mode == G_FAILED) return true;
    const uint64_t v[] = {(uint64_t)op, g_word(args)...};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) g->sig = (g->sig ^ v[i]) * 0x100000001B3ull + 0x9E37u;
    return g->mode == G_REPLAY;
}

/* Whether the forward pass now is a step being recorded or replayed (positions relative). */
static bool g_recording(const step_graphs *g)
{
    return g->mode == G_FIRST || g->mode == G_CAPTURE || g->mode == G_REPLAY;
}

/* The device position of the current sequence, read by kernels while a step is captured
 * (NULL otherwise), and the host position positions are taken relative to. */
static const int32_t *g_pos_dev(const cuda_be *b) { return b->g.mode == G_CAPTURE ? b->g.d_pos + b->g.seq : NULL; }
static int32_t g_seq_pos(const cuda_be *b) { return b->g.pos[b->g.seq]; }

static void g_drop(graph_ent *e)
{
    if (e->exec) cudaGraphExecDestroy(e->exec); /* one still running is freed when it completes */
    e->exec = NULL;
    e->state = 0;
}

/* The step cannot go on as a graph: drop its graph; the engine runs it again op by op. */
static void g_fail(cuda_be *b)
{
    step_graphs *g = &b->g;
    if (g->mode == G_CAPTURE) {
        cudaGraph_t gr = NULL;
        cudaStreamEndCapture(b->ctx.stream, &gr);
        if (gr) cudaGraphDestroy(gr);
        cudaGetLastError(); /* the capture's error is not the backend's */
    }
    if (g->cur) g_drop(g->cur);
    g->mode = G_FAILED;
}

/* End of the graphed part of a step (its be_to_host, or be_cuda_step_end):
 * remember the first run's signature, or instantiate and launch the captured
 * graph, or check the signature and launch the replay. The rest of the step,
 * if any, runs op by op. */
static void g_launch(cuda_be *b)
{
    step_graphs *g = &b->g;
    graph_ent *e = g->cur;
    if (g->mode == G_FIRST) {
        e->sig = g->sig;
        e->state = 1;
        e->epoch = b->ctx.epoch;
    } else if (g->mode == G_CAPTURE) {
        cudaGraph_t gr = NULL;
        cudaError_t err = cudaStreamEndCapture(b->ctx.stream, &gr);
        g->mode = G_OFF;
        cudaGraphExec_t ex = NULL;
        if (err == cudaSuccess && gr && b->ctx.epoch == g->epoch0) err = cudaGraphInstantiate(&ex, gr, 0);
        else if (err == cudaSuccess) err = cudaErrorInvalidValue;
        if (gr) cudaGraphDestroy(gr);
        if (err == cudaSuccess) err = cudaGraphLaunch(ex, b->ctx.stream);
        if (err != cudaSuccess) {
            if (ex) cudaGraphExecDestroy(ex);
            cudaGetLastError();
            g_fail(b);
            return;
        }
        e->exec = ex;
        e->state = 2;
        e->sig = g->sig;
        e->epoch = b->ctx.epoch;
        g->captured++;
        g->unsynced = 1;
    } else if (g->mode == G_REPLAY) {
        const double t0 = host_s();
        if (g->sig != e->sig || cudaGraphLaunch(e->exec, b->ctx.stream) != cudaSuccess) {
            cudaGetLastError();
            g_fail(b);
            return;
        }
        const double t1 = host_s();
        g->walk_s += t0 - g->t_begin;
        g->launch_s += t1 - t0;
        g->replayed++;
        g->unsynced = 1;
        cuda_ctx_act_invalidate(&b->ctx); /* the skipped matmuls did not track the cached activations */
    } else {
        return;
    }
    g->mode = G_OFF;
}

/* ---- allocation table ----------------------------------------------------------------- */

static size_t alloc_find(const cuda_be *b, uintptr_t p) /* first index with allocs[i].p > p */
{
    size_t lo = 0, hi = b->n_allocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b->allocs[mid].p <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool is_device(const cuda_be *b, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    size_t i = alloc_find(b, p);
    return i > 0 && p < b->allocs[i - 1].p + b->allocs[i - 1].bytes;
}

static void *cb_alloc(be_backend *be, size_t bytes)
{
    cuda_be *b = cb_of(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (cudaMemsetAsync(p, 0, bytes, b->ctx.stream) != cudaSuccess || cudaStreamSynchronize(b->ctx.stream) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    if (b->n_allocs == b->cap_allocs) {
        size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 64;
        alloc_rec *n = (alloc_rec *)realloc(b->allocs, cap * sizeof *n);
        if (!n) {
            cudaFree(p);
            return NULL;
        }
        b->allocs = n;
        b->cap_allocs = cap;
    }
    size_t i = alloc_find(b, (uintptr_t)p);
    memmove(b->allocs + i + 1, b->allocs + i, (b->n_allocs - i) * sizeof *b->allocs);
    b->allocs[i] = (alloc_rec){(uintptr_t)p, bytes ? bytes : 1};
    b->n_allocs++;
    return p;
}

static void cb_release(be_backend *be, void *p)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (!p) return;
    size_t i = alloc_find(b, (uintptr_t)p);
    if (i > 0 && b->allocs[i - 1].p == (uintptr_t)p) {
        memmove(b->allocs + i - 1, b->allocs + i, (b->n_allocs - i) * sizeof *b->allocs);
        b->n_allocs--;
        cudaStreamSynchronize(b->ctx.stream); /* no kernel may still use it */
        cudaFree(p);
        b->ctx.epoch++; /* graphs may hold it */
    }
}

/* After copies queued on the stream (e: how queueing went): waits for them; a failure is
 * kept for the next op that returns an error. */
static void copies_waited(cuda_be *b, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->ctx.stream);
    if (e == cudaSuccess) b->g.unsynced = 0;
    if (e != cudaSuccess) {
        wk_error er;
        cu_fail(&er, e, what);
        keep_error(b, &er);
    }
}

static void cb_copy(be_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    cuda_be *b = cb_of(be);
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, b->ctx.stream);
    copies_waited(b, e, kind == cudaMemcpyDeviceToHost ? "copy to host" : "copy from host");
}

/* Copies of at least this many bytes to pageable host memory (a step's logits) go
 * through the pinned buffer: the runtime's own path for pageable memory is slower. */
#define HOST_STAGE_MIN (64 << 10)

/* Before a step's result is read: a recorded step's graph runs first. False when the step
 * failed to record (it is run again op by op; nothing to read now). */
static bool g_result_ready(cuda_be *b)
{
    if (b->g.mode != G_OFF) g_launch(b);
    return b->g.mode != G_FAILED;
}

/* The pinned buffer holding at least bytes (NULL when pinned memory ran out: copy directly). */
static void *host_stage(cuda_be *b, size_t bytes)
{
    if (bytes > b->host_stage_bytes) {
        if (b->host_stage) cudaFreeHost(b->host_stage); /* the stream is synchronized after each copy */
        b->host_stage = NULL;
        b->host_stage_bytes = 0;
        if (cudaHostAlloc(&b->host_stage, bytes, cudaHostAllocDefault) == cudaSuccess) b->host_stage_bytes = bytes;
        else cudaGetLastError();
    }
    return b->host_stage;
}

/* be_host_alloc: pinned memory, zeroed, remembered so that copies into it go direct. */
static void *cb_host_alloc(be_backend *be, size_t bytes)
{
    cuda_be *b = cb_raw(be);
    if (b->n_pinned == b->cap_pinned) {
        const size_t cap = b->cap_pinned ? 2 * b->cap_pinned : 16;
        alloc_rec *n = (alloc_rec *)realloc(b->pinned, cap * sizeof *n);
        if (!n) return NULL;
        b->pinned = n;
        b->cap_pinned = cap;
    }
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes);
    b->pinned[b->n_pinned++] = (alloc_rec){(uintptr_t)p, bytes};
    return p;
}

static void cb_host_free(be_backend *be, void *p)
{
    cuda_be *b = cb_raw(be);
    for (size_t i = 0; i < b->n_pinned; i++)
        if (b->pinned[i].p == (uintptr_t)p) {
            b->pinned[i] = b->pinned[--b->n_pinned];
            cudaStreamSynchronize(b->ctx.stream); /* no copy may still write it */
            cudaFreeHost(p);
            return;
        }
}

/* Whether [p, p + bytes) lies in one be_host_alloc buffer. */
static bool is_pinned(const cuda_be *b, const void *p, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < b->n_pinned; i++)
        if (a >= b->pinned[i].p && a + bytes <= b->pinned[i].p + b->pinned[i].bytes) return true;
    return false;
}

static void cb_to_host(be_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *b = cb_of(be);
    if (!g_result_ready(b)) return;
    const bool dev = is_device(b, src);
    void *st = dev && bytes >= HOST_STAGE_MIN && !is_pinned(b, dst, bytes) ? host_stage(b, bytes) : NULL;
    if (st) {
        cb_copy(be, st, src, bytes, cudaMemcpyDeviceToHost);
        memcpy(dst, st, bytes);
        return;
    }
    cb_copy(be, dst, src, bytes, dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

/* A batched step's logits: one wait for all rows, each copied straight into its pinned
 * buffer (be_host_alloc), else one transfer into the staging buffer and a host copy each. */
static void cb_to_host_rows(be_backend *be, void *const *dst, const void *src, size_t row_bytes, int32_t n)
{
    cuda_be *b = cb_of(be);
    if (!g_result_ready(b)) return;
    const size_t bytes = row_bytes * (size_t)(n > 0 ? n : 0);
    const bool batch = n > 1 && is_device(b, src);
    bool direct = batch;
    for (int32_t i = 0; i < n && direct; i++) direct = is_pinned(b, dst[i], row_bytes);
    if (direct) {
        cudaError_t e = cudaSuccess;
        for (int32_t i = 0; i < n && e == cudaSuccess; i++)
            e = cudaMemcpyAsync(dst[i], (const char *)src + (size_t)i * row_bytes, row_bytes, cudaMemcpyDeviceToHost,
                                b->ctx.stream);
        copies_waited(b, e, "copy to host");
        return;
    }
    void *st = batch ? host_stage(b, bytes) : NULL;
    if (!st) {
        for (int32_t i = 0; i < n; i++) cb_to_host(be, dst[i], (const char *)src + (size_t)i * row_bytes, row_bytes);
        return;
    }
    cb_copy(be, st, src, bytes, cudaMemcpyDeviceToHost);
    for (int32_t i = 0; i < n; i++) memcpy(dst[i], (const char *)st + (size_t)i * row_bytes, row_bytes);
}

/* Device-to-device copy in stream order (speculative decoding's state snapshots): no host
 * round trip, no synchronization. Never inside a recorded step. */
static void cb_copy_dev(be_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *b = cb_of(be);
    if (!g_result_ready(b)) return;
    cuda_ctx_act_invalidate(&b->ctx); /* may overwrite rows a cached activation came from */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->ctx.stream);
    if (e != cudaSuccess) {
        wk_error er;
        cu_fail(&er, e, "device copy");
        keep_error(b, &er);
    }
}

/* The greedy pick on the device: one 8-byte key comes back instead of n floats. */
static int32_t cb_argmax(be_backend *be, const float *x, int32_t n, float *host, float *max)
{
    cuda_be *b = cb_of(be);
    (void)host;
    *max = 0.0f;
    if (!g_result_ready(b)) return -1;
    if (!b->pick_dev && cudaMalloc(&b->pick_dev, sizeof *b->pick_dev) != cudaSuccess) b->pick_dev = NULL;
    if (!b->pick_host && cudaHostAlloc(&b->pick_host, sizeof *b->pick_host, cudaHostAllocDefault) != cudaSuccess)
        b->pick_host = NULL;
    int rc = b->pick_dev && b->pick_host ? cuda_argmax(&b->ctx, x, n, b->pick_dev) : WK_ENOMEM;
    if (!rc && (cudaMemcpyAsync(b->pick_host, b->pick_dev, sizeof *b->pick_host, cudaMemcpyDeviceToHost,
                                b->ctx.stream) != cudaSuccess ||
                cudaStreamSynchronize(b->ctx.stream) != cudaSuccess))
        rc = WK_EIO;
    if (rc) {
        keep_launch(b, rc, "argmax");
        return -1;
    }
    return cuda_argmax_decode(*b->pick_host, max);
}

static void cb_from_host(be_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    step_graphs *g = &b->g;
    const bool replay = g_skip(b, OP_FROM_HOST, dst, bytes);
    if (g->mode == G_FAILED) return;
    if (g->mode == G_CAPTURE || replay) {
        /* through a pinned slot that the graph copies from when it runs */
        if (g->pinned_off + bytes > G_PINNED_BYTES || !is_device(b, dst)) {
            g_fail(b);
            return;
        }
        memcpy(g->pinned + g->pinned_off, src, bytes);
        if (g->mode == G_CAPTURE &&
            cudaMemcpyAsync(dst, g->pinned + g->pinned_off, bytes, cudaMemcpyHostToDevice, b->ctx.stream) != cudaSuccess) {
            g_fail(b);
            return;
        }
        g->pinned_off += (bytes + 63) & ~(size_t)63;
        return;
    }
    cb_copy(be, dst, src, bytes, is_device(b, dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
}

/* be_zero: a memset in stream order (never inside a recorded step: a sequence is cleared
 * between forward passes). */
static void cb_zero(be_backend *be, void *dst, size_t bytes)
{
    cuda_be *b = cb_of(be);
    if (!g_result_ready(b)) return;
    cuda_ctx_act_invalidate(&b->ctx); /* may clear rows a cached activation came from */
    if (!is_device(b, dst)) {
        memset(dst, 0, bytes);
        return;
    }
    cudaError_t e = cudaMemsetAsync(dst, 0, bytes, b->ctx.stream);
    if (e != cudaSuccess) {
        wk_error er;
        cu_fail(&er, e, "zero");
        keep_error(b, &er);
    }
}

/* ---- host-pointer caches ---------------------------------------------------------------- */

static size_t ptr_hash(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

/* Device copy of an immutable host F32/int array of `bytes` (or p itself if on device). */
static const void *dev_const(cuda_be *b, const void *host, size_t bytes)
{
    if (!host || is_device(b, host)) return host;
    if (b->n_consts * 2 >= b->cap_consts) { /* grow + rehash */
        size_t cap = b->cap_consts ? 2 * b->cap_consts : 256;
        const_ent *n = (const_ent *)calloc(cap, sizeof *n);
        if (!n) return NULL;
        for (size_t i = 0; i < b->cap_consts; i++)
            if (b->consts[i].host) {
                size_t h = ptr_hash(b->consts[i].host, cap);
                while (n[h].host) h = (h + 1) & (cap - 1);
                n[h] = b->consts[i];
            }
        free(b->consts);
        b->consts = n;
        b->cap_consts = cap;
    }
    size_t h = ptr_hash(host, b->cap_consts);
    while (b->consts[h].host && b->consts[h].host != host) h = (h + 1) & (b->cap_consts - 1);
    const_ent *e = &b->consts[h];
    if (e->host && e->bytes >= bytes) return e->dev;
    if (e->host) { /* seen with a shorter length: replace */
        cudaStreamSynchronize(b->ctx.stream);
        cudaFree(e->dev);
        b->ctx.epoch++;
        b->n_consts--;
    }
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        if (d) cudaFree(d);
        e->host = NULL;
        return NULL;
    }
    *e = (const_ent){host, d, bytes};
    b->n_consts++;
    return d;
}

static const float *dev_f32(cuda_be *b, const float *host, size_t n)
{
    const void *d = dev_const(b, host, n * sizeof(float));
    if (host && !d) {
        wk_error er;
        wk_fail(&er, WK_ENOMEM, "cuda: uploading a %zu-float vector", n);
        keep_error(b, &er);
    }
    return (const float *)d;
}

/* Int array that may live on the host and change between calls: staged through
 * device memory in stream order. */
static const int32_t *dev_ints(cuda_be *b, const int32_t *p, size_t n)
{
    if (is_device(b, p)) return p;
    size_t bytes = n * sizeof(int32_t);
    if (bytes > b->stage_bytes) {
        cudaStreamSynchronize(b->ctx.stream);
        if (b->stage) cudaFree(b->stage);
        b->ctx.epoch++;
        b->stage = NULL;
        b->stage_bytes = 0;
        if (cudaMalloc(&b->stage, bytes * 2) != cudaSuccess) return NULL;
        b->stage_bytes = bytes * 2;
    }
    /* pageable source: the copy is taken before this call returns */
    if (cudaMemcpyAsync(b->stage, p, bytes, cudaMemcpyHostToDevice, b->ctx.stream) != cudaSuccess) return NULL;
    return (const int32_t *)b->stage;
}

/* The device form of a weight, uploaded on first use. */
static const cuda_qweight *dev_weight(cuda_be *b, const be_weight *w, wk_error *err)
{
    if (!w->data) {
        wk_fail(err, WK_EINVAL, "cuda: weight %s is absent", w->name ? w->name : "?");
        return NULL;
    }
    if (b->n_weights * 2 >= b->cap_weights) {
        size_t cap = b->cap_weights ? 2 * b->cap_weights : 512;
        weight_ent *n = (weight_ent *)calloc(cap, sizeof *n);
        if (!n) {
            wk_fail(err, WK_ENOMEM, "cuda: weight table");
            return NULL;
        }
        for (size_t i = 0; i < b->cap_weights; i++)
            if (b->weights[i].host) {
                size_t h = ptr_hash(b->weights[i].host, cap);
                while (n[h].host) h = (h + 1) & (cap - 1);
                n[h] = b->weights[i];
            }
        free(b->weights);
        b->weights = n;
        b->cap_weights = cap;
    }
    size_t h = ptr_hash(w->data, b->cap_weights);
    while (b->weights[h].host && b->weights[h].host != w->data) h = (h + 1) & (b->cap_weights - 1);
    weight_ent *e = &b->weights[h];
    const int64_t cols = w->ne[0], rows = w->ne[1], n_mat = w->ne[2] > 0 ? w->ne[2] : 1;
    if (e->host) {
        if (e->w.cols == cols && e->w.rows == rows && e->w.n_mat == n_mat) return &e->w;
        /* same address, other shape: not the tensor we uploaded (the caller
         * broke the immutability contract); take the new one */
        cudaStreamSynchronize(b->ctx.stream);
        cuda_qw_free(&e->w);
        b->ctx.epoch++;
        e->host = NULL;
        b->n_weights--;
    }

    const size_t nb2 = n_mat > 1 ? w->nb2 : w->nb1 * (size_t)rows;
    int rc;
    if (cuda_qw_row_bytes(w->type, cols)) {
        rc = cuda_qw_upload(&b->ctx, &e->w, w->type, w->data, cols, rows, w->nb1, n_mat, nb2, err);
    } else {
        /* no device kernels for this type: dequantize to F32 rows once */
        size_t elems = (size_t)cols * rows * n_mat;
        float *tmp = (float *)malloc(elems * sizeof(float));
        if (!tmp) {
            wk_fail(err, WK_ENOMEM, "cuda: host staging for %s", w->name ? w->name : "a weight");
            return NULL;
        }
        rc = 0;
        for (int64_t m = 0; m < n_mat && !rc; m++)
            for (int64_t r = 0; r < rows && !rc; r++)
                rc = qt_dequantize_row((enum qt_type)w->type, (const uint8_t *)w->data + m * nb2 + r * w->nb1,
                                       tmp + ((size_t)m * rows + r) * cols, cols);
        if (rc) {
            free(tmp);
            wk_fail(err, WK_EUNSUPPORTED, "cuda: weight %s of type %s cannot be dequantized", w->name ? w->name : "?",
                    qt_type_name(w->type));
            return NULL;
        }
        rc = cuda_qw_upload(&b->ctx, &e->w, QT_F32, tmp, cols, rows, (size_t)cols * 4, n_mat, (size_t)cols * rows * 4,
                            err);
        free(tmp);
        /* llama.cpp multiplies these types with Q8_0/Q8_1 (32) or Q8_K (256) activations */
        const qt_traits *tr = qt_traits_of(w->type);
        if (!rc && tr && tr->is_quantized)
            e->w.act_group = tr->vec_dot == QT_Q8_K ? 256 : 32;
    }
    if (rc) {
        wk_fail_prefix(err, "weight %s", w->name ? w->name : "?");
        return NULL;
    }
    e->host = w->data;
    b->n_weights++;
    return &e->w;
}

static int take_error(cuda_be *b, wk_error *err)
{
    if (!b->err_code) return 0;
    return wk_fail(err, b->err_code, "%s", b->err_msg);
}

/* ---- ops ---------------------------------------------------------------------------------- */

static int cb_matmul(be_backend *be, const be_weight *w, const float *x, int64_t n_rows, float *y, wk_error *err)
{
    cuda_be *b = cb_of(be);
    if (take_error(b, err)) return err->code;
    if (g_skip(b, OP_MATMUL, w->data, x, n_rows, y)) return 0;
    const cuda_qweight *dw = dev_weight(b, w, err);
    if (!dw) return err->code ? err->code : WK_EIO;
    int rc = cuda_matmul(&b->ctx, dw, 0, x, n_rows, y, err);
    /* y overlapping the cached rows would make them stale */
    const float *cx = b->ctx.actq_x;
    if (cx && y < cx + b->ctx.actq_n * b->ctx.actq_K && cx < y + n_rows * dw->rows) cuda_ctx_act_invalidate(&b->ctx);
    return rc;
}

/* A decode step's products on one input (q/k/v, gate/up, the DeltaNet projections):
 * consecutive weights of one quantized type and width run as one launch
 * (cuda_matvec_multi; same results as one by one; e2e_cuda tg128 on the 27B shape 97.9 →
 * 107.9 tok/s). Steps of a few rows (batched decode, verification) share one activation
 * quantization and, on tensor cores, launches (cuda_matmul_rows_multi); larger batches go
 * through cb_matmul weight by weight. */
static int cb_matmul_multi(be_backend *be, const be_weight *const *w, int n, const float *x, int64_t n_rows,
                           float *const *y, wk_error *err)
{
    cuda_be *b = cb_of(be);
    if (n_rows <= 0) return 0;
    if (n_rows > CUDA_MMV_TC_MAX_ROWS) {
        for (int i = 0; i < n; i++) {
            int rc = cb_matmul(be, w[i], x, n_rows, y[i], err);
            if (rc) return rc;
        }
        return 0;
    }
    if (take_error(b, err)) return err->code;
    bool skip = false;
    for (int i = 0; i < n; i++) skip = g_skip(b, OP_MATMUL, w[i]->data, x, n_rows, y[i]); /* as cb_matmul would */
    if (skip) return 0;
    const cuda_qweight *dw[8];
    if (n > 8) return wk_fail(err, WK_EINVAL, "cuda: %d products on one input (8 at most)", n);
    for (int i = 0; i < n; i++) {
        dw[i] = dev_weight(b, w[i], err);
        if (!dw[i]) return err->code ? err->code : WK_EIO;
    }
    int rc = 0;
    for (int i = 0; i < n && !rc;) {
        int j = i + 1;
        const bool quant = dw[i]->type != QT_F32 && dw[i]->type != QT_F16 && dw[i]->type != QT_BF16;
        while (quant && j < n && dw[j]->type == dw[i]->type && dw[j]->cols == dw[i]->cols &&
               dw[j]->row_bytes == dw[i]->row_bytes)
            j++;
        rc = n_rows > 1  ? cuda_matmul_rows_multi(&b->ctx, dw + i, y + i, j - i, x, n_rows, err)
             : j - i > 1 ? cuda_matvec_multi(&b->ctx, dw + i, y + i, j - i, x, err)
                         : cuda_matmul(&b->ctx, dw[i], 0, x, 1, y[i], err);
        for (int k = i; k < j; k++) { /* y overlapping the cached rows would make them stale */
            const float *cx = b->ctx.actq_x;
            if (cx && y[k] < cx + b->ctx.actq_n * b->ctx.actq_K && cx < y[k] + n_rows * dw[k]->rows)
                cuda_ctx_act_invalidate(&b->ctx);
        }
        i = j;
    }
    return rc;
}

static int cb_get_rows(be_backend *be, const be_weight *w, const int32_t *ids, int64_t n, float *y, wk_error *err)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (take_error(b, err)) return err->code;
    if (g_skip(b, OP_GET_ROWS, w->data, ids, n, y)) return 0;
    const cuda_qweight *dw = dev_weight(b, w, err);
    if (!dw) return err->code ? err->code : WK_EIO;
    const int32_t *d_ids = dev_ints(b, ids, (size_t)n);
    if (!d_ids) return wk_fail(err, WK_ENOMEM, "cuda: staging %lld token ids", (long long)n);
    return cuda_get_rows(&b->ctx, dw, d_ids, n, y, err);
}

static void cb_rms_norm(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride, int64_t n_rows,
                        int64_t n, const float *w, float eps)
{
    cuda_be *b = cb_raw(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_RMS_NORM, y, y_stride, x, x_stride, n_rows, n, w, eps)) {
        pend_flush(b);
        return;
    }
    if (b->pend.on && b->pend.y == x && b->pend.n == n_rows * n && x_stride == (size_t)n && y_stride == (size_t)n &&
        x != y && n_rows <= CUDA_MATVEC_MAX_ROWS) {
        /* the residual add just before: one kernel for both */
        int rc = cuda_add_rms_norm_q8k(&b->ctx, b->pend.y, b->pend.a, b->pend.b, y, n_rows, n,
                                       dev_f32(b, w, (size_t)n), eps);
        if (rc) {
            b->pend.on = 0;
            keep_launch(b, rc < 0 ? rc : 0, "add + rms_norm");
            return;
        }
    }
    pend_flush(b);
    if (b->ctx.sw.fuse && n_rows <= CUDA_MATVEC_MAX_ROWS && y_stride == (size_t)n) {
        /* decode: quantize for the next matmul in the same pass */
        int rc = cuda_rms_norm_q8k(&b->ctx, y, x, x_stride, n_rows, n, dev_f32(b, w, (size_t)n), eps);
        if (rc) {
            keep_launch(b, rc < 0 ? rc : 0, "rms_norm");
            return;
        }
    }
    keep_launch(b, cuda_rms_norm(&b->ctx, y, y_stride, x, x_stride, n_rows, n, dev_f32(b, w, (size_t)n), eps),
                "rms_norm");
}

static void cb_rope_cache(be_backend *be, float *cs, const int32_t *pos, int64_t n_t, const be_rope_params *p)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_ROPE_CACHE, cs, pos, n_t, (int)p->mode, p->n_rot, p->theta, p->freq_scale, p->freq_factors)) return;
    const int32_t *d_pos = dev_ints(b, pos, (size_t)n_t);
    const float *ff = dev_f32(b, p->freq_factors, (size_t)p->n_rot / 2);
    keep_launch(b, d_pos ? cuda_rope_cache(&b->ctx, cs, d_pos, n_t, (int)p->mode, p->n_rot, p->theta, p->freq_scale, ff,
                                           p->sections)
                         : WK_ENOMEM,
                "rope_cache");
}

/* Bytes from a RoPE call's first rotated value to its last (0: nothing to rotate). */
static size_t rope_span(const rope_call &r)
{
    if (r.n_t <= 0 || r.n_head <= 0) return 0;
    return ((size_t)(r.n_t - 1) * r.t_stride + (size_t)(r.n_head - 1) * r.head_stride + (size_t)r.n_rot) *
           sizeof(float);
}

static void cb_rope(be_backend *be, float *x, int64_t n_t, size_t t_stride, int32_t n_head, int32_t head_stride,
                    const float *cs, const be_rope_params *p)
{
    cuda_be *b = cb_raw(be); /* a RoPE held back just before may join this one */
    if (g_skip(b, OP_ROPE, x, n_t, t_stride, n_head, head_stride, cs, (int)p->mode, p->n_rot)) {
        pend_flush(b);
        return;
    }
    const rope_call cur = {1, p->mode == BE_ROPE_NORM ? 0 : 1, p->n_rot, x, n_t, t_stride, n_head, head_stride, cs};
    const size_t span = rope_span(cur);
    const rope_call &r = b->pend_rope;
    if (r.on && r.cs == cs && r.n_t == n_t && r.mode == cur.mode && r.n_rot == p->n_rot &&
        !spans_overlap(x, span, r.x, rope_span(r))) {
        b->pend_rope.on = 0;
        keep_launch(b, cuda_rope2(&b->ctx, r.x, r.t_stride, r.n_head, r.head_stride, x, t_stride, n_head, head_stride,
                                  n_t, cs, cur.mode, p->n_rot),
                    "rope (two tensors)");
        return;
    }
    pend_flush(b);
    if (b->ctx.sw.fuse && span > 0) { /* hold it: the next op may be the other tensor's RoPE */
        b->pend_rope = cur;
        return;
    }
    rope_launch(b, cur);
}

/* Bytes of x a KV store reads, from the first value to the last (0: nothing to store). */
static size_t kv_x_span(const kv_call &k)
{
    return k.n_t > 0 ? ((size_t)(k.n_t - 1) * k.x_stride + (size_t)k.n_head_kv * k.d) * sizeof(float) : 0;
}

/* cb_kv_store and cb_kv_store_q8_0: the K store is held back (fusions on), and the V store
 * that follows with the same type, shape and position runs with it as one kernel. */
static void kv_store_op(be_backend *be, int kv_type, uint16_t *cache, size_t head_stride, int32_t pos0,
                        const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    cuda_be *b = cb_raw(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    const bool q8 = kv_type == CUDA_KV_Q8_0;
    const int32_t pos_ref = g_seq_pos(b);
    if (g_skip(b, q8 ? OP_KV_STORE_Q8_0 : OP_KV_STORE, cache, head_stride, pos0 - pos_ref, x, x_stride, n_t,
               n_head_kv, d)) {
        pend_flush(b);
        return;
    }
    const int32_t *pos_dev = g_pos_dev(b);
    const kv_call cur = {1, kv_type, cache, head_stride, x_stride, pos0, pos_ref, n_head_kv, d, pos_dev, x, n_t};
    const size_t x_span = kv_x_span(cur);
    const kv_call &k = b->pend_kv;
    if (k.on && k.kv_type == kv_type && k.head_stride == head_stride && k.pos0 == pos0 && k.pos_dev == pos_dev &&
        k.pos_ref == pos_ref && k.n_t == n_t && k.n_head_kv == n_head_kv && k.d == d && x_span > 0) {
        /* neither store may touch what the other reads or writes: then one kernel doing both in
         * any order gives the same bytes. A cache's writes stay within its n_head_kv heads
         * (head_stride apart, each holding every position), whatever position a replay has. */
        const size_t w_span = (size_t)n_head_kv * head_stride * sizeof(uint16_t);
        if (!spans_overlap(k.cache, w_span, cache, w_span) && !spans_overlap(k.cache, w_span, x, x_span) &&
            !spans_overlap(cache, w_span, k.x, kv_x_span(k))) {
            b->pend_kv.on = 0;
            keep_launch(b,
                        cuda_kv_store2_shifted(&b->ctx, kv_type, k.cache, k.x, k.x_stride, cache, x, x_stride,
                                               head_stride, pos0, pos_dev, pos_ref, n_t, n_head_kv, d),
                        "kv_store (K and V)");
            return;
        }
    }
    pend_flush(b);
    if (b->ctx.sw.fuse && x_span > 0) { /* hold it: the next op may be the V store */
        b->pend_kv = cur;
        return;
    }
    kv_launch(b, cur);
}

static void cb_kv_store(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                        size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    kv_store_op(be, CUDA_KV_F16, cache, head_stride, pos0, x, x_stride, n_t, n_head_kv, d);
}

static_assert(BE_KV_F16 == CUDA_KV_F16 && BE_KV_Q8_0 == CUDA_KV_Q8_0, "KV type values shared with the kernels");

static void cb_kv_store_q8_0(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0, const float *x,
                             size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d)
{
    kv_store_op(be, CUDA_KV_Q8_0, cache, head_stride, pos0, x, x_stride, n_t, n_head_kv, d);
}

/* The approximate policy as a per-query rule: queries at or after dense_from
 * attend densely. dense_tail counts the last queries of this call (the
 * engine passes the prompt's last chunk with the tail in it); a decode step
 * (one query) is dense whenever dense_tail > 0 or dense_tail_continue. */
static cuda_attn_mask mask_of(const be_attn_args *a)
{
    cuda_attn_mask m = {0, 0, 0, 0};
    const be_attn_policy *p = a->policy;
    if (!p || !p->approx) return m;
    m.approx = 1;
    m.global = p->global;
    m.window = p->window;
    int tail = p->dense_tail;
    if (a->n_q == 1 && p->dense_tail_continue && tail < 1) tail = 1;
    m.dense_from = a->q_pos0 + (a->n_q > tail ? a->n_q - tail : 0);
    return m;
}

/* The kernels' form of a call (positions as given: no device position yet). */
static cuda_attn attn_of(const be_attn_args *a)
{
    cuda_attn c;
    memset(&c, 0, sizeof c);
    c.q = a->q;
    c.q_stride = a->q_stride;
    c.q_head_stride = a->q_head_stride;
    c.n_q = a->n_q;
    c.q_pos0 = a->q_pos0;
    c.k = a->k;
    c.v = a->v;
    c.kv_head_stride = a->kv_head_stride;
    c.n_kv = a->n_kv;
    c.n_head = a->n_head;
    c.n_head_kv = a->n_head_kv;
    c.d = a->d_k;
    c.scale = a->scale;
    c.mask = mask_of(a);
    c.out = a->out;
    c.out_stride = a->out_stride;
    c.kv_type = a->kv_type;
    return c;
}

static int cb_attention(be_backend *be, const be_attn_args *a, wk_error *err)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (take_error(b, err)) return err->code;
    if (a->d_k != a->d_v)
        return wk_fail(err, WK_EUNSUPPORTED, "cuda attention: d_k %d != d_v %d", a->d_k, a->d_v);
    cuda_attn c = attn_of(a);
    const int32_t pos = g_seq_pos(b); /* graphed steps: positions relative to the sequence's in the step */
    if (g_skip(b, OP_ATTENTION, c.q, c.q_stride, c.q_head_stride, c.n_q, c.q_pos0 - pos, c.k, c.v, c.kv_head_stride,
               c.n_kv - pos, c.n_head, c.n_head_kv, c.d, c.scale, c.mask.approx, c.mask.global, c.mask.window,
               c.mask.approx ? c.mask.dense_from - pos : 0, c.out, c.out_stride, a->kv_type))
        return 0;
    c.pos_dev = g_pos_dev(b);
    c.pos_ref = pos;
    return cuda_attention(&b->ctx, &c, err);
}

/* Whether be_attend_seqs' n calls can go as batches (cuda_kv_store_batch +
 * cuda_attn_decode_batch): one head layout, the decode kernel's few queries each. */
static bool attend_batchable(const be_attn_args *a, int32_t n)
{
    if (n < 2) return false;
    for (int32_t i = 0; i < n; i++)
        if (a[i].d_k != a[i].d_v || a[i].d_k != a[0].d_k || a[i].kv_type != a[0].kv_type ||
            a[i].n_head != a[0].n_head || a[i].n_head_kv != a[0].n_head_kv || a[i].n_q < 1 ||
            a[i].n_q > CUDA_ATTN_DECODE_MAX_Q || (a[i].kv_type == BE_KV_Q8_0 && a[i].d_k % 32))
            return false;
    return true;
}

/* Calls [i0, i0 + n) of a batchable be_attend_seqs: the stores of all, then the attention
 * of all (each sequence's caches are its own, so the order between sequences is free). */
static int attend_batch(cuda_be *b, int32_t first, const be_attn_args *a, const be_kv_rows *kv, int32_t n,
                        wk_error *err)
{
    step_graphs *g = &b->g;
    const bool rec = g_recording(g);
    cuda_kv_batch kb;
    memset(&kb, 0, sizeof kb);
    kb.n = n;
    cuda_attn ca[CUDA_ATTN_SEQS];
    bool skip = false;
    for (int32_t i = 0; i < n; i++) {
        const int32_t seg = first + i, ref = rec ? g->pos[seg] : 0; /* a recorded step: relative positions */
        const int32_t *pos_dev = g->mode == G_CAPTURE ? g->d_pos + seg : NULL;
        ca[i] = attn_of(&a[i]);
        ca[i].pos_dev = pos_dev;
        ca[i].pos_ref = ref;
        kb.k[i] = kv[i].k_cache;
        kb.v[i] = kv[i].v_cache;
        kb.xk[i] = kv[i].k;
        kb.xv[i] = kv[i].v;
        kb.xk_stride[i] = kv[i].k_stride;
        kb.xv_stride[i] = kv[i].v_stride;
        kb.head_stride[i] = a[i].kv_head_stride;
        kb.pos0[i] = a[i].q_pos0;
        kb.pos_ref[i] = ref;
        kb.n_t[i] = a[i].n_q;
        kb.pos_dev[i] = pos_dev;
        const cuda_attn &c = ca[i];
        skip = g_skip(b, OP_ATTEND_SEQS, seg, c.q, c.q_stride, c.q_head_stride, c.n_q, c.q_pos0 - ref, c.k, c.v,
                      c.kv_head_stride, c.n_kv - ref, c.n_head, c.n_head_kv, c.d, c.scale, c.mask.approx,
                      c.mask.global, c.mask.window, c.mask.approx ? c.mask.dense_from - ref : 0, c.out, c.out_stride,
                      c.kv_type, kb.xk[i], kb.xv[i], kb.xk_stride[i], kb.xv_stride[i]);
    }
    if (skip) return 0;
    int rc = cuda_kv_store_batch(&b->ctx, a[0].kv_type, &kb, a[0].n_head_kv, a[0].d_k);
    if (rc) return wk_fail(err, rc, "cuda: kv store (%d sequences)", (int)n);
    rc = cuda_attn_decode_batch(&b->ctx, ca, (int)n, err);
    for (int32_t i = 0; rc == 1 && i < n; i++) /* the batched kernel is switched off: one by one */
        if (cuda_attention(&b->ctx, &ca[i], err)) return err->code;
    return rc == 1 ? 0 : rc;
}

/* be_attend_seqs: a batched decode step's layer as two batches of launches, else call by
 * call with each segment's positions (a recorded step's sequence first + i). */
static int cb_attend_seqs(be_backend *be, int32_t first, const be_attn_args *a, const be_kv_rows *kv, int32_t n,
                          wk_error *err)
{
    cuda_be *b = cb_raw(be);
    step_graphs *g = &b->g;
    const bool rec = g_recording(g);
    if (rec && (first < 0 || n < 0 || first + n > g->n_seq)) { /* not the step that began: run it again */
        g_fail(b);
        return 0;
    }
    if (g->mode == G_FAILED) return 0;
    if (attend_batchable(a, n)) {
        pend_flush(b);
        cuda_ctx_act_invalidate(&b->ctx); /* writes rows a cached activation may have come from */
        if (take_error(b, err)) return err->code;
        for (int32_t i0 = 0; i0 < n; i0 += CUDA_ATTN_SEQS) {
            int rc = attend_batch(b, first + i0, a + i0, kv + i0, n - i0 < CUDA_ATTN_SEQS ? n - i0 : CUDA_ATTN_SEQS,
                                  err);
            if (rc) return rc;
        }
        return 0;
    }
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        g->seq = rec ? first + i : 0;
        kv_store_op(be, a[i].kv_type, kv[i].k_cache, a[i].kv_head_stride, a[i].q_pos0, kv[i].k, kv[i].k_stride,
                    a[i].n_q, a[i].n_head_kv, a[i].d_k);
        kv_store_op(be, a[i].kv_type, kv[i].v_cache, a[i].kv_head_stride, a[i].q_pos0, kv[i].v, kv[i].v_stride,
                    a[i].n_q, a[i].n_head_kv, a[i].d_v);
        rc = cb_attention(be, &a[i], err);
    }
    g->seq = 0;
    return rc;
}

static void cb_ssm_conv(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride, int64_t n_t,
                        int64_t n_ch, const float *w, int32_t k, float *state)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_SSM_CONV, y, y_stride, x, x_stride, n_t, n_ch, w, k, state)) return;
    keep_launch(b, cuda_ssm_conv(&b->ctx, y, y_stride, x, x_stride, n_t, n_ch, dev_f32(b, w, (size_t)n_ch * k), k, state),
                "ssm_conv");
}

/* Folds n pointers into the step's signature (before the op's own g_skip). */
static void g_fold(cuda_be *b, float *const *p, int32_t n)
{
    step_graphs *g = &b->g;
    if (g->mode == G_OFF || g->mode == G_FAILED) return;
    for (int32_t i = 0; i < n; i++) g->sig = (g->sig ^ g_word((const void *)p[i])) * 0x100000001B3ull + 0x9E37u;
}

/* be_ssm_conv_seqs: the sequences CUDA_SEQS_MAX at a time, one launch each. */
static void cb_ssm_conv_seqs(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride, int32_t n_seq,
                             int64_t n_ch, const float *w, int32_t k, float *const *states)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    g_fold(b, states, n_seq);
    if (g_skip(b, OP_SSM_CONV_SEQS, y, y_stride, x, x_stride, n_seq, n_ch, w, k)) return;
    const float *dw = dev_f32(b, w, (size_t)n_ch * k);
    for (int32_t i0 = 0; i0 < n_seq; i0 += CUDA_SEQS_MAX) {
        cuda_seq_states st;
        st.n = n_seq - i0 < CUDA_SEQS_MAX ? n_seq - i0 : CUDA_SEQS_MAX;
        for (int32_t i = 0; i < st.n; i++) st.p[i] = states[i0 + i];
        keep_launch(b, cuda_ssm_conv_seqs(&b->ctx, y + (size_t)i0 * y_stride, y_stride, x + (size_t)i0 * x_stride,
                                          x_stride, n_ch, dw, k, &st),
                    "ssm_conv (sequences)");
    }
}

static int gdn_launch(cuda_be *b, const be_gdn_args *a, float *const *states, wk_error *err);

/* be_gdn_seqs: the sequences CUDA_SEQS_MAX at a time, one launch each. */
static int cb_gdn_seqs(be_backend *be, const be_gdn_args *a, float *const *states, wk_error *err)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (take_error(b, err)) return err->code;
    g_fold(b, states, a->n_t);
    if (g_skip(b, OP_GDN_SEQS, a->q, a->k, a->v, a->qk_stride, a->v_stride, a->alpha, a->beta, a->ssm_a, a->dt_bias,
               a->n_t, a->n_hk, a->n_hv, a->d_k, a->d_v, a->eps, a->out, a->out_stride))
        return 0;
    for (int32_t i0 = 0; i0 < a->n_t; i0 += CUDA_SEQS_MAX) {
        const be_gdn_args g = be_gdn_rows(a, i0, a->n_t - i0 < CUDA_SEQS_MAX ? a->n_t - i0 : CUDA_SEQS_MAX);
        int rc = gdn_launch(b, &g, states + i0, err);
        if (rc) return rc;
    }
    return 0;
}

static int cb_gdn(be_backend *be, const be_gdn_args *a, wk_error *err)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (take_error(b, err)) return err->code;
    if (g_skip(b, OP_GDN, a->q, a->k, a->v, a->qk_stride, a->v_stride, a->alpha, a->beta, a->ssm_a, a->dt_bias, a->n_t,
               a->n_hk, a->n_hv, a->d_k, a->d_v, a->eps, a->state, a->out, a->out_stride))
        return 0;
    return gdn_launch(b, a, NULL, err);
}

/* A gdn op's launch: one sequence (states NULL), or a->n_t <= CUDA_SEQS_MAX sequences of one
 * token each. */
static int gdn_launch(cuda_be *b, const be_gdn_args *a, float *const *states, wk_error *err)
{
    cuda_gdn g;
    memset(&g, 0, sizeof g);
    g.q = a->q;
    g.k = a->k;
    g.v = a->v;
    g.qk_stride = a->qk_stride;
    g.v_stride = a->v_stride;
    g.alpha = a->alpha;
    g.beta = a->beta;
    g.ssm_a = dev_f32(b, a->ssm_a, (size_t)a->n_hv);
    g.dt_bias = dev_f32(b, a->dt_bias, (size_t)a->n_hv);
    g.n_t = a->n_t;
    g.n_hk = a->n_hk;
    g.n_hv = a->n_hv;
    g.d_k = a->d_k;
    g.d_v = a->d_v;
    g.eps = a->eps;
    g.state = a->state;
    g.out = a->out;
    g.out_stride = a->out_stride;
    if (states) {
        g.seqs.n = a->n_t;
        for (int32_t i = 0; i < a->n_t; i++) g.seqs.p[i] = states[i];
    }
    if (take_error(b, err)) return err->code;
    return cuda_gdn_scan(&b->ctx, &g, err); /* a->chunked: same result, the scan kernel serves both */
}

/* Drops the cached quantized activations if [p, p + bytes) holds some of their rows. */
static void act_written(cuda_be *b, const void *p, size_t bytes)
{
    const float *cx = b->ctx.actq_x;
    if (cx && spans_overlap(p, bytes, cx, (size_t)b->ctx.actq_n * b->ctx.actq_K * sizeof(float)))
        cuda_ctx_act_invalidate(&b->ctx);
}

static void cb_moe_route(be_backend *be, const float *logits, int64_t n_t, int32_t n_expert, int32_t k, int32_t *ids,
                         float *weights)
{
    cuda_be *b = cb_of(be);
    /* the MoE input quantized by the norm before it stays cached for moe_ffn */
    act_written(b, ids, (size_t)n_t * k * sizeof *ids);
    act_written(b, weights, (size_t)n_t * k * sizeof *weights);
    if (g_skip(b, OP_MOE_ROUTE, logits, n_t, n_expert, k, ids, weights)) return;
    keep_launch(b, cuda_moe_route(&b->ctx, logits, n_t, n_expert, k, ids, weights), "moe_route");
}

/* be_moe_gate: a decode step's router (F32 weights, the usual form) in one launch; other
 * batches and types as the ops it replaces. */
static int cb_moe_gate(be_backend *be, const be_weight *router, const be_weight *shgate, const float *u, int64_t n_t,
                       int32_t k, float *logits, float *sh_logit, int32_t *ids, float *weights, wk_error *err)
{
    cuda_be *b = cb_of(be);
    const int32_t n_expert = (int32_t)router->ne[1];
    const int64_t K = router->ne[0];
    const bool one = n_t <= CUDA_MATVEC_MAX_ROWS && router->type == QT_F32 && (!shgate || shgate->type == QT_F32) &&
                     K % 8 == 0 && k <= n_expert && n_expert <= 8192;
    if (!one) {
        int rc = cb_matmul(be, router, u, n_t, logits, err);
        if (rc) return rc;
        cb_moe_route(be, logits, n_t, n_expert, k, ids, weights);
        return shgate ? cb_matmul(be, shgate, u, n_t, sh_logit, err) : take_error(b, err);
    }
    /* the MoE input quantized by the norm before it stays cached for moe_ffn */
    act_written(b, logits, (size_t)n_t * n_expert * sizeof *logits);
    if (shgate) act_written(b, sh_logit, (size_t)n_t * sizeof *sh_logit);
    act_written(b, ids, (size_t)n_t * k * sizeof *ids);
    act_written(b, weights, (size_t)n_t * k * sizeof *weights);
    if (take_error(b, err)) return err->code;
    if (g_skip(b, OP_MOE_GATE, router->data, shgate ? shgate->data : NULL, u, n_t, k, logits, sh_logit, ids, weights))
        return 0;
    const cuda_qweight *dr = dev_weight(b, router, err);
    const cuda_qweight *ds = shgate ? dev_weight(b, shgate, err) : NULL;
    if (!dr || (shgate && !ds)) return err->code ? err->code : WK_EIO;
    if (!b->gate_arrivals) { /* a step's first run is op by op (never captured): allocated there */
        if (cudaMalloc((void **)&b->gate_arrivals, CUDA_MATVEC_MAX_ROWS * sizeof(unsigned)) != cudaSuccess ||
            cudaMemsetAsync(b->gate_arrivals, 0, CUDA_MATVEC_MAX_ROWS * sizeof(unsigned), b->ctx.stream) !=
                cudaSuccess) {
            cudaGetLastError();
            if (b->gate_arrivals) cudaFree(b->gate_arrivals);
            b->gate_arrivals = NULL;
            return wk_fail(err, WK_ENOMEM, "cuda: the router's counters");
        }
    }
    int rc = cuda_moe_gate(&b->ctx, (const float *)dr->data, ds ? (const float *)ds->data : NULL, n_expert, K, u, n_t,
                           k, logits, sh_logit, ids, weights, b->gate_arrivals);
    return rc ? wk_fail(err, rc, "cuda: moe gate (%d experts, top %d)", (int)n_expert, (int)k) : 0;
}

static int moe_scratch(cuda_be *b, size_t bytes, wk_error *err)
{
    if (bytes <= b->moe_bytes) return 0;
    cudaStreamSynchronize(b->ctx.stream);
    b->ctx.epoch++;
    if (b->moe) cudaFree(b->moe);
    b->moe = NULL;
    b->moe_bytes = 0;
    if (cudaMalloc(&b->moe, bytes) != cudaSuccess)
        return wk_fail(err, WK_ENOMEM, "cuda: %zu bytes of MoE scratch", bytes);
    b->moe_bytes = bytes;
    return 0;
}

static bool is_float_type(uint32_t t) { return t == QT_F32 || t == QT_F16 || t == QT_BF16; }

/* W[e_s] · x rows for n_slots slots through matvec, quantizing x first when W is quantized. */
static int moe_matvec(cuda_be *b, const cuda_qweight *w, const float *x, int64_t n_x, int64_t n_slots,
                      int64_t slots_per_x, const int32_t *ids, int8_t *xq, float *xd, float *y, wk_error *err)
{
    if (!is_float_type(w->type)) {
        int rc = cuda_quantize_act(&b->ctx, x, n_x, w->cols, cuda_act_group(w->type), xq, xd);
        if (rc) return wk_fail(err, rc, "cuda moe: quantizing %lld columns", (long long)w->cols);
    } else if (w->act_group) {
        /* F32 copy of a type without kernels: round x like its partner format */
        void *scr;
        int rc = cuda_ctx_scratch(&b->ctx, (size_t)n_x * w->cols * 4, &scr, err);
        if (rc) return rc;
        rc = cuda_round_act_f32(&b->ctx, x, n_x, w->cols, w->act_group, (float *)scr);
        if (rc) return wk_fail(err, rc, "cuda moe: rounding %lld columns", (long long)w->cols);
        x = (const float *)scr;
    }
    return cuda_matvec(&b->ctx, w, xq, xd, x, n_slots, slots_per_x, ids, y, err);
}

/* Packs without int8 kernels (float types, the types dequantized at upload): gate/up
 * products per (token, slot) through the expert-indexed matvec, SwiGLU, down product per
 * slot, weighted sum. (For quantized packs this was the only path before the int8 one:
 * 35B-A3B q4_k_m, H200, wick bench pp4096 1,081 tok/s vs 17,951, pp512 948 vs 4,798,
 * tg128 217 vs 248, same binary, same call.) */
static int moe_per_slot(cuda_be *b, const be_moe_args *a, const cuda_qweight *wg, const cuda_qweight *wu,
                        const cuda_qweight *wd, wk_error *err)
{
    const bool fused = wu == NULL;
    const int64_t E = wg->cols, F = fused ? wg->rows / 2 : wg->rows, k = a->k;
    const int64_t max_tok = 65535 / k; /* slots per launch: the grid's y limit */
    const int64_t chunk = a->n_t < max_tok ? a->n_t : max_tok;
    const int64_t slots = chunk * k;
    /* G (slots × 2F) | U (slots × F) | H (slots × F) | Y (slots × E) floats, then xq/xd */
    const size_t f_g = (size_t)slots * 2 * F, f_u = (size_t)slots * F, f_h = f_u, f_y = (size_t)slots * E;
    const size_t xcols = (size_t)(E > F ? E : F) * slots;
    size_t bytes = (f_g + f_u + f_h + f_y) * 4 + xcols / 32 * 4 + 256 + xcols;
    int rc = moe_scratch(b, bytes, err);
    if (rc) return rc;
    float *G = (float *)b->moe, *U = G + f_g, *H = U + f_u, *Y = H + f_h;
    float *xd = Y + f_y;
    int8_t *xq = (int8_t *)(((uintptr_t)(xd + xcols / 32) + 255) & ~(uintptr_t)255);
    for (int64_t t0 = 0; t0 < a->n_t; t0 += chunk) {
        const int64_t nt = a->n_t - t0 < chunk ? a->n_t - t0 : chunk, ns = nt * k;
        const float *u = a->u + t0 * E;
        const int32_t *ids = a->ids + t0 * k;
        rc = moe_matvec(b, wg, u, nt, ns, k, ids, xq, xd, G, err);
        if (rc) return rc;
        if (fused) {
            rc = cuda_swiglu_fused(&b->ctx, H, G, ns, F);
        } else {
            rc = moe_matvec(b, wu, u, nt, ns, k, ids, xq, xd, U, err);
            if (rc) return rc;
            rc = cuda_swiglu(&b->ctx, H, G, U, ns * F);
        }
        if (rc) return wk_fail(err, rc, "cuda moe: swiglu");
        rc = moe_matvec(b, wd, H, ns, ns, 1, ids, xq, xd, Y, err);
        if (rc) return rc;
        rc = cuda_moe_combine(&b->ctx, a->out + t0 * E, Y, NULL, a->weights + t0 * k, NULL, nt, (int32_t)k,
                              (int32_t)k, E);
        if (rc) return wk_fail(err, rc, "cuda moe: combine");
    }
    return 0;
}

/* Whether w has int8 kernels (matvec and MMQ) for products with K = w->cols inputs. */
static bool moe_int8_ok(const cuda_qweight *w)
{
    return cuda_mmq_supported(w->type) && w->cols % cuda_act_group(w->type) == 0;
}

/* Whether the 2-D weight s (device form) can ride along a pack p as its extra matrix. */
static bool moe_extra_ok(const cuda_qweight *p, const cuda_qweight *s)
{
    return s && s->type == p->type && s->rows == p->rows && s->cols == p->cols && s->row_bytes == p->row_bytes &&
           s->n_mat == 1;
}

/* Tokens per pass of the int8 path: bounds its scratch (about 10 KB per (token, slot)
 * pair on the 35B-A3B shape). */
#define MOE_CHUNK_TOKENS 2048
/* Tokens up to which the int8 path takes the (token, slot) pairs through the
 * expert-indexed matvec, as decode does, rather than sorted into grouped MMQ tiles:
 * a few tokens fill too few tiles (continuous batching's decode steps; see README). */
#define MOE_MATVEC_MAX_TOKENS 32

/* The int8 path: every product on quantized activations (as llama.cpp's CPU backend
 * rounds them), the shared expert as one more slot when sh (its gate, up, down), every
 * expert of a product in one launch:
 *   up to MOE_MATVEC_MAX_TOKENS tokens (decode steps): the pairs in slot order through the
 *   expert-indexed matvec (gate and up in one launch);
 *   more: the pairs sorted by expert on the device (cuda_moe_sort: no host sync, so a
 *   step stays capturable), then grouped products on int8 tensor cores (cuda_mmq_grouped). */
static int moe_int8(cuda_be *b, const be_moe_args *a, const cuda_qweight *wg, const cuda_qweight *wu,
                    const cuda_qweight *wd, const cuda_qweight *const *sh, wk_error *err)
{
    cuda_ctx *c = &b->ctx;
    const bool fused = wu == NULL;
    const int64_t E = wg->cols, F = fused ? wg->rows / 2 : wg->rows, FG = wg->rows;
    const int32_t k = a->k, ks = k + (sh ? 1 : 0), n_e = (int32_t)wg->n_mat + (sh ? 1 : 0);
    const bool decode = a->n_t <= MOE_MATVEC_MAX_TOKENS;
    const int64_t chunk = a->n_t < MOE_CHUNK_TOKENS ? a->n_t : MOE_CHUNK_TOKENS;
    const int64_t P = chunk * ks;
    const int bn = P < 48 * n_e ? 32 : 64; /* rows per tile: the mean rows per expert decides */
    /* scratch: G (P × FG) | U (P × F) | hd | hq | Y (P × E) | plan, each 256-aligned */
    size_t off = 0, o_g, o_u, o_hd, o_hq, o_y, o_plan;
    auto take = [&](size_t bytes) { const size_t at = off; off += (bytes + 255) & ~(size_t)255; return at; };
    o_g = take((size_t)P * FG * 4);
    o_u = take(fused ? 0 : (size_t)P * F * 4);
    o_hd = take((size_t)P * F / 32 * 4);
    o_hq = take((size_t)P * F);
    o_y = take((size_t)P * E * 4);
    o_plan = take(decode ? 0 : cuda_moe_plan_bytes(P, n_e, bn));
    int rc = moe_scratch(b, off, err);
    if (rc) return rc;
    uint8_t *base = (uint8_t *)b->moe;
    float *G = (float *)(base + o_g), *U = fused ? NULL : (float *)(base + o_u);
    float *hd = (float *)(base + o_hd), *Y = (float *)(base + o_y);
    int8_t *hq = (int8_t *)(base + o_hq);
    const void *xg = sh ? sh[0]->data : NULL, *xu = sh ? sh[1]->data : NULL, *xdn = sh ? sh[2]->data : NULL;
    for (int64_t t0 = 0; t0 < a->n_t; t0 += chunk) {
        const int64_t nt = a->n_t - t0 < chunk ? a->n_t - t0 : chunk, np = nt * ks;
        const int32_t *ids = a->ids + t0 * k;
        int8_t *xqu;
        float *xdu;
        rc = cuda_act_quantized(c, a->u + t0 * E, nt, E, cuda_act_group(wg->type), &xqu, &xdu, err);
        if (rc) return rc;
        cuda_moe_plan plan;
        if (decode) {
            rc = cuda_matvec_moe(c, wg, wu, xg, xu, xqu, xdu, nt, k, ks, ks, ids, G, U, err);
        } else {
            rc = cuda_moe_sort(c, ids, nt, k, ks, n_e, bn, base + o_plan, &plan);
            if (rc) return wk_fail(err, rc, "cuda moe: sorting %lld pairs by expert", (long long)np);
            rc = cuda_mmq_grouped(c, wg, wu, xg, xu, &plan, 1, xqu, xdu, G, U, err);
        }
        if (rc) return rc;
        rc = cuda_moe_glu_quant(c, G, fused ? G + F : U, (size_t)(fused ? 2 * F : F), np, F,
                                cuda_act_group(wd->type), hq, hd);
        if (rc) return wk_fail(err, rc, "cuda moe: swiglu");
        const float *sh_logit = sh ? a->shared->logit + t0 : NULL;
        if (decode && ks <= CUDA_MOE_DOWN_MAX_SLOTS) { /* the down product and the weighted sum as one kernel */
            rc = cuda_moe_down_combine(c, wd, xdn, hq, hd, nt, k, ks, ids, a->weights + t0 * k, sh_logit,
                                       a->out + t0 * E, err);
            if (rc) return rc;
            continue;
        }
        rc = decode ? cuda_matvec_moe(c, wd, NULL, xdn, NULL, hq, hd, nt, k, ks, 1, ids, Y, NULL, err)
                    : cuda_mmq_grouped(c, wd, NULL, xdn, NULL, &plan, 0, hq, hd, Y, NULL, err);
        if (rc) return rc;
        rc = cuda_moe_combine(c, a->out + t0 * E, Y, decode ? NULL : plan.pos, a->weights + t0 * k, sh_logit, nt, k,
                              ks, E);
        if (rc) return wk_fail(err, rc, "cuda moe: combine");
    }
    return 0;
}

/* A product of the shared expert: int8 activations where the weight allows, as the experts'. */
static int moe_dense(cuda_ctx *c, const cuda_qweight *w, const float *x, int64_t n, float *y, wk_error *err)
{
    return moe_int8_ok(w) ? cuda_matmul_int8(c, w, x, n, y, err) : cuda_matmul(c, w, 0, x, n, y, err);
}

/* The shared expert through the dense products: out += σ(logit) · down(SiLU(gate·u) ⊙ up·u). */
static int moe_shared_dense(cuda_be *b, const be_moe_args *a, const cuda_qweight *const *sh, wk_error *err)
{
    cuda_ctx *c = &b->ctx;
    const int64_t n = a->n_t, F = sh[0]->rows, E = sh[2]->rows;
    const size_t fg = ((size_t)n * F * 4 + 255) & ~(size_t)255;
    int rc = moe_scratch(b, 2 * fg + (size_t)n * E * 4, err);
    if (rc) return rc;
    float *G = (float *)b->moe, *U = (float *)((uint8_t *)b->moe + fg), *Y = (float *)((uint8_t *)b->moe + 2 * fg);
    rc = moe_dense(c, sh[0], a->u, n, G, err);
    if (!rc) rc = moe_dense(c, sh[1], a->u, n, U, err);
    if (!rc && (rc = cuda_swiglu(c, G, G, U, n * F))) wk_fail(err, rc, "cuda moe: shared swiglu");
    cuda_ctx_act_invalidate(c); /* G changed since it was quantized for a product, if it was */
    if (!rc) rc = moe_dense(c, sh[2], G, n, Y, err);
    if (!rc && (rc = cuda_add_scaled_sigmoid(c, a->out, Y, a->shared->logit, n, E)))
        wk_fail(err, rc, "cuda moe: shared gate");
    return rc;
}

/* be_moe_ffn: the int8 path when every pack has int8 kernels (gate and up of one shape),
 * the shared expert inside it when its weights match the packs' type and shape; else the
 * per-slot matvec path and the shared expert through the dense products. */
static int cb_moe_ffn(be_backend *be, const be_moe_args *a, wk_error *err)
{
    cuda_be *b = cb_of(be); /* u's quantized rows may be cached (the norm before it): kept for the products */
    if (take_error(b, err)) return err->code;
    const be_moe_shared *s = a->shared;
    if (g_skip(b, OP_MOE_FFN, a->gate->data, a->up->data, a->down->data, a->u, a->n_t, a->k, a->ids, a->weights, a->out,
               s ? s->gate->data : NULL, s ? s->up->data : NULL, s ? s->down->data : NULL, s ? s->logit : NULL))
        return 0;
    const bool fused = a->up->data == NULL;
    const cuda_qweight *wg = dev_weight(b, a->gate, err);
    const cuda_qweight *wu = fused ? NULL : dev_weight(b, a->up, err);
    const cuda_qweight *wd = dev_weight(b, a->down, err);
    if (!wg || (!fused && !wu) || !wd) return err->code ? err->code : WK_EIO;
    const cuda_qweight *sh[3] = {NULL, NULL, NULL};
    if (s) {
        sh[0] = dev_weight(b, s->gate, err);
        sh[1] = sh[0] ? dev_weight(b, s->up, err) : NULL;
        sh[2] = sh[1] ? dev_weight(b, s->down, err) : NULL;
        if (!sh[2]) return err->code ? err->code : WK_EIO;
    }
    const bool int8 = moe_int8_ok(wg) && moe_int8_ok(wd) &&
                      (fused ? wg->rows % 2 == 0 : wu->type == wg->type && wu->rows == wg->rows &&
                                                       wu->cols == wg->cols && wu->row_bytes == wg->row_bytes);
    const bool sh_in = s && int8 && !fused && moe_extra_ok(wg, sh[0]) && moe_extra_ok(wu, sh[1]) &&
                       moe_extra_ok(wd, sh[2]);
    int rc = int8 ? moe_int8(b, a, wg, wu, wd, sh_in ? sh : NULL, err) : moe_per_slot(b, a, wg, wu, wd, err);
    if (!rc && s && !sh_in) rc = moe_shared_dense(b, a, sh, err);
    cuda_ctx_act_invalidate(&b->ctx); /* the products' inputs live in the MoE scratch */
    return rc;
}

static void cb_add(be_backend *be, float *y, const float *a, const float *c, int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_ADD, y, a, c, n)) return;
    if (b->ctx.sw.fuse && n % 256 == 0 && n <= CUDA_MATVEC_MAX_ROWS * 16384) { /* a decode step's residual */
        b->pend.on = 1;
        b->pend.y = y;
        b->pend.a = a;
        b->pend.b = c;
        b->pend.n = n;
        return;
    }
    keep_launch(b, cuda_add(&b->ctx, y, a, c, n), "add");
}
static void cb_add_bias(be_backend *be, float *y, const float *bias, int64_t n_rows, int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_ADD_BIAS, y, bias, n_rows, n)) return;
    keep_launch(b, cuda_add_bias(&b->ctx, y, dev_f32(b, bias, (size_t)n), n_rows, n), "add_bias");
}
static void cb_swiglu(be_backend *be, float *y, const float *gate, const float *up, int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_SWIGLU, y, gate, up, n)) return;
    if (b->ctx.sw.fuse && n <= 65536) { /* a decode step's row (the down matmul's input) */
        int rc = cuda_swiglu_q8k(&b->ctx, y, gate, up, n);
        if (rc) {
            keep_launch(b, rc < 0 ? rc : 0, "swiglu");
            return;
        }
    }
    keep_launch(b, cuda_swiglu(&b->ctx, y, gate, up, n), "swiglu");
}
static void cb_mul_sigmoid(be_backend *be, float *y, size_t y_stride, const float *g, size_t g_stride, int64_t n_rows,
                           int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_MUL_SIGMOID, y, y_stride, g, g_stride, n_rows, n)) return;
    keep_launch(b, cuda_mul_sigmoid(&b->ctx, y, y_stride, g, g_stride, n_rows, n), "mul_sigmoid");
}
static void cb_mul_silu(be_backend *be, float *y, const float *z, int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_MUL_SILU, y, z, n)) return;
    if (b->ctx.sw.fuse && n <= 65536) { /* a decode step's row (the output matmul's input) */
        int rc = cuda_mul_silu_q8k(&b->ctx, y, z, n);
        if (rc) {
            keep_launch(b, rc < 0 ? rc : 0, "mul_silu");
            return;
        }
    }
    keep_launch(b, cuda_mul_silu(&b->ctx, y, z, n), "mul_silu");
}
/* A decode step's gated norm (one Gated DeltaNet output row) in one kernel that also
 * quantizes for the output matmul; otherwise rms_norm then mul_silu. */
static void cb_rms_norm_gated(be_backend *be, float *y, const float *x, int64_t n_rows, int64_t n, const float *w,
                              float eps, const float *z)
{
    cuda_be *b = cb_of(be);
    if (!b->ctx.sw.fuse || n_rows * n > 65536) {
        cb_rms_norm(be, y, (size_t)n, x, (size_t)n, n_rows, n, w, eps);
        cb_mul_silu(be, y, z, n_rows * n);
        return;
    }
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_RMS_NORM_GATED, y, x, n_rows, n, w, eps, z)) return;
    int rc = cuda_rms_norm_gated_q8k(&b->ctx, y, x, n_rows, n, dev_f32(b, w, (size_t)n), eps, z);
    if (rc) {
        keep_launch(b, rc < 0 ? rc : 0, "rms_norm_gated");
        return;
    }
    cb_rms_norm(be, y, (size_t)n, x, (size_t)n, n_rows, n, w, eps);
    cb_mul_silu(be, y, z, n_rows * n);
}
static void cb_add_scaled_sigmoid(be_backend *be, float *y, const float *x, const float *s, int64_t n_rows, int64_t n)
{
    cuda_be *b = cb_of(be);
    cuda_ctx_act_invalidate(&b->ctx); /* may write rows a cached activation came from */
    if (g_skip(b, OP_ADD_SCALED_SIGMOID, y, x, s, n_rows, n)) return;
    keep_launch(b, cuda_add_scaled_sigmoid(&b->ctx, y, x, s, n_rows, n), "add_scaled_sigmoid");
}

/* Uploads a weight at load time (instead of on its first matmul) so that a
 * model that does not fit fails at load, with the weight's name. w->prep
 * stays NULL: the device copy is found by w->data like any other. */
static int cb_prepare_weight(be_backend *be, be_weight *w, wk_error *err)
{
    cuda_be *b = cb_of(be);
    if (take_error(b, err)) return err->code;
    if (!w->data) return 0;
    return dev_weight(b, w, err) ? 0 : (err->code ? err->code : WK_EIO);
}

/* Frees the device copy of w (if any) and removes it from the table
 * (linear probing: the rest of its cluster is put back). */
static void cb_release_weight(be_backend *be, be_weight *w)
{
    cuda_be *b = cb_of(be);
    if (!w->data || !b->cap_weights) return;
    size_t mask = b->cap_weights - 1, h = ptr_hash(w->data, b->cap_weights);
    while (b->weights[h].host && b->weights[h].host != w->data) h = (h + 1) & mask;
    if (!b->weights[h].host) return;
    cudaStreamSynchronize(b->ctx.stream); /* no kernel may still read it */
    cuda_qw_free(&b->weights[h].w);
    b->ctx.epoch++;
    b->weights[h].host = NULL;
    b->n_weights--;
    for (size_t i = (h + 1) & mask; b->weights[i].host; i = (i + 1) & mask) {
        weight_ent e = b->weights[i];
        b->weights[i].host = NULL;
        size_t j = ptr_hash(e.host, b->cap_weights);
        while (b->weights[j].host) j = (j + 1) & mask;
        b->weights[j] = e;
    }
}

static void cb_free(be_backend *be)
{
    cuda_be *b = cb_of(be);
    cudaStreamSynchronize(b->ctx.stream);
    for (int i = 0; i < G_SLOTS; i++) g_drop(&b->g.ents[i]);
    if (b->g.pinned) cudaFreeHost(b->g.pinned);
    if (b->g.d_pos) cudaFree(b->g.d_pos);
    for (size_t i = 0; i < b->n_allocs; i++) cudaFree((void *)b->allocs[i].p);
    for (size_t i = 0; i < b->cap_weights; i++)
        if (b->weights[i].host) cuda_qw_free(&b->weights[i].w);
    for (size_t i = 0; i < b->cap_consts; i++)
        if (b->consts[i].host) cudaFree(b->consts[i].dev);
    if (b->stage) cudaFree(b->stage);
    if (b->host_stage) cudaFreeHost(b->host_stage);
    for (size_t i = 0; i < b->n_pinned; i++) cudaFreeHost((void *)b->pinned[i].p); /* not given back */
    free(b->pinned);
    if (b->pick_dev) cudaFree(b->pick_dev);
    if (b->gate_arrivals) cudaFree(b->gate_arrivals);
    if (b->pick_host) cudaFreeHost(b->pick_host);
    if (b->moe) cudaFree(b->moe);
    cuda_ctx_free(&b->ctx);
    free(b->allocs);
    free(b->weights);
    free(b->consts);
    free(b);
}

static be_ops make_ops(void)
{
    be_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.free = cb_free;
    o.alloc = cb_alloc;
    o.release = cb_release;
    o.to_host = cb_to_host;
    o.from_host = cb_from_host;
    o.prepare_weight = cb_prepare_weight;
    o.release_weight = cb_release_weight;
    o.matmul = cb_matmul;
    o.matmul_multi = cb_matmul_multi;
    o.argmax = cb_argmax;
    o.copy = cb_copy_dev;
    o.get_rows = cb_get_rows;
    o.rms_norm = cb_rms_norm;
    o.rope_cache = cb_rope_cache;
    o.rope = cb_rope;
    o.kv_store = cb_kv_store;
    o.attention = cb_attention;
    o.attend_seqs = cb_attend_seqs;
    o.ssm_conv = cb_ssm_conv;
    o.ssm_conv_seqs = cb_ssm_conv_seqs;
    o.gdn_seqs = cb_gdn_seqs;
    o.gdn = cb_gdn;
    o.moe_route = cb_moe_route;
    o.moe_ffn = cb_moe_ffn;
    o.moe_gate = cb_moe_gate;
    o.moe_shared = true;
    o.add = cb_add;
    o.add_bias = cb_add_bias;
    o.swiglu = cb_swiglu;
    o.mul_sigmoid = cb_mul_sigmoid;
    o.mul_silu = cb_mul_silu;
    o.add_scaled_sigmoid = cb_add_scaled_sigmoid;
    o.rms_norm_gated = cb_rms_norm_gated;
    o.kv_store_q8_0 = cb_kv_store_q8_0;
    o.to_host_rows = cb_to_host_rows;
    o.zero = cb_zero;
    o.host_alloc = cb_host_alloc;
    o.host_free = cb_host_free;
    o.step_begin = be_cuda_step_begin;
    o.step_end = be_cuda_step_end;
    o.status = be_cuda_status;
    return o;
}

static const be_ops k_cuda_ops = make_ops();

extern "C" int be_cuda_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" int be_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *name,
                                     size_t name_cap)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) return -1;
    cudaDeviceProp prop;
    if (name && name_cap && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(name, name_cap, "%s", prop.name);
    int prev = 0;
    cudaGetDevice(&prev);
    size_t f = 0, t = 0;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMemGetInfo(&f, &t);
    cudaSetDevice(prev);
    t_device = -1; /* the current device moved under the cache */
    if (e != cudaSuccess) return -1;
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}

extern "C" int be_cuda_new(be_backend **out, int device, wk_error *err)
{
    *out = NULL;
    cuda_be *b = (cuda_be *)calloc(1, sizeof *b);
    if (!b) return wk_fail(err, WK_ENOMEM, "cuda backend: out of memory");
    int rc = cuda_ctx_init(&b->ctx, device, err);
    t_device = -1; /* cuda_ctx_init changed the current device */
    if (rc) {
        free(b);
        return rc;
    }
    b->base.ops = &k_cuda_ops;
    b->base.impl = b;
    b->g.enabled = b->ctx.sw.graphs;
    *out = &b->base;
    return 0;
}

extern "C" int be_cuda_status(be_backend *be, wk_error *err)
{
    return take_error(cb_of(be), err);
}

/* ---- decode-step graphs: entry points ------------------------------------------------------ */

/* Whether entry e was recorded for this step's sequences, row counts and bands. */
static bool g_same_step(const graph_ent *e, const be_step_seq *seqs, const int32_t *band, int32_t n_seq)
{
    if (!e->state || e->n_seq != n_seq) return false;
    for (int32_t i = 0; i < n_seq; i++)
        if (e->keys[i] != seqs[i].key || e->n_t[i] != seqs[i].n_t || e->band[i] != band[i]) return false;
    return true;
}

extern "C" void be_cuda_step_begin(be_backend *be, const be_step_seq *seqs, int32_t n_seq)
{
    cuda_be *b = cb_of(be);
    step_graphs *g = &b->g;
    g->t_begin = host_s();
    g->mode = G_OFF;
    g->n_seq = g->seq = 0;
    g->pos[0] = 0;
    if (!g->enabled || n_seq < 1 || n_seq > G_SEQS) return;
    int32_t band[G_SEQS];
    for (int32_t i = 0; i < n_seq; i++) {
        /* positions on the device are for the decode attention kernel's few queries */
        if (seqs[i].pos < 0 || seqs[i].n_t < 1 || seqs[i].n_t > CUDA_ATTN_DECODE_MAX_Q) return;
        /* the decode attention's split is fixed within the band of the sequence's last row */
        band[i] = (seqs[i].pos + seqs[i].n_t - 1) / CUDA_ATTN_BAND;
    }
    if (!g->pinned) { /* outside any capture */
        if (cudaHostAlloc((void **)&g->pinned, G_PINNED_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaMalloc((void **)&g->d_pos, G_SEQS * sizeof(int32_t)) != cudaSuccess) {
            cudaGetLastError();
            g->enabled = 0;
            return;
        }
    }
    if (g->unsynced) { /* the last graph may still read the pinned slots */
        cudaStreamSynchronize(b->ctx.stream);
        g->unsynced = 0;
    }
    graph_ent *e = NULL, *lru = &g->ents[0];
    for (int i = 0; i < G_SLOTS; i++) {
        graph_ent *t = &g->ents[i];
        if (g_same_step(t, seqs, band, n_seq)) e = t;
        if (!t->state || (lru->state && t->used < lru->used)) lru = t;
    }
    if (!e) {
        e = lru;
        g_drop(e);
        e->n_seq = n_seq;
        for (int32_t i = 0; i < n_seq; i++) {
            e->keys[i] = seqs[i].key;
            e->n_t[i] = seqs[i].n_t;
            e->band[i] = band[i];
        }
    }
    if (e->state && e->epoch != b->ctx.epoch) g_drop(e); /* buffers it used moved */
    e->used = ++g->tick;
    g->cur = e;
    g->n_seq = n_seq;
    for (int32_t i = 0; i < n_seq; i++) g->pos[i] = seqs[i].pos;
    g->sig = 0xCBF29CE484222325ull;
    g->pinned_off = G_POS_BYTES; /* slot 0: the positions */
    memcpy(g->pinned, g->pos, sizeof(int32_t) * (size_t)n_seq);
    if (e->state == 0) {
        g->mode = G_FIRST;
    } else if (e->state == 1) {
        g->epoch0 = b->ctx.epoch;
        if (cudaStreamBeginCapture(b->ctx.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            cudaGetLastError();
            return; /* this step op by op */
        }
        g->mode = G_CAPTURE;
        if (cudaMemcpyAsync(g->d_pos, g->pinned, sizeof(int32_t) * (size_t)n_seq, cudaMemcpyHostToDevice,
                            b->ctx.stream) != cudaSuccess)
            g_fail(b);
    } else {
        g->mode = G_REPLAY;
    }
}


extern "C" int be_cuda_step_end(be_backend *be, int rc)
{
    cuda_be *b = cb_of(be);
    step_graphs *g = &b->g;
    if (rc && g->mode != G_OFF) { /* the forward pass failed: forget the step's graph */
        if (g->mode == G_CAPTURE) g_fail(b);
        else if (g->cur) g_drop(g->cur);
        g->mode = G_OFF;
        return rc;
    }
    if (g->mode != G_OFF) g_launch(b); /* no be_to_host in the step */
    if (g->mode == G_FAILED) {
        g->mode = G_OFF;
        g->redone++;
        if (++g->failures > 16) g->enabled = 0; /* something keeps breaking capture: stop trying */
        return 1;
    }
    g->mode = G_OFF;
    return rc;
}

extern "C" void be_cuda_set_graphs(be_backend *be, int on)
{
    cuda_be *b = cb_of(be);
    b->g.enabled = b->ctx.sw.graphs = on != 0;
    b->g.failures = 0;
}

extern "C" int be_cuda_tune(be_backend *be, const char *settings)
{
    cuda_be *b = cb_of(be);
    cuda_switches sw = settings ? b->ctx.sw : cuda_switches_from_env(b->ctx.cc_major);
    int rc = 0;
    for (const char *p = settings; p && *p;) {
        p += strspn(p, " ");
        const size_t n = strcspn(p, " ");
        if (!n) break;
        char kv[64];
        snprintf(kv, sizeof kv, "%.*s", (int)(n < 63 ? n : 63), p);
        p += n;
        char *eq = strchr(kv, '=');
        if (!eq || (strcmp(eq + 1, "0") && strcmp(eq + 1, "1"))) {
            rc = -1;
            continue;
        }
        *eq = 0;
        const int v = eq[1] == '1';
        if (!strcmp(kv, "fuse")) sw.fuse = v;
        else if (!strcmp(kv, "graphs")) sw.graphs = v;
        else if (!strcmp(kv, "int8")) sw.int8 = v;
        else if (!strcmp(kv, "generic")) sw.hopper = !v;
        else if (!strcmp(kv, "nt")) sw.nt = v;
        else if (!strcmp(kv, "tc")) sw.tc = v;
        else rc = -1;
    }
    cuda_ctx_set_switches(&b->ctx, sw);
    be_cuda_set_graphs(be, b->ctx.sw.graphs);
    b->ctx.epoch++; /* captured graphs hold the old kernels and launches */
    return rc;
}

extern "C" void be_cuda_graph_stats(be_backend *be, long *captured, long *replayed, long *redone)
{
    cuda_be *b = (cuda_be *)be->impl;
    *captured = b->g.captured;
    *replayed = b->g.replayed;
    *redone = b->g.redone;
}

extern "C" void be_cuda_graph_host_ms(be_backend *be, double *walk_ms, double *launch_ms)
{
    cuda_be *b = (cuda_be *)be->impl;
    *walk_ms = b->g.walk_s * 1e3;
    *launch_ms = b->g.launch_s * 1e3;
}
