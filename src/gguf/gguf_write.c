/* Streaming GGUF v3 writer. Metadata and tensor infos are kept in memory
 * (small); tensor data goes straight to the file as the caller hands it over,
 * so files far larger than memory can be written. The file is written as
 * "<path>.tmp" and renamed into place by gguf_writer_finish, so a crash or an
 * abort never leaves a half-written file under the final name.
 *
 * Layout matches llama.cpp's writer: tensor offsets are assigned in add order,
 * each tensor's size rounded up to the alignment, the data section starts at
 * the first aligned offset after the header, and every tensor (the last one
 * included) is followed by zero padding up to the alignment. */
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "quant/qtypes.h"

typedef struct wkv {
    char *key;
    uint8_t *val; /* encoded type + value, exactly as in the file */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char name[GGUF_MAX_NAME];
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset;
} wtensor;

struct gguf_writer {
    char *path;
    char *tmp_path;
    FILE *fp;
    uint32_t alignment;
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    int began;
    size_t cur;          /* tensor being written */
    uint64_t cur_done;   /* bytes of it written so far */
    uint64_t file_pos;   /* bytes written to fp */
    wk_error sticky;     /* first error from a call that has no err parameter */
};

/* growable byte buffer for encoding one value */
typedef struct bbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} bbuf;

static void bb_put(bbuf *b, const void *src, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void bb_u32(bbuf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    bb_put(b, x, 4);
}

static void bb_u64(bbuf *b, uint64_t v)
{
    bb_u32(b, (uint32_t)v);
    bb_u32(b, (uint32_t)(v >> 32));
}

static void bb_str(bbuf *b, const char *s, uint64_t len)
{
    bb_u64(b, len);
    bb_put(b, s, (size_t)len);
}

/* Records the first failure; later calls keep returning it. */
static int sticky_fail(gguf_writer *w, int code, const char *fmt, const char *key)
{
    if (w->sticky.code == 0) wk_fail(&w->sticky, code, fmt, key);
    return code;
}

/* Takes ownership of b's buffer on success. */
static int put_kv(gguf_writer *w, const char *key, bbuf *b)
{
    if (w->sticky.code) {
        free(b->p);
        return w->sticky.code;
    }
    if (b->oom) {
        free(b->p);
        return sticky_fail(w, WK_ENOMEM, "key %s: out of memory", key);
    }
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0 || klen > 65535) {
        free(b->p);
        return sticky_fail(w, WK_EINVAL, "key \"%s\": keys must be 1..65535 bytes", key ? key : "");
    }
    if (w->began) {
        free(b->p);
        return sticky_fail(w, WK_EINVAL, "key %s: metadata added after gguf_writer_begin_data", key);
    }
    /* replacing keeps the key's position, so "copy all, then override" works */
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].val);
            w->kvs[i].val = b->p;
            w->kvs[i].val_len = b->len;
            return 0;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *p = realloc(w->kvs, cap * sizeof *p);
        if (!p) {
            free(b->p);
            return sticky_fail(w, WK_ENOMEM, "key %s: out of memory", key);
        }
        w->kvs = p;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return sticky_fail(w, WK_ENOMEM, "key %s: out of memory", key);
    }
    w->kvs[w->n_kv++] = (wkv){k, b->p, b->len};
    return 0;
}

static int check_alignment_value(gguf_writer *w, const char *key, uint64_t v)
{
    if (strcmp(key, "general.alignment") == 0 && v != w->alignment)
        return sticky_fail(w, WK_EINVAL, "key %s: differs from the writer's alignment (set it in gguf_writer_new)",
                           key);
    return 0;
}

static int set_scalar(gguf_writer *w, const char *key, enum gguf_value_type t, uint64_t bits)
{
    bbuf b = {0};
    bb_u32(&b, t);
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(bits >> (8 * i));
    bb_put(&b, x, gguf_scalar_size(t));
    return put_kv(w, key, &b);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    if (key && check_alignment_value(w, key, v)) return w->sticky.code;
    return set_scalar(w, key, GGUF_T_UINT32, v);
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, GGUF_T_INT32, (uint32_t)v);
}

int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v)
{
    if (key && check_alignment_value(w, key, v)) return w->sticky.code;
    return set_scalar(w, key, GGUF_T_UINT64, v);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return set_scalar(w, key, GGUF_T_FLOAT32, bits);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    return set_scalar(w, key, GGUF_T_BOOL, v ? 1 : 0);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    bbuf b = {0};
    bb_u32(&b, GGUF_T_STRING);
    bb_str(&b, v ? v : "", v ? strlen(v) : 0);
    return put_kv(w, key, &b);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_value_type elem_type, const void *data,
                        uint64_t count)
{
    size_t sz = gguf_scalar_size(elem_type);
    if (sz == 0)
        return sticky_fail(w, WK_EINVAL, "key %s: array element type must be a scalar (use set_arr_str for strings)",
                           key ? key : "");
    if (count > GGUF_MAX_ARRAY_COUNT)
        return sticky_fail(w, WK_EINVAL, "key %s: array count exceeds 2^30", key ? key : "");
    bbuf b = {0};
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u32(&b, elem_type);
    bb_u64(&b, count);
    /* the caller's values are little-endian already (the host order on supported targets) */
    if (count) bb_put(&b, data, (size_t)count * sz);
    return put_kv(w, key, &b);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t count)
{
    if (count > GGUF_MAX_ARRAY_COUNT)
        return sticky_fail(w, WK_EINVAL, "key %s: array count exceeds 2^30", key ? key : "");
    bbuf b = {0};
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u32(&b, GGUF_T_STRING);
    bb_u64(&b, count);
    for (uint64_t i = 0; i < count; i++) bb_str(&b, strs[i] ? strs[i] : "", strs[i] ? strlen(strs[i]) : 0);
    return put_kv(w, key, &b);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv)
{
    char key[GGUF_MAX_NAME * 16];
    if (kv->key.len == 0 || kv->key.len >= sizeof key)
        return sticky_fail(w, WK_EINVAL, "key %s: cannot copy (bad length)", "?");
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = '\0';
    bbuf b = {0};
    bb_u32(&b, kv->type);
    if (kv->type == GGUF_T_ARRAY) {
        bb_u32(&b, kv->arr_type);
        bb_u64(&b, kv->arr_count);
        if (kv->arr_type == GGUF_T_STRING) {
            for (uint64_t i = 0; i < kv->arr_count; i++) {
                gguf_str s = gguf_arr_str(kv, i);
                bb_str(&b, s.ptr, s.len);
            }
        } else if (kv->arr_count) {
            bb_put(&b, kv->arr_data, (size_t)kv->arr_count * gguf_scalar_size(kv->arr_type));
        }
    } else if (kv->type == GGUF_T_STRING) {
        bb_str(&b, kv->v.str.ptr, kv->v.str.len);
    } else {
        uint64_t bits = kv->v.u64;
        if (kv->type == GGUF_T_FLOAT32) {
            float x = (float)kv->v.f64;
            uint32_t b32;
            memcpy(&b32, &x, 4);
            bits = b32;
        } else if (kv->type == GGUF_T_FLOAT64) {
            memcpy(&bits, &kv->v.f64, 8);
        } else if (strcmp(key, "general.alignment") == 0 && check_alignment_value(w, key, kv->v.u64)) {
            free(b.p);
            return w->sticky.code;
        }
        uint8_t x[8];
        for (int i = 0; i < 8; i++) x[i] = (uint8_t)(bits >> (8 * i));
        bb_put(&b, x, gguf_scalar_size(kv->type));
    }
    return put_kv(w, key, &b);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne)
{
    if (w->sticky.code) return w->sticky.code;
    if (w->began) return sticky_fail(w, WK_EINVAL, "tensor %s: added after gguf_writer_begin_data", name);
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen >= GGUF_MAX_NAME)
        return sticky_fail(w, WK_EINVAL, "tensor \"%s\": name must be 1..63 bytes", name ? name : "");
    const qt_traits *tr = qt_traits_of(type);
    if (!tr) return sticky_fail(w, WK_EUNSUPPORTED, "tensor %s: type not supported by wick", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return sticky_fail(w, WK_EINVAL, "tensor %s: n_dims must be 1..4", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return sticky_fail(w, WK_EINVAL, "tensor %s: duplicate tensor name", name);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    memcpy(t.name, name, nlen + 1);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return sticky_fail(w, WK_EINVAL, "tensor %s: negative dimension", name);
        t.ne[d] = ne[d];
        if (__builtin_mul_overflow(n_el, (uint64_t)ne[d], &n_el) || n_el > (uint64_t)INT64_MAX)
            return sticky_fail(w, WK_EINVAL, "tensor %s: element count overflows", name);
    }
    if (t.ne[0] % tr->block_elems)
        return sticky_fail(w, WK_EINVAL, "tensor %s: ne[0] is not a multiple of the type's block size", name);
    uint64_t bytes = (uint64_t)(t.ne[0] / tr->block_elems) * tr->block_bytes;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(bytes, (uint64_t)t.ne[d], &bytes))
            return sticky_fail(w, WK_EINVAL, "tensor %s: byte size overflows", name);
    t.n_bytes = bytes;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *p = realloc(w->tensors, cap * sizeof *p);
        if (!p) return sticky_fail(w, WK_ENOMEM, "tensor %s: out of memory", name);
        w->tensors = p;
        w->cap_tensors = cap;
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

int gguf_writer_new(gguf_writer **out, const char *path, uint32_t alignment, wk_error *err)
{
    *out = NULL;
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((alignment & (alignment - 1)) != 0)
        return wk_fail(err, WK_EINVAL, "%s: alignment %u is not a power of two", path, alignment);
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    w->alignment = alignment;
    w->path = strdup(path);
    size_t n = strlen(path);
    w->tmp_path = malloc(n + 5);
    if (!w->path || !w->tmp_path) {
        free(w->path);
        free(w->tmp_path);
        free(w);
        return wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp", 5);
    w->fp = fopen(w->tmp_path, "wb");
    if (!w->fp) {
        int e = errno;
        wk_fail(err, WK_EIO, "%s: cannot create: %s", w->tmp_path, strerror(e));
        free(w->path);
        free(w->tmp_path);
        free(w);
        return WK_EIO;
    }
    *out = w;
    return 0;
}

static uint64_t pad_to(uint64_t x, uint32_t a) { return (x + a - 1) / a * a; }

static int fwrite_all(gguf_writer *w, const void *p, size_t n, wk_error *err)
{
    if (n && fwrite(p, 1, n, w->fp) != n)
        return wk_fail(err, WK_EIO, "%s: write failed at offset %" PRIu64 ": %s", w->tmp_path, w->file_pos,
                       strerror(errno));
    w->file_pos += n;
    return 0;
}

static int write_zeros(gguf_writer *w, uint64_t n, wk_error *err)
{
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        int rc = fwrite_all(w, zeros, k, err);
        if (rc) return rc;
        n -= k;
    }
    return 0;
}

int gguf_writer_begin_data(gguf_writer *w, wk_error *err)
{
    if (w->sticky.code) return wk_fail(err, w->sticky.code, "%s: %s", w->path, w->sticky.msg);
    if (w->began) return wk_fail(err, WK_EINVAL, "%s: gguf_writer_begin_data called twice", w->path);
    if (w->alignment != GGUF_DEFAULT_ALIGNMENT) {
        int found = 0;
        for (size_t i = 0; i < w->n_kv; i++) found |= strcmp(w->kvs[i].key, "general.alignment") == 0;
        if (!found && gguf_writer_set_u32(w, "general.alignment", w->alignment))
            return wk_fail(err, w->sticky.code, "%s: %s", w->path, w->sticky.msg);
    }
    w->began = 1;
    bbuf b = {0};
    bb_u32(&b, GGUF_MAGIC_LE);
    bb_u32(&b, 3);
    bb_u64(&b, w->n_tensors);
    bb_u64(&b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        bb_str(&b, w->kvs[i].key, strlen(w->kvs[i].key));
        bb_put(&b, w->kvs[i].val, w->kvs[i].val_len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = off;
        off = pad_to(off + t->n_bytes, w->alignment);
        bb_str(&b, t->name, strlen(t->name));
        bb_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(&b, (uint64_t)t->ne[d]);
        bb_u32(&b, t->type);
        bb_u64(&b, t->offset);
    }
    if (b.oom) {
        free(b.p);
        return wk_fail(err, WK_ENOMEM, "%s: out of memory for the header", w->path);
    }
    int rc = fwrite_all(w, b.p, b.len, err);
    free(b.p);
    if (rc) return rc;
    if (w->n_tensors) rc = write_zeros(w, pad_to(w->file_pos, w->alignment) - w->file_pos, err);
    w->cur = 0;
    w->cur_done = 0;
    return rc;
}

/* Pads after the current tensor once it is complete and moves to the next. */
static int advance_full_tensors(gguf_writer *w, wk_error *err)
{
    while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].n_bytes) {
        uint64_t n = w->tensors[w->cur].n_bytes;
        int rc = write_zeros(w, pad_to(n, w->alignment) - n, err);
        if (rc) return rc;
        w->cur++;
        w->cur_done = 0;
    }
    return 0;
}

int gguf_writer_write_data(gguf_writer *w, const void *data, size_t n, wk_error *err)
{
    if (!w->began) return wk_fail(err, WK_EINVAL, "%s: write_data before begin_data", w->path);
    const uint8_t *p = data;
    int rc = advance_full_tensors(w, err); /* zero-byte tensors */
    while (rc == 0 && n > 0) {
        if (w->cur >= w->n_tensors)
            return wk_fail(err, WK_EINVAL, "%s: %zu bytes of tensor data beyond the last tensor", w->path, n);
        uint64_t left = w->tensors[w->cur].n_bytes - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        if ((rc = fwrite_all(w, p, k, err))) return rc;
        w->cur_done += k;
        p += k;
        n -= k;
        rc = advance_full_tensors(w, err);
    }
    return rc;
}

static void writer_free(gguf_writer *w)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    free(w->kvs);
    free(w->tensors);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

int gguf_writer_finish(gguf_writer *w, wk_error *err)
{
    int rc = 0;
    if (!w->began) rc = gguf_writer_begin_data(w, err);
    if (!rc) rc = advance_full_tensors(w, err);
    if (!rc && w->cur < w->n_tensors)
        rc = wk_fail(err, WK_EINVAL, "%s: tensor %s got %" PRIu64 " of %" PRIu64 " bytes before finish", w->path,
                     w->tensors[w->cur].name, w->cur_done, w->tensors[w->cur].n_bytes);
    if (!rc && (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0))
        rc = wk_fail(err, WK_EIO, "%s: flush failed: %s", w->tmp_path, strerror(errno));
    if (rc) {
        gguf_writer_abort(w);
        return rc;
    }
    FILE *fp = w->fp;
    w->fp = NULL;
    if (fclose(fp) != 0) rc = wk_fail(err, WK_EIO, "%s: close failed: %s", w->tmp_path, strerror(errno));
    else if (rename(w->tmp_path, w->path) != 0)
        rc = wk_fail(err, WK_EIO, "%s: cannot rename from %s: %s", w->path, w->tmp_path, strerror(errno));
    if (rc) unlink(w->tmp_path);
    writer_free(w);
    return rc;
}

void gguf_writer_abort(gguf_writer *w)
{
    if (!w) return;
    if (w->fp) fclose(w->fp);
    unlink(w->tmp_path);
    writer_free(w);
}
