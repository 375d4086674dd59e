#ifndef WICK_TESTS_CUDA_GOLDEN_CUDA_STEPS_H
#define WICK_TESTS_CUDA_GOLDEN_CUDA_STEPS_H

#include <stdint.h>

#include "model/model.h"

/* Recorded multi-row and multi-sequence decode steps vs graphs off on model m (the
 * prompt's tokens feed them); prints one line under name. 0 when they match. */
int golden_steps_check(const model *m, const int32_t *prompt, int n_prompt, const char *name);

#endif
