/* GGUF reader: parses and validates the header of an mmap'd file (or a
 * caller-owned buffer) and exposes zero-copy views of keys, values and tensor
 * data. Every length read from the file is checked against the bytes that
 * remain before it is used, so no input can make the parser read out of
 * bounds or allocate more than a small multiple of the file size. */
#include "gguf/gguf_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "quant/qtypes.h"
#include "util/mapfile.h"

/* Open-addressing name → index table (FNV-1a). Slots hold index + 1; 0 is empty. */
typedef struct name_index {
    uint32_t *slots;
    uint64_t mask;
} name_index;

struct gguf_file {
    wk_mapfile map; /* fd < 0 and data NULL when opened over a buffer */
    const uint8_t *base;
    size_t size;
    char *path; /* "" for buffers */
    uint32_t version;
    uint32_t alignment;
    size_t data_offset; /* start of the data section */
    gguf_kv *kvs;
    uint64_t n_kv;
    gguf_tensor *tensors;
    uint64_t n_tensors;
    name_index kv_index;
    name_index tensor_index;
};

/* ---- small shared helpers ---- */

size_t gguf_scalar_size(enum gguf_value_type t)
{
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_value_type_name(uint32_t t)
{
    static const char *const names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    if (t < sizeof names / sizeof names[0]) return names[t];
    return "invalid";
}

void gguf_fmt_name(char *out, size_t cap, const char *p, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (cap == 0) return;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (o + 8 >= cap) { /* room for "..." and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int index_init(name_index *ix, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? 0 : WK_ENOMEM;
}

/* Inserts item idx named s; returns the index of an existing equal name
 * (and inserts nothing), or -1 after inserting. names(i) gives item i's name. */
typedef gguf_str (*name_of_fn)(const gguf_file *f, uint64_t i);

static int64_t index_insert(name_index *ix, const gguf_file *f, name_of_fn name_of, uint64_t idx)
{
    gguf_str s = name_of(f, idx);
    uint64_t h = hash_bytes(s.ptr, (size_t)s.len) & ix->mask;
    for (;;) {
        uint32_t slot = ix->slots[h];
        if (slot == 0) {
            ix->slots[h] = (uint32_t)(idx + 1);
            return -1;
        }
        gguf_str o = name_of(f, slot - 1);
        if (o.len == s.len && memcmp(o.ptr, s.ptr, (size_t)s.len) == 0) return (int64_t)(slot - 1);
        h = (h + 1) & ix->mask;
    }
}

static int64_t index_find(const name_index *ix, const gguf_file *f, name_of_fn name_of,
                          const char *key)
{
    if (!ix->slots || !key) return -1;
    size_t n = strlen(key);
    uint64_t h = hash_bytes(key, n) & ix->mask;
    for (;;) {
        uint32_t slot = ix->slots[h];
        if (slot == 0) return -1;
        gguf_str o = name_of(f, slot - 1);
        if (o.len == n && memcmp(o.ptr, key, n) == 0) return (int64_t)(slot - 1);
        h = (h + 1) & ix->mask;
    }
}

static gguf_str kv_name(const gguf_file *f, uint64_t i) { return f->kvs[i].key; }
static gguf_str tensor_name(const gguf_file *f, uint64_t i) { return f->tensors[i].name; }

/* ---- cursor over the header ---- */

typedef struct cursor {
    const uint8_t *base;
    size_t size;
    size_t pos;
    wk_error *err;
    char what[160]; /* what is being read, for truncation messages */
} cursor;

static size_t remaining(const cursor *c) { return c->size - c->pos; }

static int truncated(cursor *c, uint64_t need)
{
    return wk_fail(c->err, WK_EFORMAT,
                   "%s: file truncated at offset %zu (need %" PRIu64 " bytes, %zu remain)", c->what,
                   c->pos, need, remaining(c));
}

static int rd_u32(cursor *c, uint32_t *v)
{
    if (remaining(c) < 4) return truncated(c, 4);
    *v = gguf_rd32(c->base + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v)
{
    if (remaining(c) < 8) return truncated(c, 8);
    *v = gguf_rd64(c->base + c->pos);
    c->pos += 8;
    return 0;
}

/* Reads a string header and checks its length against the cap and the bytes
 * that remain; the bytes are borrowed from the buffer. */
static int rd_str(cursor *c, gguf_str *s, const char *label)
{
    uint64_t len;
    int rc = rd_u64(c, &len);
    if (rc) return rc;
    if (len > GGUF_MAX_STRING_LEN)
        return wk_fail(c->err, WK_EFORMAT, "%s: %s length %" PRIu64 " exceeds the limit of 2^30 bytes",
                       c->what, label, len);
    if (len > remaining(c))
        return wk_fail(c->err, WK_EFORMAT,
                       "%s: %s length %" PRIu64 " at offset %zu runs past end of file (%zu bytes remain)",
                       c->what, label, len, c->pos - 8, remaining(c));
    s->ptr = (const char *)(c->base + c->pos);
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* ---- metadata ---- */

static void decode_scalar(gguf_kv *kv, enum gguf_value_type t, const uint8_t *p)
{
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_BOOL: kv->v.u64 = p[0]; break;
    case GGUF_T_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_T_UINT16: kv->v.u64 = gguf_rd16(p); break;
    case GGUF_T_INT16: kv->v.i64 = (int16_t)gguf_rd16(p); break;
    case GGUF_T_UINT32: kv->v.u64 = gguf_rd32(p); break;
    case GGUF_T_INT32: kv->v.i64 = (int32_t)gguf_rd32(p); break;
    case GGUF_T_UINT64: kv->v.u64 = gguf_rd64(p); break;
    case GGUF_T_INT64: kv->v.i64 = (int64_t)gguf_rd64(p); break;
    case GGUF_T_FLOAT32: {
        uint32_t b = gguf_rd32(p);
        float x;
        memcpy(&x, &b, 4);
        kv->v.f64 = x;
        break;
    }
    case GGUF_T_FLOAT64: {
        uint64_t b = gguf_rd64(p);
        memcpy(&kv->v.f64, &b, 8);
        break;
    }
    default: break;
    }
}

static int parse_array(cursor *c, gguf_kv *kv, const char *key)
{
    uint32_t et;
    uint64_t count;
    int rc = rd_u32(c, &et);
    if (rc) return rc;
    if (et == GGUF_T_ARRAY)
        return wk_fail(c->err, WK_EFORMAT, "key %s: nested arrays are not supported", key);
    if (et > GGUF_T_FLOAT64)
        return wk_fail(c->err, WK_EFORMAT, "key %s: invalid array element type %u", key, et);
    if ((rc = rd_u64(c, &count))) return rc;
    if (count > GGUF_MAX_ARRAY_COUNT)
        return wk_fail(c->err, WK_EFORMAT, "key %s: array count %" PRIu64 " exceeds the limit of 2^30",
                       key, count);
    /* smallest possible encoding of one element: a string is at least its length field */
    size_t min_elem = et == GGUF_T_STRING ? 8 : gguf_scalar_size((enum gguf_value_type)et);
    if (count > remaining(c) / min_elem)
        return wk_fail(c->err, WK_EFORMAT,
                       "key %s: array of %" PRIu64 " %s elements needs at least %" PRIu64
                       " bytes, only %zu remain",
                       key, count, gguf_value_type_name(et), count * (uint64_t)min_elem, remaining(c));
    kv->arr_type = (enum gguf_value_type)et;
    kv->arr_count = count;
    kv->arr_data = c->base + c->pos;
    if (et == GGUF_T_STRING) {
        /* count <= remaining / 8, so this allocation is bounded by the file size */
        uint64_t *offs = malloc(count ? (size_t)count * sizeof *offs : 1);
        if (!offs) return wk_fail(c->err, WK_ENOMEM, "key %s: out of memory for %" PRIu64 " strings", key, count);
        kv->arr_str_offsets = offs;
        /* vocabularies hold 150k+ strings: check inline, format a message only on failure */
        size_t start = c->pos;
        for (uint64_t i = 0; i < count; i++) {
            offs[i] = c->pos - start;
            uint64_t len = remaining(c) >= 8 ? gguf_rd64(c->base + c->pos) : 0;
            if (remaining(c) < 8 || len > GGUF_MAX_STRING_LEN || len > remaining(c) - 8) {
                snprintf(c->what, sizeof c->what, "key %s: element %" PRIu64, key, i);
                gguf_str s;
                return rd_str(c, &s, "string"); /* fails with the precise message */
            }
            c->pos += 8 + (size_t)len;
        }
        return 0;
    }
    size_t bytes = (size_t)count * min_elem;
    if (et == GGUF_T_BOOL) {
        for (uint64_t i = 0; i < count; i++)
            if (kv->arr_data[i] > 1)
                return wk_fail(c->err, WK_EFORMAT, "key %s: element %" PRIu64 " is bool value %u (must be 0 or 1)",
                               key, i, kv->arr_data[i]);
    }
    c->pos += bytes;
    return 0;
}

static int parse_kv(cursor *c, gguf_file *f, uint64_t i)
{
    gguf_kv *kv = &f->kvs[i];
    char key[96];
    int rc;
    snprintf(c->what, sizeof c->what, "metadata entry #%" PRIu64 " of %" PRIu64, i, f->n_kv);
    if ((rc = rd_str(c, &kv->key, "key"))) return rc;
    if (kv->key.len == 0) return wk_fail(c->err, WK_EFORMAT, "metadata entry #%" PRIu64 ": empty key", i);
    gguf_fmt_name(key, sizeof key, kv->key.ptr, kv->key.len);
    if (memchr(kv->key.ptr, 0, (size_t)kv->key.len))
        return wk_fail(c->err, WK_EFORMAT, "key %s: contains a NUL byte", key);
    if (index_insert(&f->kv_index, f, kv_name, i) >= 0)
        return wk_fail(c->err, WK_EFORMAT, "key %s: duplicate key", key);
    snprintf(c->what, sizeof c->what, "key %s", key);
    uint32_t t;
    if ((rc = rd_u32(c, &t))) return rc;
    if (t > GGUF_T_FLOAT64) return wk_fail(c->err, WK_EFORMAT, "key %s: invalid value type %u", key, t);
    kv->type = (enum gguf_value_type)t;
    if (t == GGUF_T_ARRAY) return parse_array(c, kv, key);
    if (t == GGUF_T_STRING) return rd_str(c, &kv->v.str, "string");
    size_t n = gguf_scalar_size(kv->type);
    if (remaining(c) < n) return truncated(c, n);
    if (t == GGUF_T_BOOL && c->base[c->pos] > 1)
        return wk_fail(c->err, WK_EFORMAT, "key %s: bool value %u (must be 0 or 1)", key, c->base[c->pos]);
    decode_scalar(kv, kv->type, c->base + c->pos);
    c->pos += n;
    return 0;
}

/* ---- tensor infos ---- */

static int tensor_type_check(wk_error *err, const char *name, uint32_t type)
{
    if (type >= QT_COUNT)
        return wk_fail(err, WK_EFORMAT, "tensor %s: invalid ggml type id %u (ids must be < %d)", name,
                       type, QT_COUNT);
    const qt_traits *tr = qt_traits_of(type);
    const char *tn = qt_type_name(type);
    if (strstr(tn, "retired"))
        return wk_fail(err, WK_EFORMAT, "tensor %s: type %s (id %u) is retired and never valid in files",
                       name, tn, type);
    if (!tr)
        return wk_fail(err, WK_EUNSUPPORTED, "tensor %s: type %s (id %u) is not supported by wick", name,
                       tn, type);
    if (!tr->weight_ok)
        return wk_fail(err, WK_EUNSUPPORTED,
                       "tensor %s: type %s (id %u) is an activation-only format, not usable as a weight",
                       name, tn, type);
    return 0;
}

static int parse_tensor_info(cursor *c, gguf_file *f, uint64_t i)
{
    gguf_tensor *t = &f->tensors[i];
    char name[96];
    int rc;
    snprintf(c->what, sizeof c->what, "tensor info #%" PRIu64 " of %" PRIu64, i, f->n_tensors);
    if ((rc = rd_str(c, &t->name, "name"))) return rc;
    gguf_fmt_name(name, sizeof name, t->name.ptr, t->name.len);
    if (t->name.len == 0) return wk_fail(c->err, WK_EFORMAT, "tensor info #%" PRIu64 ": empty name", i);
    if (t->name.len >= GGUF_MAX_NAME)
        return wk_fail(c->err, WK_EFORMAT, "tensor %s: name is %" PRIu64 " bytes (must be < %d)", name,
                       t->name.len, GGUF_MAX_NAME);
    if (memchr(t->name.ptr, 0, (size_t)t->name.len))
        return wk_fail(c->err, WK_EFORMAT, "tensor %s: name contains a NUL byte", name);
    memcpy(t->name_z, t->name.ptr, (size_t)t->name.len);
    t->name_z[t->name.len] = '\0';
    if (index_insert(&f->tensor_index, f, tensor_name, i) >= 0)
        return wk_fail(c->err, WK_EFORMAT, "tensor %s: duplicate tensor name", name);
    snprintf(c->what, sizeof c->what, "tensor %s", name);
    if ((rc = rd_u32(c, &t->n_dims))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return wk_fail(c->err, WK_EFORMAT, "tensor %s: n_dims %u (must be 1..%d)", name, t->n_dims,
                       GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    int overflow = 0;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        uint64_t v;
        if ((rc = rd_u64(c, &v))) return rc;
        if (v > (uint64_t)INT64_MAX)
            return wk_fail(c->err, WK_EFORMAT, "tensor %s: dimension %u is negative (%" PRId64 ")", name, d,
                           (int64_t)v);
        t->ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(n_el, v, &n_el) || n_el > (uint64_t)INT64_MAX) overflow = 1;
    }
    if (overflow)
        return wk_fail(c->err, WK_EFORMAT,
                       "tensor %s: shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                       "] overflows the element count",
                       name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    if ((rc = rd_u32(c, &t->type))) return rc;
    if ((rc = rd_u64(c, &t->offset))) return rc;
    if ((rc = tensor_type_check(c->err, name, t->type))) return rc;
    const qt_traits *tr = qt_traits_of(t->type);
    if (t->ne[0] % tr->block_elems != 0)
        return wk_fail(c->err, WK_EFORMAT,
                       "tensor %s: ne[0] = %" PRId64 " is not a multiple of the %s block size %u", name,
                       t->ne[0], tr->name, tr->block_elems);
    uint64_t bytes = (uint64_t)(t->ne[0] / tr->block_elems);
    if (__builtin_mul_overflow(bytes, (uint64_t)tr->block_bytes, &bytes)) overflow = 1;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(bytes, (uint64_t)t->ne[d], &bytes)) overflow = 1;
    if (overflow)
        return wk_fail(c->err, WK_EFORMAT, "tensor %s: byte size of %" PRIu64 " %s elements overflows",
                       name, n_el, tr->name);
    t->n_elements = n_el;
    t->n_bytes = bytes;
    return 0;
}

/* Checks offsets against the alignment and the file end and sets data pointers. */
static int bind_tensor_data(gguf_file *f, wk_error *err)
{
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char name[96];
        gguf_fmt_name(name, sizeof name, t->name.ptr, t->name.len);
        if (t->offset % f->alignment != 0)
            return wk_fail(err, WK_EFORMAT, "tensor %s: data offset 0x%" PRIx64 " is not a multiple of the alignment %u",
                           name, t->offset, f->alignment);
        uint64_t start, end;
        if (__builtin_add_overflow((uint64_t)f->data_offset, t->offset, &start) ||
            __builtin_add_overflow(start, t->n_bytes, &end) || end > f->size)
            return wk_fail(err, WK_EFORMAT,
                           "tensor %s: data [offset 0x%" PRIx64 ", %" PRIu64
                           " bytes] runs past end of file (size %zu, data section at 0x%zx)",
                           name, t->offset, t->n_bytes, f->size, f->data_offset);
        t->data = f->base ? f->base + start : NULL;
    }
    return 0;
}

static int check_alignment_key(gguf_file *f, wk_error *err)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    uint64_t v;
    switch (kv->type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64: v = kv->v.u64; break;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64:
        v = kv->v.i64 < 0 ? 0 : (uint64_t)kv->v.i64;
        break;
    default:
        return wk_fail(err, WK_EFORMAT, "key general.alignment: has type %s (must be an unsigned integer)",
                       gguf_value_type_name(kv->type));
    }
    /* 2^30 is far above any sensible alignment and keeps the padding arithmetic small */
    if (v == 0 || (v & (v - 1)) != 0 || v > (1u << 30)) {
        char shown[32];
        if (kv->type == GGUF_T_INT8 || kv->type == GGUF_T_INT16 || kv->type == GGUF_T_INT32 ||
            kv->type == GGUF_T_INT64)
            snprintf(shown, sizeof shown, "%" PRId64, kv->v.i64);
        else
            snprintf(shown, sizeof shown, "%" PRIu64, kv->v.u64);
        return wk_fail(err, WK_EFORMAT, "key general.alignment: %s is not a power of two in 1..2^30", shown);
    }
    f->alignment = (uint32_t)v;
    return 0;
}

static int parse(gguf_file *f, wk_error *err)
{
    cursor c = {.base = f->base, .size = f->size, .pos = 0, .err = err};
    int rc;
    if (f->size == 0) return wk_fail(err, WK_EFORMAT, "empty file (0 bytes), not a GGUF file");
    if (f->size < 4) return wk_fail(err, WK_EFORMAT, "file is %zu bytes, too small to be GGUF", f->size);
    uint32_t magic = gguf_rd32(f->base);
    if (magic != GGUF_MAGIC_LE) {
        char shown[40];
        gguf_fmt_name(shown, sizeof shown, (const char *)f->base, 4);
        return wk_fail(err, WK_EFORMAT, "bad magic \"%s\" (expected \"GGUF\"): not a GGUF file", shown);
    }
    c.pos = 4;
    snprintf(c.what, sizeof c.what, "header");
    if ((rc = rd_u32(&c, &f->version))) return rc;
    if (f->version != 0 && (f->version & 0xffffu) == 0)
        return wk_fail(err, WK_EFORMAT,
                       "GGUF version 0x%08x looks byte-swapped: big-endian files are not supported",
                       f->version);
    if (f->version == 0) return wk_fail(err, WK_EFORMAT, "GGUF version 0 is invalid");
    if (f->version == 1)
        return wk_fail(err, WK_EUNSUPPORTED, "GGUF version 1 is obsolete and not supported (need 2 or 3)");
    if (f->version > 3)
        return wk_fail(err, WK_EUNSUPPORTED, "GGUF version %u is newer than supported (2 or 3)", f->version);
    if ((rc = rd_u64(&c, &f->n_tensors))) return rc;
    if ((rc = rd_u64(&c, &f->n_kv))) return rc;
    /* Smallest encodings: a KV pair is key length (8) + 1 key byte + type (4)
     * + a 1-byte value = 14; a tensor info is name length (8) + 1 name byte +
     * n_dims (4) + one dim (8) + type (4) + offset (8) = 33. */
    if (f->n_kv > remaining(&c) / 14 || f->n_kv > UINT32_MAX - 1)
        return wk_fail(err, WK_EFORMAT, "header: metadata count %" PRIu64 " cannot fit in the %zu bytes that remain",
                       f->n_kv, remaining(&c));
    if (f->n_tensors > remaining(&c) / 33 || f->n_tensors > UINT32_MAX - 1)
        return wk_fail(err, WK_EFORMAT, "header: tensor count %" PRIu64 " cannot fit in the %zu bytes that remain",
                       f->n_tensors, remaining(&c));
    f->kvs = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kvs);
    if (!f->kvs || index_init(&f->kv_index, f->n_kv)) return wk_fail(err, WK_ENOMEM, "out of memory for %" PRIu64 " keys", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if ((rc = parse_kv(&c, f, i))) return rc;
    if ((rc = check_alignment_key(f, err))) return rc;
    if (f->n_tensors > remaining(&c) / 33)
        return wk_fail(err, WK_EFORMAT, "header: tensor count %" PRIu64 " cannot fit in the %zu bytes after the metadata",
                       f->n_tensors, remaining(&c));
    f->tensors = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || index_init(&f->tensor_index, f->n_tensors))
        return wk_fail(err, WK_ENOMEM, "out of memory for %" PRIu64 " tensors", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((rc = parse_tensor_info(&c, f, i))) return rc;
    f->data_offset = c.pos;
    if (f->n_tensors > 0) {
        size_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
        if (pad > remaining(&c))
            return wk_fail(err, WK_EFORMAT,
                           "data section: file ends at %zu, before the aligned data start at %zu", f->size,
                           c.pos + pad);
        f->data_offset = c.pos + pad;
    }
    return bind_tensor_data(f, err);
}

static int open_common(gguf_file **out, gguf_file *f, wk_error *err)
{
    int rc = parse(f, err);
    if (rc) {
        if (f->path[0]) wk_fail_prefix(err, "%s", f->path);
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open(gguf_file **out, const char *path, wk_error *err)
{
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    f->map.fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        free(f);
        return wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    }
    int rc = wk_mapfile_open(&f->map, path, err);
    if (rc) {
        free(f->path);
        free(f);
        return rc;
    }
    f->base = f->map.data;
    f->size = f->map.size;
    return open_common(out, f, err);
}

int gguf_open_buffer(gguf_file **out, const void *data, size_t size, wk_error *err)
{
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup("");
    if (!f || !f->path) {
        free(f);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    f->map.fd = -1;
    f->base = data;
    f->size = data ? size : 0;
    return open_common(out, f, err);
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    if (f->kvs)
        for (uint64_t i = 0; i < f->n_kv; i++) free((void *)f->kvs[i].arr_str_offsets);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    if (f->map.fd >= 0 || f->map.data) wk_mapfile_close(&f->map);
    free(f->path);
    free(f);
}

/* ---- accessors ---- */

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
size_t gguf_file_size(const gguf_file *f) { return f->size; }
const char *gguf_path(const gguf_file *f) { return f->path; }
size_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }

size_t gguf_kv_count(const gguf_file *f) { return (size_t)f->n_kv; }

const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key)
{
    int64_t i = index_find(&f->kv_index, f, kv_name, key);
    return i < 0 ? NULL : &f->kvs[i];
}

size_t gguf_tensor_count(const gguf_file *f) { return (size_t)f->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int64_t i = index_find(&f->tensor_index, f, tensor_name, name);
    return i < 0 ? NULL : &f->tensors[i];
}

bool gguf_is_file_mapped(const gguf_file *f) { return f && f->map.data != NULL; }
