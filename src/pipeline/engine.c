/* A loaded model ready to run requests: the model file, its tokenizer and
 * chat template, one inference context and the prefix cache over it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/memory_plan.h"
#include "gguf/gguf.h"
#include "pipeline/pipeline_internal.h"
#include "util/log.h"

void pl_config_default(pl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->need_template = true;
    cfg->need_tokenizer = true;
    eng_options_default(&cfg->eng);
    cfg->eng.n_ctx = 0;
    ckpt_cache_config_default(&cfg->cache);
    cfg->cache.max_slots = 1;
}

/* The context when none is asked for: the trained one, reduced to what
 * fits the memory budget with the weights, the KV at that context, the
 * recurrent state, the cache's budget and the scratch (engine/memory_plan.h). */
static int default_n_ctx(const pl_engine *pe, int32_t *n_ctx, wk_error *err)
{
    eng_mem_options mo;
    eng_mem_options_of(&mo, &pe->cfg.eng);
    mo.ckpt_bytes = pe->cfg.cache.mem_bytes ? pe->cfg.cache.mem_bytes : CKPT_CACHE_MEM_DEFAULT;
    const uint32_t train_u = pe->m->hp.n_ctx_train;
    int32_t train = train_u > 0 && train_u <= INT32_MAX ? (int32_t)train_u : 4096;
    eng_mem_plan plan;
    char why[512];
    int rc = eng_mem_default_context(pe->m, &mo, pe->cfg.mem_budget_bytes, train, &plan, why, sizeof why, err);
    if (rc) return rc;
    WK_INFO("%s", why);
    *n_ctx = plan.n_ctx;
    return 0;
}

static int load_template(pl_engine *pe, wk_error *err)
{
    gguf_str jinja = {0};
    char *jinja_z = NULL;
    if (gguf_get_str(pe->m->file, "tokenizer.chat_template", &jinja, NULL) == 0 && jinja.ptr) {
        jinja_z = strndup(jinja.ptr, (size_t)jinja.len);
        if (!jinja_z) return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    wk_error terr = {0};
    const char *name = pe->tmpl_name[0] ? pe->tmpl_name : NULL;
    pe->has_tmpl = chat_template_select(&pe->tmpl, jinja_z, name, &terr) == 0;
    free(jinja_z);
    if (pe->has_tmpl) return 0;
    /* A chosen name that does not exist is always an error; a missing
     * template only when chat is all the caller does. */
    if (name || pe->cfg.need_template) return wk_fail(err, WK_EINVAL, "%s: %s", pe->path, terr.msg);
    WK_WARN("%s: no usable chat template (%s); /v1/chat/completions needs --chat-template NAME (%s)", pe->path,
            terr.msg, CHAT_TEMPLATE_NAMES);
    return 0;
}

int pl_engine_open(pl_engine **out, const pl_config *cfg, wk_error *err)
{
    *out = NULL;
    if (!cfg->model_path) return wk_fail(err, WK_EINVAL, "no model path given");
    pl_engine *pe = calloc(1, sizeof *pe);
    if (!pe) return wk_fail(err, WK_ENOMEM, "out of memory");
    pe->cfg = *cfg;
    snprintf(pe->path, sizeof pe->path, "%s", cfg->model_path);
    snprintf(pe->tmpl_name, sizeof pe->tmpl_name, "%s", cfg->chat_template ? cfg->chat_template : "");
    snprintf(pe->cache_dir, sizeof pe->cache_dir, "%s", cfg->cache.dir ? cfg->cache.dir : "");
    pe->cfg.model_path = pe->path;
    pe->cfg.chat_template = pe->tmpl_name;
    pe->cfg.cache.dir = pe->cache_dir[0] ? pe->cache_dir : NULL;
    int rc = model_load(&pe->m, pe->path, err);
    if (!rc && (rc = tok_load_from_gguf(&pe->vocab, pe->m->file, err)) != 0) {
        if (cfg->need_tokenizer) wk_fail_prefix(err, "%s: tokenizer", pe->path);
        else rc = 0;
        pe->vocab = NULL;
    }
    if (!rc && pe->vocab) rc = load_template(pe, err);
    else if (!rc && cfg->need_template) rc = wk_fail(err, WK_EINVAL, "%s: no tokenizer, so no chat template", pe->path);
    if (!rc) {
        eng_options o = pe->cfg.eng;
        if (o.n_ctx <= 0) rc = default_n_ctx(pe, &o.n_ctx, err);
        if (!rc) rc = eng_ctx_new(&pe->ctx, pe->m, &o, err);
    }
    if (!rc) rc = eng_sched_new(&pe->sched, pe->ctx, err);
    /* a slot per request in progress, and one to keep a conversation they do not use */
    const int slots = pe->cfg.cache.max_slots > 0 ? pe->cfg.cache.max_slots : CKPT_CACHE_SLOTS_DEFAULT;
    if (pe->cfg.eng.n_seq > 1 && slots <= pe->cfg.eng.n_seq) pe->cfg.cache.max_slots = pe->cfg.eng.n_seq + 1;
    if (!rc) rc = ckpt_cache_new(&pe->cache, pe->ctx, &pe->cfg.cache, err);
    if (!rc) rc = pl_spec_open(pe, err);
    if (rc) {
        pl_engine_close(pe);
        return rc;
    }
    *out = pe;
    return 0;
}

void pl_engine_close(pl_engine *pe)
{
    if (!pe) return;
    gram_vocab_free(pe->gvocab);
    pl_spec_close(pe);
    ckpt_cache_free(pe->cache);
    eng_sched_free(pe->sched);
    eng_ctx_free(pe->ctx);
    tok_free(pe->vocab);
    model_free(pe->m);
    free(pe);
}

const model *pl_engine_model(const pl_engine *pe) { return pe->m; }
const tok_vocab *pl_engine_vocab(const pl_engine *pe) { return pe->vocab; }
const chat_template *pl_engine_template(const pl_engine *pe) { return pe->has_tmpl ? &pe->tmpl : NULL; }
eng_ctx *pl_engine_ctx(pl_engine *pe) { return pe->ctx; }
ckpt_cache *pl_engine_cache(pl_engine *pe) { return pe->cache; }
void pl_engine_lock(pl_engine *pe) { eng_sched_lock(pe->sched); }
void pl_engine_unlock(pl_engine *pe) { eng_sched_unlock(pe->sched); }
int32_t pl_engine_n_ctx(const pl_engine *pe) { return ckpt_cache_n_ctx(pe->cache); }

void pl_engine_reserve(pl_engine *pe, int32_t n_ctx)
{
    if (n_ctx > ckpt_cache_n_ctx(pe->cache)) ckpt_cache_set_n_ctx(pe->cache, n_ctx);
    wk_error err = {0};
    if (pe->drafter && eng_drafter_reserve(pe->drafter, n_ctx, &err))
        WK_WARN("draft model: no sequence of %d positions (%s); drafting off", (int)n_ctx, err.msg);
}
