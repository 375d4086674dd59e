/* Readiness checks shared by `wick check` and `wick serve` (readiness.h). */
#include "cli/readiness.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat/chat.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu.h"
#include "util/portinfo.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/sha256sums.h"
#include "util/units.h"
#ifdef WICK_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "gguf/gguf_aux.h"

#define LARGEST_CTX_CAP (1 << 24) /* serve's --ctx limit */

__attribute__((format(printf, 4, 5))) static void add(cli_ready_report *r, const char *name, int level,
                                                      const char *fmt, ...)
{
    if (r->n == CLI_READY_MAX_FINDINGS) return;
    cli_finding *f = &r->f[r->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->level = level;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    if (level == CLI_FAIL) r->ready = false;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- files ------------------------------------------------------------------- */

static bool present(cli_ready_report *r, const char *what, const char *path, uint64_t *size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        add(r, "files", CLI_FAIL, "%s %s: %s", what, path, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        add(r, "files", CLI_FAIL, "%s %s: not a regular file", what, path);
        return false;
    }
    *size = (uint64_t)st.st_size;
    return true;
}

static bool check_files(const cli_ready_input *in, cli_ready_report *r, uint64_t *aux_bytes)
{
    uint64_t sz = 0, total = 0;
    char b[32];
    bool ok = present(r, "model", in->model_path, &sz);
    total += sz;
    int n = 1;
    if (in->draft_path) {
        ok &= present(r, "draft", in->draft_path, &sz);
        total += sz, n++;
    }
    *aux_bytes = 0;
    for (int i = 0; i < in->n_aux; i++) {
        gguf_aux a;
        wk_error err = {0};
        if (!present(r, "aux table", in->aux_paths[i], &sz)) {
            ok = false;
            continue;
        }
        if (gguf_aux_open(&a, in->aux_paths[i], &err)) {
            add(r, "files", CLI_FAIL, "aux table %s", err.msg);
            ok = false;
            continue;
        }
        *aux_bytes += a.tensor_bytes;
        total += sz, n++;
        gguf_aux_close(&a);
    }
    if (ok) {
        char ab[32];
        if (*aux_bytes)
            add(r, "files", CLI_OK, "%d present, %s (aux tables %s, mapped in place)", n,
                wk_format_bytes(b, sizeof b, total), wk_format_bytes(ab, sizeof ab, *aux_bytes));
        else add(r, "files", CLI_OK, "%d present, %s", n, wk_format_bytes(b, sizeof b, total));
    }
    return ok;
}

/* ---- sha256 ------------------------------------------------------------------ */

static void check_manifest(const cli_ready_input *in, cli_ready_report *r)
{
    wk_sums sums;
    wk_error err = {0};
    if (wk_sums_load(in->manifest_path, &sums, &err)) {
        add(r, "sha256", CLI_FAIL, "%s", err.msg);
        return;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", in->manifest_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    /* every file of the pack must be pinned */
    const char *pack[3 + CLI_READY_MAX_AUX] = {in->model_path, in->draft_path, in->config_path};
    int n_pack = 3;
    for (int i = 0; i < in->n_aux; i++) pack[n_pack++] = in->aux_paths[i];
    bool listed[3 + CLI_READY_MAX_AUX] = {false};
    int bad = 0, good = 0;
    for (size_t i = 0; i < sums.n; i++) {
        const wk_sums_entry *e = &sums.e[i];
        char path[PATH_MAX * 2], real_e[PATH_MAX], real_p[PATH_MAX];
        if (e->name[0] == '/') snprintf(path, sizeof path, "%s", e->name);
        else snprintf(path, sizeof path, "%s/%s", dir, e->name);
        if (!realpath(path, real_e)) {
            add(r, "sha256", CLI_FAIL, "%s (line %d of %s): %s", e->name, e->line, in->manifest_path, strerror(errno));
            bad++;
            continue;
        }
        for (int k = 0; k < n_pack; k++)
            if (pack[k] && realpath(pack[k], real_p) && !strcmp(real_p, real_e)) listed[k] = true;
        struct stat st;
        stat(real_e, &st);
        wk_progress p;
        wk_progress_begin(&p, in->quiet ? NULL : stderr, base_name(e->name), (uint64_t)st.st_size, 0);
        char hex[65];
        if (wk_sha256_file_progress(real_e, hex, wk_progress_callback, &p, &err)) {
            wk_progress_end(&p, "failed");
            add(r, "sha256", CLI_FAIL, "%s", err.msg);
            bad++;
            continue;
        }
        if (p.drawn) wk_progress_end(&p, strcmp(hex, e->hex) ? "MISMATCH" : "ok");
        if (strcmp(hex, e->hex)) {
            add(r, "sha256", CLI_FAIL, "%s does not match %s: sha256 %.16s…, pinned %.16s…", e->name,
                base_name(in->manifest_path), hex, e->hex);
            bad++;
        } else {
            good++;
        }
    }
    for (int k = 0; k < n_pack; k++)
        if (pack[k] && !listed[k]) {
            add(r, "sha256", CLI_FAIL, "%s is not listed in %s: nothing pins its contents", pack[k],
                in->manifest_path);
            bad++;
        }
    if (!bad) add(r, "sha256", CLI_OK, "%d file%s match %s", good, good == 1 ? "" : "s", in->manifest_path);
    wk_sums_free(&sums);
}

/* ---- tokenizer, template, draft ------------------------------------------------ */

/* Whether the template's markers are tokens of the vocabulary: every special
 * segment of a rendered two-message chat yields at least one control token. */
static int template_markers_missing(const chat_template *t, const tok_vocab *v, char *what, size_t cap)
{
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", "Be brief.", "role", "user",
                             "content", "Hello");
    chat_options opt;
    chat_options_default(&opt);
    chat_prompt p;
    wk_error err = {0};
    int rc = chat_render(t, msgs, NULL, &opt, &p, &err);
    json_decref(msgs);
    if (rc) {
        snprintf(what, cap, "rendering a test chat failed: %.100s", err.msg);
        return 1;
    }
    int missing = 0;
    for (size_t i = 0; i < p.n_segs && !missing; i++) {
        const chat_segment *s = &p.segs[i];
        if (!s->special || !s->len) continue;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(v, p.text + s->offset, s->len, false, TOK_SPECIAL_ALL, &ids, &n, &err)) break;
        int control = 0;
        for (size_t k = 0; k < n; k++) {
            enum tok_type ty = tok_token_type(v, ids[k]);
            control |= ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED;
        }
        free(ids);
        if (!control) {
            size_t shown = strcspn(p.text + s->offset, "\n"); /* the marker, not the newline after it */
            if (shown > s->len) shown = s->len;
            snprintf(what, cap, "its marker text '%.*s' is not a token of this vocabulary", (int)(shown > 40 ? 40 : shown),
                     p.text + s->offset);
            missing = 1;
        }
    }
    chat_prompt_free(&p);
    return missing;
}

static void check_template(const cli_ready_input *in, const model *m, const tok_vocab *v, cli_ready_report *r)
{
    chat_template t;
    wk_error err = {0};
    if (chat_template_from_gguf(&t, m->file, in->chat_template, &err)) {
        /* an explicit --chat-template that does not exist is an error, a model without one is not */
        add(r, "template", in->chat_template ? CLI_FAIL : CLI_WARN, "%s%s", err.msg,
            in->chat_template ? "" : " (/v1/completions works without)");
        return;
    }
    char what[160];
    /* markers that are plain text still render and tokenize: a model not trained on them answers
     * poorly, which deserves a warning, not a refusal */
    if (template_markers_missing(&t, v, what, sizeof what))
        add(r, "template", CLI_WARN, "%s: %s (tokenized as plain text)", chat_template_name(t.kind), what);
    else add(r, "template", CLI_OK, "%s%s", chat_template_name(t.kind), in->chat_template ? " (--chat-template)" : "");
}

static void check_draft(const cli_ready_input *in, const tok_vocab *v, cli_ready_report *r)
{
    gguf_file *f = NULL;
    tok_vocab *dv = NULL;
    wk_error err = {0};
    if (gguf_open(&f, in->draft_path, &err) || tok_load_from_gguf(&dv, f, &err)) {
        add(r, "draft", CLI_FAIL, "%s", err.msg);
        gguf_close(f);
        return;
    }
    int32_t n = tok_n_vocab(v), dn = tok_n_vocab(dv);
    if (n != dn) {
        add(r, "draft", CLI_FAIL, "%s has %d tokens, the model %d: a draft must share the vocabulary", in->draft_path,
            dn, n);
    } else if (tok_bos(v) != tok_bos(dv) || tok_eos(v) != tok_eos(dv)) {
        add(r, "draft", CLI_FAIL, "%s: BOS/EOS %d/%d, the model's %d/%d", in->draft_path, tok_bos(dv), tok_eos(dv),
            tok_bos(v), tok_eos(v));
    } else {
        int32_t diff = -1;
        for (int32_t i = 0; i < n && diff < 0; i++) {
            size_t a, b;
            const char *ta = tok_token_text(v, i, &a), *tb = tok_token_text(dv, i, &b);
            if (a != b || memcmp(ta, tb, a)) diff = i;
        }
        if (diff >= 0)
            add(r, "draft", CLI_FAIL, "%s: token %d is '%.32s', the model's '%.32s'", in->draft_path, diff,
                tok_token_text(dv, diff, NULL), tok_token_text(v, diff, NULL));
        else add(r, "draft", CLI_OK, "%s shares the vocabulary (%d tokens)", base_name(in->draft_path), n);
    }
    tok_free(dv);
    gguf_close(f);
}

/* ---- memory, context ----------------------------------------------------------- */

/* The memory plan's options for the checked settings. */
static void mem_options(const cli_ready_input *in, uint64_t aux_bytes, eng_mem_options *o)
{
    eng_mem_options_default(o);
    o->device = in->device;
    o->gpu = in->gpu;
    o->kv_type = in->kv_type;
    o->ckpt_bytes = in->cache_bytes;
    o->aux_bytes = aux_bytes;
    o->split = in->split;
    o->n_parallel = in->n_parallel;
    if (in->n_ubatch > 0) o->n_ubatch = in->n_ubatch;
}

static void check_memory(const cli_ready_input *in, const model *m, uint64_t aux_bytes, cli_ready_report *r)
{
    eng_mem_options o;
    mem_options(in, aux_bytes, &o);
    r->kv_type = in->kv_type;
    wk_error err = {0};
    r->n_ctx_train = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train <= INT32_MAX ? (int32_t)m->hp.n_ctx_train : 4096;
    r->budget_given = in->mem_budget != 0;
    /* GPUs of a split or under --gpu-mem: the budget is what they may hold together
     * (the placement finding checks each one) */
    const bool gpus = in->device == ENG_DEVICE_CUDA && (in->split.n > 1 || in->split.gpu_mem) && !r->budget_given;
    char budget[128], fb[32], bb[32], gb[32], plan[400];
    if (gpus) {
        uint64_t caps[ENG_MAX_SPLIT], free_b[ENG_MAX_SPLIT];
        const int32_t n = eng_mem_gpu_budgets(&o, caps, free_b);
        bool known = true;
        r->budget = 0;
        for (int32_t p = 0; p < n; p++) r->budget += caps[p], known &= free_b[p] != 0;
        r->budget_given = true;
        if (in->split.gpu_mem)
            snprintf(budget, sizeof budget, "--gpu-mem %s on %d GPU entr%s (budget %s%s)",
                     wk_format_bytes(gb, sizeof gb, in->split.gpu_mem), n, n == 1 ? "y" : "ies",
                     wk_format_bytes(bb, sizeof bb, r->budget), known ? ", free memory counted" : "");
        else
            snprintf(budget, sizeof budget, "%d GPU entries (budget %s of their free memory)", n,
                     wk_format_bytes(bb, sizeof bb, r->budget));
    } else if (r->budget_given) {
        r->budget = in->mem_budget;
        snprintf(budget, sizeof budget, "--mem %s", wk_format_bytes(bb, sizeof bb, r->budget));
    } else {
        uint64_t total = 0;
        if (eng_mem_free(in->device, in->gpu, &r->free_bytes, &total, &err)) {
            add(r, "memory", CLI_FAIL, "%s", err.msg);
            return;
        }
        r->budget = eng_mem_default_budget(r->free_bytes);
        snprintf(budget, sizeof budget, "%s free (budget %s)", wk_format_bytes(fb, sizeof fb, r->free_bytes),
                 wk_format_bytes(bb, sizeof bb, r->budget));
    }
    eng_mem_plan largest;
    if (eng_mem_fit_context(m, &o, r->budget, LARGEST_CTX_CAP, &largest, &err) == 0) r->largest_ctx = largest.n_ctx;
    char largest_txt[64];
    if (r->largest_ctx) snprintf(largest_txt, sizeof largest_txt, "the largest that fits is %d", r->largest_ctx);
    else snprintf(largest_txt, sizeof largest_txt, "not even 256 tokens fit");
    if (in->n_ctx > 0) {
        o.n_ctx = in->n_ctx;
        if (eng_mem_plan_compute(m, &o, &r->plan, &err)) {
            add(r, "memory", CLI_FAIL, "%s", err.msg);
            return;
        }
        r->have_plan = true;
        eng_mem_plan_describe(&r->plan, in->kv_type, plan, sizeof plan);
        if (r->plan.total_bytes > r->budget)
            add(r, "memory", CLI_FAIL, "context %d tokens (--ctx) does not fit %s: %s; %s", in->n_ctx, budget, plan,
                largest_txt);
        else
            add(r, "memory", CLI_OK, "context %d tokens (--ctx) fits %s: %s; %s", in->n_ctx, budget, plan, largest_txt);
        return;
    }
    char why[600];
    /* eng_mem_default_context describes the budget itself (the GPUs' too), in the same words */
    if (eng_mem_default_context(m, &o, in->mem_budget, r->n_ctx_train, &r->plan, why, sizeof why, &err)) {
        add(r, "memory", CLI_FAIL, "%s", err.msg);
        return;
    }
    r->have_plan = true;
    add(r, "memory", CLI_OK, "%s; %s", why, largest_txt);
}

/* Per GPU entry: its layers and bytes at the plan's context, and whether each GPU's
 * entries together fit its cap (--gpu-mem, its free memory). */
static void check_placement(const cli_ready_input *in, const model *m, uint64_t aux_bytes, cli_ready_report *r)
{
    eng_mem_options o;
    mem_options(in, aux_bytes, &o);
    o.n_ctx = r->plan.n_ctx;
    uint64_t caps[ENG_MAX_SPLIT];
    const int32_t n = eng_mem_gpu_budgets(&o, caps, r->placement_free);
    bool any = false;
    for (int32_t p = 0; p < n; p++) any |= caps[p] != 0;
    wk_error err = {0};
    eng_placement *pl = &r->placement;
    if (eng_placement_compute(m, &o, any ? caps : NULL, pl, &err)) {
        add(r, "placement", CLI_FAIL, "%s", err.msg);
        return;
    }
    r->have_placement = true;
    for (int32_t p = 0; p < n; p++) {
        /* a GPU listed twice: its entries share it */
        uint64_t on_gpu = 0, cap = 0;
        for (int32_t q = 0; q < n; q++)
            if (pl->dev[q].gpu == pl->dev[p].gpu) on_gpu += pl->dev[q].total_bytes, cap += caps[q];
        char line[400], cb[32], ob[32], fb[32];
        eng_place_dev_describe(&pl->dev[p], line, sizeof line);
        char limit[160];
        if (in->split.gpu_mem && r->placement_free[p])
            snprintf(limit, sizeof limit, "--gpu-mem %s, %s free", wk_format_bytes(cb, sizeof cb, in->split.gpu_mem),
                     wk_format_bytes(fb, sizeof fb, r->placement_free[p]));
        else if (in->split.gpu_mem)
            snprintf(limit, sizeof limit, "--gpu-mem %s; free memory unknown", wk_format_bytes(cb, sizeof cb, in->split.gpu_mem));
        else if (r->placement_free[p])
            snprintf(limit, sizeof limit, "%s free", wk_format_bytes(fb, sizeof fb, r->placement_free[p]));
        else snprintf(limit, sizeof limit, "free memory unknown");
        char shared[64] = "";
        if (on_gpu != pl->dev[p].total_bytes)
            snprintf(shared, sizeof shared, " (cuda:%d holds %s in all)", pl->dev[p].gpu, wk_format_bytes(ob, sizeof ob, on_gpu));
        r->placement_fits[p] = !cap || on_gpu <= cap;
        if (!cap)
            add(r, "placement", CLI_WARN, "%s%s; cannot tell whether it fits (%s)", line, shared, limit);
        else
            add(r, "placement", r->placement_fits[p] ? CLI_OK : CLI_FAIL, "%s%s; %s budget %s (%s)", line, shared,
                r->placement_fits[p] ? "fits" : "does NOT fit", wk_format_bytes(cb, sizeof cb, cap), limit);
    }
}

/* ---- port, cpu, cuda ------------------------------------------------------------ */

static void check_port(const cli_ready_input *in, cli_ready_report *r)
{
    wk_error err = {0};
    int rc = wk_port_probe(in->host, in->port, &err);
    if (rc == 0) {
        add(r, "port", CLI_OK, "%s:%d is free", in->host, in->port);
        return;
    }
    if (rc != WK_EBUSY) {
        add(r, "port", CLI_FAIL, "%s", err.msg);
        return;
    }
    int pid = 0;
    char comm[64];
    int who = wk_port_listener(in->port, &pid, comm, sizeof comm);
    if (who == 1 && pid)
        add(r, "port", CLI_FAIL, "%s:%d is in use by pid %d (%s); pick another --port (nothing was stopped)",
            in->host, in->port, pid, comm);
    else if (who == 1)
        add(r, "port", CLI_FAIL, "%s:%d is in use by a process of another user; pick another --port", in->host,
            in->port);
    else add(r, "port", CLI_FAIL, "%s:%d is in use; pick another --port", in->host, in->port);
}

static void check_cpu(cli_ready_report *r)
{
    const wk_cpu_features *c = wk_cpu();
    char feats[160] = "";
    struct { int on; const char *name; } list[] = {
        {c->avx2, "avx2"}, {c->fma, "fma"}, {c->f16c, "f16c"}, {c->avx512f, "avx512f"}, {c->avx512bw, "avx512bw"},
        {c->avx512vnni, "avx512vnni"}, {c->avx512bf16, "avx512bf16"}, {c->avxvnni, "avxvnni"},
        {c->amx_int8, "amx-int8"}, {c->amx_bf16, "amx-bf16"}};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (list[i].on) {
            strncat(feats, " ", sizeof feats - strlen(feats) - 1);
            strncat(feats, list[i].name, sizeof feats - strlen(feats) - 1);
        }
    const char *level = wk_cpu_level_name();
    add(r, "cpu", strcmp(level, "scalar") ? CLI_OK : CLI_WARN, "%s kernels;%s%s", level, feats[0] ? feats : " no SIMD",
        strcmp(level, "scalar") ? "" : " (scalar kernels are several times slower)");
}

static void check_cuda(const cli_ready_input *in, cli_ready_report *r)
{
    if (in->device != ENG_DEVICE_CUDA) {
        add(r, "cuda", CLI_OK, "not used (--device cpu)%s", eng_have_cuda() ? "" : "; this build has no CUDA");
        return;
    }
#ifdef WICK_HAVE_CUDA
    const int32_t n = in->split.n > 1 ? in->split.n : 1;
    for (int32_t p = 0; p < n; p++) {
        const int32_t gpu = n > 1 ? in->split.gpus[p] : in->gpu;
        bool seen = false;
        for (int32_t q = 0; q < p; q++) seen |= in->split.gpus[q] == gpu;
        if (seen) continue; /* a GPU listed twice is one GPU */
        uint64_t f = 0, t = 0;
        char name[128] = "", fb[32], tb[32];
        if (be_cuda_device_memory(gpu, &f, &t, name, sizeof name))
            add(r, "cuda", CLI_FAIL, "cuda:%d: no such GPU or no driver (%d visible)", gpu, be_cuda_device_count());
        else
            add(r, "cuda", CLI_OK, "cuda:%d %s, %s free of %s", gpu, name, wk_format_bytes(fb, sizeof fb, f),
                wk_format_bytes(tb, sizeof tb, t));
    }
    const int v = be_cuda_nccl_version();
    if (n > 1 && v)
        add(r, "nccl", CLI_OK, "NCCL %d.%d.%d linked (a layer split needs none; a tensor split is not implemented yet)",
            v / 10000, v / 100 % 100, v % 100);
    else if (n > 1)
        add(r, "nccl", CLI_OK, "not linked: a layer split needs none (a tensor split would)");
#else
    add(r, "cuda", CLI_FAIL, "this wick was built without CUDA (--device cuda)");
#endif
}

void cli_ready_run(const cli_ready_input *in, cli_ready_report *r)
{
    memset(r, 0, sizeof *r);
    r->ready = true;
    uint64_t aux_bytes = 0;
    bool files = check_files(in, r, &aux_bytes);
    if (in->manifest_path) check_manifest(in, r);
    model *m = NULL;
    tok_vocab *v = NULL;
    wk_error err = {0};
    if (files) {
        if (model_load(&m, in->model_path, &err)) {
            add(r, "model", CLI_FAIL, "%s", err.msg);
        } else {
            char b[32];
            uint64_t bytes = 0;
            for (size_t i = 0; i < gguf_tensor_count(m->file); i++) bytes += gguf_tensor_at(m->file, i)->n_bytes;
            add(r, "model", CLI_OK, "%s, %u layers, %s of weights, trained context %u", model_arch_name(m->arch),
                m->hp.n_layer, wk_format_bytes(b, sizeof b, bytes), m->hp.n_ctx_train);
            if (tok_load_from_gguf(&v, m->file, &err)) add(r, "tokenizer", CLI_FAIL, "%s", err.msg);
            else add(r, "tokenizer", CLI_OK, "%s (pre %s), %d tokens", tok_model_name(v), tok_pre_name(v), tok_n_vocab(v));
        }
    }
    if (v) check_template(in, m, v, r);
    if (v && in->draft_path) check_draft(in, v, r);
    if (m) check_memory(in, m, aux_bytes, r);
    if (m && r->have_plan && in->device == ENG_DEVICE_CUDA) check_placement(in, m, aux_bytes, r);
    if (m && in->n_ctx > 0 && (uint32_t)in->n_ctx > m->hp.n_ctx_train && m->hp.n_ctx_train)
        add(r, "context", CLI_WARN, "--ctx %d is above the trained context %u: positions past it were never trained "
                                    "and answers there may degrade", in->n_ctx, m->hp.n_ctx_train);
    if (in->port > 0) check_port(in, r);
    check_cpu(r);
    check_cuda(in, r);
    tok_free(v);
    model_free(m);
}

static const char *level_word(int l) { return l == CLI_OK ? "ok" : l == CLI_WARN ? "warn" : "FAIL"; }

void cli_ready_print(FILE *out, const cli_ready_report *r)
{
    fprintf(out, "ready: %s\n", r->ready ? "true" : "false");
    for (int i = 0; i < r->n; i++) fprintf(out, "  %-4s %-9s %s\n", level_word(r->f[i].level), r->f[i].name, r->f[i].msg);
}

json_t *cli_ready_json(const cli_ready_report *r)
{
    json_t *o = json_object(), *fs = json_array();
    json_object_set_new(o, "ready", json_boolean(r->ready));
    for (int i = 0; i < r->n; i++) {
        const char *status = r->f[i].level == CLI_OK ? "ok" : r->f[i].level == CLI_WARN ? "warn" : "fail";
        json_array_append_new(fs, json_pack("{s:s, s:s, s:s}", "name", r->f[i].name, "status", status, "message",
                                            r->f[i].msg));
    }
    json_object_set_new(o, "findings", fs);
    if (r->have_plan) {
        const eng_mem_plan *p = &r->plan;
        json_t *m = json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}", "n_ctx", p->n_ctx,
                              "n_ctx_train", r->n_ctx_train, "weight_bytes", (json_int_t)p->weight_bytes, "aux_bytes",
                              (json_int_t)p->aux_bytes, "kv_bytes", (json_int_t)(p->kv_bytes + p->ids_bytes),
                              "kv_bytes_per_token", (json_int_t)p->kv_bytes_per_token, "state_bytes",
                              (json_int_t)p->state_bytes, "checkpoint_bytes", (json_int_t)p->ckpt_bytes,
                              "scratch_bytes", (json_int_t)p->scratch_bytes, "total_bytes", (json_int_t)p->total_bytes,
                              "budget_bytes", (json_int_t)r->budget, "kv_type",
                              r->kv_type == BE_KV_Q8_0 ? "q8_0" : "f16");
        json_object_set_new(m, "largest_ctx", json_integer(r->largest_ctx));
        if (!r->budget_given) json_object_set_new(m, "free_bytes", json_integer((json_int_t)r->free_bytes));
        json_object_set_new(o, "memory", m);
    }
    if (r->have_placement) {
        json_t *a = json_array();
        for (int32_t d = 0; d < r->placement.n_dev; d++) {
            const eng_place_dev *v = &r->placement.dev[d];
            json_array_append_new(
                a, json_pack("{s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "gpu", v->gpu, "layer_first",
                             (int)v->layer_first, "layer_end", (int)v->layer_end, "weight_bytes",
                             (json_int_t)v->weight_bytes, "kv_bytes", (json_int_t)v->kv_bytes, "state_bytes",
                             (json_int_t)v->state_bytes, "checkpoint_bytes", (json_int_t)v->ckpt_bytes,
                             "scratch_bytes", (json_int_t)v->scratch_bytes, "total_bytes", (json_int_t)v->total_bytes,
                             "cap_bytes", (json_int_t)v->cap_bytes, "fits", r->placement_fits[d]));
        }
        json_object_set_new(o, "placement", a);
    }
    return o;
}

const cli_finding *cli_ready_first_failure(const cli_ready_report *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->f[i].level == CLI_FAIL) return &r->f[i];
    return NULL;
}

int cli_ready_option(int opt, const char *arg, cli_ready_opts *o, const char *cmd)
{
    wk_error err = {0};
    switch (opt) {
    case CLI_OPT_CONFIG: fprintf(stderr, "%s: one --config at a time\n", cmd); return -1;
    case CLI_OPT_PRINT_CONFIG: o->print_config = true; return 1;
    case CLI_OPT_CHECK: o->check_only = true; return 1;
    case CLI_OPT_JSON: o->json = true; return 1;
    case CLI_OPT_MEM:
        if (wk_parse_size(arg, &o->mem_bytes, &err)) {
            fprintf(stderr, "%s: --mem: %s\n", cmd, err.msg);
            return -1;
        }
        return 1;
    case CLI_OPT_MANIFEST: o->manifest = arg; return 1;
    case CLI_OPT_DRAFT: o->draft = arg; return 1;
    case CLI_OPT_AUX:
        if (o->n_aux == CLI_READY_MAX_AUX) {
            fprintf(stderr, "%s: at most %d --aux tables\n", cmd, CLI_READY_MAX_AUX);
            return -1;
        }
        o->aux[o->n_aux++] = arg;
        return 1;
    default: return 0;
    }
}

bool cli_ready_serve(const cli_ready_opts *o, const char *config_path, const char *model_path, const char *host,
                     int port, const eng_options *eng, uint64_t cache_bytes, const char *chat_template,
                     int *exit_code)
{
    const int32_t n_ctx = eng->n_ctx, kv_type = eng->kv_type, device = eng->device, gpu = eng->gpu;
    cli_ready_input in = {.model_path = model_path, .draft_path = o->draft, .n_aux = o->n_aux,
                          .manifest_path = o->manifest, .config_path = config_path && *config_path ? config_path : NULL,
                          .chat_template = chat_template, .host = host, .port = port, .n_ctx = n_ctx,
                          .kv_type = kv_type, .device = device, .gpu = gpu, .split = eng->split,
                          .mem_budget = o->mem_bytes, .cache_bytes = cache_bytes, .n_parallel = eng->n_seq,
                          .n_ubatch = eng->n_ubatch};
    for (int i = 0; i < o->n_aux; i++) in.aux_paths[i] = o->aux[i];
    cli_ready_report r;
    cli_ready_run(&in, &r);
    if (o->check_only) {
        if (o->json) {
            json_t *j = cli_ready_json(&r);
            char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            printf("%s\n", text ? text : "{}");
            free(text);
            json_decref(j);
        } else {
            cli_ready_print(stdout, &r);
        }
        *exit_code = r.ready ? 0 : 1;
        return true;
    }
    bool quiet = true;
    for (int i = 0; i < r.n; i++) quiet &= r.f[i].level == CLI_OK;
    if (quiet) fprintf(stderr, "wick: ready (%d checks passed: wick check for details)\n", r.n);
    else cli_ready_print(stderr, &r);
    const cli_finding *bad = cli_ready_first_failure(&r);
    if (!bad) return false;
    fprintf(stderr, "wick serve: not ready: %s: %s\n", bad->name, bad->msg);
    *exit_code = 1;
    return true;
}
