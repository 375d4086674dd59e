/* GGUF reader (v2, v3) over an mmap'd file, and a streaming writer.
 *
 * gguf_open validates the whole header before returning: magic, version,
 * counts, every string/array length against the bytes that remain and sane
 * caps, keys (non-empty, unique), tensor names (unique, < 64 bytes), dims
 * (1..4, non-negative, overflow-safe element count), types (known to wick),
 * ne[0] divisible by the block size, offsets aligned and data inside the file.
 * Any failure is one message naming the key or tensor and the bad value.
 *
 * Ownership: gguf_file owns the mapping and all parsed records; tensor data
 * pointers and string views borrow from the mapping and stay valid until
 * gguf_close. A gguf_file is immutable after open: lookups from several threads
 * are safe. Key and tensor lookups are hash-indexed; gguf_arr_str is O(1)
 * (string offsets are computed while validating). */
#ifndef WICK_GGUF_GGUF_H
#define WICK_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

enum gguf_value_type {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
};

/* A string inside the file: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    enum gguf_value_type type;
    /* scalars (type != ARRAY): */
    union {
        uint64_t u64; /* all unsigned ints and bool */
        int64_t i64;  /* all signed ints */
        double f64;   /* float32/float64 */
        gguf_str str;
    } v;
    /* arrays (type == ARRAY): element type, count, and the raw little-endian
     * elements (for STRING elements, use gguf_arr_str). */
    enum gguf_value_type arr_type;
    uint64_t arr_count;
    const uint8_t *arr_data;
    const uint64_t *arr_str_offsets; /* STRING arrays: offset of element i's length field, from arr_data */
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
    gguf_str name;
    char name_z[64]; /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* missing dims are 1 */
    uint32_t type;             /* ggml type id, see quant/qtypes.h */
    uint64_t offset;           /* relative to the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;          /* points into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens and validates path. On error returns a WK_E* code, *out = NULL, and err
 * names path and what is wrong (one line, "PATH: reason"). Codes: WK_EIO (cannot
 * open/map), WK_EFORMAT (not GGUF, truncated, malformed, limits exceeded),
 * WK_EUNSUPPORTED (GGUF v1 or > v3, tensor types wick cannot use), WK_ENOMEM. */
int gguf_open(gguf_file **out, const char *path, wk_error *err);
/* Same over a caller-owned buffer (used by the fuzzer and tests); the buffer
 * must outlive the gguf_file. */
int gguf_open_buffer(gguf_file **out, const void *data, size_t size, wk_error *err);

/* True when f maps a file (gguf_open), false over a caller's buffer: only a
 * file mapping's pages may be dropped and faulted back in (wk_mapfile_drop). */
bool gguf_is_file_mapped(const gguf_file *f);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
size_t gguf_file_size(const gguf_file *f);
const char *gguf_path(const gguf_file *f); /* "" for buffers */
size_t gguf_data_offset(const gguf_file *f); /* file offset of the tensor data section */

/* Metadata */
size_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key); /* NULL if absent */

/* Typed getters. Return WK_ENOTFOUND if absent (err filled), WK_EFORMAT if the
 * stored type cannot represent the request (e.g. negative value for uint, a
 * string for an int); any integer type is accepted for integer requests. */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, wk_error *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, wk_error *err);
int gguf_get_f64(const gguf_file *f, const char *key, double *out, wk_error *err); /* ints too */
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, wk_error *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, wk_error *err);
/* Convenience: value or default when absent (still fails on a wrong type). */
int gguf_get_u64_or(const gguf_file *f, const char *key, uint64_t def, uint64_t *out, wk_error *err);
int gguf_get_f64_or(const gguf_file *f, const char *key, double def, double *out, wk_error *err);

/* Bytes of one stored scalar of type t; 0 for STRING, ARRAY and unknown ids. */
size_t gguf_scalar_size(enum gguf_value_type t);
/* True for the integer types (signed, unsigned and bool): what the integer
 * getters and gguf_arr_i64 accept. */
bool gguf_type_is_integer(enum gguf_value_type t);

/* Array element access (kv->type must be ARRAY, i < arr_count). */
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i); /* any integer/bool element type */
double gguf_arr_f64(const gguf_kv *kv, uint64_t i);  /* float or integer element types */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);

/* Per-layer integer keys given either as a scalar or an array of n_layer
 * entries (head_count, head_count_kv, feed_forward_length). */
int gguf_get_u32_per_layer(const gguf_file *f, const char *key, uint32_t n_layer, uint32_t *out,
                           wk_error *err);

/* Tensors */
size_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

/* Writes one line "key: type = value" for one kv (used by `wick info -v`): long
 * strings are cut at 160 bytes, arrays show at most max_array_items elements. */
void gguf_kv_print(FILE *out, const gguf_kv *kv, size_t max_array_items);

/* ---- writer: streams a GGUF v3 file without holding tensor data in memory ----
 * Usage: gguf_writer_new → add kv pairs and tensor infos (name, type, ne) →
 * gguf_writer_begin_data (writes header) → for each tensor in order,
 * gguf_writer_write_data one or more times with exactly its byte size in total
 * → gguf_writer_finish. */
typedef struct gguf_writer gguf_writer;
/* Setting a key that already exists replaces its value in place (so "copy all
 * kvs, then override general.file_type" works). general.alignment is managed by
 * the writer: it is written when alignment != 32, and setting/copying it to a
 * different value than the writer's is an error. Setters and add_tensor have no
 * err argument: the first failure is kept and reported again (with its message)
 * by gguf_writer_begin_data. finish and abort always free the writer; on a
 * failed finish the partial file is removed. Data goes to "<path>.tmp" and is
 * renamed to path by a successful finish. alignment 0 means 32. */

int gguf_writer_new(gguf_writer **out, const char *path, uint32_t alignment, wk_error *err);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Arrays: elem_type is a scalar type; data holds count little-endian values. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                        const void *data, uint64_t count);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t count);
/* Copies a kv (any type) from an open file, e.g. to rewrite metadata. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne);
int gguf_writer_begin_data(gguf_writer *w, wk_error *err);
int gguf_writer_write_data(gguf_writer *w, const void *data, size_t n, wk_error *err);
int gguf_writer_finish(gguf_writer *w, wk_error *err); /* pads, flushes, closes, frees */
void gguf_writer_abort(gguf_writer *w);                /* closes, removes the partial file, frees */

#endif
