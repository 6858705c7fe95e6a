/*
 * acc_optim_cuda.h — the optimizers' update on device buffers
 * (acc_optim_cuda.cu): the same formulas as acc_optim.c (torch.optim.SGD
 * with momentum, torch.optim.AdamW), one fused kernel per step over the
 * flat f32 buffers. Used by acc_optim_step when the parameters are device
 * memory and the build has a CUDA compiler (NBFORK_CUDA_KERNELS).
 * Asynchronous on `stream` (a cudaStream_t; NULL = default stream).
 * Internal.
 */
#ifndef ACC_OPTIM_CUDA_H
#define ACC_OPTIM_CUDA_H

#include <stddef.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zeroed device state of n floats in *buf when *buf is NULL (the
 * momentum buffer, AdamW's moments, scratch). Synchronous: the zeros are
 * there for kernels on any stream when it returns. */
acc_result_t acc_optim_cuda_state(float **buf, size_t n, char *err, size_t errlen);
void acc_optim_cuda_free(float **buf);

/* SGD: momentum == 0 -> p -= lr (g + wd p) (buf unused); else buf = g +
 * wd p on the first step, momentum buf + g + wd p after, p -= lr buf. */
acc_result_t acc_optim_cuda_sgd(float *p, const float *g, float *buf, size_t n, float lr,
                                float momentum, float weight_decay, int first, void *stream,
                                char *err, size_t errlen);

/* AdamW, step t >= 1 already counted: p *= 1 - lr wd; m, v updated;
 * p -= step_size m / (sqrt(v) inv_sqrt_bc2 + eps), step_size =
 * lr / (1 - b1^t), inv_sqrt_bc2 = 1 / sqrt(1 - b2^t). */
acc_result_t acc_optim_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay,
                                  float step_size, float inv_sqrt_bc2, void *stream, char *err,
                                  size_t errlen);

/* Copy n floats between a host buffer and a device buffer (to_device 1:
 * host -> device). Synchronous: after the device's pending work, and
 * complete for every stream when it returns. For checkpoints. */
acc_result_t acc_optim_cuda_copy(float *host, float *dev, size_t n, int to_device, char *err,
                                 size_t errlen);

/* Gradient accumulation of device gradients (acc_backward's formula):
 * prev_zero ? g *= inv : g = prev + (g - prev) inv; then prev = g when
 * save. Asynchronous on stream. */
acc_result_t acc_optim_cuda_accumulate(float *g, float *prev, size_t n, float inv, int prev_zero,
                                       int save, void *stream, char *err, size_t errlen);

/* torch.nn.utils.clip_grad_norm_ over n device gradients: *norm = the
 * f32 L2 norm (summed in f64, as the host Trainer does); when max_norm >
 * 0 and the norm is finite, g *= min(1, max_norm / (norm + 1e-6)).
 * `scratch`: at least 2 device floats (one f64). On `stream`; returns
 * when *norm is known (the scaling may still run on the stream). */
acc_result_t acc_optim_cuda_clip_norm(float *g, size_t n, double max_norm, float *scratch,
                                      void *stream, double *norm, char *err, size_t errlen);

/* *buf = 0 for n floats, asynchronous on stream (zero_grad). */
acc_result_t acc_optim_cuda_zero(float *buf, size_t n, void *stream, char *err, size_t errlen);

/* Sharded data parallel (runtime/shard): the f64 sum of squares of k
 * device ranges g[i] (n[i] floats each) into *ss, summed on the device
 * into `scratch` (at least 2 device floats: one f64), one
 * synchronization for all of them (clipping's partial norm of a rank's
 * owned gradients). */
acc_result_t acc_optim_cuda_sumsq(float *const *g, const size_t *n, int k, float *scratch,
                                  void *stream, double *ss, char *err, size_t errlen);

/* g *= coef for n device floats, asynchronous on stream (clipping). */
acc_result_t acc_optim_cuda_scale(float *g, size_t n, float coef, void *stream, char *err,
                                  size_t errlen);

/* dst = src, n floats, both device buffers, asynchronous on stream (a
 * unit's gather staging and reduce copies). */
acc_result_t acc_optim_cuda_copy_async(float *dst, const float *src, size_t n, void *stream,
                                       char *err, size_t errlen);

/* dst = src, n floats between host memory and device memory (to_device
 * 1: host src -> device dst; 0: device src -> host dst), asynchronous on
 * stream: offloaded shards (acc_shard_offload.c). With pageable host
 * memory a host-to-device copy returns once src is staged (src may be
 * reused), a device-to-host one once dst is written. */
acc_result_t acc_optim_cuda_copy_host_async(float *dst, const float *src, size_t n, int to_device,
                                            void *stream, char *err, size_t errlen);
/* Wait until stream's work is done. */
acc_result_t acc_optim_cuda_sync(void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ACC_OPTIM_CUDA_H */
