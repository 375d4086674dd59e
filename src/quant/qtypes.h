/* Tensor element types (ggml ids, as stored in GGUF) and their block traits. */
#ifndef WICK_QUANT_QTYPES_H
#define WICK_QUANT_QTYPES_H

#include <stddef.h>
#include <stdint.h>

enum qt_type {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13,
    QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ4_NL = 20, QT_IQ4_XS = 23, QT_BF16 = 30,
    QT_COUNT = 43 /* ggml's GGML_TYPE_COUNT: ids at or above are invalid */
};

typedef struct qt_traits {
    const char *name;      /* "Q4_K" */
    uint32_t block_elems;  /* weights per block */
    uint32_t block_bytes;  /* bytes per block */
    int is_quantized;      /* block-quantized (not F32/F16/BF16) */
    int weight_ok;         /* may appear as a model weight (Q8_1/Q8_K are activation-only) */
    enum qt_type vec_dot;  /* activation format paired in dot products */
} qt_traits;

/* Traits of a supported type, or NULL for ids wick does not handle. */
const qt_traits *qt_traits_of(uint32_t type);

/* Name of any ggml id, including ones wick rejects ("IQ2_XXS"), or "type<N>". */
const char *qt_type_name(uint32_t type);

/* Parses "q4_k" / "Q4_K" / "f16"...; returns -1 if unknown. */
int qt_type_from_name(const char *name);

/* Bytes of a row of n elements; n must be a multiple of block_elems. */
static inline size_t qt_row_bytes(const qt_traits *t, int64_t n)
{
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

#endif
