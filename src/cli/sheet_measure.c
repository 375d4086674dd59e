/* Measuring one pack for the evaluation sheet (sheet.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/eval_runner.h"
#include "cli/sheet.h"
#include "engine/bench.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "eval/eval_ppl.h"
#include "eval/eval_text.h"
#include "gguf/gguf_aux.h"
#include "gguf/gguf_stats.h"
#include "model/model.h"
#include "quant/qtypes.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/sysinfo.h"
#include "util/threadpool.h"
#include "util/timeutil.h"
#ifdef WICK_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define PPL_WINDOW 512 /* positions per perplexity window: the scale of a chat turn */

void sheet_options_default(sheet_options *o)
{
    memset(o, 0, sizeof *o);
    o->contexts[0] = 0;
    o->contexts[1] = 4096;
    o->n_contexts = 2;
    o->prefill_tokens = 512;
    o->decode_tokens = 64;
    o->reps = 2;
    o->quality = true;
    o->ppl_tokens = 2048;
    o->task_tokens = 2048;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static json_t *pack_json(const sheet_pack_spec *pk, const sheet_options *o, wk_error *err)
{
    gguf_file *f = NULL;
    if (gguf_open(&f, pk->path, err)) return NULL;
    gguf_weight_stats ws;
    gguf_weight_stats_compute(f, &ws);
    gguf_model_summary sum;
    wk_error ignore;
    if (gguf_model_summary_compute(f, &sum, &ignore)) memset(&sum, 0, sizeof sum);
    json_t *j = json_object();
    const gguf_kv *name = gguf_find_kv(f, "general.name");
    if (name && name->type == GGUF_T_STRING)
        json_object_set_new(j, "name", json_stringn(name->v.str.ptr, (size_t)name->v.str.len));
    else json_object_set_new(j, "name", json_string(base_name(pk->path)));
    json_object_set_new(j, "file", json_string(base_name(pk->path)));
    json_object_set_new(j, "arch", json_string(sum.arch));
    json_object_set_new(j, "n_params", json_integer((json_int_t)ws.total.n_elements));
    json_object_set_new(j, "weight_bytes", json_integer((json_int_t)ws.total.n_bytes));
    json_object_set_new(j, "bpw", json_real(gguf_bits_per_weight(&ws.total)));
    json_object_set_new(j, "n_ctx_train", json_integer((json_int_t)sum.n_ctx_train));
    json_t *cls = json_object(), *types = json_object();
    for (int c = 0; c < GGUF_CLASS_COUNT; c++)
        if (ws.by_class[c].n_tensors)
            json_object_set_new(cls, gguf_tensor_class_name((enum gguf_tensor_class)c),
                                json_pack("{s:I, s:f}", "bytes", (json_int_t)ws.by_class[c].n_bytes, "bpw",
                                          gguf_bits_per_weight(&ws.by_class[c])));
    for (size_t t = 0; t < sizeof ws.by_type / sizeof ws.by_type[0]; t++)
        if (ws.by_type[t].n_tensors)
            json_object_set_new(types, qt_type_name((uint32_t)t), json_integer((json_int_t)ws.by_type[t].n_bytes));
    json_object_set_new(j, "classes", cls);
    json_object_set_new(j, "types", types);
    const uint64_t file_bytes = gguf_file_size(f);
    gguf_close(f);
    wk_progress p;
    char label[160];
    snprintf(label, sizeof label, "sha256 %s", base_name(pk->path));
    wk_progress_begin(&p, o->quiet ? NULL : stderr, label, file_bytes, 0);
    char hex[65];
    if (wk_sha256_file_progress(pk->path, hex, wk_progress_callback, &p, err)) {
        json_decref(j);
        return NULL;
    }
    if (p.drawn) wk_progress_end(&p, "ok");
    json_object_set_new(j, "sha256", json_string(hex));
    json_t *aux = json_array();
    uint64_t aux_bytes = 0;
    for (int i = 0; i < pk->n_aux; i++) {
        gguf_aux a;
        if (gguf_aux_open(&a, pk->aux[i], err)) {
            json_decref(aux);
            json_decref(j);
            return NULL;
        }
        aux_bytes += a.tensor_bytes;
        json_array_append_new(aux, json_pack("{s:s, s:s, s:I}", "file", base_name(pk->aux[i]), "kind", a.kind, "bytes",
                                             (json_int_t)a.tensor_bytes));
        gguf_aux_close(&a);
    }
    json_object_set_new(j, "aux_bytes", json_integer((json_int_t)aux_bytes));
    json_object_set_new(j, "aux", aux);
    return j;
}

static json_t *runtime_json(const sheet_options *o, int threads)
{
    char build[160];
    snprintf(build, sizeof build, "C %s%s%s%s", __VERSION__,
#ifdef __OPTIMIZE__
             ", optimized",
#else
             ", -O0",
#endif
#ifdef __SANITIZE_ADDRESS__
             ", sanitized (ASan: slower)",
#else
             "",
#endif
             eng_have_cuda() ? ", CUDA" : "");
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "name", "wick", "version", WICK_VERSION, "build", build,
                     "kernels", wk_cpu_level_name(), "device", eng_device_name(o->device), "kv_type",
                     o->kv_type == BE_KV_Q8_0 ? "q8_0" : "f16", "threads", threads);
}

static json_t *machine_json(const sheet_options *o)
{
    char cpu[128];
    wk_cpu_model_name(cpu, sizeof cpu);
    uint64_t avail = 0, total = 0;
    wk_error err;
    wk_mem_info(&avail, &total, &err);
    json_t *j = json_pack("{s:s, s:i, s:i, s:I}", "cpu", cpu, "cores", wk_physical_cores(), "logical_cpus",
                          wk_cpu_count(), "ram_bytes", (json_int_t)total);
    json_object_set_new(j, "gpu", json_null());
    json_object_set_new(j, "gpu_bytes", json_null());
#ifdef WICK_HAVE_CUDA
    if (o->device == ENG_DEVICE_CUDA) {
        char name[128] = "";
        uint64_t f = 0, t = 0;
        if (be_cuda_device_memory(o->gpu, &f, &t, name, sizeof name) == 0) {
            json_object_set_new(j, "gpu", json_string(name));
            json_object_set_new(j, "gpu_bytes", json_integer((json_int_t)t));
        }
    }
#else
    (void)o;
#endif
    return j;
}

/* The held-out text: the file, or wick's generated filler (seeded, as the needle filler). */
static char *held_out_text(const sheet_options *o, ev_count_fn count, void *user, size_t *len, wk_error *err)
{
    if (o->ppl_text) return eval_read_file(o->ppl_text, len, err);
    static const double depth[1] = {0.5};
    ev_needle_spec spec = {o->ppl_tokens, depth, 1, 1, 20261130, NULL, 0};
    ev_needle_doc doc;
    if (ev_needle_build(&spec, count, user, &doc, err)) return NULL;
    char *t = doc.text;
    *len = doc.len;
    doc.text = NULL;
    ev_needle_doc_free(&doc);
    return t;
}

typedef struct vocab_counter {
    const tok_vocab *v;
} vocab_counter;

static int count_tokens(void *user, const char *text, size_t len, int32_t *n, wk_error *err)
{
    int32_t *ids = NULL;
    size_t k = 0;
    int rc = tok_encode(((vocab_counter *)user)->v, text, len, false, TOK_SPECIAL_NONE, &ids, &k, err);
    free(ids);
    *n = (int32_t)k;
    return rc;
}

static json_t *perplexity_json(const model *m, eng_ctx *ctx, const sheet_options *o)
{
    tok_vocab *v = NULL;
    wk_error err = {0};
    if (tok_load_from_gguf(&v, m->file, &err)) return json_pack("{s:s}", "error", err.msg);
    vocab_counter vc = {v};
    size_t len = 0;
    char *text = held_out_text(o, count_tokens, &vc, &len, &err);
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *out = NULL;
    if (!text || tok_encode(v, text, len, false, TOK_SPECIAL_NONE, &ids, &n, &err)) {
        out = json_pack("{s:s}", "error", err.msg);
    } else {
        if (n > (size_t)o->ppl_tokens) n = (size_t)o->ppl_tokens;
        ev_ppl_result r;
        double t0 = wk_now_ms();
        if (ev_perplexity(ctx, ids, (int32_t)n, PPL_WINDOW, &r, &err)) out = json_pack("{s:s}", "error", err.msg);
        else
            out = json_pack("{s:f, s:i, s:i, s:f}", "ppl", r.ppl, "tokens", r.n_scored, "window", PPL_WINDOW, "ms",
                            wk_now_ms() - t0);
    }
    if (out && !json_object_get(out, "error"))
        json_object_set_new(out, "text", json_string(o->ppl_text ? base_name(o->ppl_text) : "generated filler"));
    free(ids);
    free(text);
    tok_free(v);
    return out;
}

/* Needle (5 codes) and VT (2 chains, 4 hops) on task_tokens-token documents, greedy. */
static void tasks_json(const sheet_pack_spec *pk, const sheet_options *o, json_t *q)
{
    eval_runner_opts eo;
    eval_runner_opts_init(&eo, 0);
    eo.model_path = pk->path;
    eo.threads = o->threads;
    eo.kv_type = o->kv_type;
    eo.quiet = true;
    eval_runner *r = NULL;
    wk_error err = {0};
    if (eval_runner_open(&r, &eo, &err)) {
        json_object_set_new(q, "needle", json_null());
        json_object_set_new(q, "vt", json_null());
        json_object_set_new(q, "note", json_string(err.msg));
        return;
    }
    static const double depths[5] = {0.05, 0.25, 0.5, 0.75, 0.95};
    ev_needle_spec ns = {o->task_tokens, depths, 5, 5, 1, NULL, 0};
    ev_needle_doc nd;
    eval_answer ans;
    if (ev_needle_build(&ns, eval_runner_count, r, &nd, &err) == 0) {
        char *prompt = ev_needle_prompt(&nd);
        if (prompt && eval_runner_ask(r, prompt, 8 * 5 + 32, NULL, &ans, &err) == 0) {
            json_object_set_new(q, "needle", json_pack("{s:i, s:i, s:i}", "found", ev_needle_score(&nd, ans.text, NULL),
                                                       "of", nd.n_codes, "doc_tokens", nd.doc_tokens));
            eval_answer_free(&ans);
        }
        free(prompt);
        ev_needle_doc_free(&nd);
    }
    ev_vt_spec vs = {o->task_tokens, 2, 4, 1, NULL, 0};
    ev_vt_doc vd;
    if (ev_vt_build(&vs, eval_runner_count, r, &vd, &err) == 0) {
        char *prompt = ev_vt_prompt(&vd);
        if (prompt && eval_runner_ask(r, prompt, 64, NULL, &ans, &err) == 0) {
            json_object_set_new(q, "vt", json_pack("{s:f, s:i}", "score", ev_vt_score(&vd, ans.text), "doc_tokens",
                                                   vd.doc_tokens));
            eval_answer_free(&ans);
        }
        free(prompt);
        ev_vt_doc_free(&vd);
    }
    if (!json_object_get(q, "needle") || !json_object_get(q, "vt")) json_object_set_new(q, "note", json_string(err.msg));
    eval_runner_close(r);
}

int sheet_measure(const sheet_pack_spec *pk, const sheet_options *o, json_t *rows, wk_error *err)
{
    json_t *pack = pack_json(pk, o, err);
    if (!pack) return err->code ? err->code : WK_EIO;
    int32_t max_depth = 0;
    for (int i = 0; i < o->n_contexts; i++) max_depth = o->contexts[i] > max_depth ? o->contexts[i] : max_depth;
    int32_t need = max_depth + (o->prefill_tokens > o->decode_tokens ? o->prefill_tokens : o->decode_tokens) + 1;
    if (o->quality && need < PPL_WINDOW) need = PPL_WINDOW;
    double t0 = wk_now_ms();
    model *m = NULL;
    eng_ctx *ctx = NULL;
    eng_options eo;
    eng_options_default(&eo);
    eo.n_threads = o->threads;
    eo.n_ctx = need;
    eo.kv_type = o->kv_type;
    eo.device = o->device;
    eo.gpu = o->gpu;
    int rc = model_load(&m, pk->path, err);
    if (!rc) rc = eng_ctx_new(&ctx, m, &eo, err);
    if (rc) {
        json_decref(pack);
        model_free(m);
        return rc;
    }
    const double load_ms = wk_now_ms() - t0;
    const int threads = eng_ctx_options(ctx)->n_threads;
    /* cold: the first prefill on the new context (first touch of KV, scratch and caches) */
    double cold = 0;
    if (o->prefill_tokens > 0) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->prefill_tokens);
        eng_seq *seq = NULL;
        if (!ids) rc = wk_fail(err, WK_ENOMEM, "out of memory");
        if (!rc) rc = eng_seq_new(&seq, ctx, o->prefill_tokens + 1, err);
        if (!rc) {
            eng_bench_tokens(ids, o->prefill_tokens, eng_n_vocab(ctx), 4242);
            double t = wk_now_ms();
            rc = eng_prefill(ctx, seq, ids, o->prefill_tokens, NULL, err);
            cold = o->prefill_tokens / ((wk_now_ms() - t) / 1e3);
        }
        eng_seq_free(seq);
        free(ids);
    }
    json_t *quality = json_object();
    if (!rc && o->quality) {
        if (!o->quiet) fprintf(stderr, "wick sheet: %s: perplexity...\n", base_name(pk->path));
        json_object_set_new(quality, "perplexity", perplexity_json(m, ctx, o));
    }
    json_t *runtime = runtime_json(o, threads), *machine = machine_json(o);
    for (int ci = 0; ci < o->n_contexts && !rc; ci++) {
        const int32_t d = o->contexts[ci];
        eng_bench_test tests[2];
        int nt = 0;
        if (o->prefill_tokens > 0) tests[nt++] = (eng_bench_test){ENG_BENCH_PP, o->prefill_tokens, d};
        if (o->decode_tokens > 0) tests[nt++] = (eng_bench_test){ENG_BENCH_TG, o->decode_tokens, d};
        eng_bench_result res[2];
        if (!o->quiet) fprintf(stderr, "wick sheet: %s: context %d...\n", base_name(pk->path), d);
        if (nt && (rc = eng_bench_run(ctx, tests, nt, o->reps, res, NULL, NULL, err))) break;
        json_t *row = json_object();
        json_object_set(row, "pack", pack);
        json_object_set(row, "runtime", runtime);
        json_object_set(row, "machine", machine);
        json_object_set_new(row, "context", json_integer(d));
        json_object_set_new(row, "load_ms", json_real(load_ms));
        json_t *pf = json_pack("{s:i}", "tokens", o->prefill_tokens), *dc = json_pack("{s:i}", "tokens", o->decode_tokens);
        for (int k = 0; k < nt; k++)
            json_object_set_new(res[k].test.kind == ENG_BENCH_PP ? pf : dc, "tok_s", json_real(res[k].tok_per_s_median));
        json_object_set_new(pf, "tok_s_cold", d == 0 && cold > 0 ? json_real(cold) : json_null());
        json_object_set_new(row, "prefill", pf);
        json_object_set_new(row, "decode", dc);
        json_object_set(row, "quality", quality);
        json_array_append_new(rows, row);
    }
    eng_ctx_free(ctx);
    model_free(m);
    if (!rc && o->quality) {
        if (!o->quiet) fprintf(stderr, "wick sheet: %s: needle and variable tracking...\n", base_name(pk->path));
        tasks_json(pk, o, quality);
    }
    json_decref(quality);
    json_decref(runtime);
    json_decref(machine);
    json_decref(pack);
    if (rc) wk_fail_prefix(err, "%s", pk->path);
    return rc;
}

int sheet_read_rows(const char *path, json_t *rows, wk_error *err)
{
    size_t len = 0;
    char *text = eval_read_file(path, &len, err);
    if (!text) return err->code ? err->code : WK_EIO;
    int rc = WK_OK;
    json_error_t je;
    json_t *all = json_loads(text, 0, &je);
    if (json_is_array(all)) {
        json_array_extend(rows, all);
    } else {
        json_decref(all);
        all = NULL;
        int line = 0;
        for (char *p = text, *nl; p && *p && rc == 0; p = nl ? nl + 1 : NULL) {
            nl = strchr(p, '\n');
            if (nl) *nl = '\0';
            line++;
            if (!*p) continue;
            json_t *row = json_loads(p, 0, &je);
            if (!json_is_object(row) || !json_is_object(json_object_get(row, "pack")) ||
                !json_is_integer(json_object_get(row, "context")))
                rc = wk_fail(err, WK_EFORMAT, "%s:%d: not a sheet row (a JSON object with pack and context)", path, line);
            else json_array_append(rows, row);
            json_decref(row);
        }
    }
    json_decref(all);
    free(text);
    return rc;
}
