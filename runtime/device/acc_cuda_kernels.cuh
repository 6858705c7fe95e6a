/*
 * acc_cuda_kernels.cuh — what every kernel file of the runtime shares:
 * the grid-stride loop and its grid size, and a CUDA error made the
 * runtime's result with its text. Internal (CUDA sources only).
 */
#ifndef ACC_CUDA_KERNELS_CUH
#define ACC_CUDA_KERNELS_CUH

#include <cstddef>
#include <cstdio>

#include <cuda_runtime.h>

#include "nbfork.h"

/* Grid-stride loop: thread t handles elements t, t + T, t + 2T, ...
 * (T = threads in the grid), so any grid size covers any n. */
#define FOR_EACH_ELEMENT(i, n)                                                                     \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

/* Blocks of 256 threads for n elements: enough to cover n, at most 4096
 * (the loop strides over the rest), at least 1. */
static inline unsigned acc_blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 4096 ? 4096 : (b ? b : 1));
}

/* ACC_OK for cudaSuccess; else "what: CUDA's text" in err and
 * ACC_ERR_NO_MEMORY (allocation) or ACC_ERR_BACKEND. */
static inline acc_result_t acc_cuda_check(cudaError_t e, const char *what, char *err,
                                          size_t errlen) {
  if (e == cudaSuccess)
    return ACC_OK;
  if (err && errlen)
    std::snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? ACC_ERR_NO_MEMORY : ACC_ERR_BACKEND;
}

#endif /* ACC_CUDA_KERNELS_CUH */
