/*
 * acc_mlp_cuda.h — the MLP toolkit on a CUDA device (acc_mlp_cuda.cu):
 * the device half of acc_mlp.c, used when the model's accelerator has a
 * device (acc_device >= 0) and the build has a CUDA compiler
 * (NBFORK_CUDA_KERNELS). Same layout as the host model: one flat f32
 * parameter buffer and one flat f32 gradient buffer, per layer W
 * (nout × nin, row-major) then b (nout).
 *
 * Products go through cublasGemmEx with f32 accumulation
 * (CUBLAS_COMPUTE_32F): f32 inputs with precision "no" (no TF32, so the
 * result matches the CPU's sgemm to rounding); fp16/bf16 inputs (tensor
 * cores) under mixed precision, from a half copy of the f32 master
 * parameters refreshed each forward. Bias, ReLU, the rounding of each
 * layer's output and gradient to the half type (the weight gradient
 * too, before it is added to the f32 buffer, as acc_mlp.c does), the softmax
 * cross-entropy (f32) and the bias gradient are small kernels. Inputs
 * and labels are staged host -> device through pinned buffers.
 *
 * A training step waits for nothing (issue 25): forward and backward
 * only enqueue work; the logits and the loss stay on the device until
 * acc_mlp_dev_logits / acc_mlp_dev_loss bring them back (one stream
 * synchronization each), and the labels are checked on the host. The
 * only host wait of a step is for the previous step's upload out of a
 * pinned staging buffer before it is refilled (an event, normally long
 * complete).
 *
 * Every call runs on `stream` (a cudaStream_t; NULL = the default
 * stream: the accelerator's acc_get_stream), so the gradient all-reduce
 * of acc_backward is ordered after it (nbfork.h's stream contract).
 * Calls return ACC_OK or ACC_ERR_BACKEND / ACC_ERR_NO_MEMORY /
 * ACC_ERR_INVALID_ARGUMENT with the text in err. Internal.
 */
#ifndef ACC_MLP_CUDA_H
#define ACC_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_mlp_dev acc_mlp_dev_t;

/* 1 when this build has the device kernels, else 0 (acc_device_stub.c:
 * every other call then returns ACC_ERR_UNSUPPORTED / NULL and models
 * stay on the host). */
int acc_mlp_dev_available(void);

/* ACC_OK when cuBLAS (libcublas.so.<major>, opened on first use) is
 * there, else ACC_ERR_BACKEND / ACC_ERR_UNSUPPORTED with the reason in
 * err (the library's name and dlerror's text): acc_mlp_new then fails
 * (a model on a device has no host fallback). */
acc_result_t acc_mlp_dev_blas(char *err, size_t errlen);
/* A device model of layer sizes sizes[0..nlayers] for up to max_batch
 * rows, its parameters copied from the host buffer `params` (nparams
 * floats), gradients zero. NULL with err filled on failure. */
acc_mlp_dev_t *acc_mlp_dev_new(const int *sizes, int nlayers, int max_batch, const float *params,
                               size_t nparams, char *err, size_t errlen);
/* Frees everything (after synchronizing the device); NULL-safe, clears
 * *d_p. */
void acc_mlp_dev_destroy(acc_mlp_dev_t **d_p);
/* The flat device buffers (nparams floats each), owned by the model. */
float *acc_mlp_dev_params(acc_mlp_dev_t *d);
float *acc_mlp_dev_grads(acc_mlp_dev_t *d);
/* grads = 0 (asynchronous on `stream`). */
acc_result_t acc_mlp_dev_zero_grad(acc_mlp_dev_t *d, void *stream, char *err, size_t errlen);
/* Forward `batch` host rows x (batch × sizes[0] floats) with precision
 * `prec`, asynchronously on `stream`: x is staged (the caller may reuse
 * it on return), the logits (batch × sizes[nlayers]) stay on the
 * device. */
acc_result_t acc_mlp_dev_forward(acc_mlp_dev_t *d, const float *x, int batch, acc_precision_t prec,
                                 void *stream, char *err, size_t errlen);
/* The last forward's logits into the host buffer `logits` (batch ×
 * sizes[nlayers] floats). Synchronizes the forward's stream. */
acc_result_t acc_mlp_dev_logits(acc_mlp_dev_t *d, float *logits, char *err, size_t errlen);
/* Softmax cross-entropy of the last forward against host `labels`
 * (batch int64), its gradient multiplied by `scale` (GradScaler), added
 * into the gradient buffer asynchronously on `stream`; the per-row
 * losses stay on the device (acc_mlp_dev_loss). A label outside
 * 0..sizes[nlayers]-1 (checked on the host, before anything is
 * enqueued): ACC_ERR_INVALID_ARGUMENT, *bad_row = its row, gradients
 * untouched. */
acc_result_t acc_mlp_dev_backward_xent(acc_mlp_dev_t *d, const int64_t *labels, float scale,
                                       int *bad_row, void *stream, char *err, size_t errlen);
/* *loss = the mean over the batch of the last backward's loss (summed
 * in double, as acc_mlp.c does). Synchronizes the backward's stream. */
acc_result_t acc_mlp_dev_loss(acc_mlp_dev_t *d, float *loss, char *err, size_t errlen);
/* Copy the device parameters (what = 0) or gradients (1) into a host
 * buffer of nparams floats, or (to_device = 1) the host buffer into them.
 * Synchronous. For checkpoints and tests. */
acc_result_t acc_mlp_dev_copy(acc_mlp_dev_t *d, int what, float *host, int to_device, char *err,
                              size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ACC_MLP_CUDA_H */
