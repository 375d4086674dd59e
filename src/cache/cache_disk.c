/* The cache's side of the disk archive: scanning the folder at start,
 * choosing an archived entry, loading it lazily into a slot, archiving
 * slots after their requests (in bounded steps, when the engine is idle:
 * the reply never waits for the disk; a follow-up turn appends to its
 * conversation's file) and keeping the folder under its size cap. */
#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_impl.h"
#include "util/log.h"

/* Checkpoints one write adds: the newest few, which are the ones the next
 * turn of a conversation resumes from (generation start, prompt end, end of
 * generation, last user turn). */
#define ARCHIVE_CKPTS 4
/* A file holding more checkpoints than this is rewritten with the newest
 * ARCHIVE_CKPTS instead of appended to: older turns' states are dead
 * weight once newer ones exist. */
#define FILE_CKPTS_MAX (2 * ARCHIVE_CKPTS)

static int find_disk(const ckpt_cache *c, int64_t key)
{
    for (int i = 0; i < c->n_disk; i++)
        if (c->disk[i].key == key) return i;
    return -1;
}

static void remove_disk(ckpt_cache *c, int i, bool unlink_file)
{
    if (unlink_file) unlink(c->disk[i].info.path);
    pidx_remove(c->ix, c->disk[i].key);
    ckpt_archive_info_free(&c->disk[i].info);
    c->disk[i] = c->disk[--c->n_disk];
}

/* Takes info (moved) into the table and the index, replacing an entry of
 * the same conversation. */
static int add_disk(ckpt_cache *c, ckpt_archive_info *info, wk_error *err)
{
    for (int i = 0; i < c->n_disk; i++)
        if (c->disk[i].info.conversation == info->conversation) {
            remove_disk(c, i, false);
            break;
        }
    if (c->n_disk == c->cap_disk) {
        int cap = c->cap_disk ? 2 * c->cap_disk : 16;
        disk_entry *d = realloc(c->disk, sizeof *d * (size_t)cap);
        if (!d) return wk_fail(err, WK_ENOMEM, "cache: out of memory");
        c->disk = d;
        c->cap_disk = cap;
    }
    disk_entry *e = &c->disk[c->n_disk];
    e->key = CACHE_DISK_KEY + c->next_disk_key++;
    int rc = pidx_put(c->ix, e->key, info->tokens, info->n_tokens, err);
    if (rc) return rc;
    e->info = *info;
    memset(info, 0, sizeof *info);
    c->n_disk++;
    return 0;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* "<conv>.wkc.tmp.<pid>" left by a process that died mid-write: deleted
 * unless that process still runs (another server writing it now). True
 * when name is such a file. */
static bool remove_stale_tmp(const char *name, const char *path)
{
    const char *t = strstr(name, CKPT_ARCHIVE_EXT ".tmp.");
    if (!t) return false;
    char *end;
    long pid = strtol(t + strlen(CKPT_ARCHIVE_EXT ".tmp."), &end, 10);
    if (*end || pid <= 0) return true;
    if (kill((pid_t)pid, 0) == 0 || errno == EPERM) return true;
    WK_INFO("cache: deleting %s (left by an interrupted write)", path);
    unlink(path);
    return true;
}

int cache_disk_scan(ckpt_cache *c, wk_error *err)
{
    if (mkdir(c->dir, 0755) && errno != EEXIST)
        return wk_fail(err, WK_EIO, "cache folder %s: %s", c->dir, strerror(errno));
    DIR *d = opendir(c->dir);
    if (!d) return wk_fail(err, WK_EIO, "cache folder %s: %s", c->dir, strerror(errno));
    struct dirent *de;
    int rc = 0, other_version = 0;
    wk_error version_msg = {0};
    while (!rc && (de = readdir(d))) {
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
        if (remove_stale_tmp(de->d_name, path)) continue;
        if (!has_suffix(de->d_name, CKPT_ARCHIVE_EXT)) continue;
        ckpt_archive_info info;
        wk_error e = {0};
        int r = ckpt_archive_scan(path, &info, &e);
        if (r == WK_EUNSUPPORTED) { /* another wick build may share the folder: leave its files alone */
            if (!other_version++) version_msg = e;
            continue;
        }
        if (r == WK_EFORMAT) {
            WK_WARN("cache: %s; deleted", e.msg);
            unlink(path);
            c->st.disk_corrupt++;
            continue;
        }
        if (r) {
            WK_WARN("cache: %s; skipped", e.msg);
            continue;
        }
        if (info.torn_bytes)
            WK_WARN("cache: %s: %zu bytes after its last whole record (an interrupted write) are ignored", path,
                    info.torn_bytes);
        if (info.model_id != c->m->model_id) { /* another model's file: leave it alone */
            ckpt_archive_info_free(&info);
            continue;
        }
        rc = add_disk(c, &info, err);
        ckpt_archive_info_free(&info);
    }
    closedir(d);
    if (other_version)
        WK_WARN("cache: %d file(s) in %s are of another archive format version (%s); skipped, not deleted",
                other_version, c->dir, version_msg.msg);
    if (!rc && c->n_disk) WK_INFO("cache: %d archived conversation(s) in %s", c->n_disk, c->dir);
    return rc;
}

void cache_disk_free(ckpt_cache *c)
{
    for (int i = 0; i < c->n_disk; i++) ckpt_archive_info_free(&c->disk[i].info);
    free(c->disk);
    c->disk = NULL;
    c->n_disk = 0;
}

size_t cache_disk_bytes(const ckpt_cache *c)
{
    size_t b = 0;
    for (int i = 0; i < c->n_disk; i++) b += c->disk[i].info.file_bytes;
    return b;
}

choice cache_disk_usable(ckpt_cache *c, int64_t key, const int32_t *ids, int32_t n, int32_t match)
{
    choice ch = {-1, -1, match, 0, -1, -1};
    int di = find_disk(c, key);
    if (di < 0) return ch;
    const ckpt_archive_info *in = &c->disk[di].info;
    int32_t limit = match < n - 1 ? match : n - 1;
    if (limit <= 0 || in->policy_fp != cache_policy_now(c) || in->n_tokens > c->n_ctx) return ch;
    ch.disk = di;
    if (!c->recurrent) {
        ch.start = limit;
        ch.kind = CKPT_KV_PREFIX;
        return ch;
    }
    for (int32_t i = 0; i < in->n_ckpt; i++) {
        const ckpt_archive_ckpt *k = &in->ckpts[i];
        if (k->pos <= 0 || k->pos > limit || k->pos <= ch.start) continue;
        if (ckpt_prefix_hash(ids, k->pos) != k->prefix_hash) continue;
        ch.start = k->pos;
        ch.kind = k->kind;
        ch.ck_index = i;
    }
    return ch;
}

/* The file behind entry di was replaced since the scan (another server
 * process wrote a newer version): read it again and re-choose. */
static int refresh_entry(ckpt_cache *c, int *di, choice *ch, const int32_t *ids, int32_t n)
{
    char path[sizeof c->disk[0].info.path];
    snprintf(path, sizeof path, "%s", c->disk[*di].info.path);
    ckpt_archive_info info;
    wk_error err = {0};
    if (ckpt_archive_scan(path, &info, &err) || info.model_id != c->m->model_id) {
        ckpt_archive_info_free(&info);
        remove_disk(c, *di, false);
        return WK_ENOTFOUND;
    }
    int32_t match = 0;
    while (match < n && match < info.n_tokens && ids[match] == info.tokens[match]) match++;
    if (add_disk(c, &info, &err)) {
        ckpt_archive_info_free(&info);
        return WK_ENOMEM;
    }
    *di = c->n_disk - 1;
    *ch = cache_disk_usable(c, c->disk[*di].key, ids, n, match);
    return ch->start > 0 ? 0 : WK_ENOTFOUND;
}

int cache_disk_load(ckpt_cache *c, int di, int si, choice *ch, const int32_t *ids, int32_t n)
{
    cache_slot *s = &c->slots[si];
    for (int i = 0; i < s->n_ck; i++) ckpt_free(&s->ck[i]);
    s->n_ck = 0;
    ckpt_archive_info *in = &c->disk[di].info;
    ckpt *loaded = calloc((size_t)in->n_ckpt + 1, sizeof *loaded);
    wk_error err = {0};
    int rc = loaded ? ckpt_archive_load(in, c->ctx, s->seq, loaded, &err) : WK_ENOMEM;
    if (rc == WK_EBUSY) {
        WK_INFO("cache: %s; reading it again", err.msg);
        free(loaded);
        loaded = NULL;
        rc = refresh_entry(c, &di, ch, ids, n);
        if (!rc) {
            in = &c->disk[di].info;
            loaded = calloc((size_t)in->n_ckpt + 1, sizeof *loaded);
            rc = loaded ? ckpt_archive_load(in, c->ctx, s->seq, loaded, &err) : WK_ENOMEM;
        }
    }
    if (rc) {
        WK_WARN("cache: %s", err.msg);
        if (rc == WK_EFORMAT) {
            WK_WARN("cache: deleting %s", in->path);
            c->st.disk_corrupt++;
            remove_disk(c, di, true);
        } else if (rc != WK_ENOTFOUND) {
            /* unusable here (another shape, too long, unreadable): forget it rather than retry it on every request */
            remove_disk(c, di, false);
        }
        free(loaded);
        eng_seq_clear(s->seq);
        return rc;
    }
    const int32_t want = ch->start;
    ch->slot = si;
    ch->ck_index = -1;
    for (int32_t i = 0; i < in->n_ckpt; i++) {
        if (slot_add_ckpt(s, &loaded[i])) ckpt_free(&loaded[i]);
    }
    for (int i = 0; i < s->n_ck; i++)
        if (s->ck[i].snap.pos == want) ch->ck_index = i;
    free(loaded);
    s->conv = in->conversation;
    c->st.disk_loads++;
    WK_INFO("cache: loaded %d tokens of conversation %016llx from %s", in->n_tokens,
            (unsigned long long)in->conversation, in->path);
    if (c->recurrent && ch->ck_index < 0) return WK_ENOTFOUND; /* cannot happen: chosen from the same table */
    return 0;
}

/* Deletes the oldest files (never `keep`) until the folder fits its cap. */
static void enforce_disk_cap(ckpt_cache *c, uint64_t keep)
{
    while (cache_disk_bytes(c) > c->cfg.disk_bytes) {
        int victim = -1;
        for (int i = 0; i < c->n_disk; i++) {
            if (c->disk[i].info.conversation == keep) continue;
            if (victim < 0 || c->disk[i].info.mtime < c->disk[victim].info.mtime) victim = i;
        }
        if (victim < 0) break;
        WK_DEBUG("cache: archive over its cap; deleting %s", c->disk[victim].info.path);
        remove_disk(c, victim, true);
        c->st.evictions++;
    }
}

static int find_conv(const ckpt_cache *c, uint64_t conv)
{
    for (int i = 0; i < c->n_disk; i++)
        if (c->disk[i].info.conversation == conv) return i;
    return -1;
}

static bool in_file(const ckpt_archive_info *in, const ckpt *k)
{
    for (int32_t i = 0; i < in->n_ckpt; i++)
        if (in->ckpts[i].pos == k->snap.pos && in->ckpts[i].kind == k->kind) return true;
    return false;
}

/* Starts the writer for slot si: an append when its file holds a prefix of
 * the slot's tokens and few checkpoints, else a whole new file. 0 and
 * c->writer set, 1 when there is nothing to write, < 0 on error. */
static int start_writer(ckpt_cache *c, int si, wk_error *err)
{
    cache_slot *s = &c->slots[si];
    int32_t pos = s->seq ? eng_seq_pos(s->seq) : 0;
    if (pos == 0) return 1;
    int di = find_conv(c, s->conv);
    const ckpt_archive_info *in = di >= 0 ? &c->disk[di].info : NULL;
    bool append = in && in->n_tokens < pos && in->n_ckpt < FILE_CKPTS_MAX &&
                  in->policy_fp == eng_seq_policy_fp(s->seq) &&
                  !memcmp(in->tokens, eng_seq_tokens(s->seq), sizeof(int32_t) * (size_t)in->n_tokens);
    if (in && in->n_tokens == pos && !memcmp(in->tokens, eng_seq_tokens(s->seq), sizeof(int32_t) * (size_t)pos)) {
        bool news = false;
        for (int i = 0; i < s->n_ck && !news; i++)
            news = s->ck[i].complete && s->ck[i].snap.pos > 0 && s->ck[i].kind < CKPT_KIND_COUNT && !in_file(in, &s->ck[i]);
        if (!news) return 1; /* the file already holds this state */
    }
    const ckpt *pick[ARCHIVE_CKPTS];
    int n = 0;
    for (int i = s->n_ck - 1; i >= 0 && n < ARCHIVE_CKPTS; i--) {
        const ckpt *k = &s->ck[i];
        if (!k->complete || k->snap.pos <= 0 || k->kind >= CKPT_KIND_COUNT) continue;
        if (append && in_file(in, k)) continue;
        pick[n++] = k;
    }
    /* oldest first in the file */
    for (int i = 0; i < n / 2; i++) {
        const ckpt *t = pick[i];
        pick[i] = pick[n - 1 - i];
        pick[n - 1 - i] = t;
    }
    int rc = ckpt_archive_writer_start(&c->writer, c->dir, s->conv, c->ctx, s->seq, append ? in->n_tokens : 0,
                                       append ? in->file_bytes : 0, pick, n, err);
    if (rc) return rc;
    ckpt_archive_writer_set_tag(c->writer, si);
    return 0;
}

/* The writer finished slot si's file: index what the file now holds. */
static void writer_done(ckpt_cache *c, int si)
{
    cache_slot *s = &c->slots[si];
    c->st.disk_writes++;
    char path[4096 + 64];
    ckpt_archive_path(path, sizeof path, c->dir, s->conv);
    ckpt_archive_info info;
    wk_error err = {0};
    if (ckpt_archive_scan(path, &info, &err) || add_disk(c, &info, &err))
        WK_WARN("cache: re-reading %s: %s", path, err.msg);
    ckpt_archive_info_free(&info);
    enforce_disk_cap(c, s->conv);
}

void cache_disk_mark_dirty(ckpt_cache *c, int si)
{
    if (c->dir[0] && c->slots[si].seq) c->slots[si].dirty = true;
}

void cache_disk_release_slot(ckpt_cache *c, int si)
{
    if (!c->writer || ckpt_archive_writer_tag(c->writer) != si) return;
    ckpt_archive_writer_free(c->writer); /* the file goes back to its last whole state */
    c->writer = NULL;
}

bool ckpt_cache_archive_pending(const ckpt_cache *c)
{
    if (c->writer) return true;
    for (int i = 0; i < c->cfg.max_slots; i++)
        if (c->slots[i].dirty) return true;
    return false;
}

/* Most recently used dirty slot, or -1. */
static int next_dirty(const ckpt_cache *c)
{
    int best = -1;
    for (int i = 0; i < c->cfg.max_slots; i++)
        if (c->slots[i].dirty && (best < 0 || c->slots[i].last_used_ms > c->slots[best].last_used_ms)) best = i;
    return best;
}

/* One step of archiving slot si (or of whichever slot is due when si < 0). */
static bool archive_step(ckpt_cache *c, int si, size_t max_bytes)
{
    wk_error err = {0};
    if (!c->writer) {
        if (si < 0) si = next_dirty(c);
        if (si < 0) return false;
        int rc = start_writer(c, si, &err);
        if (rc) {
            if (rc < 0) WK_WARN("cache: %s", err.msg);
            c->slots[si].dirty = false; /* nothing to write, or it cannot be: not retried on every idle step */
            return ckpt_cache_archive_pending(c);
        }
    }
    int tag = ckpt_archive_writer_tag(c->writer);
    int rc = ckpt_archive_writer_step(c->writer, max_bytes, &err);
    if (rc > 0) return true;
    ckpt_archive_writer_free(c->writer);
    c->writer = NULL;
    c->slots[tag].dirty = false;
    if (rc == 0) writer_done(c, tag);
    else WK_WARN("cache: %s", err.msg);
    return ckpt_cache_archive_pending(c);
}

bool ckpt_cache_archive_step(ckpt_cache *c, size_t max_bytes) { return archive_step(c, -1, max_bytes); }

void cache_disk_flush_slot(ckpt_cache *c, int si)
{
    if (c->writer && ckpt_archive_writer_tag(c->writer) != si) /* finish the other slot first */
        while (c->writer && archive_step(c, ckpt_archive_writer_tag(c->writer), SIZE_MAX)) {}
    while (c->slots[si].dirty && archive_step(c, si, SIZE_MAX)) {}
}

void ckpt_cache_archive_flush(ckpt_cache *c)
{
    while (archive_step(c, -1, SIZE_MAX)) {}
}
