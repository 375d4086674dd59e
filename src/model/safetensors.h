/* Reader of safetensors files (Hugging Face's weight format): an 8-byte
 * little-endian header length, a JSON header naming every tensor's dtype,
 * shape and byte range, then the raw little-endian tensor bytes.
 *
 * st_open maps the file and validates the whole header before returning:
 * header length against the file size and a cap, the JSON (jansson) is an
 * object of tensor entries (plus an optional "__metadata__" object), every
 * dtype known, every shape made of non-negative integers with an
 * overflow-safe element count, every data_offsets pair [begin, end] inside
 * the data section with end - begin = elements x dtype size, and no two
 * tensors overlapping. Any failure is one message naming the file, the tensor
 * and the bad value.
 *
 * Ownership: st_file owns the mapping and the parsed records; tensor data
 * pointers borrow from the mapping and stay valid until st_close. */
#ifndef WICK_MODEL_SAFETENSORS_H
#define WICK_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum st_dtype {
    ST_F32 = 0, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
    ST_F8_E4M3, ST_F8_E5M2,
};

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;                 /* NUL-terminated, owned by the st_file */
    enum st_dtype dtype;
    int n_dims;                 /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS]; /* outermost first, as in PyTorch */
    uint64_t n_elements;
    uint64_t n_bytes;
    const uint8_t *data;        /* into the mapping */
} st_tensor;

typedef struct st_file st_file;

/* Opens and validates path. Errors: WK_EIO (cannot open or map), WK_EFORMAT
 * (truncated, bad JSON, bad entry), WK_ENOMEM. *out is NULL on failure. */
int st_open(st_file **out, const char *path, wk_error *err);
void st_close(st_file *f);

size_t st_tensor_count(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, size_t i); /* in header order */
const st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */

/* "BF16", "F32", ... */
const char *st_dtype_name(enum st_dtype t);
/* Bytes per element (1 for BOOL and the F8 types). */
size_t st_dtype_size(enum st_dtype t);

/* Converts n elements starting at element `first` of a F32, F16 or BF16
 * tensor to F32. WK_EUNSUPPORTED for other dtypes, WK_EINVAL if the range
 * is outside the tensor. */
int st_read_f32(const st_tensor *t, uint64_t first, uint64_t n, float *dst, wk_error *err);

#endif
