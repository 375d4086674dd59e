/* Internals shared by the cache's files (cache.c, cache_budget.c,
 * cache_disk.c, cache_json.c). */
#ifndef WICK_CACHE_CACHE_IMPL_H
#define WICK_CACHE_CACHE_IMPL_H

#include "cache/archive.h"
#include "cache/cache.h"
#include "cache/prefix_index.h"
#include "model/model.h"

/* Index keys: slots are 0..max_slots-1, archive entries CACHE_DISK_KEY + serial. */
#define CACHE_DISK_KEY ((int64_t)1 << 40)

typedef struct cache_slot {
    eng_seq *seq;          /* NULL: not allocated */
    ckpt *ck;              /* sorted by position */
    int n_ck, cap_ck;
    bool live_ok;          /* the live state is confirmed (a request ended here) */
    bool dirty;            /* holds state the disk archive does not have yet */
    bool busy;             /* a request in progress works on it (between begin and end) */
    double last_used_ms;
    uint64_t conv;         /* conversation id (archive file name) */
} cache_slot;

typedef struct disk_entry {
    ckpt_archive_info info;
    int64_t key;
} disk_entry;

/* A reuse candidate. */
typedef struct choice {
    int slot;        /* RAM slot, or -1 */
    int disk;        /* archive entry, or -1 */
    int32_t match, start;
    int kind;        /* ckpt_kind / CKPT_KV_PREFIX / CKPT_LIVE */
    int ck_index;    /* slot checkpoint to restore, -1 if none */
} choice;

struct ckpt_cache {
    eng_ctx *ctx;          /* borrowed */
    const model *m;
    ckpt_cache_config cfg; /* cfg.dir unused: see dir */
    char dir[4096];
    bool recurrent;
    int32_t n_ctx;
    cache_slot *slots;     /* [cfg.max_slots] */
    pidx *ix;
    uint64_t next_conv;
    ckpt_archive_writer *writer; /* archiving in progress (its tag: the slot), or NULL */
    disk_entry *disk;
    int n_disk, cap_disk;
    int64_t next_disk_key;
    ckpt_cache_stats st;   /* counters; sizes are computed on demand */
};

uint64_t cache_policy_now(const ckpt_cache *c);
int slot_add_ckpt(cache_slot *s, ckpt *k);
void slot_remove_ckpt(cache_slot *s, int i);
void slot_drop_ckpts_after(cache_slot *s, int32_t pos);
void slot_release(ckpt_cache *c, int i);

/* cache_budget.c */
size_t cache_ram_bytes(const ckpt_cache *c);
void cache_trim_slot(ckpt_cache *c, cache_slot *s);
void cache_enforce_budget(ckpt_cache *c);

/* cache_disk.c */
int cache_disk_scan(ckpt_cache *c, wk_error *err);
void cache_disk_free(ckpt_cache *c);
choice cache_disk_usable(ckpt_cache *c, int64_t key, const int32_t *ids, int32_t n, int32_t match);
int cache_disk_load(ckpt_cache *c, int disk_index, int slot, choice *ch, const int32_t *ids, int32_t n);
/* After a request ended on slot: archive it when the engine is idle. */
void cache_disk_mark_dirty(ckpt_cache *c, int slot);
/* Before anything changes slot's sequence or checkpoints: abandons a write
 * in progress that reads them (the slot stays dirty, written again later). */
void cache_disk_release_slot(ckpt_cache *c, int slot);
/* Writes slot's pending state now (before it is evicted: nothing is lost). */
void cache_disk_flush_slot(ckpt_cache *c, int slot);
size_t cache_disk_bytes(const ckpt_cache *c);

#endif
