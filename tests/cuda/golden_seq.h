/* A sequence state in backend memory for the CUDA golden tests, laid out as
 * engine/sequence.c does (the tests run model_forward without the engine). */
#ifndef WICK_TESTS_CUDA_GOLDEN_SEQ_H
#define WICK_TESTS_CUDA_GOLDEN_SEQ_H

#include "model/model.h"

typedef struct seq {
    model_state st;
    model_layer_state *layers;
    void *kv, *rec;
} seq;

/* Room for n_ctx positions; 0, or -1 when backend memory ran out. */
int seq_new(seq *s, const model *m, be_backend *be, int32_t n_ctx);
void seq_free(seq *s, be_backend *be);

#endif
