/*
 * acc_half_cuda.cu — mixed precision kernels on device buffers (see
 * acc_half_cuda.h): grid-stride loops, conversions through cuda_fp16.h /
 * cuda_bf16.h intrinsics (round to nearest even, as torch's .half() and
 * .bfloat16()), and the GradScaler unscale with an inf/NaN flag (as
 * torch's _amp_foreach_non_finite_check_and_unscale_).
 */
#include "acc_half_cuda.h"

#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "acc_cuda_kernels.cuh"

namespace {

/* The element conversions (round to nearest even) and one kernel that
 * maps any of them over a buffer. */
__device__ uint16_t to_f16(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
__device__ float from_f16(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ uint16_t to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ float from_bf16(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}

template <typename Out, typename In, Out (*F)(In)>
__global__ void k_map(void *dst, const void *src, size_t n) {
  Out *o = static_cast<Out *>(dst);
  const In *in = static_cast<const In *>(src);
  FOR_EACH_ELEMENT(i, n) {
    o[i] = F(in[i]);
  }
}

__global__ void k_unscale(float *g, size_t n, float inv, int *found) {
  FOR_EACH_ELEMENT(i, n) {
    float v = g[i];
    if (!isfinite(v))
      *found = 1;
    g[i] = v * inv;
  }
}

} // namespace

extern "C" acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n,
                                         void *stream, char *err, size_t errlen) {
  if (n == 0)
    return ACC_OK;
  const unsigned b = acc_blocks_for(n);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  /* indexed by kind (acc_half_cuda.h): 0 to fp16, 1 from fp16, 2 to bf16, 3 from bf16 */
  static void (*const KERNELS[])(void *, const void *, size_t) = {
      k_map<uint16_t, float, to_f16>, k_map<float, uint16_t, from_f16>,
      k_map<uint16_t, float, to_bf16>, k_map<float, uint16_t, from_bf16>};
  if (kind < 0 || kind >= (int)(sizeof KERNELS / sizeof KERNELS[0])) {
    if (err && errlen)
      std::snprintf(err, errlen, "unknown conversion %d", kind);
    return ACC_ERR_INVALID_ARGUMENT;
  }
  KERNELS[kind]<<<b, 256, 0, st>>>(dst, src, n);
  acc_result_t r = acc_cuda_check(cudaGetLastError(), "conversion kernel launch", err, errlen);
  if (r != ACC_OK)
    return r;
  return acc_cuda_check(cudaStreamSynchronize(st), "conversion kernel", err, errlen);
}

extern "C" acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, int *flag,
                                         void *stream, char *err, size_t errlen) {
  *found_inf = 0;
  if (n == 0)
    return ACC_OK;
  /* on the accelerator's stream, after the kernels that wrote the
   * gradients (nbfork.h's stream contract; the NCCL all-reduce returned
   * only once it was done) */
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  int found = 0;
  acc_result_t r =
      acc_cuda_check(cudaMemsetAsync(flag, 0, sizeof(int), st), "cudaMemsetAsync", err, errlen);
  if (r == ACC_OK) {
    k_unscale<<<acc_blocks_for(n), 256, 0, st>>>(g, n, inv, flag);
    r = acc_cuda_check(cudaGetLastError(), "unscale kernel launch", err, errlen);
  }
  if (r == ACC_OK)
    r = acc_cuda_check(cudaMemcpyAsync(&found, flag, sizeof(int), cudaMemcpyDeviceToHost, st),
                       "unscale kernel", err, errlen);
  if (r == ACC_OK)
    r = acc_cuda_check(cudaStreamSynchronize(st), "unscale kernel", err, errlen);
  if (r == ACC_OK)
    *found_inf = found != 0;
  return r;
}
