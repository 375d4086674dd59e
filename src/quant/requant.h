/* Requantizing a GGUF model: every tensor to the type the mix rule
 * (quant_mix.h) gives it, from F32/F16/BF16 or any other supported type
 * (dequantized to F32, then quantized with quant.h's quantizers); tensors
 * already of their target type are copied byte for byte. Metadata is copied
 * with general.file_type set to the mix's. Rows are split over a thread
 * pool; memory stays bounded (a slab of output rows plus one F32 row per
 * thread), whatever the file size. The output is written to "OUT.tmp" and
 * renamed by the GGUF writer only when complete. */
#ifndef WICK_QUANT_REQUANT_H
#define WICK_QUANT_REQUANT_H

#include <stdint.h>

#include "quant/quant_mix.h"
#include "util/err.h"

typedef struct qt_requant_stats {
    uint64_t in_bytes, out_bytes;   /* tensor data */
    uint64_t n_elements_in;         /* all tensors */
    uint32_t n_tensors;
    uint32_t n_quantized;           /* converted to another type */
    uint32_t n_copied;              /* already of their type (quantizable ones included) */
    uint32_t n_upcast;              /* quantized sources converted to a type with more bits: no precision gained */
} qt_requant_stats;

/* Progress: input tensor bytes done of the total; returning non-zero
 * cancels (WK_ECANCELLED, nothing left under the output name). */
typedef int (*qt_requant_progress_fn)(void *user, uint64_t done_bytes, uint64_t total_bytes);

/* Requantizes in_path into out_path with spec on n_threads (<= 0: physical
 * cores). stats may be NULL. Errors name the tensor or file: WK_EINVAL for
 * out_path naming the input, a target type whose blocks do not divide a
 * row even after the fallbacks, WK_EIO/WK_EFORMAT from the files. */
int qt_requantize_file(const char *in_path, const char *out_path, const qt_mix_spec *spec, int n_threads,
                       qt_requant_progress_fn progress, void *user, qt_requant_stats *stats, wk_error *err);

#endif
