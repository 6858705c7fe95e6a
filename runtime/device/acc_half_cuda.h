/*
 * acc_half_cuda.h — the device side of mixed precision: f32 <-> fp16/bf16
 * conversion kernels and the loss scaler's unscale + inf/NaN check on
 * device buffers. Built from acc_half_cuda.cu when CMake finds a CUDA
 * compiler (NBFORK_CUDA_KERNELS); with CUDA but no compiler, acc_half.c
 * stages through host memory; without CUDA both return
 * ACC_ERR_UNSUPPORTED. Every call runs on `stream` (the accelerator's,
 * NULL = the default stream), so it reads what earlier work there wrote,
 * and is synchronous (it returns when the result is in memory). Internal.
 */
#ifndef ACC_HALF_CUDA_H
#define ACC_HALF_CUDA_H

#include <stddef.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kind: 0 f32->f16, 1 f16->f32, 2 f32->bf16, 3 bf16->f32 (round to
 * nearest even); `n` elements; dst AND src device pointers. */
acc_result_t acc_cuda_convert(int kind, void *dst, const void *src, size_t n, void *stream,
                              char *err, size_t errlen);

/* g[i] *= inv for n device floats; *found_inf = 1 when any g[i] was
 * inf/NaN before the multiplication, else 0. `flag`: one device int of
 * scratch (the accelerator's, allocated once: a step allocates nothing). */
acc_result_t acc_cuda_unscale(float *g, size_t n, float inv, int *found_inf, int *flag,
                              void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ACC_HALF_CUDA_H */
