/* Small harness shared by the CUDA test files: device buffers and checks. */
#ifndef WICK_TESTS_CUDA_TEST_H
#define WICK_TESTS_CUDA_TEST_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_kernels.h"
#include "ref.h"

extern int g_failures;
extern cuda_ctx g_ctx;

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

#define OK(call)                                                                                  \
    do {                                                                                          \
        wk_error err_ = {0};                                                                      \
        (void)err_;                                                                               \
        int rc_ = (call);                                                                         \
        if (rc_) {                                                                                \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, rc_);          \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

static inline void *dev_alloc(size_t bytes)
{
    void *p;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    CK(cudaMemset(p, 0xFF, bytes)); /* poison: NaN floats, so unwritten outputs fail */
    return p;
}
static inline void *dev_upload(const void *h, size_t bytes)
{
    void *p = dev_alloc(bytes);
    CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}
static inline void dev_download(void *h, const void *d, size_t bytes)
{
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* Records one check: passes when err <= tol. */
static inline void check_err(const char *name, double err, double tol)
{
    int ok = err <= tol;
    if (!ok) g_failures++;
    printf("%-4s %-58s rel_err %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name, err, tol);
}

void test_matmul_all(void);
void test_elementwise_all(void);
void test_attention_all(void);
void test_gdn_all(void);
void test_moe_all(void);

#endif
