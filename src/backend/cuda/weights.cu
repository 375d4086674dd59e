/* Weights in device layout (see cuda_kernels.h): host-side repack + upload. */
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"

/* Block geometry of the types with device kernels. payload = bytes of a
 * block kept in the block area; the F16 scale (when split) goes to the tail. */
typedef struct qw_geom {
    int block_elems, block_bytes; /* ggml */
    int payload;                  /* device bytes per block before the tail */
    int split_d;                  /* 1: block's F16 d moved to the row tail */
} qw_geom;

static int qw_geom_of(uint32_t type, qw_geom *g)
{
    switch (type) {
    case QT_Q4_K: *g = (qw_geom){256, 144, 144, 0}; return 1;
    case QT_Q5_K: *g = (qw_geom){256, 176, 176, 0}; return 1;
    case QT_Q6_K: *g = (qw_geom){256, 210, 208, 1}; return 1;
    case QT_Q8_0: *g = (qw_geom){32, 34, 32, 1}; return 1;
    case QT_Q4_0: *g = (qw_geom){32, 18, 16, 1}; return 1;
    case QT_IQ4_NL: *g = (qw_geom){32, 18, 16, 1}; return 1;
    case QT_F32: *g = (qw_geom){1, 4, 4, 0}; return 1;
    case QT_F16: *g = (qw_geom){1, 2, 2, 0}; return 1;
    case QT_BF16: *g = (qw_geom){1, 2, 2, 0}; return 1;
    default: return 0;
    }
}

extern "C" int cuda_qw_supported(uint32_t type)
{
    qw_geom g;
    return qw_geom_of(type, &g);
}

extern "C" size_t cuda_qw_row_bytes(uint32_t type, int64_t cols)
{
    qw_geom g;
    if (!qw_geom_of(type, &g) || cols <= 0 || cols % g.block_elems) return 0;
    int64_t nb = cols / g.block_elems;
    size_t bytes = (size_t)nb * g.payload + (g.split_d ? (size_t)nb * 2 : 0);
    return (bytes + 15) & ~(size_t)15;
}

extern "C" int cuda_qw_repack(uint32_t type, const void *src, size_t src_row_bytes, int64_t rows,
                              int64_t cols, void *dst, wk_error *err)
{
    qw_geom g;
    size_t rb = cuda_qw_row_bytes(type, cols);
    if (!rb || !qw_geom_of(type, &g))
        return wk_fail(err, WK_EUNSUPPORTED, "cuda: weight type %s with %lld columns has no device layout",
                       qt_type_name(type), (long long)cols);
    int64_t nb = cols / g.block_elems;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)r * src_row_bytes;
        uint8_t *d = (uint8_t *)dst + (size_t)r * rb;
        memset(d, 0, rb);
        if (!g.split_d) {
            memcpy(d, s, (size_t)nb * g.block_bytes);
            continue;
        }
        uint8_t *tail = d + (size_t)nb * g.payload;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = s + (size_t)b * g.block_bytes;
            if (type == QT_Q6_K) { /* ql qh scales d */
                memcpy(d + b * 208, blk, 208);
                memcpy(tail + 2 * b, blk + 208, 2);
            } else { /* d first, then qs */
                memcpy(tail + 2 * b, blk, 2);
                memcpy(d + b * g.payload, blk + 2, (size_t)g.payload);
            }
        }
    }
    return 0;
}

extern "C" int cuda_qw_upload(cuda_ctx *c, cuda_qweight *w, uint32_t type, const void *host,
                              int64_t cols, int64_t rows, size_t nb1, int64_t n_mat, size_t nb2,
                              wk_error *err)
{
    memset(w, 0, sizeof *w);
    size_t rb = cuda_qw_row_bytes(type, cols);
    if (!rb)
        return wk_fail(err, WK_EUNSUPPORTED, "cuda: weight type %s with %lld columns has no device layout",
                       qt_type_name(type), (long long)cols);
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->n_mat = n_mat;
    w->row_bytes = rb;
    w->mat_bytes = rb * (size_t)rows;
    cudaError_t e = cudaMalloc(&w->data, w->mat_bytes * (size_t)n_mat);
    if (e != cudaSuccess)
        return wk_fail(err, WK_ENOMEM, "cuda: %zu bytes for a weight: %s", w->mat_bytes * (size_t)n_mat,
                       cudaGetErrorString(e));
    /* repack one matrix at a time through a pinned-free host buffer */
    uint8_t *tmp = (uint8_t *)malloc(w->mat_bytes);
    if (!tmp) {
        cuda_qw_free(w);
        return wk_fail(err, WK_ENOMEM, "cuda: host staging of %zu bytes", w->mat_bytes);
    }
    int rc = 0;
    for (int64_t m = 0; m < n_mat && !rc; m++) {
        rc = cuda_qw_repack(type, (const uint8_t *)host + (size_t)m * nb2, nb1, rows, cols, tmp, err);
        if (rc) break;
        e = cudaMemcpy((uint8_t *)w->data + (size_t)m * w->mat_bytes, tmp, w->mat_bytes,
                       cudaMemcpyHostToDevice);
        if (e != cudaSuccess) rc = cu_fail(err, e, "uploading a weight");
    }
    free(tmp);
    if (rc) cuda_qw_free(w);
    return rc;
}

extern "C" void cuda_qw_free(cuda_qweight *w)
{
    if (w && w->data) cudaFree(w->data);
    if (w) memset(w, 0, sizeof *w);
}
