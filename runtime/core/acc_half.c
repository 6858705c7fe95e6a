/*
 * acc_half.c — f32 <-> fp16/bf16 conversions of arrays (host, or device
 * through acc_half_cuda.cu) and rounding of f32 values to the half types
 * (what the model toolkit's "autocast" uses). The fp16 loss scaler is in
 * acc_scaler.c.
 *
 * Host conversions use the F16C instructions (vcvtps2ph/vcvtph2ps, round
 * to nearest even) when the CPU has them, else the portable code of
 * acc_half.h; bf16 rounding is integer arithmetic the compiler vectorizes.
 * With CUDA but no CUDA compiler, device buffers are staged through host
 * memory (the fallbacks at the end of this file).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define ACC_HAVE_X86 1
#endif

#include "acc_half.h"
#include "acc_half_cuda.h"
#include "acc_internal.h"
#include "acc_nccl.h"

/* ---------------------------------------------------------------- host */

#ifdef ACC_HAVE_X86
static int has_f16c(void) {
  static int cached = -1;
  if (cached < 0) { /* F16C from CPUID.1:ECX bit 29: clang 16 has no "f16c" builtin feature */
    unsigned a, b, c = 0, d;
    cached = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx");
  }
  return cached;
}

__attribute__((target("avx,f16c"))) static void to_f16_f16c(uint16_t *dst, const float *src,
                                                            size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  for (; i < n; i++)
    dst[i] = acc_f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) static void from_f16_f16c(float *dst, const uint16_t *src,
                                                              size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++)
    dst[i] = acc_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void round_f16_f16c(float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++)
    x[i] = acc_f16_to_f32(acc_f32_to_f16(x[i]));
}
#endif

/* Run the statement `f16c` when the CPU has F16C, else `portable`. */
#ifdef ACC_HAVE_X86
#define F16C_OR(f16c, portable)                                                                    \
  do {                                                                                             \
    if (has_f16c())                                                                                \
      f16c;                                                                                        \
    else                                                                                           \
      portable;                                                                                    \
  } while (0)
#else
#define F16C_OR(f16c, portable) portable
#endif

static void to_f16_host(uint16_t *dst, const float *src, size_t n) {
  F16C_OR(to_f16_f16c(dst, src, n), for (size_t i = 0; i < n; i++) dst[i] = acc_f32_to_f16(src[i]));
}

static void from_f16_host(float *dst, const uint16_t *src, size_t n) {
  F16C_OR(from_f16_f16c(dst, src, n),
          for (size_t i = 0; i < n; i++) dst[i] = acc_f16_to_f32(src[i]));
}

/* bf16: round to nearest even on the bit pattern (NaN kept quiet). The
 * loops are branch-free so GCC vectorizes them at -O3. */
static inline uint32_t bf16_round_bits(uint32_t u) {
  uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t q = (u | 0x00400000u) & 0xffff0000u;
  return is_nan ? q : r;
}

static void to_bf16_host(uint16_t *restrict dst, const float *restrict src, size_t n) {
  const uint32_t *u = (const uint32_t *)(const void *)src;
  for (size_t i = 0; i < n; i++)
    dst[i] = (uint16_t)(bf16_round_bits(u[i]) >> 16);
}

static void from_bf16_host(float *restrict dst, const uint16_t *restrict src, size_t n) {
  uint32_t *u = (uint32_t *)(void *)dst;
  for (size_t i = 0; i < n; i++)
    u[i] = (uint32_t)src[i] << 16;
}

void acc__round_half(acc_precision_t p, float *x, size_t n) {
  if (p == ACC_PRECISION_BF16) {
    uint32_t *u = (uint32_t *)(void *)x;
    for (size_t i = 0; i < n; i++)
      u[i] = bf16_round_bits(u[i]);
  } else if (p == ACC_PRECISION_FP16) {
    F16C_OR(round_f16_f16c(x, n),
            for (size_t i = 0; i < n; i++) x[i] = acc_f16_to_f32(acc_f32_to_f16(x[i])));
  }
}

/* Here, beside the other host kernels, because the host-staging fallback
 * of device gradients below uses it too (acc_scaler.c calls both). */
int acc__unscale_host(float *restrict g, size_t n, float inv) {
  const uint32_t *u = (const uint32_t *)(const void *)g;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
  for (size_t i = 0; i < n; i++)
    g[i] *= inv;
  return bad != 0;
}

/* The conversion `kind` of `n` host elements (kinds as acc_cuda_convert). */
typedef enum { CONV_TO_F16, CONV_FROM_F16, CONV_TO_BF16, CONV_FROM_BF16 } conv_t;

static void convert_host(conv_t kind, void *dst, const void *src, size_t n) {
  switch (kind) {
  case CONV_TO_F16:
    to_f16_host(dst, src, n);
    break;
  case CONV_FROM_F16:
    from_f16_host(dst, src, n);
    break;
  case CONV_TO_BF16:
    to_bf16_host(dst, src, n);
    break;
  case CONV_FROM_BF16:
    from_bf16_host(dst, src, n);
    break;
  }
}

/* ------------------------------------------------------- public conversions */

/* Where a conversion runs: 0 host (both host buffers), 1 device (both
 * device buffers), -1 a host/device pair (refused: the kernel would read
 * a host address and kill the CUDA context, the host loop a device one). */
static int placement(const acc_t *acc, const void *a, const void *b) {
  if (!acc || acc->device < 0)
    return 0;
  const int da = acc_nccl_is_device_ptr(a), db = acc_nccl_is_device_ptr(b);
  return da == db ? da : -1;
}

static acc_result_t convert(const acc_t *acc, conv_t kind, void *dst, const void *src, size_t n) {
  static const char *names[] = {"acc_to_f16", "acc_from_f16", "acc_to_bf16", "acc_from_bf16"};
  if (n == 0)
    return ACC_OK;
  if (!dst || !src)
    return acc__set_error((acc_t *)acc, ACC_ERR_INVALID_ARGUMENT,
                          "%s: NULL buffer for %zu elements", names[kind], n);
  const int where = placement(acc, dst, src);
  if (where < 0)
    return acc__set_error((acc_t *)acc, ACC_ERR_INVALID_ARGUMENT,
                          "%s: dst is %s memory but src is %s memory: both must be host or both "
                          "device buffers (copy with cudaMemcpy first)",
                          names[kind], acc_nccl_is_device_ptr(dst) ? "device" : "host",
                          acc_nccl_is_device_ptr(src) ? "device" : "host");
  if (where) {
    char err[256];
    acc_result_t r = acc_cuda_convert((int)kind, dst, src, n, acc->stream, err, sizeof err);
    if (r != ACC_OK)
      return acc__set_error((acc_t *)acc, r, "%s on device memory: %s", names[kind], err);
    return ACC_OK;
  }
  convert_host(kind, dst, src, n);
  return ACC_OK;
}

acc_result_t acc_to_f16(const acc_t *acc, uint16_t *dst, const float *src, size_t n) {
  return convert(acc, CONV_TO_F16, dst, src, n);
}
acc_result_t acc_from_f16(const acc_t *acc, float *dst, const uint16_t *src, size_t n) {
  return convert(acc, CONV_FROM_F16, dst, src, n);
}
acc_result_t acc_to_bf16(const acc_t *acc, uint16_t *dst, const float *src, size_t n) {
  return convert(acc, CONV_TO_BF16, dst, src, n);
}
acc_result_t acc_from_bf16(const acc_t *acc, float *dst, const uint16_t *src, size_t n) {
  return convert(acc, CONV_FROM_BF16, dst, src, n);
}

/* ------------------------------------------- device fallbacks (no nvcc) */

#if !defined(NBFORK_CUDA_KERNELS)
#if defined(NBFORK_WITH_CUDA)
#include <cuda_runtime.h>

/* CUDA without a CUDA compiler: stage through host memory (correct, but
 * two PCIe copies; build with nvcc for the kernels of acc_half_cuda.cu). */
static acc_result_t cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
  return ACC_ERR_BACKEND;
}

acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n, void *stream,
                              char *err, size_t errlen) {
  const size_t in_sz = (kind == CONV_TO_F16 || kind == CONV_TO_BF16) ? 4 : 2;
  const size_t out_sz = 6 - in_sz;
  void *hin = malloc(n * in_sz), *hout = malloc(n * out_sz);
  acc_result_t r = ACC_OK;
  cudaError_t e;
  if (!hin || !hout) {
    snprintf(err, errlen, "no host memory to stage %zu elements", n);
    r = ACC_ERR_NO_MEMORY;
  } else if ((e = cudaStreamSynchronize((cudaStream_t)stream)) != cudaSuccess) {
    r = cuda_fail(e, "synchronizing the stream", err, errlen);
  } else if ((e = cudaMemcpy(hin, src, n * in_sz, cudaMemcpyDeviceToHost)) != cudaSuccess) {
    r = cuda_fail(e, "cudaMemcpy to host", err, errlen);
  } else {
    convert_host((conv_t)kind, hout, hin, n);
    if ((e = cudaMemcpy(dst, hout, n * out_sz, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) /* the pageable upload's DMA */
      r = cuda_fail(e, "cudaMemcpy to device", err, errlen);
  }
  free(hin);
  free(hout);
  return r;
}

acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, int *flag,
                              void *stream, char *err, size_t errlen) {
  (void)flag;
  float *h = malloc(n * sizeof(float));
  cudaError_t e;
  if (!h) {
    snprintf(err, errlen, "no host memory to stage %zu elements", n);
    return ACC_ERR_NO_MEMORY;
  }
  if ((e = cudaStreamSynchronize((cudaStream_t)stream)) != cudaSuccess ||
      (e = cudaMemcpy(h, g, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess) {
    free(h);
    return cuda_fail(e, "cudaMemcpy to host", err, errlen);
  }
  *found_inf = acc__unscale_host(h, n, inv);
  e = cudaMemcpy(g, h, n * sizeof(float), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) /* the pageable upload's DMA may still run */
    e = cudaDeviceSynchronize();
  free(h);
  return e == cudaSuccess ? ACC_OK : cuda_fail(e, "cudaMemcpy to device", err, errlen);
}
#else
acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n, void *stream,
                              char *err, size_t errlen) {
  (void)kind, (void)dst, (void)src, (void)n, (void)stream;
  if (err && errlen)
    snprintf(err, errlen, "nbfork was built without CUDA");
  return ACC_ERR_UNSUPPORTED;
}
acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, int *flag,
                              void *stream, char *err, size_t errlen) {
  (void)g, (void)n, (void)inv, (void)flag, (void)stream;
  *found_inf = 0;
  if (err && errlen)
    snprintf(err, errlen, "nbfork was built without CUDA");
  return ACC_ERR_UNSUPPORTED;
}
#endif
#endif
