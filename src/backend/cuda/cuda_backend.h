/* The CUDA backend: backend/backend.h's ops on an NVIDIA GPU (sm_90).
 * Only built when CMake's WICK_CUDA is on (it defines WICK_HAVE_CUDA for
 * callers that pick a device). */
#ifndef WICK_BACKEND_CUDA_BACKEND_H
#define WICK_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA backend on GPU `device`. be_alloc gives device memory (zeroed);
 * weights are uploaded on first use, once, in the device layout
 * (cuda_kernels.h), and F32 vectors read through host pointers (norm weights,
 * conv kernels, biases) are copied to the device on first use too: both are
 * assumed immutable for the backend's life (they are the mmap'd model).
 * Types without device kernels are dequantized to F32 at upload.
 * Ops are asynchronous on one stream; be_to_host synchronizes. A failure in
 * an op that returns void is kept and returned by the next op that returns
 * an int (and by be_cuda_status). Returns WK_EIO (no device, driver too old)
 * or WK_ENOMEM. Free with be_free. */
int be_cuda_new(be_backend **out, int device, wk_error *err);

/* First error kept from a void op (0 if none); copies its message into err. */
int be_cuda_status(be_backend *be, wk_error *err);

/* Number of CUDA devices visible (0 when there is no driver or device). */
int be_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
