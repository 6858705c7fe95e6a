/*
 * acc_optim_cuda.cu — SGD and AdamW updates on device buffers (see
 * acc_optim_cuda.h): one grid-stride kernel per step, reading each of
 * p, g, and the state once (the update is memory-bound).
 */
#include "acc_optim_cuda.h"

#include <cmath>
#include <cstdio>

#include <cuda_runtime.h>

#include "acc_cuda_kernels.cuh"

namespace {

__global__ void k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mom, float wd,
                      int first) {
  FOR_EACH_ELEMENT(i, n) {
    float gi = g[i] + wd * p[i];
    if (buf) {
      gi = first ? gi : mom * buf[i] + gi;
      buf[i] = gi;
    }
    p[i] -= lr * gi;
  }
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                        float eps, float decay, float step, float inv_sqrt_bc2) {
  FOR_EACH_ELEMENT(i, n) {
    const float gi = g[i];
    float pi = p[i] * decay;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

/* *ss += the sum of g[i]^2 (f64, one atomic per block). */
__global__ void k_sumsq(const float *g, size_t n, double *ss) {
  __shared__ double part[256];
  double s = 0.0;
  FOR_EACH_ELEMENT(i, n) {
    const double v = (double)g[i];
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h)
      part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicAdd(ss, part[0]);
}

__global__ void k_scale(float *g, size_t n, float coef) {
  FOR_EACH_ELEMENT(i, n) {
    g[i] *= coef;
  }
}

__global__ void k_accumulate(float *g, float *prev, size_t n, float inv, int prev_zero, int save) {
  FOR_EACH_ELEMENT(i, n) {
    const float v = prev_zero ? g[i] * inv : prev[i] + (g[i] - prev[i]) * inv;
    g[i] = v;
    if (save)
      prev[i] = v;
  }
}

} // namespace

extern "C" acc_result_t acc_optim_cuda_state(float **buf, size_t n, char *err, size_t errlen) {
  if (*buf)
    return ACC_OK;
  acc_result_t r =
      acc_cuda_check(cudaMalloc(buf, n * sizeof(float)), "optimizer state", err, errlen);
  if (r == ACC_OK)
    r = acc_cuda_check(cudaMemset(*buf, 0, n * sizeof(float)), "optimizer state", err, errlen);
  /* cudaMemset runs on the legacy stream, which a non-blocking
   * accelerator stream does not wait for: the first kernel reading the
   * state must see the zeros (once per buffer, so a full wait is cheap) */
  if (r == ACC_OK)
    r = acc_cuda_check(cudaDeviceSynchronize(), "optimizer state", err, errlen);
  if (r != ACC_OK)
    acc_optim_cuda_free(buf);
  return r;
}

extern "C" void acc_optim_cuda_free(float **buf) {
  if (buf && *buf) {
    cudaFree(*buf);
    *buf = nullptr;
  }
}

extern "C" acc_result_t acc_optim_cuda_sgd(float *p, const float *g, float *buf, size_t n, float lr,
                                           float momentum, float weight_decay, int first,
                                           void *stream, char *err, size_t errlen) {
  k_sgd<<<acc_blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      p, g, momentum != 0.0f ? buf : nullptr, n, lr, momentum, weight_decay, first);
  return acc_cuda_check(cudaGetLastError(), "SGD kernel", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n,
                                             float lr, float beta1, float beta2, float eps,
                                             float weight_decay, float step_size,
                                             float inv_sqrt_bc2, void *stream, char *err,
                                             size_t errlen) {
  k_adamw<<<acc_blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      p, g, m, v, n, beta1, beta2, eps, 1.0f - lr * weight_decay, step_size, inv_sqrt_bc2);
  return acc_cuda_check(cudaGetLastError(), "AdamW kernel", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_copy(float *host, float *dev, size_t n, int to_device,
                                            char *err, size_t errlen) {
  acc_result_t r = acc_cuda_check(cudaDeviceSynchronize(), "synchronizing", err, errlen);
  if (r != ACC_OK)
    return r;
  r = acc_cuda_check(to_device ? cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice)
                               : cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost),
                     "cudaMemcpy", err, errlen);
  /* a pageable host-to-device cudaMemcpy may return before its DMA ends,
   * and the legacy stream it ran on does not order a non-blocking stream */
  if (r == ACC_OK)
    r = acc_cuda_check(cudaDeviceSynchronize(), "cudaMemcpy", err, errlen);
  return r;
}

extern "C" acc_result_t acc_optim_cuda_clip_norm(float *g, size_t n, double max_norm,
                                                 float *scratch, void *stream, double *norm,
                                                 char *err, size_t errlen) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  double *d_ss = reinterpret_cast<double *>(scratch), ss = 0.0;
  acc_result_t r =
      acc_cuda_check(cudaMemsetAsync(d_ss, 0, sizeof(double), st), "cudaMemsetAsync", err, errlen);
  if (r != ACC_OK)
    return r;
  if (n) {
    k_sumsq<<<acc_blocks_for(n), 256, 0, st>>>(g, n, d_ss);
    r = acc_cuda_check(cudaGetLastError(), "gradient norm kernel", err, errlen);
  }
  if (r == ACC_OK)
    r = acc_cuda_check(cudaMemcpyAsync(&ss, d_ss, sizeof ss, cudaMemcpyDeviceToHost, st),
                       "gradient norm", err, errlen);
  if (r == ACC_OK)
    r = acc_cuda_check(cudaStreamSynchronize(st), "gradient norm", err, errlen);
  if (r != ACC_OK)
    return r;
  const float fnorm = (float)sqrt(ss); /* torch returns the f32 norm */
  *norm = (double)fnorm;
  if (max_norm > 0 && isfinite(fnorm)) {
    const float coef = (float)(max_norm / ((double)fnorm + 1e-6));
    if (coef < 1.0f) { /* torch multiplies by min(coef, 1) */
      k_scale<<<acc_blocks_for(n), 256, 0, st>>>(g, n, coef);
      r = acc_cuda_check(cudaGetLastError(), "gradient clipping kernel", err, errlen);
    }
  }
  return r;
}

extern "C" acc_result_t acc_optim_cuda_accumulate(float *g, float *prev, size_t n, float inv,
                                                  int prev_zero, int save, void *stream, char *err,
                                                  size_t errlen) {
  k_accumulate<<<acc_blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(g, prev, n, inv,
                                                                                 prev_zero, save);
  return acc_cuda_check(cudaGetLastError(), "accumulation kernel", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_zero(float *buf, size_t n, void *stream, char *err,
                                            size_t errlen) {
  return acc_cuda_check(
      cudaMemsetAsync(buf, 0, n * sizeof(float), static_cast<cudaStream_t>(stream)),
      "cudaMemsetAsync", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_sumsq(float *const *g, const size_t *n, int k,
                                             float *scratch, void *stream, double *ss, char *err,
                                             size_t errlen) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  double *d_ss = reinterpret_cast<double *>(scratch);
  acc_result_t r =
      acc_cuda_check(cudaMemsetAsync(d_ss, 0, sizeof(double), st), "cudaMemsetAsync", err, errlen);
  for (int i = 0; r == ACC_OK && i < k; i++)
    if (n[i]) {
      k_sumsq<<<acc_blocks_for(n[i]), 256, 0, st>>>(g[i], n[i], d_ss);
      r = acc_cuda_check(cudaGetLastError(), "sum of squares kernel", err, errlen);
    }
  if (r == ACC_OK)
    r = acc_cuda_check(cudaMemcpyAsync(ss, d_ss, sizeof *ss, cudaMemcpyDeviceToHost, st),
                       "sum of squares", err, errlen);
  if (r == ACC_OK)
    r = acc_cuda_check(cudaStreamSynchronize(st), "sum of squares", err, errlen);
  return r;
}

extern "C" acc_result_t acc_optim_cuda_scale(float *g, size_t n, float coef, void *stream,
                                             char *err, size_t errlen) {
  if (!n)
    return ACC_OK;
  k_scale<<<acc_blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(g, n, coef);
  return acc_cuda_check(cudaGetLastError(), "scaling kernel", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_copy_async(float *dst, const float *src, size_t n,
                                                  void *stream, char *err, size_t errlen) {
  if (!n || dst == src)
    return ACC_OK;
  return acc_cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                        static_cast<cudaStream_t>(stream)),
                        "cudaMemcpyAsync", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_copy_host_async(float *dst, const float *src, size_t n,
                                                       int to_device, void *stream, char *err,
                                                       size_t errlen) {
  if (!n)
    return ACC_OK;
  return acc_cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                        to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                        static_cast<cudaStream_t>(stream)),
                        "cudaMemcpyAsync", err, errlen);
}

extern "C" acc_result_t acc_optim_cuda_sync(void *stream, char *err, size_t errlen) {
  return acc_cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                        "cudaStreamSynchronize", err, errlen);
}
