/* Plain CPU references for the CUDA kernel tests: written from the specs
 * (spec/gguf.md 6.4, spec/architectures.md), obviously right, slow. */
#ifndef WICK_TESTS_CUDA_REF_H
#define WICK_TESTS_CUDA_REF_H

#include <stddef.h>
#include <stdint.h>

/* Block geometry in GGUF (ggml) layout; 0 if the type is not covered. */
int ref_block_elems(uint32_t type);
int ref_block_bytes(uint32_t type);

/* Fills n elements' worth of random but valid blocks (scales small and finite). */
void ref_random_blocks(uint32_t type, void *dst, int64_t n, uint64_t *rng);

/* ggml-layout row → floats. */
void ref_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Rounds an activation row the way the GPU quantizes it (group 32: Q8_0 rule,
 * group 256: Q8_K rule) and writes the dequantized values. */
void ref_round_act(const float *x, float *out, int64_t n, int group);

float ref_randf(uint64_t *rng); /* uniform in [-1, 1) */
float ref_randn(uint64_t *rng); /* ~ N(0, 1) */

/* ‖a − b‖ / ‖b‖ in double. */
double ref_rel_err(const float *a, const float *b, int64_t n);

/* Reference ops (F32 in double where it matters). */
void ref_attention(const float *q, size_t q_stride, int n_q, int q_pos0, const uint16_t *k,
                   const uint16_t *v, size_t kv_head_stride, int n_kv, int n_head, int n_head_kv, int d,
                   float scale, int approx, int global, int window, int dense_from, float *out,
                   size_t out_stride);
/* The same over a cache of kv_type (0 F16, 1 Q8_0: rows of d/32 blocks, d/32*17 uint16 units). */
void ref_attention_kv(const float *q, size_t q_stride, int n_q, int q_pos0, const uint16_t *k,
                      const uint16_t *v, size_t kv_head_stride, int kv_type, int n_kv, int n_head, int n_head_kv,
                      int d, float scale, int approx, int global, int window, int dense_from, float *out,
                      size_t out_stride);
void ref_gdn(const float *q, const float *k, const float *v, size_t qk_stride, size_t v_stride,
             const float *alpha, const float *beta, const float *ssm_a, const float *dt_bias, int n_t,
             int n_hk, int n_hv, int d_k, int d_v, float eps, float *state, float *out, size_t out_stride);

#endif
