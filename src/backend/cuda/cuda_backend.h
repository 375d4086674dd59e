/* The CUDA backend: backend/backend.h's ops on an NVIDIA GPU (sm_80 and later; sm_90
 * paths on Hopper).
 * Only built when CMake's WICK_CUDA is on (it defines WICK_HAVE_CUDA for
 * callers that pick a device). */
#ifndef WICK_BACKEND_CUDA_BACKEND_H
#define WICK_BACKEND_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

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

/* NCCL's version code (major * 10000 + minor * 100 + patch, e.g. 22809) when this
 * build links NCCL (WICK_HAVE_NCCL), else 0. */
int be_cuda_nccl_version(void);

/* Free and total memory of GPU `device` (cudaMemGetInfo; this creates the
 * device's primary context if there is none) and its name (may be NULL).
 * Returns 0, or -1 when there is no such device or the driver does not answer. */
int be_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *name, size_t name_cap);

/* Decode steps as CUDA graphs (backend.h's be_step_begin / be_step_end): wrap one forward
 * pass of up to 32 sequences of up to 8 rows each (a decode token, drafts to verify, a
 * batch of sequences' tokens), the sequences given with a stable key each (the engine's
 * sequence) and their first positions in the pass's segment order, in
 * be_cuda_step_begin / be_cuda_step_end(be, rc of the pass). The first step of the same
 * sequences, row counts and 4096-position bands runs op by op, the second is captured,
 * later ones replay the graph (launched at the pass's first be_to_host). step_end
 * returns rc, or 1 when the step did not run (a replay whose ops differ from the
 * captured ones, a failed capture): the caller resets the sequences' n_past and runs the
 * pass again without the wrapper. Graphs are dropped when a buffer they use is freed or
 * moved. The environment variable WICK_CUDA_GRAPHS=0 turns them off. */
void be_cuda_step_begin(be_backend *be, const be_step_seq *seqs, int32_t n_seq);
int be_cuda_step_end(be_backend *be, int rc);
/* Turns decode-step graphs on or off (on by default unless WICK_CUDA_GRAPHS=0). */
void be_cuda_set_graphs(be_backend *be, int on);
/* The A/B switches of cuda_kernels.h's cuda_switches in one process (comparisons,
 * tests/cuda/e2e_cuda.c): space-separated key=0|1 settings, fuse, graphs, int8, nt, tc and
 * generic (1: hopper off), the others kept; NULL: back to the environment's values.
 * Drops captured graphs. Returns 0, or -1 when a setting was not understood. */
int be_cuda_tune(be_backend *be, const char *settings);
/* Steps captured, replayed and run again op by op so far. */
void be_cuda_graph_stats(be_backend *be, long *captured, long *replayed, long *redone);
/* Host milliseconds summed over the replayed steps so far (divide by be_cuda_graph_stats'
 * replayed): walk = from be_cuda_step_begin to the graph launch (the forward pass only
 * folding its ops into the signature; the GPU has nothing queued meanwhile), launch =
 * inside cudaGraphLaunch. */
void be_cuda_graph_host_ms(be_backend *be, double *walk_ms, double *launch_ms);

#ifdef __cplusplus
}
#endif

#endif
