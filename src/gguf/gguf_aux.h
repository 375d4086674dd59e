/* Auxiliary tables: GGUF files that travel with a model but are not one (an
 * n-gram table for speculative lookup, a large embedding table). They are
 * read in place: gguf_open maps the file and every tensor's data pointer is
 * a view into that mapping, so opening one copies nothing and its pages
 * come in only as they are read. Their bytes are counted apart from the
 * model's weights (wick info, check, sheet).
 *
 * What makes a file auxiliary: general.type is "aux" (the GGUF convention of
 * general.type naming what a file is: "model", "adapter", ...), or it has no
 * general.architecture. A model file is refused with a message saying so. */
#ifndef WICK_GGUF_GGUF_AUX_H
#define WICK_GGUF_GGUF_AUX_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct gguf_aux {
    gguf_file *file;       /* owned */
    char kind[64];         /* aux.kind when present ("ngram", "embedding"), else "table" */
    uint64_t tensor_bytes; /* sum of tensor sizes: what is mapped for use */
    uint64_t file_bytes;
} gguf_aux;

/* Opens and validates path as an auxiliary table. WK_EINVAL when it is a
 * model (general.type "model" or an architecture without general.type
 * "aux"); gguf_open's errors otherwise. Free with gguf_aux_close. */
int gguf_aux_open(gguf_aux *out, const char *path, wk_error *err);
void gguf_aux_close(gguf_aux *a);

/* A tensor of the table by name, its data in place (NULL if absent). */
const gguf_tensor *gguf_aux_tensor(const gguf_aux *a, const char *name);

#endif
