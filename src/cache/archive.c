/* Disk archive: versioned, checksummed, append-only files written in
 * bounded steps (format in archive.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/archive.h"
#include "model/model.h"
#include "util/os.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "archive bulk arrays are written in host order: add byte swapping for big-endian hosts"
#endif

#define HEADER_BYTES 72
#define RECORD_HEADER_BYTES 56
#define MAGIC "WKCACHE"        /* 7 letters + NUL = 8 bytes */
#define RECORD_MAGIC "WKRECORD" /* exactly 8 bytes, no NUL */
#define MAX_TOKENS (1 << 24)   /* same cap as --ctx */
#define MAX_CKPTS 1024         /* a file holds a handful; anything near this is garbage */
#define MAX_RECORDS 65536      /* one per turn of a conversation */
#define MAX_DIM 65536          /* heads, head dims, layers: far above any real model */
#define MAX_STATE_BYTES ((uint64_t)1 << 40)

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void ckpt_archive_path(char *out, size_t cap, const char *dir, uint64_t conversation)
{
    snprintf(out, cap, "%s/%016llx%s", dir, (unsigned long long)conversation, CKPT_ARCHIVE_EXT);
}

void ckpt_archive_info_free(ckpt_archive_info *info)
{
    if (!info) return;
    free(info->tokens);
    free(info->ckpts);
    free(info->records);
    memset(info, 0, sizeof *info);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_exact(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int pread_exact(int fd, void *buf, size_t n, uint64_t off)
{
    if (off > (uint64_t)LLONG_MAX || lseek(fd, (off_t)off, SEEK_SET) < 0) return -1;
    return read_exact(fd, buf, n);
}

typedef struct kv_shape {
    uint32_t n_attn, n_head_kv, d_k, d_v;
} kv_shape;

/* Row widths in uint16_t units of the context's KV type (a Q8_0 row is
 * d/32 blocks of 17 units), so sizes and shape checks hold for both types. */
static kv_shape shape_of(const eng_ctx *ctx)
{
    const model *m = eng_ctx_model(ctx);
    int t = eng_ctx_options(ctx)->kv_type;
    return (kv_shape){m->hp.n_attn_layers, m->hp.n_head_kv, (uint32_t)be_kv_row_units(t, m->hp.d_k),
                      (uint32_t)be_kv_row_units(t, m->hp.d_v)};
}

/* KV bytes of n_tok positions: n_attn · n_head_kv · n_tok · (d_k + d_v) · 2,
 * false if it does not fit in 64 bits (a hostile header). */
static bool kv_bytes_of(const kv_shape *sh, uint64_t n_tok, uint64_t *out)
{
    uint64_t x;
    return !__builtin_mul_overflow((uint64_t)sh->n_attn, (uint64_t)sh->n_head_kv, &x) &&
           !__builtin_mul_overflow(x, n_tok, &x) &&
           !__builtin_mul_overflow(x, (uint64_t)sh->d_k + sh->d_v, &x) && !__builtin_mul_overflow(x, 2, out);
}

/* meta + payload bytes of a record, false on overflow. */
static bool body_bytes_of(const kv_shape *sh, uint64_t state_bytes, int32_t n_tok, int32_t n_ck, uint64_t *meta,
                          uint64_t *body)
{
    uint64_t kv, states;
    *meta = 4ull * (uint64_t)n_tok + 16ull * (uint64_t)n_ck;
    return kv_bytes_of(sh, (uint64_t)n_tok, &kv) && !__builtin_mul_overflow((uint64_t)n_ck, state_bytes, &states) &&
           !__builtin_add_overflow(*meta, kv, body) && !__builtin_add_overflow(*body, states, body);
}

/* ---- scan ---------------------------------------------------------------------- */

typedef struct growable {
    void *p;
    size_t n, cap, elem;
} growable;

static void *grow(growable *g, size_t more)
{
    if (g->n + more > g->cap) {
        size_t cap = g->cap ? g->cap : 16;
        while (cap < g->n + more) cap *= 2;
        void *q = realloc(g->p, cap * g->elem);
        if (!q) return NULL;
        g->p = q;
        g->cap = cap;
    }
    void *at = (char *)g->p + g->n * g->elem;
    g->n += more;
    return at;
}

/* Reads one record header + meta at off; 0 when whole and consistent with
 * what came before (pos tokens), -1 otherwise (the torn or damaged tail). */
static int scan_record(int fd, uint64_t off, uint64_t file_size, const kv_shape *sh, uint64_t state_bytes,
                       int32_t pos, growable *toks, growable *cks, ckpt_archive_record *rec, uint64_t *next)
{
    uint8_t h[RECORD_HEADER_BYTES];
    if (off + RECORD_HEADER_BYTES > file_size || pread_exact(fd, h, sizeof h, off)) return -1;
    if (memcmp(h, RECORD_MAGIC, 8) || get_u64(h + 48) != XXH3_64bits(h, 48)) return -1;
    int32_t start = (int32_t)get_u32(h + 8), n_tok = (int32_t)get_u32(h + 12), n_ck = (int32_t)get_u32(h + 16);
    if (start != pos || n_tok <= 0 || n_tok > MAX_TOKENS - pos || n_ck < 0 ||
        (size_t)n_ck > MAX_CKPTS - cks->n)
        return -1;
    uint64_t meta, body, end;
    if (!body_bytes_of(sh, state_bytes, n_tok, n_ck, &meta, &body) || body != get_u64(h + 24) ||
        __builtin_add_overflow(off + RECORD_HEADER_BYTES, body, &end) || end > file_size)
        return -1;
    size_t old_toks = toks->n, old_cks = cks->n;
    int32_t *t = grow(toks, (size_t)n_tok);
    uint8_t *table = n_ck ? malloc((size_t)n_ck * 16) : NULL;
    XXH3_state_t *mh = XXH3_createState();
    int rc = -1;
    if (!t || (n_ck && !table) || !mh || read_exact(fd, t, 4ull * (size_t)n_tok) ||
        (n_ck && read_exact(fd, table, (size_t)n_ck * 16)))
        goto out;
    XXH3_64bits_reset(mh);
    XXH3_64bits_update(mh, t, 4ull * (size_t)n_tok);
    if (n_ck) XXH3_64bits_update(mh, table, (size_t)n_ck * 16);
    if (XXH3_64bits_digest(mh) != get_u64(h + 32)) goto out;
    uint64_t payload = off + RECORD_HEADER_BYTES + meta, kv;
    if (!kv_bytes_of(sh, (uint64_t)n_tok, &kv)) goto out; /* checked with the record's size; kept honest here */
    for (int32_t i = 0; i < n_ck; i++) {
        ckpt_archive_ckpt *k = grow(cks, 1);
        if (!k) goto out;
        k->pos = (int32_t)get_u32(table + 16 * i);
        k->kind = (int32_t)get_u32(table + 16 * i + 4);
        k->prefix_hash = get_u64(table + 16 * i + 8);
        k->state_offset = payload + kv + (uint64_t)i * state_bytes;
        if (k->pos <= 0 || k->pos > pos + n_tok || k->kind < 0 || k->kind >= CKPT_KIND_COUNT ||
            ckpt_prefix_hash(toks->p, k->pos) != k->prefix_hash)
            goto out;
    }
    *rec = (ckpt_archive_record){off, payload, start, n_tok, get_u64(h + 40)};
    *next = end;
    rc = 0;
out:
    if (rc) {
        toks->n = old_toks;
        cks->n = old_cks;
    }
    free(table);
    if (mh) XXH3_freeState(mh);
    return rc;
}

static int scan_fd(int fd, const char *path, ckpt_archive_info *info, kv_shape *sh, wk_error *err)
{
    memset(info, 0, sizeof *info);
    struct stat sb;
    if (fstat(fd, &sb)) return wk_fail(err, WK_EIO, "archive %s: %s", path, strerror(errno));
    uint8_t hdr[HEADER_BYTES];
    if ((size_t)sb.st_size < 16 || read_exact(fd, hdr, 16))
        return wk_fail(err, WK_EFORMAT, "archive %s: truncated header (%lld bytes)", path, (long long)sb.st_size);
    if (memcmp(hdr, MAGIC, 8)) return wk_fail(err, WK_EFORMAT, "archive %s: not a wick cache file (bad magic)", path);
    if (get_u32(hdr + 8) != CKPT_ARCHIVE_VERSION)
        return wk_fail(err, WK_EUNSUPPORTED, "archive %s: format version %u, this build reads %u", path,
                       get_u32(hdr + 8), CKPT_ARCHIVE_VERSION);
    if ((size_t)sb.st_size < HEADER_BYTES || read_exact(fd, hdr + 16, HEADER_BYTES - 16))
        return wk_fail(err, WK_EFORMAT, "archive %s: truncated header (%lld bytes)", path, (long long)sb.st_size);
    if (get_u32(hdr + 12) != HEADER_BYTES || get_u64(hdr + 64) != XXH3_64bits(hdr, 64))
        return wk_fail(err, WK_EFORMAT, "archive %s: header checksum mismatch", path);
    *sh = (kv_shape){get_u32(hdr + 40), get_u32(hdr + 44), get_u32(hdr + 48), get_u32(hdr + 52)};
    uint64_t state_bytes = get_u64(hdr + 56);
    if (sh->n_attn > MAX_DIM || sh->n_head_kv > MAX_DIM || sh->d_k > MAX_DIM || sh->d_v > MAX_DIM ||
        state_bytes > MAX_STATE_BYTES)
        return wk_fail(err, WK_EFORMAT, "archive %s: shape out of range", path);
    growable toks = {.elem = sizeof(int32_t)}, cks = {.elem = sizeof(ckpt_archive_ckpt)},
             recs = {.elem = sizeof(ckpt_archive_record)};
    uint64_t off = HEADER_BYTES, size = (uint64_t)sb.st_size;
    int32_t pos = 0;
    int rc = 0;
    while (recs.n < MAX_RECORDS) {
        ckpt_archive_record r;
        uint64_t next;
        if (scan_record(fd, off, size, sh, state_bytes, pos, &toks, &cks, &r, &next)) break;
        ckpt_archive_record *slot = grow(&recs, 1);
        if (!slot) {
            rc = wk_fail(err, WK_ENOMEM, "archive %s: out of memory", path);
            break;
        }
        *slot = r;
        pos += r.n_tok;
        off = next;
    }
    if (!rc && recs.n == 0)
        rc = wk_fail(err, WK_EFORMAT, "archive %s: no whole record (%lld bytes)", path, (long long)sb.st_size);
    if (rc) {
        free(toks.p);
        free(cks.p);
        free(recs.p);
        return rc;
    }
    snprintf(info->path, sizeof info->path, "%s", path);
    info->model_id = get_u64(hdr + 16);
    info->policy_fp = get_u64(hdr + 24);
    info->conversation = get_u64(hdr + 32);
    info->state_bytes = state_bytes;
    info->n_tokens = pos;
    info->tokens = toks.p;
    info->n_ckpt = (int32_t)cks.n;
    info->ckpts = cks.p;
    info->n_records = (int)recs.n;
    info->records = recs.p;
    info->file_bytes = (size_t)off;
    info->torn_bytes = (size_t)(size - off);
    info->mtime = wk_stat_mtime(&sb);
    return 0;
}

int ckpt_archive_scan(const char *path, ckpt_archive_info *info, wk_error *err)
{
    memset(info, 0, sizeof *info);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wk_fail(err, WK_EIO, "archive %s: %s", path, strerror(errno));
    kv_shape sh;
    int rc = scan_fd(fd, path, info, &sh, err);
    close(fd);
    return rc;
}

/* ---- load ---------------------------------------------------------------------- */

/* Reads (or, writing, writes) the KV rows [start, start + n) of attention
 * layer il's heads, K then V, through buf (n rows of the widest head),
 * updating hash h and adding the bytes moved to *moved. */
static int stream_layer_rows(eng_ctx *ctx, eng_seq *seq, int fd, uint32_t il, int32_t start, int32_t n, bool writing,
                             uint16_t *buf, XXH3_state_t *h, size_t *moved)
{
    const model *m = eng_ctx_model(ctx);
    const model_layer_state *ls = &eng_seq_state(seq)->layers[il];
    be_backend *be = eng_ctx_layer_backend(ctx, il); /* a layer split keeps each layer's KV on its device */
    for (int kv = 0; kv < 2; kv++) {
        size_t d = be_kv_row_units(ls->kv_type, kv ? m->hp.d_v : m->hp.d_k);
        size_t bytes = sizeof(uint16_t) * (size_t)n * d;
        for (uint32_t g = 0; g < m->hp.n_head_kv; g++) {
            uint16_t *rows = (kv ? ls->v : ls->k) + (size_t)g * ls->kv_head_stride + (size_t)start * d;
            if (writing) {
                be_to_host(be, buf, rows, bytes);
                XXH3_64bits_update(h, buf, bytes);
                if (write_all(fd, buf, bytes)) return WK_EIO;
            } else {
                if (read_exact(fd, buf, bytes)) return WK_EFORMAT;
                XXH3_64bits_update(h, buf, bytes);
                be_from_host(be, rows, buf, bytes);
            }
            *moved += bytes;
        }
    }
    return 0;
}

/* Next attention layer at or after il (n_layer when none is left). */
static uint32_t next_attn_layer(const model *m, uint32_t il)
{
    while (il < m->hp.n_layer && m->layers[il].attn_slot < 0) il++;
    return il;
}

/* Whether the fresh scan holds exactly what the old one saw. */
static bool same_as_scanned(const ckpt_archive_info *now, const ckpt_archive_info *was)
{
    if (now->n_tokens != was->n_tokens || now->n_records != was->n_records || now->n_ckpt != was->n_ckpt ||
        memcmp(now->tokens, was->tokens, sizeof(int32_t) * (size_t)was->n_tokens))
        return false;
    for (int i = 0; i < was->n_records; i++)
        if (now->records[i].payload_hash != was->records[i].payload_hash) return false;
    for (int32_t k = 0; k < was->n_ckpt; k++)
        if (now->ckpts[k].pos != was->ckpts[k].pos || now->ckpts[k].kind != was->ckpts[k].kind ||
            now->ckpts[k].prefix_hash != was->ckpts[k].prefix_hash)
            return false;
    return true;
}

int ckpt_archive_load(const ckpt_archive_info *info, eng_ctx *ctx, eng_seq *seq, ckpt *ckpts, wk_error *err)
{
    const model *m = eng_ctx_model(ctx);
    uint64_t fp = eng_ctx_fingerprint(ctx);
    eng_seq_clear(seq);
    if (info->model_id != m->model_id) return wk_fail(err, WK_EINVAL, "archive %s: made with another model", info->path);
    if (info->policy_fp != fp)
        return wk_fail(err, WK_EINVAL, "archive %s: made under another attention policy", info->path);
    if (info->n_tokens > eng_seq_capacity(seq))
        return wk_fail(err, WK_ERANGE, "archive %s: %d tokens exceed the context (%d)", info->path, info->n_tokens,
                       eng_seq_capacity(seq));
    int fd = open(info->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wk_fail(err, WK_EIO, "archive %s: %s", info->path, strerror(errno));
    ckpt_archive_info now;
    kv_shape sh, want = shape_of(ctx);
    int rc = scan_fd(fd, info->path, &now, &sh, err);
    if (rc) {
        close(fd);
        return rc == WK_EUNSUPPORTED ? wk_fail(err, WK_EBUSY, "archive %s: changed since it was scanned", info->path)
                                     : rc;
    }
    uint16_t *buf = NULL;
    XXH3_state_t *ph = NULL;
    if (!same_as_scanned(&now, info)) {
        rc = wk_fail(err, WK_EBUSY, "archive %s: changed since it was scanned", info->path);
        goto out;
    }
    if (memcmp(&sh, &want, sizeof sh) || (info->n_ckpt && now.state_bytes != eng_snapshot_bytes(seq))) {
        rc = wk_fail(err, WK_EINVAL, "archive %s: state shape does not match the model", info->path);
        goto out;
    }
    int32_t longest = 0;
    for (int i = 0; i < info->n_records; i++)
        if (now.records[i].n_tok > longest) longest = now.records[i].n_tok;
    size_t dmax = sh.d_k > sh.d_v ? sh.d_k : sh.d_v;
    buf = malloc(sizeof(uint16_t) * dmax * (size_t)longest + 1);
    ph = XXH3_createState();
    if (!buf || !ph) {
        rc = wk_fail(err, WK_ENOMEM, "archive %s: out of memory", info->path);
        goto out;
    }
    for (int i = 0; i < info->n_records && !rc; i++) {
        const ckpt_archive_record *r = &now.records[i];
        XXH3_64bits_reset(ph);
        if (lseek(fd, (off_t)r->payload_offset, SEEK_SET) < 0) rc = WK_EFORMAT;
        size_t moved = 0;
        for (uint32_t il = next_attn_layer(m, 0); il < m->hp.n_layer && !rc; il = next_attn_layer(m, il + 1))
            rc = stream_layer_rows(ctx, seq, fd, il, r->start, r->n_tok, false, buf, ph, &moved);
        /* the checkpoint states of this record follow its KV */
        for (int32_t k = 0; k < info->n_ckpt && !rc; k++) {
            uint64_t off = now.ckpts[k].state_offset;
            if (off < r->payload_offset || (i + 1 < now.n_records && off >= now.records[i + 1].offset)) continue;
            eng_snapshot *s = &ckpts[k].snap;
            s->state_bytes = now.state_bytes;
            s->state = now.state_bytes ? malloc(now.state_bytes) : NULL;
            if (now.state_bytes && !s->state) rc = WK_ENOMEM;
            else if (now.state_bytes && pread_exact(fd, s->state, now.state_bytes, off)) rc = WK_EFORMAT;
            else XXH3_64bits_update(ph, s->state, now.state_bytes);
            s->pos = now.ckpts[k].pos;
            s->prefix_hash = now.ckpts[k].prefix_hash;
            s->policy_fp = now.policy_fp;
            s->model_id = now.model_id;
            ckpts[k].kind = now.ckpts[k].kind;
            ckpts[k].complete = true;
        }
        if (!rc && XXH3_64bits_digest(ph) != r->payload_hash) rc = WK_EFORMAT;
    }
    if (!rc) rc = eng_seq_adopt(seq, now.tokens, info->n_tokens, now.policy_fp, err);
    else if (rc == WK_ENOMEM) wk_fail(err, rc, "archive %s: out of memory", info->path);
    else wk_fail(err, rc, "archive %s: payload truncated or checksum mismatch", info->path);
    if (rc) {
        for (int32_t k = 0; k < info->n_ckpt; k++) ckpt_free(&ckpts[k]);
        eng_seq_clear(seq);
    }
out:
    free(buf);
    if (ph) XXH3_freeState(ph);
    close(fd);
    ckpt_archive_info_free(&now);
    return rc;
}

/* ---- write --------------------------------------------------------------------- */

enum { W_KV = 0, W_STATES, W_COMMIT, W_DONE, W_FAILED };

struct ckpt_archive_writer {
    eng_ctx *ctx;
    eng_seq *seq;
    char dir[4096], path[4200], tmp[4300];
    bool rewrite;               /* a new file under tmp, renamed when done */
    int fd;
    uint64_t base_bytes;        /* the file's length before this write */
    uint64_t rec_offset;        /* where this record's header goes */
    int32_t from, end;          /* positions of the record */
    const ckpt **ckpts;
    int n_ckpt;
    int phase;
    uint32_t next_layer;        /* next attention layer to stream (index into the model's layers) */
    int next_ck;
    uint16_t *buf;
    size_t buf_rows;
    XXH3_state_t *ph;
    uint64_t meta_hash, body_bytes;
    int tag;
};

int ckpt_archive_writer_tag(const ckpt_archive_writer *w) { return w->tag; }
void ckpt_archive_writer_set_tag(ckpt_archive_writer *w, int tag) { w->tag = tag; }

void ckpt_archive_writer_free(ckpt_archive_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) {
        /* unfinished: put the file back as it was */
        if (w->rewrite) unlink(w->tmp);
        else if (ftruncate(w->fd, (off_t)w->base_bytes)) { /* the torn record is ignored by scans anyway */ }
        close(w->fd);
    }
    free(w->ckpts);
    free(w->buf);
    if (w->ph) XXH3_freeState(w->ph);
    free(w);
}

static void file_header(uint8_t *hdr, const eng_ctx *ctx, const eng_seq *seq, uint64_t conversation)
{
    const model *m = eng_ctx_model(ctx);
    kv_shape sh = shape_of(ctx);
    memset(hdr, 0, HEADER_BYTES);
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, CKPT_ARCHIVE_VERSION);
    put_u32(hdr + 12, HEADER_BYTES);
    put_u64(hdr + 16, m->model_id);
    put_u64(hdr + 24, eng_seq_policy_fp(seq));
    put_u64(hdr + 32, conversation);
    put_u32(hdr + 40, sh.n_attn);
    put_u32(hdr + 44, sh.n_head_kv);
    put_u32(hdr + 48, sh.d_k);
    put_u32(hdr + 52, sh.d_v);
    put_u64(hdr + 56, eng_snapshot_bytes(seq));
    put_u64(hdr + 64, XXH3_64bits(hdr, 64));
}

static int writer_fail(ckpt_archive_writer *w, wk_error *err, const char *what)
{
    int e = errno;
    w->phase = W_FAILED;
    return wk_fail(err, WK_EIO, "archive: %s %s: %s", what, w->rewrite ? w->tmp : w->path, strerror(e));
}

int ckpt_archive_writer_start(ckpt_archive_writer **out, const char *dir, uint64_t conversation, eng_ctx *ctx,
                              eng_seq *seq, int32_t from, size_t file_bytes, const ckpt *const *ckpts, int n_ckpt,
                              wk_error *err)
{
    *out = NULL;
    const int32_t end = eng_seq_pos(seq);
    const uint64_t state_bytes = eng_snapshot_bytes(seq);
    if (from < 0 || from >= end) return wk_fail(err, WK_EINVAL, "archive: nothing to write (%d of %d)", from, end);
    for (int i = 0; i < n_ckpt; i++)
        if (ckpts[i]->snap.pos <= 0 || ckpts[i]->snap.pos > end || ckpts[i]->snap.state_bytes != state_bytes ||
            !ckpts[i]->complete || ckpts[i]->kind < 0 || ckpts[i]->kind >= CKPT_KIND_COUNT)
            return wk_fail(err, WK_EINVAL, "archive: checkpoint at %d does not fit the sequence (%d tokens)",
                           ckpts[i]->snap.pos, end);
    ckpt_archive_writer *w = calloc(1, sizeof *w);
    if (!w) return wk_fail(err, WK_ENOMEM, "archive: out of memory");
    w->fd = -1;
    w->ctx = ctx;
    w->seq = seq;
    w->from = from;
    w->end = end;
    w->tag = -1;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    ckpt_archive_path(w->path, sizeof w->path, dir, conversation);
    w->rewrite = from == 0;
    const model *m = eng_ctx_model(ctx);
    size_t dmax = be_kv_row_units(eng_ctx_options(ctx)->kv_type, m->hp.d_k > m->hp.d_v ? m->hp.d_k : m->hp.d_v);
    w->buf_rows = (size_t)(end - from);
    w->ckpts = malloc(sizeof *w->ckpts * (size_t)(n_ckpt + 1));
    w->buf = malloc(sizeof(uint16_t) * dmax * w->buf_rows + 1);
    w->ph = XXH3_createState();
    if (!w->ckpts || !w->buf || !w->ph) {
        ckpt_archive_writer_free(w);
        return wk_fail(err, WK_ENOMEM, "archive: out of memory for %d positions", end - from);
    }
    for (int i = 0; i < n_ckpt; i++) w->ckpts[i] = ckpts[i];
    w->n_ckpt = n_ckpt;
    kv_shape sh = shape_of(ctx);
    uint64_t meta;
    if (!body_bytes_of(&sh, state_bytes, end - from, n_ckpt, &meta, &w->body_bytes)) {
        ckpt_archive_writer_free(w);
        return wk_fail(err, WK_ERANGE, "archive: record size overflows");
    }
    if (w->rewrite) {
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", w->path, (long)getpid());
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (w->fd < 0) {
            int rc = wk_fail(err, WK_EIO, "archive: cannot create %s: %s", w->tmp, strerror(errno));
            ckpt_archive_writer_free(w);
            return rc;
        }
        uint8_t hdr[HEADER_BYTES];
        file_header(hdr, ctx, seq, conversation);
        if (write_all(w->fd, hdr, sizeof hdr)) {
            int rc = writer_fail(w, err, "writing");
            ckpt_archive_writer_free(w);
            return rc;
        }
        w->base_bytes = 0;
        w->rec_offset = HEADER_BYTES;
    } else {
        w->fd = open(w->path, O_WRONLY | O_CLOEXEC);
        struct stat sb;
        if (w->fd < 0 || fstat(w->fd, &sb) || (uint64_t)sb.st_size < file_bytes) {
            int rc = wk_fail(err, WK_EIO, "archive: cannot append to %s: %s", w->path,
                             w->fd < 0 ? strerror(errno) : "shorter than its scan");
            ckpt_archive_writer_free(w);
            return rc;
        }
        w->base_bytes = file_bytes;
        /* a torn tail from a crash goes first */
        if (((uint64_t)sb.st_size > file_bytes && ftruncate(w->fd, (off_t)file_bytes)) ||
            lseek(w->fd, (off_t)file_bytes, SEEK_SET) < 0) {
            int rc = writer_fail(w, err, "appending to");
            ckpt_archive_writer_free(w);
            return rc;
        }
        w->rec_offset = file_bytes;
    }
    /* the header is written last (step W_COMMIT): zeros until then */
    uint8_t zero[RECORD_HEADER_BYTES] = {0};
    const int32_t *toks = eng_seq_tokens(seq) + from;
    size_t tok_bytes = sizeof(int32_t) * (size_t)(end - from);
    XXH3_state_t *mh = XXH3_createState();
    int rc = mh ? 0 : WK_ENOMEM;
    if (!rc) {
        XXH3_64bits_reset(mh);
        XXH3_64bits_update(mh, toks, tok_bytes);
    }
    if (!rc && (write_all(w->fd, zero, sizeof zero) || write_all(w->fd, toks, tok_bytes))) rc = WK_EIO;
    for (int i = 0; i < n_ckpt && !rc; i++) {
        uint8_t row[16];
        put_u32(row, (uint32_t)ckpts[i]->snap.pos);
        put_u32(row + 4, (uint32_t)ckpts[i]->kind);
        put_u64(row + 8, ckpts[i]->snap.prefix_hash);
        XXH3_64bits_update(mh, row, sizeof row);
        if (write_all(w->fd, row, sizeof row)) rc = WK_EIO;
    }
    if (mh) {
        w->meta_hash = XXH3_64bits_digest(mh);
        XXH3_freeState(mh);
    }
    if (rc) {
        rc = rc == WK_ENOMEM ? wk_fail(err, rc, "archive: out of memory") : writer_fail(w, err, "writing");
        ckpt_archive_writer_free(w);
        return rc;
    }
    XXH3_64bits_reset(w->ph);
    w->phase = W_KV;
    *out = w;
    return 0;
}

/* The record header, then everything on disk (and the rename of a new file). */
static int writer_commit(ckpt_archive_writer *w, wk_error *err)
{
    uint8_t h[RECORD_HEADER_BYTES] = {0};
    memcpy(h, RECORD_MAGIC, 8);
    put_u32(h + 8, (uint32_t)w->from);
    put_u32(h + 12, (uint32_t)(w->end - w->from));
    put_u32(h + 16, (uint32_t)w->n_ckpt);
    put_u64(h + 24, w->body_bytes);
    put_u64(h + 32, w->meta_hash);
    put_u64(h + 40, XXH3_64bits_digest(w->ph));
    put_u64(h + 48, XXH3_64bits(h, 48));
    /* body first, then the header that makes it count: a crash in between leaves a torn tail */
    if (fdatasync(w->fd)) return writer_fail(w, err, "syncing");
    if (pwrite(w->fd, h, sizeof h, (off_t)w->rec_offset) != (ssize_t)sizeof h) return writer_fail(w, err, "writing");
    if (fdatasync(w->fd)) return writer_fail(w, err, "syncing");
    if (close(w->fd)) {
        w->fd = -1;
        return writer_fail(w, err, "closing");
    }
    w->fd = -1;
    if (w->rewrite) {
        if (rename(w->tmp, w->path)) {
            int rc = writer_fail(w, err, "renaming");
            unlink(w->tmp);
            return rc;
        }
        /* the rename itself must survive a crash: sync the folder entry */
        int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    w->phase = W_DONE;
    return 0;
}

int ckpt_archive_writer_step(ckpt_archive_writer *w, size_t max_bytes, wk_error *err)
{
    if (w->phase == W_DONE) return 0;
    if (w->phase == W_FAILED) return wk_fail(err, WK_EIO, "archive: writer failed earlier");
    const model *m = eng_ctx_model(w->ctx);
    size_t done = 0;
    while (done < max_bytes && w->phase == W_KV) {
        uint32_t il = next_attn_layer(m, w->next_layer);
        if (il >= m->hp.n_layer) {
            w->phase = W_STATES;
            break;
        }
        if (stream_layer_rows(w->ctx, w->seq, w->fd, il, w->from, w->end - w->from, true, w->buf, w->ph, &done))
            return writer_fail(w, err, "writing");
        w->next_layer = il + 1;
    }
    while (done < max_bytes && w->phase == W_STATES) {
        if (w->next_ck >= w->n_ckpt) {
            w->phase = W_COMMIT;
            break;
        }
        const eng_snapshot *s = &w->ckpts[w->next_ck]->snap;
        XXH3_64bits_update(w->ph, s->state, s->state_bytes);
        if (s->state_bytes && write_all(w->fd, s->state, s->state_bytes)) return writer_fail(w, err, "writing");
        done += s->state_bytes;
        w->next_ck++;
    }
    if (w->phase == W_COMMIT) {
        int rc = writer_commit(w, err);
        if (rc) return rc;
        return 0;
    }
    return 1;
}

int ckpt_archive_write(const char *dir, uint64_t conversation, eng_ctx *ctx, eng_seq *seq, int32_t from,
                       size_t file_bytes, const ckpt *const *ckpts, int n_ckpt, wk_error *err)
{
    ckpt_archive_writer *w = NULL;
    int rc = ckpt_archive_writer_start(&w, dir, conversation, ctx, seq, from, file_bytes, ckpts, n_ckpt, err);
    while (rc == 0 && (rc = ckpt_archive_writer_step(w, SIZE_MAX, err)) > 0) {}
    ckpt_archive_writer_free(w);
    return rc < 0 ? rc : 0;
}
