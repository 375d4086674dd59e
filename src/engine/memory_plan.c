/* Memory plan: the arithmetic of what a model takes to serve (memory_plan.h). */
#include "engine/memory_plan.h"

#include <stdio.h>
#include <string.h>

#include "util/sysinfo.h"
#include "util/units.h"
#ifdef WICK_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define MIN_FIT_CTX 256        /* below this no chat prompt fits: refuse rather than serve a toy context */
#define MARGIN_MIN ((uint64_t)512 << 20)

void eng_mem_options_default(eng_mem_options *o)
{
    memset(o, 0, sizeof *o);
    o->device = ENG_DEVICE_CPU;
    o->kv_type = BE_KV_F16;
    o->n_ctx = 4096;
    o->n_ubatch = 512;
    o->n_parallel = 1;
}

void eng_mem_options_of(eng_mem_options *o, const eng_options *e)
{
    eng_mem_options_default(o);
    o->device = e->device;
    o->gpu = e->gpu;
    o->split = e->split;
    o->kv_type = e->kv_type;
    if (e->n_ctx > 0) o->n_ctx = e->n_ctx;
    if (e->n_ubatch > 0) o->n_ubatch = e->n_ubatch;
    if (e->n_seq > 0) o->n_parallel = e->n_seq;
}

/* a += b and a × b that set *bad instead of wrapping */
static int add_to(uint64_t *a, uint64_t b, int *bad)
{
    if (__builtin_add_overflow(*a, b, a)) *bad = 1;
    return *bad;
}

static uint64_t mul(uint64_t a, uint64_t b, int *bad)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        *bad = 1;
        return UINT64_MAX;
    }
    return r;
}

uint64_t eng_mem_kv_bytes_per_token(const model *m, int32_t kv_type)
{
    const model_hparams *hp = &m->hp;
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v; /* K and V rows share one stride */
    int bad = 0;
    uint64_t b = mul(mul(2 * sizeof(uint16_t), be_kv_row_units(kv_type, d), &bad), hp->n_head_kv, &bad);
    b = mul(b, hp->n_attn_layers, &bad);
    return bad ? UINT64_MAX : b;
}

uint64_t eng_mem_state_bytes(const model *m)
{
    int bad = 0;
    uint64_t per_layer = 0;
    add_to(&per_layer, model_conv_elems(m), &bad);
    add_to(&per_layer, model_ssm_elems(m), &bad);
    uint64_t b = mul(mul(per_layer, sizeof(float), &bad), m->hp.n_rec_layers, &bad);
    return bad ? UINT64_MAX : b;
}

static uint64_t weight_bytes(const model *m, int *bad)
{
    uint64_t total = 0;
    for (size_t i = 0; i < gguf_tensor_count(m->file); i++) add_to(&total, gguf_tensor_at(m->file, i)->n_bytes, bad);
    return total;
}

int eng_mem_plan_compute(const model *m, const eng_mem_options *o, eng_mem_plan *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    if (o->n_ctx < 1) return wk_fail(err, WK_EINVAL, "memory plan: context %d < 1", o->n_ctx);
    if (o->kv_type != BE_KV_F16 && o->kv_type != BE_KV_Q8_0)
        return wk_fail(err, WK_EINVAL, "memory plan: unknown KV cache type %d", o->kv_type);
    const uint64_t n_seq = o->n_parallel > 0 ? (uint64_t)o->n_parallel : 1;
    int32_t ub = o->n_ubatch > 0 ? o->n_ubatch : 512;
    if (ub > o->n_ctx) ub = o->n_ctx; /* eng_ctx_new clamps the same way */
    int bad = 0;
    out->n_ctx = o->n_ctx;
    out->n_seq = (int32_t)n_seq;
    out->weight_bytes = weight_bytes(m, &bad);
    out->aux_bytes = o->aux_bytes;
    out->kv_bytes_per_token = eng_mem_kv_bytes_per_token(m, o->kv_type);
    const uint64_t state = eng_mem_state_bytes(m);
    if (out->kv_bytes_per_token == UINT64_MAX || state == UINT64_MAX) bad = 1; /* the helpers' overflow mark */
    out->kv_bytes = mul(mul(out->kv_bytes_per_token, (uint64_t)o->n_ctx, &bad), n_seq, &bad);
    out->ids_bytes = mul((uint64_t)o->n_ctx * sizeof(int32_t), n_seq, &bad);
    out->state_bytes = mul(state, n_seq, &bad);
    out->ckpt_bytes = o->ckpt_bytes;
    /* a step holds a chunk and one token of every other sequence (eng_options.n_seq) */
    out->scratch_bytes = (uint64_t)model_scratch_bytes(m, ub + (int32_t)n_seq - 1) + (uint64_t)m->hp.n_vocab * sizeof(float);
    uint64_t t = 0;
    add_to(&t, out->weight_bytes, &bad);
    add_to(&t, out->aux_bytes, &bad);
    add_to(&t, out->kv_bytes, &bad);
    add_to(&t, out->ids_bytes, &bad);
    add_to(&t, out->state_bytes, &bad);
    add_to(&t, out->ckpt_bytes, &bad);
    add_to(&t, out->scratch_bytes, &bad);
    out->total_bytes = t;
    if (bad) return wk_fail(err, WK_ERANGE, "memory plan: sizes overflow 64 bits at context %d", o->n_ctx);
    return WK_OK;
}

/* Context rounded down to a whole block: round numbers for people (and
 * nothing in the engine needs more than positions). */
static int32_t round_ctx(int64_t n)
{
    int64_t g = n >= 8192 ? 1024 : MIN_FIT_CTX;
    return (int32_t)(n / g * g);
}

void eng_mem_plan_describe(const eng_mem_plan *p, int32_t kv_type, char *buf, size_t cap)
{
    char w[32], a[32], kv[32], st[32], ck[32], sc[32], tot[32];
    size_t n = (size_t)snprintf(buf, cap, "weights %s", wk_format_bytes(w, sizeof w, p->weight_bytes));
    if (p->aux_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + aux %s", wk_format_bytes(a, sizeof a, p->aux_bytes));
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + KV %s at %s", wk_format_bytes(kv, sizeof kv, p->kv_bytes + p->ids_bytes),
                              kv_type == BE_KV_Q8_0 ? "q8_0" : "f16");
    if (p->n_seq > 1 && n < cap) n += (size_t)snprintf(buf + n, cap - n, " for %d sequences", p->n_seq);
    if (p->state_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + state %s", wk_format_bytes(st, sizeof st, p->state_bytes));
    if (p->ckpt_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + checkpoints %s", wk_format_bytes(ck, sizeof ck, p->ckpt_bytes));
    if (n < cap)
        snprintf(buf + n, cap - n, " + scratch %s = %s", wk_format_bytes(sc, sizeof sc, p->scratch_bytes),
                 wk_format_bytes(tot, sizeof tot, p->total_bytes));
}

int eng_mem_fit_context(const model *m, const eng_mem_options *o, uint64_t budget_bytes, int32_t max_ctx,
                        eng_mem_plan *out, wk_error *err)
{
    if (max_ctx < 1) return wk_fail(err, WK_EINVAL, "memory plan: largest context %d < 1", max_ctx);
    eng_mem_options q = *o;
    q.n_ctx = max_ctx;
    int rc = eng_mem_plan_compute(m, &q, out, err);
    if (rc && rc != WK_ERANGE) return rc;
    if (rc == 0 && out->total_bytes <= budget_bytes) return WK_OK;
    /* the smallest context worth serving must fit */
    q.n_ctx = MIN_FIT_CTX < max_ctx ? MIN_FIT_CTX : max_ctx;
    if ((rc = eng_mem_plan_compute(m, &q, out, err))) return rc;
    if (out->total_bytes > budget_bytes) {
        char plan[320], b[32];
        eng_mem_plan_describe(out, q.kv_type, plan, sizeof plan);
        return wk_fail(err, WK_ERANGE, "not even %d tokens of context fit %s: %s", q.n_ctx,
                       wk_format_bytes(b, sizeof b, budget_bytes), plan);
    }
    /* the total grows with the context (scratch too, while n_ubatch is clamped
     * to it): bisect for the largest that fits, in [lo, max_ctx) */
    int32_t lo = q.n_ctx, hi = max_ctx;
    while (hi - lo > 1) {
        q.n_ctx = lo + (hi - lo) / 2;
        rc = eng_mem_plan_compute(m, &q, out, err);
        if (rc && rc != WK_ERANGE) return rc;
        if (rc == 0 && out->total_bytes <= budget_bytes) lo = q.n_ctx;
        else hi = q.n_ctx;
    }
    int32_t fit = round_ctx(lo);
    q.n_ctx = fit > MIN_FIT_CTX ? fit : lo;
    return eng_mem_plan_compute(m, &q, out, err);
}

int eng_mem_free(int32_t device, int32_t gpu, uint64_t *free_bytes, uint64_t *total_bytes, wk_error *err)
{
    if (device == ENG_DEVICE_CUDA) {
#ifdef WICK_HAVE_CUDA
        if (be_cuda_device_memory(gpu, free_bytes, total_bytes, NULL, 0))
            return wk_fail(err, WK_EIO, "cuda:%d: cannot read the GPU's free memory (no such device or no driver)", gpu);
        return WK_OK;
#else
        (void)gpu;
        return wk_fail(err, WK_EUNSUPPORTED, "this wick was built without CUDA");
#endif
    }
    return wk_mem_info(free_bytes, total_bytes, err);
}

uint64_t eng_mem_default_budget(uint64_t free_bytes)
{
    uint64_t margin = free_bytes / 10 > MARGIN_MIN ? free_bytes / 10 : MARGIN_MIN;
    return free_bytes > margin ? free_bytes - margin : 0;
}

bool eng_mem_gpu_budgeted(const eng_mem_options *o)
{
    return o->device == ENG_DEVICE_CUDA && (o->split.n > 1 || o->split.gpu_mem);
}

int32_t eng_mem_gpu_budgets(const eng_mem_options *o, uint64_t *budget, uint64_t *free_bytes)
{
    const int32_t n = o->split.n > 1 ? o->split.n : 1;
    for (int32_t p = 0; p < n; p++) {
        const int32_t gpu = n > 1 ? o->split.gpus[p] : o->gpu;
        int32_t k = 0;
        for (int32_t q = 0; q < n; q++) k += (n > 1 ? o->split.gpus[q] : o->gpu) == gpu;
        uint64_t t = 0, cap = o->split.gpu_mem;
        wk_error ignored = {0};
        free_bytes[p] = 0;
        if (eng_mem_free(ENG_DEVICE_CUDA, gpu, &free_bytes[p], &t, &ignored) == 0) {
            const uint64_t b = eng_mem_default_budget(free_bytes[p]);
            if (!cap || b < cap) cap = b;
        }
        budget[p] = cap / (uint64_t)k;
    }
    return n;
}

int eng_mem_default_context(const model *m, const eng_mem_options *o, uint64_t budget_bytes, int32_t max_ctx,
                            eng_mem_plan *out, char *why, size_t why_cap, wk_error *err)
{
    if (max_ctx <= 0) max_ctx = 4096;
    uint64_t free_b = 0, total_b = 0;
    const bool given = budget_bytes != 0;
    char budget[96], fb[32], bb[32], plan[320];
    if (!given && eng_mem_gpu_budgeted(o)) {
        uint64_t caps[ENG_MAX_SPLIT], frees[ENG_MAX_SPLIT];
        const int32_t n = eng_mem_gpu_budgets(o, caps, frees);
        for (int32_t p = 0; p < n; p++) budget_bytes += caps[p];
        if (!budget_bytes)
            return wk_fail(err, WK_EIO, "cuda:%d: cannot read the GPU's free memory (no such device or no driver)",
                           o->gpu);
        snprintf(budget, sizeof budget, "%d GPU entr%s%s (budget %s)", n, n == 1 ? "y" : "ies",
                 o->split.gpu_mem ? " under --gpu-mem" : "", wk_format_bytes(bb, sizeof bb, budget_bytes));
    } else if (!given) {
        int rc = eng_mem_free(o->device, o->gpu, &free_b, &total_b, err);
        if (rc) return rc;
        budget_bytes = eng_mem_default_budget(free_b);
        snprintf(budget, sizeof budget, "%s free (budget %s)", wk_format_bytes(fb, sizeof fb, free_b),
                 wk_format_bytes(bb, sizeof bb, budget_bytes));
    } else {
        snprintf(budget, sizeof budget, "--mem %s", wk_format_bytes(bb, sizeof bb, budget_bytes));
    }
    int rc = eng_mem_fit_context(m, o, budget_bytes, max_ctx, out, err);
    if (rc) {
        if (!given) wk_fail_prefix(err, "%s", budget); /* the fit's message names the budget, not where it came from */
        return rc;
    }
    if (why && why_cap) {
        eng_mem_plan_describe(out, o->kv_type, plan, sizeof plan);
        snprintf(why, why_cap, "context %d tokens: trained %d, %s %s; %s", out->n_ctx, max_ctx,
                 out->n_ctx == max_ctx ? "fits" : "reduced to fit", budget, plan);
    }
    return WK_OK;
}
