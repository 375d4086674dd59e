/* Inference context and the prefill/decode driver. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/engine_impl.h"
#include "engine/memory_plan.h"
#include "engine/placement.h"
#include "util/argmax.h"
#include "util/checked.h"
#include "util/units.h"
#ifdef WICK_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

void eng_options_default(eng_options *o)
{
    memset(o, 0, sizeof *o);
    o->n_threads = 0;
    o->n_ctx = 4096;
    o->n_ubatch = 512;
    o->n_seq = 1;
    o->device = ENG_DEVICE_CPU;
    o->gpu = 0;
}

bool eng_have_cuda(void)
{
#ifdef WICK_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

const char *eng_device_name(int32_t device) { return device == ENG_DEVICE_CUDA ? "cuda" : "cpu"; }

static int no_cuda(wk_error *err)
{
    return wk_fail(err, WK_EUNSUPPORTED,
                   "this wick was built without CUDA (--device cuda); rebuild with cmake -DWICK_CUDA=ON on a "
                   "machine with the CUDA toolkit, or use --device cpu");
}

/* One CUDA ordinal of a --device list: digits up to ',' or the end; -1 if bad. */
static long gpu_number(const char *p, const char **end)
{
    char *e = NULL;
    long n = strtol(p, &e, 10);
    *end = e;
    return e == p || (*e && *e != ',') || n < 0 || n > 255 || *p == '-' || *p == '+' ? -1 : n;
}

int eng_device_parse(const char *s, int32_t *device, int32_t *gpu, eng_split_opts *split, wk_error *err)
{
    if (!s) return wk_fail(err, WK_EINVAL, "--device: missing value (cpu or cuda)");
    if (!strcmp(s, "cpu")) {
        *device = ENG_DEVICE_CPU;
        *gpu = 0;
        split->n = 1;
        split->gpus[0] = 0;
        return 0;
    }
    if (strncmp(s, "cuda", 4) || (s[4] && s[4] != ':'))
        return wk_fail(err, WK_EINVAL, "--device: unknown device '%s' (cpu, cuda, cuda:N or cuda:N,M,...)", s);
    int32_t ids[ENG_MAX_SPLIT] = {0}, n = 1;
    if (s[4] == ':') {
        n = 0;
        for (const char *p = s + 5;; p++) {
            const char *end;
            long id = gpu_number(p, &end);
            if (id < 0) return wk_fail(err, WK_EINVAL, "--device: bad GPU number in '%s' (cuda:N or cuda:N,M,..., N >= 0)", s);
            if (n == ENG_MAX_SPLIT)
                return wk_fail(err, WK_EINVAL, "--device: '%s' lists more than %d GPUs", s, ENG_MAX_SPLIT);
            ids[n++] = (int32_t)id;
            if (!*end) break;
            p = end;
        }
    }
    if (!eng_have_cuda()) return no_cuda(err);
    *device = ENG_DEVICE_CUDA;
    *gpu = ids[0];
    split->n = n;
    memcpy(split->gpus, ids, sizeof ids);
    return 0;
}

int eng_split_parse(const char *s, eng_split_opts *split, wk_error *err)
{
    if (s && !strcmp(s, "layer")) split->mode = ENG_SPLIT_LAYER;
    else if (s && !strcmp(s, "tensor")) split->mode = ENG_SPLIT_TENSOR;
    else return wk_fail(err, WK_EINVAL, "--split: '%s' is not layer or tensor", s ? s : "");
    return 0;
}

bool eng_have_nccl(void)
{
#ifdef WICK_HAVE_CUDA
    return be_cuda_nccl_version() > 0;
#else
    return false;
#endif
}

int eng_split_check(int32_t device, const eng_split_opts *split, wk_error *err)
{
    if (split->mode == ENG_SPLIT_TENSOR) {
        if (!eng_have_nccl())
            return wk_fail(err, WK_EUNSUPPORTED,
                           "--split tensor: this wick was built without NCCL (the all-reduce of a tensor split); "
                           "use --split layer");
        return wk_fail(err, WK_EUNSUPPORTED,
                       "--split tensor: not implemented yet (this build links NCCL); use --split layer");
    }
    (void)device; /* a layer split runs on CUDA GPUs, and on CPU backends in tests */
    return 0;
}

uint64_t eng_policy_fingerprint(const be_attn_policy *p)
{
    if (!p || !p->approx) return 0x64656e7365ull; /* "dense": every dense policy computes the same KV */
    int32_t f[5] = {1, p->global, p->window, p->dense_tail, p->dense_tail_continue};
    return XXH3_64bits(f, sizeof f);
}

const char *eng_part_name(const eng_ctx *c, int32_t p, char *buf, size_t cap)
{
    if (c->opt.device == ENG_DEVICE_CUDA) snprintf(buf, cap, "cuda:%d", c->parts[p].gpu);
    else snprintf(buf, cap, "cpu part %d", p);
    return buf;
}

uint64_t eng_gpu_held(const eng_ctx *c, int32_t gpu)
{
    uint64_t held = 0;
    for (int32_t p = 0; p < c->n_parts; p++)
        if (c->parts[p].gpu == gpu) held = wk_sat_add(held, c->parts[p].held_bytes);
    return held;
}

/* Where the layers go and whether the weights and scratch of each GPU fit --gpu-mem. */
static int place_parts(eng_ctx *c, wk_error *err)
{
    const eng_options *o = &c->opt;
    const int32_t n = o->split.n > 1 ? o->split.n : 1;
    eng_mem_options mo;
    eng_mem_options_of(&mo, o);
    /* balanced against what each GPU may hold, as wick check does; the CPU by bytes alone */
    uint64_t caps[ENG_MAX_SPLIT], free_b[ENG_MAX_SPLIT];
    bool all = o->device == ENG_DEVICE_CUDA;
    if (all) {
        eng_mem_gpu_budgets(&mo, caps, free_b);
        for (int32_t p = 0; p < n; p++) all &= caps[p] != 0;
    }
    eng_placement pl;
    int rc = eng_placement_compute(c->src, &mo, all ? caps : NULL, &pl, err);
    if (rc) return rc;
    c->n_parts = n;
    for (int32_t p = 0; p < n; p++) {
        eng_part *part = &c->parts[p];
        part->first = pl.dev[p].layer_first;
        part->end = pl.dev[p].layer_end;
        part->gpu = pl.dev[p].gpu;
        part->held_bytes = pl.dev[p].weight_bytes + pl.dev[p].scratch_bytes;
    }
    if (!o->split.gpu_mem) return 0;
    for (int32_t p = 0; p < n; p++) {
        const uint64_t held = eng_gpu_held(c, c->parts[p].gpu);
        if (held <= o->split.gpu_mem) continue;
        char name[32], w[32], sc[32], tot[32], cap[32];
        uint64_t wb = 0, sb = 0;
        for (int32_t q = 0; q < n; q++)
            if (pl.dev[q].gpu == c->parts[p].gpu) wb += pl.dev[q].weight_bytes, sb += pl.dev[q].scratch_bytes;
        return wk_fail(err, WK_ENOMEM, "%s: weights %s + scratch %s = %s (layers %u-%u%s) do not fit --gpu-mem %s",
                       eng_part_name(c, p, name, sizeof name), wk_format_bytes(w, sizeof w, wb),
                       wk_format_bytes(sc, sizeof sc, sb), wk_format_bytes(tot, sizeof tot, held), c->parts[p].first,
                       c->parts[p].end - 1, n > 1 ? " of a layer split" : "", wk_format_bytes(cap, sizeof cap, o->split.gpu_mem));
    }
    return 0;
}

int eng_ctx_new(eng_ctx **out, const model *m, const eng_options *o, wk_error *err)
{
    *out = NULL;
    eng_options opt;
    if (o)
        opt = *o;
    else
        eng_options_default(&opt);
    if (opt.n_ctx <= 0) opt.n_ctx = 4096;
    if (opt.n_ubatch <= 0) opt.n_ubatch = 512;
    if (opt.n_ubatch > opt.n_ctx) opt.n_ubatch = opt.n_ctx;
    if (opt.split.n > ENG_MAX_SPLIT) return wk_fail(err, WK_EINVAL, "context: %d devices (at most %d)", opt.split.n, ENG_MAX_SPLIT);
    if (opt.split.n > 1) opt.gpu = opt.split.gpus[0];
    if (opt.n_seq <= 0) opt.n_seq = 1;
    if (opt.n_seq > ENG_MAX_SEQ) return wk_fail(err, WK_EINVAL, "context: %d sequences per step (at most %d)", opt.n_seq, ENG_MAX_SEQ);
    eng_ctx *c = calloc(1, sizeof *c);
    if (!c) return wk_fail(err, WK_ENOMEM, "context: out of memory");
    c->src = m;
    c->m = m; /* until the prepared copy exists */
    c->opt = opt;
    if (opt.kv_type != BE_KV_F16 && opt.kv_type != BE_KV_Q8_0) {
        free(c);
        return wk_fail(err, WK_EINVAL, "context: unknown KV cache type %d", opt.kv_type);
    }
    if (opt.kv_type == BE_KV_Q8_0 && (m->hp.d_k % 32 || m->hp.d_v % 32)) {
        free(c);
        return wk_fail(err, WK_EINVAL, "context: a Q8_0 KV cache needs head dims divisible by 32 (model has %u, %u)",
                       m->hp.d_k, m->hp.d_v);
    }
    if (opt.device != ENG_DEVICE_CPU && opt.device != ENG_DEVICE_CUDA) {
        free(c);
        return wk_fail(err, WK_EINVAL, "context: unknown device %d", opt.device);
    }
    int rc = eng_split_check(opt.device, &opt.split, err);
    if (!rc) rc = place_parts(c, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->policy_fp = eng_ctx_fingerprint(c);
    be_backend *bes[ENG_MAX_SPLIT] = {0};
    uint32_t first[ENG_MAX_SPLIT + 1];
    for (int32_t p = 0; p < c->n_parts; p++) {
        eng_part *part = &c->parts[p];
        if (opt.device == ENG_DEVICE_CUDA) {
#ifdef WICK_HAVE_CUDA
            rc = be_cuda_new(&part->be, part->gpu, err);
#else
            rc = no_cuda(err);
#endif
        } else {
            rc = be_cpu_new(&part->be, opt.n_threads, err);
        }
        if (rc) goto fail;
        bes[p] = part->be;
        first[p] = part->first;
    }
    first[c->n_parts] = m->hp.n_layer;
    c->be = c->parts[0].be;
    c->opt.n_threads = be_cpu_threads(c->be);
    rc = model_prepare(&c->prepared, m, bes, first, c->n_parts, err);
    if (rc) goto fail;
    c->m = &c->prepared;
    /* rows of a step: a prompt chunk plus one token of every other sequence */
    for (int32_t p = 0; p < c->n_parts; p++) {
        rc = model_scratch_new(&c->parts[p].scratch, m, c->parts[p].be, opt.n_ubatch + opt.n_seq - 1, err);
        if (!rc && p > 0) rc = model_scratch_link(m, c->parts[p - 1].scratch, c->parts[p].scratch, c->parts[p].first, err);
        if (rc) goto fail;
    }
    c->scratch = c->parts[0].scratch;
    c->logits = be_host_alloc(eng_out_backend(c), sizeof(float) * m->hp.n_vocab);
    if (!c->logits) {
        rc = wk_fail(err, WK_ENOMEM, "context: out of memory");
        goto fail;
    }
    *out = c;
    return 0;
fail:
    eng_ctx_free(c);
    return rc;
}

void eng_ctx_free(eng_ctx *c)
{
    if (!c) return;
    be_backend *bes[ENG_MAX_SPLIT] = {0};
    uint32_t first[ENG_MAX_SPLIT + 1];
    for (int32_t p = 0; p < c->n_parts; p++) {
        model_scratch_free(c->parts[p].scratch);
        bes[p] = c->parts[p].be;
        first[p] = c->parts[p].first;
    }
    first[c->n_parts] = c->src->hp.n_layer;
    if (c->m == &c->prepared) model_release_prepared(&c->prepared, bes, first, c->n_parts);
    if (c->n_parts > 0) be_host_free(eng_out_backend(c), c->logits);
    for (int32_t p = 0; p < c->n_parts; p++) be_free(c->parts[p].be);
    free(c->logits_all);
    free(c->hidden);
    free(c);
}

const model *eng_ctx_model(const eng_ctx *c) { return c->src; }
be_backend *eng_ctx_backend(eng_ctx *c) { return c->be; }
int32_t eng_ctx_parts(const eng_ctx *c) { return c->n_parts; }

int32_t eng_ctx_layer_part(const eng_ctx *c, uint32_t il)
{
    int32_t p = 0;
    while (p + 1 < c->n_parts && il >= c->parts[p + 1].first) p++;
    return p;
}

be_backend *eng_ctx_layer_backend(eng_ctx *c, uint32_t il) { return c->parts[eng_ctx_layer_part(c, il)].be; }

void eng_ctx_part_layers(const eng_ctx *c, int32_t p, uint32_t *first, uint32_t *end, int32_t *gpu)
{
    *first = c->parts[p].first;
    *end = c->parts[p].end;
    *gpu = c->parts[p].gpu;
}
const eng_options *eng_ctx_options(const eng_ctx *c) { return &c->opt; }
int32_t eng_n_vocab(const eng_ctx *c) { return (int32_t)c->m->hp.n_vocab; }

void eng_ctx_set_policy(eng_ctx *c, const be_attn_policy *p)
{
    if (p)
        c->opt.policy = *p;
    else
        memset(&c->opt.policy, 0, sizeof c->opt.policy);
    c->policy_fp = eng_ctx_fingerprint(c);
}

uint64_t eng_ctx_fingerprint(const eng_ctx *c)
{
    uint64_t fp = eng_policy_fingerprint(&c->opt.policy);
    if (c->opt.kv_type != BE_KV_F16) fp ^= 0x9e3779b97f4a7c15ull * (uint64_t)(c->opt.kv_type + 1);
    return fp;
}

uint64_t eng_kv_bytes_per_token(const eng_ctx *c) { return eng_mem_kv_bytes_per_token(c->m, c->opt.kv_type); }

static bool cancelled(const eng_prefill_opts *o)
{
    if (!o) return false;
    if (o->cancel_flag && atomic_load(o->cancel_flag)) return true;
    return o->cancel && o->cancel(o->user);
}

/* The call-level policy's dense_tail counts the chunk's queries inside the tail. */
const be_attn_policy *eng_chunk_policy(const be_attn_policy *p, int32_t span0, int32_t span1, int32_t pos,
                                          int32_t nt, be_attn_policy *out)
{
    if (!p->approx) return NULL;
    int32_t tail = span0 == 0 ? p->dense_tail : p->dense_tail_continue;
    int32_t dense_from = span1 - (tail > 0 ? tail : 0);
    if (pos >= dense_from) return NULL;
    *out = *p;
    out->dense_tail = pos + nt > dense_from ? pos + nt - dense_from : 0;
    out->dense_tail_continue = 0;
    return out;
}

/* Room for rows of every token of a batch of n (logits from row first on, hidden states of all). */
static int reserve_rows(eng_ctx *c, int32_t n_logits, int32_t n_hidden, wk_error *err)
{
    const size_t V = c->m->hp.n_vocab, E = c->m->hp.n_embd;
    if (c->logits_all_cap < n_logits) {
        float *p = realloc(c->logits_all, sizeof(float) * V * (size_t)n_logits);
        if (!p) return wk_fail(err, WK_ENOMEM, "prefill: out of memory for %d rows of logits", n_logits);
        c->logits_all = p;
        c->logits_all_cap = n_logits;
    }
    if (c->hidden_cap < n_hidden) {
        float *p = realloc(c->hidden, sizeof(float) * E * (size_t)n_hidden);
        if (!p) return wk_fail(err, WK_ENOMEM, "prefill: out of memory for %d hidden rows", n_hidden);
        c->hidden = p;
        c->hidden_cap = n_hidden;
    }
    return 0;
}

/* How a call of prefill_run hands back its results. */
typedef struct run_rows {
    bool decode;     /* a decode step (dense attention, may be recorded) */
    int32_t *greedy; /* decode only: the last token's logits stay where they are, their argmax comes back */
    int32_t first;   /* all_logits: rows [first, n) only (one chunk) */
    bool hidden;     /* every row's final-normed hidden state into c->hidden (one chunk) */
    bool own_logits; /* the last row's logits into the sequence's own buffer (s->logits), not c->logits */
} run_rows;

/* One chunk through model_forward_rows; decode steps (one token, drafts to verify) may
 * be recorded and replayed by the backend (CUDA graphs). */
static int forward_alone(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t nt, const model_rows *out,
                         const be_attn_policy *pol, bool decode, wk_error *err)
{
    const int32_t pos = s->st.n_past;
    /* not across the parts of a split: a part whose replay failed would have the pass run
     * again after the parts before it already advanced their recurrent state */
    const bool step = decode && c->n_parts == 1;
    if (step) be_step_begin(c->be, &(be_step_seq){s, pos, nt}, 1);
    int rc = model_forward_rows(c->m, c->be, c->scratch, &s->st, tokens, nt, out, pol, err);
    if (c->fail_after > 0 && --c->fail_after == 0 && !rc)
        rc = wk_fail(err, WK_EIO, "injected failure (eng_ctx_fail_after) at position %d", pos);
    if (step && be_step_end(c->be, rc) > 0) { /* the recording could not run it: op by op */
        s->st.n_past = pos;
        rc = model_forward_rows(c->m, c->be, c->scratch, &s->st, tokens, nt, out, pol, err);
    }
    /* asynchronous backends keep the first error of their void ops (norms, copies) */
    for (int32_t p = 0; p < c->n_parts && !rc; p++) rc = be_status(c->parts[p].be, err);
    return rc;
}

static int prefill_run(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t n, const eng_prefill_opts *opts,
                       const run_rows *rr, wk_error *err)
{
    const size_t V = c->m->hp.n_vocab;
    const bool decode = rr->decode;
    int32_t *greedy = rr->greedy;
    if (n <= 0) return wk_fail(err, WK_EINVAL, "prefill: no tokens");
    if ((int64_t)s->st.n_past + n > s->st.n_ctx)
        return wk_fail(err, WK_ERANGE, "prefill: %d + %d tokens exceed the context of %d", s->st.n_past, n,
                       s->st.n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= V)
            return wk_fail(err, WK_EINVAL, "prefill: token id %d at index %d outside the vocabulary (%zu)",
                           tokens[i], i, V);
    const bool all = opts && opts->all_logits;
    const int32_t first = all ? rr->first : 0;
    const bool hook = opts && opts->hidden;
    const int32_t ub = c->opt.n_ubatch;
    if ((first > 0 || rr->hidden) && n > ub)
        return wk_fail(err, WK_EINVAL, "prefill: %d tokens with row selection exceed one batch of %d", n, ub);
    int rc = reserve_rows(c, all ? n - first : 0, rr->hidden || hook ? (n < ub ? n : ub) : 0, err);
    if (rc) return rc;
    c->logits_all_rows = 0;
    c->hidden_rows = 0;
    if (s->st.n_past == 0) s->policy_fp = c->policy_fp;
    /* a joined sequence's chunks meet the others' in the scheduler's steps (sched.h) */
    const bool batched = c->sched && c->opt.n_seq > 1 && s->sched_joined && !all && !rr->hidden && !hook;
    int32_t span0 = s->st.n_past, span1 = s->st.n_past + n;
    if (opts && opts->span_end > 0) {
        span0 = opts->span_start;
        span1 = opts->span_end;
    }
    for (int32_t done = 0; done < n;) {
        if (cancelled(opts)) return wk_fail(err, WK_ECANCELLED, "prefill cancelled after %d of %d tokens", done, n);
        int32_t nt = n - done < ub ? n - done : ub;
        bool last = done + nt == n;
        model_rows out = {
            .mode = all ? MODEL_LOGITS_ALL : !last ? MODEL_LOGITS_NONE : greedy ? MODEL_LOGITS_ARGMAX : MODEL_LOGITS_LAST,
            .first = first,
            .logits = all ? c->logits_all + (size_t)done * V : rr->own_logits ? s->logits : c->logits,
            .hidden = rr->hidden || hook ? c->hidden : NULL,
        };
        int32_t pos = s->st.n_past;
        be_attn_policy call_policy;
        const be_attn_policy *pol = decode ? NULL : eng_chunk_policy(&c->opt.policy, span0, span1, pos, nt, &call_policy);
        if (batched) {
            const eng_step_item item = {.seq = s, .tokens = tokens + done, .n = nt, .prefill = !decode,
                                        .span_start = span0, .span_end = span1, .logits = last};
            rc = eng_sched_forward(c->sched, &item, opts ? opts->cancel_flag : NULL, err);
            /* a step leaves them in s->logits: copied for eng_logits() unless not wanted there */
            if (!rc && last && !rr->own_logits && !greedy) memcpy(c->logits, s->logits, sizeof(float) * V);
        } else {
            rc = forward_alone(c, s, tokens + done, nt, &out, pol, decode, err);
        }
        if (rc) {
            /* the chunk did not happen as far as the position goes; what it wrote into the KV and
             * the recurrent state is not to be trusted (callers fall back to a checkpoint) */
            s->st.n_past = pos;
            return rc;
        }
        memcpy(s->tokens + pos, tokens + done, sizeof(int32_t) * (size_t)nt);
        done += nt;
        if (all) c->logits_all_rows = done - first;
        if (rr->hidden) c->hidden_rows = nt;
        if (hook) opts->hidden(opts->hidden_user, pos, nt, c->hidden);
        if (opts && opts->progress) opts->progress(opts->user, done, n);
    }
    if (greedy) {
        float logit;
        *greedy = batched ? wk_argmax_f32(s->logits, (int32_t)V) : model_scratch_argmax(c->scratch, &logit);
        if (batched) logit = *greedy >= 0 ? s->logits[*greedy] : 0.0f;
        if (*greedy >= 0 && logit == -INFINITY) *greedy = -1; /* as eng_sampler_sample */
    }
    if (all) memcpy(c->logits, c->logits_all + (size_t)(n - 1 - first) * V, sizeof(float) * V);
    return 0;
}

int eng_prefill(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t n, const eng_prefill_opts *opts,
                wk_error *err)
{
    const run_rows rr = {0};
    return prefill_run(c, s, tokens, n, opts, &rr, err);
}

int eng_decode(eng_ctx *c, eng_seq *s, int32_t token, wk_error *err)
{
    const run_rows rr = {.decode = true}; /* decode is always dense */
    return prefill_run(c, s, &token, 1, NULL, &rr, err);
}

int eng_decode_own(eng_ctx *c, eng_seq *s, int32_t token, wk_error *err)
{
    int rc = eng_seq_logits_alloc(c, s, err);
    if (rc) return rc;
    const run_rows rr = {.decode = true, .own_logits = true};
    return prefill_run(c, s, &token, 1, NULL, &rr, err);
}

int eng_decode_greedy(eng_ctx *c, eng_seq *s, int32_t token, int32_t *next, wk_error *err)
{
    *next = -1;
    const run_rows rr = {.decode = true, .greedy = next};
    return prefill_run(c, s, &token, 1, NULL, &rr, err);
}

int eng_decode_rows(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t n, int32_t first, bool hidden,
                    wk_error *err)
{
    if (first < 0 || first >= n)
        return wk_fail(err, WK_EINVAL, "decode rows: first row %d outside a batch of %d", first, n);
    const eng_prefill_opts po = {.all_logits = true};
    const run_rows rr = {.decode = true, .first = first, .hidden = hidden};
    return prefill_run(c, s, tokens, n, &po, &rr, err);
}

const float *eng_logits(const eng_ctx *c) { return c->logits; }

int32_t eng_exact_batch(const eng_ctx *c) { return c->be->ops->exact_rows; }

void eng_ctx_fail_after(eng_ctx *c, int32_t n) { c->fail_after = n > 0 ? n : 0; }

const float *eng_logits_all(const eng_ctx *c, int32_t *n_rows)
{
    if (n_rows) *n_rows = c->logits_all_rows;
    return c->logits_all;
}

const float *eng_hidden_all(const eng_ctx *c, int32_t *n_rows)
{
    if (n_rows) *n_rows = c->hidden_rows;
    return c->hidden;
}

const char *eng_ctx_where(const eng_ctx *c, char *buf, size_t cap)
{
    if (c->opt.device != ENG_DEVICE_CUDA) {
        snprintf(buf, cap, "cpu");
        return buf;
    }
    size_t n = 0;
    buf[0] = '\0';
    for (int32_t p = 0; p < c->n_parts && n < cap; p++) {
        if (c->n_parts == 1) n += (size_t)snprintf(buf + n, cap - n, "cuda:%d", c->parts[p].gpu);
        else
            n += (size_t)snprintf(buf + n, cap - n, "%scuda:%d layers %u-%u", p ? " + " : "", c->parts[p].gpu,
                                  c->parts[p].first, c->parts[p].end - 1);
    }
    return buf;
}

model_scratch *eng_ctx_head_scratch(eng_ctx *c) { return c->parts[c->n_parts - 1].scratch; }
be_backend *eng_ctx_head_backend(eng_ctx *c) { return c->parts[c->n_parts - 1].be; }
const model *eng_ctx_prepared(const eng_ctx *c) { return c->m; }
