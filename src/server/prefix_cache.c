#include "server/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

int srv_ckpt_kind_of_boundary(int chat_kind, unsigned flags)
{
    switch (chat_kind) {
    case CHAT_B_SYSTEM_END: return CKPT_SYSTEM_END;
    case CHAT_B_USER_START: return (flags & CHAT_BFLAG_LAST_USER) ? CKPT_LAST_USER_START : CKPT_USER_START;
    case CHAT_B_TOOL_RESPONSE_START: return CKPT_TOOL_RESULT;
    case CHAT_B_ASSISTANT_START: return CKPT_ASSISTANT_START;
    case CHAT_B_GENERATION_START: return CKPT_GENERATION_START;
    default: return CKPT_USER_START; /* a later system turn: like an earlier user turn */
    }
}

static void fill_reuse(eng_reuse *r, ckpt_plan *p)
{
    r->seq = p->seq;
    r->start = p->start;
    r->replayed = p->replayed;
    r->ckpt_kind = p->ckpt_kind;
    r->ckpt_pos = p->ckpt_pos;
    r->ckpt_name = p->ckpt_kind >= 0 ? ckpt_kind_name(p->ckpt_kind) : NULL;
    r->from_disk = p->from_disk;
    r->plan = p;
}

static int store_begin(void *self, const int32_t *ids, int32_t n, const eng_mark *marks, int n_marks, bool fresh,
                       eng_reuse *r, wk_error *err)
{
    ckpt_plan *p = calloc(1, sizeof *p);
    ckpt_mark *cm = n_marks ? malloc((size_t)n_marks * sizeof *cm) : NULL;
    if (!p || (n_marks && !cm)) {
        free(p);
        free(cm);
        return wk_fail(err, WK_ENOMEM, "cache: out of memory");
    }
    for (int i = 0; i < n_marks; i++) {
        cm[i].pos = marks[i].pos;
        cm[i].kind = srv_ckpt_kind_of_boundary(marks[i].kind, marks[i].flags);
    }
    int rc = ckpt_cache_begin(self, ids, n, cm, n_marks, fresh, p, err);
    free(cm);
    if (rc) {
        free(p);
        return rc;
    }
    fill_reuse(r, p);
    return 0;
}

static int store_prefill(void *self, eng_reuse *r, const int32_t *ids, int32_t n, const struct eng_prefill_opts *opts,
                         wk_error *err)
{
    return ckpt_cache_prefill(self, r->plan, ids, n, opts, err);
}

static void store_decoded(void *self, eng_reuse *r) { ckpt_cache_decoded(self, r->plan); }

static void store_end(void *self, eng_reuse *r, bool ok)
{
    ckpt_cache_end(self, r->plan, ok);
    free(r->plan);
    r->plan = NULL;
}

static void store_clear(void *self) { ckpt_cache_clear(self); }
static json_t *store_json(void *self) { return ckpt_cache_json(self); }
static void store_free(void *self) { ckpt_cache_free(self); }

int srv_prefix_cache_factory(void *user, struct eng_ctx *ctx, int32_t n_ctx, eng_prefix_store *out, wk_error *err)
{
    (void)n_ctx; /* the cache sizes its sequences from the context's options */
    ckpt_cache *c = NULL;
    int rc = ckpt_cache_new(&c, ctx, (const ckpt_cache_config *)user, err);
    if (rc) return rc;
    memset(out, 0, sizeof *out);
    out->self = c;
    out->begin = store_begin;
    out->prefill = store_prefill;
    out->decoded = store_decoded;
    out->end = store_end;
    out->clear = store_clear;
    out->state_json = store_json;
    out->free = store_free;
    return 0;
}
