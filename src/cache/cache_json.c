/* Counters and the monitor's view of the cache. */
#include <stdio.h>

#include "cache/cache_impl.h"
#include "util/timeutil.h"

void ckpt_cache_get_stats(const ckpt_cache *c, ckpt_cache_stats *st)
{
    *st = c->st;
    st->ram_bytes = cache_ram_bytes(c);
    st->ram_budget = c->cfg.mem_bytes;
    st->disk_bytes = cache_disk_bytes(c);
    st->disk_budget = c->dir[0] ? c->cfg.disk_bytes : 0;
    st->n_slots = st->n_ckpts = 0;
    for (int i = 0; i < c->cfg.max_slots; i++) {
        if (!c->slots[i].seq) continue;
        st->n_slots++;
        st->n_ckpts += c->slots[i].n_ck;
    }
    st->n_disk = c->n_disk;
}

static json_t *conv_json(uint64_t conv)
{
    char b[24];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)conv);
    return json_string(b);
}

static json_t *ckpt_json(int32_t pos, int kind, uint64_t bytes, const char *where)
{
    json_t *o = json_object();
    json_object_set_new(o, "pos", json_integer(pos));
    json_object_set_new(o, "kind", json_string(ckpt_kind_name(kind)));
    json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(o, "where", json_string(where));
    return o;
}

json_t *ckpt_cache_json(const ckpt_cache *c)
{
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    json_t *o = json_object();
    json_object_set_new(o, "ram_bytes", json_integer((json_int_t)st.ram_bytes));
    json_object_set_new(o, "ram_budget", json_integer((json_int_t)st.ram_budget));
    json_object_set_new(o, "disk_bytes", json_integer((json_int_t)st.disk_bytes));
    json_object_set_new(o, "disk_budget", json_integer((json_int_t)st.disk_budget));
    json_object_set_new(o, "disk_dir", c->dir[0] ? json_string(c->dir) : json_null());
    json_object_set_new(o, "hits", json_integer((json_int_t)st.hits));
    json_object_set_new(o, "copies", json_integer((json_int_t)st.copies));
    json_object_set_new(o, "archive_pending", json_boolean(ckpt_cache_archive_pending(c)));
    json_object_set_new(o, "misses", json_integer((json_int_t)st.misses));
    json_object_set_new(o, "evictions", json_integer((json_int_t)st.evictions));
    json_object_set_new(o, "refused", json_integer((json_int_t)st.refused));
    json_object_set_new(o, "replayed_tokens", json_integer((json_int_t)st.replayed_tokens));
    json_object_set_new(o, "disk_loads", json_integer((json_int_t)st.disk_loads));
    json_object_set_new(o, "disk_writes", json_integer((json_int_t)st.disk_writes));
    json_object_set_new(o, "disk_corrupt", json_integer((json_int_t)st.disk_corrupt));
    json_object_set_new(o, "max_slots", json_integer(c->cfg.max_slots));
    json_t *slots = json_array();
    double now = wk_now_ms();
    for (int i = 0; i < c->cfg.max_slots; i++) {
        const cache_slot *s = &c->slots[i];
        if (!s->seq) continue;
        json_t *so = json_object();
        json_object_set_new(so, "slot", json_integer(i));
        json_object_set_new(so, "conversation", conv_json(s->conv));
        json_object_set_new(so, "tokens", json_integer(eng_seq_pos(s->seq)));
        json_object_set_new(so, "kv_bytes", json_integer((json_int_t)eng_seq_kv_bytes_held(s->seq)));
        json_object_set_new(so, "active", json_boolean(s->busy));
        json_object_set_new(so, "idle_s", json_real(s->busy ? 0.0 : (now - s->last_used_ms) / 1000.0));
        json_t *cks = json_array();
        for (int k = 0; k < s->n_ck; k++)
            json_array_append_new(cks, ckpt_json(s->ck[k].snap.pos, s->ck[k].kind, ckpt_bytes(&s->ck[k]), "ram"));
        json_object_set_new(so, "checkpoints", cks);
        json_array_append_new(slots, so);
    }
    json_object_set_new(o, "slots", slots);
    json_t *arch = json_array();
    for (int i = 0; i < c->n_disk; i++) {
        const ckpt_archive_info *in = &c->disk[i].info;
        json_t *ao = json_object();
        json_object_set_new(ao, "conversation", conv_json(in->conversation));
        json_object_set_new(ao, "tokens", json_integer(in->n_tokens));
        json_object_set_new(ao, "bytes", json_integer((json_int_t)in->file_bytes));
        json_t *cks = json_array();
        for (int k = 0; k < in->n_ckpt; k++)
            json_array_append_new(cks, ckpt_json(in->ckpts[k].pos, in->ckpts[k].kind, in->state_bytes, "disk"));
        json_object_set_new(ao, "checkpoints", cks);
        json_array_append_new(arch, ao);
    }
    json_object_set_new(o, "archive", arch);
    return o;
}
