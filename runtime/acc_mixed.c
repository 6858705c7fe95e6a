/*
 * acc_mixed.c — mixed precision: f32 <-> fp16/bf16 conversions of arrays
 * (host, or device through acc_half_cuda.cu), rounding of f32 values to
 * the half types (what the model toolkit's "autocast" uses), and the fp16
 * dynamic loss scaler with the semantics of PyTorch's
 * torch.cuda.amp.GradScaler (torch/cuda/amp/grad_scaler.py and the
 * _amp_update_scale_ kernel):
 *
 *   scale(loss)  = loss * S                       (S = 2^16 at start)
 *   unscale_     : g *= float(1 / double(S)); found_inf = any(!isfinite(g))
 *   step         : skipped when found_inf
 *   update       : found_inf  -> S *= backoff_factor (0.5), tracker = 0
 *                  otherwise  -> tracker += 1; when tracker == growth_interval
 *                                (2000): S *= growth_factor (2) if that is
 *                                finite, tracker = 0
 *
 * Host conversions use the F16C instructions (vcvtps2ph/vcvtph2ps, round
 * to nearest even) when the CPU has them, else the portable code of
 * acc_half.h; bf16 rounding is integer arithmetic the compiler vectorizes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
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
  if (cached < 0)
    cached = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
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

static void to_f16_host(uint16_t *dst, const float *src, size_t n) {
#ifdef ACC_HAVE_X86
  if (has_f16c()) {
    to_f16_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    dst[i] = acc_f32_to_f16(src[i]);
}

static void from_f16_host(float *dst, const uint16_t *src, size_t n) {
#ifdef ACC_HAVE_X86
  if (has_f16c()) {
    from_f16_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    dst[i] = acc_f16_to_f32(src[i]);
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
#ifdef ACC_HAVE_X86
    if (has_f16c()) {
      round_f16_f16c(x, n);
      return;
    }
#endif
    for (size_t i = 0; i < n; i++)
      x[i] = acc_f16_to_f32(acc_f32_to_f16(x[i]));
  }
}

/* ------------------------------------------------------- public conversions */

typedef enum { CONV_TO_F16, CONV_FROM_F16, CONV_TO_BF16, CONV_FROM_BF16 } conv_t;

static int on_device(const acc_t *acc, const void *a, const void *b) {
  return acc && acc->device >= 0 && (acc_nccl_is_device_ptr(a) || acc_nccl_is_device_ptr(b));
}

static acc_result_t convert(const acc_t *acc, conv_t kind, void *dst, const void *src, size_t n) {
  static const char *names[] = {"acc_to_f16", "acc_from_f16", "acc_to_bf16", "acc_from_bf16"};
  if (n == 0)
    return ACC_OK;
  if (!dst || !src)
    return acc__set_error((acc_t *)acc, ACC_ERR_INVALID_ARGUMENT,
                          "%s: NULL buffer for %zu elements", names[kind], n);
  if (on_device(acc, dst, src)) {
    char err[256];
    acc_result_t r = acc_cuda_convert((int)kind, dst, src, n, err, sizeof err);
    if (r != ACC_OK)
      return acc__set_error((acc_t *)acc, r, "%s on device memory: %s", names[kind], err);
    return ACC_OK;
  }
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

/* ------------------------------------------------------------ loss scaler */

void acc__scaler_init(acc_t *acc) {
  acc->scale = 65536.0f; /* GradScaler(init_scale=2.**16) */
  acc->growth_factor = 2.0f;
  acc->backoff_factor = 0.5f;
  acc->growth_interval = 2000;
  acc->growth_tracker = 0;
  acc->found_inf = 0;
  acc->unscaled_grads = NULL;
}

float acc_loss_scale(const acc_t *acc) {
  return acc && acc->precision == ACC_PRECISION_FP16 ? acc->scale : 1.0f;
}

int acc_loss_scale_growth_tracker(const acc_t *acc) {
  return acc ? acc->growth_tracker : 0;
}

acc_result_t acc_set_grad_scaler(acc_t *acc, float init_scale, float growth_factor,
                                 float backoff_factor, int growth_interval) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!(init_scale > 0.0f) || !isfinite(init_scale) || !(growth_factor > 1.0f) ||
      !isfinite(growth_factor) || !(backoff_factor > 0.0f && backoff_factor < 1.0f) ||
      growth_interval < 1)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_set_grad_scaler: need init_scale > 0, growth_factor > 1, "
                          "0 < backoff_factor < 1, growth_interval >= 1 (got %g, %g, %g, %d)",
                          (double)init_scale, (double)growth_factor, (double)backoff_factor,
                          growth_interval);
  acc->scale = init_scale;
  acc->growth_factor = growth_factor;
  acc->backoff_factor = backoff_factor;
  acc->growth_interval = growth_interval;
  acc->growth_tracker = 0;
  return ACC_OK;
}

/* g *= inv in one pass, and report whether any element of the SCALED
 * gradients was inf/NaN (exponent bits all ones). */
static int unscale_host(float *restrict g, size_t n, float inv) {
  const uint32_t *u = (const uint32_t *)(const void *)g;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
  for (size_t i = 0; i < n; i++)
    g[i] *= inv;
  return bad != 0;
}

int acc_unscale_gradients(acc_t *acc, float *grads, size_t n) {
  if (!acc || acc->precision != ACC_PRECISION_FP16)
    return 1;
  if (n && !grads) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_unscale_gradients: NULL gradients");
    return -1;
  }
  if (acc->unscaled_grads == grads && grads)
    return !acc->found_inf; /* already unscaled since the last update */
  const float inv = (float)(1.0 / (double)acc->scale);
  int found = 0;
  if (n && on_device(acc, grads, grads)) {
    char err[256];
    acc_result_t r = acc_cuda_unscale(grads, n, inv, &found, err, sizeof err);
    if (r != ACC_OK) {
      acc__set_error(acc, r, "acc_unscale_gradients on device memory: %s", err);
      return -1;
    }
  } else if (n) {
    found = unscale_host(grads, n, inv);
  }
  acc->found_inf = found;
  acc->unscaled_grads = grads;
  return !found;
}

void acc_update_loss_scale(acc_t *acc, int found_inf) {
  if (!acc)
    return;
  acc->unscaled_grads = NULL;
  acc->found_inf = found_inf != 0;
  if (acc->precision != ACC_PRECISION_FP16)
    return;
  if (found_inf) {
    acc->scale *= acc->backoff_factor;
    acc->growth_tracker = 0;
  } else if (++acc->growth_tracker == acc->growth_interval) {
    float grown = acc->scale * acc->growth_factor;
    if (isfinite(grown))
      acc->scale = grown;
    acc->growth_tracker = 0;
  }
}

int acc_optimizer_step_was_skipped(const acc_t *acc) {
  return acc ? acc->found_inf : 0;
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

acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n, char *err,
                              size_t errlen) {
  const size_t in_sz = (kind == CONV_TO_F16 || kind == CONV_TO_BF16) ? 4 : 2;
  const size_t out_sz = 6 - in_sz;
  void *hin = malloc(n * in_sz), *hout = malloc(n * out_sz);
  acc_result_t r = ACC_OK;
  cudaError_t e;
  if (!hin || !hout) {
    snprintf(err, errlen, "no host memory to stage %zu elements", n);
    r = ACC_ERR_NO_MEMORY;
  } else if ((e = cudaMemcpy(hin, src, n * in_sz, cudaMemcpyDeviceToHost)) != cudaSuccess) {
    r = cuda_fail(e, "cudaMemcpy to host", err, errlen);
  } else {
    switch (kind) {
    case CONV_TO_F16:
      to_f16_host(hout, hin, n);
      break;
    case CONV_FROM_F16:
      from_f16_host(hout, hin, n);
      break;
    case CONV_TO_BF16:
      to_bf16_host(hout, hin, n);
      break;
    default:
      from_bf16_host(hout, hin, n);
      break;
    }
    if ((e = cudaMemcpy(dst, hout, n * out_sz, cudaMemcpyHostToDevice)) != cudaSuccess)
      r = cuda_fail(e, "cudaMemcpy to device", err, errlen);
  }
  free(hin);
  free(hout);
  return r;
}

acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, char *err,
                              size_t errlen) {
  float *h = malloc(n * sizeof(float));
  cudaError_t e;
  if (!h) {
    snprintf(err, errlen, "no host memory to stage %zu elements", n);
    return ACC_ERR_NO_MEMORY;
  }
  if ((e = cudaMemcpy(h, g, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess) {
    free(h);
    return cuda_fail(e, "cudaMemcpy to host", err, errlen);
  }
  *found_inf = unscale_host(h, n, inv);
  e = cudaMemcpy(g, h, n * sizeof(float), cudaMemcpyHostToDevice);
  free(h);
  return e == cudaSuccess ? ACC_OK : cuda_fail(e, "cudaMemcpy to device", err, errlen);
}
#else
acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n, char *err,
                              size_t errlen) {
  (void)kind, (void)dst, (void)src, (void)n;
  if (err && errlen)
    snprintf(err, errlen, "nbfork was built without CUDA");
  return ACC_ERR_UNSUPPORTED;
}
acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, char *err,
                              size_t errlen) {
  (void)g, (void)n, (void)inv;
  *found_inf = 0;
  if (err && errlen)
    snprintf(err, errlen, "nbfork was built without CUDA");
  return ACC_ERR_UNSUPPORTED;
}
#endif
#endif
