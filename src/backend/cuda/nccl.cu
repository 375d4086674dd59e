/* NCCL, the collective library a tensor split will combine partial results with
 * (all-reduce): linked when CMake finds it beside the CUDA toolkit or at NCCL_ROOT
 * (WICK_HAVE_NCCL). Host code only. */
#ifdef WICK_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

extern "C" int be_cuda_nccl_version(void)
{
#ifdef WICK_HAVE_NCCL
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
#else
    return 0;
#endif
}
