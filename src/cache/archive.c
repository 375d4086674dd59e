/* Disk archive: versioned, checksummed, atomically written files (format in
 * archive.h). */
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

#define HEADER_BYTES 96
#define MAGIC "WKCACHE"        /* 7 letters + NUL = 8 bytes */
#define MAX_TOKENS (1 << 24)   /* same cap as --ctx */
#define MAX_CKPTS 1024         /* a file holds a handful; anything near this is garbage */
#define MAX_DIM 65536          /* heads, head dims, layers: far above any real model */

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
    memset(info, 0, sizeof *info);
}

/* ---- write --------------------------------------------------------------------- */

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

static int read_exact(int fd, void *buf, size_t n);

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

/* Streams the KV of positions < n_tok through a host buffer: to the file
 * (write) or from it (read). Per attention layer: K heads, then V heads. */
static int stream_kv(eng_ctx *ctx, eng_seq *seq, int fd, int32_t n_tok, bool writing, XXH3_state_t *h)
{
    const model *m = eng_ctx_model(ctx);
    model_state *st = eng_seq_state(seq);
    be_backend *be = eng_ctx_backend(ctx);
    size_t dmax = m->hp.d_k > m->hp.d_v ? m->hp.d_k : m->hp.d_v;
    uint16_t *buf = malloc(sizeof(uint16_t) * (size_t)n_tok * dmax + 1);
    if (!buf) return WK_ENOMEM;
    int rc = 0;
    for (uint32_t il = 0; il < m->hp.n_layer && !rc; il++) {
        if (m->layers[il].attn_slot < 0) continue;
        const model_layer_state *ls = &st->layers[il];
        for (int kv = 0; kv < 2 && !rc; kv++) {
            uint16_t *base = kv ? ls->v : ls->k;
            size_t d = be_kv_row_units(ls->kv_type, kv ? m->hp.d_v : m->hp.d_k);
            size_t bytes = sizeof(uint16_t) * (size_t)n_tok * d;
            for (uint32_t g = 0; g < m->hp.n_head_kv && !rc; g++) {
                uint16_t *head = base + (size_t)g * ls->kv_head_stride;
                if (writing) {
                    be_to_host(be, buf, head, bytes);
                    XXH3_64bits_update(h, buf, bytes);
                    if (write_all(fd, buf, bytes)) rc = WK_EIO;
                } else {
                    if (read_exact(fd, buf, bytes)) {
                        rc = WK_EFORMAT;
                        break;
                    }
                    XXH3_64bits_update(h, buf, bytes);
                    be_from_host(be, head, buf, bytes);
                }
            }
        }
    }
    free(buf);
    return rc;
}

int ckpt_archive_write(const char *dir, uint64_t conversation, eng_ctx *ctx, eng_seq *seq, const ckpt *const *ckpts,
                       int n_ckpt, size_t *file_bytes, wk_error *err)
{
    const model *m = eng_ctx_model(ctx);
    const int32_t n_tok = eng_seq_pos(seq);
    const uint64_t state_bytes = eng_snapshot_bytes(seq);
    for (int i = 0; i < n_ckpt; i++)
        if (ckpts[i]->snap.pos > n_tok || ckpts[i]->snap.state_bytes != state_bytes || !ckpts[i]->complete)
            return wk_fail(err, WK_EINVAL, "archive: checkpoint at %d does not fit the sequence (%d tokens)",
                           ckpts[i]->snap.pos, n_tok);
    char path[4096], tmp[4200];
    ckpt_archive_path(path, sizeof path, dir, conversation);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return wk_fail(err, WK_EIO, "archive: cannot create %s: %s", tmp, strerror(errno));

    uint8_t hdr[HEADER_BYTES] = {0};
    XXH3_state_t *th = XXH3_createState(), *ph = XXH3_createState();
    int rc = 0;
    if (!th || !ph) {
        rc = wk_fail(err, WK_ENOMEM, "archive: out of memory");
        goto fail;
    }
    XXH3_64bits_reset(th);
    XXH3_64bits_reset(ph);
    if (write_all(fd, hdr, sizeof hdr)) goto io_fail;
    /* tokens + table */
    const int32_t *toks = eng_seq_tokens(seq);
    XXH3_64bits_update(th, toks, sizeof(int32_t) * (size_t)n_tok);
    if (n_tok && write_all(fd, toks, sizeof(int32_t) * (size_t)n_tok)) goto io_fail;
    for (int i = 0; i < n_ckpt; i++) {
        uint8_t row[16];
        put_u32(row, (uint32_t)ckpts[i]->snap.pos);
        put_u32(row + 4, (uint32_t)ckpts[i]->kind);
        put_u64(row + 8, ckpts[i]->snap.prefix_hash);
        XXH3_64bits_update(th, row, sizeof row);
        if (write_all(fd, row, sizeof row)) goto io_fail;
    }
    /* payload */
    rc = stream_kv(ctx, seq, fd, n_tok, true, ph);
    if (rc == WK_ENOMEM) {
        rc = wk_fail(err, rc, "archive: out of memory");
        goto fail;
    }
    if (rc) goto io_fail;
    for (int i = 0; i < n_ckpt; i++) {
        XXH3_64bits_update(ph, ckpts[i]->snap.state, state_bytes);
        if (state_bytes && write_all(fd, ckpts[i]->snap.state, state_bytes)) goto io_fail;
    }
    kv_shape sh = shape_of(ctx);
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, CKPT_ARCHIVE_VERSION);
    put_u32(hdr + 12, HEADER_BYTES);
    put_u64(hdr + 16, m->model_id);
    put_u64(hdr + 24, eng_seq_policy_fp(seq));
    put_u64(hdr + 32, conversation);
    put_u32(hdr + 40, (uint32_t)n_tok);
    put_u32(hdr + 44, (uint32_t)n_ckpt);
    put_u32(hdr + 48, sh.n_attn);
    put_u32(hdr + 52, sh.n_head_kv);
    put_u32(hdr + 56, sh.d_k);
    put_u32(hdr + 60, sh.d_v);
    put_u64(hdr + 64, state_bytes);
    put_u64(hdr + 72, XXH3_64bits_digest(th));
    put_u64(hdr + 80, XXH3_64bits_digest(ph));
    put_u64(hdr + 88, XXH3_64bits(hdr, 88));
    if (pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) goto io_fail;
    if (fsync(fd)) goto io_fail;
    struct stat sb;
    if (fstat(fd, &sb)) goto io_fail;
    if (close(fd)) {
        fd = -1;
        goto io_fail;
    }
    fd = -1;
    if (rename(tmp, path)) goto io_fail;
    /* the rename itself must survive a crash: sync the folder entry */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    if (file_bytes) *file_bytes = (size_t)sb.st_size;
    XXH3_freeState(th);
    XXH3_freeState(ph);
    return 0;
io_fail:
    rc = wk_fail(err, WK_EIO, "archive: writing %s: %s", tmp, strerror(errno));
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    if (th) XXH3_freeState(th);
    if (ph) XXH3_freeState(ph);
    return rc;
}

/* ---- scan ---------------------------------------------------------------------- */

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

static int scan_fd(int fd, const char *path, ckpt_archive_info *info, kv_shape *sh, wk_error *err)
{
    struct stat sb;
    if (fstat(fd, &sb)) return wk_fail(err, WK_EIO, "archive %s: %s", path, strerror(errno));
    uint8_t hdr[HEADER_BYTES];
    if ((size_t)sb.st_size < sizeof hdr || read_exact(fd, hdr, sizeof hdr))
        return wk_fail(err, WK_EFORMAT, "archive %s: truncated header (%lld bytes)", path, (long long)sb.st_size);
    if (memcmp(hdr, MAGIC, 8)) return wk_fail(err, WK_EFORMAT, "archive %s: not a wick cache file (bad magic)", path);
    if (get_u32(hdr + 8) != CKPT_ARCHIVE_VERSION)
        return wk_fail(err, WK_EFORMAT, "archive %s: version %u, this build reads %u", path, get_u32(hdr + 8),
                       CKPT_ARCHIVE_VERSION);
    if (get_u32(hdr + 12) != HEADER_BYTES || get_u64(hdr + 88) != XXH3_64bits(hdr, 88))
        return wk_fail(err, WK_EFORMAT, "archive %s: header checksum mismatch", path);
    int32_t n_tok = (int32_t)get_u32(hdr + 40), n_ck = (int32_t)get_u32(hdr + 44);
    *sh = (kv_shape){get_u32(hdr + 48), get_u32(hdr + 52), get_u32(hdr + 56), get_u32(hdr + 60)};
    uint64_t state_bytes = get_u64(hdr + 64);
    if (n_tok < 0 || n_tok > MAX_TOKENS || n_ck < 0 || n_ck > MAX_CKPTS || sh->n_attn > MAX_DIM ||
        sh->n_head_kv > MAX_DIM || sh->d_k > MAX_DIM || sh->d_v > MAX_DIM || state_bytes > ((uint64_t)1 << 40))
        return wk_fail(err, WK_EFORMAT, "archive %s: sizes out of range (%d tokens, %d checkpoints)", path, n_tok, n_ck);
    /* every factor is capped above, so these products fit in 64 bits */
    uint64_t kv = (uint64_t)sh->n_attn * sh->n_head_kv * (uint64_t)n_tok * (sh->d_k + sh->d_v) * 2;
    uint64_t want = HEADER_BYTES + 4ull * (uint64_t)n_tok + 16ull * (uint64_t)n_ck + kv + (uint64_t)n_ck * state_bytes;
    if ((uint64_t)sb.st_size != want)
        return wk_fail(err, WK_EFORMAT, "archive %s: %lld bytes, the header describes %llu (truncated or damaged)",
                       path, (long long)sb.st_size, (unsigned long long)want);
    memset(info, 0, sizeof *info);
    snprintf(info->path, sizeof info->path, "%s", path);
    info->model_id = get_u64(hdr + 16);
    info->policy_fp = get_u64(hdr + 24);
    info->conversation = get_u64(hdr + 32);
    info->n_tokens = n_tok;
    info->n_ckpt = n_ck;
    info->state_bytes = state_bytes;
    info->payload_hash = get_u64(hdr + 80);
    info->file_bytes = (size_t)sb.st_size;
    info->mtime = wk_stat_mtime(&sb);
    info->tokens = malloc(sizeof(int32_t) * (size_t)n_tok + 1);
    info->ckpts = calloc((size_t)n_ck + 1, sizeof *info->ckpts);
    if (!info->tokens || !info->ckpts) {
        ckpt_archive_info_free(info);
        return wk_fail(err, WK_ENOMEM, "archive %s: out of memory", path);
    }
    XXH3_state_t *th = XXH3_createState();
    int rc = 0;
    if (!th || read_exact(fd, info->tokens, sizeof(int32_t) * (size_t)n_tok)) {
        rc = wk_fail(err, th ? WK_EFORMAT : WK_ENOMEM, "archive %s: cannot read the token ids", path);
        goto done;
    }
    XXH3_64bits_reset(th);
    XXH3_64bits_update(th, info->tokens, sizeof(int32_t) * (size_t)n_tok);
    for (int32_t i = 0; i < n_ck; i++) {
        uint8_t row[16];
        if (read_exact(fd, row, sizeof row)) {
            rc = wk_fail(err, WK_EFORMAT, "archive %s: truncated checkpoint table", path);
            goto done;
        }
        XXH3_64bits_update(th, row, sizeof row);
        info->ckpts[i].pos = (int32_t)get_u32(row);
        info->ckpts[i].kind = (int32_t)get_u32(row + 4);
        info->ckpts[i].prefix_hash = get_u64(row + 8);
    }
    if (XXH3_64bits_digest(th) != get_u64(hdr + 72)) {
        rc = wk_fail(err, WK_EFORMAT, "archive %s: token/table checksum mismatch", path);
        goto done;
    }
    for (int32_t i = 0; i < n_ck; i++) {
        const ckpt_archive_ckpt *k = &info->ckpts[i];
        if (k->pos < 0 || k->pos > n_tok || k->kind < 0 || k->kind >= CKPT_KIND_COUNT ||
            ckpt_prefix_hash(info->tokens, k->pos) != k->prefix_hash) {
            rc = wk_fail(err, WK_EFORMAT, "archive %s: checkpoint %d (position %d) is inconsistent", path, i, k->pos);
            goto done;
        }
    }
done:
    if (th) XXH3_freeState(th);
    if (rc) ckpt_archive_info_free(info);
    return rc;
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

int ckpt_archive_load(const ckpt_archive_info *info, eng_ctx *ctx, eng_seq *seq, ckpt *ckpts, wk_error *err)
{
    const model *m = eng_ctx_model(ctx);
    uint64_t fp = eng_ctx_fingerprint(ctx);
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
        return rc;
    }
    if (now.payload_hash != info->payload_hash || now.n_tokens != info->n_tokens || now.n_ckpt != info->n_ckpt ||
        memcmp(now.tokens, info->tokens, sizeof(int32_t) * (size_t)info->n_tokens)) {
        rc = wk_fail(err, WK_EBUSY, "archive %s: replaced since it was scanned", info->path);
        goto out;
    }
    if (memcmp(&sh, &want, sizeof sh) || (now.n_ckpt && now.state_bytes != eng_snapshot_bytes(seq))) {
        rc = wk_fail(err, WK_EINVAL, "archive %s: state shape does not match the model", info->path);
        goto out;
    }
    eng_seq_clear(seq);
    XXH3_state_t *ph = XXH3_createState();
    if (!ph) {
        rc = wk_fail(err, WK_ENOMEM, "archive: out of memory");
        goto out;
    }
    XXH3_64bits_reset(ph);
    memset(ckpts, 0, sizeof *ckpts * (size_t)now.n_ckpt);
    rc = stream_kv(ctx, seq, fd, now.n_tokens, false, ph);
    for (int32_t i = 0; i < now.n_ckpt && !rc; i++) {
        eng_snapshot *s = &ckpts[i].snap;
        s->state_bytes = now.state_bytes;
        s->state = now.state_bytes ? malloc(now.state_bytes) : NULL;
        if (now.state_bytes && !s->state) rc = WK_ENOMEM;
        else if (now.state_bytes && read_exact(fd, s->state, now.state_bytes)) rc = WK_EFORMAT;
        else XXH3_64bits_update(ph, s->state, now.state_bytes);
        s->pos = now.ckpts[i].pos;
        s->prefix_hash = now.ckpts[i].prefix_hash;
        s->policy_fp = now.policy_fp;
        s->model_id = now.model_id;
        ckpts[i].kind = now.ckpts[i].kind;
        ckpts[i].complete = true;
    }
    if (!rc && XXH3_64bits_digest(ph) != now.payload_hash) rc = WK_EFORMAT;
    XXH3_freeState(ph);
    if (!rc) rc = eng_seq_adopt(seq, now.tokens, now.n_tokens, now.policy_fp, err);
    else if (rc == WK_ENOMEM) wk_fail(err, rc, "archive %s: out of memory", info->path);
    else wk_fail(err, rc, "archive %s: payload truncated or checksum mismatch", info->path);
    if (rc) {
        for (int32_t i = 0; i < now.n_ckpt; i++) ckpt_free(&ckpts[i]);
        eng_seq_clear(seq);
    }
out:
    close(fd);
    ckpt_archive_info_free(&now);
    return rc;
}
